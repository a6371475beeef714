// RunLoad against an in-process fake coordinator on loopback: what counts as
// completed, what as an error, and that both loops send what they should.
#include "load_generator.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "transfer_plan.h"

namespace {

namespace v1 = tcc::v1;
using tcc::bench::LoadOptions;
using tcc::bench::LoadResult;

// Answers by the gid's sequence number n: n % 5 == 1 CANCELLED, == 2 still
// TRYING, == 3 about another gid, == 4 UNAVAILABLE, else CONFIRMED. Records
// what it was sent.
class FakeCoordinator final : public v1::Coordinator::CallbackService {
 public:
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const v1::SubmitRequest* req,
                                   v1::SubmitResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (const int ms = delay_ms.load(); ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      gids_.insert(req->gid());
      if (req->wait_for() != v1::WAIT_FOR_FINISHED ||
          req->created_at_ms() <= 0 || req->branches_size() != 2 ||
          req->branches(0).payload().size() != 64) {
        ++malformed_;
      }
    }
    const std::string& gid = req->gid();
    const uint64_t n = std::stoull(gid.substr(gid.rfind('-') + 1));
    v1::TransactionView* view = resp->mutable_transaction();
    view->set_gid(gid);
    switch (n % 5) {
      case 1:
        view->set_state(v1::TXN_STATE_CANCELLED);
        break;
      case 2:
        view->set_state(v1::TXN_STATE_TRYING);
        break;
      case 3:
        view->set_gid("someone-else");
        view->set_state(v1::TXN_STATE_CONFIRMED);
        break;
      case 4:
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no"));
        return reactor;
      default:
        view->set_state(v1::TXN_STATE_CONFIRMED);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // Every answer this much later (blocking one of gRPC's threads).
  std::atomic<int> delay_ms{0};

  size_t distinct_gids() {
    std::lock_guard<std::mutex> lock(mu_);
    return gids_.size();
  }
  int malformed() {
    std::lock_guard<std::mutex> lock(mu_);
    return malformed_;
  }

 private:
  std::mutex mu_;
  std::set<std::string> gids_;
  int malformed_ = 0;
};

struct Fixture {
  FakeCoordinator service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::unique_ptr<tcc::bench::PayloadFormat> format;

  Fixture() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    REQUIRE(server);
    stub = v1::Coordinator::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    format = std::move(*tcc::bench::MakePayloadFormat("json"));
  }
  ~Fixture() { server->Shutdown(); }

  LoadResult Run(const LoadOptions& options) {
    auto planner = tcc::bench::TransferPlanner::Create(
        tcc::bench::TransferShape{2, {"bank-a", "bank-b"}, 100, 1});
    REQUIRE(planner.ok());
    auto result = tcc::bench::RunLoad({stub.get()}, *planner, *format, options);
    REQUIRE(result.ok());
    return *result;
  }
};

// The fake's answers sorted into completions and errors ("UNSENT" aside: a
// stalled machine may leave some of an open loop's schedule unsent).
// The whole result, for the log of a failing check.
std::string Describe(const LoadResult& r) {
  std::string s = "started=" + std::to_string(r.started) +
                  " confirmed=" + std::to_string(r.confirmed) +
                  " cancelled=" + std::to_string(r.cancelled) +
                  " warmup_answers=" + std::to_string(r.warmup_answers) +
                  " window_s=" + std::to_string(r.window_s) +
                  " latency_count=" + std::to_string(r.latency.count);
  for (const auto& [kind, n] : r.errors) {
    s += " " + kind + "=" + std::to_string(n);
  }
  for (const auto& cpu : r.cpu) s += " cpu=" + std::to_string(cpu.seconds);
  return s;
}

// Whatever the timing: every counted transaction is either completed or an
// error, only completions have latencies, and the percentiles are ordered.
void CheckConsistent(const LoadResult& r) {
  INFO(Describe(r));
  uint64_t unsent = r.errors.count("UNSENT") ? r.errors.at("UNSENT") : 0;
  CHECK(r.started == r.completed() + r.error_count() - unsent);
  CHECK(r.latency.count == r.completed());
  CHECK(r.latency.p50_ns <= r.latency.p99_ns);
  CHECK(r.latency.p99_ns <= r.latency.max_ns);
  REQUIRE(r.cpu.size() == 1);  // tcc-bench's own process
  CHECK(r.cpu[0].seconds >= 0);
}

}  // namespace

