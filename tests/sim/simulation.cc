#include "simulation.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/driver.h"
#include "runtime/sim/sim_environment.h"
#include "runtime/sim/write_ahead_check.h"
#include "sim_bank.h"
#include "tcc/wal/memory_log.h"

namespace tcc::sim {
namespace {

constexpr int64_t kWallStartMs = 1'700'000'000'000;
// Liveness: once the faults stop, every transaction must be final within
// this much simulated time.
constexpr int64_t kLivenessBoundMs = 600'000;
constexpr int64_t kHealthyLatencyMs = 5;

// Runs posted tasks one at a time, so that tccd can crash between any two.
class SteppedExecutor final : public runtime::Executor {
 public:
  void Post(std::function<void()> task) override {
    tasks_.push_back(std::move(task));
  }
  bool Idle() const { return tasks_.empty(); }
  void RunOne() {
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    task();
  }
  void Clear() { tasks_.clear(); }

 private:
  std::deque<std::function<void()>> tasks_;
};

// A call in flight as the coordinator's process sees it: completed once (by
// the first reply, the timeout or a fast failure). Replies reaching a
// process that has since crashed (another incarnation) are dropped.
template <typename Done>
struct Pending {
  Done done;
  uint64_t incarnation = 0;
  bool completed = false;
  bool delivered = false;
};

// One client's transfer: a Submit, or (interactive) Begin, one Try per
// branch, then Commit (or Rollback). `step` is the interactive client's next
// request: 0 Begin, 1..n the Trys, n+1 Commit/Rollback.
struct TransferPlan {
  core::SubmitSpec spec;
  bool interactive = false;
  bool rollback = false;
  int step = 0;
  bool answered = false;
  uint64_t outstanding = 0;  // the incarnation a request waits in; 0: none
  bool final = false;
};

class Simulation;

// The simulated network between tccd and the banks.
class Network final : public runtime::ParticipantTransport {
 public:
  explicit Network(Simulation& sim) : sim_(sim) {}
  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

 private:
  Simulation& sim_;
};

class Simulation {
 public:
  Simulation(uint64_t seed, const SimOptions& options)
      : seed_(seed),
        options_(options),
        params_(DrawParams(seed, options)),
        rng_(seed * 0x9E3779B97F4A7C15ULL + 7),
        clock_(kWallStartMs),
        log_(wal::MemoryLogOptions{false, {}}),
        network_(*this) {}

  SeedReport Run();

  void SendCall(const runtime::BranchCall& call, int64_t timeout_ms,
                runtime::BranchDone done);
  void SendQuery(const runtime::QueryCall& query, int64_t timeout_ms,
                 runtime::QueryDone done);

 private:
  // --- randomness
  bool Draw(double p) {
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
  }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng_);
  }
  int64_t Exponential(double per_s) {
    return 1 + static_cast<int64_t>(
                   std::exponential_distribution<double>(per_s / 1000)(rng_));
  }
  // One way. Slow, reordering links are a fault: a healthy link takes 1-5 ms.
  int64_t Latency() {
    return Uniform(1, faults_on_ || options_.slow_links_stay
                          ? params_.max_latency_ms
                          : kHealthyLatencyMs);
  }

  // --- the world's event queue (network, clients, faults): survives tccd
  // crashes, unlike tccd's own timers in clock_.
  void At(int64_t delay_ms, std::function<void()> fn) {
    world_.emplace(
        std::make_pair(clock_.MonotonicMs() + std::max<int64_t>(0, delay_ms),
                       world_seq_++),
        std::move(fn));
  }
  bool Step(int64_t limit_ms);
  bool MaybeCrashTccd();
  void CrashTccd();
  void StartTccd();
  void Submit(int t);
  void Interactive(int t);
  void OnInteractiveAnswer(int t, uint64_t incarnation, int step,
                           absl::StatusOr<runtime::DriverReply> reply);
  void SubmitConflict(int t);
  void OnAnswer(int t, uint64_t incarnation,
                absl::StatusOr<runtime::DriverReply> reply);
  void NoteDecision(const std::string& gid, wal::Decision d, const char* how);
  void CheckWriteAhead(const runtime::BranchCall& call);
  void DeliverCall(
      int bank,
      std::shared_ptr<std::pair<runtime::BranchCall, wal::BranchSpec>> copy,
      std::shared_ptr<Pending<runtime::BranchDone>> pending);
  void BankDown(int bank);
  bool Reachable(int bank) const { return !(faults_on_ && partitioned_[bank]); }
  void SetBankClock(int bank) {
    banks_[bank]->clock().Set(kWallStartMs + clock_.MonotonicMs() +
                              bank_offset_[bank]);
  }
  void SchedulePartition(int bank);
  void ScheduleWallJump();
  void PlanTransfers();
  bool AllDone();
  void EndChecks();
  void Violation(std::string what) { violations_.push_back(std::move(what)); }
  template <typename... Args>
  void Trace(const Args&... args) {
    if (!options_.trace) return;
    std::fprintf(stderr, "%s\n",
                 absl::StrCat("[", clock_.MonotonicMs(),
                              " wall=", clock_.WallMs(), "] ", args...)
                     .c_str());
  }

