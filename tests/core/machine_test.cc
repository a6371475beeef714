// The core's transitions: every (state, event) pair of the state table in
// core/machine.h, then one test per behaviour of DESIGN.md sections 4-8, 10.
#include "core/machine.h"

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace tcc::core {
namespace {

constexpr int64_t kNow = 100;
constexpr int64_t kTimeout = 1000;

BranchSpec Branch(const std::string& id, const std::string& payload = "x") {
  BranchSpec b;
  b.branch_id = id;
  b.participant = "p-" + id;
  b.action = "reserve";
  b.payload = payload;
  return b;
}

template <typename T>
std::vector<T> All(const std::vector<Effect>& effects) {
  std::vector<T> out;
  for (const auto& e : effects) {
    if (const auto* x = std::get_if<T>(&e)) out.push_back(*x);
  }
  return out;
}

// The records of every persist effect, in order.
std::vector<wal::Record> Records(const std::vector<Effect>& effects) {
  std::vector<wal::Record> out;
  for (const auto& p : All<PersistEffect>(effects)) {
    out.insert(out.end(), p.records.begin(), p.records.end());
  }
  return out;
}

// Those of type T.
template <typename T>
std::vector<T> RecordsOf(const std::vector<Effect>& effects) {
  std::vector<T> out;
  for (const auto& rec : Records(effects)) {
    if (const auto* x = std::get_if<T>(&rec)) out.push_back(*x);
  }
  return out;
}

// Steps and requires the event to be accepted; then acknowledges every
// durable persist (as a WAL would), collecting all effects.
std::vector<Effect> Run(Txn& t, const Event& e, int64_t now = kNow,
                        const Options& o = {}) {
  StepResult r = Step(t, e, now, o);
  INFO(r.status.ToString());
  REQUIRE(r.status.ok());
  std::vector<Effect> all = r.effects;
  for (;;) {
    auto persists = All<PersistEffect>(r.effects);
    uint64_t last = 0;
    for (const auto& p : persists) {
      if (p.durability == wal::Durability::kDurable) last = p.seq;
    }
    if (last == 0) break;
    r = Step(t, DurableEvent{last}, now, o);
    REQUIRE(r.status.ok());
    all.insert(all.end(), r.effects.begin(), r.effects.end());
  }
  return all;
}

CallEffect LastCall(const std::vector<Effect>& effects, uint32_t branch) {
  auto calls = All<CallEffect>(effects);
  for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
    if (it->branch == branch) return *it;
  }
  FAIL("no call for branch " << branch);
  return {};
}

CallReplyEvent Reply(const CallEffect& c, Outcome o, bool replayed = false) {
  CallReplyEvent e;
  e.branch = c.branch;
  e.phase = c.phase;
  e.attempt = c.attempt;
  e.status = absl::OkStatus();
  e.outcome = o;
  e.replayed = replayed;
  return e;
}

CallReplyEvent Fail(const CallEffect& c, absl::Status s) {
  CallReplyEvent e;
  e.branch = c.branch;
  e.phase = c.phase;
  e.attempt = c.attempt;
  e.status = std::move(s);
  return e;
}

BeginEvent Begin(bool gate = false, uint64_t revision = 1) {
  BeginEvent e;
  e.request = 1;
  e.spec.gid = "g";
  e.spec.created_at_ms = 1;
  e.spec.revision = revision;
  e.spec.timeout_ms = kTimeout;
  e.spec.approval_gate = gate;
  return e;
}

SubmitEvent Submit(std::vector<BranchSpec> branches, uint64_t revision = 1,
                   WaitFor wait = WaitFor::kFinished) {
  SubmitEvent e;
  e.request = 50;
  e.spec.gid = "g";
  e.spec.created_at_ms = 1;
  e.spec.revision = revision;
  e.spec.branches = std::move(branches);
  e.spec.try_timeout_ms = kTimeout;
  e.spec.wait_for = wait;
  return e;
}

TryEvent TryReq(const std::string& id, const std::string& payload = "x") {
  TryEvent e;
  e.request = 2;
  e.branch = Branch(id, payload);
  return e;
}

CommitEvent Commit(std::vector<std::string> ids) {
  CommitEvent e;
  e.request = 3;
  e.expected_branch_ids = std::move(ids);
  return e;
}

// Everything a refused or ignored event must leave alone.
std::string Snapshot(const Txn& t) {
  std::ostringstream os;
  os << t.exists << int(t.state) << int(t.decision) << int(t.decision_cause)
     << t.decision_reason << t.registered_durable << t.committed_durable
     << t.decision_durable << t.next_seq << t.next_query << t.pending.size()
     << t.waiters.size() << t.owner_epoch << "|";
  for (const auto& b : t.branches) {
    os << b.spec.branch_id << int(b.try_phase.state) << b.try_phase.attempts
       << int(b.second_phase.state) << b.second_phase.attempts << int(b.op)
       << b.op_attempt << b.failures << b.stuck << ";";
  }
  return os.str();
}

// ---------------------------------------------------------------- states

Txn OpenTxn(bool gate = false) {
  Txn t;
  Run(t, Begin(gate));
  auto fx = Run(t, TryReq("b1"));
  Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  return t;
}

Txn TryingTxn() {
  Txn t = OpenTxn();
  Run(t, TryReq("b2"));
  Run(t, Commit({"b1", "b2"}));
  return t;
}

Txn AwaitingTxn() {
  Txn t = OpenTxn(/*gate=*/true);
  Run(t, Commit({"b1"}));
  REQUIRE(t.state == TxnState::kAwaitingApproval);
  return t;
}

Txn ConfirmingTxn() {
  Txn t = OpenTxn();
  Run(t, Commit({"b1"}));
  REQUIRE(t.state == TxnState::kConfirming);
  return t;
}

Txn ConfirmedTxn() {
  Txn t = ConfirmingTxn();
  CallEffect c{0, Phase::kConfirm, t.branches[0].second_phase.attempts};
  Run(t, Reply(c, Outcome::kExecuted));
  REQUIRE(t.state == TxnState::kConfirmed);
  return t;
}

Txn CancellingRollbackTxn() {
  Txn t = OpenTxn();
  RollbackEvent r;
  r.request = 4;
  Run(t, r);
  REQUIRE(t.state == TxnState::kCancelling);
  return t;
}

Txn CancellingRuleTxn() {
  Txn t;
  Run(t, Begin());
  auto fx = Run(t, TryReq("b1"));
  Run(t, Reply(LastCall(fx, 0), Outcome::kRejected));
  Run(t, Commit({"b1"}));
  REQUIRE(t.state == TxnState::kCancelling);
  return t;
}

Txn CancelledTxn() {
  Txn t = CancellingRollbackTxn();
  CallEffect c{0, Phase::kCancel, t.branches[0].second_phase.attempts};
  Run(t, Reply(c, Outcome::kExecuted));
  REQUIRE(t.state == TxnState::kCancelled);
  return t;
}

Txn SubmitTryingTxn() {
  Txn t;
  Run(t, Submit({Branch("b1")}));
  REQUIRE(t.state == TxnState::kTrying);
  return t;
}

struct StateCase {
  const char* name;
  std::function<Txn()> make;
};

const std::vector<StateCase>& States() {
  static const std::vector<StateCase> states = {
      {"none", [] { return Txn{}; }},
      {"OPEN", [] { return OpenTxn(); }},
      {"TRYING", [] { return TryingTxn(); }},
      {"AWAITING_APPROVAL", [] { return AwaitingTxn(); }},
      {"CONFIRMING", [] { return ConfirmingTxn(); }},
      {"CONFIRMED", [] { return ConfirmedTxn(); }},
      {"CANCELLING(rollback)", [] { return CancellingRollbackTxn(); }},
      {"CANCELLING(rule)", [] { return CancellingRuleTxn(); }},
      {"CANCELLED", [] { return CancelledTxn(); }},
      {"TRYING(submitted)", [] { return SubmitTryingTxn(); }},
  };
  return states;
}

struct EventCase {
  const char* name;
  // Expected per state, in States() order: A applied, I ignored (legal, no
  // change), F FAILED_PRECONDITION, E ALREADY_EXISTS, N NOT_FOUND,
  // V INVALID_ARGUMENT.
  const char* expect;
  std::function<Event(const Txn&)> make;
  int64_t now = kNow;
};

std::vector<std::string> Ids(const Txn& t) {
  std::vector<std::string> ids;
  for (const auto& b : t.branches) ids.push_back(b.spec.branch_id);
  return ids;
}

const std::vector<EventCase>& Events() {
  static const std::vector<EventCase> events = {
      {"Submit (same content)", "AEEEEEEEEA",
       [](const Txn&) -> Event { return Submit({Branch("b1")}); }},
      {"Submit (other content)", "AEEEEEEEEE",
       [](const Txn&) -> Event { return Submit({Branch("b1", "y")}); }},
      {"Begin (same)", "AAAEAAAAAE",
       [](const Txn&) -> Event { return Begin(); }},
      {"Begin (other revision)", "AEEEEEEEEE",
       [](const Txn&) -> Event { return Begin(false, 2); }},
      {"Try (new branch)", "NAFFFFFFFF",
       [](const Txn&) -> Event { return TryReq("b9"); }},
      {"Try (duplicate)", "NAAAAAAAAA",
       [](const Txn&) -> Event { return TryReq("b1"); }},
      {"Try (other content)", "NEEEEEEEEE",
       [](const Txn&) -> Event { return TryReq("b1", "y"); }},
      {"Commit (registered ids)", "NAAAAAFAFA",
       [](const Txn& t) -> Event { return Commit(Ids(t)); }},
      {"Commit (other ids)", "NFFFFFFFFF",
       [](const Txn&) -> Event { return Commit({"zz"}); }},
      {"Rollback", "NAAAFFAAAA",
       [](const Txn&) -> Event {
         return RollbackEvent{5, WaitFor::kFinished};
       }},
      {"reply to a call never made", "NVVVVVVVVV",
       [](const Txn&) -> Event {
         CallReplyEvent e;
         e.attempt = 99;
         return e;
       }},
      {"query answer never asked", "NVVVVVVVVV",
       [](const Txn&) -> Event {
         QueryReplyEvent e;
         e.query_id = 999;
         return e;
       }},
      {"try-deadline timer early (re-armed)", "NAAIIIIIIA",
       [](const Txn&) -> Event { return DeadlineEvent{DeadlineKind::kTry}; }},
      {"try-deadline passed", "NAAIIIIIIA",
       [](const Txn&) -> Event { return DeadlineEvent{DeadlineKind::kTry}; },
       kNow + 10 * kTimeout},
      {"approval deadline timer early (re-armed)", "NIIAIIIIII",
       [](const Txn&) -> Event {
         return DeadlineEvent{DeadlineKind::kApproval};
       }},
      {"approval deadline passed", "NIIAIIIIII",
       [](const Txn&) -> Event {
         return DeadlineEvent{DeadlineKind::kApproval};
       },
       10'000'000},
      {"durable notice for no persist", "NVVVVVVVVV",
       [](const Txn&) -> Event { return DurableEvent{999}; }},
      {"retry timer, nothing waiting", "NIIIIIIIII",
       [](const Txn&) -> Event { return RetryDueEvent{0}; }},
      {"gate approval", "NFFAFFFFFF",
       [](const Txn&) -> Event {
         return GateApproveEvent{6, "ap1"};
       }},
      // An approval allows one action: once done, asking again is refused
      // (FAILED_PRECONDITION), so that of two uses exactly one wins.
      {"force Confirm", "NFFAFFFFFF",
       [](const Txn&) -> Event {
         return ForceDecisionEvent{7, Decision::kConfirm, "ap2"};
       }},
      {"force Cancel", "NAAAFFFFFA",
       [](const Txn&) -> Event {
         return ForceDecisionEvent{8, Decision::kCancel, "ap3"};
       }},
      {"resolve branch by hand", "NFFFAFAAFF",
       [](const Txn&) -> Event {
         return ResolveBranchEvent{9, "b1", "ap4"};
       }},
      {"resume with a new owner epoch", "NAAAAFAAFA",
       [](const Txn&) -> Event { return ResumeEvent{7}; }},
  };
  return events;
}

TEST_CASE("every (state, event) pair: legal applied, illegal refused",
          "[machine][table]") {
  int pairs = 0;
  for (const auto& ev : Events()) {
    REQUIRE(std::string(ev.expect).size() == States().size());
    for (size_t s = 0; s < States().size(); ++s) {
      const auto& st = States()[s];
      Txn t = st.make();
      const std::string before = Snapshot(t);
      Event event = ev.make(t);
      StepResult r = Step(t, event, ev.now);
      const char want = ev.expect[s];
      INFO("state " << st.name << ", event " << ev.name << ", expected " << want
                    << ", got " << r.status.ToString());
      ++pairs;
      switch (want) {
        case 'A':
          CHECK(r.status.ok());
          CHECK((!r.effects.empty() || Snapshot(t) != before));
          break;
        case 'I':
          CHECK(r.status.ok());
          CHECK(r.effects.empty());
          CHECK(Snapshot(t) == before);
          break;
        default: {
          const absl::StatusCode code =
              want == 'F'   ? absl::StatusCode::kFailedPrecondition
              : want == 'E' ? absl::StatusCode::kAlreadyExists
              : want == 'N' ? absl::StatusCode::kNotFound
                            : absl::StatusCode::kInvalidArgument;
          CHECK(r.status.code() == code);
          CHECK(r.effects.empty());
          CHECK(Snapshot(t) == before);
        }
      }
    }
  }
  CHECK(pairs == 230);
}

// ---------------------------------------------------------------- behaviours

TEST_CASE(
    "happy path: Trys after Registered is durable, Confirms after the "
    "decision is durable, answer when finished",
    "[machine]") {
  Txn t;
  StepResult r = Step(t, Submit({Branch("a"), Branch("b")}), kNow);
  REQUIRE(r.status.ok());
  CHECK(All<CallEffect>(r.effects).empty());
  auto persists = All<PersistEffect>(r.effects);
  REQUIRE(persists.size() == 1);
  CHECK(persists[0].durability == wal::Durability::kDurable);
  CHECK(std::holds_alternative<wal::Registered>(persists[0].records[0]));
  CHECK(std::get<wal::Registered>(persists[0].records[0]).try_deadline_ms ==
        kNow + kTimeout);

  r = Step(t, DurableEvent{persists[0].seq}, kNow);
  auto calls = All<CallEffect>(r.effects);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].phase == Phase::kTry);
  CHECK(calls[0].max_timeout_ms == kTimeout);
  CHECK(calls[0].try_deadline_ms == kNow + kTimeout);

  REQUIRE(Step(t, Reply(calls[0], Outcome::kExecuted), kNow).status.ok());
  r = Step(t, Reply(calls[1], Outcome::kExecuted, /*replayed=*/true), kNow);
  CHECK(t.decision == Decision::kConfirm);
  CHECK(All<CallEffect>(r.effects).empty());  // not before durable
  CHECK(All<AnswerEffect>(r.effects).empty());
  CHECK(MakeView(t).decision == Decision::kNone);  // nobody hears of it yet
  uint64_t decided = 0;
  for (const auto& p : All<PersistEffect>(r.effects)) {
    if (std::holds_alternative<wal::Decided>(p.records[0])) {
      CHECK(p.durability == wal::Durability::kDurable);
      decided = p.seq;
    }
  }
  REQUIRE(decided != 0);
  r = Step(t, DurableEvent{decided}, kNow);
  calls = All<CallEffect>(r.effects);
  REQUIRE(calls.size() == 2);  // in parallel
  CHECK(calls[0].phase == Phase::kConfirm);
  REQUIRE(Step(t, Reply(calls[0], Outcome::kExecuted), kNow).status.ok());
  r = Step(t, Reply(calls[1], Outcome::kExecuted), kNow);
  CHECK(t.state == TxnState::kConfirmed);
  auto answers = All<AnswerEffect>(r.effects);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].request == 50);
  CHECK(answers[0].status.ok());
}

