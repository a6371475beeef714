#include "protocol_model.h"

#include <algorithm>
#include <sstream>

namespace tcc::core::testing {

using TryState = BarrierModel::TryState;
using Phase2 = BarrierModel::Phase2;

BarrierModel::Answer BarrierModel::Try(bool past_deadline) {
  if (HasCancelMarker()) return {true, Outcome::kHangingRefused, false};
  if (past_deadline && try_state == TryState::kNone) {
    return {true, Outcome::kHangingRefused, false};
  }
  if (try_state == TryState::kTried) return {true, Outcome::kExecuted, true};
  if (try_state == TryState::kTryRejected) {
    return {true, Outcome::kRejected, true};
  }
  ++try_runs;
  if (business_rejects) {
    try_state = TryState::kTryRejected;
    return {true, Outcome::kRejected, false};
  }
  try_state = TryState::kTried;
  ever_reserved = true;
  return {true, Outcome::kExecuted, false};
}

BarrierModel::Answer BarrierModel::Confirm() {
  if (phase2 == Phase2::kConfirmed) return {true, Outcome::kExecuted, true};
  if (HasCancelMarker()) return {false, Outcome::kNone, false};
  if (try_state == TryState::kTried) {
    ++confirm_runs;
    phase2 = Phase2::kConfirmed;
    return {true, Outcome::kExecuted, false};
  }
  return {false, Outcome::kNone, false};
}

BarrierModel::Answer BarrierModel::Cancel() {
  if (phase2 == Phase2::kCancelled) {
    return {true, ever_reserved ? Outcome::kExecuted : Outcome::kEmptyRollback,
            true};
  }
  if (try_state == TryState::kCancelledBeforeTry) {
    return {true, Outcome::kEmptyRollback, true};
  }
  if (phase2 == Phase2::kConfirmed) return {false, Outcome::kNone, false};
  if (try_state == TryState::kNone) {
    try_state = TryState::kCancelledBeforeTry;
    return {true, Outcome::kEmptyRollback, false};
  }
  if (try_state == TryState::kTryRejected) {
    phase2 = Phase2::kCancelled;
    return {true, Outcome::kEmptyRollback, false};
  }
  ++cancel_runs;
  phase2 = Phase2::kCancelled;
  return {true, Outcome::kExecuted, false};
}

BarrierState BarrierModel::Query() const {
  if (phase2 == Phase2::kConfirmed) return BarrierState::kConfirmed;
  if (phase2 == Phase2::kCancelled) return BarrierState::kCancelled;
  switch (try_state) {
    case TryState::kNone:
      return BarrierState::kNotFound;
    case TryState::kTried:
      return BarrierState::kTried;
    case TryState::kTryRejected:
      return BarrierState::kTryRejected;
    case TryState::kCancelledBeforeTry:
      return BarrierState::kCancelledBeforeTry;
  }
  return BarrierState::kNotFound;
}

namespace {

constexpr int64_t kDeadline = 1000;

BranchSpec MakeBranch(int i) {
  BranchSpec b;
  b.branch_id = "b" + std::to_string(i);
  b.participant = "p" + std::to_string(i);
  b.action = "reserve";
  b.payload = "x";
  return b;
}

void Put(std::string& s, uint64_t v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string Fingerprint(const World& w) {
  std::string s;
  const Txn& t = w.txn;
  Put(s, t.exists);
  Put(s, static_cast<uint64_t>(t.state));
  Put(s, static_cast<uint64_t>(t.decision));
  Put(s, t.registered_durable | (t.committed_durable << 1) |
             (t.decision_durable << 2));
  for (const auto& br : t.branches) {
    Put(s, static_cast<uint64_t>(br.try_phase.state) |
               (static_cast<uint64_t>(br.try_phase.outcome) << 8) |
               (static_cast<uint64_t>(br.second_phase.state) << 16) |
               (static_cast<uint64_t>(br.op) << 24) |
               (static_cast<uint64_t>(br.op_phase) << 32) |
               (static_cast<uint64_t>(br.stuck) << 40) |
               (static_cast<uint64_t>(br.try_maybe_sent) << 41) |
               (static_cast<uint64_t>(br.try_maybe_sent_before_attempt) << 42));
    Put(s, br.try_phase.attempts | (uint64_t{br.second_phase.attempts} << 16) |
               (uint64_t{br.op_attempt} << 32) | (uint64_t{br.failures} << 48));
    Put(s, br.op_query);
  }
  for (const auto& p : t.pending) Put(s, p.seq);
  for (const auto& wt : t.waiters) Put(s, static_cast<uint64_t>(wt.kind));
  Put(s, t.next_seq);
  Put(s, t.next_query);
  s.push_back('|');
  Put(s, static_cast<uint64_t>(w.now));
  for (const auto& b : w.barriers) {
    Put(s, static_cast<uint64_t>(b.try_state) |
               (static_cast<uint64_t>(b.phase2) << 8) |
               (uint64_t{b.try_runs} << 16) | (uint64_t{b.confirm_runs} << 24) |
               (uint64_t{b.cancel_runs} << 32));
  }
  std::vector<std::string> msgs;
  for (const auto& m : w.net) {
    std::string x;
    Put(x, static_cast<uint64_t>(m.kind) | (uint64_t{m.branch} << 8) |
               (static_cast<uint64_t>(m.phase) << 16) |
               (uint64_t{m.attempt} << 24) | (uint64_t{m.ok} << 40) |
               (static_cast<uint64_t>(m.outcome) << 41) |
               (uint64_t{m.replayed} << 49) | (uint64_t{m.can_dup} << 50) |
               (uint64_t{m.authoritative} << 51) |
               (static_cast<uint64_t>(m.barrier) << 52) |
               (uint64_t{m.orphan} << 60));
    Put(x, m.query_id);
    msgs.push_back(std::move(x));
  }
  std::sort(msgs.begin(), msgs.end());
  for (const auto& m : msgs) s += m;
  s.push_back('|');
  std::vector<uint64_t> outs;
  for (const auto& o : w.outstanding) {
    outs.push_back(uint64_t{o.query} | (uint64_t{o.branch} << 1) |
                   (static_cast<uint64_t>(o.phase) << 9) |
                   (uint64_t{o.attempt} << 17) | (o.query_id << 33));
  }
  std::sort(outs.begin(), outs.end());
  for (auto o : outs) Put(s, o);
  for (auto d : w.pending_durable) Put(s, d);
  std::vector<uint32_t> timers = w.retry_timers;
  std::sort(timers.begin(), timers.end());
  for (auto r : timers) Put(s, r);
  Put(s, w.deadline_armed | (w.deadline_fired << 1));
  for (auto b : w.timeouts_left) s.push_back(static_cast<char>(b));
  for (auto b : w.query_faults_left) s.push_back(static_cast<char>(b));
  Put(s, static_cast<uint64_t>(w.requests_unanswered));
  Put(s, static_cast<uint64_t>(w.interactive_step));
  for (bool r : w.registered_durable) s.push_back(r ? '1' : '0');
  Put(s, static_cast<uint64_t>(w.decided_durable));
  Put(s, w.log.size() | (uint64_t{w.durable_len} << 20) |
             (uint64_t{w.decision_acted} << 40) |
             (static_cast<uint64_t>(w.crashes_left) << 41) |
             (static_cast<uint64_t>(w.first_decision) << 45) | (w.epoch << 48));
  return s;
}

class Explorer {
 public:
  explicit Explorer(const ModelConfig& c) : c_(c) {}

  ExploreStats Run() {
    World w;
    w.barriers.resize(c_.branches);
    for (int i = 0; i < c_.branches; ++i) {
      w.barriers[i].business_rejects =
          i < static_cast<int>(c_.rejects.size()) && c_.rejects[i];
    }
    w.registered_durable.assign(c_.branches, false);
    w.timeouts_left.assign(c_.branches * 2, 0);
    for (int b = 0; b < c_.branches && b < c_.timeout_branches; ++b) {
      w.timeouts_left[b * 2] = w.timeouts_left[b * 2 + 1] =
          static_cast<uint8_t>(c_.timeouts_per_branch);
    }
    w.query_faults_left.assign(c_.branches, c_.query_faults_per_branch);
    w.crashes_left = c_.crashes;
    if (c_.interactive) {
      ClientStep(w);
    } else {
      SubmitEvent e;
      e.request = w.next_request++;
      e.spec.gid = "g1";
      e.spec.created_at_ms = 1;
      e.spec.try_timeout_ms = kDeadline;
      e.spec.wait_for = WaitFor::kFinished;
      e.spec.approval_gate = c_.approval_gate;
      for (int i = 0; i < c_.branches; ++i) {
        e.spec.branches.push_back(MakeBranch(i));
      }
      ++w.requests_unanswered;
      Apply(w, e, "submit");
    }
    if (stats_.violation.empty()) Dfs(w, 0);
    return stats_;
  }

 private:
  void Fail(const std::string& why) {
    if (!stats_.violation.empty()) return;
    std::ostringstream os;
    os << why << "\n  path:";
    for (const auto& p : path_) os << "\n    " << p;
    stats_.violation = os.str();
  }

  // The interactive client: Begin, Try each branch, Commit; each once the
  // previous request was answered.
  void ClientStep(World& w) {
    const int n = c_.branches;
    const int step = w.interactive_step++;
    ++w.requests_unanswered;
    if (step == 0) {
      BeginEvent e;
      e.request = w.next_request++;
      e.spec.gid = "g1";
      e.spec.created_at_ms = 1;
      e.spec.timeout_ms = kDeadline;
      Apply(w, e, "client: Begin");
    } else if (step <= n) {
      TryEvent e;
      e.request = w.next_request++;
      e.branch = MakeBranch(step - 1);
      Apply(w, e, "client: Try b" + std::to_string(step - 1));
    } else {
      CommitEvent e;
      e.request = w.next_request++;
      for (int i = 0; i < n; ++i) {
        e.expected_branch_ids.push_back("b" + std::to_string(i));
      }
      e.wait_for = WaitFor::kFinished;
      Apply(w, e, "client: Commit");
    }
  }

  void Apply(World& w, const Event& e, const std::string& what) {
    path_.push_back(what);
    ++stats_.steps;
    const Txn before = w.txn;
    StepResult r = Step(w.txn, e, w.now, c_.options);
    if (!r.status.ok()) {
      Fail("a legal event was refused: " + what + ": " +
           std::string(r.status.message()));
      return;
    }
    for (auto& eff : r.effects) Handle(w, eff);
    Check(w, before, e);
  }

  void Handle(World& w, Effect& eff) {
    if (auto* p = std::get_if<PersistEffect>(&eff)) {
      for (const auto& rec : p->records) w.log.push_back(rec);
      if (p->durability != wal::Durability::kDurable) return;
      w.pending_log_len.push_back(w.log.size());
      std::vector<std::string> regs;
      Decision dec = Decision::kNone;
      for (const auto& rec : p->records) {
        if (auto* reg = std::get_if<wal::Registered>(&rec)) {
          for (const auto& b : reg->branches) regs.push_back(b.branch_id);
        } else if (auto* add = std::get_if<wal::BranchAdded>(&rec)) {
          regs.push_back(add->branch.branch_id);
        } else if (auto* d = std::get_if<wal::Decided>(&rec)) {
          dec = d->decision;
        }
      }
      w.pending_durable.push_back(p->seq);
      w.pending_registers.push_back(std::move(regs));
      w.pending_decides.push_back(dec);
      return;
    }
    if (auto* c = std::get_if<CallEffect>(&eff)) {
      // Write-ahead (DESIGN.md 7, invariant 8).
      if (c->phase == Phase::kTry) {
        if (!w.registered_durable[c->branch]) {
          Fail("write-ahead: Try sent before its branch was durable");
        }
      } else {
        const Decision need = c->phase == Phase::kConfirm ? Decision::kConfirm
                                                          : Decision::kCancel;
        if (w.decided_durable != need) {
          Fail("write-ahead: phase 2 sent before the decision was durable");
        }
        w.decision_acted = true;
      }
      Msg m;
      m.kind = Msg::Kind::kCallReq;
      m.branch = c->branch;
      m.phase = c->phase;
      m.attempt = c->attempt;
      w.net.push_back(m);
      w.outstanding.push_back({false, c->branch, c->phase, c->attempt, 0});
      return;
    }
    if (auto* q = std::get_if<QueryEffect>(&eff)) {
      Msg m;
      m.kind = Msg::Kind::kQueryReq;
      m.branch = q->branch;
      m.query_id = q->query_id;
      w.net.push_back(m);
      w.outstanding.push_back({true, q->branch, Phase::kTry, 0, q->query_id});
      return;
    }
    if (auto* r = std::get_if<ScheduleRetryEffect>(&eff)) {
      w.retry_timers.push_back(r->branch);
      return;
    }
    if (auto* d = std::get_if<ArmDeadlineEffect>(&eff)) {
      if (d->kind == DeadlineKind::kTry) w.deadline_armed = true;
      return;
    }
    if (auto* a = std::get_if<AnswerEffect>(&eff)) {
      --w.requests_unanswered;
      TransactionView v = MakeView(w.txn);
      if (v.decision != Decision::kNone) w.decision_acted = true;
      if (v.decision != Decision::kNone && w.decided_durable != v.decision) {
        Fail("a caller was told of a decision before it was durable");
      }
      if (a->status.code() == absl::StatusCode::kAborted &&
          w.decided_durable != Decision::kCancel) {
        Fail("ABORTED answered before Cancel was durable");
      }
      return;
    }
  }

  void Check(World& w, const Txn& before, const Event& e) {
    const Txn& t = w.txn;
    // No decision change (invariant 3).
    if (t.decision != Decision::kNone) {
      if (w.first_decision == Decision::kNone) w.first_decision = t.decision;
      if (w.first_decision != t.decision) Fail("the decision changed");
    }
    // Unknown stays unknown until an authoritative fact (invariant 7), and
    // every fact the core holds is true of the barrier.
    const bool no_fact_event =
        std::holds_alternative<DeadlineEvent>(e) ||
        std::holds_alternative<RetryDueEvent>(e) ||
        std::holds_alternative<DurableEvent>(e) ||
        (std::holds_alternative<QueryReplyEvent>(e) &&
         (!std::get<QueryReplyEvent>(e).status.ok() ||
          !std::get<QueryReplyEvent>(e).authoritative)) ||
        (std::holds_alternative<CallReplyEvent>(e) &&
         !std::get<CallReplyEvent>(e).status.ok());
    for (size_t i = 0; i < t.branches.size(); ++i) {
      const auto& br = t.branches[i];
      const auto& bm = w.barriers[i];
      if (i < before.branches.size() && no_fact_event &&
          before.branches[i].try_phase.state != br.try_phase.state &&
          (br.try_phase.state == PhaseState::kSucceeded ||
           br.try_phase.state == PhaseState::kFailed)) {
        Fail("an unknown Try was resolved without an authoritative fact");
      }
      if (br.try_phase.state == PhaseState::kSucceeded && !bm.ever_reserved) {
        Fail(
            "the core holds Try SUCCEEDED but the participant never "
            "reserved (b" +
            std::to_string(i) + ")");
      }
      if (br.try_phase.state == PhaseState::kFailed && bm.ever_reserved) {
        Fail("the core holds Try FAILED but the participant reserved (b" +
             std::to_string(i) + ")");
      }
      // Exactly-once effect (invariant 2).
      if (bm.try_runs > 1 || bm.confirm_runs > 1 || bm.cancel_runs > 1 ||
          (bm.confirm_runs > 0 && bm.cancel_runs > 0)) {
        Fail("a business effect ran twice, or both Confirm and Cancel ran");
      }
    }
    // Atomicity at a final state (invariant 1).
    if (t.state == TxnState::kConfirmed) {
      for (size_t i = 0; i < t.branches.size(); ++i) {
        if (w.barriers[i].phase2 != Phase2::kConfirmed) {
          Fail("CONFIRMED but b" + std::to_string(i) + " is not confirmed");
        }
      }
    }
    if (t.state == TxnState::kCancelled) {
      for (size_t i = 0; i < t.branches.size(); ++i) {
        const auto& bm = w.barriers[i];
        if (bm.phase2 == Phase2::kConfirmed || bm.Holds() ||
            !bm.HasCancelMarker()) {
          Fail("CANCELLED but b" + std::to_string(i) +
               " is confirmed, holds a reservation or has no cancel marker");
        }
      }
    }
  }

  void Deliver(World& w, size_t i, bool dup) {
    Msg m = w.net[i];
    if (dup) {
      w.net[i].can_dup = false;
    } else {
      w.net.erase(w.net.begin() + static_cast<long>(i));
    }
    auto take_outstanding = [&](bool query) {
      for (size_t k = 0; k < w.outstanding.size(); ++k) {
        const auto& o = w.outstanding[k];
        if (o.query == query && o.branch == m.branch &&
            (query ? o.query_id == m.query_id
                   : (o.phase == m.phase && o.attempt == m.attempt))) {
          w.outstanding.erase(w.outstanding.begin() + static_cast<long>(k));
          return;
        }
      }
    };
    switch (m.kind) {
      case Msg::Kind::kCallReq: {
        auto& bm = w.barriers[m.branch];
        BarrierModel::Answer a = m.phase == Phase::kTry
                                     ? bm.Try(w.now > kDeadline + 1)
                                 : m.phase == Phase::kConfirm ? bm.Confirm()
                                                              : bm.Cancel();
        path_.push_back("participant b" + std::to_string(m.branch) + " runs " +
                        PhaseName(m.phase) + " #" + std::to_string(m.attempt) +
                        (m.orphan ? " (nobody listens)" : ""));
        Check(w, w.txn, RetryDueEvent{});
        if (m.orphan) return;
        Msg r = m;
        r.kind = Msg::Kind::kCallRep;
        r.ok = a.ok;
        r.outcome = a.outcome;
        r.replayed = a.replayed;
        r.can_dup = c_.dups_allowed > 0;
        w.net.push_back(r);
        return;
      }
      case Msg::Kind::kQueryReq: {
        if (m.orphan) return;
        Msg r = m;
        r.kind = Msg::Kind::kQueryRep;
        r.barrier = w.barriers[m.branch].Query();
        r.authoritative = true;
        r.can_dup = c_.dups_allowed > 0;
        w.net.push_back(r);
        return;
      }
      case Msg::Kind::kCallRep: {
        take_outstanding(false);
        CallReplyEvent e;
        e.branch = m.branch;
        e.phase = m.phase;
        e.attempt = m.attempt;
        e.status = m.ok ? absl::OkStatus()
                        : absl::FailedPreconditionError("barrier refused");
        e.outcome = m.outcome;
        e.replayed = m.replayed;
        Apply(w, e,
              std::string(dup ? "dup " : "") + "reply b" +
                  std::to_string(m.branch) + " " + PhaseName(m.phase) + " #" +
                  std::to_string(m.attempt) + " " +
                  (m.ok ? OutcomeName(m.outcome) : "FAILED_PRECONDITION") +
                  (m.replayed ? " replayed" : ""));
        return;
      }
      case Msg::Kind::kQueryRep: {
        take_outstanding(true);
        QueryReplyEvent e;
        e.branch = m.branch;
        e.query_id = m.query_id;
        e.status = absl::OkStatus();
        e.barrier = m.barrier;
        e.branch_hash = w.txn.branches[m.branch].spec.branch_hash;
        e.authoritative = m.authoritative;
        Apply(w, e,
              std::string(dup ? "dup " : "") + "query answer b" +
                  std::to_string(m.branch) + " state " +
                  std::to_string(static_cast<int>(m.barrier)) +
                  (m.authoritative ? "" : " (not authoritative)"));
        return;
      }
    }
  }

  void Crash(World& w, bool keep_all) {
    --w.crashes_left;
    path_.push_back(std::string("CRASH, the log keeps ") +
                    (keep_all ? "everything written" : "its durable prefix"));
    w.log.resize(keep_all ? w.log.size() : w.durable_len);
    w.durable_len = w.log.size();
    if (!w.decision_acted && w.decided_durable == Decision::kNone) {
      w.first_decision = Decision::kNone;  // nobody heard of it: may change
    }
    w.outstanding.clear();
    std::erase_if(w.net, [](const Msg& m) {
      return m.kind == Msg::Kind::kCallRep || m.kind == Msg::Kind::kQueryRep;
    });
    for (auto& m : w.net) m.orphan = true;
    w.retry_timers.clear();
    w.pending_durable.clear();
    w.pending_registers.clear();
    w.pending_decides.clear();
    w.pending_log_len.clear();
    w.deadline_armed = false;
    w.requests_unanswered = 0;
    w.registered_durable.assign(c_.branches, false);
    w.decided_durable = Decision::kNone;
    w.txn = Txn{};
    for (const auto& rec : w.log) {
      if (auto* reg = std::get_if<wal::Registered>(&rec)) {
        for (const auto& b : reg->branches) {
          w.registered_durable[std::stoi(b.branch_id.substr(1))] = true;
        }
      } else if (auto* d = std::get_if<wal::Decided>(&rec)) {
        w.decided_durable = d->decision;
      }
      StepResult r = Step(w.txn, ReplayEvent{&rec}, w.now, c_.options);
      if (!r.status.ok()) {
        Fail("replay refused a record: " + std::string(r.status.message()));
        return;
      }
    }
    ++w.epoch;
    if (!w.txn.exists) {
      Fail("crash explored without a Registered record");
      return;
    }
    if (wal::IsFinal(w.txn.state)) return;
    Apply(w, ResumeEvent{w.epoch}, "resume, epoch " + std::to_string(w.epoch));
  }

  // Enumerates the choices from `w`; each returns the next world.
  void Dfs(World& w, int depth) {
    if (!stats_.violation.empty()) return;
    if (c_.max_depth > 0) {
      if (depth >= c_.max_depth) return;
      const int remaining = c_.max_depth - depth;
      auto [it, inserted] = seen_depth_.emplace(Fingerprint(w), remaining);
      if (!inserted) {
        if (it->second >= remaining) return;
        it->second = remaining;
      }
    } else if (!seen_.insert(Fingerprint(w)).second) {
      return;
    }
    ++stats_.states;
    bool any = false;
    auto branch_out = [&](auto&& mutate) {
      any = true;
      World next = w;
      const size_t mark = path_.size();
      mutate(next);
      if (stats_.violation.empty()) Dfs(next, depth + 1);
      path_.resize(mark);
    };
    // Client (interactive).
    if (c_.interactive && w.requests_unanswered == 0 &&
        w.interactive_step <= c_.branches + 1 &&
        w.txn.decision == Decision::kNone) {
      branch_out([&](World& n) { ClientStep(n); });
    }
    // WAL acknowledges the oldest durable append.
    if (!w.pending_durable.empty()) {
      branch_out([&](World& n) {
        uint64_t seq = n.pending_durable.front();
        for (const auto& id : n.pending_registers.front()) {
          int b = FindBranch(n.txn, id);
          if (b >= 0) n.registered_durable[b] = true;
        }
        if (n.pending_decides.front() != Decision::kNone) {
          n.decided_durable = n.pending_decides.front();
        }
        n.durable_len = std::max(n.durable_len, n.pending_log_len.front());
        n.pending_log_len.erase(n.pending_log_len.begin());
        n.pending_durable.erase(n.pending_durable.begin());
        n.pending_registers.erase(n.pending_registers.begin());
        n.pending_decides.erase(n.pending_decides.begin());
        Apply(n, DurableEvent{seq}, "durable #" + std::to_string(seq));
      });
    }
    // Network deliveries (any order), duplicates, non-authoritative answers.
    for (size_t i = 0; i < w.net.size(); ++i) {
      const Msg& m = w.net[i];
      branch_out([&](World& n) { Deliver(n, i, false); });
      if (m.kind == Msg::Kind::kCallRep && m.can_dup) {
        branch_out([&](World& n) { Deliver(n, i, true); });
      }
      if (m.kind == Msg::Kind::kQueryReq && w.query_faults_left[m.branch] > 0) {
        branch_out([&](World& n) {
          // A replica that lags answers NOT_FOUND or TRIED, whatever is true.
          --n.query_faults_left[m.branch];
          Msg r = n.net[i];
          n.net.erase(n.net.begin() + static_cast<long>(i));
          r.kind = Msg::Kind::kQueryRep;
          r.authoritative = false;
          r.barrier = n.barriers[r.branch].Query() == BarrierState::kNotFound
                          ? BarrierState::kTried
                          : BarrierState::kNotFound;
          r.can_dup = false;
          n.net.push_back(r);
        });
      }
    }
    // Timeouts of outstanding calls/queries: the request (or its reply) may
    // still arrive later, or be lost.
    for (size_t k = 0; k < w.outstanding.size(); ++k) {
      const Outstanding& o = w.outstanding[k];
      const size_t slot =
          c_.timeout_per_phase
              ? o.branch * 2 + (o.query || o.phase == Phase::kTry ? 0 : 1)
              : o.branch * 2;
      if (w.timeouts_left[slot] == 0) continue;
      for (int lose = 0; lose < (o.query ? 1 : 2); ++lose) {
        branch_out([&, lose](World& n) {
          --n.timeouts_left[slot];
          Outstanding out = n.outstanding[k];
          n.outstanding.erase(n.outstanding.begin() + static_cast<long>(k));
          // After a timeout the caller hears nothing more of the call
          // (its replies are dropped); the request itself may still run
          // at the participant later, or be lost.
          auto same_call = [&](const Msg& m) {
            return m.branch == out.branch &&
                   (out.query
                        ? m.query_id == out.query_id &&
                              (m.kind == Msg::Kind::kQueryReq ||
                               m.kind == Msg::Kind::kQueryRep)
                        : m.phase == out.phase && m.attempt == out.attempt &&
                              (m.kind == Msg::Kind::kCallReq ||
                               m.kind == Msg::Kind::kCallRep));
          };
          std::erase_if(n.net, [&](const Msg& m) {
            return same_call(m) &&
                   (lose || m.kind == Msg::Kind::kCallRep ||
                    m.kind == Msg::Kind::kQueryRep || out.query);
          });
          for (auto& m : n.net) {
            if (same_call(m)) m.orphan = true;
          }
          if (out.query) {
            QueryReplyEvent e;
            e.branch = out.branch;
            e.query_id = out.query_id;
            e.status = absl::DeadlineExceededError("query timed out");
            Apply(n, e,
                  std::string("query timeout b") + std::to_string(out.branch) +
                      (lose ? " (lost)" : ""));
          } else {
            CallReplyEvent e;
            e.branch = out.branch;
            e.phase = out.phase;
            e.attempt = out.attempt;
            e.status = absl::DeadlineExceededError("call timed out");
            Apply(n, e,
                  std::string("timeout b") + std::to_string(out.branch) + " " +
                      PhaseName(out.phase) + " #" +
                      std::to_string(out.attempt) + (lose ? " (lost)" : ""));
          }
        });
      }
    }
    // Retry timers.
    for (size_t k = 0; k < w.retry_timers.size(); ++k) {
      branch_out([&](World& n) {
        uint32_t b = n.retry_timers[k];
        n.retry_timers.erase(n.retry_timers.begin() + static_cast<long>(k));
        Apply(n, RetryDueEvent{b}, "retry timer b" + std::to_string(b));
      });
    }
    // The approval gate: an operator approves, or its deadline passes.
    if (c_.approval_gate && w.txn.state == TxnState::kAwaitingApproval &&
        w.txn.decision == Decision::kNone) {
      if (!w.approval_asked) {
        branch_out([&](World& n) {
          n.approval_asked = true;
          ++n.requests_unanswered;
          Apply(n, GateApproveEvent{n.next_request++, "ap1"},
                "operator approves");
        });
      }
      if (!w.approval_deadline_fired) {
        branch_out([&](World& n) {
          n.approval_deadline_fired = true;
          n.now = std::max(n.now, n.txn.approval_deadline_ms);
          Apply(n, DeadlineEvent{DeadlineKind::kApproval},
                "approval deadline passes");
        });
      }
    }
    // The try-deadline passes (time jumps past it, once).
    if (c_.allow_deadline && w.deadline_armed && !w.deadline_fired) {
      branch_out([&](World& n) {
        n.deadline_fired = true;
        n.now = kDeadline + 2;
        Apply(n, DeadlineEvent{DeadlineKind::kTry}, "try-deadline passes");
      });
    }
    // The coordinator crashes: memory, timers and calls in flight are lost;
    // the WAL keeps its durable prefix (or everything written); requests in
    // the network may still reach participants. Recovery replays and
    // resumes.
    if (w.crashes_left > 0 && w.txn.exists && !wal::IsFinal(w.txn.state)) {
      for (int keep_all = 0; keep_all < 2; ++keep_all) {
        // (Only once Registered is kept: before that, nothing was sent and
        // the client's retry starts over.)
        if (keep_all ? w.log.size() == w.durable_len : w.durable_len == 0) {
          continue;
        }
        branch_out([&, keep_all](World& n) { Crash(n, keep_all != 0); });
      }
    }
    if (!any) {
      ++stats_.leaves;
      // Termination (invariant 4): nothing left to happen.
      if (c_.max_depth == 0) {
        if (!wal::IsFinal(w.txn.state)) {
          Fail(std::string("stuck in ") + TxnStateName(w.txn.state) +
               " with nothing left to happen");
        } else if (w.requests_unanswered != 0) {
          Fail("finished with a caller never answered");
        } else {
          for (size_t i = 0; i < w.barriers.size(); ++i) {
            if (w.barriers[i].Holds()) {
              Fail("finished with a reservation held at b" + std::to_string(i));
            }
          }
        }
      }
      if (wal::IsFinal(w.txn.state)) ++stats_.finals;
    }
  }

  const ModelConfig& c_;
  ExploreStats stats_;
  std::vector<std::string> path_;
  std::unordered_set<std::string> seen_;
  std::unordered_map<std::string, int> seen_depth_;
};

}  // namespace

ExploreStats Explore(const ModelConfig& config) {
  return Explorer(config).Run();
}

}  // namespace tcc::core::testing
