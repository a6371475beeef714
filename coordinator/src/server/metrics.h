// tccd's Prometheus metrics (DESIGN.md section 12) and the /metrics endpoint.
//
// Labels name phases, outcomes, states and participants, never a gid or a
// branch id, so the number of series stays bounded by the configuration.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tcc::server {

// The series of one family by label values, looked up once: Family::Add
// builds a label map and hashes it on every call, which the per-call metrics
// would pay thousands of times a second.
template <typename T>
class SeriesCache {
 public:
  // The series for `key` (the label values joined), made by `make` the
  // first time.
  template <typename Make>
  T& Get(std::string_view key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = series_.find(key);
    if (it == series_.end()) it = series_.emplace(key, &make()).first;
    return *it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, T*, std::less<>> series_;
};

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(std::shared_ptr<prometheus::Registry> registry =
                                  std::make_shared<prometheus::Registry>());

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  // A transaction reached its final state ("confirmed" / "cancelled").
  void TransactionFinished(const std::string& final_state,
                           double duration_seconds);
  // A transaction was accepted (registered durably).
  void TransactionAccepted();
  // One participant call came back: phase try|confirm|cancel, outcome
  // executed|empty_rollback|rejected|hanging_refused|conflict|unknown|error.
  void BranchCall(const std::string& phase, const std::string& outcome,
                  bool replayed, double latency_seconds);
  void Retry(const std::string& phase);
  // An outcome became unknown / an unknown one was resolved after `age`.
  void UnknownOutcome(const std::string& phase);
  void UnknownResolved(const std::string& how, double age_seconds);
  // A reverse lookup's answer (barrier state, or "error").
  void Lookup(const std::string& answer);
  void SetStuckBranches(int64_t n);
  // Bytes of transaction state held in memory (the driver's budget), and
  // the most they have been since tccd started.
  void SetMemoryBytes(int64_t n, int64_t high_water);
  // Unfinished transactions and the age of the oldest (since it was
  // registered); those in doubt (no decision, a Try's outcome unknown:
  // tccd is asking) and how long the oldest has been. Ages 0: none.
  void SetUnfinished(int64_t unfinished, int64_t oldest_age_ms,
                     int64_t in_doubt, int64_t oldest_in_doubt_age_ms);
  // One WAL sync (from the syncer thread, once per fsync).
  void WalSync(double latency_seconds, int64_t group_size);
  // The WAL's own counters (wal::LogStats), copied periodically: fsyncs and
  // the durable appends they completed since start (their ratio over an
  // interval is the mean group-commit size).
  void SetWalTotals(uint64_t syncs, uint64_t synced_appends);
  // Cluster mode: the etcd log's figures since start, sampled.
  struct EtcdTotals {
    // The group commit's etcd Txns (resends included) and the appends they
    // committed (their ratio over an interval is the mean group size).
    uint64_t group_txns = 0;
    uint64_t appends = 0;
    // Every Txn the node's etcd client sent (reads in Txns too).
    uint64_t client_txns = 0;
    // Buffered appends held for a later group.
    uint64_t appends_held = 0;
    // Writes etcd refused on a shard's fence (EtcdLog::fenced_writes_refused).
    uint64_t fenced_writes_refused = 0;
  };
  // Exported as counters; the series exist once the first sample came.
  void SetEtcdTotals(const EtcdTotals& totals);
  // Sampled from the participant transport: gRPC calls sent alone and as
  // Batch calls, the calls those batches carried, and participants found
  // without Batch, since start.
  void SetParticipantRpcTotals(int64_t single, int64_t batches,
                               int64_t batched_calls, int64_t fallbacks);
  // HTTP participants: requests sent and connections opened (totals).
  void SetHttpTotals(int64_t requests, int64_t connections_opened);
  void SetRecovery(int64_t done, int64_t total);
  // 0 closed, 1 half-open, 2 open.
  void SetBreakerState(const std::string& participant, int state);
  // The configured participants' series, from the start (breakers closed).
  void ExportParticipants(const std::vector<std::string>& participants);
  void Alert(const std::string& kind);
  // Cluster mode (only then exported): the shards this node drives and
  // those without an owner, as it last read the membership.
  void SetClusterShards(int64_t owned_here, int64_t unowned);
  // A shard changed hands at this node: kind takeover (it took a shard),
  // handover (it gave one to its assigned node), lost (its fence was
  // refused, or its lease is gone).
  void ShardChange(const std::string& kind);
  // A Coordinator call forwarded to its shard's owner ended: outcome ok,
  // or the gRPC code's name.
  void Forwarded(const std::string& outcome);