TEST_CASE("a rejected Try cancels every branch, including one never sent",
          "[machine]") {
  Txn t;
  Run(t, Begin());
  auto fx = Run(t, TryReq("b1"));
  Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  fx = Run(t, TryReq("b2"));
  CommitEvent c = Commit({"b1", "b2"});
  c.wait_for = WaitFor::kDecided;
  Run(t, c);
  fx = Run(t, Reply(LastCall(fx, 1), Outcome::kRejected));
  CHECK(t.decision == Decision::kCancel);
  auto calls = All<CallEffect>(fx);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].phase == Phase::kCancel);
  CHECK(calls[1].phase == Phase::kCancel);
  int commit_answers = 0;
  for (const auto& a : All<AnswerEffect>(fx)) {
    if (a.request != 3) continue;  // the Try's own answer
    ++commit_answers;
    CHECK(a.status.code() == absl::StatusCode::kAborted);
  }
  CHECK(commit_answers == 1);

  // Submit-mode: a branch never sent (deadline passed before the Try went out)
  Txn s;
  Run(s, Submit({Branch("a"), Branch("b")}));
  fx = Run(s, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout);
  CHECK(All<CallEffect>(fx).size() == 2);
}

TEST_CASE("Try timeout, then each Query answer", "[machine]") {
  struct Case {
    BarrierState barrier;
    bool same_hash;
    bool authoritative;
    PhaseState want;
    bool resend_try;
  };
  const Case cases[] = {
      {BarrierState::kTried, true, true, PhaseState::kSucceeded, false},
      {BarrierState::kTried, false, true, PhaseState::kFailed, false},
      {BarrierState::kTryRejected, true, true, PhaseState::kFailed, false},
      {BarrierState::kCancelledBeforeTry, false, true, PhaseState::kFailed,
       false},
      {BarrierState::kConfirmed, false, true, PhaseState::kFailed, false},
      {BarrierState::kCancelled, false, true, PhaseState::kFailed, false},
      {BarrierState::kNotFound, true, true, PhaseState::kUnknown, true},
      {BarrierState::kTried, true, false, PhaseState::kUnknown, false},
      {BarrierState::kConfirmed, true, false, PhaseState::kUnknown, false},
      {BarrierState::kNotFound, true, false, PhaseState::kUnknown, false},
  };
  for (const auto& c : cases) {
    INFO("barrier " << int(c.barrier) << " same hash " << c.same_hash
                    << " authoritative " << c.authoritative);
    Txn t;
    auto fx = Run(t, Submit({Branch("a"), Branch("b")}));
    const CallEffect call = LastCall(fx, 0);
    fx = Run(t, Fail(call, absl::DeadlineExceededError("timeout")));
    CHECK(t.branches[0].try_phase.state == PhaseState::kUnknown);
    REQUIRE(All<ScheduleRetryEffect>(fx).size() == 1);
    fx = Run(t, RetryDueEvent{0});
    auto queries = All<QueryEffect>(fx);
    REQUIRE(queries.size() == 1);
    QueryReplyEvent q;
    q.branch = 0;
    q.query_id = queries[0].query_id;
    q.status = absl::OkStatus();
    q.barrier = c.barrier;
    q.branch_hash = t.branches[0].spec.branch_hash;
    if (!c.same_hash) q.branch_hash[0] ^= 1;
    q.authoritative = c.authoritative;
    fx = Run(t, q);
    CHECK(t.branches[0].try_phase.state == c.want);
    if (c.resend_try) {
      const CallEffect again = LastCall(fx, 0);
      CHECK(again.phase == Phase::kTry);
      CHECK(again.attempt == call.attempt + 1);
    } else if (c.want == PhaseState::kFailed) {
      CHECK(t.decision == Decision::kCancel);
      auto cancels = All<CallEffect>(fx);
      CHECK(cancels.size() == 2);
      for (const auto& x : cancels) CHECK(x.phase == Phase::kCancel);
    } else {
      CHECK(All<CallEffect>(fx).empty());
    }
    if (c.want == PhaseState::kUnknown && !c.resend_try) {
      CHECK(All<ScheduleRetryEffect>(fx).size() == 1);  // asked again
    }
  }
}

