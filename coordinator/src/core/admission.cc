#include "core/admission.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tcc/identity/ids.h"

namespace tcc::core {
namespace {

absl::Status ValidateTimeouts(const char* name, int64_t timeout,
                              int64_t approval_timeout, const Options& o) {
  if (timeout < 0 || timeout > o.max_try_timeout_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", timeout, " ms is outside [0, ", o.max_try_timeout_ms, "]"));
  }
  if (approval_timeout < 0 || approval_timeout > o.max_approval_timeout_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("approval_timeout_ms ", approval_timeout,
                     " ms is outside [0, ", o.max_approval_timeout_ms, "]"));
  }
  return absl::OkStatus();
}

// created_at, the approval gate: what a new transaction needs of tccd.
absl::Status AdmitNew(int64_t created_at_ms, bool approval_gate,
                      const AdmissionContext& c) {
  if (created_at_ms <= 0) {
    return absl::InvalidArgumentError(
        "created_at_ms is required: the client's wall-clock time of its first "
        "attempt (Unix ms, > 0)");
  }
  // A created_at ahead of this clock by more than the allowed skew is a
  // broken client clock: accepted, it would one day move the deduplication
  // horizon (DESIGN.md section 9) past every honest client's created_at.
  if (created_at_ms - c.now_ms > c.max_clock_skew_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "created_at_ms ", created_at_ms, " is more than ", c.max_clock_skew_ms,
        " ms ahead of tccd's clock (transactions.max_clock_skew_ms): check "
        "the client's clock"));
  }
  if (created_at_ms < c.dedup_horizon_ms) {
    return absl::FailedPreconditionError(absl::StrCat(
        "created_at_ms ", created_at_ms,
        " is older than the deduplication horizon ", c.dedup_horizon_ms,
        ": tccd can no longer tell a retry from a new request; use a new gid "
        "and a fresh created_at"));
  }
  if (approval_gate && !c.approval_gate_enabled) {
    return absl::FailedPreconditionError(
        "the approval gate needs an admin credential configured "
        "(admin.token_file or admin.client_identities): nobody could "
        "approve");
  }
  return absl::OkStatus();
}

absl::Status AdmitParticipant(const BranchSpec& b, const AdmissionContext& c) {
  if (!c.participant_known || c.participant_known(b.participant)) {
    return absl::OkStatus();
  }
  if (b.participant.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "branch ", b.branch_id, ": participant '", b.participant,
        "' is an address; only configured participant names are allowed "
        "(allow_direct_targets is off)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "branch ", b.branch_id, ": unknown participant '", b.participant,
      "'; name one configured under participants:"));
}

}  // namespace

absl::Status ValidateBranch(const BranchSpec& b, const Options& o) {
  if (auto s = identity::ValidateBranchId(b.branch_id); !s.ok()) return s;
  if (auto s = identity::ValidateParticipantName(b.participant); !s.ok()) {
    return s;
  }
  if (auto s = identity::ValidateAction(b.action); !s.ok()) return s;
  if (b.payload.size() > o.max_payload_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch ", b.branch_id, " payload is ", b.payload.size(),
                     " bytes; at most ", o.max_payload_bytes, " allowed"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSubmit(const SubmitSpec& s, const Options& o) {
  if (auto st = identity::ValidateGid(s.gid); !st.ok()) return st;
  if (auto st = ValidateTimeouts("try_timeout_ms", s.try_timeout_ms,
                                 s.approval_timeout_ms, o);
      !st.ok()) {
    return st;
  }
  if (s.branches.empty() || s.branches.size() > o.max_branches) {
    return absl::InvalidArgumentError(
        absl::StrCat("a transaction has 1 to ", o.max_branches,
                     " branches; got ", s.branches.size()));
  }
  std::vector<const std::string*> ids;
  ids.reserve(s.branches.size());
  for (const auto& b : s.branches) {
    if (auto st = ValidateBranch(b, o); !st.ok()) return st;
    ids.push_back(&b.branch_id);
  }
  std::sort(ids.begin(), ids.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < ids.size(); ++i) {
    if (*ids[i] == *ids[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("branch id ", *ids[i], " repeated"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBegin(const BeginSpec& s, const Options& o) {
  if (auto st = identity::ValidateGid(s.gid); !st.ok()) return st;
  return ValidateTimeouts("timeout_ms", s.timeout_ms, s.approval_timeout_ms, o);
}

absl::Status AdmitSubmit(const SubmitSpec& s, const Options& o,
                         const AdmissionContext& c) {
  if (auto st = ValidateSubmit(s, o); !st.ok()) return st;
  if (auto st = AdmitNew(s.created_at_ms, s.approval_gate, c); !st.ok()) {
    return st;
  }
  for (const auto& b : s.branches) {
    if (auto st = AdmitParticipant(b, c); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status AdmitBegin(const BeginSpec& s, const Options& o,
                        const AdmissionContext& c) {
  if (auto st = ValidateBegin(s, o); !st.ok()) return st;
  return AdmitNew(s.created_at_ms, s.approval_gate, c);
}

absl::Status AdmitBranch(const BranchSpec& b, const Options& o,
                         const AdmissionContext& c) {
  if (auto st = ValidateBranch(b, o); !st.ok()) return st;
  return AdmitParticipant(b, c);
}

}  // namespace tcc::core
