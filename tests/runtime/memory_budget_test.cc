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
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (i % 2 == 0) {
          // The driver's pattern: reserve, charge what the request holds,
          // unreserve, and later let it go.
          if (!budget.TryReserve(kNeed)) {
            refused.fetch_add(1);
            continue;
          }
          admitted.fetch_add(1);
          budget.Charge(kNeed);
          note();
          budget.Unreserve(kNeed);
          budget.Charge(-kNeed);
        } else if (budget.TryCharge(kNeed)) {  // a participant call's
          note();
          budget.Charge(-kNeed);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(high.load() <= kLimit);
  CHECK(admitted.load() > 0);
  CHECK(refused.load() > 0);  // the threads did contend
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
