// How the driver paces participant calls (DESIGN.md section 8): backoff with
// full jitter, adaptive per-call timeouts, and a circuit breaker per
// participant. Pure policy objects: time comes in as arguments.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tcc/wal/records.h"

namespace tcc::runtime {

struct BackoffOptions {
  int64_t base_ms = 20;            // first backoff: uniform [0, base]
  int64_t cap_ms = 5000;           // never above this
  int64_t stuck_retry_ms = 60000;  // a STUCK branch's period
};

// Full jitter: uniform in [0, min(cap, base * 2^(failures-1))]; `uniform01`
// is a draw in [0, 1) from the injected RNG.
int64_t BackoffDelayMs(const BackoffOptions& o, uint32_t failures, bool stuck,
                       double uniform01);

struct TimeoutBounds {
  int64_t min_ms = 20;
  int64_t max_ms = 5000;
  int64_t initial_ms = 1000;  // before enough latency was observed
};

// Which kind of call a timeout is for.
enum class CallKind : uint8_t {
  kTry = 0,
  kConfirm = 1,
  kCancel = 2,
  kQuery = 3
};
CallKind KindOf(wal::Phase phase);

// Bounds for particular (participant, call kind) pairs; the rest use the
// default bounds.
using TimeoutOverrides =
    std::map<std::pair<std::string, CallKind>, TimeoutBounds>;

// About 2x the observed p99 latency per participant and call kind, clamped to
// the bounds (the pair's own, else the default). Thread-safe.
class AdaptiveTimeouts {
 public:
  explicit AdaptiveTimeouts(TimeoutBounds bounds, size_t window = 256,
                            size_t min_samples = 20,
                            TimeoutOverrides overrides = {})
      : bounds_(bounds),
        overrides_(std::move(overrides)),
        window_(window),
        min_samples_(min_samples) {}

  int64_t TimeoutMs(const std::string& participant, CallKind kind) const;
  // A call that answered (any outcome) after `latency_ms`.
  void Observe(const std::string& participant, CallKind kind,
               int64_t latency_ms);

 private:
  const TimeoutBounds& BoundsFor(const std::string& participant,
                                 CallKind kind) const;

  TimeoutBounds bounds_;
  TimeoutOverrides overrides_;
  size_t window_;
  size_t min_samples_;
  mutable std::mutex mu_;
  // The p99 is recomputed (a selection over the window) at most once per
  // kRecomputeEvery observations, not on every call. Nothing here allocates
  // once a series is full: the window is a ring, the selection works in a
  // scratch buffer kept for the next time.
  static constexpr uint32_t kRecomputeEvery = 16;
  struct Series {
    std::vector<int64_t> ring;  // the last `window_` latencies
    size_t next = 0;            // where the next one goes once full
    int64_t p99 = 0;
    bool computed = false;
    uint32_t unseen = 0;  // observations since p99 was computed
  };
  using Kinds = std::array<Series, 4>;  // by CallKind
  mutable std::map<std::string, Kinds, std::less<>> series_;
  mutable std::vector<int64_t> scratch_;
};

struct BreakerOptions {
  uint32_t failure_threshold = 5;  // consecutive failures that open it
  int64_t open_ms = 2000;          // open this long before a probe
};

enum class BreakerState : uint8_t { kClosed, kOpen, kHalfOpen };
const char* BreakerStateName(BreakerState s);

// A circuit breaker per participant (closed, open, half-open). While open,
// new Trys and Queries fail fast; phase-2 calls are held and released once a
// probe succeeds. After open_ms, the next call (or a held one) is the probe.
// Thread-safe; released calls are returned to the caller to run, never run
// under the lock.
class CircuitBreakers {
 public:
  explicit CircuitBreakers(BreakerOptions options) : options_(options) {}

  enum class Admit : uint8_t { kSend, kFailFast, kHold };
  // Whether a call of `kind` may go now. kHold: `held` is kept and returned
  // by a later OnResult/ProbeDue once the participant is back; it is then
  // called with whether it was released as the probe.
  // `probe` (if given) says whether a kSend made this call the probe.
  Admit Admission(const std::string& participant, CallKind kind,
                  int64_t now_mono, std::function<void(bool as_probe)> held,
                  bool* probe = nullptr);
  // A call's result: `reached` when the participant answered (any outcome or
  // a non-transient error). Returns held calls to release now, and whether
  // the state changed (for the observer). `rpc`: the id of the request that
  // carried the call when it carried several (RpcOf); a failure of a request
  // already counted (another call of the same batch) changes nothing, so
  // one slow batch of 64 calls is one failure, not 64. 0: count it.
  std::vector<std::function<void()>> OnResult(const std::string& participant,
                                              bool reached, int64_t now_mono,
                                              bool* changed, uint64_t rpc = 0);
  // The open period passed: one held call becomes the probe (returned).
  std::vector<std::function<void()>> ProbeDue(const std::string& participant,
                                              int64_t now_mono);
  // A call released as the probe (`as_probe`) that was not sent (its
  // transaction went away, or the call is no longer wanted): the next held
  // call is the probe instead (returned, to run).
  [[nodiscard]] std::vector<std::function<void()>> ProbeAbandoned(
      const std::string& participant);
  BreakerState State(const std::string& participant) const;
  int64_t OpenMs() const { return options_.open_ms; }

 private:
  struct Breaker {
    BreakerState state = BreakerState::kClosed;
    uint32_t failures = 0;
    int64_t opened_at = 0;
    bool probe_in_flight = false;
    std::deque<std::function<void(bool)>> held;
    // The requests whose failure was counted last (their other calls'
    // failures arrive after, possibly interleaved with other requests').
    std::array<uint64_t, 8> counted_rpcs{};
    size_t next_counted = 0;
  };
  static std::vector<std::function<void()>> NextProbe(Breaker& b);
  BreakerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Breaker> breakers_;
};

}  // namespace tcc::runtime
