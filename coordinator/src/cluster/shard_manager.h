// Which shards this node drives (DESIGN.md section 14, "Assignment",
// "Taking a shard", hand-over): a thread of its own reads the cluster's
// membership (wal/etcd_membership.h) when it changes (etcd watches) and at
// least every `reread_ms` (a watch can end or go quiet), and then, shard by
// shard:
//   - unowned: campaigns if the shard is assigned to this node
//     (assignment.h), or has been unowned longer than takeover_margin_ms
//     whoever it is assigned to, and only while the node's lease is trusted;
//     a campaign won is a takeover: the driver resumes the shard's
//     unfinished transactions with the new epoch (Driver::AdoptShard);
//   - owned by this node (its key, under its lease): handed over when it is
//     assigned to another live node (a node joined, or this one is being
//     drained): the driver stops driving it first (its callers answered
//     UNAVAILABLE, to retry at the new owner), then the fenced delete of the
//     owner key (from then on no write of this node can commit for it);
//     adopted again if the driver stopped driving it (its scan failed) while
//     the key is still this node's;
//   - owned by another node: nothing (requests are forwarded there).
// It never writes for a shard itself: the log's fence is what makes two
// writers impossible; this class only decides when to campaign and when to
// let go.
//
// What it acts on is passed in (ShardActions), so that it knows neither the
// driver nor the log.
//
// Thread-safety: every public method may be called from any thread; the
// actions are called from its thread (or from RunOnce's caller).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/etcd/client.h"
#include "tcc/etcd/watch_stream.h"
#include "tcc/wal/etcd_membership.h"

namespace tcc::cluster {

struct ShardManagerOptions {
  etcd::Client* client = nullptr;  // not owned
  std::string key_prefix;
  std::string node_id;
  uint32_t shards = 0;
  // A shard unowned this long is campaigned for by any node.
  int64_t takeover_margin_ms = 2000;
  // The membership is read again at least this often (the lease TTL at
  // most).
  int64_t reread_ms = 1000;
  // Monotonic now (ms).
  std::function<int64_t()> now_ms;
};

struct ShardActions {
  std::function<int64_t()> lease_id;  // the node's lease
  std::function<bool()> trusted;      // the lease may be trusted now
  std::function<bool(uint32_t)> drives;
  // Campaigns and resumes (Driver::AdoptShard): the epoch.
  std::function<absl::StatusOr<uint64_t>(uint32_t)> adopt;
  std::function<void(uint32_t, const absl::Status&)> drop;
  // The fenced delete of this node's owner key (EtcdLog::ReleaseShard).
  std::function<absl::Status(uint32_t)> release;
};

// Hears of ownership changes (log lines, metrics); called on the manager's
// thread.
class ShardObserver {
 public:
  virtual ~ShardObserver() = default;
  // Took `shard` at `epoch`; `from`: the node that owned it last as this
  // node saw it ("" if none seen), `unowned_ms`: how long it was seen
  // unowned before.
  virtual void OnTook(uint32_t /*shard*/, uint64_t /*epoch*/,
                      const std::string& /*from*/, int64_t /*unowned_ms*/) {}
  virtual void OnHandedOver(uint32_t /*shard*/, uint64_t /*epoch*/,
                            const std::string& /*to*/) {}
  virtual void OnCampaignFailed(uint32_t /*shard*/,
                                const absl::Status& /*why*/) {}
  virtual void OnReadFailed(const absl::Status& /*why*/) {}
};

class ShardManager {
 public:
  ShardManager(ShardManagerOptions options, ShardActions actions,
               ShardObserver* observer);
  ~ShardManager();  // Stop()
  ShardManager(const ShardManager&) = delete;
  ShardManager& operator=(const ShardManager&) = delete;

  // One round on the caller's thread (a node's start: its assigned shards
  // are taken before it serves). The read's error, if it failed.
  absl::Status RunOnce();
  // Starts the thread and the watches.
  void Start();
  void Stop();
  // Read the membership again now (a shard was lost; a watch fired).
  void Poke();

  // The membership as last read (null before the first read).
  std::shared_ptr<const wal::Membership> membership() const;
  // The node this node's last read assigns `shard` to.
  std::string AssignedNode(uint32_t shard) const;

 private:
  void Loop();
  void Act(const wal::Membership& m);
  void Watch();

  const ShardManagerOptions options_;
  const ShardActions actions_;
  ShardObserver no_observer_;
  ShardObserver* observer_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poked_ = false;
  std::shared_ptr<const wal::Membership> membership_;
  std::vector<std::string> assigned_;  // by shard, from the last read
  std::thread thread_;
  std::vector<std::unique_ptr<etcd::WatchStream>> watches_;
  std::atomic<bool> watch_ended_{false};

  // Act's state (its thread only).
  std::vector<int64_t> unowned_since_;  // 0: not seen unowned
  std::vector<std::string> last_owner_;
  std::mutex act_mu_;  // RunOnce against the thread
};

}  // namespace tcc::cluster
