#include "tcc/barrier/rocksdb_store.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "barrier/internal/record_codec.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/rocksdb_env/owner_only_files.h"

namespace tcc::barrier {
namespace {

constexpr char kBarrierFamily[] = "tcc_barrier";

// Lock waits, deadlocks, busy keys and I/O errors are transient; a full
// disk is RESOURCE_EXHAUSTED; anything else is reported with its own code.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rocksdb ", std::string(what),
                     ": no space left on device (", s.ToString(), ")"));
  }
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

// Commits and syncs of RocksDB's WAL taking turns (see the header). A sync
// waits for the commits under way and holds new ones off; the turn ends
// when the file system reports the fsync of the newest WAL file starting on
// the syncer's thread (RocksDB checked the file's writes before that), or
// when the sync ends. A stream of commits never starves a sync.
class RocksDbBarrierStore::WalTurns {
 public:
  void BeginWrite() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !sync_turn_; });
    ++writers_;
  }
  void EndWrite() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--writers_ == 0) cv_.notify_all();
  }
  void BeginSync() {
    std::unique_lock<std::mutex> lock(mu_);
    sync_turn_ = true;
    syncer_ = std::this_thread::get_id();
    cv_.wait(lock, [this] { return writers_ == 0; });
  }
  // From the file system: the fsync of the newest WAL file starts.
  void NewestWalSyncStarts() {
    std::lock_guard<std::mutex> lock(mu_);
    if (sync_turn_ && std::this_thread::get_id() == syncer_) EndTurn();
  }
  void EndSync() {
    std::lock_guard<std::mutex> lock(mu_);
    if (sync_turn_) EndTurn();
  }

 private:
  // REQUIRES: mu_ is held.
  void EndTurn() {
    sync_turn_ = false;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int writers_ = 0;         // commits under way
  bool sync_turn_ = false;  // a sync waits, or runs before its fsync
  std::thread::id syncer_;
};

namespace {

class WatchedWalFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WatchedWalFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                 std::function<void()> on_sync)
      : FSWritableFileOwnerWrapper(std::move(file)),
        on_sync_(std::move(on_sync)) {}
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* dbg) override {
    on_sync_();
    return target()->Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    on_sync_();
    return target()->Fsync(options, dbg);
  }

 private:
  const std::function<void()> on_sync_;
};

// Reports when the fsync of the newest WAL file (<number>.log, the one
// commits append to) starts.
class WalSyncWatch final : public rocksdb::FileSystemWrapper {
 public:
  WalSyncWatch(std::shared_ptr<rocksdb::FileSystem> base,
               std::function<void()> newest_sync_starts)
      : FileSystemWrapper(std::move(base)),
        newest_sync_starts_(std::move(newest_sync_starts)) {}
  const char* Name() const override { return "tcc.barrier.WalSyncWatch"; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s =
        target()->NewWritableFile(fname, options, result, dbg);
    if (s.ok() && fname.size() > 4 &&
        fname.compare(fname.size() - 4, 4, ".log") == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        newest_ = fname;
      }
      *result = std::make_unique<WatchedWalFile>(
          std::move(*result), [this, fname] { SyncStarts(fname); });
    }
    return s;
  }

 private:
  void SyncStarts(const std::string& fname) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fname != newest_) return;
    }
    newest_sync_starts_();
  }

  const std::function<void()> newest_sync_starts_;
  std::mutex mu_;
  std::string newest_;
};

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
    // A stopped store commits nothing more (RocksDB may resume writing
    // once there is room again; this store does not until reopened).
    if (absl::Status stopped = store_.failure(); !stopped.ok()) {
      rocksdb::Status ignored = txn_->Rollback();
      (void)ignored;
      return stopped;
    }
    // Writes RocksDB's WAL: a failure stops the store before a sync runs.
    store_.wal_turns_->BeginWrite();
    rocksdb::Status s = txn_->Commit();
    if (s.IsIOError()) store_.Stop(FromRocks(s, "commit"));
    store_.wal_turns_->EndWrite();
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