TEST_CASE("authoritative NOT_FOUND at the try-deadline decides Cancel",
          "[machine]") {
  Txn t;
  auto fx = Run(t, Submit({Branch("a")}));
  Run(t, Fail(LastCall(fx, 0), absl::UnavailableError("down")));
  fx = Run(t, RetryDueEvent{0}, kNow + 10);
  QueryReplyEvent q;
  q.query_id = All<QueryEffect>(fx).at(0).query_id;
  q.barrier = BarrierState::kNotFound;
  q.authoritative = true;
  fx = Run(t, q, kNow + kTimeout);
  CHECK(t.decision == Decision::kCancel);
  CHECK(LastCall(fx, 0).phase == Phase::kCancel);
}

TEST_CASE("not authoritative answers keep the Try unknown until the deadline",
          "[machine]") {
  Txn t;
  auto fx = Run(t, Submit({Branch("a")}));
  Run(t, Fail(LastCall(fx, 0), absl::DeadlineExceededError("t")));
  for (int i = 0; i < 5; ++i) {
    fx = Run(t, RetryDueEvent{0}, kNow + i);
    QueryReplyEvent q;
    q.query_id = All<QueryEffect>(fx).at(0).query_id;
    q.barrier = BarrierState::kTried;
    q.branch_hash = t.branches[0].spec.branch_hash;
    q.authoritative = false;
    Run(t, q, kNow + i);
    CHECK(t.branches[0].try_phase.state == PhaseState::kUnknown);
    CHECK(t.decision == Decision::kNone);
  }
  Run(t, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout);
  CHECK(t.decision == Decision::kCancel);
}