  const uint64_t seed_;
  const SimOptions options_;
  const SimParams params_;
  std::mt19937_64 rng_;

  runtime::sim::SimClock clock_;
  SteppedExecutor exec_;
  wal::MemoryLog log_;
  Network network_;
  runtime::DriverOptions driver_options_;
  std::unique_ptr<runtime::Driver> driver_;
  uint64_t incarnation_ = 2;  // 1 marks "a request died with tccd"
  int tccd_crashes_ = 0;

  std::vector<std::unique_ptr<SimBank>> banks_;
  std::map<std::string, int> bank_index_;
  std::vector<bool> bank_down_;
  std::vector<bool> partitioned_;
  std::vector<int64_t> bank_offset_;
  int64_t initial_total_ = 0;

  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> world_;
  uint64_t world_seq_ = 0;
  int64_t requests_in_flight_ = 0;
  bool faults_on_ = true;

  std::vector<TransferPlan> transfers_;
  // The decision each gid was told to a client or acted on with (a Confirm
  // or Cancel sent), first seen.
  std::map<std::string, wal::Decision> decisions_;

  std::vector<std::string> violations_;
  uint64_t faults_ = 0;
  uint64_t crashes_ = 0;
  uint64_t events_ = 0;
};

void Network::Call(const runtime::BranchCall& call, int64_t timeout_ms,
                   runtime::BranchDone done) {
  sim_.SendCall(call, timeout_ms, std::move(done));
}

void Network::Query(const runtime::QueryCall& query, int64_t timeout_ms,
                    runtime::QueryDone done) {
  sim_.SendQuery(query, timeout_ms, std::move(done));
}

// ------------------------------------------------------------- the network

void Simulation::CheckWriteAhead(const runtime::BranchCall& call) {
  if (!options_.check_write_ahead) return;
  if (std::optional<std::string> v =
          runtime::sim::WriteAheadViolation(log_, call)) {
    Violation(std::move(*v));
  }
}

void Simulation::SendCall(const runtime::BranchCall& call, int64_t timeout_ms,
                          runtime::BranchDone done) {
  CheckWriteAhead(call);
  Trace("send ", core::PhaseName(call.phase), " ", call.gid, "/",
        call.spec->branch_id, " to ", call.spec->participant,
        " attempt=", call.attempt, " timeout=", timeout_ms);
  if (call.phase != wal::Phase::kTry) {
    NoteDecision(call.gid,
                 call.phase == wal::Phase::kConfirm ? wal::Decision::kConfirm
                                                    : wal::Decision::kCancel,
                 "acted on");
  }
  auto pending = std::make_shared<Pending<runtime::BranchDone>>();
  pending->done = std::move(done);
  pending->incarnation = incarnation_;
  clock_.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("call timed out"));
  });
  auto it = bank_index_.find(call.spec->participant);
  if (it == bank_index_.end()) {
    Violation("call to an unknown participant " + call.spec->participant);
    return;
  }
  const int bank = it->second;
  if (!Reachable(bank)) {
    ++faults_;
    if (params_.partition_fails_fast) {
      clock_.Schedule(1, [pending] {
        if (pending->completed) return;
        pending->completed = true;
        pending->done(absl::UnavailableError("partitioned"));
      });
    }
    return;
  }
  // The driver's spec pointer dies with this call: deliver a copy.
  auto copy = std::make_shared<std::pair<runtime::BranchCall, wal::BranchSpec>>(
      call, *call.spec);
  int copies = 1;
  if (faults_on_ && Draw(params_.duplicate_request)) {
    ++faults_;
    copies = 2;
  }
  for (int i = 0; i < copies; ++i) {
    if (faults_on_ && Draw(params_.lose_request)) {
      ++faults_;
      continue;
    }
    int64_t there = Latency();
    if (faults_on_ && Draw(params_.delay_past_timeout)) {
      ++faults_;
      there = timeout_ms + Uniform(1, 3 * timeout_ms);
    }
    ++requests_in_flight_;
    At(there, [this, bank, copy, pending] {
      --requests_in_flight_;
      DeliverCall(bank, copy, pending);
    });
  }
}

