// The coordinator's in-memory picture of one global transaction (DESIGN.md
// sections 3, 4 and 6), and the requests that create it.
//
// A `Txn` is owned by exactly one driver owner (DESIGN.md section 8) and is
// changed only by `core::Step` (machine.h). Its durable part is rebuilt from
// the transaction's WAL records (`wal::Record`); the rest (calls in flight,
// waiting callers, which persists are durable) lives only in memory and is
// re-derived on recovery.
//
// Payloads are copied into the `Txn` once, when a branch is registered; every
// later event and effect names a branch by its index in `Txn::branches`.
//
// Not thread-safe: one owner at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tcc/wal/records.h"

namespace tcc::core {

using wal::BranchSpec;
using wal::Decision;
using wal::DecisionCause;
using wal::Hash;
using wal::Outcome;
using wal::Phase;
using wal::PhaseState;
using wal::TxnState;
// The names of those enums are the WAL's (records.h).
using wal::DecisionCauseName;
using wal::DecisionName;
using wal::OutcomeName;
using wal::PhaseName;
using wal::PhaseStateName;
using wal::TxnStateName;

// Identifies one waiting caller; chosen by the driver, opaque to the core.
using RequestId = uint64_t;

// When a Submit, Commit or Rollback answers (mirrors tcc.v1.WaitFor).
enum class WaitFor : uint8_t {
  kAccepted = 1,  // once durably registered / recorded
  kDecided = 2,   // once the decision is durable
  kFinished = 3,  // once every branch acknowledged its phase 2
};

// What a participant's barrier holds for a branch key (mirrors
// tcc.v1.BarrierState).
enum class BarrierState : uint8_t {
  kNotFound = 1,
  kTried = 2,
  kTryRejected = 3,
  kCancelledBeforeTry = 4,
  kConfirmed = 5,
  kCancelled = 6,
};
// "NOT_FOUND", "TRIED", "TRY_REJECTED", "CANCELLED_BEFORE_TRY", "CONFIRMED",
// "CANCELLED" (as tcc.v1.BarrierState names them); "?" out of range.
const char* BarrierStateName(BarrierState state);

// A one-call transaction (tcc.v1.SubmitRequest, mapped by the daemon).
struct SubmitSpec {
  std::string gid;
  int64_t created_at_ms = 0;
  uint64_t revision = 0;
  // branch_hash is computed by the core; whatever the caller puts is ignored.
  std::vector<BranchSpec> branches;
  int64_t try_timeout_ms = 0;  // 0: Options::default_try_timeout_ms
  bool approval_gate = false;
  int64_t approval_timeout_ms = 0;  // 0: Options::default_approval_timeout_ms
  WaitFor wait_for = WaitFor::kFinished;
  // Delivery options, not content (like wait_for): how long the caller
  // waits for its answer (its gRPC deadline), from when the request reached
  // tccd; 0: no limit. The driver refuses a request it cannot answer in
  // time because of the work queued ahead of it (RESOURCE_EXHAUSTED,
  // nothing written). The core ignores it.
  int64_t answer_within_ms = 0;
};

// Opens an interactive transaction (tcc.v1.BeginRequest).
struct BeginSpec {
  std::string gid;
  int64_t created_at_ms = 0;
  uint64_t revision = 0;
  int64_t timeout_ms = 0;  // OPEN deadline = try-deadline; 0: default
  bool approval_gate = false;
  int64_t approval_timeout_ms = 0;
  int64_t answer_within_ms = 0;  // as SubmitSpec::answer_within_ms
};

// One phase of one branch. Durable fields mirror wal::PhaseUpdate.
struct PhaseProgress {
  PhaseState state = PhaseState::kNotSent;
  Outcome outcome = Outcome::kNone;
  uint32_t attempts = 0;
  std::string last_error;
  int64_t updated_at_ms = 0;
};

// What a branch is waiting for right now (memory only).
enum class BranchOp : uint8_t {
  kIdle = 0,
  kAwaitDurable = 1,  // its BranchAdded record is being made durable
  kCalling = 2,   // a Try/Confirm/Cancel is in flight (op_phase, op_attempt)
  kQuerying = 3,  // a Query is in flight (op_query)
  kBackoff = 4,   // waiting for a retry timer
};

struct BranchRuntime {
  // spec.payload may be empty while the driver keeps it only in the WAL
  // (memory pressure, never while OPEN: a Commit hashes the payloads); the
  // driver reads it back before it sends a call. payload_size stays.
  BranchSpec spec;
  uint32_t payload_size = 0;
  PhaseProgress try_phase;
  PhaseProgress second_phase;  // Confirm or Cancel, per the decision
  bool stuck = false;
  std::string stuck_reason;
  bool resolved_by_hand = false;

