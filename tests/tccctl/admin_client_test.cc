// tccctl's call layer (coordinator/tccctl/admin_client.h) against a fake
// tcc.v1.Admin on 127.0.0.1: the credential it sends, the status it passes
// back unchanged, its deadline, and Watch's stream.
#include "tccctl/admin_client.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

namespace {

namespace v1 = tcc::v1;
using tcc::tccctl::AdminClient;
using tcc::tccctl::AdminClientOptions;

// Records the authorization metadata of every call; answers with `reply`.
class FakeAdmin final : public v1::Admin::Service {
 public:
  grpc::Status reply = grpc::Status::OK;
  // Show blocks this long before answering (for deadlines).
  int show_delay_ms = 0;
  int watch_events = 3;

  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorization_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                      v1::StatusResponse* response) override {
    Record(ctx);
    response->set_health("serving");
    return reply;
  }
  grpc::Status Show(grpc::ServerContext* ctx, const v1::ShowRequest* request,
                    v1::ShowResponse* response) override {
    Record(ctx);
    // Waits for the client to give up, bounded by show_delay_ms.
    for (int waited = 0; waited < show_delay_ms && !ctx->IsCancelled();
         waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    response->mutable_transaction()->set_gid(request->gid());
    return reply;
  }
  grpc::Status IssueApproval(grpc::ServerContext* ctx,
                             const v1::IssueApprovalRequest* request,
                             v1::IssueApprovalResponse* response) override {
    Record(ctx);
    response->mutable_approval()->set_gid(request->gid());
    response->mutable_approval()->set_reason(request->reason());
    response->mutable_approval()->set_action(request->action());
    return reply;
  }
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::WatchEvent>* writer) override {
    Record(ctx);
    for (int i = 0; i < watch_events; ++i) {
      v1::WatchEvent e;
      e.mutable_transaction()->set_gid(request->gid());
      e.mutable_transaction()->set_revision(static_cast<uint64_t>(i));
      if (!writer->Write(e)) break;
    }
    return reply;
  }

 private:
  void Record(grpc::ServerContext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    authorization_.clear();
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) {
      authorization_ = std::string(it->second.data(), it->second.size());
    }
  }

  std::mutex mu_;
  std::string authorization_;
  int calls_ = 0;
};

struct Server {
  FakeAdmin service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  Server() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port > 0);
  }
  ~Server() { server->Shutdown(); }
  AdminClientOptions Options(const std::string& token = "") const {
    AdminClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port);
    o.token = token;
    o.timeout_ms = 5000;
    return o;
  }
};

}  // namespace

TEST_CASE("the token goes as authorization: Bearer; none without one") {
  Server s;
  AdminClient with(s.Options("s3cret"));
  auto r = with.Status();
  REQUIRE(r.ok());
  CHECK(r->health() == "serving");
  CHECK(s.service.last_authorization() == "Bearer s3cret");

  AdminClient without(s.Options());
  REQUIRE(without.Status().ok());
  CHECK(s.service.last_authorization().empty());
  CHECK(s.service.calls() == 2);
}

TEST_CASE("a refused call comes back with its code and message") {
  Server s;
  s.service.reply =
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "approval used");
  AdminClient client(s.Options("t"));
  v1::IssueApprovalRequest req;
  req.set_gid("g-1");
  auto r = client.IssueApproval(req);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(r.status().message() == "approval used");
  s.service.reply = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "who?");
  CHECK(client.Show("g-1").status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("each call has the deadline it was given") {
  Server s;
  s.service.show_delay_ms = 10000;
  AdminClientOptions o = s.Options("t");
  o.timeout_ms = 200;
  AdminClient client(o);
  auto r = client.Show("g-slow");
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("Watch delivers every event, or stops when told") {
  Server s;
  AdminClient client(s.Options("t"));
  std::vector<uint64_t> seen;
  absl::Status st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    CHECK(e.transaction().gid() == "g-w");
    seen.push_back(e.transaction().revision());
    return true;
  });
  CHECK(st.ok());
  CHECK(seen == std::vector<uint64_t>{0, 1, 2});
  CHECK(s.service.last_authorization() == "Bearer t");

  seen.clear();
  st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    seen.push_back(e.transaction().revision());
    return false;
  });
  CHECK(st.ok());
  CHECK(seen.size() == 1);

  s.service.reply = grpc::Status(grpc::StatusCode::NOT_FOUND, "no g-w");
  s.service.watch_events = 0;
  st = client.Watch("g-w", [](const v1::WatchEvent&) { return true; });
  CHECK(st.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("nobody listening is UNAVAILABLE") {
  int port = 0;
  {
    Server s;
    port = s.port;
  }
  AdminClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.timeout_ms = 2000;
  AdminClient client(o);
  CHECK(client.Status().status().code() == absl::StatusCode::kUnavailable);
}
