#include "runtime/call_policies.h"

#include <algorithm>
#include <cmath>

namespace tcc::runtime {

int64_t BackoffDelayMs(const BackoffOptions& o, uint32_t failures, bool stuck,
                       double uniform01) {
  if (stuck) return o.stuck_retry_ms;
  const uint32_t shift =
      std::min<uint32_t>(failures > 0 ? failures - 1 : 0, 30);
  const int64_t ceiling = std::min<int64_t>(o.cap_ms, o.base_ms << shift);
  return static_cast<int64_t>(uniform01 * static_cast<double>(ceiling + 1));
}

CallKind KindOf(wal::Phase phase) {
  switch (phase) {
    case wal::Phase::kTry:
      return CallKind::kTry;
    case wal::Phase::kConfirm:
      return CallKind::kConfirm;
    case wal::Phase::kCancel:
      return CallKind::kCancel;
  }
  return CallKind::kTry;
}

const TimeoutBounds& AdaptiveTimeouts::BoundsFor(const std::string& participant,
                                                 CallKind kind) const {
  if (overrides_.empty()) return bounds_;
  auto it = overrides_.find({participant, kind});
  return it == overrides_.end() ? bounds_ : it->second;
}

int64_t AdaptiveTimeouts::TimeoutMs(const std::string& participant,
                                    CallKind kind) const {
  const TimeoutBounds& bounds = BoundsFor(participant, kind);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(participant);
  if (it == series_.end() ||
      it->second[static_cast<size_t>(kind)].ring.size() < min_samples_) {
    return std::clamp(bounds.initial_ms, bounds.min_ms, bounds.max_ms);
  }
  Series& s = it->second[static_cast<size_t>(kind)];
  if (!s.computed || s.unseen >= kRecomputeEvery) {
    scratch_.assign(s.ring.begin(), s.ring.end());
    const size_t idx = static_cast<size_t>(std::ceil(
                           0.99 * static_cast<double>(scratch_.size()))) -
                       1;
    std::nth_element(scratch_.begin(),
                     scratch_.begin() + static_cast<long>(idx), scratch_.end());
    s.p99 = scratch_[idx];
    s.computed = true;
    s.unseen = 0;
  }
  return std::clamp(2 * s.p99, bounds.min_ms, bounds.max_ms);
}

void AdaptiveTimeouts::Observe(const std::string& participant, CallKind kind,
                               int64_t latency_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(participant);
  if (it == series_.end()) it = series_.emplace(participant, Kinds{}).first;
  Series& s = it->second[static_cast<size_t>(kind)];
  if (s.ring.size() < window_) {
    s.ring.push_back(latency_ms);
  } else if (window_ > 0) {
    s.ring[s.next] = latency_ms;
    s.next = (s.next + 1) % window_;
  }
  ++s.unseen;
}

const char* BreakerStateName(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half-open";
  }
  return "?";
}

CircuitBreakers::Admit CircuitBreakers::Admission(
    const std::string& participant, CallKind kind, int64_t now_mono,
    std::function<void(bool)> held, bool* probe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (probe != nullptr) *probe = false;
  Breaker& b = breakers_[participant];
  if (b.state == BreakerState::kClosed) return Admit::kSend;
  if (b.state == BreakerState::kOpen &&
      now_mono - b.opened_at >= options_.open_ms) {
    b.state = BreakerState::kHalfOpen;
    b.probe_in_flight = false;
  }
  if (b.state == BreakerState::kHalfOpen && !b.probe_in_flight) {
    b.probe_in_flight = true;  // this call is the probe
    if (probe != nullptr) *probe = true;
    return Admit::kSend;
  }
  if (kind == CallKind::kConfirm || kind == CallKind::kCancel) {
    b.held.push_back(std::move(held));
    return Admit::kHold;
  }
  return Admit::kFailFast;
}

std::vector<std::function<void()>> CircuitBreakers::OnResult(
    const std::string& participant, bool reached, int64_t now_mono,
    bool* changed, uint64_t rpc) {
  std::vector<std::function<void()>> release;
  std::lock_guard<std::mutex> lock(mu_);
  Breaker& b = breakers_[participant];
  const BreakerState before = b.state;
  if (changed != nullptr) *changed = false;
  if (!reached && rpc != 0) {
    for (uint64_t seen : b.counted_rpcs) {
      if (seen == rpc) return release;  // that request's failure counted
    }
    b.counted_rpcs[b.next_counted] = rpc;
    b.next_counted = (b.next_counted + 1) % b.counted_rpcs.size();
  }
  if (reached) {
    b.failures = 0;
    if (b.state != BreakerState::kClosed) {
      b.state = BreakerState::kClosed;
      b.probe_in_flight = false;
      for (auto& h : b.held) {
        release.push_back([h = std::move(h)] { h(false); });
      }
      b.held.clear();
    }
  } else {
    ++b.failures;
    if (b.state == BreakerState::kHalfOpen ||
        (b.state == BreakerState::kClosed &&
         b.failures >= options_.failure_threshold)) {
      b.state = BreakerState::kOpen;
      b.opened_at = now_mono;
      b.probe_in_flight = false;
    }
  }
  if (changed != nullptr) *changed = before != b.state;
  return release;
}

// The first held call, released as the probe (none: no probe in flight).
std::vector<std::function<void()>> CircuitBreakers::NextProbe(Breaker& b) {
  std::vector<std::function<void()>> release;
  b.probe_in_flight = !b.held.empty();
  if (b.probe_in_flight) {
    release.push_back([h = std::move(b.held.front())] { h(true); });
    b.held.pop_front();
  }
  return release;
}

std::vector<std::function<void()>> CircuitBreakers::ProbeDue(
    const std::string& participant, int64_t now_mono) {
  std::lock_guard<std::mutex> lock(mu_);
  Breaker& b = breakers_[participant];
  if (b.state != BreakerState::kOpen ||
      now_mono - b.opened_at < options_.open_ms) {
    return {};
  }
  b.state = BreakerState::kHalfOpen;
  return NextProbe(b);
}

std::vector<std::function<void()>> CircuitBreakers::ProbeAbandoned(
    const std::string& participant) {
  std::lock_guard<std::mutex> lock(mu_);
  Breaker& b = breakers_[participant];
  if (b.state != BreakerState::kHalfOpen || !b.probe_in_flight) return {};
  // The next held call probes instead: else the held ones would wait for an
  // unrelated call to this participant, which may never come.
  return NextProbe(b);
}

BreakerState CircuitBreakers::State(const std::string& participant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = breakers_.find(participant);
  return it == breakers_.end() ? BreakerState::kClosed : it->second.state;
}

}  // namespace tcc::runtime
