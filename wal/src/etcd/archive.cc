#include "etcd/archive.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "record_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "tcc/rocksdb_env/owner_only_files.h"

namespace tcc::wal::internal {
namespace {

std::string Key(std::string_view gid) { return "t/" + std::string(gid); }
constexpr char kMaxRevision[] = "m/max_revision";
constexpr char kFinishIndex[] = "m/finish_index";
constexpr char kFinishPrefix[] = "f/";
// Where an f/ key's gid starts: after the prefix, the time and the '/'.
constexpr size_t kFinishGidAt = sizeof(kFinishPrefix) - 1 + 8 + 1;

// f/<finished_at, 8 bytes big endian>/<gid>
std::string FinishKey(int64_t finished_at_ms, std::string_view gid) {
  std::string key = kFinishPrefix;
  const uint64_t v =
      static_cast<uint64_t>(std::max<int64_t>(0, finished_at_ms));
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  key.push_back('/');
  key.append(gid);
  return key;
}

// A finished transaction's record is indexed by its finish time (the
// archive holds finished ones only; one that is not is left unindexed).
void IndexFinish(rocksdb::WriteBatch& batch, const TxnSummary& summary) {
  if (IsFinal(summary.state)) {
    (void)batch.Put(FinishKey(summary.finished_at_ms, summary.gid), "");
  }
}

// A t/ entry's summary (the records after it are not decoded).
absl::StatusOr<TxnSummary> SummaryOf(std::string_view in) {
  uint32_t n = 0;
  if (!GetU32(in, n) || in.size() < n) {
    return absl::DataLossError("archive: malformed entry");
  }
  absl::StatusOr<StoredSummary> summary = DecodeSummary(in.substr(0, n));
  if (!summary.ok()) return summary.status();
  return std::move(summary->summary);
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("archive: ", std::string(what), ": ", s.ToString()));
}

// Writes `batch` and clears it.
absl::Status Flush(rocksdb::DB& db, rocksdb::WriteBatch& batch,
                   std::string_view what) {
  absl::Status s = FromRocks(db.Write(rocksdb::WriteOptions(), &batch), what);
  batch.Clear();
  return s;
}

std::mutex& RevisionMu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

}  // namespace

Archive::Archive(std::unique_ptr<rocksdb::Env> env,
                 std::unique_ptr<rocksdb::DB> db, std::string dir)
    : env_(std::move(env)), db_(std::move(db)), dir_(std::move(dir)) {}

Archive::~Archive() = default;

