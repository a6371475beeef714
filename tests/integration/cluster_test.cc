// tccd in cluster mode on etcd (DESIGN.md section 14), end to end: real tccd,
// tcc-bank and etcd processes. The etcd counterparts of the RocksDB-only
// daemon tests: etcd unreachable (no exit; it resumes), etcd out of space
// (registrations refused, nothing lost), another etcd under the cluster's
// prefix (DATA_LOSS, exit 3); and the cluster's creation and its checks.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bank_cluster.h"
#include "etcd_test_env.h"
#include "process.h"
#include "tcc/client/coordinator_client.h"
#include "tcc/etcd/client.h"
#include "tcc/wal/etcd_membership.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::etcd::testing::EtcdCluster;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;
using tcc::harness::ProcessOptions;

ClusterOptions Options(const std::string& name,
                       const std::vector<std::string>& endpoints) {
  ClusterOptions o;
  o.root_dir = tcc::harness::MakeTempDir("tccd-cluster-" + name);
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  o.etcd.endpoints = endpoints;
  return o;
}

// A cluster config of its own for tccd run by hand.
std::string WriteConfig(const std::string& dir,
                        const std::vector<std::string>& endpoints,
                        const std::string& prefix, int shards) {
  const std::string path = dir + "/tccd.yaml";
  std::ofstream out(path);
  out << "data_dir: " << dir << "/data\nlisten: 127.0.0.1:0\n"
      << "metrics_listen: \"\"\ncluster:\n  enabled: true\n  node_id: n1\n"
      << "  advertise_address: 127.0.0.1:1\n  key_prefix: \"" << prefix
      << "\"\n  shards: " << shards << "\n  lease_ttl_ms: 2000\n"
      << "  lease_margin_ms: 500\n  etcd:\n    endpoints: ["
      << absl::StrJoin(endpoints, ", ") << "]\n";
  return path;
}

// Runs tccd to its end; its exit code and what it printed.
std::pair<int, std::string> RunTccd(std::vector<std::string> args,
                                    int64_t timeout_ms = 30000) {
  args.insert(args.begin(), TCC_TCCD_BIN);
  auto p = Process::Start(ProcessOptions{args, {}, "", "tccd"});
  REQUIRE(p.ok());
  auto status = (*p)->Wait(timeout_ms);
  if (!status.ok()) {
    (*p)->Kill();
    return {-1, (*p)->Output()};
  }
  return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, (*p)->Output()};
}

}  // namespace

TEST_CASE("a cluster is created once; a node refuses a prefix without one") {
  const std::vector<std::string> etcd =
      tcc::etcd::testing::SharedEtcdEndpoints();
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-init");
  const tcc::harness::Cleanup cleanup{dir};
  const std::string prefix = tcc::etcd::testing::UniqueKeyPrefix("init");
  const std::string config = WriteConfig(dir, etcd, prefix, 4);
  // No cluster there yet: refused (never taken for a new one).
  auto [code, out] = RunTccd({"--config", config});
  CHECK(code != 0);
  CHECK_THAT(out, Catch::Contains("--init-cluster"));
  auto [made, made_out] = RunTccd({"--config", config, "--init-cluster"});
  CHECK(made == 0);
  CHECK_THAT(made_out, Catch::Contains("4 shards"));
  auto [again, again_out] = RunTccd({"--config", config, "--init-cluster"});
  CHECK(again != 0);
  CHECK_THAT(again_out, Catch::Contains("exists already"));
  // Another shard count at start: refused, naming the key.
  const std::string other = WriteConfig(dir, etcd, prefix, 8);
  auto [refused, refused_out] = RunTccd({"--config", other});
  CHECK(refused == 2);
  CHECK_THAT(refused_out, Catch::Contains("cluster.shards"));
  // Without cluster mode --init-cluster says which key is off.
  auto [off, off_out] = RunTccd({"--init-cluster", "--data-dir", dir + "/x"});
  CHECK(off == 2);
  CHECK_THAT(off_out, Catch::Contains("cluster.enabled"));
}

