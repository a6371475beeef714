// tcc-baseline-relay: the ceiling for any coordinator on a machine. It serves
// tcc.v1.Coordinator.Submit (every other method is UNIMPLEMENTED) with the
// same participant calls a coordinator makes, and nothing else: Try on every
// branch in parallel, then Confirm on every branch in parallel (Cancel on
// every branch if a Try did not answer EXECUTED), then the answer. No log, no
// barrier, no content hash, no retries: what the RPCs alone cost.
//
//   tcc-baseline-relay [--listen 127.0.0.1:0] --participant NAME=HOST:PORT ...
//                      [--call-timeout-ms 5000]
//
// A gRPC error from a participant is answered as that error. Calls are
// asynchronous (callback API on both sides): no thread is held per request.
// Prints "listening on HOST:PORT" when up; stops on SIGINT/SIGTERM.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "serve_until_signalled.h"
#include "tcc/v1/coordinator.grpc.pb.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace {

namespace v1 = tcc::v1;

using Stubs = std::map<std::string, std::unique_ptr<v1::Participant::Stub>>;

// The default try-deadline when the request gives none, as a participant
// sees it (absolute, from the client's created_at; the relay reads no clock).
constexpr int64_t kDefaultTryTimeoutMs = 10000;

// Deadline `ms` from now on gRPC's monotonic clock.
gpr_timespec DeadlineIn(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

// One Submit in flight: the branch calls, then the answer. Deletes itself
// once it has answered.
//
// Each leg's reply is written only by that leg's callback; the countdown
// (acq_rel) makes all of a phase's replies visible to the callback that
// brings it to zero, which alone goes on. So no lock is needed.
class RelayedSubmit {
 public:
  RelayedSubmit(const Stubs& stubs, int64_t call_timeout_ms,
                const v1::SubmitRequest* request, v1::SubmitResponse* response,
                grpc::ServerUnaryReactor* reactor)
      : call_timeout_ms_(call_timeout_ms),
        request_(request),
        response_(response),
        reactor_(reactor),
        legs_(request->branches_size()) {
    const int64_t try_timeout = request->try_timeout_ms() > 0
                                    ? request->try_timeout_ms()
                                    : kDefaultTryTimeoutMs;
    for (int i = 0; i < request->branches_size(); ++i) {
      const v1::BranchSpec& spec = request->branches(i);
      Leg& leg = legs_[i];
      auto it = stubs.find(spec.participant());
      leg.stub = it == stubs.end() ? nullptr : it->second.get();
      v1::BranchKey* key = leg.request.mutable_key();
      key->set_gid(request->gid());
      key->set_created_at_ms(request->created_at_ms());
      key->set_branch_id(spec.branch_id());
      leg.request.set_action(spec.action());
      leg.request.set_payload(spec.payload());
      leg.request.set_revision(request->revision());
      leg.request.set_attempt(1);
      leg.request.set_owner_epoch(1);
      leg.request.set_try_deadline_ms(request->created_at_ms() + try_timeout);
    }
  }

  // Sends the Trys, or answers an invalid request at once. Either way `this`
  // may be gone when it returns.
  void Start() {
    if (legs_.empty()) {
      return AnswerAndDelete(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "a transaction needs at least one branch"));
    }
    for (int i = 0; i < static_cast<int>(legs_.size()); ++i) {
      if (legs_[i].stub == nullptr) {
        return AnswerAndDelete(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("unknown participant '",
                         request_->branches(i).participant(), "'")));
      }
    }
    SendPhase(Phase::kTry);
  }

 private:
  enum class Phase { kTry, kConfirm, kCancel };

  struct Leg {
    v1::Participant::Stub* stub = nullptr;
    v1::BranchRequest request;
    std::unique_ptr<grpc::ClientContext> context;
    v1::BranchResponse response;
    grpc::Status status;
    v1::Outcome try_outcome = v1::OUTCOME_UNSPECIFIED;
  };

  void SendPhase(Phase phase) {
    phase_ = phase;
    // Once the last call is out, its reply may free `this`: nothing after
    // the loop may touch a member, the loop's bound included.
    const size_t n = legs_.size();
    pending_.store(static_cast<int>(n), std::memory_order_release);
    for (size_t i = 0; i < n; ++i) {
      Leg& leg = legs_[i];
      leg.context = std::make_unique<grpc::ClientContext>();
      leg.context->set_deadline(DeadlineIn(call_timeout_ms_));
      leg.response.Clear();
      auto done = [this, i](grpc::Status status) { OnReply(i, status); };
      auto* async = leg.stub->async();
      switch (phase) {
        case Phase::kTry:
          async->Try(leg.context.get(), &leg.request, &leg.response, done);
          break;
        case Phase::kConfirm:
          async->Confirm(leg.context.get(), &leg.request, &leg.response, done);
          break;
        case Phase::kCancel:
          async->Cancel(leg.context.get(), &leg.request, &leg.response, done);
          break;
      }
    }
  }

  void OnReply(size_t i, grpc::Status status) {
    Leg& leg = legs_[i];
    leg.status = std::move(status);
    if (phase_ == Phase::kTry) leg.try_outcome = leg.response.outcome();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    for (const Leg& l : legs_) {
      if (!l.status.ok()) return AnswerAndDelete(l.status);
    }
    if (phase_ == Phase::kTry) {
      bool all_executed = true;
      for (const Leg& l : legs_) {
        all_executed &= l.try_outcome == v1::OUTCOME_EXECUTED;
      }
      cancelled_ = !all_executed;
      SendPhase(cancelled_ ? Phase::kCancel : Phase::kConfirm);
      return;
    }
    FillView();
    AnswerAndDelete(grpc::Status::OK);
  }

  // The view a coordinator would return: every phase sent once.
  void FillView() {
    v1::TransactionView* view = response_->mutable_transaction();
    view->set_gid(request_->gid());
    view->set_state(cancelled_ ? v1::TXN_STATE_CANCELLED
                               : v1::TXN_STATE_CONFIRMED);
    view->set_decision(cancelled_ ? v1::DECISION_CANCEL : v1::DECISION_CONFIRM);
    view->set_revision(request_->revision());
    view->set_created_at_ms(request_->created_at_ms());
    view->set_owner_epoch(1);
    for (size_t i = 0; i < legs_.size(); ++i) {
      const v1::BranchSpec& spec = request_->branches(static_cast<int>(i));
      v1::BranchView* b = view->add_branches();
      b->set_branch_id(spec.branch_id());
      b->set_participant(spec.participant());
      b->set_action(spec.action());
      b->set_payload_size(static_cast<uint32_t>(spec.payload().size()));
      v1::PhaseView* try_phase = b->mutable_try_phase();
      try_phase->set_state(legs_[i].try_outcome == v1::OUTCOME_EXECUTED
                               ? v1::PHASE_STATE_SUCCEEDED
                               : v1::PHASE_STATE_FAILED);
      try_phase->set_outcome(legs_[i].try_outcome);
      try_phase->set_attempts(1);
      v1::PhaseView* second = b->mutable_second_phase();
      second->set_state(v1::PHASE_STATE_SUCCEEDED);
      second->set_outcome(legs_[i].response.outcome());
      second->set_attempts(1);
    }
  }

  void AnswerAndDelete(const grpc::Status& status) {
    reactor_->Finish(status);
    delete this;
  }

  const int64_t call_timeout_ms_;
  const v1::SubmitRequest* request_;
  v1::SubmitResponse* response_;
  grpc::ServerUnaryReactor* reactor_;
  std::vector<Leg> legs_;
  std::atomic<int> pending_{0};
  Phase phase_ = Phase::kTry;
  bool cancelled_ = false;
};

