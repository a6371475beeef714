// The etcd log's values (keys: etcd_keys.h). Records, summaries and
// approvals are encoded as record_codec.h says; these wrap them. Strict
// decoding: anything that does not decode is DATA_LOSS naming the key.
// Pure functions; thread-safe.
//
//   head     = u8 version (1), u64 owner_epoch, u64 append_id, summary
//              (record_codec.h; its record_count is the gid's number of
//              records, which numbers the next one, and its record_bytes
//              the bytes, keys and values, of its record keys: 0 in a head
//              an earlier version wrote, unknown then); or, for a head that
//              holds its transaction's first records itself (inline, see
//              group_txn.h), u8 version (2), u64 owner_epoch, u64
//              append_id, u32 count, per record u32 size and the record,
//              then the summary. Its records are the gid's first ones; its
//              record keys, if any, hold the rest
//   records  = one record (record_codec.h: it starts with the record format
//              version, 1 or 2), or a batch of them: u8 0xB0, u32 count,
//              then per record u32 size and the record (what one group
//              wrote for one gid, under one key)
//   compact  = u8 version (1), string archive_node, summary
//   horizon  = 16 lower-case hex digits of the i64 with its top bit flipped
//              (so that etcd's byte-wise VALUE compare orders them)
//   cluster  = text lines "key=value": format=1, etcd_cluster_id (decimal),
//              shards, created_revision
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "record_codec.h"
#include "tcc/wal/log.h"

namespace tcc::wal::internal {

struct HeadValue {
  uint64_t owner_epoch = 0;
  // Unique per append this process sent (with the epoch): a read of the head
  // tells whether an append whose outcome was unknown is the one that
  // committed.
  uint64_t append_id = 0;
  uint64_t record_count = 0;
  TxnSummary summary;
  // The gid's first records when the head holds them (EncodeRecord of
  // each; at most record_count of them): numbers 0 to size-1.
  std::vector<std::string> inline_records;
  // What its record keys hold, keys and values (what the finishing Txn's
  // delete returns). 0 while it has none, and in a head of an earlier
  // version, which did not count them: unknown if it has record keys.
  uint64_t record_key_bytes = 0;
};
// Version 1 when the head holds no records (what the previous version
// wrote), else version 2. DecodeHead reads both, and checks that every
// inline record decodes.
std::string EncodeHead(const HeadValue& head);
[[nodiscard]] absl::StatusOr<HeadValue> DecodeHead(std::string_view bytes,
                                                   std::string_view key);

// The value of a record key: `records` (at least one) as one record or a
// batch.
std::string EncodeRecords(const std::vector<Record>& records);
// The same from the records encoded already (EncodeRecord of each, at least
// one), and its size.
std::string RecordsValue(const std::vector<std::string>& encoded);
size_t RecordsValueSize(const std::vector<std::string>& encoded);
// Appends the records a record key's value holds to `out` (one, or a
// batch); DATA_LOSS naming the key if it does not decode.
[[nodiscard]] absl::Status DecodeRecordsTo(std::string_view bytes,
                                           std::string_view key,
                                           std::vector<Record>& out);

struct CompactEntry {
  std::string archive_node;
  TxnSummary summary;  // compacted is false here; the reader sets it
};
std::string EncodeCompact(const CompactEntry& entry);
[[nodiscard]] absl::StatusOr<CompactEntry> DecodeCompact(std::string_view bytes,
                                                         std::string_view key);

std::string EncodeHorizon(int64_t horizon_ms);
[[nodiscard]] absl::StatusOr<int64_t> DecodeHorizon(std::string_view bytes,
                                                    std::string_view key);

struct ClusterRecord {
  uint64_t etcd_cluster_id = 0;
  uint32_t shards = 0;
  int64_t created_revision = 0;
};
std::string EncodeCluster(const ClusterRecord& record);
[[nodiscard]] absl::StatusOr<ClusterRecord> DecodeCluster(
    std::string_view bytes, std::string_view key);

}  // namespace tcc::wal::internal