TEST_CASE("phase 2 never gives up; FAILED_PRECONDITION flags STUCK",
          "[machine]") {
  Options o;
  o.stuck_after_failures = 3;
  Txn t;
  auto fx = Run(t, Submit({Branch("a")}), kNow, o);
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted), kNow, o);
  CallEffect c = LastCall(fx, 0);
  CHECK(c.phase == Phase::kConfirm);
  for (int i = 0; i < 10; ++i) {
    fx = Run(t, Fail(c, absl::UnavailableError("down")), kNow, o);
    auto retry = All<ScheduleRetryEffect>(fx);
    REQUIRE(retry.size() == 1);
    CHECK(t.branches[0].stuck == (i + 1 >= 3));
    CHECK(retry[0].slowest == t.branches[0].stuck);
    fx = Run(t, RetryDueEvent{0}, kNow, o);
    c = LastCall(fx, 0);
  }
  fx = Run(t, Reply(c, Outcome::kExecuted), kNow, o);
  CHECK(t.state == TxnState::kConfirmed);
  CHECK_FALSE(t.branches[0].stuck);

  Txn u;
  fx = Run(u, Submit({Branch("a")}));
  fx = Run(u, Reply(LastCall(fx, 0), Outcome::kExecuted));
  fx = Run(u, Fail(LastCall(fx, 0),
                   absl::FailedPreconditionError("record removed")));
  CHECK(u.branches[0].stuck);
  CHECK(All<ScheduleRetryEffect>(fx).at(0).slowest);
}

TEST_CASE("a call leaves with no record; each attempt's outcome is one",
          "[machine]") {
  // The write-ahead rule is kept by the durable registration and decision
  // (DESIGN.md section 7); a record of the call itself would be buffered,
  // so recovery cannot count on it. Before this, every call wrote one
  // (state "sent"), and a branch retried for a day wrote two per attempt.
  Options o;
  o.stuck_after_failures = 3;
  Txn t;
  auto fx = Run(t, Submit({Branch("a"), Branch("b")}), kNow, o);
  CHECK(All<CallEffect>(fx).size() == 2);
  CHECK(RecordsOf<wal::PhaseUpdate>(fx).empty());
  CHECK(t.branches[0].try_phase.state == PhaseState::kUnknown);
  CHECK(t.branches[0].try_phase.attempts == 1);
  const std::vector<wal::Record> log = Records(fx);
  const CallEffect try_b = LastCall(fx, 1);
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted), kNow, o);
  REQUIRE(RecordsOf<wal::PhaseUpdate>(fx).size() == 1);
  CHECK(RecordsOf<wal::PhaseUpdate>(fx)[0].state == PhaseState::kSucceeded);
  fx = Run(t, Reply(try_b, Outcome::kExecuted), kNow, o);
  // b's outcome, the decision, and no record of the two Confirms sent.
  CHECK(RecordsOf<wal::PhaseUpdate>(fx).size() == 1);
  CHECK(All<CallEffect>(fx).size() == 2);
  CHECK(t.branches[1].second_phase.state == PhaseState::kUnknown);
  CallEffect c = LastCall(fx, 1);
  int records = 0;
  for (int i = 0; i < 10; ++i) {
    fx = Run(t, Fail(c, absl::UnavailableError("down")), kNow, o);
    auto u = RecordsOf<wal::PhaseUpdate>(fx);
    REQUIRE(u.size() == 1);
    CHECK(u[0].attempts == static_cast<uint32_t>(i + 1));
    CHECK(u[0].state == PhaseState::kUnknown);
    records += static_cast<int>(u.size());
    fx = Run(t, RetryDueEvent{1}, kNow, o);
    CHECK(RecordsOf<wal::PhaseUpdate>(fx).empty());
    c = LastCall(fx, 1);
  }
  CHECK(records == 10);
  CHECK(t.branches[1].stuck);

  // A crash before any answer: the log has the registration only, and
  // recovery asks about both Trys rather than taking them as not sent.
  Txn r;
  for (const auto& rec : log) {
    REQUIRE(Step(r, ReplayEvent{&rec}, kNow).status.ok());
  }
  CHECK(r.branches[0].try_phase.state == PhaseState::kNotSent);
  auto resumed = Run(r, ResumeEvent{2}, kNow + 1);
  CHECK(All<QueryEffect>(resumed).size() == 2);
  CHECK(All<CallEffect>(resumed).empty());
}

