// The pure transaction state machine: `Step(txn, event, now) -> effects`
// (DESIGN.md sections 4, 6, 8 and 10).
//
// Pure: no I/O, no clock reads, no threads, no logging. Time comes in as
// `now_ms` (wall clock, Unix ms); randomness (backoff jitter) and per-call
// timeouts are the driver's business. Every change to durable state is made
// by building a `wal::Record` and applying it with `ApplyRecord`, the same
// function that recovery replays the log through; the record is then handed to
// the driver in a Persist effect.
//
// The driver's contract:
//  - Run the effects of one Step in order.
//  - Persist: append the records to the WAL for txn.gid with the durability
//    given. When a kDurable append completes, feed DurableEvent{seq}; when any
//    append fails, feed PersistFailedEvent{seq, status}. A kBuffered append
//    needs no answer unless it fails.
//  - Call / Query: send to the participant; feed exactly one CallReplyEvent /
//    QueryReplyEvent per effect (a transient error when the call times out,
//    plus any duplicated replies the network produces: they are harmless).
//  - ScheduleRetry: after a backoff delay, feed RetryDueEvent{branch}.
//  - ArmDeadline: at `at_ms`, feed DeadlineEvent{kind}.
//  - Answer: reply to the waiting caller with the status and MakeView(txn).
//  - Signal: metrics, logs, alerts only; never feeds anything back.
// Stale events (a retry timer, a reply or a deadline that no longer matters)
// are legal and ignored: OK and no effects.
//
// Write-ahead (DESIGN.md section 7) is structural: a Call effect for a Try is
// only produced in the Step that handles the DurableEvent of the record that
// registered its branch (or later), and a Confirm/Cancel only in or after the
// Step that handles the DurableEvent of the Decided record. Answers that carry
// a decision likewise wait for that DurableEvent.
//
// ## State table
//
// Rows: transaction state; columns: events. "- X" = refused with status X,
// nothing changed (FP FAILED_PRECONDITION, AE ALREADY_EXISTS, NF NOT_FOUND);
// "ignored" = OK, nothing changed; "-> S" = the transaction moves to S (to
// CONFIRMING or CANCELLING: a decision, which callers see once its Decided
// record is durable). The test "every (state, event) pair" in
// tests/core/machine_test.cc checks each cell.
//
// clang-format off
//
// Requests from callers:
//
//   state              | Submit / Begin      | Try (interactive)         | Commit(ids)             | Rollback
//   -------------------+---------------------+---------------------------+-------------------------+------------------
//   (none)             | Submit: TRYING;     | - NF                      | - NF                    | - NF
//                      |  Begin: OPEN        |                           |                         |
//   OPEN               | dup / - AE [1]      | new id: registered, Try   | -> TRYING (content      | -> CANCELLING [5]
//                      |                     |  once durable; known [2]  |  fixed), the rule [3]   |
//   TRYING             | dup / - AE [1]      | new id: - FP; known [2]   | waits [3]               | -> CANCELLING [5]
//   AWAITING_APPROVAL  | dup / - AE [1]      | new id: - FP; known [2]   | waits [3]               | -> CANCELLING
//   CONFIRMING         | dup / - AE [1]      | new id: - FP; known [2]   | answers OK [3]          | - FP
//   CANCELLING         | dup / - AE [1]      | new id: - FP; known [2]   | ABORTED, or - FP [4]    | answers OK
//   CONFIRMED          | dup / - AE [1]      | new id: - FP; known [2]   | answers OK [3]          | - FP
//   CANCELLED          | dup / - AE [1]      | new id: - FP; known [2]   | ABORTED, or - FP [4]    | answers OK
//
// Timers and recovery:
//
//   state              | try-deadline [6]            | approval deadline | Resume (new owner epoch)
//   -------------------+-----------------------------+-------------------+-------------------------------------
//   (none)             | - NF                        | - NF              | - NF
//   OPEN               | -> CANCELLING [7]           | ignored           | try-deadline re-armed (passed: as
//   TRYING             | a Try not SUCCEEDED:        | ignored           |  its column); the rule; unresolved
//                      |  -> CANCELLING [7]          |                   |  Trys queried [8]
//   AWAITING_APPROVAL  | ignored                     | -> CANCELLING     | approval deadline re-armed (or
//                      |                             |                   |  passed: -> CANCELLING)
//   CONFIRMING         | ignored                     | ignored           | phase 2 re-sent to the branches
//   CANCELLING         | ignored                     | ignored           |  not acknowledged
//   CONFIRMED          | ignored                     | ignored           | - FP
//   CANCELLED          | ignored                     | ignored           | - FP
//
// Operators, each with a one-time approval (DESIGN.md section 10):
//
//   state              | gate approve     | force Confirm             | force Cancel   | resolve branch
//   -------------------+------------------+---------------------------+----------------+-------------------------
//   (none)             | - NF             | - NF                      | - NF           | - NF
//   OPEN               | - FP             | - FP                      | -> CANCELLING  | - FP
//   TRYING             | - FP             | every Try EXECUTED, or    | -> CANCELLING  | - FP
//                      |                  |  held [9]: -> CONFIRMING; |                |
//                      |                  |  else - FP                |                |
//   AWAITING_APPROVAL  | -> CONFIRMING    | -> CONFIRMING             | -> CANCELLING  | - FP
//   CONFIRMING         | - FP             | - FP                      | - FP           | phase 2 not done: done
//   CANCELLING         | - FP             | - FP                      | - FP           |  by hand; else - FP
//   CONFIRMED          | - FP             | - FP                      | - FP           | - FP
//   CANCELLED          | - FP             | - FP                      | - FP           | - FP
//
// clang-format on
//
// [1] dup: the same kind (Submit, Begin) with the same content (Submit: the
//     content hash; Begin: revision and gate) is a duplicate, answered as it
//     asks; anything else - AE.
// [2] A known branch id with the same content is a duplicate; with other
//     content - AE. A new id on a submitted transaction is - FP too.
// [3] Ids that differ from the registered ones: - FP in every state. The
//     caller is answered as wait_for asks; a Cancel decision answers ABORTED.
// [4] - FP when the Cancel was a Rollback or forced; ABORTED when the rule,
//     a deadline or a witness decided it.
// [5] - FP while held [9]; UNAVAILABLE while a branch witnesses a Confirm
//     the WAL lost (the witness rule decides first).
// [6] The try-deadline has passed when the wall clock says so or when the
//     monotonic timer armed for it ran out (DeadlineEvent), whichever is first.
// [7] Not against a witness: a branch's barrier that shows a decision the WAL
//     lost decides instead, or holds the transaction [9].
// [8] After a restart every registered branch may have been tried, so none
//     is tried again before a Query says NOT_FOUND.
// [9] Held: witnesses contradict each other (Txn::held_reason); no automatic
//     decision, an operator forces one.
//
// A request that would quote a decision not yet durable is UNAVAILABLE
// (retry), whatever the table says. Replies, query answers, retry timers and
// durable notices are legal in every state that has calls or persists in
// flight; stale ones are ignored; a reply to a call never made, an answer to
// a query never asked or a durable notice for no persist is
// INVALID_ARGUMENT.
//
// Branch Try phase (per branch):
//
// clang-format off
//   NOT_SENT --durable-------------------------------> UNKNOWN (call in flight)
//   UNKNOWN  --EXECUTED------------------------------> SUCCEEDED
//   UNKNOWN  --REJECTED / HANGING_REFUSED / CONFLICT-> FAILED
//   UNKNOWN  --a definite refusal (FAILED_PRECONDITION,
//              INVALID_ARGUMENT; an alert)------------> FAILED
//   UNKNOWN  --transient error, timeout--------------> UNKNOWN; backoff, then Query:
//     TRIED (same hash)                                -> SUCCEEDED
//     TRY_REJECTED                                     -> FAILED
//     TRIED, CANCELLED_BEFORE_TRY, CONFIRMED or        -> FAILED (CONFLICT)
//       CANCELLED under another hash
//     CANCELLED_BEFORE_TRY, CONFIRMED, CANCELLED       -> a witness of a lost decision
//       (same hash; no decision is recorded)              (DESIGN.md section 8): stays
//                                                         UNKNOWN, alert, the witness rule
//     authoritative NOT_FOUND                          -> Try re-sent (same key) before
//                                                         the try-deadline, else the
//                                                         deadline decides; beside a
//                                                         witness, a fact for its rule
//     not authoritative, an error                      -> UNKNOWN; backoff, Query again
//   A Try that provably never left (the driver's circuit breaker, `not_sent`)
//   on a branch never sent before -> FAILED.
// clang-format on
//
// Decision rule (TRYING; after the witness rule): any FAILED -> Cancel; all
// SUCCEEDED -> Confirm (or AWAITING_APPROVAL with the gate); try-deadline with
// any not SUCCEEDED -> Cancel. OPEN decides only on Commit, Rollback or its
// deadline. Phase 2 (per branch): sent to every branch once Decided is
// durable; Confirm EXECUTED, Cancel EXECUTED / EMPTY_ROLLBACK / CONFLICT (with
// an alert) -> SUCCEEDED. Anything else is retried forever with backoff; after
// `stuck_after_failures` failures, or on a definite refusal
// (FAILED_PRECONDITION or INVALID_ARGUMENT, core/participant_status.h), the
// branch is flagged STUCK (alert) and retried at the slowest rate. All
// SUCCEEDED -> CONFIRMED / CANCELLED (Finished record, buffered). The
// try-deadline has passed when the wall clock says so or when the monotonic
// timer armed for it ran out (DeadlineEvent), whichever comes first.
//
// Recovery: replay each record with ReplayEvent (no effects), then one
// ResumeEvent with the new owner epoch: unresolved Trys are queried, phase 2
// is re-sent to every branch not acknowledged, expired deadlines cancel.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "core/transaction.h"
#include "tcc/wal/log.h"
#include "tcc/wal/records.h"

