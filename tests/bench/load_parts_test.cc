// The parts of tcc-bench that need no server: percentiles, transfer planning,
// payload encoding, /proc/PID/stat parsing, metric pages.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "latency_summary.h"
#include "metric_text.h"
#include "process_cpu.h"
#include "transfer_plan.h"

using tcc::bench::JsonPayloadFormat;
using tcc::bench::LatencyRecorder;
using tcc::bench::TransferLeg;
using tcc::bench::TransferPlanner;
using tcc::bench::TransferShape;

TEST_CASE("percentiles are nearest-rank and ordered") {
  std::vector<int64_t> samples;
  for (int64_t i = 1000; i >= 1; --i) samples.push_back(i);
  auto s = tcc::bench::Summarize(samples);
  CHECK(s.count == 1000);
  CHECK(s.p50_ns == 500);
  CHECK(s.p99_ns == 990);
  CHECK(s.p999_ns == 999);
  CHECK(s.max_ns == 1000);
  CHECK(s.mean_ns == Approx(500.5));
}

TEST_CASE("a single sample is every percentile; none gives zeros") {
  LatencyRecorder one;
  one.Record(7);
  auto s = one.Summary();
  CHECK(s.p50_ns == 7);
  CHECK(s.p999_ns == 7);
  CHECK(s.max_ns == 7);
  LatencyRecorder none;
  CHECK(none.Summary().count == 0);
  CHECK(none.Summary().max_ns == 0);
}

TEST_CASE("a few slow samples show in the tail, not the median") {
  std::vector<int64_t> samples(995, 1);
  for (int i = 0; i < 5; ++i) samples.push_back(100);
  auto s = tcc::bench::Summarize(samples);
  CHECK(s.p50_ns == 1);
  CHECK(s.p99_ns == 1);
  CHECK(s.p999_ns == 100);
}

TEST_CASE("json payloads are padded to the size asked, and stay JSON") {
  JsonPayloadFormat json;
  TransferLeg leg{"bank-a", "debit", 123, 1};
  CHECK(json.Encode(leg, 0) == R"({"account":"A123","amount":1})");
  const std::string padded = json.Encode(leg, 100);
  CHECK(padded.size() == 100);
  CHECK(padded.rfind(R"({"account":"A123","amount":1,"pad":"xx)", 0) == 0);
  CHECK(padded.substr(padded.size() - 2) == "\"}");
  CHECK(json.Encode(leg, 16384).size() == 16384);
  // Too small to pad: the bare encoding, never cut.
  CHECK(json.Encode(leg, 31) == R"({"account":"A123","amount":1})");
  CHECK(tcc::bench::MakePayloadFormat("json").ok());
  CHECK(!tcc::bench::MakePayloadFormat("xml").ok());
}

TEST_CASE("bank payloads are ACCOUNT:AMOUNT, padded by an ignored field") {
  tcc::bench::BankPayloadFormat bank;
  TransferLeg leg{"bank-a", "debit", 123, 1};
  CHECK(bank.Encode(leg, 0) == "123:1");
  CHECK(bank.Encode(leg, 6) == "123:1");  // no room for ":" and one byte
  CHECK(bank.Encode(leg, 7) == "123:1:x");
  const std::string padded = bank.Encode(leg, 100);
  CHECK(padded.size() == 100);
  CHECK(padded.rfind("123:1:xx", 0) == 0);
  CHECK(bank.Encode(leg, 16384).size() == 16384);
  CHECK(tcc::bench::MakePayloadFormat("bank").ok());
}

TEST_CASE("transfers balance, spread over accounts, and are reproducible") {
  auto planner =
      TransferPlanner::Create(TransferShape{4, {"bank-a", "bank-b"}, 10, 42});
  REQUIRE(planner.ok());
  std::set<int64_t> debited;
  for (uint64_t seq = 0; seq < 500; ++seq) {
    auto legs = planner->Plan(seq);
    REQUIRE(legs.size() == 4);
    CHECK(legs[0].action == "debit");
    CHECK(legs[0].participant == "bank-a");
    CHECK(legs[1].participant == "bank-b");
    CHECK(legs[2].participant == "bank-a");
    int64_t sum = legs[0].amount;
    for (size_t i = 1; i < legs.size(); ++i) {
      CHECK(legs[i].action == "credit");
      CHECK(legs[i].account != legs[0].account);
      CHECK(legs[i].account >= 0);
      CHECK(legs[i].account < 10);
      sum -= legs[i].amount;
    }
    CHECK(sum == 0);
    debited.insert(legs[0].account);
  }
  CHECK(debited.size() == 10);
  CHECK(planner->Plan(7)[1].account == planner->Plan(7)[1].account);
  CHECK(!TransferPlanner::Create(TransferShape{0, {"a"}, 10, 1}).ok());
  CHECK(!TransferPlanner::Create(TransferShape{2, {}, 10, 1}).ok());
  CHECK(!TransferPlanner::Create(TransferShape{2, {"a"}, 1, 1}).ok());
}

TEST_CASE("cpu time is read after the command name, spaces and all") {
  const std::string stat =
      "4242 (tcc (a) b) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 4 0 99";
  auto s = tcc::bench::ParseProcStatCpuSeconds(stat, 100);
  REQUIRE(s.ok());
  CHECK(*s == Approx(4.0));
  CHECK(!tcc::bench::ParseProcStatCpuSeconds("garbage", 100).ok());
  CHECK(!tcc::bench::ParseProcStatCpuSeconds("1 (x) S 1 2", 100).ok());
  auto self = tcc::bench::ProcessCpuSeconds(getpid());
  REQUIRE(self.ok());
  CHECK(*self >= 0);
}

TEST_CASE("metric sums take the matching series only") {
  const std::string page =
      "# HELP tccd_transactions_total Transactions\n"
      "# TYPE tccd_transactions_total counter\n"
      "tccd_transactions_total{event=\"accepted\"} 7\n"
      "tccd_transactions_total{event=\"confirmed\"} 40\n"
      "tccd_transactions_total{event=\"cancelled\"} 2\n"
      "tccd_transactions_total_other{event=\"confirmed\"} 1000\n"
      "tccd_branch_calls_total{phase=\"try\",participant=\"a b\"} 3 1700000\n"
      "tccd_branch_calls_total{phase=\"try\",participant=\"c\"} 4.5\n"
      "tccd_branch_calls_total{phase=\"confirm\",participant=\"c\"} 100\n"
      "tccd_up 1\n"
      "tccd_broken{event=\"x\"} notanumber\n"
      "tccd_torn{event=\"confirmed\"\n";
  using tcc::bench::SumSeries;
  CHECK(SumSeries(page, "tccd_transactions_total{event=\"c") == 42);
  CHECK(SumSeries(page, "tccd_transactions_total{") == 49);
  CHECK(SumSeries(page, "tccd_branch_calls_total{", "phase=\"try\"") == 7.5);
  CHECK(SumSeries(page, "tccd_up") == 1);
  CHECK(SumSeries(page, "tccd_broken") == 0);
  CHECK(SumSeries(page, "tccd_torn") == 0);
  CHECK(SumSeries(page, "nothing") == 0);
  CHECK(SumSeries("", "tccd") == 0);
}
