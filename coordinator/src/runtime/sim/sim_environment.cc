#include "runtime/sim/sim_environment.h"

#include <algorithm>

#include "runtime/sim/write_ahead_check.h"

namespace tcc::runtime::sim {

size_t DeterministicExecutor::RunAll() {
  size_t n = 0;
  while (!tasks_.empty()) {
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    task();
    ++n;
  }
  return n;
}

TimerId SimClock::Schedule(int64_t delay_ms, std::function<void()> fn) {
  const TimerId id = next_id_++;
  const int64_t due = mono_ + std::max<int64_t>(0, delay_ms);
  timers_.emplace(std::make_pair(due, id), std::move(fn));
  due_of_[id] = due;
  return id;
}

void SimClock::Cancel(TimerId id) {
  auto it = due_of_.find(id);
  if (it == due_of_.end()) return;
  timers_.erase({it->second, id});
  due_of_.erase(it);
}

std::optional<int64_t> SimClock::NextDue() const {
  if (timers_.empty()) return std::nullopt;
  return timers_.begin()->first.first;
}

void SimClock::AdvanceTo(int64_t t) {
  while (!timers_.empty() && timers_.begin()->first.first <= t) {
    auto it = timers_.begin();
    mono_ = std::max(mono_, it->first.first);
    auto fn = std::move(it->second);
    due_of_.erase(it->first.second);
    timers_.erase(it);
    fn();
  }
  mono_ = std::max(mono_, t);
}

bool SimLoop::StepOnce(int64_t limit_ms) {
  if (executor_.RunAll() > 0) return true;
  if (log_ != nullptr && log_->WaitingDurable() > 0) {
    log_->SyncNow();
    return true;
  }
  auto next = clock_.NextDue();
  if (!next || *next > limit_ms) return false;
  // Fire the timers due at that instant only.
  clock_.AdvanceTo(*next);
  return true;
}

bool SimLoop::RunUntil(const std::function<bool()>& done, int64_t max_ms) {
  const int64_t limit = clock_.MonotonicMs() + max_ms;
  while (!done()) {
    if (!StepOnce(limit)) return done();
  }
  return true;
}

// ---------------------------------------------------------------- transport

void SimTransport::Add(const std::string& name, SimParticipant* participant) {
  participants_[name] = participant;
  faults_[name];
}

bool SimTransport::Draw(double p) {
  return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

int64_t SimTransport::Latency(const LinkFaults& f) {
  return std::uniform_int_distribution<int64_t>(
      f.min_latency_ms, std::max(f.min_latency_ms, f.max_latency_ms))(rng_);
}

namespace {

// Completes a call once (the first of reply, timeout, error); a duplicated
// reply may call `done` again after a delivered reply.
template <typename Done>
struct Pending {
  Done done;
  bool completed = false;
  bool delivered = false;
};

}  // namespace

void SimTransport::Call(const BranchCall& call, int64_t timeout_ms,
                        BranchDone done) {
  ++calls_;
  const std::string& name = call.spec->participant;
  if (log_ != nullptr) {
    if (std::optional<std::string> v = WriteAheadViolation(*log_, call)) {
      violations_.push_back(std::move(*v));
    }
  }
  auto pending = std::make_shared<Pending<BranchDone>>();
  pending->done = std::move(done);
  clock_.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("call timed out"));
  });
  auto pit = participants_.find(name);
  LinkFaults& f = faults_[name];
  if (pit == participants_.end() || f.partitioned) {
    clock_.Schedule(1, [pending, name] {
      if (pending->completed) return;
      pending->completed = true;
      pending->done(absl::UnavailableError("unreachable: " + name));
    });
    return;
  }
  // Copy what the delivery needs: the driver's spec pointer dies with Call.
  auto copy = std::make_shared<std::pair<BranchCall, wal::BranchSpec>>(
      call, *call.spec);
  SimParticipant* p = pit->second;
  Script script = scripts_.count(name) ? scripts_[name] : Script();
  SimClock* clock = &clock_;
  // One delivery of the request (the network may deliver it twice); the
  // first answer back completes the call, a later one arrives as a
  // duplicated reply if the call had been answered (not timed out).
  const int copies = Draw(f.duplicate_request) ? 2 : 1;
  for (int i = 0; i < copies; ++i) {
    if (Draw(f.lose_request)) continue;
    const bool lose_reply = Draw(f.lose_reply);
    const bool dup = Draw(f.duplicate);
    const int64_t there = Latency(f);
    const int64_t back = Latency(f);
    const int64_t again = Latency(f);
    clock_.Schedule(there, [=] {
      copy->first.spec = &copy->second;
      std::optional<absl::StatusOr<BranchAnswer>> scripted;
      if (script) scripted = script(copy->first);
      absl::StatusOr<BranchAnswer> answer =
          scripted ? *scripted : p->OnCall(copy->first, clock->WallMs());
      if (lose_reply) return;
      clock->Schedule(back, [=] {
        if (pending->completed) {
          if (pending->delivered) pending->done(answer);  // a duplicate
          return;
        }
        pending->completed = true;
        pending->delivered = true;
        pending->done(answer);
        if (dup) {
          clock->Schedule(again, [=] { pending->done(answer); });
        }
      });
    });
  }
}

void SimTransport::Query(const QueryCall& query, int64_t timeout_ms,
                         QueryDone done) {
  ++queries_;
  auto pending = std::make_shared<Pending<QueryDone>>();
  pending->done = std::move(done);
  clock_.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("query timed out"));
  });
  auto pit = participants_.find(query.participant);
  LinkFaults& f = faults_[query.participant];
  if (pit == participants_.end() || f.partitioned) {
    clock_.Schedule(1, [pending] {
      if (pending->completed) return;
      pending->completed = true;
      pending->done(absl::UnavailableError("unreachable"));
    });
    return;
  }
  if (Draw(f.lose_request)) return;
  const bool lose_reply = Draw(f.lose_reply);
  const int64_t there = Latency(f);
  const int64_t back = Latency(f);
  SimParticipant* p = pit->second;
  SimClock* clock = &clock_;
  clock_.Schedule(there, [=] {
    absl::StatusOr<QueryAnswer> answer = p->OnQuery(query, clock->WallMs());
    if (lose_reply) return;
    clock->Schedule(back, [=] {
      if (pending->completed) return;
      pending->completed = true;
      pending->done(answer);
    });
  });
}

}  // namespace tcc::runtime::sim
