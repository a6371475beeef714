#include "tcc/participant/participant_server.h"

#include <grpcpp/grpcpp.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/tls/credentials.h"
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

// The most calls one Batch may carry (proto/tcc/v1/participant.proto).
constexpr int kMaxBatchCalls = 1024;

grpc::Status CheckBatch(const v1::BatchRequest& req) {
  if (req.calls_size() > kMaxBatchCalls) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("a batch carries at most ", kMaxBatchCalls,
                                     " calls; this one has ", req.calls_size(),
                                     "; nothing ran"));
  }
  for (int i = 0; i < req.calls_size(); ++i) {
    if (req.calls(i).call_case() == v1::BatchCall::CALL_NOT_SET) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("batch call ", i, " names no call; nothing ran"));
    }
  }
  return grpc::Status::OK;
}

void SetError(const absl::Status& s, v1::BatchResult* result) {
  result->set_code(static_cast<int>(s.code()));
  result->set_error_message(std::string(s.message()));
}

// What one call of a batch did, before its durability is known.
struct BatchAnswer {
  bool is_query = false;
  absl::StatusOr<BarrierAnswer> branch = absl::UnknownError("not run");
  absl::StatusOr<QueryAnswer> query = absl::UnknownError("not run");
};

// Runs one call of a batch (CheckBatch has vetted it).
BatchAnswer RunBatchCall(Participant& participant, const v1::BatchCall& call) {
  BatchAnswer a;
  switch (call.call_case()) {
    case v1::BatchCall::kTryCall:
      a.branch = participant.Try(CallFromProto(call.try_call()));
      break;
    case v1::BatchCall::kConfirmCall:
      a.branch = participant.Confirm(CallFromProto(call.confirm_call()));
      break;
    case v1::BatchCall::kCancelCall:
      a.branch = participant.Cancel(CallFromProto(call.cancel_call()));
      break;
    case v1::BatchCall::kQueryCall:
      a.is_query = true;
      a.query = participant.Query(KeyFromProto(call.query_call().key()));
      break;
    case v1::BatchCall::CALL_NOT_SET:
      break;
  }
  return a;
}

// The reply to a Try, Confirm or Cancel whose local transaction is durable,
// or the call's error.
absl::Status FillBranch(const absl::StatusOr<BarrierAnswer>& answer,
                        v1::BranchResponse* resp) {
  if (!answer.ok()) return answer.status();
  // The local transaction is durable; a crash here loses only the reply.
  if (absl::Status s = failpoint::Eval(kAfterCommitFailpoint); !s.ok()) {
    return s;
  }
  resp->set_outcome(static_cast<v1::Outcome>(answer->outcome));
  resp->set_replayed(answer->replayed);
  resp->set_message(answer->message);
  return absl::OkStatus();
}

// The reply to a Query, or its error.
absl::Status FillQuery(const absl::StatusOr<QueryAnswer>& answer,
                       v1::QueryResponse* resp) {
  if (!answer.ok()) return answer.status();
  resp->set_state(static_cast<v1::BarrierState>(answer->state));
  resp->set_branch_hash(answer->branch_hash);
  resp->set_authoritative(answer->authoritative);
  return absl::OkStatus();
}

// Fills `result` from an answer whose local transaction is durable.
void FillBatchResult(const BatchAnswer& a, v1::BatchResult* result) {
  absl::Status s = a.is_query ? FillQuery(a.query, result->mutable_query())
                              : FillBranch(a.branch, result->mutable_branch());
  if (!s.ok()) {
    result->clear_reply();
    SetError(s, result);
  }
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
    return ToGrpc(
        FillQuery(participant_.Query(KeyFromProto(req->key())), resp));
  }
  // Each call commits on its own here (the store does not group commits).
  grpc::Status Batch(grpc::ServerContext*, const v1::BatchRequest* req,
                     v1::BatchResponse* resp) override {
    if (grpc::Status s = CheckBatch(*req); !s.ok()) return s;
    for (const v1::BatchCall& call : req->calls()) {
      FillBatchResult(RunBatchCall(participant_, call), resp->add_results());
    }
    return grpc::Status::OK;
  }

 private:
  static grpc::Status Reply(const absl::StatusOr<BarrierAnswer>& answer,
                            v1::BranchResponse* resp) {
    return ToGrpc(FillBranch(answer, resp));
  }

  Participant& participant_;
};

