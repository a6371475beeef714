// The barrier's vocabulary: the branch key a record is kept under, the record
// itself, and the outcomes it answers (DESIGN.md sections 3, 5 and 11).
//
// A BarrierRecord holds, for one branch key, the Try state and the phase-2
// state with their stored answers, so that a repeated call gets the first
// answer again (`replayed`). The states map to the wire contract's
// BarrierState as follows (BarrierStateOf):
//
//   try_state             phase_two    Query answers
//   kNone                 kNone        (no record)  NOT_FOUND
//   kTried                kNone        TRIED
//   kTryRejected          kNone        TRY_REJECTED
//   kCancelledBeforeTry   kCancelled   CANCELLED_BEFORE_TRY (the empty-rollback
//                                      marker; its stored answer is
//                                      EMPTY_ROLLBACK)
//   kTried|kTryRejected   kConfirmed   CONFIRMED (only after kTried)
//   kTried|kTryRejected   kCancelled   CANCELLED
//
// Plain values; no thread-safety concerns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

namespace tcc::barrier {

// What a participant's barrier is keyed by: (gid, created_at, branch id).
struct BranchKey {
  std::string gid;
  int64_t created_at_ms = 0;
  std::string branch_id;

  friend bool operator==(const BranchKey& a, const BranchKey& b) {
    return std::tie(a.gid, a.created_at_ms, a.branch_id) ==
           std::tie(b.gid, b.created_at_ms, b.branch_id);
  }
  friend bool operator<(const BranchKey& a, const BranchKey& b) {
    return std::tie(a.gid, a.created_at_ms, a.branch_id) <
           std::tie(b.gid, b.created_at_ms, b.branch_id);
  }
};

// "gid/created_at_ms/branch_id": a stable string for logs, and the
// idempotency key a handler passes to an outside system. Unambiguous because
// ids never contain '/'.
std::string ToString(const BranchKey& key);

// Numbered as the wire contract's tcc.v1.Outcome.
enum class Outcome : uint8_t {
  kUnspecified = 0,
  kExecuted = 1,
  kEmptyRollback = 2,
  kRejected = 3,
  kHangingRefused = 4,
  kConflict = 5,
};

enum class TryState : uint8_t {
  kNone = 0,
  kTried = 1,
  kTryRejected = 2,
  kCancelledBeforeTry = 3,
};

enum class PhaseTwoState : uint8_t {
  kNone = 0,
  kConfirmed = 1,
  kCancelled = 2,
};

// Numbered as the wire contract's tcc.v1.BarrierState.
enum class BarrierState : uint8_t {
  kUnspecified = 0,
  kNotFound = 1,
  kTried = 2,
  kTryRejected = 3,
  kCancelledBeforeTry = 4,
  kConfirmed = 5,
  kCancelled = 6,
};

std::string_view OutcomeName(Outcome outcome);
std::string_view BarrierStateName(BarrierState state);

struct BarrierRecord {
  TryState try_state = TryState::kNone;
  // The branch hash (32 raw bytes) of the call that created the record.
  std::string branch_hash;
  // The stored Try answer's message (e.g. the business's refusal reason).
  // The Try outcome itself follows from try_state.
  std::string try_message;
  PhaseTwoState phase_two = PhaseTwoState::kNone;
  // The stored phase-2 answer (EXECUTED or EMPTY_ROLLBACK) and its message.
  Outcome phase_two_outcome = Outcome::kUnspecified;
  std::string phase_two_message;
  // The latest try-deadline (Unix ms) any call that wrote this record
  // carried. For a cancel marker it is the marker's expiry: a later Cancel
  // raises it (section 11).
  int64_t try_deadline_ms = 0;
  // When phase 2 completed here, by the participant's clock (Unix ms); 0
  // without phase 2. Retention counts from it (section 9).
  int64_t phase_two_at_ms = 0;

  friend bool operator==(const BarrierRecord&, const BarrierRecord&) = default;
};

// What Query reports for a record (kNotFound for none).
BarrierState BarrierStateOf(const BarrierRecord* record);

}  // namespace tcc::barrier
