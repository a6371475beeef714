#include "server/driver_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tcc::server {

// One waiting caller: answered once, by the driver or by Shutdown.
struct DriverBackend::Pending {
  std::mutex mu;
  rpc::AnswerDone done;  // empty once answered
};

// One Watch: its callback, and the last state it was sent (to skip no-op
// refreshes).
struct DriverBackend::Watcher {
  std::mutex mu;  // held while calling on_change; Subscription waits on it
  std::function<void(absl::StatusOr<core::TransactionView>)> on_change;
  bool ended = false;
  std::string last_fingerprint;
};

class DriverBackend::Subscription final : public rpc::WatchSubscription {
 public:
  Subscription(DriverBackend* backend, std::string gid,
               std::shared_ptr<Watcher> watcher)
      : backend_(backend), gid_(std::move(gid)), watcher_(std::move(watcher)) {}
  ~Subscription() override {
    {
      std::lock_guard<std::mutex> lock(watcher_->mu);
      watcher_->ended = true;
    }
    std::lock_guard<std::mutex> lock(backend_->mu_);
    auto it = backend_->watchers_.find(gid_);
    if (it == backend_->watchers_.end()) return;
    auto& list = it->second;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] == watcher_) {
        list.erase(list.begin() + i);
        break;
      }
    }
    if (list.empty()) backend_->watchers_.erase(it);
  }

 private:
  DriverBackend* backend_;
  std::string gid_;
  std::shared_ptr<Watcher> watcher_;
};

namespace {

rpc::TxnAnswer ToAnswer(absl::StatusOr<runtime::DriverReply> reply) {
  rpc::TxnAnswer a;
  if (!reply.ok()) {
    a.status = reply.status();
    return a;
  }
  a.view = std::move(reply->transaction);
  a.duplicate = reply->duplicate;
  if (reply->branch) {
    for (size_t i = 0; i < a.view.branches.size(); ++i) {
      if (a.view.branches[i].branch_id == reply->branch->branch_id) {
        a.view.branches[i] = *reply->branch;
        a.branch = static_cast<int>(i);
      }
    }
  }
  return a;
}

// Changes whenever anything a watcher sees changes.
std::string Fingerprint(const core::TransactionView& v) {
  std::string f =
      absl::StrCat(static_cast<int>(v.state), "/", static_cast<int>(v.decision),
                   "/", v.finished_at_ms);
  for (const auto& b : v.branches) {
    absl::StrAppend(&f, "|", static_cast<int>(b.try_phase.state), ",",
                    b.try_phase.attempts, ",",
                    static_cast<int>(b.second_phase.state), ",",
                    b.second_phase.attempts, ",", b.stuck);
  }
  return f;
}

}  // namespace

DriverBackend::DriverBackend(wal::Log& log, runtime::Clock& clock,
                             CoordinatorMetrics* metrics)
    : log_(log), clock_(clock), metrics_(metrics) {}

runtime::ReplyDone DriverBackend::Track(rpc::AnswerDone done) {
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_pending_++;
    pending_[id] = pending;
  }
  return [this, id, pending](absl::StatusOr<runtime::DriverReply> reply) {
    rpc::AnswerDone done;
    {
      std::lock_guard<std::mutex> lock(pending->mu);
      done = std::move(pending->done);
      pending->done = nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase(id);
    }
    if (done) done(ToAnswer(std::move(reply)));
  };
}

void DriverBackend::Shutdown() {
  stopping_ = true;
  std::unordered_map<uint64_t, std::shared_ptr<Pending>> pending;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Watcher>>>
      watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    watchers = watchers_;
  }
  const absl::Status stopping = absl::UnavailableError("tccd is stopping");
  for (auto& [id, p] : pending) {
    rpc::AnswerDone done;
    {
      std::lock_guard<std::mutex> lock(p->mu);
      done = std::move(p->done);
      p->done = nullptr;
    }
    if (done) done(rpc::TxnAnswer{stopping, {}, false, -1});
  }
  for (auto& [gid, list] : watchers) {
    for (auto& w : list) {
      std::lock_guard<std::mutex> lock(w->mu);
      if (!w->ended) {
        w->ended = true;
        w->on_change(stopping);
      }
    }
  }
}

#define TCC_REFUSE_WHILE_STOPPING(done)                              \
  if (stopping_) {                                                   \
    done(rpc::TxnAnswer{                                             \
        absl::UnavailableError("tccd is stopping"), {}, false, -1}); \
    return;                                                          \
  }