TEST_CASE("etcd unreachable: tccd does not exit, and resumes when it is back") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start({.members = 1});
  REQUIRE(etcd.ok());
  BankCluster c(Options("unreachable", (*etcd)->endpoints()));
  REQUIRE(c.Start().ok());
  auto first = c.Transfer("bank-a", 1, "bank-b", 2, 10);
  REQUIRE(c.client().Submit(first).ok());
  REQUIRE((*etcd)->StopMember(1).ok());
  auto client = c.NewClient(1, 2000);
  auto during = c.Transfer("bank-a", 3, "bank-b", 4, 10);
  auto r = client->Submit(during);
  CHECK_FALSE(r.ok());  // nothing can be made durable
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  CHECK(c.tccd()->Running());  // no exit because etcd is unreachable
  REQUIRE((*etcd)->StartMember(1).ok());
  auto after = c.NewClient(20, 5000);
  auto later = c.Transfer("bank-a", 5, "bank-b", 6, 10);
  REQUIRE(after->Submit(later).ok());
  // The one submitted during the outage either never registered or ends.
  std::vector<std::string> known = {first.gid(), later.gid()};
  if (after->Get(during.gid()).ok()) known.push_back(during.gid());
  CHECK(c.CheckFinal(known, 60000).ok());
}

TEST_CASE("etcd out of space: registrations refused, nothing lost") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start({.members = 1, .quota_backend_bytes = 4 << 20});
  REQUIRE(etcd.ok());
  BankCluster c(Options("nospace", (*etcd)->endpoints()));
  REQUIRE(c.Start().ok());
  std::vector<std::string> done;
  for (int i = 0; i < 5; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    REQUIRE(c.client().Submit(req).ok());
    done.push_back(req.gid());
  }
  // Someone else fills etcd to its quota (its NOSPACE alarm goes on). etcd
  // checks the quota against its size as of its last backend commit (every
  // 100 ms), so the puts go on until one is refused (bounded: 64 MiB).
  absl::StatusOr<std::unique_ptr<tcc::etcd::Client>> filler =
      tcc::etcd::Client::Connect((*etcd)->Client());
  REQUIRE(filler.ok());
  absl::Status filled;
  for (int i = 0; i < 2048 && filled.ok(); ++i) {
    etcdserverpb::TxnRequest t;
    auto* put = t.add_success()->mutable_request_put();
    put->set_key("/filler/" + std::to_string(i));
    put->set_value(std::string(32 << 10, 'x'));
    filled = (*filler)->Txn(t).status();
  }
  INFO(filled.ToString());
  REQUIRE(tcc::etcd::IsNoSpace(filled));
  auto client = c.NewClient(1, 5000);
  auto late = c.Transfer("bank-a", 10, "bank-b", 10, 1);
  auto refused = client->Submit(late);
  INFO(refused.status().ToString());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(c.tccd()->Running());
  CHECK(c.CheckFinal(done, 30000).ok());
}

TEST_CASE("another etcd under the cluster's prefix is DATA_LOSS (exit 3)") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> first =
      EtcdCluster::Start({.members = 1});
  absl::StatusOr<std::unique_ptr<EtcdCluster>> second =
      EtcdCluster::Start({.members = 1});
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-moved");
  const tcc::harness::Cleanup cleanup{dir};
  const std::string prefix = "/tccd/";
  REQUIRE(
      RunTccd({"--config", WriteConfig(dir, (*first)->endpoints(), prefix, 4),
               "--init-cluster"})
          .first == 0);
  // The cluster record copied onto another etcd (a restore elsewhere, or a
  // replaced etcd): its cluster_id is not the one the record names.
  absl::StatusOr<std::unique_ptr<tcc::etcd::Client>> from =
      tcc::etcd::Client::Connect((*first)->Client());
  absl::StatusOr<std::unique_ptr<tcc::etcd::Client>> to =
      tcc::etcd::Client::Connect((*second)->Client());
  REQUIRE(from.ok());
  REQUIRE(to.ok());
  etcdserverpb::RangeRequest read;
  read.set_key(prefix);
  read.set_range_end("/tccd0");
  auto all = (*from)->Range(read);
  REQUIRE(all.ok());
  etcdserverpb::TxnRequest copy;
  for (const auto& kv : all->kvs()) {
    auto* put = copy.add_success()->mutable_request_put();
    put->set_key(kv.key());
    put->set_value(kv.value());
  }
  REQUIRE((*to)->Txn(copy).ok());
  auto [code, out] = RunTccd(
      {"--config", WriteConfig(dir, (*second)->endpoints(), prefix, 4)});
  CHECK(code == 3);
  CHECK_THAT(out, Catch::Contains("cluster_id"));
}

