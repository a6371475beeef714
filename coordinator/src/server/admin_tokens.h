// Reads the admin token file (config admin.token_file): `NAME TOKEN` lines,
// '#' comments and blank lines ignored. NAME is the admin's identity in logs
// and approvals; TOKEN is sent as `authorization: Bearer TOKEN`.
//
// Refused (INVALID_ARGUMENT naming the file and line): a file readable by
// group or others, a line without exactly two fields, a name that is not an
// id (letters, digits, '.', '_', '-'; at most 64), a token shorter than 16
// or longer than 256 bytes, a repeated token.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tcc::server {

// token -> name.
[[nodiscard]] absl::StatusOr<std::map<std::string, std::string>>
LoadAdminTokens(const std::string& path);

// The same rules over the file's text (for tests; no permission check).
[[nodiscard]] absl::StatusOr<std::map<std::string, std::string>>
ParseAdminTokens(const std::string& text, const std::string& source);

}  // namespace tcc::server
