#include "tcc/wal/memory_log.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <variant>

#include "absl/strings/str_cat.h"
#include "internal/txn_rules.h"
#include "record_codec.h"

namespace tcc::wal {

MemoryLog::MemoryLog(MemoryLogOptions options) : options_(options) {}

MemoryLog::~MemoryLog() = default;

absl::Status MemoryLog::ApplyAppend(State& state,
                                    const AppendRequest& request) {
  auto it = state.txns.find(request.gid);
  const TxnSummary* current =
      it == state.txns.end() ? nullptr : &it->second.summary;
  internal::ApprovalLookup lookup =
      [&state](const std::string& id) -> absl::StatusOr<Approval> {
    auto a = state.approvals.find(id);
    if (a == state.approvals.end()) {
      return absl::NotFoundError(absl::StrCat("approval ", id));
    }
    return a->second;
  };
  absl::StatusOr<internal::AppendPlan> plan =
      internal::PlanAppend(request, current, lookup);
  if (!plan.ok()) return plan.status();
  if (plan->registers) {
    it = state.txns.emplace(request.gid, Txn{}).first;
    state.by_registration.emplace(plan->summary.registered_at_ms, request.gid);
  }
  if (plan->summary_set) it->second.summary = std::move(plan->summary);
  it->second.records.insert(it->second.records.end(), request.records.begin(),
                            request.records.end());
  for (Approval& a : plan->consumed) {
    std::string id = a.approval_id;
    state.approvals[id] = std::move(a);
  }
  return absl::OkStatus();
}

absl::Status MemoryLog::ApplyApproval(State& state, const Approval& approval) {
  if (absl::Status s = internal::ValidateNewApproval(approval); !s.ok()) {
    return s;
  }
  if (!state.approvals.emplace(approval.approval_id, approval).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("approval ", approval.approval_id, " exists already"));
  }
  return absl::OkStatus();
}

absl::Status MemoryLog::ApplyWrite(State& state, const Write& write) {
  return write.append.has_value() ? ApplyAppend(state, *write.append)
                                  : ApplyApproval(state, write.approval);
}

void MemoryLog::Forget(State& state, const std::string& gid) {
  auto it = state.txns.find(gid);
  if (it == state.txns.end()) return;
  state.by_registration.erase({it->second.summary.registered_at_ms, gid});
  state.txns.erase(it);
}

void MemoryLog::Compact(State& state, const std::string& gid) {
  auto it = state.txns.find(gid);
  if (it == state.txns.end()) return;
  it->second.records.clear();
  it->second.records.shrink_to_fit();
  it->second.summary.compacted = true;
}

uint64_t MemoryLog::TxnBytes(const Txn& txn) {
  uint64_t bytes = internal::EncodeSummary(txn.summary).size();
  for (const Record& r : txn.records) bytes += internal::EncodeRecord(r).size();
  return bytes;
}

void MemoryLog::Run(Completions& completions) {
  for (auto& [done, status] : completions) {
    if (done) done(std::move(status));
  }
  completions.clear();
}

void MemoryLog::FailLocked(absl::Status status, Completions& completions) {
  failure_ = status;
  for (Write& w : unsynced_) {
    if (w.done) completions.emplace_back(std::move(w.done), status);
    w.done = nullptr;
  }
}

void MemoryLog::SyncLocked(Completions& completions) {
  if (inject_sync_.has_value()) {
    absl::Status status = *std::move(inject_sync_);
    inject_sync_.reset();
    FailLocked(std::move(status), completions);
    return;
  }
  if (unsynced_.empty()) return;
  for (Write& w : unsynced_) {
    // Replaying in the same order on the synced state gives the same result,
    // except for a write to a transaction that retention removed since: it is
    // gone from the live state too.
    (void)ApplyWrite(synced_, w);
    if (w.done) {
      completions.emplace_back(std::move(w.done), absl::OkStatus());
      ++stats_.synced_appends;
    }
  }
  unsynced_.clear();
  ++stats_.syncs;
}

void MemoryLog::WriteLocked(Write write, bool durable, absl::Status applied,
                            Completions& completions) {
  if (!applied.ok()) {
    completions.emplace_back(std::move(write.done), std::move(applied));
    return;
  }
  if (!durable) {
    completions.emplace_back(std::move(write.done), absl::OkStatus());
    write.done = nullptr;
    ++stats_.buffered_appends;
  }
  unsynced_.push_back(std::move(write));
  if (durable && options_.auto_sync) SyncLocked(completions);
}

