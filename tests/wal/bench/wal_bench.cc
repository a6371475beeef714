// The WAL benchmark (scripts/bench-wal.sh runs it; it is not a test).
//
// On one disk, in one run:
//   raw      200-byte appends to a growing file, fdatasync after each
//   durable  durable 200-byte appends to the RocksDB log from 1, 8, 64 and
//            256 concurrent callers: appends/s, p50/p99 latency, mean group
//            size (appends per sync)
//   slow     the same with every fsync delayed by 1 ms (injected through the
//            file system, as on cloud block storage)
//   recovery open + scan of 100,000 unfinished transactions
//   stats    Stats() (the age gauge's seek) once 100,000 transactions
//            have finished, with one unfinished after them
// Each durable figure is the median run of 3 (argv[3]) of 2 s (argv[2]).
// The last line is the summary scripts and README quote.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench_records.h"
#include "fault_injection_fs.h"
#include "record_codec.h"
#include "tcc/identity/content_hash.h"
#include "tcc/wal/rocksdb_log.h"

namespace {

using tcc::wal::bench::Record200;
using tcc::wal::bench::Registration;

using Clock = std::chrono::steady_clock;
using tcc::wal::AppendRequest;
using tcc::wal::Durability;
using tcc::wal::RocksDbLog;
using tcc::wal::RocksDbLogOptions;

// CPU time the whole process used so far (all threads), in seconds.
double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Latencies {
  std::vector<double> us;
  double Percentile(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))];
  }
};

struct RawResult {
  double per_s = 0;
  double p50_us = 0;
};

RawResult RawFdatasync(const std::filesystem::path& dir, double seconds) {
  const std::filesystem::path file = dir / "raw.log";
  std::filesystem::remove(file);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) {
    std::perror("open");
    std::exit(1);
  }
  const std::string record(200, 'r');
  Latencies lat;
  const auto start = Clock::now();
  size_t n = 0;
  while (Seconds(Clock::now() - start) < seconds || n < 100) {
    const auto t0 = Clock::now();
    if (::write(fd, record.data(), record.size()) !=
            static_cast<ssize_t>(record.size()) ||
        ::fdatasync(fd) != 0) {
      std::perror("write/fdatasync");
      std::exit(1);
    }
    lat.us.push_back(Seconds(Clock::now() - t0) * 1e6);
    ++n;
  }
  const double elapsed = Seconds(Clock::now() - start);
  ::close(fd);
  std::filesystem::remove(file);
  return {n / elapsed, lat.Percentile(0.5)};
}

absl::Status AppendAndWait(RocksDbLog& log, AppendRequest request) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  absl::Status result;
  log.Append(std::move(request), [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(m);
    result = std::move(s);
    finished = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return finished; });
  return result;
}

std::unique_ptr<RocksDbLog> OpenLog(const std::filesystem::path& dir,
                                    std::shared_ptr<rocksdb::FileSystem> fs) {
  RocksDbLogOptions options;
  options.data_dir = dir.string();
  options.file_system = std::move(fs);
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  if (!log.ok()) {
    std::fprintf(stderr, "open: %s\n", log.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(log);
}

struct DurableResult {
  double per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double group = 0;
  double cpu_us = 0;  // process CPU time per append
};

DurableResult Durable(RocksDbLog& log, int callers, double seconds, int round) {
  std::vector<std::string> gids;
  for (int c = 0; c < callers; ++c) {
    gids.push_back(absl::StrCat("bench-", round, "-", c));
    if (!AppendAndWait(log, {gids.back(),
                             {Registration(gids.back(), 1)},
                             Durability::kDurable})
             .ok()) {
      std::fprintf(stderr, "register failed\n");
      std::exit(1);
    }
  }
  const tcc::wal::LogStats before = log.Stats();
  const double cpu_before = ProcessCpuSeconds();
  std::atomic<bool> stop{false};
  std::vector<Latencies> lat(callers);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      for (uint32_t seq = 1; !stop.load(std::memory_order_relaxed); ++seq) {
        const auto t0 = Clock::now();
        absl::Status s = AppendAndWait(
            log, {gids[c], {Record200(seq)}, Durability::kDurable});
        if (!s.ok()) {
          std::fprintf(stderr, "append: %s\n", s.ToString().c_str());
          std::exit(1);
        }
        lat[c].us.push_back(Seconds(Clock::now() - t0) * 1e6);
      }
    });
  }
  while (Seconds(Clock::now() - start) < seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const double elapsed = Seconds(Clock::now() - start);
  const tcc::wal::LogStats after = log.Stats();
  Latencies all;
  for (Latencies& l : lat)
    all.us.insert(all.us.end(), l.us.begin(), l.us.end());
  const double appends =
      static_cast<double>(after.synced_appends - before.synced_appends);
  const double syncs = static_cast<double>(after.syncs - before.syncs);
  return {appends / elapsed, all.Percentile(0.5), all.Percentile(0.99),
          syncs > 0 ? appends / syncs : 0,
          (ProcessCpuSeconds() - cpu_before) * 1e6 / std::max(1.0, appends)};
}

