// deploy/ against a live tccd: Debian's Prometheus scrapes a real tccd with
// bank traffic (including a participant that goes away and comes back),
// loads deploy/prometheus/tccd-rules.yml, and then
//   - every expression of deploy/grafana/tccd-dashboard.json returns data,
//   - every recording and alert rule evaluates without error,
//   - `promtool check metrics` passes over tccd's /metrics page.
// Grafana is not in Debian: the dashboard's expressions are run as Grafana
// would send them ($instance all, $__rate_interval a fixed window).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bank_cluster.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "http_get.h"
#include "process.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using google::protobuf::Struct;
using google::protobuf::Value;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Struct ParseJson(const std::string& json) {
  Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  INFO(json.substr(0, 500));
  REQUIRE(status.ok());
  return s;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A port free on 127.0.0.1 now (Prometheus does not print the port it got
// for :0; a race with another process is retried by the caller).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Every "expr" in the dashboard's panels (rows included).
void CollectExprs(const Value& v, std::vector<std::string>& out) {
  if (v.has_struct_value()) {
    for (const auto& [k, f] : v.struct_value().fields()) {
      if (k == "expr" && f.has_string_value()) {
        out.push_back(f.string_value());
      } else {
        CollectExprs(f, out);
      }
    }
  } else if (v.has_list_value()) {
    for (const auto& e : v.list_value().values()) CollectExprs(e, out);
  }
}

class Prometheus {
 public:
  Prometheus(const std::string& dir, int tccd_metrics_port) {
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config)
        << "global:\n  scrape_interval: 1s\n"
        << "  evaluation_interval: 1s\n"
        << "rule_files:\n  - " << TCC_RULES_FILE << "\n"
        << "scrape_configs:\n  - job_name: tccd\n"
        << "    static_configs:\n      - targets: ['127.0.0.1:"
        << tccd_metrics_port << "']\n";
    for (int attempt = 0; attempt < 5 && process_ == nullptr; ++attempt) {
      port_ = FreePort();
      auto p = Process::Start(
          {.argv = {"/usr/bin/prometheus", "--config.file=" + config,
                    "--storage.tsdb.path=" + dir + "/tsdb",
                    "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                    "--storage.tsdb.retention.time=1h"},
           .env = {},
           .log_path = dir + "/prometheus.log",
           .name = "prometheus"});
      REQUIRE(p.ok());
      if ((*p)->WaitForLine("Server is ready to receive web requests", 30000)
              .ok()) {
        process_ = std::move(*p);
      }
    }
    REQUIRE(process_ != nullptr);
  }

  // The API's answer (its "data"), for a GET of `path_and_query`.
  Struct Api(const std::string& path_and_query) {
    auto body = tcc::testing::HttpGet(
        tcc::testing::LoopbackUrl(port_, path_and_query), 10000);
    REQUIRE(body.ok());
    Struct s = ParseJson(*body);
    REQUIRE(s.fields().at("status").string_value() == "success");
    return s.fields().at("data").struct_value();
  }

  // The number of series an instant query returns now.
  int Query(const std::string& expr) {
    Struct data = Api("/api/v1/query?query=" + UrlEncode(expr));
    return data.fields().at("result").list_value().values_size();
  }

 private:
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

}  // namespace

TEST_CASE("the dashboard, the rules and /metrics against a live tccd") {
  const std::string dir = tcc::harness::MakeTempDir("tccd-dashboard");
  ClusterOptions o;
  o.root_dir = dir + "/cluster";
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 10;
  o.metrics = true;
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  Prometheus prometheus(dir, c.tccd_metrics_port());

  // Traffic: transfers that confirm, one refused at Try (too much money:
  // cancelled), and one through a participant that goes away (unknown
  // outcomes, retries, lookups, the breaker) and comes back.
  std::vector<std::string> gids;
  for (uint32_t i = 0; i < 20; ++i) {
    auto req = c.Transfer("bank-a", i % 10, "bank-b", (i + 1) % 10, 1);
    REQUIRE(c.client().Submit(req).ok());
    gids.push_back(req.gid());
  }
  auto refused = c.Transfer("bank-a", 1, "bank-b", 2, 1000000);
  REQUIRE(c.client().Submit(refused).ok());
  gids.push_back(refused.gid());
  c.KillBank("bank-b");
  auto in_doubt = c.Transfer("bank-a", 3, "bank-b", 4, 1);
  in_doubt.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  in_doubt.set_try_timeout_ms(120000);
  REQUIRE(c.client().Submit(in_doubt).ok());
  gids.push_back(in_doubt.gid());
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a few scrapes
  REQUIRE(c.StartBank("bank-b").ok());
  REQUIRE(c.CheckFinal(gids, 60000).ok());

  {  // every dashboard expression returns data
    Value dashboard;
    *dashboard.mutable_struct_value() = ParseJson(ReadFile(TCC_DASHBOARD_FILE));
    std::vector<std::string> exprs;
    CollectExprs(dashboard, exprs);
    CHECK(exprs.size() >= 15);
    for (const std::string& raw : exprs) {
      const std::string expr = absl::StrReplaceAll(
          raw, {{"$instance", ".*"}, {"$__rate_interval", "1m"}});
      INFO(expr);
      int series = 0;
      // Bounded: a series appears within a few scrapes (1 s apart).
      for (int i = 0; i < 60 && (series = prometheus.Query(expr)) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
      CHECK(series > 0);
    }
  }

  {  // every rule evaluates without error
    int rules = 0, evaluated = 0;
    for (int i = 0; i < 60; ++i) {
      Struct data = prometheus.Api("/api/v1/rules");
      rules = evaluated = 0;
      for (const auto& g : data.fields().at("groups").list_value().values()) {
        for (const auto& r :
             g.struct_value().fields().at("rules").list_value().values()) {
          const auto& f = r.struct_value().fields();
          ++rules;
          INFO(f.at("name").string_value()
               << ": "
               << (f.count("lastError") ? f.at("lastError").string_value()
                                        : ""));
          CHECK(f.at("health").string_value() != "err");
          evaluated += f.at("health").string_value() == "ok" ? 1 : 0;
        }
      }
      if (rules > 0 && evaluated == rules) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    CHECK(rules == 17);
    CHECK(evaluated == rules);
    // The service is up: TccdDown's expression finds it at 1.
    CHECK(prometheus.Query("up{job=\"tccd\"} == 1") == 1);
  }

  {  // promtool check metrics passes over /metrics
    auto page = tcc::testing::HttpGet(
        tcc::testing::LoopbackUrl(c.tccd_metrics_port(), "/metrics"), 5000);
    REQUIRE(page.ok());
    const std::string file = dir + "/metrics.txt";
    std::ofstream(file) << *page;
    const std::string out_file = dir + "/promtool.out";
    const int rc = std::system(("/usr/bin/promtool check metrics < " + file +
                                " > " + out_file + " 2>&1")
                                   .c_str());
    INFO(ReadFile(out_file));
    CHECK(rc == 0);
    CHECK(page->find("tccd_oldest_in_doubt_age_seconds") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
