// The cluster drills (issue 23, DESIGN.md sections 13 and 14): real tccd
// nodes (tests/harness/tccd_nodes.h), real etcd members, real banks, under
// bank load (bank_load.h), one fault each:
//   1. kill -9 a node and delete its data dir; it never comes back (a new
//      node with a new id replaces it before the next repetition);
//   2. SIGSTOP a node for twice the lease TTL, then SIGCONT;
//   3. cut one node from etcd (its endpoints are TcpFaultProxy's, all
//      blackholed) while it still reaches the banks and its clients;
//   4. kill one etcd member (service continues), then a second (no quorum:
//      nothing commits, nothing lost), then bring both back;
//   5. add a fourth node and drain one (drain/<node>), then stop it;
//   6. move etcd's leader 20 times (no tccd node may exit for it);
//   7. a node killed -9 and restarted with the same id every few seconds,
//      and a second process with a running node's id (it must refuse).
// Each ends with the load's verdict (BankLoad::Check: every transaction
// final and all-or-nothing, each effect once, money conserved, nothing
// frozen, no STUCK branch, no acknowledged decision lost) and asserts that
// no node's tccd_alerts_total{kind="lost_decision"} ever went above 0 (a
// monitor scrapes every live node while the drill runs).
//
// Short forms for ctest; TCC_DRILL_LONG=1 for the long ones
// (scripts/cluster-drill.sh), TCC_DRILL_REPETITIONS for drill 1's count.
// Every run prints `cluster-drill-report: drill=N ...` lines (appended to
// TCC_DRILL_REPORT_FILE when set).
//
// Takeover time (drill 1): from the kill until (a) every shard's owner key
// in etcd names a live node (ReadMembership every 20 ms) and (b) every
// transaction in flight at the kill is answered by Get through the live
// nodes with anything but UNAVAILABLE/DEADLINE_EXCEEDED, i.e. its shard's
// new owner has loaded it (a Get loads a gid the takeover's scan has not
// reached yet; either way it is driven from then on).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bank_cluster.h"
#include "bank_load.h"
#include "etcd_test_env.h"
#include "tcc/client/coordinator_client.h"
#include "tcc/tls/credentials.h"
#include "tcc/wal/log.h"
#include "tccctl/admin_client.h"
#include "tccd_nodes.h"
#include "tcp_fault_proxy.h"
#include "test_certs.h"
#include "test_dirs.h"

namespace {

// The admin token of the drills that make admin calls (drill 5's tccctl
// drain, the routing test), in every node's --admin-token-file.
constexpr char kAdminToken[] = "routing-test-token-0123456789abcdef";

// kAdminToken's files in a temp dir of their own, removed with it: `path`
// for every node's --admin-token-file ("alice <token>"), `token_file` (the
// bare token) for tccctl --token-file; both 0600.
struct AdminTokens {
  AdminTokens()
      : dir(tcc::harness::MakeTempDir("tccd-cluster-admin-tokens")),
        cleanup{dir},
        path(dir + "/admin-tokens"),
        token_file(dir + "/token") {
    std::ofstream(path) << "alice " << kAdminToken << "\n";
    std::ofstream(token_file) << kAdminToken << "\n";
    REQUIRE(chmod(path.c_str(), 0600) == 0);
    REQUIRE(chmod(token_file.c_str(), 0600) == 0);
  }
  const std::string dir;
  const tcc::harness::Cleanup cleanup;
  const std::string path;
  const std::string token_file;
};

namespace v1 = tcc::v1;
using tcc::etcd::testing::EtcdCluster;
using tcc::harness::BankCluster;
using tcc::harness::BankLoad;
using tcc::harness::ClusterOptions;
using tcc::harness::TccdNodes;
using tcc::harness::TcpFaultProxy;
using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kLeaseTtlMs = 2000;
// cluster.takeover_margin_ms: how long a shard stays unowned before any node
// takes it, whoever it is assigned to. Drill 1's takeover p99 is held to
// kLeaseTtlMs + kTakeoverMarginMs (scripts/cluster-drill.sh).
constexpr int64_t kTakeoverMarginMs = 2000;
constexpr uint32_t kShards = 16;
constexpr uint32_t kAccounts = 50;
constexpr int64_t kInitialBalance = 100000;

bool LongForm() {
  const char* v = std::getenv("TCC_DRILL_LONG");
  return v != nullptr && std::string(v) == "1";
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoi(v);
}

int64_t MsSince(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now() - t)
      .count();
}

