// tccd's log set-up: spdlog to stderr, text or JSON lines, at a configured
// level. Every line about a transaction carries its gid (and branch id when
// about a branch) as `gid=... branch=...` in text, or as fields in JSON.
//
// Call ConfigureLogging once at start, before other threads log.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tcc::server {

// level: trace, debug, info, warn, error; format: text or json.
[[nodiscard]] absl::Status ConfigureLogging(const std::string& level,
                                            const std::string& format);

// Escapes a string for a JSON string value (without the quotes).
std::string JsonEscape(const std::string& s);

}  // namespace tcc::server
