// Every row of DESIGN.md section 11's three tables, on every store: the
// outcome, `replayed`, whether the business handler ran, and what was
// written (barrier record and business data).
#include <vector>

#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::BarrierState;
using barrier::Outcome;
using Code = absl::StatusCode;

enum class Setup {
  kNothing,
  kTried,
  kTryRejected,
  kCancelledBeforeTry,
  kCancelledAfterTry,
  kCancelledAfterReject,
  kConfirmed,
};
enum class Op { kTry, kConfirm, kCancel };

constexpr int64_t kLate = kDeadlineMs + kSkewMs + 1;
constexpr int64_t kEdge = kDeadlineMs + kSkewMs;

struct Row {
  const char* name;
  Setup setup;
  bool setup_other_hash;  // the record was made by a call with H2
  Op op;                  // always with hash H
  HandlerScript script;
  int64_t now;  // the participant's clock during the call
  Code code;
  Outcome outcome;  // when code is OK
  bool replayed;
  bool handler_runs;
  BarrierState state_after;
  bool writes;  // false: the record must be exactly as before
};

const HandlerScript kOk{};
const HandlerScript kRefuse{.refuse = true};
const HandlerScript kFail{.fail = true};
const HandlerScript kThrow{.throw_ = true};

// clang-format off
const std::vector<Row> kRows = {
  // ---- Try (hash h) ----
  // Row 1: any Cancel.
  {"try/CBT -> hanging_refused", Setup::kCancelledBeforeTry, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kCancelledBeforeTry, false},
  {"try/CBT(h2) -> hanging_refused", Setup::kCancelledBeforeTry, true, Op::kTry, kOk, kT0, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kCancelledBeforeTry, false},
  {"try/CANCELLED -> hanging_refused", Setup::kCancelledAfterTry, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kCancelled, false},
  {"try/CANCELLED(h2) -> hanging_refused", Setup::kCancelledAfterTry, true, Op::kTry, kOk, kT0, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kCancelled, false},
  {"try/CANCELLED after reject -> hanging_refused", Setup::kCancelledAfterReject, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kCancelled, false},
  // Row 2: past the try-deadline + skew, no Try state.
  {"try/late, nothing -> hanging_refused", Setup::kNothing, false, Op::kTry, kOk, kLate, Code::kOk, Outcome::kHangingRefused, false, false, BarrierState::kNotFound, false},
  {"try/at deadline+skew, nothing -> executed", Setup::kNothing, false, Op::kTry, kOk, kEdge, Code::kOk, Outcome::kExecuted, false, true, BarrierState::kTried, true},
  {"try/late, TRIED(h) -> executed, replayed", Setup::kTried, false, Op::kTry, kOk, kLate, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kTried, false},
  {"try/late, TRIED(h2) -> conflict", Setup::kTried, true, Op::kTry, kOk, kLate, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTried, false},
  // Row 3: Try state under another hash.
  {"try/TRIED(h2) -> conflict", Setup::kTried, true, Op::kTry, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTried, false},
  {"try/TRY_REJECTED(h2) -> conflict", Setup::kTryRejected, true, Op::kTry, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTryRejected, false},
  {"try/CONFIRMED(h2) -> conflict", Setup::kConfirmed, true, Op::kTry, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kConfirmed, false},
  // Rows 4 and 5: the stored answer.
  {"try/TRIED(h) -> executed, replayed", Setup::kTried, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kTried, false},
  {"try/CONFIRMED(h) -> executed, replayed", Setup::kConfirmed, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kConfirmed, false},
  {"try/TRY_REJECTED(h) -> rejected, replayed", Setup::kTryRejected, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kRejected, true, false, BarrierState::kTryRejected, false},
  // Row 6: nothing.
  {"try/nothing -> executed", Setup::kNothing, false, Op::kTry, kOk, kT0, Code::kOk, Outcome::kExecuted, false, true, BarrierState::kTried, true},
  {"try/nothing, business refuses -> rejected", Setup::kNothing, false, Op::kTry, kRefuse, kT0, Code::kOk, Outcome::kRejected, false, true, BarrierState::kTryRejected, true},
  {"try/nothing, handler fails -> unavailable", Setup::kNothing, false, Op::kTry, kFail, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kNotFound, false},
  {"try/nothing, handler throws -> unavailable", Setup::kNothing, false, Op::kTry, kThrow, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kNotFound, false},

  // ---- Confirm (hash h) ----
  // Row 1: CONFIRMED (h).
  {"confirm/CONFIRMED(h) -> executed, replayed", Setup::kConfirmed, false, Op::kConfirm, kOk, kT0, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kConfirmed, false},
  // Row 2: any Cancel (whatever the hash).
  {"confirm/CANCELLED -> failed_precondition", Setup::kCancelledAfterTry, false, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kCancelled, false},
  {"confirm/CANCELLED(h2) -> failed_precondition", Setup::kCancelledAfterTry, true, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kCancelled, false},
  {"confirm/CBT -> failed_precondition", Setup::kCancelledBeforeTry, false, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kCancelledBeforeTry, false},
  {"confirm/CBT(h2) -> failed_precondition", Setup::kCancelledBeforeTry, true, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kCancelledBeforeTry, false},
  // Row 3: another hash.
  {"confirm/TRIED(h2) -> conflict", Setup::kTried, true, Op::kConfirm, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTried, false},
  {"confirm/TRY_REJECTED(h2) -> conflict", Setup::kTryRejected, true, Op::kConfirm, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTryRejected, false},
  {"confirm/CONFIRMED(h2) -> conflict", Setup::kConfirmed, true, Op::kConfirm, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kConfirmed, false},
  // Row 4: TRIED (h).
  {"confirm/TRIED(h) -> executed", Setup::kTried, false, Op::kConfirm, kOk, kT0, Code::kOk, Outcome::kExecuted, false, true, BarrierState::kConfirmed, true},
  {"confirm/TRIED(h), late -> executed", Setup::kTried, false, Op::kConfirm, kOk, kLate, Code::kOk, Outcome::kExecuted, false, true, BarrierState::kConfirmed, true},
  {"confirm/TRIED(h), handler fails -> unavailable", Setup::kTried, false, Op::kConfirm, kFail, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kTried, false},
  {"confirm/TRIED(h), handler throws -> unavailable", Setup::kTried, false, Op::kConfirm, kThrow, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kTried, false},
  // Row 5: no Try, or TRY_REJECTED.
  {"confirm/nothing -> failed_precondition", Setup::kNothing, false, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kNotFound, false},
  {"confirm/TRY_REJECTED(h) -> failed_precondition", Setup::kTryRejected, false, Op::kConfirm, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kTryRejected, false},

  // ---- Cancel (hash h) ----
  // Row 1: CANCELLED or CBT: the stored answer (whatever the hash).
  {"cancel/CANCELLED -> executed, replayed", Setup::kCancelledAfterTry, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kCancelled, false},
  {"cancel/CANCELLED(h2) -> executed, replayed", Setup::kCancelledAfterTry, true, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kExecuted, true, false, BarrierState::kCancelled, false},
  {"cancel/CANCELLED after reject -> empty_rollback, replayed", Setup::kCancelledAfterReject, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kEmptyRollback, true, false, BarrierState::kCancelled, false},
  {"cancel/CBT -> empty_rollback, replayed", Setup::kCancelledBeforeTry, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kEmptyRollback, true, false, BarrierState::kCancelledBeforeTry, false},
  {"cancel/CBT(h2) -> empty_rollback, replayed", Setup::kCancelledBeforeTry, true, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kEmptyRollback, true, false, BarrierState::kCancelledBeforeTry, false},
  // Row 2: CONFIRMED.
  {"cancel/CONFIRMED -> failed_precondition", Setup::kConfirmed, false, Op::kCancel, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kConfirmed, false},
  {"cancel/CONFIRMED(h2) -> failed_precondition", Setup::kConfirmed, true, Op::kCancel, kOk, kT0, Code::kFailedPrecondition, Outcome::kUnspecified, false, false, BarrierState::kConfirmed, false},
  // Row 3: another hash.
  {"cancel/TRIED(h2) -> conflict", Setup::kTried, true, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTried, false},
  {"cancel/TRY_REJECTED(h2) -> conflict", Setup::kTryRejected, true, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kConflict, false, false, BarrierState::kTryRejected, false},
  // Row 4: nothing.
  {"cancel/nothing -> empty_rollback", Setup::kNothing, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kEmptyRollback, false, false, BarrierState::kCancelledBeforeTry, true},
  {"cancel/nothing, late -> empty_rollback", Setup::kNothing, false, Op::kCancel, kOk, kLate, Code::kOk, Outcome::kEmptyRollback, false, false, BarrierState::kCancelledBeforeTry, true},
  // Row 5: TRY_REJECTED (h).
  {"cancel/TRY_REJECTED(h) -> empty_rollback", Setup::kTryRejected, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kEmptyRollback, false, false, BarrierState::kCancelled, true},
  // Row 6: TRIED (h).
  {"cancel/TRIED(h) -> executed", Setup::kTried, false, Op::kCancel, kOk, kT0, Code::kOk, Outcome::kExecuted, false, true, BarrierState::kCancelled, true},
  {"cancel/TRIED(h), handler fails -> unavailable", Setup::kTried, false, Op::kCancel, kFail, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kTried, false},
  {"cancel/TRIED(h), handler throws -> unavailable", Setup::kTried, false, Op::kCancel, kThrow, kT0, Code::kUnavailable, Outcome::kUnspecified, false, true, BarrierState::kTried, false},
};
// clang-format on

