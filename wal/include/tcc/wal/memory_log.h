// An in-memory Log that models crashes, for the core's tests and the
// deterministic simulation (DESIGN.md sections 7 and 13).
//
// It keeps every promise of log.h, and adds what a test needs to break it on
// purpose:
// - Sync: with `auto_sync` a durable append is synced and completed inside
//   Append. Without it, durable appends wait until the test calls SyncNow(),
//   which syncs everything written so far and completes the waiting appends
//   in append order (one "group commit"). Buffered appends and approvals are
//   written at once (a buffered append completes inside Append); a sync covers
//   them too. PutApproval is durable: it waits for a sync like a durable
//   append.
// - Crash(keep): a crash of the machine followed by a reopen. What survives is
//   every synced append plus the first `keep` of the unsynced ones, each whole,
//   in order (the log keeps a prefix); the rest are gone and their callbacks
//   are never called. Callbacks of waiting appends that survived are not
//   called either (the process that waited is gone). A failed log is working
//   again after a Crash. Choosing `keep` from the test's RNG keeps runs
//   deterministic.
// - Failure injection: InjectWriteFailure / InjectSyncFailure make the next
//   write / sync fail with the given status; the log then fails stop (log.h):
//   that append and every waiting durable append get the error, and every
//   later call is refused with it until Crash().
// - The write-ahead check: IsDurable(gid, predicate) tells whether a synced
//   record of the gid satisfies `predicate`; SyncedRecords(gid) returns them.
//
// The owner epoch and the deduplication horizon are durable at once (as if
// kept in their own synced file): a crash never takes them back. Retention
// acts on what is written and on what is synced alike.
//
// Deterministic: no threads, no clock reads, no randomness of its own.
// Thread-safe (one mutex); callbacks run on the caller's thread, inside
// Append, SyncNow or the call that fails the log, never under the lock.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tcc/wal/log.h"

namespace tcc::wal {

struct MemoryLogOptions {
  // True: durable appends complete inside Append. False: they wait for
  // SyncNow().
  bool auto_sync = true;
  RetentionPolicy retention;
};

class MemoryLog final : public Log {
 public:
  explicit MemoryLog(MemoryLogOptions options = {});
  ~MemoryLog() override;

  MemoryLog(const MemoryLog&) = delete;
  MemoryLog& operator=(const MemoryLog&) = delete;

  // Log.
  void Append(AppendRequest request, AppendDone done) override;
  void PutApproval(Approval approval, AppendDone done) override;
  [[nodiscard]] absl::StatusOr<TxnLog> Read(std::string_view gid) override;
  [[nodiscard]] absl::StatusOr<Approval> ReadApproval(
      std::string_view approval_id) override;
  [[nodiscard]] absl::StatusOr<ListPage> List(const ListQuery& query) override;
  uint32_t shard_count() const override { return 1; }
  [[nodiscard]] absl::Status ScanUnfinished(
      uint32_t shard,
      const std::function<absl::Status(TxnLog)>& visit) override;
  [[nodiscard]] absl::StatusOr<uint64_t> TakeOwnerEpoch(
      uint32_t shard) override;
  [[nodiscard]] absl::Status RunRetention(int64_t now_ms) override;
  int64_t DedupHorizonMs(uint32_t shard) const override;
  LogStats Stats() const override;

  // --- Test API ---

  // Syncs everything written and completes the waiting durable appends in
  // append order. Returns how many appends it completed (0 when there was
  // nothing to sync; a sync that finds nothing new still counts in
  // Stats().syncs only if something was written). If a sync failure is
  // injected, the log fails instead and the waiting appends get the error.
  size_t SyncNow();

  // Durable appends (and approvals) waiting for a sync.
  size_t WaitingDurable() const;

  // Appends and approvals written but not synced (Crash's upper bound).
  size_t Unsynced() const;

  // Simulates a crash and a reopen (see the header comment). `keep` is
  // clamped to Unsynced().
  void Crash(size_t keep_unsynced);

  // The next write (Append or PutApproval) / the next sync fails with
  // `status` (not OK), and the log fails stop.
  void InjectWriteFailure(absl::Status status);
  void InjectSyncFailure(absl::Status status);

  // OK while the log works; the fail-stop error once it failed.
  absl::Status failure() const;

  // True when a synced record of `gid` satisfies `predicate` (the write-ahead
  // rule: the record implying a call must be durable before the call).
  bool IsDurable(std::string_view gid,
                 const std::function<bool(const Record&)>& predicate) const;

  // The synced records of `gid`, in append order (empty if none).
  std::vector<Record> SyncedRecords(std::string_view gid) const;

 private:
  struct Txn {
    TxnSummary summary;
    std::vector<Record> records;
  };
  // What the log holds: everything written (live), or only what is synced.
  struct State {
    std::map<std::string, Txn, std::less<>> txns;
    std::set<std::pair<int64_t, std::string>> by_registration;
    std::map<std::string, Approval, std::less<>> approvals;
  };
  // One write not yet synced, to replay on a crash or a sync.
  struct Write {
    std::optional<AppendRequest> append;  // else `approval`
    Approval approval;
    AppendDone done;  // set while a durable write waits for its sync
  };
  using Completions = std::vector<std::pair<AppendDone, absl::Status>>;

  static absl::Status ApplyAppend(State& state, const AppendRequest& request);
  static absl::Status ApplyApproval(State& state, const Approval& approval);
  static absl::Status ApplyWrite(State& state, const Write& write);
  static void Forget(State& state, const std::string& gid);
  static void Compact(State& state, const std::string& gid);
  static uint64_t TxnBytes(const Txn& txn);

  // Handles a write: fails it on an injected failure, else applies it to the
  // live state and queues it; syncs if auto_sync and durable.
  void WriteLocked(Write write, bool durable, absl::Status applied,
                   Completions& completions);
  void SyncLocked(Completions& completions);
  void FailLocked(absl::Status status, Completions& completions);
  static void Run(Completions& completions);

  const MemoryLogOptions options_;
  mutable std::mutex mu_;
  State live_;
  State synced_;
  std::vector<Write> unsynced_;
  absl::Status failure_;
  std::optional<absl::Status> inject_write_;
  std::optional<absl::Status> inject_sync_;
  uint64_t owner_epoch_ = 0;
  int64_t dedup_horizon_ms_ = 0;
  LogStats stats_;
};

}  // namespace tcc::wal
