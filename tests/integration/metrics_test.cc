// The operator's gauges on /metrics, against a real tccd and real banks:
// what the alert rules in deploy/prometheus/ read (unfinished transactions
// and the oldest's age, transactions in doubt, recovery progress, WAL sync
// latency). Each is checked moving both ways, not just present.
#include <catch2/catch.hpp>
#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "bank_cluster.h"
#include "http_get.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

ClusterOptions Options(const std::string& name) {
  ClusterOptions o;
  o.root_dir = tcc::harness::MakeTempDir("tccd-metrics-" + name);
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 10;
  o.metrics = true;
  return o;
}

// The value of the sample `series` (name and labels exactly as printed),
// or -1 when the page lacks it.
double Sample(BankCluster& c, const std::string& series) {
  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl(c.tccd_metrics_port(), "/metrics"), 5000);
  if (!page.ok()) return -1;
  const std::string needle = "\n" + series + " ";
  const size_t at = page->find(needle);
  if (at == std::string::npos) return -1;
  return std::stod(page->substr(at + needle.size()));
}

// Polls (the gauges are refreshed every 250 ms) until `pred` holds for the
// sample's value, up to 10 s; the last value seen.
template <typename Pred>
double WaitSample(BankCluster& c, const std::string& series, Pred pred) {
  double v = -1;
  for (int i = 0; i < 200; ++i) {
    v = Sample(c, series);
    if (pred(v)) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return v;
}

// A transfer whose Submit answers once it is accepted, with a long
// try-deadline so that an unreachable bank leaves it in doubt.
v1::SubmitRequest Accepted(BankCluster& c, uint32_t from, uint32_t to) {
  auto req = c.Transfer("bank-a", from, "bank-b", to, 5);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  req.set_try_timeout_ms(120000);
  return req;
}

}  // namespace

TEST_CASE("the operator's gauges exist at 0 from the start") {
  BankCluster c(Options("zero"));
  REQUIRE(c.Start().ok());
  for (const char* series :
       {"tccd_unfinished_transactions", "tccd_oldest_unfinished_age_seconds",
        "tccd_in_doubt_transactions", "tccd_oldest_in_doubt_age_seconds",
        "tccd_recovery_transactions{progress=\"total\"}",
        "tccd_recovery_transactions{progress=\"done\"}"}) {
    INFO(series);
    CHECK(Sample(c, series) == 0);
  }
  // The WAL's syncs are measured from the first (opening a new WAL syncs).
  CHECK(Sample(c, "tccd_wal_sync_seconds_count") >= 0);
  CHECK(Sample(c, "tccd_wal_group_size_count") >= 0);
}

TEST_CASE("a transaction in doubt is counted and aged until it settles") {
  BankCluster c(Options("doubt"));
  REQUIRE(c.Start().ok());
  // A durable transaction: the WAL's syncs are measured.
  auto ok = c.Transfer("bank-a", 1, "bank-b", 2, 5);
  REQUIRE(c.client().Submit(ok).ok());
  CHECK(WaitSample(c, "tccd_wal_sync_seconds_count",
                   [](double v) { return v >= 1; }) >= 1);
  CHECK(Sample(c, "tccd_wal_group_size_sum") >= 1);

  // bank-b is gone: its Try's outcome is unknown, nothing is decided.
  c.KillBank("bank-b");
  auto req = Accepted(c, 3, 4);
  REQUIRE(c.client().Submit(req).ok());
  CHECK(WaitSample(c, "tccd_in_doubt_transactions",
                   [](double v) { return v == 1; }) == 1);
  // (Counted in etcd every 2 s in cluster mode.)
  CHECK(WaitSample(c, "tccd_unfinished_transactions",
                   [](double v) { return v == 1; }) == 1);
  // Ages grow (whole seconds pass).
  CHECK(WaitSample(c, "tccd_oldest_in_doubt_age_seconds",
                   [](double v) { return v >= 1; }) >= 1);
  CHECK(Sample(c, "tccd_oldest_unfinished_age_seconds") >= 1);

  // Back: tccd asks, learns, decides, finishes; the gauges fall to 0.
  REQUIRE(c.StartBank("bank-b").ok());
  REQUIRE(c.CheckFinal({ok.gid(), req.gid()}, 60000).ok());
  CHECK(WaitSample(c, "tccd_in_doubt_transactions",
                   [](double v) { return v == 0; }) == 0);
  CHECK(WaitSample(c, "tccd_unfinished_transactions",
                   [](double v) { return v == 0; }) == 0);
  CHECK(Sample(c, "tccd_oldest_in_doubt_age_seconds") == 0);
  CHECK(Sample(c, "tccd_oldest_unfinished_age_seconds") == 0);
}

