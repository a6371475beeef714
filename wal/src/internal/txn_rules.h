// The rules every Log implementation applies to an append, written once so
// that the in-memory, RocksDB (and later etcd) logs agree exactly (log.h
// lists the promises). Pure functions over a transaction's current summary:
// no I/O, no clock, no locks; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/wal/log.h"

namespace tcc::wal::internal {

// What applying one append changes.
struct AppendPlan {
  // The transaction's summary after the append when summary_set; when not,
  // the append leaves the summary as it was and `summary` is empty (records
  // that change no summary field spare its copy).
  TxnSummary summary;
  bool summary_set = false;
  std::vector<Approval> consumed;  // approvals it uses, already marked used
  bool registers = false;          // it starts with Registered (a new gid)
};

// Whether `request` registers its gid (its first record is Registered).
[[nodiscard]] bool Registers(const AppendRequest& request);

// Whether a log that writes buffered appends late (the etcd log, DESIGN.md
// section 14, "Group commit": they ride in the gid's next group) may hold
// `request`, planned as `plan` against `before` (the gid's summary), in
// memory and answer it at once: a buffered append that neither registers
// its gid, consumes an approval, nor finishes the transaction. Holding it
// keeps log.h's prefix per gid (it is written with or before the gid's next
// append), not across gids.
[[nodiscard]] bool MayHold(const AppendRequest& request, const AppendPlan& plan,
                           const TxnSummary& before);

// Looks up an approval as it stands now (including approvals consumed earlier
// in the same write); NOT_FOUND when there is none.
using ApprovalLookup =
    std::function<absl::StatusOr<Approval>(const std::string& approval_id)>;

// A lookup that finds no approval (NOT_FOUND): for appends checked where
// approvals are not at hand (a held append, the simulation's log).
const ApprovalLookup& NoApprovals();

// Checks `request` against `current` (the gid's summary, or nullptr when the
// log does not hold the gid) and returns what it changes, or the error the
// append fails with (log.h, "Append errors"). A compacted transaction takes
// no more records (FAILED_PRECONDITION).
[[nodiscard]] absl::StatusOr<AppendPlan> PlanAppend(
    const AppendRequest& request, const TxnSummary* current,
    const ApprovalLookup& lookup);

// Checks a newly issued approval's fields (INVALID_ARGUMENT).
[[nodiscard]] absl::Status ValidateNewApproval(const Approval& approval);

// Checks a ListQuery's page size and token (INVALID_ARGUMENT).
[[nodiscard]] absl::Status ValidateListQuery(const ListQuery& query);

// Where a page starts: after this (registered_at_ms, gid); nullopt for the
// first page. INVALID_ARGUMENT for a token this code did not make.
struct ListPosition {
  int64_t registered_at_ms = 0;
  std::string gid;
};
[[nodiscard]] absl::StatusOr<std::optional<ListPosition>> DecodePageToken(
    std::string_view token);
std::string EncodePageToken(int64_t registered_at_ms, std::string_view gid);

// True when `summary` passes the query's state, age and participant filters.
bool MatchesQuery(const TxnSummary& summary, const ListQuery& query);

// What retention does to one finished transaction at `now_ms` by time alone.
enum class RetentionStep { kKeep, kCompact, kForget };
RetentionStep DueStep(const TxnSummary& summary, const RetentionPolicy& policy,
                      int64_t now_ms);

}  // namespace tcc::wal::internal
