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

// One linearizable read (a read-only Txn) of nodes/, drain/ and shards/*/
// owner under `key_prefix`, for a cluster of `shards` shards, each send as
// `sends` says (tccd: as the etcd log's reads, etcd_log.h
// txn_attempt_timeout_ms). DATA_LOSS for a key that does not decode.
[[nodiscard]] absl::StatusOr<Membership> ReadMembership(
    etcd::Client& client, const std::string& key_prefix, uint32_t shards,
    const etcd::SendTimeouts& sends = {});

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
