#include "tcc/identity/ids.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tcc::identity {
namespace {

absl::Status ValidateId(const char* what, std::string_view id,
                        size_t max_bytes) {
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  if (id.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", id.size(), " bytes; at most ", max_bytes, " allowed"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (!IsIdByte(id[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has byte 0x",
          absl::Hex(static_cast<unsigned>(static_cast<uint8_t>(id[i])),
                    absl::kZeroPad2),
          " at offset ", i, "; allowed: [A-Za-z0-9._:-]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsIdByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' || c == '-';
}

absl::Status ValidateGid(std::string_view gid) {
  return ValidateId("gid", gid, kMaxGidBytes);
}

absl::Status ValidateBranchId(std::string_view branch_id) {
  return ValidateId("branch id", branch_id, kMaxBranchIdBytes);
}

absl::Status ValidateAction(std::string_view action) {
  return ValidateId("action", action, kMaxActionBytes);
}

absl::Status ValidateParticipantName(std::string_view name) {
  return ValidateId("participant name", name, kMaxParticipantNameBytes);
}

}  // namespace tcc::identity
