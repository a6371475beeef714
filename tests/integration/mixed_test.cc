// Participants in two languages behind one tccd (issue 22): a C++ bank
// (tcc-bank, gRPC, RocksDB) and a Python bank (the Python SDK's example,
// HTTP/JSON, PostgreSQL or SQLite), all real processes on 127.0.0.1.
//
//   - the harness's load over the pair, with kill -9 of tccd and of the
//     Python bank in the middle: every transaction final, all branches
//     confirmed or all cancelled, money conserved, nothing frozen, and each
//     account's balance exactly what the confirmed transfers imply (each
//     applied once);
//   - over 1,000 calls the Python bank sees no more connections than tccd's
//     pool for it (participants.NAME.connections);
//   - HTTPS with mutual TLS to the Python bank, and a wrong CA refused;
//   - the Python initiator client (Submit, Get, wait, retries, the
//     created_at rule) against the same tccd.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "http_get.h"
#include "pg_env.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;
using tcc::harness::ProcessOptions;

using tcc::testing::PostgresUrl;

// bank-a in C++ (gRPC, RocksDB), `python` in Python over `protocol`.
ClusterOptions Mixed(const std::string& name, const std::string& python,
                     const std::string& store, const std::string& protocol) {
  ClusterOptions o;
  o.root_dir = tcc::harness::MakeTempDir("tccd-mixed-" + name);
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.banks = {"bank-a", python};
  o.accounts = 20;
  o.initial_balance = 1000;
  o.python_banks[python] = {.protocol = protocol, .store = store};
  o.python_bank_script = TCC_PY_BANK;
  o.python_path = TCC_PY_PATH;
  return o;
}

int64_t MetricValue(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      return static_cast<int64_t>(std::stod(line.substr(series.size() + 1)));
    }
  }
  return -1;
}

// The sum of every series of the family `name` on a metrics page.
int64_t FamilySum(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  int64_t sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) {
      sum += static_cast<int64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
    }
  }
  return sum;
}

}  // namespace

