#include "runtime/driver.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/admission.h"
#include "runtime/memory_budget.h"
#include "runtime/participant_calls.h"
#include "runtime/recovery.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::runtime {

using core::Effect;
using core::Event;
using core::RequestId;

namespace {

// An exponentially weighted moving average of a duration (us) whose
// evidence ages: without new samples it halves every kHalfLifeMs. A load
// shedder fed only by the work it admits must forget, or one stall (a WAL
// that waited seconds for its store) sheds every later request, and a shed
// request brings no sample that could correct it. Under real load samples
// keep coming and the ageing is negligible. Updated from any thread (a lost
// update only makes it a little less smooth).
class Ewma {
 public:
  static constexpr int64_t kHalfLifeMs = 1000;

  void Add(int64_t sample_us, int64_t now_ms) {
    const int64_t old = us(now_ms);
    v_.store(old + (sample_us - old) / 8, std::memory_order_relaxed);
    at_ms_.store(now_ms, std::memory_order_relaxed);
  }
  int64_t us(int64_t now_ms) const {
    const int64_t v = v_.load(std::memory_order_relaxed);
    const int64_t age = now_ms - at_ms_.load(std::memory_order_relaxed);
    if (v == 0 || age <= 0) return v;
    return static_cast<int64_t>(
        static_cast<double>(v) *
        std::exp2(-static_cast<double>(age) / kHalfLifeMs));
  }

 private:
  std::atomic<int64_t> v_{0};
  std::atomic<int64_t> at_ms_{0};  // the last sample's (monotonic ms)
};

core::TransactionView SummaryView(const wal::TxnSummary& s) {
  core::TransactionView v;
  v.gid = s.gid;
  v.state = s.state;
  v.decision = s.decision;
  v.content_hash = s.content_hash;
  v.revision = s.revision;
  v.created_at_ms = s.created_at_ms;
  v.registered_at_ms = s.registered_at_ms;
  v.finished_at_ms = s.finished_at_ms;
  return v;
}

}  // namespace

