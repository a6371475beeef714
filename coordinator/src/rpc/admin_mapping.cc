#include "rpc/admin_mapping.h"

#include "absl/strings/str_cat.h"
#include "tcc/identity/content_hash.h"

namespace tcc::rpc {
namespace {

// Everything of a record's timeline entry but its kind.
struct Describe {
  tcc::v1::RecordView* out;

  void operator()(const wal::Registered& r) const {
    out->set_at_ms(r.registered_at_ms);
    std::string ids;
    for (const auto& b : r.branches) {
      absl::StrAppend(&ids, ids.empty() ? "" : ", ", b.branch_id, " (",
                      b.participant, " ", b.action, ")");
    }
    out->set_summary(absl::StrCat(r.interactive ? "opened (interactive), " : "",
                                  r.branches.size(), " branch(es)",
                                  ids.empty() ? "" : ": ", ids, "; revision ",
                                  r.revision, ", owner epoch ", r.owner_epoch,
                                  r.approval_gate ? ", approval gate on" : ""));
  }
  void operator()(const wal::BranchAdded& r) const {
    out->set_branch_id(r.branch.branch_id);
    out->set_summary(absl::StrCat("branch ", r.branch.branch_id, " (",
                                  r.branch.participant, " ", r.branch.action,
                                  ") added"));
  }
  void operator()(const wal::PhaseUpdate& r) const {
    out->set_at_ms(r.at_ms);
    out->set_branch_id(r.branch_id);
    // e.g. "Try: UNKNOWN (attempt 2): deadline exceeded".
    const char* outcome =
        r.outcome == wal::Outcome::kNone ? "" : wal::OutcomeName(r.outcome);
    out->set_summary(absl::StrCat(
        wal::PhaseName(r.phase), ": ", wal::PhaseStateName(r.state),
        *outcome ? " " : "", outcome, " (attempt ", r.attempts, ")",
        r.last_error.empty() ? "" : ": ", r.last_error));
  }
  void operator()(const wal::StateChanged& r) const {
    out->set_at_ms(r.at_ms);
    out->set_summary(absl::StrCat("-> ", wal::TxnStateName(r.state)));
  }
  void operator()(const wal::Decided& r) const {
    out->set_at_ms(r.at_ms);
    if (r.approval_id) out->set_approval_id(*r.approval_id);
    // e.g. "Cancel, rollback: requested by the caller".
    out->set_summary(absl::StrCat(wal::DecisionName(r.decision), ", ",
                                  wal::DecisionCauseName(r.cause), ": ",
                                  r.reason));
  }
  void operator()(const wal::BranchResolved& r) const {
    out->set_at_ms(r.at_ms);
    out->set_branch_id(r.branch_id);
    out->set_approval_id(r.approval_id);
    out->set_summary(absl::StrCat("branch ", r.branch_id,
                                  " resolved by hand (approval ", r.approval_id,
                                  ")"));
  }
  void operator()(const wal::Flagged& r) const {
    out->set_at_ms(r.at_ms);
    out->set_branch_id(r.branch_id);
    out->set_summary(
        absl::StrCat(r.stuck ? "STUCK: " : "no longer stuck: ", r.reason));
  }
  void operator()(const wal::Finished& r) const {
    out->set_at_ms(r.at_ms);
    out->set_summary(wal::TxnStateName(r.state));
  }
  void operator()(const wal::EpochTaken& r) const {
    out->set_at_ms(r.at_ms);
    out->set_summary(absl::StrCat("owner epoch ", r.owner_epoch,
                                  " took over (restart or recovery)"));
  }
};

}  // namespace

tcc::v1::ApprovalAction ToProto(wal::ApprovalAction action) {
  switch (action) {
    case wal::ApprovalAction::kForceConfirm:
      return tcc::v1::APPROVAL_ACTION_FORCE_CONFIRM;
    case wal::ApprovalAction::kForceCancel:
      return tcc::v1::APPROVAL_ACTION_FORCE_CANCEL;
    case wal::ApprovalAction::kResolveBranch:
      return tcc::v1::APPROVAL_ACTION_RESOLVE_BRANCH;
    case wal::ApprovalAction::kGateApprove:
      return tcc::v1::APPROVAL_ACTION_GATE_APPROVE;
  }
  return tcc::v1::APPROVAL_ACTION_UNSPECIFIED;
}

bool FromProto(tcc::v1::ApprovalAction action, wal::ApprovalAction* out) {
  switch (action) {
    case tcc::v1::APPROVAL_ACTION_FORCE_CONFIRM:
      *out = wal::ApprovalAction::kForceConfirm;
      return true;
    case tcc::v1::APPROVAL_ACTION_FORCE_CANCEL:
      *out = wal::ApprovalAction::kForceCancel;
      return true;
    case tcc::v1::APPROVAL_ACTION_RESOLVE_BRANCH:
      *out = wal::ApprovalAction::kResolveBranch;
      return true;
    case tcc::v1::APPROVAL_ACTION_GATE_APPROVE:
      *out = wal::ApprovalAction::kGateApprove;
      return true;
    default:
      return false;
  }
}

void ToProto(const wal::Approval& a, tcc::v1::Approval* out) {
  out->set_approval_id(a.approval_id);
  out->set_action(ToProto(a.action));
  out->set_gid(a.gid);
  out->set_revision(a.revision);
  out->set_content_hash(identity::ToBytes(a.content_hash));
  out->set_branch_id(a.branch_id);
  out->set_expires_at_ms(a.expires_at_ms);
  out->set_issued_by(a.issued_by);
  out->set_issued_at_ms(a.issued_at_ms);
  out->set_reason(a.reason);
  out->set_used_at_ms(a.used_at_ms);
}

void ToProto(const wal::Record& record, tcc::v1::RecordView* out) {
  out->set_kind(wal::RecordName(record));
  std::visit(Describe{out}, record);
}

}  // namespace tcc::rpc
