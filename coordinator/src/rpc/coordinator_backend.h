// What the gRPC Coordinator service needs from the rest of tccd: the driver
// behind an interface, so that the rpc layer knows only the core's domain
// types (STYLE.md: rpc is proto <-> domain and status mapping, nothing else).
// server/ implements it over the runtime's driver and the WAL.
//
// Thread-safety: every method may be called from any gRPC thread; `done`
// callbacks may run on any thread, exactly once each.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/transaction.h"
#include "tcc/wal/log.h"

namespace tcc::rpc {

// The answer to one request: a status and, when OK (and for some refusals,
// e.g. ABORTED), the transaction as it stood.
struct TxnAnswer {
  absl::Status status;
  core::TransactionView view;
  bool duplicate = false;
  int branch = -1;  // Try: the index into view.branches of the branch tried
};

using AnswerDone = std::function<void(TxnAnswer)>;

// A live subscription to one transaction's changes; dropping it ends it.
class WatchSubscription {
 public:
  virtual ~WatchSubscription() = default;
};

class CoordinatorBackend {
 public:
  virtual ~CoordinatorBackend() = default;

  virtual void Submit(core::SubmitSpec spec, AnswerDone done) = 0;
  virtual void Begin(core::BeginSpec spec, AnswerDone done) = 0;
  // answer_within_ms: as core::SubmitSpec::answer_within_ms.
  virtual void Try(std::string gid, core::BranchSpec branch, AnswerDone done,
                   int64_t answer_within_ms) = 0;
  virtual void Commit(std::string gid, std::vector<std::string> expected_ids,
                      core::WaitFor wait_for, AnswerDone done) = 0;
  virtual void Rollback(std::string gid, core::WaitFor wait_for,
                        AnswerDone done) = 0;
  // NOT_FOUND for a gid tccd does not know (or has forgotten).
  virtual void Get(std::string gid, AnswerDone done) = 0;
  [[nodiscard]] virtual absl::StatusOr<wal::ListPage> List(
      const wal::ListQuery& query) = 0;
  // Calls `on_change` with the current view soon, then after every change
  // until the transaction is final (the last call carries the final state), an
  // error ends it (NOT_FOUND for an unknown gid; UNAVAILABLE when tccd stops),
  // or the subscription is dropped. Dropping it waits for a call in progress.
  virtual std::unique_ptr<WatchSubscription> Watch(
      std::string gid,
      std::function<void(absl::StatusOr<core::TransactionView>)> on_change) = 0;

  // Admin: re-send now the pending calls of a transaction (one branch when
  // branch_id is set), skipping the backoff wait.
  virtual void RetryNow(std::string gid, std::string branch_id,
                        AnswerDone done) = 0;

  // Admin, one-time approvals (DESIGN.md section 10). IssueApproval stores a
  // new approval durably (`done` after the sync); the others consume one in
  // the same durable record as the action (the WAL checks it matches, is
  // unused and unexpired).
  virtual void IssueApproval(wal::Approval approval,
                             std::function<void(absl::Status)> done) = 0;
  [[nodiscard]] virtual absl::StatusOr<wal::Approval> ReadApproval(
      const std::string& approval_id) = 0;
  virtual void ForceDecision(std::string gid, wal::Decision decision,
                             std::string approval_id, AnswerDone done) = 0;
  virtual void ResolveBranch(std::string gid, std::string branch_id,
                             std::string approval_id, AnswerDone done) = 0;
  virtual void Approve(std::string gid, std::string approval_id,
                       AnswerDone done) = 0;
  // Admin: the transaction's stored records (the operators' timeline).
  [[nodiscard]] virtual absl::StatusOr<wal::TxnLog> ReadLog(
      const std::string& gid) = 0;

  struct Health {
    // "serving", "recovering" (the recovery scan runs), "stopping", or
    // "failed" (tccd met state it cannot drive and is stopping)
    std::string health;
    uint64_t wal_bytes = 0;
    int64_t dedup_horizon_ms = 0;
    std::vector<std::pair<wal::TxnState, uint64_t>> in_flight;
    uint64_t oldest_unfinished_age_ms = 0;
    uint64_t stuck_branches = 0;
    uint64_t recovery_total = 0;
    uint64_t recovery_done = 0;
    std::string recovery_error;  // non-empty: the recovery scan failed
  };
  virtual Health Status() = 0;
  // True once the daemon is stopping (its requests are refused
  // UNAVAILABLE): a Watch relayed from another node's shard ends then.
  virtual bool stopping() const { return false; }
};

}  // namespace tcc::rpc
