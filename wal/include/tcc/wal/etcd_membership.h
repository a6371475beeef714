// What a cluster node reads of the cluster's membership in etcd (DESIGN.md
// section 14, "Assignment" and "Routing"): the live nodes (nodes/<id>, under
// each node's lease), the nodes being drained (drain/<id>, under the drained
// node's lease, so the mark goes with that process), and each shard's owner
// (shards/<k>/owner: node id, address, its create_revision the owner epoch).
// The key layout is wal/src/etcd/etcd_keys.h's; nothing outside wal/ names a
// key.
//
// Thread-safety: free functions over a thread-safe etcd::Client.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tcc/etcd/client.h"
#include "tcc/wal/membership.h"

namespace tcc::wal {

// How long ReadMembership waits: each send at most `attempt_ms`, sent again
// when it waited that out (etcd never answers a read that a follower
// forwarded to a leader that then died), as the etcd log's reads are
// (etcd_log.h, txn_attempt_timeout_ms), for at most `total_ms`. 0: one send
// with the client's call timeout.
struct ReadTimeouts {
  int64_t attempt_ms = 0;
  int64_t total_ms = 0;
};

// One linearizable read (a read-only Txn) of nodes/, drain/ and shards/*/
// owner under `key_prefix`, for a cluster of `shards` shards. DATA_LOSS for
// a key that does not decode.
[[nodiscard]] absl::StatusOr<Membership> ReadMembership(
    etcd::Client& client, const std::string& key_prefix, uint32_t shards,
    const ReadTimeouts& timeouts = {});

// Marks `node_id` as draining: drain/<node_id> under that node's lease (it
// goes when the node stops). NOT_FOUND when no such node is live.
[[nodiscard]] absl::Status MarkDraining(etcd::Client& client,
                                        const std::string& key_prefix,
                                        const std::string& node_id);

// The key ranges [key, range_end) whose changes change a Membership (to
// watch).
struct KeyRange {
  std::string key;
  std::string range_end;
};
std::vector<KeyRange> MembershipRanges(const std::string& key_prefix);

}  // namespace tcc::wal
