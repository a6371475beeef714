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
// Admissions and calls take room up to 15/16 of the limit (admit_limit());
// the last 1/16 is kept for what admitted transactions must hold and cannot
// be refused: their records on their way to the WAL, error texts, a call
// that goes alone because nothing in flight would make room. So what is
// charged stays within the limit unless those outgrow that sixteenth.
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
  explicit MemoryBudget(uint64_t limit_bytes)
      : limit_(limit_bytes), admit_limit_(limit_bytes - limit_bytes / 16) {}

  uint64_t limit() const { return limit_; }
  // What admissions and TryCharge fill up to (0: no limit).
  uint64_t admit_limit() const { return admit_limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  // The most `used()` has been since the budget was made.
  int64_t high_water() const {
    return high_water_.load(std::memory_order_relaxed);
  }

  // Room admitted to one request and held for it until the request's own
  // charges are in, so that two admissions on two threads cannot both pass
  // on the same room. While it is alive, the positive charges made on the
  // thread that made it take from it first (they are the room it holds, not
  // more room); what they did not take goes back when it dies. Neither
  // copied nor moved: it belongs to its thread's stack.
  class Reservation {
   public:
    // Reserves `bytes` if they fit beside what is charged and reserved,
    // within admit_limit() (ok() says whether; nothing reserved otherwise).
    // 0 bytes: ok.
    Reservation(MemoryBudget& budget, uint64_t bytes);
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    bool ok() const { return budget_ != nullptr; }

   private:
    friend class MemoryBudget;
    MemoryBudget* budget_ = nullptr;  // null: refused
    int64_t left_ = 0;                // reserved and not yet charged
    Reservation* outer_ = nullptr;    // this thread's previous one
  };

  // Charges `bytes` if they fit beside what is charged and reserved, within
  // admit_limit(), atomically; false (nothing charged) otherwise.
  bool TryCharge(uint64_t bytes) {
    if (!Claim(bytes)) return false;
    Use(static_cast<int64_t>(bytes));
    return true;
  }
  // Above half of the limit: the driver sheds what it can keep elsewhere.
  bool Pressured() const {
    return limit_ != 0 && used() > static_cast<int64_t>(limit_ / 2);
  }

  // Adds `delta` (negative: a release). A positive charge takes from this
  // thread's live reservation of this budget first.
  void Charge(int64_t delta);

 private:
  // Adds `bytes` to claimed_ if it stays within admit_limit_: one CAS, so
  // every admission and every TryCharge sees every other.
  bool Claim(uint64_t bytes) {
    const int64_t b = static_cast<int64_t>(bytes);
    int64_t c = claimed_.load();
    do {
      if (limit_ != 0 && c + b > static_cast<int64_t>(admit_limit_)) {
        return false;
      }
    } while (!claimed_.compare_exchange_weak(c, c + b));
    return true;
  }

  // Adds `delta` to used_, raising high_water_ past a new most.
  void Use(int64_t delta) {
    const int64_t now =
        used_.fetch_add(delta, std::memory_order_relaxed) + delta;
    int64_t high = high_water_.load(std::memory_order_relaxed);
    while (now > high && !high_water_.compare_exchange_weak(
                             high, now, std::memory_order_relaxed)) {
    }
  }

  const uint64_t limit_;
  const uint64_t admit_limit_;
  std::atomic<int64_t> used_{0};  // what is charged (the gauge)
  std::atomic<int64_t> high_water_{0};
  // Charged plus reserved and not yet charged: what admissions are checked
  // against. A request's charges made under its reservation take from it
  // (counted once), so `used_` stays within the limit and admissions are
  // refused neither late nor early.
  std::atomic<int64_t> claimed_{0};
};

}  // namespace tcc::runtime
