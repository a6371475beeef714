// A deterministic environment for the driver: a single-threaded executor, a
// simulated clock whose timers fire in (time, sequence) order, and a
// simulated transport (loss, duplication, delay, reordering, partitions,
// scripted answers) that checks the write-ahead rule against the in-memory
// WAL (write_ahead_check.h). Participants sit behind SimParticipant; the
// tests' participant is the SDK's real barrier on its in-memory store
// (sdk_participant.h).
//
// Everything is driven by the test (SimLoop): nothing runs on its own, no
// threads, no sleeps, no system clock. Randomness comes from seeds.
//
// Not thread-safe: one test thread drives it all.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/environment.h"
#include "tcc/wal/memory_log.h"

namespace tcc::runtime::sim {

// Runs posted tasks, in order, when the test says so.
class DeterministicExecutor final : public Executor {
 public:
  void Post(std::function<void()> task) override {
    tasks_.push_back(std::move(task));
  }
  // Runs tasks (including ones they post) until none is left; returns how
  // many ran.
  size_t RunAll();
  bool Idle() const { return tasks_.empty(); }
  // Drops every queued task (a crash).
  void Clear() { tasks_.clear(); }

 private:
  std::deque<std::function<void()>> tasks_;
};

// Simulated time. Monotonic time starts at 0; wall time at `wall_start_ms`
// and moves with it (JumpWall shifts it, as a wall-clock step would).
class SimClock final : public Clock {
 public:
  explicit SimClock(int64_t wall_start_ms = 1'700'000'000'000)
      : wall_offset_(wall_start_ms) {}
  int64_t WallMs() const override { return mono_ + wall_offset_; }
  int64_t MonotonicMs() const override { return mono_; }
  TimerId Schedule(int64_t delay_ms, std::function<void()> fn) override;
  void Cancel(TimerId id) override;

  void JumpWall(int64_t delta_ms) { wall_offset_ += delta_ms; }
  // When the next timer is due, if any.
  std::optional<int64_t> NextDue() const;
  // Moves time to `t` (never back), firing every timer due by then in (due,
  // sequence) order, each at its own time.
  void AdvanceTo(int64_t t);
  // Drops every timer (a crash of the process that armed them).
  void Clear() {
    timers_.clear();
    due_of_.clear();
  }

 private:
  int64_t mono_ = 0;
  int64_t wall_offset_;
  TimerId next_id_ = 1;
  std::map<std::pair<int64_t, TimerId>, std::function<void()>> timers_;
  std::map<TimerId, int64_t> due_of_;  // for Cancel
};

// Drives executor, clock and (optionally) WAL syncs until a condition holds:
// runs every task; when idle, syncs the in-memory WAL if appends wait for it
// (a group commit); then moves time to the next timer.
class SimLoop {
 public:
  SimLoop(DeterministicExecutor& executor, SimClock& clock,
          wal::MemoryLog* log = nullptr)
      : executor_(executor), clock_(clock), log_(log) {}
  // True if `done` became true before `max_ms` of simulated time passed
  // (counted from now) and before nothing was left to happen.
  bool RunUntil(const std::function<bool()>& done, int64_t max_ms);
  // One unit of progress (a task batch, a sync or a timer); false when
  // nothing is left to do.
  bool StepOnce(int64_t limit_ms);

 private:
  DeterministicExecutor& executor_;
  SimClock& clock_;
  wal::MemoryLog* log_;
};

// A participant as the transport sees it. `call.spec` is valid during the
// call only.
class SimParticipant {
 public:
  virtual ~SimParticipant() = default;
  virtual absl::StatusOr<BranchAnswer> OnCall(const BranchCall& call,
                                              int64_t now_wall_ms) = 0;
  virtual absl::StatusOr<QueryAnswer> OnQuery(const QueryCall& query,
                                              int64_t now_wall_ms) = 0;
};

struct LinkFaults {
  double lose_request = 0;       // never reaches the participant
  double lose_reply = 0;         // ran there; the answer is lost
  double duplicate = 0;          // the answer arrives twice
  double duplicate_request = 0;  // the request arrives twice
  int64_t min_latency_ms = 1;
  int64_t max_latency_ms = 5;  // uniform: reorders calls
  bool partitioned = false;    // every call fails fast UNAVAILABLE
};

class SimTransport final : public ParticipantTransport {
 public:
  SimTransport(SimClock& clock, uint64_t seed) : clock_(clock), rng_(seed) {}

  void Add(const std::string& name, SimParticipant* participant);
  LinkFaults& faults(const std::string& name) { return faults_[name]; }
  // A scripted answer for calls to `name`: returns an answer to use instead
  // of the participant's (the participant is not called), or nullopt.
  using Script = std::function<std::optional<absl::StatusOr<BranchAnswer>>(
      const BranchCall&)>;
  void SetScript(const std::string& name, Script script) {
    scripts_[name] = std::move(script);
  }
  // Every call is checked against this log as it leaves: the record implying
  // it must be synced (WriteAheadViolation, DESIGN.md section 7). Violations
  // are collected.
  void CheckWriteAhead(wal::MemoryLog* log) { log_ = log; }
  const std::vector<std::string>& violations() const { return violations_; }
  uint64_t calls() const { return calls_; }
  uint64_t queries() const { return queries_; }

  void Call(const BranchCall& call, int64_t timeout_ms,
            BranchDone done) override;
  void Query(const QueryCall& query, int64_t timeout_ms,
             QueryDone done) override;

 private:
  int64_t Latency(const LinkFaults& f);
  bool Draw(double p);

  SimClock& clock_;
  std::mt19937_64 rng_;
  std::map<std::string, SimParticipant*> participants_;
  std::map<std::string, LinkFaults> faults_;
  std::map<std::string, Script> scripts_;
  wal::MemoryLog* log_ = nullptr;
  std::vector<std::string> violations_;
  uint64_t calls_ = 0;
  uint64_t queries_ = 0;
};

}  // namespace tcc::runtime::sim
