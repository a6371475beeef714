// SdkParticipant: a participant of the simulated network that runs the SDK's
// real barrier (tcc::barrier::Barrier, DESIGN.md section 11) over its
// in-memory store, with a business the test supplies. The driver's tests
// reach participants through it (as a SimParticipant) and the deterministic
// simulation's banks are built on it (tests/sim/sim_bank.h): there is no
// second barrier to keep in step with the SDK's.
//
// What it adds around the barrier, for the invariants of DESIGN.md section
// 13:
//   - Effect counters. Each business handler that takes effect (a Try that
//     reserves, a Confirm, a Cancel that undoes a reservation) bumps a
//     counter for (phase, branch key) in its own local transaction, so that
//     effects are read back from committed data: a refused Try, or a handler
//     whose transaction did not commit, counts nothing. Business data keys
//     under "effect/" are the counters'.
//   - Per-call checks, collected in violations(): an effect counted twice
//     (13.2), a phase-2 effect after the opposite one (13.2), a Try that
//     reserved after its branch's Cancel or past its try-deadline plus the
//     allowed skew by this participant's clock (13.5).
//   - A down switch: while down, every OnCall and OnQuery is UNAVAILABLE and
//     reaches nothing.
//
// Time: the barrier reads clock(), a ManualClock of the participant's own.
// OnCall and OnQuery first set it to the wall time the transport passes (the
// driver's tests share tccd's clock); Call and Query use it as the caller set
// it (the simulation drifts and jumps it apart from tccd's).
//
// Not thread-safe: one test thread drives it (the store is thread-safe, the
// counters' bookkeeping and the switch are not).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/sim/sim_environment.h"
#include "tcc/barrier/barrier.h"
#include "tcc/barrier/memory_store.h"
#include "tcc/clock/clock.h"

namespace tcc::runtime::sim {

// The business behind a participant: what its Try, Confirm and Cancel
// handlers do with the local transaction (barrier::HandlerContext). An empty
// handler succeeds (a Try reserves) and writes nothing.
struct ParticipantBusiness {
  barrier::TryHandler on_try;
  barrier::PhaseTwoHandler on_confirm;
  barrier::PhaseTwoHandler on_cancel;
};

// A business that reserves each Try `accept` says yes to and refuses the
// others ("refused"); its Confirm and Cancel succeed.
ParticipantBusiness AcceptIf(
    std::function<bool(const barrier::BranchCall&)> accept);

// How many times each business effect committed for one branch key.
struct EffectCounts {
  int64_t tries = 0;
  int64_t confirms = 0;
  int64_t cancels = 0;
};

class SdkParticipant final : public SimParticipant {
 public:
  // `name` prefixes its violations.
  SdkParticipant(std::string name, barrier::BarrierOptions options,
                 ParticipantBusiness business = {});

  // SimParticipant: sets clock() to `now_wall_ms`, then Call / Query.
  absl::StatusOr<BranchAnswer> OnCall(const BranchCall& call,
                                      int64_t now_wall_ms) override;
  absl::StatusOr<QueryAnswer> OnQuery(const QueryCall& query,
                                      int64_t now_wall_ms) override;

  // One Try / Confirm / Cancel through the barrier at clock()'s time; the
  // per-call checks append to violations(). Ignores the down switch.
  absl::StatusOr<BranchAnswer> Call(const BranchCall& call);
  // The reverse lookup at clock()'s time. Ignores the down switch.
  absl::StatusOr<QueryAnswer> Query(const QueryCall& query);

  // While true, OnCall and OnQuery fail UNAVAILABLE (the process is down).
  void set_down(bool down) { down_ = down; }

  const std::string& name() const { return name_; }
  clock::ManualClock& clock() { return clock_; }
  barrier::MemoryBarrierStore& store() { return store_; }
  const barrier::MemoryBarrierStore& store() const { return store_; }
  const barrier::BarrierOptions& options() const { return barrier_.options(); }

  // --- Reads of committed state, for the checks.
  // The barrier record of `key`, if any.
  std::optional<barrier::BarrierRecord> Record(
      const barrier::BranchKey& key) const;
  // Every barrier record.
  std::map<barrier::BranchKey, barrier::BarrierRecord> Records() const;
  // The committed effect counters of every key that has one.
  std::map<barrier::BranchKey, EffectCounts> Effects() const;
  EffectCounts EffectsOf(const barrier::BranchKey& key) const;
  // Reservations held: records TRIED with no phase 2.
  int Held() const;
  // Keys whose business effects ran more than once, or that have both a
  // Confirm and a Cancel effect.
  int ExactlyOnceViolations() const;
  // What the per-call checks found, oldest first.
  const std::vector<std::string>& violations() const { return violations_; }

 private:
  // Runs `business` (if any) and, when it took effect, bumps the counter of
  // (phase, key) in the same transaction.
  absl::StatusOr<barrier::TryVerdict> RunTry(const barrier::HandlerContext& c);
  absl::Status RunPhaseTwo(const barrier::HandlerContext& c, wal::Phase phase);
  absl::Status CountEffect(const barrier::HandlerContext& c, wal::Phase phase);
  // The checks of one call that committed the effect in `counted_`.
  void CheckEffect(const BranchCall& call, const barrier::BranchCall& b,
                   const std::optional<barrier::BarrierRecord>& before);

  std::string name_;
  mutable barrier::MemoryBarrierStore store_;  // reads are logically const
  clock::ManualClock clock_;
  barrier::Barrier barrier_;
  ParticipantBusiness business_;
  bool down_ = false;
  // Set by CountEffect during a call, read after it: the counter's new value
  // and whether the opposite phase-2 effect exists.
  struct CountedEffect {
    int64_t count = 0;
    bool opposite = false;
  };
  std::optional<CountedEffect> counted_;
  std::vector<std::string> violations_;
};

}  // namespace tcc::runtime::sim