class Driver::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(DriverOptions options, std::vector<Executor*> shards, Clock& clock,
       ParticipantTransport& transport, wal::Log& log, DriverObserver* observer)
      : options_(std::move(options)),
        clock_(clock),
        transport_(transport),
        log_(log),
        observer_(observer != nullptr ? observer : &no_observer_),
        budget_(std::make_shared<MemoryBudget>(options_.max_in_flight_bytes)),
        rng_(options_.rng_seed) {
    for (Executor* e : shards) {
      shards_.push_back(
          Shard{e, {}, {}, std::make_unique<Shard::Unfinished>()});
    }
    if (!options_.uniform01) {
      options_.uniform01 = [this] {
        std::lock_guard<std::mutex> lock(rng_mu_);
        return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
      };
    }
  }

  // The parts that call back into the driver (through a weak pointer: their
  // callbacks may outlive it).
  void Init() {
    std::weak_ptr<Impl> weak = weak_from_this();
    ParticipantCalls::Hooks hooks;
    hooks.deliver = [weak](const std::string& gid, Event e) {
      if (auto self = weak.lock()) {
        self->OnShard(
            gid,
            [gid, e = std::move(e)](Impl& me, size_t sh) {
              me.Feed(sh, gid, e);
            },
            /*here=*/true);
      }
    };
    hooks.resume = [weak](const std::string& gid, const core::CallEffect& c,
                          const std::string& participant, bool as_probe) {
      if (auto self = weak.lock()) self->Resume(gid, c, participant, as_probe);
    };
    hooks.breaker_changed = [weak](const std::string& participant,
                                   BreakerState st) {
      if (auto self = weak.lock()) self->observer_->OnBreaker(participant, st);
    };
    calls_ = std::make_unique<ParticipantCalls>(
        ParticipantCallsOptions{options_.timeouts, options_.timeout_overrides,
                                options_.breaker, options_.may_call},
        clock_, transport_, budget_, std::move(hooks));

    // On its own executor the scan waits for room in its queue; on a
    // shard's it must not (that shard would never run the resumptions that
    // make room).
    bool may_wait = options_.scan_executor != nullptr;
    for (const Shard& sh : shards_) {
      if (sh.exec == options_.scan_executor) may_wait = false;
    }
    may_wait_ = may_wait;
    // One scan per shard of the log (DESIGN.md section 14: a cluster node
    // scans each shard it takes), sharing the window between them.
    const uint32_t log_shards = log_.shard_count();
    window_ = std::max<size_t>(
        1, (options_.recovery_window + log_shards - 1) / log_shards);
    log_shards_ = std::make_unique<LogShardSlot[]>(log_shards);
    // The recoveries Start runs; OnRecovered once, when every one ended.
    auto scans_left = std::make_shared<std::atomic<uint32_t>>(log_shards);
    auto found = std::make_shared<std::atomic<size_t>>(0);
    for (uint32_t k = 0; k < log_shards; ++k) {
      Recovery* r = MakeRecovery(k, [weak, scans_left, found](size_t n) {
        const size_t total = found->fetch_add(n) + n;
        if (scans_left->fetch_sub(1) != 1) return;
        if (auto self = weak.lock()) self->observer_->OnRecovered(total);
      });
      log_shards_[k].recovery = r;
      // A local log's shards are this process's from the start (Start
      // takes their epochs); a cluster node's once it adopts them.
      log_shards_[k].owned = options_.adopt_shards_at_start;
    }
  }

  // A new recovery of log shard k; `scanned` hears when its scan ended. It
  // lives as long as the driver (owners may hold a place of it).
  Recovery* MakeRecovery(uint32_t k, std::function<void(size_t)> scanned) {
    std::weak_ptr<Impl> weak = weak_from_this();
    auto cell = std::make_shared<std::atomic<Recovery*>>(nullptr);
    Recovery::Hooks rh;
    rh.resume = [weak, cell](std::shared_ptr<wal::TxnLog> t) {
      if (auto self = weak.lock()) self->ResumeScanned(*cell, std::move(t));
    };
    rh.scanned = std::move(scanned);
    rh.failed = [weak, k, cell](const absl::Status& st) {
      auto self = weak.lock();
      if (!self) return;
      if (self->options_.adopt_shards_at_start) {
        self->observer_->OnFatal(st);
        return;
      }
      // The scan of an adoption that is gone (the shard was dropped, and
      // maybe adopted again, with its own scan): nothing of the shard's now.
      if (self->log_shards_[k].recovery.load() != cell->load()) return;
      // A cluster node's scan of a shard it took (etcd unreachable, say):
      // the shard goes, to be taken again (by whichever node), scanned anew.
      self->DropLogShard(k, st);
      self->observer_->OnShardScanFailed(k, st);
    };
    auto r = std::make_unique<Recovery>(
        log_, RecoveryOptions{window_, may_wait_, k}, budget_, std::move(rh));
    Recovery* raw = r.get();
    *cell = raw;
    std::lock_guard<std::mutex> lock(recoveries_mu_);
    recoveries_.push_back(std::move(r));
    return raw;
  }

  struct Owner {
    core::Txn txn;
    // The owner epoch of its log shard when it was made: a drop of the shard
    // at that epoch takes it (not one made after the shard was adopted
    // again).
    uint64_t epoch = 0;
    std::unordered_map<RequestId, ReplyDone> callers;
    std::unordered_map<uint32_t, TimerId> retry_timers;
    std::vector<TimerId> deadline_timers;
    // Set while Adopt resumes it: resuming may finish it at once (every
    // branch had acknowledged, only the buffered Finished record was lost),
    // and whoever loaded it must still find it.
    bool loading = false;
    // Appends handed to the WAL and not yet written (buffered ones included):
    // the owner stays until they are, else a Get could reload the
    // transaction from a WAL that does not show its last records yet (e.g.
    // the buffered Finished) and resume it. `evict_wanted`: MaybeEvict found
    // it done but waiting for them; the last write then evicts it.
    std::shared_ptr<std::atomic<int>> unwritten =
        std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<std::atomic<bool>> evict_wanted =
        std::make_shared<std::atomic<bool>>(false);
    // The scan whose window place it holds until decided or dropped (null:
    // none).
    Recovery* recovery_place = nullptr;
    // Its branches flagged STUCK, as last counted into Impl::stuck_.
    int stuck = 0;
    // Its registration time (wall ms) as counted into its shard's
    // Shard::unfinished while it is registered and not final; 0: not
    // counted.
    int64_t unfinished_since = 0;
    // Since when (wall ms) it is in doubt, as counted into in_doubt_; 0: not.
    int64_t in_doubt_since = 0;
    // What it holds as last charged to the memory budget (TxnBytes).
    int64_t charged = 0;
    // Its payloads are in the WAL only (memory pressure). A call reads them
    // back (PayloadForCall): into the owner again if they fit well below
    // the pressure mark, else its own only, held and charged as the call's.
    bool payloads_in_wal = false;
    // The branches as last read back from the WAL for calls, kept for the
    // other calls of the same step (a decision sends all its Cancels at
    // once) and let go at its end (Recharge). Not charged: like the read
    // itself, it lives while a step runs; the calls' copies are charged.
    std::shared_ptr<std::vector<wal::BranchSpec>> read_back;
    // Found by a recovery scan and not final yet: counted in
    // scanned_unfinished_ until it finishes or goes.
    bool scanned = false;
    // The WAL refused an append for want of room (RESOURCE_EXHAUSTED: its
    // queue was full, nothing was written). The core fail-stops the owner
    // as for any failed append; once dropped it is loaded again from the
    // WAL and resumed after a pause, as a request touching it would.
    bool reload_when_dropped = false;
    // Made for a creating request whose log read was blind (log.h
    // ReadForCreate): the request, kept until its registration is written.
    // If the gid existed after all (the registration refused, nothing
    // written), the owner is discarded and the request handled again with a
    // real read (Unblind), so its caller gets the first answer as for any
    // duplicate.
    struct Blind {
      Event event;
      RequestId rid;
    };
    std::unique_ptr<Blind> blind;
    bool discard = false;  // Unblind: evicted as soon as nothing is unwritten
  };
  struct Shard {
    Executor* exec;
    std::unordered_map<std::string, std::unique_ptr<Owner>> owners;
    // The gid a request is being handled for: not evicted meanwhile (its
    // recovery may finish it before the request is applied).
    std::string pinned;
    // Owner::unfinished_since of its owners: written on the shard's
    // executor, read by oldest_unfinished_registered_ms from any thread.
    struct Unfinished {
      std::mutex mu;
      std::multiset<int64_t> since;
    };
    std::unique_ptr<Unfinished> unfinished;
  };

  absl::Status Start() {
    if (!options_.adopt_shards_at_start) return absl::OkStatus();
    const uint32_t log_shards = log_.shard_count();
    for (uint32_t k = 0; k < log_shards; ++k) {
      auto epoch = log_.TakeOwnerEpoch(k);
      if (!epoch.ok()) return epoch.status();
      log_shards_[k].epoch = *epoch;
    }
    // From now on (requests may come before the scan starts) Load notes
    // what it reads, for the queued resumptions to skip.
    std::vector<Recovery*> scans;
    for (uint32_t k = 0; k < log_shards; ++k) {
      scans.push_back(log_shards_[k].recovery.load());
      scans.back()->Begin();
    }
    std::weak_ptr<Impl> weak = weak_from_this();
    ScanExecutor()->Post([weak, scans] {
      auto self = weak.lock();
      if (!self) return;
      for (Recovery* r : scans) r->Scan();
    });
    return absl::OkStatus();
  }

  Executor* ScanExecutor() const {
    return options_.scan_executor != nullptr ? options_.scan_executor
                                             : shards_[0].exec;
  }

  // Cluster mode: takes log shard k (a new owner epoch: the log's
  // campaign) and resumes its unfinished transactions while serving.
  absl::StatusOr<uint64_t> AdoptShard(uint32_t k) {
    if (k >= log_.shard_count()) {
      return absl::InvalidArgumentError(absl::StrCat("no shard ", k));
    }
    std::lock_guard<std::mutex> adopting(adopt_mu_);
    LogShardSlot& slot = log_shards_[k];
    if (slot.owned.load()) return slot.epoch.load();
    absl::StatusOr<uint64_t> epoch = log_.TakeOwnerEpoch(k);
    if (!epoch.ok()) return epoch.status();
    const uint64_t e = *epoch;
    std::weak_ptr<Impl> weak = weak_from_this();
    Recovery* r = MakeRecovery(k, [weak, k, e](size_t n) {
      if (auto self = weak.lock()) self->observer_->OnShardRecovered(k, e, n);
    });
    r->Begin();
    slot.recovery = r;
    slot.epoch = e;
    slot.owned = true;
    ScanExecutor()->Post([weak, r] {
      if (auto self = weak.lock()) r->Scan();
    });
    return e;
  }

  bool OwnsShard(uint32_t k) const {
    return k < log_.shard_count() && log_shards_[k].owned.load();
  }

  // Runs `fn` on gid's shard if the driver is still alive. `here`: the
  // executor may run it on the calling thread (Executor::Dispatch), for
  // callers that hold no lock (completions from the WAL and the transport,
  // requests).
  void OnShard(const std::string& gid, std::function<void(Impl&, size_t)> fn,
               bool here = false) {
    const size_t s = ShardOf(gid);
    std::weak_ptr<Impl> weak = weak_from_this();
    auto task = [weak, s, fn = std::move(fn)] {
      auto self = weak.lock();
      if (self && !self->halted_) fn(*self, s);
    };
    if (here) {
      shards_[s].exec->Dispatch(std::move(task));
    } else {
      shards_[s].exec->Post(std::move(task));
    }
  }

  // A request: loads the gid's owner (creating an empty one when `creates`),
  // then steps the event made for its request id.
  // `answer_within_ms` > 0: the caller waits that long (see Driver::Submit);
  // a request that the recent queueing says cannot be answered in time is
  // refused at once, one whose time ran out while it waited for its shard
  // when it reaches it.
  void Request(std::string gid, bool creates,
               std::function<Event(RequestId)> make, ReplyDone done,
               int64_t answer_within_ms = 0) {
    const int64_t arrived = clock_.MonotonicMs();
    if (answer_within_ms > 0 && answer_within_ms * 1000 < ExpectedWaitUs()) {
      return done(absl::ResourceExhaustedError(absl::StrCat(
          "tccd cannot answer within ", answer_within_ms,
          " ms: the work queued ahead takes about ", ExpectedWaitUs() / 1000,
          " ms; nothing was written, retry later (same gid)")));
    }
    OnShard(
        gid,
        [gid, creates, arrived, answer_within_ms, make = std::move(make),
         done = std::move(done)](Impl& self, size_t s) mutable {
          const int64_t now = self.clock_.MonotonicMs();
          const int64_t waited = now - arrived;
          self.shard_wait_.Add(waited * 1000, now);
          if (answer_within_ms > 0 &&
              waited * 1000 + self.wal_durable_.us(now) >
                  answer_within_ms * 1000) {
            return done(absl::ResourceExhaustedError(
                absl::StrCat("waited ", waited,
                             " ms for its turn in tccd; it could not be "
                             "answered within ",
                             answer_within_ms,
                             " ms; nothing was "
                             "written, retry later (same gid)")));
          }
          self.OnRequest(s, gid, creates, make, std::move(done));
        },
        /*here=*/true);
  }

  // The recent wait of a request for its shard plus that of a durable WAL
  // append: about how long the work queued ahead delays an answer.
  int64_t ExpectedWaitUs() const {
    const int64_t now = clock_.MonotonicMs();
    return shard_wait_.us(now) + wal_durable_.us(now);
  }

  void Get(std::string gid, ReplyDone done) {
    OnShard(gid, [gid, done = std::move(done)](Impl& self, size_t s) {
      const wal::TxnSummary* summary = nullptr;
      wal::TxnSummary compact;
      self.shards_[s].pinned = gid;
      absl::StatusOr<Owner*> o = self.Load(s, gid, &compact, &summary);
      self.shards_[s].pinned.clear();
      if (!o.ok()) return done(o.status());
      if (summary != nullptr)
        return done(DriverReply{SummaryView(compact), false, std::nullopt});
      if (*o == nullptr) {
        return done(absl::NotFoundError(absl::StrCat("no transaction ", gid)));
      }
      done(DriverReply{core::MakeView((*o)->txn), false, std::nullopt});
      self.MaybeEvict(s, gid);
    });
  }

  // Fires every pending retry timer of `gid` now (one branch's when
  // `branch_id` is set): the waits are skipped, nothing else changes.
  void RetryNow(std::string gid, std::string branch_id, ReplyDone done) {
    OnShard(gid, [gid, branch_id, done = std::move(done)](Impl& self,
                                                          size_t s) {
      const wal::TxnSummary* summary = nullptr;
      wal::TxnSummary compact;
      absl::StatusOr<Owner*> o = self.Load(s, gid, &compact, &summary);
      if (!o.ok()) return done(o.status());
      if (summary != nullptr || *o == nullptr) {
        if (summary != nullptr) {
          return done(DriverReply{SummaryView(compact), false, std::nullopt});
        }
        return done(absl::NotFoundError(absl::StrCat("no transaction ", gid)));
      }
      Owner* owner = *o;
      int only = -1;
      if (!branch_id.empty()) {
        only = core::FindBranch(owner->txn, branch_id);
        if (only < 0) {
          return done(absl::NotFoundError(
              absl::StrCat("no branch ", branch_id, " in ", gid)));
        }
      }
      std::vector<uint32_t> due;
      for (const auto& [b, id] : owner->retry_timers) {
        if (only < 0 || static_cast<int>(b) == only) {
          self.clock_.Cancel(id);
          due.push_back(b);
        }
      }
      for (uint32_t b : due) owner->retry_timers.erase(b);
      for (uint32_t b : due) self.Feed(s, gid, core::RetryDueEvent{b});
      Owner* after = self.Find(s, gid);
      if (after == nullptr) {
        return self.Get(gid, std::move(done));
      }
      done(DriverReply{core::MakeView(after->txn), false, std::nullopt});
    });
  }

  void StopRecovery() {
    std::lock_guard<std::mutex> lock(recoveries_mu_);
    for (auto& r : recoveries_) r->Stop();
  }

  // The owner epoch of gid's shard of the log.
  uint64_t EpochOf(const std::string& gid) const {
    return log_shards_[log_.ShardOf(gid)].epoch.load();
  }
  uint64_t epoch(uint32_t log_shard) const {
    return log_shard < log_.shard_count() ? log_shards_[log_shard].epoch.load()
                                          : 0;
  }
  bool halted() const { return halted_; }
  int64_t stuck() const { return stuck_.load(); }
  RecoveryProgress recovery_progress() const {
    // Unfinished first: a transaction counted between the two reads is
    // then at most in `found` only (done a moment early), never unfinished
    // beyond what was found.
    const int64_t unfinished = std::max<int64_t>(0, scanned_unfinished_.load());
    const uint64_t found = scanned_found_.load();
    return RecoveryProgress{
        found, std::min<uint64_t>(found, static_cast<uint64_t>(unfinished))};
  }
  int64_t oldest_unfinished_registered_ms() {
    int64_t oldest = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.unfinished->mu);
      if (shard.unfinished->since.empty()) continue;
      const int64_t first = *shard.unfinished->since.begin();
      oldest = oldest == 0 ? first : std::min(oldest, first);
    }
    return oldest;
  }
  InDoubt in_doubt() {
    std::lock_guard<std::mutex> lock(doubt_mu_);
    return InDoubt{static_cast<int64_t>(in_doubt_.size()),
                   in_doubt_.empty() ? 0 : *in_doubt_.begin()};
  }
  int64_t memory_bytes() const { return budget_->used(); }
  int64_t memory_high_water_bytes() const { return budget_->high_water(); }
  BreakerState breaker(const std::string& p) const {
    return calls_->breaker_state(p);
  }

 private:
  // Whether gid's shard of the log is not this driver's to drive (never
  // adopted, lost, or handed over).
  bool LogShardLost(const std::string& gid) const {
    return !log_shards_[log_.ShardOf(gid)].owned.load();
  }

 public:
  // The log lost shard k (DESIGN.md section 14): its owners go at once,
  // their waiting callers answered UNAVAILABLE, nothing more is sent or
  // written for them, and requests for its gids are UNAVAILABLE.
  void DropLogShard(uint32_t k, const absl::Status& why) {
    if (k >= log_.shard_count()) return;
    LogShardSlot& slot = log_shards_[k];
    if (!slot.owned.exchange(false)) return;
    observer_->OnShardDropped(k);
    const uint64_t epoch = slot.epoch.load();
    // Its scan, if still going, ends (what it queued is skipped: the shard
    // is not owned).
    slot.recovery.load()->Stop();
    std::weak_ptr<Impl> weak = weak_from_this();
    for (size_t s = 0; s < shards_.size(); ++s) {
      shards_[s].exec->Post([weak, s, k, epoch, why] {
        if (auto self = weak.lock()) self->DropOwnersOf(s, k, epoch, why);
      });
    }
  }

 private:
  // What an owner holds outside itself, let go as it is erased: its timers,
  // its recovery window place, its share of the gauges (stuck branches, in
  // doubt) and of the memory budget. The one place for both ways an owner
  // goes (evicted, or its log shard dropped).
  void Release(size_t s, Owner& o) {
    for (auto& [b, id] : o.retry_timers) clock_.Cancel(id);
    for (TimerId id : o.deadline_timers) clock_.Cancel(id);
    if (o.recovery_place != nullptr) {
      std::exchange(o.recovery_place, nullptr)->ReleasePlace();
    }
    stuck_ -= std::exchange(o.stuck, 0);
    Unscan(o);
    if (o.in_doubt_since != 0) {
      std::lock_guard<std::mutex> lock(doubt_mu_);
      in_doubt_.erase(in_doubt_.find(std::exchange(o.in_doubt_since, 0)));
    }
    if (o.unfinished_since != 0) {
      Shard::Unfinished& u = *shards_[s].unfinished;
      std::lock_guard<std::mutex> lock(u.mu);
      u.since.erase(u.since.find(std::exchange(o.unfinished_since, 0)));
    }
    budget_->Charge(-std::exchange(o.charged, 0));
  }

  // Drops the owners of log shard k made under `epoch` or before (one the
  // shard was adopted again for since is not touched).
  void DropOwnersOf(size_t s, uint32_t k, uint64_t epoch,
                    const absl::Status& why) {
    auto& owners = shards_[s].owners;
    for (auto it = owners.begin(); it != owners.end();) {
      if (log_.ShardOf(it->first) != k || it->second->epoch > epoch) {
        ++it;
        continue;
      }
      Owner& o = *it->second;
      Release(s, o);
      auto callers = std::move(o.callers);
      it = owners.erase(it);
      for (auto& [rid, done] : callers) {
        done(absl::UnavailableError(
            absl::StrCat("the shard was lost: ", why.message())));
      }
    }
  }

  // The current recovery of gid's shard of the log.
  Recovery& RecoveryOf(const std::string& gid) {
    return *log_shards_[log_.ShardOf(gid)].recovery.load();
  }

  size_t ShardOf(const std::string& gid) const {
    return std::hash<std::string>{}(gid) % shards_.size();
  }

  Owner* Find(size_t s, const std::string& gid) {
    auto it = shards_[s].owners.find(gid);
    return it == shards_[s].owners.end() ? nullptr : it->second.get();
  }

  // The owner of `gid`, loading it from the WAL if needed (and resuming it if
  // unfinished). nullptr: the WAL never held it. `summary` is set instead
  // when only a compact entry is left.
  // `blind`: for a creating request, the log may answer NOT_FOUND without
  // reading (log.h ReadForCreate); *blind says whether it did.
  absl::StatusOr<Owner*> Load(size_t s, const std::string& gid,
                              wal::TxnSummary* compact,
                              const wal::TxnSummary** summary,
                              bool* blind = nullptr) {
    if (Owner* o = Find(s, gid)) return o;
    if (LogShardLost(gid)) {
      return absl::UnavailableError(absl::StrCat(
          "gid ", gid, ": its shard is not this node's (lost to another)"));
    }
    // A gid the WAL does not hold may still be in the recovery scan if the
    // scan's snapshot is taken after this read (a request creating it
    // registers it first); once the snapshot is taken it cannot. Looked at
    // before the read: noting every new gid for the whole recovery would
    // grow without bound under load.
    Recovery& recovery = RecoveryOf(gid);
    const bool before_snapshot = !recovery.SnapshotTaken();
    absl::StatusOr<wal::TxnLog> read =
        blind != nullptr ? log_.ReadForCreate(gid, blind) : log_.Read(gid);
    if (read.status().code() == absl::StatusCode::kNotFound) {
      if (before_snapshot) recovery.NoteLoaded(gid);
      return static_cast<Owner*>(nullptr);
    }
    if (!read.ok()) {
      if (absl::IsDataLoss(read.status())) observer_->OnFatal(read.status());
      return read.status();
    }
    recovery.NoteLoaded(gid);
    if (read->summary.compacted) {
      *compact = read->summary;
      *summary = compact;
      return static_cast<Owner*>(nullptr);
    }
    absl::StatusOr<Owner*> adopted = Adopt(s, std::move(*read));
    if (absl::IsDataLoss(adopted.status()))
      observer_->OnFatal(adopted.status());
    return adopted;
  }

  // Rebuilds a transaction from its records; resumes it if unfinished.
  absl::StatusOr<Owner*> Adopt(size_t s, wal::TxnLog txn_log) {
    const std::string gid = txn_log.summary.gid;
    auto owner = std::make_unique<Owner>();
    owner->epoch = EpochOf(gid);
    for (const auto& rec : txn_log.records) {
      core::StepResult r = core::Step(owner->txn, core::ReplayEvent{&rec},
                                      clock_.WallMs(), options_.core);
      if (!r.status.ok()) {
        return absl::DataLossError(absl::StrCat(
            "gid ", gid,
            ": its records do not replay: ", std::string(r.status.message())));
      }
    }
    Owner* o = owner.get();
    UpdateGauges(s, *o);
    Recharge(*o);
    shards_[s].owners[gid] = std::move(owner);
    if (!wal::IsFinal(o->txn.state)) {
      o->loading = true;
      absl::Status st = Apply(s, gid, core::ResumeEvent{EpochOf(gid)});
      o = Find(s, gid);
      if (o != nullptr) o->loading = false;
      if (!st.ok()) return st;
    }
    return o;
  }

  // One transaction the recovery scan found, resumed on its shard while it
  // holds a place of the recovery window.
  void ResumeScanned(Recovery* from, std::shared_ptr<wal::TxnLog> scanned) {
    std::string gid = scanned->summary.gid;
    OnShard(gid, [gid, scanned, from](Impl& self, size_t s) {
      // Loaded from the WAL by a request since the scan: its owner (or, if
      // it finished and went, the WAL) is newer than the scanned records.
      // A scan of an adoption since lost is moot too.
      Recovery& recovery = *from;
      const bool moot = recovery.Moot(gid);
      if (self.LogShardLost(gid) || &self.RecoveryOf(gid) != from) {
        recovery.ReleasePlace();  // not this scan's to resume any more
        return;
      }
      if (moot || self.Find(s, gid) != nullptr) {
        self.CountScanned(self.Find(s, gid));  // found, and driven already
        recovery.ReleasePlace();
        return;
      }
      absl::StatusOr<Owner*> o = self.Adopt(s, std::move(*scanned));
      if (!o.ok()) {
        // Its records do not replay (DATA_LOSS): it cannot be driven.
        self.observer_->OnFatal(absl::Status(
            o.status().code(),
            absl::StrCat("recovery of gid ", gid, ": ", o.status().message())));
        recovery.ReleasePlace();
        return;
      }
      Owner* owner = self.Find(s, gid);
      self.CountScanned(owner);
      if (owner != nullptr && HoldsRecoveryPlace(owner->txn)) {
        owner->recovery_place = &recovery;
      } else {
        recovery.ReleasePlace();
      }
      self.MaybeEvict(s, gid);  // it may have finished
    });
  }

  // `o` leaves the scanned ones still driven (it finished, or goes).
  void Unscan(Owner& o) {
    if (std::exchange(o.scanned, false)) --scanned_unfinished_;
  }

  // A transaction a scan found, now `o` (null: it finished and went).
  void CountScanned(Owner* o) {
    ++scanned_found_;
    if (o != nullptr && !o->scanned && !wal::IsFinal(o->txn.state)) {
      o->scanned = true;
      ++scanned_unfinished_;
    }
  }

  // Loads `gid` from the WAL (resuming it) after 100-300 ms, unless
  // something loaded it meanwhile. A read that fails (the log unreachable
  // for a while) is tried again, the wait doubling up to 5-15 s, for as
  // long as the gid's shard is this node's: nothing else would load the
  // transaction before a request for it, and until then its branches'
  // reservations would be held with no one driving it. The first failure
  // raises an alert; DATA_LOSS stops the process (Load).
  // `scanned`: the dropped owner counted in scanned_unfinished_, a count the
  // loaded owner takes over (or that ends here, if it is final or gone).
  void ScheduleReload(const std::string& gid, bool scanned, int attempt = 0) {
    std::weak_ptr<Impl> weak = weak_from_this();
    const int64_t base =
        std::min<int64_t>(int64_t{100} << std::min(attempt, 6), 5'000);
    const int64_t delay =
        base + static_cast<int64_t>(2.0 * base * options_.uniform01());
    clock_.Schedule(delay, [weak, gid, scanned, attempt] {
      if (auto self = weak.lock()) {
        self->OnShard(gid, [gid, scanned, attempt](Impl& me, size_t sh) {
          wal::TxnSummary compact;
          const wal::TxnSummary* summary = nullptr;
          absl::StatusOr<Owner*> o = me.Load(sh, gid, &compact, &summary);
          if (!o.ok() && !absl::IsDataLoss(o.status()) &&
              !me.LogShardLost(gid)) {
            if (attempt == 0) {
              me.observer_->OnSignal(
                  gid, "",
                  core::SignalEffect{
                      core::SignalKind::kAlert, -1,
                      absl::StrCat("reloading after a refused WAL append: ",
                                   o.status().ToString(),
                                   " (tried again until it loads)")});
            }
            me.ScheduleReload(gid, scanned, attempt + 1);
            return;
          }
          if (scanned) {
            Owner* now = o.ok() ? *o : nullptr;
            if (now != nullptr && !now->scanned &&
                !wal::IsFinal(now->txn.state)) {
              now->scanned = true;
            } else {
              --me.scanned_unfinished_;
            }
          }
          if (o.ok() && *o != nullptr) me.MaybeEvict(sh, gid);
        });
      }
    });
  }

  // Whether a resumed transaction still counts against the recovery window:
  // until its decision is durable. One waiting for an approval makes no
  // calls and may wait for hours (its approval deadline): it does not hold
  // up the others.
  static bool HoldsRecoveryPlace(const core::Txn& t) {
    return !t.poisoned && !t.decision_durable && !wal::IsFinal(t.state) &&
           t.state != wal::TxnState::kAwaitingApproval;
  }

  // An owner holding a recovery place gives it up once its decision is
  // durable (not merely made: while the WAL is slow, decided transactions
  // would otherwise let more in, each with appends to queue), or once it is
  // dropped.
  void MaybeReleaseRecoveryPlace(Owner& o) {
    if (o.recovery_place == nullptr || HoldsRecoveryPlace(o.txn)) return;
    std::exchange(o.recovery_place, nullptr)->ReleasePlace();
  }

  void OnRequest(size_t s, const std::string& gid, bool creates,
                 const std::function<Event(RequestId)>& make, ReplyDone done) {
    shards_[s].pinned = gid;
    HandleRequest(s, gid, creates, make, std::move(done));
    shards_[s].pinned.clear();
    MaybeEvict(s, gid);
  }

  void HandleRequest(size_t s, const std::string& gid, bool creates,
                     const std::function<Event(RequestId)>& make,
                     ReplyDone done) {
    const RequestId rid = next_request_++;
    HandleEvent(s, gid, creates, make(rid), rid, std::move(done),
                /*may_read_blind=*/true);
  }

  void HandleEvent(size_t s, const std::string& gid, bool creates, Event event,
                   RequestId rid, ReplyDone done, bool may_read_blind) {
    if (absl::Status st = Admissible(gid, event); !st.ok()) return done(st);
    // The room admitted stays reserved until this event's own charges are
    // in (the owner, the registration on its way to the WAL: both made on
    // this thread before this returns, and taken from it), so admissions on
    // other shards cannot pass on it meanwhile.
    const int64_t need = AdmissionNeed(event);
    MemoryBudget::Reservation reserved(*budget_, static_cast<uint64_t>(need));
    if (!reserved.ok()) return done(NoRoom(need));
    wal::TxnSummary compact;
    const wal::TxnSummary* summary = nullptr;
    const bool registers = std::holds_alternative<core::SubmitEvent>(event) ||
                           std::holds_alternative<core::BeginEvent>(event);
    bool blind = false;
    absl::StatusOr<Owner*> o =
        Load(s, gid, &compact, &summary,
             creates && registers && may_read_blind ? &blind : nullptr);
    if (!o.ok()) return done(o.status());
    if (summary != nullptr) {
      // Only the compact entry is left (DESIGN.md section 9).
      if (auto* sub = std::get_if<core::SubmitEvent>(&event)) {
        const auto& sp = sub->spec;
        std::vector<identity::BranchContent> content;
        for (const auto& b : sp.branches) {
          content.push_back({b.branch_id, b.participant, b.action, b.payload});
        }
        if (identity::SubmissionHash(sp.revision, sp.approval_gate,
                                     std::move(content)) ==
            summary->content_hash) {
          return done(DriverReply{SummaryView(*summary), true, std::nullopt});
        }
        return done(absl::AlreadyExistsError(absl::StrCat(
            "gid ", gid, " was submitted with other content; use a new gid")));
      }
      if (std::holds_alternative<core::BeginEvent>(event)) {
        return done(absl::AlreadyExistsError(
            absl::StrCat("gid ", gid, " is taken; use a new gid")));
      }
      return done(absl::FailedPreconditionError(absl::StrCat(
          "gid ", gid, " finished long ago; only its summary is kept")));
    }
    Owner* owner = *o;
    if (owner == nullptr) {
      if (!creates) {
        return done(absl::NotFoundError(absl::StrCat("no transaction ", gid)));
      }
      auto fresh = std::make_unique<Owner>();
      fresh->epoch = EpochOf(gid);
      if (blind) {
        // Kept before the registration's append can end (Unblind).
        fresh->blind =
            std::make_unique<Owner::Blind>(Owner::Blind{std::move(event), rid});
      }
      owner = fresh.get();
      shards_[s].owners[gid] = std::move(fresh);
    }
    owner->callers[rid] = std::move(done);
    // Step reads the event and is done with it before anything may evict
    // the owner that keeps it.
    const Event& applied =
        owner->blind != nullptr ? owner->blind->event : event;
    absl::Status st = Apply(s, gid, applied);
    if (!st.ok()) {
      if (Owner* still = Find(s, gid)) {
        auto it = still->callers.find(rid);
        if (it != still->callers.end()) {
          ReplyDone d = std::move(it->second);
          still->callers.erase(it);
          MaybeEvict(s, gid);
          d(st);
        }
      }
    }
  }

  // The admission rules (core/admission.h), with what the driver knows:
  // the clock, the WAL's deduplication horizon, the configured participants.
  absl::Status Admissible(const std::string& gid, const Event& event) const {
    core::AdmissionContext c;
    c.now_ms = clock_.WallMs();
    c.dedup_horizon_ms = log_.DedupHorizonMs(log_.ShardOf(gid));
    c.max_clock_skew_ms = options_.max_clock_skew_ms;
    c.participant_known = options_.participant_known;
    c.approval_gate_enabled = options_.approval_gate_enabled;
    if (const auto* e = std::get_if<core::SubmitEvent>(&event)) {
      return core::AdmitSubmit(e->spec, options_.core, c);
    }
    if (const auto* e = std::get_if<core::BeginEvent>(&event)) {
      return core::AdmitBegin(e->spec, options_.core, c);
    }
    if (const auto* e = std::get_if<core::TryEvent>(&event)) {
      return core::AdmitBranch(e->branch, options_.core, c);
    }
    return absl::OkStatus();
  }

  // What a new transaction, or an interactive Try's branch, must find room
  // for in the memory budget (DriverOptions::max_in_flight_bytes) to be
  // admitted; 0 for every other event.
  static int64_t AdmissionNeed(const Event& event) {
    std::vector<const wal::BranchSpec*> branches;
    if (const auto* e = std::get_if<core::SubmitEvent>(&event)) {
      for (const auto& b : e->spec.branches) branches.push_back(&b);
    } else if (const auto* e = std::get_if<core::TryEvent>(&event)) {
      branches.push_back(&e->branch);
    } else if (!std::holds_alternative<core::BeginEvent>(event)) {
      return 0;
    }
    return AdmissionBytes(branches);
  }

  absl::Status NoRoom(int64_t need) const {
    if (need > static_cast<int64_t>(budget_->admit_limit())) {
      // Retrying cannot help: say so.
      return absl::ResourceExhaustedError(absl::StrCat(
          "this one needs about ", need >> 10,
          " KiB of transaction state, more than tccd admits at all (",
          budget_->admit_limit() >> 10,
          " KiB: 15/16 of limits.max_in_flight_bytes, ", budget_->limit() >> 20,
          " MiB): nothing was written; it fits only with a larger limit"));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("tccd holds ", budget_->used() >> 20,
                     " MiB of transaction state "
                     "(limits.max_in_flight_bytes ",
                     budget_->limit() >> 20,
                     " MiB); this "
                     "one needs about ",
                     need >> 10,
                     " KiB more: nothing was written, "
                     "retry later (same gid)"));
  }

  // Brings the memory budget up to date with what the owner holds, after
  // keeping its payloads in the WAL only when the budget is pressed (never
  // while OPEN, when a Commit hashes them, nor before the records holding
  // them are durable).
  void Recharge(Owner& o) {
    const auto adding = [](const core::PendingPersist& p) {
      return p.purpose == core::PersistPurpose::kBranchAdded;
    };
    if (budget_->Pressured() && !o.payloads_in_wal &&
        o.txn.state != wal::TxnState::kOpen && o.txn.registered_durable &&
        std::none_of(o.txn.pending.begin(), o.txn.pending.end(), adding)) {
      int64_t payload = 0;
      for (const auto& br : o.txn.branches) payload += br.spec.payload.size();
      if (payload >= 1024) {
        for (auto& br : o.txn.branches) {
          std::string().swap(br.spec.payload);
        }
        o.payloads_in_wal = true;
      }
    }
    o.read_back.reset();
    const int64_t n = TxnBytes(o.txn);
    budget_->Charge(n - o.charged);
    o.charged = n;
  }

  // Branch `i`'s spec with its payload for a call, when the owner keeps
  // its payloads in the WAL only (Recharge): read back (once a step). They
  // go back into the owner if they fit with the budget staying below the
  // pressure mark (the backlog has drained: its later calls need no read);
  // else the call gets a copy of its own (`read_back`) and the owner stays
  // without them. Null: use the owner's spec.
  absl::StatusOr<std::shared_ptr<const wal::BranchSpec>> PayloadForCall(
      const std::string& gid, Owner& o, size_t i) {
    if (o.read_back == nullptr) {
      absl::StatusOr<wal::TxnLog> read = log_.Read(gid);
      if (!read.ok()) return read.status();
      auto specs = std::make_shared<std::vector<wal::BranchSpec>>();
      for (auto& rec : read->records) {
        if (auto* reg = std::get_if<wal::Registered>(&rec)) {
          for (auto& b : reg->branches) specs->push_back(std::move(b));
        } else if (auto* add = std::get_if<wal::BranchAdded>(&rec)) {
          specs->push_back(std::move(add->branch));
        }
      }
      o.read_back = std::move(specs);
    }
    int64_t bytes = 0;
    for (const auto& b : *o.read_back) bytes += b.payload.size();
    const int64_t half = static_cast<int64_t>(budget_->limit() / 2);
    if (budget_->used() + bytes <= half &&
        budget_->TryCharge(static_cast<uint64_t>(bytes))) {
      for (auto& b : *o.read_back) {
        const int k = core::FindBranch(o.txn, b.branch_id);
        if (k >= 0) o.txn.branches[k].spec.payload = std::move(b.payload);
      }
      o.read_back.reset();  // emptied: the owner has them
      o.charged += bytes;   // what TxnBytes now counts more
      o.payloads_in_wal = false;
      return nullptr;
    }
    const wal::BranchSpec& mine = o.txn.branches[i].spec;
    for (const auto& b : *o.read_back) {
      if (b.branch_id != mine.branch_id) continue;
      auto spec = std::make_shared<wal::BranchSpec>(mine);
      spec->payload = b.payload;
      return std::shared_ptr<const wal::BranchSpec>(std::move(spec));
    }
    return absl::DataLossError(absl::StrCat("branch ", mine.branch_id,
                                            " is not among its WAL records"));
  }

  // Steps one event for `gid` and runs its effects.
  absl::Status Apply(size_t s, const std::string& gid, const Event& event) {
    Owner* o = Find(s, gid);
    if (o == nullptr) return absl::NotFoundError("owner gone");
    core::StepResult r =
        core::Step(o->txn, event, clock_.WallMs(), options_.core);
    if (!r.status.ok()) {
      // A stopped owner refuses every event; the completion of its last
      // append in flight is the one that lets it go (and be reloaded).
      MaybeEvict(s, gid);
      return r.status;
    }
    // One WAL append per step: the records of every persist effect of the
    // step go, in order, with the step's first persist (durable if any of
    // them is). Writing a record earlier than its place among the other
    // effects only makes the write-ahead rule hold sooner; each persist's
    // completion is still fed to the core, in order.
    std::vector<bool> merged(r.effects.size(), false);
    for (size_t i = 0; i < r.effects.size(); ++i) {
      if (merged[i]) continue;
      Effect& eff = r.effects[i];
      // Crash drills: `crash` kills the process between two effects; `error`
      // halts this driver there (in-process tests then drop it, as a crash).
      if (!failpoint::Eval("driver.before_effect").ok()) {
        halted_ = true;
        return absl::OkStatus();
      }
      if (auto* p = std::get_if<core::PersistEffect>(&eff)) {
        std::vector<PersistSeq> seqs{
            {p->seq, p->durability == wal::Durability::kDurable}};
        for (size_t j = i + 1; j < r.effects.size(); ++j) {
          auto* later = std::get_if<core::PersistEffect>(&r.effects[j]);
          if (later == nullptr) continue;
          merged[j] = true;
          const bool durable = later->durability == wal::Durability::kDurable;
          seqs.push_back({later->seq, durable});
          if (durable) p->durability = wal::Durability::kDurable;
          for (auto& rec : later->records) {
            p->records.push_back(std::move(rec));
          }
        }
        observer_->OnEffect(gid, eff);
        RunPersist(gid, *o, *p, std::move(seqs));
        continue;
      }
      Run(gid, *o, eff);
    }
    if (!r.effects.empty()) observer_->OnStepped(gid, o->txn);
    UpdateGauges(s, *o);
    Recharge(*o);
    MaybeReleaseRecoveryPlace(*o);
    MaybeEvict(s, gid);
    return absl::OkStatus();
  }

  // Steps a non-request event; its refusal is a bug in the driver or a
  // stale notice, reported as an alert.
  void Feed(size_t s, const std::string& gid, const Event& event) {
    const Owner* o = Find(s, gid);
    if (o == nullptr) return;  // gone (finished or dropped)
    // Its log shard was dropped (or adopted again since it was made): its
    // drop (DropOwnersOf) is queued behind this event, and until then it
    // steps no more, so nothing more is sent or written for it.
    const LogShardSlot& slot = log_shards_[log_.ShardOf(gid)];
    if (!slot.owned.load() || slot.epoch.load() != o->epoch) return;
    absl::Status st = Apply(s, gid, event);
    if (!st.ok()) {
      observer_->OnSignal(
          gid, "",
          core::SignalEffect{core::SignalKind::kAlert, -1,
                             absl::StrCat("event refused: ", st.ToString())});
    }
  }

  void MaybeEvict(size_t s, const std::string& gid) {
    if (shards_[s].pinned == gid) return;
    Owner* o = Find(s, gid);
    if (o == nullptr || o->loading) return;
    const core::Txn& t = o->txn;
    const bool done = o->discard || t.poisoned || !t.exists ||
                      (wal::IsFinal(t.state) && t.waiters.empty() &&
                       t.pending.empty() && o->callers.empty());
    if (!done) return;
    // Flag first, then look: the last write's completion decrements, then
    // looks at the flag, so one of the two sees the other.
    o->evict_wanted->store(true);
    if (o->unwritten->load() > 0) return;
    // One a recovery scan found and reloaded keeps its count: the reload
    // hands it to the owner it loads.
    const bool reload = o->reload_when_dropped;
    const bool scanned = reload && std::exchange(o->scanned, false);
    Release(s, *o);
    if (reload) ScheduleReload(gid, scanned);
    // Callers still waiting on a dropped owner learn it.
    auto callers = std::move(o->callers);
    shards_[s].owners.erase(gid);
    for (auto& [rid, d] : callers) {
      d(absl::UnavailableError("the transaction's owner stopped"));
    }
  }

  // Brings the gauges up to date with the owner: its STUCK flags, whether
  // it is in doubt (no decision yet, and a Try's outcome unknown after a
  // failed attempt: tccd is asking, DESIGN.md section 1), and whether it is
  // unfinished (for the oldest one's age).
  void UpdateGauges(size_t s, Owner& o) {
    int n = 0;
    bool doubt = false;
    for (const auto& br : o.txn.branches) {
      n += br.stuck ? 1 : 0;
      doubt = doubt || (br.try_phase.state == core::PhaseState::kUnknown &&
                        br.failures > 0);
    }
    doubt = doubt && o.txn.decision == core::Decision::kNone &&
            !wal::IsFinal(o.txn.state);
    if (n != o.stuck) {
      stuck_ += n - o.stuck;
      o.stuck = n;
    }
    if (doubt != (o.in_doubt_since != 0)) {
      std::lock_guard<std::mutex> lock(doubt_mu_);
      if (doubt) {
        o.in_doubt_since = std::max<int64_t>(1, clock_.WallMs());
        in_doubt_.insert(o.in_doubt_since);
      } else {
        in_doubt_.erase(in_doubt_.find(o.in_doubt_since));
        o.in_doubt_since = 0;
      }
    }
    const bool unfinished = o.txn.exists && !wal::IsFinal(o.txn.state);
    if (unfinished != (o.unfinished_since != 0)) {
      Shard::Unfinished& u = *shards_[s].unfinished;
      std::lock_guard<std::mutex> lock(u.mu);
      if (unfinished) {
        o.unfinished_since = std::max<int64_t>(1, o.txn.registered_at_ms);
        u.since.insert(o.unfinished_since);
      } else {
        u.since.erase(u.since.find(o.unfinished_since));
        o.unfinished_since = 0;
      }
    }
  }

  std::string BranchId(const Owner& o, int b) const {
    if (b < 0 || static_cast<size_t>(b) >= o.txn.branches.size()) return "";
    return o.txn.branches[b].spec.branch_id;
  }

  // A persist effect's sequence number, and whether it asked for durability.
  struct PersistSeq {
    uint64_t seq;
    bool durable;
  };

  // Appends `p`'s records, which carry those of the persists `seqs` (in
  // order); the core hears of each: DurableEvent for the durable ones once
  // the append is durable, PersistFailedEvent for every one if it failed.
  void RunPersist(const std::string& gid, Owner& o, core::PersistEffect& p,
                  std::vector<PersistSeq> seqs) {
    std::weak_ptr<Impl> weak = weak_from_this();
    const bool durable = p.durability == wal::Durability::kDurable;
    // The records are memory until the WAL has them.
    const int64_t bytes = RecordBytes(p.records);
    budget_->Charge(bytes);
    wal::AppendRequest req{gid, std::move(p.records), p.durability};
    o.unwritten->fetch_add(1);
    const int64_t start = clock_.MonotonicMs();
    log_.Append(
        std::move(req), [weak, gid, durable, seqs = std::move(seqs),
                         unwritten = o.unwritten, evict_wanted = o.evict_wanted,
                         budget = budget_, bytes, start](absl::Status st) {
          budget->Charge(-bytes);
          const bool last = unwritten->fetch_sub(1) == 1;
          // A buffered write that succeeded changes nothing for the core: no
          // task (and no thread hand-off) for it, unless the owner only waited
          // for it to go.
          if (st.ok() && !durable) {
            if (!last || !evict_wanted->load()) return;
            if (auto self = weak.lock()) {
              self->OnShard(
                  gid, [gid](Impl& me, size_t sh) { me.MaybeEvict(sh, gid); });
            }
            return;
          }
          auto self = weak.lock();
          if (!self) return;
          if (durable && st.ok()) {
            const int64_t now = self->clock_.MonotonicMs();
            self->wal_durable_.Add((now - start) * 1000, now);
          }
          self->OnShard(
              gid,
              [gid, seqs, st, unwritten](Impl& me, size_t sh) {
                // Only the owner that appended hears of it: the counter
                // above fell before this task ran, so that owner may have
                // been dropped meanwhile and the gid loaded again, and a
                // new owner numbers its persists afresh (a stale
                // DurableEvent could ack one of its own). A new owner read
                // the log after this append ended, so it has what it wrote.
                Owner* ow = me.Find(sh, gid);
                if (ow == nullptr || ow->unwritten != unwritten) return;
                if (ow->blind != nullptr) {
                  // Its first append, the registration, has ended.
                  if (st.code() == absl::StatusCode::kAlreadyExists ||
                      st.code() == absl::StatusCode::kAborted) {
                    me.Unblind(sh, gid);
                    return;
                  }
                  ow->blind.reset();
                }
                // Nothing was written: for want of room, or (ABORTED) the
                // log's view of the gid was stale; once dropped it is
                // loaded again from the log and resumed.
                if (st.code() == absl::StatusCode::kResourceExhausted ||
                    st.code() == absl::StatusCode::kAborted) {
                  ow->reload_when_dropped = true;
                }
                for (const PersistSeq& p : seqs) {
                  if (!st.ok()) {
                    me.Feed(sh, gid, core::PersistFailedEvent{p.seq, st});
                  } else if (p.durable) {
                    me.Feed(sh, gid, core::DurableEvent{p.seq});
                  }
                }
              },
              /*here=*/true);
        });
  }

  // A blind create's registration was refused: the gid existed after all
  // (in etcd, written by an earlier request or another node) and nothing of
  // this owner was written. The owner goes (its other callers, duplicates
  // that joined it, hear UNAVAILABLE and retry) and its request is handled
  // again, reading the log: its caller gets the answer the existing
  // transaction gives (a duplicate, ALREADY_EXISTS, ...).
  void Unblind(size_t s, const std::string& gid) {
    Owner* o = Find(s, gid);
    std::unique_ptr<Owner::Blind> blind = std::move(o->blind);
    ReplyDone done;
    if (auto it = o->callers.find(blind->rid); it != o->callers.end()) {
      done = std::move(it->second);
      o->callers.erase(it);
    }
    o->discard = true;
    // Loaded again once it goes, whatever happens to the request: a blind
    // read marked the gid loaded for a recovery scan that may not have
    // resumed it yet.
    o->reload_when_dropped = true;
    MaybeEvict(s, gid);
    if (!done) return;
    if (Find(s, gid) != nullptr) {
      // Still writing something of it: not handled again on top of it.
      return done(absl::UnavailableError(absl::StrCat(
          "gid ", gid, " exists already; retry (same gid) for its answer")));
    }
    shards_[s].pinned = gid;
    HandleEvent(s, gid, /*creates=*/true, std::move(blind->event), blind->rid,
                std::move(done), /*may_read_blind=*/false);
    shards_[s].pinned.clear();
    MaybeEvict(s, gid);
  }

  void Run(const std::string& gid, Owner& o, Effect& eff) {
    observer_->OnEffect(gid, eff);
    std::weak_ptr<Impl> weak = weak_from_this();
    if (auto* p = std::get_if<core::PersistEffect>(&eff)) {
      RunPersist(gid, o, *p,
                 {{p->seq, p->durability == wal::Durability::kDurable}});
      return;
    }
    if (auto* c = std::get_if<core::CallEffect>(&eff)) {
      SendCall(gid, o, *c, /*resumed=*/false, /*as_probe=*/false);
      return;
    }
    if (auto* q = std::get_if<core::QueryEffect>(&eff)) {
      const wal::BranchSpec& spec = o.txn.branches[q->branch].spec;
      calls_->Query(
          QueryCall{gid, o.txn.created_at_ms, spec.branch_id, spec.participant},
          *q);
      return;
    }
    if (auto* r = std::get_if<core::ScheduleRetryEffect>(&eff)) {
      const int64_t delay = BackoffDelayMs(options_.backoff, r->failures,
                                           r->slowest, options_.uniform01());
      auto it = o.retry_timers.find(r->branch);
      if (it != o.retry_timers.end()) clock_.Cancel(it->second);
      const uint32_t b = r->branch;
      o.retry_timers[b] = clock_.Schedule(delay, [weak, gid, b] {
        if (auto self = weak.lock()) {
          self->OnShard(gid, [gid, b](Impl& me, size_t sh) {
            if (Owner* ow = me.Find(sh, gid)) ow->retry_timers.erase(b);
            me.Feed(sh, gid, core::RetryDueEvent{b});
          });
        }
      });
      return;
    }
    if (auto* d = std::get_if<core::ArmDeadlineEffect>(&eff)) {
      const int64_t delay = std::max<int64_t>(0, d->at_ms - clock_.WallMs());
      const core::DeadlineKind kind = d->kind;
      o.deadline_timers.push_back(clock_.Schedule(delay, [weak, gid, kind] {
        if (auto self = weak.lock()) {
          self->OnShard(gid, [gid, kind](Impl& me, size_t sh) {
            me.Feed(sh, gid, core::DeadlineEvent{kind});
          });
        }
      }));
      return;
    }
    if (auto* a = std::get_if<core::AnswerEffect>(&eff)) {
      auto it = o.callers.find(a->request);
      if (it == o.callers.end()) return;
      ReplyDone done = std::move(it->second);
      o.callers.erase(it);
      if (!a->status.ok()) return done(a->status);
      DriverReply reply{core::MakeView(o.txn), a->duplicate, std::nullopt};
      if (a->branch >= 0) {
        reply.branch = core::MakeBranchView(o.txn.branches[a->branch]);
      }
      done(std::move(reply));
      return;
    }
    if (auto* sig = std::get_if<core::SignalEffect>(&eff)) {
      observer_->OnSignal(gid, BranchId(o, sig->branch), *sig);
      MaybeReleaseRecoveryPlace(o);
      if (sig->kind == core::SignalKind::kFinished) {
        Unscan(o);
        observer_->OnFinished(gid, o.txn.state,
                              clock_.WallMs() - o.txn.registered_at_ms);
      }
      return;
    }
  }

  // Whether `c` is still the call its branch waits for.
  static bool StillCalling(const core::Txn& t, const core::CallEffect& c) {
    if (c.branch >= t.branches.size()) return false;
    const core::BranchRuntime& br = t.branches[c.branch];
    const core::PhaseProgress& phase =
        c.phase == wal::Phase::kTry ? br.try_phase : br.second_phase;
    return br.op == core::BranchOp::kCalling && br.op_phase == c.phase &&
           br.op_attempt == c.attempt &&
           phase.state != core::PhaseState::kSucceeded;
  }

  // A Try, Confirm or Cancel the core asked for: to participant_calls,
  // which sends it now or later (breaker, memory), building it from the
  // owner when it goes (its payload read back from the WAL if kept there).
  void SendCall(const std::string& gid, Owner& o, const core::CallEffect& c,
                bool resumed, bool as_probe) {
    // Recovery drills: `driver.before_try_send=error` keeps every Try in
    // this process (as if it had crashed right after the registration was
    // durable); `crash` kills it there. Off unless TCC_FAILPOINTS names it.
    if (!resumed && c.phase == wal::Phase::kTry &&
        !failpoint::Eval("driver.before_try_send").ok()) {
      return;
    }
    const core::BranchRuntime& br = o.txn.branches[c.branch];
    const std::string participant = br.spec.participant;
    auto build = [&]() -> absl::StatusOr<BranchCall> {
      // Cluster mode: past its lease's trust a node sends nothing (another
      // node may own the shard by now): not sent (driver.h says what
      // follows).
      if (options_.may_call && !options_.may_call(gid)) {
        return absl::UnavailableError(kNotSentMessage);
      }
      BranchCall call;
      call.gid = gid;
      call.created_at_ms = o.txn.created_at_ms;
      call.spec = &o.txn.branches[c.branch].spec;
      if (o.payloads_in_wal) {
        auto spec = PayloadForCall(gid, o, c.branch);
        if (!spec.ok()) {
          return absl::UnavailableError(
              absl::StrCat("the payload could not be read back from the WAL: ",
                           spec.status().ToString()));
        }
        if (*spec != nullptr) {
          call.read_back = *std::move(spec);
          call.spec = call.read_back.get();
        }
      }
      call.phase = c.phase;
      call.revision = o.txn.revision;
      call.attempt = c.attempt;
      call.owner_epoch = c.owner_epoch;
      call.try_deadline_ms = c.try_deadline_ms;
      return call;
    };
    if (resumed) {
      calls_->SendAdmitted(gid, participant, c, as_probe, br.payload_size,
                           build);
    } else {
      calls_->Send(gid, participant, c, br.payload_size, build);
    }
  }

  // A call that waited (the breaker, the memory budget) may go: if its
  // branch still waits for it. Held calls outlive transactions: it may have
  // gone, or moved on (a branch resolved by hand, a newer attempt).
  void Resume(const std::string& gid, const core::CallEffect& c,
              const std::string& participant, bool as_probe) {
    OnShard(gid, [gid, c, participant, as_probe](Impl& me, size_t sh) {
      Owner* ow = me.Find(sh, gid);
      if (ow == nullptr || !StillCalling(ow->txn, c)) {
        me.calls_->Abandon(participant, as_probe);
        return;
      }
      me.SendCall(gid, *ow, c, /*resumed=*/true, as_probe);
      me.Recharge(*ow);  // lets go of what the call read back
    });
  }

  DriverOptions options_;
  Clock& clock_;
  ParticipantTransport& transport_;
  wal::Log& log_;
  DriverObserver no_observer_;
  DriverObserver* observer_;
  // Shared with WAL completions, which may run after the driver went.
  std::shared_ptr<MemoryBudget> budget_;
  std::unique_ptr<ParticipantCalls> calls_;  // made by Init
  // Every recovery made (Init's, one per shard of the log, then one per
  // adoption): owners may hold a place of any.
  std::mutex recoveries_mu_;
  std::vector<std::unique_ptr<Recovery>> recoveries_;
  size_t window_ = 1;  // each recovery's share of options_.recovery_window
  bool may_wait_ = false;
  // Each shard of the log: whether it is this driver's to drive, its owner
  // epoch, and its current recovery (made by Init).
  struct LogShardSlot {
    std::atomic<bool> owned{false};
    std::atomic<uint64_t> epoch{0};
    std::atomic<Recovery*> recovery{nullptr};
  };
  std::unique_ptr<LogShardSlot[]> log_shards_;
  std::mutex adopt_mu_;  // one AdoptShard at a time
  Ewma shard_wait_;      // a request's wait for its shard
  Ewma wal_durable_;     // a durable append's wait for the WAL
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  std::vector<Shard> shards_;
  std::atomic<bool> halted_{false};
  std::atomic<int64_t> stuck_{0};  // the owners' Owner::stuck, summed
  // Recovery's progress (Driver::RecoveryProgress): resumed by a scan, and
  // of them the owners with Owner::scanned set.
  std::atomic<uint64_t> scanned_found_{0};
  std::atomic<int64_t> scanned_unfinished_{0};
  std::mutex doubt_mu_;
  std::multiset<int64_t> in_doubt_;  // Owner::in_doubt_since of each
  std::atomic<RequestId> next_request_{1};
};