#define TCC_REFUSE_OVER_LIMIT(done)                                      \
  if (in_flight_.load() >= static_cast<int64_t>(max_in_flight_)) {       \
    done(rpc::TxnAnswer{                                                 \
        absl::ResourceExhaustedError(absl::StrCat(                       \
            "too many unfinished transactions (limits.max_in_flight = ", \
            max_in_flight_, "); retry later")),                          \
        {},                                                              \
        false,                                                           \
        -1});                                                            \
    return;                                                              \
  }

void DriverBackend::Submit(core::SubmitSpec spec, rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  TCC_REFUSE_OVER_LIMIT(done);
  driver_->Submit(std::move(spec), Track(std::move(done)));
}

void DriverBackend::Begin(core::BeginSpec spec, rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  TCC_REFUSE_OVER_LIMIT(done);
  driver_->Begin(std::move(spec), Track(std::move(done)));
}

void DriverBackend::Try(std::string gid, core::BranchSpec branch,
                        rpc::AnswerDone done, int64_t answer_within_ms) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->Try(std::move(gid), std::move(branch), Track(std::move(done)),
               answer_within_ms);
}

void DriverBackend::Commit(std::string gid,
                           std::vector<std::string> expected_ids,
                           core::WaitFor wait_for, rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->Commit(std::move(gid), std::move(expected_ids), wait_for,
                  Track(std::move(done)));
}

void DriverBackend::Rollback(std::string gid, core::WaitFor wait_for,
                             rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->Rollback(std::move(gid), wait_for, Track(std::move(done)));
}

void DriverBackend::Get(std::string gid, rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->Get(std::move(gid), Track(std::move(done)));
}

void DriverBackend::RetryNow(std::string gid, std::string branch_id,
                             rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->RetryNow(std::move(gid), std::move(branch_id),
                    Track(std::move(done)));
}

void DriverBackend::ForceDecision(std::string gid, wal::Decision decision,
                                  std::string approval_id,
                                  rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->ForceDecision(std::move(gid), decision, std::move(approval_id),
                         Track(std::move(done)));
}

void DriverBackend::ResolveBranch(std::string gid, std::string branch_id,
                                  std::string approval_id,
                                  rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->ResolveBranch(std::move(gid), std::move(branch_id),
                         std::move(approval_id), Track(std::move(done)));
}

void DriverBackend::Approve(std::string gid, std::string approval_id,
                            rpc::AnswerDone done) {
  TCC_REFUSE_WHILE_STOPPING(done);
  driver_->Approve(std::move(gid), std::move(approval_id),
                   Track(std::move(done)));
}

#undef TCC_REFUSE_WHILE_STOPPING
#undef TCC_REFUSE_OVER_LIMIT

void DriverBackend::IssueApproval(wal::Approval approval,
                                  std::function<void(absl::Status)> done) {
  if (stopping_) {
    done(absl::UnavailableError("tccd is stopping"));
    return;
  }
  log_.PutApproval(std::move(approval), std::move(done));
}

absl::StatusOr<wal::Approval> DriverBackend::ReadApproval(
    const std::string& approval_id) {
  return log_.ReadApproval(approval_id);
}

absl::StatusOr<wal::TxnLog> DriverBackend::ReadLog(const std::string& gid) {
  return log_.Read(gid);
}

absl::StatusOr<wal::ListPage> DriverBackend::List(const wal::ListQuery& query) {
  return log_.List(query);
}

std::unique_ptr<rpc::WatchSubscription> DriverBackend::Watch(
    std::string gid,
    std::function<void(absl::StatusOr<core::TransactionView>)> on_change) {
  auto watcher = std::make_shared<Watcher>();
  watcher->on_change = std::move(on_change);
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_[gid].push_back(watcher);
  }
  auto sub = std::make_unique<Subscription>(this, gid, watcher);
  if (stopping_) {
    std::lock_guard<std::mutex> lock(watcher->mu);
    watcher->ended = true;
    watcher->on_change(absl::UnavailableError("tccd is stopping"));
    return sub;
  }
  // The first view, or NOT_FOUND, which ends the watch.
  std::weak_ptr<Watcher> weak = watcher;
  driver_->Get(gid, [weak](absl::StatusOr<runtime::DriverReply> reply) {
    auto w = weak.lock();
    if (!w) return;
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->ended) return;
    if (!reply.ok()) {
      w->ended = true;
      w->on_change(reply.status());
      return;
    }
    w->last_fingerprint = Fingerprint(reply->transaction);
    if (wal::IsFinal(reply->transaction.state)) w->ended = true;
    w->on_change(std::move(reply->transaction));
  });
  return sub;
}

