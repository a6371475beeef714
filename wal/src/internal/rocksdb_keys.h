// The RocksDB log's key layout (one default column family). Every value is
// encoded by record_codec.h; gids and approval ids are of [A-Za-z0-9._:-],
// which has no '/', so "r/<gid>/" prefixes one gid's records only.
//
//   m/format_version             u8: the values below are of this version
//                                or older (record_codec.h); an older log
//                                is marked kFormatVersion at open
//   m/owner_epoch                u64 (big-endian), the last epoch taken
//   m/dedup_horizon              u64, the horizon (as i64)
//   m/live_bytes                 u64, key+value bytes of everything below
//                                (the size budget's measure)
//   s/<gid>                      summary; written when it changes, not
//                                for every record, so its record count and
//                                bytes are as of that write (the log counts
//                                the r/ keys when it reads one from disk)
//   r/<gid>/<u64 seq>            record number seq of the gid (from 0)
//   o/<i64 registered_at><gid>   "" : every transaction, by registration
//   u/<i64 registered_at><gid>   "" : unfinished ones (the recovery scan)
//   f/<i64 finished_at><gid>     "" : finished, full record kept
//   c/<i64 finished_at><gid>     "" : finished, compacted to its summary
//   a/<approval_id>              approval
//
// i64 in keys is the u64 with its top bit flipped, big-endian, so keys sort
// by the signed value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "record_codec.h"

namespace tcc::wal::internal::keys {

inline constexpr char kFormatVersion[] = "m/format_version";
inline constexpr char kOwnerEpoch[] = "m/owner_epoch";
inline constexpr char kDedupHorizon[] = "m/dedup_horizon";
inline constexpr char kLiveBytes[] = "m/live_bytes";

inline std::string SortableI64(int64_t v) {
  std::string out;
  PutU64(out, static_cast<uint64_t>(v) ^ (1ull << 63));
  return out;
}

inline int64_t FromSortableI64(uint64_t v) {
  return static_cast<int64_t>(v ^ (1ull << 63));
}

inline std::string Summary(std::string_view gid) {
  return "s/" + std::string(gid);
}
inline size_t SummarySize(std::string_view gid) { return 2 + gid.size(); }
inline std::string RecordPrefix(std::string_view gid) {
  return "r/" + std::string(gid) + "/";
}
inline std::string Record(std::string_view gid, uint64_t seq) {
  std::string key = RecordPrefix(gid);
  PutU64(key, seq);
  return key;
}
// The same into `key` (replacing what it held; reuses its buffer).
inline void RecordTo(std::string& key, std::string_view gid, uint64_t seq) {
  key.assign("r/", 2);
  key.append(gid);
  key.push_back('/');
  PutU64(key, seq);
}
// o/, u/, f/ and c/ keys: "<p>/" + sortable time + gid.
inline std::string TimeIndex(char p, int64_t at_ms, std::string_view gid) {
  std::string key{p, '/'};
  key += SortableI64(at_ms);
  key += gid;
  return key;
}
// Splits a time-index key; false if it is not one.
inline bool ParseTimeIndex(std::string_view key, int64_t& at_ms,
                           std::string& gid) {
  if (key.size() < 2 + 8 + 1) return false;
  std::string_view rest = key.substr(2);
  uint64_t v = 0;
  if (!GetU64(rest, v)) return false;
  at_ms = FromSortableI64(v);
  gid = std::string(rest);
  return true;
}
inline std::string Approval(std::string_view id) {
  return "a/" + std::string(id);
}

}  // namespace tcc::wal::internal::keys
