// Latency samples of a benchmark run and their order statistics.
//
// Every sample is kept (8 bytes each: a million transactions take 8 MB), so
// percentiles are exact rather than bucketed. Percentiles use the
// nearest-rank definition: p(q) is the smallest sample with at least q of
// all samples at or below it, so p50 <= p99 <= p99.9 <= max always holds.
//
// LatencyRecorder is thread-safe; LatencySummary is a plain value.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tcc::bench {

struct LatencySummary {
  uint64_t count = 0;
  // Nanoseconds; all 0 when count is 0.
  int64_t p50_ns = 0;
  int64_t p99_ns = 0;
  int64_t p999_ns = 0;
  int64_t max_ns = 0;
  double mean_ns = 0;
};

// The nearest-rank summary of `samples` (sorted in place).
LatencySummary Summarize(std::vector<int64_t>& samples);

class LatencyRecorder {
 public:
  void Record(int64_t latency_ns);
  // The summary of everything recorded so far.
  LatencySummary Summary() const;

 private:
  mutable std::mutex mu_;
  std::vector<int64_t> samples_;
};

}  // namespace tcc::bench
