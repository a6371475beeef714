#include "tcc/wal/rocksdb_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "internal/rocksdb_keys.h"
#include "internal/txn_rules.h"
#include "internal/wal_file_check.h"
#include "record_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/rocksdb_env/owner_only_files.h"

namespace tcc::wal {
namespace {

using internal::StoredSummary;
namespace keys = internal::keys;

constexpr char kMarkerName[] = "TCC_WAL";
// RocksDB's WAL buffer (Options::writable_file_max_buffer_size). The writer
// empties it with FlushWAL after every group, so a group whose batch fits in
// half of it stays in the buffer during Write and reaches the file only in
// FlushWAL, which takes turns with the syncs (io_mu_). A bigger group may be
// written to the file inside Write: it takes its turn for the Write too (a
// sync after a failed write to the file would make RocksDB assert).
constexpr size_t kWalBufferBytes = 1 << 20;
// Values this large and larger are kept in blob files (see Open): a
// registration with a few KiB of payloads; the small records stay inline.
constexpr uint64_t kBlobMinBytes = 4096;
constexpr uint64_t kBlobFileBytes = 64 << 20;
constexpr char kMarkerText[] = "tccd write-ahead log; the database is in db/\n";

constexpr char kNoSpace[] = "no space left on device";

// The one mapping of RocksDB's statuses for the log: corruption is
// DATA_LOSS, a full disk RESOURCE_EXHAUSTED, any other failure UNAVAILABLE.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "WAL: ", std::string(what), ": ", kNoSpace, " (", s.ToString(), ")"));
  }
  std::string message =
      absl::StrCat("WAL: ", std::string(what), ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsNotFound()) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

// The same for a system call's errno.
absl::Status FromErrno(int err, std::string_view what) {
  if (err == ENOSPC) {
    return absl::ResourceExhaustedError(
        absl::StrCat("WAL: ", std::string(what), ": ", kNoSpace));
  }
  return absl::UnavailableError(
      absl::StrCat("WAL: ", std::string(what), ": ", std::strerror(err)));
}

// Writes a small file and syncs it and its directory.
absl::Status WriteSyncedFile(const std::filesystem::path& path,
                             std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return FromErrno(errno, "can't create " + path.string());
  int err = 0;
  const ssize_t written = ::write(fd, text.data(), text.size());
  if (written < 0) {
    err = errno;
  } else if (static_cast<size_t>(written) < text.size()) {
    err = ENOSPC;  // a short write of a few bytes: the disk is full
  } else if (::fsync(fd) != 0) {
    err = errno;
  }
  ::close(fd);
  if (err != 0) return FromErrno(err, "can't write " + path.string());
  const int dir = ::open(path.parent_path().c_str(), O_RDONLY);
  if (dir < 0 || ::fsync(dir) != 0) {
    err = errno;
    if (dir >= 0) ::close(dir);
    return FromErrno(err, "can't sync " + path.parent_path().string());
  }
  ::close(dir);
  return absl::OkStatus();
}

// Reads one of the counters stored under m/ (owner epoch, deduplication
// horizon, live bytes); 0 when the key is absent (a new log). Only absent
// is 0: a read error or a value that is not exactly one u64 fails, because
// a counter started again from 0 would go back (DESIGN.md section 7).
absl::StatusOr<uint64_t> ReadCounter(rocksdb::DB& db, const char* key) {
  std::string value;
  const rocksdb::Status got = db.Get(rocksdb::ReadOptions(), key, &value);
  if (got.IsNotFound()) return 0;
  if (!got.ok()) return FromRocks(got, absl::StrCat("reading ", key));
  std::string_view in = value;
  uint64_t v = 0;
  if (!internal::GetU64(in, v) || !in.empty()) {
    return absl::DataLossError(absl::StrCat("WAL: stored ", key, " holds ",
                                            value.size(),
                                            " bytes, not an 8-byte counter"));
  }
  return v;
}

std::string U64Value(uint64_t v) {
  std::string out;
  internal::PutU64(out, v);
  return out;
}

// True when two summaries say the same (the counts are not part of them).
bool SameSummary(const TxnSummary& a, const TxnSummary& b) {
  return a.gid == b.gid && a.state == b.state && a.decision == b.decision &&
         a.content_hash == b.content_hash && a.revision == b.revision &&
         a.created_at_ms == b.created_at_ms &&
         a.registered_at_ms == b.registered_at_ms &&
         a.finished_at_ms == b.finished_at_ms &&
         a.participants == b.participants && a.compacted == b.compacted;
}

// Where the memtable keeps an insert hint (the position of the last insert
// of the same prefix): the records of one gid ("r/<gid>/", inserted in seq
// order) and each time index ("o/", "u/", "f/", "c/", inserted in about time
// order). A key lands next to the previous one of its prefix, so the skiplist
// insert starts there instead of searching from the top: with many gids
// appending at once this was most of the writer's CPU per append. Only the
// insert position is affected, never what is stored or read.
//
// Off while RocksDB replays its WAL at open: the replay inserts each batch's
// keys in the order they were written, which the skiplist's own last-insert
// position already serves, and a hint for every gid replayed (most have a
// record or two there) only cost a hint each (about 10% more CPU to reopen
// and scan 100,000 unfinished transactions). SetEnabled(true) after the open.
class InsertHintPrefix final : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "tcc.wal.InsertHintPrefix"; }
  void SetEnabled(bool enabled) { enabled_.store(enabled); }
  bool InDomain(const rocksdb::Slice& key) const override {
    if (!enabled_.load(std::memory_order_relaxed)) return false;
    if (key.size() < 3 || key[1] != '/') return false;
    switch (key[0]) {
      case 'r':
        return std::memchr(key.data() + 2, '/', key.size() - 2) != nullptr;
      case 'o':
      case 'u':
      case 'f':
      case 'c':
        return true;
      default:
        return false;
    }
  }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    if (key[0] != 'r') return rocksdb::Slice(key.data(), 2);
    const char* end = static_cast<const char*>(
        std::memchr(key.data() + 2, '/', key.size() - 2));
    return rocksdb::Slice(key.data(), end - key.data() + 1);
  }

 private:
  std::atomic<bool> enabled_{false};
};

// A summary as the writer sees it: record_count and record_bytes exact (not
// as last stored), and the size of its stored encoding for byte counts.
struct SummaryEntry {
  StoredSummary stored;
  size_t encoded_size = 0;
};

// Adds the record under `it` (a key of `gid` whose prefix is `prefix_size`
// long) to the exact counts the writer keeps.
absl::Status CountRecord(const rocksdb::Iterator& it, size_t prefix_size,
                         std::string_view gid, StoredSummary& counts) {
  std::string_view seq_bytes = it.key().ToStringView().substr(prefix_size);
  uint64_t seq = 0;
  if (!internal::GetU64(seq_bytes, seq) || !seq_bytes.empty()) {
    return absl::DataLossError(
        absl::StrCat("WAL: malformed record key of gid ", std::string(gid)));
  }
  counts.record_count = std::max(counts.record_count, seq + 1);
  counts.record_bytes += it.key().size() + it.value().size();
  return absl::OkStatus();
}

}  // namespace

// One unit of work for the writer thread. Most are appends; an approval is
// behind a pointer so that moving an append through the queue stays cheap.
struct WorkItem {
  // kWarm: summaries the recovery scan read, for the writer's index (writes
  // nothing; see ScanUnfinished). kWarmEnd: that scan is over.
  enum class Kind { kAppend, kApproval, kEpoch, kRetention, kWarm, kWarmEnd };
  Kind kind = Kind::kAppend;
  bool durable = true;
  AppendRequest append;
  std::unique_ptr<Approval> approval;  // kApproval
  std::vector<std::pair<std::string, internal::RetentionStep>> removals;
  std::vector<std::pair<std::string, SummaryEntry>> warm;  // kWarm
  uint64_t* epoch_out = nullptr;  // kEpoch: where the new epoch goes
  AppendDone done;
};

// A written durable item waiting for the syncer: all it needs of the item.
struct SyncWaiter {
  AppendDone done;
  bool append = false;  // counts as a synced append
};

