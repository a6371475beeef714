// tccd's memory under a backlog of large transactions, as a real process in
// a memory cgroup (issue 19, item 4): a participant is down, callers keep
// submitting transactions of 16 branches of 32 KiB; tccd refuses what does
// not fit limits.max_in_flight_bytes (RESOURCE_EXHAUSTED, nothing written)
// instead of growing until it is killed, keeps the payloads of the waiting
// ones in its WAL, finishes everything once the participant returns, and
// gives the memory back after the drain.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "http_get.h"
#include "test_dirs.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

constexpr int64_t kMiB = 1 << 20;

// The process's resident set (VmRSS), in bytes; 0 if it is gone.
int64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb * 1024;
    }
  }
  return 0;
}

// A memory cgroup holding one process, removed (the process moved back to
// the root group first) when it goes, whatever the outcome. cgroup v2 where
// the machine has it, else v1's memory controller; without either, an
// address-space limit (RLIMIT_AS) on the process stands in.
class MemoryLimit {
 public:
  MemoryLimit(pid_t pid, int64_t bytes) {
    const std::string name = "tcc-memory-test-" + std::to_string(getpid());
    if (fs::exists("/sys/fs/cgroup/cgroup.controllers") &&
        tcc::harness::ReadFile("/sys/fs/cgroup/cgroup.controllers")
                .find("memory") != std::string::npos) {
      root_ = "/sys/fs/cgroup";
      limit_file_ = "memory.max";
    } else if (fs::exists("/sys/fs/cgroup/memory/cgroup.procs")) {
      root_ = "/sys/fs/cgroup/memory";
      limit_file_ = "memory.limit_in_bytes";
    }
    if (!root_.empty()) {
      dir_ = root_ + "/" + name;
      std::error_code ec;
      fs::create_directory(dir_, ec);
      if (!ec && Write(dir_ + "/" + limit_file_, std::to_string(bytes)) &&
          Write(dir_ + "/cgroup.procs", std::to_string(pid))) {
        how_ = "cgroup " + dir_;
        return;
      }
      Remove();
    }
    // gRPC and RocksDB reserve address space well beyond what they use.
    struct rlimit lim = {static_cast<rlim_t>(bytes * 8),
                         static_cast<rlim_t>(bytes * 8)};
    if (prlimit(pid, RLIMIT_AS, &lim, nullptr) == 0) {
      how_ = "RLIMIT_AS " + std::to_string(bytes * 8);
    }
  }
  ~MemoryLimit() { Remove(); }
  const std::string& how() const { return how_; }

