#include "core/machine.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/admission.h"
#include "core/participant_status.h"
#include "tcc/identity/content_hash.h"
#include "tcc/identity/ids.h"

namespace tcc::core {
namespace {

using wal::Durability;
using wal::Record;

// Phase-2 failures in a row with the same error: how many are all written,
// then one in how many (Stepper::OnPhase2Reply).
constexpr uint32_t kWrittenRepeats = 16;
constexpr uint32_t kWriteEvery = 64;

bool IsResolved(PhaseState s) {
  return s == PhaseState::kSucceeded || s == PhaseState::kFailed;
}

std::string StatusText(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ",
                      std::string(s.message().data(), s.message().size()));
}

Hash HashOfBranch(uint64_t revision, const BranchSpec& b) {
  return identity::BranchHash(revision, b.participant, b.action, b.payload);
}

Hash HashOfBranches(uint64_t revision, bool gate,
                    const std::vector<BranchSpec>& branches) {
  std::vector<identity::BranchContent> content;
  content.reserve(branches.size());
  for (const auto& b : branches) {
    content.push_back({b.branch_id, b.participant, b.action, b.payload});
  }
  return identity::SubmissionHash(revision, gate, std::move(content));
}

// Applies one event to one transaction, collecting effects.
class Stepper {
 public:
  Stepper(Txn& txn, int64_t now, const Options& options)
      : t_(txn), now_(now), o_(options) {}

  std::vector<Effect> TakeEffects() { return std::move(effects_); }

  absl::Status On(const SubmitEvent& e);
  absl::Status On(const BeginEvent& e);
  absl::Status On(const TryEvent& e);
  absl::Status On(const CommitEvent& e);
  absl::Status On(const RollbackEvent& e);
  absl::Status On(const CallReplyEvent& e);
  absl::Status On(const QueryReplyEvent& e);
  absl::Status On(const RetryDueEvent& e);
  absl::Status On(const DeadlineEvent& e);
  absl::Status On(const DurableEvent& e);
  absl::Status On(const PersistFailedEvent& e);
  absl::Status On(const GateApproveEvent& e);
  absl::Status On(const ForceDecisionEvent& e);
  absl::Status On(const ResolveBranchEvent& e);
  absl::Status On(const ReplayEvent& e);
  absl::Status On(const ResumeEvent& e);

  // Answers every waiter whose condition now holds.
  void AnswerReady();

 private:
  void MustApply(const Record& r) {
    if (!ApplyRecord(t_, r).ok()) std::abort();  // a bug in this file
  }
  uint64_t Persist(std::vector<Record> records, Durability d) {
    uint64_t seq = t_.next_seq++;
    effects_.push_back(PersistEffect{seq, d, std::move(records)});
    return seq;
  }
  // Applies and persists one record.
  uint64_t Record1(Record r, Durability d) {
    MustApply(r);
    std::vector<Record> v;
    v.push_back(std::move(r));
    return Persist(std::move(v), d);
  }
  void Signal(SignalKind kind, int branch, std::string text) {
    effects_.push_back(SignalEffect{kind, branch, std::move(text)});
  }
  void Answer(RequestId r, absl::Status s, bool dup, int branch) {
    effects_.push_back(AnswerEffect{r, std::move(s), dup, branch});
  }
  void AddWaiter(Waiter w) { t_.waiters.push_back(w); }
  // A decision made and not yet durable may still be undone (the WAL refuses
  // its approval) or lost (a crash before the sync): a request must not be
  // refused by quoting it (DESIGN.md section 7: no caller hears of a
  // decision before it is durable). Such a request is answered UNAVAILABLE,
  // to be retried once the decision is durable or undone.
  absl::Status DecisionInFlight() const {
    if (t_.decision == Decision::kNone || t_.decision_durable) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat(
        "gid ", t_.gid, ": a decision is being recorded; retry in a moment"));
  }
  void AddPending(uint64_t seq, PersistPurpose purpose, uint32_t branch = 0) {
    PendingPersist p;
    p.seq = seq;
    p.purpose = purpose;
    p.branch = branch;
    t_.pending.push_back(std::move(p));
  }

  // The try-deadline (also the OPEN one) and the approval deadline have
  // passed: by the wall clock, or by the monotonic timer armed for them
  // (Txn::try_deadline_elapsed), whichever came first.
  bool TryDeadlineReached() const {
    return now_ >= t_.try_deadline_ms || t_.try_deadline_elapsed;
  }
  bool ApprovalDeadlineReached() const {
    return now_ >= t_.approval_deadline_ms || t_.approval_deadline_elapsed;
  }

  // Applies a phase's new state and writes it (buffered), unless `write`
  // is false: then it is kept in memory only.
  void UpdatePhase(uint32_t b, Phase phase, PhaseState state, Outcome outcome,
                   std::string error, bool write = true);
  void MarkSent(uint32_t b, Phase phase);
  void SendTry(uint32_t b);
  void SendQuery(uint32_t b);
  void SendPhase2(uint32_t b);
  void ResolveTry(uint32_t b, PhaseState state, Outcome outcome,
                  std::string why);
  void TryStillUnknown(uint32_t b, std::string why);
  void Flag(uint32_t b, std::string reason);
  void Witness(uint32_t b, Decision d, BarrierState seen);
  bool DecideByWitnesses();
  void Hold(std::string why);
  uint64_t Decide(Decision d, DecisionCause cause, std::string reason,
                  std::string approval_id = "");
  void Evaluate();
  void TryDeadlinePassed();
  void StartPhase2();
  void MaybeFinish();
  void KickUnresolvedTrys();
  void OnRegisteredDurable();
  void OnBranchAddedDurable(uint32_t b);
  void OnDecidedDurable();
  void OnPhase2Reply(const CallReplyEvent& e);
  void OnTryReply(const CallReplyEvent& e);
  bool Ready(const Waiter& w) const;
  absl::Status AnswerStatus(const Waiter& w) const;
  void AbandonTryOps();

  Txn& t_;
  const int64_t now_;
  const Options& o_;
  std::vector<Effect> effects_;
};

void Stepper::UpdatePhase(uint32_t b, Phase phase, PhaseState state,
                          Outcome outcome, std::string error, bool write) {
  const auto& br = t_.branches[b];
  const PhaseProgress& p =
      phase == Phase::kTry ? br.try_phase : br.second_phase;
  wal::PhaseUpdate u;
  u.branch_id = br.spec.branch_id;
  u.phase = phase;
  u.state = state;
  u.outcome = outcome;
  u.attempts = p.attempts;
  u.last_error = std::move(error);
  u.at_ms = now_;
  if (write) {
    Record1(std::move(u), Durability::kBuffered);
  } else {
    MustApply(u);
  }
}

// A call is about to leave: the phase is "sent, outcome unknown" and counts
// one more attempt, in memory only. No record is written for it: what the
// write-ahead rule needs before the call is already durable (the
// registration before a Try, the decision before a Confirm or Cancel;
// DESIGN.md section 7), and a buffered record may be lost anyway, so
// recovery never relies on one: a resumed transaction asks about every
// unresolved Try (On(ResumeEvent) marks each maybe sent) and sends its
// Confirm or Cancel again under the same key. The attempt's outcome record
// (UpdatePhase) carries the count. One record per attempt instead of two:
// a branch retried for days writes half as much, and a transaction's calls
// cost no WAL write on their way out.
void Stepper::MarkSent(uint32_t b, Phase phase) {
  auto& br = t_.branches[b];
  PhaseProgress& p = phase == Phase::kTry ? br.try_phase : br.second_phase;
  ++p.attempts;  // the record below restates it
  UpdatePhase(b, phase, PhaseState::kUnknown, Outcome::kNone, p.last_error,
              /*write=*/false);
}

