// RocksDbBarrierStore: a BarrierStore on an embedded RocksDB TransactionDB,
// for services that keep their data in RocksDB (and for the demos).
//
// Layout: barrier records live in the column family "tcc_barrier" (key and
// record encodings in src/barrier/internal/record_codec.h); business data in
// the default column family, which the service may also use directly through
// RocksDbTxn::raw().
//
// Locking is pessimistic: LockBarrier and GetForUpdate take RocksDB key
// locks (present or absent keys alike), held until commit or rollback, with
// an explicit lock wait (`lock_timeout`) after which the call is UNAVAILABLE;
// deadlock detection is on. Commits are synced (WriteOptions::sync) unless
// `sync` is turned off (tests that measure nothing durable). With
// `group_commit` (and `sync`), Commit() writes without syncing and a syncer
// thread makes every commit durable with one sync of RocksDB's WAL per group
// of WhenDurable() callers (the WAL is written in order, so a sync covers
// every commit before it); the failpoint barrier.before_synced_commit then
// runs before each such sync. A failed sync, or a commit whose write to
// RocksDB's WAL failed, stops the store: every later Commit and WhenDurable
// fails too (UNAVAILABLE), until the store is opened again (fail-stop, as
// tccd's WAL): what was committed before it may be lost whatever a later
// sync says, and a reply must never say it is durable. Business code writes
// through its LocalTxn only (not through db() directly), so that no sync
// runs after a failed write. A full disk is RESOURCE_EXHAUSTED "no space
// left on device" (Open, Commit); RocksDB's info log goes to
// Options::info_log, not to a LOG file next to the data. Every file of the
// store is 0600 and every directory 0700 (tcc/rocksdb_env/
// owner_only_files.h); Open tightens a store it finds looser, with a warning
// to info_log.
//
// Thread-safe; one RocksDbTxn per thread at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rocksdb/utilities/transaction.h"
#include "rocksdb/utilities/transaction_db.h"
#include "tcc/barrier/barrier_store.h"
#include "tcc/rocksdb_env/info_log.h"

namespace tcc::barrier {

// The RocksDB store's local transaction. Business code may use raw() for
// anything the key-value methods of LocalTxn do not cover (other column
// families, iterators), as long as it does not commit or roll back itself.
class RocksDbTxn : public LocalTxn {
 public:
  virtual rocksdb::Transaction* raw() = 0;
};

class RocksDbBarrierStore final : public BarrierStore {
 public:
  struct Options {
    std::string path;
    std::chrono::milliseconds lock_timeout{2000};
    bool sync = true;
    bool group_commit = false;
    // Where RocksDB's warnings and errors go; null: spdlog's default logger.
    rocksdb_env::InfoLogSink info_log = nullptr;
  };

  // Opens (creating if missing) the database at options.path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RocksDbBarrierStore>>
  Open(Options options);
  ~RocksDbBarrierStore() override;

  absl::StatusOr<std::unique_ptr<LocalTxn>> Begin() override;
  absl::StatusOr<std::optional<BarrierRecord>> ReadBarrier(
      const BranchKey& key) override;
  absl::Status ScanBarrier(
      const std::function<void(const BranchKey&, const BarrierRecord&)>& visit)
      override;

  bool groups_commits() const override {
    return options_.sync && options_.group_commit;
  }
  void WhenDurable(std::function<void(absl::Status)> done) override;

  rocksdb::TransactionDB* db() { return db_.get(); }

 private:
  class Txn;
  explicit RocksDbBarrierStore(Options options);
  void SyncerLoop();
  // One sync for everything committed so far, if anything was. REQUIRES:
  // the caller set syncing_ (one sync at a time).
  absl::Status SyncNow();
  // One sync of RocksDB's WAL, in its turn with the commits (whoever syncs).
  absl::Status SyncTurn();
  // Fail-stop: every later Commit and WhenDurable answers the failure
  // (UNAVAILABLE).
  void Stop(const absl::Status& cause);
  absl::Status failure() const;

  Options options_;
  // Group commit: callers waiting for the next sync, and the syncer. A
  // WhenDurable that finds nobody syncing and nobody waiting syncs on its
  // own thread (no hand-off to the syncer); under load callers queue and
  // the syncer serves them as a group.
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  std::vector<std::function<void(absl::Status)>> sync_waiting_;
  bool sync_stop_ = false;
  bool syncing_ = false;  // a sync runs (guarded by sync_mu_)
  // The last sequence number known durable (whoever syncs, one at a time).
  rocksdb::SequenceNumber synced_sequence_ = 0;
  // Commits (each writes RocksDB's WAL file) and syncs take turns until
  // RocksDB has checked, at the start of a sync, that no write to the file
  // failed: a failed write stops the store before any sync can start after
  // it (RocksDB asserts when it syncs a file whose write failed). The
  // fsync itself overlaps the next commits.
  class WalTurns;
  std::unique_ptr<WalTurns> wal_turns_;
  std::unique_ptr<rocksdb::Env> env_;  // what the database runs on
  // The first failed write or sync, answered to every later group too: after
  // a failed fsync the kernel may have dropped the unsynced pages, so a
  // later sync that succeeds proves nothing about them.
  mutable std::mutex failure_mu_;
  absl::Status failure_;
  std::thread syncer_;
  std::unique_ptr<rocksdb::TransactionDB> db_;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* barrier_cf_ = nullptr;
};

}  // namespace tcc::barrier
