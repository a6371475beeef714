#include "internal/txn_rules.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "tcc/identity/ids.h"

namespace tcc::wal::internal {
namespace {

bool IsKnownState(TxnState s) {
  return static_cast<uint8_t>(s) >= 1 && static_cast<uint8_t>(s) <= 7;
}

void AddParticipant(TxnSummary& summary, const std::string& participant) {
  auto it = std::lower_bound(summary.participants.begin(),
                             summary.participants.end(), participant);
  if (it == summary.participants.end() || *it != participant) {
    summary.participants.insert(it, participant);
  }
}

absl::Status ValidateBranch(const BranchSpec& branch) {
  if (absl::Status s = identity::ValidateBranchId(branch.branch_id); !s.ok()) {
    return s;
  }
  return identity::ValidateParticipantName(branch.participant);
}

// Checks that `approval` allows `action` on this transaction at `at_ms`.
absl::Status CheckApproval(const Approval& approval, ApprovalAction action,
                           const TxnSummary& summary,
                           const std::string& branch_id, int64_t at_ms) {
  const std::string id = approval.approval_id;
  if (approval.used_at_ms != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " was used already"));
  }
  if (at_ms >= approval.expires_at_ms) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " expired at ", approval.expires_at_ms));
  }
  if (approval.action != action) {
    return absl::FailedPreconditionError(absl::StrCat(
        "approval ", id, " is for ", ApprovalActionName(approval.action),
        ", not ", ApprovalActionName(action)));
  }
  if (approval.gid != summary.gid) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " is for another gid"));
  }
  if (approval.revision != summary.revision) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " is for another revision"));
  }
  if (approval.content_hash != summary.content_hash) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " is for another content hash"));
  }
  if (action == ApprovalAction::kResolveBranch &&
      approval.branch_id != branch_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", id, " is for another branch"));
  }
  return absl::OkStatus();
}

class Planner {
 public:
  Planner(const AppendRequest& request, const ApprovalLookup& lookup)
      : request_(request), lookup_(lookup) {}

