#include "load_generator.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "process_cpu.h"

namespace tcc::bench {
namespace {

namespace v1 = tcc::v1;
using Clock = std::chrono::steady_clock;

std::string StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// How long after the window an open loop behind its schedule still sends.
constexpr std::chrono::seconds kLateSendGrace{1};

Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(s));
}

// One run: owns the in-flight calls and the tallies.
class LoadRun {
 public:
  LoadRun(const std::vector<v1::Coordinator::Stub*>& stubs,
          const TransferPlanner& planner, const PayloadFormat& format,
          const LoadOptions& options)
      : stubs_(stubs), planner_(planner), format_(format), options_(options) {}

  LoadResult Execute();

 private:
  struct Call {
    grpc::ClientContext context;
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    Clock::time_point start;
    int caller = 0;
  };

  void Issue(int caller, Clock::time_point start);
  void OnDone(Call* call, const grpc::Status& status);
  void ReadCpu(std::vector<double>& into) const;
  void WaitForAllAnswers();

  const std::vector<v1::Coordinator::Stub*>& stubs_;
  const TransferPlanner& planner_;
  const PayloadFormat& format_;
  const LoadOptions& options_;
  bool closed_loop_ = true;

  // Set before the first call, then read-only.
  Clock::time_point origin_;
  int64_t origin_unix_ms_ = 0;
  Clock::time_point window_start_;
  Clock::time_point window_end_;

  std::atomic<uint64_t> next_sequence_{0};

  std::mutex mu_;
  std::condition_variable answered_;
  int in_flight_ = 0;
  Clock::time_point last_counted_answer_;
  LoadResult result_;
  LatencyRecorder latency_;
};

void LoadRun::Issue(int caller, Clock::time_point start) {
  const uint64_t sequence = next_sequence_.fetch_add(1);
  auto* call = new Call;
  call->start = start;
  call->caller = caller;
  v1::SubmitRequest& req = call->request;
  req.set_gid(absl::StrCat("bench-", options_.run_id, "-", sequence));
  const auto now = Clock::now();
  req.set_created_at_ms(
      origin_unix_ms_ +
      std::chrono::duration_cast<std::chrono::milliseconds>(now - origin_)
          .count());
  req.set_revision(1);
  req.set_try_timeout_ms(options_.try_timeout_ms);
  req.set_wait_for(v1::WAIT_FOR_FINISHED);
  const std::vector<TransferLeg> legs = planner_.Plan(sequence);
  for (size_t i = 0; i < legs.size(); ++i) {
    v1::BranchSpec* b = req.add_branches();
    b->set_branch_id(absl::StrCat("b", i));
    b->set_participant(legs[i].participant);
    b->set_action(legs[i].action);
    b->set_payload(format_.Encode(legs[i], options_.payload_bytes));
  }
  call->context.set_deadline(gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC),
      gpr_time_from_millis(options_.call_timeout_ms, GPR_TIMESPAN)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
    if (start >= window_start_ && start < window_end_) ++result_.started;
  }
  // Round-robin by transaction, so that every node of a cluster gets an even
  // share whatever the concurrency (C=1 included).
  v1::Coordinator::Stub* stub = stubs_[sequence % stubs_.size()];
  stub->async()->Submit(
      &call->context, &call->request, &call->response,
      [this, call](grpc::Status status) { OnDone(call, status); });
}

void LoadRun::OnDone(Call* call, const grpc::Status& status) {
  const auto now = Clock::now();
  std::string error;
  bool confirmed = false;
  if (!status.ok()) {
    error = StatusCodeName(status.error_code());
  } else if (call->response.transaction().gid() != call->request.gid()) {
    error = "WRONG_GID";
  } else {
    const v1::TxnState state = call->response.transaction().state();
    if (state == v1::TXN_STATE_CONFIRMED) {
      confirmed = true;
    } else if (state != v1::TXN_STATE_CANCELLED) {
      error = absl::StrCat("NOT_FINAL:", v1::TxnState_Name(state));
    }
  }
  const bool counted =
      call->start >= window_start_ && call->start < window_end_;
  if (counted && error.empty()) {
    latency_.Record(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - call->start)
            .count());
  }
  const int caller = call->caller;
  const Clock::time_point call_start = call->start;
  delete call;
  // The closed loop's caller goes on while the window lasts (sent before
  // this call leaves in_flight_, so that never reads 0 too early).
  if (closed_loop_ && now < window_end_) Issue(caller, Clock::now());
  std::lock_guard<std::mutex> lock(mu_);
  if (!counted) {
    if (call_start < window_start_) {
      ++result_.warmup_answers;
      if (!error.empty()) ++result_.warmup_errors;
    }
  } else {
    if (now > last_counted_answer_) last_counted_answer_ = now;
    if (!error.empty()) {
      ++result_.errors[error];
    } else if (confirmed) {
      ++result_.confirmed;
    } else {
      ++result_.cancelled;
    }
  }
  --in_flight_;
  answered_.notify_all();
}

void LoadRun::ReadCpu(std::vector<double>& into) const {
  into.clear();
  for (pid_t pid : options_.cpu_pids) {
    auto s = ProcessCpuSeconds(pid);
    into.push_back(s.ok() ? *s : -1);
  }
  auto self = ProcessCpuSeconds(getpid());
  into.push_back(self.ok() ? *self : -1);
}