void Simulation::DeliverCall(
    int bank,
    std::shared_ptr<std::pair<runtime::BranchCall, wal::BranchSpec>> copy,
    std::shared_ptr<Pending<runtime::BranchDone>> pending) {
  if (bank_down_[bank] || !Reachable(bank)) return;  // lost on the way
  SetBankClock(bank);
  CrashPoint crash = CrashPoint::kNone;
  if (faults_on_ && Draw(params_.bank_crash_per_call)) {
    crash = Draw(0.5) ? CrashPoint::kInHandler : CrashPoint::kAfterCommit;
  }
  copy->first.spec = &copy->second;
  SimBank::CallResult r = banks_[bank]->Call(copy->first, crash, violations_);
  Trace("bank", bank, " clock=", banks_[bank]->clock().NowUnixMs(), " ",
        core::PhaseName(copy->first.phase), " ", copy->first.gid, "/",
        copy->second.branch_id, " attempt=", copy->first.attempt,
        " epoch=", copy->first.owner_epoch,
        " deadline=", copy->first.try_deadline_ms,
        " crash=", static_cast<int>(crash), " -> ",
        r.answer.ok() ? absl::StrCat(core::OutcomeName(r.answer->outcome),
                                     r.answer->replayed ? " (replayed)" : "")
                      : r.answer.status().ToString());
  if (r.crashed) {
    BankDown(bank);
    return;  // the reply dies with the process
  }
  if (faults_on_ && Draw(params_.lose_reply)) {
    ++faults_;
    return;
  }
  auto answer =
      std::make_shared<absl::StatusOr<runtime::BranchAnswer>>(r.answer);
  auto reply = [this, bank, pending, answer] {
    if (pending->incarnation != incarnation_ || !Reachable(bank)) return;
    if (pending->completed) {
      if (pending->delivered) pending->done(*answer);  // a duplicate
      return;
    }
    pending->completed = true;
    pending->delivered = true;
    pending->done(*answer);
  };
  At(Latency(), reply);
  if (faults_on_ && Draw(params_.duplicate_reply)) {
    ++faults_;
    At(Latency() + Latency(), reply);
  }
}

void Simulation::SendQuery(const runtime::QueryCall& query, int64_t timeout_ms,
                           runtime::QueryDone done) {
  auto pending = std::make_shared<Pending<runtime::QueryDone>>();
  pending->done = std::move(done);
  pending->incarnation = incarnation_;
  clock_.Schedule(timeout_ms, [pending] {
    if (pending->completed) return;
    pending->completed = true;
    pending->done(absl::DeadlineExceededError("query timed out"));
  });
  auto it = bank_index_.find(query.participant);
  if (it == bank_index_.end()) {
    Violation("query to an unknown participant " + query.participant);
    return;
  }
  const int bank = it->second;
  if (!Reachable(bank)) {
    ++faults_;
    if (params_.partition_fails_fast) {
      clock_.Schedule(1, [pending] {
        if (pending->completed) return;
        pending->completed = true;
        pending->done(absl::UnavailableError("partitioned"));
      });
    }
    return;
  }
  if (faults_on_ && Draw(params_.lose_request)) {
    ++faults_;
    return;
  }
  ++requests_in_flight_;
  At(Latency(), [this, bank, query, pending] {
    --requests_in_flight_;
    if (bank_down_[bank] || !Reachable(bank)) return;
    SetBankClock(bank);
    auto answer = std::make_shared<absl::StatusOr<runtime::QueryAnswer>>(
        banks_[bank]->Query(query));
    Trace("bank", bank, " query ", query.gid, "/", query.branch_id, " -> ",
          answer->ok() ? absl::StrCat(static_cast<int>((*answer)->state))
                       : answer->status().ToString());
    if (faults_on_ && Draw(params_.lose_reply)) {
      ++faults_;
      return;
    }
    At(Latency(), [this, bank, pending, answer] {
      if (pending->incarnation != incarnation_ || !Reachable(bank)) return;
      if (pending->completed) return;
      pending->completed = true;
      pending->done(*answer);
    });
  });
}

void Simulation::BankDown(int bank) {
  ++faults_;
  ++crashes_;
  Trace("bank", bank, " crash");
  bank_down_[bank] = true;
  At(Uniform(1, params_.max_bank_down_ms),
     [this, bank] { bank_down_[bank] = false; });
}

// ------------------------------------------------------------- tccd

