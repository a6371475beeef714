// A full disk, for real: tccd's data dir (or a bank's) on a small tmpfs the
// test mounts (tmpfs_mount.h; needs root), real tccd and tcc-bank processes.
// tccd must fail-stop (exit 4) when the disk fills under load and keep every
// decision it acknowledged; tccd and tcc-bank must refuse to start on a full
// disk (exit 4) and say so (issue 19).
//
// Sizes: RocksDB preallocates each WAL file (about 70 MB here), which a tmpfs
// this small refuses without harm (the WAL then grows as written), so a
// 2 MiB disk fills after about a thousand transactions; after the remount to
// 64 MiB, the restart has room to replay the WAL into a table file.
#include <sys/wait.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "process.h"
#include "test_dirs.h"
#include "tmpfs_mount.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;
using tcc::harness::ProcessOptions;
using tcc::harness::TmpfsMount;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kCallers = 8;
constexpr int kMaxSubmitsPerCaller = 5000;  // the disk fills long before

std::unique_ptr<TmpfsMount> MountOrFail(const std::string& dir,
                                        uint64_t bytes) {
  auto disk = TmpfsMount::Mount(dir, bytes);
  INFO(disk.status().ToString());
  REQUIRE(disk.ok());
  return *std::move(disk);
}

bool SaysNoSpace(const std::string& output) {
  return absl::AsciiStrToLower(output).find("no space left on device") !=
         std::string::npos;
}

// "exit N" or "signal N", for failure messages.
std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// The last lines of a process's output, for failure messages.
std::string Tail(const std::string& output) {
  return output.substr(output.size() > 3000 ? output.size() - 3000 : 0);
}

// Starts `argv`, waits until it serves, stops it with SIGTERM: exit 0.
void ServeOnceAndStop(const std::vector<std::string>& argv,
                      const std::string& log_path) {
  auto p = Process::Start(ProcessOptions{argv, {}, log_path, argv[0]});
  REQUIRE(p.ok());
  INFO(Tail((*p)->Output()));
  REQUIRE_OK((*p)->WaitForListening(30000).status());
  (*p)->Signal(SIGTERM);
  absl::StatusOr<int> stopped = (*p)->Wait(30000);
  REQUIRE_OK(stopped.status());
  REQUIRE(WIFEXITED(*stopped));
  REQUIRE(WEXITSTATUS(*stopped) == 0);
}

// Starts `argv` on a full disk: it must end on its own with exit 4 (not a
// signal), saying there is no space and naming `data_dir`.
void ExpectRefusedForSpace(const std::vector<std::string>& argv,
                           const std::string& log_path,
                           const std::string& data_dir) {
  auto p = Process::Start(ProcessOptions{argv, {}, log_path, argv[0]});
  REQUIRE(p.ok());
  absl::StatusOr<int> ended = (*p)->Wait(30000);
  const std::string output = (*p)->Output();
  INFO(Tail(output));
  REQUIRE_OK(ended.status());
  INFO(argv[0] << " ended: " << DescribeWait(*ended));
  CHECK_FALSE(WIFSIGNALED(*ended));
  REQUIRE(WIFEXITED(*ended));
  CHECK(WEXITSTATUS(*ended) == 4);
  CHECK(SaysNoSpace(output));
  CHECK(output.find(data_dir) != std::string::npos);
}

}  // namespace