// The same load with callers that are not threads: each caller is a chain
// of appends, the next issued from the previous one's completion (as a
// coordinator's driver does when the completion hands it the next step).
// This measures the log without 256 threads' wake-ups on a small machine.
DurableResult DurableChained(RocksDbLog& log, int callers, double seconds,
                             int round) {
  struct Chain {
    std::string gid;
    uint32_t seq = 0;
    Clock::time_point issued;
    std::vector<double> us;
  };
  std::vector<Chain> chains(callers);
  for (int c = 0; c < callers; ++c) {
    chains[c].gid = absl::StrCat("chain-", round, "-", c);
    if (!AppendAndWait(log, {chains[c].gid,
                             {Registration(chains[c].gid, 1)},
                             Durability::kDurable})
             .ok()) {
      std::fprintf(stderr, "register failed\n");
      std::exit(1);
    }
  }
  std::atomic<bool> stop{false};
  std::mutex m;
  std::condition_variable cv;
  int running = callers;
  std::function<void(int)> issue = [&](int c) {
    Chain& chain = chains[c];
    chain.issued = Clock::now();
    log.Append({chain.gid, {Record200(++chain.seq)}, Durability::kDurable},
               [&, c](absl::Status s) {
                 if (!s.ok()) {
                   std::fprintf(stderr, "append: %s\n", s.ToString().c_str());
                   std::exit(1);
                 }
                 Chain& done = chains[c];
                 done.us.push_back(Seconds(Clock::now() - done.issued) * 1e6);
                 if (!stop.load(std::memory_order_relaxed)) {
                   issue(c);
                   return;
                 }
                 std::lock_guard<std::mutex> lock(m);
                 if (--running == 0) cv.notify_all();
               });
  };
  const tcc::wal::LogStats before = log.Stats();
  const double cpu_before = ProcessCpuSeconds();
  const auto start = Clock::now();
  for (int c = 0; c < callers; ++c) issue(c);
  while (Seconds(Clock::now() - start) < seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  const double elapsed = Seconds(Clock::now() - start);
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return running == 0; });
  }
  const tcc::wal::LogStats after = log.Stats();
  Latencies all;
  for (Chain& chain : chains) {
    all.us.insert(all.us.end(), chain.us.begin(), chain.us.end());
  }
  const double appends = static_cast<double>(all.us.size());
  const double syncs = static_cast<double>(after.syncs - before.syncs);
  return {appends / elapsed, all.Percentile(0.5), all.Percentile(0.99),
          syncs > 0 ? static_cast<double>(after.synced_appends -
                                          before.synced_appends) /
                          syncs
                    : 0,
          (ProcessCpuSeconds() - cpu_before) * 1e6 / std::max(1.0, appends)};
}

