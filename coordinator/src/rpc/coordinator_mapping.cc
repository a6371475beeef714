#include "rpc/coordinator_mapping.h"

#include "tcc/identity/content_hash.h"

namespace tcc::rpc {

core::WaitFor FromProto(tcc::v1::WaitFor wait_for) {
  switch (wait_for) {
    case tcc::v1::WAIT_FOR_ACCEPTED:
      return core::WaitFor::kAccepted;
    case tcc::v1::WAIT_FOR_DECIDED:
      return core::WaitFor::kDecided;
    default:
      return core::WaitFor::kFinished;
  }
}

core::BranchSpec FromProto(const tcc::v1::BranchSpec& branch) {
  core::BranchSpec out;
  out.branch_id = branch.branch_id();
  out.participant = branch.participant();
  out.action = branch.action();
  out.payload = branch.payload();
  return out;
}

core::SubmitSpec FromProto(const tcc::v1::SubmitRequest& request) {
  core::SubmitSpec out;
  out.gid = request.gid();
  out.created_at_ms = request.created_at_ms();
  out.revision = request.revision();
  out.branches.reserve(request.branches_size());
  for (const auto& b : request.branches()) out.branches.push_back(FromProto(b));
  out.try_timeout_ms = request.try_timeout_ms();
  out.approval_gate = request.approval_gate();
  out.approval_timeout_ms = request.approval_timeout_ms();
  out.wait_for = FromProto(request.wait_for());
  return out;
}

core::BeginSpec FromProto(const tcc::v1::BeginRequest& request) {
  core::BeginSpec out;
  out.gid = request.gid();
  out.created_at_ms = request.created_at_ms();
  out.revision = request.revision();
  out.timeout_ms = request.timeout_ms();
  out.approval_gate = request.approval_gate();
  out.approval_timeout_ms = request.approval_timeout_ms();
  return out;
}

tcc::v1::TxnState ToProto(wal::TxnState state) {
  switch (state) {
    case wal::TxnState::kOpen:
      return tcc::v1::TXN_STATE_OPEN;
    case wal::TxnState::kTrying:
      return tcc::v1::TXN_STATE_TRYING;
    case wal::TxnState::kAwaitingApproval:
      return tcc::v1::TXN_STATE_AWAITING_APPROVAL;
    case wal::TxnState::kConfirming:
      return tcc::v1::TXN_STATE_CONFIRMING;
    case wal::TxnState::kConfirmed:
      return tcc::v1::TXN_STATE_CONFIRMED;
    case wal::TxnState::kCancelling:
      return tcc::v1::TXN_STATE_CANCELLING;
    case wal::TxnState::kCancelled:
      return tcc::v1::TXN_STATE_CANCELLED;
  }
  return tcc::v1::TXN_STATE_UNSPECIFIED;
}

bool FromProto(tcc::v1::TxnState state, wal::TxnState* out) {
  switch (state) {
    case tcc::v1::TXN_STATE_OPEN:
      *out = wal::TxnState::kOpen;
      return true;
    case tcc::v1::TXN_STATE_TRYING:
      *out = wal::TxnState::kTrying;
      return true;
    case tcc::v1::TXN_STATE_AWAITING_APPROVAL:
      *out = wal::TxnState::kAwaitingApproval;
      return true;
    case tcc::v1::TXN_STATE_CONFIRMING:
      *out = wal::TxnState::kConfirming;
      return true;
    case tcc::v1::TXN_STATE_CONFIRMED:
      *out = wal::TxnState::kConfirmed;
      return true;
    case tcc::v1::TXN_STATE_CANCELLING:
      *out = wal::TxnState::kCancelling;
      return true;
    case tcc::v1::TXN_STATE_CANCELLED:
      *out = wal::TxnState::kCancelled;
      return true;
    default:
      return false;
  }
}

tcc::v1::Decision ToProto(wal::Decision decision) {
  switch (decision) {
    case wal::Decision::kConfirm:
      return tcc::v1::DECISION_CONFIRM;
    case wal::Decision::kCancel:
      return tcc::v1::DECISION_CANCEL;
    case wal::Decision::kNone:
      break;
  }
  return tcc::v1::DECISION_UNSPECIFIED;
}

tcc::v1::DecisionCause ToProto(wal::DecisionCause cause) {
  switch (cause) {
    case wal::DecisionCause::kRule:
      return tcc::v1::DECISION_CAUSE_RULE;
    case wal::DecisionCause::kDeadline:
      return tcc::v1::DECISION_CAUSE_DEADLINE;
    case wal::DecisionCause::kRollback:
      return tcc::v1::DECISION_CAUSE_ROLLBACK;
    case wal::DecisionCause::kForced:
      return tcc::v1::DECISION_CAUSE_FORCED;
    case wal::DecisionCause::kGate:
      return tcc::v1::DECISION_CAUSE_GATE_APPROVED;
    case wal::DecisionCause::kWitnessed:
      return tcc::v1::DECISION_CAUSE_WITNESSED;
    case wal::DecisionCause::kNone:
      break;
  }
  return tcc::v1::DECISION_CAUSE_UNSPECIFIED;
}

tcc::v1::Outcome ToProto(wal::Outcome outcome) {
  switch (outcome) {
    case wal::Outcome::kExecuted:
      return tcc::v1::OUTCOME_EXECUTED;
    case wal::Outcome::kEmptyRollback:
      return tcc::v1::OUTCOME_EMPTY_ROLLBACK;
    case wal::Outcome::kRejected:
      return tcc::v1::OUTCOME_REJECTED;
    case wal::Outcome::kHangingRefused:
      return tcc::v1::OUTCOME_HANGING_REFUSED;
    case wal::Outcome::kConflict:
      return tcc::v1::OUTCOME_CONFLICT;
    case wal::Outcome::kNone:
      break;
  }
  return tcc::v1::OUTCOME_UNSPECIFIED;
}

tcc::v1::PhaseState ToProto(wal::PhaseState state) {
  switch (state) {
    case wal::PhaseState::kNotSent:
      return tcc::v1::PHASE_STATE_NOT_SENT;
    case wal::PhaseState::kUnknown:
      return tcc::v1::PHASE_STATE_UNKNOWN;
    case wal::PhaseState::kSucceeded:
      return tcc::v1::PHASE_STATE_SUCCEEDED;
    case wal::PhaseState::kFailed:
      return tcc::v1::PHASE_STATE_FAILED;
  }
  return tcc::v1::PHASE_STATE_UNSPECIFIED;
}

namespace {

void PhaseToProto(const core::PhaseView& view, tcc::v1::PhaseView* out) {
  out->set_state(ToProto(view.state));
  out->set_outcome(ToProto(view.outcome));
  out->set_attempts(view.attempts);
  out->set_last_error(view.last_error);
  out->set_updated_at_ms(view.updated_at_ms);
}

}  // namespace

void ToProto(const core::BranchView& view, tcc::v1::BranchView* out) {
  out->set_branch_id(view.branch_id);
  out->set_participant(view.participant);
  out->set_action(view.action);
  out->set_branch_hash(identity::ToBytes(view.branch_hash));
  PhaseToProto(view.try_phase, out->mutable_try_phase());
  PhaseToProto(view.second_phase, out->mutable_second_phase());
  out->set_stuck(view.stuck);
  out->set_payload_size(view.payload_size);
}

void ToProto(const core::TransactionView& view, tcc::v1::TransactionView* out) {
  out->set_gid(view.gid);
  out->set_state(ToProto(view.state));
  out->set_decision(ToProto(view.decision));
  out->set_decision_cause(ToProto(view.decision_cause));
  out->set_decision_reason(view.decision_reason);
  if (view.content_hash) {
    out->set_content_hash(identity::ToBytes(*view.content_hash));
  }
  out->set_revision(view.revision);
  out->set_created_at_ms(view.created_at_ms);
  out->set_try_deadline_ms(view.try_deadline_ms);
  out->set_approval_gate(view.approval_gate);
  out->set_approval_deadline_ms(view.approval_deadline_ms);
  for (const auto& b : view.branches) ToProto(b, out->add_branches());
  out->set_registered_at_ms(view.registered_at_ms);
  out->set_decided_at_ms(view.decided_at_ms);
  out->set_finished_at_ms(view.finished_at_ms);
  out->set_owner_epoch(view.owner_epoch);
  out->set_interactive(view.interactive);
  out->set_held_reason(view.held_reason);
}

}  // namespace tcc::rpc
