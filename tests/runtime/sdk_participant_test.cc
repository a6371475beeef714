// SdkParticipant, the tests' participant: the SDK's real barrier on its
// in-memory store behind SimParticipant, its effect counters read back from
// committed data, its per-call checks and its down switch.
#include "runtime/sim/sdk_participant.h"

#include <catch2/catch.hpp>
#include <string>

namespace tcc::runtime::sim {
namespace {

constexpr int64_t kNow = 1'700'000'000'000;

struct Call {
  wal::BranchSpec spec;
  BranchCall call;
  Call(std::string branch_id, wal::Phase phase, int64_t deadline = kNow + 1000,
       std::string payload = "ok") {
    spec.branch_id = std::move(branch_id);
    spec.participant = "p0";
    spec.action = "hold";
    spec.payload = std::move(payload);
    spec.branch_hash.fill(7);
    call.gid = "g1";
    call.created_at_ms = kNow;
    call.spec = &spec;
    call.phase = phase;
    call.attempt = 1;
    call.owner_epoch = 1;
    call.try_deadline_ms = deadline;
  }
  barrier::BranchKey key() const {
    return {call.gid, call.created_at_ms, spec.branch_id};
  }
};

barrier::BarrierOptions Skew(int64_t skew_ms, bool skip_anti_hanging = false) {
  barrier::BarrierOptions o;
  o.clock_skew_ms = skew_ms;
  o.test_only_skip_anti_hanging = skip_anti_hanging;
  return o;
}

ParticipantBusiness AcceptOk() {
  return AcceptIf(
      [](const barrier::BranchCall& c) { return c.payload == "ok"; });
}

wal::Outcome Outcome(SdkParticipant& p, const Call& c, int64_t now = kNow) {
  absl::StatusOr<BranchAnswer> a = p.OnCall(c.call, now);
  REQUIRE(a.ok());
  return a->outcome;
}

TEST_CASE("a reserved Try and its Confirm count once each; replays count none",
          "[sdk_participant]") {
  SdkParticipant p("p0", Skew(0), AcceptOk());
  const Call t("b0", wal::Phase::kTry), c("b0", wal::Phase::kConfirm);
  CHECK(Outcome(p, t) == wal::Outcome::kExecuted);
  CHECK(p.Held() == 1);
  absl::StatusOr<BranchAnswer> again = p.OnCall(t.call, kNow);
  REQUIRE(again.ok());
  CHECK(again->replayed);
  CHECK(Outcome(p, c) == wal::Outcome::kExecuted);
  CHECK(Outcome(p, c) == wal::Outcome::kExecuted);
  CHECK(p.Held() == 0);
  const EffectCounts n = p.EffectsOf(t.key());
  CHECK(n.tries == 1);
  CHECK(n.confirms == 1);
  CHECK(n.cancels == 0);
  CHECK(p.ExactlyOnceViolations() == 0);
  CHECK(p.violations().empty());
  // Query sees it, authoritatively, with the branch hash.
  absl::StatusOr<QueryAnswer> q =
      p.OnQuery(QueryCall{"g1", kNow, "b0", "p0"}, kNow);
  REQUIRE(q.ok());
  CHECK(q->state == core::BarrierState::kConfirmed);
  CHECK(q->authoritative);
  CHECK(q->branch_hash == t.spec.branch_hash);
}

TEST_CASE("a refused Try counts no effect; its Cancel undoes nothing",
          "[sdk_participant]") {
  SdkParticipant p("p0", Skew(0), AcceptOk());
  const Call t("b0", wal::Phase::kTry, kNow + 1000, "no");
  const Call x("b0", wal::Phase::kCancel, kNow + 1000, "no");
  CHECK(Outcome(p, t) == wal::Outcome::kRejected);
  CHECK(Outcome(p, x) == wal::Outcome::kEmptyRollback);
  CHECK(p.Effects().empty());
  CHECK(p.Record(t.key())->phase_two == barrier::PhaseTwoState::kCancelled);
  CHECK(p.Held() == 0);
}

TEST_CASE("OnCall runs at the transport's wall time: a late Try is refused",
          "[sdk_participant]") {
  SdkParticipant p("p0", Skew(500), AcceptOk());
  CHECK(Outcome(p, Call("b0", wal::Phase::kTry), kNow + 1500) ==
        wal::Outcome::kExecuted);  // inside the skew
  CHECK(p.clock().NowUnixMs() == kNow + 1500);
  CHECK(Outcome(p, Call("b1", wal::Phase::kTry), kNow + 1501) ==
        wal::Outcome::kHangingRefused);
  CHECK(!p.Record({"g1", kNow, "b1"}).has_value());  // nothing written
}

TEST_CASE("down: calls and queries fail UNAVAILABLE and reach nothing",
          "[sdk_participant]") {
  SdkParticipant p("p0", Skew(0));
  p.set_down(true);
  const Call t("b0", wal::Phase::kTry);
  CHECK(p.OnCall(t.call, kNow).status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK(p.OnQuery(QueryCall{"g1", kNow, "b0", "p0"}, kNow).status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK(p.Records().empty());
  p.set_down(false);
  CHECK(Outcome(p, t) == wal::Outcome::kExecuted);
}

TEST_CASE(
    "the per-call checks fire when the barrier's anti-hanging rows are off",
    "[sdk_participant]") {
  SdkParticipant p("p0", Skew(0, /*skip_anti_hanging=*/true));
  CHECK(Outcome(p, Call("b0", wal::Phase::kCancel)) ==
        wal::Outcome::kEmptyRollback);
  CHECK(Outcome(p, Call("b0", wal::Phase::kTry)) == wal::Outcome::kExecuted);
  REQUIRE(p.violations().size() == 1);
  CHECK(p.violations()[0] ==
        "no hanging: p0 Try g1/1700000000000/b0 reserved after its Cancel");
  CHECK(Outcome(p, Call("b1", wal::Phase::kTry), kNow + 1001) ==
        wal::Outcome::kExecuted);
  REQUIRE(p.violations().size() == 2);
  CHECK(p.violations()[1].find("past its try-deadline") != std::string::npos);
  // The reservation made after the Cancel is held, and shows.
  CHECK(p.Held() == 2);
}

}  // namespace
}  // namespace tcc::runtime::sim
