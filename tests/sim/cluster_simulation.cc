#include "cluster_simulation.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/ownership.h"
#include "fenced_log.h"
#include "fenced_store.h"
#include "runtime/driver.h"
#include "sim_bank.h"

namespace tcc::sim {
namespace {

constexpr int64_t kWallStartMs = 1'700'000'000'000;
constexpr int64_t kLivenessBoundMs = 600'000;
constexpr int64_t kHealthyLatencyMs = 5;

// What a cluster seed drew (swarm testing), beside the banks' SimParams.
struct ClusterParams {
  int nodes = 3;
  uint32_t shards = 8;
  int64_t lease_ttl_ms = 2000;
  int64_t lease_margin_ms = 300;
  int64_t takeover_margin_ms = 1000;
  int64_t reread_ms = 500;
  int64_t store_latency_ms = 3;
  double node_crashes_per_s = 0;
  double node_crash_per_step = 0;
  int64_t max_node_down_ms = 0;
  double pauses_per_s = 0;  // per node; each longer than the lease
  double lose_keepalive = 0;
  double store_outages_per_s = 0;
  int64_t max_store_outage_ms = 0;
  double keep_when_down = 0;  // a Txn the leaderless store keeps, applies late
  double leader_changes_per_s = 0;
  double store_partitions_per_s = 0;  // per node
  int64_t max_store_partition_ms = 0;
  double lose_store_message = 0;
  double store_delay_past_timeout = 0;
  double lose_call_answer = 0;  // a campaign's or delete's answer
  int64_t max_stale_revisions = 0;
  int64_t hold_buffered_ms = 0;  // the log's (FencedLogOptions)

  std::string Describe() const {
    return absl::StrCat(
        "nodes=", nodes, " shards=", shards, " lease_ttl_ms=", lease_ttl_ms,
        " hold_buffered_ms=", hold_buffered_ms,
        " lease_margin_ms=", lease_margin_ms,
        " takeover_margin_ms=", takeover_margin_ms, " reread_ms=", reread_ms,
        " store_latency_ms=", store_latency_ms,
        " node_crashes_per_s=", node_crashes_per_s,
        " node_crash_per_step=", node_crash_per_step,
        " max_node_down_ms=", max_node_down_ms, " pauses_per_s=", pauses_per_s,
        " lose_keepalive=", lose_keepalive,
        " store_outages_per_s=", store_outages_per_s,
        " max_store_outage_ms=", max_store_outage_ms,
        " keep_when_down=", keep_when_down,
        " leader_changes_per_s=", leader_changes_per_s,
        " store_partitions_per_s=", store_partitions_per_s,
        " max_store_partition_ms=", max_store_partition_ms,
        " lose_store_message=", lose_store_message,
        " store_delay_past_timeout=", store_delay_past_timeout,
        " lose_call_answer=", lose_call_answer,
        " max_stale_revisions=", max_stale_revisions);
  }
};

// A node's clock: the simulation's one time (monotonic counts a pause too),
// the node's own timers. A paused or crashed node's timers do not fire.
class NodeClock final : public runtime::Clock {
 public:
  explicit NodeClock(const int64_t* now) : now_(now) {}
  int64_t WallMs() const override { return *now_ + kWallStartMs; }
  int64_t MonotonicMs() const override { return *now_; }
  runtime::TimerId Schedule(int64_t delay_ms,
                            std::function<void()> fn) override {
    const runtime::TimerId id = next_id_++;
    const int64_t due = *now_ + std::max<int64_t>(0, delay_ms);
    timers_.emplace(std::make_pair(due, id), std::move(fn));
    due_of_[id] = due;
    return id;
  }
  void Cancel(runtime::TimerId id) override {
    auto it = due_of_.find(id);
    if (it == due_of_.end()) return;
    timers_.erase({it->second, id});
    due_of_.erase(it);
  }
  std::optional<int64_t> NextDue() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first.first;
  }
  // Fires the first timer due by now (late ones at the true time).
  void FireOne() {
    auto it = timers_.begin();
    auto fn = std::move(it->second);
    due_of_.erase(it->first.second);
    timers_.erase(it);
    fn();
  }
  void Clear() {
    timers_.clear();
    due_of_.clear();
  }

 private:
  const int64_t* now_;
  runtime::TimerId next_id_ = 1;
  std::map<std::pair<int64_t, runtime::TimerId>, std::function<void()>> timers_;
  std::map<runtime::TimerId, int64_t> due_of_;
};

class SteppedExecutor final : public runtime::Executor {
 public:
  void Post(std::function<void()> task) override {
    tasks_.push_back(std::move(task));
  }
  bool Idle() const { return tasks_.empty(); }
  void RunOne() {
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    task();
  }
  void Clear() { tasks_.clear(); }

 private:
  std::deque<std::function<void()>> tasks_;
};

template <typename Done>
struct Pending {
  Done done;
  bool completed = false;
  bool delivered = false;
};

struct Transfer {
  core::SubmitSpec spec;
  bool answered = false;
  bool final = false;
  int target = 0;        // the node the client asks next
  uint64_t attempt = 0;  // answers to older attempts are dropped
  bool started = false;
};

class ClusterSimulation;

class Node;

// A node's view of the store, over the simulated network.
class NodeLink final : public StoreLink {
 public:
  NodeLink(ClusterSimulation& sim, int node) : sim_(sim), node_(node) {}
  void Send(std::shared_ptr<const StoreTxn> txn, int64_t timeout_ms,
            TxnDone done) override;
  absl::StatusOr<TxnResult> CallNow(const StoreTxn& txn) override;
  absl::StatusOr<std::vector<KeyValue>> ReadNow(const std::string& key,
                                                bool prefix,
                                                ReadMode mode) override;

 private:
  ClusterSimulation& sim_;
  int node_;
};

class BankNetwork final : public runtime::ParticipantTransport {
 public:
  BankNetwork(ClusterSimulation& sim, int node) : sim_(sim), node_(node) {}
  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

 private:
  ClusterSimulation& sim_;
  int node_;
};

class NodeObserver final : public runtime::DriverObserver {
 public:
  NodeObserver(ClusterSimulation& sim, int node) : sim_(sim), node_(node) {}
  void OnSignal(const std::string& gid, const std::string& branch_id,
                const core::SignalEffect& signal) override;
  void OnFatal(const absl::Status& status) override;

 private:
  ClusterSimulation& sim_;
  int node_;
};

// One tccd process slot: what survives a crash is only its id.
struct Node {
  Node(ClusterSimulation& sim, int index, const int64_t* now)
      : id(absl::StrCat("node-", index)),
        clock(now),
        link(sim, index),
        network(sim, index),
        observer(sim, index) {}
  std::string id;
  bool up = false;
  bool paused = false;
  bool store_partitioned = false;
  uint64_t incarnation = 1;
  int64_t lease = 0;
  int64_t trust_until_ms = 0;
  bool registered = false;
  NodeClock clock;
  SteppedExecutor exec;
  NodeLink link;
  BankNetwork network;
  NodeObserver observer;
  std::unique_ptr<FencedLog> log;
  std::unique_ptr<runtime::Driver> driver;
  std::vector<std::function<void()>> deferred;  // arrived while paused
  // The ownership rules' state (cluster/ownership.h), anew at each start.
  cluster::OwnershipState ownership{0};
};

class ClusterSimulation {
 public:
  ClusterSimulation(uint64_t seed, const SimOptions& options);
  SeedReport Run();

