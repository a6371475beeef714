// SystemClockRuntime's timers: they fire in due order on the clock's own
// thread, a cancelled one never fires, and none fires after Stop().
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "server/asio_runtime.h"

namespace tcc::server {
namespace {

struct Fired {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::function<void()> Record(int n) {
    return [this, n] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(n);
      threads.push_back(std::this_thread::get_id());
      cv.notify_all();
    };
  }
  void AwaitCount(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return order.size() >= n; });
  }
};

TEST_CASE("timers fire in due order, cancelled ones never") {
  SystemClockRuntime clock;
  Fired fired;
  const int64_t start = clock.MonotonicMs();
  clock.Schedule(60, fired.Record(3));
  const runtime::TimerId cancelled = clock.Schedule(30, fired.Record(99));
  clock.Schedule(20, fired.Record(2));
  clock.Schedule(0, fired.Record(1));
  clock.Cancel(cancelled);
  clock.Cancel(cancelled);  // twice: nothing
  clock.Cancel(123456);     // unknown: nothing
  fired.AwaitCount(3);
  CHECK(fired.order == std::vector<int>{1, 2, 3});
  // Not before they were due (the steady clock; upper bounds are left to
  // benchmarks).
  CHECK(clock.MonotonicMs() - start >= 60);
  // On the clock's thread, never the caller's.
  for (const auto& id : fired.threads) CHECK(id != std::this_thread::get_id());
}

TEST_CASE("a timer scheduled from a firing timer fires too; Stop ends them") {
  SystemClockRuntime clock;
  Fired fired;
  clock.Schedule(0, [&] { clock.Schedule(5, fired.Record(2)); });
  clock.Schedule(0, fired.Record(1));
  fired.AwaitCount(2);
  clock.Schedule(100000, fired.Record(3));
  clock.Stop();
  clock.Schedule(0, fired.Record(4));  // after Stop: never
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard<std::mutex> lock(fired.mu);
  CHECK(fired.order == std::vector<int>{1, 2});
}

}  // namespace
}  // namespace tcc::server