class RocksDbLog::Impl {
 public:
  explicit Impl(RocksDbLogOptions options) : options_(std::move(options)) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      sync_stop_ = true;
    }
    sync_cv_.notify_all();
    if (syncer_.joinable()) syncer_.join();
    if (db_ != nullptr) {
      (void)db_->Close();  // a frozen or failed disk may refuse; nothing to do
    }
    db_.reset();
  }

  absl::Status Open();
  void Enqueue(WorkItem item);
  absl::StatusOr<TxnLog> Read(std::string_view gid);
  absl::StatusOr<Approval> ReadApproval(std::string_view id);
  absl::StatusOr<ListPage> List(const ListQuery& query);
  absl::Status ScanUnfinished(const std::function<absl::Status(TxnLog)>& visit);
  absl::StatusOr<uint64_t> TakeOwnerEpoch();
  absl::Status RunRetention(int64_t now_ms);
  LogStats Stats() const;
  absl::Status failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  absl::Status failure_cause() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_cause_;
  }
  double MeanGroupSize() const {
    const uint64_t syncs = syncs_.load();
    return syncs == 0 ? 0.0
                      : static_cast<double>(synced_appends_.load()) / syncs;
  }
  int64_t horizon() const { return horizon_.load(); }
  // A DATA_LOSS read stops the log (see RocksDbLog::Read); `result` is
  // returned as it is.
  template <typename Result>
  Result StopIfCorrupt(Result result) {
    absl::Status s;
    if constexpr (std::is_same_v<Result, absl::Status>) {
      s = result;
    } else {
      s = result.status();
    }
    if (absl::IsDataLoss(s)) {
      std::vector<WorkItem> none;
      FailStop(s, none);
    }
    return result;
  }

 private:
  // What the writer knows of one gid: whether the log holds it and, if so,
  // its summary with exact counts.
  struct IndexEntry {
    bool present = false;
    SummaryEntry summary;  // when present
  };

  // The writer's view of the state while it builds one group. Summaries are
  // changed in index_ directly: an item is checked in full before it changes
  // anything, and a group whose write fails stops the log for good.
  struct GroupView {
    std::map<std::string, std::optional<Approval>> approvals;
    // Gids whose index_ entries are dropped after the group unless they are
    // (again) present and unfinished: entries loaded absent or final, and
    // transactions this group finished or forgot.
    std::vector<std::string> settled;
    int64_t live_bytes = 0;
    int64_t unfinished = 0;
    int64_t horizon = 0;
    uint64_t owner_epoch = 0;
    // The earliest registered_at_ms of the group's registrations (for
    // Stats' seek: registered_since_stats_ms_).
    int64_t oldest_registered_ms = std::numeric_limits<int64_t>::max();
    // One iterator for every summary the group loads, made on first use:
    // only the writer writes, so what it sees is the log as of the last
    // group, and a gid this group changed is in index_, never loaded again.
    std::unique_ptr<rocksdb::Iterator> records;
  };

  // Reads the data directory's format version (Open, before the threads
  // start). A new log, or one of an older version this build reads, is
  // marked kFormatVersion, synced, before anything of that version is
  // written; see the definition for why upgrading an old one is safe.
  absl::Status CheckFormatVersion(bool had_db);
  void WriterLoop();
  void SyncerLoop();
  void ProcessGroup(std::vector<WorkItem>& group);
  absl::Status ApplyItem(WorkItem& item, GroupView& view,
                         rocksdb::WriteBatch& batch);
  absl::Status ApplyAppend(const AppendRequest& request, GroupView& view,
                           rocksdb::WriteBatch& batch);
  absl::Status ApplyApproval(const Approval& approval, GroupView& view,
                             rocksdb::WriteBatch& batch);
  absl::Status ApplyRemovals(const WorkItem& item, GroupView& view,
                             rocksdb::WriteBatch& batch);
  // The writer's entry for `gid`, loaded from the database on first use.
  absl::StatusOr<IndexEntry*> FindSummary(GroupView& view,
                                          const std::string& gid);
  absl::Status LoadSummary(GroupView& view, const std::string& gid,
                           IndexEntry& entry);
  // Drops the entries the group settled, and all when there are too many.
  void Settle(GroupView& view);
  // kWarm and kWarmEnd.
  void ApplyWarm(WorkItem& item);
  absl::StatusOr<std::optional<Approval>> ViewApproval(GroupView& view,
                                                       const std::string& id);
  // Stops the log: completes everything written or queued, then `own`
  // (WorkItems or SyncWaiters), with the failure.
  template <typename Items>
  void FailStop(absl::Status status, Items& own);

  // `encoded_size`, when given, gets the size of the stored summary.
  absl::StatusOr<std::optional<StoredSummary>> GetSummary(
      const rocksdb::ReadOptions& ro, std::string_view gid,
      size_t* encoded_size = nullptr);
  // `records`, when given, is an iterator with the same read options,
  // reused (the scan reads thousands of transactions). `warm`, when given,
  // gets the summary as the writer's index holds it (exact counts), unless
  // the summary is compacted (then warm->encoded_size stays 0).
  absl::StatusOr<TxnLog> ReadTxn(const rocksdb::ReadOptions& ro,
                                 std::string_view gid,
                                 rocksdb::Iterator* records = nullptr,
                                 SummaryEntry* warm = nullptr);
  // Runs `item` through the writer and waits for it.
  absl::Status SubmitAndWait(WorkItem item);
  // A warning of the log's own, to the info log's sink (or stderr).
  void Warn(const std::string& line) const;

  const RocksDbLogOptions options_;
  std::unique_ptr<rocksdb::Env> env_;  // outlives db_
  std::unique_ptr<rocksdb::DB> db_;
  std::filesystem::path db_dir_;

  // Held around every flush and sync of RocksDB's WAL; taken before mu_.
  std::mutex io_mu_;
  // The writer's index of unfinished transactions (and, during a group, of
  // every gid it touched), so that an append reads nothing from RocksDB
  // (writer thread only). The records and the summaries in RocksDB stay the
  // truth: an entry not here is loaded from them.
  static constexpr size_t kMaxIndexed = 1 << 18;
  std::unordered_map<std::string, IndexEntry> index_;
  // Warming the index from recovery scans (ScanUnfinished). A scan counts
  // itself in warming_scans_ before it takes its snapshot; while any does,
  // Settle notes every gid it drops in dropped_while_warming_ (and a clear
  // of the whole index in warm_cleared_), and a warm entry for such a gid
  // is not taken: the writer may have changed it after the snapshot. An
  // entry already in the index is newer than any snapshot and stays.
  std::atomic<int> warming_scans_{0};
  std::unordered_set<std::string> dropped_while_warming_;  // writer only
  bool warm_cleared_ = false;                              // writer only
  // Reused by the writer for every group, so that appends allocate less.
  rocksdb::WriteBatch batch_;
  std::string key_buf_;
  std::string value_buf_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkItem> queue_;
  // One writer at a time: the writer thread, or an appender that found the
  // log idle and writes its own append (Enqueue). Guarded by mu_; whoever
  // set it runs ProcessGroup and takes what queued meanwhile after.
  bool writer_busy_ = false;
  // The syncer has durable items in hand (guarded by mu_): an appender does
  // not write inline then, since the write would wait for that sync's
  // io_mu_ on the appender's thread.
  bool sync_running_ = false;
  std::vector<WorkItem> here_;  // the inline writer's group (writer only)
  bool stop_ = false;
  absl::Status failure_;
  absl::Status failure_cause_;  // what made failure_, with its own code
  std::thread writer_;
  // Written durable items waiting for the syncer (guarded by mu_).
  std::vector<SyncWaiter> syncing_;
  std::condition_variable sync_cv_;
  bool sync_stop_ = false;
  std::thread syncer_;

  // Written by the writer only (after its write succeeded); read anywhere.
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> unfinished_{0};
  std::atomic<int64_t> horizon_{0};
  std::atomic<uint64_t> owner_epoch_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> synced_appends_{0};
  std::atomic<uint64_t> buffered_appends_{0};

  // Where Stats looks for the oldest unfinished registration. Finishing a
  // transaction deletes its "u/" key, and until compaction drops them a
  // Seek("u/") steps over every such tombstone at the index's front: 5 ms a
  // call after 35,000 transactions, every 250 ms (the age gauge). So Stats
  // seeks from stats_from_ms_, a lower bound of the index's first key: it
  // starts at the front, Stats raises it to the key it finds. The writer, once
  // a registration is written, lowers registered_since_stats_ms_, which Stats
  // folds in before it makes its iterator: a registration written before that
  // is seen, a later one is folded in by the next Stats. Keys registered out of
  // time order (a clock stepping back) are thus found.
  mutable std::mutex stats_mu_;
  mutable int64_t stats_from_ms_ = std::numeric_limits<int64_t>::min();
  mutable std::atomic<int64_t> registered_since_stats_ms_{
      std::numeric_limits<int64_t>::max()};
};