absl::StatusOr<std::unique_ptr<Archive>> Archive::Open(
    const std::string& dir, rocksdb_env::InfoLogSink info_log) {
  if (std::error_code ec = rocksdb_env::CreateOwnerOnlyDirectories(dir); ec) {
    return absl::UnavailableError(
        absl::StrCat("archive: can't create ", dir, ": ", ec.message()));
  }
  // It holds finished transactions' payloads: nothing in it is for group or
  // others.
  int tightened = 0;
  if (std::error_code ec = rocksdb_env::RestrictToOwner(dir, &tightened); ec) {
    return absl::UnavailableError(absl::StrCat("archive: can't make ", dir,
                                               " owner-only: ", ec.message()));
  }
  if (tightened > 0 && info_log) {
    info_log(
        rocksdb_env::InfoLogSeverity::kWarning,
        absl::StrCat("archive: ", tightened, " files and directories in ", dir,
                     " were open to group or others; made owner-only"));
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  options.info_log = rocksdb_env::NewInfoLog(std::move(info_log));
  // Memtables of 16 MiB (RocksDB's default is 64): the archive is written
  // once per finished transaction and read rarely, so what a drained
  // backlog's payloads leave in memory is bounded by one of them (with 64,
  // tccd on etcd kept 50-74 MiB more RSS after a backlog of 32 KiB payloads
  // drained, at most 10 MiB with 16: memory_integration_etcd_test). Records
  // of 4 KiB and more (those with large payloads) go to blob files at flush,
  // so compactions move references, not payloads (as the RocksDB WAL does:
  // rocksdb_log.cc).
  options.write_buffer_size = 16 << 20;
  options.enable_blob_files = true;
  options.min_blob_size = 4096;
  // Blobs are compressed as the tables' blocks are (RocksDB leaves them
  // uncompressed unless told).
  options.blob_compression_type = rocksdb::kSnappyCompression;
  std::unique_ptr<rocksdb::Env> env =
      rocksdb::NewCompositeEnv(rocksdb_env::NewOwnerOnlyFileSystem(nullptr));
  options.env = env.get();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening ", dir));
  std::unique_ptr<Archive> archive(
      new Archive(std::move(env), std::unique_ptr<rocksdb::DB>(raw), dir));
  if (absl::Status i = archive->IndexOnce(); !i.ok()) return i;
  return archive;
}

absl::Status Archive::IndexOnce() {
  std::string marker;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kFinishIndex, &marker);
  if (s.ok()) return absl::OkStatus();
  if (!s.IsNotFound()) return FromRocks(s, "reading the finish index marker");
  // An archive of an earlier version: every record gets its f/ key once,
  // from its summary alone, written a few thousand at a time; the marker
  // last. A record whose summary does not decode is left (Get answers
  // DATA_LOSS for it, as before).
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("t/"); it->Valid() && it->key().starts_with("t/"); it->Next()) {
    absl::StatusOr<TxnSummary> summary =
        SummaryOf(std::string_view(it->value().data(), it->value().size()));
    if (!summary.ok()) continue;
    summary->gid.assign(it->key().data() + 2, it->key().size() - 2);
    IndexFinish(batch, *summary);
    if (batch.Count() >= 2000) {
      if (absl::Status w = Flush(*db_, batch, "indexing"); !w.ok()) return w;
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "indexing");
  (void)batch.Put(kFinishIndex, "");
  return Flush(*db_, batch, "indexing");
}

absl::StatusOr<TxnLog> Archive::Get(std::string_view gid) const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), Key(gid), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrCat("archive: no full record of ", std::string(gid)));
  }
  if (!s.ok()) return FromRocks(s, "reading");
  std::string_view in = value;
  uint32_t n = 0;
  if (!GetU32(in, n) || in.size() < n) {
    return absl::DataLossError("archive: malformed entry");
  }
  absl::StatusOr<StoredSummary> summary = DecodeSummary(in.substr(0, n));
  if (!summary.ok()) return summary.status();
  in.remove_prefix(n);
  TxnLog txn;
  txn.summary = std::move(summary->summary);
  uint32_t count = 0;
  if (!GetU32(in, count)) return absl::DataLossError("archive: cut short");
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t size = 0;
    if (!GetU32(in, size) || in.size() < size) {
      return absl::DataLossError("archive: cut short");
    }
    absl::StatusOr<Record> r = DecodeRecord(in.substr(0, size));
    if (!r.ok()) return r.status();
    txn.records.push_back(*std::move(r));
    in.remove_prefix(size);
  }
  return txn;
}

namespace {

std::string EncodeEntry(const TxnLog& txn) {
  std::string value;
  const std::string summary = EncodeSummary(txn.summary);
  PutU32(value, static_cast<uint32_t>(summary.size()));
  value += summary;
  PutU32(value, static_cast<uint32_t>(txn.records.size()));
  std::string record;
  for (const Record& r : txn.records) {
    record.clear();
    EncodeRecordTo(r, record);
    PutU32(value, static_cast<uint32_t>(record.size()));
    value += record;
  }
  return value;
}

absl::Status AddEntry(rocksdb::WriteBatch& batch, const TxnLog& txn) {
  rocksdb::Status s = batch.Put(Key(txn.summary.gid), EncodeEntry(txn));
  if (!s.ok()) return FromRocks(s, "writing");
  IndexFinish(batch, txn.summary);
  return absl::OkStatus();
}

}  // namespace

