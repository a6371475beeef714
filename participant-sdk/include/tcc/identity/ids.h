// Identities of global transactions and their branches (DESIGN.md section 3).
//
// Every id is a string over one small alphabet, [A-Za-z0-9._:-], so that it
// can be logged, used in keys and passed in URLs without escaping. The
// functions here are pure and thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace tcc::identity {

// Length limits, in bytes.
inline constexpr size_t kMaxGidBytes = 128;
inline constexpr size_t kMaxBranchIdBytes = 64;
inline constexpr size_t kMaxActionBytes = 128;
inline constexpr size_t kMaxParticipantNameBytes = 64;

// True for the bytes allowed in every id: [A-Za-z0-9._:-].
bool IsIdByte(char c);

// OK, or INVALID_ARGUMENT naming the field and the rule it breaks.
[[nodiscard]] absl::Status ValidateGid(std::string_view gid);
[[nodiscard]] absl::Status ValidateBranchId(std::string_view branch_id);
[[nodiscard]] absl::Status ValidateAction(std::string_view action);
[[nodiscard]] absl::Status ValidateParticipantName(std::string_view name);

}  // namespace tcc::identity