  // --- the store's network (NodeLink)
  void SendTxn(int n, std::shared_ptr<const StoreTxn> txn, int64_t timeout_ms,
               StoreLink::TxnDone done);
  absl::StatusOr<TxnResult> CallNow(int n, const StoreTxn& txn);
  absl::StatusOr<std::vector<KeyValue>> ReadNow(int n, const std::string& key,
                                                bool prefix, ReadMode mode);
  // --- the banks' network (BankNetwork)
  void SendCall(int n, const runtime::BranchCall& call, int64_t timeout_ms,
                runtime::BranchDone done);
  void SendQuery(int n, const runtime::QueryCall& query, int64_t timeout_ms,
                 runtime::QueryDone done);
  void Violation(std::string what) { violations_.push_back(std::move(what)); }
  void NoteDecision(const std::string& gid, wal::Decision d, const char* how);

 private:
  bool Draw(double p) {
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
  }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng_);
  }
  int64_t Exponential(double per_s) {
    return 1 + static_cast<int64_t>(
                   std::exponential_distribution<double>(per_s / 1000)(rng_));
  }
  int64_t Latency() {
    return Uniform(1, faults_on_ ? params_.max_latency_ms : kHealthyLatencyMs);
  }
  int64_t StoreLatency() { return Uniform(1, cp_.store_latency_ms); }
  bool StoreReachable(int n) const {
    return store_up_ && !nodes_[n]->store_partitioned;
  }

  void At(int64_t delay_ms, std::function<void()> fn) {
    world_.emplace(
        std::make_pair(now_ + std::max<int64_t>(0, delay_ms), world_seq_++),
        std::move(fn));
  }
  // An event for node n's process (incarnation inc): dropped if it died,
  // kept until it wakes if paused.
  void AtNode(int n, uint64_t inc, int64_t delay_ms, std::function<void()> fn) {
    At(delay_ms, [this, n, inc, fn = std::move(fn)]() mutable {
      Node& node = *nodes_[n];
      if (!node.up || node.incarnation != inc) return;
      if (node.paused) {
        node.deferred.push_back(std::move(fn));
        return;
      }
      fn();
    });
  }

  // --- nodes
  void StartNode(int n);
  bool Register(int n);
  void MakeDriver(int n);
  void CrashNode(int n);
  void Pause(int n, int64_t ms);
  void Wake(int n);
  void KeepAlive(int n);
  void OnKeepAlive(int n, int64_t sent_ms, int64_t ttl_ms);
  void LeaseGone(int n);
  void ManagerRound(int n);
  void ActOnMembership(int n, const std::set<std::string>& live,
                       const std::vector<std::optional<KeyValue>>& owners);
  absl::StatusOr<uint64_t> Adopt(int n, uint32_t k);

  // --- clients
  void PlanTransfers();
  void Submit(int t);
  void OnAnswer(int t, uint64_t attempt,
                absl::StatusOr<runtime::DriverReply> reply);

  // --- faults
  void ScheduleNodeCrash();
  void SchedulePause(int n);
  void ScheduleStoreOutage();
  void ScheduleLeaderChange();
  void ScheduleStorePartition(int n);
  void StoreBack();

  void CheckWriteAhead(int n, const runtime::BranchCall& call);
  void CheckStoreOracles();
  bool Step(int64_t limit_ms);
  std::optional<wal::TxnLog> Committed(const std::string& gid);
  bool AllDone();
  void EndChecks();

  template <typename... Args>
  void Trace(const Args&... args) {
    if (!options_.trace) return;
    std::fprintf(stderr, "%s\n",
                 absl::StrCat("[", now_, "] ", args...).c_str());
  }

  const uint64_t seed_;
  const SimOptions options_;
  const SimParams params_;
  ClusterParams cp_;
  std::mt19937_64 rng_;
  int64_t now_ = 0;

  FencedStore store_;
  bool store_up_ = true;
  std::vector<std::function<void()>> kept_while_down_;
  std::vector<std::unique_ptr<Node>> nodes_;
  uint64_t next_append_id_ = 1;
  // Appends answered "nothing written" (an error), by id: never in the store.
  std::set<uint64_t> refused_;
  size_t store_violations_seen_ = 0;
  // Per shard: the highest epoch any owner took (epochs only grow).
  std::vector<uint64_t> max_epoch_;
  std::vector<int> last_owner_;  // the node that took each shard last

  std::vector<std::unique_ptr<SimBank>> banks_;
  std::map<std::string, int> bank_index_;
  std::vector<bool> bank_down_;
  int64_t initial_total_ = 0;

  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> world_;
  uint64_t world_seq_ = 0;
  int64_t requests_in_flight_ = 0;
  bool faults_on_ = true;

  std::vector<Transfer> transfers_;
  std::map<std::string, wal::Decision> decisions_;
  std::vector<std::string> violations_;
  uint64_t faults_ = 0;
  uint64_t crashes_ = 0;
  uint64_t events_ = 0;
  std::map<std::string, uint64_t> counts_;
};

// ------------------------------------------------------------- adapters

void NodeLink::Send(std::shared_ptr<const StoreTxn> txn, int64_t timeout_ms,
                    TxnDone done) {
  sim_.SendTxn(node_, std::move(txn), timeout_ms, std::move(done));
}
absl::StatusOr<TxnResult> NodeLink::CallNow(const StoreTxn& txn) {
  return sim_.CallNow(node_, txn);
}
absl::StatusOr<std::vector<KeyValue>> NodeLink::ReadNow(const std::string& key,
                                                        bool prefix,
                                                        ReadMode mode) {
  return sim_.ReadNow(node_, key, prefix, mode);
}
void BankNetwork::Call(const runtime::BranchCall& call, int64_t timeout_ms,
                       runtime::BranchDone done) {
  sim_.SendCall(node_, call, timeout_ms, std::move(done));
}
void BankNetwork::Query(const runtime::QueryCall& query, int64_t timeout_ms,
                        runtime::QueryDone done) {
  sim_.SendQuery(node_, query, timeout_ms, std::move(done));
}
void NodeObserver::OnSignal(const std::string& gid, const std::string&,
                            const core::SignalEffect& signal) {
  if (signal.kind == core::SignalKind::kLostDecision) {
    sim_.Violation(absl::StrCat("lost-decision alert (invariant 11) on node-",
                                node_, " for ", gid, ": ", signal.text));
  }
}
void NodeObserver::OnFatal(const absl::Status& status) {
  sim_.Violation(
      absl::StrCat("node-", node_, " met a fatal error: ", status.ToString()));
}