 private:
  static bool Write(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.flush();
    return static_cast<bool>(out);
  }
  void Remove() {
    if (dir_.empty()) return;
    const std::string procs = tcc::harness::ReadFile(dir_ + "/cgroup.procs");
    size_t at = 0;
    while (at < procs.size()) {
      const size_t nl = procs.find('\n', at);
      const std::string pid = procs.substr(at, nl - at);
      if (!pid.empty()) Write(root_ + "/cgroup.procs", pid);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
    std::error_code ec;
    fs::remove(dir_, ec);
    dir_.clear();
  }
  std::string root_, limit_file_, dir_, how_;
};

std::string MetricsPage(BankCluster& c) {
  auto page = tcc::testing::HttpGet(
      tcc::testing::LoopbackUrl(c.tccd_metrics_port(), "/metrics"), 5000);
  return page.ok() ? *page : "";
}

// The value of an unlabelled gauge on a metrics page (-1 if absent).
double Gauge(const std::string& page, const std::string& name) {
  const size_t at = page.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  double v = -1;
  const size_t start = at + name.size() + 2;
  (void)absl::SimpleAtod(page.substr(start, page.find('\n', start) - start),
                         &v);
  return v;
}

TEST_CASE("a backlog of large transactions is refused, not run out of memory") {
  ClusterOptions o;
  o.root_dir = tcc::harness::MakeTempDir("tccd-memory");
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 64;
  o.initial_balance = 1000000;
  o.metrics = true;
  // Small enough that the 16 callers' admissions alone (about 1.5 MiB each:
  // owner, registration, request) overrun it, so refusals do not hang on
  // how fast the backlog sheds its payloads to the WAL: with 48 MiB one CI
  // run saw none (high-water 44 MiB), and runs here refused 33-317 of 640;
  // with 16 MiB, 440-474.
  const int64_t budget = 16 * kMiB;
  std::ofstream(o.root_dir + "/tccd.yaml")
      << "limits:\n  max_in_flight_bytes: " << budget << "\n";
  o.tccd_args = {"--config", o.root_dir + "/tccd.yaml"};
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  MemoryLimit limit(c.tccd()->pid(), 384 * kMiB);
  INFO("memory limit: " << limit.how());
  REQUIRE(!limit.how().empty());

  const std::string pad(32 * 1024 - 16, 'x');
  auto transfer = [&](int i) {
    // 16 branches of 32 KiB: 8 debits at bank-a, 8 credits at bank-b.
    v1::SubmitRequest req;
    for (int b = 0; b < 16; ++b) {
      auto* br = req.add_branches();
      br->set_branch_id("b" + std::to_string(b));
      br->set_participant(b < 8 ? "bank-a" : "bank-b");
      br->set_action(b < 8 ? "debit" : "credit");
      br->set_payload(absl::StrCat(1 + (i + b) % 64, ":1:", pad));
    }
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    req.set_try_timeout_ms(3000);
    return req;
  };
  // Warm up with both banks up, so that the backlog starts from a tccd
  // that has served (its pools and caches made).
  auto client = c.NewClient(/*max_attempts=*/1, /*attempt_timeout_ms=*/20000);
  for (int i = 0; i < 20; ++i) {
    v1::SubmitRequest req = transfer(i);
    req.set_wait_for(v1::WAIT_FOR_FINISHED);
    REQUIRE(client->Submit(req).ok());
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t rss_start = RssBytes(c.tccd()->pid());

  // bank-b goes down; 16 callers submit 40 each.
  c.KillBank("bank-b");
  std::mutex mu;
  std::vector<std::string> accepted, refused;
  std::vector<std::thread> callers;
  for (int t = 0; t < 16; ++t) {
    callers.emplace_back([&, t] {
      auto mine = c.NewClient(1, 20000);
      for (int i = 0; i < 40; ++i) {
        v1::SubmitRequest req = transfer(1000 + t * 100 + i);
        auto r = mine->Submit(req);
        std::unique_lock<std::mutex> lock(mu);
        if (r.ok()) {
          accepted.push_back(r->transaction().gid());
        } else if (r.status().code() == absl::StatusCode::kResourceExhausted) {
          refused.push_back(req.gid());
          // As a client told "retry later" does: a pause before its next
          // transfer (without it, 16 callers run through their refusals in
          // a moment, and what is accepted hangs on how the admissions of
          // that moment overlap: 94 to 149 of 640 were seen).
          lock.unlock();
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        } else {
          FAIL_CHECK("Submit: " << r.status().ToString());
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  const int64_t rss_backlog = RssBytes(c.tccd()->pid());
  // The budget's high-water, kept by tccd at every charge (a gauge sampled
  // every 100 ms here once missed what a moment held), exported within 2 s.
  auto high_water = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    return static_cast<int64_t>(
        Gauge(MetricsPage(c), "tccd_transaction_memory_high_water_bytes"));
  };
  const int64_t high_backlog = high_water();
  INFO("accepted " << accepted.size() << ", refused " << refused.size()
                   << "; RSS at the start " << rss_start / kMiB
                   << " MiB, with the backlog " << rss_backlog / kMiB
                   << " MiB; budget high-water " << high_backlog << " bytes");
  // No crash: it still serves.
  REQUIRE(c.tccd()->Running());
  CHECK(refused.size() > 0);
  CHECK(accepted.size() > 100);
  // At no moment more than the budget. A call to a transaction keeping its
  // payloads in the WAL once read all of them back into memory (16 of 32
  // KiB), charged whether they fitted or not: a CI run's sampled gauge saw
  // 16.05 MiB of 16.
  CHECK(high_backlog > budget / 2);
  CHECK(high_backlog <= budget);
  // A refusal wrote nothing.
  for (size_t i = 0; i < refused.size() && i < 20; ++i) {
    CHECK(client->Get(refused[i]).status().code() ==
          absl::StatusCode::kNotFound);
  }

  // bank-b returns: everything finishes.
  REQUIRE_OK(c.StartBank("bank-b"));
  CHECK_OK(c.CheckFinal(accepted, 120000));
  // Every append landed the first time. On etcd, groups of finishing writes
  // once got answers of up to 94 MB back (the records they deleted), which
  // the client refused; the log took that for "too large, nothing applied"
  // and answered hundreds of appends ABORTED ("another writer changed it").
  {
    // A full WAL queue (RESOURCE_EXHAUSTED: nothing written, the
    // transaction reloaded) is an overload answer, not counted.
    std::istringstream log(tcc::harness::ReadFile(o.root_dir + "/tccd.log"));
    size_t failed = 0;
    std::string first;
    for (std::string line; std::getline(log, line);) {
      if (line.find("WAL append failed") != std::string::npos &&
          line.find("RESOURCE_EXHAUSTED") == std::string::npos) {
        if (failed++ == 0) first = line;
      }
    }
    INFO(first);
    CHECK(failed == 0);
  }
  // Nor while the backlog drained.
  CHECK(high_water() <= budget);
  // The memory goes back after the drain (the allocator's pages too).
  int64_t rss_end = 0;
  for (int i = 0; i < 50; ++i) {
    rss_end = RssBytes(c.tccd()->pid());
    if (rss_end <= rss_start + 64 * kMiB) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO("RSS after the drain " << rss_end / kMiB << " MiB");
  CHECK(rss_end <= rss_start + 64 * kMiB);
  CHECK(c.tccd()->Running());
}

}  // namespace