void Stepper::SendTry(uint32_t b) {
  auto& br = t_.branches[b];
  br.try_maybe_sent_before_attempt = br.try_maybe_sent;
  br.try_maybe_sent = true;
  MarkSent(b, Phase::kTry);
  br.op = BranchOp::kCalling;
  br.op_phase = Phase::kTry;
  br.op_attempt = br.try_phase.attempts;
  effects_.push_back(CallEffect{b, Phase::kTry, br.op_attempt,
                                t_.try_deadline_ms - now_, t_.owner_epoch,
                                t_.try_deadline_ms});
}

void Stepper::SendQuery(uint32_t b) {
  auto& br = t_.branches[b];
  br.op = BranchOp::kQuerying;
  br.op_phase = Phase::kTry;
  br.op_query = t_.next_query++;
  effects_.push_back(QueryEffect{b, br.op_query});
}

void Stepper::SendPhase2(uint32_t b) {
  auto& br = t_.branches[b];
  Phase phase =
      t_.decision == Decision::kConfirm ? Phase::kConfirm : Phase::kCancel;
  MarkSent(b, phase);
  br.op = BranchOp::kCalling;
  br.op_phase = phase;
  br.op_attempt = br.second_phase.attempts;
  effects_.push_back(CallEffect{b, phase, br.op_attempt, 0, t_.owner_epoch,
                                t_.try_deadline_ms});
}

void Stepper::Flag(uint32_t b, std::string reason) {
  if (t_.branches[b].stuck) return;
  wal::Flagged f;
  f.branch_id = t_.branches[b].spec.branch_id;
  f.stuck = true;
  f.reason = reason;
  f.at_ms = now_;
  Record1(std::move(f), Durability::kBuffered);
  Signal(SignalKind::kStuck, static_cast<int>(b), std::move(reason));
}

// A branch's barrier holds a decision (CONFIRMED, CANCELLED or
// CANCELLED_BEFORE_TRY under its hash) while the WAL records none: a
// participant only gets Confirm or Cancel after a durable decision, so the
// WAL lost it (DESIGN.md section 8). The branch is asked nothing more; the
// decision is adopted once the other branches' facts allow
// (DecideByWitnesses).
void Stepper::Witness(uint32_t b, Decision d, BarrierState seen) {
  auto& br = t_.branches[b];
  const bool first = std::none_of(
      t_.branches.begin(), t_.branches.end(),
      [](const BranchRuntime& x) { return x.witness != Decision::kNone; });
  br.witness = d;
  br.witness_state = seen;
  if (br.op_phase == Phase::kTry &&
      (br.op == BranchOp::kCalling || br.op == BranchOp::kQuerying ||
       br.op == BranchOp::kBackoff)) {
    br.op = BranchOp::kIdle;
  }
  const bool had_failures = br.failures > 0;
  br.failures = 0;
  const std::string why =
      absl::StrCat("query: barrier holds ", BarrierStateName(seen),
                   " but no decision was recorded");
  if (d == Decision::kConfirm) {
    // Confirm follows only an EXECUTED Try.
    UpdatePhase(b, Phase::kTry, PhaseState::kSucceeded, Outcome::kExecuted,
                why);
    br.not_found = false;
  } else {
    UpdatePhase(b, Phase::kTry, br.try_phase.state, br.try_phase.outcome, why);
  }
  if (had_failures) {
    Signal(SignalKind::kUnknownResolved, static_cast<int>(b), why);
  }
  if (first) {
    Signal(SignalKind::kAlert, static_cast<int>(b),
           absl::StrCat(why, ": the WAL lost a decision; the witnessed ",
                        DecisionName(d),
                        " is adopted once the other "
                        "branches are known"));
  }
  if (t_.decision == Decision::kNone &&
      (t_.state == TxnState::kOpen || t_.state == TxnState::kTrying)) {
    DecideByWitnesses();
  }
}

// The witness rule (DESIGN.md section 8), for a transaction with no
// recorded decision. False when no branch witnessed a decision. Else true,
// having adopted the witnessed decision, held the transaction (witnesses
// that contradict each other or the facts), or neither (a Confirm witness
// waits until every other branch is known EXECUTED; a Cancel witness until
// every other branch is known, or the try-deadline): the caller makes no
// decision of its own.
bool Stepper::DecideByWitnesses() {
  if (!t_.held_reason.empty()) return true;
  int confirm = -1;
  int cancel = -1;
  for (uint32_t b = 0; b < t_.branches.size(); ++b) {
    const Decision w = t_.branches[b].witness;
    if (w == Decision::kConfirm && confirm < 0) confirm = static_cast<int>(b);
    if (w == Decision::kCancel && cancel < 0) cancel = static_cast<int>(b);
  }
  if (confirm < 0 && cancel < 0) return false;
  auto name = [&](int b) {
    const BranchRuntime& br = t_.branches[b];
    return absl::StrCat("branch ", br.spec.branch_id, " (",
                        BarrierStateName(br.witness_state), ")");
  };
  if (confirm >= 0 && cancel >= 0) {
    Hold(absl::StrCat(name(confirm), " witnesses Confirm, ", name(cancel),
                      " Cancel"));
    return true;
  }
  if (confirm >= 0) {
    for (const auto& br : t_.branches) {
      if (br.witness != Decision::kNone) continue;
      if (br.try_phase.state == PhaseState::kFailed) {
        Hold(absl::StrCat(name(confirm), " witnesses Confirm, but branch ",
                          br.spec.branch_id, "'s Try failed (",
                          OutcomeName(br.try_phase.outcome), ")"));
        return true;
      }
      if (br.not_found) {
        Hold(absl::StrCat(name(confirm), " witnesses Confirm, but branch ",
                          br.spec.branch_id,
                          "'s barrier holds nothing (NOT_FOUND)"));
        return true;
      }
    }
    if (t_.state == TxnState::kOpen) {
      Hold(absl::StrCat(name(confirm),
                        " witnesses Confirm, but the transaction is OPEN "
                        "(its Commit was lost too)"));
      return true;
    }
    for (const auto& br : t_.branches) {
      if (br.witness == Decision::kNone &&
          br.try_phase.state != PhaseState::kSucceeded) {
        return true;  // its fact is still being asked for
      }
    }
  } else if (!TryDeadlineReached()) {
    for (const auto& br : t_.branches) {
      if (br.witness == Decision::kNone && !IsResolved(br.try_phase.state) &&
          !br.not_found) {
        return true;
      }
    }
  }
  const int by = confirm >= 0 ? confirm : cancel;
  const Decision d = confirm >= 0 ? Decision::kConfirm : Decision::kCancel;
  std::string why = absl::StrCat(name(by), " witnessed ", DecisionName(d),
                                 "; the WAL had lost the decision");
  // The alert (kLostDecision) waits for the decision to be durable
  // (OnDecidedDurable): a deposed owner that still holds the transaction in
  // memory sees the witness of its successor's decision, and its own
  // Decided is refused by the fence, so it never raises a false alarm
  // (DESIGN.md section 14, cluster invariant 11).
  (void)by;
  Decide(d, DecisionCause::kWitnessed, std::move(why));
  return true;
}

// Contradicting witnesses: no automatic decision, an operator forces one.
// The branches that witnessed are flagged STUCK so that they are counted and
// listed.
void Stepper::Hold(std::string why) {
  t_.held_reason = why;
  AbandonTryOps();
  Signal(SignalKind::kAlert, -1,
         absl::StrCat("held for an operator (force Confirm or Cancel): ", why));
  for (uint32_t b = 0; b < t_.branches.size(); ++b) {
    if (t_.branches[b].witness != Decision::kNone) {
      Flag(b, absl::StrCat("held: ", why));
    }
  }
}

void Stepper::AbandonTryOps() {
  for (auto& br : t_.branches) {
    if (br.op_phase == Phase::kTry &&
        (br.op == BranchOp::kCalling || br.op == BranchOp::kQuerying ||
         br.op == BranchOp::kBackoff)) {
      br.op = BranchOp::kIdle;
    }
  }
}

