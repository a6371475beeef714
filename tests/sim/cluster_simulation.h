// The deterministic simulation of cluster mode (issue 23; DESIGN.md sections
// 13 and 14): N (2-4) tccd nodes, each the real runtime::Driver and core over
// its own FencedLog (fenced_log.h), all over one modelled fenced store
// (fenced_store.h) with leases, and the SimBanks (the SDK's real barrier)
// shared by every node. Each node keeps its lease alive (every TTL/3),
// trusts it until the send time of its newest acknowledged keep-alive plus
// the TTL minus a margin (DriverOptions::may_call), and runs the shard
// manager's rules (coordinator/src/cluster/shard_manager.cc, the same
// decisions over a membership it reads from the store, rendezvous
// assignment from cluster/rendezvous.h) every reread interval.
//
// Faults, drawn per seed (swarm): node crashes (at any step, or timed) and
// restarts with a new lease after the old registration expired; node pauses
// longer than the lease (the stale owner: it wakes with calls in flight and
// state in memory, at the true time); lost keep-alives; store unavailability
// (a Txn may be kept and applied when a leader is back, which renews every
// lease); store leader changes; partitions between one node and the store
// while it still reaches the banks; lost store answers and Txns delivered
// after their timeout (they apply late); stale unpinned reads; and the bank
// network's faults (loss, duplication, delay, bank crashes).
//
// Checks: after every event, the fencing invariant at the store (9: no write
// for a shard from an epoch not the current one), the lease trust (no
// participant call from a node whose lease the store has expired), epochs
// that only grow (a new owner of a shard has a higher epoch than any before),
// that no append answered "nothing written" is ever in the store (an unknown
// outcome is not a refusal), no lost update (no head written over a version
// its writer had not seen), write-ahead against what the store committed,
// no decision changed, no lost-decision alert (11); at the end, after a
// phase without faults (10: every transaction final without an operator):
// atomicity, each effect once at the banks, money conserved, nothing held.
//
// Not thread-safe; one simulation per thread.
#pragma once

#include <cstdint>

#include "simulation.h"

namespace tcc::sim {

// Runs one cluster seed to the end (or to its first violation).
SeedReport RunClusterSeed(uint64_t seed, const SimOptions& options);

}  // namespace tcc::sim
