// One cluster node's wal::Log over the modelled fenced store
// (fenced_store.h), keeping log.h's promises the way EtcdLog does
// (wal/include/tcc/wal/etcd_log.h), for the cluster simulation:
//   - TakeOwnerEpoch campaigns: creates shards/<k>/owner under the node's
//     lease if absent; the epoch is its create_revision in the campaign's
//     own answer; a lost answer is resolved by reading the key (its lease
//     says whose it is); a shard owned already is given up with the fenced
//     delete first (a higher epoch);
//   - group commit: one Txn for every append waiting, a nested Txn per shard
//     comparing the fence (create_revision(owner) == epoch, lease(owner) ==
//     lease), inside it one per gid (its appends merged in order) comparing
//     the head's mod_revision with this log's view; failure branches read
//     the compared keys. A refused fence loses the shard (ShardLostFn, then
//     its appends UNAVAILABLE); a refused head makes the gid ABORTED until
//     Read;
//   - a Txn whose outcome is unknown is sent again, identical, until an
//     answer shows, gid by gid, whether this append committed (the head
//     holds its epoch and append id) or not; nothing else is sent meanwhile;
//   - reads show only what the store committed; the recovery scan reads the
//     shard pinned at the epoch's revision, Read is linearizable;
//   - buffered appends are held as EtcdLog holds them (etcd_log.h, "Held
//     buffered appends"; wal::internal::MayHold): answered at once, queued
//     ahead of the gid's next append or after hold_buffered_ms, forgotten
//     when the shard's ownership changes, lost with the node in a crash
//     (the prefix is per gid).
// Simplifications (documented, not etcd's): one key per gid (the head holds
// the whole transaction; its mod_revision is the compare-and-set), no
// approvals (PutApproval is UNIMPLEMENTED), no retention or archive (finished
// transactions stay), List is UNIMPLEMENTED.
//
// The store is reached through a StoreLink (the simulation's network).
// Not thread-safe: the simulation's one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fenced_store.h"
#include "runtime/environment.h"
#include "tcc/wal/log.h"

namespace tcc::sim {

// How a node reaches the store.
class StoreLink {
 public:
  virtual ~StoreLink() = default;
  using TxnDone = std::function<void(absl::StatusOr<TxnResult>)>;
  // Sends `txn`; `done` runs on the node with the answer, or with
  // DEADLINE_EXCEEDED after `timeout_ms` (the outcome is then unknown: the
  // Txn may still apply).
  virtual void Send(std::shared_ptr<const StoreTxn> txn, int64_t timeout_ms,
                    TxnDone done) = 0;
  // A call its caller waits for (campaigns, reads): UNAVAILABLE when the
  // store cannot be reached now; DEADLINE_EXCEEDED when the answer was lost
  // (the Txn may have applied).
  virtual absl::StatusOr<TxnResult> CallNow(const StoreTxn& txn) = 0;
  virtual absl::StatusOr<std::vector<KeyValue>> ReadNow(const std::string& key,
                                                        bool prefix,
                                                        ReadMode mode) = 0;
};

// Test-only ways for the log to break DESIGN.md section 14's rules.
struct FencedLogBreakers {
  bool write_without_fence = false;         // no fence compare on a write
  bool campaign_without_cas = false;        // the campaign overwrites a key
  bool unknown_outcome_as_refused = false;  // a timed-out Txn fails appends
  // A refused campaign that finds a key of this log's lease takes it as it
  // is (its old epoch) instead of the fenced delete and a new campaign.
  bool adopt_existing_own_key = false;
  bool head_without_cas = false;  // no mod_revision compare on a head
};

struct FencedLogOptions {
  StoreLink* link = nullptr;        // not owned
  runtime::Clock* clock = nullptr;  // the node's, for resend timers
  std::string node_id;
  int64_t lease_id = 0;
  uint32_t shards = 1;
  int64_t txn_timeout_ms = 1000;
  int64_t resend_backoff_ms = 50;
  int64_t hold_buffered_ms = 0;  // 0: nothing is held
  // Unique across the simulation (every node and incarnation).
  std::function<uint64_t()> next_append_id;
  FencedLogBreakers breakers;
  // Hears every append answered, with its id (the simulation's oracle); a
  // held one when its write ended (it was answered OK when held).
  std::function<void(const std::string& gid, uint64_t id, const absl::Status&)>
      on_answered;
};

class FencedLog final : public wal::Log {
 public:
  explicit FencedLog(FencedLogOptions options);
  ~FencedLog() override;

  void Append(wal::AppendRequest request, wal::AppendDone done) override;
  void PutApproval(wal::Approval approval, wal::AppendDone done) override;
  absl::StatusOr<wal::TxnLog> Read(std::string_view gid) override;
  // As EtcdLog's: blind (NOT_FOUND without the store) for a gid this log has
  // no view of while the store answered within kBlindCreateWindowMs; the
  // registration's compare then decides (ALREADY_EXISTS if it exists).
  absl::StatusOr<wal::TxnLog> ReadForCreate(std::string_view gid,
                                            bool* blind) override;
  absl::StatusOr<wal::Approval> ReadApproval(
      std::string_view approval_id) override;
  absl::StatusOr<wal::ListPage> List(const wal::ListQuery& query) override;
  uint32_t shard_count() const override { return options_.shards; }
  absl::Status ScanUnfinished(
      uint32_t shard,
      const std::function<absl::Status(wal::TxnLog)>& visit) override;
  absl::StatusOr<uint64_t> TakeOwnerEpoch(uint32_t shard) override;
  void SetShardLostHandler(wal::ShardLostFn lost) override {
    lost_ = std::move(lost);
  }
  absl::Status RunRetention(int64_t) override { return absl::OkStatus(); }
  int64_t DedupHorizonMs(uint32_t) const override { return 0; }
  wal::LogStats Stats() const override;