absl::Status RocksDbLog::Impl::Open() {
  namespace fs = std::filesystem;
  if (options_.data_dir.empty()) {
    return absl::InvalidArgumentError("WAL: data_dir is empty");
  }
  const fs::path data_dir(options_.data_dir);
  db_dir_ = data_dir / "db";
  if (std::error_code ec = rocksdb_env::CreateOwnerOnlyDirectories(data_dir);
      ec) {
    return FromErrno(ec.value(), "can't create " + data_dir.string());
  }
  // The log holds every payload: nothing in it is for group or others. A
  // data dir left looser (by an older tccd) is tightened, and said so.
  int tightened = 0;
  if (std::error_code ec = rocksdb_env::RestrictToOwner(data_dir, &tightened);
      ec) {
    return FromErrno(ec.value(),
                     "can't make " + data_dir.string() + " owner-only");
  }
  if (tightened > 0) {
    Warn(absl::StrCat("WAL: ", tightened, " files and directories in ",
                      data_dir.string(),
                      " were open to group or others; made owner-only"));
  }
  const fs::path marker = data_dir / kMarkerName;
  const bool had_marker = fs::exists(marker);
  const bool had_db = fs::exists(db_dir_ / "CURRENT");
  if (had_marker && !had_db) {
    return absl::DataLossError(
        absl::StrCat("WAL: ", data_dir.string(), " held a log (", kMarkerName,
                     " exists) but its database ", db_dir_.string(),
                     " is missing; refusing to start over on an empty log"));
  }
  if (had_db) {
    if (absl::Status s = internal::CheckWalFiles(db_dir_.string()); !s.ok()) {
      return s;
    }
  }

  rocksdb::Options options;
  options.create_if_missing = !had_db;
  options.error_if_exists = !had_db;
  options.paranoid_checks = true;
  // Safe only after CheckWalFiles: see wal_file_check.h.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // The writer writes, then flushes the WAL (the "written" point for
  // buffered appends), then syncs once per group (the durable point).
  options.manual_wal_flush = true;
  // No LOG file in the data dir (a full disk made RocksDB's LOG writer
  // abort the process): its warnings and errors go to our sink.
  options.info_log = rocksdb_env::NewInfoLog(options_.info_log);
  // Where RocksDB's WAL buffer moves to the file inside Write: see
  // kWalBufferBytes.
  options.writable_file_max_buffer_size = kWalBufferBytes;
  options.max_background_jobs = 2;
  // Memtables of 32 MiB (RocksDB's default is 64): what a backlog's records
  // leave in memory after it drained is bounded by one of them, and the
  // records reach table files sooner (they are kept there, retention
  // decides when they go).
  options.write_buffer_size = 32 << 20;
  auto insert_hints = std::make_shared<InsertHintPrefix>();
  options.memtable_insert_with_hint_prefix_extractor = insert_hints;
  // Whole-key Bloom filters in the memtable and the tables: the writer
  // looks up the summary of every gid it does not hold in memory, and for a
  // new gid (every registration) the answer is "not there", which without
  // a filter takes a full memtable search and a probe of every table.
  options.memtable_prefix_bloom_size_ratio = 0.02;
  options.memtable_whole_key_filtering = true;
  // No compression in the first levels, where a transaction's records
  // live for the seconds it runs and are flushed and compacted soon after
  // (the flush of a crashed process's memtable at open, too): compressing
  // them cost about 6% of opening the log and most of each compaction.
  // Finished history that reaches the lower levels stays compressed.
  options.compression_per_level = {
      rocksdb::kNoCompression,     rocksdb::kNoCompression,
      rocksdb::kSnappyCompression, rocksdb::kSnappyCompression,
      rocksdb::kSnappyCompression, rocksdb::kSnappyCompression,
      rocksdb::kSnappyCompression};
  // Values of kBlobMinBytes and more (registrations with large payloads)
  // go to blob files when a memtable is flushed, and the tables keep a
  // reference: compactions, which rewrite the tables level after level,
  // then move a few bytes per record instead of its payloads (RocksDB's
  // integrated BlobDB; WiscKey's key-value separation). The WAL is written
  // as before, so durability is unchanged. No blob garbage collection: it
  // would copy live blobs out of the oldest files again, and records go
  // roughly in the order they came (retention), so a blob file goes as a
  // whole once no table refers to it; a transaction that stays unfinished
  // keeps its file (kBlobFileBytes) until it finishes and is forgotten.
  options.enable_blob_files = true;
  options.min_blob_size = kBlobMinBytes;
  options.blob_file_size = kBlobFileBytes;
  options.enable_blob_garbage_collection = false;
  rocksdb::BlockBasedTableOptions table_options;
  // XXH3 for the tables' block checksums: Debian's RocksDB is built
  // portable, so its CRC32c is the table-driven one (13% of tccd's CPU with
  // 16 KiB payloads); tables written before keep their CRC32c, read as such.
  table_options.checksum = rocksdb::kXXH3;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  // Every file 0600 and directory 0700, over the injected file system if
  // any; the process-wide default Env is left as it is.
  env_ = rocksdb::NewCompositeEnv(
      rocksdb_env::NewOwnerOnlyFileSystem(options_.file_system));
  options.env = env_.get();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(options, db_dir_.string(), &raw);
  if (!opened.ok()) {
    return FromRocks(opened, absl::StrCat("can't open ", db_dir_.string()));
  }
  db_.reset(raw);
  insert_hints->SetEnabled(true);  // the WAL is replayed

  if (absl::Status s = CheckFormatVersion(had_db); !s.ok()) return s;
  if (!had_marker) {
    if (absl::Status s = WriteSyncedFile(marker, kMarkerText); !s.ok()) {
      return s;
    }
  }

  absl::StatusOr<uint64_t> epoch = ReadCounter(*db_, keys::kOwnerEpoch);
  if (!epoch.ok()) return epoch.status();
  absl::StatusOr<uint64_t> horizon = ReadCounter(*db_, keys::kDedupHorizon);
  if (!horizon.ok()) return horizon.status();
  absl::StatusOr<uint64_t> live_bytes = ReadCounter(*db_, keys::kLiveBytes);
  if (!live_bytes.ok()) return live_bytes.status();
  owner_epoch_ = *epoch;
  horizon_ = static_cast<int64_t>(*horizon);
  live_bytes_ = static_cast<int64_t>(*live_bytes);
  int64_t unfinished = 0;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("u/"); it->Valid() && it->key().starts_with("u/"); it->Next()) {
    ++unfinished;
  }
  if (absl::Status s = FromRocks(it->status(), "counting unfinished");
      !s.ok()) {
    return s;
  }
  unfinished_ = unfinished;
  syncer_ = std::thread([this] { SyncerLoop(); });
  writer_ = std::thread([this] { WriterLoop(); });
  return absl::OkStatus();
}

