// A plain HTTP/1.0 GET on loopback, for tests and tools that read a
// process's Prometheus page (tccd's and the SDK's /metrics). Thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tcc::testing {

// The body of `http://HOST:PORT/PATH` (HOST a numeric IPv4 address), fetched
// with HTTP/1.0 within `timeout_ms`. INVALID_ARGUMENT for another URL,
// UNAVAILABLE if it cannot be fetched or the status is not 200.
absl::StatusOr<std::string> HttpGet(const std::string& url, int timeout_ms);

// http://127.0.0.1:PORT/PATH.
std::string LoopbackUrl(int port, const std::string& path);

}  // namespace tcc::testing