  // The fenced delete of this log's owner key (a hand-over): the one this
  // log drives, else the one created at `epoch` (the membership's), else
  // (0) the one of its lease read now.
  absl::Status ReleaseShard(uint32_t shard, uint64_t epoch = 0);
  // The node's lease is gone: every shard is lost (ShardLostFn for each
  // owned), and later campaigns use `new_lease`.
  void LeaseLost(int64_t new_lease);
  bool Owns(uint32_t shard) const { return epochs_.count(shard) != 0; }
  uint64_t epoch(uint32_t shard) const;
  // Creates whose read was blind (ReadForCreate), and those whose gid
  // existed after all (the first append answered ALREADY_EXISTS or ABORTED:
  // the driver handles the request again with a real read).
  uint64_t blind_reads() const { return blind_reads_; }
  uint64_t blind_refused() const { return blind_refused_; }
  // Buffered appends answered at once and held (written later, or lost).
  uint64_t appends_held() const { return appends_held_; }
  // Appends waiting or in flight.
  size_t pending() const { return queue_.size() + (in_flight_ ? 1 : 0); }

 private:
  struct Waiting {
    wal::AppendRequest request;
    wal::AppendDone done;
    uint64_t id = 0;
    // The shard's epoch when it was appended (0: not owned): an append
    // made under one ownership is never written under a later one.
    uint64_t epoch = 0;
    bool held = false;  // answered when held: its outcome is nobody's
  };
  // A gid's held buffered appends, answered already, in order.
  struct Held {
    int64_t since_ms = 0;
    std::vector<Waiting> appends;
    wal::TxnSummary summary;  // after them
  };
  // What this log last read or wrote of a gid.
  struct View {
    std::optional<wal::TxnLog> txn;  // nullopt: absent
    int64_t mod_revision = 0;
    std::shared_ptr<const std::vector<uint64_t>> appends;
  };
  // One gid's part of a group.
  struct GidWrite {
    std::string gid;
    std::vector<Waiting> appends;
    wal::TxnLog after;
    int64_t base_mod_revision = 0;
    uint64_t last_id = 0;
    std::shared_ptr<const std::vector<uint64_t>> appends_after;
  };
  struct ShardWrite {
    uint32_t shard = 0;
    uint64_t epoch = 0;
    std::vector<GidWrite> gids;
  };
  struct Group {
    std::shared_ptr<const StoreTxn> txn;
    std::vector<ShardWrite> shards;
    int64_t backoff_ms = 0;
  };

  // Holds a buffered append if EtcdLog would (see the header comment).
  bool Hold(Waiting& w);
  // Queues `gid`'s held appends ahead of anything queued for it after.
  void ReleaseHeld(const std::string& gid);
  void DropHeld(uint32_t shard);
  void ScheduleFlush();
  void Flush();
  void OnAnswer(uint64_t generation, absl::StatusOr<TxnResult> answer);
  void Resend(uint64_t generation);
  void Finish(Group group, const TxnResult& result);
  void LoseShard(uint32_t shard, const absl::Status& why);
  void Complete(std::vector<Waiting> appends, const absl::Status& status);
  absl::StatusOr<View*> ViewOf(const std::string& gid);
  void Learn(const std::string& gid, const std::optional<KeyValue>& kv);
  absl::StatusOr<uint64_t> Campaign(uint32_t shard);

  const FencedLogOptions options_;
  int64_t lease_;
  wal::ShardLostFn lost_;
  std::map<uint32_t, uint64_t> epochs_;  // shards owned, by their epoch
  // Epochs given up whose fenced delete's answer was lost: a key found
  // with one of them is not a campaign just won.
  std::set<int64_t> released_;
  std::map<std::string, View> views_;
  std::set<std::string> stale_;  // ABORTED until Read
  // When the store last answered one of this log's reads or Txns (the
  // node's monotonic ms; -1: never).
  int64_t last_answer_ms_ = -1;
  uint64_t blind_reads_ = 0;
  uint64_t blind_refused_ = 0;
  std::set<std::string> blind_gids_;  // blind, first append not answered
  std::deque<Waiting> queue_;
  std::map<std::string, Held> held_;
  std::map<std::string, size_t> unsent_;  // queued or in flight, per gid
  std::optional<Group> in_flight_;
  uint64_t generation_ = 0;  // of the group in flight
  bool flush_scheduled_ = false;
  std::shared_ptr<bool> alive_;
  uint64_t txns_sent_ = 0;
  uint64_t appends_done_ = 0;
  uint64_t appends_held_ = 0;
};

}  // namespace tcc::sim
