// The ownership rules of one node (DESIGN.md section 14, "Assignment",
// "Taking a shard", hand-over), one round over one read of the membership,
// shard by shard:
//   - unowned: campaigns if the shard is assigned to this node
//     (assignment.h), or has been unowned longer than takeover_margin_ms
//     whoever it is assigned to, and only while the node's lease is trusted;
//     a campaign won is a takeover: the driver resumes the shard's
//     unfinished transactions with the new epoch (Driver::AdoptShard). A
//     shard the driver drives whose key is gone is dropped first;
//   - owned by this node (its key, under its lease): handed over when it is
//     assigned to another live node (a node joined, or this one is being
//     drained): the driver stops driving it first (its callers answered
//     UNAVAILABLE, to retry at the new owner), then the fenced delete of the
//     owner key (from then on no write of this node can commit for it);
//     adopted again if the driver stopped driving it (its scan failed) while
//     the key is still this node's;
//   - owned by another node (or by an older process of this id): dropped if
//     the driver drives it; requests are forwarded there.
// Written once: ShardManager runs it over etcd, the cluster simulation
// (tests/sim) over its modelled store.
//
// Pure: no I/O, no clock (the round says when it is), no threads; what it
// does goes through ShardActions and ShardObserver.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/wal/membership.h"

namespace tcc::cluster {

struct ShardActions {
  std::function<int64_t()> lease_id;  // the node's lease
  std::function<bool()> trusted;      // the lease may be trusted now
  std::function<bool(uint32_t)> drives;
  // Campaigns and resumes (Driver::AdoptShard): the epoch.
  std::function<absl::StatusOr<uint64_t>(uint32_t)> adopt;
  std::function<void(uint32_t, const absl::Status&)> drop;
  // The fenced delete of this node's owner key, the one created at the
  // epoch given (the membership's; EtcdLog::ReleaseShard).
  std::function<absl::Status(uint32_t, uint64_t)> release;
  // Optional: the node stopped during the round (a simulated crash): the
  // round ends.
  std::function<bool()> halted;
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

// What the rules remember between rounds, per shard.
struct OwnershipState {
  explicit OwnershipState(uint32_t shards)
      : unowned_since(shards, 0), last_owner(shards) {}
  std::vector<int64_t> unowned_since;   // 0: not seen unowned
  std::vector<std::string> last_owner;  // as last seen ("" if none)
};

struct OwnershipRound {
  std::string node_id;  // this node
  int64_t now_ms = 0;   // monotonic, when the membership was read
  int64_t takeover_margin_ms = 2000;
};

// One round of the rules over `m` (m.owners: one per shard).
void ActOnMembership(const wal::Membership& m, const OwnershipRound& round,
                     const ShardActions& actions, OwnershipState& state,
                     ShardObserver& observer);

}  // namespace tcc::cluster