void LoadRun::WaitForAllAnswers() {
  // Every call has a deadline, so gRPC answers each within call_timeout_ms;
  // the margin covers a loaded machine. Past it something is broken, and
  // returning would free state that gRPC still holds.
  const auto limit = Clock::now() +
                     std::chrono::milliseconds(options_.call_timeout_ms) +
                     std::chrono::seconds(30);
  std::unique_lock<std::mutex> lock(mu_);
  if (!answered_.wait_until(lock, limit, [&] { return in_flight_ == 0; })) {
    std::fprintf(stderr, "tcc-bench: %d calls never answered\n", in_flight_);
    std::abort();
  }
}

LoadResult LoadRun::Execute() {
  closed_loop_ = options_.rate_per_s <= 0;
  origin_ = Clock::now();
  // The one wall-clock read: created_at_ms is Unix time by contract.
  origin_unix_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  window_start_ = origin_ + FromSeconds(options_.warmup_s);
  window_end_ = window_start_ + FromSeconds(options_.duration_s);
  last_counted_answer_ = window_end_;

  std::vector<double> cpu_before;
  std::vector<double> cpu_after;
  if (closed_loop_) {
    // Every caller starts at the origin: sending the first C calls takes a
    // moment, and on a stalled machine a long one, and that moment is part
    // of their latency (and must not push them out of a window that starts
    // at the origin).
    for (int i = 0; i < options_.concurrency; ++i) Issue(i, origin_);
    std::this_thread::sleep_until(window_start_);
    ReadCpu(cpu_before);
    std::this_thread::sleep_until(window_end_);
    ReadCpu(cpu_after);
  } else {
    std::mt19937_64 rng(options_.seed);
    std::exponential_distribution<double> poisson_gap(options_.rate_per_s);
    const double fixed_gap = 1.0 / options_.rate_per_s;
    auto next = origin_;
    bool cpu_read = false;
    auto read_cpu_if_due = [&] {
      if (!cpu_read && Clock::now() >= window_start_) {
        ReadCpu(cpu_before);
        cpu_read = true;
      }
    };
    int sent = 0;
    // A send that leaves late (this process was descheduled, or the machine
    // stalled) still goes, timed from its scheduled start, so that the stall
    // shows in the latency rather than vanishing (coordinated omission).
    // Late sends stop kLateSendGrace after the window: the run stays
    // bounded, and what the schedule still held is counted below.
    const auto send_until = window_end_ + kLateSendGrace;
    while (next < window_end_) {
      if (!cpu_read && next >= window_start_) {
        std::this_thread::sleep_until(window_start_);
      }
      read_cpu_if_due();
      std::this_thread::sleep_until(next);
      {
        std::unique_lock<std::mutex> lock(mu_);
        answered_.wait_until(lock, send_until, [&] {
          return in_flight_ < options_.max_in_flight;
        });
        if (in_flight_ >= options_.max_in_flight) break;
      }
      const auto now = Clock::now();
      if (now >= send_until) break;
      if (next >= window_start_) {
        result_.max_send_lag_ms =
            std::max(result_.max_send_lag_ms, Seconds(now - next) * 1000.0);
      }
      Issue(sent++, next);
      next += FromSeconds(options_.poisson ? poisson_gap(rng) : fixed_gap);
    }
    // Transactions the schedule put in the window but that were never sent
    // (the target could not keep up): errors, about rate x time left.
    const auto unsent_from = std::max(next, window_start_);
    if (unsent_from < window_end_) {
      const auto unsent = static_cast<uint64_t>(std::llround(
          Seconds(window_end_ - unsent_from) * options_.rate_per_s));
      if (unsent > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        result_.errors["UNSENT"] += unsent;
      }
    }
    if (!cpu_read) {
      std::this_thread::sleep_until(window_start_);
      ReadCpu(cpu_before);
    }
    std::this_thread::sleep_until(window_end_);
    ReadCpu(cpu_after);
  }
  WaitForAllAnswers();

  std::lock_guard<std::mutex> lock(mu_);
  LoadResult result = result_;
  result.latency = latency_.Summary();
  result.window_s = Seconds(last_counted_answer_ - window_start_);
  std::vector<pid_t> pids = options_.cpu_pids;
  pids.push_back(getpid());
  for (size_t i = 0; i < pids.size(); ++i) {
    ProcessCpu cpu;
    cpu.pid = pids[i];
    cpu.name = ProcessName(pids[i]);
    if (cpu_before[i] >= 0 && cpu_after[i] >= 0) {
      cpu.seconds = cpu_after[i] - cpu_before[i];
    }
    result.cpu.push_back(cpu);
  }
  return result;
}

}  // namespace

uint64_t LoadResult::error_count() const {
  uint64_t n = 0;
  for (const auto& [kind, count] : errors) n += count;
  return n;
}

double LoadResult::tps() const {
  return window_s > 0 ? static_cast<double>(completed()) / window_s : 0;
}

absl::StatusOr<LoadResult> RunLoad(
    const std::vector<v1::Coordinator::Stub*>& stubs,
    const TransferPlanner& planner, const PayloadFormat& format,
    const LoadOptions& options) {
  if (stubs.empty()) return absl::InvalidArgumentError("no channel");
  if (options.rate_per_s <= 0 && options.concurrency < 1) {
    return absl::InvalidArgumentError("concurrency must be at least 1");
  }
  if (options.duration_s <= 0 || options.warmup_s < 0) {
    return absl::InvalidArgumentError(
        "duration must be positive and warm-up not negative");
  }
  if (options.call_timeout_ms < 1 || options.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        "call timeout and in-flight limit must be positive");
  }
  LoadRun run(stubs, planner, format, options);
  return run.Execute();
}

}  // namespace tcc::bench
