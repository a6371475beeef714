// Per-client token buckets: `rate_per_s` calls a second per client, bursts
// up to `burst` (config limits.client_requests_per_s / client_burst). Time
// comes from the injected monotonic clock, so tests drive it.
//
// Memory is bounded: at most `max_clients` buckets; when full, buckets that
// have refilled completely (idle clients, indistinguishable from new ones)
// are dropped, and if none has, the new client shares one overflow bucket.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tcc::rpc {

class RateLimiter {
 public:
  // rate_per_s 0: no limit. burst 0: one second's worth.
  RateLimiter(uint32_t rate_per_s, uint32_t burst,
              std::function<int64_t()> monotonic_ms,
              size_t max_clients = 100000);

  // Takes one token from `client`'s bucket; false when it is empty.
  bool Admit(const std::string& client);

  bool enabled() const { return rate_per_s_ > 0; }
  size_t clients() const;

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  void Refill(Bucket& b, int64_t now) const;

  const double rate_per_s_;
  const double burst_;
  std::function<int64_t()> now_ms_;
  const size_t max_clients_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
  Bucket overflow_;
};

}  // namespace tcc::rpc
