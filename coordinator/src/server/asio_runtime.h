// The daemon's runtime under the driver (runtime/environment.h): Boost.Asio
// threads, one strand per shard, and the one real clock of tccd (the only code
// that reads the system clock; everything else is handed a Clock).
//
// Thread-safe.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/environment.h"

namespace tcc::server {

// A pool of threads running one io_context.
class AsioThreads {
 public:
  explicit AsioThreads(size_t threads);
  ~AsioThreads();  // Stop()s
  boost::asio::io_context& context() { return context_; }
  // Stops running handlers and joins the threads. Handlers posted later are
  // kept but never run; the io_context lives until destruction.
  void Stop();

 private:
  boost::asio::io_context context_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  std::vector<std::thread> threads_;
};

// A serial executor: tasks run one at a time in posting order. Post queues
// the task and, if the executor was idle, hands a drain to the io_context's
// threads. Dispatch on an idle executor runs the task on the calling thread
// at once (and then whatever was queued meanwhile, up to a bound, before
// handing the rest to the io_context): a completion arriving on a gRPC or
// WAL thread is handled there instead of waking another thread. A thread
// already running a task of any SerialExecutor never runs another inline
// (Dispatch falls back to Post there), so tasks never nest.
class SerialExecutor final : public runtime::Executor {
 public:
  explicit SerialExecutor(boost::asio::io_context& context)
      : context_(context) {}
  void Post(std::function<void()> task) override;
  void Dispatch(std::function<void()> task) override;

 private:
  // Runs queued tasks (at most kMaxBatch, then hands the rest to the
  // io_context); called by the one thread that set running_.
  void Drain();

  static constexpr int kMaxBatch = 32;
  boost::asio::io_context& context_;
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;
  // True while a thread runs this executor's tasks or a drain is posted;
  // queue_ is empty whenever it is false.
  bool running_ = false;
};

// Wall time from the system clock, monotonic time and timers from the steady
// clock. Timers are kept by a thread of their own, in due order, and fire on
// it: `fn` must be quick and must not block (post heavy work to an
// executor). Most timers are cancelled long before they are due (a
// transaction's deadline once it is decided), so neither Cancel nor a
// Schedule later than the next due timer wakes that thread: a transaction
// costs its timers no thread hand-off.
class SystemClockRuntime final : public runtime::Clock {
 public:
  SystemClockRuntime();
  ~SystemClockRuntime() override;  // Stop()s
  // Joins the timer thread (after a timer firing now has run); timers not
  // yet fired never fire, later ones neither.
  void Stop();
  int64_t WallMs() const override;
  int64_t MonotonicMs() const override;
  runtime::TimerId Schedule(int64_t delay_ms,
                            std::function<void()> fn) override;
  void Cancel(runtime::TimerId id) override;

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  runtime::TimerId next_id_ = 1;
  // By (due on the steady clock in ms, id); due_of_ finds one by id.
  std::map<std::pair<int64_t, runtime::TimerId>, std::function<void()>> timers_;
  std::map<runtime::TimerId, int64_t> due_of_;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace tcc::server
