// The memory budget's admissions under threads: room is admitted once, not
// to every thread that looked at it at the same moment (the driver's shards
// admit new transactions concurrently; memory_integration_test once saw the
// budget's high-water 16.41 MiB against 16 MiB from two admissions passing
// on the same room).
#include "runtime/memory_budget.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace tcc::runtime {
namespace {

TEST_CASE("concurrent admissions never charge past the limit") {
  constexpr int64_t kLimit = 1 << 20;
  constexpr int64_t kNeed = 300 << 10;  // three fit, a fourth does not
  MemoryBudget budget(kLimit);
  std::atomic<int64_t> high{0};
  std::atomic<int> admitted{0}, refused{0};
  auto note = [&] {
    int64_t u = budget.used(), h = high.load();
    while (u > h && !high.compare_exchange_weak(h, u)) {
    }
  };
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      while (!go) std::this_thread::yield();
      for (int i = 0; i < 5000; ++i) {
        // The driver's pattern, four admissions in a row (one thread alone
        // fits three): reserve, charge what the request holds, unreserve;
        // the charges stay until the end of the round. Then a participant
        // call's charge.
        int64_t holding = 0;
        for (int k = 0; k < 4; ++k) {
          if (!budget.TryReserve(kNeed)) {
            refused.fetch_add(1);
            continue;
          }
          admitted.fetch_add(1);
          budget.Charge(kNeed);
          note();
          budget.Unreserve(kNeed);
          holding += kNeed;
        }
        if (budget.TryCharge(kNeed / 3)) {
          note();
          holding += kNeed / 3;
        }
        budget.Charge(-holding);
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  CHECK(high.load() <= kLimit);
  CHECK(admitted.load() > 0);
  CHECK(refused.load() > 0);
  CHECK(budget.used() == 0);
  // Room reserved is room taken: a reservation blocks a charge and the
  // other way round, and both come back.
  REQUIRE(budget.TryReserve(kLimit - 10));
  CHECK_FALSE(budget.TryCharge(11));
  CHECK(budget.TryCharge(10));
  CHECK_FALSE(budget.TryReserve(1));
  budget.Unreserve(kLimit - 10);
  budget.Charge(-10);
  CHECK(budget.TryReserve(kLimit));
  budget.Unreserve(kLimit);
  // No limit: everything passes.
  MemoryBudget none(0);
  CHECK(none.TryReserve(uint64_t{1} << 40));
  CHECK(none.TryCharge(uint64_t{1} << 40));
}

}  // namespace
}  // namespace tcc::runtime
