// tcc-metric-wait: polls a Prometheus /metrics page until the sum of the
// matching series reaches a value, then prints it and exits 0 (1 when the
// time runs out first, 2 on bad arguments). scripts/bench.sh waits with it
// while it times a recovery: one small process polling every 20 ms, where a
// curl and an awk forked per poll took a tenth of this 2-core machine from
// the processes being measured.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "http_get.h"
#include "metric_text.h"

int main(int argc, char** argv) {
  CLI::App app{"tcc-metric-wait: wait until a metric reaches a value"};
  std::string url;
  std::string prefix;
  std::string contains;
  double at_least = 0;
  double timeout_s = 300;
  int interval_ms = 20;
  app.add_option("--url", url, "http://IPV4:PORT/metrics")->required();
  app.add_option("--prefix", prefix,
                 "series whose name{labels} starts with this are summed")
      ->required();
  app.add_option("--contains", contains,
                 "and whose name{labels} contains this (default: any)");
  app.add_option("--at-least", at_least, "the sum to wait for")->required();
  app.add_option("--timeout-s", timeout_s, "give up after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", interval_ms, "between polls")
      ->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  double value = 0;
  std::string last_error;
  for (;;) {
    auto page = tcc::testing::HttpGet(url, 2000);
    if (page.ok()) {
      value = tcc::bench::SumSeries(*page, prefix, contains);
      last_error.clear();
    } else {
      last_error = std::string(page.status().message());
    }
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (page.ok() && value >= at_least) {
      std::printf("value=%.0f elapsed_s=%.3f\n", value, elapsed);
      return 0;
    }
    if (now >= deadline) {
      std::printf("value=%.0f elapsed_s=%.3f timed_out=1%s%s\n", value, elapsed,
                  last_error.empty() ? "" : " last_error=", last_error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}