void RocksDbLog::Impl::Warn(const std::string& line) const {
  if (options_.info_log) {
    options_.info_log(rocksdb_env::InfoLogSeverity::kWarning, line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

absl::Status RocksDbLog::Impl::CheckFormatVersion(bool had_db) {
  std::string version;
  rocksdb::Status got =
      db_->Get(rocksdb::ReadOptions(), keys::kFormatVersion, &version);
  if (got.IsNotFound()) {
    if (had_db) {
      return absl::DataLossError(
          absl::StrCat("WAL: ", db_dir_.string(),
                       " has no format version: not a tccd log, or damaged"));
    }
  } else if (!got.ok()) {
    return FromRocks(got, "reading the format version");
  } else if (version.size() != 1 ||
             static_cast<uint8_t>(version[0]) <
                 internal::kOldestFormatVersion ||
             static_cast<uint8_t>(version[0]) > internal::kFormatVersion) {
    return absl::DataLossError(absl::StrCat(
        "WAL: ", db_dir_.string(), " has unknown format version ",
        version.empty() ? -1 : static_cast<uint8_t>(version[0]),
        "; this build reads versions ", internal::kOldestFormatVersion, " to ",
        internal::kFormatVersion));
  } else if (static_cast<uint8_t>(version[0]) == internal::kFormatVersion) {
    return absl::OkStatus();
  }
  // A new log, or an older version: from now on this build appends values
  // of kFormatVersion. Safe for an old log because every value carries its
  // own version and the codec reads the old ones as they are (nothing is
  // rewritten), and because the mark is durable before any new value is
  // written: a crash leaves either the old mark over old values or the new
  // mark over old values, both readable. It is what makes a build that only
  // reads the old version refuse this log at open ("unknown format
  // version") instead of failing on the first new record in the middle of
  // its recovery scan; going back to such a build is not supported.
  rocksdb::WriteBatch batch;
  batch.Put(keys::kFormatVersion,
            std::string(1, static_cast<char>(internal::kFormatVersion)));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (absl::Status s =
          FromRocks(db_->Write(wo, &batch), "writing the format version");
      !s.ok()) {
    return s;
  }
  return FromRocks(db_->FlushWAL(true), "syncing the WAL");
}

void RocksDbLog::Impl::Enqueue(WorkItem item) {
  absl::Status refused;
  bool write_here = false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      refused = failure_;
    } else if (stop_) {
      refused = absl::UnavailableError("WAL: the log is closing");
    } else if (queue_.size() >= options_.max_queued &&
               item.kind == WorkItem::Kind::kAppend) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "WAL: ", queue_.size(), " appends are waiting; retry later"));
    } else if (item.kind == WorkItem::Kind::kAppend && !writer_busy_ &&
               queue_.empty() && !sync_running_) {
      // Nobody writes, nothing waits, no sync holds the WAL file: this
      // thread writes its own append (no hand-off to the writer thread).
      writer_busy_ = true;
      write_here = true;
    } else {
      queue_.push_back(std::move(item));
      // Whoever writes now takes the queue when done.
      wake = !writer_busy_;
    }
  }
  if (!refused.ok()) {
    // A stopped log has no index to warm: the scan is over for it.
    if (item.kind == WorkItem::Kind::kWarmEnd) warming_scans_.fetch_sub(1);
    if (item.done) item.done(std::move(refused));
    return;
  }
  if (write_here) {
    here_.push_back(std::move(item));
    ProcessGroup(here_);
    here_.clear();
    bool wake_writer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writer_busy_ = false;
      // The writer thread waits for the queue, or, when the log closes, for
      // this write to end: it was told to stop while this thread wrote.
      wake_writer = !queue_.empty() || stop_;
    }
    if (wake_writer) cv_.notify_one();
    return;
  }
  if (wake) cv_.notify_one();
}

void RocksDbLog::Impl::WriterLoop() {
  // Swapped with queue_: each keeps its capacity, so enqueueing rarely
  // allocates.
  std::vector<WorkItem> group;
  while (true) {
    group.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this] { return !writer_busy_ && (stop_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, nothing left
      group.swap(queue_);
      if (!failure_.ok()) {
        const absl::Status failure = failure_;
        lock.unlock();
        for (WorkItem& item : group) {
          if (item.done) item.done(failure);
        }
        continue;
      }
      writer_busy_ = true;
    }
    ProcessGroup(group);
    std::lock_guard<std::mutex> lock(mu_);
    writer_busy_ = false;
  }
}

template <typename Items>
void RocksDbLog::Impl::FailStop(absl::Status status, Items& own) {
  // Corrupt synced state stays DATA_LOSS (a daemon exits 3 on it).
  absl::Status failure(
      absl::IsDataLoss(status) ? absl::StatusCode::kDataLoss
                               : absl::StatusCode::kUnavailable,
      absl::StrCat("WAL failed and stopped (fail-stop): ", status.message()));
  std::vector<WorkItem> queued;
  std::vector<SyncWaiter> unsynced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) {
      failure_ = failure;
      failure_cause_ = std::move(status);
    }
    failure = failure_;
    queued.swap(queue_);
    unsynced.swap(syncing_);
  }
  for (SyncWaiter& waiter : unsynced) {
    if (waiter.done) waiter.done(failure);
  }
  for (auto& item : own) {
    if (item.done) item.done(failure);
  }
  for (WorkItem& item : queued) {
    if (item.done) item.done(failure);
  }
}

absl::StatusOr<RocksDbLog::Impl::IndexEntry*> RocksDbLog::Impl::FindSummary(
    GroupView& view, const std::string& gid) {
  auto [it, inserted] = index_.try_emplace(gid);
  if (!inserted) return &it->second;
  if (absl::Status s = LoadSummary(view, gid, it->second); !s.ok()) {
    index_.erase(it);
    return s;
  }
  if (!it->second.present || IsFinal(it->second.summary.stored.summary.state)) {
    view.settled.push_back(gid);
  }
  return &it->second;
}

absl::Status RocksDbLog::Impl::LoadSummary(GroupView& view,
                                           const std::string& gid,
                                           IndexEntry& entry) {
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), keys::Summary(gid), &value);
  if (s.IsNotFound()) {
    entry.present = false;
    return absl::OkStatus();
  }
  if (!s.ok()) return FromRocks(s, "reading a summary");
  absl::StatusOr<StoredSummary> stored = internal::DecodeSummary(value);
  if (!stored.ok()) return stored.status();
  entry.summary = SummaryEntry{*std::move(stored), value.size()};
  // The stored counts are as of the summary's last write; the records
  // themselves say how many there are now.
  StoredSummary& counts = entry.summary.stored;
  counts.record_count = 0;
  counts.record_bytes = 0;
  const std::string prefix = keys::RecordPrefix(gid);
  if (view.records == nullptr) {
    view.records.reset(db_->NewIterator(rocksdb::ReadOptions()));
  }
  rocksdb::Iterator* it = view.records.get();
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (absl::Status s = CountRecord(*it, prefix.size(), gid, counts);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status st = FromRocks(it->status(), "reading records"); !st.ok()) {
    return st;
  }
  entry.present = true;
  return absl::OkStatus();
}

void RocksDbLog::Impl::Settle(GroupView& view) {
  const bool warming = warming_scans_.load() > 0;
  for (const std::string& gid : view.settled) {
    auto it = index_.find(gid);
    if (it != index_.end() &&
        (!it->second.present ||
         IsFinal(it->second.summary.stored.summary.state))) {
      index_.erase(it);
      if (warming) dropped_while_warming_.insert(gid);
    }
  }
  view.settled.clear();
  // Bounded: past this many drops during a long scan, stop warming (it is
  // never required) rather than remember them all.
  if (dropped_while_warming_.size() > kMaxIndexed) {
    dropped_while_warming_.clear();
    warm_cleared_ = true;
  }
  if (index_.size() > kMaxIndexed) {
    index_.clear();
    if (warming) warm_cleared_ = true;
  }
}

void RocksDbLog::Impl::ApplyWarm(WorkItem& item) {
  if (item.kind == WorkItem::Kind::kWarmEnd) {
    // Counted down only now: every Settle before this point has noted its
    // drops for the scan's warm entries, all of which came before. A scan
    // that starts later takes its snapshot after every drop noted so far.
    if (warming_scans_.fetch_sub(1) == 1) {
      dropped_while_warming_.clear();
      warm_cleared_ = false;
    }
    return;
  }
  for (auto& [gid, entry] : item.warm) {
    // Half the index at most: warming must not make Settle clear it.
    if (warm_cleared_ || index_.size() >= kMaxIndexed / 2) return;
    if (dropped_while_warming_.count(gid) != 0) continue;
    auto [it, inserted] = index_.try_emplace(std::move(gid));
    if (inserted) {
      it->second.present = true;
      it->second.summary = std::move(entry);
    }
  }
}

