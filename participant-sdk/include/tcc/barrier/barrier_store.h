// BarrierStore: where barrier records and the participant's business data
// live, side by side, so that both change in one local transaction.
//
// A store hands out local transactions (LocalTxn). The barrier locks a branch
// key's record in it, runs the business handler in the same transaction, then
// writes the record and commits: barrier record and business change become
// durable together or not at all. Dropping a LocalTxn without Commit() rolls
// everything back and releases its locks.
//
// Implementations: MemoryBarrierStore (tests, simulation), RocksDbBarrierStore,
// PostgresBarrierStore. Each also offers its own, richer transaction type
// (LocalTxn::As<T>()) for business code that wants the real database API.
//
// Contract every implementation keeps:
//   - LockBarrier takes an exclusive lock on the key, whether or not a record
//     exists, held until the transaction ends; all operations on one key are
//     serialised. A lock that cannot be had within the store's lock-wait
//     timeout is UNAVAILABLE, and nothing changed.
//   - Commit() returns OK only once the transaction is durable (synced by
//     default), unless the store group-commits (groups_commits() true):
//     then Commit() returns once the transaction is committed and visible,
//     and it becomes durable with the next sync, which serves every
//     transaction committed before it. Whoever answers a caller from a
//     store that group-commits first waits for WhenDurable(): what it read
//     or wrote may not be durable yet. Any error from Commit() or
//     WhenDurable() leaves the outcome of the transaction to be found out by
//     reading (treat as unknown; callers answer UNAVAILABLE).
//   - Errors are absl::Status; no exception leaves a store.
//
// Thread-safety: a BarrierStore is safe to use from many threads; one
// LocalTxn belongs to one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/barrier/barrier_record.h"

namespace tcc::barrier {

class LocalTxn {
 public:
  virtual ~LocalTxn() = default;

  // --- Barrier records (used by the barrier; services need not call these).

  // The record of `key`, locked until this transaction ends; nullopt when
  // there is none (the key is locked all the same).
  [[nodiscard]] virtual absl::StatusOr<std::optional<BarrierRecord>>
  LockBarrier(const BranchKey& key) = 0;
  [[nodiscard]] virtual absl::Status PutBarrier(
      const BranchKey& key, const BarrierRecord& record) = 0;
  [[nodiscard]] virtual absl::Status DeleteBarrier(const BranchKey& key) = 0;

  // --- Business key-value data, for services without a schema of their own
  // (and for the simulation). Keys and values are arbitrary bytes.

  // Reads `key` and locks it until this transaction ends.
  [[nodiscard]] virtual absl::StatusOr<std::optional<std::string>> GetForUpdate(
      std::string_view key) = 0;
  // Reads the latest committed value of `key` (or this transaction's own
  // write), without locking.
  [[nodiscard]] virtual absl::StatusOr<std::optional<std::string>> Get(
      std::string_view key) = 0;
  [[nodiscard]] virtual absl::Status Put(std::string_view key,
                                         std::string_view value) = 0;
  [[nodiscard]] virtual absl::Status Delete(std::string_view key) = 0;

  // --- Savepoint: the barrier discards a refusing Try handler's writes but
  // keeps its lock and writes TRY_REJECTED in the same transaction.
  [[nodiscard]] virtual absl::Status SetSavePoint() = 0;
  [[nodiscard]] virtual absl::Status RollbackToSavePoint() = 0;

  // Makes every write of this transaction durable, atomically. After Commit
  // (successful or not) the transaction is finished.
  [[nodiscard]] virtual absl::Status Commit() = 0;

  // The store's own transaction type, e.g. `txn.As<PostgresTxn>()->work()`;
  // nullptr when this transaction is of another store.
  template <class T>
  T* As() {
    return dynamic_cast<T*>(this);
  }
};

class BarrierStore {
 public:
  virtual ~BarrierStore() = default;

  // Starts a local transaction.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<LocalTxn>> Begin() = 0;

  // Reads a record without locking and without changing anything (Query).
  [[nodiscard]] virtual absl::StatusOr<std::optional<BarrierRecord>>
  ReadBarrier(const BranchKey& key) = 0;

  // Calls `visit` for every committed record (order unspecified). Used by
  // retention; the barrier re-checks each record under its lock before it
  // removes anything.
  [[nodiscard]] virtual absl::Status ScanBarrier(
      const std::function<void(const BranchKey&, const BarrierRecord&)>&
          visit) = 0;

  // True when reads come from the primary copy of the barrier (every store
  // here; a replica-reading store would answer false).
  virtual bool authoritative() const { return true; }

  // True when Commit() returns before the transaction is durable (see the
  // contract above).
  virtual bool groups_commits() const { return false; }
  // Calls `done` once every transaction committed (and every value read)
  // before this call is durable, with OK, or with the error that stopped
  // the sync. May call it on another thread, or inline (stores whose
  // commits are durable when they return call it at once).
  virtual void WhenDurable(std::function<void(absl::Status)> done) {
    done(absl::OkStatus());
  }
};

}  // namespace tcc::barrier