// ------------------------------------------------------------- setup

ClusterParams DrawClusterParams(uint64_t seed, bool short_run) {
  std::mt19937_64 rng(seed * 0x9FB21C651E98DF25ULL + 0x77);
  auto uniform = [&](double a, double b) {
    return std::uniform_real_distribution<double>(a, b)(rng);
  };
  auto integer = [&](int64_t a, int64_t b) {
    return std::uniform_int_distribution<int64_t>(a, b)(rng);
  };
  auto on = [&] { return uniform(0, 1) < 0.5; };
  ClusterParams c;
  c.nodes = static_cast<int>(integer(2, 4));
  c.shards = static_cast<uint32_t>(integer(1, 8));
  c.lease_ttl_ms = integer(1000, 3000);
  c.lease_margin_ms = integer(50, c.lease_ttl_ms / 4);
  c.takeover_margin_ms = integer(200, 2000);
  c.reread_ms = integer(100, c.lease_ttl_ms / 2);
  c.store_latency_ms = on() ? integer(1, 5) : integer(5, 400);
  if (on()) {
    c.node_crashes_per_s = uniform(0.02, short_run ? 0.3 : 0.2);
    c.node_crash_per_step = uniform(0, 0.002);
    c.max_node_down_ms = integer(0, 4000);
  }
  if (on()) c.pauses_per_s = uniform(0.02, 0.2);
  if (on()) c.lose_keepalive = uniform(0, 0.5);
  if (on()) {
    c.store_outages_per_s = uniform(0.02, 0.2);
    c.max_store_outage_ms = integer(10, 4000);
    c.keep_when_down = uniform(0, 1);
  }
  if (on()) c.leader_changes_per_s = uniform(0.05, 0.5);
  if (on()) {
    c.store_partitions_per_s = uniform(0.02, 0.2);
    c.max_store_partition_ms = integer(10, 3 * c.lease_ttl_ms);
  }
  if (on()) {
    c.lose_store_message = uniform(0, 0.2);
    c.store_delay_past_timeout = uniform(0, 0.2);
    c.lose_call_answer = uniform(0, 0.3);
  }
  if (on()) c.max_stale_revisions = integer(1, 30);
  // Drawn last, from the seed alone, so the draws above are as before: a
  // quarter of the seeds hold nothing, the rest 50-2000 ms.
  c.hold_buffered_ms =
      seed % 4 == 0 ? 0 : 50 + static_cast<int64_t>((seed * 7919) % 1951);
  return c;
}

ClusterSimulation::ClusterSimulation(uint64_t seed, const SimOptions& options)
    : seed_(seed),
      options_(options),
      params_(DrawParams(seed, options)),
      cp_(DrawClusterParams(seed, options.short_run)),
      rng_(seed * 0x9E3779B97F4A7C15ULL + 11),
      store_(cp_.shards, seed) {
  store_.set_max_stale_revisions(cp_.max_stale_revisions);
  max_epoch_.assign(cp_.shards, 0);
  last_owner_.assign(cp_.shards, -1);
  for (int n = 0; n < cp_.nodes; ++n) {
    nodes_.push_back(std::make_unique<Node>(*this, n, &now_));
  }
  // The oracle of unknown outcomes: an append answered "nothing written"
  // must never be in the store.
  store_.on_head_written = [this](const KeyValue& kv) {
    Trace("store writes ", kv.key, " at ", kv.mod_revision, " epoch ",
          kv.value.writer_epoch, ": ",
          core::TxnStateName(kv.value.txn->summary.state), " append ",
          kv.value.append_id);
    if (!kv.value.appends) return;
    for (uint64_t id : *kv.value.appends) {
      if (refused_.count(id) != 0) {
        Violation(absl::StrCat("unknown outcome taken as refused: append ", id,
                               " of ", kv.value.txn->summary.gid,
                               " was answered as not written, and the store "
                               "holds it"));
        return;
      }
    }
  };
}

// ------------------------------------------------------------- the store

void ClusterSimulation::SendTxn(int n, std::shared_ptr<const StoreTxn> txn,
                                int64_t timeout_ms, StoreLink::TxnDone done) {
  Node& node = *nodes_[n];
  const uint64_t inc = node.incarnation;
  auto pending = std::make_shared<Pending<StoreLink::TxnDone>>();
  pending->done = std::move(done);
  node.clock.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("store Txn timed out"));
  });
  if (!StoreReachable(n) || (faults_on_ && Draw(cp_.lose_store_message))) {
    ++faults_;
    return;
  }
  int64_t there = StoreLatency();
  if (faults_on_ && Draw(cp_.store_delay_past_timeout)) {
    ++faults_;
    there = timeout_ms + Uniform(1, 2 * timeout_ms);  // applies late
  }
  auto apply = [this, n, inc, txn, pending] {
    if (pending->completed) ++counts_["txn_applied_after_timeout"];
    absl::StatusOr<TxnResult> r = store_.Apply(*txn, now_);
    CheckStoreOracles();
    if (!StoreReachable(n) || (faults_on_ && Draw(cp_.lose_store_message))) {
      ++faults_;
      return;
    }
    auto answer = std::make_shared<absl::StatusOr<TxnResult>>(std::move(r));
    AtNode(n, inc, StoreLatency(), [pending, answer] {
      if (pending->completed) return;
      pending->completed = true;
      pending->done(*answer);
    });
  };
  At(there, [this, apply] {
    if (!store_up_) {
      if (faults_on_ && Draw(cp_.keep_when_down)) {
        ++counts_["txn_kept_while_down"];
        kept_while_down_.push_back(apply);  // applied by the next leader
      }
      return;
    }
    apply();
  });
}

absl::StatusOr<TxnResult> ClusterSimulation::CallNow(int n,
                                                     const StoreTxn& txn) {
  if (!StoreReachable(n)) return absl::UnavailableError("store unreachable");
  if (faults_on_ && Draw(cp_.lose_call_answer)) {
    ++faults_;
    ++counts_["call_answer_lost"];
    if (Draw(0.5)) {
      (void)store_.Apply(txn, now_);  // applied; the answer is lost
      CheckStoreOracles();
    }
    return absl::DeadlineExceededError("store call: answer lost");
  }
  absl::StatusOr<TxnResult> r = store_.Apply(txn, now_);
  CheckStoreOracles();
  return r;
}

absl::StatusOr<std::vector<KeyValue>> ClusterSimulation::ReadNow(
    int n, const std::string& key, bool prefix, ReadMode mode) {
  if (!StoreReachable(n)) return absl::UnavailableError("store unreachable");
  store_.ExpireLeases(now_);
  return store_.Range(key, prefix, mode);
}

