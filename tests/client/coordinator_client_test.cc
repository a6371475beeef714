// The initiator client against a real gRPC Coordinator server on 127.0.0.1
// that fails the first attempts, to see what the client re-sends.
#include "tcc/client/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <mutex>
#include <set>
#include <vector>

#include "tcc/identity/ids.h"

namespace {

namespace v1 = tcc::v1;

class FlakyCoordinator final : public v1::Coordinator::CallbackService {
 public:
  explicit FlakyCoordinator(int failures, grpc::StatusCode code)
      : failures_(failures), code_(code) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const v1::SubmitRequest* req,
                                   v1::SubmitResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(*req);
    if (static_cast<int>(seen_.size()) <= failures_) {
      r->Finish(grpc::Status(code_, "try again"));
      return r;
    }
    resp->mutable_transaction()->set_gid(req->gid());
    resp->mutable_transaction()->set_state(v1::TXN_STATE_CONFIRMED);
    resp->set_duplicate(seen_.size() > 1);
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx,
                                   const v1::CommitRequest*,
                                   v1::CommitResponse*) override {
    auto* r = ctx->DefaultReactor();
    std::lock_guard<std::mutex> lock(mu_);
    ++commits_;
    r->Finish(grpc::Status(grpc::StatusCode::ABORTED,
                           "branch b1 REJECTED: insufficient funds"));
    return r;
  }

  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(
      grpc::CallbackServerContext*, const v1::WatchRequest* req) override {
    class Writer : public grpc::ServerWriteReactor<v1::WatchEvent> {
     public:
      explicit Writer(const std::string& gid) {
        for (auto s : {v1::TXN_STATE_TRYING, v1::TXN_STATE_CONFIRMING,
                       v1::TXN_STATE_CONFIRMED}) {
          v1::WatchEvent e;
          e.mutable_transaction()->set_gid(gid);
          e.mutable_transaction()->set_state(s);
          events_.push_back(e);
        }
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (i_ == events_.size()) return Finish(grpc::Status::OK);
        StartWrite(&events_[i_++]);
      }
      std::vector<v1::WatchEvent> events_;
      size_t i_ = 0;
    };
    return new Writer(req->gid());
  }

  std::vector<v1::SubmitRequest> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  int commits() {
    std::lock_guard<std::mutex> lock(mu_);
    return commits_;
  }

 private:
  int failures_;
  grpc::StatusCode code_;
  std::mutex mu_;
  std::vector<v1::SubmitRequest> seen_;
  int commits_ = 0;
};

struct Server {
  FlakyCoordinator service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  Server(int failures, grpc::StatusCode code) : service(failures, code) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    REQUIRE(server);
  }
  ~Server() { server->Shutdown(); }
};

tcc::client::ClientOptions Options(int port, std::vector<int64_t>* waits) {
  tcc::client::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.attempt_timeout_ms = 5000;
  o.max_attempts = 4;
  o.wait = [waits](int64_t ms) { waits->push_back(ms); };
  return o;
}

v1::SubmitRequest Transfer() {
  v1::SubmitRequest req;
  auto* b = req.add_branches();
  b->set_branch_id("b1");
  b->set_participant("bank-a");
  b->set_action("debit");
  b->set_payload("A1:5");
  return req;
}

}  // namespace

TEST_CASE("Submit generates gid and created_at once and resends them") {
  Server server(2, grpc::StatusCode::UNAVAILABLE);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  v1::SubmitRequest req = Transfer();
  auto resp = client.Submit(req);
  REQUIRE(resp.ok());
  CHECK(resp->transaction().state() == v1::TXN_STATE_CONFIRMED);
  CHECK(tcc::identity::ValidateGid(req.gid()).ok());
  CHECK(req.created_at_ms() > 1600000000000);
  auto seen = server.service.seen();
  REQUIRE(seen.size() == 3);
  for (const auto& s : seen) {
    CHECK(s.gid() == req.gid());
    CHECK(s.created_at_ms() == req.created_at_ms());
  }
  REQUIRE(waits.size() == 2);
  CHECK(waits[0] <= 50);   // full jitter under the first backoff
  CHECK(waits[1] <= 100);  // then doubled
}

TEST_CASE("a caller's own gid and created_at are kept") {
  Server server(0, grpc::StatusCode::OK);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  v1::SubmitRequest req = Transfer();
  req.set_gid("order-42");
  req.set_created_at_ms(1700000000000);
  REQUIRE(client.Submit(req).ok());
  CHECK(server.service.seen().at(0).gid() == "order-42");
  CHECK(server.service.seen().at(0).created_at_ms() == 1700000000000);
}

