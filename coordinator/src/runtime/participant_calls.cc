#include "runtime/participant_calls.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/participant_status.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::runtime {

class ParticipantCalls::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(ParticipantCallsOptions options, Clock& clock,
       ParticipantTransport& transport, std::shared_ptr<MemoryBudget> budget,
       Hooks hooks)
      : clock_(clock),
        transport_(transport),
        budget_(std::move(budget)),
        hooks_(std::move(hooks)),
        timeouts_(options.timeouts, 256, 20, options.timeout_overrides),
        breakers_(options.breaker),
        may_call_(std::move(options.may_call)) {}

  void Send(const std::string& gid, const std::string& participant,
            const core::CallEffect& c, int64_t bytes, const BuildCall& build) {
    std::weak_ptr<Impl> weak = weak_from_this();
    auto held = [weak, gid, c, participant](bool as_probe) {
      if (auto self = weak.lock()) {
        self->hooks_.resume(gid, c, participant, as_probe);
      }
    };
    bool probe = false;
    switch (breakers_.Admission(participant, KindOf(c.phase),
                                clock_.MonotonicMs(), held, &probe)) {
      case CircuitBreakers::Admit::kSend:
        SendAdmitted(gid, participant, c, probe, bytes, build);
        return;
      case CircuitBreakers::Admit::kHold:
        return;
      case CircuitBreakers::Admit::kFailFast:
        Deliver(gid, c,
                absl::UnavailableError(
                    absl::StrCat("circuit open for participant ", participant)),
                /*not_sent=*/true);
        return;
    }
  }

  void SendAdmitted(const std::string& gid, const std::string& participant,
                    const core::CallEffect& c, bool as_probe,
                    int64_t payload_bytes, const BuildCall& build) {
    // What the call holds until it is answered: it waits while that would
    // not fit the budget, unless no call is in flight whose answer would
    // make room.
    const int64_t bytes =
        512 + payload_bytes + static_cast<int64_t>(gid.size());
    if (!budget_->TryCharge(static_cast<uint64_t>(bytes))) {
      if (in_flight_.load() > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        waiting_.push_back(Waiting{gid, participant, c, as_probe});
        return;
      }
      budget_->Charge(bytes);  // nothing in flight would make room: it goes
    }
    absl::StatusOr<BranchCall> call = build();
    if (!call.ok()) {
      budget_->Charge(-bytes);
      // Not sent: if it was the breaker's probe, the next call probes (else
      // the breaker waits for this one's answer for ever and holds every
      // later call to the participant; the cluster simulation found it with
      // a probe refused by DriverOptions::may_call).
      Abandon(participant, as_probe);
      Deliver(gid, c, absl::UnavailableError(call.status().ToString()),
              /*not_sent=*/true);
      return;
    }
    const CallKind kind = KindOf(c.phase);
    int64_t timeout = timeouts_.TimeoutMs(participant, kind);
    if (c.max_timeout_ms > 0) timeout = std::min(timeout, c.max_timeout_ms);
    timeout = std::max<int64_t>(timeout, 1);
    const int64_t start = clock_.MonotonicMs();
    in_flight_.fetch_add(1);
    std::weak_ptr<Impl> weak = weak_from_this();
    transport_.Call(*call, timeout,
                    [weak, gid, c, participant, kind, start, bytes, as_probe,
                     budget = budget_,
                     answered = std::make_shared<std::atomic<bool>>(false)](
                        absl::StatusOr<BranchAnswer> a) {
                      // A simulated transport may answer twice (a duplicated
                      // reply): the room it held is given back once.
                      const bool first = !answered->exchange(true);
                      if (first) budget->Charge(-bytes);
                      auto self = weak.lock();
                      if (!self) return;
                      if (first) {
                        self->in_flight_.fetch_sub(1);
                        self->ReleaseWaiting();
                      }
                      if (IsNotSent(a.status())) {
                        // The transport kept it (its send gate shut while it
                        // waited): it never left. Not the participant's
                        // failure; a probe passes to the next call.
                        if (first) self->Abandon(participant, as_probe);
                        self->Deliver(gid, c, ReceivedStatus(a.status()),
                                      /*not_sent=*/true);
                        return;
                      }
                      // Recovery drills: `driver.drop_try_reply=error` loses
                      // every Try's answer (the Try ran; tccd never learns
                      // how), as if tccd had crashed with the Try in flight.
                      // Off unless TCC_FAILPOINTS names it.
                      if (c.phase == wal::Phase::kTry &&
                          !failpoint::Eval("driver.drop_try_reply").ok()) {
                        return;
                      }
                      self->Answered(participant, kind, start, a.status());
                      core::CallReplyEvent e;
                      e.branch = c.branch;
                      e.phase = c.phase;
                      e.attempt = c.attempt;
                      if (a.ok()) {
                        e.status = absl::OkStatus();
                        e.outcome = a->outcome;
                        e.replayed = a->replayed;
                        e.message = ClipParticipantText(a->message);
                      } else {
                        e.status = ReceivedStatus(a.status());
                      }
                      self->hooks_.deliver(gid, std::move(e));
                    });
  }

  void Abandon(const std::string& participant, bool as_probe) {
    if (!as_probe) return;
    for (auto& f : breakers_.ProbeAbandoned(participant)) f();
  }

  void Query(const QueryCall& query, const core::QueryEffect& q) {
    core::QueryReplyEvent fail;
    fail.branch = q.branch;
    fail.query_id = q.query_id;
    // Before the breaker's admission: a query not sent must not take the
    // breaker's probe (the breaker would wait for its answer for ever and
    // hold every later call to the participant).
    if (may_call_ && !may_call_(query.gid)) {
      fail.status = absl::UnavailableError(kNotSentMessage);
      hooks_.deliver(query.gid, std::move(fail));
      return;
    }
    bool probe = false;
    if (breakers_.Admission(query.participant, CallKind::kQuery,
                            clock_.MonotonicMs(), nullptr,
                            &probe) != CircuitBreakers::Admit::kSend) {
      fail.status = absl::UnavailableError(
          absl::StrCat("circuit open for participant ", query.participant));
      hooks_.deliver(query.gid, std::move(fail));
      return;
    }

    const int64_t timeout = std::max<int64_t>(
        1, timeouts_.TimeoutMs(query.participant, CallKind::kQuery));
    const int64_t start = clock_.MonotonicMs();
    std::weak_ptr<Impl> weak = weak_from_this();
    transport_.Query(
        query, timeout,
        [weak, gid = query.gid, participant = query.participant, fail, start,
         probe, answered = std::make_shared<std::atomic<bool>>(false)](
            absl::StatusOr<QueryAnswer> a) {
          auto self = weak.lock();
          if (!self) return;
          if (IsNotSent(a.status())) {
            // Never left (the transport's gate): not the
            // participant's failure; the lookup stays unknown.
            // A probe passes on once, whatever a simulated
            // transport repeats.
            if (!answered->exchange(true)) {
              self->Abandon(participant, probe);
            }
          } else {
            self->Answered(participant, CallKind::kQuery, start, a.status());
          }
          core::QueryReplyEvent e = fail;
          if (a.ok()) {
            e.status = absl::OkStatus();
            e.barrier = a->state;
            e.branch_hash = a->branch_hash;
            e.authoritative = a->authoritative;
          } else {
            e.status = ReceivedStatus(a.status());
          }
          self->hooks_.deliver(gid, std::move(e));
        });
  }

  BreakerState breaker_state(const std::string& p) const {
    return breakers_.State(p);
  }

 private:
  // A call waiting for room in the memory budget; it holds no payload.
  struct Waiting {
    std::string gid;
    std::string participant;
    core::CallEffect call;
    bool as_probe = false;  // the breaker released it as its probe
  };

  // The one reply path's accounting: a timed-out call took at least its
  // timeout, so it counts as a latency sample too (else a link that turned
  // slow would never answer in time to teach the timeout); the breaker
  // counts a failure for every error that leaves the outcome unknown, and
  // an answer (or a definite refusal: the participant did answer) resets it.
  void Answered(const std::string& participant, CallKind kind, int64_t start,
                const absl::Status& status) {
    if (status.ok() || status.code() == absl::StatusCode::kDeadlineExceeded) {
      timeouts_.Observe(participant, kind, clock_.MonotonicMs() - start);
    }
    const bool reached = status.ok() || core::IsDefiniteRefusal(status.code());
    bool changed = false;
    auto release =
        breakers_.OnResult(participant, reached, clock_.MonotonicMs(), &changed,
                           status.ok() ? 0 : RpcOf(status));
    if (changed) {
      const BreakerState st = breakers_.State(participant);
      if (hooks_.breaker_changed) hooks_.breaker_changed(participant, st);
      if (st == BreakerState::kOpen) {
        std::weak_ptr<Impl> weak = weak_from_this();
        clock_.Schedule(breakers_.OpenMs(), [weak, participant] {
          if (auto self = weak.lock()) {
            auto probes = self->breakers_.ProbeDue(participant,
                                                   self->clock_.MonotonicMs());
            for (auto& f : probes) f();
          }
        });
      }
    }
    for (auto& f : release) f();
  }

  // A call that did not leave (or will not): its reply, to the core.
  void Deliver(const std::string& gid, const core::CallEffect& c,
               absl::Status status, bool not_sent) {
    core::CallReplyEvent e;
    e.branch = c.branch;
    e.phase = c.phase;
    e.attempt = c.attempt;
    e.status = std::move(status);
    e.not_sent = not_sent;
    hooks_.deliver(gid, std::move(e));
  }

  // An answer made room: the next waiting call may go (all of them when no
  // call is in flight, so that they always make progress).
  void ReleaseWaiting() {
    std::vector<Waiting> go;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t n = in_flight_.load() == 0 ? waiting_.size() : size_t{1};
      for (size_t i = 0; i < n && !waiting_.empty(); ++i) {
        go.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
    }
    for (Waiting& w : go) {
      hooks_.resume(w.gid, w.call, w.participant, w.as_probe);
    }
  }

  Clock& clock_;
  ParticipantTransport& transport_;
  std::shared_ptr<MemoryBudget> budget_;
  Hooks hooks_;
  AdaptiveTimeouts timeouts_;
  CircuitBreakers breakers_;
  const std::function<bool(const std::string& gid)> may_call_;
  std::atomic<int64_t> in_flight_{0};  // sent, not yet answered
  std::mutex mu_;
  std::deque<Waiting> waiting_;  // guarded by mu_
};

