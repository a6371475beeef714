// Rendezvous (highest random weight) hashing of shards over node ids: the
// pure rule behind cluster assignment (assignment.h), apart so that the
// deterministic simulation (tests/sim/) uses the same rule without etcd.
//
// Pure: no I/O, no clock, no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tcc::cluster {

// The node among `candidates` (node ids; none empty) with the highest
// weight for `shard`; "" when there are none. The weight is a fixed 64-bit
// hash of (node id, shard), the same on every platform.
std::string RendezvousOwner(uint32_t shard,
                            const std::vector<std::string>& candidates);

}  // namespace tcc::cluster