namespace tcc::core {

// Test-only rule breakers (issue 7's simulation must catch each). Off by
// default; production never sets them.
struct RuleBreakers {
  // (a) Anti-hanging assumption broken: a branch whose Try outcome is unknown
  // (or that was never sent) is assumed to hold nothing, so a Cancel decision
  // skips it (no Cancel, so no barrier marker) and marks it done. A Try that
  // executed but whose reply was lost, or that arrives late, keeps its
  // reservation.
  bool skip_cancel_for_unconfirmed_try = false;
  // (b) The decision is acted on (phase-2 calls, answers) before its record is
  // durable.
  bool act_before_decision_durable = false;
  // (c) A replayed REJECTED Try answer is taken as EXECUTED.
  bool replayed_rejected_is_success = false;
  // (d) Issue 23's takeover without the unknown-Try lookup: a resumed
  // transaction (after a restart or a takeover) takes every branch whose Try
  // outcome is unknown (not resolved in the WAL: a call leaves no record of
  // its own) as tried (succeeded) instead of asking (Query).
  bool resume_skips_unknown_try_lookup = false;
};

struct Options {
  int64_t default_try_timeout_ms = 10'000;
  int64_t default_approval_timeout_ms = 60'000;
  // Longer requested timeouts are refused (INVALID_ARGUMENT).
  int64_t max_try_timeout_ms = 10 * 60'000;
  int64_t max_approval_timeout_ms = 24LL * 3600'000;
  size_t max_branches = 64;
  size_t max_payload_bytes = 64 * 1024;
  // Phase-2 failures of one branch before it is flagged STUCK.
  uint32_t stuck_after_failures = 20;
  RuleBreakers breakers;
};

// ---------------------------------------------------------------- events

struct SubmitEvent {
  RequestId request = 0;
  SubmitSpec spec;
  uint64_t owner_epoch = 0;  // the driver's, recorded in Registered
};

struct BeginEvent {
  RequestId request = 0;
  BeginSpec spec;
  uint64_t owner_epoch = 0;
};

struct TryEvent {  // interactive: one branch
  RequestId request = 0;
  BranchSpec branch;  // branch_hash computed by the core
};

struct CommitEvent {
  RequestId request = 0;
  std::vector<std::string> expected_branch_ids;
  WaitFor wait_for = WaitFor::kFinished;
};

struct RollbackEvent {
  RequestId request = 0;
  WaitFor wait_for = WaitFor::kFinished;
};

// A participant's answer to a Call effect (or the driver's verdict: a timeout
// is a transient status such as DEADLINE_EXCEEDED).
struct CallReplyEvent {
  uint32_t branch = 0;
  Phase phase = Phase::kTry;
  uint32_t attempt = 0;
  absl::Status status;  // OK: `outcome` holds the answer
  Outcome outcome = Outcome::kNone;
  bool replayed = false;
  std::string message;
  // True when the driver knows the call never left (e.g. circuit open).
  bool not_sent = false;
};

struct QueryReplyEvent {
  uint32_t branch = 0;
  uint64_t query_id = 0;
  absl::Status status;  // OK: the fields below hold the answer
  BarrierState barrier = BarrierState::kNotFound;
  Hash branch_hash{};
  bool authoritative = false;
};

struct RetryDueEvent {
  uint32_t branch = 0;
};

enum class DeadlineKind : uint8_t {
  kTry = 1,       // the try-deadline; for OPEN transactions also the OPEN one
  kApproval = 2,  // AWAITING_APPROVAL's deadline
};

// The monotonic timer armed by an ArmDeadlineEffect of this kind ran out.
struct DeadlineEvent {
  DeadlineKind kind = DeadlineKind::kTry;
};

struct DurableEvent {
  uint64_t seq = 0;
};

struct PersistFailedEvent {
  uint64_t seq = 0;
  absl::Status status;
};

struct GateApproveEvent {
  RequestId request = 0;
  std::string approval_id;
};

struct ForceDecisionEvent {
  RequestId request = 0;
  Decision decision = Decision::kCancel;
  std::string approval_id;
};

struct ResolveBranchEvent {
  RequestId request = 0;
  std::string branch_id;
  std::string approval_id;
};

// Recovery: one record of the transaction's log, in order. Not owned.
struct ReplayEvent {
  const wal::Record* record = nullptr;
};

// Recovery: the replayed transaction is taken over with a new owner epoch.
struct ResumeEvent {
  uint64_t owner_epoch = 0;
};

using Event =
    std::variant<SubmitEvent, BeginEvent, TryEvent, CommitEvent, RollbackEvent,
                 CallReplyEvent, QueryReplyEvent, RetryDueEvent, DeadlineEvent,
                 DurableEvent, PersistFailedEvent, GateApproveEvent,
                 ForceDecisionEvent, ResolveBranchEvent, ReplayEvent,
                 ResumeEvent>;

// ---------------------------------------------------------------- effects

struct PersistEffect {
  uint64_t seq = 0;
  wal::Durability durability = wal::Durability::kDurable;
  std::vector<wal::Record> records;
};

struct CallEffect {
  uint32_t branch = 0;
  Phase phase = Phase::kTry;
  uint32_t attempt = 0;
  // Upper bound for the call's timeout (time left to the try-deadline for a
  // Try); 0 = no bound. The driver picks the actual (adaptive) timeout.
  int64_t max_timeout_ms = 0;
  uint64_t owner_epoch = 0;
  int64_t try_deadline_ms = 0;
};

struct QueryEffect {
  uint32_t branch = 0;
  uint64_t query_id = 0;
};

struct ScheduleRetryEffect {
  uint32_t branch = 0;
  uint32_t failures = 0;  // how many failed in a row (backoff exponent)
  bool slowest = false;   // STUCK: retry at the cap
};

struct ArmDeadlineEffect {
  DeadlineKind kind = DeadlineKind::kTry;
  int64_t at_ms = 0;  // wall clock
};

struct AnswerEffect {
  RequestId request = 0;
  absl::Status status;  // OK: answer with MakeView(txn)
  bool duplicate = false;
  int branch = -1;  // Try answers: the branch
};

// For the observer only (metrics, logs, alerts).
enum class SignalKind : uint8_t {
  kAlert,            // an operator should look (text says why)
  kStuck,            // branch flagged STUCK
  kUnstuck,          // a STUCK branch succeeded
  kUnknownOutcome,   // a call's outcome became unknown
  kUnknownResolved,  // an unknown Try outcome resolved by a fact
  kRetry,            // a branch call will be retried
  kDecided,
  kFinished,
  // A decision the WAL had lost, adopted as a participant's barrier
  // witnessed it (DESIGN.md section 8): an operator should find out why the
  // WAL lost it.
  kLostDecision,
};
// "alert", "stuck", "unstuck", "unknown outcome", "unknown resolved",
// "retry", "decided", "finished", "lost decision"; "?" out of range.
const char* SignalKindName(SignalKind kind);

struct SignalEffect {
  SignalKind kind = SignalKind::kAlert;
  int branch = -1;
  std::string text;
};

using Effect =
    std::variant<PersistEffect, CallEffect, QueryEffect, ScheduleRetryEffect,
                 ArmDeadlineEffect, AnswerEffect, SignalEffect>;

struct StepResult {
  // Not OK: the event is illegal in this state (or a request is refused):
  // nothing changed, no effects. A refused request should be answered with
  // this status by the driver.
  absl::Status status;
  std::vector<Effect> effects;
};

// Applies one event. See the header comment for the contract.
[[nodiscard]] StepResult Step(Txn& txn, const Event& event, int64_t now_ms,
                              const Options& options = {});

// Applies one durable fact to the transaction's durable fields. Used by Step
// for every change and by recovery (ReplayEvent). INVALID_ARGUMENT when the
// record does not fit the transaction (nothing changed).
[[nodiscard]] absl::Status ApplyRecord(Txn& txn, const wal::Record& record);

}  // namespace tcc::core