absl::StatusOr<std::optional<Approval>> RocksDbLog::Impl::ViewApproval(
    GroupView& view, const std::string& id) {
  auto it = view.approvals.find(id);
  if (it != view.approvals.end()) return it->second;
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), keys::Approval(id), &value);
  std::optional<Approval> approval;
  if (s.ok()) {
    absl::StatusOr<Approval> decoded = internal::DecodeApproval(value);
    if (!decoded.ok()) return decoded.status();
    approval = *std::move(decoded);
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "reading an approval");
  }
  view.approvals.emplace(id, approval);
  return approval;
}

absl::Status RocksDbLog::Impl::ApplyAppend(const AppendRequest& request,
                                           GroupView& view,
                                           rocksdb::WriteBatch& batch) {
  absl::StatusOr<IndexEntry*> found = FindSummary(view, request.gid);
  if (!found.ok()) return found.status();
  IndexEntry& entry = **found;
  internal::ApprovalLookup lookup =
      [&](const std::string& id) -> absl::StatusOr<Approval> {
    absl::StatusOr<std::optional<Approval>> a = ViewApproval(view, id);
    if (!a.ok()) return a.status();
    if (!a->has_value()) {
      return absl::NotFoundError(absl::StrCat("approval ", id));
    }
    return **a;
  };
  absl::StatusOr<internal::AppendPlan> plan = internal::PlanAppend(
      request, entry.present ? &entry.summary.stored.summary : nullptr, lookup);
  if (!plan.ok()) return plan.status();

  // Checked: from here on the append is applied, and nothing fails.
  StoredSummary& stored = entry.summary.stored;
  int64_t delta = 0;
  bool was_final = false;
  // The summary is written when it changes (or is new), not for every
  // record: a record alone only moves the counts, which the writer keeps
  // exact in memory and derives from the records after a restart.
  bool write_summary = true;
  if (entry.present) {
    was_final = IsFinal(stored.summary.state);
    write_summary =
        plan->summary_set && !SameSummary(stored.summary, plan->summary);
  } else {
    entry.present = true;
    entry.summary = SummaryEntry{};
    delta += static_cast<int64_t>(keys::SummarySize(request.gid));
  }
  for (const Record& record : request.records) {
    keys::RecordTo(key_buf_, request.gid, stored.record_count);
    value_buf_.clear();
    internal::EncodeRecordTo(record, value_buf_);
    batch.Put(key_buf_, value_buf_);
    const size_t bytes = key_buf_.size() + value_buf_.size();
    ++stored.record_count;
    stored.record_bytes += bytes;
    delta += static_cast<int64_t>(bytes);
  }
  if (plan->summary_set) stored.summary = std::move(plan->summary);
  const TxnSummary& next = stored.summary;
  if (plan->registers) {
    const std::string o = keys::TimeIndex('o', next.registered_at_ms, next.gid);
    const std::string u = keys::TimeIndex('u', next.registered_at_ms, next.gid);
    batch.Put(o, "");
    batch.Put(u, "");
    delta += static_cast<int64_t>(o.size() + u.size());
    ++view.unfinished;
    view.oldest_registered_ms =
        std::min(view.oldest_registered_ms, next.registered_at_ms);
  }
  if (!was_final && IsFinal(next.state)) {
    const std::string u = keys::TimeIndex('u', next.registered_at_ms, next.gid);
    const std::string f = keys::TimeIndex('f', next.finished_at_ms, next.gid);
    batch.Delete(u);
    batch.Put(f, "");
    delta += static_cast<int64_t>(f.size()) - static_cast<int64_t>(u.size());
    --view.unfinished;
    view.settled.push_back(request.gid);
  }
  if (write_summary) {
    const std::string summary =
        internal::EncodeSummary(next, stored.record_count, stored.record_bytes);
    delta += static_cast<int64_t>(summary.size()) -
             static_cast<int64_t>(entry.summary.encoded_size);
    entry.summary.encoded_size = summary.size();
    batch.Put(keys::Summary(request.gid), summary);
  }
  for (const Approval& used : plan->consumed) {
    const std::string value = internal::EncodeApproval(used);
    batch.Put(keys::Approval(used.approval_id), value);  // same size as before
    view.approvals[used.approval_id] = used;
  }
  view.live_bytes += delta;
  return absl::OkStatus();
}

absl::Status RocksDbLog::Impl::ApplyApproval(const Approval& approval,
                                             GroupView& view,
                                             rocksdb::WriteBatch& batch) {
  if (absl::Status s = internal::ValidateNewApproval(approval); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<Approval>> existing =
      ViewApproval(view, approval.approval_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat("approval ", approval.approval_id, " exists already"));
  }
  const std::string key = keys::Approval(approval.approval_id);
  const std::string value = internal::EncodeApproval(approval);
  batch.Put(key, value);
  view.approvals[approval.approval_id] = approval;
  view.live_bytes += static_cast<int64_t>(key.size() + value.size());
  return absl::OkStatus();
}

absl::Status RocksDbLog::Impl::ApplyRemovals(const WorkItem& item,
                                             GroupView& view,
                                             rocksdb::WriteBatch& batch) {
  // Load everything first, so that an error changes nothing.
  std::vector<IndexEntry*> entries;
  entries.reserve(item.removals.size());
  for (const auto& [gid, step] : item.removals) {
    absl::StatusOr<IndexEntry*> found = FindSummary(view, gid);
    if (!found.ok()) return found.status();
    entries.push_back(*found);
  }
  for (size_t i = 0; i < item.removals.size(); ++i) {
    const auto& [gid, step] = item.removals[i];
    IndexEntry& entry = *entries[i];
    if (!entry.present) continue;  // gone already
    StoredSummary& stored = entry.summary.stored;
    TxnSummary& s = stored.summary;
    if (!IsFinal(s.state)) continue;  // never an unfinished one
    const bool compact_only = step == internal::RetentionStep::kCompact;
    if (compact_only && s.compacted) continue;
    if (!s.compacted) {
      for (uint64_t seq = 0; seq < stored.record_count; ++seq) {
        batch.Delete(keys::Record(gid, seq));
      }
      view.live_bytes -= static_cast<int64_t>(stored.record_bytes);
    }
    const std::string old_index =
        keys::TimeIndex(s.compacted ? 'c' : 'f', s.finished_at_ms, gid);
    batch.Delete(old_index);
    view.live_bytes -= static_cast<int64_t>(old_index.size());
    view.live_bytes -= static_cast<int64_t>(entry.summary.encoded_size);
    if (compact_only) {
      const std::string c = keys::TimeIndex('c', s.finished_at_ms, gid);
      batch.Put(c, "");
      s.compacted = true;
      stored.record_bytes = 0;
      const std::string summary =
          internal::EncodeSummary(s, stored.record_count, stored.record_bytes);
      entry.summary.encoded_size = summary.size();
      batch.Put(keys::Summary(gid), summary);
      view.live_bytes += static_cast<int64_t>(c.size() + summary.size());
    } else {
      const std::string o = keys::TimeIndex('o', s.registered_at_ms, gid);
      batch.Delete(o);
      batch.Delete(keys::Summary(gid));
      view.live_bytes -=
          static_cast<int64_t>(o.size() + keys::SummarySize(gid));
      // Saturating: a created_at of INT64_MAX must not wrap.
      view.horizon = std::max(
          view.horizon, s.created_at_ms == std::numeric_limits<int64_t>::max()
                            ? s.created_at_ms
                            : s.created_at_ms + 1);
      entry.present = false;
      entry.summary = SummaryEntry{};
      view.settled.push_back(gid);
    }
  }
  return absl::OkStatus();
}

absl::Status RocksDbLog::Impl::ApplyItem(WorkItem& item, GroupView& view,
                                         rocksdb::WriteBatch& batch) {
  switch (item.kind) {
    case WorkItem::Kind::kAppend:
      return ApplyAppend(item.append, view, batch);
    case WorkItem::Kind::kApproval:
      return ApplyApproval(*item.approval, view, batch);
    case WorkItem::Kind::kEpoch:
      ++view.owner_epoch;
      *item.epoch_out = view.owner_epoch;
      batch.Put(keys::kOwnerEpoch, U64Value(view.owner_epoch));
      return absl::OkStatus();
    case WorkItem::Kind::kRetention:
      return ApplyRemovals(item, view, batch);
    case WorkItem::Kind::kWarm:
    case WorkItem::Kind::kWarmEnd:
      break;  // ProcessGroup's
  }
  return absl::InternalError("unknown work item");
}

