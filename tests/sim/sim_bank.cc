#include "sim_bank.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::sim {
namespace {

constexpr char kAccountPrefix[] = "bank/account/";

std::string AccountKey(uint32_t account) {
  return absl::StrCat(kAccountPrefix, account);
}

std::string Encode(const Account& a) {
  return absl::StrCat(a.balance, " ", a.frozen, " ", a.incoming);
}

std::optional<Account> Decode(const std::string& v) {
  std::vector<absl::string_view> parts = absl::StrSplit(v, ' ');
  Account a;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &a.balance) ||
      !absl::SimpleAtoi(parts[1], &a.frozen) ||
      !absl::SimpleAtoi(parts[2], &a.incoming)) {
    return std::nullopt;
  }
  return a;
}

struct Transfer {
  uint32_t account = 0;
  int64_t amount = 0;
};

std::optional<Transfer> ParsePayload(const std::string& payload) {
  std::vector<absl::string_view> parts = absl::StrSplit(payload, ':');
  Transfer t;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &t.account) ||
      !absl::SimpleAtoi(parts[1], &t.amount) || t.amount <= 0) {
    return std::nullopt;
  }
  return t;
}

}  // namespace

SimBank::SimBank(std::string name, int accounts, int64_t initial_balance,
                 barrier::BarrierOptions options)
    : participant_(std::move(name), options,
                   runtime::sim::ParticipantBusiness{
                       [this](const barrier::HandlerContext& c) {
                         return TryHandler(c);
                       },
                       [this](const barrier::HandlerContext& c) {
                         return PhaseTwoHandler(c, wal::Phase::kConfirm);
                       },
                       [this](const barrier::HandlerContext& c) {
                         return PhaseTwoHandler(c, wal::Phase::kCancel);
                       }}) {
  auto txn = participant_.store().Begin();
  for (int i = 0; txn.ok() && i < accounts; ++i) {
    (void)(*txn)->Put(AccountKey(i), Encode(Account{initial_balance, 0, 0}));
  }
  // A store that cannot take its first commit is a broken test setup.
  if (!txn.ok() || !(*txn)->Commit().ok()) std::abort();
}

absl::StatusOr<barrier::TryVerdict> SimBank::TryHandler(
    const barrier::HandlerContext& c) {
  if (crash_ == CrashPoint::kInHandler) {
    participant_.store().Crash();  // the process dies before its local commit
    crashed_in_handler_ = true;
  }
  std::optional<Transfer> t = ParsePayload(c.call.payload);
  if (!t) return barrier::TryVerdict::Refuse("payload must be ACCOUNT:AMOUNT");
  auto v = c.txn.GetForUpdate(AccountKey(t->account));
  if (!v.ok()) return v.status();
  if (!v->has_value()) return barrier::TryVerdict::Refuse("no such account");
  std::optional<Account> a = Decode(**v);
  if (!a) return absl::DataLossError("malformed account");
  if (c.call.action == "debit") {
    if (a->balance - a->frozen < t->amount) {
      return barrier::TryVerdict::Refuse("insufficient funds");
    }
    a->frozen += t->amount;
  } else {
    a->incoming += t->amount;
  }
  if (auto s = c.txn.Put(AccountKey(t->account), Encode(*a)); !s.ok()) return s;
  return barrier::TryVerdict::Reserve();
}

absl::Status SimBank::PhaseTwoHandler(const barrier::HandlerContext& c,
                                      wal::Phase phase) {
  if (crash_ == CrashPoint::kInHandler) {
    participant_.store().Crash();
    crashed_in_handler_ = true;
  }
  std::optional<Transfer> t = ParsePayload(c.call.payload);
  if (!t) return absl::InvalidArgumentError("bad payload");
  auto v = c.txn.GetForUpdate(AccountKey(t->account));
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::NotFoundError("no such account");
  std::optional<Account> a = Decode(**v);
  if (!a) return absl::DataLossError("malformed account");
  const bool debit = c.call.action == "debit";
  const bool confirm = phase == wal::Phase::kConfirm;
  if (debit) {
    a->frozen -= t->amount;
    if (confirm) a->balance -= t->amount;
  } else {
    a->incoming -= t->amount;
    if (confirm) a->balance += t->amount;
  }
  if (auto s = c.txn.Put(AccountKey(t->account), Encode(*a)); !s.ok()) return s;
  if (a->frozen < 0 || a->incoming < 0 || a->balance < a->frozen) {
    broken_account_ =
        absl::StrCat("account ", t->account, " left at ", Encode(*a));
  }
  return absl::OkStatus();
}

