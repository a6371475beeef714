// tcc-noop-participant: a tcc.v1.Participant that does nothing and says so at
// once: Try, Confirm and Cancel answer OUTCOME_EXECUTED, Query answers
// BARRIER_STATE_NOT_FOUND (authoritative). No barrier, no storage: it stands
// for the cheapest participant possible, for the baseline and for tests.
//
//   tcc-noop-participant [--listen 127.0.0.1:0]
//
// Prints "listening on HOST:PORT" when up; stops on SIGINT/SIGTERM.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "serve_until_signalled.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace {

namespace v1 = tcc::v1;

class NoopParticipant final : public v1::Participant::CallbackService {
 public:
  grpc::ServerUnaryReactor* Try(grpc::CallbackServerContext* ctx,
                                const v1::BranchRequest*,
                                v1::BranchResponse* resp) override {
    return Executed(ctx, resp);
  }
  grpc::ServerUnaryReactor* Confirm(grpc::CallbackServerContext* ctx,
                                    const v1::BranchRequest*,
                                    v1::BranchResponse* resp) override {
    return Executed(ctx, resp);
  }
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::BranchRequest*,
                                   v1::BranchResponse* resp) override {
    return Executed(ctx, resp);
  }
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const v1::QueryRequest*,
                                  v1::QueryResponse* resp) override {
    resp->set_state(v1::BARRIER_STATE_NOT_FOUND);
    resp->set_authoritative(true);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  static grpc::ServerUnaryReactor* Executed(grpc::CallbackServerContext* ctx,
                                            v1::BranchResponse* resp) {
    resp->set_outcome(v1::OUTCOME_EXECUTED);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace

int main(int argc, char** argv) {
  tcc::bench::BlockTerminationSignals();
  // Debian builds Abseil in debug mode, where every absl::Mutex (gRPC's
  // included) keeps a lock graph for deadlock detection: a few percent of
  // the CPU in a profile of the relay. Off, as a release build has it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"tcc-noop-participant: answers every call at once"};
  std::string listen = "127.0.0.1:0";
  app.add_option("--listen", listen, "HOST:PORT (port 0: any free port)");
  CLI11_PARSE(app, argc, argv);

  NoopParticipant service;
  absl::Status status = tcc::bench::ServeUntilSignalled(listen, {&service});
  if (!status.ok()) {
    std::fprintf(stderr, "tcc-noop-participant: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
