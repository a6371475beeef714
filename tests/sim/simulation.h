// The deterministic simulation of the whole protocol (issue 7; DESIGN.md
// section 13).
//
// One seed drives everything: the real core and driver
// (coordinator/src/runtime/driver.h) over a simulated clock, a simulated
// network and the in-memory WAL (wal/memory_log.h), and 3-4 SimBank
// participants (the SDK's real barrier over MemoryBarrierStore, each with its
// own drifting, jumping clock) running many concurrent bank transfers of 2-4
// branches. Every action is an event in a discrete-event queue ordered by
// (time, sequence): no threads, sockets or sleeps; the same seed replays the
// same run.
//
// Swarm testing: each seed first draws which faults are on and their rates
// (SimParams): request / reply loss, duplication, delay past timeouts,
// reordering, partitions between tccd and each bank, tccd crashes at any
// step (the WAL keeps what was synced and a random prefix of the rest),
// bank crashes inside a handler or between the local commit and the reply,
// wall-clock jumps of tccd and of each bank. The run has two phases: faults
// on (safety is checked after every event), then faults off with everyone
// up (liveness: every transaction must be final within a bound of simulated
// time, nothing held anywhere); then the end checks run (atomicity,
// termination, no reservation, money conserved, exactly-once from the
// banks' committed data, decisions unchanged).
//
// Not thread-safe; one simulation per thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/machine.h"

namespace tcc::sim {

// The cluster simulation's test-only rule breakers (cluster_simulation.h),
// each against a rule of DESIGN.md section 14.
struct ClusterBreakers {
  bool write_without_fence = false;           // the log omits the fence
  bool takeover_without_cas = false;          // the campaign overwrites a key
  bool unknown_txn_as_refused = false;        // a timed-out Txn fails appends
  bool lease_trust_from_receipt = false;      // trust from receipt, not send
  bool restart_adopts_old_owner_key = false;  // old lease and key reused
  bool head_without_cas = false;  // no compare-and-set on a gid's head
};

// What a run may break on purpose (the teeth tests), and its size.
struct SimOptions {
  // The cluster simulation (cluster_simulation.h): N nodes over the
  // modelled fenced store, instead of one tccd over the memory log.
  bool cluster = false;
  ClusterBreakers cluster_breakers;
  core::RuleBreakers breakers;
  // The barrier's test-only option: Try skips its anti-hanging rows.
  bool barrier_skip_anti_hanging = false;
  // CI profile: fewer transactions and a shorter faulty phase.
  bool short_run = false;
  // The liveness phase keeps the seed's slow links (latency up to
  // max_latency_ms each way) instead of 1-5 ms: only loss, duplication,
  // partitions, crashes and jumps stop. Shows that the driver's adaptive
  // timeouts learn only from answered calls (see the README).
  bool slow_links_stay = false;
  // The write-ahead check on every call (off: to show that the other checks
  // also catch a decision acted on before it is durable).
  bool check_write_ahead = true;
  // Prints every call, answer, crash and fault to stderr (for replays).
  bool trace = false;
};

// What a seed drew (swarm testing). Rates are per message, per step or per
// simulated second as named.
struct SimParams {
  int banks = 3;
  int accounts_per_bank = 4;
  int64_t initial_balance = 500;
  int transactions = 10;
  int64_t max_amount = 300;
  int64_t min_try_timeout_ms = 300;
  int64_t max_try_timeout_ms = 5000;
  int64_t faulty_ms = 20'000;    // length of the faulty phase
  int64_t clock_skew_ms = 1000;  // the banks' allowed skew (BarrierOptions)
  // Network.
  double lose_request = 0, lose_reply = 0;
  double duplicate_request = 0, duplicate_reply = 0;
  int64_t max_latency_ms = 5;  // uniform in [1, max]: reorders
  double delay_past_timeout = 0;
  double partitions_per_s = 0;  // per bank
  int64_t max_partition_ms = 0;
  bool partition_fails_fast = false;  // else calls into it just time out
  // Crashes.
  double tccd_crash_per_step = 0;
  int max_tccd_crashes = 0;
  int64_t max_tccd_down_ms = 0;
  double bank_crash_per_call = 0;
  int64_t max_bank_down_ms = 0;
  // Clocks.
  double wall_jumps_per_s = 0;  // tccd and each bank
  int64_t max_wall_jump_ms = 0;
  int64_t max_initial_bank_offset_ms = 0;
  // Clients: after an answer, the same gid with other content (per answer).
  double conflicting_submits = 0;
  // Share of transfers made interactively (Begin, Try per branch, Commit or
  // Rollback) rather than with one Submit.
  double interactive_share = 0;

  std::string Describe() const;
};

struct SeedReport {
  uint64_t seed = 0;
  SimParams params;
  int transactions = 0;
  int confirmed = 0;
  int cancelled = 0;
  uint64_t faults = 0;   // every fault injected (messages, crashes, jumps)
  uint64_t crashes = 0;  // tccd and bank crashes
  uint64_t events = 0;
  std::vector<std::string> violations;  // empty when every invariant held
  std::string cluster_params;  // the cluster simulation's draw, described
  // The cluster simulation's fault and event counts by name (takeovers,
  // pauses, fence refusals, late Txns, stale reads, ...).
  std::map<std::string, uint64_t> cluster_counts;
};

// Draws the seed's parameters (deterministic in `seed` and `options`).
SimParams DrawParams(uint64_t seed, const SimOptions& options);

// Runs one seed to the end (or to its first violation).
SeedReport RunSeed(uint64_t seed, const SimOptions& options);

}  // namespace tcc::sim