Driver::Driver(DriverOptions options, std::vector<Executor*> shards,
               Clock& clock, ParticipantTransport& transport, wal::Log& log,
               DriverObserver* observer)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(shards), clock,
                                   transport, log, observer)) {
  impl_->Init();
}

Driver::~Driver() { impl_->StopRecovery(); }

void Driver::StopRecovery() { impl_->StopRecovery(); }

void Driver::DropLogShard(uint32_t log_shard, const absl::Status& why) {
  impl_->DropLogShard(log_shard, why);
}

absl::Status Driver::Start() { return impl_->Start(); }

absl::StatusOr<uint64_t> Driver::AdoptShard(uint32_t log_shard) {
  return impl_->AdoptShard(log_shard);
}

bool Driver::OwnsShard(uint32_t log_shard) const {
  return impl_->OwnsShard(log_shard);
}

// Each `make` below runs once (HandleRequest), so it gives its request away
// instead of copying the payloads.
void Driver::Submit(core::SubmitSpec spec, ReplyDone done) {
  std::string gid = spec.gid;
  const int64_t within = spec.answer_within_ms;
  auto shared = std::make_shared<core::SubmitSpec>(std::move(spec));
  Impl* impl = impl_.get();
  impl_->Request(
      gid, true,
      [shared, impl](RequestId rid) -> Event {
        const uint64_t epoch = impl->EpochOf(shared->gid);
        return core::SubmitEvent{rid, std::move(*shared), epoch};
      },
      std::move(done), within);
}

