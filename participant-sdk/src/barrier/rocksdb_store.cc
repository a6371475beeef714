#include "tcc/barrier/rocksdb_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "barrier/internal/record_codec.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::barrier {
namespace {

constexpr char kBarrierFamily[] = "tcc_barrier";

// Lock waits, deadlocks and busy keys are transient; anything else is
// reported with its own code.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  std::string msg =
      absl::StrCat("rocksdb ", std::string(what), ": ", s.ToString());
  if (s.IsTimedOut() || s.IsBusy() || s.IsTryAgain() || s.IsDeadlock() ||
      s.IsIOError()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsCorruption()) return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

}  // namespace

class RocksDbBarrierStore::Txn final : public RocksDbTxn {
 public:
  Txn(RocksDbBarrierStore& store, rocksdb::Transaction* txn)
      : store_(store), txn_(txn) {}
  ~Txn() override {
    if (!finished_) {
      rocksdb::Status ignored = txn_->Rollback();  // best effort: drop locks
      (void)ignored;
    }
  }

  rocksdb::Transaction* raw() override { return txn_.get(); }

  absl::StatusOr<std::optional<BarrierRecord>> LockBarrier(
      const BranchKey& key) override {
    std::string value;
    rocksdb::Status s =
        txn_->GetForUpdate(rocksdb::ReadOptions(), store_.barrier_cf_,
                           internal::EncodeKey(key), &value);
    if (s.IsNotFound()) return std::optional<BarrierRecord>();
    if (!s.ok()) return FromRocks(s, "lock barrier record");
    absl::StatusOr<BarrierRecord> rec = internal::DecodeRecord(value);
    if (!rec.ok()) return rec.status();
    return std::optional<BarrierRecord>(std::move(*rec));
  }
  absl::Status PutBarrier(const BranchKey& key,
                          const BarrierRecord& record) override {
    rocksdb::Status s = txn_->Put(store_.barrier_cf_, internal::EncodeKey(key),
                                  internal::EncodeRecord(record));
    return s.ok() ? absl::OkStatus() : FromRocks(s, "put barrier record");
  }
  absl::Status DeleteBarrier(const BranchKey& key) override {
    rocksdb::Status s =
        txn_->Delete(store_.barrier_cf_, internal::EncodeKey(key));
    return s.ok() ? absl::OkStatus() : FromRocks(s, "delete barrier record");
  }

