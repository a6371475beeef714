// tcc-drill: crash drills of the real processes (issue 7, DESIGN.md 7, 8, 13).
//
// tccd and three tcc-bank participants (two RocksDB, one PostgreSQL) run as
// processes on 127.0.0.1 (tests/harness). A few client threads submit random
// transfers of two or three branches across the banks while the main thread
// injects faults, one kind after the other, for the whole run:
//
//   failpoint    tccd restarted with one failpoint `crash@N` (N random), run
//                until it crashes there, restarted without it
//   kill9        SIGKILL to tccd at a random moment, restart
//   participant  a bank restarted with `participant.after_commit=crash@N`:
//                it dies between its local commit and its reply; restarted
//                without it
//   pause        SIGSTOP to tccd past every timeout (try-deadline,
//                participant call timeouts, client attempts), then SIGCONT
//   fsync        strace attached to tccd makes every fsync/fdatasync fail
//                with EIO: tccd must exit non-zero (fail-stop), not go on;
//                restarted normally. Without ptrace: failpoint
//                `wal.before_sync=error`. Not in cluster mode (tccd on etcd
//                with TCC_TCCD_WAL=etcd, as the harness's other tests: it
//                writes no local WAL; etcd unreachable is
//                cluster_integration_test's)
//   clock        tccd restarted under libfaketime with its wall clock 30 s
//                ahead or behind (monotonic clock untouched), run a while,
//                then restarted on the true clock (a second jump)
//
// At the end, with everyone up: every transaction that reached tccd is
// final, all its branches confirmed or all cancelled, money conserved,
// nothing frozen (BankCluster::CheckFinal); every decision acknowledged to a
// client is the final one; and every account's balance is what the
// confirmed transfers imply, each applied exactly once (no business effect
// twice, none for a cancelled one).
//
// Recovery time: from the moment tccd is started again (or resumed) until
// every transaction whose Submit was in flight when the fault hit is final
// (or unknown to tccd: it never reached it).
//
// The seed fixes the transfers and the fault schedule; the processes' timing
// is real, so a replay repeats the schedule, not every interleaving.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "process.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;
using tcc::harness::ProcessOptions;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kAccounts = 40;
constexpr int64_t kInitialBalance = 100000;
constexpr int kClientThreads = 3;
constexpr uint32_t kTryTimeoutMs = 2000;
// Longer than the try-deadline, the participant call timeout cap (1 s in the
// drill's config), the retry cap, the breaker's open time and a client
// attempt.
constexpr int64_t kPauseMs = 3500;
constexpr char kFaketimeLib[] =
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

enum FaultKind { kFailpoint, kKill9, kParticipant, kPause, kFsync, kClock };
constexpr int kFaultKinds = 6;
constexpr const char* kFaultNames[kFaultKinds] = {
    "failpoint", "kill9", "participant", "pause", "fsync", "clock"};

// tccd's failpoints: every persistence point of the WAL and the point
// between two effects of the driver; in cluster mode, the etcd log's point
// between a finishing Txn's commit and its archive write instead of the
// RocksDB log's.
const std::vector<std::string> kTccdFailpoints = {
    "driver.before_effect", "wal.before_write", "wal.after_write",
    "wal.before_sync", "wal.after_sync"};
const std::vector<std::string> kEtcdFailpoints = {"driver.before_effect",
                                                  "etcd_log.before_archive"};

struct Flags {
  double seconds = 60;
  uint64_t seed = 0;
  std::string pg_url;
  std::string pg_env_file;
  std::string tccd_bin = TCC_TCCD_BIN;
  std::string bank_bin = TCC_BANK_BIN;
  std::string fsync_mode = "auto";  // auto, strace, failpoint
  bool keep = false;
};

struct Leg {
  std::string bank;
  uint32_t account;
  int64_t delta;  // applied to the balance if the transfer is confirmed
};

int64_t MsSince(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now() - t)
      .count();
}