void SleepMs(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void Report(const std::string& line) {
  const std::string out = "cluster-drill-report: " + line;
  std::printf("%s\n", out.c_str());
  std::fflush(stdout);
  if (const char* file = std::getenv("TCC_DRILL_REPORT_FILE")) {
    std::ofstream(file, std::ios::app) << out << "\n";
  }
}

// Runs a shell command; its output.
std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// One drill's processes: the etcd (the fixture's or its own 3 members),
// two banks, the tccd nodes, the load, and a monitor scraping every node's
// metrics.
class Rig {
 public:
  // `node_yaml`: more top-level YAML for every node's config (e.g. tls:);
  // `cluster_yaml`: more of its cluster: section (TccdNodesOptions).
  Rig(const std::string& name, bool own_etcd,
      std::vector<std::string> node_args = {}, std::string node_yaml = "",
      std::string cluster_yaml = "")
      : name_(name) {
    if (own_etcd) {
      auto etcd = EtcdCluster::Start({.members = 3});
      REQUIRE(etcd.ok());
      own_etcd_ = *std::move(etcd);
      etcd_endpoints_ = own_etcd_->endpoints();
    } else {
      etcd_endpoints_ = tcc::etcd::testing::SharedEtcdEndpoints();
    }
    root_ = tcc::harness::MakeTempDir("tccd-cluster-drill-" + name);
    ClusterOptions bo;
    bo.root_dir = root_ + "/banks";
    bo.remove_root_dir = true;
    bo.tccd_bin = TCC_TCCD_BIN;
    bo.bank_bin = TCC_BANK_BIN;
    bo.accounts = kAccounts;
    bo.initial_balance = kInitialBalance;
    bo.etcd.endpoints = {"unused:1"};  // not on EtcdFromEnvironment
    banks_ = std::make_unique<BankCluster>(bo);
    REQUIRE(banks_->StartBanks().ok());
    tcc::harness::TccdNodesOptions no;
    no.root_dir = root_ + "/nodes";
    no.tccd_bin = TCC_TCCD_BIN;
    no.etcd_endpoints = etcd_endpoints_;
    no.shards = kShards;
    no.lease_ttl_ms = kLeaseTtlMs;
    no.lease_margin_ms = 500;
    no.takeover_margin_ms = kTakeoverMarginMs;
    for (const auto& b : {"bank-a", "bank-b"}) {
      no.participants[b] = banks_->bank_port(b);
    }
    // Short participant timeouts and retries, so that a fault's leftovers
    // finish in seconds.
    no.extra_config =
        "participant_defaults:\n"
        "  timeouts:\n"
        "    all: {min_ms: 20, max_ms: 1000, initial_ms: 500}\n"
        "retry:\n"
        "  base_ms: 20\n"
        "  cap_ms: 500\n" +
        node_yaml;
    no.cluster_extra = std::move(cluster_yaml);
    no.extra_args = std::move(node_args);
    nodes_ = std::make_unique<TccdNodes>(no);
  }

  ~Rig() {
    StopMonitor();
    if (load_) load_->Stop();
    nodes_.reset();
    proxies_.clear();
    banks_.reset();
    const bool keep = std::getenv("TCC_KEEP_TEST_DIRS") != nullptr;
    if (!keep) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
    } else {
      std::printf("cluster-drill: kept %s\n", root_.c_str());
    }
    own_etcd_.reset();
  }

  TccdNodes& nodes() { return *nodes_; }
  BankCluster& banks() { return *banks_; }
  BankLoad& load() { return *load_; }
  EtcdCluster* own_etcd() { return own_etcd_.get(); }
  const std::vector<std::string>& etcd_endpoints() const {
    return etcd_endpoints_;
  }

  // Proxies to every etcd member, for one node's endpoints.
  std::vector<std::string> MakeEtcdProxies() {
    std::vector<std::string> out;
    for (const auto& ep : etcd_endpoints_) {
      auto p = TcpFaultProxy::Start(ep);
      REQUIRE(p.ok());
      out.push_back((*p)->address());
      proxies_.push_back(*std::move(p));
    }
    return out;
  }
  void SetProxies(TcpFaultProxy::Mode mode) {
    for (auto& p : proxies_) p->SetMode(mode);
  }

  // Two nodes, each owning a share of the shards (the routing tests).
  void StartTwoSharing() {
    StartNodes(2);
    REQUIRE(WaitEachOwns({nodes_->node_id(0), nodes_->node_id(1)}, 30000));
  }

  // A plaintext client of node i alone.
  std::unique_ptr<tcc::client::CoordinatorClient> ClientOf(int i) {
    tcc::client::ClientOptions o;
    o.addresses = {nodes_->address(i)};
    return std::make_unique<tcc::client::CoordinatorClient>(o);
  }

  // Creates the cluster and starts `n` nodes, one after the other; node i
  // dials `etcd[i]` when given (fault proxies).
  void StartNodes(int n,
                  const std::map<int, std::vector<std::string>>& etcd = {}) {
    REQUIRE(nodes_->InitCluster().ok());
    for (int i = 0; i < n; ++i) nodes_->AddNode();
    for (const auto& [i, endpoints] : etcd) {
      nodes_->SetEtcdEndpoints(i, endpoints);
    }
    for (int i = 0; i < n; ++i) {
      absl::Status s = nodes_->StartNode(i);
      INFO(s.ToString());
      REQUIRE(s.ok());
      alive_.insert(i);
    }
    banks_->SetClientAddresses(nodes_->Addresses());
    StartMonitor();
  }

  void StartLoad(int threads = 4) {
    tcc::harness::BankLoadOptions lo;
    lo.accounts = kAccounts;
    lo.initial_balance = kInitialBalance;
    lo.threads = threads;
    lo.pause_ms = 20;
    lo.gid_prefix = "drill-" + name_;
    lo.seed = static_cast<uint64_t>(::getpid());
    load_ = std::make_unique<BankLoad>(lo, nodes_->Addresses());
    load_->Start();
  }

  // Nodes the drill expects running (the monitor flags others' exits).
  void Expect(int i, bool alive) {
    std::lock_guard<std::mutex> lock(mu_);
    if (alive) {
      alive_.insert(i);
    } else {
      alive_.erase(i);
    }
  }
  std::set<std::string> AliveIds() {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::string> ids;
    for (int i : alive_) ids.insert(nodes_->node_id(i));
    return ids;
  }
  std::vector<int> AliveIndexes() {
    std::lock_guard<std::mutex> lock(mu_);
    return {alive_.begin(), alive_.end()};
  }

  void Violation(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(stderr, "cluster-drill %s: VIOLATION: %s\n", name_.c_str(),
                 what.c_str());
    violations_.push_back(what);
  }
  void Note(const std::string& what) {
    std::fprintf(stderr, "cluster-drill %s: %s\n", name_.c_str(), what.c_str());
  }

  // ms from `since` until every shard's owner is one of `owners` (etcd), or
  // -1 after timeout_ms.
  int64_t WaitOwnedBy(const std::set<std::string>& owners,
                      SteadyClock::time_point since, int64_t timeout_ms) {
    while (MsSince(since) < timeout_ms) {
      auto m = nodes_->ReadMembership();
      if (m.ok()) {
        bool all = true;
        for (const auto& o : m->owners) {
          if (!o || owners.count(o->node_id) == 0) {
            all = false;
            break;
          }
        }
        if (all) return MsSince(since);
      }
      SleepMs(20);
    }
    return -1;
  }

  // Waits until every shard is owned by one of `owners` and each of them
  // owns at least one (the shares settled enough for a test that needs a
  // gid at each node); false after timeout_ms.
  bool WaitEachOwns(const std::set<std::string>& owners, int64_t timeout_ms) {
    const auto since = SteadyClock::now();
    while (MsSince(since) < timeout_ms) {
      std::map<std::string, int> now = Owners();
      bool ok = now.size() == owners.size();
      for (const std::string& o : owners) ok = ok && now[o] > 0;
      if (ok) return true;
      SleepMs(20);
    }
    return false;
  }

  // How many shards each node owns (etcd); "" for unowned.
  std::map<std::string, int> Owners() {
    std::map<std::string, int> out;
    auto m = nodes_->ReadMembership();
    if (!m.ok()) return out;
    for (const auto& o : m->owners) ++out[o ? o->node_id : ""];
    return out;
  }
  std::string OwnersText() {
    std::vector<std::string> parts;
    for (const auto& [id, n] : Owners()) {
      parts.push_back(absl::StrCat(id.empty() ? "unowned" : id, ":", n));
    }
    return absl::StrJoin(parts, ",");
  }

  // ms from `since` until every gid is answered through the live nodes with
  // anything but UNAVAILABLE or DEADLINE_EXCEEDED (its shard has a live
  // owner that loaded it); `final`: until each is final or NOT_FOUND.
  int64_t WaitAnswered(const std::set<std::string>& gids, bool final,
                       SteadyClock::time_point since, int64_t timeout_ms) {
    // One client per live node, one attempt each: a node cut from etcd (or
    // paused) must not hold the answer of another.
    std::vector<std::unique_ptr<tcc::client::CoordinatorClient>> clients;
    for (const std::string& a : nodes_->Addresses(AliveIndexes())) {
      tcc::client::ClientOptions co;
      co.addresses = {a};
      co.max_attempts = 1;
      co.attempt_timeout_ms = 500;
      clients.push_back(std::make_unique<tcc::client::CoordinatorClient>(co));
    }
    auto answered = [&](const std::string& gid) {
      for (auto& c : clients) {
        auto v = c->Get(gid);
        const auto code = v.status().code();
        if (final) {
          if ((v.ok() && (v->state() == v1::TXN_STATE_CONFIRMED ||
                          v->state() == v1::TXN_STATE_CANCELLED)) ||
              code == absl::StatusCode::kNotFound) {
            return true;
          }
        } else if (code != absl::StatusCode::kUnavailable &&
                   code != absl::StatusCode::kDeadlineExceeded) {
          return true;
        }
      }
      return false;
    };
    std::set<std::string> left = gids;
    while (!left.empty() && MsSince(since) < timeout_ms) {
      for (auto it = left.begin(); it != left.end();) {
        it = answered(*it) ? left.erase(it) : std::next(it);
      }
      if (!left.empty()) SleepMs(20);
    }
    return left.empty() ? MsSince(since) : -1;
  }

  // Waits until `n` more transfers than `from` were acknowledged; false
  // after timeout_ms.
  bool WaitAcknowledged(int64_t from, int64_t n, int64_t timeout_ms) {
    const auto t0 = SteadyClock::now();
    while (MsSince(t0) < timeout_ms) {
      if (load_->counts().acknowledged >= from + n) return true;
      SleepMs(20);
    }
    return false;
  }

  // The end: load stopped, every expected node running, the verdict, the
  // alerts; the drill's report line (`fields` first). Returns violations.
  int Finish(const std::string& fields) {
    load_->Stop();
    for (int i : AliveIndexes()) {
      if (!nodes_->Running(i)) {
        Violation(absl::StrCat(nodes_->node_id(i), " exited (see ",
                               nodes_->log_path(i), ")"));
      }
    }
    // A bank that is gone was stopped from outside (this box is shared; the
    // drills never stop a bank): noted, and started again on its port, so
    // that what it holds is checked.
    // The checks go through the nodes running now.
    banks_->SetClientAddresses(nodes_->Addresses(AliveIndexes()));
    int bank_restarts = 0;
    auto restart_lost_banks = [&] {
      bool any = false;
      for (const auto& b : {"bank-a", "bank-b"}) {
        if (banks_->bank(b) != nullptr && banks_->bank(b)->Running()) continue;
        Note(absl::StrCat(b, " is gone (stopped from outside the drill: ",
                          "see its log); starting it again"));
        any = true;
        ++bank_restarts;
        for (int attempt = 0; attempt < 20; ++attempt) {
          if (banks_->StartBank(b).ok()) break;
          SleepMs(250);
        }
      }
      return any;
    };
    (void)restart_lost_banks();
    const auto t0 = SteadyClock::now();
    tcc::harness::LoadVerdict v = load_->Check(*banks_, 90000);
    // A bank lost during the check: the check again, once it is back.
    if (!v.violations.empty() && restart_lost_banks()) {
      v = load_->Check(*banks_, 90000);
    }
    const int64_t check_ms = MsSince(t0);
    for (const auto& what : v.violations) Violation(what);
    ScrapeOnce();
    StopMonitor();
    for (int i : AliveIndexes()) {
      auto page = nodes_->ScrapeMetrics(i);
      if (!page.ok()) continue;
      auto stuck = tcc::harness::MetricValue(*page, "tccd_stuck_branches");
      if (stuck && *stuck > 0) {
        Violation(absl::StrCat(nodes_->node_id(i), ": ", *stuck,
                               " STUCK branches at the end"));
      }
    }
    int64_t lost = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, n] : lost_decision_) {
        if (n > 0) {
          lost += static_cast<int64_t>(n);
          violations_.push_back(
              absl::StrCat(id, ": lost_decision alert fired ", n, " times"));
        }
      }
    }
    const tcc::harness::LoadCounts c = load_->counts();
    int violations;
    {
      std::lock_guard<std::mutex> lock(mu_);
      violations = static_cast<int>(violations_.size());
    }
    Report(absl::StrCat(
        fields, " submitted=", c.submitted, " acknowledged=", c.acknowledged,
        " client_gave_up=", c.failed, " finished=", v.known,
        " confirmed=", v.confirmed, " cancelled=", v.cancelled,
        " never_registered=", v.unknown, " lost_decision_alerts=", lost,
        " banks_restarted=", bank_restarts, " check_ms=", check_ms,
        " violations=", violations));
    if (violations > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      std::ofstream out(root_ + "/violations.txt");
      for (const auto& v : violations_) {
        out << v << "\n";
        std::printf("cluster-drill %s: VIOLATION: %s\n", name_.c_str(),
                    v.c_str());
      }
      std::fprintf(stderr, "cluster-drill %s: logs under %s (kept)\n",
                   name_.c_str(), root_.c_str());
      ::setenv("TCC_KEEP_TEST_DIRS", "1", 1);
    }
    return violations;
  }

 private:
  void StartMonitor() {
    monitor_ = std::thread([this] {
      while (!monitor_stop_) {
        ScrapeOnce();
        SleepMs(250);
      }
    });
  }
  void StopMonitor() {
    monitor_stop_ = true;
    if (monitor_.joinable()) monitor_.join();
  }
  void ScrapeOnce() {
    const size_t n = nodes_->size();
    for (size_t i = 0; i < n; ++i) {
      auto page = nodes_->ScrapeMetrics(static_cast<int>(i));
      if (!page.ok()) continue;
      auto lost = tcc::harness::MetricValue(
          *page, "tccd_alerts_total{kind=\"lost_decision\"}");
      std::lock_guard<std::mutex> lock(mu_);
      double& seen = lost_decision_[nodes_->node_id(static_cast<int>(i))];
      if (lost) seen = std::max(seen, *lost);
    }
  }

  std::string name_;
  std::unique_ptr<EtcdCluster> own_etcd_;
  std::vector<std::string> etcd_endpoints_;
  std::string root_;
  std::unique_ptr<BankCluster> banks_;
  std::unique_ptr<TccdNodes> nodes_;
  std::unique_ptr<BankLoad> load_;
  std::vector<std::unique_ptr<TcpFaultProxy>> proxies_;
  std::thread monitor_;
  std::atomic<bool> monitor_stop_{false};
  std::mutex mu_;
  std::set<int> alive_;
  std::vector<std::string> violations_;
  std::map<std::string, double> lost_decision_;
};

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t at = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(at, v.size() - 1)];
}

