// How long each send of one etcd call waits, and the resending of calls
// whose outcome a timeout left unknown (DESIGN.md section 14, "Unknown
// outcomes"; etcd_log.h, txn_attempt_timeout_ms). etcd never answers a call
// that a follower forwarded to a leader that then died: a call sent with one
// long deadline waits it out whole. Pure: no I/O, no locks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "tcc/etcd/client.h"

namespace tcc::wal::internal {

// The deadline of each send of one call: the attempt deadline, kept by the
// second send that waited it out (right after etcd's leader died a send may
// reach a member that has not yet noticed, and etcd elects within one to two
// election timeouts), doubled from the third on, up to `cap_ms`. A send
// that failed at once (a member gone, "no leader") says nothing of how long
// etcd takes.
class SendDeadlines {
 public:
  SendDeadlines(int64_t attempt_ms, int64_t cap_ms)
      : ms_(std::min(attempt_ms, cap_ms)), cap_ms_(cap_ms) {}
  int64_t ms() const { return ms_; }
  // After a send that ended with `s`.
  void After(const absl::Status& s) {
    if (absl::IsDeadlineExceeded(s) && ++timeouts_ >= 2) {
      ms_ = std::min(cap_ms_, ms_ * 2);
    }
  }

 private:
  int64_t ms_;
  const int64_t cap_ms_;
  int timeouts_ = 0;
};

// A call that changes nothing (a read), or that is safe to send again as it
// is: `send(deadline_ms)` until it ends with anything but a timeout, or
// `total_ms` passed, or `stopping()`. Each send's deadline is
// SendDeadlines(attempt_ms, total_ms)'s, within what is left of total_ms.
// Returns the last send's result.
template <typename Send, typename Stopping>
auto ResendTimeouts(int64_t attempt_ms, int64_t total_ms,
                    const Stopping& stopping, const Send& send)
    -> decltype(send(int64_t{0})) {
  const auto start = std::chrono::steady_clock::now();
  SendDeadlines deadline(attempt_ms, total_ms);
  int64_t left = total_ms;
  while (true) {
    auto r = send(std::min(left, deadline.ms()));
    if (!absl::IsDeadlineExceeded(r.status()) || stopping()) return r;
    left = total_ms - std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    if (left <= 0) return r;
    deadline.After(r.status());
  }
}

// The same for a caller that has nothing to stop it.
template <typename Send>
auto ResendTimeouts(const etcd::SendTimeouts& t, const Send& send)
    -> decltype(send(int64_t{0})) {
  return ResendTimeouts(
      t.attempt_ms, t.total_ms, [] { return false; }, send);
}

}  // namespace tcc::wal::internal