RocksDbBarrierStore::RocksDbBarrierStore(Options options)
    : options_(std::move(options)), wal_turns_(std::make_unique<WalTurns>()) {}

absl::StatusOr<std::unique_ptr<RocksDbBarrierStore>> RocksDbBarrierStore::Open(
    Options options) {
  std::unique_ptr<RocksDbBarrierStore> store(
      new RocksDbBarrierStore(std::move(options)));
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  // No LOG file next to the data (on a full disk RocksDB's LOG writer
  // aborted the process): warnings and errors go to the sink, or spdlog.
  rocksdb_env::InfoLogSink sink = store->options_.info_log;
  if (!sink) {
    sink = [](rocksdb_env::InfoLogSeverity severity, std::string_view line) {
      if (severity == rocksdb_env::InfoLogSeverity::kError) {
        spdlog::error("rocksdb: {}", line);
      } else {
        spdlog::warn("rocksdb: {}", line);
      }
    };
  }
  // The store holds the business data and every barrier: nothing in it is
  // for group or others. Files 0600, directories 0700; a store left looser
  // is tightened, with a warning.
  const std::string& path = store->options_.path;
  int tightened = 0;
  if (std::error_code ec = rocksdb_env::RestrictToOwner(path, &tightened);
      ec && ec != std::errc::no_such_file_or_directory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rocksdb open ", path, ": can't make it owner-only: ", ec.message()));
  }
  if (tightened > 0) {
    sink(rocksdb_env::InfoLogSeverity::kWarning,
         absl::StrCat("barrier store ", path, ": ", tightened,
                      " files and directories were open to group or "
                      "others; made owner-only"));
  }
  db_options.info_log = rocksdb_env::NewInfoLog(sink);
  std::shared_ptr<rocksdb::FileSystem> files =
      rocksdb_env::NewOwnerOnlyFileSystem(nullptr);
  if (store->groups_commits()) {
    WalTurns* turns = store->wal_turns_.get();
    files = std::make_shared<WalSyncWatch>(
        std::move(files), [turns] { turns->NewestWalSyncStarts(); });
  }
  store->env_ = rocksdb::NewCompositeEnv(std::move(files));
  db_options.env = store->env_.get();
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
  // Every commit (and every value read) of the callers so far is in
  // RocksDB's WAL already: one sync makes them all durable, and none is
  // needed if nothing was written since the last sync.
  absl::Status status = failure();
  if (status.ok() && db_->GetLatestSequenceNumber() > synced_sequence_) {
    // Before the turn: a slow disk in benchmarks (sleep) delays the sync as
    // a slow fsync does, while commits go on.
    status = failpoint::Eval("barrier.before_synced_commit");
    if (status.ok()) status = SyncTurn();
    if (!status.ok()) {
      Stop(status);
      status = failure();
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

absl::Status RocksDbBarrierStore::SyncTurn() {
  // No commit writes until RocksDB has checked the WAL file's writes (the
  // turn ends when its fsync starts); one that failed stopped the store.
  wal_turns_->BeginSync();
  absl::Cleanup end_turn = [this] { wal_turns_->EndSync(); };
  if (absl::Status stopped = failure(); !stopped.ok()) return stopped;
  // No commit is under way: everything up to this sequence number is in
  // the WAL, and this sync covers it.
  const rocksdb::SequenceNumber sequence = db_->GetLatestSequenceNumber();
  rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) return FromRocks(s, "sync of the WAL");
  synced_sequence_ = sequence;
  return absl::OkStatus();
}

void RocksDbBarrierStore::Stop(const absl::Status& cause) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (!failure_.ok()) return;
  failure_ = absl::UnavailableError(absl::StrCat(
      "barrier store stopped after a failed write or sync (restart the "
      "participant): ",
      cause.ToString()));
}

absl::Status RocksDbBarrierStore::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
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