void ClusterSimulation::CheckStoreOracles() {
  const auto& v = store_.violations();
  for (; store_violations_seen_ < v.size(); ++store_violations_seen_) {
    Violation(v[store_violations_seen_]);
  }
}

// ------------------------------------------------------------- nodes

void ClusterSimulation::StartNode(int n) {
  Node& node = *nodes_[n];
  if (node.up) return;
  node.up = true;
  node.paused = false;
  node.registered = false;
  node.trust_until_ms = 0;
  node.ownership = cluster::OwnershipState(cp_.shards);
  if (!options_.cluster_breakers.restart_adopts_old_owner_key) {
    node.lease = 0;
  }
  Trace(node.id, " starts (incarnation ", node.incarnation, ")");
  if (!Register(n)) return;
}

// Grants a lease and registers nodes/<id> under it, absent before; waits
// out an old registration (retried). True once registered.
bool ClusterSimulation::Register(int n) {
  Node& node = *nodes_[n];
  const uint64_t inc = node.incarnation;
  auto again = [this, n, inc] {
    AtNode(n, inc, 200, [this, n] {
      if (!nodes_[n]->registered) Register(n);
    });
  };
  if (!StoreReachable(n)) {
    again();
    return false;
  }
  store_.ExpireLeases(now_);
  const bool reuse = options_.cluster_breakers.restart_adopts_old_owner_key &&
                     node.lease != 0 && store_.LeaseAlive(node.lease, now_);
  if (!reuse) {
    std::optional<KeyValue> old = store_.Get(NodeKey(node.id));
    if (old.has_value()) {  // the old registration has not expired yet
      again();
      return false;
    }
    const int64_t sent = now_;
    node.lease = store_.Grant(cp_.lease_ttl_ms, now_);
    StoreTxn t;
    t.writer = node.id;
    t.compares = {{NodeKey(node.id), StoreCompare::Target::kCreateRevision, 0}};
    StoreOp put;
    put.kind = StoreOp::Kind::kPut;
    put.key = NodeKey(node.id);
    put.value.text = node.id;
    put.lease = node.lease;
    t.success = {put};
    (void)store_.Apply(t, now_);
    node.trust_until_ms = sent + cp_.lease_ttl_ms - cp_.lease_margin_ms;
  } else {
    const int64_t sent = now_;
    if (store_.KeepAlive(node.lease, now_) > 0) {
      node.trust_until_ms = sent + cp_.lease_ttl_ms - cp_.lease_margin_ms;
    }
  }
  node.registered = true;
  Trace(node.id, " registered with lease ", node.lease);
  if (node.log) {
    node.log->LeaseLost(node.lease);  // a new lease after the old one went
  } else {
    MakeDriver(n);
    KeepAlive(n);
    ManagerRound(n);
  }
  return true;
}

void ClusterSimulation::MakeDriver(int n) {
  Node& node = *nodes_[n];
  FencedLogOptions lo;
  lo.link = &node.link;
  lo.clock = &node.clock;
  lo.node_id = node.id;
  lo.lease_id = node.lease;
  lo.shards = cp_.shards;
  lo.txn_timeout_ms = std::max<int64_t>(200, 4 * cp_.store_latency_ms);
  lo.hold_buffered_ms = cp_.hold_buffered_ms;
  lo.next_append_id = [this] { return next_append_id_++; };
  // log.h: an append answered with an error wrote nothing, ever.
  lo.on_answered = [this](const std::string& gid, uint64_t id,
                          const absl::Status& status) {
    Trace("append ", id, " of ", gid, ": ", status.ToString());
    if (status.ok()) return;
    refused_.insert(id);
    std::optional<KeyValue> kv =
        store_.Get(HeadKey(wal::ShardOfGid(gid, cp_.shards), gid));
    if (kv && kv->value.appends &&
        std::count(kv->value.appends->begin(), kv->value.appends->end(), id)) {
      Violation(absl::StrCat("unknown outcome taken as refused: append ", id,
                             " of ", gid, " was answered ", status.ToString(),
                             " but the store holds it"));
    }
  };
  lo.breakers.write_without_fence =
      options_.cluster_breakers.write_without_fence;
  lo.breakers.campaign_without_cas =
      options_.cluster_breakers.takeover_without_cas;
  lo.breakers.unknown_outcome_as_refused =
      options_.cluster_breakers.unknown_txn_as_refused;
  lo.breakers.head_without_cas = options_.cluster_breakers.head_without_cas;
  lo.breakers.adopt_existing_own_key =
      options_.cluster_breakers.restart_adopts_old_owner_key;
  if (node.log) {
    counts_["blind_create"] += node.log->blind_reads();
    counts_["blind_create_refused"] += node.log->blind_refused();
    counts_["append_held"] += node.log->appends_held();
  }
  node.log = std::make_unique<FencedLog>(std::move(lo));
  runtime::DriverOptions d;
  d.core.breakers = options_.breakers;
  d.rng_seed = seed_ * 131 + static_cast<uint64_t>(n) * 7 + node.incarnation;
  d.adopt_shards_at_start = false;
  d.may_call = [this, n](const std::string& gid) {
    const bool ok = now_ < nodes_[n]->trust_until_ms;
    if (!ok) {
      ++counts_["call_withheld_untrusted"];
      Trace(nodes_[n]->id, " may not call for ", gid, " (trust ended at ",
            nodes_[n]->trust_until_ms, ")");
    }
    return ok;
  };
  node.driver = std::make_unique<runtime::Driver>(
      d, std::vector<runtime::Executor*>{&node.exec, &node.exec}, node.clock,
      node.network, *node.log, &node.observer);
  // A lost shard: its owners go at once.
  node.log->SetShardLostHandler([this, n](uint32_t k, const absl::Status& why) {
    Trace(nodes_[n]->id, " lost shard ", k, ": ", why.ToString());
    ++counts_["shard_lost"];
    if (nodes_[n]->driver) nodes_[n]->driver->DropLogShard(k, why);
  });
  if (absl::Status s = node.driver->Start(); !s.ok()) {
    Violation(absl::StrCat(node.id, " did not start: ", s.ToString()));
  }
}

void ClusterSimulation::CrashNode(int n) {
  Node& node = *nodes_[n];
  if (!node.up) return;
  Trace(node.id, " crashes");
  ++counts_["node_crash"];
  ++crashes_;
  ++faults_;
  node.up = false;
  node.paused = false;
  ++node.incarnation;
  node.driver.reset();
  node.log.reset();
  node.exec.Clear();
  node.clock.Clear();
  node.deferred.clear();
  node.registered = false;
  At(Uniform(0, cp_.max_node_down_ms), [this, n] { StartNode(n); });
}

void ClusterSimulation::Pause(int n, int64_t ms) {
  Node& node = *nodes_[n];
  if (!node.up || node.paused) return;
  Trace(node.id, " pauses for ", ms, " ms");
  ++faults_;
  ++counts_["pause_past_lease"];
  node.paused = true;
  const uint64_t inc = node.incarnation;
  At(ms, [this, n, inc] {
    if (nodes_[n]->incarnation == inc) Wake(n);
  });
}

