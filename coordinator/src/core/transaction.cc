#include "core/transaction.h"

#include <algorithm>

namespace tcc::core {

int FindBranch(const Txn& txn, std::string_view branch_id) {
  for (size_t i = 0; i < txn.branches.size(); ++i) {
    if (txn.branches[i].spec.branch_id == branch_id) return static_cast<int>(i);
  }
  return -1;
}

namespace {
PhaseView ToView(const PhaseProgress& p) {
  return PhaseView{p.state, p.outcome, p.attempts, p.last_error,
                   p.updated_at_ms};
}
}  // namespace

BranchView MakeBranchView(const BranchRuntime& br) {
  BranchView v;
  v.branch_id = br.spec.branch_id;
  v.participant = br.spec.participant;
  v.action = br.spec.action;
  v.branch_hash = br.spec.branch_hash;
  v.try_phase = ToView(br.try_phase);
  v.second_phase = ToView(br.second_phase);
  v.stuck = br.stuck;
  v.payload_size = br.payload_size;
  return v;
}

TransactionView MakeView(const Txn& t) {
  TransactionView v;
  v.gid = t.gid;
  v.state = t.state;
  v.decision = t.decision;
  v.decision_cause = t.decision_cause;
  v.decision_reason = t.decision_reason;
  v.decided_at_ms = t.decided_at_ms;
  if (t.decision != Decision::kNone && !t.decision_durable) {
    v.state = t.state_before_decision;
    v.decision = Decision::kNone;
    v.decision_cause = DecisionCause::kNone;
    v.decision_reason.clear();
    v.decided_at_ms = 0;
  }
  v.content_hash = t.content_hash;
  v.revision = t.revision;
  v.created_at_ms = t.created_at_ms;
  v.try_deadline_ms = t.try_deadline_ms;
  v.approval_gate = t.approval_gate;
  v.approval_deadline_ms = t.approval_deadline_ms;
  v.branches.reserve(t.branches.size());
  for (const auto& br : t.branches) v.branches.push_back(MakeBranchView(br));
  std::sort(v.branches.begin(), v.branches.end(),
            [](const BranchView& a, const BranchView& b) {
              return a.branch_id < b.branch_id;
            });
  v.registered_at_ms = t.registered_at_ms;
  v.finished_at_ms = t.finished_at_ms;
  v.owner_epoch = t.owner_epoch;
  v.interactive = t.interactive;
  v.held_reason = t.held_reason;
  return v;
}

const char* BarrierStateName(BarrierState state) {
  switch (state) {
    case BarrierState::kNotFound:
      return "NOT_FOUND";
    case BarrierState::kTried:
      return "TRIED";
    case BarrierState::kTryRejected:
      return "TRY_REJECTED";
    case BarrierState::kCancelledBeforeTry:
      return "CANCELLED_BEFORE_TRY";
    case BarrierState::kConfirmed:
      return "CONFIRMED";
    case BarrierState::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

}  // namespace tcc::core
