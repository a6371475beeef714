// Retention (DESIGN.md section 9), on every store: a finished record goes
// only after the retention window from its phase 2; a TRIED or TRY_REJECTED
// record without phase 2 never goes; a cancel marker goes only once its
// try-deadline plus the allowed skew has passed, and a later Try is still
// refused by its deadline.
#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::BarrierState;
using barrier::Outcome;

constexpr int64_t kRetentionMs = 60'000;  // BarrierHarness's window

template <class Env>
void Retention() {
  BarrierHarness<Env> h;
  barrier::BranchCall tried = MakeCall("ret.tried", H());
  barrier::BranchCall rejected = MakeCall("ret.rejected", H());
  barrier::BranchCall confirmed = MakeCall("ret.confirmed", H());
  barrier::BranchCall cancelled = MakeCall("ret.cancelled", H());
  // A marker whose deadline lies far beyond the retention window.
  barrier::BranchCall marker =
      MakeCall("ret.marker", H(), kT0 + 10 * kRetentionMs);
  REQUIRE(h.Try(tried).ok());
  REQUIRE(h.Try(rejected, HandlerScript{.refuse = true}).ok());
  REQUIRE(h.Try(confirmed).ok());
  REQUIRE(h.Confirm(confirmed).ok());
  REQUIRE(h.Try(cancelled).ok());
  REQUIRE(h.Cancel(cancelled).ok());
  REQUIRE(h.Cancel(marker)->outcome == Outcome::kEmptyRollback);

  // Inside the window: nothing goes.
  h.clock.Set(kT0 + kRetentionMs - 1);
  CHECK(*h.barrier.CollectGarbage() == 0);

  // Past the window: the finished records go; the marker stays until its
  // deadline + skew; TRIED and TRY_REJECTED stay.
  h.clock.Set(kT0 + kRetentionMs);
  CHECK(*h.barrier.CollectGarbage() == 2);
  CHECK(h.State(confirmed.key) == BarrierState::kNotFound);
  CHECK(h.State(cancelled.key) == BarrierState::kNotFound);
  CHECK(h.State(marker.key) == BarrierState::kCancelledBeforeTry);
  CHECK(h.State(tried.key) == BarrierState::kTried);
  CHECK(h.State(rejected.key) == BarrierState::kTryRejected);

  h.clock.Set(marker.try_deadline_ms + kSkewMs);
  CHECK(*h.barrier.CollectGarbage() == 0);
  h.clock.Set(marker.try_deadline_ms + kSkewMs + 1);
  CHECK(*h.barrier.CollectGarbage() == 1);
  CHECK(h.State(marker.key) == BarrierState::kNotFound);
  // Without its marker, the late Try is refused by its deadline alone.
  auto late = h.Try(marker);
  REQUIRE(late.ok());
  CHECK(late->outcome == Outcome::kHangingRefused);
  CHECK(h.rec.Invocations("try") == 4);

  // Years later, TRIED without phase 2 is still there.
  h.clock.Set(kT0 + 1000LL * kRetentionMs);
  CHECK(*h.barrier.CollectGarbage() == 0);
  CHECK(h.State(tried.key) == BarrierState::kTried);
  CHECK(h.State(rejected.key) == BarrierState::kTryRejected);
}

TCC_STORE_TEST_CASE("retention removes only what section 9 allows", Retention)

TEST_CASE("retention: a raised marker expiry is respected", "[memory]") {
  BarrierHarness<MemoryEnv> h;
  barrier::BranchCall c = MakeCall("ret.raise", H());
  REQUIRE(h.Cancel(c).ok());
  barrier::BranchCall later = MakeCall("ret.raise", H(), kDeadlineMs + 500'000);
  REQUIRE(h.Cancel(later)->replayed);
  h.clock.Set(kT0 + kRetentionMs + kDeadlineMs - kT0 + kSkewMs + 1);
  CHECK(*h.barrier.CollectGarbage() == 0);
  h.clock.Set(later.try_deadline_ms + kSkewMs + 1);
  CHECK(*h.barrier.CollectGarbage() == 1);
}

}  // namespace
}  // namespace tcc::testing