// Waits until node i owns at least one shard and every shard is owned by
// a node in `owners`; ms, or -1.
int64_t WaitJoined(Rig& rig, int i, const std::set<std::string>& owners,
                   int64_t timeout_ms) {
  const auto t0 = SteadyClock::now();
  const std::string id = rig.nodes().node_id(i);
  while (MsSince(t0) < timeout_ms) {
    auto o = rig.Owners();
    int owned = 0;
    bool all = true;
    for (const auto& [node, n] : o) {
      if (node.empty() || owners.count(node) == 0) all = false;
      if (node == id) owned = n;
    }
    if (owned > 0 && all) return MsSince(t0);
    SleepMs(50);
  }
  return -1;
}

// SIGTERM, then started again with the same id (waits for its old lease).
void RestartNode(Rig& rig, int i) {
  rig.Expect(i, false);
  auto stopped = rig.nodes().StopNode(i);
  if (!stopped.ok()) rig.nodes().KillNode(i);
  absl::Status s = rig.nodes().StartNode(i);
  if (!s.ok()) {
    rig.Violation(absl::StrCat(rig.nodes().node_id(i),
                               " did not start again: ", s.ToString()));
    return;
  }
  rig.Expect(i, true);
  (void)WaitJoined(rig, i, rig.AliveIds(), 10000);
}

}  // namespace

TEST_CASE("drill 1: a node killed -9, its data dir deleted, never back",
          "[cluster-drill]") {
  const int reps = EnvInt("TCC_DRILL_REPETITIONS", LongForm() ? 20 : 2);
  Rig rig("kill", false);
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  std::vector<int64_t> takeovers;
  int64_t in_flight_total = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<int> alive = rig.AliveIndexes();
    const int victim = alive[static_cast<size_t>(r) % alive.size()];
    const std::string victim_id = rig.nodes().node_id(victim);
    const int shards_of_victim = rig.Owners()[victim_id];
    const std::set<std::string> in_flight = rig.load().InFlight();
    const int64_t acked_before = rig.load().counts().acknowledged;
    const auto t0 = SteadyClock::now();
    rig.nodes().KillNode(victim);
    rig.Expect(victim, false);
    rig.nodes().DeleteDataDir(victim);
    const std::set<std::string> live = rig.AliveIds();
    const int64_t owned_ms = rig.WaitOwnedBy(live, t0, 30000);
    const int64_t resumed_ms = rig.WaitAnswered(in_flight, false, t0, 30000);
    const int64_t finished_ms = rig.WaitAnswered(in_flight, true, t0, 60000);
    const int64_t takeover_ms =
        owned_ms < 0 || resumed_ms < 0 ? -1 : std::max(owned_ms, resumed_ms);
    if (takeover_ms < 0) {
      rig.Violation(absl::StrCat("repetition ", r, ": ", victim_id,
                                 "'s shards not taken within 30 s (owners ",
                                 rig.OwnersText(), ")"));
    } else {
      takeovers.push_back(takeover_ms);
    }
    if (finished_ms < 0) {
      rig.Violation(absl::StrCat("repetition ", r,
                                 ": transactions in flight at the kill not "
                                 "final within 60 s"));
    }
    in_flight_total += static_cast<int64_t>(in_flight.size());
    Report(absl::StrCat(
        "drill=1 kind=takeover repetition=", r, " victim=", victim_id,
        " victim_shards=", shards_of_victim, " in_flight=", in_flight.size(),
        " owned_ms=", owned_ms, " resumed_ms=", resumed_ms,
        " takeover_ms=", takeover_ms, " in_flight_final_ms=", finished_ms,
        " acknowledged_during=",
        rig.load().counts().acknowledged - acked_before,
        " lease_ttl_ms=", kLeaseTtlMs));
    // A new node, with a new id and an empty disk, replaces it.
    const int fresh =
        rig.nodes().AddNode(absl::StrCat("node-", rig.nodes().size() + 1));
    absl::Status s = rig.nodes().StartNode(fresh);
    INFO(s.ToString());
    REQUIRE(s.ok());
    rig.Expect(fresh, true);
    rig.load().SetAddresses(rig.nodes().Addresses(rig.AliveIndexes()));
    const int64_t joined_ms = WaitJoined(rig, fresh, rig.AliveIds(), 20000);
    if (joined_ms < 0) {
      rig.Violation(absl::StrCat(
          "repetition ", r, ": ", rig.nodes().node_id(fresh),
          " got no shard within 20 s (owners ", rig.OwnersText(), ")"));
    }
    SleepMs(1000);
  }
  const int violations =
      rig.Finish(absl::StrCat("drill=1 kind=summary repetitions=", reps,
                              " in_flight_at_faults=", in_flight_total,
                              " takeover_p50_ms=", Percentile(takeovers, 0.5),
                              " takeover_p99_ms=", Percentile(takeovers, 0.99),
                              " takeover_max_ms=", Percentile(takeovers, 1.0),
                              " lease_ttl_ms=", kLeaseTtlMs,
                              " takeover_margin_ms=", kTakeoverMarginMs));
  CHECK(violations == 0);
}

