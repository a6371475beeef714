#include "rpc/participant_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "rpc/status_mapping.h"

namespace tcc::rpc {
namespace {

// Keeps the context and the reply alive until gRPC calls back.
// The request is copied in: gRPC may serialize it after the call returns.
template <typename Request, typename Response, typename Done>
struct PendingCall {
  grpc::ClientContext context;
  Request request;
  Response response;
  Done done;
};

}  // namespace

absl::Status ParticipantClient::Add(
    const std::string& name, const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  // Reconnect quickly after a participant restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  std::lock_guard<std::mutex> lock(mu_);
  if (stubs_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("participant ", name));
  }
  stubs_[name] = tcc::v1::Participant::NewStub(channel);
  return absl::OkStatus();
}

bool ParticipantClient::Has(const std::string& name) const {
  return Stub(name) != nullptr;
}

tcc::v1::Participant::Stub* ParticipantClient::Stub(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stubs_.find(name);
  return it == stubs_.end() ? nullptr : it->second.get();
}

void ParticipantClient::Call(const std::string& participant, ParticipantOp op,
                             const tcc::v1::BranchRequest& request,
                             int64_t timeout_ms, BranchReply done) {
  tcc::v1::Participant::Stub* stub = Stub(participant);
  if (stub == nullptr) {
    done(absl::NotFoundError(
        absl::StrCat("no participant named ", participant)));
    return;
  }
  using Call =
      PendingCall<tcc::v1::BranchRequest, tcc::v1::BranchResponse, BranchReply>;
  auto* call = new Call{{}, request, {}, std::move(done)};
  call->context.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
  if (!Begin(&call->context)) {
    delete call;
    return;
  }
  auto on_done = [this, call](grpc::Status status) {
    if (status.ok()) {
      call->done(std::move(call->response));
    } else {
      call->done(FromGrpc(status));
    }
    End(&call->context);
    delete call;
  };
  switch (op) {
    case ParticipantOp::kTry:
      stub->async()->Try(&call->context, &call->request, &call->response,
                         on_done);
      break;
    case ParticipantOp::kConfirm:
      stub->async()->Confirm(&call->context, &call->request, &call->response,
                             on_done);
      break;
    case ParticipantOp::kCancel:
      stub->async()->Cancel(&call->context, &call->request, &call->response,
                            on_done);
      break;
  }
}

void ParticipantClient::Query(const std::string& participant,
                              const tcc::v1::QueryRequest& request,
                              int64_t timeout_ms, QueryReply done) {
  tcc::v1::Participant::Stub* stub = Stub(participant);
  if (stub == nullptr) {
    done(absl::NotFoundError(
        absl::StrCat("no participant named ", participant)));
    return;
  }
  using Call =
      PendingCall<tcc::v1::QueryRequest, tcc::v1::QueryResponse, QueryReply>;
  auto* call = new Call{{}, request, {}, std::move(done)};
  call->context.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
  if (!Begin(&call->context)) {
    delete call;
    return;
  }
  stub->async()->Query(&call->context, &call->request, &call->response,
                       [this, call](grpc::Status status) {
                         if (status.ok()) {
                           call->done(std::move(call->response));
                         } else {
                           call->done(FromGrpc(status));
                         }
                         End(&call->context);
                         delete call;
                       });
}

bool ParticipantClient::Begin(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  if (stopping_) return false;
  in_flight_.insert(context);
  return true;
}

void ParticipantClient::End(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  in_flight_.erase(context);
  if (in_flight_.empty()) calls_cv_.notify_all();
}

void ParticipantClient::Shutdown(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(calls_mu_);
  stopping_ = true;
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  calls_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                     [this] { return in_flight_.empty(); });
}

}  // namespace tcc::rpc
