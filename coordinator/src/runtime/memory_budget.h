// A byte budget for the transaction state the driver holds in memory
// (limits.max_in_flight_bytes): owners with their payloads, records on their
// way to the WAL, scanned transactions waiting to resume. The driver charges
// what it holds and releases it when it lets go; new transactions are
// admitted only while they fit, and above half of the budget the driver
// keeps payloads in the WAL only (driver.h).
//
// Sizes are estimates (the strings' bytes plus a fixed overhead per object),
// not allocator measurements: they bound what tccd asks for, so a backlog of
// large transactions is refused instead of exhausting memory.
//
// Thread-safe (atomics); a charge and its release may come from different
// threads.
#pragma once

#include <atomic>
#include <cstdint>

namespace tcc::runtime {

class MemoryBudget {
 public:
  // 0: no limit (every admission passes, never pressured).
  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}

  uint64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Whether `bytes` more fit.
  bool Admits(uint64_t bytes) const {
    return limit_ == 0 ||
           used() + static_cast<int64_t>(bytes) <= static_cast<int64_t>(limit_);
  }
  // Above half of the limit: the driver sheds what it can keep elsewhere.
  bool Pressured() const {
    return limit_ != 0 && used() > static_cast<int64_t>(limit_ / 2);
  }

  // Adds `delta` (negative: a release).
  void Charge(int64_t delta) {
    used_.fetch_add(delta, std::memory_order_relaxed);
  }

 private:
  const uint64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace tcc::runtime