void DriverBackend::Refresh(const std::string& gid) {
  std::vector<std::weak_ptr<Watcher>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = watchers_.find(gid);
    if (it == watchers_.end()) return;
    for (auto& w : it->second) targets.push_back(w);
  }
  driver_->Get(gid, [targets](absl::StatusOr<runtime::DriverReply> reply) {
    if (!reply.ok()) return;
    const std::string fp = Fingerprint(reply->transaction);
    for (const auto& weak : targets) {
      auto w = weak.lock();
      if (!w) continue;
      std::lock_guard<std::mutex> lock(w->mu);
      if (w->ended || w->last_fingerprint == fp) continue;
      w->last_fingerprint = fp;
      if (wal::IsFinal(reply->transaction.state)) w->ended = true;
      w->on_change(reply->transaction);
    }
  });
}

rpc::CoordinatorBackend::Health DriverBackend::Status() {
  Health h;
  const bool recovering =
      per_shard_ ? recovering_shards() > 0 : !recovered_.load();
  h.health = stopping_ ? "stopping" : (recovering ? "recovering" : "serving");
  if (absl::Status f = fatal(); !f.ok()) {
    h.health = "failed";
    if (recovering) h.recovery_error = f.ToString();
  }
  const wal::LogStats stats = log_.Stats();
  h.wal_bytes = stats.bytes_on_disk;
  // The strictest shard's: no request older than it is answered anywhere.
  h.dedup_horizon_ms = 0;
  for (uint32_t k = 0; k < log_.shard_count(); ++k) {
    h.dedup_horizon_ms = std::max(h.dedup_horizon_ms, log_.DedupHorizonMs(k));
  }
  const int64_t now = clock_.WallMs();
  for (wal::TxnState s :
       {wal::TxnState::kOpen, wal::TxnState::kTrying,
        wal::TxnState::kAwaitingApproval, wal::TxnState::kConfirming,
        wal::TxnState::kCancelling}) {
    uint64_t count = 0;
    wal::ListQuery q;
    q.states = {s};
    q.page_size = 1000;
    // Counted to the end of the index (a client List page stops early).
    q.scan_budget = std::numeric_limits<size_t>::max();
    bool first_seen = false;
    // Bounded: counts up to 100,000 per state.
    for (int page = 0; page < 100; ++page) {
      auto p = log_.List(q);
      if (!p.ok()) break;
      count += p->items.size();
      if (!first_seen && !p->items.empty()) {
        first_seen = true;
        const uint64_t age = static_cast<uint64_t>(
            std::max<int64_t>(0, now - p->items.front().registered_at_ms));
        h.oldest_unfinished_age_ms = std::max(h.oldest_unfinished_age_ms, age);
      }
      if (p->next_page_token.empty()) break;
      q.page_token = p->next_page_token;
    }
    if (count > 0) h.in_flight.emplace_back(s, count);
  }
  h.stuck_branches = static_cast<uint64_t>(
      std::max<int64_t>(0, driver_ != nullptr ? driver_->stuck_branches() : 0));
  // Recovery is done for a transaction once it is final (or, in cluster
  // mode, handed on with its shard).
  if (driver_ != nullptr) {
    const runtime::Driver::RecoveryProgress p = driver_->recovery_progress();
    h.recovery_total = p.found;
    h.recovery_done = p.found - p.unfinished;
  }
  return h;
}

void DriverBackend::OnSignal(const std::string& gid,
                             const std::string& branch_id,
                             const core::SignalEffect& signal) {
  const char* name = core::SignalKindName(signal.kind);
  switch (signal.kind) {
    case core::SignalKind::kAlert:
      spdlog::warn("gid={} branch={} alert: {}", gid, branch_id, signal.text);
      if (metrics_) metrics_->Alert("core");
      break;
    case core::SignalKind::kStuck:
      spdlog::warn("gid={} branch={} stuck: {}", gid, branch_id, signal.text);
      break;
    case core::SignalKind::kUnstuck:
      spdlog::info("gid={} branch={} no longer stuck: {}", gid, branch_id,
                   signal.text);
      break;
    case core::SignalKind::kLostDecision:
      spdlog::error("gid={} branch={} lost decision: {}", gid, branch_id,
                    signal.text);
      if (metrics_) metrics_->Alert("lost_decision");
      break;
    case core::SignalKind::kUnknownOutcome:
      spdlog::info("gid={} branch={} unknown outcome: {}", gid, branch_id,
                   signal.text);
      if (metrics_) metrics_->UnknownOutcome("call");
      break;
    case core::SignalKind::kUnknownResolved:
      spdlog::info("gid={} branch={} unknown outcome resolved: {}", gid,
                   branch_id, signal.text);
      if (metrics_) metrics_->UnknownResolved("query", 0);
      break;
    case core::SignalKind::kRetry:
      spdlog::info("gid={} branch={} retry: {}", gid, branch_id, signal.text);
      if (metrics_) metrics_->Retry("call");
      break;
    case core::SignalKind::kDecided:
    case core::SignalKind::kFinished:
      spdlog::debug("gid={} {}: {}", gid, name, signal.text);
      break;
  }
}

