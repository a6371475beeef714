// The daemon's runtime under the driver (runtime/environment.h): Boost.Asio
// threads, one strand per shard, and the one real clock of tccd (the only code
// that reads the system clock; everything else is handed a Clock).
//
// Thread-safe.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
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

// A serial executor: tasks run one at a time in posting order.
class StrandExecutor final : public runtime::Executor {
 public:
  explicit StrandExecutor(boost::asio::io_context& context)
      : strand_(boost::asio::make_strand(context)) {}
  void Post(std::function<void()> task) override;

 private:
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
};

// Wall time from the system clock, monotonic time and timers from the steady
// clock; timers fire on the io_context's threads.
class SystemClockRuntime final : public runtime::Clock {
 public:
  explicit SystemClockRuntime(boost::asio::io_context& context)
      : context_(context) {}
  int64_t WallMs() const override;
  int64_t MonotonicMs() const override;
  runtime::TimerId Schedule(int64_t delay_ms,
                            std::function<void()> fn) override;
  void Cancel(runtime::TimerId id) override;

 private:
  boost::asio::io_context& context_;
  std::mutex mu_;
  runtime::TimerId next_id_ = 1;
  std::map<runtime::TimerId, std::shared_ptr<boost::asio::steady_timer>>
      timers_;
};

}  // namespace tcc::server
