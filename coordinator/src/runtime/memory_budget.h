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
#include <vector>

#include "core/transaction.h"
#include "tcc/wal/records.h"

namespace tcc::runtime {

// What the budget counts (the estimates, one place):
// a transaction held in memory: its strings (payloads included while held)
// and a fixed overhead per object;
int64_t TxnBytes(const core::Txn& t);
// one branch as registered (ids and payload);
int64_t BranchBytes(const wal::BranchSpec& b);
// records on their way to the WAL, or queued by the recovery scan;
int64_t RecordBytes(const std::vector<wal::Record>& records);
// what a new transaction (or an interactive Try's branch) asks before it is
// admitted: the owner with its payloads, the registration on its way to the
// WAL, and the request's own copies until it is applied.
int64_t AdmissionBytes(const std::vector<const wal::BranchSpec*>& branches);

class MemoryBudget {
 public:
  // 0: no limit (every admission passes, never pressured).
  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}

  uint64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Admits `bytes` and reserves them, atomically: what an admitted request
  // will charge as it is applied (Unreserve once it has), counted by every
  // other admission meanwhile, so that two admissions on two threads cannot
  // both pass on the same room. False (nothing reserved) when they do not
  // fit beside what is charged and reserved.
  bool TryReserve(uint64_t bytes) { return Claim(bytes); }
  void Unreserve(uint64_t bytes) {
    claimed_.fetch_sub(static_cast<int64_t>(bytes));
  }
  // Charges `bytes` if they fit beside what is charged and reserved,
  // atomically; false (nothing charged) otherwise.
  bool TryCharge(uint64_t bytes) {
    if (!Claim(bytes)) return false;
    used_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    return true;
  }
  // Above half of the limit: the driver sheds what it can keep elsewhere.
  bool Pressured() const {
    return limit_ != 0 && used() > static_cast<int64_t>(limit_ / 2);
  }

  // Adds `delta` (negative: a release).
  void Charge(int64_t delta) {
    used_.fetch_add(delta, std::memory_order_relaxed);
    claimed_.fetch_add(delta);
  }

 private:
  // Adds `bytes` to claimed_ if it stays within the limit: one CAS, so
  // every admission and every TryCharge sees every other.
  bool Claim(uint64_t bytes) {
    const int64_t b = static_cast<int64_t>(bytes);
    int64_t c = claimed_.load();
    do {
      if (limit_ != 0 && c + b > static_cast<int64_t>(limit_)) return false;
    } while (!claimed_.compare_exchange_weak(c, c + b));
    return true;
  }

  const uint64_t limit_;
  std::atomic<int64_t> used_{0};  // what is charged (the gauge)
  // Charged plus reserved: what admissions are checked against. An
  // admitted request's charges, made under its reservation, count twice
  // here until it unreserves (so others are refused a moment early, never
  // admitted late), and so `used_` stays within the limit.
  std::atomic<int64_t> claimed_{0};
};

}  // namespace tcc::runtime
