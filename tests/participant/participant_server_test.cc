// The participant server over real gRPC on loopback (port chosen by the OS),
// on a RocksDB store that syncs each commit (gRPC's synchronous server) and
// on one that group-commits (gRPC's callback server, each reply sent once
// its commit is durable): answers carry outcome and `replayed`, protocol
// violations are gRPC errors, Query reads the barrier, metrics count every
// answer, a failure between the local commit and the reply leaves a committed
// Try that the re-sent call gets back, replayed; many callers at once are all
// answered; a shutdown with calls in flight ends.
#include "tcc/participant/participant_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "barrier/barrier_harness.h"
#include "participant/served_participant.h"
#include "prometheus/registry.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace tcc::testing {
namespace {

template <typename Env>
struct ServerUnderTest : ServedParticipant<Env> {
  ServerUnderTest()
      : stub(v1::Participant::NewStub(grpc::CreateChannel(
            this->address(), grpc::InsecureChannelCredentials()))) {}
  std::unique_ptr<v1::Participant::Stub> stub;
};

v1::BranchRequest Request(const std::string& gid,
                          const std::string& action = "reserve",
                          const std::string& hash = H()) {
  v1::BranchRequest req;
  req.mutable_key()->set_gid(gid);
  req.mutable_key()->set_created_at_ms(kT0 - 1000);
  req.mutable_key()->set_branch_id("b1");
  req.set_action(action);
  req.set_payload("payload");
  req.set_branch_hash(hash);
  req.set_revision(1);
  req.set_attempt(1);
  req.set_try_deadline_ms(kDeadlineMs);
  return req;
}

using Rpc = grpc::Status (v1::Participant::Stub::*)(grpc::ClientContext*,
                                                    const v1::BranchRequest&,
                                                    v1::BranchResponse*);

template <typename S>
grpc::Status Call(S& s, Rpc rpc, const v1::BranchRequest& req,
                  v1::BranchResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ((*s.stub).*rpc)(&ctx, req, resp);
}

template <typename S>
v1::QueryResponse Query(S& s, const std::string& gid) {
  v1::QueryRequest req;
  *req.mutable_key() = Request(gid).key();
  v1::QueryResponse resp;
  grpc::ClientContext ctx;
  REQUIRE(s.stub->Query(&ctx, req, &resp).ok());
  return resp;
}

template <typename S>
double Counter(S& s, const std::string& op, const std::string& outcome,
               const std::string& replayed) {
  for (const auto& family : s.participant.metrics()->Collect()) {
    if (family.name != "tcc_participant_calls_total") continue;
    for (const auto& m : family.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : m.label) labels[l.name] = l.value;
      if (labels["operation"] == op && labels["outcome"] == outcome &&
          labels["replayed"] == replayed) {
        return m.counter.value;
      }
    }
  }
  return 0;
}

