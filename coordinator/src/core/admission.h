// The admission rules for a new transaction or branch (DESIGN.md sections 3
// and 4, README "Limits"), written once: the core checks the content rules
// in Step (a request's own fields: ids, timeouts, branch counts and sizes),
// and the driver checks all of them, with what only tccd knows (its clock,
// the WAL's deduplication horizon, the configured participants, whether an
// approval can be given), before anything is written. The rpc layer maps
// protobuf to these specs and checks nothing of its own.
//
// Every refusal names the field and the rule: INVALID_ARGUMENT for a bad
// field or an unknown participant, FAILED_PRECONDITION for a created_at
// older than the horizon and for the approval gate where nobody could
// approve.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "core/machine.h"
#include "core/transaction.h"

namespace tcc::core {

// What tccd knows beyond the request.
struct AdmissionContext {
  int64_t now_ms = 0;            // tccd's wall clock
  int64_t dedup_horizon_ms = 0;  // the WAL's (Log::DedupHorizonMs)
  // A created_at further ahead of now_ms is refused.
  int64_t max_clock_skew_ms = 5 * 60 * 1000;
  // Whether a branch may name `participant` (configured, or an address when
  // direct targets are allowed). Unset: any name.
  std::function<bool(const std::string& participant)> participant_known;
  // Whether an approval could be issued (an admin credential is
  // configured): without one the approval gate is refused.
  bool approval_gate_enabled = true;
};

// The content rules alone (what Step refuses by itself).
[[nodiscard]] absl::Status ValidateSubmit(const SubmitSpec& spec,
                                          const Options& options);
[[nodiscard]] absl::Status ValidateBegin(const BeginSpec& spec,
                                         const Options& options);
[[nodiscard]] absl::Status ValidateBranch(const BranchSpec& branch,
                                          const Options& options);

// Every rule, for a request that would create a transaction or a branch.
[[nodiscard]] absl::Status AdmitSubmit(const SubmitSpec& spec,
                                       const Options& options,
                                       const AdmissionContext& context);
[[nodiscard]] absl::Status AdmitBegin(const BeginSpec& spec,
                                      const Options& options,
                                      const AdmissionContext& context);
[[nodiscard]] absl::Status AdmitBranch(const BranchSpec& branch,
                                       const Options& options,
                                       const AdmissionContext& context);

}  // namespace tcc::core
