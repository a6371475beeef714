// A fixed workload for instruction counts (valgrind --tool=callgrind) and
// profiles of the RocksDB log's append path; not a test, not a benchmark.
//
//   wal_profile <data dir> <mode> <rounds>
//
// Opens a fresh log in <data dir>, registers 256 gids, then runs <rounds>
// rounds; each issues one durable append per gid from this thread and waits
// for all 256 (a group of up to 256, as under 256 concurrent callers).
//   phase  each append is one 200-byte PhaseUpdate (the wal_bench record)
//   txn    each round is whole transactions on fresh gids: Registered,
//          Decided, Finished (durable) with buffered PhaseUpdates between
//   threads       as phase, but from 256 threads that each append and wait
//                 (as wal_bench's callers): for `perf stat` (CPU time,
//                 context switches), not for instruction counts
//   threads-slow  the same with every fsync delayed by 1 ms
//   recovery      <rounds> x 256 unfinished transactions (Registered and a
//                 PhaseUpdate, buffered, as wal_bench's recovery figure),
//                 then a reopen and the recovery scan (for counts of the
//                 reopen and scan alone: --toggle-collect='*Impl::Open*'
//                 --toggle-collect='*Impl::ScanUnfinished*')
// The instructions per append are the difference of two runs with different
// <rounds>, divided by the difference in appends (setup cancels out).
#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench_records.h"
#include "fault_injection_fs.h"
#include "record_codec.h"
#include "tcc/wal/rocksdb_log.h"

namespace {

using tcc::wal::bench::Record200;
using tcc::wal::bench::Registration;

using tcc::wal::AppendRequest;
using tcc::wal::Durability;

constexpr int kGids = 256;

// CPU time the whole process used so far (all threads), in seconds.
double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Issues appends and waits for all of them.
class Waiter {
 public:
  explicit Waiter(tcc::wal::Log& log) : log_(log) {}
  void Issue(AppendRequest request) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    log_.Append(std::move(request), [this](absl::Status s) {
      if (!s.ok()) {
        std::fprintf(stderr, "append: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_.notify_all();
    });
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  tcc::wal::Log& log_;
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: wal_profile <data dir> phase|txn <rounds>\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const std::string mode = argv[2];
  const int rounds = std::atoi(argv[3]);
  std::filesystem::remove_all(dir);
  tcc::wal::RocksDbLogOptions options;
  options.data_dir = dir.string();
  if (mode == "threads-slow") {
    auto fs = std::make_shared<tcc::wal::testing::FaultInjectionFs>();
    fs->SetSyncDelay(
        [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    options.file_system = fs;
  }
  absl::StatusOr<std::unique_ptr<tcc::wal::RocksDbLog>> log =
      tcc::wal::RocksDbLog::Open(options);
  if (!log.ok()) {
    std::fprintf(stderr, "open: %s\n", log.status().ToString().c_str());
    return 1;
  }
  Waiter waiter(**log);
  long appends = 0;
  if (mode == "phase") {
    std::vector<std::string> gids;
    for (int g = 0; g < kGids; ++g) {
      gids.push_back(absl::StrCat("bench-", g));
      waiter.Issue(
          {gids.back(), {Registration(gids.back(), 1)}, Durability::kDurable});
    }
    waiter.Wait();
    for (int r = 0; r < rounds; ++r) {
      for (int g = 0; g < kGids; ++g) {
        waiter.Issue({gids[g],
                      {Record200(static_cast<uint32_t>(r + 1))},
                      Durability::kDurable});
        ++appends;
      }
      waiter.Wait();
    }
  } else if (mode == "txn") {
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::string> gids;
      for (int g = 0; g < kGids; ++g) {
        gids.push_back(absl::StrCat("txn-", r, "-", g));
        waiter.Issue({gids.back(),
                      {Registration(gids.back(), 1000 + r)},
                      Durability::kDurable});
      }
      waiter.Wait();
      for (int g = 0; g < kGids; ++g) {
        waiter.Issue({gids[g], {Record200(1)}, Durability::kBuffered});
        tcc::wal::Decided d;
        d.decision = tcc::wal::Decision::kConfirm;
        d.at_ms = 2000 + r;
        waiter.Issue({gids[g], {d}, Durability::kDurable});
      }
      waiter.Wait();
      for (int g = 0; g < kGids; ++g) {
        waiter.Issue({gids[g], {Record200(2)}, Durability::kBuffered});
        tcc::wal::Finished f;
        f.state = tcc::wal::TxnState::kConfirmed;
        f.at_ms = 3000 + r;
        waiter.Issue({gids[g], {f}, Durability::kDurable});
      }
      waiter.Wait();
      appends += 5 * kGids;
    }
  } else if (mode == "threads" || mode == "threads-slow") {
    std::vector<std::thread> threads;
    for (int g = 0; g < kGids; ++g) {
      const std::string gid = absl::StrCat("bench-", g);
      waiter.Issue({gid, {Registration(gid, 1)}, Durability::kDurable});
    }
    waiter.Wait();
    for (int g = 0; g < kGids; ++g) {
      threads.emplace_back([&log, g, rounds] {
        const std::string gid = absl::StrCat("bench-", g);
        for (int r = 0; r < rounds; ++r) {
          Waiter own(**log);
          own.Issue({gid,
                     {Record200(static_cast<uint32_t>(r + 1))},
                     Durability::kDurable});
          own.Wait();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    appends = static_cast<long>(rounds) * kGids;
  } else if (mode == "recovery") {
    for (int r = 0; r < rounds; ++r) {
      for (int g = 0; g < kGids; ++g) {
        const std::string gid = absl::StrCat("rec-", r, "-", g);
        waiter.Issue({gid,
                      {Registration(gid, 1000 + r), Record200(1)},
                      Durability::kBuffered});
        ++appends;
      }
      waiter.Wait();
    }
    log->reset();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ProcessCpuSeconds();
    log = tcc::wal::RocksDbLog::Open(options);
    if (!log.ok()) {
      std::fprintf(stderr, "reopen: %s\n", log.status().ToString().c_str());
      return 1;
    }
    long seen = 0;
    absl::Status scan = (*log)->ScanUnfinished(0, [&](tcc::wal::TxnLog txn) {
      seen += txn.records.size() == 2 ? 1 : 0;
      return absl::OkStatus();
    });
    if (!scan.ok() || seen != appends) {
      std::fprintf(stderr, "scan: %s, %ld of %ld\n", scan.ToString().c_str(),
                   seen, appends);
      return 1;
    }
    std::printf(
        "wal_profile: reopen + scan %.3f s, cpu %.3f s\n",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count(),
        ProcessCpuSeconds() - cpu_start);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("wal_profile: %s, %ld appends, mean group %.1f\n", mode.c_str(),
              appends, (*log)->MeanGroupSize());
  log->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
