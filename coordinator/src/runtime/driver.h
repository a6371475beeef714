// The driver: runs the pure core (core/machine.h) over an injected executor,
// clock, participant transport and WAL (DESIGN.md sections 7 and 8). It owns
// the owners (one per gid, on its shard) and runs their effects; its other
// concerns have rooms of their own, each given what it needs and nothing
// that leads back here:
//   recovery.h           the recovery scan, its window and the loaded set
//   participant_calls.h  breaker admission, timeouts, the hand-off to the
//                        transport and the one reply path
//   memory_budget.h      the byte budget of what it holds
//   core/admission.h     the admission rules it applies to new requests
//
// Promises:
// - One in-memory owner per gid. Gids are spread over a fixed number of
//   shards by hash; every event of a gid (requests, WAL completions, replies,
//   timers, recovery) runs on its shard's executor, in order.
// - Write-ahead is structural: the core emits a participant call only in the
//   step that handles a DurableEvent, and the driver feeds a DurableEvent only
//   from the WAL's OK completion of that append. No code path sends a call
//   otherwise.
// - Retries: exponential backoff with full jitter (injected RNG) per branch,
//   only for the branch that failed; Try-phase retries stop at the
//   try-deadline (the core decides), phase 2 never stops. Per-call timeouts
//   adapt to each participant's observed latency (about 2x p99 per call kind,
//   clamped). A circuit breaker per participant fails new Trys (and Queries)
//   fast while open and holds phase-2 calls until a probe succeeds. Phase-2
//   calls of one transaction go out in parallel.
// - Recovery: Start() takes a new owner epoch for each shard of the WAL and
//   resumes every unfinished transaction (Log::ScanUnfinished, one
//   Recovery per shard, the window split between them) while requests are
//   served; a cluster node instead adopts shards one by one (AdoptShard),
//   each resumed the same way with its new epoch. A request for a gid not in
//   memory loads it from the WAL first (and resumes it if unfinished).
// - Finished transactions with nobody waiting leave memory; Get reads them
//   back from the WAL.
//
// Thread-safety: every public method may be called from any thread. Done
// callbacks run on the gid's shard executor; they must not block. Destroying
// the driver drops everything in memory (as a crash would); executors must
// not run its tasks afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/machine.h"
#include "runtime/call_policies.h"
#include "runtime/environment.h"
#include "tcc/wal/log.h"