TEST_CASE(
    "the fence: a node paused past its lease writes nothing once "
    "another took its shards") {
  // Node 1 (the harness's tccd) on the fixture's etcd; the banks log every
  // call with its owner epoch.
  ClusterOptions options =
      Options("fence", tcc::etcd::testing::SharedEtcdEndpoints());
  options.bank_log_level = "debug";
  BankCluster c(options);
  REQUIRE(c.Start().ok());
  std::vector<std::string> gids;
  for (int i = 0; i < 4; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    REQUIRE(c.client().Submit(req).ok());
    gids.push_back(req.gid());
  }
  // Node 1's epochs: every shard's owner key is its own now. Every later
  // owner key (node 2's, node 1's after it joins again) is created later,
  // so its create revision, the epoch, is higher.
  uint64_t old_epoch = 0;
  {
    tcc::etcd::ClientOptions eo;
    eo.endpoints = c.etcd().endpoints;
    auto etcd = tcc::etcd::Client::Connect(eo);
    REQUIRE(etcd.ok());
    auto m =
        tcc::wal::ReadMembership(**etcd, c.etcd().key_prefix, c.etcd().shards);
    REQUIRE(m.ok());
    for (const auto& o : m->owners) {
      REQUIRE(o.has_value());
      CHECK(o->node_id == c.etcd().node_id);
      old_epoch = std::max(old_epoch, o->epoch);
    }
  }
  REQUIRE(old_epoch > 0);
  // Work in flight when node 1 is paused: bank-b answers every call
  // UNAVAILABLE (a failpoint; its connection stays up), so node 1 has
  // registered transfers whose bank-b calls it keeps re-sending.
  c.KillBank("bank-b");
  c.SetBankEnv("bank-b", {{"TCC_FAILPOINTS", "barrier.before_lock=error@1+"}});
  REQUIRE(c.StartBank("bank-b").ok());
  std::vector<std::string> in_flight;
  for (int i = 20; i < 23; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    auto r = c.client().Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    in_flight.push_back(req.gid());
    gids.push_back(req.gid());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (const std::string& gid : in_flight) {
    auto view = c.client().Get(gid);
    REQUIRE(view.ok());
    REQUIRE(view->state() != v1::TXN_STATE_CONFIRMED);
    REQUIRE(view->state() != v1::TXN_STATE_CANCELLED);
  }
  // Paused past its lease (2 s): node 2 takes every shard, with higher
  // epochs, once node 1's lease has expired. bank-b comes back without the
  // failpoint meanwhile: from its start on, node 1 may send it nothing of
  // its old epochs, not even the re-sends overdue when it wakes (past its
  // lease trust it sends no call; what it sent before the pause went to
  // the bank-b that is gone).
  c.tccd()->Signal(SIGSTOP);
  c.KillBank("bank-b");
  c.SetBankEnv("bank-b", {});
  REQUIRE(c.StartBank("bank-b").ok());
  std::string config;
  {
    std::ifstream in(c.tccd_config_path());
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string one = "node_id: " + c.etcd().node_id;
  const size_t at = config.find(one);
  REQUIRE(at != std::string::npos);
  config.replace(at, one.size(), "node_id: node-2");
  // Its own address: node 1 forwards to the address node 2 advertises.
  const int second_port = tcc::harness::FreeLoopbackPort();
  const size_t adv = config.find("advertise_address: ");
  REQUIRE(adv != std::string::npos);
  const size_t adv_end = config.find('\n', adv);
  config.replace(adv, adv_end - adv,
                 absl::StrCat("advertise_address: 127.0.0.1:", second_port));
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-fence-2");
  const tcc::harness::Cleanup cleanup{dir};
  {
    std::ofstream out(dir + "/tccd.yaml");
    out << config;
  }
  auto second = Process::Start(ProcessOptions{
      {TCC_TCCD_BIN, "--config", dir + "/tccd.yaml", "--data-dir",
       dir + "/data", "--listen", absl::StrCat("127.0.0.1:", second_port),
       "--metrics-listen", "off"},
      {},
      dir + "/tccd.log",
      "tccd node-2"});
  REQUIRE(second.ok());
  auto port = (*second)->WaitForListening(60000);
  INFO((*second)->Output());
  REQUIRE(port.ok());
  tcc::client::ClientOptions co;
  co.address = absl::StrCat("127.0.0.1:", *port);
  co.max_attempts = 3;
  co.attempt_timeout_ms = 10000;
  tcc::client::CoordinatorClient to_second(co);
  for (int i = 4; i < 8; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i, 1);
    auto r = to_second.Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    gids.push_back(req.gid());
  }
  // Node 1 wakes believing it owns the shards. Until it hears its lease is
  // gone, etcd refuses every write of its (the fence): a new transaction
  // sent to it is UNAVAILABLE and nothing of it is written. Once it heard,
  // it drops every shard, joins again with a new lease and forwards the
  // call to node 2, the owner. Either way node 1 does not exit.
  c.tccd()->Signal(SIGCONT);
  // From a small slack on (a call node 1 had sent before the pause may still
  // be on its way), no bank gets a call with one of node 1's old epochs.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::map<std::string, size_t> mark;
  for (const char* b : {"bank-a", "bank-b"}) {
    mark[b] = c.bank(b)->Output().size();
  }
  auto once = c.NewClient(1, 10000);
  auto late = c.Transfer("bank-a", 9, "bank-b", 9, 1);
  auto first = once->Submit(late);
  INFO(first.status().ToString());
  if (first.ok()) {
    CHECK(to_second.Get(late.gid()).ok());  // node 2's, forwarded there
    gids.push_back(late.gid());
  } else {
    CHECK(first.status().code() == absl::StatusCode::kUnavailable);
    CHECK(to_second.Get(late.gid()).status().code() ==
          absl::StatusCode::kNotFound);
  }
  CHECK(c.tccd()->Running());
  // Rejoined, node 1 serves again: what it forwards to node 2, and its
  // share of the shards once node 2 hands them back.
  auto again = c.Transfer("bank-a", 10, "bank-b", 10, 1);
  // (20 attempts: about 15 s of backoff, for a loaded machine.)
  auto served = c.NewClient(20, 10000)->Submit(again);
  INFO(served.status().ToString());
  REQUIRE(served.ok());
  gids.push_back(again.gid());
  {
    const std::regex call_line(R"(: (try|confirm|cancel) gid=.* epoch=(\d+) )");
    size_t before_old = 0, after = 0, after_old = 0;
    for (const char* b : {"bank-a", "bank-b"}) {
      const std::string out = c.bank(b)->Output();
      std::istringstream lines(out);
      size_t at = 0;
      for (std::string line; std::getline(lines, line);) {
        const bool late = at >= mark[b];
        at += line.size() + 1;
        std::smatch m;
        if (!std::regex_search(line, m, call_line)) continue;
        const uint64_t epoch = std::stoull(m[2].str());
        if (!late) {
          before_old += epoch <= old_epoch ? 1 : 0;
          continue;
        }
        ++after;
        if (epoch <= old_epoch) {
          ++after_old;
          UNSCOPED_INFO(b << " got a call of node 1's old epochs (<= "
                          << old_epoch << ") after the slack: " << line);
        }
      }
    }
    CHECK(before_old > 0);  // node 1's calls before the pause were seen
    CHECK(after > 0);       // and calls after the slack
    CHECK(after_old == 0);
    // bank-b's whole life since it came back, no slack: node 2 (or node 1
    // rejoined, with a newer epoch) finished the in-flight transfers.
    size_t b_old = 0;
    std::set<std::string> finished_later;
    std::istringstream lines(c.bank("bank-b")->Output());
    const std::regex gid_of(R"( gid=(\S+) )");
    for (std::string line; std::getline(lines, line);) {
      std::smatch m, g;
      if (!std::regex_search(line, m, call_line)) continue;
      if (std::regex_search(line, g, gid_of) &&
          std::stoull(m[2].str()) > old_epoch) {
        finished_later.insert(g[1].str());
      }
      if (std::stoull(m[2].str()) <= old_epoch) {
        ++b_old;
        UNSCOPED_INFO("bank-b got a call of node 1's old epochs (<= "
                      << old_epoch << ") after it came back: " << line);
      }
    }
    for (const std::string& gid : in_flight) {
      INFO("in flight at the pause: " << gid);
      CHECK(finished_later.count(gid) == 1);  // called with a newer epoch
    }
    CHECK(b_old == 0);
  }
  // Node 2 goes; node 1, restarted, takes the shards back (a higher epoch
  // again) and every transaction is final with the money conserved.
  (*second)->Kill();
  c.KillTccd();
  REQUIRE(c.StartTccd().ok());
  CHECK(c.CheckFinal(gids, 60000).ok());
}

TEST_CASE("a second live tccd with the same node id refuses to start") {
  BankCluster c(Options("same-id", tcc::etcd::testing::SharedEtcdEndpoints()));
  REQUIRE(c.Start().ok());
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-same-id");
  const tcc::harness::Cleanup cleanup{dir};
  auto [code, out] =
      RunTccd({"--config", c.tccd_config_path(), "--data-dir", dir + "/data",
               "--listen", "127.0.0.1:0", "--metrics-listen", "off"});
  INFO(out);
  CHECK(code != 0);
  CHECK_THAT(out, Catch::Contains("cluster.node_id node-1: another tccd"));
  // The first goes on.
  CHECK(c.tccd()->Running());
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 1);
  CHECK(c.client().Submit(req).ok());
  CHECK(c.CheckFinal({req.gid()}, 30000).ok());
}