TEST_CASE("a branch failing the same way for long writes a record now and then",
          "[machine]") {
  // Phase 2 is retried without limit. Before this, each failed attempt
  // wrote its PhaseUpdate: a day at the slowest rate wrote about 1,460 per
  // branch (2,924 with the record of each call sent).
  Txn t;
  std::vector<wal::Record> log;
  auto fx = Run(t, Submit({Branch("a")}));
  auto keep = [&](const std::vector<Effect>& effects) {
    for (const auto& rec : Records(effects)) log.push_back(rec);
    return static_cast<int>(RecordsOf<wal::PhaseUpdate>(effects).size());
  };
  keep(fx);
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  keep(fx);
  CallEffect c = LastCall(fx, 0);
  int written = 0;
  for (int i = 1; i <= 200; ++i) {
    fx = Run(t, Fail(c, absl::UnavailableError("down")));
    written += keep(fx);
    CHECK(t.branches[0].second_phase.attempts == static_cast<uint32_t>(i));
    fx = Run(t, RetryDueEvent{0});
    keep(fx);
    c = LastCall(fx, 0);
  }
  // The first 16, then the 64th, 128th and 192nd.
  CHECK(written == 19);
  CHECK(t.branches[0].stuck);
  // Another error is written at once, then its repeats as before.
  fx = Run(t, Fail(c, absl::DeadlineExceededError("slow")));
  CHECK(keep(fx) == 1);
  fx = Run(t, RetryDueEvent{0});
  keep(fx);
  c = LastCall(fx, 0);

  // What the WAL holds after a crash here: the 201st attempt (its error
  // was new), STUCK; recovery sends the Confirm again.
  Txn r;
  for (const auto& rec : log) {
    REQUIRE(Step(r, ReplayEvent{&rec}, kNow).status.ok());
  }
  CHECK(r.branches[0].second_phase.attempts == 201);
  CHECK(r.branches[0].second_phase.last_error.find("slow") !=
        std::string::npos);
  CHECK(r.branches[0].stuck);
  auto resumed = Run(r, ResumeEvent{2}, kNow + 1);
  REQUIRE(All<CallEffect>(resumed).size() == 1);
  CHECK(All<CallEffect>(resumed)[0].phase == Phase::kConfirm);

  fx = Run(t, Reply(c, Outcome::kExecuted));
  CHECK(keep(fx) == 1);
  CHECK(t.state == TxnState::kConfirmed);
}

TEST_CASE("participant errors are read as DESIGN 5 says", "[machine]") {
  // Definite refusals: nothing ran. On a Try the branch failed (Cancel), on
  // a Confirm or Cancel it is STUCK; an alert either way. Every other code
  // leaves the outcome unknown: asked again, never taken as failed.
  for (absl::StatusCode code : {absl::StatusCode::kFailedPrecondition,
                                absl::StatusCode::kInvalidArgument}) {
    INFO(absl::StatusCodeToString(code));
    Txn t;
    auto fx = Run(t, Submit({Branch("a"), Branch("b")}));
    fx = Run(t, Fail(LastCall(fx, 0), absl::Status(code, "refused")));
    CHECK(t.branches[0].try_phase.state == PhaseState::kFailed);
    CHECK(t.decision == Decision::kCancel);
    int alerts = 0;
    for (const auto& sig : All<SignalEffect>(fx)) {
      alerts += sig.kind == SignalKind::kAlert;
    }
    CHECK(alerts == 1);
    fx = Run(t, Fail(LastCall(fx, 1), absl::Status(code, "refused")));
    CHECK(t.branches[1].stuck);
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kAborted,
        absl::StatusCode::kInternal, absl::StatusCode::kUnknown,
        absl::StatusCode::kCancelled, absl::StatusCode::kNotFound,
        absl::StatusCode::kDataLoss, absl::StatusCode::kUnimplemented}) {
    INFO(absl::StatusCodeToString(code));
    Txn t;
    auto fx = Run(t, Submit({Branch("a"), Branch("b")}));
    fx = Run(t, Fail(LastCall(fx, 0), absl::Status(code, "?")));
    CHECK(t.branches[0].try_phase.state == PhaseState::kUnknown);
    CHECK(t.decision == Decision::kNone);
    CHECK(All<ScheduleRetryEffect>(fx).size() == 1);
  }
}

TEST_CASE("Cancel answered CONFLICT: the branch is done, with an alert",
          "[machine]") {
  Txn t;
  auto fx = Run(t, Submit({Branch("a")}));
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kConflict));
  CHECK(t.decision == Decision::kCancel);
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kConflict));
  CHECK(t.state == TxnState::kCancelled);
  bool alert = false;
  for (const auto& s : All<SignalEffect>(fx))
    alert |= s.kind == SignalKind::kAlert;
  CHECK(alert);
}

TEST_CASE("Commit: expected ids, unknowns resolved first, idempotent",
          "[machine]") {
  Txn t;
  Run(t, Begin());
  auto fx1 = Run(t, TryReq("b1"));
  auto fx2 = Run(t, TryReq("b2"));
  StepResult r = Step(t, Commit({"b1"}), kNow);
  CHECK(r.status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(r.status.message()).find("b1,b2") != std::string::npos);
  // b2's Try times out: Commit must wait for it to be resolved.
  Run(t, Reply(LastCall(fx1, 0), Outcome::kExecuted));
  Run(t, Fail(LastCall(fx2, 1), absl::DeadlineExceededError("t")));
  auto fx = Run(t, Commit({"b2", "b1"}));
  CHECK(t.state == TxnState::kTrying);
  CHECK(t.decision == Decision::kNone);
  CHECK(All<AnswerEffect>(fx).empty());
  fx = Run(t, RetryDueEvent{1});
  QueryReplyEvent q;
  q.branch = 1;
  q.query_id = All<QueryEffect>(fx).at(0).query_id;
  q.barrier = BarrierState::kTried;
  q.branch_hash = t.branches[1].spec.branch_hash;
  q.authoritative = true;
  fx = Run(t, q);
  CHECK(t.decision == Decision::kConfirm);
  // Rollback now asks for the opposite of the decision.
  r = Step(t, RollbackEvent{5, WaitFor::kAccepted}, kNow);
  CHECK(r.status.code() == absl::StatusCode::kFailedPrecondition);
  // A second Commit answers the decision.
  CommitEvent again = Commit({"b1", "b2"});
  again.wait_for = WaitFor::kDecided;
  fx = Run(t, again);
  REQUIRE(All<AnswerEffect>(fx).size() == 1);
  CHECK(All<AnswerEffect>(fx)[0].status.ok());
}

TEST_CASE("duplicate Submit gets the first answer; other content refused",
          "[machine]") {
  Txn t;
  auto fx = Run(t, Submit({Branch("a")}));
  SubmitEvent dup = Submit({Branch("a")});
  dup.request = 77;
  Run(t, dup);
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  fx = Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  auto answers = All<AnswerEffect>(fx);
  REQUIRE(answers.size() == 2);
  CHECK((answers[0].request == 50 || answers[1].request == 50));
  CHECK((answers[0].duplicate || answers[1].duplicate));
  const std::string before = Snapshot(t);
  StepResult r = Step(t, Submit({Branch("a", "other")}), kNow);
  CHECK(r.status.code() == absl::StatusCode::kAlreadyExists);
  CHECK(Snapshot(t) == before);
}

