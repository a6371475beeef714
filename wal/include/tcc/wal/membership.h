// A cluster's membership as a node reads it (DESIGN.md section 14,
// "Assignment" and "Routing"): the live nodes, the nodes being drained, and
// each shard's owner with its epoch. Plain data, no etcd: the reading is
// etcd_membership.h's; the rules over it are coordinator/src/cluster/
// ownership.h's (shared with the cluster simulation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tcc::wal {

struct MemberInfo {
  std::string node_id;
  std::string address;  // host:port other nodes and clients dial
  int64_t lease = 0;
  bool draining = false;
};

struct ShardOwnerInfo {
  std::string node_id;
  std::string address;
  uint64_t epoch = 0;  // the owner key's create_revision
  int64_t lease = 0;
};

struct Membership {
  int64_t revision = 0;           // etcd's, when it was read
  std::vector<MemberInfo> nodes;  // by node id
  // One per shard (the cluster's shard count); empty: no owner.
  std::vector<std::optional<ShardOwnerInfo>> owners;
};

}  // namespace tcc::wal