// The run with the median throughput of `runs` runs (the machine may be
// shared; one stalled run should not make the figure).
DurableResult MedianOf(RocksDbLog& log, int callers, double seconds, int round,
                       int runs) {
  std::vector<DurableResult> results;
  for (int r = 0; r < runs; ++r) {
    results.push_back(Durable(log, callers, seconds, round * 100 + r));
  }
  std::sort(results.begin(), results.end(),
            [](const DurableResult& a, const DurableResult& b) {
              return a.per_s < b.per_s;
            });
  return results[results.size() / 2];
}

// Appends without waiting for each answer, at most 5,000 in flight (the
// fills of the recovery and Stats measurements); any failure ends the
// benchmark. Drain waits for every answer.
class Filler {
 public:
  explicit Filler(RocksDbLog& log) : log_(log) {}
  void Append(AppendRequest request) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return in_flight_ < 5000; });
      ++in_flight_;
    }
    log_.Append(std::move(request), [this](absl::Status s) {
      if (!s.ok()) {
        std::fprintf(stderr, "fill: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      std::lock_guard<std::mutex> lock(m_);
      --in_flight_;
      cv_.notify_all();
    });
  }
  void Drain() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
  }

 private:
  RocksDbLog& log_;
  std::mutex m_;
  std::condition_variable cv_;
  int in_flight_ = 0;
};

double RecoveryScan(const std::filesystem::path& dir, int txns) {
  {
    auto log = OpenLog(dir, nullptr);
    Filler fill(*log);
    for (int i = 0; i < txns; ++i) {
      const std::string gid = absl::StrCat("rec-", i);
      fill.Append(
          {gid,
           {Registration(gid, 1000 + i), Record200(1)},
           i + 1 == txns ? Durability::kDurable : Durability::kBuffered});
    }
    fill.Drain();
  }
  const auto start = Clock::now();
  auto log = OpenLog(dir, nullptr);
  int seen = 0;
  absl::Status s = log->ScanUnfinished(0, [&](tcc::wal::TxnLog txn) {
    seen += txn.records.size() == 2 ? 1 : 0;
    return absl::OkStatus();
  });
  const double elapsed = Seconds(Clock::now() - start);
  if (!s.ok() || seen != txns) {
    std::fprintf(stderr, "scan: %s, %d of %d\n", s.ToString().c_str(), seen,
                 txns);
    std::exit(1);
  }
  return elapsed;
}