TEST_CASE(
    "a C++ and a Python bank under load, kill -9 of tccd and of the "
    "Python bank: all final, each transfer applied once",
    "[postgres]") {
  const std::string py = "bank-py-" + std::to_string(::getpid());
  ClusterOptions o = Mixed("drill", py, "postgres", "http");
  o.pg_url = PostgresUrl();
  o.metrics = true;
  BankCluster c(o);
  REQUIRE_OK(c.Start());

  struct Sent {
    std::string from_bank, to_bank;
    uint32_t from, to;
    int64_t amount;
  };
  std::mutex mu;
  std::map<std::string, Sent> sent;  // by gid
  std::set<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto client = c.NewClient(8, 20000);
      std::mt19937 rng(t + 1);
      while (!stop) {
        const bool forward = rng() % 2 == 0;
        Sent s{forward ? "bank-a" : py, forward ? py : "bank-a",
               static_cast<uint32_t>(rng() % o.accounts),
               static_cast<uint32_t>(rng() % o.accounts),
               // Now and then more than an account holds: refused, cancelled.
               rng() % 10 == 0 ? 5000 : 1 + static_cast<int64_t>(rng() % 40)};
        auto req = c.Transfer(s.from_bank, s.from, s.to_bank, s.to, s.amount);
        req.set_gid(tcc::client::CoordinatorClient::NewGid());
        {
          std::lock_guard<std::mutex> lock(mu);
          sent[req.gid()] = s;
        }
        auto r = client->Submit(req);  // retried (same gid) through the kills
        if (r.ok()) {
          ++answered;
          std::lock_guard<std::mutex> lock(mu);
          acknowledged.insert(req.gid());
        }
      }
    });
  }
  auto wait_answers = [&](int n) {
    for (int i = 0; i < 600 && answered < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  wait_answers(30);
  c.KillTccd();  // kill -9 mid-load
  REQUIRE_OK(c.StartTccd());
  wait_answers(answered + 30);
  c.KillBank(py);  // kill -9 of the Python bank mid-load, then back
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE_OK(c.StartBank(py));
  wait_answers(answered + 30);
  // Once more, dying between a commit and its reply.
  c.SetBankEnv(py, {{"TCC_FAILPOINTS", "participant.after_commit=crash@7"}});
  c.KillBank(py);
  REQUIRE_OK(c.StartBank(py));
  for (int i = 0; i < 200 && c.bank(py)->Running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(!c.bank(py)->Running());  // it died at the failpoint
  c.SetBankEnv(py, {});
  REQUIRE_OK(c.StartBank(py));
  wait_answers(answered + 30);
  stop = true;
  for (auto& t : clients) t.join();

  // Every transfer tccd has must end final; one whose Submit its client gave
  // up on may never have reached tccd (NOT_FOUND), never one it
  // acknowledged (as BankLoad::Check).
  std::vector<std::string> gids;
  auto reader = c.NewClient(3, 5000);
  for (const auto& [gid, s] : sent) {
    auto view = reader->Get(gid);
    if (view.ok()) {
      gids.push_back(gid);
      continue;
    }
    INFO(gid << ": " << view.status().ToString());
    REQUIRE(view.status().code() == absl::StatusCode::kNotFound);
    REQUIRE(acknowledged.count(gid) == 0);
  }
  INFO(sent.size() << " transfers, " << answered << " answered, " << gids.size()
                   << " known to tccd");
  REQUIRE(gids.size() >= 100);
  REQUIRE_OK(c.CheckFinal(gids, 90000));

  // Exactly once: each account holds what the confirmed transfers imply.
  std::map<std::pair<std::string, uint32_t>, int64_t> expected;
  int confirmed = 0, cancelled = 0;
  auto checker = c.NewClient(3, 5000);
  for (const auto& [gid, s] : sent) {
    auto view = checker->Get(gid);
    if (!view.ok()) {
      // A Submit that never reached tccd (its client gave up first).
      REQUIRE(view.status().code() == absl::StatusCode::kNotFound);
      continue;
    }
    if (view->state() == v1::TXN_STATE_CONFIRMED) {
      ++confirmed;
      expected[{s.from_bank, s.from}] -= s.amount;
      expected[{s.to_bank, s.to}] += s.amount;
    } else {
      ++cancelled;
    }
  }
  INFO(confirmed << " confirmed, " << cancelled << " cancelled");
  CHECK(confirmed > 0);
  CHECK(cancelled > 0);
  for (const std::string& bank : o.banks) {
    for (uint32_t a = 0; a < o.accounts; ++a) {
      auto acct = c.Account(bank, a);
      REQUIRE(acct.ok());
      INFO(bank << "/" << a);
      CHECK(acct->balance() == o.initial_balance + expected[{bank, a}]);
      CHECK(acct->frozen() == 0);
      CHECK(acct->incoming() == 0);
    }
  }
}

TEST_CASE(
    "over 1,000 calls the Python bank sees no more connections than "
    "tccd's pool for it") {
  ClusterOptions o = Mixed("pool", "bank-py", "sqlite", "http");
  const std::string config = o.root_dir + "/pool.yaml";
  std::filesystem::create_directories(o.root_dir);
  {
    std::ofstream out(config);
    out << "participant_calls:\n  http_connections: 3\n";
  }
  o.tccd_args = {"--config", config};
  o.metrics = true;
  o.accounts = 100;
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  // The connections the bank accepted before the load (the harness's own
  // included, and this GET's).
  auto before = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl(c.bank_port("bank-py"), "/metrics"), 5000);
  REQUIRE(before.ok());
  const int64_t connections_before =
      MetricValue(*before, "tcc_participant_http_connections_total");
  REQUIRE(connections_before >= 1);
  std::vector<std::string> gids;
  std::mutex mu;
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      auto client = c.NewClient();
      for (int i = 0; i < 32; ++i) {
        auto req = c.Transfer("bank-a", (t * 32 + i) % 100, "bank-py",
                              (t + i) % 100, 1);
        auto r = client->Submit(req);
        if (!r.ok() || r->transaction().state() != v1::TXN_STATE_CONFIRMED) {
          ++failed;
        }
        std::lock_guard<std::mutex> lock(mu);
        gids.push_back(req.gid());
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(failed == 0);
  REQUIRE(gids.size() == 512);  // a Try and a Confirm each at bank-py: 1,024
  // Read before CheckFinal, whose reads of the bank open connections of
  // their own (each Submit above waited until its transaction finished).
  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl(c.bank_port("bank-py"), "/metrics"), 5000);
  REQUIRE(page.ok());
  REQUIRE_OK(c.CheckFinal(gids, 60000));
  const int64_t calls =
      MetricValue(
          *page,
          R"(tcc_participant_calls_total{operation="try",outcome="executed",replayed="false"})") +
      MetricValue(
          *page,
          R"(tcc_participant_calls_total{operation="confirm",outcome="executed",replayed="false"})");
  CHECK(calls >= 1024);
  // tccd's totals are sampled (every 250 ms): read until they show the
  // requests, a bounded number of times.
  const std::string requests_series =
      R"(tccd_participant_rpcs{kind="http_requests"})";
  std::string tccd_page;
  for (int i = 0; i < 100; ++i) {
    auto got = tcc::testing::HttpGet(
        tcc::testing::LoopbackUrl(c.tccd_metrics_port(), "/metrics"), 5000);
    REQUIRE(got.ok());
    tccd_page = *got;
    if (MetricValue(tccd_page, requests_series) >= 1024) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(tccd_page);
  CHECK(MetricValue(tccd_page, requests_series) >= 1024);
  // A call that runs out of time closes its connection (its answer may
  // still come on it): on a loaded machine a few do, each an unknown
  // outcome. Beyond those, nothing opens a connection past the pool's 3.
  const int64_t timed_out = FamilySum(tccd_page, "tccd_unknown_outcomes_total");
  const int64_t opened = MetricValue(
      tccd_page, R"(tccd_participant_rpcs{kind="http_connections_opened"})");
  CHECK(opened >= 1);
  CHECK(opened <= 3 + timed_out);
  // The connections it accepted during the load: tccd's, at most 3, and
  // this GET's.
  const int64_t connections =
      MetricValue(*page, "tcc_participant_http_connections_total") -
      connections_before;
  INFO(*page);
  CHECK(connections >= 1);
  CHECK(connections <= 3 + timed_out + 1);
}

TEST_CASE("HTTPS with mutual TLS to a Python bank; a wrong CA is refused") {
  ClusterOptions o = Mixed("tls", "bank-py", "sqlite", "http");
  o.tls.enabled = true;
  o.tls.listener_mode = "tls";
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  auto ok = c.Transfer("bank-a", 1, "bank-py", 2, 30);
  auto r = c.client().Submit(ok);
  REQUIRE(r.ok());
  CHECK(r->transaction().state() == v1::TXN_STATE_CONFIRMED);
  auto b = c.Account("bank-py", 2);
  REQUIRE(b.ok());
  CHECK(b->balance() == 1030);

  // tccd trusting another CA for the Python bank: the handshake fails, the
  // Try is unknown until its deadline, then the transfer is cancelled.
  tcc::harness::ClusterTls wrong = o.tls;
  wrong.participant_ca_file["bank-py"] = c.pki()->other_ca_file();
  c.SetTccdTls(wrong);
  c.KillTccd();
  REQUIRE_OK(c.StartTccd());
  auto refused = c.Transfer("bank-a", 3, "bank-py", 4, 10);
  refused.set_try_timeout_ms(1500);
  refused.set_wait_for(v1::WAIT_FOR_DECIDED);
  auto client = c.NewClient();
  auto rr = client->Submit(refused);
  REQUIRE(rr.ok());
  CHECK(rr->transaction().decision() == v1::DECISION_CANCEL);
  b = c.Account("bank-py", 4);
  REQUIRE(b.ok());
  CHECK(b->incoming() == 0);  // the Try never reached it
  // Its Cancel cannot reach the bank either, and waits; with the right CA
  // again it goes through and the transfer finishes cancelled.
  c.SetTccdTls(o.tls);
  c.KillTccd();
  REQUIRE_OK(c.StartTccd());
  REQUIRE_OK(c.CheckFinal({ok.gid(), refused.gid()}, 30000));
  auto a = c.Account("bank-a", 3);
  REQUIRE(a.ok());
  CHECK(a->balance() == 1000);
  CHECK(a->frozen() == 0);
}

TEST_CASE("the Python initiator client against tccd") {
  ClusterOptions o = Mixed("client", "bank-py", "sqlite", "grpc");
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  auto p = Process::Start(ProcessOptions{
      {"/usr/bin/python3", TCC_PY_CLIENT_CHECK, "--tccd",
       absl::StrCat("127.0.0.1:", c.tccd_port()), "--bank-a", "bank-a",
       "--bank-b", "bank-py"},
      {{"PYTHONPATH", TCC_PY_PATH}, {"PYTHONDONTWRITEBYTECODE", "1"}},
      o.root_dir + "/py-client.log",
      "py-client"});
  REQUIRE(p.ok());
  auto status = (*p)->Wait(60000);
  REQUIRE(status.ok());
  INFO((*p)->Output());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK((*p)->Output().find("py-client: ok") != std::string::npos);
}