void Simulation::StartTccd() {
  if (driver_) return;
  driver_ = std::make_unique<runtime::Driver>(
      driver_options_, std::vector<runtime::Executor*>{&exec_, &exec_}, clock_,
      network_, log_);
  if (absl::Status s = driver_->Start(); !s.ok()) {
    Violation("tccd did not start: " + s.ToString());
    return;
  }
  // Clients whose requests died with the last process ask again.
  for (size_t t = 0; t < transfers_.size(); ++t) {
    if (transfers_[t].spec.gid.empty() || transfers_[t].answered) continue;
    if (transfers_[t].outstanding == 0) continue;  // not submitted yet
    transfers_[t].outstanding = 0;
    At(Uniform(0, 300), [this, t] { Submit(static_cast<int>(t)); });
  }
}

bool Simulation::MaybeCrashTccd() {
  if (!faults_on_ || tccd_crashes_ >= params_.max_tccd_crashes ||
      !Draw(params_.tccd_crash_per_step)) {
    return false;
  }
  CrashTccd();
  return true;
}

void Simulation::CrashTccd() {
  Trace("tccd crash");
  ++tccd_crashes_;
  ++crashes_;
  ++faults_;
  ++incarnation_;  // replies and answers to the dead process are dropped
  driver_.reset();
  exec_.Clear();
  clock_.Clear();
  log_.Crash(
      static_cast<size_t>(Uniform(0, static_cast<int64_t>(log_.Unsynced()))));
  if (options_.trace) {
    for (const TransferPlan& p : transfers_) {
      auto stored = log_.Read(p.spec.gid);
      Trace("after the crash ", p.spec.gid, ": ",
            stored.ok()
                ? absl::StrCat(stored->records.size(), " records, ",
                               core::TxnStateName(stored->summary.state))
                : stored.status().ToString());
    }
  }
  // No lost decision (section 13.3): what was told or acted on survived.
  for (const auto& [gid, d] : decisions_) {
    auto stored = log_.Read(gid);
    if (!stored.ok() || stored->summary.decision != d) {
      Violation(
          absl::StrCat("lost decision: ", gid, " was ", wal::DecisionName(d),
                       ", after the crash the WAL holds ",
                       stored.ok() ? wal::DecisionName(stored->summary.decision)
                                   : stored.status().ToString()));
    }
  }
  for (TransferPlan& p : transfers_) {
    if (p.outstanding != 0) p.outstanding = 1;  // marks "was waiting"
  }
  At(Uniform(0, params_.max_tccd_down_ms), [this] { StartTccd(); });
}

void Simulation::NoteDecision(const std::string& gid, wal::Decision d,
                              const char* how) {
  auto [it, fresh] = decisions_.emplace(gid, d);
  if (!fresh && it->second != d) {
    Violation(absl::StrCat("decision changed: ", gid, " was ",
                           wal::DecisionName(it->second), ", then ", how, " ",
                           wal::DecisionName(d)));
  }
}

// ------------------------------------------------------------- clients

void Simulation::Submit(int t) {
  TransferPlan& p = transfers_[t];
  if (p.interactive) return Interactive(t);
  if (p.answered) return;
  if (!driver_) {  // tccd is down: StartTccd asks again
    p.outstanding = 1;
    return;
  }
  if (p.outstanding == incarnation_) return;  // already waiting
  p.outstanding = incarnation_;
  const uint64_t inc = incarnation_;
  driver_->Submit(p.spec,
                  [this, t, inc](absl::StatusOr<runtime::DriverReply> reply) {
                    OnAnswer(t, inc, std::move(reply));
                  });
}

void Simulation::Interactive(int t) {
  TransferPlan& p = transfers_[t];
  if (p.answered) return;
  if (!driver_) {  // tccd is down: StartTccd asks again
    p.outstanding = 1;
    return;
  }
  if (p.outstanding == incarnation_) return;  // already waiting
  p.outstanding = incarnation_;
  const uint64_t inc = incarnation_;
  const int step = p.step;
  auto done = [this, t, inc, step](absl::StatusOr<runtime::DriverReply> r) {
    OnInteractiveAnswer(t, inc, step, std::move(r));
  };
  const int n = static_cast<int>(p.spec.branches.size());
  Trace("interactive ", p.spec.gid, " sends step ", step);
  if (step == 0) {
    core::BeginSpec begin;
    begin.gid = p.spec.gid;
    begin.created_at_ms = p.spec.created_at_ms;
    begin.revision = p.spec.revision;
    begin.timeout_ms = p.spec.try_timeout_ms;
    driver_->Begin(std::move(begin), std::move(done));
  } else if (step <= n) {
    driver_->Try(p.spec.gid, p.spec.branches[step - 1], std::move(done));
  } else if (p.rollback) {
    driver_->Rollback(p.spec.gid, p.spec.wait_for, std::move(done));
  } else {
    std::vector<std::string> ids;
    for (const wal::BranchSpec& b : p.spec.branches) ids.push_back(b.branch_id);
    driver_->Commit(p.spec.gid, std::move(ids), p.spec.wait_for,
                    std::move(done));
  }
}