void SleepMs(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool IsFinal(v1::TxnState s) {
  return s == v1::TXN_STATE_CONFIRMED || s == v1::TXN_STATE_CANCELLED;
}

std::string PgUrlFromFile(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = "export TCC_PG_URL=";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

void Usage() {
  std::fprintf(stderr,
               "usage: tcc-drill [--seconds S | --minutes M] [--seed N]\n"
               "                 [--pg-url URL | --pg-env-file FILE]\n"
               "                 [--fsync-mode auto|strace|failpoint] "
               "[--keep]\n"
               "                 [--tccd BIN] [--bank BIN]\n");
}

// Each thread of `pid` (name, kernel wait channel, state) and, where gdb is
// installed, every thread's stack, into `path` (bounded: gdb gets 60 s).
void DumpThreads(pid_t pid, const std::string& path) {
  const std::string cmd = absl::StrCat(
      "{ for t in /proc/", pid,
      "/task/*; do echo \"$(cat $t/comm) $(cat $t/wchan) $(cut -d' ' -f3 "
      "$t/stat)\"; done; command -v gdb >/dev/null && timeout 60 gdb -batch "
      "-p ",
      pid, " -ex 'thread apply all bt'; } >", path, " 2>&1");
  (void)std::system(cmd.c_str());
}

class Drill {
 public:
  explicit Drill(Flags flags) : flags_(std::move(flags)), rng_(flags_.seed) {}

  int Run();

 private:
  absl::Status Setup();
  void ClientLoop(int thread);
  std::vector<Leg> RandomTransfer(std::mt19937_64& rng);

  // Starts tccd with `env`, retrying a port still held by its predecessor.
  absl::Status StartTccd(std::map<std::string, std::string> env);
  absl::Status StartBank(const std::string& name,
                         std::map<std::string, std::string> env);
  // Waits until every gid of `in_flight` is final or unknown to tccd;
  // records the time since `since` as one recovery.
  void MeasureRecovery(const std::set<std::string>& in_flight,
                       SteadyClock::time_point since);
  std::set<std::string> InFlight();
  void Violation(const std::string& what);
  void Note(const std::string& what);

  absl::Status FaultFailpoint();
  absl::Status FaultKill9();
  absl::Status FaultParticipant();
  absl::Status FaultPause();
  absl::Status FaultFsync();
  absl::Status FaultClock();
  bool StraceWorks();

  void FinalChecks();

  Flags flags_;
  std::mt19937_64 rng_;
  std::string root_;
  std::string config_path_;
  std::vector<std::string> banks_;
  std::unique_ptr<BankCluster> cluster_;

  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::vector<Leg>> transfers_;  // every gid submitted
  std::map<std::string, v1::Decision> acknowledged_;   // decision told
  std::set<std::string> in_flight_;                    // Submit outstanding
  int64_t submit_errors_ = 0;

  int faults_[kFaultKinds] = {};
  // The failpoints of tccd's WAL (kTccdFailpoints or kEtcdFailpoints).
  const std::vector<std::string>* failpoints_ = &kTccdFailpoints;
  int failpoint_unfired_ = 0;
  std::map<std::string, int> failpoint_fired_;
  int tccd_restarts_ = 0;
  int recovery_timeouts_ = 0;
  std::vector<int64_t> recovery_ms_;
  std::vector<std::string> violations_;
  bool strace_checked_ = false;
  bool strace_works_ = false;
  bool faketime_works_ = false;
  int64_t confirmed_ = 0, cancelled_ = 0, unknown_to_tccd_ = 0;
};

void Drill::Violation(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(stderr, "drill: VIOLATION: %s\n", what.c_str());
  violations_.push_back(what);
}

void Drill::Note(const std::string& what) {
  std::fprintf(stderr, "drill: %s\n", what.c_str());
}

absl::Status Drill::Setup() {
  std::string tmpl =
      std::filesystem::temp_directory_path().string() + "/tccd-drill-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  root_ = tmpl;
  // Short timeouts so that a pause outlasts all of them and failure paths
  // run in seconds.
  config_path_ = root_ + "/tccd.yaml";
  std::ofstream(config_path_)
      << "participant_defaults:\n"
         "  timeouts:\n"
         "    all: {min_ms: 20, max_ms: 1000, initial_ms: 500}\n"
         "retry:\n"
         "  base_ms: 20\n"
         "  cap_ms: 500\n"
         "circuit_breaker:\n"
         "  failure_threshold: 5\n"
         "  open_ms: 500\n"
         "transactions:\n"
         "  try_timeout_ms: 2000\n";
  // The PostgreSQL bank's schema is its name: unique per run, so a shared
  // server (the ctest fixture) starts it empty.
  const std::string pg_bank =
      absl::StrCat("sql-", flags_.seed, "-", static_cast<int>(getpid()));
  banks_ = {"rocks-a", "rocks-b", pg_bank};
  ClusterOptions o;
  o.root_dir = root_;
  o.tccd_bin = flags_.tccd_bin;
  o.bank_bin = flags_.bank_bin;
  o.banks = banks_;
  o.accounts = kAccounts;
  o.initial_balance = kInitialBalance;
  o.store = "rocksdb";
  o.bank_store[pg_bank] = "postgres";
  o.pg_url = flags_.pg_url;
  o.tccd_args = {"--config", config_path_};
  cluster_ = std::make_unique<BankCluster>(o);
  if (cluster_->on_etcd()) failpoints_ = &kEtcdFailpoints;
  return cluster_->Start();
}

std::vector<Leg> Drill::RandomTransfer(std::mt19937_64& rng) {
  const int64_t amount = 1 + static_cast<int64_t>(rng() % 100);
  std::vector<Leg> legs;
  legs.push_back({banks_[rng() % banks_.size()],
                  static_cast<uint32_t>(rng() % kAccounts), -amount});
  if (rng() % 2 == 0) {
    legs.push_back({banks_[rng() % banks_.size()],
                    static_cast<uint32_t>(rng() % kAccounts), amount});
  } else {
    const int64_t first = amount / 2;
    legs.push_back({banks_[rng() % banks_.size()],
                    static_cast<uint32_t>(rng() % kAccounts), first});
    legs.push_back({banks_[rng() % banks_.size()],
                    static_cast<uint32_t>(rng() % kAccounts), amount - first});
  }
  return legs;
}

void Drill::ClientLoop(int thread) {
  std::mt19937_64 rng(flags_.seed * 1000003 + thread);
  auto client = cluster_->NewClient(/*max_attempts=*/4,
                                    /*attempt_timeout_ms=*/3000);
  for (int n = 0; !stop_; ++n) {
    std::vector<Leg> legs = RandomTransfer(rng);
    v1::SubmitRequest req;
    req.set_gid(absl::StrCat("drill-", flags_.seed, "-", thread, "-", n));
    for (size_t i = 0; i < legs.size(); ++i) {
      auto* b = req.add_branches();
      b->set_branch_id(i == 0 ? "debit" : absl::StrCat("credit", i));
      b->set_participant(legs[i].bank);
      b->set_action(i == 0 ? "debit" : "credit");
      const int64_t amount = legs[i].delta < 0 ? -legs[i].delta : legs[i].delta;
      b->set_payload(absl::StrCat(legs[i].account, ":", amount));
    }
    req.set_try_timeout_ms(kTryTimeoutMs);
    req.set_wait_for(v1::WAIT_FOR_FINISHED);
    {
      std::lock_guard<std::mutex> lock(mu_);
      transfers_[req.gid()] = legs;
      in_flight_.insert(req.gid());
    }
    auto r = client->Submit(req);
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(req.gid());
    if (!r.ok()) {
      ++submit_errors_;
      continue;
    }
    const v1::Decision d = r->transaction().decision();
    if (d == v1::DECISION_CONFIRM || d == v1::DECISION_CANCEL) {
      acknowledged_[req.gid()] = d;
    }
  }
}

std::set<std::string> Drill::InFlight() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

absl::Status Drill::StartTccd(std::map<std::string, std::string> env) {
  cluster_->SetTccdEnv(std::move(env));
  ++tccd_restarts_;
  return cluster_->StartTccd();
}

absl::Status Drill::StartBank(const std::string& name,
                              std::map<std::string, std::string> env) {
  cluster_->SetBankEnv(name, std::move(env));
  absl::Status last;
  for (int attempt = 0; attempt < 20; ++attempt) {
    last = cluster_->StartBank(name);
    if (last.ok()) return last;
    SleepMs(250);
  }
  return last;
}

void Drill::MeasureRecovery(const std::set<std::string>& in_flight,
                            SteadyClock::time_point since) {
  auto checker = cluster_->NewClient(1, 2000);
  std::set<std::string> left = in_flight;
  constexpr int64_t kRecoveryBoundMs = 30000;
  while (!left.empty() && MsSince(since) < kRecoveryBoundMs) {
    for (auto it = left.begin(); it != left.end();) {
      auto v = checker->Get(*it);
      const bool done = (v.ok() && IsFinal(v->state())) ||
                        v.status().code() == absl::StatusCode::kNotFound;
      it = done ? left.erase(it) : std::next(it);
    }
    if (!left.empty()) SleepMs(20);
  }
  if (!left.empty()) {
    ++recovery_timeouts_;
    Note(absl::StrCat(left.size(), " in-flight transactions not final ",
                      kRecoveryBoundMs, " ms after the restart, e.g. ",
                      *left.begin()));
  }
  recovery_ms_.push_back(MsSince(since));
}

absl::Status Drill::FaultFailpoint() {
  // Each failpoint in turn; where in its run it fires is random.
  const std::string& point =
      (*failpoints_)[faults_[kFailpoint] % failpoints_->size()];
  const uint64_t n =
      point == "driver.before_effect" ? 1 + rng_() % 400 : 1 + rng_() % 30;
  const std::string spec = absl::StrCat(point, "=crash@", n);
  // Arm it: a graceful stop, then a start with the failpoint.
  auto stopped = cluster_->StopTccd(15000);
  if (!stopped.ok() || !WIFEXITED(*stopped) || WEXITSTATUS(*stopped) != 0) {
    std::string where;
    if (!stopped.ok() && cluster_->tccd() != nullptr) {
      // Still running: what its threads wait in, for whoever reads this.
      where =
          absl::StrCat(root_, "/tccd-threads-", faults_[kFailpoint], ".txt");
      DumpThreads(cluster_->tccd()->pid(), where);
      where = absl::StrCat(" (its threads: ", where, ")");
    }
    Violation(absl::StrCat(
        "SIGTERM did not stop tccd cleanly: ",
        stopped.ok() ? std::to_string(*stopped) : stopped.status().ToString(),
        where));
    cluster_->KillTccd();
  }
  bool fired = false;
  if (absl::Status s = StartTccd({{"TCC_FAILPOINTS", spec}}); !s.ok()) {
    // It may crash there while it starts (recovery writes and syncs too).
    if (s.message().find("failpoint " + point + ": crash") ==
        absl::string_view::npos) {
      return s;
    }
    fired = true;
  } else {
    auto status = cluster_->tccd()->Wait(8000);
    fired = status.ok() && WIFSIGNALED(*status);
  }
  if (fired) ++failpoint_fired_[point];
  if (!fired) {
    ++failpoint_unfired_;
    cluster_->KillTccd();  // not reached in time: a plain kill -9
  }
  Note(absl::StrCat("failpoint ", spec, fired ? " crashed tccd" : " unfired"));
  const auto in_flight = InFlight();
  const auto t0 = SteadyClock::now();
  if (absl::Status s = StartTccd({}); !s.ok()) return s;
  MeasureRecovery(in_flight, t0);
  return absl::OkStatus();
}

absl::Status Drill::FaultKill9() {
  SleepMs(50 + static_cast<int64_t>(rng_() % 1500));
  cluster_->KillTccd();
  const auto in_flight = InFlight();
  const auto t0 = SteadyClock::now();
  if (absl::Status s = StartTccd({}); !s.ok()) return s;
  MeasureRecovery(in_flight, t0);
  return absl::OkStatus();
}

absl::Status Drill::FaultParticipant() {
  const std::string& bank = banks_[rng_() % banks_.size()];
  const uint64_t n = 1 + rng_() % 40;
  Process* p = cluster_->bank(bank);
  p->Signal(SIGTERM);
  if (!p->Wait(10000).ok()) cluster_->KillBank(bank);
  if (absl::Status s = StartBank(
          bank, {{"TCC_FAILPOINTS",
                  absl::StrCat("participant.after_commit=crash@", n)}});
      !s.ok()) {
    return s;
  }
  auto status = cluster_->bank(bank)->Wait(8000);
  const bool fired = status.ok() && WIFSIGNALED(*status);
  if (!fired) cluster_->KillBank(bank);
  Note(absl::StrCat(bank, " participant.after_commit=crash@", n,
                    fired ? " crashed it" : " unfired (killed)"));
  return StartBank(bank, {});
}

absl::Status Drill::FaultPause() {
  SleepMs(static_cast<int64_t>(rng_() % 500));
  Process* tccd = cluster_->tccd();
  const auto in_flight = InFlight();
  tccd->Signal(SIGSTOP);
  SleepMs(kPauseMs);
  tccd->Signal(SIGCONT);
  const auto t0 = SteadyClock::now();
  if (!tccd->Running()) {
    Violation("tccd died while paused");
    if (absl::Status s = StartTccd({}); !s.ok()) return s;
  }
  MeasureRecovery(in_flight, t0);
  return absl::OkStatus();
}

bool Drill::StraceWorks() {
  if (strace_checked_) return strace_works_;
  strace_checked_ = true;
  if (flags_.fsync_mode == "failpoint") return false;
  auto p = Process::Start(ProcessOptions{
      {"/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e",
       "trace=fdatasync", "-e", "inject=fdatasync:error=EIO", "/usr/bin/dd",
       "if=/dev/zero", "of=" + root_ + "/strace-probe", "bs=1k", "count=1",
       "conv=fdatasync"},
      {},
      "",
      "strace-probe"});
  if (!p.ok()) return false;
  auto status = (*p)->Wait(10000);
  // dd fails (exit 1) only when the fdatasync was made to fail.
  strace_works_ =
      status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 1;
  if (!strace_works_) {
    Note(
        "strace -e inject does not work here (ptrace?): fsync faults use "
        "the failpoint wal.before_sync=error");
    if (flags_.fsync_mode == "strace") {
      Violation("--fsync-mode strace, but strace cannot inject here");
    }
  }
  return strace_works_;
}

absl::Status Drill::FaultFsync() {
  std::unique_ptr<Process> strace;
  if (StraceWorks()) {
    SleepMs(100 + static_cast<int64_t>(rng_() % 1000));
    auto p = Process::Start(ProcessOptions{
        {"/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e",
         "trace=fsync,fdatasync", "-e", "inject=fsync,fdatasync:error=EIO",
         "-p", std::to_string(cluster_->tccd()->pid())},
        {},
        root_ + "/strace.log",
        "strace"});
    if (!p.ok()) return p.status();
    strace = std::move(*p);
  } else {
    const uint64_t n = 1 + rng_() % 40;
    cluster_->KillTccd();
    if (absl::Status s = StartTccd(
            {{"TCC_FAILPOINTS", absl::StrCat("wal.before_sync=error@", n)}});
        !s.ok()) {
      return s;
    }
  }
  auto status = cluster_->tccd()->Wait(15000);
  if (!status.ok()) {
    Violation("tccd kept running for 15 s after its fsync failed");
    cluster_->KillTccd();
  } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) == 0) {
    Violation(
        absl::StrCat("tccd did not fail-stop on a failed fsync: wait "
                     "status ",
                     *status));
  } else {
    Note(absl::StrCat("fsync failed: tccd exited ", WEXITSTATUS(*status)));
  }
  if (strace) strace->Kill();
  const auto in_flight = InFlight();
  const auto t0 = SteadyClock::now();
  if (absl::Status s = StartTccd({}); !s.ok()) return s;
  MeasureRecovery(in_flight, t0);
  return absl::OkStatus();
}

