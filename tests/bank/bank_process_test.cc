// The bank participant as a real process, on RocksDB and on PostgreSQL,
// killed by the failpoint participant.after_commit between its durable local
// commit and its reply: after a restart the re-sent call gets the stored
// answer, replayed, and the money moved exactly once.
#include "bank_process.h"

#include <sys/wait.h>

#include <array>
#include <atomic>
#include <future>
#include <thread>

#include "barrier/store_envs.h"
#include "tcc/identity/content_hash.h"

namespace tcc::testing {
namespace {

constexpr int64_t kCreatedAt = 1'700'000'000'000;

int64_t FarDeadline() {
  // tcc-bank runs on the real clock: a deadline an hour from now.
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         3'600'000;
}

v1::BranchRequest Branch(const std::string& gid, const std::string& action,
                         const std::string& payload, int64_t deadline) {
  v1::BranchRequest req;
  req.mutable_key()->set_gid(gid);
  req.mutable_key()->set_created_at_ms(kCreatedAt);
  req.mutable_key()->set_branch_id("b1");
  req.set_action(action);
  req.set_payload(payload);
  req.set_branch_hash(
      identity::ToBytes(identity::BranchHash(1, "bank-a", action, payload)));
  req.set_revision(1);
  req.set_attempt(1);
  req.set_try_deadline_ms(deadline);
  return req;
}

enum class Phase { kTry, kConfirm, kCancel };

grpc::Status Send(BankProcess& p, Phase phase, const v1::BranchRequest& req,
                  v1::BranchResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  switch (phase) {
    case Phase::kTry:
      return p.participant().Try(&ctx, req, resp);
    case Phase::kConfirm:
      return p.participant().Confirm(&ctx, req, resp);
    case Phase::kCancel:
      return p.participant().Cancel(&ctx, req, resp);
  }
  return grpc::Status::CANCELLED;
}

examples::bank::Account Account(BankProcess& p, uint32_t id) {
  examples::bank::GetAccountRequest req;
  req.set_account(id);
  examples::bank::Account resp;
  grpc::ClientContext ctx;
  REQUIRE(p.bank().GetAccount(&ctx, req, &resp).ok());
  return resp;
}

examples::bank::Totals Totals(BankProcess& p) {
  examples::bank::Totals resp;
  grpc::ClientContext ctx;
  REQUIRE(p.bank().GetTotals(&ctx, {}, &resp).ok());
  return resp;
}

void ExpectKilled(BankProcess& p) {
  int status = p.WaitExit();
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

void CrashBetweenCommitAndReply(const std::vector<std::string>& args) {
  const int64_t deadline = FarDeadline();
  const v1::BranchRequest debit = Branch("t1", "debit", "0:30", deadline);
  v1::BranchResponse resp;
  {
    // 1. Killed after the Try's commit, before its reply.
    BankProcess p(args, "participant.after_commit=crash@1");
    grpc::Status lost = Send(p, Phase::kTry, debit, &resp);
    CHECK(lost.error_code() == grpc::StatusCode::UNAVAILABLE);
    ExpectKilled(p);
  }
  {
    // 2. Restarted: the re-sent Try is answered from the barrier. Then
    // killed after the Confirm's commit (second answer), before its reply.
    BankProcess p(args, "participant.after_commit=crash@2");
    REQUIRE(Send(p, Phase::kTry, debit, &resp).ok());
    CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
    CHECK(resp.replayed());
    examples::bank::Account a = Account(p, 0);
    CHECK(a.balance() == 100);
    CHECK(a.frozen() == 30);
    CHECK(Send(p, Phase::kConfirm, debit, &resp).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
    ExpectKilled(p);
  }
  {
    // 3. Restarted: the Confirm is replayed; the money moved once.
    std::vector<std::string> with_metrics = args;
    with_metrics.insert(with_metrics.end(),
                        {"--metrics-listen", "127.0.0.1:0"});
    BankProcess p(with_metrics);
    REQUIRE(Send(p, Phase::kConfirm, debit, &resp).ok());
    CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);
    CHECK(resp.replayed());
    examples::bank::Account a = Account(p, 0);
    CHECK(a.balance() == 70);
    CHECK(a.frozen() == 0);

    // Short of funds: refused, nothing frozen.
    REQUIRE(
        Send(p, Phase::kTry, Branch("t2", "debit", "1:500", deadline), &resp)
            .ok());
    CHECK(resp.outcome() == v1::OUTCOME_REJECTED);
    CHECK(resp.message() == "insufficient funds");
    CHECK(Account(p, 1).frozen() == 0);

    // A credit confirmed, a debit cancelled.
    const v1::BranchRequest credit = Branch("t3", "credit", "2:30", deadline);
    REQUIRE(Send(p, Phase::kTry, credit, &resp).ok());
    CHECK(Account(p, 2).incoming() == 30);
    REQUIRE(Send(p, Phase::kConfirm, credit, &resp).ok());
    const v1::BranchRequest undo = Branch("t4", "debit", "1:40", deadline);
    REQUIRE(Send(p, Phase::kTry, undo, &resp).ok());
    CHECK(Account(p, 1).frozen() == 40);
    REQUIRE(Send(p, Phase::kCancel, undo, &resp).ok());
    CHECK(resp.outcome() == v1::OUTCOME_EXECUTED);

    examples::bank::Totals t = Totals(p);
    CHECK(t.accounts() == 3);
    CHECK(t.balance() == 300);  // 100 x 3 - 30 + 30
    CHECK(t.frozen() == 0);
    CHECK(t.incoming() == 0);

    // The replay is counted, by operation, outcome and replayed.
    const std::string metrics = p.ScrapeMetrics();
    CHECK_THAT(metrics, Catch::Contains(
                            "tcc_participant_calls_total{operation=\"confirm\","
                            "outcome=\"executed\",replayed=\"true\"} 1"));
    CHECK_THAT(metrics,
               Catch::Contains("tcc_participant_calls_total{operation=\"try\","
                               "outcome=\"rejected\",replayed=\"false\"} 1"));

    int status = p.Terminate();
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE(
    "bank on RocksDB: killed between commit and reply, replayed after "
    "restart",
    "[rocksdb]") {
  TempDir dir;
  CrashBetweenCommitAndReply({"--name", "bank-a", "--store", "rocksdb",
                              "--data-dir", dir.path() + "/bank-a",
                              "--accounts", "3", "--initial-balance", "100"});
}

TEST_CASE(
    "bank on PostgreSQL: killed between commit and reply, replayed "
    "after restart",
    "[postgres]") {
  const std::string url = PostgresUrl();
  CrashBetweenCommitAndReply({"--name", "bank-" + std::to_string(getpid()),
                              "--store", "postgres", "--pg-url", url,
                              "--accounts", "3", "--initial-balance", "100"});
}

// Many branches at once over gRPC: for each, a Try races its Cancel (as when
// tccd gives up on a slow Try), or a Try is followed by duplicate Confirms
// sent at once. Money is conserved, every reservation is released, and each
// confirmed debit moved its amount exactly once. (Catch2 assertions are not
// thread-safe: threads record answers, the test thread checks them.)
void ConcurrentBranches(std::vector<std::string> args) {
  args.insert(args.end(), {"--accounts", "4", "--initial-balance", "1000"});
  BankProcess p(args);
  const int64_t deadline = FarDeadline();
  constexpr int kBranches = 60;
  using Answer = std::pair<grpc::StatusCode, v1::BranchResponse>;
  auto until_answered = [&](Phase phase, const v1::BranchRequest& req) {
    Answer a;
    for (int attempt = 0; attempt < 100; ++attempt) {
      grpc::Status s = Send(p, phase, req, &a.second);
      a.first = s.error_code();
      if (a.first != grpc::StatusCode::UNAVAILABLE) break;
    }
    return a;
  };
  // Per branch: [0] Try, [1] Cancel or first Confirm, [2] second Confirm.
  std::vector<std::array<Answer, 3>> answers(kBranches);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kBranches; i += 4) {
        const v1::BranchRequest req =
            Branch("c" + std::to_string(i), "debit",
                   std::to_string(i % 4) + ":5", deadline);
        if (i % 2 == 0) {
          auto cancel = std::async(std::launch::async, [&] {
            return until_answered(Phase::kCancel, req);
          });
          answers[i][0] = until_answered(Phase::kTry, req);
          answers[i][1] = cancel.get();
        } else {
          answers[i][0] = until_answered(Phase::kTry, req);
          auto other = std::async(std::launch::async, [&] {
            return until_answered(Phase::kConfirm, req);
          });
          answers[i][1] = until_answered(Phase::kConfirm, req);
          answers[i][2] = other.get();
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  int confirmed = 0;
  for (int i = 0; i < kBranches; ++i) {
    INFO("branch " << i);
    for (int j = 0; j < (i % 2 == 0 ? 2 : 3); ++j) {
      REQUIRE(answers[i][j].first == grpc::StatusCode::OK);
    }
    const v1::BranchResponse& tried = answers[i][0].second;
    if (i % 2 == 0) {
      const v1::BranchResponse& cancelled = answers[i][1].second;
      if (tried.outcome() == v1::OUTCOME_EXECUTED) {
        CHECK(cancelled.outcome() == v1::OUTCOME_EXECUTED);
      } else {
        CHECK(tried.outcome() == v1::OUTCOME_HANGING_REFUSED);
        CHECK(cancelled.outcome() == v1::OUTCOME_EMPTY_ROLLBACK);
      }
    } else {
      CHECK(tried.outcome() == v1::OUTCOME_EXECUTED);
      CHECK(answers[i][1].second.outcome() == v1::OUTCOME_EXECUTED);
      CHECK(answers[i][2].second.outcome() == v1::OUTCOME_EXECUTED);
      // One ran, the other got its stored answer.
      CHECK(answers[i][1].second.replayed() != answers[i][2].second.replayed());
      ++confirmed;
    }
  }
  examples::bank::Totals totals = Totals(p);
  CHECK(totals.frozen() == 0);
  CHECK(totals.incoming() == 0);
  CHECK(totals.balance() == 4 * 1000 - 5 * confirmed);
}

TEST_CASE(
    "bank on RocksDB: concurrent Try/Cancel and duplicate Confirms "
    "over gRPC",
    "[rocksdb]") {
  TempDir dir;
  ConcurrentBranches({"--name", "bank-a", "--store", "rocksdb", "--data-dir",
                      dir.path() + "/bank-a"});
}

TEST_CASE(
    "bank on PostgreSQL: concurrent Try/Cancel and duplicate Confirms "
    "over gRPC",
    "[postgres]") {
  ConcurrentBranches({"--name", "bank-c" + std::to_string(getpid()), "--store",
                      "postgres", "--pg-url", PostgresUrl()});
}

}  // namespace
}  // namespace tcc::testing