TEST_CASE("drill 2: a node paused (SIGSTOP) for twice the lease TTL",
          "[cluster-drill]") {
  const int reps = LongForm() ? 5 : 1;
  Rig rig("pause", false);
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  std::string fields;
  for (int r = 0; r < reps; ++r) {
    const int paused = r % 3;
    const std::string id = rig.nodes().node_id(paused);
    const std::set<std::string> in_flight = rig.load().InFlight();
    const int shards = rig.Owners()[id];
    const auto t0 = SteadyClock::now();
    rig.nodes().PauseNode(paused);
    std::set<std::string> others = rig.AliveIds();
    others.erase(id);
    const int64_t owned_ms = rig.WaitOwnedBy(others, t0, 2 * kLeaseTtlMs);
    // In flight at the pause: final while it is still paused?
    int64_t final_ms = rig.WaitAnswered(in_flight, true, t0, 2 * kLeaseTtlMs);
    SleepMs(std::max<int64_t>(0, 2 * kLeaseTtlMs - MsSince(t0)));
    const int64_t acked = rig.load().counts().acknowledged;
    rig.nodes().ResumeNode(paused);
    if (final_ms < 0) final_ms = rig.WaitAnswered(in_flight, true, t0, 60000);
    if (final_ms < 0) {
      rig.Violation("transactions in flight at the pause not final in 60 s");
    }
    // Does it take shards again (a new lease, registered again)?
    const int64_t back_ms = WaitJoined(rig, paused, rig.AliveIds(), 10000);
    SleepMs(1000);
    if (!rig.WaitAcknowledged(acked, 10, 20000)) {
      rig.Violation("no transfers acknowledged after the resume");
    }
    fields = absl::StrCat(
        "drill=2 repetition=", r, " paused=", id, " its_shards=", shards,
        " pause_ms=", 2 * kLeaseTtlMs, " in_flight=", in_flight.size(),
        " owned_by_others_ms=", owned_ms, " in_flight_final_ms=", final_ms,
        " owns_again_after_resume_ms=", back_ms,
        " owners_after=", rig.OwnersText());
    Report(fields);
    if (back_ms < 0) {
      rig.Note(absl::StrCat(id, " owns no shard 10 s after SIGCONT (owners ",
                            rig.OwnersText(), ")"));
      // Its lease is gone for good (it takes no new one): restarted with
      // its id, so that the next repetition pauses an owner again.
      if (r + 1 < reps) RestartNode(rig, paused);
    }
  }
  CHECK(rig.Finish("drill=2 kind=summary") == 0);
}

TEST_CASE("drill 3: a node cut from etcd, still reaching banks and clients",
          "[cluster-drill]") {
  const int reps = LongForm() ? 3 : 1;
  Rig rig("partition", false);
  const int cut = 2;  // node-3, behind the proxies
  rig.StartNodes(3, {{cut, rig.MakeEtcdProxies()}});
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  const std::string id = rig.nodes().node_id(cut);
  for (int r = 0; r < reps; ++r) {
    const std::set<std::string> in_flight = rig.load().InFlight();
    const int shards = rig.Owners()[id];
    const auto t0 = SteadyClock::now();
    rig.SetProxies(TcpFaultProxy::Mode::kBlackhole);
    std::set<std::string> others = rig.AliveIds();
    others.erase(id);
    const int64_t owned_ms = rig.WaitOwnedBy(others, t0, 3 * kLeaseTtlMs);
    const int64_t acked = rig.load().counts().acknowledged;
    // In flight at the cut: final while it lasts?
    int64_t final_ms = rig.WaitAnswered(in_flight, true, t0, 3 * kLeaseTtlMs);
    SleepMs(std::max<int64_t>(0, 3 * kLeaseTtlMs - MsSince(t0)));
    const int64_t acked_during = rig.load().counts().acknowledged - acked;
    // Only its shards' transactions wait; the others keep confirming.
    const bool alive = rig.nodes().Running(cut);
    rig.SetProxies(TcpFaultProxy::Mode::kPass);
    if (final_ms < 0) final_ms = rig.WaitAnswered(in_flight, true, t0, 60000);
    if (final_ms < 0) {
      rig.Violation("transactions in flight at the cut not final in 60 s");
    }
    rig.Note("in flight at the cut: " + absl::StrJoin(in_flight, " "));
    const int64_t back_ms = WaitJoined(rig, cut, rig.AliveIds(), 10000);
    Report(absl::StrCat(
        "drill=3 repetition=", r, " cut=", id, " its_shards=", shards,
        " cut_ms=", 3 * kLeaseTtlMs, " in_flight=", in_flight.size(),
        " owned_by_others_ms=", owned_ms, " acknowledged_while_cut=",
        acked_during, " running_while_cut=", alive ? 1 : 0,
        " in_flight_final_ms=", final_ms, " owns_again_after_heal_ms=", back_ms,
        " owners_after=", rig.OwnersText()));
    if (owned_ms < 0) {
      rig.Violation(absl::StrCat("the cut node's shards not taken within ",
                                 3 * kLeaseTtlMs, " ms"));
    }
    if (back_ms < 0) {
      rig.Note(absl::StrCat(id, " owns no shard 10 s after the heal (owners ",
                            rig.OwnersText(), ")"));
      if (r + 1 < reps) RestartNode(rig, cut);
    }
    SleepMs(1000);
  }
  CHECK(rig.Finish("drill=3 kind=summary") == 0);
}

TEST_CASE("drill 4: etcd loses one member, then its quorum, then both back",
          "[cluster-drill]") {
  const int64_t outage_ms = LongForm() ? 10000 : 4000;
  Rig rig("etcd-quorum", true);
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  // One member down: service continues.
  const std::set<std::string> in_flight_one = rig.load().InFlight();
  REQUIRE(rig.own_etcd()->KillMember(1).ok());
  const auto t1 = SteadyClock::now();
  const int64_t acked1 = rig.load().counts().acknowledged;
  const bool served_with_two = rig.WaitAcknowledged(acked1, 20, 20000);
  const int64_t served_ms = MsSince(t1);
  if (!served_with_two) {
    rig.Violation("no transfers acknowledged with one etcd member down");
  }
  SleepMs(1000);
  // A second member down: no quorum, nothing commits.
  const std::set<std::string> in_flight_two = rig.load().InFlight();
  REQUIRE(rig.own_etcd()->KillMember(2).ok());
  const auto t2 = SteadyClock::now();
  SleepMs(1000);  // what was committed before answers meanwhile
  const int64_t acked2 = rig.load().counts().acknowledged;
  tcc::client::ClientOptions co;
  co.addresses = rig.nodes().Addresses();
  co.max_attempts = 1;
  // Longer than tccd's etcd call timeout (5 s): tccd's own answer.
  co.attempt_timeout_ms = 8000;
  const auto probe_sent = SteadyClock::now();
  tcc::client::CoordinatorClient probe(co);
  tcc::v1::SubmitRequest req;
  auto* b = req.add_branches();
  b->set_branch_id("debit");
  b->set_participant("bank-a");
  b->set_action("debit");
  b->set_payload("1:0");
  req.set_wait_for(v1::WAIT_FOR_FINISHED);
  auto during = probe.Submit(req);
  const std::string probe_code =
      absl::StatusCodeToString(during.status().code());
  const int64_t probe_ms = MsSince(probe_sent);
  if (during.ok()) {
    rig.Violation("a Submit was answered OK without an etcd quorum");
  }
  // tccd's own answer, at once: UNAVAILABLE (nothing written; retry), not
  // the caller's deadline.
  CHECK(probe_code == "UNAVAILABLE");
  SleepMs(std::max<int64_t>(0, outage_ms - MsSince(t2)));
  const int64_t acked_no_quorum = rig.load().counts().acknowledged - acked2;
  for (int i : rig.AliveIndexes()) {
    if (!rig.nodes().Running(i)) {
      rig.Violation(rig.nodes().node_id(i) + " exited without etcd quorum");
    }
  }
  // Both back: everything resumes and finishes.
  REQUIRE(rig.own_etcd()->StartMembers({1, 2}).ok());
  const auto t3 = SteadyClock::now();
  const int64_t acked3 = rig.load().counts().acknowledged;
  const bool resumed = rig.WaitAcknowledged(acked3, 20, 60000);
  const int64_t resumed_ms = MsSince(t3);
  if (!resumed) rig.Violation("no transfers acknowledged after etcd came back");
  const int64_t owned_ms = rig.WaitOwnedBy(rig.AliveIds(), t3, 30000);
  std::set<std::string> in_flight = in_flight_one;
  in_flight.insert(in_flight_two.begin(), in_flight_two.end());
  const int64_t final_ms = rig.WaitAnswered(in_flight, true, t3, 60000);
  if (final_ms < 0) {
    rig.Violation("transactions in flight at the faults not final in 60 s");
  }
  // The probe either never registered or ends like every other.
  CHECK(rig.Finish(absl::StrCat(
            "drill=4 in_flight_at_first_kill=", in_flight_one.size(),
            " in_flight_at_second_kill=", in_flight_two.size(),
            " acknowledged_20_with_two_members_ms=", served_ms,
            " no_quorum_ms=", outage_ms, " probe_without_quorum=", probe_code,
            " probe_answered_ms=", probe_ms,
            " acknowledged_without_quorum=", acked_no_quorum,
            " first_20_acknowledged_after_back_ms=", resumed_ms,
            " all_owned_after_back_ms=", owned_ms,
            " in_flight_final_after_back_ms=", final_ms)) == 0);
}

