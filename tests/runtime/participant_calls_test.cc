// ParticipantCalls' one reply path for a call the transport kept
// (runtime::NotSentError: its send gate shut while the call waited to
// leave): it comes back marked not sent, counts as no failure of the
// participant, and a breaker probe it was passes to the next call.
#include "runtime/participant_calls.h"

#include <catch2/catch.hpp>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/sim/sim_environment.h"

namespace tcc::runtime {
namespace {

// Keeps every call's `done` for the test to answer.
class HeldTransport final : public ParticipantTransport {
 public:
  void Call(const BranchCall& call, int64_t, BranchDone done) override {
    gids.push_back(call.gid);
    calls.push_back(std::move(done));
  }
  void Query(const QueryCall& query, int64_t, QueryDone done) override {
    gids.push_back(query.gid);
    queries.push_back(std::move(done));
  }
  std::vector<std::string> gids;
  std::deque<BranchDone> calls;
  std::deque<QueryDone> queries;
};

struct Rig {
  Rig() {
    ParticipantCallsOptions o;
    o.breaker.failure_threshold = 1;
    o.breaker.open_ms = 1000;
    ParticipantCalls::Hooks hooks;
    hooks.deliver = [this](const std::string& gid, core::Event e) {
      delivered.emplace_back(gid, std::move(e));
    };
    hooks.resume = [this](const std::string& gid, const core::CallEffect& c,
                          const std::string& participant, bool as_probe) {
      resumed.push_back(gid);
      calls->SendAdmitted(gid, participant, c, as_probe, 10, Build(gid));
    };
    calls = std::make_unique<ParticipantCalls>(
        o, clock, transport, std::make_shared<MemoryBudget>(0), hooks);
  }
  ParticipantCalls::BuildCall Build(const std::string& gid) {
    return [this, gid]() -> absl::StatusOr<BranchCall> {
      BranchCall c;
      c.gid = gid;
      c.spec = &spec;
      c.phase = wal::Phase::kConfirm;
      return c;
    };
  }
  void Confirm(const std::string& gid) {
    core::CallEffect c;
    c.phase = wal::Phase::kConfirm;
    calls->Send(gid, "p", c, 10, Build(gid));
  }
  const core::CallReplyEvent& Reply(size_t i) {
    REQUIRE(i < delivered.size());
    return std::get<core::CallReplyEvent>(delivered[i].second);
  }

  sim::SimClock clock;
  HeldTransport transport;
  wal::BranchSpec spec = [] {
    wal::BranchSpec s;
    s.branch_id = "b1";
    s.participant = "p";
    return s;
  }();
  std::vector<std::pair<std::string, core::Event>> delivered;
  std::vector<std::string> resumed;
  std::unique_ptr<ParticipantCalls> calls;
};

TEST_CASE("a call the transport kept is answered not sent, no failure") {
  Rig r;
  r.Confirm("g1");
  REQUIRE(r.transport.calls.size() == 1);
  r.transport.calls.front()(NotSentError());
  r.transport.calls.pop_front();
  const core::CallReplyEvent& e = r.Reply(0);
  CHECK(e.not_sent);
  CHECK(absl::IsUnavailable(e.status));
  CHECK_FALSE(IsNotSent(e.status));  // the mark stays in the transport
  // With a threshold of one failure, the breaker is still closed.
  CHECK(r.calls->breaker_state("p") == BreakerState::kClosed);
  // An error of the participant's (the outcome unknown) opens it.
  r.Confirm("g2");
  r.transport.calls.front()(absl::UnavailableError("connection refused"));
  r.transport.calls.pop_front();
  CHECK_FALSE(r.Reply(1).not_sent);
  CHECK(r.calls->breaker_state("p") == BreakerState::kOpen);
}

TEST_CASE("a breaker probe the transport kept passes to the next call") {
  Rig r;
  r.Confirm("g1");
  r.transport.calls.front()(absl::UnavailableError("connection refused"));
  r.transport.calls.pop_front();
  REQUIRE(r.calls->breaker_state("p") == BreakerState::kOpen);
  // Phase-2 calls wait while it is open.
  r.Confirm("g2");
  r.Confirm("g3");
  CHECK(r.transport.calls.empty());
  // Open time over: g2 goes as the probe; the transport keeps it.
  r.clock.AdvanceTo(r.clock.MonotonicMs() + 1000);
  REQUIRE(r.transport.calls.size() == 1);
  CHECK(r.transport.gids.back() == "g2");
  r.transport.calls.front()(NotSentError());
  r.transport.calls.pop_front();
  // g3 is the probe now (before, the breaker waited for g2's answer for
  // ever and held every later call).
  REQUIRE(r.transport.calls.size() == 1);
  CHECK(r.transport.gids.back() == "g3");
  BranchAnswer executed;
  executed.outcome = wal::Outcome::kExecuted;
  r.transport.calls.front()(executed);
  r.transport.calls.pop_front();
  CHECK(r.calls->breaker_state("p") == BreakerState::kClosed);
}

TEST_CASE("a query the transport kept is no failure of the participant") {
  Rig r;
  QueryCall q;
  q.gid = "g1";
  q.branch_id = "b1";
  q.participant = "p";
  r.calls->Query(q, core::QueryEffect{});
  REQUIRE(r.transport.queries.size() == 1);
  r.transport.queries.front()(NotSentError());
  r.transport.queries.pop_front();
  const auto& e = std::get<core::QueryReplyEvent>(r.delivered.at(0).second);
  CHECK(absl::IsUnavailable(e.status));
  CHECK(r.calls->breaker_state("p") == BreakerState::kClosed);
}

}  // namespace
}  // namespace tcc::runtime
