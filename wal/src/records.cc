#include "tcc/wal/records.h"

#include <variant>

namespace tcc::wal {

const char* TxnStateName(TxnState state) {
  switch (state) {
    case TxnState::kOpen:
      return "OPEN";
    case TxnState::kTrying:
      return "TRYING";
    case TxnState::kAwaitingApproval:
      return "AWAITING_APPROVAL";
    case TxnState::kConfirming:
      return "CONFIRMING";
    case TxnState::kConfirmed:
      return "CONFIRMED";
    case TxnState::kCancelling:
      return "CANCELLING";
    case TxnState::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

const char* DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kNone:
      return "none";
    case Decision::kConfirm:
      return "Confirm";
    case Decision::kCancel:
      return "Cancel";
  }
  return "?";
}

const char* DecisionCauseName(DecisionCause cause) {
  switch (cause) {
    case DecisionCause::kNone:
      return "none";
    case DecisionCause::kRule:
      return "rule";
    case DecisionCause::kDeadline:
      return "deadline";
    case DecisionCause::kRollback:
      return "rollback";
    case DecisionCause::kForced:
      return "forced";
    case DecisionCause::kGate:
      return "gate approved";
    case DecisionCause::kWitnessed:
      return "witnessed";
  }
  return "?";
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kTry:
      return "Try";
    case Phase::kConfirm:
      return "Confirm";
    case Phase::kCancel:
      return "Cancel";
  }
  return "?";
}

const char* PhaseStateName(PhaseState state) {
  switch (state) {
    case PhaseState::kNotSent:
      return "NOT_SENT";
    case PhaseState::kUnknown:
      return "UNKNOWN";
    case PhaseState::kSucceeded:
      return "SUCCEEDED";
    case PhaseState::kFailed:
      return "FAILED";
  }
  return "?";
}

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kNone:
      return "NONE";
    case Outcome::kExecuted:
      return "EXECUTED";
    case Outcome::kEmptyRollback:
      return "EMPTY_ROLLBACK";
    case Outcome::kRejected:
      return "REJECTED";
    case Outcome::kHangingRefused:
      return "HANGING_REFUSED";
    case Outcome::kConflict:
      return "CONFLICT";
  }
  return "?";
}

const char* ApprovalActionName(ApprovalAction action) {
  switch (action) {
    case ApprovalAction::kForceConfirm:
      return "force-confirm";
    case ApprovalAction::kForceCancel:
      return "force-cancel";
    case ApprovalAction::kResolveBranch:
      return "resolve-branch";
    case ApprovalAction::kGateApprove:
      return "gate-approve";
  }
  return "?";
}

namespace {
// A record type without a name does not compile.
struct NameOf {
  const char* operator()(const Registered&) const { return "Registered"; }
  const char* operator()(const BranchAdded&) const { return "BranchAdded"; }
  const char* operator()(const PhaseUpdate&) const { return "PhaseUpdate"; }
  const char* operator()(const StateChanged&) const { return "StateChanged"; }
  const char* operator()(const Decided&) const { return "Decided"; }
  const char* operator()(const BranchResolved&) const {
    return "BranchResolved";
  }
  const char* operator()(const Flagged&) const { return "Flagged"; }
  const char* operator()(const Finished&) const { return "Finished"; }
  const char* operator()(const EpochTaken&) const { return "EpochTaken"; }
};
}  // namespace

const char* RecordName(const Record& record) {
  return std::visit(NameOf{}, record);
}

}  // namespace tcc::wal