SimBank::CallResult SimBank::Call(const runtime::BranchCall& call,
                                  CrashPoint crash,
                                  std::vector<std::string>& violations) {
  const size_t seen = participant_.violations().size();
  broken_account_.clear();
  crash_ = crash;
  crashed_in_handler_ = false;
  CallResult out;
  out.answer = participant_.Call(call);
  crash_ = CrashPoint::kNone;
  // The participant's per-call checks (exactly-once, no hanging).
  violations.insert(violations.end(), participant_.violations().begin() + seen,
                    participant_.violations().end());
  if (out.answer.ok() && !broken_account_.empty()) {
    // A phase 2 committed that leaves an account broken.
    violations.push_back(absl::StrCat(
        "money: ", name(), " ", core::PhaseName(call.phase), " ",
        barrier::ToString({call.gid, call.created_at_ms, call.spec->branch_id}),
        ": ", broken_account_));
  }
  if (crashed_in_handler_ || crash == CrashPoint::kAfterCommit) {
    participant_.store().Crash();
    out.crashed = true;
  }
  return out;
}

absl::StatusOr<runtime::QueryAnswer> SimBank::Query(
    const runtime::QueryCall& query) {
  return participant_.Query(query);
}

std::vector<Account> SimBank::Accounts() const {
  std::vector<Account> out;
  for (const auto& [k, v] : participant_.store().BusinessData()) {
    if (k.rfind(kAccountPrefix, 0) != 0) continue;
    std::optional<Account> a = Decode(v);
    out.push_back(a.value_or(Account{-1, -1, -1}));
  }
  return out;
}

int64_t SimBank::TotalMoney() const {
  int64_t sum = 0;
  for (const Account& a : Accounts()) sum += a.balance;
  return sum;
}

std::map<barrier::BranchKey, runtime::sim::EffectCounts> SimBank::Effects()
    const {
  return participant_.Effects();
}

std::optional<barrier::BarrierRecord> SimBank::Record(
    const barrier::BranchKey& key) const {
  return participant_.Record(key);
}

std::map<barrier::BranchKey, barrier::BarrierRecord> SimBank::Records() const {
  return participant_.Records();
}

void CheckBanksAtEnd(const std::vector<std::unique_ptr<SimBank>>& banks,
                     int64_t initial_total,
                     const std::function<void(std::string)>& violation) {
  int64_t total = 0;
  for (const auto& bank : banks) {
    // Termination (section 13.4): no reservation held.
    for (const auto& [key, rec] : bank->Records()) {
      if (rec.try_state == barrier::TryState::kTried &&
          rec.phase_two == barrier::PhaseTwoState::kNone) {
        violation(absl::StrCat("reservation held: ", bank->name(), " ",
                               barrier::ToString(key),
                               " is TRIED with no phase 2"));
      }
    }
    int i = 0;
    for (const Account& a : bank->Accounts()) {
      if (a.frozen != 0 || a.incoming != 0 || a.balance < 0) {
        violation(absl::StrCat("reservation held: ", bank->name(), " account ",
                               i, " ends with balance ", a.balance, ", frozen ",
                               a.frozen, ", incoming ", a.incoming));
      }
      total += a.balance;
      ++i;
    }
    // Exactly-once (section 13.2), from the committed effect counters.
    for (const auto& [key, n] : bank->Effects()) {
      for (const auto& [phase, count] :
           {std::pair{wal::Phase::kTry, n.tries},
            std::pair{wal::Phase::kConfirm, n.confirms},
            std::pair{wal::Phase::kCancel, n.cancels}}) {
        if (count != 0 && count != 1) {
          violation(absl::StrCat(
              "exactly-once: ", bank->name(), " ", core::PhaseName(phase), " ",
              barrier::ToString(key), " took effect ", count, " times"));
        }
      }
      if (n.confirms > 0 && n.cancels > 0) {
        violation(absl::StrCat("exactly-once: ", bank->name(), " ",
                               barrier::ToString(key),
                               " both confirmed and cancelled"));
      }
    }
  }
  if (total != initial_total) {
    violation(absl::StrCat("money: the banks hold ", total, ", not the ",
                           initial_total, " they started with"));
  }
}

void CheckBranchesAtEnd(const std::string& gid, int64_t created_at_ms,
                        core::TxnState state, bool confirmed,
                        const std::vector<wal::BranchSpec>& registered,
                        const std::vector<std::unique_ptr<SimBank>>& banks,
                        const std::map<std::string, int>& bank_index,
                        const std::function<void(std::string)>& violation) {
  for (const wal::BranchSpec& b : registered) {
    const auto rec = banks[bank_index.at(b.participant)]->Record(
        {gid, created_at_ms, b.branch_id});
    const bool branch_confirmed =
        rec.has_value() && rec->phase_two == barrier::PhaseTwoState::kConfirmed;
    if (branch_confirmed != confirmed) {
      violation(absl::StrCat(
          "atomicity: ", gid, " ended ", core::TxnStateName(state), " but ",
          gid, "/", b.branch_id, " at ", b.participant, " is ",
          std::string(barrier::BarrierStateName(
              barrier::BarrierStateOf(rec.has_value() ? &*rec : nullptr)))));
    }
  }
}

}  // namespace tcc::sim