void ClusterSimulation::Wake(int n) {
  Node& node = *nodes_[n];
  if (!node.paused) return;
  Trace(node.id, " wakes");
  node.paused = false;
  std::vector<std::function<void()>> deferred = std::move(node.deferred);
  node.deferred.clear();
  for (auto& fn : deferred) {
    if (!node.up || node.paused) break;
    fn();
  }
}

void ClusterSimulation::KeepAlive(int n) {
  Node& node = *nodes_[n];
  const uint64_t inc = node.incarnation;
  node.clock.Schedule(cp_.lease_ttl_ms / 3, [this, n] { KeepAlive(n); });
  if (!node.registered) return;
  const int64_t lease = node.lease;
  const int64_t sent = now_;
  if (!StoreReachable(n) || (faults_on_ && Draw(cp_.lose_keepalive))) {
    ++faults_;
    ++counts_["keepalive_lost"];
    return;
  }
  At(StoreLatency(), [this, n, inc, lease, sent] {
    if (!store_up_) return;
    const int64_t ttl = store_.KeepAlive(lease, now_);
    CheckStoreOracles();
    if (!StoreReachable(n) || (faults_on_ && Draw(cp_.lose_keepalive))) {
      ++faults_;
      return;
    }
    int64_t back = StoreLatency();
    if (faults_on_ && Draw(cp_.store_delay_past_timeout)) {
      ++faults_;
      back += Uniform(1, cp_.lease_ttl_ms);  // a slow answer
    }
    AtNode(n, inc, back, [this, n, lease, sent, ttl] {
      if (nodes_[n]->lease == lease) OnKeepAlive(n, sent, ttl);
    });
  });
}

void ClusterSimulation::OnKeepAlive(int n, int64_t sent_ms, int64_t ttl_ms) {
  Node& node = *nodes_[n];
  if (ttl_ms <= 0) {
    LeaseGone(n);
    return;
  }
  const int64_t from =
      options_.cluster_breakers.lease_trust_from_receipt ? now_ : sent_ms;
  node.trust_until_ms =
      std::max(node.trust_until_ms, from + ttl_ms - cp_.lease_margin_ms);
}

// The lease is gone: every shard dropped; owning one again is a takeover,
// under a new lease.
void ClusterSimulation::LeaseGone(int n) {
  Node& node = *nodes_[n];
  Trace(node.id, " lost its lease ", node.lease);
  ++counts_["lease_lost"];
  node.trust_until_ms = 0;
  node.registered = false;
  for (uint32_t k = 0; k < cp_.shards; ++k) {
    if (node.driver && node.driver->OwnsShard(k)) {
      node.driver->DropLogShard(k, absl::UnavailableError("lease gone"));
    }
  }
  node.lease = 0;
  if (node.log) node.log->LeaseLost(0);
  Register(n);
}

// The shard manager: reads the membership (unpinned reads, maybe stale) and
// applies shard_manager.cc's rules to it.
void ClusterSimulation::ManagerRound(int n) {
  Node& node = *nodes_[n];
  node.clock.Schedule(cp_.reread_ms, [this, n] { ManagerRound(n); });
  if (!node.registered || !node.driver) return;
  auto members = ReadNow(n, "nodes/", true, ReadMode{});
  auto owners = ReadNow(n, "shards/", true, ReadMode{});
  if (!members.ok() || !owners.ok()) return;
  std::set<std::string> live;
  for (const KeyValue& kv : *members) live.insert(kv.value.text);
  std::vector<std::optional<KeyValue>> by_shard(cp_.shards);
  for (uint32_t k = 0; k < cp_.shards; ++k) {
    for (const KeyValue& kv : *owners) {
      if (kv.key == OwnerKey(k)) by_shard[k] = kv;
    }
  }
  ActOnMembership(n, live, by_shard);
}

// The ownership rules (coordinator/src/cluster/ownership.h, the same code a
// node's ShardManager runs) over the simulated membership (no draining in
// the simulation).
void ClusterSimulation::ActOnMembership(
    int n, const std::set<std::string>& live,
    const std::vector<std::optional<KeyValue>>& owners) {
  Node& node = *nodes_[n];
  wal::Membership m;
  for (const std::string& id : live) {
    m.nodes.push_back(wal::MemberInfo{id, "", 0, false});
  }
  m.owners.resize(cp_.shards);
  for (uint32_t k = 0; k < cp_.shards; ++k) {
    if (!owners[k].has_value()) continue;
    m.owners[k] = wal::ShardOwnerInfo{
        owners[k]->value.text, "",
        static_cast<uint64_t>(owners[k]->create_revision), owners[k]->lease};
  }
  cluster::ShardActions actions;
  actions.lease_id = [&node] { return node.lease; };
  actions.trusted = [this, &node] { return now_ < node.trust_until_ms; };
  actions.drives = [&node](uint32_t k) { return node.driver->OwnsShard(k); };
  actions.adopt = [this, n](uint32_t k) { return Adopt(n, k); };
  actions.drop = [&node](uint32_t k, const absl::Status& why) {
    node.driver->DropLogShard(k, why);
  };
  actions.release = [this, &node](uint32_t k, uint64_t epoch) {
    Trace(node.id, " hands shard ", k, " over");
    return node.log->ReleaseShard(k, epoch);
  };
  actions.halted = [&node] { return !node.up || node.paused || !node.driver; };
  cluster::ShardObserver quiet;
  cluster::ActOnMembership(
      m, cluster::OwnershipRound{node.id, now_, cp_.takeover_margin_ms},
      actions, node.ownership, quiet);
}

absl::StatusOr<uint64_t> ClusterSimulation::Adopt(int n, uint32_t k) {
  Node& node = *nodes_[n];
  absl::StatusOr<uint64_t> epoch = node.driver->AdoptShard(k);
  Trace(
      node.id, " adopts shard ", k, ": ",
      epoch.ok() ? absl::StrCat("epoch ", *epoch) : epoch.status().ToString());
  if (!epoch.ok()) return epoch;
  ++counts_[max_epoch_[k] == 0    ? "shard_taken_first"
            : last_owner_[k] == n ? "shard_taken_again"
                                  : "shard_taken_over"];
  last_owner_[k] = n;
  // Epochs only grow (DESIGN.md section 14): a new owner, or a restarted
  // one, drives with an epoch higher than every earlier owner's.
  if (*epoch <= max_epoch_[k]) {
    Violation(absl::StrCat("epoch: ", node.id, " took shard ", k, " at epoch ",
                           *epoch, ", not above the ", max_epoch_[k],
                           " an owner took it at before"));
  }
  max_epoch_[k] = std::max(max_epoch_[k], *epoch);
  return epoch;
}

// ------------------------------------------------------------- banks