  absl::StatusOr<AppendPlan> Run(const TxnSummary* current) {
    if (request_.records.empty()) {
      return absl::InvalidArgumentError("an append needs at least one record");
    }
    if (absl::Status s = identity::ValidateGid(request_.gid); !s.ok()) {
      return s;
    }
    const bool registers = Registers(request_);
    if (registers && current != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("gid ", request_.gid, " is registered already"));
    }
    if (!registers && current == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("gid ", request_.gid, " is not in the log"));
    }
    if (current != nullptr && current->compacted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", request_.gid, " is finished and compacted; no more records"));
    }
    plan_.registers = registers;
    current_ = current;
    for (size_t i = 0; i < request_.records.size(); ++i) {
      const Record& record = request_.records[i];
      if (i > 0 && std::holds_alternative<Registered>(record)) {
        return absl::InvalidArgumentError(
            "Registered must be the first record of its append");
      }
      absl::Status s =
          std::visit([this](const auto& r) { return Apply(r); }, record);
      if (!s.ok()) return s;
    }
    return std::move(plan_);
  }

 private:
  absl::Status Apply(const Registered& r) {
    if (r.gid != request_.gid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Registered names gid ", r.gid, " in an append for ", request_.gid));
    }
    TxnSummary& s = Mutable();
    s.gid = r.gid;
    s.state = r.interactive ? TxnState::kOpen : TxnState::kTrying;
    s.decision = Decision::kNone;
    s.content_hash = r.content_hash;
    s.revision = r.revision;
    s.created_at_ms = r.created_at_ms;
    s.registered_at_ms = r.registered_at_ms;
    s.finished_at_ms = 0;
    s.compacted = false;
    std::set<std::string> ids;
    for (const BranchSpec& b : r.branches) {
      if (absl::Status st = ValidateBranch(b); !st.ok()) return st;
      if (!ids.insert(b.branch_id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("branch ", b.branch_id, " is registered twice"));
      }
      AddParticipant(s, b.participant);
    }
    return absl::OkStatus();
  }

  absl::Status Apply(const BranchAdded& r) {
    if (absl::Status st = ValidateBranch(r.branch); !st.ok()) return st;
    if (Current().decision != Decision::kNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", request_.gid, " is decided; no branch can be added"));
    }
    AddParticipant(Mutable(), r.branch.participant);
    return absl::OkStatus();
  }

  absl::Status Apply(const PhaseUpdate&) { return absl::OkStatus(); }

  absl::Status Apply(const StateChanged& r) {
    if (r.state != TxnState::kOpen && r.state != TxnState::kTrying &&
        r.state != TxnState::kAwaitingApproval) {
      return absl::InvalidArgumentError(
          "StateChanged is for OPEN, TRYING and AWAITING_APPROVAL; decisions "
          "are Decided records, final states Finished records");
    }
    if (Current().decision != Decision::kNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", request_.gid, " is decided; its state can't go back"));
    }
    TxnSummary& s = Mutable();
    s.state = r.state;
    if (r.content_hash.has_value()) s.content_hash = *r.content_hash;
    return absl::OkStatus();
  }

  absl::Status Apply(const Decided& r) {
    if (r.decision != Decision::kConfirm && r.decision != Decision::kCancel) {
      return absl::InvalidArgumentError("Decided needs Confirm or Cancel");
    }
    const TxnSummary& current = Current();
    if (current.decision != Decision::kNone && current.decision != r.decision) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", request_.gid, " is already decided ",
          DecisionName(current.decision), "; a decision is written once"));
    }
    if (r.approval_id.has_value()) {
      const ApprovalAction wanted = r.decision == Decision::kCancel
                                        ? ApprovalAction::kForceCancel
                                        : ApprovalAction::kForceConfirm;
      absl::Status st = Consume(*r.approval_id, wanted, "", r.at_ms);
      if (!st.ok() && r.decision == Decision::kConfirm &&
          !absl::IsNotFound(st)) {
        // A gate approval also allows Confirm.
        absl::Status gate =
            Consume(*r.approval_id, ApprovalAction::kGateApprove, "", r.at_ms);
        if (gate.ok()) st = gate;
      }
      if (!st.ok()) return st;
    }
    TxnSummary& s = Mutable();
    s.decision = r.decision;
    if (!IsFinal(s.state)) {
      s.state = r.decision == Decision::kConfirm ? TxnState::kConfirming
                                                 : TxnState::kCancelling;
    }
    return absl::OkStatus();
  }

  absl::Status Apply(const BranchResolved& r) {
    if (Current().decision == Decision::kNone) {
      return absl::FailedPreconditionError(
          absl::StrCat("gid ", request_.gid,
                       " has no decision; no phase-2 branch to "
                       "resolve"));
    }
    return Consume(r.approval_id, ApprovalAction::kResolveBranch, r.branch_id,
                   r.at_ms);
  }

  absl::Status Apply(const Flagged&) { return absl::OkStatus(); }

  absl::Status Apply(const Finished& r) {
    if (!IsFinal(r.state)) {
      return absl::InvalidArgumentError(
          "Finished needs CONFIRMED or CANCELLED");
    }
    const Decision implied = r.state == TxnState::kConfirmed
                                 ? Decision::kConfirm
                                 : Decision::kCancel;
    if (Current().decision != implied) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", request_.gid, " can't finish ", TxnStateName(r.state),
          " without that decision recorded"));
    }
    TxnSummary& s = Mutable();
    if (!IsFinal(s.state)) s.finished_at_ms = r.at_ms;
    s.state = r.state;
    return absl::OkStatus();
  }

  absl::Status Apply(const EpochTaken&) { return absl::OkStatus(); }

  absl::Status Consume(const std::string& approval_id, ApprovalAction action,
                       const std::string& branch_id, int64_t at_ms) {
    if (at_ms <= 0) {
      return absl::InvalidArgumentError(
          "a record that consumes an approval needs its at_ms");
    }
    Approval approval;
    auto local = std::find_if(
        plan_.consumed.begin(), plan_.consumed.end(),
        [&](const Approval& a) { return a.approval_id == approval_id; });
    if (local != plan_.consumed.end()) {
      approval = *local;
    } else {
      absl::StatusOr<Approval> found = lookup_(approval_id);
      if (absl::IsNotFound(found.status())) {
        return absl::FailedPreconditionError(
            absl::StrCat("approval ", approval_id, " does not exist"));
      }
      if (!found.ok()) return found.status();
      approval = *std::move(found);
    }
    if (absl::Status st =
            CheckApproval(approval, action, Current(), branch_id, at_ms);
        !st.ok()) {
      return st;
    }
    approval.used_at_ms = at_ms;
    plan_.consumed.push_back(std::move(approval));
    return absl::OkStatus();
  }

  const AppendRequest& request_;
  // The summary as the records so far leave it.
  const TxnSummary& Current() const {
    return plan_.summary_set || current_ == nullptr ? plan_.summary : *current_;
  }
  // The same, to change: copied from the current summary on first use.
  TxnSummary& Mutable() {
    if (!plan_.summary_set) {
      if (current_ != nullptr) plan_.summary = *current_;
      plan_.summary_set = true;
    }
    return plan_.summary;
  }

  const ApprovalLookup& lookup_;
  const TxnSummary* current_ = nullptr;
  AppendPlan plan_;
};

}  // namespace

