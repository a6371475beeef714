// MemoryBarrierStore: a BarrierStore in memory, for unit tests and the
// deterministic simulation.
//
// Crash model: only committed local transactions survive Crash(). Writes of a
// transaction are buffered in the transaction and applied atomically at
// Commit(); Crash() makes every transaction open at that moment unable to
// commit (its Commit() returns UNAVAILABLE and changes nothing), exactly as if
// the process had died before its commit. FailNextCommits(n) makes the next n
// commits fail without applying anything (a commit lost in a crash).
// A simulation crashes a participant in the middle of a call by calling
// Crash() from inside a handler (the call then answers UNAVAILABLE and left
// nothing behind), or after a call returned (the answer was durable, the
// reply is what gets lost).
//
// Use in a simulation (single-threaded, no gRPC):
//
//   MemoryBarrierStore store;
//   clock::ManualClock clock(start_ms);
//   Barrier barrier(store, clock, {.clock_skew_ms = 1000});
//   absl::StatusOr<BarrierAnswer> a = barrier.Try(call, try_handler);
//   store.Crash();  // keeps what committed
//
// Locking: one local transaction at a time holds the store (a store-wide
// lock taken by Begin(), released when the transaction ends), which
// serialises every key trivially and keeps runs deterministic. Begin() waits
// at most `lock_timeout` for it, then returns UNAVAILABLE. Because of that,
// a thread must not open a second transaction while it holds one.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tcc/barrier/barrier_store.h"

namespace tcc::barrier {

class MemoryBarrierStore final : public BarrierStore {
 public:
  struct Options {
    std::chrono::milliseconds lock_timeout{2000};
  };

  MemoryBarrierStore() : MemoryBarrierStore(Options{}) {}
  explicit MemoryBarrierStore(Options options) : options_(options) {}

  absl::StatusOr<std::unique_ptr<LocalTxn>> Begin() override;
  absl::StatusOr<std::optional<BarrierRecord>> ReadBarrier(
      const BranchKey& key) override;
  absl::Status ScanBarrier(
      const std::function<void(const BranchKey&, const BarrierRecord&)>& visit)
      override;

  // Forgets every uncommitted write: transactions open now can no longer
  // commit. Committed data stays.
  void Crash();
  // The next `n` commits fail (UNAVAILABLE) and apply nothing.
  void FailNextCommits(int n);

  // Committed business data (for checks).
  std::map<std::string, std::string> BusinessData() const;
  // How many transactions committed so far.
  uint64_t commits() const;

 private:
  class Txn;

  Options options_;
  std::timed_mutex txn_mu_;  // held by the open transaction
  mutable std::mutex mu_;    // guards the fields below
  std::map<BranchKey, BarrierRecord> barrier_;
  std::map<std::string, std::string, std::less<>> data_;
  uint64_t generation_ = 0;  // bumped by Crash()
  int fail_commits_ = 0;
  uint64_t commits_ = 0;
};

}  // namespace tcc::barrier