void Simulation::OnInteractiveAnswer(
    int t, uint64_t inc, int step, absl::StatusOr<runtime::DriverReply> reply) {
  if (inc != incarnation_) return;  // that client connection is gone
  TransferPlan& p = transfers_[t];
  p.outstanding = 0;
  Trace("interactive ", p.spec.gid, " step ", step, ": ",
        reply.ok() ? std::string("OK") : reply.status().ToString());
  const int last = static_cast<int>(p.spec.branches.size()) + 1;
  const absl::StatusCode code = reply.status().code();
  if (reply.ok()) {
    if (step < last) {
      p.step = step + 1;
      At(Uniform(0, 200), [this, t] { Interactive(t); });  // the caller thinks
      return;
    }
    p.answered = true;
    Trace("interactive ", p.spec.gid,
          p.rollback ? " rolled back: " : " committed: ",
          core::TxnStateName(reply->transaction.state));
    if (reply->transaction.decision != wal::Decision::kNone) {
      NoteDecision(p.spec.gid, reply->transaction.decision, "told");
    }
    return;
  }
  if (step == last && code == absl::StatusCode::kAborted) {
    // Commit answers ABORTED when the decision is Cancel (section 4).
    p.answered = true;
    NoteDecision(p.spec.gid, wal::Decision::kCancel, "told");
    return;
  }
  if (step > 0 && step < last &&
      code == absl::StatusCode::kFailedPrecondition) {
    // The OPEN deadline passed (tccd cancelled): the caller rolls back.
    p.rollback = true;
    p.step = last;
    At(Uniform(0, 200), [this, t] { Interactive(t); });
    return;
  }
  if (code == absl::StatusCode::kNotFound && step > 0) {
    Violation(absl::StrCat("lost transaction: ", p.spec.gid,
                           " is NOT_FOUND after its Begin was acknowledged"));
    return;
  }
  if (code == absl::StatusCode::kAlreadyExists ||
      code == absl::StatusCode::kInvalidArgument ||
      code == absl::StatusCode::kFailedPrecondition) {
    Violation(absl::StrCat("interactive ", p.spec.gid, " step ", step,
                           " refused: ", reply.status().ToString()));
    return;
  }
  At(Uniform(50, 1000), [this, t] { Interactive(t); });
}

// The same gid with other content, after the first was accepted: refused
// (ALREADY_EXISTS), and nothing of it may run (section 13.6).
void Simulation::SubmitConflict(int t) {
  if (!driver_) return;
  ++faults_;
  core::SubmitSpec spec = transfers_[t].spec;
  spec.branches.back().payload += "0";  // another amount: other content
  const uint64_t inc = incarnation_;
  const std::string gid = spec.gid;
  driver_->Submit(std::move(spec), [this, inc, gid](
                                       absl::StatusOr<runtime::DriverReply> r) {
    if (inc != incarnation_) return;
    Trace("conflicting submit of ", gid, ": ",
          r.ok() ? std::string("accepted") : r.status().ToString());
    if (r.ok()) {
      Violation(
          absl::StrCat("conflict: ", gid, " with other content was accepted"));
    } else if (r.status().code() != absl::StatusCode::kAlreadyExists &&
               r.status().code() != absl::StatusCode::kUnavailable) {
      Violation(absl::StrCat("conflict: ", gid, " with other content got ",
                             r.status().ToString()));
    }
  });
}

void Simulation::OnAnswer(int t, uint64_t inc,
                          absl::StatusOr<runtime::DriverReply> reply) {
  if (inc != incarnation_) return;  // that client connection is gone
  TransferPlan& p = transfers_[t];
  p.outstanding = 0;
  if (reply.ok()) {
    p.answered = true;
    if (reply->transaction.decision != wal::Decision::kNone) {
      NoteDecision(p.spec.gid, reply->transaction.decision, "told");
    }
    if (faults_on_ && Draw(params_.conflicting_submits)) {
      At(Uniform(0, 2000), [this, t] { SubmitConflict(t); });
    }
    return;
  }
  const absl::StatusCode code = reply.status().code();
  if (code == absl::StatusCode::kAlreadyExists ||
      code == absl::StatusCode::kInvalidArgument ||
      code == absl::StatusCode::kFailedPrecondition) {
    Violation(absl::StrCat("submit of ", p.spec.gid,
                           " refused: ", reply.status().ToString()));
    return;
  }
  At(Uniform(50, 1000), [this, t] { Submit(t); });
}