template <class Env>
void Prepare(BarrierHarness<Env>& h, Setup setup,
             const barrier::BranchCall& c) {
  auto ok = [](const absl::StatusOr<barrier::BarrierAnswer>& a) {
    REQUIRE(a.ok());
    REQUIRE(!a->replayed);
  };
  switch (setup) {
    case Setup::kNothing:
      return;
    case Setup::kTried:
      return ok(h.Try(c));
    case Setup::kTryRejected:
      return ok(h.Try(c, kRefuse));
    case Setup::kCancelledBeforeTry:
      return ok(h.Cancel(c));
    case Setup::kCancelledAfterTry:
      ok(h.Try(c));
      return ok(h.Cancel(c));
    case Setup::kCancelledAfterReject:
      ok(h.Try(c, kRefuse));
      return ok(h.Cancel(c));
    case Setup::kConfirmed:
      ok(h.Try(c));
      return ok(h.Confirm(c));
  }
}

const char* PhaseOf(Op op) {
  return op == Op::kTry ? "try" : op == Op::kConfirm ? "confirm" : "cancel";
}

template <class Env>
void EveryRow() {
  BarrierHarness<Env> h;
  int i = 0;
  for (const Row& row : kRows) {
    INFO(Env::kName << ": " << row.name);
    h.clock.Set(kT0);
    const std::string gid = "rows." + std::to_string(i++);
    barrier::BranchCall setup_call =
        MakeCall(gid, row.setup_other_hash ? H2() : H());
    Prepare(h, row.setup, setup_call);
    barrier::BranchCall call = MakeCall(gid, H());

    const auto before = h.Record(call.key);
    const int64_t effect_before = Effect(h.store(), PhaseOf(row.op), call.key);
    const int runs_before = h.rec.TotalInvocations();
    h.clock.Set(row.now);

    absl::StatusOr<barrier::BarrierAnswer> answer =
        row.op == Op::kTry       ? h.Try(call, row.script)
        : row.op == Op::kConfirm ? h.Confirm(call, row.script)
                                 : h.Cancel(call, row.script);

    CHECK(answer.status().code() == row.code);
    if (answer.ok()) {
      CHECK(answer->outcome == row.outcome);
      CHECK(answer->replayed == row.replayed);
    }
    CHECK((h.rec.TotalInvocations() - runs_before) ==
          (row.handler_runs ? 1 : 0));
    CHECK(h.State(call.key) == row.state_after);
    const auto after = h.Record(call.key);
    if (!row.writes) {
      CHECK(after == before);
    } else {
      REQUIRE(after.has_value());
      CHECK(after->branch_hash == H());
    }
    // The business change commits with the barrier record, or not at all.
    const bool business_committed = row.handler_runs && answer.ok() &&
                                    answer->outcome == Outcome::kExecuted &&
                                    !answer->replayed;
    CHECK(Effect(h.store(), PhaseOf(row.op), call.key) ==
          effect_before + (business_committed ? 1 : 0));
  }
}