TEMPLATE_TEST_CASE(
    "participant server: try, duplicate, query, confirm over gRPC",
    "[integration]", RocksDbEnv, RocksDbGroupCommitEnv) {
  ServerUnderTest<TestType> s;
  v1::BranchResponse resp;
  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("g1"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
  CHECK(!resp.replayed());

  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("g1"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
  CHECK(resp.replayed());
  CHECK(s.rec.Invocations("try") == 1);

  v1::QueryResponse q = Query(s, "g1");
  CHECK(q.state() == v1::BARRIER_STATE_TRIED);
  CHECK(q.branch_hash() == H());
  CHECK(q.authoritative());

  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("g1", "reserve", H2()),
               &resp)
              .ok());
  CHECK(resp.outcome() == v1::OUTCOME_CONFLICT);

  REQUIRE(Call(s, &v1::Participant::Stub::Confirm, Request("g1"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
  CHECK(!resp.replayed());
  CHECK(Query(s, "g1").state() == v1::BARRIER_STATE_CONFIRMED);

  // Cancel after Confirm is a protocol violation: a gRPC error.
  grpc::Status cancel =
      Call(s, &v1::Participant::Stub::Cancel, Request("g1"), &resp);
  CHECK(cancel.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.rec.Invocations("cancel") == 0);

  CHECK(Query(s, "never-seen").state() == v1::BARRIER_STATE_NOT_FOUND);

  CHECK(Counter(s, "try", "executed", "false") == 1);
  CHECK(Counter(s, "try", "executed", "true") == 1);
  CHECK(Counter(s, "try", "conflict", "false") == 1);
  CHECK(Counter(s, "confirm", "executed", "false") == 1);
  CHECK(Counter(s, "cancel", "failed_precondition", "false") == 1);
  CHECK(Counter(s, "query", "confirmed", "false") == 1);
}

TEMPLATE_TEST_CASE("participant server: refusals, empty rollback and late Try",
                   "[integration]", RocksDbEnv, RocksDbGroupCommitEnv) {
  ServerUnderTest<TestType> s;
  v1::BranchResponse resp;
  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("r1", "refuse"), &resp)
              .ok());
  CHECK(resp.outcome() == v1::OUTCOME_REJECTED);
  CHECK(resp.message() == "no funds");

  REQUIRE(Call(s, &v1::Participant::Stub::Cancel, Request("e1"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EMPTY_ROLLBACK);
  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("e1"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_HANGING_REFUSED);
  CHECK(Query(s, "e1").state() == v1::BARRIER_STATE_CANCELLED_BEFORE_TRY);

  s.clock.Set(kDeadlineMs + kSkewMs + 1);
  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("late"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_HANGING_REFUSED);
  CHECK(Query(s, "late").state() == v1::BARRIER_STATE_NOT_FOUND);
  CHECK(s.rec.Invocations("try") == 1);  // only the refusing one ran
  CHECK(Counter(s, "try", "hanging_refused", "false") == 2);
}

TEMPLATE_TEST_CASE("participant server: malformed calls are INVALID_ARGUMENT",
                   "[integration]", RocksDbEnv, RocksDbGroupCommitEnv) {
  ServerUnderTest<TestType> s;
  v1::BranchResponse resp;
  CHECK(Call(s, &v1::Participant::Stub::Try, Request("g", "no-such-action"),
             &resp)
            .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Call(s, &v1::Participant::Stub::Try, Request("g", "reserve", "abc"),
             &resp)
            .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Call(s, &v1::Participant::Stub::Try, Request("bad gid"), &resp)
            .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  v1::BranchRequest no_deadline = Request("g");
  no_deadline.clear_try_deadline_ms();
  CHECK(Call(s, &v1::Participant::Stub::Try, no_deadline, &resp).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  // A Cancel without its try-deadline would write a marker that retention
  // could drop while a Try may still come; a Confirm needs it alike.
  CHECK(Call(s, &v1::Participant::Stub::Cancel, no_deadline, &resp)
            .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Call(s, &v1::Participant::Stub::Confirm, no_deadline, &resp)
            .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // created_at_ms is part of the key: 0 or negative is no time at all.
  for (int64_t created_at : {int64_t{0}, int64_t{-5}}) {
    INFO("created_at_ms " << created_at);
    v1::BranchRequest bad_time = Request("g");
    bad_time.mutable_key()->set_created_at_ms(created_at);
    for (Rpc rpc :
         {&v1::Participant::Stub::Try, &v1::Participant::Stub::Confirm,
          &v1::Participant::Stub::Cancel}) {
      CHECK(Call(s, rpc, bad_time, &resp).error_code() ==
            grpc::StatusCode::INVALID_ARGUMENT);
    }
    v1::QueryRequest query;
    *query.mutable_key() = bad_time.key();
    v1::QueryResponse answer;
    grpc::ClientContext ctx;
    CHECK(s.stub->Query(&ctx, query, &answer).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
  CHECK(s.rec.TotalInvocations() == 0);
  CHECK(Query(s, "g").state() == v1::BARRIER_STATE_NOT_FOUND);
  // Nothing was written: not even the Cancel's empty-rollback marker.
  v1::BranchRequest ok = Request("g");
  REQUIRE(Call(s, &v1::Participant::Stub::Try, ok, &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
}

TEMPLATE_TEST_CASE(
    "participant server: a reply lost after the commit is replayed",
    "[integration]", RocksDbEnv, RocksDbGroupCommitEnv) {
  ServerUnderTest<TestType> s;
  REQUIRE(failpoint::Configure(std::string(participant::kAfterCommitFailpoint) +
                               "=error@1")
              .ok());
  v1::BranchResponse resp;
  grpc::Status lost =
      Call(s, &v1::Participant::Stub::Try, Request("fp"), &resp);
  REQUIRE(failpoint::Configure("").ok());
  CHECK(lost.error_code() == grpc::StatusCode::UNAVAILABLE);
  // The work was committed before the reply was lost.
  CHECK(Query(s, "fp").state() == v1::BARRIER_STATE_TRIED);
  REQUIRE(Call(s, &v1::Participant::Stub::Try, Request("fp"), &resp).ok());
  CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
  CHECK(resp.replayed());
  CHECK(s.rec.Invocations("try") == 1);
}

TEMPLATE_TEST_CASE("participant server: a Batch runs its calls in order",
                   "[integration]", RocksDbEnv, RocksDbGroupCommitEnv) {
  ServerUnderTest<TestType> s;
  v1::BatchRequest batch;
  *batch.add_calls()->mutable_try_call() = Request("b1");
  *batch.add_calls()->mutable_try_call() = Request("b2", "refuse");
  *batch.add_calls()->mutable_cancel_call() = Request("b3");
  *batch.add_calls()->mutable_query_call()->mutable_key() = Request("b1").key();
  v1::BatchResponse answer;
  {
    grpc::ClientContext ctx;
    REQUIRE(s.stub->Batch(&ctx, batch, &answer).ok());
  }
  REQUIRE(answer.results_size() == 4);
  for (const v1::BatchResult& r : answer.results()) CHECK(r.code() == 0);
  CHECK(answer.results(0).branch().outcome() == v1::OUTCOME_EXECUTED);
  CHECK(answer.results(1).branch().outcome() == v1::OUTCOME_REJECTED);
  CHECK(answer.results(2).branch().outcome() == v1::OUTCOME_EMPTY_ROLLBACK);
  CHECK(answer.results(3).query().state() == v1::BARRIER_STATE_TRIED);
  CHECK(s.rec.Invocations("try") == 2);

  // A call that names nothing: the whole batch is refused, nothing ran.
  v1::BatchRequest bad;
  *bad.add_calls()->mutable_try_call() = Request("b4");
  bad.add_calls();
  grpc::ClientContext ctx;
  CHECK(s.stub->Batch(&ctx, bad, &answer).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Query(s, "b4").state() == v1::BARRIER_STATE_NOT_FOUND);
  CHECK(s.rec.Invocations("try") == 2);
}

// The group-commit server answers each call once a group's sync made it
// durable: calls from many callers at once are each answered, each handler
// run once.
TEST_CASE("participant server, group commit: many callers at once",
          "[integration]") {
  ServerUnderTest<RocksDbGroupCommitEnv> s;
  constexpr int kCallers = 8;
  constexpr int kEach = 25;
  std::atomic<int> executed{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        const std::string gid =
            "m" + std::to_string(c) + "-" + std::to_string(i);
        for (Rpc rpc :
             {&v1::Participant::Stub::Try, &v1::Participant::Stub::Confirm}) {
          v1::BranchResponse resp;
          if (Call(s, rpc, Request(gid), &resp).ok() &&
              resp.outcome() == v1::OUTCOME_EXECUTED) {
            ++executed;
          }
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  CHECK(executed.load() == 2 * kCallers * kEach);
  CHECK(s.rec.Invocations("try") == kCallers * kEach);
  CHECK(s.rec.Invocations("confirm") == kCallers * kEach);
  CHECK(Query(s, "m7-24").state() == v1::BARRIER_STATE_CONFIRMED);
}

// Shutdown while calls wait for a slow sync: it ends, and every caller hears
// back (the reply, or an error it must take as an unknown outcome).
TEST_CASE("participant server, group commit: shutdown with calls in flight",
          "[integration]") {
  ServerUnderTest<RocksDbGroupCommitEnv> s;
  FailpointsOff off;
  REQUIRE(failpoint::Configure("barrier.before_synced_commit=sleep(300)").ok());
  constexpr int kCalls = 16;
  struct Pending {
    grpc::ClientContext ctx;
    v1::BranchResponse resp;
  };
  std::vector<Pending> pending(kCalls);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<grpc::Status> statuses;
  std::vector<v1::BranchRequest> requests;
  for (int i = 0; i < kCalls; ++i) {
    requests.push_back(Request("s" + std::to_string(i)));
  }
  for (int i = 0; i < kCalls; ++i) {
    pending[i].ctx.set_deadline(std::chrono::system_clock::now() +
                                std::chrono::seconds(10));
    s.stub->async()->Try(&pending[i].ctx, &requests[i], &pending[i].resp,
                         [&](grpc::Status status) {
                           std::lock_guard<std::mutex> lock(mu);
                           statuses.push_back(std::move(status));
                           cv.notify_all();
                         });
  }
  // Until the first sync is under way (its calls wait in WhenDurable).
  for (int i = 0; i < 200 && s.rec.Invocations("try") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(s.rec.Invocations("try") > 0);
  s.server->Shutdown(std::chrono::milliseconds(0));
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(10),
                      [&] { return statuses.size() == kCalls; }));
  for (const grpc::Status& status : statuses) {
    INFO(status.error_code() << " " << status.error_message());
    CHECK((status.ok() || status.error_code() == grpc::StatusCode::CANCELLED ||
           status.error_code() == grpc::StatusCode::UNAVAILABLE));
  }
  lock.unlock();
  // Nothing is served any more.
  v1::BranchResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  CHECK(!s.stub->Try(&ctx, Request("after"), &resp).ok());
}

TEST_CASE("participant: actions are validated when registered", "[unit]") {
  MemoryEnv env;
  clock::ManualClock clock(kT0);
  participant::Participant p(env.store(), clock);
  Recorder rec;
  participant::ActionHandlers h{rec.TryHandler(), rec.PhaseTwoHandler("c"),
                                rec.PhaseTwoHandler("x")};
  CHECK(p.AddAction("debit", h).ok());
  CHECK(p.AddAction("debit", h).code() == absl::StatusCode::kInvalidArgument);
  CHECK(p.AddAction("bad name", h).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(p.AddAction("no-confirm",
                    {rec.TryHandler(), nullptr, rec.PhaseTwoHandler("x")})
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tcc::testing