void Simulation::PlanTransfers() {
  for (int t = 0; t < params_.transactions; ++t) {
    TransferPlan p;
    core::SubmitSpec& s = p.spec;
    s.gid = absl::StrCat("s", seed_, "-t", t);
    s.revision = 1;
    s.try_timeout_ms =
        Uniform(params_.min_try_timeout_ms, params_.max_try_timeout_ms);
    s.wait_for = static_cast<core::WaitFor>(1 + Uniform(0, 2));
    p.interactive = Draw(params_.interactive_share);
    p.rollback = p.interactive && Draw(0.15);
    const int n = static_cast<int>(Uniform(2, 4));
    const int debits = n >= 3 && Draw(0.5) ? 2 : 1;
    const int credits = n - debits;
    int64_t total = 0;
    for (int b = 0; b < n; ++b) {
      wal::BranchSpec br;
      br.branch_id = absl::StrCat("b", b);
      br.participant = absl::StrCat("bank", Uniform(0, params_.banks - 1));
      int64_t amount = 0;
      if (b < debits) {
        br.action = "debit";
        amount = Uniform(3, params_.max_amount);
        total += amount;
      } else {
        br.action = "credit";
        const int left = n - 1 - b;  // credits after this one
        amount = left == 0 ? total : Uniform(1, total - left);
        total -= amount;
      }
      br.payload =
          absl::StrCat(Uniform(0, params_.accounts_per_bank - 1), ":", amount);
      s.branches.push_back(std::move(br));
    }
    (void)credits;
    transfers_.push_back(std::move(p));
  }
}

// ------------------------------------------------------------- faults

void Simulation::SchedulePartition(int bank) {
  At(Exponential(params_.partitions_per_s), [this, bank] {
    if (!faults_on_) return;
    ++faults_;
    partitioned_[bank] = true;
    At(Uniform(1, params_.max_partition_ms), [this, bank] {
      partitioned_[bank] = false;
      SchedulePartition(bank);
    });
  });
}

void Simulation::ScheduleWallJump() {
  At(Exponential(params_.wall_jumps_per_s), [this] {
    if (!faults_on_) return;
    ++faults_;
    const int64_t jump =
        Uniform(-params_.max_wall_jump_ms, params_.max_wall_jump_ms);
    const int who = static_cast<int>(Uniform(0, params_.banks));
    if (who == params_.banks) {
      clock_.JumpWall(jump);
    } else {
      bank_offset_[who] += jump;
    }
    ScheduleWallJump();
  });
}

// ------------------------------------------------------------- the loop

bool Simulation::Step(int64_t limit_ms) {
  ++events_;
  if (!exec_.Idle()) {
    if (!MaybeCrashTccd()) exec_.RunOne();
    return true;
  }
  if (log_.WaitingDurable() > 0) {
    if (!MaybeCrashTccd()) log_.SyncNow();  // one group commit
    return true;
  }
  const std::optional<int64_t> timer = clock_.NextDue();
  const std::optional<int64_t> world =
      world_.empty() ? std::nullopt
                     : std::optional<int64_t>(world_.begin()->first.first);
  if (timer && (!world || *timer <= *world)) {
    if (*timer > limit_ms) return false;
    clock_.AdvanceTo(*timer);
    return true;
  }
  if (!world || *world > limit_ms) return false;
  clock_.AdvanceTo(*world);
  auto node = world_.extract(world_.begin());
  node.mapped()();
  return true;
}

bool Simulation::AllDone() {
  if (requests_in_flight_ > 0 || !driver_) return false;
  for (TransferPlan& p : transfers_) {
    if (!p.answered) return false;
  }
  for (TransferPlan& p : transfers_) {
    if (p.final) continue;
    auto stored = log_.Read(p.spec.gid);
    if (!stored.ok() || !wal::IsFinal(stored->summary.state)) return false;
    p.final = true;
  }
  return true;
}