absl::Status Archive::Put(const TxnLog& txn) {
  std::lock_guard<std::mutex> lock(write_mu_);
  rocksdb::WriteBatch batch;
  if (absl::Status s = AddEntry(batch, txn); !s.ok()) return s;
  return Flush(*db_, batch, "writing");
}

absl::Status Archive::PutAll(const std::vector<TxnLog>& txns) {
  if (txns.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(write_mu_);
  rocksdb::WriteBatch batch;
  for (const TxnLog& txn : txns) {
    if (absl::Status s = AddEntry(batch, txn); !s.ok()) return s;
  }
  return Flush(*db_, batch, "writing");
}

absl::Status Archive::Erase(std::string_view gid) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return FromRocks(db_->Delete(rocksdb::WriteOptions(), Key(gid)), "erasing");
}

absl::StatusOr<size_t> Archive::EraseFinishedBefore(int64_t before_ms) {
  const std::string end = FinishKey(before_ms, "");
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions options;
  options.iterate_upper_bound = &upper;
  size_t erased = 0;
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  // A few hundred at a time, each batch's checks and deletes under the
  // write lock: a Put meanwhile lands before or after them, never between.
  std::unique_lock<std::mutex> lock(write_mu_);
  size_t in_batch = 0;
  for (it->Seek(kFinishPrefix);
       it->Valid() && it->key().starts_with(kFinishPrefix); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() >= kFinishGidAt) {
      // The gid's record, unless it is of a later finish (the gid
      // registered and finished anew after an Erase left this key); one
      // that does not decode goes too (it is due by this key's time).
      const std::string record = Key(std::string_view(
          key.data() + kFinishGidAt, key.size() - kFinishGidAt));
      std::string value;
      rocksdb::Status g = db_->Get(rocksdb::ReadOptions(), record, &value);
      if (!g.ok() && !g.IsNotFound()) return FromRocks(g, "reading");
      if (g.ok()) {
        absl::StatusOr<TxnSummary> summary = SummaryOf(value);
        if (!summary.ok() ||
            std::max<int64_t>(0, summary->finished_at_ms) < before_ms) {
          (void)batch.Delete(record);
          ++erased;
        }
      }
    }
    (void)batch.Delete(key);
    if (++in_batch >= 500) {
      if (absl::Status w = Flush(*db_, batch, "erasing"); !w.ok()) return w;
      in_batch = 0;
      lock.unlock();
      lock.lock();
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "erasing");
  if (absl::Status w = Flush(*db_, batch, "erasing"); !w.ok()) return w;
  return erased;
}

absl::StatusOr<int64_t> Archive::MaxRevision() const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kMaxRevision, &value);
  if (s.IsNotFound()) return 0;
  if (!s.ok()) return FromRocks(s, "reading the highest revision");
  std::string_view in = value;
  uint64_t v = 0;
  if (!GetU64(in, v) || !in.empty()) {
    return absl::DataLossError("archive: m/max_revision is not a counter");
  }
  return static_cast<int64_t>(v);
}

absl::Status Archive::RaiseMaxRevision(int64_t revision) {
  std::lock_guard<std::mutex> lock(RevisionMu());
  absl::StatusOr<int64_t> now = MaxRevision();
  if (!now.ok()) return now.status();
  if (*now >= revision) return absl::OkStatus();
  std::string value;
  PutU64(value, static_cast<uint64_t>(revision));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, kMaxRevision, value),
                   "writing the highest revision");
}

uint64_t Archive::BytesOnDisk() const {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    std::error_code size_ec;
    const uintmax_t size = e.file_size(size_ec);
    if (!size_ec) bytes += size;
  }
  return bytes;
}

}  // namespace tcc::wal::internal
