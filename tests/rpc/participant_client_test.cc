// The participant client against a real gRPC server on 127.0.0.1 (port picked
// by the OS).
#include "rpc/participant_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "core/participant_status.h"
#include "rpc/status_mapping.h"

namespace {

using tcc::rpc::ParticipantClient;
using tcc::rpc::ParticipantOp;
namespace v1 = tcc::v1;

// Answers Try EXECUTED (echoing the attempt in the message), Cancel with
// FAILED_PRECONDITION, Query TRIED; holds every Confirm unanswered until the
// test releases it (to see the client's deadline fire).
class FakeParticipant final : public v1::Participant::CallbackService {
 public:
  grpc::ServerUnaryReactor* Try(grpc::CallbackServerContext* ctx,
                                const v1::BranchRequest* req,
                                v1::BranchResponse* resp) override {
    resp->set_outcome(v1::OUTCOME_EXECUTED);
    resp->set_message("attempt " + std::to_string(req->attempt()) + " of " +
                      req->key().gid());
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* Confirm(grpc::CallbackServerContext* ctx,
                                    const v1::BranchRequest*,
                                    v1::BranchResponse*) override {
    auto* r = ctx->DefaultReactor();
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(r);
    return r;
  }
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::BranchRequest*,
                                   v1::BranchResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                           "cancel after confirm"));
    return r;
  }
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const v1::QueryRequest*,
                                  v1::QueryResponse* resp) override {
    resp->set_state(v1::BARRIER_STATE_TRIED);
    resp->set_authoritative(true);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  void ReleaseHeld() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* r : held_) r->Finish(grpc::Status::CANCELLED);
    held_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<grpc::ServerUnaryReactor*> held_;
};

struct Server {
  FakeParticipant service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  Server() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    REQUIRE(server);
    REQUIRE(port > 0);
  }
  ~Server() {
    service.ReleaseHeld();
    server->Shutdown();
  }
};

template <typename T>
T Wait(std::future<T>& f) {
  REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  return f.get();
}

v1::BranchRequest Request() {
  v1::BranchRequest req;
  req.mutable_key()->set_gid("g1");
  req.mutable_key()->set_branch_id("b1");
  req.set_attempt(3);
  return req;
}

}  // namespace

TEST_CASE("calls reach the participant and replies come back") {
  // The client outlives the server: its connections close during the
  // server's Shutdown, not racing it (gRPC 1.51 can abort in
  // Server::MaybeFinishShutdown when a client's connection closes while the
  // server shuts down).
  ParticipantClient client;
  Server server;
  REQUIRE(client.Add("p", "127.0.0.1:" + std::to_string(server.port)).ok());
  CHECK(client.Add("p", "127.0.0.1:1").code() ==
        absl::StatusCode::kAlreadyExists);

  std::promise<absl::StatusOr<v1::BranchResponse>> tried;
  auto tried_f = tried.get_future();
  client.Call("p", ParticipantOp::kTry, Request(), 5000,
              [&](auto r) { tried.set_value(std::move(r)); });
  auto reply = Wait(tried_f);
  REQUIRE(reply.ok());
  CHECK(reply->outcome() == v1::OUTCOME_EXECUTED);
  CHECK(reply->message() == "attempt 3 of g1");

  std::promise<absl::StatusOr<v1::BranchResponse>> cancelled;
  auto cancelled_f = cancelled.get_future();
  client.Call("p", ParticipantOp::kCancel, Request(), 5000,
              [&](auto r) { cancelled.set_value(std::move(r)); });
  auto cancel = Wait(cancelled_f);
  CHECK(cancel.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(cancel.status().message() == "cancel after confirm");

  std::promise<absl::StatusOr<v1::QueryResponse>> queried;
  auto queried_f = queried.get_future();
  v1::QueryRequest q;
  *q.mutable_key() = Request().key();
  client.Query("p", q, 5000, [&](auto r) { queried.set_value(std::move(r)); });
  auto query = Wait(queried_f);
  REQUIRE(query.ok());
  CHECK(query->state() == v1::BARRIER_STATE_TRIED);
  CHECK(query->authoritative());
}

TEST_CASE("a call past its deadline comes back DEADLINE_EXCEEDED") {
  // The client outlives the server: its connections close during the
  // server's Shutdown, not racing it (gRPC 1.51 can abort in
  // Server::MaybeFinishShutdown when a client's connection closes while the
  // server shuts down).
  ParticipantClient client;
  Server server;
  REQUIRE(client.Add("p", "127.0.0.1:" + std::to_string(server.port)).ok());
  std::promise<absl::StatusOr<v1::BranchResponse>> confirmed;
  auto f = confirmed.get_future();
  client.Call("p", ParticipantOp::kConfirm, Request(), 200,
              [&](auto r) { confirmed.set_value(std::move(r)); });
  auto r = Wait(f);
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(!tcc::core::IsDefiniteRefusal(r.status().code()));  // unknown
}

TEST_CASE(
    "an unreachable participant is UNAVAILABLE, an unknown name NOT_FOUND") {
  ParticipantClient client;
  // A port nobody listens on: bind and close a server to find one.
  int port = 0;
  {
    Server s;
    port = s.port;
  }
  REQUIRE(client.Add("gone", "127.0.0.1:" + std::to_string(port)).ok());
  std::promise<absl::StatusOr<v1::BranchResponse>> p1;
  auto f1 = p1.get_future();
  client.Call("gone", ParticipantOp::kTry, Request(), 2000,
              [&](auto r) { p1.set_value(std::move(r)); });
  auto r1 = Wait(f1);
  CHECK((r1.status().code() == absl::StatusCode::kUnavailable ||
         r1.status().code() == absl::StatusCode::kDeadlineExceeded));
  std::promise<absl::StatusOr<v1::BranchResponse>> p2;
  auto f2 = p2.get_future();
  client.Call("nobody", ParticipantOp::kTry, Request(), 2000,
              [&](auto r) { p2.set_value(std::move(r)); });
  CHECK(Wait(f2).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("status mapping keeps code and message both ways") {
  for (int code = 0; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "msg");
    CHECK(tcc::rpc::FromGrpc(tcc::rpc::ToGrpc(s)) == s);
  }
}

TEST_CASE(
    "Shutdown cancels calls in flight, waits for their callbacks, "
    "drops later calls") {
  // The client outlives the server: its connections close during the
  // server's Shutdown, not racing it (gRPC 1.51 can abort in
  // Server::MaybeFinishShutdown when a client's connection closes while the
  // server shuts down).
  ParticipantClient client;
  Server server;
  REQUIRE(client.Add("p", "127.0.0.1:" + std::to_string(server.port)).ok());
  std::atomic<int> callbacks{0};
  absl::Status seen;
  std::mutex mu;
  for (int i = 0; i < 3; ++i) {
    client.Call("p", ParticipantOp::kConfirm, Request(), 60000,
                [&](absl::StatusOr<v1::BranchResponse> r) {
                  std::lock_guard<std::mutex> lock(mu);
                  seen = r.status();
                  ++callbacks;
                });
  }
  client.Shutdown(20000);
  CHECK(callbacks == 3);  // every callback ran before Shutdown returned
  CHECK(seen.code() == absl::StatusCode::kCancelled);
  client.Call("p", ParticipantOp::kTry, Request(), 1000,
              [&](absl::StatusOr<v1::BranchResponse>) { ++callbacks; });
  CHECK(callbacks == 3);  // dropped, never called back
}