SeedReport Simulation::Run() {
  SeedReport report;
  report.seed = seed_;
  report.params = params_;

  barrier::BarrierOptions bopts;
  bopts.clock_skew_ms = params_.clock_skew_ms;
  bopts.test_only_skip_anti_hanging = options_.barrier_skip_anti_hanging;
  for (int b = 0; b < params_.banks; ++b) {
    const std::string name = absl::StrCat("bank", b);
    banks_.push_back(std::make_unique<SimBank>(name, params_.accounts_per_bank,
                                               params_.initial_balance, bopts));
    bank_index_[name] = b;
    bank_down_.push_back(false);
    partitioned_.push_back(false);
    bank_offset_.push_back(Uniform(-params_.max_initial_bank_offset_ms,
                                   params_.max_initial_bank_offset_ms));
    initial_total_ += banks_.back()->TotalMoney();
  }
  driver_options_.core.breakers = options_.breakers;
  driver_options_.rng_seed = seed_;
  PlanTransfers();
  StartTccd();

  // Clients start their transfers over the first part of the faulty phase.
  for (size_t t = 0; t < transfers_.size(); ++t) {
    At(Uniform(0, params_.faulty_ms * 6 / 10), [this, t] {
      transfers_[t].spec.created_at_ms = clock_.WallMs();
      Submit(static_cast<int>(t));
    });
  }
  if (params_.partitions_per_s > 0) {
    for (int b = 0; b < params_.banks; ++b) SchedulePartition(b);
  }
  if (params_.wall_jumps_per_s > 0) ScheduleWallJump();

  auto finish = [&] {
    report.transactions = static_cast<int>(transfers_.size());
    report.faults = faults_;
    report.crashes = crashes_;
    report.events = events_;
    report.violations = violations_;
    return report;
  };

  // Phase 1: faults on; safety is checked after every event.
  while (clock_.MonotonicMs() < params_.faulty_ms && violations_.empty()) {
    if (!Step(params_.faulty_ms)) break;
  }
  if (!violations_.empty()) return finish();

  // Phase 2: faults off, everyone up; everything must end within the bound.
  faults_on_ = false;
  for (int b = 0; b < params_.banks; ++b) bank_down_[b] = false;
  StartTccd();
  for (size_t t = 0; t < transfers_.size(); ++t) {
    if (transfers_[t].spec.created_at_ms == 0) continue;  // not yet started
    Submit(static_cast<int>(t));
  }
  const int64_t bound = clock_.MonotonicMs() + kLivenessBoundMs;
  while (violations_.empty() && !AllDone()) {
    if (!Step(bound)) break;
  }
  if (!violations_.empty()) return finish();
  if (!AllDone()) {
    for (TransferPlan& p : transfers_) {
      if (!p.answered || !p.final) {
        auto stored = log_.Read(p.spec.gid);
        Violation(absl::StrCat(
            "termination: ", p.spec.gid, " not final ", kLivenessBoundMs,
            " ms after the faults stopped (answered=", p.answered, ", state=",
            stored.ok() ? core::TxnStateName(stored->summary.state)
                        : stored.status().ToString(),
            ")"));
        break;
      }
    }
    return finish();
  }
  EndChecks();
  for (const TransferPlan& p : transfers_) {
    auto stored = log_.Read(p.spec.gid);
    if (stored.ok() && stored->summary.state == core::TxnState::kConfirmed) {
      ++report.confirmed;
    } else {
      ++report.cancelled;
    }
  }
  return finish();
}

void Simulation::EndChecks() {
  for (const TransferPlan& p : transfers_) {
    const std::string& gid = p.spec.gid;
    auto stored = log_.Read(gid);
    if (!stored.ok()) {
      Violation(absl::StrCat(gid, ": ", stored.status().ToString()));
      continue;
    }
    const bool confirmed = stored->summary.state == core::TxnState::kConfirmed;
    auto d = decisions_.find(gid);
    if (d != decisions_.end() && d->second != stored->summary.decision) {
      Violation(absl::StrCat("decision changed: ", gid, " was ",
                             wal::DecisionName(d->second), ", ended ",
                             wal::DecisionName(stored->summary.decision)));
    }
    // Atomicity (section 13.1): all confirmed, or none confirmed, over the
    // branches tccd registered (an interactive caller may not have tried
    // them all).
    std::vector<wal::BranchSpec> registered;
    for (const wal::Record& r : stored->records) {
      if (const auto* reg = std::get_if<wal::Registered>(&r)) {
        registered.insert(registered.end(), reg->branches.begin(),
                          reg->branches.end());
      } else if (const auto* add = std::get_if<wal::BranchAdded>(&r)) {
        registered.push_back(add->branch);
      }
    }
    if (!p.interactive && registered.size() != p.spec.branches.size()) {
      Violation(absl::StrCat(gid, ": ", registered.size(), " of ",
                             p.spec.branches.size(), " branches registered"));
    }
    if (confirmed && registered.size() != p.spec.branches.size()) {
      Violation(absl::StrCat("atomicity: ", gid, " confirmed with ",
                             registered.size(), " of ", p.spec.branches.size(),
                             " branches"));
    }
    CheckBranchesAtEnd(gid, p.spec.created_at_ms, stored->summary.state,
                       confirmed, registered, banks_, bank_index_,
                       [this](std::string v) { Violation(std::move(v)); });
  }
  CheckBanksAtEnd(banks_, initial_total_,
                  [this](std::string v) { Violation(std::move(v)); });
}

}  // namespace

