// Byte encodings of branch keys and barrier records, for the stores that keep
// them as bytes (RocksDB). All integers big-endian; a "string" is a u32 byte
// length followed by the bytes.
//
//   key    = string gid, u64 (created_at_ms XOR 1<<63, so keys sort by time),
//            string branch_id
//   record = u8 version (1), u8 try_state, u8 phase_two, u8 phase_two_outcome,
//            u64 try_deadline_ms, u64 phase_two_at_ms,
//            string branch_hash, string try_message, string phase_two_message
//
// Decoding anything else is DATA_LOSS. Pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tcc/barrier/barrier_record.h"

namespace tcc::barrier::internal {

std::string EncodeKey(const BranchKey& key);
absl::StatusOr<BranchKey> DecodeKey(std::string_view bytes);
std::string EncodeRecord(const BarrierRecord& record);
absl::StatusOr<BarrierRecord> DecodeRecord(std::string_view bytes);

}  // namespace tcc::barrier::internal
