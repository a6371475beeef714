// Races on one key, from threads, on every store: Try against Cancel and
// Confirm against Cancel. Whatever the interleaving: no double effect, no
// reservation left hanging, no deadlock (every call ends; lock-wait timeouts
// answer UNAVAILABLE and are retried like tccd would), no lost record.
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::BarrierState;
using barrier::Outcome;

constexpr int kKeys = 40;
constexpr int kThreads = 8;

// Retries UNAVAILABLE like tccd would (same key, same hash); gives up with
// the last UNAVAILABLE after 200 attempts, which the checks then reject.
// Runs on worker threads, so it asserts nothing itself (Catch2 assertions
// are not thread-safe).
template <class Fn>
absl::StatusOr<barrier::BarrierAnswer> UntilAnswered(Fn&& fn) {
  absl::StatusOr<barrier::BarrierAnswer> a;
  for (int attempt = 0; attempt < 200; ++attempt) {
    a = fn();
    if (a.status().code() != absl::StatusCode::kUnavailable) break;
  }
  return a;
}

struct Task {
  int key;
  int op;  // 0 = first operation, 1 = second
};

// Runs both operations of every key from kThreads threads, in a shuffled
// order, so that the two calls of one key often meet.
template <class Fn>
void RunShuffled(Fn&& run, uint32_t seed) {
  std::vector<Task> tasks;
  for (int k = 0; k < kKeys; ++k) {
    tasks.push_back({k, 0});
    tasks.push_back({k, 1});
  }
  std::mt19937 rng(seed);
  std::shuffle(tasks.begin(), tasks.end(), rng);
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < tasks.size();
           i = next.fetch_add(1)) {
        run(tasks[i]);
      }
    });
  }
  for (auto& t : threads) t.join();
}

template <class Env>
void TryRacesCancel() {
  BarrierHarness<Env> h(StoreOptions{std::chrono::milliseconds(500)});
  std::vector<absl::StatusOr<barrier::BarrierAnswer>> tries(kKeys),
      cancels(kKeys);
  RunShuffled(
      [&](const Task& t) {
        barrier::BranchCall c =
            MakeCall("race.tc." + std::to_string(t.key), H());
        if (t.op == 0) {
          tries[t.key] = UntilAnswered([&] { return h.Try(c); });
        } else {
          cancels[t.key] = UntilAnswered([&] { return h.Cancel(c); });
        }
      },
      1);
  int executed = 0;
  for (int k = 0; k < kKeys; ++k) {
    INFO(Env::kName << ": key " << k);
    const barrier::BranchKey key =
        MakeCall("race.tc." + std::to_string(k), H()).key;
    REQUIRE(tries[k].ok());
    REQUIRE(cancels[k].ok());
    CHECK(!tries[k]->replayed);
    CHECK(!cancels[k]->replayed);
    const int64_t reserved = Effect(h.store(), "try", key);
    const int64_t released = Effect(h.store(), "cancel", key);
    if (tries[k]->outcome == Outcome::kExecuted) {
      // The Try came first: the Cancel found it and released it.
      ++executed;
      CHECK(cancels[k]->outcome == Outcome::kExecuted);
      CHECK(reserved == 1);
      CHECK(released == 1);
      CHECK(h.State(key) == BarrierState::kCancelled);
    } else {
      // The Cancel came first: its marker refused the Try.
      CHECK(tries[k]->outcome == Outcome::kHangingRefused);
      CHECK(cancels[k]->outcome == Outcome::kEmptyRollback);
      CHECK(reserved == 0);
      CHECK(released == 0);
      CHECK(h.State(key) == BarrierState::kCancelledBeforeTry);
    }
  }
  INFO(executed << " of " << kKeys << " Trys came first");
  SUCCEED();
}

TCC_STORE_TEST_CASE("concurrent Try and Cancel on the same keys",
                    TryRacesCancel)

template <class Env>
void ConfirmRacesCancel() {
  BarrierHarness<Env> h(StoreOptions{std::chrono::milliseconds(500)});
  for (int k = 0; k < kKeys; ++k) {
    REQUIRE(h.Try(MakeCall("race.cc." + std::to_string(k), H()))->outcome ==
            Outcome::kExecuted);
  }
  std::vector<absl::StatusOr<barrier::BarrierAnswer>> confirms(kKeys),
      cancels(kKeys);
  RunShuffled(
      [&](const Task& t) {
        barrier::BranchCall c =
            MakeCall("race.cc." + std::to_string(t.key), H());
        if (t.op == 0) {
          confirms[t.key] = UntilAnswered([&] { return h.Confirm(c); });
        } else {
          cancels[t.key] = UntilAnswered([&] { return h.Cancel(c); });
        }
      },
      2);
  for (int k = 0; k < kKeys; ++k) {
    INFO(Env::kName << ": key " << k);
    const barrier::BranchKey key =
        MakeCall("race.cc." + std::to_string(k), H()).key;
    const bool confirmed = confirms[k].ok();
    const bool cancelled = cancels[k].ok();
    // Exactly one wins; the loser is a protocol violation, not an effect.
    REQUIRE(confirmed != cancelled);
    const auto& loser = confirmed ? cancels[k] : confirms[k];
    CHECK(loser.status().code() == absl::StatusCode::kFailedPrecondition);
    const auto& winner = confirmed ? confirms[k] : cancels[k];
    CHECK(winner->outcome == Outcome::kExecuted);
    CHECK(Effect(h.store(), "confirm", key) == (confirmed ? 1 : 0));
    CHECK(Effect(h.store(), "cancel", key) == (cancelled ? 1 : 0));
    CHECK(h.State(key) ==
          (confirmed ? BarrierState::kConfirmed : BarrierState::kCancelled));
  }
}

