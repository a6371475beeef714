// Reading Prometheus text exposition pages (what tccd serves at /metrics),
// for scripts/bench.sh's waits: the sum of the series that match. (The page
// is fetched with tests/harness/http_get.h.) Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

namespace tcc::bench {

// The sum of the values of every series in `page` whose name-and-labels
// (`name{labels}`, or `name` alone) starts with `prefix` and contains
// `contains` (empty: any). Comment lines ('#') and lines that do not parse
// are skipped.
double SumSeries(std::string_view page, std::string_view prefix,
                 std::string_view contains = {});

}  // namespace tcc::bench
