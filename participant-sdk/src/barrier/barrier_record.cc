#include "tcc/barrier/barrier_record.h"

#include "absl/strings/str_cat.h"

namespace tcc::barrier {

std::string ToString(const BranchKey& key) {
  return absl::StrCat(key.gid, "/", key.created_at_ms, "/", key.branch_id);
}

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kUnspecified:
      return "unspecified";
    case Outcome::kExecuted:
      return "executed";
    case Outcome::kEmptyRollback:
      return "empty_rollback";
    case Outcome::kRejected:
      return "rejected";
    case Outcome::kHangingRefused:
      return "hanging_refused";
    case Outcome::kConflict:
      return "conflict";
  }
  return "unknown";
}

std::string_view BarrierStateName(BarrierState state) {
  switch (state) {
    case BarrierState::kUnspecified:
      return "unspecified";
    case BarrierState::kNotFound:
      return "not_found";
    case BarrierState::kTried:
      return "tried";
    case BarrierState::kTryRejected:
      return "try_rejected";
    case BarrierState::kCancelledBeforeTry:
      return "cancelled_before_try";
    case BarrierState::kConfirmed:
      return "confirmed";
    case BarrierState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

BarrierState BarrierStateOf(const BarrierRecord* record) {
  if (record == nullptr) return BarrierState::kNotFound;
  if (record->try_state == TryState::kCancelledBeforeTry) {
    return BarrierState::kCancelledBeforeTry;
  }
  switch (record->phase_two) {
    case PhaseTwoState::kConfirmed:
      return BarrierState::kConfirmed;
    case PhaseTwoState::kCancelled:
      return BarrierState::kCancelled;
    case PhaseTwoState::kNone:
      break;
  }
  switch (record->try_state) {
    case TryState::kTried:
      return BarrierState::kTried;
    case TryState::kTryRejected:
      return BarrierState::kTryRejected;
    default:
      return BarrierState::kNotFound;
  }
}

}  // namespace tcc::barrier
