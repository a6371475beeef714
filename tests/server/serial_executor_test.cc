// SerialExecutor: tasks of one executor run one at a time in posting order;
// Dispatch runs a task on the calling thread when the executor is idle, and
// never nests one executor's task inside another's.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "server/asio_runtime.h"

namespace tcc::server {
namespace {

// Waits until `n` tasks have counted themselves done.
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--left_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

TEST_CASE("serial executor: Dispatch on an idle executor runs inline") {
  AsioThreads threads(1);
  SerialExecutor exec(threads.context());
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  exec.Dispatch([&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == caller);
}

TEST_CASE("serial executor: Post never runs inline") {
  AsioThreads threads(1);
  SerialExecutor exec(threads.context());
  Countdown done(1);
  std::thread::id ran_on = std::this_thread::get_id();
  exec.Post([&] {
    ran_on = std::this_thread::get_id();
    done.Done();
  });
  done.Wait();
  CHECK(ran_on != std::this_thread::get_id());
}

TEST_CASE("serial executor: a Dispatch from inside a task runs after it") {
  AsioThreads threads(1);
  SerialExecutor a(threads.context());
  SerialExecutor b(threads.context());
  Countdown done(2);
  std::vector<std::string> order;
  std::mutex mu;
  // Set while a's first task runs on this thread: a task that runs nested
  // inside it would see it set on this thread. (b's task may run on the pool
  // thread meanwhile: another executor is not serialized with a.)
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> in_first{false};
  bool nested = false;
  auto note = [&](std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    if (in_first && std::this_thread::get_id() == caller && s != "a1") {
      nested = true;
    }
    order.push_back(std::move(s));
  };
  a.Dispatch([&] {
    in_first = true;
    // Neither the same executor nor another one runs nested here.
    a.Dispatch([&] {
      note("a2");
      done.Done();
    });
    b.Dispatch([&] {
      note("b");
      done.Done();
    });
    note("a1");
    in_first = false;
  });
  done.Wait();
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(order.size() == 3);
  CHECK_FALSE(nested);
  // a's own tasks run in order.
  const auto a1 = std::find(order.begin(), order.end(), "a1");
  const auto a2 = std::find(order.begin(), order.end(), "a2");
  CHECK(a1 < a2);
}

TEST_CASE(
    "serial executor: tasks from many threads run one at a time, in "
    "order per thread") {
  AsioThreads threads(2);
  SerialExecutor exec(threads.context());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  Countdown done(kThreads * kPerThread);
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::vector<int> last(kThreads, -1);  // only touched by the executor
  std::atomic<bool> out_of_order{false};
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto task = [&, t, i] {
          if (running.fetch_add(1) != 0) overlapped = true;
          if (last[t] != i - 1) out_of_order = true;
          last[t] = i;
          running.fetch_sub(1);
          done.Done();
        };
        if (i % 2 == 0) {
          exec.Post(task);
        } else {
          exec.Dispatch(task);
        }
      }
    });
  }
  for (auto& p : posters) p.join();
  done.Wait();
  CHECK_FALSE(overlapped.load());
  CHECK_FALSE(out_of_order.load());
}

}  // namespace
}  // namespace tcc::server