uint64_t Stepper::Decide(Decision d, DecisionCause cause, std::string reason,
                         std::string approval_id) {
  PendingPersist p;
  p.purpose = PersistPurpose::kDecided;
  p.approval_id = approval_id;
  p.state_before = t_.state;
  t_.state_before_decision = t_.state;
  wal::Decided rec;
  rec.decision = d;
  rec.cause = cause;
  rec.reason = std::move(reason);
  rec.at_ms = now_;
  if (!approval_id.empty()) rec.approval_id = approval_id;
  const uint64_t seq = Record1(std::move(rec), Durability::kDurable);
  p.seq = seq;
  t_.pending.push_back(std::move(p));
  AbandonTryOps();
  Signal(SignalKind::kDecided, -1,
         absl::StrCat(wal::DecisionCauseName(t_.decision_cause), ": ",
                      t_.decision_reason));
  if (o_.breakers.act_before_decision_durable) OnDecidedDurable();
  return seq;
}

void Stepper::Evaluate() {
  if (t_.decision != Decision::kNone || t_.state != TxnState::kTrying ||
      !t_.registered_durable) {
    return;
  }
  if (DecideByWitnesses()) return;
  bool all_ok = true;
  for (const auto& br : t_.branches) {
    if (br.try_phase.state == PhaseState::kFailed) {
      std::string why = absl::StrCat("branch ", br.spec.branch_id, " ",
                                     OutcomeName(br.try_phase.outcome));
      if (!br.try_phase.last_error.empty()) {
        absl::StrAppend(&why, ": ", br.try_phase.last_error);
      }
      Decide(Decision::kCancel, DecisionCause::kRule, std::move(why));
      return;
    }
    if (br.try_phase.state != PhaseState::kSucceeded) all_ok = false;
  }
  if (!all_ok) return;
  if (t_.approval_gate) {
    wal::StateChanged sc;
    sc.state = TxnState::kAwaitingApproval;
    sc.approval_deadline_ms = now_ + t_.approval_timeout_ms;
    sc.at_ms = now_;
    Record1(std::move(sc), Durability::kBuffered);
    effects_.push_back(
        ArmDeadlineEffect{DeadlineKind::kApproval, t_.approval_deadline_ms});
    return;
  }
  Decide(Decision::kConfirm, DecisionCause::kRule, "every Try EXECUTED");
}

void Stepper::TryDeadlinePassed() {
  if (t_.decision != Decision::kNone || !TryDeadlineReached() ||
      !t_.registered_durable) {
    return;
  }
  if ((t_.state == TxnState::kOpen || t_.state == TxnState::kTrying) &&
      DecideByWitnesses()) {
    return;  // never against a witness, not even at the deadline
  }
  if (t_.state == TxnState::kOpen) {
    Decide(Decision::kCancel, DecisionCause::kDeadline, "OPEN deadline passed");
    return;
  }
  if (t_.state != TxnState::kTrying) return;
  for (const auto& br : t_.branches) {
    if (br.try_phase.state != PhaseState::kSucceeded) {
      Decide(Decision::kCancel, DecisionCause::kDeadline,
             absl::StrCat(
                 "try-deadline passed with branch ", br.spec.branch_id, " Try ",
                 br.try_phase.state == PhaseState::kFailed ? "failed"
                                                           : "unknown"));
      return;
    }
  }
}

void Stepper::StartPhase2() {
  for (uint32_t b = 0; b < t_.branches.size(); ++b) {
    auto& br = t_.branches[b];
    if (br.second_phase.state == PhaseState::kSucceeded) continue;
    if (br.op == BranchOp::kAwaitDurable) continue;  // after its record
    if (br.op == BranchOp::kCalling && br.op_phase != Phase::kTry) continue;
    if (o_.breakers.skip_cancel_for_unconfirmed_try &&
        t_.decision == Decision::kCancel &&
        (br.try_phase.state == PhaseState::kUnknown ||
         br.try_phase.state == PhaseState::kNotSent)) {
      UpdatePhase(b, Phase::kCancel, PhaseState::kSucceeded, Outcome::kNone,
                  "skipped: unknown Try assumed to hold nothing");
      continue;
    }
    SendPhase2(b);
  }
  MaybeFinish();
}

void Stepper::MaybeFinish() {
  if (!t_.decision_durable || wal::IsFinal(t_.state) ||
      (t_.state != TxnState::kConfirming &&
       t_.state != TxnState::kCancelling)) {
    return;
  }
  for (const auto& br : t_.branches) {
    if (br.second_phase.state != PhaseState::kSucceeded) return;
  }
  wal::Finished f;
  f.state = t_.decision == Decision::kConfirm ? TxnState::kConfirmed
                                              : TxnState::kCancelled;
  f.at_ms = now_;
  Record1(std::move(f), Durability::kBuffered);
  Signal(SignalKind::kFinished, -1, TxnStateName(t_.state));
}

void Stepper::KickUnresolvedTrys() {
  if (t_.decision != Decision::kNone) return;
  for (uint32_t b = 0; b < t_.branches.size(); ++b) {
    auto& br = t_.branches[b];
    if (IsResolved(br.try_phase.state) || br.op != BranchOp::kIdle) continue;
    if (!br.try_maybe_sent) {
      if (!TryDeadlineReached()) SendTry(b);
    } else {
      SendQuery(b);
    }
  }
}

void Stepper::OnRegisteredDurable() {
  t_.registered_durable = true;
  effects_.push_back(ArmDeadlineEffect{DeadlineKind::kTry, t_.try_deadline_ms});
  if (t_.interactive) {
    // A Commit that came before this (with no branches: none could be
    // added before) waits for nothing else.
    Evaluate();
    return;
  }
  if (TryDeadlineReached()) {
    TryDeadlinePassed();
    return;
  }
  for (uint32_t b = 0; b < t_.branches.size(); ++b) SendTry(b);
}

void Stepper::OnBranchAddedDurable(uint32_t b) {
  auto& br = t_.branches[b];
  br.op = BranchOp::kIdle;
  if (t_.decision != Decision::kNone) {
    if (t_.decision_durable) StartPhase2();
    return;
  }
  if (TryDeadlineReached()) {
    ResolveTry(b, PhaseState::kFailed, Outcome::kNone,
               "try-deadline passed before the Try was sent");
    return;
  }
  SendTry(b);
}

void Stepper::OnDecidedDurable() {
  if (t_.decision_durable) return;
  t_.decision_durable = true;
  if (t_.decision_cause == DecisionCause::kWitnessed) {
    int by = -1;
    for (uint32_t b = 0; b < t_.branches.size() && by < 0; ++b) {
      if (t_.branches[b].witness == t_.decision) by = static_cast<int>(b);
    }
    Signal(SignalKind::kLostDecision, by, t_.decision_reason);
  }
  StartPhase2();
}

void Stepper::ResolveTry(uint32_t b, PhaseState state, Outcome outcome,
                         std::string why) {
  auto& br = t_.branches[b];
  const bool had_failures = br.failures > 0;
  UpdatePhase(b, Phase::kTry, state, outcome, std::move(why));
  if (br.op_phase == Phase::kTry &&
      (br.op == BranchOp::kCalling || br.op == BranchOp::kQuerying ||
       br.op == BranchOp::kBackoff)) {
    br.op = BranchOp::kIdle;
  }
  br.failures = 0;
  if (state == PhaseState::kSucceeded) br.not_found = false;
  if (had_failures) {
    Signal(SignalKind::kUnknownResolved, static_cast<int>(b),
           absl::StrCat("Try ", OutcomeName(outcome)));
  }
  Evaluate();
}

void Stepper::TryStillUnknown(uint32_t b, std::string why) {
  auto& br = t_.branches[b];
  ++br.failures;
  UpdatePhase(b, Phase::kTry, PhaseState::kUnknown, Outcome::kNone, why);
  Signal(SignalKind::kUnknownOutcome, static_cast<int>(b), std::move(why));
  if (t_.decision != Decision::kNone) {
    br.op = BranchOp::kIdle;
    return;
  }
  br.op = BranchOp::kBackoff;
  br.op_phase = Phase::kTry;
  effects_.push_back(ScheduleRetryEffect{b, br.failures, false});
  Signal(SignalKind::kRetry, static_cast<int>(b), "query");
}

