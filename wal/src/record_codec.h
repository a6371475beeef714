// The binary encoding of what the WAL stores: records, transaction summaries
// and approvals. Used by the RocksDB log (values) and for byte accounting.
// Pure functions; thread-safe.
//
// Every encoded value starts with a format version byte. Values are written
// in kFormatVersion and read in any version from kOldestFormatVersion on.
// Decoding is strict: an unknown version, an unknown tag or enum value, a
// bool that is neither 0 nor 1, a value cut short or followed by trailing
// bytes is DATA_LOSS, never a guess.
//
// Integers are fixed width, big-endian; i64 is the two's complement u64.
// A string is u32 length + bytes. A hash is its 32 raw bytes.
//
//   record         = u8 version, u8 tag, body
//   tag 1 Registered     string gid, i64 created_at_ms, u64 revision,
//                        u8 interactive, u8 approval_gate,
//                        i64 approval_timeout_ms, i64 try_deadline_ms,
//                        i64 registered_at_ms, hash content_hash,
//                        u64 owner_epoch, u32 n, n x branch
//   tag 2 BranchAdded    branch
//   tag 3 PhaseUpdate    string branch_id, u8 phase, u8 state, u8 outcome,
//                        u32 attempts, string last_error, i64 at_ms
//   tag 4 StateChanged   u8 state, u8 has_content_hash, [hash content_hash],
//                        i64 approval_deadline_ms, i64 at_ms
//   tag 5 Decided        u8 decision, u8 cause, string reason, i64 at_ms,
//                        u8 has_approval, [string approval_id]
//   tag 6 BranchResolved string branch_id, string approval_id, i64 at_ms
//   tag 7 Flagged        string branch_id, u8 stuck, string reason, i64 at_ms
//   tag 8 Finished       u8 state, i64 at_ms
//   tag 9 EpochTaken     u64 owner_epoch, i64 at_ms
//   branch         = string branch_id, string participant, string action,
//                    string payload, hash branch_hash
//
//   summary        = u8 version, string gid, u8 state, u8 decision,
//                    hash content_hash, u64 revision, i64 created_at_ms,
//                    i64 registered_at_ms, i64 finished_at_ms,
//                    u32 n, n x string participant, u8 compacted,
//                    u64 record_count, u64 record_bytes (how many records
//                    the gid had, and their key and value bytes, when the
//                    summary was last written; advisory)
//
//   approval       = u8 version, string approval_id, u8 action, string gid,
//                    u64 revision, hash content_hash, string branch_id,
//                    i64 expires_at_ms, string issued_by, i64 issued_at_ms,
//                    string reason, i64 used_at_ms
//
// Enum values are those of records.h (stored: never renumbered). A change
// of any layout takes a new version; old versions keep decoding.
//
// Versions:
//   1  as above, but Decided had no cause: u8 decision, string reason, ...
//      Its cause was a prefix of the reason ("rollback: ", "forced: ",
//      "approved: ", "deadline: ", "witnessed: "; none: the decision rule).
//      A version-1 Decided decodes with that cause and the prefix removed
//      from its reason; this decoder is the only place that knows them.
//   2  Decided carries its cause. Summaries and approvals are as in 1.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tcc/wal/log.h"
#include "tcc/wal/records.h"

namespace tcc::wal::internal {

// The version written; also the data directory's (keys::kFormatVersion).
inline constexpr uint8_t kFormatVersion = 2;
// The oldest version still read.
inline constexpr uint8_t kOldestFormatVersion = 1;

std::string EncodeRecord(const Record& record);
// The same, appended to `out` (whose buffer a caller may reuse).
void EncodeRecordTo(const Record& record, std::string& out);
[[nodiscard]] absl::StatusOr<Record> DecodeRecord(std::string_view bytes);

// A summary as stored, with the number of records the gid has (which numbers
// the next one) and their bytes (for the size budget).
struct StoredSummary {
  TxnSummary summary;
  uint64_t record_count = 0;
  uint64_t record_bytes = 0;
};
std::string EncodeSummary(const TxnSummary& summary, uint64_t record_count = 0,
                          uint64_t record_bytes = 0);
[[nodiscard]] absl::StatusOr<StoredSummary> DecodeSummary(
    std::string_view bytes);

std::string EncodeApproval(const Approval& approval);
[[nodiscard]] absl::StatusOr<Approval> DecodeApproval(std::string_view bytes);

// Fixed-width big-endian integers (also used in keys, where they sort).
void PutU64(std::string& out, uint64_t v);
[[nodiscard]] bool GetU64(std::string_view& in, uint64_t& v);
void PutU32(std::string& out, uint32_t v);
[[nodiscard]] bool GetU32(std::string_view& in, uint32_t& v);

}  // namespace tcc::wal::internal