TEST_CASE("recovery progress: found at start, done once final") {
  BankCluster c(Options("recovery"));
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");
  std::vector<std::string> gids;
  for (uint32_t i = 0; i < 3; ++i) {
    auto req = Accepted(c, i, i);
    REQUIRE(c.client().Submit(req).ok());
    gids.push_back(req.gid());
  }
  c.KillTccd();
  REQUIRE(c.StartTccd().ok());
  CHECK(WaitSample(c, "tccd_recovery_transactions{progress=\"total\"}",
                   [](double v) { return v == 3; }) == 3);
  // bank-b is still down: none can finish.
  CHECK(Sample(c, "tccd_recovery_transactions{progress=\"done\"}") == 0);
  // (Counted in etcd every 2 s in cluster mode.)
  CHECK(WaitSample(c, "tccd_unfinished_transactions",
                   [](double v) { return v == 3; }) == 3);
  REQUIRE(c.StartBank("bank-b").ok());
  REQUIRE(c.CheckFinal(gids, 60000).ok());
  CHECK(WaitSample(c, "tccd_recovery_transactions{progress=\"done\"}",
                   [](double v) { return v == 3; }) == 3);
}

TEST_CASE(
    "cluster mode: the shards, the etcd group commit's Txns and the fence "
    "on /metrics",
    "[etcd-only]") {
  BankCluster c(Options("cluster"));
  REQUIRE(c.on_etcd());
  REQUIRE(c.Start().ok());
  const double shards = c.etcd().shards;
  // One node: it took every shard at start, and none is without an owner.
  CHECK(WaitSample(c, "tccd_cluster_shards{state=\"owned_here\"}",
                   [&](double v) { return v == shards; }) == shards);
  // (As the node last read the membership: once after its campaigns.)
  CHECK(WaitSample(c, "tccd_cluster_shards{state=\"unowned\"}",
                   [](double v) { return v == 0; }) == 0);
  CHECK(Sample(c, "tccd_cluster_shard_changes_total{kind=\"takeover\"}") ==
        shards);
  CHECK(Sample(c, "tccd_cluster_shard_changes_total{kind=\"lost\"}") == 0);
  CHECK(Sample(c, "tccd_cluster_fenced_writes_refused_total") == 0);
  // A transaction: its registration, decision and end are etcd Txns of the
  // group commit, each a sample of the WAL's latency and group size.
  const double txns_before = Sample(c, "tccd_etcd_txns_total");
  const double syncs_before = Sample(c, "tccd_wal_sync_seconds_count");
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 5);
  REQUIRE(c.client().Submit(req).ok());
  REQUIRE(c.CheckFinal({req.gid()}, 30000).ok());
  const double syncs =
      WaitSample(c, "tccd_wal_sync_seconds_count",
                 [&](double v) { return v >= syncs_before + 2; });
  CHECK(syncs >= syncs_before + 2);
  CHECK(Sample(c, "tccd_wal_group_size_count") >= syncs);
  CHECK(Sample(c, "tccd_wal_group_size_sum") >= syncs);
  CHECK(Sample(c, "tccd_wal_sync_seconds_sum") > 0);
  // The counters are sampled every 2 s in cluster mode.
  CHECK(WaitSample(c, "tccd_etcd_txns_total", [&](double v) {
          return v >= txns_before + 2;
        }) >= txns_before + 2);
  CHECK(Sample(c, "tccd_cluster_fenced_writes_refused_total") == 0);
}
