// The /metrics endpoint over real HTTP on 127.0.0.1.
#include "server/metrics.h"

#include <catch2/catch.hpp>
#include <string>

#include "http_get.h"

TEST_CASE("metrics are served at /metrics with bounded labels") {
  tcc::server::CoordinatorMetrics metrics;
  auto endpoint =
      tcc::server::MetricsEndpoint::Start("127.0.0.1:0", metrics.registry());
  REQUIRE(endpoint.ok());
  REQUIRE((*endpoint)->port() > 0);

  metrics.TransactionAccepted();
  metrics.TransactionFinished("confirmed", 0.004);
  metrics.BranchCall("try", "executed", false, 0.001);
  metrics.BranchCall("try", "executed", true, 0.001);
  // Series are cached by label values: the same labels add up, others stay
  // apart.
  metrics.BranchCall("try", "executed", true, 0.002);
  metrics.BranchCall("confirm", "executed", true, 0.001);
  metrics.Retry("confirm");
  metrics.UnknownOutcome("try");
  metrics.UnknownResolved("query_tried", 0.5);
  metrics.Lookup("tried");
  metrics.SetStuckBranches(2);
  metrics.WalSync(0.002, 17);
  metrics.SetRecovery(3, 10);
  metrics.SetBreakerState("bank-a", 2);
  metrics.Alert("protocol_violation");
  metrics.SetParticipantRpcTotals(7, 3, 40, 1);

  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl((*endpoint)->port(), "/metrics"), 10000);
  REQUIRE(page.ok());  // 200
  const std::string& body = *page;
  CHECK(body.find("tccd_transactions_total{event=\"accepted\"} 1") !=
        std::string::npos);
  CHECK(body.find("tccd_transactions_total{event=\"confirmed\"} 1") !=
        std::string::npos);
  CHECK(body.find("tccd_branch_calls_total{outcome=\"executed\",phase=\"try\","
                  "replayed=\"true\"} 2") != std::string::npos);
  CHECK(body.find("tccd_branch_calls_total{outcome=\"executed\",phase=\"try\","
                  "replayed=\"false\"} 1") != std::string::npos);
  CHECK(body.find("tccd_branch_calls_total{outcome=\"executed\",phase=\""
                  "confirm\",replayed=\"true\"} 1") != std::string::npos);
  CHECK(body.find("tccd_branch_call_seconds_count{phase=\"try\"} 3") !=
        std::string::npos);
  CHECK(body.find("tccd_stuck_branches 2") != std::string::npos);
  CHECK(body.find("tccd_circuit_breaker_state{participant=\"bank-a\"} 2") !=
        std::string::npos);
  CHECK(body.find("tccd_recovery_transactions{progress=\"done\"} 3") !=
        std::string::npos);
  CHECK(body.find("tccd_wal_group_size_count 1") != std::string::npos);
  CHECK(body.find("tccd_participant_rpcs{kind=\"batch\"} 3") !=
        std::string::npos);
  CHECK(body.find("tccd_participant_rpcs{kind=\"batched_calls\"} 40") !=
        std::string::npos);
  CHECK(body.find("gid") == std::string::npos);
}

TEST_CASE("the etcd group commit's sampled totals are counters") {
  tcc::server::CoordinatorMetrics metrics;
  auto endpoint =
      tcc::server::MetricsEndpoint::Start("127.0.0.1:0", metrics.registry());
  REQUIRE(endpoint.ok());
  metrics.SetEtcdTotals({5, 40, 9, 20, 0});
  metrics.SetEtcdTotals({7, 50, 12, 31, 2});
  // The same sample again adds nothing.
  metrics.SetEtcdTotals({7, 50, 12, 31, 2});
  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl((*endpoint)->port(), "/metrics"), 10000);
  REQUIRE(page.ok());
  const std::string& body = *page;
  INFO(body);
  CHECK(body.find("# TYPE tccd_etcd_txns_total counter") != std::string::npos);
  CHECK(body.find("tccd_etcd_txns_total 7") != std::string::npos);
  CHECK(body.find("tccd_etcd_appends_total 50") != std::string::npos);
  CHECK(body.find("tccd_etcd_client_txns_total 12") != std::string::npos);
  CHECK(body.find("tccd_etcd_appends_held_total 31") != std::string::npos);
  CHECK(body.find("tccd_cluster_fenced_writes_refused_total 2") !=
        std::string::npos);
}

TEST_CASE("the series alerts and dashboards read exist from the start") {
  // A dashboard cannot tell 0 from no data: each is exported at 0 before
  // its first event.
  tcc::server::CoordinatorMetrics metrics;
  metrics.ExportParticipants({"bank-a", "bank-b"});
  auto endpoint =
      tcc::server::MetricsEndpoint::Start("127.0.0.1:0", metrics.registry());
  REQUIRE(endpoint.ok());
  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl((*endpoint)->port(), "/metrics"), 10000);
  REQUIRE(page.ok());
  const std::string& body = *page;
  INFO(body);
  CHECK(body.find("tccd_stuck_branches 0") != std::string::npos);
  CHECK(body.find("tccd_alerts_total{kind=\"core\"} 0") != std::string::npos);
  CHECK(body.find("tccd_alerts_total{kind=\"lost_decision\"} 0") !=
        std::string::npos);
  CHECK(body.find("tccd_alerts_total{kind=\"fatal\"} 0") != std::string::npos);
  CHECK(body.find("tccd_circuit_breaker_state{participant=\"bank-a\"} 0") !=
        std::string::npos);
  CHECK(body.find("tccd_circuit_breaker_state{participant=\"bank-b\"} 0") !=
        std::string::npos);
}

TEST_CASE("a taken address is an error, not a crash") {
  tcc::server::CoordinatorMetrics metrics;
  auto first =
      tcc::server::MetricsEndpoint::Start("127.0.0.1:0", metrics.registry());
  REQUIRE(first.ok());
  auto second = tcc::server::MetricsEndpoint::Start(
      "127.0.0.1:" + std::to_string((*first)->port()), metrics.registry());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
}
