// The records a transaction's write-ahead log is made of (DESIGN.md sections
// 6, 7 and 10).
//
// A transaction's history is an ordered list of records, appended by the one
// owner of its gid. Recovery rebuilds the transaction by replaying them through
// the core, so every record says a fact, not a command:
//
//   Registered      the transaction and its first branches, its absolute
//                   try-deadline and owner epoch. DURABLE before any Try.
//   BranchAdded     one more branch of an interactive (OPEN) transaction.
//                   DURABLE before its Try.
//   PhaseUpdate     a branch phase's progress (sent, attempts, outcome, last
//                   error). May be BUFFERED: lost ones are re-asked (Query) or
//                   re-sent under the same key.
//   StateChanged    a state change that is not a decision (OPEN -> TRYING at
//                   Commit, TRYING -> AWAITING_APPROVAL). Commit's record also
//                   fixes the content hash and the expected branch ids.
//   Decided         the decision and its cause, written once and never
//                   changed. DURABLE before any Confirm/Cancel is sent or any
//                   caller is told. May carry the approval it consumed.
//   BranchResolved  an operator marked a phase-2 branch done by hand; carries
//                   the approval it consumed. DURABLE.
//   Flagged         a branch flagged STUCK (or unflagged), with the reason.
//   Finished        the final state (CONFIRMED / CANCELLED). May be BUFFERED:
//                   if lost, recovery re-sends phase 2 and gets replayed
//                   answers.
//   EpochTaken      a new owner (process restart, shard move) took the
//                   transaction over with this owner epoch.
//
// The on-disk encoding of each record is owned by the implementation (see
// wal/src/record_codec.h); it carries a format version and decodes strictly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tcc/identity/content_hash.h"

