// Reading Prometheus text exposition pages (what tccd serves at /metrics),
// for scripts/bench.sh's waits: the sum of the series that match, and a plain
// HTTP/1.0 GET on loopback. Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tcc::bench {

// The sum of the values of every series in `page` whose name-and-labels
// (`name{labels}`, or `name` alone) starts with `prefix` and contains
// `contains` (empty: any). Comment lines ('#') and lines that do not parse
// are skipped.
double SumSeries(std::string_view page, std::string_view prefix,
                 std::string_view contains = {});

// The body of `http://HOST:PORT/PATH` (HOST a numeric IPv4 address), fetched
// with HTTP/1.0 within `timeout_ms`. INVALID_ARGUMENT for another URL,
// UNAVAILABLE if it cannot be fetched or the status is not 200.
absl::StatusOr<std::string> HttpGet(const std::string& url, int timeout_ms);

}  // namespace tcc::bench