absl::Status Drill::FaultClock() {
  const bool ahead = faults_[kClock] % 2 == 0;
  cluster_->KillTccd();
  if (faketime_works_) {
    if (absl::Status s = StartTccd({{"LD_PRELOAD", kFaketimeLib},
                                    {"FAKETIME", ahead ? "+30s" : "-30s"},
                                    {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}});
        !s.ok()) {
      return s;
    }
    SleepMs(1000 + static_cast<int64_t>(rng_() % 2000));
    if (!cluster_->tccd()->Running()) {
      Violation("tccd died on a jumped wall clock");
    }
    cluster_->KillTccd();  // back to the true clock: a second jump
  }
  const auto in_flight = InFlight();
  const auto t0 = SteadyClock::now();
  if (absl::Status s = StartTccd({}); !s.ok()) return s;
  MeasureRecovery(in_flight, t0);
  return absl::OkStatus();
}

void Drill::FinalChecks() {
  std::map<std::string, std::vector<Leg>> transfers;
  std::map<std::string, v1::Decision> acknowledged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfers = transfers_;
    acknowledged = acknowledged_;
  }
  auto checker = cluster_->NewClient(5, 5000);
  std::vector<std::string> known;
  for (const auto& [gid, legs] : transfers) {
    auto v = checker->Get(gid);
    if (v.ok()) {
      known.push_back(gid);
    } else if (v.status().code() == absl::StatusCode::kNotFound) {
      ++unknown_to_tccd_;
      if (acknowledged.count(gid)) {
        Violation(absl::StrCat(gid, ": decision acknowledged, now unknown"));
      }
    } else {
      Violation(absl::StrCat(gid, ": Get failed: ", v.status().ToString()));
    }
  }
  if (absl::Status s = cluster_->CheckFinal(known, 60000); !s.ok()) {
    Violation(absl::StrCat("final check: ", s.ToString()));
    return;
  }
  // Expected balances from the final transactions.
  std::map<std::pair<std::string, uint32_t>, int64_t> expected;
  for (const auto& bank : banks_) {
    for (uint32_t a = 0; a < kAccounts; ++a) {
      expected[{bank, a}] = kInitialBalance;
    }
  }
  for (const auto& gid : known) {
    auto v = checker->Get(gid);
    if (!v.ok()) {
      Violation(absl::StrCat(gid, ": Get failed: ", v.status().ToString()));
      continue;
    }
    const bool confirmed = v->state() == v1::TXN_STATE_CONFIRMED;
    confirmed ? ++confirmed_ : ++cancelled_;
    if (auto it = acknowledged.find(gid); it != acknowledged.end()) {
      const bool acked_confirm = it->second == v1::DECISION_CONFIRM;
      if (acked_confirm != confirmed) {
        Violation(absl::StrCat(gid, ": acknowledged ",
                               v1::Decision_Name(it->second), " but ended ",
                               v1::TxnState_Name(v->state())));
      }
    }
    if (!confirmed) continue;
    for (const Leg& leg : transfers[gid]) {
      expected[{leg.bank, leg.account}] += leg.delta;
    }
  }
  // A drill in which nothing got through proves nothing.
  if (confirmed_ < 10) {
    Violation(absl::StrCat("only ", confirmed_,
                           " transfers confirmed: the drill tested nothing"));
  }
  int mismatches = 0;
  for (const auto& [key, want] : expected) {
    auto a = cluster_->Account(key.first, key.second);
    if (!a.ok()) {
      Violation(absl::StrCat("GetAccount ", key.first, "/", key.second, ": ",
                             a.status().ToString()));
      continue;
    }
    if (a->balance() != want || a->frozen() != 0 || a->incoming() != 0) {
      if (++mismatches <= 10) {
        Violation(absl::StrCat(key.first, " account ", key.second, ": balance ",
                               a->balance(), " expected ", want, " (frozen ",
                               a->frozen(), ", incoming ", a->incoming(), ")"));
      }
    }
  }
}