TEST_CASE("drill 5: a fourth node joins and one is drained, under load",
          "[cluster-drill]") {
  // The drain as an operator makes it: `tccctl drain` at a node, with an
  // admin token every node accepts.
  const AdminTokens tokens;
  const std::string& token_file = tokens.token_file;
  Rig rig("join-drain", false, {"--admin-token-file", tokens.path});
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  // A fourth node joins: shards are handed over to it.
  const int fourth = rig.nodes().AddNode();
  std::set<std::string> in_flight = rig.load().InFlight();
  const auto t0 = SteadyClock::now();
  absl::Status s = rig.nodes().StartNode(fourth);
  INFO(s.ToString());
  REQUIRE(s.ok());
  rig.Expect(fourth, true);
  rig.load().SetAddresses(rig.nodes().Addresses());
  const int64_t joined_ms = WaitJoined(rig, fourth, rig.AliveIds(), 20000);
  if (joined_ms < 0) rig.Violation("the fourth node got no shard in 20 s");
  const std::string after_join = rig.OwnersText();
  SleepMs(2000);
  // node-1 drained: its shards move, then it is stopped.
  const int drained = 0;
  const std::string id = rig.nodes().node_id(drained);
  const std::set<std::string> in_flight_drain = rig.load().InFlight();
  in_flight.insert(in_flight_drain.begin(), in_flight_drain.end());
  const int shards = rig.Owners()[id];
  const auto t1 = SteadyClock::now();
  // Asked at another node (any node serves the Admin API); tccctl waits
  // until the drained node owns no shard.
  auto tccctl = tcc::harness::Process::Start(tcc::harness::ProcessOptions{
      {TCC_TCCCTL_BIN, "--addr", rig.nodes().address(1), "--token-file",
       token_file, "drain", id, "--wait", "20s"},
      {},
      "",
      "tccctl"});
  REQUIRE(tccctl.ok());
  auto drain_status = (*tccctl)->Wait(30000);
  const std::string drain_output = (*tccctl)->Output();
  INFO(drain_output);
  REQUIRE(drain_status.ok());
  CHECK(WIFEXITED(*drain_status));
  CHECK(WEXITSTATUS(*drain_status) == 0);
  CHECK(drain_output.find(id + " owns no shard now") != std::string::npos);
  std::set<std::string> others = rig.AliveIds();
  others.erase(id);
  const int64_t drained_ms = rig.WaitOwnedBy(others, t1, 20000);
  if (drained_ms < 0) {
    rig.Violation(absl::StrCat(id, " still owns shards 20 s after drain (",
                               rig.OwnersText(), ")"));
  }
  SleepMs(1000);
  rig.Expect(drained, false);
  auto stopped = rig.nodes().StopNode(drained);
  if (!stopped.ok() || !WIFEXITED(*stopped) || WEXITSTATUS(*stopped) != 0) {
    rig.Violation(absl::StrCat(id, " did not stop cleanly after its drain: ",
                               stopped.ok() ? absl::StrCat("status ", *stopped)
                                            : stopped.status().ToString()));
  }
  rig.load().SetAddresses(rig.nodes().Addresses(rig.AliveIndexes()));
  const int64_t acked = rig.load().counts().acknowledged;
  if (!rig.WaitAcknowledged(acked, 20, 20000)) {
    rig.Violation("no transfers acknowledged after the drained node stopped");
  }
  const int64_t final_ms = rig.WaitAnswered(in_flight, true, t0, 60000);
  if (final_ms < 0) rig.Violation("in-flight transactions not final in 60 s");
  CHECK(rig.Finish(absl::StrCat(
            "drill=5 in_flight_at_join_and_drain=", in_flight.size(),
            " fourth_owns_shards_ms=", joined_ms,
            " owners_after_join=", after_join, " drained=", id,
            " its_shards=", shards, " drained_ms=", drained_ms,
            " owners_after_drain=", rig.OwnersText(),
            " in_flight_final_ms=", final_ms)) == 0);
}

// The members' ids (hex) and which one leads, from etcdctl.
struct EtcdLeadership {
  std::vector<std::pair<std::string, std::string>> members;  // endpoint, id
  std::string leader;                                        // hex id
};

EtcdLeadership ReadLeadership(const std::vector<std::string>& endpoints) {
  const std::string out = Shell(absl::StrCat(
      "ETCDCTL_API=3 etcdctl --endpoints=", absl::StrJoin(endpoints, ","),
      " --command-timeout=3s endpoint status -w fields "
      "2>/dev/null"));
  EtcdLeadership l;
  std::string member;  // each block names its endpoint last
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> kv =
        absl::StrSplit(line, absl::MaxSplits(" : ", 1));
    if (kv.size() != 2) continue;

    auto hex = [](const std::string& dec) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%llx",
                    static_cast<unsigned long long>(std::stoull(dec)));
      return std::string(buf);
    };
    if (kv[0] == "\"MemberID\"") member = hex(kv[1]);
    if (kv[0] == "\"Endpoint\"" && kv[1].size() > 2) {
      l.members.emplace_back(kv[1].substr(1, kv[1].size() - 2), member);
    }
    if (kv[0] == "\"Leader\"") l.leader = hex(kv[1]);
  }
  return l;
}

TEST_CASE("drill 6: etcd's leader moved 20 times under load",
          "[cluster-drill]") {
  const int moves = LongForm() ? 60 : 20;
  Rig rig("move-leader", true);
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  const std::set<std::string> in_flight_first = rig.load().InFlight();
  const auto t0 = SteadyClock::now();
  int moved = 0;
  std::vector<int64_t> move_ms;
  for (int m = 0; m < moves; ++m) {
    EtcdLeadership l = ReadLeadership(rig.etcd_endpoints());
    std::string leader_endpoint, target;
    for (const auto& [ep, id] : l.members) {
      if (id == l.leader) leader_endpoint = ep;
    }
    for (size_t k = 0; k < l.members.size(); ++k) {
      const auto& cand =
          l.members[(static_cast<size_t>(m) + k) % l.members.size()];
      if (cand.second != l.leader) {
        target = cand.second;
        break;
      }
    }
    if (leader_endpoint.empty() || target.empty()) {
      rig.Note("no leader seen; trying again");
      SleepMs(500);
      continue;
    }
    const auto tm = SteadyClock::now();
    const std::string out = Shell(
        absl::StrCat("ETCDCTL_API=3 etcdctl --endpoints=", leader_endpoint,
                     " --command-timeout=5s move-leader ", target, " 2>&1"));
    if (out.find("Leadership transferred") != std::string::npos) {
      ++moved;
      move_ms.push_back(MsSince(tm));
    } else {
      rig.Note("move-leader: " + out);
    }
    SleepMs(700);
  }
  const int64_t moving_ms = MsSince(t0);
  if (moved < moves) {
    rig.Violation(
        absl::StrCat("etcd's leader moved ", moved, " times of ", moves));
  }
  for (int i : rig.AliveIndexes()) {
    if (!rig.nodes().Running(i)) {
      rig.Violation(rig.nodes().node_id(i) +
                    " exited while etcd's leader moved");
    }
  }
  const int64_t acked = rig.load().counts().acknowledged;
  if (!rig.WaitAcknowledged(acked, 20, 30000)) {
    rig.Violation("no transfers acknowledged after the moves");
  }
  const int64_t final_ms = rig.WaitAnswered(in_flight_first, true, t0, 60000);
  CHECK(rig.Finish(absl::StrCat(
            "drill=6 moves=", moved, " moving_ms=", moving_ms,
            " move_p50_ms=", Percentile(move_ms, 0.5),
            " in_flight_at_first_move=", in_flight_first.size(),
            " all_owned_after_ms=",
            rig.WaitOwnedBy(rig.AliveIds(), SteadyClock::now(), 30000),
            " in_flight_final_ms=", final_ms)) == 0);
}