class BaselineRelay final : public v1::Coordinator::CallbackService {
 public:
  BaselineRelay(Stubs stubs, int64_t call_timeout_ms)
      : stubs_(std::move(stubs)), call_timeout_ms_(call_timeout_ms) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    (new RelayedSubmit(stubs_, call_timeout_ms_, request, response, reactor))
        ->Start();
    return reactor;
  }

 private:
  const Stubs stubs_;
  const int64_t call_timeout_ms_;
};

// "NAME=HOST:PORT" -> a stub for NAME.
absl::Status AddParticipant(const std::string& flag, Stubs& stubs) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--participant wants NAME=HOST:PORT, got '", flag, "'"));
  }
  const std::string name = flag.substr(0, eq);
  if (stubs.count(name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("participant '", name, "' given twice"));
  }
  stubs[name] = v1::Participant::NewStub(grpc::CreateChannel(
      flag.substr(eq + 1), grpc::InsecureChannelCredentials()));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  tcc::bench::BlockTerminationSignals();
  // Debian builds Abseil in debug mode, where every absl::Mutex (gRPC's
  // included) keeps a lock graph for deadlock detection: a few percent of
  // the CPU in a profile of the relay. Off, as a release build has it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "tcc-baseline-relay: Submit as participant calls only (the ceiling)"};
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> participants;
  int64_t call_timeout_ms = 5000;
  app.add_option("--listen", listen, "HOST:PORT (port 0: any free port)");
  app.add_option("--participant", participants,
                 "NAME=HOST:PORT of a participant (repeatable)")
      ->required();
  app.add_option("--call-timeout-ms", call_timeout_ms,
                 "deadline of each participant call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Stubs stubs;
  for (const std::string& flag : participants) {
    absl::Status added = AddParticipant(flag, stubs);
    if (!added.ok()) {
      std::fprintf(stderr, "tcc-baseline-relay: %s\n",
                   added.ToString().c_str());
      return 2;
    }
  }
  BaselineRelay service(std::move(stubs), call_timeout_ms);
  absl::Status status = tcc::bench::ServeUntilSignalled(listen, {&service});
  if (!status.ok()) {
    std::fprintf(stderr, "tcc-baseline-relay: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
