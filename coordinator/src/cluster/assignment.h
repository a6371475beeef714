// Which node should own a shard (DESIGN.md section 14, "Assignment"):
// rendezvous hashing over the candidate nodes. Every node computes the same
// answer from the same membership, and a node joining or leaving moves only
// the shards it gains or held (about 1/N of them).
//
// Pure: no I/O, no clock, no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/rendezvous.h"  // RendezvousOwner
#include "tcc/wal/membership.h"

namespace tcc::cluster {

// The candidates of a membership: the live nodes not being drained, or, if
// every live node is being drained, all of them (a shard needs an owner).
std::vector<std::string> Candidates(const wal::Membership& m);

}  // namespace tcc::cluster
