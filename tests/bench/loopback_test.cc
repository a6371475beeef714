// tcc-bench, tcc-baseline-relay and tcc-noop-participant end to end on
// loopback: two no-op participants, the relay in front of them, one second
// of closed-loop load at four callers. Checks that the tools work (something
// completes, nothing fails, the report is consistent), not how fast. No
// warm-up, so the first four transactions count however slow the machine.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "process.h"

namespace {

using tcc::harness::Process;
using tcc::harness::ProcessOptions;

std::unique_ptr<Process> StartServer(std::vector<std::string> argv,
                                     const std::string& name, int* port) {
  auto p = Process::Start(ProcessOptions{std::move(argv), {}, "", name});
  REQUIRE(p.ok());
  auto listening = (*p)->WaitForListening(10000);
  INFO((*p)->Output());
  REQUIRE(listening.ok());
  *port = *listening;
  return std::move(*p);
}

// "bench: k=v k=v ..." -> {k: v}.
std::map<std::string, double> ParseSummary(const std::string& line) {
  std::map<std::string, double> fields;
  for (absl::string_view kv : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    double v = 0;
    if (absl::SimpleAtod(p.second, &v)) fields[p.first] = v;
  }
  return fields;
}

}  // namespace

TEST_CASE(
    "a short closed-loop run through the relay completes without "
    "errors") {
  int port_a = 0;
  int port_b = 0;
  int relay_port = 0;
  auto bank_a = StartServer({TCC_NOOP_PARTICIPANT, "--listen", "127.0.0.1:0"},
                            "noop-a", &port_a);
  auto bank_b = StartServer({TCC_NOOP_PARTICIPANT, "--listen", "127.0.0.1:0"},
                            "noop-b", &port_b);
  auto relay =
      StartServer({TCC_BASELINE_RELAY, "--listen", "127.0.0.1:0",
                   "--participant", absl::StrCat("bank-a=127.0.0.1:", port_a),
                   "--participant", absl::StrCat("bank-b=127.0.0.1:", port_b)},
                  "relay", &relay_port);

  auto bench = Process::Start(ProcessOptions{
      {TCC_BENCH, "--target", absl::StrCat("127.0.0.1:", relay_port),
       "--concurrency", "4", "--duration-s", "1", "--warmup-s", "0",
       "--participants", "bank-a,bank-b", "--pids",
       absl::StrCat(relay->pid(), ",", bank_a->pid())},
      {},
      "",
      "tcc-bench"});
  REQUIRE(bench.ok());
  auto line = (*bench)->WaitForLine("^(bench: .*)$", 30000);
  INFO((*bench)->Output());
  REQUIRE(line.ok());
  auto status = (*bench)->Wait(10000);
  REQUIRE(status.ok());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);

  auto f = ParseSummary(*line);
  for (const char* key : {"tps", "p50_ms", "p99_ms", "p999_ms", "max_ms",
                          "errors", "completed"}) {
    INFO(key);
    REQUIRE(f.count(key) == 1);
  }
  CHECK(f["completed"] > 0);
  CHECK(f["tps"] > 0);
  CHECK(f["errors"] == 0);
  CHECK(f["p50_ms"] > 0);
  CHECK(f["p50_ms"] <= f["p99_ms"]);
  CHECK(f["p99_ms"] <= f["p999_ms"]);
  CHECK(f["p999_ms"] <= f["max_ms"]);
  // The relay only ever answers CONFIRMED here.
  CHECK(f["cancelled"] == 0);
  // CPU of the pids asked for is reported.
  CHECK((*bench)->Output().find("| CPU tcc-baseline-r") != std::string::npos);
}

TEST_CASE("an unknown participant name is an error the bench counts") {
  int port_a = 0;
  int relay_port = 0;
  auto bank_a = StartServer({TCC_NOOP_PARTICIPANT, "--listen", "127.0.0.1:0"},
                            "noop-a", &port_a);
  auto relay =
      StartServer({TCC_BASELINE_RELAY, "--listen", "127.0.0.1:0",
                   "--participant", absl::StrCat("bank-a=127.0.0.1:", port_a)},
                  "relay", &relay_port);
  auto bench = Process::Start(ProcessOptions{
      {TCC_BENCH, "--target", absl::StrCat("127.0.0.1:", relay_port),
       "--concurrency", "2", "--duration-s", "0.3", "--warmup-s", "0",
       "--participants", "bank-a,bank-z"},
      {},
      "",
      "tcc-bench"});
  REQUIRE(bench.ok());
  auto line = (*bench)->WaitForLine("^(bench: .*)$", 30000);
  INFO((*bench)->Output());
  REQUIRE(line.ok());
  auto f = ParseSummary(*line);
  CHECK(f["errors"] > 0);
  CHECK(f["completed"] == 0);
  CHECK((*bench)->Output().find("INVALID_ARGUMENT=") != std::string::npos);
  auto status = (*bench)->Wait(10000);
  REQUIRE(status.ok());
  CHECK(WEXITSTATUS(*status) == 2);
}
