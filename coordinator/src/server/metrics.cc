#include "server/metrics.h"

#include <algorithm>
#include <exception>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"

namespace tcc::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
          0.1,    0.2,   0.5,   1,     2,    5,    10};
}

Histogram::BucketBoundaries DurationBuckets() {
  return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
          0.5,   1,     2,     5,    10,   30,   60,  300};
}

// "a/b/c/" as a cache key, in a buffer of this thread's that keeps its
// capacity (no allocation once it has grown; never truncated).
std::string_view JoinKey(std::initializer_list<std::string_view> parts) {
  thread_local std::string key;
  key.clear();
  for (std::string_view part : parts) {
    key.append(part.data(), part.size());
    key.push_back('/');
  }
  return key;
}

// The counter of `family` whose one label `name` is `value`, from `cache`.
prometheus::Counter& OneLabel(SeriesCache<prometheus::Counter>& cache,
                              prometheus::Family<prometheus::Counter>& family,
                              const char* name, const std::string& value) {
  return cache.Get(value, [&]() -> prometheus::Counter& {
    return family.Add({{name, value}});
  });
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(
    std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      txns_(BuildCounter()
                .Name("tccd_transactions_total")
                .Help("Transactions by event: accepted, confirmed, cancelled")
                .Register(*registry_)),
      txn_duration_(BuildHistogram()
                        .Name("tccd_transaction_duration_seconds")
                        .Help("From registration to final state")
                        .Register(*registry_)),
      branch_calls_(BuildCounter()
                        .Name("tccd_branch_calls_total")
                        .Help("Participant calls by phase, outcome, replayed")
                        .Register(*registry_)),
      branch_latency_(BuildHistogram()
                          .Name("tccd_branch_call_seconds")
                          .Help("Participant call latency by phase")
                          .Register(*registry_)),
      retries_(BuildCounter()
                   .Name("tccd_retries_total")
                   .Help("Participant calls re-sent, by phase")
                   .Register(*registry_)),
      unknown_(BuildCounter()
                   .Name("tccd_unknown_outcomes_total")
                   .Help("Calls whose outcome became unknown, by phase")
                   .Register(*registry_)),
      unknown_resolved_(BuildCounter()
                            .Name("tccd_unknown_resolved_total")
                            .Help("Unknown outcomes resolved, by how")
                            .Register(*registry_)),
      unknown_age_(BuildHistogram()
                       .Name("tccd_unknown_outcome_age_seconds")
                       .Help("How long an outcome stayed unknown")
                       .Register(*registry_)),
      lookups_(BuildCounter()
                   .Name("tccd_lookups_total")
                   .Help("Reverse lookups (Query) by answer")
                   .Register(*registry_)),
      stuck_(BuildGauge()
                 .Name("tccd_stuck_branches")
                 .Help("Branches flagged STUCK")
                 .Register(*registry_)),
      memory_(BuildGauge()
                  .Name("tccd_transaction_memory_bytes")
                  .Help("Bytes of transaction state held in memory, as "
                        "limits.max_in_flight_bytes counts them")
                  .Register(*registry_)),
      memory_high_water_(
          BuildGauge()
              .Name("tccd_transaction_memory_high_water_bytes")
              .Help("The most tccd_transaction_memory_bytes has been since "
                    "tccd started (kept at every change, not sampled)")
              .Register(*registry_)),
      unfinished_(BuildGauge()
                      .Name("tccd_unfinished_transactions")
                      .Help("Transactions accepted and not yet final")
                      .Register(*registry_)),
      oldest_unfinished_(
          BuildGauge()
              .Name("tccd_oldest_unfinished_age_seconds")
              .Help("Age of the oldest unfinished transaction (since it "
                    "was registered; 0: none)")
              .Register(*registry_)),
      in_doubt_(BuildGauge()
                    .Name("tccd_in_doubt_transactions")
                    .Help("Undecided transactions with a Try whose outcome "
                          "is unknown after a failed call (tccd asks the "
                          "participant)")
                    .Register(*registry_)),
      oldest_in_doubt_(BuildGauge()
                           .Name("tccd_oldest_in_doubt_age_seconds")
                           .Help("How long the oldest transaction in doubt "
                                 "has been (0: none)")
                           .Register(*registry_)),
      wal_sync_(BuildHistogram()
                    .Name("tccd_wal_sync_seconds")
                    .Help("WAL group commit latency: one fsync of the "
                          "RocksDB WAL, or in cluster mode one etcd Txn of "
                          "the group commit (first send to etcd's answer)")
                    .Register(*registry_)),
      wal_group_(BuildHistogram()
                     .Name("tccd_wal_group_size")
                     .Help("Appends served by one WAL sync (cluster mode: "
                           "carried by one etcd Txn)")
                     .Register(*registry_)),
      wal_syncs_(BuildGauge()
                     .Name("tccd_wal_syncs")
                     .Help("WAL fsyncs since start (a counter, sampled)")
                     .Register(*registry_)),
      wal_synced_appends_(
          BuildGauge()
              .Name("tccd_wal_synced_appends")
              .Help("Durable WAL appends completed since start (sampled)")
              .Register(*registry_)),
      etcd_txns_(BuildCounter()
                     .Name("tccd_etcd_txns_total")
                     .Help("Cluster mode: etcd Txns the group commit sent "
                           "for appends (resends included)")
                     .Register(*registry_)),
      etcd_appends_(BuildCounter()
                        .Name("tccd_etcd_appends_total")
                        .Help("Cluster mode: appends (durable and buffered) "
                              "the group commit's etcd Txns committed")
                        .Register(*registry_)),
      etcd_appends_held_(
          BuildCounter()
              .Name("tccd_etcd_appends_held_total")
              .Help("Cluster mode: buffered appends answered at once and held "
                    "for their transaction's next group (each counted in "
                    "tccd_etcd_appends_total too, once written)")
              .Register(*registry_)),
      etcd_client_txns_(
          BuildCounter()
              .Name("tccd_etcd_client_txns_total")
              .Help("Cluster mode: every etcd Txn the node's client sent "
                    "(the group commit's, and reads: views, finishing "
                    "records, ownership)")
              .Register(*registry_)),
      participant_rpcs_(
          BuildGauge()
              .Name("tccd_participant_rpcs")
              .Help("Participant calls since start (sampled): gRPC "
                    "kind=single|batch, batched_calls (the calls batches "
                    "carried), batch_fallbacks (participants without Batch); "
                    "HTTP kind=http_requests|http_connections_opened")
              .Register(*registry_)),
      recovery_(BuildGauge()
                    .Name("tccd_recovery_transactions")
                    .Help("Recovery progress: total found, done")
                    .Register(*registry_)),
      breaker_(BuildGauge()
                   .Name("tccd_circuit_breaker_state")
                   .Help("0 closed, 1 half-open, 2 open")
                   .Register(*registry_)),
      alerts_(BuildCounter()
                  .Name("tccd_alerts_total")
                  .Help("Alerts by kind: core (protocol violations, "
                        "conflicts, contradicting witnesses), lost_decision "
                        "(a decision the WAL lost, adopted from a "
                        "participant's barrier), fatal (state tccd cannot "
                        "drive; it stops)")
                  .Register(*registry_)) {
  // Series a dashboard or an alert reads exist from the start, at 0, so that
  // 0 is told from no data.
  stuck_.Add({}).Set(0);
  SetUnfinished(0, 0, 0, 0);
  SetRecovery(0, 0);
  wal_sync_series_ = &wal_sync_.Add({}, LatencyBuckets());
  wal_group_series_ = &wal_group_.Add(
      {},
      Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
  for (const char* kind : {"core", "lost_decision", "fatal"}) {
    alerts_.Add({{"kind", kind}});
  }
}

void CoordinatorMetrics::ExportParticipants(
    const std::vector<std::string>& participants) {
  for (const std::string& p : participants) SetBreakerState(p, 0);
}

void CoordinatorMetrics::TransactionAccepted() {
  OneLabel(txns_cache_, txns_, "event", "accepted").Increment();
}

void CoordinatorMetrics::TransactionFinished(const std::string& final_state,
                                             double duration_seconds) {
  OneLabel(txns_cache_, txns_, "event", final_state).Increment();
  txn_duration_cache_
      .Get(final_state,
           [&]() -> prometheus::Histogram& {
             return txn_duration_.Add({{"state", final_state}},
                                      DurationBuckets());
           })
      .Observe(duration_seconds);
}

void CoordinatorMetrics::BranchCall(const std::string& phase,
                                    const std::string& outcome, bool replayed,
                                    double latency_seconds) {
  branch_calls_cache_
      .Get(JoinKey({phase, outcome, replayed ? "true" : "false"}),
           [&]() -> prometheus::Counter& {
             return branch_calls_.Add(
                 {{"phase", phase},
                  {"outcome", outcome},
                  {"replayed", replayed ? "true" : "false"}});
           })
      .Increment();
  branch_latency_cache_
      .Get(phase,
           [&]() -> prometheus::Histogram& {
             return branch_latency_.Add({{"phase", phase}}, LatencyBuckets());
           })
      .Observe(latency_seconds);
}

void CoordinatorMetrics::Retry(const std::string& phase) {
  OneLabel(retries_cache_, retries_, "phase", phase).Increment();
}

void CoordinatorMetrics::UnknownOutcome(const std::string& phase) {
  OneLabel(unknown_cache_, unknown_, "phase", phase).Increment();
}

void CoordinatorMetrics::UnknownResolved(const std::string& how,
                                         double age_seconds) {
  OneLabel(unknown_resolved_cache_, unknown_resolved_, "how", how).Increment();
  unknown_age_cache_
      .Get("",
           [&]() -> prometheus::Histogram& {
             return unknown_age_.Add({}, DurationBuckets());
           })
      .Observe(age_seconds);
}

void CoordinatorMetrics::Lookup(const std::string& answer) {
  OneLabel(lookups_cache_, lookups_, "answer", answer).Increment();
}

void CoordinatorMetrics::SetStuckBranches(int64_t n) {
  stuck_.Add({}).Set(static_cast<double>(n));
}

void CoordinatorMetrics::SetMemoryBytes(int64_t n, int64_t high_water) {
  memory_.Add({}).Set(static_cast<double>(n));
  memory_high_water_.Add({}).Set(static_cast<double>(high_water));
}

void CoordinatorMetrics::SetUnfinished(int64_t unfinished,
                                       int64_t oldest_age_ms, int64_t in_doubt,
                                       int64_t oldest_in_doubt_age_ms) {
  unfinished_.Add({}).Set(static_cast<double>(unfinished));
  oldest_unfinished_.Add({}).Set(static_cast<double>(oldest_age_ms) / 1000.0);
  in_doubt_.Add({}).Set(static_cast<double>(in_doubt));
  oldest_in_doubt_.Add({}).Set(static_cast<double>(oldest_in_doubt_age_ms) /
                               1000.0);
}

void CoordinatorMetrics::WalSync(double latency_seconds, int64_t group_size) {
  wal_sync_series_->Observe(latency_seconds);
  wal_group_series_->Observe(static_cast<double>(group_size));
}

void CoordinatorMetrics::SetWalTotals(uint64_t syncs, uint64_t synced_appends) {
  wal_syncs_.Add({}).Set(static_cast<double>(syncs));
  wal_synced_appends_.Add({}).Set(static_cast<double>(synced_appends));
}

void CoordinatorMetrics::SetEtcdTotals(const EtcdTotals& totals) {
  ExportCluster();
  std::lock_guard<std::mutex> lock(etcd_mu_);
  auto grow = [](prometheus::Family<prometheus::Counter>& family,
                 uint64_t& seen, uint64_t total) {
    prometheus::Counter& counter = family.Add({});
    if (total > seen) counter.Increment(static_cast<double>(total - seen));
    seen = std::max(seen, total);
  };
  grow(etcd_txns_, etcd_txns_seen_, totals.group_txns);
  grow(etcd_appends_, etcd_appends_seen_, totals.appends);
  grow(etcd_client_txns_, etcd_client_txns_seen_, totals.client_txns);
  grow(etcd_appends_held_, etcd_appends_held_seen_, totals.appends_held);
  grow(*fenced_refused_, fenced_refused_seen_, totals.fenced_writes_refused);
}

void CoordinatorMetrics::SetParticipantRpcTotals(int64_t single,
                                                 int64_t batches,
                                                 int64_t batched_calls,
                                                 int64_t fallbacks) {
  participant_rpcs_.Add({{"kind", "single"}}).Set(static_cast<double>(single));
  participant_rpcs_.Add({{"kind", "batch"}}).Set(static_cast<double>(batches));
  participant_rpcs_.Add({{"kind", "batched_calls"}})
      .Set(static_cast<double>(batched_calls));
  participant_rpcs_.Add({{"kind", "batch_fallbacks"}})
      .Set(static_cast<double>(fallbacks));
}

void CoordinatorMetrics::SetHttpTotals(int64_t requests,
                                       int64_t connections_opened) {
  participant_rpcs_.Add({{"kind", "http_requests"}})
      .Set(static_cast<double>(requests));
  participant_rpcs_.Add({{"kind", "http_connections_opened"}})
      .Set(static_cast<double>(connections_opened));
}

void CoordinatorMetrics::SetRecovery(int64_t done, int64_t total) {
  recovery_.Add({{"progress", "total"}}).Set(static_cast<double>(total));
  recovery_.Add({{"progress", "done"}}).Set(static_cast<double>(done));
}

void CoordinatorMetrics::SetBreakerState(const std::string& participant,
                                         int state) {
  breaker_.Add({{"participant", participant}}).Set(state);
}

void CoordinatorMetrics::Alert(const std::string& kind) {
  alerts_.Add({{"kind", kind}}).Increment();
}

void CoordinatorMetrics::ExportCluster() {
  std::call_once(cluster_once_, [this] {
    cluster_shards_ = &BuildGauge()
                           .Name("tccd_cluster_shards")
                           .Help(
                               "Cluster mode: shards this node drives "
                               "(state=owned_here) and shards without an "
                               "owner (state=unowned), as this node last "
                               "read the membership")
                           .Register(*registry_);
    shard_changes_ = &BuildCounter()
                          .Name("tccd_cluster_shard_changes_total")
                          .Help(
                              "Cluster mode: shards this node took "
                              "(kind=takeover), handed over to their "
                              "assigned node (handover) or lost (lost: a "
                              "refused fence or a lost lease)")
                          .Register(*registry_);
    forwarded_ = &BuildCounter()
                      .Name("tccd_cluster_forwarded_calls_total")
                      .Help(
                          "Cluster mode: Coordinator calls forwarded to "
                          "their shard's owner, by outcome (ok or the "
                          "gRPC code)")
                      .Register(*registry_);
    fenced_refused_ = &BuildCounter()
                           .Name("tccd_cluster_fenced_writes_refused_total")
                           .Help(
                               "Cluster mode: this node's etcd writes "
                               "refused on a shard's fence (the shard had "
                               "another owner or none; each loses the shard "
                               "here): a group Txn's part for one shard, or "
                               "a retention Txn")
                           .Register(*registry_);
    fenced_refused_->Add({});
    for (const char* kind : {"takeover", "handover", "lost"}) {
      shard_changes_->Add({{"kind", kind}});
    }
    forwarded_->Add({{"outcome", "ok"}});
  });
}

void CoordinatorMetrics::SetClusterShards(int64_t owned_here, int64_t unowned) {
  ExportCluster();
  cluster_shards_->Add({{"state", "owned_here"}})
      .Set(static_cast<double>(owned_here));
  cluster_shards_->Add({{"state", "unowned"}})
      .Set(static_cast<double>(unowned));
}

void CoordinatorMetrics::ShardChange(const std::string& kind) {
  ExportCluster();
  OneLabel(shard_changes_cache_, *shard_changes_, "kind", kind).Increment();
}

void CoordinatorMetrics::Forwarded(const std::string& outcome) {
  ExportCluster();
  OneLabel(forwarded_cache_, *forwarded_, "outcome", outcome).Increment();
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address,
    std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", address, ": ", e.what()));
  }
  endpoint->exposer_->RegisterCollectable(registry);
  auto ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", address, ": not listening"));
  }
  endpoint->port_ = ports.front();
  return endpoint;
}

}  // namespace tcc::server