// No warm-up and five callers: the first five transactions (sequence 0-4,
// one of each of the fake's answers) start in the window however slowly the
// machine runs.
TEST_CASE("closed loop: final states complete, everything else is an error") {
  Fixture f;
  LoadOptions o;
  o.concurrency = 5;
  o.warmup_s = 0;
  o.duration_s = 0.5;
  o.payload_bytes = 64;
  o.run_id = "closed";
  LoadResult r = f.Run(o);
  INFO(Describe(r));
  CheckConsistent(r);
  CHECK(r.started >= 5);
  CHECK(r.confirmed > 0);
  CHECK(r.cancelled > 0);
  CHECK(r.errors.count("NOT_FINAL:TXN_STATE_TRYING") == 1);
  CHECK(r.errors.count("WRONG_GID") == 1);
  CHECK(r.errors.count("UNAVAILABLE") == 1);
  CHECK(r.errors.size() == 3);
  CHECK(r.tps() > 0);
  CHECK(r.warmup_answers == 0);
  CHECK(f.service.malformed() == 0);
}

// The first five transactions start at once, inside the warm-up.
TEST_CASE("closed loop: warm-up answers are not counted") {
  Fixture f;
  LoadOptions o;
  o.concurrency = 5;
  o.warmup_s = 0.2;
  o.duration_s = 0.2;
  o.payload_bytes = 64;
  o.run_id = "warm";
  LoadResult r = f.Run(o);
  INFO(Describe(r));
  CheckConsistent(r);
  CHECK(r.warmup_answers >= 5);
  CHECK(r.warmup_errors <= r.warmup_answers);
  // Every transaction had a gid of its own (a few may have been sent after
  // the window, counted nowhere).
  CHECK(f.service.distinct_gids() >=
        static_cast<size_t>(r.started + r.warmup_answers));
}

TEST_CASE("open loop: every scheduled transaction is sent or counted unsent") {
  Fixture f;
  LoadOptions o;
  o.rate_per_s = 400;
  o.poisson = false;
  o.warmup_s = 0.1;
  o.duration_s = 0.5;
  o.payload_bytes = 64;
  o.run_id = "open";
  LoadResult r = f.Run(o);
  INFO(Describe(r));
  CheckConsistent(r);
  // 0.5 s at 400/s, evenly spaced: 200 scheduled in the window. A stalled
  // machine sends fewer and counts the rest UNSENT.
  const uint64_t unsent = r.errors.count("UNSENT") ? r.errors.at("UNSENT") : 0;
  CHECK(r.started + unsent >= 199);
  CHECK(r.started + unsent <= 201);
  CHECK(f.service.malformed() == 0);
}

TEST_CASE("open loop: sends behind the schedule still go, timed from it") {
  Fixture f;
  // One call at a time, each answered 4 ms later: at most 250/s against a
  // schedule of 400/s, so the sends fall ever further behind (as on a
  // stalled machine) and the last of the window's 200 leave after it.
  f.service.delay_ms = 4;
  LoadOptions o;
  o.rate_per_s = 400;
  o.poisson = false;
  o.max_in_flight = 1;
  o.warmup_s = 0;
  o.duration_s = 0.5;
  o.payload_bytes = 64;
  o.run_id = "late";
  LoadResult r = f.Run(o);
  INFO(Describe(r));
  CheckConsistent(r);
  // All 200 sent (200 x 4 ms = 0.8 s, within the second allowed after the
  // window), none counted UNSENT.
  CHECK(r.errors.count("UNSENT") == 0);
  CHECK(r.started >= 199);
  CHECK(r.started <= 201);
  // The lag is in the latency: the last sends left about 0.3 s late.
  CHECK(r.max_send_lag_ms > 150);
  CHECK(r.latency.max_ns > 150000000);
  CHECK(r.window_s > 0.6);
}

TEST_CASE("open loop: a schedule the in-flight limit cannot meet is UNSENT") {
  Fixture f;
  LoadOptions o;
  o.rate_per_s = 1e6;
  o.max_in_flight = 1;
  o.warmup_s = 0;
  o.duration_s = 0.3;
  o.payload_bytes = 64;
  LoadResult r = f.Run(o);
  INFO(Describe(r));
  REQUIRE(r.errors.count("UNSENT") == 1);
  CHECK(r.errors.at("UNSENT") > 100000);
}

TEST_CASE("bad options are refused") {
  Fixture f;
  auto planner = tcc::bench::TransferPlanner::Create(
      tcc::bench::TransferShape{2, {"a"}, 100, 1});
  REQUIRE(planner.ok());
  LoadOptions o;
  o.concurrency = 0;
  CHECK(!tcc::bench::RunLoad({f.stub.get()}, *planner, *f.format, o).ok());
  o.concurrency = 1;
  o.duration_s = 0;
  CHECK(!tcc::bench::RunLoad({f.stub.get()}, *planner, *f.format, o).ok());
  o.duration_s = 1;
  CHECK(!tcc::bench::RunLoad({}, *planner, *f.format, o).ok());
}
