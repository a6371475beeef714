// Keeps one etcd lease alive and says how long it may be trusted (DESIGN.md
// section 14, "Membership and leases").
//
// A keep-alive is sent every `interval_ms` (default TTL/3) on a LeaseKeepAlive
// stream to the client's member in use; etcd answers each request, in order,
// with the lease's TTL. The lease is trusted until the *send* time (on the
// BootClock) of the newest answered keep-alive plus the TTL it was granted,
// minus `margin_ms`: whatever the delays, etcd cannot have let the lease
// expire before then. An answer with TTL <= 0 means the lease is gone: `lost`
// is called once and nothing more is sent. A stream that fails, or leaves a
// keep-alive unanswered for longer than the interval, is closed and opened
// again on the next member.
//
// Thread-safety: every method may be called from any thread; `lost` runs on
// the thread reading the keep-alive stream's answers and must not call
// Stop(), Revoke() or the destructor (they wait for that thread: a
// deadlock, not an error).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/etcd/boot_clock.h"
#include "tcc/etcd/client.h"

namespace tcc::etcd {

struct LeaseKeeperOptions {
  int64_t ttl_ms = 5000;         // whole seconds, at least 2 s (cluster config)
  int64_t margin_ms = 500;       // trust ends this long before the lease could
  int64_t interval_ms = 0;       // between keep-alives; 0: ttl / 3
  int64_t grant_timeout_ms = 0;  // the grant's deadline; 0: the client's
};

class LeaseKeeper {
 public:
  using LostFn = std::function<void(const absl::Status&)>;

  // Grants a new lease of options.ttl_ms and keeps it alive. Its trust
  // starts at the grant's send time. `client` and `clock` must outlive it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LeaseKeeper>> Grant(
      Client& client, LeaseKeeperOptions options, BootClock& clock,
      LostFn lost);

  // Stops keeping the lease alive (it expires by itself); does not revoke.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  int64_t lease_id() const { return lease_id_; }
  int64_t granted_ttl_ms() const { return ttl_ms_; }
  // The BootClock time until which the lease is trusted.
  int64_t trusted_until_ms() const;
  bool Trusted() const { return clock_.NowMs() < trusted_until_ms(); }
  // True once etcd said the lease is gone (or Revoke ran).
  bool lost() const;
  // Keep-alives answered so far (tests wait on it).
  uint64_t answered() const;

  // Stops the keep-alives and revokes the lease (its keys go at once).
  [[nodiscard]] absl::Status Revoke();
  // Stops the keep-alives (idempotent).
  void Stop();

 private:
  LeaseKeeper(Client& client, LeaseKeeperOptions options, BootClock& clock,
              LostFn lost, int64_t lease_id, int64_t ttl_ms,
              int64_t trusted_until_ms);
  void Loop();
  // One stream's life: sends every interval until it fails, stalls or the
  // keeper stops.
  void RunStream();
  void OnAnswer(int64_t sent_at_ms, int64_t ttl_s);

  Client& client_;
  const LeaseKeeperOptions options_;
  BootClock& clock_;
  const LostFn lost_fn_;
  const int64_t lease_id_;
  const int64_t ttl_ms_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool lost_ = false;
  int64_t trusted_until_ms_;
  uint64_t answered_ = 0;
  std::thread thread_;
};

}  // namespace tcc::etcd
