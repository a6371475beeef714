#include "etcd/etcd_codec.h"

#include <charconv>
#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::wal::internal {
namespace {

constexpr uint8_t kHeadVersion = 1;
constexpr uint8_t kHeadInlineVersion = 2;
constexpr uint8_t kCompactVersion = 1;
// Not a record format version (record_codec.h's are small numbers).
constexpr uint8_t kRecordBatch = 0xB0;
static_assert(kFormatVersion < kRecordBatch);

absl::Status Corrupt(std::string_view key, std::string_view what) {
  return absl::DataLossError(absl::StrCat(
      "etcd log: the value of ", std::string(key), " ", std::string(what)));
}

// u32 count, then per piece u32 size and the piece: a record batch's body
// (after its marker) and a head's inline records.
void PutFramed(std::string& out, const std::vector<std::string>& pieces) {
  PutU32(out, static_cast<uint32_t>(pieces.size()));
  for (const std::string& one : pieces) {
    PutU32(out, static_cast<uint32_t>(one.size()));
    out += one;
  }
}

// Reads what PutFramed wrote (at least one piece) from the front of `in`;
// false if it is cut short.
bool GetFramed(std::string_view& in, std::vector<std::string_view>& pieces) {
  uint32_t count = 0;
  if (!GetU32(in, count) || count == 0) return false;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t size = 0;
    if (!GetU32(in, size) || in.size() < size) return false;
    pieces.push_back(in.substr(0, size));
    in.remove_prefix(size);
  }
  return true;
}

}  // namespace

std::string EncodeHead(const HeadValue& head) {
  const bool inline_records = !head.inline_records.empty();
  std::string out(
      1, static_cast<char>(inline_records ? kHeadInlineVersion : kHeadVersion));
  PutU64(out, head.owner_epoch);
  PutU64(out, head.append_id);
  if (inline_records) PutFramed(out, head.inline_records);
  out += EncodeSummary(head.summary, head.record_count, head.record_key_bytes);
  return out;
}

absl::StatusOr<HeadValue> DecodeHead(std::string_view in,
                                     std::string_view key) {
  const uint8_t version = in.empty() ? 0 : static_cast<uint8_t>(in[0]);
  if (version != kHeadVersion && version != kHeadInlineVersion) {
    return Corrupt(key, "is not a head of a known version");
  }
  in.remove_prefix(1);
  HeadValue head;
  if (!GetU64(in, head.owner_epoch) || !GetU64(in, head.append_id)) {
    return Corrupt(key, "is cut short");
  }
  if (version == kHeadInlineVersion) {
    std::vector<std::string_view> pieces;
    if (!GetFramed(in, pieces)) return Corrupt(key, "is cut short");
    for (std::string_view one : pieces) {
      if (absl::Status s = DecodeRecord(one).status(); !s.ok()) {
        return Corrupt(key, std::string(s.message()));
      }
      head.inline_records.emplace_back(one);
    }
  }
  absl::StatusOr<StoredSummary> s = DecodeSummary(in);
  if (!s.ok()) return Corrupt(key, std::string(s.status().message()));
  head.summary = std::move(s->summary);
  head.record_count = s->record_count;
  head.record_key_bytes = s->record_bytes;
  if (head.inline_records.size() > head.record_count) {
    return Corrupt(key, "holds more records than its record count");
  }
  return head;
}

std::string EncodeRecords(const std::vector<Record>& records) {
  std::vector<std::string> encoded;
  encoded.reserve(records.size());
  for (const Record& r : records) encoded.push_back(EncodeRecord(r));
  return RecordsValue(encoded);
}

std::string RecordsValue(const std::vector<std::string>& encoded) {
  if (encoded.size() == 1) return encoded[0];
  std::string out;
  out.reserve(RecordsValueSize(encoded));
  out.push_back(static_cast<char>(kRecordBatch));
  PutFramed(out, encoded);
  return out;
}

size_t RecordsValueSize(const std::vector<std::string>& encoded) {
  if (encoded.size() == 1) return encoded[0].size();
  size_t size = 1 + 4;
  for (const std::string& one : encoded) size += 4 + one.size();
  return size;
}