void ClusterSimulation::CheckWriteAhead(int n,
                                        const runtime::BranchCall& call) {
  std::optional<wal::TxnLog> stored = Committed(call.gid);
  bool ok = false;
  if (stored) {
    for (const wal::Record& r : stored->records) {
      if (call.phase == wal::Phase::kTry) {
        if (const auto* reg = std::get_if<wal::Registered>(&r)) {
          for (const wal::BranchSpec& b : reg->branches) {
            ok = ok || b.branch_id == call.spec->branch_id;
          }
        } else if (const auto* add = std::get_if<wal::BranchAdded>(&r)) {
          ok = ok || add->branch.branch_id == call.spec->branch_id;
        }
      } else if (const auto* d = std::get_if<wal::Decided>(&r)) {
        ok = ok || (d->decision == (call.phase == wal::Phase::kConfirm
                                        ? wal::Decision::kConfirm
                                        : wal::Decision::kCancel));
      }
    }
  }
  if (!ok) {
    Violation(absl::StrCat("write-ahead: ", nodes_[n]->id, " sent ",
                           core::PhaseName(call.phase), " ", call.gid, "/",
                           call.spec->branch_id,
                           " before the store committed what implies it"));
  }
}

void ClusterSimulation::SendCall(int n, const runtime::BranchCall& call,
                                 int64_t timeout_ms, runtime::BranchDone done) {
  Node& node = *nodes_[n];
  CheckWriteAhead(n, call);
  if (!store_.LeaseAlive(node.lease, now_) && store_up_) {
    Violation(absl::StrCat(
        "lease trust: ", node.id, " sent ", core::PhaseName(call.phase), " ",
        call.gid, "/", call.spec->branch_id, " at ", now_,
        " ms while the store had expired its lease ", node.lease));
  }
  Trace(node.id, " sends ", core::PhaseName(call.phase), " ", call.gid, "/",
        call.spec->branch_id, " epoch=", call.owner_epoch);
  if (call.phase != wal::Phase::kTry) {
    NoteDecision(call.gid,
                 call.phase == wal::Phase::kConfirm ? wal::Decision::kConfirm
                                                    : wal::Decision::kCancel,
                 "acted on");
  }
  auto pending = std::make_shared<Pending<runtime::BranchDone>>();
  pending->done = std::move(done);
  node.clock.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("call timed out"));
  });
  auto it = bank_index_.find(call.spec->participant);
  if (it == bank_index_.end()) {
    Violation("call to an unknown participant " + call.spec->participant);
    return;
  }
  const int bank = it->second;
  auto copy = std::make_shared<std::pair<runtime::BranchCall, wal::BranchSpec>>(
      call, *call.spec);
  const uint64_t inc = node.incarnation;
  int copies = 1;
  if (faults_on_ && Draw(params_.duplicate_request)) {
    ++faults_;
    copies = 2;
  }
  for (int i = 0; i < copies; ++i) {
    if (faults_on_ && Draw(params_.lose_request)) {
      ++faults_;
      continue;
    }
    int64_t there = Latency();
    if (faults_on_ && Draw(params_.delay_past_timeout)) {
      ++faults_;
      there = timeout_ms + Uniform(1, 3 * timeout_ms);
    }
    ++requests_in_flight_;
    At(there, [this, n, inc, bank, copy, pending] {
      --requests_in_flight_;
      if (bank_down_[bank]) return;
      banks_[bank]->clock().Set(kWallStartMs + now_);
      CrashPoint crash = CrashPoint::kNone;
      if (faults_on_ && Draw(params_.bank_crash_per_call)) {
        crash = Draw(0.5) ? CrashPoint::kInHandler : CrashPoint::kAfterCommit;
      }
      copy->first.spec = &copy->second;
      SimBank::CallResult r =
          banks_[bank]->Call(copy->first, crash, violations_);
      if (r.crashed) {
        ++faults_;
        ++crashes_;
        bank_down_[bank] = true;
        At(Uniform(1, std::max<int64_t>(1, params_.max_bank_down_ms)),
           [this, bank] { bank_down_[bank] = false; });
        return;
      }
      if (faults_on_ && Draw(params_.lose_reply)) {
        ++faults_;
        return;
      }
      auto answer =
          std::make_shared<absl::StatusOr<runtime::BranchAnswer>>(r.answer);
      auto reply = [pending, answer] {
        if (pending->completed) {
          if (pending->delivered) pending->done(*answer);  // a duplicate
          return;
        }
        pending->completed = true;
        pending->delivered = true;
        pending->done(*answer);
      };
      AtNode(n, inc, Latency(), reply);
      if (faults_on_ && Draw(params_.duplicate_reply)) {
        ++faults_;
        AtNode(n, inc, Latency() + Latency(), reply);
      }
    });
  }
}

void ClusterSimulation::SendQuery(int n, const runtime::QueryCall& query,
                                  int64_t timeout_ms, runtime::QueryDone done) {
  Node& node = *nodes_[n];
  // A query is a participant call too: none past the lease (DESIGN 14).
  if (!store_.LeaseAlive(node.lease, now_) && store_up_) {
    Violation(absl::StrCat("lease trust: ", node.id, " sent a query for ",
                           query.gid, "/", query.branch_id, " at ", now_,
                           " ms while the store had expired its lease ",
                           node.lease));
  }
  auto pending = std::make_shared<Pending<runtime::QueryDone>>();
  pending->done = std::move(done);
  node.clock.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("query timed out"));
  });
  auto it = bank_index_.find(query.participant);
  if (it == bank_index_.end()) {
    Violation("query to an unknown participant " + query.participant);
    return;
  }
  const int bank = it->second;
  if (faults_on_ && Draw(params_.lose_request)) {
    ++faults_;
    return;
  }
  const uint64_t inc = node.incarnation;
  ++requests_in_flight_;
  At(Latency(), [this, n, inc, bank, query, pending] {
    --requests_in_flight_;
    if (bank_down_[bank]) return;
    banks_[bank]->clock().Set(kWallStartMs + now_);
    auto answer = std::make_shared<absl::StatusOr<runtime::QueryAnswer>>(
        banks_[bank]->Query(query));
    if (faults_on_ && Draw(params_.lose_reply)) {
      ++faults_;
      return;
    }
    AtNode(n, inc, Latency(), [pending, answer] {
      if (pending->completed) return;
      pending->completed = true;
      pending->done(*answer);
    });
  });
}

void ClusterSimulation::NoteDecision(const std::string& gid, wal::Decision d,
                                     const char* how) {
  auto [it, fresh] = decisions_.emplace(gid, d);
  if (!fresh && it->second != d) {
    Violation(absl::StrCat("decision changed: ", gid, " was ",
                           wal::DecisionName(it->second), ", then ", how, " ",
                           wal::DecisionName(d)));
  }
}

// ------------------------------------------------------------- clients