void RocksDbLog::Impl::ProcessGroup(std::vector<WorkItem>& group) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!failure_.ok()) {  // the syncer failed while this group waited
      const absl::Status failure = failure_;
      lock.unlock();
      for (WorkItem& item : group) {
        if (item.done) item.done(failure);
      }
      return;
    }
  }
  GroupView view;
  view.live_bytes = live_bytes_.load();
  view.unfinished = unfinished_.load();
  view.horizon = horizon_.load();
  view.owner_epoch = owner_epoch_.load();
  rocksdb::WriteBatch& batch = batch_;
  batch.Clear();
  // Items accepted into the batch, and the ones refused (with why).
  std::vector<WorkItem*> accepted;
  accepted.reserve(group.size());
  std::vector<std::pair<WorkItem*, absl::Status>> refused;
  bool needs_sync = false;
  for (WorkItem& item : group) {
    if (item.kind == WorkItem::Kind::kWarm ||
        item.kind == WorkItem::Kind::kWarmEnd) {
      ApplyWarm(item);  // writes nothing, answers nobody
      continue;
    }
    // Each item's puts go in whole or not at all. ApplyItem checks
    // everything before it changes the view or the batch, so a refused item
    // left both as they were (the savepoint is a second guard).
    batch.SetSavePoint();
    absl::Status s = ApplyItem(item, view, batch);
    if (s.ok()) {
      (void)batch.PopSavePoint();
      accepted.push_back(&item);
      needs_sync = needs_sync || item.durable;
    } else {
      (void)batch.RollbackToSavePoint();
      refused.emplace_back(&item, std::move(s));
    }
  }
  for (auto& [item, status] : refused) {
    if (absl::IsDataLoss(status)) {
      // The writer read corrupt synced state: stop (nothing is written).
      FailStop(status, group);
      return;
    }
  }
  for (auto& [item, status] : refused) {
    if (item->done) item->done(std::move(status));
    item->done = nullptr;
  }
  if (accepted.empty()) {
    Settle(view);
    return;
  }

  if (view.live_bytes != live_bytes_.load()) {
    batch.Put(
        keys::kLiveBytes,
        U64Value(static_cast<uint64_t>(std::max<int64_t>(0, view.live_bytes))));
  }
  if (view.horizon != horizon_.load()) {
    batch.Put(keys::kDedupHorizon,
              U64Value(static_cast<uint64_t>(view.horizon)));
  }
  // The write goes to the memtable and the WAL's buffer, and may overlap
  // the syncer's sync. Moving the buffer to the file (FlushWAL) and syncing
  // take turns: once a flush failed, RocksDB's WAL writer must not be synced
  // (it asserts), so the syncer checks failure_ under io_mu_ first.
  absl::Status s = failure();
  if (s.ok()) s = failpoint::Eval("wal.before_write");
  if (s.ok()) {
    std::unique_lock<std::mutex> io(io_mu_, std::defer_lock);
    if (batch.GetDataSize() > kWalBufferBytes / 2) {
      io.lock();  // Write may write the file (kWalBufferBytes)
      s = failure();
    }
    if (s.ok()) {
      s = FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "write");
    }
    if (s.ok() && !io.owns_lock()) io.lock();
    if (s.ok()) s = failure();
    if (s.ok()) s = FromRocks(db_->FlushWAL(false), "write of the WAL");
    if (!s.ok()) {
      // Under io_mu_ whenever the file was written: before any next sync.
      FailStop(std::move(s), group);
      return;
    }
  }
  if (s.ok()) s = failpoint::Eval("wal.after_write");
  if (!s.ok()) {
    FailStop(std::move(s), group);
    return;
  }
  // Written: the index keeps the unfinished transactions for the next group.
  Settle(view);
  // Written: what readers see now. The durable items go to the syncer (the
  // syncer syncs while this thread writes the next group: one sync covers
  // every group written before it starts); buffered ones complete now.
  live_bytes_ = view.live_bytes;
  unfinished_ = view.unfinished;
  horizon_ = view.horizon;
  owner_epoch_ = view.owner_epoch;
  for (int64_t since = registered_since_stats_ms_.load();
       view.oldest_registered_ms < since &&
       !registered_since_stats_ms_.compare_exchange_weak(
           since, view.oldest_registered_ms);) {
  }
  if (needs_sync) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (WorkItem* item : accepted) {
        if (item->durable && item->done) {
          syncing_.push_back(SyncWaiter{std::move(item->done),
                                        item->kind == WorkItem::Kind::kAppend});
          item->done = nullptr;
        }
      }
    }
    sync_cv_.notify_one();
  }
  for (WorkItem* item : accepted) {
    if (!item->durable) {
      buffered_appends_.fetch_add(1);
      if (item->done) item->done(absl::OkStatus());
      item->done = nullptr;
    }
  }
}

void RocksDbLog::Impl::SyncerLoop() {
  // Swapped with syncing_: each keeps its capacity.
  std::vector<SyncWaiter> written;
  while (true) {
    written.clear();
    absl::Status failure;
    {
      std::unique_lock<std::mutex> lock(mu_);
      sync_running_ = false;
      sync_cv_.wait(lock, [this] { return sync_stop_ || !syncing_.empty(); });
      if (syncing_.empty()) return;  // stopping, nothing left
      written.swap(syncing_);
      failure = failure_;
      sync_running_ = true;
    }
    if (!failure.ok()) {
      for (SyncWaiter& waiter : written) {
        if (waiter.done) waiter.done(failure);
      }
      continue;
    }
    const int64_t sync_start = options_.now_us ? options_.now_us() : 0;
    {
      std::lock_guard<std::mutex> io(io_mu_);
      absl::Status s = this->failure();
      if (s.ok()) s = failpoint::Eval("wal.before_sync");
      if (s.ok()) s = FromRocks(db_->SyncWAL(), "sync of the WAL");
      if (s.ok()) s = failpoint::Eval("wal.after_sync");
      if (!s.ok()) {
        FailStop(std::move(s), written);
        continue;
      }
    }
    syncs_.fetch_add(1);
    uint64_t appends = 0;
    for (const SyncWaiter& waiter : written) appends += waiter.append ? 1 : 0;
    synced_appends_.fetch_add(appends);
    if (options_.on_sync && options_.now_us) {
      options_.on_sync(options_.now_us() - sync_start, appends);
    }
    {
      // The sync is over: the completions below may append (the next
      // records of the same transactions) and write them inline.
      std::lock_guard<std::mutex> lock(mu_);
      sync_running_ = false;
    }
    for (SyncWaiter& waiter : written) waiter.done(absl::OkStatus());
  }
}

absl::Status RocksDbLog::Impl::SubmitAndWait(WorkItem item) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  absl::Status result;
  item.done = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(m);
    result = std::move(s);
    finished = true;
    cv.notify_one();
  };
  Enqueue(std::move(item));
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return finished; });
  return result;
}

absl::StatusOr<uint64_t> RocksDbLog::Impl::TakeOwnerEpoch() {
  uint64_t epoch = 0;
  WorkItem item;
  item.kind = WorkItem::Kind::kEpoch;
  item.epoch_out = &epoch;
  if (absl::Status s = SubmitAndWait(std::move(item)); !s.ok()) return s;
  return epoch;
}

absl::StatusOr<std::optional<StoredSummary>> RocksDbLog::Impl::GetSummary(
    const rocksdb::ReadOptions& ro, std::string_view gid,
    size_t* encoded_size) {
  std::string value;
  rocksdb::Status s = db_->Get(ro, keys::Summary(gid), &value);
  if (s.IsNotFound()) return std::optional<StoredSummary>();
  if (!s.ok()) return FromRocks(s, "reading a summary");
  if (encoded_size != nullptr) *encoded_size = value.size();
  absl::StatusOr<StoredSummary> stored = internal::DecodeSummary(value);
  if (!stored.ok()) return stored.status();
  return std::optional<StoredSummary>(*std::move(stored));
}