void Driver::Begin(core::BeginSpec spec, ReplyDone done) {
  std::string gid = spec.gid;
  const int64_t within = spec.answer_within_ms;
  Impl* impl = impl_.get();
  impl_->Request(
      gid, true,
      [spec = std::move(spec), impl](RequestId rid) mutable -> Event {
        const uint64_t epoch = impl->EpochOf(spec.gid);
        return core::BeginEvent{rid, std::move(spec), epoch};
      },
      std::move(done), within);
}

void Driver::Try(std::string gid, wal::BranchSpec branch, ReplyDone done,
                 int64_t answer_within_ms) {
  impl_->Request(
      std::move(gid), false,
      [branch = std::move(branch)](RequestId rid) mutable -> Event {
        return core::TryEvent{rid, std::move(branch)};
      },
      std::move(done), answer_within_ms);
}

void Driver::Commit(std::string gid, std::vector<std::string> ids,
                    core::WaitFor wait_for, ReplyDone done) {
  impl_->Request(
      std::move(gid), false,
      [ids = std::move(ids), wait_for](RequestId rid) -> Event {
        return core::CommitEvent{rid, ids, wait_for};
      },
      std::move(done));
}

void Driver::Rollback(std::string gid, core::WaitFor wait_for, ReplyDone done) {
  impl_->Request(
      std::move(gid), false,
      [wait_for](RequestId rid) -> Event {
        return core::RollbackEvent{rid, wait_for};
      },
      std::move(done));
}