 private:
  void ExportCluster();  // made on first use, so a local tccd has none
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& txns_;
  prometheus::Family<prometheus::Histogram>& txn_duration_;
  prometheus::Family<prometheus::Counter>& branch_calls_;
  prometheus::Family<prometheus::Histogram>& branch_latency_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Family<prometheus::Counter>& unknown_;
  prometheus::Family<prometheus::Counter>& unknown_resolved_;
  prometheus::Family<prometheus::Histogram>& unknown_age_;
  prometheus::Family<prometheus::Counter>& lookups_;
  prometheus::Family<prometheus::Gauge>& stuck_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Family<prometheus::Gauge>& memory_high_water_;
  prometheus::Family<prometheus::Gauge>& unfinished_;
  prometheus::Family<prometheus::Gauge>& oldest_unfinished_;
  prometheus::Family<prometheus::Gauge>& in_doubt_;
  prometheus::Family<prometheus::Gauge>& oldest_in_doubt_;
  prometheus::Family<prometheus::Histogram>& wal_sync_;
  prometheus::Family<prometheus::Histogram>& wal_group_;
  prometheus::Family<prometheus::Gauge>& wal_syncs_;
  prometheus::Family<prometheus::Gauge>& wal_synced_appends_;
  prometheus::Family<prometheus::Counter>& etcd_txns_;
  prometheus::Family<prometheus::Counter>& etcd_appends_;
  prometheus::Family<prometheus::Counter>& etcd_appends_held_;
  prometheus::Family<prometheus::Counter>& etcd_client_txns_;
  prometheus::Family<prometheus::Gauge>& participant_rpcs_;
  prometheus::Family<prometheus::Gauge>& recovery_;
  prometheus::Family<prometheus::Gauge>& breaker_;
  prometheus::Family<prometheus::Counter>& alerts_;
  std::once_flag cluster_once_;
  prometheus::Family<prometheus::Gauge>* cluster_shards_ = nullptr;
  prometheus::Family<prometheus::Counter>* shard_changes_ = nullptr;
  prometheus::Family<prometheus::Counter>* forwarded_ = nullptr;
  prometheus::Family<prometheus::Counter>* fenced_refused_ = nullptr;
  prometheus::Histogram* wal_sync_series_;  // of wal_sync_, made once
  prometheus::Histogram* wal_group_series_;
  // The etcd totals last sampled (the counters grow by the difference).
  std::mutex etcd_mu_;
  uint64_t etcd_txns_seen_ = 0, etcd_appends_seen_ = 0,
           etcd_client_txns_seen_ = 0, etcd_appends_held_seen_ = 0,
           fenced_refused_seen_ = 0;
  SeriesCache<prometheus::Counter> txns_cache_, branch_calls_cache_,
      retries_cache_, unknown_cache_, unknown_resolved_cache_, lookups_cache_,
      shard_changes_cache_, forwarded_cache_;
  SeriesCache<prometheus::Histogram> txn_duration_cache_, branch_latency_cache_,
      unknown_age_cache_;
};

// Serves a registry at http://ADDRESS/metrics until destroyed.
class MetricsEndpoint {
 public:
  // `address` is host:port; port 0 picks a free one (see port()).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address,
      std::shared_ptr<prometheus::Registry> registry);
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace tcc::server
