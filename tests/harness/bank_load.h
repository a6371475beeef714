// Bank load for drills: a few threads submit random two-branch transfers
// (a debit at one bank, a credit at another, WAIT_FOR_FINISHED) through the
// tccd addresses they are given, while a drill injects faults; it records
// every transfer, which are in flight, and what was acknowledged. Check()
// is the end-of-run verdict over the banks (BankCluster): every transaction
// that reached tccd is final and all-or-nothing, money conserved, nothing
// frozen (BankCluster::CheckFinal), no acknowledged decision changed or
// lost, and every account holds exactly what the confirmed transfers imply
// (each effect once, none for a cancelled one).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bank_cluster.h"

namespace tcc::harness {

struct BankLoadOptions {
  std::vector<std::string> banks = {"bank-a", "bank-b"};
  uint32_t accounts = 50;
  int64_t initial_balance = 100000;
  int threads = 4;
  int64_t pause_ms = 20;  // between one thread's transfers
  int max_attempts = 15;
  int64_t attempt_timeout_ms = 3000;
  uint32_t try_timeout_ms = 2000;
  std::string gid_prefix = "load";
  uint64_t seed = 1;
};

struct LoadCounts {
  int64_t submitted = 0;
  int64_t acknowledged = 0;  // answered with a decision
  int64_t failed = 0;        // the client gave up (outcome unknown)
};

struct LoadVerdict {
  int64_t known = 0;    // registered at tccd
  int64_t unknown = 0;  // never reached tccd (NOT_FOUND)
  int64_t confirmed = 0;
  int64_t cancelled = 0;
  std::vector<std::string> violations;
};

class BankLoad {
 public:
  BankLoad(BankLoadOptions options, std::vector<std::string> addresses);
  ~BankLoad();  // Stop()
  BankLoad(const BankLoad&) = delete;
  BankLoad& operator=(const BankLoad&) = delete;

  void Start();
  // Ends the threads once their current transfer returned.
  void Stop();
  // The addresses each thread's next transfer goes through.
  void SetAddresses(std::vector<std::string> addresses);

  // One transfer through `addresses` (recorded as the load's are); OK once
  // it was answered with a decision.
  [[nodiscard]] absl::Status SubmitThrough(
      const std::vector<std::string>& addresses);

  std::set<std::string> InFlight() const;
  LoadCounts counts() const;

  // The end-of-run checks over `banks` (every tccd it needs up), waiting up
  // to timeout_ms for transactions to become final. Call after Stop().
  LoadVerdict Check(BankCluster& banks, int64_t timeout_ms);

 private:
  struct Leg {
    std::string bank;
    uint32_t account = 0;
    int64_t delta = 0;
  };
  void Loop(int thread);
  absl::Status Transfer(client::CoordinatorClient& client, std::mt19937_64& rng,
                        const std::string& gid);
  std::unique_ptr<client::CoordinatorClient> NewClient(
      const std::vector<std::string>& addresses, int max_attempts,
      int64_t attempt_timeout_ms) const;

  const BankLoadOptions options_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::vector<std::string> addresses_;  // guarded by mu_
  uint64_t addresses_version_ = 0;      // guarded by mu_
  std::map<std::string, std::vector<Leg>> transfers_;
  std::set<std::string> in_flight_;
  std::map<std::string, tcc::v1::Decision> acknowledged_;
  LoadCounts counts_;
};

}  // namespace tcc::harness
