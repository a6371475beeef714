// tccd end to end: real tccd and tcc-bank processes on 127.0.0.1, the SDK's
// initiator client, RocksDB on disk under a temp dir (issue 6's list).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "bank_cluster.h"
#include "pg_env.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

using tcc::testing::PostgresUrl;

std::string TempDir(const std::string& name) {
  return tcc::harness::MakeTempDir("tccd-it-" + name);
}

ClusterOptions Options(const std::string& name) {
  ClusterOptions o;
  o.root_dir = TempDir(name);
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  // Short timeouts so failure paths run in seconds.

  return o;
}

int64_t BalanceOf(BankCluster& c, const std::string& bank, uint32_t account) {
  auto a = c.Account(bank, account);
  REQUIRE(a.ok());
  return a->balance();
}

}  // namespace

TEST_CASE("happy commit moves the money once") {
  BankCluster c(Options("happy"));
  REQUIRE(c.Start().ok());
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 25);
  auto r = c.client().Submit(req);
  REQUIRE(r.ok());
  CHECK(r->transaction().state() == v1::TXN_STATE_CONFIRMED);
  CHECK(r->transaction().decision() == v1::DECISION_CONFIRM);
  CHECK(r->transaction().content_hash().size() == 32);
  for (const auto& b : r->transaction().branches()) {
    CHECK(b.try_phase().outcome() == v1::OUTCOME_EXECUTED);
    CHECK(b.second_phase().state() == v1::PHASE_STATE_SUCCEEDED);
  }
  CHECK(BalanceOf(c, "bank-a", 1) == 975);
  CHECK(BalanceOf(c, "bank-b", 2) == 1025);
  auto got = c.client().Get(req.gid());
  REQUIRE(got.ok());
  CHECK(got->state() == v1::TXN_STATE_CONFIRMED);
  CHECK_OK(c.CheckFinal({req.gid()}, 10000));
}

TEST_CASE("a rejected Try cancels every branch") {
  BankCluster c(Options("reject"));
  REQUIRE(c.Start().ok());
  // Three branches: the debit is refused (funds short); both credits are
  // cancelled, by empty rollback if their Try never ran there.
  auto req = c.Transfer("bank-a", 3, "bank-b", 4, 5000);
  auto* extra = req.add_branches();
  extra->set_branch_id("credit2");
  extra->set_participant("bank-a");
  extra->set_action("credit");
  extra->set_payload("5:5000");
  auto r = c.client().Submit(req);
  REQUIRE(r.ok());
  CHECK(r->transaction().state() == v1::TXN_STATE_CANCELLED);
  CHECK(r->transaction().decision_reason().find("REJECTED") !=
        std::string::npos);
  for (const auto& b : r->transaction().branches()) {
    INFO(b.branch_id());
    CHECK(b.second_phase().state() == v1::PHASE_STATE_SUCCEEDED);
    CHECK((b.second_phase().outcome() == v1::OUTCOME_EXECUTED ||
           b.second_phase().outcome() == v1::OUTCOME_EMPTY_ROLLBACK));
  }
  CHECK(BalanceOf(c, "bank-a", 3) == 1000);
  CHECK(BalanceOf(c, "bank-b", 4) == 1000);
  CHECK(BalanceOf(c, "bank-a", 5) == 1000);
  CHECK_OK(c.CheckFinal({req.gid()}, 10000));
}