namespace tcc::runtime {

// What a request is answered with.
struct DriverReply {
  core::TransactionView transaction;
  bool duplicate = false;
  std::optional<core::BranchView> branch;  // Try answers
};

using ReplyDone = std::function<void(absl::StatusOr<DriverReply>)>;

// Hooks for metrics and log lines (the daemon logs with spdlog; the core and
// the driver never log). Called on shard executors, so concurrently when
// shards run in parallel (implementations must be thread-safe); must not
// block.
class DriverObserver {
 public:
  virtual ~DriverObserver() = default;
  // A core signal: retries, unknown outcomes and their resolution, STUCK,
  // alerts, decisions, finishes. branch_id empty when not about a branch.
  virtual void OnSignal(const std::string& /*gid*/,
                        const std::string& /*branch_id*/,
                        const core::SignalEffect& /*signal*/) {}
  // A transaction reached CONFIRMED / CANCELLED, `duration_ms` after it was
  // registered (wall clock).
  virtual void OnFinished(const std::string& /*gid*/, core::TxnState /*state*/,
                          int64_t /*duration_ms*/) {}
  virtual void OnBreaker(const std::string& /*participant*/,
                         BreakerState /*state*/) {}
  // Every effect the driver runs, in order (tests count them to crash at
  // each one).
  virtual void OnEffect(const std::string& /*gid*/,
                        const core::Effect& /*effect*/) {}
  // Start's recovery scans (every shard of a local log) ended, finding
  // `resumed` unfinished transactions.
  virtual void OnRecovered(size_t /*resumed*/) {}
  // Cluster mode: the scan of a shard adopted at `epoch` (AdoptShard) ended,
  // finding `resumed`; or it failed, and the shard was dropped (to be taken
  // again and scanned anew).
  virtual void OnShardRecovered(uint32_t /*log_shard*/, uint64_t /*epoch*/,
                                size_t /*resumed*/) {}
  virtual void OnShardScanFailed(uint32_t /*log_shard*/,
                                 const absl::Status& /*why*/) {}
  // Cluster mode: the shard was dropped (DropLogShard); its scan, if one
  // still ran, ends without OnShardRecovered.
  virtual void OnShardDropped(uint32_t /*log_shard*/) {}
  // The driver met state it cannot drive: the recovery scan failed (then
  // OnRecovered is not called), or a transaction's records do not replay
  // (DATA_LOSS). Unfinished transactions may be left undriven, so a daemon
  // stops (DESIGN.md section 7: corrupt synced state is DATA_LOSS).
  virtual void OnFatal(const absl::Status& /*status*/) {}
  // After every step that changed a transaction (for Watch streams: build
  // core::MakeView(txn) only when someone watches `gid`). `txn` is valid
  // during the call only.
  virtual void OnStepped(const std::string& /*gid*/, const core::Txn& /*txn*/) {
  }
};

struct DriverOptions {
  core::Options core;
  BackoffOptions backoff;
  TimeoutBounds timeouts;
  // Per (participant, call kind) bounds that replace `timeouts` for them.
  TimeoutOverrides timeout_overrides;
  BreakerOptions breaker;
  uint64_t rng_seed = 1;
  // Draws in [0, 1) for backoff jitter; default: a PRNG seeded by rng_seed.
  // Called from any shard: must be thread-safe if shards run in parallel
  // (the default is).
  std::function<double()> uniform01;
  // Participant names a branch may use (DESIGN.md section 4: only configured
  // participants are called). Unset: any name.
  std::function<bool(const std::string&)> participant_known;
  // The rest of the admission context (core/admission.h): how far ahead of
  // the clock a created_at may be, and whether approvals can be issued (an
  // admin credential is configured).
  int64_t max_clock_skew_ms = 5 * 60 * 1000;
  bool approval_gate_enabled = true;
  // At most this many transactions found by the recovery scan are resumed
  // and not yet durably decided at once; the next is resumed as a decision
  // (Confirm or Cancel) becomes durable: a decided one's phase 2 needs no
  // more than its retries. Without it a scan of 100,000 resumes all of them
  // at once, and their Try answers alone can fill the WAL's queue
  // (RESOURCE_EXHAUSTED stops the owners whose appends it refused); counted
  // on decisions merely made, a slow WAL would let more in while their
  // decisions wait in its queue. One waiting for an approval holds no place.
  size_t recovery_window = 4096;
  // Where the recovery scan runs (it reads the whole WAL: seconds for
  // 100,000 unfinished transactions). Null: the first shard, which then
  // waits for it. Not owned; must outlive the driver. On its own executor
  // the scan pauses while max(1024, 4 x recovery_window) scanned
  // transactions wait to resume, so memory stays bounded.
  Executor* scan_executor = nullptr;
  // The byte budget of transaction state in memory (memory_budget.h):
  // payloads, records on their way to the WAL, scanned transactions waiting
  // to resume. A new transaction (Submit, Begin, an interactive Try's new
  // branch) that does not fit is RESOURCE_EXHAUSTED, nothing written. Above
  // half of it, transactions that are not OPEN keep their payloads in the
  // WAL only (read back before a call needs them), and the recovery scan
  // pauses while what it queued takes a quarter. 0: no limit.
  uint64_t max_in_flight_bytes = 512ull << 20;
  // Cluster mode: whether a participant call for `gid` may go now (the
  // node trusts its lease). A call it refuses is not sent: a branch's first
  // Try so refused fails (the transaction cancels, as behind an open
  // circuit breaker); any other call counts as an unknown outcome and is
  // retried. Unset: always.
  std::function<bool(const std::string& gid)> may_call;
  // Whether Start takes every shard of the log (a local log: its one
  // shard). Off (cluster mode), no shard is driven until AdoptShard takes
  // it: requests for its gids are UNAVAILABLE until then.
  bool adopt_shards_at_start = true;
};

class Driver {
 public:
  // `shards`: one serial executor per shard (at least one). None of the
  // injected objects is owned; all must outlive the driver.
  Driver(DriverOptions options, std::vector<Executor*> shards, Clock& clock,
         ParticipantTransport& transport, wal::Log& log,
         DriverObserver* observer = nullptr);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Takes a new owner epoch for each shard of the log and starts the
  // recovery scans (asynchronously, on the scan executor). Requests may be
  // made right after.
  [[nodiscard]] absl::Status Start();