void MemoryLog::Append(AppendRequest request, AppendDone done) {
  Completions completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      completions.emplace_back(std::move(done), failure_);
    } else if (inject_write_.has_value()) {
      absl::Status status = *std::move(inject_write_);
      inject_write_.reset();
      FailLocked(status, completions);
      completions.emplace_back(std::move(done), std::move(status));
    } else {
      absl::Status applied = ApplyAppend(live_, request);
      const bool durable = request.durability == Durability::kDurable;
      Write write{std::move(request), Approval{}, std::move(done)};
      WriteLocked(std::move(write), durable, std::move(applied), completions);
    }
  }
  Run(completions);
}

void MemoryLog::PutApproval(Approval approval, AppendDone done) {
  Completions completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      completions.emplace_back(std::move(done), failure_);
    } else if (inject_write_.has_value()) {
      absl::Status status = *std::move(inject_write_);
      inject_write_.reset();
      FailLocked(status, completions);
      completions.emplace_back(std::move(done), std::move(status));
    } else {
      absl::Status applied = ApplyApproval(live_, approval);
      Write write{std::nullopt, std::move(approval), std::move(done)};
      WriteLocked(std::move(write), /*durable=*/true, std::move(applied),
                  completions);
    }
  }
  Run(completions);
}

absl::StatusOr<TxnLog> MemoryLog::Read(std::string_view gid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.txns.find(gid);
  if (it == live_.txns.end()) {
    return absl::NotFoundError(
        absl::StrCat("gid ", std::string(gid), " is not in the log"));
  }
  return TxnLog{it->second.summary, it->second.records};
}

absl::StatusOr<Approval> MemoryLog::ReadApproval(std::string_view approval_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.approvals.find(approval_id);
  if (it == live_.approvals.end()) {
    return absl::NotFoundError(
        absl::StrCat("approval ", std::string(approval_id), " does not exist"));
  }
  return it->second;
}

absl::StatusOr<ListPage> MemoryLog::List(const ListQuery& query) {
  if (absl::Status s = internal::ValidateListQuery(query); !s.ok()) return s;
  absl::StatusOr<std::optional<internal::ListPosition>> pos =
      internal::DecodePageToken(query.page_token);
  if (!pos.ok()) return pos.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.by_registration.begin();
  if (pos->has_value()) {
    it = live_.by_registration.upper_bound(
        {(*pos)->registered_at_ms, (*pos)->gid});
  }
  ListPage page;
  size_t examined = 0;
  for (; it != live_.by_registration.end(); ++it) {
    const TxnSummary& summary = live_.txns.find(it->second)->second.summary;
    if (query.registered_before_ms != 0 &&
        summary.registered_at_ms >= query.registered_before_ms) {
      break;
    }
    if (examined++ == query.scan_budget) {  // as RocksDbLog::List
      auto last = std::prev(it);
      page.next_page_token =
          internal::EncodePageToken(last->first, last->second);
      break;
    }
    if (!internal::MatchesQuery(summary, query)) continue;
    if (page.items.size() == query.page_size) {
      const TxnSummary& last = page.items.back();
      page.next_page_token =
          internal::EncodePageToken(last.registered_at_ms, last.gid);
      break;
    }
    page.items.push_back(summary);
  }
  return page;
}