TEST_CASE("invalid requests are refused, nothing created", "[machine]") {
  Txn t;
  SubmitEvent e = Submit({Branch("a"), Branch("a")});
  CHECK(Step(t, e, kNow).status.code() == absl::StatusCode::kInvalidArgument);
  e = Submit({});
  CHECK(Step(t, e, kNow).status.code() == absl::StatusCode::kInvalidArgument);
  e = Submit({Branch("bad id!")});
  CHECK(Step(t, e, kNow).status.code() == absl::StatusCode::kInvalidArgument);
  e = Submit({Branch("a")});
  e.spec.try_timeout_ms = 100LL * 24 * 3600 * 1000;
  CHECK(Step(t, e, kNow).status.code() == absl::StatusCode::kInvalidArgument);
  BeginEvent b = Begin();
  b.spec.gid = "";
  CHECK(Step(t, b, kNow).status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_FALSE(t.exists);
}

TEST_CASE("approval gate: approval confirms, its deadline cancels",
          "[machine]") {
  Txn t = AwaitingTxn();
  auto fx = Run(t, GateApproveEvent{6, "ap"});
  CHECK(t.decision == Decision::kConfirm);
  REQUIRE(All<AnswerEffect>(fx).size() == 1);

  Txn u = AwaitingTxn();
  Run(u, DeadlineEvent{DeadlineKind::kApproval}, u.approval_deadline_ms);
  CHECK(u.decision == Decision::kCancel);
  // The timer runs on the monotonic clock: when it ran out the deadline has
  // passed, even if the wall clock was set back meanwhile.
  Txn v = AwaitingTxn();
  Run(v, DeadlineEvent{DeadlineKind::kApproval}, kNow + 1);
  CHECK(v.decision == Decision::kCancel);
}

TEST_CASE("a forced decision the WAL refuses is undone", "[machine]") {
  Txn t = AwaitingTxn();
  StepResult r = Step(t, GateApproveEvent{6, "bad"}, kNow);
  REQUIRE(r.status.ok());
  const uint64_t seq = All<PersistEffect>(r.effects).at(0).seq;
  r = Step(t, PersistFailedEvent{seq, absl::FailedPreconditionError("used")},
           kNow);
  REQUIRE(r.status.ok());
  CHECK(t.state == TxnState::kAwaitingApproval);
  CHECK(t.decision == Decision::kNone);
  auto answers = All<AnswerEffect>(r.effects);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].status.code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("no request is refused by quoting a decision not yet durable",
          "[machine]") {
  // An approved Confirm the WAL has not yet synced: a Rollback must not be
  // told "decided Confirm" (the WAL may refuse the approval).
  Txn t = AwaitingTxn();
  StepResult r = Step(t, GateApproveEvent{6, "ap"}, kNow);
  REQUIRE(r.status.ok());
  const uint64_t approve_seq = All<PersistEffect>(r.effects).at(0).seq;
  std::string before = Snapshot(t);
  r = Step(t, RollbackEvent{7, WaitFor::kAccepted}, kNow);
  CHECK(r.status.code() == absl::StatusCode::kUnavailable);
  CHECK(Snapshot(t) == before);
  r = Step(t, ForceDecisionEvent{8, Decision::kCancel, "ap2"}, kNow);
  CHECK(r.status.code() == absl::StatusCode::kUnavailable);
  r = Step(t, GateApproveEvent{9, "ap3"}, kNow);
  CHECK(r.status.code() == absl::StatusCode::kUnavailable);
  CHECK(Snapshot(t) == before);
  // The WAL refuses the approval: undone, and the retried Rollback cancels.
  r = Step(
      t, PersistFailedEvent{approve_seq, absl::FailedPreconditionError("used")},
      kNow);
  REQUIRE(r.status.ok());
  REQUIRE(t.decision == Decision::kNone);
  Run(t, RollbackEvent{7, WaitFor::kAccepted});
  CHECK(t.decision == Decision::kCancel);

  // A forced Cancel not yet synced: Commit must not hear "decided Cancel",
  // nor may an interactive Try hear "not OPEN".
  Txn u = AwaitingTxn();
  r = Step(u, ForceDecisionEvent{6, Decision::kCancel, "ap"}, kNow);
  REQUIRE(r.status.ok());
  before = Snapshot(u);
  CHECK(Step(u, Commit({"b1"}), kNow).status.code() ==
        absl::StatusCode::kUnavailable);
  CHECK(Step(u, TryReq("b9"), kNow).status.code() ==
        absl::StatusCode::kUnavailable);
  CHECK(Snapshot(u) == before);
}

TEST_CASE("a Rollback waiting on a forced Cancel the WAL refuses still cancels",
          "[machine]") {
  Txn t = AwaitingTxn();
  StepResult r = Step(t, ForceDecisionEvent{6, Decision::kCancel, "bad"}, kNow);
  REQUIRE(r.status.ok());
  const uint64_t seq = All<PersistEffect>(r.effects).at(0).seq;
  // The Rollback agrees with the pending decision: it waits for it.
  r = Step(t, RollbackEvent{7, WaitFor::kDecided}, kNow);
  REQUIRE(r.status.ok());
  CHECK(All<AnswerEffect>(r.effects).empty());
  r = Step(t, PersistFailedEvent{seq, absl::FailedPreconditionError("used")},
           kNow);
  REQUIRE(r.status.ok());
  // The admin call is refused; the Rollback's own Cancel is decided and
  // persisted, and the Rollback is answered once that is durable.
  CHECK(t.decision == Decision::kCancel);
  CHECK(t.decision_cause == DecisionCause::kRollback);
  auto persists = All<PersistEffect>(r.effects);
  REQUIRE(persists.size() == 1);
  auto answers = All<AnswerEffect>(r.effects);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].request == 6);
  r = Step(t, DurableEvent{persists[0].seq}, kNow);
  REQUIRE(r.status.ok());
  answers = All<AnswerEffect>(r.effects);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].request == 7);
  CHECK(answers[0].status.ok());
}