ParticipantCalls::ParticipantCalls(ParticipantCallsOptions options,
                                   Clock& clock,
                                   ParticipantTransport& transport,
                                   std::shared_ptr<MemoryBudget> budget,
                                   Hooks hooks)
    : impl_(std::make_shared<Impl>(std::move(options), clock, transport,
                                   std::move(budget), std::move(hooks))) {}

ParticipantCalls::~ParticipantCalls() = default;

void ParticipantCalls::Send(const std::string& gid,
                            const std::string& participant,
                            const core::CallEffect& call, int64_t payload_bytes,
                            const BuildCall& build) {
  impl_->Send(gid, participant, call, payload_bytes, build);
}

void ParticipantCalls::SendAdmitted(const std::string& gid,
                                    const std::string& participant,
                                    const core::CallEffect& call, bool as_probe,
                                    int64_t payload_bytes,
                                    const BuildCall& build) {
  impl_->SendAdmitted(gid, participant, call, as_probe, payload_bytes, build);
}

void ParticipantCalls::Abandon(const std::string& participant, bool as_probe) {
  impl_->Abandon(participant, as_probe);
}

void ParticipantCalls::Query(const QueryCall& query,
                             const core::QueryEffect& effect) {
  impl_->Query(query, effect);
}

BreakerState ParticipantCalls::breaker_state(
    const std::string& participant) const {
  return impl_->breaker_state(participant);
}

}  // namespace tcc::runtime