  // Submit, Begin and Try refuse what the admission rules refuse
  // (core/admission.h: ids, sizes, timeouts, created_at against the clock
  // and the WAL's deduplication horizon, participants, the approval gate)
  // before anything is written.
  //
  // Submit, Begin and Try are also refused RESOURCE_EXHAUSTED, before
  // anything is written, when they do not fit the memory budget
  // (max_in_flight_bytes), or when the caller's answer_within_ms cannot be
  // met because of the work queued ahead of them (the recent wait for a
  // shard and for a durable WAL append; shed at once rather than written
  // and answered too late).
  void Submit(core::SubmitSpec spec, ReplyDone done);
  void Begin(core::BeginSpec spec, ReplyDone done);
  void Try(std::string gid, wal::BranchSpec branch, ReplyDone done,
           int64_t answer_within_ms = 0);
  void Commit(std::string gid, std::vector<std::string> expected_branch_ids,
              core::WaitFor wait_for, ReplyDone done);
  void Rollback(std::string gid, core::WaitFor wait_for, ReplyDone done);
  void Get(std::string gid, ReplyDone done);
  // Admin (DESIGN.md section 10). The WAL checks the approval.
  void Approve(std::string gid, std::string approval_id, ReplyDone done);
  void ForceDecision(std::string gid, wal::Decision decision,
                     std::string approval_id, ReplyDone done);
  void ResolveBranch(std::string gid, std::string branch_id,
                     std::string approval_id, ReplyDone done);

  // Admin: re-sends now what waits for a backoff timer (every branch, or one).
  void RetryNow(std::string gid, std::string branch_id, ReplyDone done);

  // Cluster mode (DESIGN.md section 14, "Taking a shard"): takes a new owner
  // epoch for `log_shard` (the log's campaign; blocks for it: call it off
  // the executors) and resumes its unfinished transactions with it, as
  // Start does after a restart, while requests are served. The epoch it
  // owns the shard with (the current one if it owns it already). It takes
  // what the log shows of the shard as durable, which the etcd log's reads
  // are (they show only what etcd committed); a local log's shard is taken
  // by Start alone.
  [[nodiscard]] absl::StatusOr<uint64_t> AdoptShard(uint32_t log_shard);
  // Whether the driver drives `log_shard` now (adopted or started, and not
  // dropped since).
  bool OwnsShard(uint32_t log_shard) const;

  // The log lost a shard (wal::ShardLostFn; DESIGN.md section 14), or this
  // node hands it over: that shard's owners go at once, their waiting
  // callers answered UNAVAILABLE, and nothing more is sent or written for
  // them; requests for its gids are UNAVAILABLE until it is adopted again.
  void DropLogShard(uint32_t log_shard, const absl::Status& why);

  // Ends the recovery scan early (one waiting for room in its queue gives
  // up): call before the executors stop. The destructor does it too.
  void StopRecovery();

  // The owner epoch taken for a shard of the log (0 before Start, or for a
  // shard out of range).
  uint64_t owner_epoch(uint32_t log_shard = 0) const;
  // True once the failpoint `driver.before_effect` fired with `error`: the
  // driver stopped between two effects and does nothing more (a crash, for
  // in-process tests). With `crash` the process dies there instead.
  bool halted() const;
  BreakerState breaker_state(const std::string& participant) const;
  // Branches flagged STUCK in the transactions this driver holds (a gauge:
  // it falls when a branch succeeds, is resolved by hand, or its
  // transaction leaves memory).
  int64_t stuck_branches() const;
  // Bytes of transaction state held, as the memory budget counts them.
  int64_t memory_bytes() const;
  // The most memory_bytes() has been since the driver started.
  int64_t memory_high_water_bytes() const;
  // Transactions in doubt: no decision yet and a Try's outcome unknown after
  // a failed attempt (tccd asks, DESIGN.md section 1); since when the oldest
  // has been (wall ms; 0: none).
  struct InDoubt {
    int64_t transactions = 0;
    int64_t oldest_since_ms = 0;
  };
  InDoubt in_doubt() const;
  // When the oldest unfinished transaction this driver holds was registered
  // (wall ms of the node that registered it; 0: none). Only those in memory:
  // during a recovery scan, not yet the ones it has still to resume.
  int64_t oldest_unfinished_registered_ms() const;
  // Recovery's progress over every scan since Start (the one at start, and
  // each adopted log shard's): the unfinished transactions the scans found
  // and resumed, and how many of them this driver still drives (not final
  // yet, nor handed on with their log shard). A transaction a request
  // loaded before the scan reached it counts as the scan's.
  struct RecoveryProgress {
    uint64_t found = 0;
    uint64_t unfinished = 0;
  };
  RecoveryProgress recovery_progress() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tcc::runtime