TEST_CASE(
    "tccd to etcd over mutual TLS with a user whose password is in a "
    "file") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start({.members = 1, .tls = true, .auth = true});
  REQUIRE(etcd.ok());
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-tls");
  const tcc::harness::Cleanup cleanup{dir};
  const std::string certs = (*etcd)->dir();
  const std::string password_file = dir + "/etcd-password";
  {
    std::ofstream out(password_file);
    out << "tcc-password\n";
  }
  std::filesystem::permissions(
      password_file,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto config = [&](const std::string& cert, const std::string& password) {
    const std::string path = WriteConfig(dir, (*etcd)->endpoints(), "/tls/", 4);
    std::ofstream out(path, std::ios::app);
    out << "    tls: true\n    ca_file: " << certs << "/ca.pem\n"
        << "    cert_file: " << certs << "/" << cert << ".pem\n"
        << "    key_file: " << certs << "/" << cert << "-key.pem\n"
        << "    user: tcc\n    password_file: " << password << "\n";
    return path;
  };
  // The right certificate and password: the cluster is created.
  auto [made, made_out] =
      RunTccd({"--config", config("client", password_file), "--init-cluster"});
  INFO(made_out);
  CHECK(made == 0);
  // A certificate of another CA: refused by etcd, tccd exits.
  auto [other, other_out] = RunTccd(
      {"--config", config("other-client", password_file), "--init-cluster"});
  INFO(other_out);
  CHECK(other != 0);
  // A wrong password: refused, said so.
  const std::string wrong = dir + "/wrong-password";
  {
    std::ofstream out(wrong);
    out << "not-it\n";
  }
  std::filesystem::permissions(wrong, std::filesystem::perms::owner_read |
                                          std::filesystem::perms::owner_write);
  auto [bad, bad_out] =
      RunTccd({"--config", config("client", wrong), "--init-cluster"});
  INFO(bad_out);
  CHECK(bad != 0);
  CHECK_THAT(bad_out, Catch::Contains("authentication failed"));
  // A password file others may read: refused before etcd is asked, naming
  // the key.
  std::filesystem::permissions(wrong, std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  auto [loose, loose_out] =
      RunTccd({"--config", config("client", wrong), "--init-cluster"});
  INFO(loose_out);
  CHECK(loose == 2);
  CHECK_THAT(loose_out, Catch::Contains("cluster.etcd.password_file"));
}
