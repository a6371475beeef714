#include "server/asio_runtime.h"

#include <algorithm>
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

SystemClockRuntime::SystemClockRuntime() : thread_([this] { Run(); }) {}

SystemClockRuntime::~SystemClockRuntime() { Stop(); }

void SystemClockRuntime::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

runtime::TimerId SystemClockRuntime::Schedule(int64_t delay_ms,
                                              std::function<void()> fn) {
  const int64_t due = MonotonicMs() + std::max<int64_t>(0, delay_ms);
  bool earliest;
  runtime::TimerId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    earliest = timers_.empty() || due < timers_.begin()->first.first;
    timers_.emplace(std::make_pair(due, id), std::move(fn));
    due_of_[id] = due;
  }
  if (earliest) cv_.notify_one();
  return id;
}

void SystemClockRuntime::Cancel(runtime::TimerId id) {
  std::function<void()> dropped;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = due_of_.find(id);
  if (it == due_of_.end()) return;
  auto timer = timers_.find({it->second, id});
  dropped = std::move(timer->second);
  timers_.erase(timer);
  due_of_.erase(it);
}

void SystemClockRuntime::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (timers_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const int64_t due = timers_.begin()->first.first;
    const int64_t now = MonotonicMs();
    if (due > now) {
      cv_.wait_for(lock, std::chrono::milliseconds(due - now));
      continue;
    }
    auto first = timers_.begin();
    std::function<void()> fn = std::move(first->second);
    due_of_.erase(first->first.second);
    timers_.erase(first);
    lock.unlock();
    fn();
    fn = nullptr;
    lock.lock();
  }
}

}  // namespace tcc::server
