// The clock lease trust is measured on (DESIGN.md section 14, "Membership
// and leases"): monotonic, and counting the time the machine was suspended
// (CLOCK_BOOTTIME), so a node that slept past its lease knows it did.
// SystemBootClock is the one implementation that reads the operating
// system; tests use ManualBootClock.
//
// Thread-safety: both are safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace tcc::etcd {

class BootClock {
 public:
  virtual ~BootClock() = default;
  // Milliseconds since boot, suspend included.
  virtual int64_t NowMs() const = 0;
};

class SystemBootClock final : public BootClock {
 public:
  int64_t NowMs() const override;
  // A process-wide instance (never destroyed).
  static SystemBootClock& Default();
};

class ManualBootClock final : public BootClock {
 public:
  explicit ManualBootClock(int64_t now_ms = 0) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void Advance(int64_t ms) { now_ms_.fetch_add(ms); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace tcc::etcd
