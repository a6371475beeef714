// A test model of the whole protocol around one transaction: the core, a
// participant barrier per branch (DESIGN.md section 11), a network that can
// delay, reorder, duplicate and lose messages, a WAL that acknowledges durable
// appends in order, retry timers and the try-deadline. `Explore` runs every
// interleaving of these (bounded by fault budgets) and checks the invariants
// of DESIGN.md section 13 after every step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/machine.h"

namespace tcc::core::testing {

// One participant's barrier for one branch key (the table of DESIGN.md
// section 11, with one branch hash: conflicts are tested elsewhere).
struct BarrierModel {
  enum class TryState : uint8_t {
    kNone,
    kTried,
    kTryRejected,
    kCancelledBeforeTry
  };
  enum class Phase2 : uint8_t { kNone, kConfirmed, kCancelled };
  TryState try_state = TryState::kNone;
  Phase2 phase2 = Phase2::kNone;
  bool business_rejects = false;  // the business refuses this Try
  uint8_t try_runs = 0, confirm_runs = 0, cancel_runs = 0;
  bool ever_reserved = false;

  struct Answer {
    bool ok = true;  // false: FAILED_PRECONDITION
    Outcome outcome = Outcome::kNone;
    bool replayed = false;
  };
  Answer Try(bool past_deadline);
  Answer Confirm();
  Answer Cancel();
  BarrierState Query() const;
  // True when a reservation is held: TRIED with no phase 2.
  bool Holds() const {
    return try_state == TryState::kTried && phase2 == Phase2::kNone;
  }
  bool HasCancelMarker() const {
    return try_state == TryState::kCancelledBeforeTry ||
           phase2 == Phase2::kCancelled;
  }
};

struct Msg {
  enum class Kind : uint8_t { kCallReq, kQueryReq, kCallRep, kQueryRep };
  Kind kind = Kind::kCallReq;
  uint32_t branch = 0;
  Phase phase = Phase::kTry;
  uint32_t attempt = 0;
  uint64_t query_id = 0;
  // Replies.
  bool ok = true;
  Outcome outcome = Outcome::kNone;
  bool replayed = false;
  BarrierState barrier = BarrierState::kNotFound;
  bool authoritative = true;
  bool can_dup = true;  // a call reply may be delivered twice
  bool orphan = false;  // request of a timed-out call: runs, nobody hears
};

struct Outstanding {
  bool query = false;
  uint32_t branch = 0;
  Phase phase = Phase::kTry;
  uint32_t attempt = 0;
  uint64_t query_id = 0;
};

struct ModelConfig {
  int branches = 2;
  std::vector<bool> rejects;    // per branch: the business refuses the Try
  bool interactive = false;     // Begin + Try each + Commit instead of Submit
  int timeouts_per_branch = 1;  // call/query timeouts allowed per branch
  bool timeout_per_phase = false;   // the budget counts per phase
  int timeout_branches = 1 << 20;   // only branches below this time out
  int query_faults_per_branch = 1;  // non-authoritative answers per branch
  int dups_allowed = 1;             // each reply duplicated at most once
  bool allow_deadline = true;
  int max_depth = 0;           // 0: run to completion
  int crashes = 0;             // coordinator crashes allowed (then recovery)
  bool approval_gate = false;  // an operator approves, or its deadline passes
  Options options;
};

struct World {
  Txn txn;
  int64_t now = 0;
  std::vector<BarrierModel> barriers;
  std::vector<Msg> net;
  std::vector<Outstanding> outstanding;
  std::vector<uint64_t> pending_durable;  // seqs, append order
  // What each durable persist not yet acknowledged implies.
  std::vector<std::vector<std::string>> pending_registers;
  std::vector<Decision> pending_decides;
  std::vector<bool> registered_durable;  // per branch index
  Decision decided_durable = Decision::kNone;
  Decision first_decision = Decision::kNone;
  std::vector<uint32_t> retry_timers;
  bool deadline_armed = false;
  bool deadline_fired = false;
  std::vector<uint8_t> timeouts_left;  // per branch x phase (try, phase 2)
  std::vector<uint8_t> query_faults_left;
  int requests_unanswered = 0;
  uint32_t next_request = 1;
  int interactive_step = 0;  // interactive script progress
  // The WAL: every record written, and how many of them are durable.
  std::vector<wal::Record> log;
  size_t durable_len = 0;
  std::vector<size_t> pending_log_len;  // per pending durable persist
  bool decision_acted = false;  // a phase-2 call left, or a caller was told
  int crashes_left = 0;
  bool approval_asked = false;
  bool approval_deadline_fired = false;
  uint64_t epoch = 1;
};

struct ExploreStats {
  uint64_t states = 0;
  uint64_t leaves = 0;
  uint64_t finals = 0;
  uint64_t steps = 0;
  std::string violation;  // first violation found (with the path)
};

// Runs every interleaving from the initial request; stops at the first
// violation.
ExploreStats Explore(const ModelConfig& config);

}  // namespace tcc::core::testing
