// Content hashes: what makes "the same request" and "the same branch" exact
// (DESIGN.md section 3).
//
// A content hash is SHA-256 over a canonical byte encoding defined here, not
// over protobuf serialization (which is not canonical across versions and
// languages). Two submissions with the same gid and the same content hash are
// duplicates; the same gid with another content hash is a conflict.
//
// Canonical encoding. All integers are unsigned big-endian; a "string" is its
// byte length as u32 followed by its bytes.
//
//   submission = "tcc.v1.submission" 0x00
//                u64 revision
//                u8  approval_gate (0 or 1)
//                u32 branch_count
//                branch_count x { string branch_id, string participant,
//                                 string action, string payload }
//                (branches sorted by branch_id, bytewise)
//
//   branch     = "tcc.v1.branch" 0x00
//                u64 revision
//                string participant, string action, string payload
//
// The branch hash leaves out the branch id: the id is part of the branch key
// that the participant stores the hash under. Wait modes, timeouts and other
// delivery options are not content and are not hashed.
//
// Pure and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tcc::identity {

// A SHA-256 digest.
using Hash = std::array<uint8_t, 32>;

// The content of one branch, as hashed.
struct BranchContent {
  std::string_view branch_id;
  std::string_view participant;
  std::string_view action;
  std::string_view payload;
};

// Hash of one branch: participant, action, payload and the revision.
Hash BranchHash(uint64_t revision, std::string_view participant,
                std::string_view action, std::string_view payload);

// Hash of a whole submission (or of an interactive transaction at Commit, over
// its registered branches). Branch order in `branches` does not matter.
// Branch ids must be unique (callers validate that first).
Hash SubmissionHash(uint64_t revision, bool approval_gate,
                    std::vector<BranchContent> branches);

// The canonical encodings themselves (exposed for tests and for other-language
// implementations to check against).
std::string CanonicalBranchEncoding(uint64_t revision,
                                    std::string_view participant,
                                    std::string_view action,
                                    std::string_view payload);
std::string CanonicalSubmissionEncoding(uint64_t revision, bool approval_gate,
                                        std::vector<BranchContent> branches);

// SHA-256 of arbitrary bytes.
Hash Sha256(std::string_view bytes);

// Lower-case hex, 64 characters.
std::string ToHex(const Hash& hash);

// The hash as a string of 32 raw bytes (for protobuf `bytes` fields).
std::string ToBytes(const Hash& hash);

}  // namespace tcc::identity