TCC_STORE_TEST_CASE("concurrent Confirm and Cancel on the same keys",
                    ConfirmRacesCancel)

// Duplicates racing each other: one executes, every other one is replayed.
template <class Env>
void DuplicatesRace() {
  BarrierHarness<Env> h(StoreOptions{std::chrono::milliseconds(500)});
  std::vector<absl::StatusOr<barrier::BarrierAnswer>> first(kKeys),
      second(kKeys);
  RunShuffled(
      [&](const Task& t) {
        barrier::BranchCall c =
            MakeCall("race.dup." + std::to_string(t.key), H());
        (t.op == 0 ? first : second)[t.key] =
            UntilAnswered([&] { return h.Try(c); });
      },
      3);
  for (int k = 0; k < kKeys; ++k) {
    INFO(Env::kName << ": key " << k);
    REQUIRE(first[k].ok());
    REQUIRE(second[k].ok());
    CHECK(first[k]->outcome == Outcome::kExecuted);
    CHECK(second[k]->outcome == Outcome::kExecuted);
    CHECK(first[k]->replayed != second[k]->replayed);
    CHECK(Effect(h.store(), "try",
                 MakeCall("race.dup." + std::to_string(k), H()).key) == 1);
  }
}

TCC_STORE_TEST_CASE("concurrent duplicate Trys on the same keys",
                    DuplicatesRace)

// A Cancel that arrives while a slow Try holds the key waits for it (it does
// not answer EMPTY_ROLLBACK past a Try in progress, and does not deadlock),
// then undoes what the Try reserved.
template <class Env>
void CancelWaitsForSlowTry() {
  BarrierHarness<Env> h;
  barrier::BranchCall c = MakeCall("slow", H());
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  auto slow_try = std::async(std::launch::async, [&] {
    return h.barrier.Try(c,
                         [&](const barrier::HandlerContext& ctx)
                             -> absl::StatusOr<barrier::TryVerdict> {
                           absl::Status s =
                               ctx.txn.Put("try/" + ctx.IdempotencyKey(), "1");
                           entered.set_value();
                           released.wait();
                           if (!s.ok()) return s;
                           return barrier::TryVerdict::Reserve();
                         });
  });
  entered.get_future().wait();
  auto cancel = std::async(std::launch::async, [&] { return h.Cancel(c); });
  // Give the Cancel time to reach the lock; if it does not block there it
  // answers EMPTY_ROLLBACK and the checks below fail.
  cancel.wait_for(std::chrono::milliseconds(200));
  release.set_value();
  auto t = slow_try.get();
  auto x = cancel.get();
  REQUIRE(t.ok());
  REQUIRE(x.ok());
  CHECK(t->outcome == Outcome::kExecuted);
  CHECK(x->outcome == Outcome::kExecuted);
  CHECK(h.rec.Invocations("cancel") == 1);
  CHECK(h.State(c.key) == BarrierState::kCancelled);
}

TCC_STORE_TEST_CASE("a Cancel racing a slow Try waits for it",
                    CancelWaitsForSlowTry)

// A lock wait that times out answers UNAVAILABLE and changes nothing.
template <class Env>
void LockWaitTimeoutIsUnavailable() {
  BarrierHarness<Env> h(StoreOptions{std::chrono::milliseconds(200)});
  barrier::BranchCall c = MakeCall("held", H());
  auto holder = h.store().Begin();
  REQUIRE(holder.ok());
  REQUIRE((*holder)->LockBarrier(c.key).ok());
  // The holder's thread must not open a second transaction on the memory
  // store (one transaction at a time), so the Cancel runs on another one.
  auto cancel =
      std::async(std::launch::async, [&] { return h.Cancel(c); }).get();
  CHECK(cancel.status().code() == absl::StatusCode::kUnavailable);
  holder->reset();
  CHECK(h.State(c.key) == BarrierState::kNotFound);
  auto again = h.Cancel(c);
  REQUIRE(again.ok());
  CHECK(again->outcome == Outcome::kEmptyRollback);
  CHECK(!again->replayed);
}

TCC_STORE_TEST_CASE("a lock wait that times out is UNAVAILABLE",
                    LockWaitTimeoutIsUnavailable)

}  // namespace
}  // namespace tcc::testing