absl::Status MemoryLog::ScanUnfinished(
    uint32_t shard, const std::function<absl::Status(TxnLog)>& visit) {
  if (shard != 0) return absl::InvalidArgumentError("the log has one shard");
  std::vector<TxnLog> unfinished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    for (const auto& [key, gid] : live_.by_registration) {
      const Txn& txn = live_.txns.find(gid)->second;
      if (!IsFinal(txn.summary.state)) {
        unfinished.push_back(TxnLog{txn.summary, txn.records});
      }
    }
  }
  for (TxnLog& txn : unfinished) {
    if (absl::Status s = visit(std::move(txn)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MemoryLog::TakeOwnerEpoch(uint32_t shard) {
  if (shard != 0) return absl::InvalidArgumentError("the log has one shard");
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return failure_;
  return ++owner_epoch_;
}

absl::Status MemoryLog::RunRetention(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return failure_;
  const RetentionPolicy& policy = options_.retention;
  auto forget = [this](const std::string& gid, int64_t created_at_ms) {
    dedup_horizon_ms_ = std::max(
        dedup_horizon_ms_, created_at_ms == std::numeric_limits<int64_t>::max()
                               ? created_at_ms
                               : created_at_ms + 1);
    Forget(live_, gid);
    Forget(synced_, gid);
  };
  std::vector<std::pair<std::string, int64_t>> to_forget;
  std::vector<std::string> to_compact;
  for (const auto& [gid, txn] : live_.txns) {
    switch (internal::DueStep(txn.summary, policy, now_ms)) {
      case internal::RetentionStep::kForget:
        to_forget.emplace_back(gid, txn.summary.created_at_ms);
        break;
      case internal::RetentionStep::kCompact:
        to_compact.push_back(gid);
        break;
      case internal::RetentionStep::kKeep:
        break;
    }
  }
  for (const auto& [gid, created_at_ms] : to_forget) forget(gid, created_at_ms);
  for (const std::string& gid : to_compact) {
    Compact(live_, gid);
    Compact(synced_, gid);
  }
  if (policy.max_bytes == 0) return absl::OkStatus();

  // The size budget: oldest finished first, full records, then entries.
  uint64_t bytes = 0;
  std::vector<std::tuple<int64_t, std::string, uint64_t>> finished;
  for (const auto& [gid, txn] : live_.txns) {
    const uint64_t b = TxnBytes(txn);
    bytes += b;
    if (IsFinal(txn.summary.state)) {
      finished.emplace_back(txn.summary.finished_at_ms, gid, b);
    }
  }
  std::sort(finished.begin(), finished.end());
  for (auto& [at, gid, b] : finished) {
    if (bytes <= policy.max_bytes) break;
    Txn& txn = live_.txns.find(gid)->second;
    if (txn.summary.compacted) continue;
    Compact(live_, gid);
    Compact(synced_, gid);
    const uint64_t after = TxnBytes(txn);
    bytes -= b - after;
    b = after;
  }
  for (auto& [at, gid, b] : finished) {
    if (bytes <= policy.max_bytes) break;
    const int64_t created = live_.txns.find(gid)->second.summary.created_at_ms;
    forget(gid, created);
    bytes -= b;
  }
  return absl::OkStatus();
}

int64_t MemoryLog::DedupHorizonMs(uint32_t /*shard*/) const {
  std::lock_guard<std::mutex> lock(mu_);
  return dedup_horizon_ms_;
}

LogStats MemoryLog::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LogStats stats = stats_;
  stats.bytes_on_disk = 0;
  stats.unfinished = 0;
  for (const auto& [gid, txn] : synced_.txns) {
    stats.bytes_on_disk += TxnBytes(txn);
  }
  for (const auto& [gid, txn] : live_.txns) {
    if (IsFinal(txn.summary.state)) continue;
    ++stats.unfinished;
    const int64_t at = txn.summary.registered_at_ms;
    if (stats.oldest_unfinished_registered_ms == 0 ||
        at < stats.oldest_unfinished_registered_ms) {
      stats.oldest_unfinished_registered_ms = at;
    }
  }
  stats.dedup_horizon_ms = dedup_horizon_ms_;
  return stats;
}

size_t MemoryLog::SyncNow() {
  Completions completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return 0;
    SyncLocked(completions);
  }
  size_t completed = 0;
  for (const auto& c : completions) {
    if (c.second.ok()) ++completed;
  }
  Run(completions);
  return completed;
}

size_t MemoryLog::WaitingDurable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(unsynced_.begin(), unsynced_.end(),
                       [](const Write& w) { return w.done != nullptr; });
}

size_t MemoryLog::Unsynced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unsynced_.size();
}

void MemoryLog::Crash(size_t keep_unsynced) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_unsynced = std::min(keep_unsynced, unsynced_.size());
  for (size_t i = 0; i < keep_unsynced; ++i) {
    (void)ApplyWrite(synced_, unsynced_[i]);  // as in SyncLocked
  }
  unsynced_.clear();  // callbacks dropped uncalled: the process is gone
  live_ = synced_;
  failure_ = absl::OkStatus();
  inject_write_.reset();
  inject_sync_.reset();
}

void MemoryLog::InjectWriteFailure(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  inject_write_ = std::move(status);
}

void MemoryLog::InjectSyncFailure(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  inject_sync_ = std::move(status);
}

absl::Status MemoryLog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool MemoryLog::IsDurable(
    std::string_view gid,
    const std::function<bool(const Record&)>& predicate) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = synced_.txns.find(gid);
  if (it == synced_.txns.end()) return false;
  return std::any_of(it->second.records.begin(), it->second.records.end(),
                     predicate);
}

std::vector<Record> MemoryLog::SyncedRecords(std::string_view gid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = synced_.txns.find(gid);
  if (it == synced_.txns.end()) return {};
  return it->second.records;
}

}  // namespace tcc::wal