TEST_CASE("retries stop at max_attempts and return the last error") {
  Server server(100, grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  v1::SubmitRequest req = Transfer();
  auto resp = client.Submit(req);
  CHECK(resp.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(server.service.seen().size() == 4);
}

TEST_CASE(
    "retry_for_ms retries past max_attempts until the waits add up to it") {
  SECTION("a node that stays down: the last error after retry_for_ms") {
    Server server(1000, grpc::StatusCode::UNAVAILABLE);
    std::vector<int64_t> waits;
    tcc::client::ClientOptions o = Options(server.port, &waits);
    o.max_attempts = 2;
    o.retry_for_ms = 3000;
    tcc::client::CoordinatorClient client(o);
    v1::SubmitRequest req = Transfer();
    auto resp = client.Submit(req);
    CHECK(resp.status().code() == absl::StatusCode::kUnavailable);
    REQUIRE(waits.size() >= 2);
    int64_t sum = 0;
    for (int64_t w : waits) sum += std::max<int64_t>(w, 1);
    CHECK(sum >= 3000);
    CHECK(sum - std::max<int64_t>(waits.back(), 1) < 3000);
    CHECK(server.service.seen().size() == waits.size() + 1);
  }
  SECTION("a shard between owners for a while: the retry that succeeds") {
    Server server(12, grpc::StatusCode::UNAVAILABLE);
    std::vector<int64_t> waits;
    tcc::client::ClientOptions o = Options(server.port, &waits);
    o.max_attempts = 2;
    o.backoff_cap_ms = 1;  // 12 quick failures stay inside the window
    o.retry_for_ms = 1000;
    tcc::client::CoordinatorClient client(o);
    v1::SubmitRequest req = Transfer();
    REQUIRE(client.Submit(req).ok());
    CHECK(server.service.seen().size() == 13);
  }
  SECTION("a permanent error is still not retried") {
    Server server(100, grpc::StatusCode::ALREADY_EXISTS);
    std::vector<int64_t> waits;
    tcc::client::ClientOptions o = Options(server.port, &waits);
    o.retry_for_ms = 3000;
    tcc::client::CoordinatorClient client(o);
    v1::SubmitRequest req = Transfer();
    CHECK(client.Submit(req).status().code() ==
          absl::StatusCode::kAlreadyExists);
    CHECK(server.service.seen().size() == 1);
  }
}

TEST_CASE("a permanent error is returned at once, not retried") {
  Server server(100, grpc::StatusCode::ALREADY_EXISTS);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  v1::SubmitRequest req = Transfer();
  CHECK(client.Submit(req).status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(server.service.seen().size() == 1);
  CHECK(waits.empty());
}

TEST_CASE("Commit's ABORTED carries the reason and is not retried") {
  Server server(0, grpc::StatusCode::OK);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  v1::CommitRequest req;
  req.set_gid("g1");
  auto resp = client.Commit(req);
  CHECK(resp.status().code() == absl::StatusCode::kAborted);
  CHECK(resp.status().message() == "branch b1 REJECTED: insufficient funds");
  CHECK(server.service.commits() == 1);
}

TEST_CASE("Watch streams every change until the final state") {
  Server server(0, grpc::StatusCode::OK);
  std::vector<int64_t> waits;
  tcc::client::CoordinatorClient client(Options(server.port, &waits));
  std::vector<v1::TxnState> states;
  absl::Status s = client.Watch("g1", [&](const v1::TransactionView& v) {
    states.push_back(v.state());
    return true;
  });
  CHECK(s.ok());
  CHECK(states == std::vector<v1::TxnState>{v1::TXN_STATE_TRYING,
                                            v1::TXN_STATE_CONFIRMING,
                                            v1::TXN_STATE_CONFIRMED});
}

TEST_CASE(
    "several node addresses: an UNAVAILABLE attempt moves to the next node "
    "with the same gid and created_at") {
  // Node 1 is down for good (nothing listens on its port); node 2 answers
  // UNAVAILABLE once (its shard between owners), then serves.
  int dead_port = 0;
  {
    Server gone(0, grpc::StatusCode::OK);
    dead_port = gone.port;
  }
  Server live(1, grpc::StatusCode::UNAVAILABLE);
  std::vector<int64_t> waits;
  tcc::client::ClientOptions o = Options(live.port, &waits);
  o.addresses = {"127.0.0.1:" + std::to_string(dead_port),
                 "127.0.0.1:" + std::to_string(live.port)};
  o.max_attempts = 5;
  o.attempt_timeout_ms = 2000;
  tcc::client::CoordinatorClient client(o);
  v1::SubmitRequest req = Transfer();
  auto resp = client.Submit(req);
  REQUIRE(resp.ok());
  CHECK(resp->transaction().state() == v1::TXN_STATE_CONFIRMED);
  // Node 2 saw the UNAVAILABLE attempt and the one it served (after the
  // client went round to node 1 and back), both the same request.
  const auto seen = live.service.seen();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].gid() == req.gid());
  CHECK(seen[1].gid() == req.gid());
  CHECK(seen[0].created_at_ms() == seen[1].created_at_ms());
  CHECK(waits.size() >= 2);
}

TEST_CASE("generated gids are valid and distinct") {
  std::set<std::string> gids;
  for (int i = 0; i < 1000; ++i) {
    std::string g = tcc::client::CoordinatorClient::NewGid();
    CHECK(tcc::identity::ValidateGid(g).ok());
    gids.insert(g);
  }
  CHECK(gids.size() == 1000);
}