void ClusterSimulation::PlanTransfers() {
  for (int t = 0; t < params_.transactions; ++t) {
    Transfer p;
    core::SubmitSpec& s = p.spec;
    s.gid = absl::StrCat("c", seed_, "-t", t);
    s.revision = 1;
    s.try_timeout_ms =
        Uniform(params_.min_try_timeout_ms, params_.max_try_timeout_ms);
    s.wait_for = static_cast<core::WaitFor>(1 + Uniform(0, 2));
    const int branches = static_cast<int>(Uniform(2, 4));
    const int debits = branches >= 3 && Draw(0.5) ? 2 : 1;
    int64_t total = 0;
    for (int b = 0; b < branches; ++b) {
      wal::BranchSpec br;
      br.branch_id = absl::StrCat("b", b);
      br.participant = absl::StrCat("bank", Uniform(0, params_.banks - 1));
      int64_t amount = 0;
      if (b < debits) {
        br.action = "debit";
        amount = Uniform(3, params_.max_amount);
        total += amount;
      } else {
        br.action = "credit";
        const int left = branches - 1 - b;
        amount = left == 0 ? total : Uniform(1, total - left);
        total -= amount;
      }
      br.payload =
          absl::StrCat(Uniform(0, params_.accounts_per_bank - 1), ":", amount);
      s.branches.push_back(std::move(br));
    }
    p.target = static_cast<int>(Uniform(0, cp_.nodes - 1));
    transfers_.push_back(std::move(p));
  }
}

// A client's Submit to one node; another node, later, on UNAVAILABLE or
// silence (the same gid and created_at: a duplicate gets the first answer).
void ClusterSimulation::Submit(int t) {
  Transfer& p = transfers_[t];
  if (p.answered) return;
  const uint64_t attempt = ++p.attempt;
  const int n = p.target;
  p.target = (p.target + 1) % cp_.nodes;
  At(10'000, [this, t, attempt] {  // the client's own timeout
    if (!transfers_[t].answered && transfers_[t].attempt == attempt) Submit(t);
  });
  Node& node = *nodes_[n];
  if (!node.up) {
    At(Uniform(50, 500), [this, t, attempt] {
      if (transfers_[t].attempt == attempt) Submit(t);
    });
    return;
  }
  AtNode(n, node.incarnation, Latency(), [this, t, n, attempt] {
    Node& node = *nodes_[n];
    if (!node.driver) return;
    const uint64_t inc = node.incarnation;
    node.driver->Submit(
        transfers_[t].spec,
        [this, t, n, inc, attempt](absl::StatusOr<runtime::DriverReply> r) {
          auto reply = std::make_shared<absl::StatusOr<runtime::DriverReply>>(
              std::move(r));
          (void)n;
          (void)inc;
          At(Latency(), [this, t, attempt, reply] {
            OnAnswer(t, attempt, std::move(*reply));
          });
        });
  });
}

void ClusterSimulation::OnAnswer(int t, uint64_t attempt,
                                 absl::StatusOr<runtime::DriverReply> reply) {
  Transfer& p = transfers_[t];
  if (p.answered || p.attempt != attempt) return;
  if (reply.ok()) {
    p.answered = true;
    if (reply->transaction.decision != wal::Decision::kNone) {
      NoteDecision(p.spec.gid, reply->transaction.decision, "told");
    }
    return;
  }
  const absl::StatusCode code = reply.status().code();
  if (code == absl::StatusCode::kAlreadyExists ||
      code == absl::StatusCode::kInvalidArgument ||
      code == absl::StatusCode::kFailedPrecondition) {
    Violation(absl::StrCat("submit of ", p.spec.gid,
                           " refused: ", reply.status().ToString()));
    return;
  }
  At(Uniform(50, 1000), [this, t, attempt] {
    if (transfers_[t].attempt == attempt) Submit(t);
  });
}

// ------------------------------------------------------------- faults

void ClusterSimulation::ScheduleNodeCrash() {
  At(Exponential(cp_.node_crashes_per_s), [this] {
    if (!faults_on_) return;
    CrashNode(static_cast<int>(Uniform(0, cp_.nodes - 1)));
    ScheduleNodeCrash();
  });
}

void ClusterSimulation::SchedulePause(int n) {
  At(Exponential(cp_.pauses_per_s), [this, n] {
    if (!faults_on_) return;
    Pause(n, Uniform(cp_.lease_ttl_ms + 1, 3 * cp_.lease_ttl_ms));
    SchedulePause(n);
  });
}

void ClusterSimulation::StoreBack() {
  if (store_up_) return;
  Trace("the store has a leader again");
  store_up_ = true;
  store_.RenewAllLeases(now_);  // a new leader renews every lease
  std::vector<std::function<void()>> kept = std::move(kept_while_down_);
  kept_while_down_.clear();
  for (auto& apply : kept) apply();  // proposed before, applied now
}

void ClusterSimulation::ScheduleStoreOutage() {
  At(Exponential(cp_.store_outages_per_s), [this] {
    if (!faults_on_) return;
    ++faults_;
    Trace("the store loses its leader");
    ++counts_["store_outage"];
    store_.ExpireLeases(now_);
    store_up_ = false;
    At(Uniform(1, cp_.max_store_outage_ms), [this] {
      StoreBack();
      ScheduleStoreOutage();
    });
  });
}

void ClusterSimulation::ScheduleLeaderChange() {
  At(Exponential(cp_.leader_changes_per_s), [this] {
    if (!faults_on_) return;
    ++faults_;
    ++counts_["store_leader_change"];
    if (store_up_) {
      store_.ExpireLeases(now_);
      store_.RenewAllLeases(now_);
    }
    ScheduleLeaderChange();
  });
}

void ClusterSimulation::ScheduleStorePartition(int n) {
  At(Exponential(cp_.store_partitions_per_s), [this, n] {
    if (!faults_on_) return;
    ++faults_;
    Trace(nodes_[n]->id, " is cut from the store");
    ++counts_["store_partition"];
    nodes_[n]->store_partitioned = true;
    At(Uniform(1, cp_.max_store_partition_ms), [this, n] {
      nodes_[n]->store_partitioned = false;
      ScheduleStorePartition(n);
    });
  });
}

// ------------------------------------------------------------- the loop

bool ClusterSimulation::Step(int64_t limit_ms) {
  ++events_;
  for (int n = 0; n < cp_.nodes; ++n) {
    Node& node = *nodes_[n];
    if (!node.up || node.paused || node.exec.Idle()) continue;
    if (faults_on_ && Draw(cp_.node_crash_per_step)) {
      CrashNode(n);
      return true;
    }
    node.exec.RunOne();
    return true;
  }
  int timer_node = -1;
  std::optional<int64_t> next;
  for (int n = 0; n < cp_.nodes; ++n) {
    Node& node = *nodes_[n];
    if (!node.up || node.paused) continue;
    std::optional<int64_t> due = node.clock.NextDue();
    if (due && (!next || *due < *next)) {
      next = due;
      timer_node = n;
    }
  }
  if (!world_.empty() && (!next || world_.begin()->first.first < *next)) {
    next = world_.begin()->first.first;
    timer_node = -1;
  }
  if (!next || *next > limit_ms) return false;
  now_ = std::max(now_, *next);
  if (timer_node >= 0) {
    nodes_[timer_node]->clock.FireOne();
    return true;
  }
  auto node = world_.extract(world_.begin());
  node.mapped()();
  return true;
}