  absl::StatusOr<std::optional<std::string>> GetForUpdate(
      std::string_view key) override {
    std::string value;
    rocksdb::Status s =
        txn_->GetForUpdate(rocksdb::ReadOptions(), store_.default_cf_,
                           rocksdb::Slice(key.data(), key.size()), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    if (!s.ok()) return FromRocks(s, "get for update");
    return std::optional<std::string>(std::move(value));
  }
  absl::StatusOr<std::optional<std::string>> Get(
      std::string_view key) override {
    std::string value;
    rocksdb::Status s =
        txn_->Get(rocksdb::ReadOptions(), store_.default_cf_,
                  rocksdb::Slice(key.data(), key.size()), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    if (!s.ok()) return FromRocks(s, "get");
    return std::optional<std::string>(std::move(value));
  }
  absl::Status Put(std::string_view key, std::string_view value) override {
    rocksdb::Status s =
        txn_->Put(store_.default_cf_, rocksdb::Slice(key.data(), key.size()),
                  rocksdb::Slice(value.data(), value.size()));
    return s.ok() ? absl::OkStatus() : FromRocks(s, "put");
  }
  absl::Status Delete(std::string_view key) override {
    rocksdb::Status s = txn_->Delete(store_.default_cf_,
                                     rocksdb::Slice(key.data(), key.size()));
    return s.ok() ? absl::OkStatus() : FromRocks(s, "delete");
  }

  absl::Status SetSavePoint() override {
    txn_->SetSavePoint();
    return absl::OkStatus();
  }
  absl::Status RollbackToSavePoint() override {
    rocksdb::Status s = txn_->RollbackToSavePoint();
    return s.ok() ? absl::OkStatus() : FromRocks(s, "rollback to savepoint");
  }

  absl::Status Commit() override {
    if (finished_) {
      return absl::FailedPreconditionError(
          "local transaction already finished");
    }
    finished_ = true;
    // Benchmarks of a slow disk (`barrier.before_synced_commit=sleep(1)`)
    // stall each synced commit here, as a slower fsync would (with group
    // commit, each group's sync instead).
    if (store_.options_.sync && !store_.groups_commits()) {
      if (absl::Status fp = failpoint::Eval("barrier.before_synced_commit");
          !fp.ok()) {
        rocksdb::Status ignored = txn_->Rollback();
        (void)ignored;
        return fp;
      }
    }
    rocksdb::Status s = txn_->Commit();
    if (!s.ok()) {
      rocksdb::Status ignored = txn_->Rollback();
      (void)ignored;
      return FromRocks(s, "commit");
    }
    return absl::OkStatus();
  }

 private:
  RocksDbBarrierStore& store_;
  std::unique_ptr<rocksdb::Transaction> txn_;
  bool finished_ = false;
};

absl::StatusOr<std::unique_ptr<RocksDbBarrierStore>> RocksDbBarrierStore::Open(
    Options options) {
  std::unique_ptr<RocksDbBarrierStore> store(
      new RocksDbBarrierStore(std::move(options)));
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Concurrent synced commits are group committed by RocksDB's write thread:
  // one leader writes and syncs the WAL for the group while the others wait.
  // By default the waiters first spin and sched_yield (up to 100 us each),
  // and each then wakes again to insert its own batch into the memtable; on
  // a small machine that busy-waiting and the second wake-up cost more CPU
  // than the commit itself (profile: a fifth of the participant's time). The
  // leader now inserts the whole group and the waiters block at once.
  db_options.enable_write_thread_adaptive_yield = false;
  db_options.allow_concurrent_memtable_write = false;
  rocksdb::TransactionDBOptions txn_db_options;
  txn_db_options.transaction_lock_timeout =
      store->options_.lock_timeout.count();
  txn_db_options.default_lock_timeout = store->options_.lock_timeout.count();
  // Bloom filters in every table, and for the barrier records in the
  // memtable too: most barrier lookups miss (a Try's first look at its key,
  // a Query after a crash), and without a filter a miss searches the whole
  // memtable and probes every table.
  rocksdb::BlockBasedTableOptions table_options;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions data_family;
  data_family.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::ColumnFamilyOptions barrier_family = data_family;
  barrier_family.memtable_prefix_bloom_size_ratio = 0.02;
  barrier_family.memtable_whole_key_filtering = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, data_family},
      {kBarrierFamily, barrier_family}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::TransactionDB* db = nullptr;
  rocksdb::Status s = rocksdb::TransactionDB::Open(db_options, txn_db_options,
                                                   store->options_.path,
                                                   families, &handles, &db);
  if (!s.ok()) return FromRocks(s, "open " + store->options_.path);
  store->db_.reset(db);
  store->default_cf_ = handles[0];
  store->barrier_cf_ = handles[1];
  if (store->groups_commits()) {
    RocksDbBarrierStore* raw = store.get();
    store->syncer_ = std::thread([raw] { raw->SyncerLoop(); });
  }
  return store;
}

void RocksDbBarrierStore::WhenDurable(std::function<void(absl::Status)> done) {
  if (!groups_commits()) return done(absl::OkStatus());
  {
    std::unique_lock<std::mutex> lock(sync_mu_);
    if (sync_stop_) {
      lock.unlock();
      return done(absl::UnavailableError("barrier store is closing"));
    }
    if (syncing_ || !sync_waiting_.empty()) {
      sync_waiting_.push_back(std::move(done));
      if (!syncing_) sync_cv_.notify_one();
      return;
    }
    syncing_ = true;  // this thread syncs
  }
  done(SyncNow());
  bool more;
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    syncing_ = false;
    more = !sync_waiting_.empty();
  }
  if (more) sync_cv_.notify_one();
}