absl::Status DecodeRecordsTo(std::string_view in, std::string_view key,
                             std::vector<Record>& out) {
  if (in.empty() || static_cast<uint8_t>(in[0]) != kRecordBatch) {
    absl::StatusOr<Record> r = DecodeRecord(in);
    if (!r.ok()) return Corrupt(key, std::string(r.status().message()));
    out.push_back(*std::move(r));
    return absl::OkStatus();
  }
  in.remove_prefix(1);
  std::vector<std::string_view> pieces;
  if (!GetFramed(in, pieces)) {
    return Corrupt(key, "is a record batch cut short");
  }
  for (std::string_view one : pieces) {
    absl::StatusOr<Record> r = DecodeRecord(one);
    if (!r.ok()) return Corrupt(key, std::string(r.status().message()));
    out.push_back(*std::move(r));
  }
  if (!in.empty()) return Corrupt(key, "has bytes after its record batch");
  return absl::OkStatus();
}

std::string EncodeCompact(const CompactEntry& entry) {
  std::string out(1, static_cast<char>(kCompactVersion));
  const uint32_t n = static_cast<uint32_t>(entry.archive_node.size());
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += entry.archive_node;
  out += EncodeSummary(entry.summary);
  return out;
}

absl::StatusOr<CompactEntry> DecodeCompact(std::string_view in,
                                           std::string_view key) {
  if (in.size() < 5 || static_cast<uint8_t>(in[0]) != kCompactVersion) {
    return Corrupt(key, "is not a compact entry of a known version");
  }
  uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(5);
  if (in.size() < n) return Corrupt(key, "is cut short");
  CompactEntry entry;
  entry.archive_node = std::string(in.substr(0, n));
  in.remove_prefix(n);
  absl::StatusOr<StoredSummary> s = DecodeSummary(in);
  if (!s.ok()) return Corrupt(key, std::string(s.status().message()));
  entry.summary = std::move(s->summary);
  entry.summary.compacted = false;
  return entry;
}

std::string EncodeHorizon(int64_t horizon_ms) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(
                    static_cast<uint64_t>(horizon_ms) ^ (1ull << 63)));
  return buf;
}

absl::StatusOr<int64_t> DecodeHorizon(std::string_view in,
                                      std::string_view key) {
  uint64_t v = 0;
  if (in.size() != 16) return Corrupt(key, "is not 16 hex digits");
  auto [ptr, ec] = std::from_chars(in.data(), in.data() + in.size(), v, 16);
  if (ec != std::errc() || ptr != in.data() + in.size()) {
    return Corrupt(key, "is not 16 hex digits");
  }
  return static_cast<int64_t>(v ^ (1ull << 63));
}

std::string EncodeCluster(const ClusterRecord& r) {
  return absl::StrCat("format=1\netcd_cluster_id=", r.etcd_cluster_id,
                      "\nshards=", r.shards,
                      "\ncreated_revision=", r.created_revision, "\n");
}

absl::StatusOr<ClusterRecord> DecodeCluster(std::string_view in,
                                            std::string_view key) {
  ClusterRecord r;
  bool format = false, id = false, shards = false, rev = false;
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(in.data(), in.size()), '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, '=');
    if (kv.size() != 2) return Corrupt(key, "has a line that is not key=value");
    if (kv[0] == "format") {
      if (kv[1] != "1") return Corrupt(key, "is of an unknown format");
      format = true;
    } else if (kv[0] == "etcd_cluster_id") {
      id = absl::SimpleAtoi(kv[1], &r.etcd_cluster_id);
    } else if (kv[0] == "shards") {
      shards = absl::SimpleAtoi(kv[1], &r.shards) && r.shards >= 1;
    } else if (kv[0] == "created_revision") {
      rev = absl::SimpleAtoi(kv[1], &r.created_revision);
    }
  }
  if (!format || !id || !shards || !rev) {
    return Corrupt(key,
                   "lacks a field (format, etcd_cluster_id, shards, "
                   "created_revision)");
  }
  return r;
}

}  // namespace tcc::wal::internal
