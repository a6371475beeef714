#include "tcc/participant/participant_server.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace tcc::participant {
namespace {

// Threads kept polling for calls (see Start).
constexpr int kMaxIdleThreads = 256;

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

BranchKey KeyFromProto(const v1::BranchKey& key) {
  return BranchKey{key.gid(), key.created_at_ms(), key.branch_id()};
}

BranchCall CallFromProto(const v1::BranchRequest& req) {
  BranchCall call;
  call.key = KeyFromProto(req.key());
  call.action = req.action();
  call.payload = req.payload();
  call.branch_hash = req.branch_hash();
  call.revision = req.revision();
  call.attempt = req.attempt();
  call.owner_epoch = req.owner_epoch();
  call.try_deadline_ms = req.try_deadline_ms();
  return call;
}

}  // namespace

class ParticipantServer::Service final : public v1::Participant::Service {
 public:
  explicit Service(Participant& participant) : participant_(participant) {}

  grpc::Status Try(grpc::ServerContext*, const v1::BranchRequest* req,
                   v1::BranchResponse* resp) override {
    return Reply(participant_.Try(CallFromProto(*req)), resp);
  }
  grpc::Status Confirm(grpc::ServerContext*, const v1::BranchRequest* req,
                       v1::BranchResponse* resp) override {
    return Reply(participant_.Confirm(CallFromProto(*req)), resp);
  }
  grpc::Status Cancel(grpc::ServerContext*, const v1::BranchRequest* req,
                      v1::BranchResponse* resp) override {
    return Reply(participant_.Cancel(CallFromProto(*req)), resp);
  }
  grpc::Status Query(grpc::ServerContext*, const v1::QueryRequest* req,
                     v1::QueryResponse* resp) override {
    absl::StatusOr<QueryAnswer> answer =
        participant_.Query(KeyFromProto(req->key()));
    if (!answer.ok()) return ToGrpc(answer.status());
    resp->set_state(static_cast<v1::BarrierState>(answer->state));
    resp->set_branch_hash(answer->branch_hash);
    resp->set_authoritative(answer->authoritative);
    return grpc::Status::OK;
  }

 private:
  grpc::Status Reply(const absl::StatusOr<BarrierAnswer>& answer,
                     v1::BranchResponse* resp) {
    if (!answer.ok()) return ToGrpc(answer.status());
    // The local transaction is durable; a crash here loses only the reply.
    if (absl::Status s = failpoint::Eval(kAfterCommitFailpoint); !s.ok()) {
      return ToGrpc(s);
    }
    resp->set_outcome(static_cast<v1::Outcome>(answer->outcome));
    resp->set_replayed(answer->replayed);
    resp->set_message(answer->message);
    return grpc::Status::OK;
  }

  Participant& participant_;
};

ParticipantServer::ParticipantServer(Participant& participant,
                                     ParticipantServerOptions options)
    : participant_(participant),
      options_(std::move(options)),
      service_(std::make_unique<Service>(participant)) {}

ParticipantServer::~ParticipantServer() { Shutdown(); }

void ParticipantServer::RegisterService(grpc::Service* service) {
  extra_services_.push_back(service);
}

absl::Status ParticipantServer::Start() {
  grpc::ServerBuilder builder;
  // gRPC's synchronous server lets a thread that handled a call exit when
  // max_pollers threads already poll (the default is 2 per completion
  // queue), and starts a new thread for the next call when fewer than
  // min_pollers poll: with more calls in flight than that (each holds its
  // thread through a synced commit), nearly every call paid a thread start
  // and exit. Threads now stay and poll until this many are idle; one queue,
  // so idle threads are shared by all calls.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS,
                              1);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kMaxIdleThreads);
  builder.AddListeningPort(options_.listen_address,
                           grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  for (grpc::Service* s : extra_services_) builder.RegisterService(s);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen_address));
  }
  spdlog::info("{}: participant server listening on {} (port {})",
               participant_.name(), options_.listen_address, port_);
  return absl::OkStatus();
}

void ParticipantServer::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  const std::chrono::system_clock::time_point deadline(
      std::chrono::milliseconds(participant_.barrier().clock().NowUnixMs() +
                                grace.count()));
  server_->Shutdown(deadline);
}

void ParticipantServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tcc::participant
