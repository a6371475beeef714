#include "rpc/rate_limiter.h"

#include <algorithm>

namespace tcc::rpc {

RateLimiter::RateLimiter(uint32_t rate_per_s, uint32_t burst,
                         std::function<int64_t()> monotonic_ms,
                         size_t max_clients)
    : rate_per_s_(rate_per_s),
      burst_(burst > 0 ? burst : std::max<uint32_t>(rate_per_s, 1)),
      now_ms_(std::move(monotonic_ms)),
      max_clients_(std::max<size_t>(max_clients, 1)) {
  overflow_.tokens = burst_;
}

void RateLimiter::Refill(Bucket& b, int64_t now) const {
  if (now > b.at_ms) {
    b.tokens = std::min(burst_, b.tokens + static_cast<double>(now - b.at_ms) *
                                               rate_per_s_ / 1000.0);
  }
  b.at_ms = std::max(b.at_ms, now);
}

bool RateLimiter::Admit(const std::string& client) {
  if (rate_per_s_ <= 0) return true;
  const int64_t now = now_ms_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(client);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_clients_) {
      for (auto i = buckets_.begin(); i != buckets_.end();) {
        Refill(i->second, now);
        i = i->second.tokens >= burst_ ? buckets_.erase(i) : std::next(i);
      }
    }
    if (buckets_.size() >= max_clients_) {
      Refill(overflow_, now);
      if (overflow_.tokens < 1) return false;
      overflow_.tokens -= 1;
      return true;
    }
    it = buckets_.emplace(client, Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  Refill(b, now);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

size_t RateLimiter::clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.size();
}

}  // namespace tcc::rpc