// For a store that group-commits (BarrierStore::groups_commits): gRPC's
// callback API runs each call on the thread that read it (the barrier never
// waits for the disk there, only for row locks held by calls that are
// running), and the reply leaves from the store's syncer once what the call
// read or wrote is durable. No thread per call waits through a sync.
class ParticipantServer::GroupCommitService final
    : public v1::Participant::CallbackService {
 public:
  explicit GroupCommitService(Participant& participant)
      : participant_(participant), store_(participant.barrier().store()) {}

  grpc::ServerUnaryReactor* Try(grpc::CallbackServerContext* ctx,
                                const v1::BranchRequest* req,
                                v1::BranchResponse* resp) override {
    return Reply(ctx, participant_.Try(CallFromProto(*req)), resp);
  }
  grpc::ServerUnaryReactor* Confirm(grpc::CallbackServerContext* ctx,
                                    const v1::BranchRequest* req,
                                    v1::BranchResponse* resp) override {
    return Reply(ctx, participant_.Confirm(CallFromProto(*req)), resp);
  }
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::BranchRequest* req,
                                   v1::BranchResponse* resp) override {
    return Reply(ctx, participant_.Cancel(CallFromProto(*req)), resp);
  }
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const v1::QueryRequest* req,
                                  v1::QueryResponse* resp) override {
    absl::StatusOr<QueryAnswer> answer =
        participant_.Query(KeyFromProto(req->key()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // What Query read may be a commit not yet durable: answer after it is.
    store_.WhenDurable(
        [reactor, resp, answer = std::move(answer)](absl::Status durable) {
          if (!durable.ok()) return reactor->Finish(ToGrpc(Unknown(durable)));
          reactor->Finish(ToGrpc(FillQuery(answer, resp)));
        });
    return reactor;
  }
  // Every call of the batch runs here, on this thread, and one sync makes
  // them all durable: the reply leaves once it has.
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* ctx,
                                  const v1::BatchRequest* req,
                                  v1::BatchResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status s = CheckBatch(*req); !s.ok()) {
      reactor->Finish(s);
      return reactor;
    }
    std::vector<BatchAnswer> answers;
    answers.reserve(req->calls_size());
    for (const v1::BatchCall& call : req->calls()) {
      answers.push_back(RunBatchCall(participant_, call));
    }
    store_.WhenDurable(
        [reactor, resp, answers = std::move(answers)](absl::Status durable) {
          if (!durable.ok()) return reactor->Finish(ToGrpc(Unknown(durable)));
          for (const BatchAnswer& a : answers) {
            FillBatchResult(a, resp->add_results());
          }
          reactor->Finish(grpc::Status::OK);
        });
    return reactor;
  }

 private:
  static absl::Status Unknown(const absl::Status& sync) {
    return absl::UnavailableError(
        absl::StrCat("barrier sync failed: ", sync.ToString()));
  }

  // Every answer waits for durability, refusals and errors too: each was
  // decided on what the call read, which may not be durable yet.
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                  absl::StatusOr<BarrierAnswer> answer,
                                  v1::BranchResponse* resp) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    store_.WhenDurable(
        [reactor, resp, answer = std::move(answer)](absl::Status durable) {
          if (!durable.ok()) return reactor->Finish(ToGrpc(Unknown(durable)));
          reactor->Finish(ToGrpc(FillBranch(answer, resp)));
        });
    return reactor;
  }

  Participant& participant_;
  barrier::BarrierStore& store_;
};

ParticipantServer::ParticipantServer(Participant& participant,
                                     ParticipantServerOptions options)
    : participant_(participant), options_(std::move(options)) {
  if (participant.barrier().store().groups_commits()) {
    group_commit_service_ = std::make_unique<GroupCommitService>(participant);
  } else {
    service_ = std::make_unique<Service>(participant);
  }
}

ParticipantServer::~ParticipantServer() { Shutdown(); }

void ParticipantServer::RegisterService(grpc::Service* service) {
  extra_services_.push_back(service);
}

absl::Status ParticipantServer::Start() {
  auto credentials = ListenerCredentials();
  if (!credentials.ok()) return credentials.status();
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
  builder.AddListeningPort(options_.listen_address, *credentials, &port_);
  if (service_) {
    builder.RegisterService(service_.get());
  } else {
    builder.RegisterService(group_commit_service_.get());
  }
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

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ParticipantServer::ListenerCredentials() const {
  const ParticipantServerOptions& o = options_;
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca_file: needs tls_cert_file and tls_key_file");
    }
    spdlog::warn(
        "{}: participant listener {} is plaintext: anyone who can reach it "
        "can call Try, Confirm and Cancel; give it a TLS certificate and a "
        "client CA (mutual TLS)",
        participant_.name(), o.listen_address);
    return grpc::InsecureServerCredentials();
  }
  return tls::ServerCredentials({.cert_file = o.tls_cert_file,
                                 .key_file = o.tls_key_file,
                                 .client_ca_file = o.tls_client_ca_file},
                                "tls_");
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