TEST_CASE(
    "drill 7: a node that flaps, and a second process with a running "
    "node's id",
    "[cluster-drill]") {
  const int flaps = LongForm() ? 12 : 4;
  Rig rig("flap", false);
  rig.StartNodes(3);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  const int flapper = 1;
  const std::string id = rig.nodes().node_id(flapper);
  std::vector<int64_t> restart_ms;
  std::vector<int64_t> serve_ms;
  std::set<std::string> in_flight;
  for (int f = 0; f < flaps; ++f) {
    const std::set<std::string> now = rig.load().InFlight();
    in_flight.insert(now.begin(), now.end());
    rig.Expect(flapper, false);
    rig.nodes().KillNode(flapper);
    const auto t0 = SteadyClock::now();
    // Restarted at once with the same id: it waits out its old lease.
    absl::Status s = rig.nodes().StartNode(flapper, 60000);
    if (!s.ok()) {
      rig.Violation(absl::StrCat(id, " restart ", f, ": ", s.ToString()));
      break;
    }
    restart_ms.push_back(MsSince(t0));
    rig.Expect(flapper, true);
    // Then it serves: a transfer through it alone is decided.
    absl::Status through =
        rig.load().SubmitThrough({rig.nodes().address(flapper)});
    serve_ms.push_back(MsSince(t0));
    if (!through.ok()) {
      rig.Violation(absl::StrCat("a transfer through ", id, " after restart ",
                                 f, ": ", through.ToString()));
    }
    Report(absl::StrCat(
        "drill=7 kind=flap flap=", f, " node=", id, " in_flight=", now.size(),
        " listening_after_ms=", restart_ms.back(),
        " served_after_ms=", serve_ms.back(), " owners=", rig.OwnersText()));
    SleepMs(LongForm() ? 3000 : 1500);
  }
  // A second process with node-1's id (running): it must refuse to start.
  auto dup = rig.nodes().RunDuplicate(0, 30000);
  std::string dup_result = "ran";
  if (!dup.ok()) {
    rig.Violation("a second node-1 did not exit: " + dup.status().ToString());
  } else {
    const bool refused = WIFEXITED(dup->first) && WEXITSTATUS(dup->first) != 0;
    dup_result =
        absl::StrCat(WIFEXITED(dup->first) ? WEXITSTATUS(dup->first) : -1);
    if (!refused ||
        dup->second.find("another tccd with this node id is running") ==
            std::string::npos) {
      rig.Violation("a second node-1 was not refused: " + dup->second);
    }
  }
  if (!rig.nodes().Running(0)) rig.Violation("node-1 went with its duplicate");
  const int64_t final_ms =
      rig.WaitAnswered(in_flight, true, SteadyClock::now(), 60000);
  if (final_ms < 0) rig.Violation("in-flight transactions not final in 60 s");
  CHECK(rig.Finish(absl::StrCat(
            "drill=7 flaps=", restart_ms.size(), " node=", id,
            " in_flight_at_kills=", in_flight.size(),
            " listening_after_p50_ms=", Percentile(restart_ms, 0.5),
            " listening_after_max_ms=", Percentile(restart_ms, 1.0),
            " served_after_max_ms=", Percentile(serve_ms, 1.0),
            " duplicate_exit=", dup_result,
            " in_flight_final_ms=", final_ms)) == 0);
}

// Not one of issue 23's drills: every node cut from etcd past its lease at
// once, then healed. The cluster owns its shards again without a restart:
// a node whose lease is gone drops its shards and joins again with a new
// one (cluster/node_membership.h). Before that, 20 s after the heal every
// shard was still unowned and nothing was acknowledged until the nodes
// were restarted.
TEST_CASE("extra: every node cut from etcd past its lease", "[cluster-drill]") {
  Rig rig("partition-all", false);
  std::map<int, std::vector<std::string>> proxied;
  for (int i = 0; i < 3; ++i) proxied[i] = rig.MakeEtcdProxies();
  rig.StartNodes(3, proxied);
  rig.StartLoad();
  REQUIRE(rig.WaitAcknowledged(0, 20, 30000));
  rig.SetProxies(TcpFaultProxy::Mode::kBlackhole);
  SleepMs(3 * kLeaseTtlMs);
  rig.SetProxies(TcpFaultProxy::Mode::kPass);
  const auto t0 = SteadyClock::now();
  const int64_t owned_ms = rig.WaitOwnedBy(rig.AliveIds(), t0, 20000);
  const int64_t acked = rig.load().counts().acknowledged;
  const bool serving = rig.WaitAcknowledged(acked, 10, 10000);
  if (owned_ms < 0) {
    rig.Violation(absl::StrCat("20 s after the heal the shards' owners are ",
                               rig.OwnersText()));
  }
  if (!serving) rig.Violation("no transfer acknowledged 10 s after the heal");
  Report(absl::StrCat("extra=partition-all owned_after_heal_ms=", owned_ms,
                      " owners=", rig.OwnersText(),
                      " serving_after_heal=", serving ? 1 : 0));
  // No restart: the nodes, joined again, finish what was in flight.
  CHECK(rig.Finish("extra=partition-all kind=summary") == 0);
}

namespace {

// tccctl's call layer at one node, as an operator with kAdminToken.
tcc::tccctl::AdminClient AdminAt(const std::string& address) {
  tcc::tccctl::AdminClientOptions o;
  o.address = address;
  o.token = kAdminToken;
  o.timeout_ms = 20000;
  return tcc::tccctl::AdminClient(o);
}

// Approves the gated `gid` through `admin` (bound to what Show says now).
absl::Status Approve(tcc::tccctl::AdminClient& admin, const std::string& gid) {
  absl::StatusOr<v1::ShowResponse> shown = admin.Show(gid);
  if (!shown.ok()) return shown.status();
  v1::IssueApprovalRequest r;
  r.set_action(v1::APPROVAL_ACTION_GATE_APPROVE);
  r.set_gid(gid);
  r.set_revision(shown->transaction().revision());
  r.set_content_hash(shown->transaction().content_hash());
  r.set_reason("routing test");
  absl::StatusOr<v1::IssueApprovalResponse> issued = admin.IssueApproval(r);
  if (!issued.ok()) return issued.status();
  v1::ApproveRequest a;
  a.set_gid(gid);
  a.set_approval_id(issued->approval().approval_id());
  return admin.Approve(a).status();
}

// A gid of the prefix whose shard `node` owns now (etcd).
std::string GidOwnedBy(Rig& rig, const std::string& node,
                       const std::string& prefix) {
  auto m = rig.nodes().ReadMembership();
  REQUIRE(m.ok());
  for (int i = 0; i < 10000; ++i) {
    std::string gid = absl::StrCat(prefix, "-", i);
    const auto& o = m->owners[tcc::wal::ShardOfGid(gid, kShards)];
    if (o && o->node_id == node) return gid;
  }
  FAIL("no gid of " << node);
  return "";
}

// A transfer of 7 from bank-a's account `from` to bank-b's `to` that waits
// for an approval (up to 2 minutes), answered once accepted; its gid one
// of `node`'s shards.
// A Watch of `gid` at `address`, read on a thread of its own: the states
// it streamed and how it ended.
class StateWatch {
 public:
  StateWatch(const std::string& address, const std::string& gid, int deadline_s)
      : stub_(v1::Coordinator::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(deadline_s));
    v1::WatchRequest wr;
    wr.set_gid(gid);
    reader_ = stub_->Watch(&ctx_, wr);
    thread_ = std::thread([this] {
      v1::WatchEvent e;
      while (reader_->Read(&e)) {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(e.transaction().state());
      }
      end_ = reader_->Finish();
    });
  }
  ~StateWatch() {
    if (thread_.joinable()) {
      ctx_.TryCancel();
      thread_.join();
    }
  }
  // Waits until the stream ends; how it ended.
  grpc::Status Join() {
    thread_.join();
    return end_;
  }
  std::vector<v1::TxnState> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader_;
  std::mutex mu_;
  std::vector<v1::TxnState> seen_;
  grpc::Status end_;
  std::thread thread_;
};

v1::SubmitRequest GatedTransfer(Rig& rig, const std::string& node,
                                const std::string& prefix, uint32_t from,
                                uint32_t to) {
  v1::SubmitRequest r = rig.banks().Transfer("bank-a", from, "bank-b", to, 7);
  r.set_gid(GidOwnedBy(rig, node, prefix));
  r.set_approval_gate(true);
  r.set_approval_timeout_ms(120000);
  r.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  return r;
}

}  // namespace