bool Stepper::Ready(const Waiter& w) const {
  const bool final = wal::IsFinal(t_.state);
  switch (w.kind) {
    case WaiterKind::kSubmit:
      if (w.wait_for == WaitFor::kAccepted) return t_.registered_durable;
      if (w.wait_for == WaitFor::kDecided) return t_.decision_durable;
      return final;
    case WaiterKind::kBegin:
      return t_.registered_durable;
    case WaiterKind::kTry: {
      if (w.branch >= t_.branches.size()) return true;
      const auto& br = t_.branches[w.branch];
      return IsResolved(br.try_phase.state) || br.failures > 0 ||
             t_.decision_durable;
    }
    case WaiterKind::kCommit:
      if (w.wait_for == WaitFor::kAccepted) {
        return (t_.interactive ? t_.committed_durable
                               : t_.registered_durable) ||
               t_.decision_durable;
      }
      if (w.wait_for == WaitFor::kDecided) return t_.decision_durable;
      return final;
    case WaiterKind::kRollback:
      if (w.wait_for == WaitFor::kFinished) return final;
      return t_.decision_durable;
    case WaiterKind::kAdmin:
      return w.persist_seq == 0 &&
             (t_.decision_durable || t_.decision == Decision::kNone);
  }
  return false;
}

absl::Status Stepper::AnswerStatus(const Waiter& w) const {
  if (w.kind == WaiterKind::kCommit && t_.decision_durable &&
      t_.decision == Decision::kCancel) {
    return absl::AbortedError(
        absl::StrCat("transaction cancelled: ", t_.decision_reason));
  }
  return absl::OkStatus();
}

void Stepper::AnswerReady() {
  std::vector<Waiter> keep;
  for (const auto& w : t_.waiters) {
    if (Ready(w)) {
      Answer(w.request, AnswerStatus(w), w.duplicate,
             w.kind == WaiterKind::kTry ? static_cast<int>(w.branch) : -1);
    } else {
      keep.push_back(w);
    }
  }
  t_.waiters = std::move(keep);
}

// ---------------------------------------------------------------- requests

absl::Status Stepper::On(const SubmitEvent& e) {
  const SubmitSpec& s = e.spec;
  if (t_.exists) {
    if (t_.interactive) {
      return absl::AlreadyExistsError(absl::StrCat(
          "gid ", t_.gid, " is an interactive transaction; use a new gid"));
    }
    if (!t_.content_hash ||
        *t_.content_hash !=
            HashOfBranches(s.revision, s.approval_gate, s.branches)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "gid ", t_.gid, " was submitted with other content; use a new gid"));
    }
    AddWaiter(Waiter{e.request, WaiterKind::kSubmit, s.wait_for, 0, true, 0});
    return absl::OkStatus();
  }
  if (auto st = ValidateSubmit(s, o_); !st.ok()) return st;
  wal::Registered reg;
  reg.branches = s.branches;
  std::sort(reg.branches.begin(), reg.branches.end(),
            [](const BranchSpec& a, const BranchSpec& b) {
              return a.branch_id < b.branch_id;
            });
  for (auto& b : reg.branches) b.branch_hash = HashOfBranch(s.revision, b);
  reg.gid = s.gid;
  reg.created_at_ms = s.created_at_ms;
  reg.revision = s.revision;
  reg.interactive = false;
  reg.approval_gate = s.approval_gate;
  reg.approval_timeout_ms = s.approval_timeout_ms > 0
                                ? s.approval_timeout_ms
                                : o_.default_approval_timeout_ms;
  reg.try_deadline_ms =
      now_ +
      (s.try_timeout_ms > 0 ? s.try_timeout_ms : o_.default_try_timeout_ms);
  reg.registered_at_ms = now_;
  reg.content_hash = HashOfBranches(s.revision, s.approval_gate, s.branches);
  reg.owner_epoch = e.owner_epoch;
  uint64_t seq = Record1(std::move(reg), Durability::kDurable);
  AddPending(seq, PersistPurpose::kRegistered);
  AddWaiter(Waiter{e.request, WaiterKind::kSubmit, s.wait_for, 0, false, 0});
  return absl::OkStatus();
}

absl::Status Stepper::On(const BeginEvent& e) {
  const BeginSpec& s = e.spec;
  if (t_.exists) {
    if (!t_.interactive || t_.revision != s.revision ||
        t_.approval_gate != s.approval_gate) {
      return absl::AlreadyExistsError(absl::StrCat(
          "gid ", t_.gid, " was opened with other content; use a new gid"));
    }
    AddWaiter(
        Waiter{e.request, WaiterKind::kBegin, WaitFor::kAccepted, 0, true, 0});
    return absl::OkStatus();
  }
  if (auto st = ValidateBegin(s, o_); !st.ok()) return st;
  wal::Registered reg;
  reg.gid = s.gid;
  reg.created_at_ms = s.created_at_ms;
  reg.revision = s.revision;
  reg.interactive = true;
  reg.approval_gate = s.approval_gate;
  reg.approval_timeout_ms = s.approval_timeout_ms > 0
                                ? s.approval_timeout_ms
                                : o_.default_approval_timeout_ms;
  reg.try_deadline_ms =
      now_ + (s.timeout_ms > 0 ? s.timeout_ms : o_.default_try_timeout_ms);
  reg.registered_at_ms = now_;
  reg.owner_epoch = e.owner_epoch;
  uint64_t seq = Record1(std::move(reg), Durability::kDurable);
  AddPending(seq, PersistPurpose::kRegistered);
  AddWaiter(
      Waiter{e.request, WaiterKind::kBegin, WaitFor::kAccepted, 0, false, 0});
  return absl::OkStatus();
}

absl::Status Stepper::On(const TryEvent& e) {
  if (auto st = ValidateBranch(e.branch, o_); !st.ok()) return st;
  Hash h = HashOfBranch(t_.revision, e.branch);
  int idx = FindBranch(t_, e.branch.branch_id);
  if (idx >= 0) {
    if (t_.branches[idx].spec.branch_hash != h) {
      return absl::AlreadyExistsError(absl::StrCat(
          "branch ", e.branch.branch_id, " was registered with other content"));
    }
    AddWaiter(Waiter{e.request, WaiterKind::kTry, WaitFor::kAccepted,
                     static_cast<uint32_t>(idx), true, 0});
    return absl::OkStatus();
  }
  if (!t_.interactive) {
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid,
                     " was submitted whole; Try is for "
                     "transactions opened with Begin"));
  }
  if (t_.state != TxnState::kOpen) {
    if (auto st = DecisionInFlight(); !st.ok()) return st;
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " is ", TxnStateName(t_.state),
                     ", not OPEN; no new branches"));
  }
  if (t_.branches.size() >= o_.max_branches) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", o_.max_branches, " branches"));
  }
  wal::BranchAdded add;
  add.branch = e.branch;
  add.branch.branch_hash = h;
  uint64_t seq = Record1(std::move(add), Durability::kDurable);
  uint32_t b = static_cast<uint32_t>(t_.branches.size() - 1);
  t_.branches[b].op = BranchOp::kAwaitDurable;
  AddPending(seq, PersistPurpose::kBranchAdded, b);
  AddWaiter(
      Waiter{e.request, WaiterKind::kTry, WaitFor::kAccepted, b, false, 0});
  return absl::OkStatus();
}

