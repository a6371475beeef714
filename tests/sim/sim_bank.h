// SimBank: one bank participant of the deterministic simulation (issue 7).
//
// It is the bank's business logic over the one simulated participant of the
// tests, runtime::sim::SdkParticipant: the SDK's real barrier
// (tcc::barrier::Barrier, DESIGN.md section 11) over a MemoryBarrierStore,
// with its own ManualClock (set by the simulation before every call, so that
// it can drift and jump apart from tccd's). The business works on the
// store's key-value data, as in the bank demo
// (participant-sdk/examples/bank):
//   debit  Try freezes the amount (refused when balance - frozen is short),
//          Confirm takes it from the balance, Cancel unfreezes it;
//   credit Try records it as incoming, Confirm adds it to the balance,
//          Cancel drops it.
// Payloads are "ACCOUNT:AMOUNT".
//
// SdkParticipant counts every effect in the handler's local transaction, so
// exactly-once (section 13.2) is read back from committed data (Effects()),
// and checks each call (exactly-once, no hanging); SimBank adds the money
// check (no account left broken by a phase 2).
//
// Crashes follow MemoryBarrierStore's model: a crash inside a handler loses
// the whole local transaction (the call fails and its reply is lost); a
// crash after the commit keeps it and loses only the reply. Either way the
// simulation keeps the bank down for a while.
//
// Not thread-safe: the simulation is single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/environment.h"
#include "runtime/sim/sdk_participant.h"
#include "tcc/barrier/barrier.h"
#include "tcc/clock/clock.h"

namespace tcc::sim {

struct Account {
  int64_t balance = 0;
  int64_t frozen = 0;    // debits tried, not yet confirmed or cancelled
  int64_t incoming = 0;  // credits tried, not yet confirmed or cancelled
};

// Where a participant crash hits a call.
enum class CrashPoint : uint8_t {
  kNone,
  kInHandler,    // before the local commit: nothing of the call survives
  kAfterCommit,  // the call is durable, its reply is lost
};

class SimBank {
 public:
  SimBank(std::string name, int accounts, int64_t initial_balance,
          barrier::BarrierOptions options);

  const std::string& name() const { return participant_.name(); }
  clock::ManualClock& clock() { return participant_.clock(); }

  // Runs one Try / Confirm / Cancel through the barrier at the bank's clock.
  // `crashed` is set when the bank crashed during the call (the caller drops
  // the reply and keeps the bank down). Safety checks that one call can
  // break are appended to `violations`.
  struct CallResult {
    absl::StatusOr<runtime::BranchAnswer> answer;
    bool crashed = false;
  };
  CallResult Call(const runtime::BranchCall& call, CrashPoint crash,
                  std::vector<std::string>& violations);
  absl::StatusOr<runtime::QueryAnswer> Query(const runtime::QueryCall& query);

  // --- Reads of committed state, for the checks.
  std::vector<Account> Accounts() const;
  // How many times each effect committed, per branch key.
  std::map<barrier::BranchKey, runtime::sim::EffectCounts> Effects() const;
  // The barrier record of a key, if any.
  std::optional<barrier::BarrierRecord> Record(
      const barrier::BranchKey& key) const;
  // Every barrier record.
  std::map<barrier::BranchKey, barrier::BarrierRecord> Records() const;
  int64_t TotalMoney() const;

 private:
  absl::StatusOr<barrier::TryVerdict> TryHandler(
      const barrier::HandlerContext& c);
  absl::Status PhaseTwoHandler(const barrier::HandlerContext& c,
                               wal::Phase phase);

  runtime::sim::SdkParticipant participant_;
  // Set by a phase-2 handler, read after the call: an account state it
  // would leave broken.
  std::string broken_account_;
  CrashPoint crash_ = CrashPoint::kNone;
  bool crashed_in_handler_ = false;
};

// Atomicity at the end (DESIGN.md section 13.1): each of `registered` (the
// branches tccd registered for `gid`) is confirmed at its bank exactly when
// the transaction is (`confirmed`; it ended in `state`). `bank_index` maps a
// participant's name to its index in `banks`.
void CheckBranchesAtEnd(const std::string& gid, int64_t created_at_ms,
                        core::TxnState state, bool confirmed,
                        const std::vector<wal::BranchSpec>& registered,
                        const std::vector<std::unique_ptr<SimBank>>& banks,
                        const std::map<std::string, int>& bank_index,
                        const std::function<void(std::string)>& violation);

// The banks' end-of-run checks, the same for every simulation (DESIGN.md
// section 13): no reservation held (no TRIED record without its phase 2,
// nothing frozen or incoming, no negative balance), exactly-once from the
// committed effect counters, and the money the banks started with.
// `violation` hears each broken rule.
void CheckBanksAtEnd(const std::vector<std::unique_ptr<SimBank>>& banks,
                     int64_t initial_total,
                     const std::function<void(std::string)>& violation);

}  // namespace tcc::sim