std::optional<wal::TxnLog> ClusterSimulation::Committed(
    const std::string& gid) {
  std::optional<KeyValue> kv =
      store_.Get(HeadKey(wal::ShardOfGid(gid, cp_.shards), gid));
  if (!kv || !kv->value.txn) return std::nullopt;
  return *kv->value.txn;
}

bool ClusterSimulation::AllDone() {
  if (requests_in_flight_ > 0) return false;
  for (Transfer& p : transfers_) {
    if (!p.answered) return false;
  }
  for (Transfer& p : transfers_) {
    if (p.final) continue;
    std::optional<wal::TxnLog> stored = Committed(p.spec.gid);
    if (!stored || !wal::IsFinal(stored->summary.state)) return false;
    p.final = true;
  }
  return true;
}

SeedReport ClusterSimulation::Run() {
  SeedReport report;
  report.seed = seed_;
  report.params = params_;
  report.cluster_params = cp_.Describe();
  barrier::BarrierOptions bopts;
  bopts.clock_skew_ms = params_.clock_skew_ms;
  for (int b = 0; b < params_.banks; ++b) {
    const std::string name = absl::StrCat("bank", b);
    banks_.push_back(std::make_unique<SimBank>(name, params_.accounts_per_bank,
                                               params_.initial_balance, bopts));
    bank_index_[name] = b;
    bank_down_.push_back(false);
    initial_total_ += banks_.back()->TotalMoney();
  }
  PlanTransfers();
  for (int n = 0; n < cp_.nodes; ++n) StartNode(n);
  for (size_t t = 0; t < transfers_.size(); ++t) {
    At(Uniform(500, params_.faulty_ms * 6 / 10), [this, t] {
      transfers_[t].spec.created_at_ms = now_ + kWallStartMs;
      transfers_[t].started = true;
      Submit(static_cast<int>(t));
    });
  }
  if (cp_.node_crashes_per_s > 0) ScheduleNodeCrash();
  if (cp_.store_outages_per_s > 0) ScheduleStoreOutage();
  if (cp_.leader_changes_per_s > 0) ScheduleLeaderChange();
  for (int n = 0; n < cp_.nodes; ++n) {
    if (cp_.pauses_per_s > 0) SchedulePause(n);
    if (cp_.store_partitions_per_s > 0) ScheduleStorePartition(n);
  }
  auto finish = [&] {
    report.transactions = static_cast<int>(transfers_.size());
    report.faults = faults_;
    report.crashes = crashes_;
    report.events = events_;
    report.violations = violations_;
    counts_["stale_read"] = store_.stale_reads();
    for (const auto& node : nodes_) {
      if (node->log) {
        counts_["blind_create"] += node->log->blind_reads();
        counts_["blind_create_refused"] += node->log->blind_refused();
        counts_["append_held"] += node->log->appends_held();
      }
    }
    report.cluster_counts = counts_;
    return report;
  };
  while (now_ < params_.faulty_ms && violations_.empty()) {
    if (!Step(params_.faulty_ms)) break;
  }
  if (!violations_.empty()) return finish();

  // The liveness phase: faults off, every node up and awake, the store up.
  faults_on_ = false;
  StoreBack();
  for (int n = 0; n < cp_.nodes; ++n) {
    nodes_[n]->store_partitioned = false;
    if (nodes_[n]->paused) Wake(n);
    StartNode(n);
  }
  for (size_t b = 0; b < bank_down_.size(); ++b) bank_down_[b] = false;
  store_.set_max_stale_revisions(0);
  const int64_t bound = now_ + kLivenessBoundMs;
  while (violations_.empty() && !AllDone()) {
    if (!Step(bound)) break;
  }
  if (!violations_.empty()) return finish();
  if (!AllDone()) {
    for (Transfer& p : transfers_) {
      std::optional<wal::TxnLog> stored = Committed(p.spec.gid);
      if (p.answered && stored && wal::IsFinal(stored->summary.state)) {
        continue;
      }
      Violation(absl::StrCat(
          "takeover/termination (invariant 10): ", p.spec.gid, " not final ",
          kLivenessBoundMs,
          " ms after the faults stopped (answered=", p.answered, ", state=",
          stored ? core::TxnStateName(stored->summary.state) : "absent", ")"));
      break;
    }
    if (violations_.empty()) {
      Violation(absl::StrCat("termination: ", requests_in_flight_,
                             " bank requests still in flight at the bound"));
    }
    return finish();
  }
  EndChecks();
  for (const Transfer& p : transfers_) {
    std::optional<wal::TxnLog> stored = Committed(p.spec.gid);
    if (stored && stored->summary.state == core::TxnState::kConfirmed) {
      ++report.confirmed;
    } else {
      ++report.cancelled;
    }
  }
  return finish();
}

void ClusterSimulation::EndChecks() {
  for (const Transfer& p : transfers_) {
    const std::string& gid = p.spec.gid;
    std::optional<wal::TxnLog> stored = Committed(gid);
    if (!stored) {
      Violation(absl::StrCat(gid, ": not in the store"));
      continue;
    }
    const bool confirmed = stored->summary.state == core::TxnState::kConfirmed;
    auto d = decisions_.find(gid);
    if (d != decisions_.end() && d->second != stored->summary.decision) {
      Violation(absl::StrCat("decision changed: ", gid, " was ",
                             wal::DecisionName(d->second), ", ended ",
                             wal::DecisionName(stored->summary.decision)));
    }
    std::vector<wal::BranchSpec> registered;
    for (const wal::Record& r : stored->records) {
      if (const auto* reg = std::get_if<wal::Registered>(&r)) {
        registered.insert(registered.end(), reg->branches.begin(),
                          reg->branches.end());
      }
    }
    if (registered.size() != p.spec.branches.size()) {
      Violation(absl::StrCat(gid, ": ", registered.size(), " of ",
                             p.spec.branches.size(), " branches registered"));
    }
    CheckBranchesAtEnd(gid, p.spec.created_at_ms, stored->summary.state,
                       confirmed, registered, banks_, bank_index_,
                       [this](std::string v) { Violation(std::move(v)); });
  }
  CheckBanksAtEnd(banks_, initial_total_,
                  [this](std::string v) { Violation(std::move(v)); });
}

}  // namespace

SeedReport RunClusterSeed(uint64_t seed, const SimOptions& options) {
  ClusterSimulation sim(seed, options);
  return sim.Run();
}

}  // namespace tcc::sim
