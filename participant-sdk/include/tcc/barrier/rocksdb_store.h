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
// `sync` is turned off (tests that measure nothing durable).
//
// Thread-safe; one RocksDbTxn per thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rocksdb/utilities/transaction.h"
#include "rocksdb/utilities/transaction_db.h"
#include "tcc/barrier/barrier_store.h"

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

  rocksdb::TransactionDB* db() { return db_.get(); }

 private:
  class Txn;
  RocksDbBarrierStore(Options options) : options_(std::move(options)) {}

  Options options_;
  std::unique_ptr<rocksdb::TransactionDB> db_;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* barrier_cf_ = nullptr;
};

}  // namespace tcc::barrier
