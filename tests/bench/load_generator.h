// Drives Submit load against any tcc.v1.Coordinator (tccd, or the baseline
// relay) and measures it: a closed loop (C callers, each sending its next
// transaction when the previous one answers) or an open loop (transactions
// started on a schedule, Poisson or evenly spaced, whatever the answers do).
//
// Every transaction is one Submit with wait_for = WAIT_FOR_FINISHED, a unique
// gid "bench-<run_id>-<n>" and created_at_ms set, its branches planned by a
// TransferPlanner and encoded by a PayloadFormat.
//
// What counts: the transactions whose start falls inside the measurement
// window [warm-up end, warm-up end + duration). The start is the moment the
// caller sent (closed loop; the run's origin for each caller's first call)
// or the moment the schedule said to send (open loop), so a late send is
// charged to latency. An answer in a final state
// (CONFIRMED or CANCELLED) completes a transaction; a gRPC error or any other
// state is an error, counted by kind.
//
// The calls use gRPC's callback API: no thread waits per call. RunLoad blocks
// its caller until every call it started has answered (each has a deadline,
// so this is bounded). Time comes from std::chrono::steady_clock; the only
// wall-clock read is the one created_at_ms needs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "latency_summary.h"
#include "tcc/v1/coordinator.grpc.pb.h"
#include "transfer_plan.h"

namespace tcc::bench {

struct LoadOptions {
  // Closed loop: concurrent callers. Ignored in open loop.
  int concurrency = 64;
  // > 0: open loop at this many transactions per second.
  double rate_per_s = 0;
  // Open loop: exponential gaps (Poisson arrivals) or fixed spacing.
  bool poisson = true;
  double warmup_s = 2;
  double duration_s = 10;
  // Deadline of each Submit.
  int64_t call_timeout_ms = 10000;
  // Open loop: at most this many in flight; the schedule waits beyond it
  // (the wait shows up as latency, since latency runs from the schedule).
  int max_in_flight = 10000;
  // SubmitRequest.try_timeout_ms (0: the coordinator's default).
  uint32_t try_timeout_ms = 0;
  // gids are "bench-<run_id>-<n>".
  std::string run_id = "run";
  size_t payload_bytes = 100;
  // Seeds the open-loop schedule.
  uint64_t seed = 1;
  // Processes whose CPU time is read at the window's start and end.
  std::vector<pid_t> cpu_pids;
};

struct ProcessCpu {
  pid_t pid = 0;
  std::string name;
  // CPU seconds (user + system) spent inside the window; -1 if unreadable.
  double seconds = -1;
};

struct LoadResult {
  // From the window's start to its end, or to the last counted answer if
  // later.
  double window_s = 0;
  // Transactions started in the window.
  uint64_t started = 0;
  uint64_t confirmed = 0;
  uint64_t cancelled = 0;
  // Errors by kind: a gRPC status code name ("UNAVAILABLE"),
  // "NOT_FINAL:<state>" (answered before a final state), "WRONG_GID" (the
  // answer is about another transaction), or, in open loop, "UNSENT"
  // (scheduled in the window but not sent by 1 s after its end: the target
  // could not keep up, or max_in_flight was reached). A send that leaves
  // late is timed from its scheduled start.
  std::map<std::string, uint64_t> errors;
  // Latency of the completed transactions (not of the errors).
  LatencySummary latency;
  // Answers to transactions started during warm-up (not counted).
  uint64_t warmup_answers = 0;
  // Of those, errors (not counted either, but shown).
  uint64_t warmup_errors = 0;
  // Open loop: the latest a send left after its scheduled time (ms).
  double max_send_lag_ms = 0;
  // For each of LoadOptions::cpu_pids, then this process itself.
  std::vector<ProcessCpu> cpu;

  uint64_t completed() const { return confirmed + cancelled; }
  uint64_t error_count() const;
  double tps() const;
};

// Runs the load. `stubs` (one or more channels, to one coordinator or to the
// nodes of a cluster) are used round-robin by transaction; they must outlive
// the call. INVALID_ARGUMENT on bad options.
[[nodiscard]] absl::StatusOr<LoadResult> RunLoad(
    const std::vector<tcc::v1::Coordinator::Stub*>& stubs,
    const TransferPlanner& planner, const PayloadFormat& format,
    const LoadOptions& options);

}  // namespace tcc::bench
