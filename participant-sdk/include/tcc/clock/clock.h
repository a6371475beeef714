// The participant's clock, injected everywhere time matters (the barrier's
// try-deadline check, retention). SystemClock is the one implementation that
// reads the operating system; tests and the deterministic simulation use
// ManualClock, which only moves when told to.
//
// Times are Unix epoch milliseconds (wall clock), the unit of the wire
// contract's deadlines (proto/tcc/v1/participant.proto).
//
// Thread-safety: both implementations are safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace tcc::clock {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock now, Unix epoch milliseconds.
  virtual int64_t NowUnixMs() const = 0;
};

// The operating system's wall clock.
class SystemClock final : public Clock {
 public:
  int64_t NowUnixMs() const override;
  // A process-wide instance (never destroyed).
  static SystemClock& Default();
};

// A clock that stands still until a test (or the simulation) sets or
// advances it.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_unix_ms = 0) : now_ms_(now_unix_ms) {}
  int64_t NowUnixMs() const override {
    return now_ms_.load(std::memory_order_acquire);
  }
  void Set(int64_t now_unix_ms) {
    now_ms_.store(now_unix_ms, std::memory_order_release);
  }
  void Advance(int64_t delta_ms) {
    now_ms_.fetch_add(delta_ms, std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace tcc::clock
