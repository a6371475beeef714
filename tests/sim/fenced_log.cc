#include "fenced_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "internal/txn_rules.h"

namespace tcc::sim {
namespace {

StoreOp GetOp(const std::string& key) {
  StoreOp op;
  op.kind = StoreOp::Kind::kGet;
  op.key = key;
  return op;
}

StoreOp TxnOp(StoreTxn txn) {
  StoreOp op;
  op.kind = StoreOp::Kind::kTxn;
  op.txn = std::make_shared<const StoreTxn>(std::move(txn));
  return op;
}

std::optional<KeyValue> First(const std::vector<KeyValue>& kvs) {
  if (kvs.empty()) return std::nullopt;
  return kvs.front();
}

}  // namespace

FencedLog::FencedLog(FencedLogOptions options)
    : options_(std::move(options)),
      lease_(options_.lease_id),
      alive_(std::make_shared<bool>(true)) {}

FencedLog::~FencedLog() { *alive_ = false; }

uint64_t FencedLog::epoch(uint32_t shard) const {
  auto it = epochs_.find(shard);
  return it == epochs_.end() ? 0 : it->second;
}

wal::LogStats FencedLog::Stats() const {
  wal::LogStats s;
  s.syncs = txns_sent_;
  s.synced_appends = appends_done_;
  return s;
}

void FencedLog::PutApproval(wal::Approval, wal::AppendDone done) {
  done(absl::UnimplementedError("the simulation's log has no approvals"));
}

absl::StatusOr<wal::Approval> FencedLog::ReadApproval(std::string_view) {
  return absl::NotFoundError("the simulation's log has no approvals");
}

absl::StatusOr<wal::ListPage> FencedLog::List(const wal::ListQuery&) {
  return absl::UnimplementedError("the simulation's log has no List");
}

// ---------------------------------------------------------------- views

void FencedLog::Learn(const std::string& gid,
                      const std::optional<KeyValue>& kv) {
  View& v = views_[gid];
  if (!kv.has_value() || !kv->value.txn) {
    v = View{};
    return;
  }
  v.txn = *kv->value.txn;
  v.mod_revision = kv->mod_revision;
  v.appends = kv->value.appends;
}

absl::StatusOr<FencedLog::View*> FencedLog::ViewOf(const std::string& gid) {
  auto it = views_.find(gid);
  if (it != views_.end()) return &it->second;
  auto kvs = options_.link->ReadNow(HeadKey(ShardOf(gid), gid), false,
                                    ReadMode{0, true});
  if (!kvs.ok()) return kvs.status();
  last_answer_ms_ = options_.clock->MonotonicMs();
  Learn(gid, First(*kvs));
  return &views_[gid];
}

absl::StatusOr<wal::TxnLog> FencedLog::Read(std::string_view gid_view) {
  const std::string gid(gid_view);
  auto kvs = options_.link->ReadNow(HeadKey(ShardOf(gid), gid), false,
                                    ReadMode{0, true});
  if (!kvs.ok()) return absl::UnavailableError(kvs.status().ToString());
  last_answer_ms_ = options_.clock->MonotonicMs();
  stale_.erase(gid);
  auto before = views_.find(gid);
  const int64_t known =
      before == views_.end() ? -1 : before->second.mod_revision;
  Learn(gid, First(*kvs));
  const View& v = views_[gid];
  if (!v.txn) return absl::NotFoundError(absl::StrCat("no gid ", gid));
  wal::TxnLog out = *v.txn;
  // What this log holds follows, unless another writer wrote the gid.
  if (auto h = held_.find(gid); h != held_.end() && v.mod_revision == known) {
    for (const Waiting& w : h->second.appends) {
      out.records.insert(out.records.end(), w.request.records.begin(),
                         w.request.records.end());
    }
    out.summary = h->second.summary;
  }
  return out;
}

absl::StatusOr<wal::TxnLog> FencedLog::ReadForCreate(std::string_view gid,
                                                     bool* blind) {
  *blind = false;
  if (last_answer_ms_ >= 0 &&
      options_.clock->MonotonicMs() - last_answer_ms_ <
          wal::Log::kBlindCreateWindowMs &&
      views_.find(std::string(gid)) == views_.end()) {
    *blind = true;
    ++blind_reads_;
    blind_gids_.insert(std::string(gid));
    return absl::NotFoundError(
        absl::StrCat("gid ", std::string(gid), " not read (blind create)"));
  }
  return Read(gid);
}

absl::Status FencedLog::ScanUnfinished(
    uint32_t shard, const std::function<absl::Status(wal::TxnLog)>& visit) {
  if (shard >= options_.shards) {
    return absl::InvalidArgumentError("shard out of range");
  }
  if (!Owns(shard)) {
    return absl::UnavailableError(absl::StrCat("shard ", shard, " not taken"));
  }
  // Pinned at the epoch: every write of every earlier owner, never stale.
  auto kvs = options_.link->ReadNow(
      HeadPrefix(shard), true,
      ReadMode{static_cast<int64_t>(epoch(shard)), false});
  if (!kvs.ok()) return absl::UnavailableError(kvs.status().ToString());
  std::vector<KeyValue> unfinished;
  for (KeyValue& kv : *kvs) {
    if (kv.value.txn && !wal::IsFinal(kv.value.txn->summary.state)) {
      unfinished.push_back(std::move(kv));
    }
  }
  std::sort(unfinished.begin(), unfinished.end(),
            [](const KeyValue& a, const KeyValue& b) {
              const auto& x = a.value.txn->summary;
              const auto& y = b.value.txn->summary;
              return std::tie(x.registered_at_ms, x.gid) <
                     std::tie(y.registered_at_ms, y.gid);
            });
  for (const KeyValue& kv : unfinished) {
    const std::string& gid = kv.value.txn->summary.gid;
    auto it = views_.find(gid);
    if (it == views_.end() || it->second.mod_revision < kv.mod_revision) {
      Learn(gid, kv);
      stale_.erase(gid);
    }
    if (absl::Status s = visit(*kv.value.txn); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- ownership

absl::StatusOr<uint64_t> FencedLog::TakeOwnerEpoch(uint32_t shard) {
  if (shard >= options_.shards) {
    return absl::InvalidArgumentError("shard out of range");
  }
  if (Owns(shard)) {
    if (absl::Status s = ReleaseShard(shard); !s.ok()) return s;
  }
  return Campaign(shard);
}

absl::StatusOr<uint64_t> FencedLog::Campaign(uint32_t shard) {
  for (int round = 0; round < 2; ++round) {
    StoreTxn t;
    t.writer = options_.node_id;
    t.writer_lease = lease_;
    if (!options_.breakers.campaign_without_cas) {
      t.compares.push_back(
          {OwnerKey(shard), StoreCompare::Target::kCreateRevision, 0});
    }
    StoreOp put;
    put.kind = StoreOp::Kind::kPut;
    put.key = OwnerKey(shard);
    put.value.text = options_.node_id;
    put.lease = lease_;
    t.success = {put, GetOp(OwnerKey(shard))};
    t.failure = {GetOp(OwnerKey(shard))};
    absl::StatusOr<TxnResult> r = options_.link->CallNow(t);
    std::optional<KeyValue> owner;
    bool won = false;
    if (r.ok()) {
      won = r->succeeded;
      owner = First(r->results.back().kvs);
    } else if (r.status().code() == absl::StatusCode::kDeadlineExceeded) {
      // The answer was lost: the key's lease says whose it is.
      auto kvs =
          options_.link->ReadNow(OwnerKey(shard), false, ReadMode{0, true});
      if (!kvs.ok()) return absl::UnavailableError(kvs.status().ToString());
      owner = First(*kvs);
      won = !owner.has_value() || released_.count(owner->create_revision) == 0;
    } else {
      return absl::UnavailableError(r.status().ToString());
    }
    const bool mine = owner.has_value() && owner->lease == lease_ &&
                      owner->value.text == options_.node_id;
    if (mine && won) {
      epochs_[shard] = static_cast<uint64_t>(owner->create_revision);
      return epochs_[shard];
    }
    if (!mine) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", shard, " is owned by ",
          owner.has_value() ? owner->value.text : std::string("nobody")));
    }
    if (options_.breakers.adopt_existing_own_key) {
      // Breaker: a key of this lease that this log did not just create is
      // taken as it is, its epoch an old one.
      epochs_[shard] = static_cast<uint64_t>(owner->create_revision);
      return epochs_[shard];
    }
    // A key of this lease from an earlier campaign (whose answer was lost
    // then): the fenced delete, and a campaign for a new epoch.
    StoreTxn del;
    del.writer = options_.node_id;
    del.writer_lease = lease_;
    del.compares = {{OwnerKey(shard), StoreCompare::Target::kCreateRevision,
                     owner->create_revision},
                    {OwnerKey(shard), StoreCompare::Target::kLease, lease_}};
    StoreOp d;
    d.kind = StoreOp::Kind::kDelete;
    d.key = OwnerKey(shard);
    del.success = {d};
    if (absl::StatusOr<TxnResult> dr = options_.link->CallNow(del); !dr.ok()) {
      return absl::UnavailableError(dr.status().ToString());
    }
  }
  return absl::UnavailableError(absl::StrCat("shard ", shard, ": no campaign"));
}

absl::Status FencedLog::ReleaseShard(uint32_t shard, uint64_t epoch) {
  DropHeld(shard);
  int64_t given_up = static_cast<int64_t>(epoch);
  if (auto it = epochs_.find(shard); it != epochs_.end()) {
    given_up = static_cast<int64_t>(it->second);  // the one it created
    epochs_.erase(it);  // nothing more is written for it, whatever the answer
  } else if (given_up == 0) {
    // A key of this lease that this log does not drive (a campaign whose
    // answer was lost and not resolved): deleted as well.
    auto kvs =
        options_.link->ReadNow(OwnerKey(shard), false, ReadMode{0, true});
    if (!kvs.ok()) return absl::UnavailableError(kvs.status().ToString());
    std::optional<KeyValue> owner = First(*kvs);
    if (!owner || owner->lease != lease_) return absl::OkStatus();
    given_up = owner->create_revision;
  }
  StoreTxn t;
  t.writer = options_.node_id;
  t.writer_lease = lease_;
  t.compares = {
      {OwnerKey(shard), StoreCompare::Target::kCreateRevision, given_up},
      {OwnerKey(shard), StoreCompare::Target::kLease, lease_}};
  StoreOp d;
  d.kind = StoreOp::Kind::kDelete;
  d.key = OwnerKey(shard);
  t.success = {d};
  absl::StatusOr<TxnResult> r = options_.link->CallNow(t);
  if (!r.ok()) {
    released_.insert(given_up);
    return absl::UnavailableError(r.status().ToString());
  }
  return absl::OkStatus();
}

void FencedLog::LoseShard(uint32_t shard, const absl::Status& why) {
  DropHeld(shard);
  if (epochs_.erase(shard) == 0) return;
  if (lost_) lost_(shard, why);
}

void FencedLog::LeaseLost(int64_t new_lease) {
  std::vector<uint32_t> owned;
  for (const auto& [k, e] : epochs_) owned.push_back(k);
  for (uint32_t k : owned) {
    LoseShard(k, absl::UnavailableError("the node's lease is gone"));
  }
  lease_ = new_lease;
}

// ---------------------------------------------------------------- appends

void FencedLog::Append(wal::AppendRequest request, wal::AppendDone done) {
  Waiting w;
  w.request = std::move(request);
  w.done = std::move(done);
  w.id = options_.next_append_id();
  w.epoch = epoch(ShardOf(w.request.gid));
  if (Hold(w)) return;
  ReleaseHeld(w.request.gid);
  ++unsent_[w.request.gid];
  queue_.push_back(std::move(w));
  ScheduleFlush();
}

bool FencedLog::Hold(Waiting& w) {
  const std::string& gid = w.request.gid;
  if (options_.hold_buffered_ms <= 0 ||
      w.request.durability != wal::Durability::kBuffered || w.epoch == 0 ||
      unsent_.count(gid) != 0 || stale_.count(gid) != 0) {
    return false;
  }
  auto v = views_.find(gid);
  if (v == views_.end() || !v->second.txn) return false;
  auto h = held_.find(gid);
  const wal::TxnSummary& before =
      h != held_.end() ? h->second.summary : v->second.txn->summary;
  absl::StatusOr<wal::internal::AppendPlan> plan = wal::internal::PlanAppend(
      w.request, &before, wal::internal::NoApprovals());
  if (!plan.ok() || !wal::internal::MayHold(w.request, *plan, before)) {
    return false;
  }
  if (h == held_.end()) {
    h = held_.emplace(gid, Held{}).first;
    h->second.since_ms = options_.clock->MonotonicMs();
    h->second.summary = before;
    const int64_t since = h->second.since_ms;
    std::weak_ptr<bool> alive = alive_;
    options_.clock->Schedule(
        options_.hold_buffered_ms, [this, alive, gid, since] {
          if (auto a = alive.lock(); !a || !*a) return;
          auto it = held_.find(gid);
          if (it == held_.end() || it->second.since_ms != since) return;
          ReleaseHeld(gid);
          ScheduleFlush();
        });
  }
  if (plan->summary_set) h->second.summary = std::move(plan->summary);
  ++appends_held_;
  wal::AppendDone done = std::move(w.done);  // Complete skips a held one's
  w.held = true;
  h->second.appends.push_back(std::move(w));
  done(absl::OkStatus());
  return true;
}

void FencedLog::ReleaseHeld(const std::string& gid) {
  auto h = held_.find(gid);
  if (h == held_.end()) return;
  unsent_[gid] += h->second.appends.size();
  for (Waiting& w : h->second.appends) queue_.push_back(std::move(w));
  held_.erase(h);
}

void FencedLog::DropHeld(uint32_t shard) {
  for (auto h = held_.begin(); h != held_.end();) {
    h = ShardOf(h->first) == shard ? held_.erase(h) : std::next(h);
  }
}

void FencedLog::ScheduleFlush() {
  if (flush_scheduled_ || in_flight_) return;
  flush_scheduled_ = true;
  std::weak_ptr<bool> alive = alive_;
  options_.clock->Schedule(0, [this, alive] {
    if (auto a = alive.lock(); a && *a) Flush();
  });
}

void FencedLog::Complete(std::vector<Waiting> appends,
                         const absl::Status& status) {
  for (Waiting& w : appends) {
    if (auto u = unsent_.find(w.request.gid);
        u != unsent_.end() && --u->second == 0) {
      unsent_.erase(u);
    }
    if (w.held) {
      // Answered OK when it was held; the oracle still hears what the log
      // concluded of its write (one taken as refused must not be stored).
      if (options_.on_answered) {
        options_.on_answered(w.request.gid, w.id, status);
      }
      continue;
    }
    ++appends_done_;
    if (blind_gids_.erase(w.request.gid) != 0 &&
        (absl::IsAlreadyExists(status) || absl::IsAborted(status))) {
      ++blind_refused_;
    }
    if (options_.on_answered) options_.on_answered(w.request.gid, w.id, status);
    w.done(status);
  }
}

void FencedLog::Flush() {
  flush_scheduled_ = false;
  if (in_flight_ || queue_.empty()) return;
  std::map<uint32_t, ShardWrite> by_shard;
  std::map<std::string, std::pair<uint32_t, size_t>> where;
  std::vector<std::pair<Waiting, absl::Status>> failed;
  bool unreadable = false;
  while (!queue_.empty() && !unreadable) {
    Waiting w = std::move(queue_.front());
    queue_.pop_front();
    const std::string gid = w.request.gid;
    const uint32_t k = ShardOf(gid);
    if (!Owns(k) || epoch(k) != w.epoch) {
      failed.emplace_back(
          std::move(w), absl::UnavailableError(
                            absl::StrCat("shard ", k, " is not this node's")));
      continue;
    }
    if (stale_.count(gid) != 0) {
      failed.emplace_back(
          std::move(w), absl::AbortedError(absl::StrCat("the view of ", gid,
                                                        " is stale: Read it")));
      continue;
    }
    GidWrite* gw = nullptr;
    if (auto it = where.find(gid); it != where.end()) {
      gw = &by_shard[it->second.first].gids[it->second.second];
    } else {
      // As EtcdLog: a gid without a view whose first append here registers
      // it is not read; the head compare refuses it if it exists.
      const bool registers =
          views_.count(gid) == 0 && wal::internal::Registers(w.request);
      View absent;
      absl::StatusOr<View*> view =
          registers ? absl::StatusOr<View*>(&absent) : ViewOf(gid);
      if (!view.ok()) {
        queue_.push_front(std::move(w));  // the store is out of reach
        unreadable = true;
        break;
      }
      ShardWrite& sw = by_shard[k];
      sw.shard = k;
      sw.epoch = epoch(k);
      GidWrite fresh;
      fresh.gid = gid;
      if ((*view)->txn) fresh.after = *(*view)->txn;
      fresh.base_mod_revision = (*view)->mod_revision;
      fresh.appends_after = (*view)->appends;
      sw.gids.push_back(std::move(fresh));
      where[gid] = {k, sw.gids.size() - 1};
      gw = &sw.gids.back();
    }
    const bool exists = !gw->after.summary.gid.empty();
    absl::StatusOr<wal::internal::AppendPlan> plan = wal::internal::PlanAppend(
        w.request, exists ? &gw->after.summary : nullptr,
        wal::internal::NoApprovals());
    if (!plan.ok()) {
      failed.emplace_back(std::move(w), plan.status());
      continue;
    }
    for (const wal::Record& r : w.request.records)
      gw->after.records.push_back(r);
    if (plan->summary_set) gw->after.summary = std::move(plan->summary);
    auto ids = gw->appends_after
                   ? std::make_shared<std::vector<uint64_t>>(*gw->appends_after)
                   : std::make_shared<std::vector<uint64_t>>();
    ids->push_back(w.id);
    gw->appends_after = std::move(ids);
    gw->last_id = w.id;
    gw->appends.push_back(std::move(w));
  }
  // Gids whose every append failed take no part in the Txn.
  Group group;
  StoreTxn top;
  top.writer = options_.node_id;
  top.writer_lease = lease_;
  for (auto& [k, sw] : by_shard) {
    sw.gids.erase(
        std::remove_if(sw.gids.begin(), sw.gids.end(),
                       [](const GidWrite& g) { return g.appends.empty(); }),
        sw.gids.end());
    if (sw.gids.empty()) continue;
    StoreTxn st;
    if (!options_.breakers.write_without_fence) {
      st.compares = {{OwnerKey(k), StoreCompare::Target::kCreateRevision,
                      static_cast<int64_t>(sw.epoch)},
                     {OwnerKey(k), StoreCompare::Target::kLease, lease_}};
    }
    st.failure.push_back(GetOp(OwnerKey(k)));
    for (const GidWrite& g : sw.gids) {
      StoreTxn gt;
      if (!options_.breakers.head_without_cas) {
        gt.compares = {{HeadKey(k, g.gid), StoreCompare::Target::kModRevision,
                        g.base_mod_revision}};
      }
      StoreOp put;
      put.kind = StoreOp::Kind::kPut;
      put.key = HeadKey(k, g.gid);
      put.value.txn = std::make_shared<const wal::TxnLog>(g.after);
      put.value.writer_epoch = sw.epoch;
      put.value.append_id = g.last_id;
      put.value.appends = g.appends_after;
      put.seen_mod_revision = g.base_mod_revision;
      gt.success = {put};
      gt.failure = {GetOp(HeadKey(k, g.gid))};
      st.success.push_back(TxnOp(std::move(gt)));
      st.failure.push_back(GetOp(HeadKey(k, g.gid)));
    }
    top.claimed_epochs[k] = sw.epoch;
    top.success.push_back(TxnOp(std::move(st)));
    group.shards.push_back(std::move(sw));
  }
  for (auto& [w, status] : failed) {
    std::vector<Waiting> one;
    one.push_back(std::move(w));
    Complete(std::move(one), status);
  }
  if (group.shards.empty()) {
    if (unreadable) {
      std::weak_ptr<bool> alive = alive_;
      flush_scheduled_ = true;
      options_.clock->Schedule(options_.resend_backoff_ms, [this, alive] {
        if (auto a = alive.lock(); a && *a) Flush();
      });
    } else if (!queue_.empty()) {
      ScheduleFlush();
    }
    return;
  }
  group.txn = std::make_shared<const StoreTxn>(std::move(top));
  group.backoff_ms = 0;
  in_flight_ = std::move(group);
  Resend(++generation_);
}

void FencedLog::Resend(uint64_t generation) {
  if (!in_flight_ || generation != generation_) return;
  ++txns_sent_;
  std::weak_ptr<bool> alive = alive_;
  options_.link->Send(in_flight_->txn, options_.txn_timeout_ms,
                      [this, alive, generation](absl::StatusOr<TxnResult> r) {
                        if (auto a = alive.lock(); a && *a) {
                          OnAnswer(generation, std::move(r));
                        }
                      });
}

void FencedLog::OnAnswer(uint64_t generation,
                         absl::StatusOr<TxnResult> answer) {
  if (!in_flight_ || generation != generation_) return;
  if (answer.ok()) {
    last_answer_ms_ = options_.clock->MonotonicMs();
    Group g = std::move(*in_flight_);
    in_flight_.reset();
    Finish(std::move(g), *answer);
    ScheduleFlush();
    return;
  }
  if (answer.status().code() == absl::StatusCode::kInvalidArgument) {
    // Refused whole (this log never names a key twice: a bug if it did).
    Group g = std::move(*in_flight_);
    in_flight_.reset();
    for (ShardWrite& sw : g.shards) {
      for (GidWrite& gw : sw.gids)
        Complete(std::move(gw.appends), answer.status());
    }
    ScheduleFlush();
    return;
  }
  if (options_.breakers.unknown_outcome_as_refused) {
    Group g = std::move(*in_flight_);
    in_flight_.reset();
    for (ShardWrite& sw : g.shards) {
      for (GidWrite& gw : sw.gids) {
        Complete(std::move(gw.appends),
                 absl::UnavailableError("the store did not answer"));
      }
    }
    ScheduleFlush();
    return;
  }
  // Unknown: the identical Txn again, after a backoff.
  in_flight_->backoff_ms = std::min<int64_t>(
      1000, std::max(options_.resend_backoff_ms, 2 * in_flight_->backoff_ms));
  std::weak_ptr<bool> alive = alive_;
  options_.clock->Schedule(in_flight_->backoff_ms, [this, alive, generation] {
    if (auto a = alive.lock(); a && *a) {
      Resend(generation);
    }
  });
}

void FencedLog::Finish(Group group, const TxnResult& result) {
  // Whether the head holds this append: the ids of the appends it holds
  // (the model's record keys, named by the append that wrote them), so a
  // later write by another owner does not hide that this one committed.
  auto ours = [](const std::optional<KeyValue>& head, uint64_t /*epoch*/,
                 const GidWrite& gw) {
    return head.has_value() && head->value.txn && head->value.appends &&
           std::find(head->value.appends->begin(), head->value.appends->end(),
                     gw.last_id) != head->value.appends->end();
  };
  for (size_t i = 0; i < group.shards.size(); ++i) {
    ShardWrite& sw = group.shards[i];
    const TxnResult& r = *result.results[i].txn;
    if (!r.succeeded) {
      // The fence was refused; an earlier copy may have committed, before.
      std::vector<Waiting> committed, refused;
      for (size_t j = 0; j < sw.gids.size(); ++j) {
        std::optional<KeyValue> head = First(r.results[1 + j].kvs);
        if (ours(head, sw.epoch, sw.gids[j])) {
          Learn(sw.gids[j].gid, head);
          for (Waiting& w : sw.gids[j].appends)
            committed.push_back(std::move(w));
        } else {
          for (Waiting& w : sw.gids[j].appends) refused.push_back(std::move(w));
        }
      }
      const std::optional<KeyValue> owner = First(r.results[0].kvs);
      if (epoch(sw.shard) == sw.epoch) {
        LoseShard(sw.shard,
                  absl::UnavailableError(absl::StrCat(
                      "shard ", sw.shard, "'s fence was refused: owner ",
                      owner ? owner->value.text : std::string("none"))));
      }
      Complete(std::move(committed), absl::OkStatus());
      Complete(std::move(refused),
               absl::UnavailableError(absl::StrCat(
                   "shard ", sw.shard, " is lost (fence refused)")));
      continue;
    }
    for (size_t j = 0; j < sw.gids.size(); ++j) {
      GidWrite& gw = sw.gids[j];
      const TxnResult& g = *r.results[j].txn;
      if (g.succeeded) {
        View& v = views_[gw.gid];
        v.txn = std::move(gw.after);
        v.mod_revision = result.revision;
        v.appends = gw.appends_after;
        Complete(std::move(gw.appends), absl::OkStatus());
        continue;
      }
      std::optional<KeyValue> head = First(g.results[0].kvs);
      if (ours(head, sw.epoch, gw)) {  // an earlier copy committed
        Learn(gw.gid, head);
        Complete(std::move(gw.appends), absl::OkStatus());
        continue;
      }
      views_.erase(gw.gid);
      stale_.insert(gw.gid);
      const bool registers = !gw.appends.empty() &&
                             wal::internal::Registers(gw.appends[0].request);
      Complete(std::move(gw.appends),
               registers && head.has_value() && head->value.txn
                   ? absl::AlreadyExistsError(
                         absl::StrCat(gw.gid, " is in the log already"))
                   : absl::AbortedError(absl::StrCat(
                         gw.gid, " was written by another owner: Read it")));
    }
  }
}

}  // namespace tcc::sim
