// A node's membership across lease losses (DESIGN.md section 14,
// "Membership and leases"): it joins (wal::NodeRegistration: one lease,
// nodes/<id> under it) and, when etcd says the lease is gone (a node paused
// past its TTL, a partition from etcd that outlived it), tells `lost` (the
// node drops every shard: owning one again is a takeover) and joins again
// with a new lease on a thread of its own, retrying every second, then tells
// `rejoined` the new lease (for the log's fences and campaigns). The node
// never stops for a lost lease.
//
// Thread-safety: every method may be called from any thread; the hooks run
// on the lease keeper's thread (lost) and on the rejoin thread (rejoined).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "tcc/wal/etcd_node.h"

namespace tcc::cluster {

class NodeMembership {
 public:
  struct Hooks {
    std::function<void(const absl::Status& why)> lost;
    std::function<void(int64_t lease_id)> rejoined;
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeMembership>> Join(
      wal::NodeOptions options, Hooks hooks);
  // Stops rejoining and the keep-alives (the lease expires by itself).
  ~NodeMembership();
  NodeMembership(const NodeMembership&) = delete;
  NodeMembership& operator=(const NodeMembership&) = delete;

  int64_t lease_id() const { return current_.load()->lease_id(); }
  bool Trusted() const { return current_.load()->Trusted(); }
  // Leases lost so far (each followed by a rejoin once etcd lets it).
  uint64_t losses() const { return losses_.load(); }
  // Revokes the lease (its keys go at once); no rejoin afterwards.
  [[nodiscard]] absl::Status Leave();

 private:
  NodeMembership(wal::NodeOptions options, Hooks hooks);
  etcd::LeaseKeeper::LostFn LostFor(uint64_t generation);
  void RejoinLoop();

  const wal::NodeOptions options_;
  const Hooks hooks_;
  // The registration in use; earlier ones stay (stopped) until the end, so
  // that a reader of current_ never sees one go.
  std::atomic<wal::NodeRegistration*> current_{nullptr};
  std::vector<std::unique_ptr<wal::NodeRegistration>> all_;  // under mu_
  std::atomic<uint64_t> losses_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;  // of the registration in use
  // The newest one lost (0: none); may be one being installed.
  uint64_t lost_generation_ = 0;
  std::thread rejoiner_;
};

}  // namespace tcc::cluster
