#include "etcd/archive.h"

#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "record_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace tcc::wal::internal {
namespace {

std::string Key(std::string_view gid) { return "t/" + std::string(gid); }
constexpr char kMaxRevision[] = "m/max_revision";

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("archive: ", std::string(what), ": ", s.ToString()));
}

std::mutex& RevisionMu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

}  // namespace

Archive::Archive(std::unique_ptr<rocksdb::DB> db, std::string dir)
    : db_(std::move(db)), dir_(std::move(dir)) {}

Archive::~Archive() = default;

absl::StatusOr<std::unique_ptr<Archive>> Archive::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("archive: can't create ", dir, ": ", ec.message()));
  }
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.keep_log_file_num = 2;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening ", dir));
  return std::unique_ptr<Archive>(
      new Archive(std::unique_ptr<rocksdb::DB>(raw), dir));
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

}  // namespace

absl::Status Archive::Put(const TxnLog& txn) {
  return FromRocks(
      db_->Put(rocksdb::WriteOptions(), Key(txn.summary.gid), EncodeEntry(txn)),
      "writing");
}

absl::Status Archive::PutAll(const std::vector<TxnLog>& txns) {
  if (txns.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const TxnLog& txn : txns) {
    rocksdb::Status s = batch.Put(Key(txn.summary.gid), EncodeEntry(txn));
    if (!s.ok()) return FromRocks(s, "writing");
  }
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "writing");
}

absl::Status Archive::Erase(std::string_view gid) {
  return FromRocks(db_->Delete(rocksdb::WriteOptions(), Key(gid)), "erasing");
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
