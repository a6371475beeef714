// SimBank, the simulation's participant: the real barrier, the bank's money
// moves, the effect counters and the per-call checks the simulation relies
// on (each must fire when its rule is broken, and only then).
#include "sim_bank.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace tcc::sim {
namespace {

constexpr int64_t kNow = 1'700'000'000'000;

struct Call {
  wal::BranchSpec spec;
  runtime::BranchCall call;
  Call(std::string action, std::string payload, wal::Phase phase,
       int64_t deadline = kNow + 1000) {
    spec.branch_id = "b0";
    spec.participant = "bank0";
    spec.action = std::move(action);
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
};

wal::Outcome Run(SimBank& bank, wal::Phase phase, const std::string& action,
                 std::vector<std::string>& violations,
                 CrashPoint crash = CrashPoint::kNone, bool* crashed = nullptr,
                 bool* replayed = nullptr) {
  Call c(action, "1:40", phase);
  SimBank::CallResult r = bank.Call(c.call, crash, violations);
  if (crashed != nullptr) *crashed = r.crashed;
  if (!r.answer.ok()) return wal::Outcome::kNone;
  if (replayed != nullptr) *replayed = r.answer->replayed;
  return r.answer->outcome;
}

barrier::BarrierOptions Skew(int64_t skew_ms, bool skip_anti_hanging = false) {
  barrier::BarrierOptions o;
  o.clock_skew_ms = skew_ms;
  o.test_only_skip_anti_hanging = skip_anti_hanging;
  return o;
}

TEST_CASE("debit: Try freezes, Confirm moves once, a duplicate replays",
          "[sim][bank]") {
  SimBank bank("bank0", 2, 100, Skew(0));
  bank.clock().Set(kNow);
  std::vector<std::string> v;
  CHECK(Run(bank, wal::Phase::kTry, "debit", v) == wal::Outcome::kExecuted);
  CHECK(bank.Accounts()[1].frozen == 40);
  CHECK(Run(bank, wal::Phase::kConfirm, "debit", v) == wal::Outcome::kExecuted);
  bool replayed = false;
  CHECK(Run(bank, wal::Phase::kConfirm, "debit", v, CrashPoint::kNone, nullptr,
            &replayed) == wal::Outcome::kExecuted);
  CHECK(replayed);
  CHECK(bank.Accounts()[1].balance == 60);
  CHECK(bank.Accounts()[1].frozen == 0);
  CHECK(bank.TotalMoney() == 160);
  REQUIRE(bank.Effects().size() == 1);  // try and confirm, once each
  const runtime::sim::EffectCounts n = bank.Effects().begin()->second;
  CHECK(n.tries == 1);
  CHECK(n.confirms == 1);
  CHECK(n.cancels == 0);
  CHECK(v.empty());
}

TEST_CASE("debit: short funds are refused and change nothing", "[sim][bank]") {
  SimBank bank("bank0", 2, 30, Skew(0));
  bank.clock().Set(kNow);
  std::vector<std::string> v;
  CHECK(Run(bank, wal::Phase::kTry, "debit", v) == wal::Outcome::kRejected);
  CHECK(bank.Accounts()[1].frozen == 0);
  CHECK(bank.Effects().empty());
  CHECK(Run(bank, wal::Phase::kCancel, "debit", v) ==
        wal::Outcome::kEmptyRollback);
  CHECK(v.empty());
}

TEST_CASE("a crash in the handler loses the call; after the commit, the reply",
          "[sim][bank]") {
  SimBank bank("bank0", 2, 100, Skew(0));
  bank.clock().Set(kNow);
  std::vector<std::string> v;
  bool crashed = false;
  CHECK(Run(bank, wal::Phase::kTry, "credit", v, CrashPoint::kInHandler,
            &crashed) == wal::Outcome::kNone);
  CHECK(crashed);
  CHECK(bank.Accounts()[1].incoming == 0);
  CHECK(!bank.Record({"g1", kNow, "b0"}).has_value());
  CHECK(Run(bank, wal::Phase::kTry, "credit", v, CrashPoint::kAfterCommit,
            &crashed) == wal::Outcome::kExecuted);
  CHECK(crashed);
  CHECK(bank.Accounts()[1].incoming == 40);
  bool replayed = false;
  CHECK(Run(bank, wal::Phase::kTry, "credit", v, CrashPoint::kNone, nullptr,
            &replayed) == wal::Outcome::kExecuted);
  CHECK(replayed);
  CHECK(bank.Accounts()[1].incoming == 40);
  CHECK(v.empty());
}

TEST_CASE("a Try after its Cancel: refused, or flagged when the rule is off",
          "[sim][bank]") {
  for (bool skip : {false, true}) {
    SimBank bank("bank0", 2, 100, Skew(0, skip));
    bank.clock().Set(kNow);
    std::vector<std::string> v;
    CHECK(Run(bank, wal::Phase::kCancel, "debit", v) ==
          wal::Outcome::kEmptyRollback);
    const wal::Outcome o = Run(bank, wal::Phase::kTry, "debit", v);
    if (skip) {
      CHECK(o == wal::Outcome::kExecuted);
      REQUIRE(v.size() == 1);
      CHECK(v[0].find("reserved after its Cancel") != std::string::npos);
    } else {
      CHECK(o == wal::Outcome::kHangingRefused);
      CHECK(v.empty());
    }
  }
}

TEST_CASE("a Try past its deadline plus skew by the bank's clock",
          "[sim][bank]") {
  for (bool skip : {false, true}) {
    SimBank bank("bank0", 2, 100, Skew(500, skip));
    std::vector<std::string> v;
    Call c("debit", "1:40", wal::Phase::kTry, kNow + 1000);
    bank.clock().Set(kNow + 1500);  // inside the skew window: reserves
    CHECK(bank.Call(c.call, CrashPoint::kNone, v).answer->outcome ==
          wal::Outcome::kExecuted);
    CHECK(v.empty());
    c.spec.branch_id = "b1";
    bank.clock().Set(kNow + 1501);  // past it
    const wal::Outcome o =
        bank.Call(c.call, CrashPoint::kNone, v).answer->outcome;
    CHECK(o ==
          (skip ? wal::Outcome::kExecuted : wal::Outcome::kHangingRefused));
    CHECK(v.size() == (skip ? 1u : 0u));
  }
}

}  // namespace
}  // namespace tcc::sim