TEST_CASE("duplicate Submit is answered once; same gid other content refused") {
  BankCluster c(Options("dup"));
  REQUIRE(c.Start().ok());
  auto req = c.Transfer("bank-a", 6, "bank-b", 7, 10);
  auto first = c.client().Submit(req);
  REQUIRE(first.ok());
  CHECK(!first->duplicate());
  auto again = c.client().Submit(req);  // same gid, created_at, content
  REQUIRE(again.ok());
  CHECK(again->duplicate());
  CHECK(again->transaction().state() == v1::TXN_STATE_CONFIRMED);
  CHECK(BalanceOf(c, "bank-a", 6) == 990);  // moved once, not twice

  auto other = req;
  other.mutable_branches(0)->set_payload("6:11");
  auto conflict = c.client().Submit(other);
  CHECK(conflict.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(BalanceOf(c, "bank-a", 6) == 990);
}

TEST_CASE("a duplicate Submit after a restart is answered from the log") {
  // The restarted tccd holds nothing of the gid in memory (on etcd its log
  // has no view of it either, so its create's read is blind and the
  // registration finds the gid): the first answer all the same.
  BankCluster c(Options("dup-restart"));
  REQUIRE(c.Start().ok());
  auto done = c.Transfer("bank-a", 3, "bank-b", 4, 10);
  REQUIRE(c.client().Submit(done).ok());
  REQUIRE(c.CheckFinal({done.gid()}, 30000).ok());
  auto stopped = c.StopTccd();
  REQUIRE(stopped.ok());
  REQUIRE(c.StartTccd().ok());
  auto again = c.client().Submit(done);
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  CHECK(again->duplicate());
  CHECK(again->transaction().state() == v1::TXN_STATE_CONFIRMED);
  auto other = done;
  other.mutable_branches(0)->set_payload("3:11");
  CHECK(c.client().Submit(other).status().code() ==
        absl::StatusCode::kAlreadyExists);
  CHECK(BalanceOf(c, "bank-a", 3) == 990);  // moved once
  // A new gid after the restart goes through as usual.
  auto fresh = c.Transfer("bank-a", 3, "bank-b", 4, 10);
  auto made = c.client().Submit(fresh);
  REQUIRE(made.ok());
  CHECK(!made->duplicate());
  REQUIRE(c.CheckFinal({fresh.gid()}, 30000).ok());
  CHECK(BalanceOf(c, "bank-a", 3) == 980);
}

TEST_CASE("interactive mode: commit, expected ids, and an expired OPEN") {
  BankCluster c(Options("interactive"));
  REQUIRE(c.Start().ok());
  v1::BeginRequest begin;
  begin.set_timeout_ms(20000);
  REQUIRE(c.client().Begin(begin).ok());
  v1::TryRequest t;
  t.set_gid(begin.gid());
  t.mutable_branch()->set_branch_id("d");
  t.mutable_branch()->set_participant("bank-a");
  t.mutable_branch()->set_action("debit");
  t.mutable_branch()->set_payload("8:40");
  auto tried = c.client().Try(t);
  REQUIRE(tried.ok());
  CHECK(tried->branch().try_phase().state() == v1::PHASE_STATE_SUCCEEDED);
  auto dup = c.client().Try(t);
  REQUIRE(dup.ok());
  CHECK(dup->duplicate());
  auto changed = t;
  changed.mutable_branch()->set_payload("8:41");
  CHECK(c.client().Try(changed).status().code() ==
        absl::StatusCode::kAlreadyExists);

  v1::TryRequest credit = t;
  credit.mutable_branch()->set_branch_id("c");
  credit.mutable_branch()->set_participant("bank-b");
  credit.mutable_branch()->set_action("credit");
  credit.mutable_branch()->set_payload("8:40");
  REQUIRE(c.client().Try(credit).ok());

  v1::CommitRequest wrong;
  wrong.set_gid(begin.gid());
  wrong.add_expected_branch_ids("d");
  wrong.add_expected_branch_ids("missing");
  auto refused = c.client().Commit(wrong);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(refused.status().message().find("d") != absl::string_view::npos);

  v1::CommitRequest commit;
  commit.set_gid(begin.gid());
  commit.add_expected_branch_ids("c");
  commit.add_expected_branch_ids("d");
  auto done = c.client().Commit(commit);
  REQUIRE(done.ok());
  CHECK(done->transaction().state() == v1::TXN_STATE_CONFIRMED);
  auto again = c.client().Commit(commit);  // idempotent
  REQUIRE(again.ok());
  CHECK(again->transaction().state() == v1::TXN_STATE_CONFIRMED);
  v1::RollbackRequest rollback;
  rollback.set_gid(begin.gid());
  CHECK(c.client().Rollback(rollback).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(BalanceOf(c, "bank-a", 8) == 960);
  CHECK(BalanceOf(c, "bank-b", 8) == 1040);

  // An OPEN transaction whose deadline passes is cancelled, its reservation
  // released.
  v1::BeginRequest short_begin;
  short_begin.set_timeout_ms(800);
  REQUIRE(c.client().Begin(short_begin).ok());
  v1::TryRequest t2 = t;
  t2.set_gid(short_begin.gid());
  t2.mutable_branch()->set_payload("9:50");
  auto tried2 = c.client().Try(t2);
  REQUIRE(tried2.ok());
  auto totals = c.Totals("bank-a");
  REQUIRE(totals.ok());
  CHECK(totals->frozen() == 50);
  CHECK_OK(c.CheckFinal({begin.gid(), short_begin.gid()}, 20000));
  auto view = c.client().Get(short_begin.gid());
  REQUIRE(view.ok());
  CHECK(view->state() == v1::TXN_STATE_CANCELLED);
  CHECK(BalanceOf(c, "bank-a", 9) == 1000);
}

TEST_CASE("bad input is refused with the right status and changes nothing") {
  BankCluster c(Options("bad"));
  REQUIRE(c.Start().ok());
  auto client = c.NewClient(1, 5000);
  auto code = [&](v1::SubmitRequest req) {
    return client->Submit(req).status().code();
  };
  auto base = c.Transfer("bank-a", 1, "bank-b", 2, 1);
  {
    auto r = base;
    r.set_gid("bad gid!");
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.set_gid(std::string(129, 'g'));
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.mutable_branches(0)->set_participant("bank-z");
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.mutable_branches(0)->set_participant("10.1.2.3:80");
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.mutable_branches(1)->set_branch_id("debit");  // duplicate id
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.mutable_branches(0)->set_payload(std::string(64 * 1024 + 1, 'x'));
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.mutable_branches(0)->set_payload(std::string(1100 * 1024, 'x'));
    CHECK(code(r) == absl::StatusCode::kResourceExhausted);  // > 1 MiB
  }
  {
    auto r = base;
    r.clear_branches();
    for (int i = 0; i < 65; ++i) {
      auto* b = r.add_branches();
      b->set_branch_id("b" + std::to_string(i));
      b->set_participant("bank-a");
      b->set_action("credit");
      b->set_payload("1:1");
    }
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.clear_branches();
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    v1::SubmitRequest r = base;
    r.set_gid("g-explicit");
    r.set_created_at_ms(-5);
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.set_approval_gate(true);  // no admin credential configured here
    CHECK(code(r) == absl::StatusCode::kFailedPrecondition);
  }
  {
    // A client clock far ahead (here the furthest possible) is refused: kept,
    // it would one day move the deduplication horizon past every client.
    auto r = base;
    r.set_gid("g-future");
    r.set_created_at_ms(std::numeric_limits<int64_t>::max());
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  {
    auto r = base;
    r.set_wait_for(static_cast<v1::WaitFor>(9));
    CHECK(code(r) == absl::StatusCode::kInvalidArgument);
  }
  v1::CommitRequest commit;
  commit.set_gid("never-seen");
  CHECK(client->Commit(commit).status().code() == absl::StatusCode::kNotFound);
  commit.set_wait_for(static_cast<v1::WaitFor>(9));
  CHECK(client->Commit(commit).status().code() ==
        absl::StatusCode::kInvalidArgument);
  v1::RollbackRequest rollback;
  rollback.set_gid("never-seen");
  CHECK(client->Rollback(rollback).status().code() ==
        absl::StatusCode::kNotFound);
  rollback.set_wait_for(static_cast<v1::WaitFor>(-1));
  CHECK(client->Rollback(rollback).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->Get("never-seen").status().code() ==
        absl::StatusCode::kNotFound);
  // Nothing moved, nothing frozen.
  CHECK_OK(c.CheckFinal({}, 5000));
}

TEST_CASE("a participant down at Try: unknown, then resolved by Query") {
  // bank-b commits the Try, then dies before replying (failpoint). tccd does
  // not know the outcome; after bank-b restarts, Query says TRIED, so tccd
  // confirms: no double Try, the money moves once.
  ClusterOptions o = Options("query");
  o.bank_env["bank-b"] = {
      {"TCC_FAILPOINTS", "participant.after_commit=crash@1"}};

  BankCluster c(o);
  REQUIRE(c.Start().ok());
  auto req = c.Transfer("bank-a", 10, "bank-b", 11, 70);
  req.set_try_timeout_ms(30000);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  auto r = c.client().Submit(req);
  REQUIRE(r.ok());
  auto status = c.bank("bank-b")->Wait(20000);  // it crashes at the failpoint
  REQUIRE(status.ok());
  CHECK(WIFSIGNALED(*status));
  c.KillBank("bank-b");
  c.SetBankEnv("bank-b", {});  // restart without the failpoint
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK_OK(c.CheckFinal({req.gid()}, 30000));
  auto view = c.client().Get(req.gid());
  REQUIRE(view.ok());
  CHECK(view->state() == v1::TXN_STATE_CONFIRMED);
  CHECK(BalanceOf(c, "bank-a", 10) == 930);
  CHECK(BalanceOf(c, "bank-b", 11) == 1070);
}

TEST_CASE("a participant down at Try past the deadline: Cancel") {
  BankCluster c(Options("deadline"));
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");
  auto req = c.Transfer("bank-a", 12, "bank-b", 13, 30);
  req.set_try_timeout_ms(1500);
  req.set_wait_for(v1::WAIT_FOR_DECIDED);
  auto r = c.client().Submit(req);
  REQUIRE(r.ok());
  CHECK(r->transaction().decision() == v1::DECISION_CANCEL);
  REQUIRE(c.StartBank("bank-b").ok());  // the Cancel reaches it now
  CHECK_OK(c.CheckFinal({req.gid()}, 30000));
  CHECK(BalanceOf(c, "bank-a", 12) == 1000);
  CHECK(BalanceOf(c, "bank-b", 13) == 1000);
}

TEST_CASE("a Try that never arrived: Query says NOT_FOUND, Try is re-sent") {
  // bank-b is down when the transaction starts: the Try's outcome is unknown
  // (it may or may not have arrived). Once bank-b is back, the lookup finds
  // nothing, so tccd re-sends the Try under the same key, before the
  // try-deadline, and the transfer confirms.
  BankCluster c(Options("notfound"));
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");
  auto req = c.Transfer("bank-a", 18, "bank-b", 19, 15);
  req.set_try_timeout_ms(60000);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  REQUIRE(c.client().Submit(req).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  auto mid = c.client().Get(req.gid());
  REQUIRE(mid.ok());
  CHECK(mid->state() == v1::TXN_STATE_TRYING);
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK_OK(c.CheckFinal({req.gid()}, 45000));
  auto view = c.client().Get(req.gid());
  REQUIRE(view.ok());
  CHECK(view->state() == v1::TXN_STATE_CONFIRMED);
  CHECK(BalanceOf(c, "bank-b", 19) == 1015);
}

TEST_CASE("a participant down during Confirm is retried until it is back") {
  // bank-b dies right after committing its Confirm (2nd call there), before
  // replying; tccd keeps re-sending Confirm; after the restart the barrier
  // replays the stored answer.
  ClusterOptions o = Options("confirm");
  o.bank_env["bank-b"] = {
      {"TCC_FAILPOINTS", "participant.after_commit=crash@2"}};
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  auto req = c.Transfer("bank-a", 14, "bank-b", 15, 20);
  req.set_wait_for(v1::WAIT_FOR_DECIDED);
  auto r = c.client().Submit(req);
  REQUIRE(r.ok());
  CHECK(r->transaction().decision() == v1::DECISION_CONFIRM);
  auto status = c.bank("bank-b")->Wait(20000);
  REQUIRE(status.ok());
  c.KillBank("bank-b");
  c.SetBankEnv("bank-b", {});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto mid = c.client().Get(req.gid());
  REQUIRE(mid.ok());
  CHECK(mid->state() == v1::TXN_STATE_CONFIRMING);
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK_OK(c.CheckFinal({req.gid()}, 30000));
  CHECK(BalanceOf(c, "bank-b", 15) == 1020);
}

TEST_CASE(
    "tccd killed with kill -9 mid-flight, restarted: all final, money "
    "conserved") {
  BankCluster c(Options("kill9"));
  REQUIRE(c.Start().ok());
  std::mutex mu;
  std::vector<std::string> gids;
  std::atomic<bool> stop{false};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      std::mt19937 rng(t);
      auto client = c.NewClient(20, 5000);
      while (!stop) {
        const bool a_to_b = rng() % 2;
        auto req = c.Transfer(a_to_b ? "bank-a" : "bank-b", rng() % 20,
                              a_to_b ? "bank-b" : "bank-a", rng() % 20,
                              1 + rng() % 50);
        req.set_gid("k9-" + std::to_string(t) + "-" + std::to_string(rng()));
        req.set_created_at_ms(0);
        {
          std::lock_guard<std::mutex> lock(mu);
          gids.push_back(req.gid());
        }
        (void)client->Submit(req);  // may fail while tccd is down
      }
    });
  }
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    c.KillTccd();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(c.StartTccd().ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  for (auto& t : callers) t.join();
  // Some gids never reached tccd (submitted while it was down, retries
  // exhausted): they are unknown to it, which is fine; every known one must
  // end.
  std::vector<std::string> known;
  auto checker = c.NewClient(3, 5000);
  for (const auto& g : gids) {
    auto v = checker->Get(g);
    if (v.ok()) known.push_back(g);
  }
  INFO(known.size() << " of " << gids.size() << " transactions reached tccd");
  CHECK(known.size() > 10);
  absl::Status final_check = c.CheckFinal(known, 60000);
  INFO(final_check.ToString());
  CHECK(final_check.ok());
}

TEST_CASE("SIGTERM stops tccd cleanly; a restart serves what it had") {
  BankCluster c(Options("sigterm"));
  REQUIRE(c.Start().ok());
  auto req = c.Transfer("bank-a", 16, "bank-b", 17, 5);
  REQUIRE(c.client().Submit(req).ok());
  auto status = c.StopTccd(30000);
  REQUIRE(status.ok());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  REQUIRE(c.StartTccd().ok());
  auto view = c.client().Get(req.gid());
  REQUIRE(view.ok());
  CHECK(view->state() == v1::TXN_STATE_CONFIRMED);
  CHECK_OK(c.CheckFinal({req.gid()}, 10000));
}

TEST_CASE("PostgreSQL banks: transfers through kill -9 of tccd, all final",
          "[postgres]") {
  ClusterOptions o = Options("pg");
  o.store = "postgres";
  o.pg_url = PostgresUrl();
  // Unique names: each is a schema in the shared test database.
  const std::string suffix = std::to_string(::getpid());
  o.banks = {"bank-pa-" + suffix, "bank-pb-" + suffix};
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  std::vector<std::string> gids;
  for (int i = 0; i < 10; ++i) {
    auto req =
        c.Transfer(o.banks[i % 2], i, o.banks[(i + 1) % 2], i + 1, 10 + i);
    req.set_wait_for(i < 5 ? v1::WAIT_FOR_FINISHED : v1::WAIT_FOR_ACCEPTED);
    auto r = c.client().Submit(req);
    REQUIRE(r.ok());
    gids.push_back(req.gid());
    if (i == 7) {
      c.KillTccd();
      REQUIRE(c.StartTccd().ok());
    }
  }
  auto rejected = c.Transfer(o.banks[0], 2, o.banks[1], 3, 1000000);
  auto r = c.client().Submit(rejected);
  REQUIRE(r.ok());
  CHECK(r->transaction().state() == v1::TXN_STATE_CANCELLED);
  gids.push_back(rejected.gid());
  CHECK_OK(c.CheckFinal(gids, 60000));
}

TEST_CASE("limits.max_in_flight: new transactions beyond it are refused") {
  ClusterOptions o = Options("inflight");
  const std::string config = o.root_dir + "/tccd.yaml";
  {
    std::ofstream out(config);
    out << "limits:\n  max_in_flight: 2\n";
  }
  o.tccd_args = {"--config", config};
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");  // nothing can finish while bank-b is down
  auto client = c.NewClient(1, 5000);
  std::vector<std::string> gids;
  for (int i = 0; i < 2; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    req.set_try_timeout_ms(60000);
    REQUIRE(client->Submit(req).ok());
    gids.push_back(req.gid());
  }
  auto third = c.Transfer("bank-a", 3, "bank-b", 3, 1);
  third.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  auto refused = client->Submit(third);
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(client->Get(third.gid()).status().code() ==
        absl::StatusCode::kNotFound);
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK_OK(c.CheckFinal(gids, 45000));
}

TEST_CASE("a Submit whose deadline the WAL's queue cannot meet is shed") {
  ClusterOptions o = Options("shed");
  // Every WAL sync (on etcd: every group commit's Txn) takes 300 ms: a
  // registration is durable after that.
  o.tccd_env = {
      {"TCC_FAILPOINTS", tcc::harness::EtcdFromEnvironment().endpoints.empty()
                             ? "wal.before_sync=sleep(300)"
                             : "etcd_log.before_txn=sleep(300)"}};
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  auto client = c.NewClient(1, 10000);
  for (int i = 0; i < 12; ++i) {  // tccd learns how long appends take
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    REQUIRE(client->Submit(req).ok());
  }
  auto stub = v1::Coordinator::NewStub(c.TccdChannel());
  auto req = c.Transfer("bank-a", 13, "bank-b", 13, 1);
  req.set_gid("shed-1");
  req.set_created_at_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(100));
  v1::SubmitResponse resp;
  const grpc::Status st = stub->Submit(&ctx, req, &resp);
  INFO(st.error_message());
  // Refused at once (not a timeout that leaves the outcome unknown), and
  // nothing was written.
  CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(client->Get("shed-1").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("configured request limits are the ones enforced") {
  ClusterOptions o = Options("limits");
  const std::string config = o.root_dir + "/tccd.yaml";
  {
    std::ofstream out(config);
    out << "transactions:\n  max_try_timeout_ms: 3600000\n"
           "  max_clock_skew_ms: 1000\n"
           "limits:\n  max_list_page: 3\n";
  }
  o.tccd_args = {"--config", config};
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  auto client = c.NewClient(1, 5000);
  // A try-timeout over the built-in 10 minutes, under the configured hour.
  std::vector<std::string> gids;
  for (int i = 0; i < 4; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    req.set_try_timeout_ms(20 * 60 * 1000);
    auto r = client->Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    gids.push_back(req.gid());
  }
  auto too_long = c.Transfer("bank-a", 5, "bank-b", 5, 1);
  too_long.set_try_timeout_ms(3600001);
  CHECK(client->Submit(too_long).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // created_at more than a second ahead of tccd's clock.
  auto ahead = c.Transfer("bank-a", 6, "bank-b", 6, 1);
  ahead.set_gid("g-ahead");
  ahead.set_created_at_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() +
      60 * 1000);
  CHECK(client->Submit(ahead).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->Get(ahead.gid()).status().code() ==
        absl::StatusCode::kNotFound);

  auto stub = v1::Coordinator::NewStub(c.TccdChannel());
  {
    // No page size: the default page fits the configured limit.
    grpc::ClientContext ctx;
    v1::ListRequest list;
    v1::ListResponse page;
    grpc::Status st = stub->List(&ctx, list, &page);
    INFO(st.error_message());
    REQUIRE(st.ok());
    CHECK(page.transactions_size() == 3);
    CHECK_FALSE(page.next_page_token().empty());
  }
  {
    grpc::ClientContext ctx;
    v1::ListRequest list;
    list.set_page_size(4);
    v1::ListResponse page;
    CHECK(stub->List(&ctx, list, &page).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // Older than the clock itself: nothing (the subtraction must not wrap).
    grpc::ClientContext ctx;
    v1::ListRequest list;
    list.set_min_age_ms(std::numeric_limits<uint64_t>::max());
    v1::ListResponse page;
    REQUIRE(stub->List(&ctx, list, &page).ok());
    CHECK(page.transactions_size() == 0);
  }
  CHECK_OK(c.CheckFinal(gids, 20000));
}

TEST_CASE("Watch streams a transaction's changes; List finds it") {
  BankCluster c(Options("watch"));
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");  // so the transaction waits in TRYING for a while
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 3);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  req.set_try_timeout_ms(60000);
  REQUIRE(c.client().Submit(req).ok());
  std::vector<v1::TxnState> states;
  std::thread restarter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    REQUIRE(c.StartBank("bank-b").ok());
  });
  auto watcher = c.NewClient(1, 60000);
  absl::Status s = watcher->Watch(req.gid(), [&](const v1::TransactionView& v) {
    states.push_back(v.state());
    return true;
  });
  restarter.join();
  CHECK(s.ok());
  REQUIRE(!states.empty());
  CHECK(states.front() == v1::TXN_STATE_TRYING);
  CHECK(states.back() == v1::TXN_STATE_CONFIRMED);
  CHECK(std::find(states.begin(), states.end(), v1::TXN_STATE_CONFIRMING) !=
        states.end());
  CHECK(watcher
            ->Watch("no-such-gid",
                    [](const v1::TransactionView&) { return true; })
            .code() == absl::StatusCode::kNotFound);

  auto stub = v1::Coordinator::NewStub(c.TccdChannel());
  grpc::ClientContext ctx;
  v1::ListRequest list;
  list.add_states(v1::TXN_STATE_CONFIRMED);
  list.set_participant("bank-b");
  v1::ListResponse page;
  REQUIRE(stub->List(&ctx, list, &page).ok());
  bool found = false;
  for (const auto& t : page.transactions()) found |= t.gid() == req.gid();
  CHECK(found);
  grpc::ClientContext ctx2;
  v1::ListRequest none;
  none.add_states(v1::TXN_STATE_OPEN);
  v1::ListResponse empty;
  REQUIRE(stub->List(&ctx2, none, &empty).ok());
  CHECK(empty.transactions_size() == 0);
}