absl::StatusOr<TxnLog> RocksDbLog::Impl::ReadTxn(const rocksdb::ReadOptions& ro,
                                                 std::string_view gid,
                                                 rocksdb::Iterator* records,
                                                 SummaryEntry* warm) {
  size_t encoded_size = 0;
  absl::StatusOr<std::optional<StoredSummary>> stored =
      GetSummary(ro, gid, &encoded_size);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("gid ", std::string(gid), " is not in the log"));
  }
  if ((*stored)->summary.compacted) warm = nullptr;
  if (warm != nullptr) {
    // As LoadSummary makes it: counts from the records themselves.
    warm->stored = **stored;
    warm->stored.record_count = 0;
    warm->stored.record_bytes = 0;
    warm->encoded_size = encoded_size;
  }
  TxnLog txn;
  txn.summary = std::move((*stored)->summary);
  if (txn.summary.compacted) return txn;
  const std::string prefix = keys::RecordPrefix(gid);
  std::unique_ptr<rocksdb::Iterator> own;
  rocksdb::Iterator* it = records;
  if (it == nullptr) {
    own.reset(db_->NewIterator(ro));
    it = own.get();
  }
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (warm != nullptr) {
      if (absl::Status s = CountRecord(*it, prefix.size(), gid, warm->stored);
          !s.ok()) {
        return s;
      }
    }
    absl::StatusOr<Record> record = internal::DecodeRecord(
        std::string_view(it->value().data(), it->value().size()));
    if (!record.ok()) {
      return absl::DataLossError(absl::StrCat("WAL: a record of gid ",
                                              std::string(gid), ": ",
                                              record.status().message()));
    }
    txn.records.push_back(*std::move(record));
  }
  if (absl::Status s = FromRocks(it->status(), "reading records"); !s.ok()) {
    return s;
  }
  return txn;
}

absl::StatusOr<TxnLog> RocksDbLog::Impl::Read(std::string_view gid) {
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.snapshot();
  return ReadTxn(ro, gid);
}

absl::StatusOr<Approval> RocksDbLog::Impl::ReadApproval(std::string_view id) {
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), keys::Approval(id), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrCat("approval ", std::string(id), " does not exist"));
  }
  if (!s.ok()) return FromRocks(s, "reading an approval");
  return internal::DecodeApproval(value);
}

absl::StatusOr<ListPage> RocksDbLog::Impl::List(const ListQuery& query) {
  if (absl::Status s = internal::ValidateListQuery(query); !s.ok()) return s;
  absl::StatusOr<std::optional<internal::ListPosition>> pos =
      internal::DecodePageToken(query.page_token);
  if (!pos.ok()) return pos.status();
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::string after;
  if (pos->has_value()) {
    after = keys::TimeIndex('o', (*pos)->registered_at_ms, (*pos)->gid);
    it->Seek(after);
  } else {
    it->Seek("o/");
  }
  ListPage page;
  size_t examined = 0;
  int64_t last_examined_ms = 0;
  std::string last_examined_gid;
  for (; it->Valid() && it->key().starts_with("o/"); it->Next()) {
    if (!after.empty() && it->key() == rocksdb::Slice(after)) continue;
    int64_t registered_at_ms = 0;
    std::string gid;
    if (!keys::ParseTimeIndex(it->key().ToStringView(), registered_at_ms,
                              gid)) {
      return absl::DataLossError("WAL: malformed registration index key");
    }
    if (query.registered_before_ms != 0 &&
        registered_at_ms >= query.registered_before_ms) {
      break;
    }
    if (examined++ == query.scan_budget) {
      // Go on from the last one examined (this one comes first next time).
      page.next_page_token =
          internal::EncodePageToken(last_examined_ms, last_examined_gid);
      break;
    }
    last_examined_ms = registered_at_ms;
    last_examined_gid = gid;
    absl::StatusOr<std::optional<StoredSummary>> stored = GetSummary(ro, gid);
    if (!stored.ok()) return stored.status();
    if (!stored->has_value()) {
      return absl::DataLossError(
          absl::StrCat("WAL: gid ", gid, " is indexed but has no summary"));
    }
    if (!internal::MatchesQuery((*stored)->summary, query)) continue;
    if (page.items.size() == query.page_size) {
      const TxnSummary& last = page.items.back();
      page.next_page_token =
          internal::EncodePageToken(last.registered_at_ms, last.gid);
      break;
    }
    page.items.push_back(std::move((*stored)->summary));
  }
  if (absl::Status s = FromRocks(it->status(), "listing"); !s.ok()) return s;
  return page;
}

absl::Status RocksDbLog::Impl::ScanUnfinished(
    const std::function<absl::Status(TxnLog)>& visit) {
  // The scan hands what it read to the writer's index (kWarm), in batches,
  // each before its transactions are visited: whoever resumes them appends
  // at once, and the writer then finds their summaries in memory instead of
  // reading each from RocksDB again. Counted before the snapshot (see
  // warming_scans_); the writer counts it down at kWarmEnd.
  warming_scans_.fetch_add(1);
  // On every way out (an exception from `visit` too): a scan left counted
  // would keep the writer noting drops and refusing warm entries forever.
  absl::Cleanup end_warming = [this] {
    WorkItem end;
    end.kind = WorkItem::Kind::kWarmEnd;
    Enqueue(std::move(end));
  };
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::unique_ptr<rocksdb::Iterator> records(db_->NewIterator(ro));
  constexpr size_t kBatch = 256;
  std::vector<TxnLog> batch;
  WorkItem warm;
  warm.kind = WorkItem::Kind::kWarm;
  auto visit_batch = [&]() -> absl::Status {
    // A place for tests to stall the scan between its reads and the warming
    // (errors are ignored: warming is never required).
    (void)failpoint::Eval("wal.scan_before_warm");
    if (!warm.warm.empty()) Enqueue(std::move(warm));
    warm = WorkItem();
    warm.kind = WorkItem::Kind::kWarm;
    for (TxnLog& txn : batch) {
      if (absl::Status s = visit(std::move(txn)); !s.ok()) return s;
    }
    batch.clear();
    return absl::OkStatus();
  };
  absl::Status status;
  for (it->Seek("u/"); it->Valid() && it->key().starts_with("u/"); it->Next()) {
    int64_t registered_at_ms = 0;
    std::string gid;
    if (!keys::ParseTimeIndex(it->key().ToStringView(), registered_at_ms,
                              gid)) {
      status = absl::DataLossError("WAL: malformed unfinished index key");
      break;
    }
    SummaryEntry entry;
    absl::StatusOr<TxnLog> txn = ReadTxn(ro, gid, records.get(), &entry);
    if (!txn.ok()) {
      status = txn.status();
      if (absl::IsNotFound(status)) {
        status = absl::DataLossError(absl::StrCat(
            "WAL: gid ", gid, " is indexed unfinished but has no summary"));
      }
      break;
    }
    if (entry.encoded_size != 0) warm.warm.emplace_back(gid, std::move(entry));
    batch.push_back(*std::move(txn));
    if (batch.size() == kBatch) {
      // Visiting may wait (the driver pauses its scan while too many wait to
      // resume): the iterators go first, so that they pin no memtable
      // meanwhile; the snapshot stays, so the scan's view does not change.
      const std::string last = it->key().ToString();
      it.reset();
      records.reset();
      status = visit_batch();
      if (!status.ok()) break;
      it.reset(db_->NewIterator(ro));
      records.reset(db_->NewIterator(ro));
      it->Seek(last);
      if (!it->Valid() || it->key() != rocksdb::Slice(last)) {
        status = FromRocks(it->status(), "scanning unfinished");
        if (status.ok()) {
          status = absl::InternalError("WAL: the scan lost its place");
        }
        break;
      }
    }
  }
  if (status.ok() && it) {
    status = FromRocks(it->status(), "scanning unfinished");
  }
  if (status.ok()) status = visit_batch();
  return status;
}