TEST_CASE("a disk that fills under load stops tccd: exit 4, no ack lost") {
  const std::string root = tcc::harness::MakeTempDir("tccd-it-full-disk");
  tcc::harness::Cleanup cleanup{root};
  // tccd's data dir is the tmpfs itself; the banks' are on the usual disk.
  std::unique_ptr<TmpfsMount> disk = MountOrFail(root + "/tccd", 2 * kMiB);
  ClusterOptions o;
  o.root_dir = root;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000000;
  BankCluster c(o);
  REQUIRE_OK(c.Start());

  // Callers submit transfers and wait for the decision, until tccd ends.
  std::mutex mu;
  std::map<std::string, v1::Decision> acked;  // gid -> the decision told
  std::vector<std::string> submitted;
  std::atomic<bool> stop{false};
  auto client = c.NewClient(/*max_attempts=*/1, /*attempt_timeout_ms=*/10000);
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < kMaxSubmitsPerCaller && !stop; ++i) {
        v1::SubmitRequest req = c.Transfer("bank-a", (t * 7 + i) % 20, "bank-b",
                                           (t * 3 + i) % 20, 1);
        req.set_gid(absl::StrCat("full-", t, "-", i));
        req.set_wait_for(v1::WAIT_FOR_DECIDED);
        {
          std::lock_guard<std::mutex> lock(mu);
          submitted.push_back(req.gid());
        }
        auto answer = client->Submit(req);
        if (answer.ok() &&
            answer->transaction().decision() != v1::DECISION_UNSPECIFIED) {
          std::lock_guard<std::mutex> lock(mu);
          acked[req.gid()] = answer->transaction().decision();
        }
      }
    });
  }
  absl::StatusOr<int> ended = c.tccd()->Wait(60000);
  stop = true;
  for (std::thread& t : callers) t.join();
  INFO(Tail(c.tccd()->Output()));
  REQUIRE_OK(ended.status());
  INFO("tccd ended: " << DescribeWait(*ended));
  CHECK_FALSE(WIFSIGNALED(*ended));
  REQUIRE(WIFEXITED(*ended));
  CHECK(WEXITSTATUS(*ended) == 4);
  CHECK(SaysNoSpace(c.tccd()->Output()));
  REQUIRE(acked.size() > 100);
  INFO(acked.size() << " decisions acknowledged of " << submitted.size()
                    << " submitted");

  // A restart while the disk is still full is refused, saying why.
  ExpectRefusedForSpace({TCC_TCCD_BIN, "--data-dir", disk->dir(), "--listen",
                         "127.0.0.1:0", "--metrics-listen", "off"},
                        root + "/tccd-full.log", disk->dir());

  // Room again: every acknowledged decision is there, unchanged, and every
  // transaction tccd holds finishes (atomic, money conserved).
  REQUIRE_OK(disk->Resize(64 * kMiB));
  REQUIRE_OK(c.StartTccd());
  auto checker = c.NewClient(3, 10000);
  // gRPC keeps backing off the connection the callers saw refused: wait
  // (bounded) until the restarted tccd answers.
  for (int i = 0; i < 300; ++i) {
    if (!absl::IsUnavailable(checker->Get(acked.begin()->first).status())) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const auto& [gid, decision] : acked) {
    auto view = checker->Get(gid);
    INFO(gid << ": " << view.status().ToString());
    REQUIRE(view.ok());
    CHECK(view->decision() == decision);
  }
  std::vector<std::string> held;
  for (const std::string& gid : submitted) {
    auto view = checker->Get(gid);
    if (view.status().code() == absl::StatusCode::kNotFound) continue;
    INFO(gid << ": " << view.status().ToString());
    REQUIRE(view.ok());
    held.push_back(gid);
  }
  CHECK_OK(c.CheckFinal(held, 60000));
  absl::StatusOr<int> stopped = c.StopTccd();
  REQUIRE_OK(stopped.status());
  CHECK(WIFEXITED(*stopped));
  CHECK(WEXITSTATUS(*stopped) == 0);
}

TEST_CASE("tccd refuses to start on a full disk: exit 4, saying so") {
  const bool had_log = GENERATE(false, true);
  INFO((had_log ? "a data dir that holds a log" : "a fresh data dir"));
  const std::string root = tcc::harness::MakeTempDir("tccd-it-full-start");
  tcc::harness::Cleanup cleanup{root};
  std::unique_ptr<TmpfsMount> disk = MountOrFail(root + "/disk", 2 * kMiB);
  const std::string data_dir = disk->dir() + "/tccd";
  const std::vector<std::string> argv = {
      TCC_TCCD_BIN,  "--data-dir",       data_dir, "--listen",
      "127.0.0.1:0", "--metrics-listen", "off"};
  if (had_log) ServeOnceAndStop(argv, root + "/tccd.log");
  REQUIRE_OK(disk->Fill("filler"));
  ExpectRefusedForSpace(argv, root + "/tccd.log", data_dir);
}

TEST_CASE("tcc-bank refuses to start on a full disk: exit 4, saying so") {
  const bool had_store = GENERATE(false, true);
  INFO((had_store ? "a data dir that holds a store" : "a fresh data dir"));
  const std::string root = tcc::harness::MakeTempDir("tccd-it-full-bank");
  tcc::harness::Cleanup cleanup{root};
  std::unique_ptr<TmpfsMount> disk = MountOrFail(root + "/disk", 2 * kMiB);
  const std::string data_dir = disk->dir() + "/bank-a";
  const std::vector<std::string> argv = {TCC_BANK_BIN, "--name",      "bank-a",
                                         "--listen",   "127.0.0.1:0", "--store",
                                         "rocksdb",    "--data-dir",  data_dir,
                                         "--accounts", "10"};
  if (had_store) ServeOnceAndStop(argv, root + "/bank.log");
  REQUIRE_OK(disk->Fill("filler"));
  ExpectRefusedForSpace(argv, root + "/bank.log", data_dir);
}