int Drill::Run() {
  if (absl::Status s = Setup(); !s.ok()) {
    std::fprintf(stderr, "drill: setup failed: %s (logs in %s)\n",
                 s.ToString().c_str(), root_.c_str());
    return 2;
  }
  faketime_works_ = std::filesystem::exists(kFaketimeLib);
  if (!faketime_works_) {
    Note(absl::StrCat(kFaketimeLib,
                      " missing: clock faults are plain restarts"));
  }
  std::printf("drill: seed=%llu seconds=%.0f dir=%s banks=%s,%s,%s\n",
              static_cast<unsigned long long>(flags_.seed), flags_.seconds,
              root_.c_str(), banks_[0].c_str(), banks_[1].c_str(),
              banks_[2].c_str());
  std::fflush(stdout);

  std::vector<std::thread> clients;
  for (int t = 0; t < kClientThreads; ++t) {
    clients.emplace_back([this, t] { ClientLoop(t); });
  }
  const auto start = SteadyClock::now();
  const int64_t budget_ms = static_cast<int64_t>(flags_.seconds * 1000);
  absl::Status broken;
  // The kinds in turn until the time is up, and at least until every kind
  // ran and every failpoint was tried once (bounded).
  const int min_rounds =
      kFaultKinds * (static_cast<int>(failpoints_->size()) - 1) + 1;
  for (int round = 0; round < 100000; ++round) {
    const bool all_kinds = round >= std::max(min_rounds, kFaultKinds);
    if (all_kinds && MsSince(start) >= budget_ms) break;
    const int kind = round % kFaultKinds;
    if (kind == kFsync && cluster_->on_etcd()) continue;
    SleepMs(200 + static_cast<int64_t>(rng_() % 600));  // let work pile up
    absl::Status s;
    switch (kind) {
      case kFailpoint:
        s = FaultFailpoint();
        break;
      case kKill9:
        s = FaultKill9();
        break;
      case kParticipant:
        s = FaultParticipant();
        break;
      case kPause:
        s = FaultPause();
        break;
      case kFsync:
        s = FaultFsync();
        break;
      case kClock:
        s = FaultClock();
        break;
    }
    ++faults_[kind];
    if (!s.ok()) {
      broken = s;
      break;
    }
  }
  stop_ = true;
  for (auto& t : clients) t.join();
  if (!broken.ok()) {
    Violation(absl::StrCat("could not restart a process: ", broken.ToString()));
  } else {
    FinalChecks();
  }

  std::vector<int64_t> rec = recovery_ms_;
  std::sort(rec.begin(), rec.end());
  const int64_t p50 = rec.empty() ? 0 : rec[rec.size() / 2];
  const int64_t max = rec.empty() ? 0 : rec.back();
  std::string fired;
  for (const auto& point : *failpoints_) {
    absl::StrAppend(&fired, fired.empty() ? "" : ",", point, ":",
                    failpoint_fired_[point]);
  }
  int faults = 0;
  std::string by_kind;
  for (int k = 0; k < kFaultKinds; ++k) {
    faults += faults_[k];
    absl::StrAppend(&by_kind, " ", kFaultNames[k], "=", faults_[k]);
  }
  std::printf(
      "drill: seed=%llu elapsed_s=%lld transactions=%zu confirmed=%lld "
      "cancelled=%lld unknown_to_tccd=%lld submit_errors=%lld tccd_starts=%d "
      "failpoints_fired=%s failpoint_unfired=%d recovery_timeouts=%d "
      "fsync_via=%s clock_via=%s\n",
      static_cast<unsigned long long>(flags_.seed),
      static_cast<long long>(MsSince(start) / 1000), transfers_.size(),
      static_cast<long long>(confirmed_), static_cast<long long>(cancelled_),
      static_cast<long long>(unknown_to_tccd_),
      static_cast<long long>(submit_errors_), tccd_restarts_, fired.c_str(),
      failpoint_unfired_, recovery_timeouts_,
      strace_works_ ? "strace" : "failpoint",
      faketime_works_ ? "faketime" : "none");
  std::printf(
      "drill: transactions=%zu faults=%d%s violations=%zu recovery_p50_ms=%lld "
      "recovery_max_ms=%lld\n",
      transfers_.size(), faults, by_kind.c_str(), violations_.size(),
      static_cast<long long>(p50), static_cast<long long>(max));
  std::fflush(stdout);
  cluster_.reset();  // kills and reaps every process
  if (!violations_.empty() || flags_.keep) {
    std::printf(
        "drill: logs and data kept in %s; replay the schedule with "
        "scripts/drill.sh --seed %llu --minutes %g\n",
        root_.c_str(), static_cast<unsigned long long>(flags_.seed),
        flags_.seconds / 60);
  } else {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  return violations_.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.seed = std::random_device()();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds") {
      flags.seconds = std::stod(value());
    } else if (a == "--minutes") {
      flags.seconds = std::stod(value()) * 60;
    } else if (a == "--seed") {
      flags.seed = std::stoull(value());
    } else if (a == "--pg-url") {
      flags.pg_url = value();
    } else if (a == "--pg-env-file") {
      flags.pg_env_file = value();
    } else if (a == "--fsync-mode") {
      flags.fsync_mode = value();
    } else if (a == "--tccd") {
      flags.tccd_bin = value();
    } else if (a == "--bank") {
      flags.bank_bin = value();
    } else if (a == "--keep") {
      flags.keep = true;
    } else {
      Usage();
      return 2;
    }
  }
  if (flags.pg_url.empty() && !flags.pg_env_file.empty()) {
    flags.pg_url = PgUrlFromFile(flags.pg_env_file);
  }
  if (flags.pg_url.empty()) {
    if (const char* url = std::getenv("TCC_PG_URL"); url != nullptr) {
      flags.pg_url = url;
    }
  }
  if (flags.pg_url.empty()) {
    std::fprintf(stderr,
                 "drill: no PostgreSQL (--pg-url, --pg-env-file or "
                 "TCC_PG_URL; scripts/pg.sh start)\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return Drill(std::move(flags)).Run();
}
