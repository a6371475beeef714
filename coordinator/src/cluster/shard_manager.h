// Which shards this node drives (DESIGN.md section 14, "Assignment",
// "Taking a shard", hand-over): a thread of its own reads the cluster's
// membership (wal/etcd_membership.h) when it changes (etcd watches) and at
// least every `reread_ms` (a watch can end or go quiet), and then applies
// the ownership rules (ownership.h: campaign, take over, hand over, let go)
// shard by shard. It never writes for a shard itself: the log's fence is
// what makes two writers impossible; this class only decides when to
// campaign and when to let go.
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
#include "cluster/ownership.h"
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
  // Each membership read's sends (etcd_membership.h).
  etcd::SendTimeouts read_sends;
  // Monotonic now (ms).
  std::function<int64_t()> now_ms;
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

  // Act's state (its thread only, or RunOnce's caller: act_mu_).
  OwnershipState state_;
  std::mutex act_mu_;  // RunOnce against the thread
};

}  // namespace tcc::cluster