// Stats() after `txns` transactions registered and finished (buffered, the
// last durable) and one more registered: the first call and the median of
// the next 20, in microseconds. Finished transactions leave tombstones at
// the front of the unfinished index until compaction drops them.
std::pair<double, double> StatsAfterFinished(const std::filesystem::path& dir,
                                             int txns) {
  auto log = OpenLog(dir, nullptr);
  Filler fill(*log);
  for (int i = 0; i < txns; ++i) {
    const std::string gid = absl::StrCat("fin-", i);
    tcc::wal::Decided decided;
    decided.decision = tcc::wal::Decision::kConfirm;
    decided.at_ms = 2000 + i;
    tcc::wal::Finished finished;
    finished.state = tcc::wal::TxnState::kConfirmed;
    finished.at_ms = 2000 + i;
    fill.Append({gid, {Registration(gid, 1000 + i)}, Durability::kBuffered});
    fill.Append({gid, {decided, finished}, Durability::kBuffered});
  }
  fill.Append(
      {"open", {Registration("open", 1000 + txns)}, Durability::kDurable});
  fill.Drain();
  std::vector<double> us;
  for (int i = 0; i < 21; ++i) {
    const auto start = Clock::now();
    const tcc::wal::LogStats stats = log->Stats();
    us.push_back(Seconds(Clock::now() - start) * 1e6);
    if (stats.oldest_unfinished_registered_ms != 1000 + txns) {
      std::fprintf(
          stderr, "stats: oldest %lld, expected %d\n",
          static_cast<long long>(stats.oldest_unfinished_registered_ms),
          1000 + txns);
      std::exit(1);
    }
  }
  const double first = us[0];
  us.erase(us.begin());
  std::sort(us.begin(), us.end());
  return {first, us[us.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path dir =
      argc > 1 ? std::filesystem::path(argv[1]) : "wal-bench-data";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 3;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  const RawResult raw = RawFdatasync(dir, seconds);
  std::printf("raw fdatasync: %.0f appends/s, p50 %.0f us\n", raw.per_s,
              raw.p50_us);
  std::fflush(stdout);

  DurableResult by_callers[4];
  const int callers[4] = {1, 8, 64, 256};
  {
    auto log = OpenLog(dir / "durable", nullptr);
    for (int i = 0; i < 4; ++i) {
      by_callers[i] = MedianOf(*log, callers[i], seconds, i, runs);
      std::printf(
          "durable, %3d callers: %8.0f appends/s, p50 %6.0f us, p99 %6.0f us, "
          "mean group %.1f, cpu %.1f us/append\n",
          callers[i], by_callers[i].per_s, by_callers[i].p50_us,
          by_callers[i].p99_us, by_callers[i].group, by_callers[i].cpu_us);
      std::fflush(stdout);
    }
  }

  DurableResult slow;
  {
    auto fs = std::make_shared<tcc::wal::testing::FaultInjectionFs>();
    fs->SetSyncDelay(
        [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    auto log = OpenLog(dir / "slow", fs);
    slow = MedianOf(*log, 256, seconds, 9, runs);
    std::printf(
        "slow fsync (+1 ms), 256 callers: %8.0f appends/s, p50 %6.0f us, "
        "p99 %6.0f us, mean group %.1f, cpu %.1f us/append\n",
        slow.per_s, slow.p50_us, slow.p99_us, slow.group, slow.cpu_us);
    std::fflush(stdout);
  }

  {
    auto log = OpenLog(dir / "chained", nullptr);
    const DurableResult chained = DurableChained(*log, 256, seconds, 20);
    std::printf(
        "durable, 256 chained callers (no threads): %8.0f appends/s, p50 "
        "%6.0f us, p99 %6.0f us, mean group %.1f, cpu %.1f us/append\n",
        chained.per_s, chained.p50_us, chained.p99_us, chained.group,
        chained.cpu_us);
  }
  {
    auto fs = std::make_shared<tcc::wal::testing::FaultInjectionFs>();
    fs->SetSyncDelay(
        [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    auto log = OpenLog(dir / "slow-chained", fs);
    const DurableResult chained = DurableChained(*log, 256, seconds, 21);
    std::printf(
        "slow fsync (+1 ms), 256 chained callers (no threads): %8.0f "
        "appends/s, p50 %6.0f us, p99 %6.0f us, mean group %.1f, cpu %.1f "
        "us/append\n",
        chained.per_s, chained.p50_us, chained.p99_us, chained.group,
        chained.cpu_us);
    std::fflush(stdout);
  }

  const double scan = RecoveryScan(dir / "recovery", 100000);
  std::printf("recovery: open + scan of 100000 unfinished: %.2f s\n", scan);
  const auto [stats_first, stats_us] =
      StatsAfterFinished(dir / "stats", 100000);
  std::printf(
      "stats after 100000 finished: first call %.0f us, then median %.0f us\n",
      stats_first, stats_us);
  std::filesystem::remove_all(dir);

  std::printf(
      "wal-bench: raw_fdatasync_per_s=%.0f raw_p50_us=%.0f single_p50_us=%.0f "
      "appends_per_s_64=%.0f appends_per_s_256=%.0f "
      "slow_fsync_appends_per_s_256=%.0f recovery_scan_100k_s=%.2f "
      "stats_us=%.0f\n",
      raw.per_s, raw.p50_us, by_callers[0].p50_us, by_callers[2].per_s,
      by_callers[3].per_s, slow.per_s, scan, stats_us);
  return 0;
}