  // Memory only.
  BranchOp op = BranchOp::kIdle;
  Phase op_phase = Phase::kTry;
  uint32_t op_attempt = 0;
  uint64_t op_query = 0;
  uint32_t failures = 0;  // consecutive failed calls in the current phase
  // True once a Try may have left tccd (any attempt not known unsent). After
  // recovery, every registered branch may have been tried.
  bool try_maybe_sent = false;
  bool try_maybe_sent_before_attempt = false;
  // While no decision is recorded: what this branch's barrier showed to an
  // authoritative Query (DESIGN.md section 8). `witness` is a decision it
  // can only hold after one was durable (CONFIRMED: Confirm; CANCELLED or
  // CANCELLED_BEFORE_TRY: Cancel), under this branch's hash. `not_found` is
  // an authoritative NOT_FOUND answered since its Try last succeeded (beside
  // a Confirm witness, a contradiction). Set by Query answers, never stored:
  // a recovery asks again.
  Decision witness = Decision::kNone;
  BarrierState witness_state = BarrierState::kNotFound;  // with `witness`
  bool not_found = false;
};

// Caller kinds that wait for an answer.
enum class WaiterKind : uint8_t {
  kSubmit,
  kBegin,
  kTry,
  kCommit,
  kRollback,
  kAdmin,  // gate approval, forced decision, resolve branch
};

struct Waiter {
  RequestId request = 0;
  WaiterKind kind = WaiterKind::kSubmit;
  WaitFor wait_for = WaitFor::kFinished;
  uint32_t branch = 0;       // kTry
  bool duplicate = false;    // answer marks the request a duplicate
  uint64_t persist_seq = 0;  // kAdmin: answered when this persist completes
};

// What a durable persist still in flight was for (memory only).
enum class PersistPurpose : uint8_t {
  kRegistered,
  kBranchAdded,
  kCommitted,
  kDecided,
  kBranchResolved,
};

struct PendingPersist {
  uint64_t seq = 0;
  PersistPurpose purpose = PersistPurpose::kRegistered;
  uint32_t branch = 0;
  std::string approval_id;  // kDecided / kBranchResolved with an approval
  int64_t at_ms = 0;        // kBranchResolved: the record's time
  // kDecided with an approval: what to restore if the WAL refuses it.
  TxnState state_before = TxnState::kTrying;
};

struct Txn {
  // False until a Submit, Begin or replayed Registered record creates it.
  bool exists = false;

  // Durable (rebuilt from records).
  std::string gid;
  int64_t created_at_ms = 0;
  uint64_t revision = 0;
  bool interactive = false;
  bool approval_gate = false;
  int64_t approval_timeout_ms = 0;
  int64_t try_deadline_ms = 0;
  int64_t registered_at_ms = 0;
  std::optional<Hash> content_hash;  // unset while OPEN
  uint64_t owner_epoch = 0;
  TxnState state = TxnState::kTrying;
  Decision decision = Decision::kNone;
  DecisionCause decision_cause = DecisionCause::kNone;
  std::string decision_reason;
  int64_t decided_at_ms = 0;
  int64_t finished_at_ms = 0;
  int64_t approval_deadline_ms = 0;
  std::vector<BranchRuntime> branches;  // registration order

  // Memory only.
  bool registered_durable = false;
  bool committed_durable = false;  // interactive: Commit's record is durable
  bool decision_durable = false;
  // What the state was when a decision not yet durable was made: views show
  // it until the decision is durable (no caller hears of it before).
  TxnState state_before_decision = TxnState::kTrying;
  bool poisoned = false;  // a WAL write failed: the owner must be dropped
  // Non-empty while the transaction is held for an operator: its
  // participants' barriers contradict each other about a decision the WAL
  // lost (DESIGN.md section 8). No automatic decision is made (not even at
  // a deadline); an operator forces Confirm or Cancel. Memory only: a
  // recovery asks the participants again and holds it again.
  std::string held_reason;
  // The monotonic timer armed for the try-deadline (or the approval
  // deadline) ran out: the deadline counts as passed even when the wall
  // clock, set back meanwhile, says otherwise (whichever comes first: an
  // early Cancel only makes a late Try refused). Memory only.
  bool try_deadline_elapsed = false;
  bool approval_deadline_elapsed = false;
  uint64_t next_seq = 1;
  uint64_t next_query = 1;
  std::vector<PendingPersist> pending;
  std::vector<Waiter> waiters;
};

// The index of `branch_id` in txn.branches, or -1.
int FindBranch(const Txn& txn, std::string_view branch_id);

// A transaction as callers see it (mirrors tcc.v1.TransactionView; the daemon
// maps it to protobuf). Built on demand; never stored.
struct PhaseView {
  PhaseState state = PhaseState::kNotSent;
  Outcome outcome = Outcome::kNone;
  uint32_t attempts = 0;
  std::string last_error;
  int64_t updated_at_ms = 0;
};

struct BranchView {
  std::string branch_id;
  std::string participant;
  std::string action;
  Hash branch_hash{};
  PhaseView try_phase;
  PhaseView second_phase;
  bool stuck = false;
  uint32_t payload_size = 0;
};

struct TransactionView {
  std::string gid;
  TxnState state = TxnState::kTrying;
  Decision decision = Decision::kNone;
  DecisionCause decision_cause = DecisionCause::kNone;
  std::string decision_reason;
  std::optional<Hash> content_hash;
  uint64_t revision = 0;
  int64_t created_at_ms = 0;
  int64_t try_deadline_ms = 0;
  bool approval_gate = false;
  int64_t approval_deadline_ms = 0;
  std::vector<BranchView> branches;  // sorted by branch id
  int64_t registered_at_ms = 0;
  int64_t decided_at_ms = 0;
  int64_t finished_at_ms = 0;
  uint64_t owner_epoch = 0;
  bool interactive = false;
  std::string held_reason;  // see Txn::held_reason
};

TransactionView MakeView(const Txn& txn);
BranchView MakeBranchView(const BranchRuntime& branch);

}  // namespace tcc::core