absl::Status RocksDbLog::Impl::RunRetention(int64_t now_ms) {
  const RetentionPolicy& policy = options_.retention;
  using internal::RetentionStep;
  std::vector<std::pair<std::string, RetentionStep>> due;
  auto submit = [&]() -> absl::Status {
    if (due.empty()) return absl::OkStatus();
    WorkItem item;
    item.kind = WorkItem::Kind::kRetention;
    item.removals.swap(due);
    return SubmitAndWait(std::move(item));
  };
  // Scans one finished index up to `until_ms` (inclusive), handing each gid
  // to `step_of`; stops early when `enough` says so.
  auto scan = [&](char index, int64_t until_ms,
                  const std::function<std::optional<RetentionStep>(
                      int64_t, const std::string&)>& step_of) -> absl::Status {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    const std::string prefix{index, '/'};
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
         it->Next()) {
      int64_t finished_at_ms = 0;
      std::string gid;
      if (!keys::ParseTimeIndex(it->key().ToStringView(), finished_at_ms,
                                gid)) {
        return absl::DataLossError("WAL: malformed finished index key");
      }
      if (finished_at_ms > until_ms) break;
      std::optional<RetentionStep> step = step_of(finished_at_ms, gid);
      if (!step.has_value()) break;
      due.emplace_back(gid, *step);
      if (due.size() >= options_.retention_batch) {
        if (absl::Status s = submit(); !s.ok()) return s;
      }
    }
    if (absl::Status s = FromRocks(it->status(), "retention scan"); !s.ok()) {
      return s;
    }
    return submit();
  };
  const int64_t compact_until = now_ms - policy.full_record_ms;
  const int64_t forget_until = now_ms - policy.compact_entry_ms;
  absl::Status s =
      scan('f', compact_until, [&](int64_t at, const std::string&) {
        return std::optional<RetentionStep>(at <= forget_until
                                                ? RetentionStep::kForget
                                                : RetentionStep::kCompact);
      });
  if (!s.ok()) return s;
  s = scan('c', forget_until, [](int64_t, const std::string&) {
    return std::optional<RetentionStep>(RetentionStep::kForget);
  });
  if (!s.ok() || policy.max_bytes == 0) return s;

  // The size budget: oldest finished first, full records, then entries.
  // Each pass picks about as many as the excess needs, oldest first.
  for (const char index : {'f', 'c'}) {
    while (live_bytes_.load() > static_cast<int64_t>(policy.max_bytes)) {
      const int64_t bytes_before = live_bytes_.load();
      int64_t excess =
          live_bytes_.load() - static_cast<int64_t>(policy.max_bytes);
      size_t picked = 0;
      s = scan(
          index, INT64_MAX,
          [&](int64_t, const std::string& gid) -> std::optional<RetentionStep> {
            if (excess <= 0) return std::nullopt;
            int64_t saves = 64;  // summary and index keys, roughly
            if (index == 'f') {
              absl::StatusOr<std::optional<StoredSummary>> stored =
                  GetSummary(rocksdb::ReadOptions(), gid);
              if (stored.ok() && stored->has_value()) {
                saves = static_cast<int64_t>((*stored)->record_bytes);
              }
            }
            excess -= std::max<int64_t>(1, saves);
            ++picked;
            return index == 'f' ? RetentionStep::kCompact
                                : RetentionStep::kForget;
          });
      if (!s.ok()) return s;
      if (picked == 0) break;  // this index is empty
      // Nothing it picked could go (an index key without its summary, which
      // the writer skips): the next run tries again; spinning here would
      // hold the retention thread for good.
      if (live_bytes_.load() >= bytes_before) break;
    }
  }
  return absl::OkStatus();
}

LogStats RocksDbLog::Impl::Stats() const {
  LogStats stats;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(db_dir_, ec)) {
    std::error_code size_ec;
    const uintmax_t size = entry.file_size(size_ec);
    if (!size_ec) stats.bytes_on_disk += size;
  }
  stats.syncs = syncs_.load();
  stats.synced_appends = synced_appends_.load();
  stats.buffered_appends = buffered_appends_.load();
  stats.unfinished = static_cast<uint64_t>(std::max<int64_t>(0, unfinished_));
  stats.dedup_horizon_ms = horizon_.load();
  // The u/ index is in registration order: its first key is the oldest.
  // Sought from stats_from_ms_ (see there), not from the index's front.
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_from_ms_ = std::min(
      stats_from_ms_,
      registered_since_stats_ms_.exchange(std::numeric_limits<int64_t>::max()));
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(keys::TimeIndex('u', stats_from_ms_, ""));
  int64_t at = 0;
  std::string gid;
  if (it->Valid() && it->key().starts_with("u/")) {
    if (keys::ParseTimeIndex(it->key().ToStringView(), at, gid)) {
      stats.oldest_unfinished_registered_ms = at;
      stats_from_ms_ = at;
    }
  } else if (it->status().ok()) {
    stats_from_ms_ = std::numeric_limits<int64_t>::max();  // none
  }
  return stats;
}

// --- RocksDbLog ---

absl::StatusOr<std::unique_ptr<RocksDbLog>> RocksDbLog::Open(
    RocksDbLogOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Open(); !s.ok()) return s;
  return std::unique_ptr<RocksDbLog>(new RocksDbLog(std::move(impl)));
}

RocksDbLog::RocksDbLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RocksDbLog::~RocksDbLog() = default;

void RocksDbLog::Append(AppendRequest request, AppendDone done) {
  WorkItem item;
  item.kind = WorkItem::Kind::kAppend;
  item.durable = request.durability == Durability::kDurable;
  item.append = std::move(request);
  item.done = std::move(done);
  impl_->Enqueue(std::move(item));
}

void RocksDbLog::PutApproval(Approval approval, AppendDone done) {
  WorkItem item;
  item.kind = WorkItem::Kind::kApproval;
  item.approval = std::make_unique<Approval>(std::move(approval));
  item.done = std::move(done);
  impl_->Enqueue(std::move(item));
}

// Once the log has failed, reads are refused as well: appends whose sync
// failed were already written to RocksDB, so a read could return a record
// that was never durable, and a caller could act on it (say, a decision).
//
// A read that finds corrupt synced state (DATA_LOSS: RocksDB reports a
// corruption, or a stored value does not decode) stops the log the same way
// (failure() is then that DATA_LOSS): the log cannot tell what else is
// damaged, and a daemon must not serve half its state.
absl::StatusOr<TxnLog> RocksDbLog::Read(std::string_view gid) {
  if (absl::Status f = impl_->failure(); !f.ok()) return f;
  return impl_->StopIfCorrupt(impl_->Read(gid));
}

absl::StatusOr<Approval> RocksDbLog::ReadApproval(std::string_view id) {
  if (absl::Status f = impl_->failure(); !f.ok()) return f;
  return impl_->StopIfCorrupt(impl_->ReadApproval(id));
}

absl::StatusOr<ListPage> RocksDbLog::List(const ListQuery& query) {
  if (absl::Status f = impl_->failure(); !f.ok()) return f;
  return impl_->StopIfCorrupt(impl_->List(query));
}

absl::Status RocksDbLog::ScanUnfinished(
    uint32_t shard, const std::function<absl::Status(TxnLog)>& visit) {
  if (shard != 0) return absl::InvalidArgumentError("the log has one shard");
  if (absl::Status f = impl_->failure(); !f.ok()) return f;
  return impl_->StopIfCorrupt(impl_->ScanUnfinished(visit));
}

absl::StatusOr<uint64_t> RocksDbLog::TakeOwnerEpoch(uint32_t shard) {
  if (shard != 0) return absl::InvalidArgumentError("the log has one shard");
  return impl_->TakeOwnerEpoch();
}

absl::Status RocksDbLog::RunRetention(int64_t now_ms) {
  return impl_->RunRetention(now_ms);
}

int64_t RocksDbLog::DedupHorizonMs(uint32_t /*shard*/) const {
  return impl_->horizon();
}

LogStats RocksDbLog::Stats() const { return impl_->Stats(); }

absl::Status RocksDbLog::failure() const { return impl_->failure(); }

absl::Status RocksDbLog::failure_cause() const {
  return impl_->failure_cause();
}

double RocksDbLog::MeanGroupSize() const { return impl_->MeanGroupSize(); }

}  // namespace tcc::wal