absl::Status RocksDbBarrierStore::SyncNow() {
  // Every commit (and every value read) of the callers so far has a
  // sequence number up to this one and is in RocksDB's WAL already; one
  // sync makes them all durable, and none is needed if nothing was written
  // since the last sync.
  const rocksdb::SequenceNumber sequence = db_->GetLatestSequenceNumber();
  absl::Status status = sync_failure_;
  if (status.ok() && sequence > synced_sequence_) {
    status = failpoint::Eval("barrier.before_synced_commit");
    if (status.ok()) {
      rocksdb::Status s = db_->SyncWAL();
      if (s.ok()) {
        synced_sequence_ = sequence;
      } else {
        status = FromRocks(s, "sync of the WAL");
      }
    }
    if (!status.ok()) {
      sync_failure_ = absl::UnavailableError(
          absl::StrCat("barrier store stopped after a failed sync (restart the "
                       "participant): ",
                       status.ToString()));
      status = sync_failure_;
    }
  }
  return status;
}

void RocksDbBarrierStore::SyncerLoop() {
  while (true) {
    std::vector<std::function<void(absl::Status)>> group;
    {
      std::unique_lock<std::mutex> lock(sync_mu_);
      sync_cv_.wait(lock, [this] {
        return !syncing_ && (sync_stop_ || !sync_waiting_.empty());
      });
      if (sync_waiting_.empty()) return;  // stopping, nobody waits
      group.swap(sync_waiting_);
      syncing_ = true;
    }
    const absl::Status status = SyncNow();
    for (auto& done : group) done(status);
    std::lock_guard<std::mutex> lock(sync_mu_);
    syncing_ = false;
  }
}

RocksDbBarrierStore::~RocksDbBarrierStore() {
  if (syncer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(sync_mu_);
      sync_stop_ = true;
    }
    sync_cv_.notify_all();
    syncer_.join();  // serves whoever was waiting first
  }
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* h : {default_cf_, barrier_cf_}) {
    rocksdb::Status ignored = db_->DestroyColumnFamilyHandle(h);
    (void)ignored;
  }
  db_.reset();
}

absl::StatusOr<std::unique_ptr<LocalTxn>> RocksDbBarrierStore::Begin() {
  rocksdb::WriteOptions write_options;
  // Group commit: the syncer syncs (WhenDurable).
  write_options.sync = options_.sync && !groups_commits();
  rocksdb::TransactionOptions txn_options;
  txn_options.lock_timeout = options_.lock_timeout.count();
  txn_options.deadlock_detect = true;
  rocksdb::Transaction* txn = db_->BeginTransaction(write_options, txn_options);
  if (txn == nullptr) return absl::InternalError("rocksdb: no transaction");
  return std::unique_ptr<LocalTxn>(new Txn(*this, txn));
}

absl::StatusOr<std::optional<BarrierRecord>> RocksDbBarrierStore::ReadBarrier(
    const BranchKey& key) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), barrier_cf_,
                               internal::EncodeKey(key), &value);
  if (s.IsNotFound()) return std::optional<BarrierRecord>();
  if (!s.ok()) return FromRocks(s, "read barrier record");
  absl::StatusOr<BarrierRecord> rec = internal::DecodeRecord(value);
  if (!rec.ok()) return rec.status();
  return std::optional<BarrierRecord>(std::move(*rec));
}

absl::Status RocksDbBarrierStore::ScanBarrier(
    const std::function<void(const BranchKey&, const BarrierRecord&)>& visit) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), barrier_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::StatusOr<BranchKey> key = internal::DecodeKey(
        std::string_view(it->key().data(), it->key().size()));
    if (!key.ok()) return key.status();
    absl::StatusOr<BarrierRecord> rec = internal::DecodeRecord(
        std::string_view(it->value().data(), it->value().size()));
    if (!rec.ok()) return rec.status();
    visit(*key, *rec);
  }
  return it->status().ok() ? absl::OkStatus()
                           : FromRocks(it->status(), "scan barrier");
}

}  // namespace tcc::barrier