void DriverBackend::OnFinished(const std::string& gid, core::TxnState state,
                               int64_t duration_ms) {
  const char* name = core::TxnStateName(state);
  --in_flight_;
  spdlog::info("gid={} final state {} after {} ms", gid, name, duration_ms);
  if (metrics_) {
    metrics_->TransactionFinished(
        state == core::TxnState::kConfirmed ? "confirmed" : "cancelled",
        static_cast<double>(duration_ms) / 1000.0);
  }
  Refresh(gid);
}

void DriverBackend::OnBreaker(const std::string& participant,
                              runtime::BreakerState state) {
  spdlog::warn("participant={} circuit breaker {}", participant,
               runtime::BreakerStateName(state));
  if (metrics_) {
    metrics_->SetBreakerState(participant,
                              state == runtime::BreakerState::kClosed     ? 0
                              : state == runtime::BreakerState::kHalfOpen ? 1
                                                                          : 2);
  }
}

void DriverBackend::OnEffect(const std::string& gid,
                             const core::Effect& effect) {
  if (const auto* p = std::get_if<core::PersistEffect>(&effect)) {
    for (const auto& r : p->records) {
      if (std::holds_alternative<wal::Registered>(r)) ++in_flight_;
    }
  }
  if (metrics_) {
    if (const auto* p = std::get_if<core::PersistEffect>(&effect)) {
      for (const auto& r : p->records) {
        if (std::holds_alternative<wal::Registered>(r)) {
          metrics_->TransactionAccepted();
        }
      }
    }
  }
  // Watchers see every persisted change.
  if (std::holds_alternative<core::PersistEffect>(effect)) {
    bool watched;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watched = watchers_.count(gid) != 0;
    }
    if (watched) Refresh(gid);
  }
}

void DriverBackend::OnFatal(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(fatal_mu_);
    if (fatal_.ok()) fatal_ = status;
  }
  spdlog::critical("cannot drive what the WAL holds, stopping: {}",
                   status.ToString());
  if (metrics_) metrics_->Alert("fatal");
}

absl::Status DriverBackend::fatal() const {
  std::lock_guard<std::mutex> lock(fatal_mu_);
  return fatal_;
}

void DriverBackend::OnRecovered(size_t resumed) {
  in_flight_ += static_cast<int64_t>(resumed);
  recovered_ = true;
  spdlog::info("recovery: {} unfinished transactions found, being resumed",
               resumed);
  ExportRecovery();
}

void DriverBackend::ShardAdopting(uint32_t shard, bool ok) {
  std::lock_guard<std::mutex> lock(scans_mu_);
  if (ok) {
    scanning_shards_.insert(shard);
  } else {
    scanning_shards_.erase(shard);
  }
}

void DriverBackend::OnShardRecovered(uint32_t shard, uint64_t epoch,
                                     size_t resumed) {
  {
    std::lock_guard<std::mutex> lock(scans_mu_);
    scanning_shards_.erase(shard);
  }
  spdlog::info(
      "cluster: shard {} (epoch {}): {} unfinished transactions "
      "found, being resumed",
      shard, epoch, resumed);
  in_flight_ += static_cast<int64_t>(resumed);
}

void DriverBackend::OnShardScanFailed(uint32_t shard, const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(scans_mu_);
    scanning_shards_.erase(shard);
  }
  spdlog::warn(
      "cluster: shard {}: its recovery scan failed ({}); the shard "
      "is dropped, to be taken again",
      shard, why.ToString());
}

void DriverBackend::OnShardDropped(uint32_t shard) {
  std::lock_guard<std::mutex> lock(scans_mu_);
  scanning_shards_.erase(shard);
}

uint32_t DriverBackend::recovering_shards() const {
  std::lock_guard<std::mutex> lock(scans_mu_);
  return static_cast<uint32_t>(scanning_shards_.size());
}

void DriverBackend::ExportRecovery() {
  if (metrics_ == nullptr || driver_ == nullptr) return;
  const runtime::Driver::RecoveryProgress p = driver_->recovery_progress();
  metrics_->SetRecovery(static_cast<int64_t>(p.found - p.unfinished),
                        static_cast<int64_t>(p.found));
}

}  // namespace tcc::server