TCC_STORE_TEST_CASE("every row of the Try, Confirm and Cancel tables", EveryRow)

// Cancel on an existing cancel marker raises the marker's expiry to this
// call's try-deadline when later, and never lowers it.
template <class Env>
void CancelRaisesMarkerExpiry() {
  BarrierHarness<Env> h;
  barrier::BranchCall c = MakeCall("expiry", H());
  REQUIRE(h.Cancel(c)->outcome == Outcome::kEmptyRollback);
  REQUIRE(h.Record(c.key)->try_deadline_ms == kDeadlineMs);

  barrier::BranchCall later = MakeCall("expiry", H2(), kDeadlineMs + 50'000);
  auto a = h.Cancel(later);
  REQUIRE(a.ok());
  CHECK(a->outcome == Outcome::kEmptyRollback);
  CHECK(a->replayed);
  CHECK(h.Record(c.key)->try_deadline_ms == kDeadlineMs + 50'000);
  CHECK(h.Record(c.key)->branch_hash == H());

  barrier::BranchCall earlier = MakeCall("expiry", H(), kDeadlineMs - 1);
  REQUIRE(h.Cancel(earlier)->replayed);
  CHECK(h.Record(c.key)->try_deadline_ms == kDeadlineMs + 50'000);

  // A Try with the raised deadline is still refused by the marker.
  h.clock.Set(kDeadlineMs + 40'000);
  CHECK(h.Try(later)->outcome == Outcome::kHangingRefused);
  CHECK(h.rec.TotalInvocations() == 0);
}

TCC_STORE_TEST_CASE("a cancel raises the marker's expiry, never lowers it",
                    CancelRaisesMarkerExpiry)

// The stored answer carries the business's refusal reason.
template <class Env>
void RefusalReasonIsReplayed() {
  BarrierHarness<Env> h;
  barrier::BranchCall c = MakeCall("reason", H());
  auto first = h.Try(c, kRefuse);
  REQUIRE(first.ok());
  CHECK(first->outcome == Outcome::kRejected);
  CHECK(first->message == "no funds");
  auto again = h.Try(c);
  REQUIRE(again.ok());
  CHECK(again->replayed);
  CHECK(again->message == "no funds");
  // The refusing handler's own write was discarded with it.
  CHECK(Effect(h.store(), "try", c.key) == 0);
}

TCC_STORE_TEST_CASE("a refusal's reason is stored and replayed",
                    RefusalReasonIsReplayed)

}  // namespace
}  // namespace tcc::testing