void Driver::Get(std::string gid, ReplyDone done) {
  impl_->Get(std::move(gid), std::move(done));
}

void Driver::Approve(std::string gid, std::string approval_id, ReplyDone done) {
  impl_->Request(
      std::move(gid), false,
      [id = std::move(approval_id)](RequestId rid) -> Event {
        return core::GateApproveEvent{rid, id};
      },
      std::move(done));
}

void Driver::ForceDecision(std::string gid, wal::Decision decision,
                           std::string approval_id, ReplyDone done) {
  impl_->Request(
      std::move(gid), false,
      [decision, id = std::move(approval_id)](RequestId rid) -> Event {
        return core::ForceDecisionEvent{rid, decision, id};
      },
      std::move(done));
}

void Driver::ResolveBranch(std::string gid, std::string branch_id,
                           std::string approval_id, ReplyDone done) {
  impl_->Request(
      std::move(gid), false,
      [b = std::move(branch_id),
       id = std::move(approval_id)](RequestId rid) -> Event {
        return core::ResolveBranchEvent{rid, b, id};
      },
      std::move(done));
}

void Driver::RetryNow(std::string gid, std::string branch_id, ReplyDone done) {
  impl_->RetryNow(std::move(gid), std::move(branch_id), std::move(done));
}

uint64_t Driver::owner_epoch(uint32_t log_shard) const {
  return impl_->epoch(log_shard);
}

bool Driver::halted() const { return impl_->halted(); }

BreakerState Driver::breaker_state(const std::string& participant) const {
  return impl_->breaker(participant);
}

int64_t Driver::stuck_branches() const { return impl_->stuck(); }
int64_t Driver::oldest_unfinished_registered_ms() const {
  return impl_->oldest_unfinished_registered_ms();
}
Driver::RecoveryProgress Driver::recovery_progress() const {
  return impl_->recovery_progress();
}

int64_t Driver::memory_bytes() const { return impl_->memory_bytes(); }
int64_t Driver::memory_high_water_bytes() const {
  return impl_->memory_high_water_bytes();
}

Driver::InDoubt Driver::in_doubt() const { return impl_->in_doubt(); }

}  // namespace tcc::runtime