TEST_CASE(
    "routing: a Watch follows its gid across a hand-over; Show fetches a "
    "finished one's timeline from the node that archived it",
    "[cluster-routing]") {
  const AdminTokens tokens;
  Rig rig("routing", false, {"--admin-token-file", tokens.path});
  rig.StartTwoSharing();
  const std::string one = rig.nodes().node_id(0);
  const std::string two = rig.nodes().node_id(1);
  auto client_one = rig.ClientOf(0);

  // Finished on node 1: its archive keeps the full record.
  auto done = rig.banks().Transfer("bank-a", 1, "bank-b", 2, 5);
  done.set_gid(GidOwnedBy(rig, one, "routing-done"));
  done.set_wait_for(v1::WAIT_FOR_FINISHED);
  auto finished = client_one->Submit(done);
  INFO(finished.status().ToString());
  REQUIRE(finished.ok());
  REQUIRE(finished->transaction().state() == v1::TXN_STATE_CONFIRMED);
  auto admin_one = AdminAt(rig.nodes().address(0));
  auto admin_two = AdminAt(rig.nodes().address(1));
  // Each node owns its shards and their scans are done: both are serving
  // (a cluster node has no start-up scan; it recovers shard by shard).
  for (auto* admin : {&admin_one, &admin_two}) {
    std::string health;
    for (int i = 0; i < 100 && health != "serving"; ++i) {
      absl::StatusOr<v1::StatusResponse> st = admin->Status();
      REQUIRE(st.ok());
      health = st->health();
      if (health != "serving") {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    CHECK(health == "serving");
  }
  // Its finishing write (the compact entry naming the archive node) may
  // land a moment after the answer.
  v1::ShowResponse before;
  for (int i = 0; i < 100; ++i) {
    auto shown = admin_one.Show(done.gid());
    REQUIRE(shown.ok());
    before = *std::move(shown);
    if (!before.archive_node().empty()) break;
    SleepMs(50);
  }
  REQUIRE(before.timeline_size() > 0);
  CHECK(before.archive_node() == one);

  // Gated on node 1, waiting for an approval; watched at node 1.
  v1::SubmitRequest gated = GatedTransfer(rig, one, "routing-gated", 3, 4);
  REQUIRE(client_one->Submit(gated).ok());
  bool awaiting = false;
  for (int i = 0; i < 200 && !awaiting; ++i) {
    auto v = client_one->Get(gated.gid());
    awaiting = v.ok() && v->state() == v1::TXN_STATE_AWAITING_APPROVAL;
    if (!awaiting) SleepMs(50);
  }
  REQUIRE(awaiting);
  StateWatch watch(rig.nodes().address(0), gated.gid(), 40);

  // Node 1 drained: every shard moves to node 2.
  REQUIRE(rig.nodes().Drain(0).ok());
  const int64_t moved_ms = rig.WaitOwnedBy({two}, SteadyClock::now(), 30000);
  REQUIRE(moved_ms >= 0);
  // Approved at node 2, which drives it now; the Watch opened at node 1
  // follows it to CONFIRMED and ends.
  absl::Status approved;
  for (int i = 0; i < 100; ++i) {
    approved = Approve(admin_two, gated.gid());
    if (!absl::IsUnavailable(approved)) break;
    SleepMs(100);
  }
  INFO(approved.ToString());
  REQUIRE(approved.ok());
  const grpc::Status watch_end = watch.Join();
  INFO(watch_end.error_message());
  CHECK(watch_end.ok());
  const std::vector<v1::TxnState> seen = watch.seen();
  REQUIRE(!seen.empty());
  CHECK(seen.front() == v1::TXN_STATE_AWAITING_APPROVAL);
  CHECK(seen.back() == v1::TXN_STATE_CONFIRMED);

  // Show at node 2 (the shard's owner now): the timeline from node 1's
  // archive, one hop.
  absl::StatusOr<v1::ShowResponse> shown_moved = admin_two.Show(done.gid());
  REQUIRE(shown_moved.ok());
  const v1::ShowResponse& moved = *shown_moved;
  CHECK(moved.archive_node() == one);
  CHECK(moved.timeline_size() == before.timeline_size());
  CHECK(moved.timeline_missing().empty());
  CHECK(moved.transaction().state() == v1::TXN_STATE_CONFIRMED);

  // A second gated one, node 2's, watched at node 1 (a relay): node 1's
  // stop ends that Watch UNAVAILABLE saying so (the client watches again
  // elsewhere), as it ends a local one, not by gRPC's shutdown deadline
  // cancelling the stream.
  v1::SubmitRequest open = GatedTransfer(rig, two, "routing-open", 5, 6);
  auto client_two = rig.ClientOf(1);
  REQUIRE(client_two->Submit(open).ok());
  grpc::ClientContext open_ctx;
  open_ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(40));
  v1::WatchRequest open_wr;
  open_wr.set_gid(open.gid());
  auto coordinator = v1::Coordinator::NewStub(grpc::CreateChannel(
      rig.nodes().address(0), grpc::InsecureChannelCredentials()));
  auto open_reader = coordinator->Watch(&open_ctx, open_wr);
  v1::WatchEvent first_event;
  REQUIRE(open_reader->Read(&first_event));  // the relay is running

  // Node 1 stopped for good: its archive went with it, and Show says so.
  rig.Expect(0, false);
  const auto stop_start = SteadyClock::now();
  int64_t watch_end_ms = -1;
  grpc::Status open_end;
  std::thread open_watcher([&] {
    v1::WatchEvent more;
    while (open_reader->Read(&more)) {
    }
    open_end = open_reader->Finish();
    watch_end_ms = MsSince(stop_start);
  });
  auto stopped = rig.nodes().StopNode(0);
  const int64_t stop_ms = MsSince(stop_start);
  open_watcher.join();
  REQUIRE(stopped.ok());
  INFO("stop took " << stop_ms << " ms; the relayed Watch ended after "
                    << watch_end_ms << " ms: " << open_end.error_code() << " "
                    << open_end.error_message());
  CHECK(open_end.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(watch_end_ms < 2000);
  CHECK_THAT(open_end.error_message(), Catch::Contains("tccd is stopping"));
  bool gone = false;
  v1::ShowResponse after;
  for (int i = 0; i < 100 && !gone; ++i) {
    auto shown = admin_two.Show(done.gid());
    REQUIRE(shown.ok());
    after = *std::move(shown);
    gone = !after.timeline_missing().empty();
    if (!gone) SleepMs(100);
  }
  INFO(after.DebugString());
  REQUIRE(gone);
  CHECK(after.timeline_size() == 0);
  CHECK_THAT(after.timeline_missing(), Catch::Contains(one));
  CHECK(after.transaction().state() == v1::TXN_STATE_CONFIRMED);
  REQUIRE(Approve(admin_two, open.gid()).ok());
  rig.banks().SetClientAddresses({rig.nodes().address(1)});
  CHECK(rig.banks()
            .CheckFinal({done.gid(), gated.gid(), open.gid()}, 30000)
            .ok());
}

TEST_CASE(
    "routing: nodes whose listeners are mutual TLS forward to each other "
    "with cluster.peers' client certificate; each client is rate-limited "
    "where it called, not again under the forwarding node's identity",
    "[cluster-routing]") {
  const std::string dir = tcc::harness::MakeTempDir("tccd-cluster-tls-pki");
  const tcc::harness::Cleanup cleanup{dir};
  absl::StatusOr<tcc::harness::TestPki> pki = tcc::harness::MakeTestPki(dir);
  INFO(pki.status().ToString());
  REQUIRE(pki.ok());
  absl::StatusOr<tcc::harness::CertFiles> node_cert =
      pki->IssueClientCert("tccd-node");
  REQUIRE(node_cert.ok());
  auto q = [](const std::string& path) { return "\"" + path + "\""; };
  // 2 calls a second per client identity, bursts of 2, at every node.
  const std::string node_yaml = absl::StrCat(
      "tls:\n  mode: mtls\n  cert_file: ", q(pki->server().cert_file),
      "\n  key_file: ", q(pki->server().key_file),
      "\n  client_ca_file: ", q(pki->ca_file()),
      "\nlimits:\n  client_requests_per_s: 2\n  client_burst: 2\n");
  const std::string peers =
      absl::StrCat("  peers:\n    tls: true\n    ca_file: ", q(pki->ca_file()),
                   "\n    cert_file: ", q(node_cert->cert_file),
                   "\n    key_file: ", q(node_cert->key_file),
                   "\n    identities: [tccd-node]\n");
  Rig rig("routing-tls", false, {}, node_yaml, peers);
  rig.StartTwoSharing();
  const std::string one = rig.nodes().node_id(0);
  const std::string two = rig.nodes().node_id(1);
  // A client at node 1 with a certificate of its own; one attempt, so a
  // refusal shows.
  auto client_at_one = [&](const std::string& identity) {
    absl::StatusOr<tcc::harness::CertFiles> cert =
        pki->IssueClientCert(identity);
    REQUIRE(cert.ok());
    tcc::tls::ChannelTlsFiles files;
    files.ca_file = pki->ca_file();
    files.cert_file = cert->cert_file;
    files.key_file = cert->key_file;
    auto creds = tcc::tls::ChannelCredentials(files, "test.");
    REQUIRE(creds.ok());
    tcc::client::ClientOptions o;
    o.addresses = {rig.nodes().address(0)};
    o.credentials = *creds;
    o.max_attempts = 1;
    return std::make_unique<tcc::client::CoordinatorClient>(o);
  };
  // Node 2's gids, submitted at node 1 by four clients, two each (their
  // certificates and gids made first, so the calls follow each other
  // closely): each is forwarded to node 2 over TLS with the node
  // certificate. Every one is within its client's burst at node 1; at node
  // 2 the eight would be one identity's (the node's), past its burst of 2
  // and what 2 a second refill in the seconds they take, if node 2 limited
  // them again.
  std::vector<std::unique_ptr<tcc::client::CoordinatorClient>> clients;
  std::vector<v1::SubmitRequest> transfers;
  for (int n = 0; n < 8; ++n) {
    if (n % 2 == 0) clients.push_back(client_at_one(absl::StrCat("app-", n)));
    auto r = rig.banks().Transfer("bank-a", n, "bank-b", n, 5);
    r.set_gid(GidOwnedBy(rig, two, absl::StrCat("routing-tls-", n)));
    r.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    transfers.push_back(std::move(r));
  }
  for (int n = 0; n < 8; ++n) {
    auto done = clients[n / 2]->Submit(transfers[n]);
    INFO(n << ": " << done.status().ToString());
    CHECK(done.ok());
  }
  auto page = rig.nodes().ScrapeMetrics(0);
  REQUIRE(page.ok());
  CHECK(tcc::harness::MetricValue(
            *page, "tccd_cluster_forwarded_calls_total{outcome=\"ok\"}")
            .value_or(0) >= 8);
  // The limit holds where a client calls: ten quick calls of one client at
  // node 1, some refused there.
  auto eager = client_at_one("app-eager");
  const std::string gid = transfers[0].gid();
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    auto got = eager->Get(gid);
    if (!got.ok()) {
      INFO(got.status().ToString());
      CHECK(absl::IsResourceExhausted(got.status()));
      CHECK_THAT(std::string(got.status().message()),
                 Catch::Contains("cert:app-eager"));
      ++refused;
    }
  }
  CHECK(refused > 0);
}

TEST_CASE(
    "routing: Admin calls for another node's gid are forwarded to its owner "
    "with the caller's token",
    "[cluster-routing]") {
  const AdminTokens tokens;
  Rig rig("routing-admin", false, {"--admin-token-file", tokens.path});
  rig.StartTwoSharing();
  const std::string one = rig.nodes().node_id(0);
  const std::string two = rig.nodes().node_id(1);
  auto client_one = rig.ClientOf(0);

  // Node 2's gid, gated, submitted at node 1 (forwarded).
  v1::SubmitRequest gated = GatedTransfer(rig, two, "routing-admin", 7, 8);
  REQUIRE(client_one->Submit(gated).ok());
  auto admin_one = AdminAt(rig.nodes().address(0));
  bool awaiting = false;
  for (int i = 0; i < 200 && !awaiting; ++i) {
    absl::StatusOr<v1::ShowResponse> shown = admin_one.Show(gated.gid());
    awaiting = shown.ok() &&
               shown->transaction().state() == v1::TXN_STATE_AWAITING_APPROVAL;
    if (!awaiting) SleepMs(50);
  }
  REQUIRE(awaiting);
  const double forwarded_before =
      tcc::harness::MetricValue(
          *rig.nodes().ScrapeMetrics(0),
          "tccd_cluster_forwarded_calls_total{outcome=\"ok\"}")
          .value_or(0);
  // A wrong token is refused: nothing approved.
  tcc::tccctl::AdminClientOptions wrong_options;
  wrong_options.address = rig.nodes().address(0);
  wrong_options.token = "not-the-token";
  tcc::tccctl::AdminClient wrong(wrong_options);
  const absl::Status refused = Approve(wrong, gated.gid());
  INFO(refused.ToString());
  CHECK(absl::IsUnauthenticated(refused));
  // Show, IssueApproval and Approve at node 1: each answered by node 2,
  // which drives the gid; it confirms.
  const absl::Status approved = Approve(admin_one, gated.gid());
  INFO(approved.ToString());
  REQUIRE(approved.ok());
  bool confirmed = false;
  for (int i = 0; i < 200 && !confirmed; ++i) {
    absl::StatusOr<v1::ShowResponse> shown = admin_one.Show(gated.gid());
    confirmed =
        shown.ok() && shown->transaction().state() == v1::TXN_STATE_CONFIRMED;
    if (!confirmed) SleepMs(50);
  }
  CHECK(confirmed);
  const double forwarded_after =
      tcc::harness::MetricValue(
          *rig.nodes().ScrapeMetrics(0),
          "tccd_cluster_forwarded_calls_total{outcome=\"ok\"}")
          .value_or(0);
  CHECK(forwarded_after >= forwarded_before + 3);
  // Node 2 holds the approval it consumed: Show there names it.
  auto admin_two = AdminAt(rig.nodes().address(1));
  absl::StatusOr<v1::ShowResponse> at_owner = admin_two.Show(gated.gid());
  REQUIRE(at_owner.ok());
  CHECK(at_owner->transaction().state() == v1::TXN_STATE_CONFIRMED);
  CHECK(at_owner->approvals_size() >= 1);
  CHECK(rig.banks().CheckFinal({gated.gid()}, 30000).ok());
}

TEST_CASE(
    "routing: a Watch relayed by node 1 follows node 2's gid across node 2's "
    "kill -9 and the takeover",
    "[cluster-routing]") {
  const AdminTokens tokens;
  Rig rig("routing-kill", false, {"--admin-token-file", tokens.path});
  rig.StartTwoSharing();
  const std::string one = rig.nodes().node_id(0);
  const std::string two = rig.nodes().node_id(1);
  auto client_two = rig.ClientOf(1);

  // Node 2's gid, gated (it waits, so it is in flight when node 2 dies).
  v1::SubmitRequest gated = GatedTransfer(rig, two, "routing-kill", 9, 10);
  REQUIRE(client_two->Submit(gated).ok());
  // Watched at node 1: a relay of node 2's stream.
  StateWatch watch(rig.nodes().address(0), gated.gid(), 60);
  bool awaiting = false;
  for (int i = 0; i < 200 && !awaiting; ++i) {
    const std::vector<v1::TxnState> seen = watch.seen();
    awaiting = !seen.empty() && seen.back() == v1::TXN_STATE_AWAITING_APPROVAL;
    if (!awaiting) SleepMs(50);
  }
  REQUIRE(awaiting);

  // Node 2 killed: node 1 takes its shards once its lease has expired,
  // resumes the gid and approves it there. Resumed after a crash, the gid
  // asks its participants about its Trys first (TRYING, DESIGN.md section
  // 8), then awaits its approval again: approved once it does.
  rig.Expect(1, false);
  rig.nodes().KillNode(1);
  REQUIRE(rig.WaitOwnedBy({one}, SteadyClock::now(), 30000) >= 0);
  auto admin_one = AdminAt(rig.nodes().address(0));
  bool awaiting_again = false;
  for (int i = 0; i < 300 && !awaiting_again; ++i) {
    absl::StatusOr<v1::ShowResponse> shown = admin_one.Show(gated.gid());
    awaiting_again = shown.ok() && shown->transaction().state() ==
                                       v1::TXN_STATE_AWAITING_APPROVAL;
    if (!awaiting_again) SleepMs(100);
  }
  REQUIRE(awaiting_again);
  absl::Status approved;
  for (int i = 0; i < 100; ++i) {
    approved = Approve(admin_one, gated.gid());
    if (!absl::IsUnavailable(approved)) break;
    SleepMs(100);
  }
  INFO(approved.ToString());
  REQUIRE(approved.ok());
  // The Watch opened before the kill follows it to CONFIRMED and ends.
  const grpc::Status watch_end = watch.Join();
  INFO(watch_end.error_code() << " " << watch_end.error_message());
  CHECK(watch_end.ok());
  const std::vector<v1::TxnState> seen = watch.seen();
  REQUIRE(!seen.empty());  // AWAITING_APPROVAL among them, before the kill
  CHECK(seen.back() == v1::TXN_STATE_CONFIRMED);
  rig.banks().SetClientAddresses({rig.nodes().address(0)});
  CHECK(rig.banks().CheckFinal({gated.gid()}, 30000).ok());
}