bool Registers(const AppendRequest& request) {
  return !request.records.empty() &&
         std::holds_alternative<Registered>(request.records.front());
}

const ApprovalLookup& NoApprovals() {
  static const ApprovalLookup* none =
      new ApprovalLookup([](const std::string& id) -> absl::StatusOr<Approval> {
        return absl::NotFoundError(absl::StrCat("approval ", id));
      });
  return *none;
}

bool MayHold(const AppendRequest& request, const AppendPlan& plan,
             const TxnSummary& before) {
  const TxnState after = plan.summary_set ? plan.summary.state : before.state;
  return request.durability == Durability::kBuffered && !plan.registers &&
         plan.consumed.empty() && !IsFinal(before.state) && !IsFinal(after);
}

absl::StatusOr<AppendPlan> PlanAppend(const AppendRequest& request,
                                      const TxnSummary* current,
                                      const ApprovalLookup& lookup) {
  return Planner(request, lookup).Run(current);
}

absl::Status ValidateNewApproval(const Approval& approval) {
  if (approval.approval_id.empty() || approval.approval_id.size() > 128) {
    return absl::InvalidArgumentError("approval_id needs 1-128 bytes");
  }
  for (char c : approval.approval_id) {
    if (!identity::IsIdByte(c)) {
      return absl::InvalidArgumentError(
          "approval_id must be of [A-Za-z0-9._:-]");
    }
  }
  if (absl::Status s = identity::ValidateGid(approval.gid); !s.ok()) return s;
  const auto action = static_cast<uint8_t>(approval.action);
  if (action < 1 || action > 4) {
    return absl::InvalidArgumentError("unknown approval action");
  }
  if (approval.action == ApprovalAction::kResolveBranch) {
    if (absl::Status s = identity::ValidateBranchId(approval.branch_id);
        !s.ok()) {
      return s;
    }
  }
  if (approval.used_at_ms != 0) {
    return absl::InvalidArgumentError("a new approval can't be used already");
  }
  if (approval.expires_at_ms <= 0) {
    return absl::InvalidArgumentError("an approval needs an expiry");
  }
  return absl::OkStatus();
}

absl::Status ValidateListQuery(const ListQuery& query) {
  if (query.page_size < 1 || query.page_size > 1000) {
    return absl::InvalidArgumentError("page_size must be 1..1000");
  }
  if (query.scan_budget < 1) {
    return absl::InvalidArgumentError("scan_budget must be at least 1");
  }
  for (TxnState s : query.states) {
    if (!IsKnownState(s)) return absl::InvalidArgumentError("unknown state");
  }
  return DecodePageToken(query.page_token).status();
}

// A page token is "<registered_at_ms>/<gid>" of the last item returned.
std::string EncodePageToken(int64_t registered_at_ms, std::string_view gid) {
  return absl::StrCat(registered_at_ms, "/", std::string(gid));
}

absl::StatusOr<std::optional<ListPosition>> DecodePageToken(
    std::string_view token) {
  if (token.empty()) return std::optional<ListPosition>();
  const size_t slash = token.find('/');
  if (slash == std::string_view::npos || slash == 0) {
    return absl::InvalidArgumentError("malformed page token");
  }
  ListPosition pos;
  const char* first = token.data();
  const char* last = token.data() + slash;
  auto [ptr, ec] = std::from_chars(first, last, pos.registered_at_ms);
  if (ec != std::errc() || ptr != last) {
    return absl::InvalidArgumentError("malformed page token");
  }
  pos.gid = std::string(token.substr(slash + 1));
  if (!identity::ValidateGid(pos.gid).ok()) {
    return absl::InvalidArgumentError("malformed page token");
  }
  return std::optional<ListPosition>(std::move(pos));
}

bool MatchesQuery(const TxnSummary& summary, const ListQuery& query) {
  if (!query.states.empty() &&
      std::find(query.states.begin(), query.states.end(), summary.state) ==
          query.states.end()) {
    return false;
  }
  if (query.registered_before_ms != 0 &&
      summary.registered_at_ms >= query.registered_before_ms) {
    return false;
  }
  if (!query.participant.empty() &&
      !std::binary_search(summary.participants.begin(),
                          summary.participants.end(), query.participant)) {
    return false;
  }
  return true;
}

RetentionStep DueStep(const TxnSummary& summary, const RetentionPolicy& policy,
                      int64_t now_ms) {
  if (!IsFinal(summary.state)) return RetentionStep::kKeep;
  const int64_t age = now_ms - summary.finished_at_ms;
  if (age >= policy.compact_entry_ms) return RetentionStep::kForget;
  if (age >= policy.full_record_ms && !summary.compacted) {
    return RetentionStep::kCompact;
  }
  return RetentionStep::kKeep;
}

}  // namespace tcc::wal::internal