TEST_CASE("a Commit with no branches before Begin is durable still decides",
          "[machine]") {
  Txn t;
  StepResult r = Step(t, Begin(), kNow);
  REQUIRE(r.status.ok());
  r = Step(t, Commit({}), kNow);
  REQUIRE(r.status.ok());
  const uint64_t last = All<PersistEffect>(r.effects).back().seq;
  auto fx = Run(t, DurableEvent{last});
  CHECK(t.decision == Decision::kConfirm);
  CHECK(t.state == TxnState::kConfirmed);
  bool commit_answered = false;
  for (const auto& a : All<AnswerEffect>(fx)) {
    commit_answered |= a.request == 3 && a.status.ok();
  }
  CHECK(commit_answered);
}

// ------------------------------------------------- the witness rule (sec. 8)

// A transaction whose Decided record the WAL lost: registered (and, in
// `tried`, some Trys known EXECUTED), replayed and resumed with every other
// Try unknown, so each is queried.
struct Recovered {
  Txn t;
  std::vector<wal::Record> log;        // what the WAL kept
  std::map<uint32_t, uint64_t> query;  // branch -> its Query in flight
};

Recovered Recover(const std::vector<std::string>& ids,
                  const std::set<std::string>& tried = {}) {
  Txn live;
  std::vector<BranchSpec> branches;
  for (const auto& id : ids) branches.push_back(Branch(id));
  std::vector<wal::Record> log;
  auto fx = Run(live, Submit(branches));
  for (const auto& rec : Records(fx)) log.push_back(rec);
  for (uint32_t b = 0; b < live.branches.size(); ++b) {
    if (!tried.count(live.branches[b].spec.branch_id)) continue;
    auto r = Run(live, Reply(LastCall(fx, b), Outcome::kExecuted));
    for (const auto& rec : Records(r)) log.push_back(rec);
  }
  Recovered out;
  out.log = log;
  for (const auto& rec : log) {
    REQUIRE(Step(out.t, ReplayEvent{&rec}, kNow).status.ok());
  }
  REQUIRE(out.t.decision == Decision::kNone);
  for (const auto& q : All<QueryEffect>(Run(out.t, ResumeEvent{2}, kNow + 1))) {
    out.query[q.branch] = q.query_id;
  }
  return out;
}

QueryReplyEvent Answer(Recovered& r, uint32_t b, BarrierState state,
                       bool authoritative = true) {
  QueryReplyEvent q;
  q.branch = b;
  q.query_id = r.query.at(b);
  q.status = absl::OkStatus();
  q.barrier = state;
  q.branch_hash = r.t.branches[b].spec.branch_hash;
  q.authoritative = authoritative;
  return q;
}

int Count(const std::vector<Effect>& fx, SignalKind kind) {
  int n = 0;
  for (const auto& s : All<SignalEffect>(fx)) n += s.kind == kind;
  return n;
}

std::vector<Phase> Phases(const std::vector<Effect>& fx) {
  std::vector<Phase> out;
  for (const auto& c : All<CallEffect>(fx)) out.push_back(c.phase);
  return out;
}

TEST_CASE("a Confirm witness is adopted once every other Try is EXECUTED",
          "[machine][witness]") {
  Recovered r = Recover({"a", "b"});
  REQUIRE(r.query.size() == 2);
  auto fx = Run(r.t, Answer(r, 0, BarrierState::kConfirmed), kNow + 2);
  CHECK(r.t.decision == Decision::kNone);  // b is not known yet
  CHECK(Count(fx, SignalKind::kAlert) == 1);
  CHECK(All<QueryEffect>(fx).empty());  // a is asked nothing more
  CHECK(All<ScheduleRetryEffect>(fx).empty());
  SECTION("b TRIED: Confirm, with its cause") {}
  SECTION("the try-deadline passes first: still no Cancel") {
    fx = Run(r.t, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout + 5);
    CHECK(r.t.decision == Decision::kNone);
    CHECK(All<CallEffect>(fx).empty());
  }
  fx = Run(r.t, Answer(r, 1, BarrierState::kTried), kNow + kTimeout + 6);
  CHECK(r.t.decision == Decision::kConfirm);
  CHECK(r.t.decision_cause == DecisionCause::kWitnessed);
  // The record says so: the cause is its field, the reason human text.
  std::optional<wal::Decided> recorded;
  for (const auto& d : RecordsOf<wal::Decided>(fx)) recorded = d;
  REQUIRE(recorded.has_value());
  CHECK(recorded->cause == DecisionCause::kWitnessed);
  CHECK(recorded->reason == r.t.decision_reason);
  CHECK(recorded->reason.find("witnessed Confirm") != std::string::npos);
  CHECK(Count(fx, SignalKind::kLostDecision) == 1);
  CHECK(Phases(fx) == std::vector<Phase>{Phase::kConfirm, Phase::kConfirm});
  CHECK_FALSE(r.t.branches[0].stuck);
  // Recovery of the adopted decision: the cause survives.
  Txn again;
  for (const auto& rec : r.log) REQUIRE(ApplyRecord(again, rec).ok());
  for (const auto& d : RecordsOf<wal::Decided>(fx)) {
    REQUIRE(ApplyRecord(again, d).ok());
  }
  CHECK(again.decision_cause == DecisionCause::kWitnessed);
}

TEST_CASE("a Confirm witness waits past the deadline for an unreachable branch",
          "[machine][witness]") {
  Recovered r = Recover({"a", "b"});
  Run(r.t, Answer(r, 0, BarrierState::kConfirmed), kNow + 2);
  QueryReplyEvent down;
  down.branch = 1;
  down.query_id = r.query.at(1);
  down.status = absl::UnavailableError("down");
  auto fx = Run(r.t, down, kNow + 3);
  REQUIRE(All<ScheduleRetryEffect>(fx).size() == 1);
  Run(r.t, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout);
  CHECK(r.t.decision == Decision::kNone);
  // The retry past the deadline asks b again instead of cancelling.
  fx = Run(r.t, RetryDueEvent{1}, kNow + kTimeout + 10);
  CHECK(r.t.decision == Decision::kNone);
  REQUIRE(All<QueryEffect>(fx).size() == 1);
}

TEST_CASE(
    "a Cancel witness is adopted once the others are known, or at the "
    "deadline",
    "[machine][witness]") {
  const BarrierState seen =
      GENERATE(BarrierState::kCancelled, BarrierState::kCancelledBeforeTry);
  INFO("barrier " << int(seen));
  Recovered r = Recover({"a", "b"});
  auto fx = Run(r.t, Answer(r, 0, seen), kNow + 2);
  CHECK(r.t.decision == Decision::kNone);
  SECTION("b TRIED") {
    fx = Run(r.t, Answer(r, 1, BarrierState::kTried), kNow + 3);
  }
  SECTION("b NOT_FOUND: no Try is sent against the witness") {
    fx = Run(r.t, Answer(r, 1, BarrierState::kNotFound), kNow + 3);
  }
  SECTION("b unknown at the deadline") {
    fx = Run(r.t, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout);
  }
  CHECK(r.t.decision == Decision::kCancel);
  CHECK(r.t.decision_cause == DecisionCause::kWitnessed);
  CHECK(Count(fx, SignalKind::kLostDecision) == 1);
  CHECK(Phases(fx) == std::vector<Phase>{Phase::kCancel, Phase::kCancel});
}