std::string SimParams::Describe() const {
  return absl::StrCat(
      "banks=", banks, " accounts=", accounts_per_bank,
      " balance=", initial_balance, " transactions=", transactions,
      " max_amount=", max_amount, " try_timeout_ms=[", min_try_timeout_ms, ",",
      max_try_timeout_ms, "] faulty_ms=", faulty_ms,
      " clock_skew_ms=", clock_skew_ms, " lose_request=", lose_request,
      " lose_reply=", lose_reply, " duplicate_request=", duplicate_request,
      " duplicate_reply=", duplicate_reply, " max_latency_ms=", max_latency_ms,
      " delay_past_timeout=", delay_past_timeout,
      " partitions_per_s=", partitions_per_s,
      " max_partition_ms=", max_partition_ms,
      " partition_fails_fast=", partition_fails_fast,
      " tccd_crash_per_step=", tccd_crash_per_step,
      " max_tccd_crashes=", max_tccd_crashes,
      " max_tccd_down_ms=", max_tccd_down_ms,
      " bank_crash_per_call=", bank_crash_per_call,
      " max_bank_down_ms=", max_bank_down_ms,
      " wall_jumps_per_s=", wall_jumps_per_s,
      " max_wall_jump_ms=", max_wall_jump_ms,
      " max_initial_bank_offset_ms=", max_initial_bank_offset_ms,
      " conflicting_submits=", conflicting_submits,
      " interactive_share=", interactive_share);
}

SimParams DrawParams(uint64_t seed, const SimOptions& options) {
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ULL + 0x51);
  auto uniform = [&](double a, double b) {
    return std::uniform_real_distribution<double>(a, b)(rng);
  };
  auto integer = [&](int64_t a, int64_t b) {
    return std::uniform_int_distribution<int64_t>(a, b)(rng);
  };
  auto on = [&] { return uniform(0, 1) < 0.5; };
  SimParams p;
  p.banks = static_cast<int>(integer(3, 4));
  p.accounts_per_bank = static_cast<int>(integer(2, 8));
  p.initial_balance = integer(100, 1000);
  p.max_amount = integer(50, 600);
  p.transactions =
      static_cast<int>(options.short_run ? integer(4, 12) : integer(8, 40));
  p.faulty_ms =
      options.short_run ? integer(3000, 10'000) : integer(5000, 30'000);
  p.min_try_timeout_ms = integer(100, 1000);
  p.max_try_timeout_ms = p.min_try_timeout_ms + integer(0, 5000);
  p.clock_skew_ms = integer(0, 3000);
  // Swarm: each fault class is on or off for the whole seed.
  if (on()) {
    p.lose_request = uniform(0, 0.3);
    p.lose_reply = uniform(0, 0.3);
  }
  if (on()) {
    p.duplicate_request = uniform(0, 0.3);
    p.duplicate_reply = uniform(0, 0.3);
  }
  p.max_latency_ms = on() ? integer(2, 1500) : integer(1, 10);
  if (on()) p.delay_past_timeout = uniform(0, 0.1);
  if (on()) {
    p.partitions_per_s = uniform(0.05, 1);
    p.max_partition_ms = integer(10, 5000);
    p.partition_fails_fast = on();
  }
  if (on()) {
    p.tccd_crash_per_step = uniform(0, 0.01);
    p.max_tccd_crashes = static_cast<int>(integer(1, 6));
    p.max_tccd_down_ms = integer(0, 3000);
  }
  if (on()) {
    p.bank_crash_per_call = uniform(0, 0.1);
    p.max_bank_down_ms = integer(1, 3000);
  }
  if (on()) {
    p.wall_jumps_per_s = uniform(0.05, 2);
    p.max_wall_jump_ms = integer(1, 10'000);
  }
  if (on()) p.max_initial_bank_offset_ms = integer(0, 3000);
  if (on()) p.conflicting_submits = uniform(0, 0.3);
  p.interactive_share = on() ? uniform(0, 1) : 0;
  return p;
}

SeedReport RunSeed(uint64_t seed, const SimOptions& options) {
  Simulation sim(seed, options);
  return sim.Run();
}

}  // namespace tcc::sim