absl::Status Stepper::On(const CommitEvent& e) {
  std::vector<std::string> registered;
  for (const auto& br : t_.branches) registered.push_back(br.spec.branch_id);
  std::sort(registered.begin(), registered.end());
  std::vector<std::string> expected = e.expected_branch_ids;
  std::sort(expected.begin(), expected.end());
  if (expected != registered) {
    return absl::FailedPreconditionError(
        absl::StrCat("expected branch ids differ from the registered ones: [",
                     absl::StrJoin(registered, ","), "]"));
  }
  if (t_.decision == Decision::kCancel &&
      (t_.decision_cause == DecisionCause::kRollback ||
       t_.decision_cause == DecisionCause::kForced)) {
    if (auto st = DecisionInFlight(); !st.ok()) return st;
    return absl::FailedPreconditionError(absl::StrCat(
        "gid ", t_.gid, " was decided Cancel: ", t_.decision_reason));
  }
  if (t_.state == TxnState::kOpen) {
    wal::StateChanged sc;
    sc.state = TxnState::kTrying;
    std::vector<BranchSpec> specs;
    specs.reserve(t_.branches.size());
    for (const auto& br : t_.branches) specs.push_back(br.spec);
    sc.content_hash = HashOfBranches(t_.revision, t_.approval_gate, specs);
    sc.at_ms = now_;
    uint64_t seq = Record1(std::move(sc), Durability::kDurable);
    AddPending(seq, PersistPurpose::kCommitted);
    Evaluate();
  }
  AddWaiter(Waiter{e.request, WaiterKind::kCommit, e.wait_for, 0, false, 0});
  return absl::OkStatus();
}

absl::Status Stepper::On(const RollbackEvent& e) {
  if (t_.decision == Decision::kNone) {
    if (!t_.held_reason.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gid ", t_.gid, " is held for an operator: ", t_.held_reason));
    }
    if (std::any_of(t_.branches.begin(), t_.branches.end(),
                    [](const BranchRuntime& x) {
                      return x.witness == Decision::kConfirm;
                    })) {
      return absl::UnavailableError(absl::StrCat(
          "gid ", t_.gid,
          ": a participant witnessed a Confirm the WAL lost; it is being "
          "resolved, retry in a moment"));
    }
  }
  if (t_.decision == Decision::kConfirm) {
    if (auto st = DecisionInFlight(); !st.ok()) return st;
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " was decided Confirm"));
  }
  if (t_.decision == Decision::kNone) {
    Decide(Decision::kCancel, DecisionCause::kRollback,
           "requested by the caller");
  }
  AddWaiter(Waiter{e.request, WaiterKind::kRollback, e.wait_for, 0, false, 0});
  return absl::OkStatus();
}

// ---------------------------------------------------------------- replies

absl::Status Stepper::On(const CallReplyEvent& e) {
  if (e.branch >= t_.branches.size()) {
    return absl::InvalidArgumentError("reply for an unknown branch");
  }
  if (e.phase == Phase::kTry) {
    if (e.attempt == 0 ||
        e.attempt > t_.branches[e.branch].try_phase.attempts) {
      return absl::InvalidArgumentError("reply for a Try never sent");
    }
    OnTryReply(e);
    return absl::OkStatus();
  }
  const Phase expected =
      t_.decision == Decision::kConfirm ? Phase::kConfirm : Phase::kCancel;
  if (t_.decision == Decision::kNone || e.phase != expected || e.attempt == 0 ||
      e.attempt > t_.branches[e.branch].second_phase.attempts) {
    return absl::InvalidArgumentError(
        absl::StrCat("reply for a ", PhaseName(e.phase), " never sent"));
  }
  OnPhase2Reply(e);
  return absl::OkStatus();
}

void Stepper::OnTryReply(const CallReplyEvent& e) {
  auto& br = t_.branches[e.branch];
  const bool current = br.op == BranchOp::kCalling &&
                       br.op_phase == Phase::kTry && br.op_attempt == e.attempt;
  const int bi = static_cast<int>(e.branch);
  // Once decided, Try answers are moot: a HANGING_REFUSED that follows our
  // own Cancel says nothing about an earlier attempt.
  if (t_.decision != Decision::kNone) return;
  if (IsResolved(br.try_phase.state)) {
    if (e.status.ok()) {
      const bool says_ok = e.outcome == Outcome::kExecuted;
      const bool is_ok = br.try_phase.state == PhaseState::kSucceeded;
      if (says_ok != is_ok && br.try_phase.outcome != Outcome::kNone) {
        Signal(SignalKind::kAlert, bi,
               absl::StrCat("Try answered ", OutcomeName(e.outcome), " after ",
                            OutcomeName(br.try_phase.outcome)));
      }
    }
    return;
  }
  if (e.status.ok()) {
    switch (e.outcome) {
      case Outcome::kExecuted:
        ResolveTry(e.branch, PhaseState::kSucceeded, Outcome::kExecuted,
                   e.message);
        return;
      case Outcome::kRejected:
        if (e.replayed && o_.breakers.replayed_rejected_is_success) {
          ResolveTry(e.branch, PhaseState::kSucceeded, Outcome::kExecuted,
                     e.message);
          return;
        }
        [[fallthrough]];
      case Outcome::kHangingRefused:
      case Outcome::kConflict:
        ResolveTry(e.branch, PhaseState::kFailed, e.outcome, e.message);
        return;
      default:
        Signal(SignalKind::kAlert, bi,
               absl::StrCat("Try answered ", OutcomeName(e.outcome),
                            ", which a Try cannot answer"));
        if (current) {
          TryStillUnknown(e.branch, "protocol violation: " +
                                        std::string(OutcomeName(e.outcome)));
        }
        return;
    }
  }
  if (!current) return;  // a stale attempt's error says nothing new
  if (e.not_sent && !br.try_maybe_sent_before_attempt) {
    br.try_maybe_sent = false;
    ResolveTry(e.branch, PhaseState::kFailed, Outcome::kNone,
               absl::StrCat("not sent: ", StatusText(e.status)));
    return;
  }
  if (IsDefiniteRefusal(e.status.code())) {
    // DESIGN.md section 5: nothing ran; the branch failed (an alert: the
    // participant saw a protocol violation or could not read the call).
    Signal(SignalKind::kAlert, bi,
           absl::StrCat("Try answered ", StatusText(e.status)));
    ResolveTry(e.branch, PhaseState::kFailed, Outcome::kNone,
               StatusText(e.status));
    return;
  }
  TryStillUnknown(e.branch, StatusText(e.status));
}

void Stepper::OnPhase2Reply(const CallReplyEvent& e) {
  auto& br = t_.branches[e.branch];
  const int bi = static_cast<int>(e.branch);
  const bool current = br.op == BranchOp::kCalling && br.op_phase == e.phase &&
                       br.op_attempt == e.attempt;
  if (br.second_phase.state == PhaseState::kSucceeded) return;
  std::string error;
  if (e.status.ok()) {
    const bool success = e.phase == Phase::kConfirm
                             ? e.outcome == Outcome::kExecuted
                             : (e.outcome == Outcome::kExecuted ||
                                e.outcome == Outcome::kEmptyRollback ||
                                e.outcome == Outcome::kConflict);
    if (success) {
      if (e.outcome == Outcome::kConflict) {
        Signal(SignalKind::kAlert, bi,
               "Cancel answered CONFLICT: the key is held by other content; "
               "nothing of this transaction is held there");
      }
      UpdatePhase(e.branch, e.phase, PhaseState::kSucceeded, e.outcome,
                  e.message);
      if (br.op_phase == e.phase && br.op != BranchOp::kIdle) {
        br.op = BranchOp::kIdle;
      }
      br.failures = 0;
      if (br.stuck) {
        wal::Flagged f;
        f.branch_id = br.spec.branch_id;
        f.stuck = false;
        f.reason = "phase 2 succeeded";
        f.at_ms = now_;
        Record1(std::move(f), Durability::kBuffered);
        Signal(SignalKind::kUnstuck, bi, "");
      }
      MaybeFinish();
      return;
    }
    error =
        absl::StrCat(PhaseName(e.phase), " answered ", OutcomeName(e.outcome));
    Flag(e.branch, "protocol violation: " + error);
    Signal(SignalKind::kAlert, bi, error);
  } else {
    error = StatusText(e.status);
    if (IsDefiniteRefusal(e.status.code())) {
      Flag(e.branch, absl::StrCat(PhaseName(e.phase), " answered ", error));
      Signal(SignalKind::kAlert, bi, error);
    } else {
      Signal(SignalKind::kUnknownOutcome, bi, error);
    }
  }
  if (!current) return;
  ++br.failures;
  // Phase 2 is retried for as long as it takes (days, at the slowest rate).
  // A failure is written when the error differs from the last one, for the
  // first kWrittenRepeats failures in a row, then every kWriteEvery-th: a
  // branch failing the same way for a day writes a few dozen records, not
  // one per attempt. The WAL's attempt count may then lag by less than
  // kWriteEvery after a crash; STUCK has its own record (Flagged).
  const bool repeat = error == br.second_phase.last_error;
  const bool write = !repeat || br.failures <= kWrittenRepeats ||
                     br.failures % kWriteEvery == 0;
  UpdatePhase(e.branch, e.phase, PhaseState::kUnknown, Outcome::kNone, error,
              write);
  if (br.failures >= o_.stuck_after_failures) {
    Flag(e.branch, absl::StrCat(br.failures, " failed ", PhaseName(e.phase),
                                " attempts; last: ", error));
  }
  br.op = BranchOp::kBackoff;
  br.op_phase = e.phase;
  effects_.push_back(ScheduleRetryEffect{e.branch, br.failures, br.stuck});
  Signal(SignalKind::kRetry, bi, PhaseName(e.phase));
}

