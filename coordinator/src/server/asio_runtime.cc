#include "server/asio_runtime.h"

#include <boost/asio/post.hpp>
#include <chrono>

namespace tcc::server {

AsioThreads::AsioThreads(size_t threads)
    : work_(boost::asio::make_work_guard(context_)) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { context_.run(); });
  }
}

AsioThreads::~AsioThreads() { Stop(); }

void AsioThreads::Stop() {
  work_.reset();
  context_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

namespace {
// True on a thread while it runs a SerialExecutor's tasks.
thread_local bool running_serial_tasks = false;
}  // namespace

void SerialExecutor::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    if (running_) return;
    running_ = true;
  }
  boost::asio::post(context_, [this] { Drain(); });
}

void SerialExecutor::Dispatch(std::function<void()> task) {
  if (running_serial_tasks) return Post(std::move(task));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_) {
      queue_.push_back(std::move(task));
      return;
    }
    running_ = true;
  }
  running_serial_tasks = true;
  task();
  task = nullptr;  // its captures go before the queue's tasks run
  running_serial_tasks = false;
  Drain();
}

void SerialExecutor::Drain() {
  running_serial_tasks = true;
  for (int n = 0;; ++n) {
    std::function<void()> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) {
        running_ = false;
        break;
      }
      if (n == kMaxBatch) {  // still running_: the posted drain goes on
        boost::asio::post(context_, [this] { Drain(); });
        break;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    next();
  }
  running_serial_tasks = false;
}

int64_t SystemClockRuntime::WallMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SystemClockRuntime::MonotonicMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

runtime::TimerId SystemClockRuntime::Schedule(int64_t delay_ms,
                                              std::function<void()> fn) {
  auto timer = std::make_shared<boost::asio::steady_timer>(
      context_, std::chrono::milliseconds(delay_ms < 0 ? 0 : delay_ms));
  runtime::TimerId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    timers_[id] = timer;
  }
  timer->async_wait(
      [this, id, fn = std::move(fn)](const boost::system::error_code& ec) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          timers_.erase(id);
        }
        if (!ec) fn();
      });
  return id;
}

void SystemClockRuntime::Cancel(runtime::TimerId id) {
  std::shared_ptr<boost::asio::steady_timer> timer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = timers_.find(id);
    if (it == timers_.end()) return;
    timer = it->second;
    timers_.erase(it);
  }
  timer->cancel();
}

}  // namespace tcc::server
