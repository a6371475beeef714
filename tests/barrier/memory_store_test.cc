// The in-memory store's crash model: only committed local transactions
// survive Crash(); a transaction open at the crash can no longer commit; a
// commit lost in a crash (FailNextCommits) applies nothing and the barrier
// answers UNAVAILABLE, so the re-sent call runs the handler again, once.
#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::BarrierState;
using barrier::Outcome;

TEST_CASE("memory store: a crash keeps committed transactions only",
          "[memory]") {
  barrier::MemoryBarrierStore store;
  {
    auto txn = store.Begin();
    REQUIRE(txn.ok());
    REQUIRE((*txn)->Put("committed", "1").ok());
    REQUIRE((*txn)->Commit().ok());
  }
  auto open = store.Begin();
  REQUIRE(open.ok());
  REQUIRE((*open)->Put("uncommitted", "1").ok());
  store.Crash();
  CHECK((*open)->Commit().code() == absl::StatusCode::kUnavailable);
  open->reset();
  auto data = store.BusinessData();
  CHECK(data.count("committed") == 1);
  CHECK(data.count("uncommitted") == 0);
  CHECK(store.commits() == 1);
  // The store works on after the crash.
  auto txn = store.Begin();
  REQUIRE(txn.ok());
  REQUIRE((*txn)->Put("after", "1").ok());
  REQUIRE((*txn)->Commit().ok());
  CHECK(store.BusinessData().count("after") == 1);
}

TEST_CASE("memory store: a dropped transaction rolls back", "[memory]") {
  barrier::MemoryBarrierStore store;
  {
    auto txn = store.Begin();
    REQUIRE(txn.ok());
    REQUIRE((*txn)->Put("k", "v").ok());
    REQUIRE((*txn)->PutBarrier({"g", 1, "b"}, barrier::BarrierRecord{}).ok());
  }
  CHECK(store.BusinessData().empty());
  CHECK(!store.ReadBarrier({"g", 1, "b"})->has_value());
}

TEST_CASE("memory store: a lost commit is UNAVAILABLE and the retry runs once",
          "[memory]") {
  BarrierHarness<MemoryEnv> h;
  barrier::BranchCall c = MakeCall("lost", H());
  h.env.store().FailNextCommits(1);
  CHECK(h.Try(c).status().code() == absl::StatusCode::kUnavailable);
  CHECK(h.State(c.key) == BarrierState::kNotFound);
  CHECK(Effect(h.store(), "try", c.key) == 0);
  auto again = h.Try(c);
  REQUIRE(again.ok());
  CHECK(again->outcome == Outcome::kExecuted);
  CHECK(!again->replayed);
  CHECK(Effect(h.store(), "try", c.key) == 1);
  // A crash after the commit loses nothing: the re-sent call is replayed.
  h.env.store().Crash();
  auto replay = h.Try(c);
  REQUIRE(replay.ok());
  CHECK(replay->replayed);
  CHECK(Effect(h.store(), "try", c.key) == 1);
}

TEST_CASE("memory store: a crash during a call loses the whole call",
          "[memory]") {
  // The simulation's way to crash a participant mid-call: Crash() from inside
  // the handler, before the barrier commits.
  BarrierHarness<MemoryEnv> h;
  barrier::BranchCall c = MakeCall("mid", H());
  auto crashed =
      h.barrier.Try(c,
                    [&](const barrier::HandlerContext& ctx)
                        -> absl::StatusOr<barrier::TryVerdict> {
                      if (absl::Status s = ctx.txn.Put("try/x", "1"); !s.ok())
                        return s;
                      h.env.store().Crash();
                      return barrier::TryVerdict::Reserve();
                    });
  CHECK(crashed.status().code() == absl::StatusCode::kUnavailable);
  CHECK(h.State(c.key) == BarrierState::kNotFound);
  CHECK(h.env.store().BusinessData().empty());
  auto again = h.Try(c);
  REQUIRE(again.ok());
  CHECK(again->outcome == Outcome::kExecuted);
  CHECK(!again->replayed);
}

TEST_CASE("memory store: savepoints discard writes after them", "[memory]") {
  barrier::MemoryBarrierStore store;
  auto txn = store.Begin();
  REQUIRE(txn.ok());
  REQUIRE((*txn)->Put("before", "1").ok());
  REQUIRE((*txn)->SetSavePoint().ok());
  REQUIRE((*txn)->Put("after", "1").ok());
  REQUIRE((*txn)->RollbackToSavePoint().ok());
  REQUIRE((*txn)->Commit().ok());
  CHECK(store.BusinessData().count("before") == 1);
  CHECK(store.BusinessData().count("after") == 0);
}

}  // namespace
}  // namespace tcc::testing
