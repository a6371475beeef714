#include "latency_summary.h"

#include <algorithm>
#include <cmath>

namespace tcc::bench {
namespace {

// Nearest rank: the ceil(q * n)-th smallest sample (1-based), at least the
// first. `sorted` is non-empty.
int64_t NearestRank(const std::vector<int64_t>& sorted, double q) {
  const double n = static_cast<double>(sorted.size());
  auto rank = static_cast<size_t>(std::ceil(q * n));
  if (rank < 1) rank = 1;
  if (rank > sorted.size()) rank = sorted.size();
  return sorted[rank - 1];
}

}  // namespace

LatencySummary Summarize(std::vector<int64_t>& samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = samples.size();
  s.p50_ns = NearestRank(samples, 0.50);
  s.p99_ns = NearestRank(samples, 0.99);
  s.p999_ns = NearestRank(samples, 0.999);
  s.max_ns = samples.back();
  double sum = 0;
  for (int64_t v : samples) sum += static_cast<double>(v);
  s.mean_ns = sum / static_cast<double>(samples.size());
  return s;
}

void LatencyRecorder::Record(int64_t latency_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.push_back(latency_ns);
}

LatencySummary LatencyRecorder::Summary() const {
  std::vector<int64_t> copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy = samples_;
  }
  return Summarize(copy);
}

}  // namespace tcc::bench