namespace tcc::wal {

using identity::Hash;

// Transaction states (DESIGN.md section 6). Values are stored: never renumber.
enum class TxnState : uint8_t {
  kOpen = 1,
  kTrying = 2,
  kAwaitingApproval = 3,
  kConfirming = 4,
  kConfirmed = 5,
  kCancelling = 6,
  kCancelled = 7,
};

// True for CONFIRMED and CANCELLED.
constexpr bool IsFinal(TxnState s) {
  return s == TxnState::kConfirmed || s == TxnState::kCancelled;
}

// The names of this file's enums and records, one table each (records.cc);
// every other place that shows one calls these (metric labels are them in
// lower case). "?" for a value out of range.
//
// "OPEN", "TRYING", "AWAITING_APPROVAL", ..., "CANCELLED".
const char* TxnStateName(TxnState state);

// Values are stored: never renumber.
enum class Decision : uint8_t { kNone = 0, kConfirm = 1, kCancel = 2 };
// "Confirm", "Cancel"; "none".
const char* DecisionName(Decision decision);

// Why a decision was made; stored in its Decided record, so that recovery
// knows it too (a Commit after a Rollback is FAILED_PRECONDITION, after a
// failed Try ABORTED) and callers can tell a deadline from a rollback
// (tcc.v1.DecisionCause). Values are stored: never renumber.
enum class DecisionCause : uint8_t {
  kNone = 0,      // no decision
  kRule = 1,      // the decision rule (all EXECUTED, or a Try failed)
  kDeadline = 2,  // try-deadline, OPEN deadline or approval deadline
  kRollback = 3,  // the caller asked
  kForced = 4,    // an operator, with a one-time approval
  kGate = 5,      // the approval gate was approved
  // A participant's barrier witnessed a decision the WAL had lost
  // (DESIGN.md section 8): adopted, never decided against.
  kWitnessed = 6,
};
// "rule", "deadline", "rollback", "forced", "gate approved", "witnessed";
// "none".
const char* DecisionCauseName(DecisionCause cause);

// Which call of a branch a PhaseUpdate is about.
enum class Phase : uint8_t { kTry = 1, kConfirm = 2, kCancel = 3 };
// "Try", "Confirm", "Cancel".
const char* PhaseName(Phase phase);

// Where one phase of one branch stands (DESIGN.md section 6).
enum class PhaseState : uint8_t {
  kNotSent = 1,
  kUnknown = 2,  // sent, outcome unknown
  kSucceeded = 3,
  kFailed = 4,  // Try only
};
// "NOT_SENT", "UNKNOWN", "SUCCEEDED", "FAILED".
const char* PhaseStateName(PhaseState state);

// A participant's answer (mirrors tcc.v1.Outcome; 0 = none).
enum class Outcome : uint8_t {
  kNone = 0,
  kExecuted = 1,
  kEmptyRollback = 2,
  kRejected = 3,
  kHangingRefused = 4,
  kConflict = 5,
};
// "EXECUTED", "EMPTY_ROLLBACK", "REJECTED", "HANGING_REFUSED", "CONFLICT";
// "NONE".
const char* OutcomeName(Outcome outcome);

// What an approval allows (mirrors tcc.v1.ApprovalAction).
enum class ApprovalAction : uint8_t {
  kForceConfirm = 1,
  kForceCancel = 2,
  kResolveBranch = 3,
  kGateApprove = 4,
};
// As tccctl and the API's operators name them: "force-confirm",
// "force-cancel", "resolve-branch", "gate-approve".
const char* ApprovalActionName(ApprovalAction action);

// A one-time approval (DESIGN.md section 10), bound to gid, revision, content
// hash (and branch for kResolveBranch), with an expiry.
struct Approval {
  std::string approval_id;
  ApprovalAction action = ApprovalAction::kForceCancel;
  std::string gid;
  uint64_t revision = 0;
  Hash content_hash{};
  std::string branch_id;  // kResolveBranch only
  int64_t expires_at_ms = 0;
  std::string issued_by;
  int64_t issued_at_ms = 0;
  std::string reason;
  int64_t used_at_ms = 0;  // 0 while unused; set by the WAL when consumed
};

// One branch as registered.
struct BranchSpec {
  std::string branch_id;
  std::string participant;
  std::string action;
  std::string payload;
  Hash branch_hash{};
};

struct Registered {
  std::string gid;
  int64_t created_at_ms = 0;  // client's first-attempt time
  uint64_t revision = 0;
  bool interactive = false;  // opened with Begin (state OPEN)
  bool approval_gate = false;
  int64_t approval_timeout_ms = 0;
  int64_t try_deadline_ms = 0;  // absolute, wall clock; never recomputed
  int64_t registered_at_ms = 0;
  Hash content_hash{};  // all zero for an interactive transaction
  uint64_t owner_epoch = 0;
  std::vector<BranchSpec> branches;  // sorted by branch_id
};

struct BranchAdded {
  BranchSpec branch;
};

struct PhaseUpdate {
  std::string branch_id;
  Phase phase = Phase::kTry;
  PhaseState state = PhaseState::kNotSent;
  Outcome outcome = Outcome::kNone;
  uint32_t attempts = 0;
  std::string last_error;
  int64_t at_ms = 0;
};

struct StateChanged {
  TxnState state = TxnState::kTrying;
  // Set when an interactive transaction is committed: the content hash over
  // the registered branches, and the approval deadline if gated.
  std::optional<Hash> content_hash;
  int64_t approval_deadline_ms = 0;
  int64_t at_ms = 0;
};

struct Decided {
  Decision decision = Decision::kNone;
  DecisionCause cause = DecisionCause::kNone;
  std::string reason;  // human text; the cause is not repeated in it
  int64_t at_ms = 0;
  // The approval this decision consumed (forced decisions, the gate), if any.
  // The WAL checks it matches and is unused and marks it used in the same
  // durable write, or refuses the whole append.
  std::optional<std::string> approval_id;
};

struct BranchResolved {
  std::string branch_id;
  std::string approval_id;  // consumed in the same durable write
  int64_t at_ms = 0;
};

struct Flagged {
  std::string branch_id;
  bool stuck = true;
  std::string reason;
  int64_t at_ms = 0;
};

struct Finished {
  TxnState state = TxnState::kConfirmed;  // kConfirmed or kCancelled
  int64_t at_ms = 0;
};

struct EpochTaken {
  uint64_t owner_epoch = 0;
  int64_t at_ms = 0;
};

using Record =
    std::variant<Registered, BranchAdded, PhaseUpdate, StateChanged, Decided,
                 BranchResolved, Flagged, Finished, EpochTaken>;

// The record's kind: "Registered", "BranchAdded", ..., "EpochTaken".
const char* RecordName(const Record& record);

}  // namespace tcc::wal