absl::Status Stepper::On(const QueryReplyEvent& e) {
  if (e.branch >= t_.branches.size() || e.query_id == 0 ||
      e.query_id >= t_.next_query) {
    return absl::InvalidArgumentError("answer to a Query never sent");
  }
  auto& br = t_.branches[e.branch];
  const bool current =
      br.op == BranchOp::kQuerying && br.op_query == e.query_id;
  if (IsResolved(br.try_phase.state) || t_.decision != Decision::kNone) {
    return absl::OkStatus();  // stale
  }
  if (!e.status.ok() || !e.authoritative) {
    if (current) {
      TryStillUnknown(e.branch,
                      e.status.ok()
                          ? absl::StrCat("query: not authoritative ",
                                         BarrierStateName(e.barrier))
                          : absl::StrCat("query: ", StatusText(e.status)));
    }
    return absl::OkStatus();
  }
  const bool same = e.branch_hash == br.spec.branch_hash;
  switch (e.barrier) {
    case BarrierState::kTried:
      if (same) {
        ResolveTry(e.branch, PhaseState::kSucceeded, Outcome::kExecuted,
                   "query: TRIED");
      } else {
        ResolveTry(e.branch, PhaseState::kFailed, Outcome::kConflict,
                   "query: TRIED under another branch hash");
      }
      return absl::OkStatus();
    case BarrierState::kTryRejected:
      ResolveTry(e.branch, PhaseState::kFailed,
                 same ? Outcome::kRejected : Outcome::kConflict,
                 "query: TRY_REJECTED");
      return absl::OkStatus();
    case BarrierState::kCancelledBeforeTry:
    case BarrierState::kConfirmed:
    case BarrierState::kCancelled:
      if (!same) {
        ResolveTry(e.branch, PhaseState::kFailed, Outcome::kConflict,
                   absl::StrCat("query: ", BarrierStateName(e.barrier),
                                " under another branch hash"));
        return absl::OkStatus();
      }
      Witness(e.branch,
              e.barrier == BarrierState::kConfirmed ? Decision::kConfirm
                                                    : Decision::kCancel,
              e.barrier);
      return absl::OkStatus();
    case BarrierState::kNotFound: {
      if (!current) return absl::OkStatus();
      br.not_found = true;
      const bool witnessed = std::any_of(
          t_.branches.begin(), t_.branches.end(),
          [](const BranchRuntime& x) { return x.witness != Decision::kNone; });
      if (witnessed) {
        // A fact for the witness rule; no Try is sent against a witness.
        br.op = BranchOp::kIdle;
        DecideByWitnesses();
      } else if (!TryDeadlineReached()) {
        SendTry(e.branch);
      } else {
        br.op = BranchOp::kIdle;
        TryDeadlinePassed();
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown barrier state");
}

absl::Status Stepper::On(const RetryDueEvent& e) {
  if (e.branch >= t_.branches.size()) {
    return absl::InvalidArgumentError("retry for an unknown branch");
  }
  auto& br = t_.branches[e.branch];
  if (br.op != BranchOp::kBackoff) return absl::OkStatus();  // stale
  if (br.op_phase == Phase::kTry) {
    if (t_.decision != Decision::kNone) {
      br.op = BranchOp::kIdle;
      return absl::OkStatus();
    }
    if (TryDeadlineReached()) {
      br.op = BranchOp::kIdle;
      TryDeadlinePassed();
      // A Confirm witness waits for this branch's fact past the deadline.
      if (t_.decision != Decision::kNone || !t_.held_reason.empty()) {
        return absl::OkStatus();
      }
      if (!std::any_of(t_.branches.begin(), t_.branches.end(),
                       [](const BranchRuntime& x) {
                         return x.witness != Decision::kNone;
                       })) {
        return absl::OkStatus();
      }
    }
    SendQuery(e.branch);
    return absl::OkStatus();
  }
  if (br.second_phase.state == PhaseState::kSucceeded) {
    br.op = BranchOp::kIdle;
    return absl::OkStatus();
  }
  SendPhase2(e.branch);
  return absl::OkStatus();
}

absl::Status Stepper::On(const DeadlineEvent& e) {
  // The monotonic timer armed for the deadline ran out: the deadline has
  // passed, even if the wall clock was set back meanwhile and says
  // otherwise (an early Cancel only makes a late Try refused; a Try that
  // reserved inside the skew window is released by that Cancel).
  if (e.kind == DeadlineKind::kTry) {
    t_.try_deadline_elapsed = true;
    TryDeadlinePassed();
    return absl::OkStatus();
  }
  if (t_.state == TxnState::kAwaitingApproval &&
      t_.decision == Decision::kNone) {
    t_.approval_deadline_elapsed = true;
    Decide(Decision::kCancel, DecisionCause::kDeadline,
           "approval deadline passed");
  }
  return absl::OkStatus();
}

absl::Status Stepper::On(const DurableEvent& e) {
  if (e.seq == 0 || e.seq >= t_.next_seq) {
    return absl::InvalidArgumentError("durable notice for no persist");
  }
  // The log keeps a prefix: everything appended before is durable too.
  while (!t_.pending.empty() && t_.pending.front().seq <= e.seq) {
    PendingPersist p = std::move(t_.pending.front());
    t_.pending.erase(t_.pending.begin());
    switch (p.purpose) {
      case PersistPurpose::kRegistered:
        OnRegisteredDurable();
        break;
      case PersistPurpose::kBranchAdded:
        OnBranchAddedDurable(p.branch);
        break;
      case PersistPurpose::kCommitted:
        t_.committed_durable = true;
        break;
      case PersistPurpose::kDecided:
        for (auto& w : t_.waiters) {
          if (w.kind == WaiterKind::kAdmin && w.persist_seq == p.seq) {
            w.persist_seq = 0;
          }
        }
        OnDecidedDurable();
        break;
      case PersistPurpose::kBranchResolved: {
        auto& br = t_.branches[p.branch];
        if (br.second_phase.state != PhaseState::kSucceeded) {
          wal::BranchResolved r;
          r.branch_id = br.spec.branch_id;
          r.approval_id = p.approval_id;
          r.at_ms = p.at_ms;
          MustApply(r);
          if (br.op != BranchOp::kIdle && br.op_phase != Phase::kTry) {
            br.op = BranchOp::kIdle;
          }
        }
        for (auto& w : t_.waiters) {
          if (w.kind == WaiterKind::kAdmin && w.persist_seq == p.seq) {
            w.persist_seq = 0;
          }
        }
        MaybeFinish();
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Stepper::On(const PersistFailedEvent& e) {
  if (e.seq == 0 || e.seq >= t_.next_seq) {
    return absl::InvalidArgumentError("failure notice for no persist");
  }
  auto it =
      std::find_if(t_.pending.begin(), t_.pending.end(),
                   [&](const PendingPersist& p) { return p.seq == e.seq; });
  const bool approval =
      it != t_.pending.end() && !it->approval_id.empty() &&
      e.status.code() == absl::StatusCode::kFailedPrecondition;
  if (approval) {
    PendingPersist p = *it;
    t_.pending.erase(it);
    std::vector<Waiter> keep;
    for (const auto& w : t_.waiters) {
      if (w.kind == WaiterKind::kAdmin && w.persist_seq == p.seq) {
        Answer(w.request, e.status, false, -1);
      } else {
        keep.push_back(w);
      }
    }
    t_.waiters = std::move(keep);
    if (p.purpose == PersistPurpose::kDecided && !t_.decision_durable) {
      // The WAL refused the approval and wrote nothing: undo the decision.
      t_.state = p.state_before;
      t_.decision = Decision::kNone;
      t_.decision_cause = DecisionCause::kNone;
      t_.decision_reason.clear();
      t_.decided_at_ms = 0;
      // A Rollback that came while the refused decision was Cancel (and so
      // only waited for it) still asks for Cancel.
      const bool rollback_waits = std::any_of(
          t_.waiters.begin(), t_.waiters.end(),
          [](const Waiter& w) { return w.kind == WaiterKind::kRollback; });
      if (rollback_waits) {
        Decide(Decision::kCancel, DecisionCause::kRollback,
               "requested by the caller");
      }
      Evaluate();
      TryDeadlinePassed();
      if (t_.state == TxnState::kAwaitingApproval &&
          ApprovalDeadlineReached()) {
        Decide(Decision::kCancel, DecisionCause::kDeadline,
               "approval deadline passed");
      }
      KickUnresolvedTrys();
    }
    return absl::OkStatus();
  }
  // Fail-stop: the log is stopped; this owner must be dropped and the
  // transaction recovered from what the log kept.
  t_.poisoned = true;
  // A registration the WAL refused for want of room left nothing behind:
  // the caller may submit again (same gid). Any other failure leaves the
  // outcome unknown to the caller.
  const bool nothing_written =
      it != t_.pending.end() && it->purpose == PersistPurpose::kRegistered &&
      e.status.code() == absl::StatusCode::kResourceExhausted;
  const absl::Status answer =
      nothing_written
          ? absl::ResourceExhaustedError(absl::StrCat(
                "the WAL is busy, nothing was written: submit again (same "
                "gid): ",
                StatusText(e.status)))
          : absl::UnavailableError(
                absl::StrCat("the WAL failed: ", StatusText(e.status)));
  for (const auto& w : t_.waiters) Answer(w.request, answer, false, -1);
  t_.waiters.clear();
  Signal(SignalKind::kAlert, -1,
         absl::StrCat("WAL append failed: ", StatusText(e.status)));
  return absl::OkStatus();
}

// ---------------------------------------------------------------- approvals

absl::Status Stepper::On(const GateApproveEvent& e) {
  // An approval allows one action: once it happened, asking again (with this
  // approval or another) is refused, never answered as done, so that of two
  // uses exactly one wins (DESIGN.md section 10).
  if (t_.decision != Decision::kNone) {
    if (auto st = DecisionInFlight(); !st.ok()) return st;
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " is already decided ",
                     DecisionName(t_.decision), ": ", t_.decision_reason));
  }
  if (t_.state != TxnState::kAwaitingApproval) {
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " is ", TxnStateName(t_.state),
                     ", not AWAITING_APPROVAL"));
  }
  uint64_t seq =
      Decide(Decision::kConfirm, DecisionCause::kGate,
             absl::StrCat("approval ", e.approval_id), e.approval_id);
  AddWaiter(Waiter{e.request, WaiterKind::kAdmin, WaitFor::kDecided, 0, false,
                   t_.decision_durable ? 0 : seq});
  return absl::OkStatus();
}

absl::Status Stepper::On(const ForceDecisionEvent& e) {
  if (e.decision != Decision::kConfirm && e.decision != Decision::kCancel) {
    return absl::InvalidArgumentError("force Confirm or Cancel");
  }
  if (t_.decision != Decision::kNone) {  // see GateApproveEvent
    if (auto st = DecisionInFlight(); !st.ok()) return st;
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " is already decided ",
                     DecisionName(t_.decision), ": ", t_.decision_reason));
  }
  if (e.decision == Decision::kConfirm) {
    if (t_.state == TxnState::kOpen) {
      return absl::FailedPreconditionError(
          "an OPEN transaction is not committed; it cannot be forced to "
          "Confirm");
    }
    // A held transaction's witnesses contradict each other: the operator
    // decides (DESIGN.md section 10).
    for (const auto& br : t_.branches) {
      if (t_.held_reason.empty() &&
          br.try_phase.state != PhaseState::kSucceeded) {
        return absl::FailedPreconditionError(absl::StrCat(
            "branch ", br.spec.branch_id,
            " Try is not known EXECUTED; Confirm cannot be forced"));
      }
    }
  }
  uint64_t seq =
      Decide(e.decision, DecisionCause::kForced,
             absl::StrCat("approval ", e.approval_id), e.approval_id);
  AddWaiter(Waiter{e.request, WaiterKind::kAdmin, WaitFor::kDecided, 0, false,
                   t_.decision_durable ? 0 : seq});
  return absl::OkStatus();
}

absl::Status Stepper::On(const ResolveBranchEvent& e) {
  int idx = FindBranch(t_, e.branch_id);
  if (idx < 0) {
    return absl::NotFoundError(absl::StrCat("no branch ", e.branch_id));
  }
  if (t_.decision == Decision::kNone || !t_.decision_durable) {
    return absl::FailedPreconditionError(
        "only a phase-2 branch can be resolved by hand");
  }
  if (t_.branches[idx].second_phase.state == PhaseState::kSucceeded) {
    return absl::FailedPreconditionError(absl::StrCat(
        "branch ", e.branch_id, " is already done; nothing to resolve"));
  }
  for (const auto& p : t_.pending) {  // a resolve in flight: one wins
    if (p.purpose == PersistPurpose::kBranchResolved &&
        p.branch == static_cast<uint32_t>(idx)) {
      return absl::FailedPreconditionError(
          absl::StrCat("branch ", e.branch_id, " is already being resolved"));
    }
  }
  wal::BranchResolved r;
  r.branch_id = e.branch_id;
  r.approval_id = e.approval_id;
  r.at_ms = now_;
  std::vector<Record> v;
  v.push_back(std::move(r));
  uint64_t seq = Persist(std::move(v), Durability::kDurable);
  PendingPersist p;
  p.seq = seq;
  p.purpose = PersistPurpose::kBranchResolved;
  p.branch = static_cast<uint32_t>(idx);
  p.approval_id = e.approval_id;
  p.at_ms = now_;
  t_.pending.push_back(std::move(p));
  AddWaiter(
      Waiter{e.request, WaiterKind::kAdmin, WaitFor::kDecided, 0, false, seq});
  return absl::OkStatus();
}

// ---------------------------------------------------------------- recovery

absl::Status Stepper::On(const ReplayEvent& e) {
  if (e.record == nullptr) return absl::InvalidArgumentError("no record");
  if (auto st = ApplyRecord(t_, *e.record); !st.ok()) return st;
  if (std::holds_alternative<wal::Registered>(*e.record)) {
    t_.registered_durable = true;
  } else if (const auto* sc = std::get_if<wal::StateChanged>(e.record)) {
    if (sc->state == TxnState::kTrying) t_.committed_durable = true;
  } else if (std::holds_alternative<wal::Decided>(*e.record)) {
    t_.decision_durable = true;
  }
  return absl::OkStatus();
}

absl::Status Stepper::On(const ResumeEvent& e) {
  if (!t_.registered_durable) {
    return absl::FailedPreconditionError("nothing replayed to resume");
  }
  if (wal::IsFinal(t_.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("gid ", t_.gid, " is finished"));
  }
  wal::EpochTaken ep;
  ep.owner_epoch = e.owner_epoch;
  ep.at_ms = now_;
  Record1(std::move(ep), Durability::kBuffered);
  for (auto& br : t_.branches) {
    br.op = BranchOp::kIdle;
    br.failures = 0;
    br.try_maybe_sent = true;
    br.try_maybe_sent_before_attempt = true;
  }
  switch (t_.state) {
    case TxnState::kOpen:
    case TxnState::kTrying:
      effects_.push_back(
          ArmDeadlineEffect{DeadlineKind::kTry, t_.try_deadline_ms});
      if (o_.breakers.resume_skips_unknown_try_lookup) {
        for (uint32_t b = 0; b < t_.branches.size(); ++b) {
          // Unknown after a resume: any Try not resolved (a call leaves no
          // record, so one that was sent may replay as not sent).
          if (!IsResolved(t_.branches[b].try_phase.state)) {
            UpdatePhase(b, Phase::kTry, PhaseState::kSucceeded,
                        Outcome::kExecuted, "breaker: no lookup on resume");
          }
        }
      }
      Evaluate();
      TryDeadlinePassed();
      KickUnresolvedTrys();
      break;
    case TxnState::kAwaitingApproval:
      effects_.push_back(
          ArmDeadlineEffect{DeadlineKind::kApproval, t_.approval_deadline_ms});
      if (ApprovalDeadlineReached()) {
        Decide(Decision::kCancel, DecisionCause::kDeadline,
               "approval deadline passed");
      }
      break;
    case TxnState::kConfirming:
    case TxnState::kCancelling:
      StartPhase2();
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyRecord(Txn& t, const wal::Record& record) {
  if (const auto* reg = std::get_if<wal::Registered>(&record)) {
    if (t.exists) return absl::InvalidArgumentError("registered twice");
    t.exists = true;
    t.gid = reg->gid;
    t.created_at_ms = reg->created_at_ms;
    t.revision = reg->revision;
    t.interactive = reg->interactive;
    t.approval_gate = reg->approval_gate;
    t.approval_timeout_ms = reg->approval_timeout_ms;
    t.try_deadline_ms = reg->try_deadline_ms;
    t.registered_at_ms = reg->registered_at_ms;
    if (reg->interactive) {
      t.content_hash.reset();
    } else {
      t.content_hash = reg->content_hash;
    }
    t.owner_epoch = reg->owner_epoch;
    t.state = reg->interactive ? TxnState::kOpen : TxnState::kTrying;
    t.branches.clear();
    for (const auto& b : reg->branches) {
      BranchRuntime br;
      br.spec = b;
      br.payload_size = static_cast<uint32_t>(b.payload.size());
      t.branches.push_back(std::move(br));
    }
    return absl::OkStatus();
  }
  if (!t.exists) return absl::InvalidArgumentError("record before Registered");
  if (const auto* add = std::get_if<wal::BranchAdded>(&record)) {
    if (!t.interactive || t.state != TxnState::kOpen ||
        FindBranch(t, add->branch.branch_id) >= 0) {
      return absl::InvalidArgumentError("BranchAdded does not fit");
    }
    BranchRuntime br;
    br.spec = add->branch;
    br.payload_size = static_cast<uint32_t>(add->branch.payload.size());
    t.branches.push_back(std::move(br));
    return absl::OkStatus();
  }
  if (const auto* u = std::get_if<wal::PhaseUpdate>(&record)) {
    int i = FindBranch(t, u->branch_id);
    if (i < 0) return absl::InvalidArgumentError("PhaseUpdate: no branch");
    PhaseProgress& p = u->phase == Phase::kTry ? t.branches[i].try_phase
                                               : t.branches[i].second_phase;
    p.state = u->state;
    p.outcome = u->outcome;
    p.attempts = u->attempts;
    p.last_error = u->last_error;
    p.updated_at_ms = u->at_ms;
    return absl::OkStatus();
  }
  if (const auto* sc = std::get_if<wal::StateChanged>(&record)) {
    const bool commit =
        sc->state == TxnState::kTrying && t.state == TxnState::kOpen;
    const bool gate = sc->state == TxnState::kAwaitingApproval &&
                      t.state == TxnState::kTrying;
    if (!commit && !gate) {
      return absl::InvalidArgumentError("StateChanged does not fit");
    }
    t.state = sc->state;
    if (sc->content_hash) t.content_hash = *sc->content_hash;
    if (sc->approval_deadline_ms != 0) {
      t.approval_deadline_ms = sc->approval_deadline_ms;
    }
    return absl::OkStatus();
  }
  if (const auto* d = std::get_if<wal::Decided>(&record)) {
    if (d->decision == Decision::kNone ||
        (t.decision != Decision::kNone && t.decision != d->decision)) {
      return absl::InvalidArgumentError("a different decision stands");
    }
    if (t.decision == d->decision) return absl::OkStatus();
    t.decision = d->decision;
    t.decision_reason = d->reason;
    t.decision_cause = d->cause;
    t.decided_at_ms = d->at_ms;
    t.state = d->decision == Decision::kConfirm ? TxnState::kConfirming
                                                : TxnState::kCancelling;
    return absl::OkStatus();
  }
  if (const auto* r = std::get_if<wal::BranchResolved>(&record)) {
    int i = FindBranch(t, r->branch_id);
    if (i < 0) return absl::InvalidArgumentError("BranchResolved: no branch");
    auto& br = t.branches[i];
    br.second_phase.state = PhaseState::kSucceeded;
    br.second_phase.last_error = "resolved by hand";
    br.second_phase.updated_at_ms = r->at_ms;
    br.resolved_by_hand = true;
    br.stuck = false;
    return absl::OkStatus();
  }
  if (const auto* f = std::get_if<wal::Flagged>(&record)) {
    int i = FindBranch(t, f->branch_id);
    if (i < 0) return absl::InvalidArgumentError("Flagged: no branch");
    t.branches[i].stuck = f->stuck;
    t.branches[i].stuck_reason = f->reason;
    return absl::OkStatus();
  }
  if (const auto* fin = std::get_if<wal::Finished>(&record)) {
    if (!wal::IsFinal(fin->state) || t.decision == Decision::kNone ||
        (fin->state == TxnState::kConfirmed) !=
            (t.decision == Decision::kConfirm)) {
      return absl::InvalidArgumentError("Finished does not fit the decision");
    }
    t.state = fin->state;
    t.finished_at_ms = fin->at_ms;
    return absl::OkStatus();
  }
  if (const auto* ep = std::get_if<wal::EpochTaken>(&record)) {
    t.owner_epoch = ep->owner_epoch;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown record");
}

const char* SignalKindName(SignalKind kind) {
  switch (kind) {
    case SignalKind::kAlert:
      return "alert";
    case SignalKind::kStuck:
      return "stuck";
    case SignalKind::kUnstuck:
      return "unstuck";
    case SignalKind::kUnknownOutcome:
      return "unknown outcome";
    case SignalKind::kUnknownResolved:
      return "unknown resolved";
    case SignalKind::kRetry:
      return "retry";
    case SignalKind::kDecided:
      return "decided";
    case SignalKind::kFinished:
      return "finished";
    case SignalKind::kLostDecision:
      return "lost decision";
  }
  return "?";
}

StepResult Step(Txn& txn, const Event& event, int64_t now_ms,
                const Options& options) {
  StepResult result;
  if (txn.poisoned) {
    result.status = absl::UnavailableError(
        "this transaction's owner stopped after a WAL failure");
    return result;
  }
  const bool creates = std::holds_alternative<SubmitEvent>(event) ||
                       std::holds_alternative<BeginEvent>(event) ||
                       std::holds_alternative<ReplayEvent>(event);
  if (!txn.exists && !creates) {
    result.status = absl::NotFoundError("no such transaction");
    return result;
  }
  Stepper s(txn, now_ms, options);
  result.status = std::visit([&](const auto& e) { return s.On(e); }, event);
  if (result.status.ok()) {
    s.AnswerReady();
    result.effects = s.TakeEffects();
  }
  return result;
}

}  // namespace tcc::core
