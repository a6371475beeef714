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
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::string& ssl_target_name_override) {
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!ssl_target_name_override.empty()) {
    args.SetSslTargetNameOverride(ssl_target_name_override);
  }
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

template <typename Request, typename Response, typename Reply, typename Start>
void ParticipantClient::Send(const std::string& participant, Request request,
                             int64_t timeout_ms, Reply done, Start start) {
  tcc::v1::Participant::Stub* stub = Stub(participant);
  if (stub == nullptr) {
    done(absl::NotFoundError(
        absl::StrCat("no participant named ", participant)));
    return;
  }
  using Pending = PendingCall<Request, Response, Reply>;
  auto* call = new Pending{{}, std::move(request), {}, std::move(done)};
  call->context.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
  if (!Begin(&call->context)) {
    delete call;
    return;
  }
  start(stub->async(), &call->context, &call->request, &call->response,
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

void ParticipantClient::Call(const std::string& participant, ParticipantOp op,
                             const tcc::v1::BranchRequest& request,
                             int64_t timeout_ms, BranchReply done) {
  Send<tcc::v1::BranchRequest, tcc::v1::BranchResponse>(
      participant, request, timeout_ms, std::move(done),
      [op](auto* async, grpc::ClientContext* ctx,
           const tcc::v1::BranchRequest* req, tcc::v1::BranchResponse* resp,
           std::function<void(grpc::Status)> on_done) {
        switch (op) {
          case ParticipantOp::kTry:
            return async->Try(ctx, req, resp, std::move(on_done));
          case ParticipantOp::kConfirm:
            return async->Confirm(ctx, req, resp, std::move(on_done));
          case ParticipantOp::kCancel:
            return async->Cancel(ctx, req, resp, std::move(on_done));
        }
      });
}

void ParticipantClient::Query(const std::string& participant,
                              const tcc::v1::QueryRequest& request,
                              int64_t timeout_ms, QueryReply done) {
  Send<tcc::v1::QueryRequest, tcc::v1::QueryResponse>(
      participant, request, timeout_ms, std::move(done),
      [](auto* async, grpc::ClientContext* ctx,
         const tcc::v1::QueryRequest* req, tcc::v1::QueryResponse* resp,
         std::function<void(grpc::Status)> on_done) {
        async->Query(ctx, req, resp, std::move(on_done));
      });
}

void ParticipantClient::Batch(const std::string& participant,
                              tcc::v1::BatchRequest request, int64_t timeout_ms,
                              BatchReply done) {
  Send<tcc::v1::BatchRequest, tcc::v1::BatchResponse>(
      participant, std::move(request), timeout_ms, std::move(done),
      [](auto* async, grpc::ClientContext* ctx,
         const tcc::v1::BatchRequest* req, tcc::v1::BatchResponse* resp,
         std::function<void(grpc::Status)> on_done) {
        async->Batch(ctx, req, resp, std::move(on_done));
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
