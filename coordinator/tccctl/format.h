// tccctl's output and argument parsing, apart from the gRPC calls so that
// every line an operator reads is unit-tested: the human-readable views
// (aligned columns, times as ISO-8601 UTC with their age), the JSON views
// (protobuf's JSON printer, proto field names, one object per line), the
// durations operators type (`500ms`, `30s`, `5m`, `2h`), and the mapping of
// gRPC status codes to tccctl's exit codes.
//
// Pure functions: no clock reads (the caller passes `now_ms`), no I/O.
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "tcc/v1/admin.pb.h"
#include "tcc/v1/coordinator.pb.h"

namespace tcc::tccctl {

// tccctl's exit codes (documented in `tccctl --help` and README.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitCallFailed = 1,    // any other server error
  kExitUsage = 2,         // bad flags, arguments or local files
  kExitUnreachable = 3,   // UNAVAILABLE, DEADLINE_EXCEEDED
  kExitCredential = 4,    // UNAUTHENTICATED, PERMISSION_DENIED
  kExitNotFound = 5,      // NOT_FOUND
  kExitPrecondition = 6,  // FAILED_PRECONDITION, ABORTED
};

// The exit code for a call that ended with `code`.
int ExitCodeFor(absl::StatusCode code);

// The text `tccctl --help` ends with: every exit code and what it means.
std::string ExitCodesHelp();

// "500ms", "30s", "5m", "2h", "1d", or a sequence such as "1h30m" -> ms.
// INVALID_ARGUMENT for anything else (no unit, negative, overflow).
absl::StatusOr<int64_t> ParseDuration(const std::string& text);

// A state as operators type it: "trying", "TRYING" or "TXN_STATE_TRYING".
absl::StatusOr<tcc::v1::TxnState> ParseTxnState(const std::string& text);

// force-confirm | force-cancel | resolve-branch | gate-approve.
absl::StatusOr<tcc::v1::ApprovalAction> ParseApprovalAction(
    const std::string& text);

// 64 hex digits (either case) -> 32 bytes.
absl::StatusOr<std::string> ParseContentHash(const std::string& hex);
std::string Hex(const std::string& bytes);

// "2026-11-30T15:23:43.123Z"; "-" for 0.
std::string FormatTime(int64_t unix_ms);
// "350ms", "12.3s", "5m12s", "3h05m", "2d03h".
std::string FormatAge(int64_t ms);
// FormatTime plus " (AGE ago)" or " (in AGE)" relative to now; "-" for 0.
std::string FormatTimeWithAge(int64_t unix_ms, int64_t now_ms);

// Enum names without their prefix: "CONFIRMING", "CONFIRM", "SUCCEEDED",
// "EXECUTED", "FORCE_CANCEL".
std::string StateName(tcc::v1::TxnState state);
std::string DecisionName(tcc::v1::Decision decision);
std::string PhaseStateName(tcc::v1::PhaseState state);
std::string OutcomeName(tcc::v1::Outcome outcome);
std::string ActionName(tcc::v1::ApprovalAction action);
// A decision's cause as the decision line shows it, in lower case words:
// "rule", "deadline", "rollback", "forced", "gate approved", "witnessed";
// "" for DECISION_CAUSE_UNSPECIFIED.
std::string CauseName(tcc::v1::DecisionCause cause);
bool IsFinal(tcc::v1::TxnState state);

// One line of JSON: protobuf's printer with proto field names, enums by name,
// fields at their default value included. int64/uint64 are JSON strings and
// bytes are base64, as the proto3 JSON mapping says.
std::string ToJson(const google::protobuf::Message& message);

// Human-readable views; each ends with a newline.
std::string FormatStatus(const tcc::v1::StatusResponse& status, int64_t now_ms);
// `tccctl cluster`: the nodes (address, lease left, shards owned, draining),
// then the shards by owner with their epochs, and the unowned ones.
std::string FormatCluster(const tcc::v1::ClusterResponse& cluster);
// A header line and one line per transaction, aligned (BRANCHES is "-" for
// a summary without branches); `next_page_token`
// (when not empty) adds a line saying how to get the next page.
std::string FormatList(const std::vector<tcc::v1::TransactionView>& txns,
                       const std::string& next_page_token, int64_t now_ms);
// The header and every branch; with `show`, also the timeline and the
// approvals consumed (the audit trail). The decision line is the decision,
// its cause and its reason: "CANCEL (deadline: try-deadline passed ...)".
std::string FormatTransaction(const tcc::v1::TransactionView& txn,
                              int64_t now_ms);
std::string FormatShow(const tcc::v1::ShowResponse& show, int64_t now_ms);
// One line per Watch event.
std::string FormatWatchEvent(const tcc::v1::WatchEvent& event, int64_t now_ms);
std::string FormatApproval(const tcc::v1::Approval& approval, int64_t now_ms);

// The error line tccctl prints on stderr: "tccctl: NOT_FOUND: no gid g-1".
std::string FormatError(const absl::Status& status);

}  // namespace tcc::tccctl
