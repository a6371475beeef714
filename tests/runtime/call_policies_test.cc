#include "runtime/call_policies.h"

#include <catch2/catch.hpp>

#include "runtime/environment.h"

namespace tcc::runtime {
namespace {

TEST_CASE("backoff: full jitter under an exponential ceiling, capped",
          "[policies]") {
  BackoffOptions o{20, 5000, 60000};
  CHECK(BackoffDelayMs(o, 1, false, 0.999) <= 20);
  CHECK(BackoffDelayMs(o, 3, false, 0.999) <= 80);
  CHECK(BackoffDelayMs(o, 3, false, 0.999) > 40);
  CHECK(BackoffDelayMs(o, 40, false, 0.999) <= 5000);
  CHECK(BackoffDelayMs(o, 40, false, 0.999) > 4000);
  CHECK(BackoffDelayMs(o, 5, false, 0.0) == 0);
  CHECK(BackoffDelayMs(o, 5, true, 0.5) == 60000);
}

TEST_CASE("adaptive timeout: about 2x p99, clamped", "[policies]") {
  AdaptiveTimeouts t(TimeoutBounds{20, 5000, 1000}, 256, 20);
  CHECK(t.TimeoutMs("p", CallKind::kTry) == 1000);
  for (int i = 0; i < 100; ++i)
    t.Observe("p", CallKind::kTry, i < 98 ? 10 : 100);
  CHECK(t.TimeoutMs("p", CallKind::kTry) == 200);
  CHECK(t.TimeoutMs("p", CallKind::kConfirm) == 1000);  // per kind
  for (int i = 0; i < 300; ++i) t.Observe("q", CallKind::kTry, 1);
  CHECK(t.TimeoutMs("q", CallKind::kTry) == 20);  // min bound
  for (int i = 0; i < 300; ++i) t.Observe("q", CallKind::kTry, 9000);
  CHECK(t.TimeoutMs("q", CallKind::kTry) == 5000);  // max bound, window
}

TEST_CASE(
    "adaptive timeout: the window keeps the latest samples, oldest out "
    "first",
    "[policies]") {
  AdaptiveTimeouts t(TimeoutBounds{1, 100000, 1000}, 100, 20);
  for (int i = 0; i < 100; ++i) t.Observe("p", CallKind::kQuery, 10);
  CHECK(t.TimeoutMs("p", CallKind::kQuery) == 20);
  for (int i = 0; i < 50; ++i) t.Observe("p", CallKind::kQuery, 1000);
  CHECK(t.TimeoutMs("p", CallKind::kQuery) == 2000);
  // 99 more fast ones push out the 50 older fast ones and 49 of the slow
  // ones: one slow sample is left, below the p99 of 100.
  for (int i = 0; i < 99; ++i) t.Observe("p", CallKind::kQuery, 10);
  CHECK(t.TimeoutMs("p", CallKind::kQuery) == 20);
  // Two slower ones: the first replaces the last 1000 (the oldest sample
  // now), the second a fast one; two slow samples of 100 set the p99.
  t.Observe("p", CallKind::kQuery, 3000);
  t.Observe("p", CallKind::kQuery, 3000);
  for (int i = 0; i < 13; ++i) t.Observe("p", CallKind::kQuery, 10);
  CHECK(t.TimeoutMs("p", CallKind::kQuery) == 20);  // 15 new: not recomputed
  t.Observe("p", CallKind::kQuery, 10);
  CHECK(t.TimeoutMs("p", CallKind::kQuery) == 6000);  // 16: recomputed
}

TEST_CASE("adaptive timeout: per participant and kind bounds override",
          "[policies]") {
  TimeoutOverrides overrides;
  overrides[{"slow", CallKind::kConfirm}] = TimeoutBounds{500, 30000, 8000};
  AdaptiveTimeouts t(TimeoutBounds{20, 5000, 1000}, 256, 20, overrides);
  CHECK(t.TimeoutMs("slow", CallKind::kConfirm) == 8000);
  CHECK(t.TimeoutMs("slow", CallKind::kTry) == 1000);  // default bounds
  CHECK(t.TimeoutMs("fast", CallKind::kConfirm) == 1000);
  for (int i = 0; i < 100; ++i) t.Observe("slow", CallKind::kConfirm, 9000);
  CHECK(t.TimeoutMs("slow", CallKind::kConfirm) == 18000);  // over 5000
  for (int i = 0; i < 300; ++i) t.Observe("slow", CallKind::kConfirm, 1);
  CHECK(t.TimeoutMs("slow", CallKind::kConfirm) == 500);  // its own min
}

TEST_CASE("circuit breaker: closed, open, half-open probe, closed",
          "[policies]") {
  CircuitBreakers b(BreakerOptions{2, 100});
  bool changed = false;
  CHECK(b.Admission("p", CallKind::kTry, 0, nullptr) ==
        CircuitBreakers::Admit::kSend);
  b.OnResult("p", false, 0, &changed);
  CHECK(b.State("p") == BreakerState::kClosed);
  b.OnResult("p", false, 0, &changed);
  CHECK(changed);
  CHECK(b.State("p") == BreakerState::kOpen);
  CHECK(b.Admission("p", CallKind::kTry, 50, nullptr) ==
        CircuitBreakers::Admit::kFailFast);
  int released = 0, as_probe = 0;
  CHECK(b.Admission("p", CallKind::kConfirm, 50, [&](bool probe) {
    ++released;
    as_probe += probe;
  }) == CircuitBreakers::Admit::kHold);
  CHECK(b.Admission("p", CallKind::kCancel, 60, [&](bool probe) {
    ++released;
    as_probe += probe;
  }) == CircuitBreakers::Admit::kHold);
  auto probe = b.ProbeDue("p", 150);
  REQUIRE(probe.size() == 1);
  CHECK(b.State("p") == BreakerState::kHalfOpen);
  probe[0]();
  auto rest = b.OnResult("p", true, 160, &changed);
  CHECK(b.State("p") == BreakerState::kClosed);
  for (auto& f : rest) f();
  CHECK(released == 2);
  CHECK(as_probe == 1);  // the first as the probe, the other on closing
  // A failed probe opens it again.
  b.OnResult("p", false, 200, &changed);
  b.OnResult("p", false, 200, &changed);
  CHECK(b.Admission("p", CallKind::kTry, 300, nullptr) ==
        CircuitBreakers::Admit::kSend);  // the probe
  b.OnResult("p", false, 310, &changed);
  CHECK(b.State("p") == BreakerState::kOpen);
}

TEST_CASE(
    "circuit breaker: an abandoned probe hands over to the next held call",
    "[policies]") {
  CircuitBreakers b(BreakerOptions{1, 100});
  bool changed = false;
  b.OnResult("p", false, 0, &changed);
  REQUIRE(b.State("p") == BreakerState::kOpen);
  int first = 0, second = 0;
  REQUIRE(b.Admission("p", CallKind::kConfirm, 10, [&](bool probe) {
    ++first;
    CHECK(probe);
  }) == CircuitBreakers::Admit::kHold);
  REQUIRE(b.Admission("p", CallKind::kConfirm, 10, [&](bool probe) {
    ++second;
    CHECK(probe);
  }) == CircuitBreakers::Admit::kHold);
  auto probe = b.ProbeDue("p", 150);
  REQUIRE(probe.size() == 1);
  probe[0]();
  CHECK(first == 1);
  // Its transaction went away: the second held call probes instead.
  auto next = b.ProbeAbandoned("p");
  REQUIRE(next.size() == 1);
  next[0]();
  CHECK(second == 1);
  // That one went away too: nothing left to hand over.
  CHECK(b.ProbeAbandoned("p").empty());
  CHECK(b.State("p") == BreakerState::kHalfOpen);
  b.OnResult("p", true, 160, &changed);
  CHECK(b.State("p") == BreakerState::kClosed);
  CHECK(b.ProbeAbandoned("p").empty());
}

// Found by the cluster simulation: a call admitted as the probe that is then
// not sent (DriverOptions::may_call refused it) must be abandoned as the
// probe, else every later phase-2 call to the participant is held for ever.
TEST_CASE("circuit breaker: Admission says which call it made the probe",
          "[policies]") {
  CircuitBreakers b(BreakerOptions{1, 100});
  bool changed = false, probe = true;
  CHECK(b.Admission("p", CallKind::kConfirm, 0, nullptr, &probe) ==
        CircuitBreakers::Admit::kSend);
  CHECK_FALSE(probe);  // closed: no probe
  b.OnResult("p", false, 0, &changed);
  REQUIRE(b.State("p") == BreakerState::kOpen);
  CHECK(b.Admission("p", CallKind::kConfirm, 150, nullptr, &probe) ==
        CircuitBreakers::Admit::kSend);
  CHECK(probe);  // the open period passed: this call is the probe
  int held = 0;
  CHECK(b.Admission(
            "p", CallKind::kConfirm, 151, [&](bool) { ++held; }, &probe) ==
        CircuitBreakers::Admit::kHold);
  CHECK_FALSE(probe);
  // The probe was not sent after all: the held call probes instead.
  auto next = b.ProbeAbandoned("p");
  REQUIRE(next.size() == 1);
  next[0]();
  CHECK(held == 1);
  // And with nothing held, the next call probes.
  CHECK(b.ProbeAbandoned("p").size() == 0);
  CHECK(b.Admission("p", CallKind::kConfirm, 152, nullptr, &probe) ==
        CircuitBreakers::Admit::kSend);
  CHECK(probe);
}

TEST_CASE("circuit breaker: the failed calls of one request count once",
          "[policies]") {
  CircuitBreakers b(BreakerOptions{3, 100});
  bool changed = false;
  // One batch of 64 calls timed out: one failure, not 64.
  for (int i = 0; i < 64; ++i) b.OnResult("p", false, 0, &changed, 7);
  CHECK(b.State("p") == BreakerState::kClosed);
  // Another batch's failures, interleaved with the first one's stragglers.
  b.OnResult("p", false, 1, &changed, 8);
  b.OnResult("p", false, 1, &changed, 7);
  b.OnResult("p", false, 1, &changed, 8);
  CHECK(b.State("p") == BreakerState::kClosed);
  CHECK_FALSE(changed);
  // A third request fails: three failed requests in a row open it.
  b.OnResult("p", false, 2, &changed, 9);
  CHECK(changed);
  CHECK(b.State("p") == BreakerState::kOpen);

  // Untagged failures (single calls) each count.
  CircuitBreakers single(BreakerOptions{3, 100});
  single.OnResult("p", false, 0, &changed);
  single.OnResult("p", false, 0, &changed);
  CHECK(single.State("p") == BreakerState::kClosed);
  single.OnResult("p", false, 0, &changed);
  CHECK(single.State("p") == BreakerState::kOpen);

  // A success between two failures of one request resets the count; the
  // request's later failures still count only once.
  CircuitBreakers mixed(BreakerOptions{2, 100});
  mixed.OnResult("p", false, 0, &changed, 20);
  mixed.OnResult("p", true, 0, &changed, 0);
  mixed.OnResult("p", false, 0, &changed, 20);
  mixed.OnResult("p", false, 0, &changed, 21);
  CHECK(mixed.State("p") == BreakerState::kClosed);
  mixed.OnResult("p", false, 0, &changed, 22);
  CHECK(mixed.State("p") == BreakerState::kOpen);
}

TEST_CASE("rpc tags: set on errors only, read back, stripped", "[policies]") {
  absl::Status err = absl::DeadlineExceededError("Deadline Exceeded");
  CHECK(RpcOf(err) == 0);
  TagRpc(err, 42);
  CHECK(RpcOf(err) == 42);
  CHECK(err.code() == absl::StatusCode::kDeadlineExceeded);
  const absl::Status clean = ReceivedStatus(err);
  CHECK(RpcOf(clean) == 0);
  CHECK(clean == absl::DeadlineExceededError("Deadline Exceeded"));
  CHECK(clean.ToString() == "DEADLINE_EXCEEDED: Deadline Exceeded");
  absl::Status ok = absl::OkStatus();
  TagRpc(ok, 42);
  CHECK(ok.ok());
  CHECK(RpcOf(ok) == 0);
}

TEST_CASE("a participant's text is kept to 1 KiB, cut between characters",
          "[policies]") {
  CHECK(ClipParticipantText("short") == "short");
  const std::string exact(kMaxParticipantText, 'x');
  CHECK(ClipParticipantText(exact) == exact);
  // 1,023 ASCII bytes, then two-byte characters: the first "é" is bytes
  // 1,024-1,025, which a cut at 1,024 would split, so 1,023 are kept.
  std::string text(kMaxParticipantText - 1, 'a');
  for (int i = 0; i < 50; ++i) text += "\xC3\xA9";
  const std::string clipped = ClipParticipantText(text);
  CHECK(clipped ==
        std::string(kMaxParticipantText - 1, 'a') + "... (100 more bytes cut)");
  const absl::Status big = absl::UnavailableError(std::string(1 << 20, 'm'));
  const absl::Status kept = ReceivedStatus(big);
  CHECK(kept.code() == absl::StatusCode::kUnavailable);
  CHECK(kept.message().size() < kMaxParticipantText + 64);
}

}  // namespace
}  // namespace tcc::runtime
