// The Coordinator/Admin services' backend over the runtime's Driver and the
// WAL, plus the daemon's DriverObserver: metrics, log lines (gid and branch id
// on each), Watch notifications.
//
// Every request is answered exactly once: by the driver, or with UNAVAILABLE
// by Shutdown() (so a stopping server never waits on a transaction that is
// still retrying a participant).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpc/coordinator_backend.h"
#include "runtime/driver.h"
#include "server/metrics.h"
#include "tcc/wal/log.h"

namespace tcc::server {

class DriverBackend final : public rpc::CoordinatorBackend,
                            public runtime::DriverObserver {
 public:
  // `driver` is attached after construction (the driver needs the observer
  // first). `metrics` may be null.
  DriverBackend(wal::Log& log, runtime::Clock& clock,
                CoordinatorMetrics* metrics);
  void Attach(runtime::Driver* driver) { driver_ = driver; }
  // New transactions (Submit, Begin) beyond this many unfinished ones get
  // RESOURCE_EXHAUSTED (config limits.max_in_flight).
  void SetMaxInFlight(uint64_t max) { max_in_flight_ = max; }
  int64_t in_flight() const { return in_flight_.load(); }
  // Resets the count from the WAL's exact figure (the server does it every
  // second, so that the running count cannot drift).
  void ReconcileInFlight(uint64_t unfinished) {
    in_flight_ = static_cast<int64_t>(unfinished);
  }

  // Recovery's progress to /metrics: the unfinished transactions the scan
  // found at start, and how many of them are final since (the server calls
  // it periodically).
  void ExportRecovery();

  // Answers every request still waiting with UNAVAILABLE and ends every
  // Watch; later requests get UNAVAILABLE at once.
  void Shutdown();
  bool stopping() const override { return stopping_.load(); }

  // rpc::CoordinatorBackend
  void Submit(core::SubmitSpec spec, rpc::AnswerDone done) override;
  void Begin(core::BeginSpec spec, rpc::AnswerDone done) override;
  void Try(std::string gid, core::BranchSpec branch, rpc::AnswerDone done,
           int64_t answer_within_ms) override;
  void Commit(std::string gid, std::vector<std::string> expected_ids,
              core::WaitFor wait_for, rpc::AnswerDone done) override;
  void Rollback(std::string gid, core::WaitFor wait_for,
                rpc::AnswerDone done) override;
  void Get(std::string gid, rpc::AnswerDone done) override;
  absl::StatusOr<wal::ListPage> List(const wal::ListQuery& query) override;
  std::unique_ptr<rpc::WatchSubscription> Watch(
      std::string gid,
      std::function<void(absl::StatusOr<core::TransactionView>)> on_change)
      override;
  void RetryNow(std::string gid, std::string branch_id,
                rpc::AnswerDone done) override;
  void IssueApproval(wal::Approval approval,
                     std::function<void(absl::Status)> done) override;
  absl::StatusOr<wal::Approval> ReadApproval(
      const std::string& approval_id) override;
  void ForceDecision(std::string gid, wal::Decision decision,
                     std::string approval_id, rpc::AnswerDone done) override;
  void ResolveBranch(std::string gid, std::string branch_id,
                     std::string approval_id, rpc::AnswerDone done) override;
  void Approve(std::string gid, std::string approval_id,
               rpc::AnswerDone done) override;
  absl::StatusOr<wal::TxnLog> ReadLog(const std::string& gid) override;
  Health Status() override;

  // runtime::DriverObserver
  void OnSignal(const std::string& gid, const std::string& branch_id,
                const core::SignalEffect& signal) override;
  void OnFinished(const std::string& gid, core::TxnState state,
                  int64_t duration_ms) override;
  void OnBreaker(const std::string& participant,
                 runtime::BreakerState state) override;
  void OnEffect(const std::string& gid, const core::Effect& effect) override;
  void OnRecovered(size_t resumed) override;
  void OnFatal(const absl::Status& status) override;
  // Cluster mode: shards taken whose recovery scan still runs.
  void OnShardRecovered(uint32_t shard, uint64_t epoch,
                        size_t resumed) override;
  void OnShardScanFailed(uint32_t shard, const absl::Status& why) override;
  void OnShardDropped(uint32_t shard) override;
  // Cluster mode: there is no scan at start; the node recovers shard by
  // shard, and is "recovering" (Status) while a shard's scan runs.
  void RecoverPerShard() { per_shard_ = true; }
  // A shard is being adopted (its scan will start); `ok` false: the
  // adoption failed.
  void ShardAdopting(uint32_t shard, bool ok);
  uint32_t recovering_shards() const;

  // OK, or the first state the driver could not drive (OnFatal): the
  // daemon stops on it (exit 3 for DATA_LOSS).
  absl::Status fatal() const;

 private:
  struct Pending;
  struct Watcher;
  class Subscription;

  // Wraps `done` so it runs once, and is reachable by Shutdown.
  runtime::ReplyDone Track(rpc::AnswerDone done);
  void Refresh(const std::string& gid);

  wal::Log& log_;
  runtime::Clock& clock_;
  CoordinatorMetrics* metrics_;
  runtime::Driver* driver_ = nullptr;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;
  uint64_t next_pending_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Pending>> pending_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Watcher>>>
      watchers_;

  // Registered and not yet finished, as seen by this process (recovered ones
  // included once the scan reports them).
  std::atomic<int64_t> in_flight_{0};
  uint64_t max_in_flight_ = UINT64_MAX;
  std::atomic<bool> recovered_{false};
  std::atomic<bool> per_shard_{false};
  mutable std::mutex fatal_mu_;
  absl::Status fatal_;  // guarded by fatal_mu_
  mutable std::mutex scans_mu_;
  std::set<uint32_t> scanning_shards_;  // adopted, scan not ended
};

}  // namespace tcc::server