TEST_CASE("contradicting witnesses hold the transaction for an operator",
          "[machine][witness]") {
  Recovered r = Recover({"a", "b"});
  auto fx = Run(r.t, Answer(r, 0, BarrierState::kConfirmed), kNow + 2);
  SECTION("Confirm beside Cancel") {
    fx = Run(r.t, Answer(r, 1, BarrierState::kCancelled), kNow + 3);
  }
  SECTION("Confirm beside TRY_REJECTED") {
    fx = Run(r.t, Answer(r, 1, BarrierState::kTryRejected), kNow + 3);
  }
  SECTION("Confirm beside an authoritative NOT_FOUND: no Try re-sent") {
    fx = Run(r.t, Answer(r, 1, BarrierState::kNotFound), kNow + 3);
  }
  CHECK(r.t.decision == Decision::kNone);
  CHECK_FALSE(r.t.held_reason.empty());
  CHECK(MakeView(r.t).held_reason == r.t.held_reason);
  CHECK(All<CallEffect>(fx).empty());
  CHECK(Count(fx, SignalKind::kAlert) >= 1);
  CHECK(r.t.branches[0].stuck);  // counted and listed
  // No automatic decision, not even at the deadline.
  fx = Run(r.t, DeadlineEvent{DeadlineKind::kTry}, kNow + kTimeout);
  CHECK(r.t.decision == Decision::kNone);
  CHECK(All<CallEffect>(fx).empty());
  CHECK(Step(r.t, RollbackEvent{7, WaitFor::kDecided}, kNow + kTimeout)
            .status.code() == absl::StatusCode::kFailedPrecondition);
  // An operator decides; Confirm may be forced though a Try is not EXECUTED.
  for (Decision forced : {Decision::kConfirm, Decision::kCancel}) {
    Txn held = r.t;
    fx = Run(held, ForceDecisionEvent{8, forced, "ap-1"}, kNow + kTimeout);
    CHECK(held.decision == forced);
    CHECK(held.decision_cause == DecisionCause::kForced);
    CHECK(All<CallEffect>(fx).size() == 2);
  }
}

TEST_CASE("witnesses under another hash are conflicts, not witnesses",
          "[machine][witness]") {
  Recovered r = Recover({"a", "b"});
  QueryReplyEvent q = Answer(r, 0, BarrierState::kConfirmed);
  q.branch_hash[0] ^= 1;
  Run(r.t, q, kNow + 2);
  CHECK(r.t.decision == Decision::kCancel);
  CHECK(r.t.decision_cause == DecisionCause::kRule);
  CHECK(r.t.branches[0].try_phase.outcome == Outcome::kConflict);
}

TEST_CASE("a Try known EXECUTED in the WAL counts beside a Confirm witness",
          "[machine][witness]") {
  Recovered r = Recover({"a", "b"}, {"b"});
  REQUIRE(r.query.size() == 1);
  auto fx = Run(r.t, Answer(r, 0, BarrierState::kConfirmed), kNow + 2);
  CHECK(r.t.decision == Decision::kConfirm);
  CHECK(r.t.decision_cause == DecisionCause::kWitnessed);
}

TEST_CASE("the try-deadline timer counts when the wall clock was set back",
          "[machine]") {
  // Registered with a 1 s try-timeout; the wall clock then jumps back two
  // minutes; the monotonic timer runs out: Cancel, though the wall clock
  // says the deadline is 2 minutes away.
  Txn t;
  auto fx = Run(t, Submit({Branch("a"), Branch("b")}));
  Run(t, Reply(LastCall(fx, 0), Outcome::kExecuted));
  const int64_t set_back = kNow + kTimeout - 120'000;
  fx = Run(t, DeadlineEvent{DeadlineKind::kTry}, set_back);
  CHECK(t.decision == Decision::kCancel);
  CHECK(t.decision_cause == DecisionCause::kDeadline);
  CHECK(Phases(fx) == std::vector<Phase>{Phase::kCancel, Phase::kCancel});
}

TEST_CASE("recovery replays the records and resumes", "[machine]") {
  // Run a transaction to CONFIRMING, keep its records, rebuild a fresh Txn.
  Txn live;
  std::vector<wal::Record> log;
  auto keep = [&](const std::vector<Effect>& fx) {
    for (const auto& rec : Records(fx)) log.push_back(rec);
  };
  auto fx = Run(live, Submit({Branch("a"), Branch("b")}));
  keep(fx);
  auto fa = Run(live, Reply(LastCall(fx, 0), Outcome::kExecuted));
  keep(fa);
  SECTION("TRYING: unknown Trys are queried") {
    Txn t;
    for (const auto& rec : log)
      REQUIRE(Step(t, ReplayEvent{&rec}, kNow).status.ok());
    CHECK(t.state == TxnState::kTrying);
    CHECK(t.branches[0].try_phase.state == PhaseState::kSucceeded);
    auto r = Run(t, ResumeEvent{9}, kNow + 5);
    CHECK(t.owner_epoch == 9);
    auto queries = All<QueryEffect>(r);
    REQUIRE(queries.size() == 1);
    CHECK(queries[0].branch == 1);
  }
  SECTION("CONFIRMING: phase 2 re-sent to every branch not acknowledged") {
    auto fb = Run(live, Reply(LastCall(fx, 1), Outcome::kExecuted));
    keep(fb);
    auto fc = Run(live, Reply(LastCall(fb, 0), Outcome::kExecuted));
    keep(fc);
    Txn t;
    for (const auto& rec : log)
      REQUIRE(Step(t, ReplayEvent{&rec}, kNow).status.ok());
    CHECK(t.state == TxnState::kConfirming);
    auto r = Run(t, ResumeEvent{9}, kNow + 5);
    auto calls = All<CallEffect>(r);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].phase == Phase::kConfirm);
    CHECK(calls[0].owner_epoch == 9);
  }
  SECTION("TRYING past the deadline: Cancel") {
    Txn t;
    for (const auto& rec : log)
      REQUIRE(Step(t, ReplayEvent{&rec}, kNow).status.ok());
    auto r = Run(t, ResumeEvent{9}, kNow + kTimeout);
    CHECK(t.decision == Decision::kCancel);
    CHECK(All<CallEffect>(r).size() == 2);
  }
}

}  // namespace
}  // namespace tcc::core
