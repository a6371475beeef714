// tccd's participant transport over real gRPC on 127.0.0.1 against the SDK's
// participant server on a real barrier store: calls made while the window
// is full leave as Batch calls, each answered exactly as it would be alone
// (outcomes, refusals, per-call errors, Query states); a participant without
// Batch gets single calls (nothing is lost or sent twice); a Batch over the
// limits is refused whole and runs nothing.
#include "rpc/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "barrier/barrier_harness.h"
#include "participant/served_participant.h"
#include "tcc/identity/content_hash.h"
#include "tcc/participant/participant_server.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace tcc::testing {
namespace {

using rpc::GrpcTransport;

// gRPC 1.51 runs callback-API completions on a shared "alternative" queue
// when its poller has no background threads; the queue is dropped when its
// last user (a callback server, or a channel that made a callback call)
// goes, and made again by the next. Test cases that make and drop servers
// and clients in turn crashed about 1 run in 3 in that queue's shutdown
// (grpc_cq_internal_unref abort, or SIGSEGV in grpc_completion_queue_next).
// A channel kept for the whole process, having made one callback call,
// keeps the queue alive. (tccd itself makes its channels once.)
struct CallbackQueueKeeper {
  CallbackQueueKeeper() {
    auto* channel = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        "127.0.0.1:1", grpc::InsecureChannelCredentials()));  // never freed
    auto stub = v1::Participant::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(200));
    v1::QueryRequest req;
    v1::QueryResponse resp;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    stub->async()->Query(&ctx, &req, &resp, [&](grpc::Status) {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};
const CallbackQueueKeeper keeper;

// The SDK's participant server on `Env`'s store, named "p".
template <typename Env>
struct Participant : ServedParticipant<Env> {
  Participant() : ServedParticipant<Env>("p") {}
};

// Collects answers from gRPC threads; Wait blocks until `n` arrived.
template <typename Answer>
class Answers {
 public:
  explicit Answers(size_t n) : got_(n), arrived_(n, 0) {}
  std::function<void(absl::StatusOr<Answer>)> Slot(size_t i) {
    return [this, i](absl::StatusOr<Answer> a) {
      std::lock_guard<std::mutex> lock(mu_);
      got_[i] = std::move(a);
      ++arrived_[i];
      ++count_;
      cv_.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    REQUIRE(cv_.wait_for(lock, std::chrono::seconds(30),
                         [&] { return count_ >= got_.size(); }));
  }
  const absl::StatusOr<Answer>& operator[](size_t i) const { return got_[i]; }
  // Every slot answered exactly once.
  bool EachOnce() const {
    for (int a : arrived_) {
      if (a != 1) return false;
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<absl::StatusOr<Answer>> got_;
  std::vector<int> arrived_;
  size_t count_ = 0;
};

struct Harness {
  explicit Harness(const std::string& address, GrpcTransport::Options o) {
    REQUIRE(client.Add("p", address).ok());
    transport = std::make_unique<GrpcTransport>(
        client, [](std::function<void()> f) { f(); }, o);
  }
  ~Harness() { client.Shutdown(5000); }

  wal::BranchSpec Spec(const std::string& action) {
    wal::BranchSpec s;
    s.branch_id = "b1";
    s.participant = "p";
    s.action = action;
    s.payload = "payload";
    s.branch_hash = identity::BranchHash(1, "p", action, "payload");
    return s;
  }
  runtime::BranchCall Call(const std::string& gid, const wal::BranchSpec& spec,
                           wal::Phase phase) {
    return runtime::BranchCall{.gid = gid,
                               .created_at_ms = kT0 - 1000,
                               .spec = &spec,
                               .phase = phase,
                               .revision = 1,
                               .attempt = 1,
                               .owner_epoch = 1,
                               .try_deadline_ms = kDeadlineMs,
                               .read_back = nullptr};
  }
  runtime::QueryCall Query(const std::string& gid) {
    return runtime::QueryCall{.gid = gid,
                              .created_at_ms = kT0 - 1000,
                              .branch_id = "b1",
                              .participant = "p"};
  }

  rpc::ParticipantClient client;
  std::unique_ptr<GrpcTransport> transport;
};

std::string Gid(int i) { return "g" + std::to_string(i); }

// Sends `phase` for gids 0..n-1 at once and returns the answers.
void SendAll(Harness& h, const wal::BranchSpec& spec, wal::Phase phase, int n,
             Answers<runtime::BranchAnswer>& answers) {
  for (int i = 0; i < n; ++i) {
    h.transport->Call(h.Call(Gid(i), spec, phase), 5000,
                      answers.Slot(static_cast<size_t>(i)));
  }
  answers.Wait();
  REQUIRE(answers.EachOnce());
}

template <typename Env>
void BatchesAnswerEachCallAsAlone() {
  Participant<Env> p;
  Harness h(p.address(), {.rpcs_in_flight = 1, .batch_max_calls = 64});
  const wal::BranchSpec reserve = h.Spec("reserve");
  const wal::BranchSpec refuse = h.Spec("refuse");
  constexpr int kN = 300;

  // Tries: even gids reserve (EXECUTED), odd ones are refused (REJECTED).
  Answers<runtime::BranchAnswer> tries(kN);
  for (int i = 0; i < kN; ++i) {
    h.transport->Call(
        h.Call(Gid(i), i % 2 == 0 ? reserve : refuse, wal::Phase::kTry), 5000,
        tries.Slot(static_cast<size_t>(i)));
  }
  tries.Wait();
  REQUIRE(tries.EachOnce());
  for (int i = 0; i < kN; ++i) {
    INFO("gid " << i);
    REQUIRE(tries[i].ok());
    CHECK(tries[i]->outcome ==
          (i % 2 == 0 ? wal::Outcome::kExecuted : wal::Outcome::kRejected));
    CHECK_FALSE(tries[i]->replayed);
  }
  GrpcTransport::Stats s = h.transport->stats();
  CHECK(s.batches >= 1);
  CHECK(s.single_calls + s.batched_calls == kN);
  CHECK(s.batch_fallbacks == 0);
  CHECK(p.rec.Invocations("try") == kN);  // refusals ran the handler too

  // The same Tries again: replayed, nothing runs twice.
  Answers<runtime::BranchAnswer> again(kN / 2);
  for (int i = 0; i < kN / 2; ++i) {
    h.transport->Call(h.Call(Gid(2 * i), reserve, wal::Phase::kTry), 5000,
                      again.Slot(static_cast<size_t>(i)));
  }
  again.Wait();
  for (int i = 0; i < kN / 2; ++i) {
    REQUIRE(again[i].ok());
    CHECK(again[i]->outcome == wal::Outcome::kExecuted);
    CHECK(again[i]->replayed);
  }
  CHECK(p.rec.Invocations("try") == kN);  // refusals ran the handler too

  // Queries, batched: what each barrier holds, with the hash it saw.
  Answers<runtime::QueryAnswer> queries(kN + 1);
  for (int i = 0; i <= kN; ++i) {
    h.transport->Query(h.Query(Gid(i)), 5000,
                       queries.Slot(static_cast<size_t>(i)));
  }
  queries.Wait();
  for (int i = 0; i <= kN; ++i) {
    INFO("gid " << i);
    REQUIRE(queries[i].ok());
    CHECK(queries[i]->authoritative);
    if (i == kN) {
      CHECK(queries[i]->state == core::BarrierState::kNotFound);
    } else if (i % 2 == 0) {
      CHECK(queries[i]->state == core::BarrierState::kTried);
      CHECK(queries[i]->branch_hash == reserve.branch_hash);
    } else {
      CHECK(queries[i]->state == core::BarrierState::kTryRejected);
    }
  }

  // Phase 2 mixed in batches: Confirm the reserved ones, and a Confirm of a
  // gid never tried is FAILED_PRECONDITION for that call only.
  Answers<runtime::BranchAnswer> confirms(kN / 2 + 1);
  for (int i = 0; i < kN / 2; ++i) {
    h.transport->Call(h.Call(Gid(2 * i), reserve, wal::Phase::kConfirm), 5000,
                      confirms.Slot(static_cast<size_t>(i)));
  }
  h.transport->Call(h.Call("never-tried", reserve, wal::Phase::kConfirm), 5000,
                    confirms.Slot(kN / 2));
  confirms.Wait();
  for (int i = 0; i < kN / 2; ++i) {
    INFO("gid " << 2 * i);
    REQUIRE(confirms[i].ok());
    CHECK(confirms[i]->outcome == wal::Outcome::kExecuted);
  }
  REQUIRE_FALSE(confirms[kN / 2].ok());
  CHECK(confirms[kN / 2].status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(p.rec.Invocations("confirm") == kN / 2);

  // Cancel of a refused Try (nothing was reserved) and of a gid never tried:
  // both empty rollbacks.
  Answers<runtime::BranchAnswer> cancels(2);
  h.transport->Call(h.Call(Gid(1), refuse, wal::Phase::kCancel), 5000,
                    cancels.Slot(0));
  h.transport->Call(h.Call("late", reserve, wal::Phase::kCancel), 5000,
                    cancels.Slot(1));
  cancels.Wait();
  REQUIRE(cancels[0].ok());
  CHECK(cancels[0]->outcome == wal::Outcome::kEmptyRollback);
  REQUIRE(cancels[1].ok());
  CHECK(cancels[1]->outcome == wal::Outcome::kEmptyRollback);
  s = h.transport->stats();
  CHECK(s.batched_calls > kN);  // most calls travelled in batches
}

TEST_CASE("transport: batched calls on a group-committing store",
          "[integration]") {
  BatchesAnswerEachCallAsAlone<RocksDbGroupCommitEnv>();
}

TEST_CASE("transport: batched calls on a store committing each call",
          "[integration]") {
  BatchesAnswerEachCallAsAlone<RocksDbEnv>();
}

TEST_CASE("transport: no batching with batch_max_calls 1", "[integration]") {
  Participant<RocksDbGroupCommitEnv> p;
  Harness h(p.address(), {.rpcs_in_flight = 1, .batch_max_calls = 1});
  const wal::BranchSpec reserve = h.Spec("reserve");
  Answers<runtime::BranchAnswer> tries(50);
  SendAll(h, reserve, wal::Phase::kTry, 50, tries);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(tries[i].ok());
    CHECK(tries[i]->outcome == wal::Outcome::kExecuted);
  }
  CHECK(h.transport->stats().batches == 0);
  CHECK(h.transport->stats().single_calls == 50);
}

// A participant server from before Batch: Try only, answered EXECUTED, each
// counted; every other method is UNIMPLEMENTED.
// A synchronous gRPC server on 127.0.0.1 for `service`. Tests stop it
// (server.Stop()) before their clients go: gRPC 1.51 may abort in
// Server::MaybeFinishShutdown when a connection closes during Shutdown.
struct TestServer {
  explicit TestServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  void Stop() { server->Shutdown(); }

  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

class TryOnlyParticipant final : public v1::Participant::Service {
 public:
  grpc::Status Try(grpc::ServerContext*, const v1::BranchRequest* req,
                   v1::BranchResponse* resp) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++tries_[req->key().gid()];
    }
    resp->set_outcome(v1::OUTCOME_EXECUTED);
    return grpc::Status::OK;
  }
  std::map<std::string, int> tries() {
    std::lock_guard<std::mutex> lock(mu_);
    return tries_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> tries_;
};

TEST_CASE("transport: a participant without Batch gets single calls",
          "[integration]") {
  TryOnlyParticipant service;
  TestServer server(&service);
  {
    // The server stops before the client (gRPC 1.51 may abort in
    // Server::MaybeFinishShutdown when a connection closes during Shutdown).
    Harness h(server.address(), {.rpcs_in_flight = 1, .batch_max_calls = 64});
    const wal::BranchSpec reserve = h.Spec("reserve");
    constexpr int kN = 200;
    Answers<runtime::BranchAnswer> tries(kN);
    SendAll(h, reserve, wal::Phase::kTry, kN, tries);
    for (int i = 0; i < kN; ++i) {
      REQUIRE(tries[i].ok());
      CHECK(tries[i]->outcome == wal::Outcome::kExecuted);
    }
    // Each Try reached the participant exactly once.
    std::map<std::string, int> seen = service.tries();
    CHECK(seen.size() == kN);
    for (const auto& [gid, n] : seen) {
      INFO(gid);
      CHECK(n == 1);
    }
    GrpcTransport::Stats s = h.transport->stats();
    CHECK(s.batch_fallbacks == 1);
    CHECK(s.batches >= 1);  // the refused one
    server.Stop();
  }
}

// Single calls wait 300 ms, then fail UNAVAILABLE; a Batch fails
// UNAVAILABLE at once, or answers each call with UNAVAILABLE when
// `per_call_errors` (the participant reached, each call refused).
class FailingParticipant final : public v1::Participant::Service {
 public:
  explicit FailingParticipant(bool per_call_errors)
      : per_call_errors_(per_call_errors) {}
  grpc::Status Try(grpc::ServerContext*, const v1::BranchRequest*,
                   v1::BranchResponse*) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "single down");
  }
  grpc::Status Batch(grpc::ServerContext*, const v1::BatchRequest* req,
                     v1::BatchResponse* resp) override {
    if (!per_call_errors_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "batch down");
    }
    for (int i = 0; i < req->calls_size(); ++i) {
      v1::BatchResult* r = resp->add_results();
      r->set_code(static_cast<int>(absl::StatusCode::kUnavailable));
      r->set_error_message("call refused");
    }
    return grpc::Status::OK;
  }

 private:
  const bool per_call_errors_;
};

TEST_CASE("transport: every error of one Batch carries that Batch's id",
          "[integration]") {
  const bool per_call = GENERATE(false, true);
  INFO("per-call errors: " << per_call);
  FailingParticipant service(per_call);
  TestServer server(&service);
  {
    // The server stops before the client (see above).
    Harness h(server.address(), {.rpcs_in_flight = 1, .batch_max_calls = 64});
    // Two rounds, each to its own participant name (its own window, on the
    // same server): the first call of each leaves alone (the window is
    // empty) and holds the window 300 ms; the other ten wait and leave
    // together as one Batch when it ends.
    REQUIRE(h.client.Add("q", server.address()).ok());
    std::vector<uint64_t> batch_ids;
    for (const std::string name : {"p", "q"}) {
      wal::BranchSpec reserve = h.Spec("reserve");
      reserve.participant = name;
      constexpr int kN = 11;
      Answers<runtime::BranchAnswer> tries(kN);
      for (int i = 0; i < kN; ++i) {
        h.transport->Call(h.Call(Gid(i), reserve, wal::Phase::kTry), 5000,
                          tries.Slot(static_cast<size_t>(i)));
      }
      tries.Wait();
      REQUIRE(tries.EachOnce());
      REQUIRE_FALSE(tries[0].ok());
      CHECK(tries[0].status().code() == absl::StatusCode::kUnavailable);
      CHECK(runtime::RpcOf(tries[0].status()) == 0);  // a call of its own
      const uint64_t id = tries[1].ok() ? 0 : runtime::RpcOf(tries[1].status());
      CHECK(id != 0);
      for (int i = 1; i < kN; ++i) {
        INFO("participant " << name << ", call " << i);
        REQUIRE_FALSE(tries[i].ok());
        CHECK(tries[i].status().code() == absl::StatusCode::kUnavailable);
        CHECK(runtime::RpcOf(tries[i].status()) == id);
        // Stripped, the error reads as it did before it was tagged.
        CHECK(runtime::ReceivedStatus(tries[i].status()).ToString() ==
              (per_call ? "UNAVAILABLE: call refused"
                        : "UNAVAILABLE: batch down"));
      }
      batch_ids.push_back(id);
    }
    CHECK(batch_ids[0] != batch_ids[1]);
    const GrpcTransport::Stats s = h.transport->stats();
    CHECK(s.single_calls == 2);
    CHECK(s.batches == 2);
    CHECK(s.batched_calls == 20);
    server.Stop();
  }
}

TEST_CASE("transport: a participant's own rpcs_in_flight", "[integration]") {
  FailingParticipant service(false);  // single calls take 300 ms
  TestServer server(&service);
  {
    // "p" uses the default (1 in flight), "q" its own 3: three calls made
    // at once leave to "q" as three single calls, to "p" as one call and a
    // Batch of the other two behind it.
    Harness h(server.address(), {.rpcs_in_flight = 1,
                                 .rpcs_in_flight_for = {{"q", 3}},
                                 .batch_max_calls = 64});
    REQUIRE(h.client.Add("q", server.address()).ok());
    for (const std::string name : {"q", "p"}) {
      INFO("participant " << name);
      wal::BranchSpec reserve = h.Spec("reserve");
      reserve.participant = name;
      const GrpcTransport::Stats before = h.transport->stats();
      Answers<runtime::BranchAnswer> tries(3);
      for (int i = 0; i < 3; ++i) {
        h.transport->Call(h.Call(Gid(i), reserve, wal::Phase::kTry), 5000,
                          tries.Slot(static_cast<size_t>(i)));
      }
      tries.Wait();
      REQUIRE(tries.EachOnce());
      const GrpcTransport::Stats after = h.transport->stats();
      if (name == "q") {
        CHECK(after.single_calls - before.single_calls == 3);
        CHECK(after.batches - before.batches == 0);
      } else {
        CHECK(after.single_calls - before.single_calls == 1);
        CHECK(after.batches - before.batches == 1);
        CHECK(after.batched_calls - before.batched_calls == 2);
      }
    }
    server.Stop();
  }
}

// Single Trys take 300 ms; every call is counted by gid, batched or not.
class SlowCountingParticipant final : public v1::Participant::Service {
 public:
  grpc::Status Try(grpc::ServerContext*, const v1::BranchRequest* req,
                   v1::BranchResponse* resp) override {
    Count(req->key().gid());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    resp->set_outcome(v1::OUTCOME_EXECUTED);
    return grpc::Status::OK;
  }
  grpc::Status Batch(grpc::ServerContext*, const v1::BatchRequest* req,
                     v1::BatchResponse* resp) override {
    for (const v1::BatchCall& c : req->calls()) {
      Count(c.try_call().key().gid());
      resp->add_results()->mutable_branch()->set_outcome(v1::OUTCOME_EXECUTED);
    }
    return grpc::Status::OK;
  }
  std::map<std::string, int> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Count(const std::string& gid) {
    std::lock_guard<std::mutex> lock(mu_);
    ++seen_[gid];
  }
  std::mutex mu_;
  std::map<std::string, int> seen_;
};

TEST_CASE(
    "transport: a call waiting in its window when the gate shuts is "
    "not sent",
    "[integration]") {
  SlowCountingParticipant service;
  TestServer server(&service);
  {
    // The first Try leaves at once and holds the window 300 ms; four more
    // wait behind it. The gate shuts (the node stopped trusting its lease)
    // while they wait: they must not leave when the window frees.
    std::atomic<bool> open{true};
    GrpcTransport::Options o{.rpcs_in_flight = 1, .batch_max_calls = 64};
    o.may_send = [&open] { return open.load(); };
    Harness h(server.address(), o);
    const wal::BranchSpec reserve = h.Spec("reserve");
    constexpr int kN = 5;
    Answers<runtime::BranchAnswer> tries(kN);
    for (int i = 0; i < kN; ++i) {
      h.transport->Call(h.Call(Gid(i), reserve, wal::Phase::kTry), 5000,
                        tries.Slot(static_cast<size_t>(i)));
    }
    open = false;
    tries.Wait();
    REQUIRE(tries.EachOnce());
    REQUIRE(tries[0].ok());  // it left while the gate was open
    CHECK(tries[0]->outcome == wal::Outcome::kExecuted);
    for (int i = 1; i < kN; ++i) {
      INFO("call " << i);
      REQUIRE_FALSE(tries[i].ok());
      CHECK(runtime::IsNotSent(tries[i].status()));
      CHECK(tries[i].status().code() == absl::StatusCode::kUnavailable);
    }
    const std::map<std::string, int> seen = service.seen();
    CHECK(seen == std::map<std::string, int>{{Gid(0), 1}});
    // Open again: calls leave as before.
    open = true;
    Answers<runtime::BranchAnswer> again(1);
    h.transport->Call(h.Call(Gid(9), reserve, wal::Phase::kTry), 5000,
                      again.Slot(0));
    again.Wait();
    CHECK(again[0].ok());
    server.Stop();
  }
}

TEST_CASE("participant server: a Batch over the limits runs nothing",
          "[integration]") {
  Participant<RocksDbGroupCommitEnv> p;
  auto stub = v1::Participant::NewStub(
      grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
  auto branch = [](const std::string& gid) {
    v1::BranchRequest req;
    req.mutable_key()->set_gid(gid);
    req.mutable_key()->set_created_at_ms(kT0 - 1000);
    req.mutable_key()->set_branch_id("b1");
    req.set_action("reserve");
    req.set_payload("payload");
    req.set_branch_hash(
        identity::ToBytes(identity::BranchHash(1, "p", "reserve", "payload")));
    req.set_revision(1);
    req.set_attempt(1);
    req.set_try_deadline_ms(kDeadlineMs);
    return req;
  };
  auto call = [&](const v1::BatchRequest& req, v1::BatchResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    return stub->Batch(&ctx, req, resp);
  };

  v1::BatchRequest too_many;
  for (int i = 0; i < 1025; ++i) {
    *too_many.add_calls()->mutable_try_call() = branch(Gid(i));
  }
  v1::BatchResponse resp;
  grpc::Status s = call(too_many, &resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("at most 1024"));

  v1::BatchRequest empty_call;
  *empty_call.add_calls()->mutable_try_call() = branch("x");
  empty_call.add_calls();  // names no call
  s = call(empty_call, &resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("batch call 1"));
  CHECK(p.rec.TotalInvocations() == 0);

  // An empty batch is an empty answer; a good one answers in order.
  v1::BatchRequest none;
  REQUIRE(call(none, &resp).ok());
  CHECK(resp.results_size() == 0);
  v1::BatchRequest good;
  *good.add_calls()->mutable_try_call() = branch("a");
  good.add_calls()->mutable_query_call()->mutable_key()->CopyFrom(
      branch("a").key());
  *good.add_calls()->mutable_confirm_call() = branch("b");
  resp.Clear();
  REQUIRE(call(good, &resp).ok());
  REQUIRE(resp.results_size() == 3);
  CHECK(resp.results(0).code() == 0);
  CHECK(resp.results(0).branch().outcome() == v1::OUTCOME_EXECUTED);
  CHECK(resp.results(1).query().state() == v1::BARRIER_STATE_TRIED);
  CHECK(resp.results(2).code() ==
        static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  CHECK_FALSE(resp.results(2).error_message().empty());
  CHECK(p.rec.Invocations("try") == 1);
}

}  // namespace
}  // namespace tcc::testing
