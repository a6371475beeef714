#include "sim_bank.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::sim {
namespace {

constexpr char kAccountPrefix[] = "bank/account/";
constexpr char kEffectPrefix[] = "effect/";

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

const char* PhaseTag(wal::Phase phase) {
  switch (phase) {
    case wal::Phase::kTry:
      return "try";
    case wal::Phase::kConfirm:
      return "confirm";
    case wal::Phase::kCancel:
      return "cancel";
  }
  return "?";
}

std::string EffectKey(wal::Phase phase, const barrier::BranchKey& key) {
  return absl::StrCat(kEffectPrefix, PhaseTag(phase), "/",
                      barrier::ToString(key));
}

barrier::BranchCall ToBarrierCall(const runtime::BranchCall& c) {
  barrier::BranchCall b;
  b.key = {c.gid, c.created_at_ms, c.spec->branch_id};
  b.action = c.spec->action;
  b.payload = c.spec->payload;
  b.branch_hash.assign(c.spec->branch_hash.begin(), c.spec->branch_hash.end());
  b.revision = c.revision;
  b.attempt = c.attempt;
  b.owner_epoch = c.owner_epoch;
  b.try_deadline_ms = c.try_deadline_ms;
  return b;
}

}  // namespace

SimBank::SimBank(std::string name, int accounts, int64_t initial_balance,
                 barrier::BarrierOptions options)
    : name_(std::move(name)), barrier_(store_, clock_, options) {
  auto txn = store_.Begin();
  for (int i = 0; txn.ok() && i < accounts; ++i) {
    (void)(*txn)->Put(AccountKey(i), Encode(Account{initial_balance, 0, 0}));
  }
  // A store that cannot take its first commit is a broken test setup.
  if (!txn.ok() || !(*txn)->Commit().ok()) std::abort();
}

absl::Status SimBank::CountEffect(const barrier::HandlerContext& c,
                                  wal::Phase phase) {
  const std::string key = EffectKey(phase, c.call.key);
  auto v = c.txn.GetForUpdate(key);
  if (!v.ok()) return v.status();
  int64_t n = 0;
  if (v->has_value() && !absl::SimpleAtoi(**v, &n)) {
    return absl::DataLossError("malformed effect counter");
  }
  bool opposite = false;
  if (phase != wal::Phase::kTry) {
    auto o = c.txn.Get(EffectKey(phase == wal::Phase::kConfirm
                                     ? wal::Phase::kCancel
                                     : wal::Phase::kConfirm,
                                 c.call.key));
    if (!o.ok()) return o.status();
    opposite = o->has_value();
  }
  pending_ = PendingEffect{key, n + 1, opposite, ""};
  return c.txn.Put(key, absl::StrCat(n + 1));
}

absl::StatusOr<barrier::TryVerdict> SimBank::TryHandler(
    const barrier::HandlerContext& c) {
  if (crash_ == CrashPoint::kInHandler) {
    store_.Crash();  // the process dies before its local commit
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
  if (auto s = CountEffect(c, wal::Phase::kTry); !s.ok()) return s;
  return barrier::TryVerdict::Reserve();
}

absl::Status SimBank::PhaseTwoHandler(const barrier::HandlerContext& c,
                                      wal::Phase phase) {
  if (crash_ == CrashPoint::kInHandler) {
    store_.Crash();
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
  if (auto s = CountEffect(c, phase); !s.ok()) return s;
  if (a->frozen < 0 || a->incoming < 0 || a->balance < a->frozen) {
    pending_->broken_account =
        absl::StrCat("account ", t->account, " left at ", Encode(*a));
  }
  return absl::OkStatus();
}

SimBank::CallResult SimBank::Call(const runtime::BranchCall& call,
                                  CrashPoint crash,
                                  std::vector<std::string>& violations) {
  const barrier::BranchCall b = ToBarrierCall(call);
  const std::optional<barrier::BarrierRecord> before = Record(b.key);
  pending_.reset();
  crash_ = crash;
  crashed_in_handler_ = false;
  absl::StatusOr<barrier::BarrierAnswer> a;
  switch (call.phase) {
    case wal::Phase::kTry:
      a = barrier_.Try(b, [this](const barrier::HandlerContext& c) {
        return TryHandler(c);
      });
      break;
    case wal::Phase::kConfirm:
      a = barrier_.Confirm(b, [this](const barrier::HandlerContext& c) {
        return PhaseTwoHandler(c, wal::Phase::kConfirm);
      });
      break;
    case wal::Phase::kCancel:
      a = barrier_.Cancel(b, [this](const barrier::HandlerContext& c) {
        return PhaseTwoHandler(c, wal::Phase::kCancel);
      });
      break;
  }
  crash_ = CrashPoint::kNone;
  CallResult out;
  const std::string where = absl::StrCat(name_, " ", PhaseTag(call.phase), " ",
                                         barrier::ToString(b.key));
  if (a.ok() && pending_.has_value()) {
    // A handler's effect committed.
    if (pending_->count > 1) {
      violations.push_back(absl::StrCat(
          "exactly-once: ", where, " took effect ", pending_->count, " times"));
    }
    if (pending_->opposite) {
      violations.push_back(absl::StrCat(
          "exactly-once: ", where, " took effect after the opposite phase 2"));
    }
    if (!pending_->broken_account.empty()) {
      violations.push_back(
          absl::StrCat("money: ", where, ": ", pending_->broken_account));
    }
    if (call.phase == wal::Phase::kTry) {
      // No hanging (section 13.5): a reservation is only made before any
      // Cancel of the key and before try-deadline + skew by this clock.
      const int64_t now = clock_.NowUnixMs();
      if (now > b.try_deadline_ms + barrier_.options().clock_skew_ms) {
        violations.push_back(
            absl::StrCat("no hanging: ", where, " reserved at ", now,
                         ", past its try-deadline ", b.try_deadline_ms,
                         " + skew ", barrier_.options().clock_skew_ms));
      }
      if (before.has_value() &&
          before->phase_two == barrier::PhaseTwoState::kCancelled) {
        violations.push_back(
            absl::StrCat("no hanging: ", where, " reserved after its Cancel"));
      }
    }
  }
  if (crashed_in_handler_ || crash == CrashPoint::kAfterCommit) {
    store_.Crash();
    out.crashed = true;
  }
  if (!a.ok()) {
    out.answer = a.status();
  } else {
    out.answer = runtime::BranchAnswer{
        static_cast<wal::Outcome>(static_cast<uint8_t>(a->outcome)),
        a->replayed, a->message};
  }
  return out;
}

absl::StatusOr<runtime::QueryAnswer> SimBank::Query(
    const runtime::QueryCall& query) {
  auto a = barrier_.Query({query.gid, query.created_at_ms, query.branch_id});
  if (!a.ok()) return a.status();
  runtime::QueryAnswer out;
  out.state = static_cast<core::BarrierState>(static_cast<uint8_t>(a->state));
  if (a->branch_hash.size() == out.branch_hash.size()) {
    std::copy(a->branch_hash.begin(), a->branch_hash.end(),
              out.branch_hash.begin());
  }
  out.authoritative = a->authoritative;
  return out;
}

std::vector<Account> SimBank::Accounts() const {
  std::vector<Account> out;
  for (const auto& [k, v] : store_.BusinessData()) {
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

std::map<std::string, int64_t> SimBank::Effects() const {
  std::map<std::string, int64_t> out;
  for (const auto& [k, v] : store_.BusinessData()) {
    if (k.rfind(kEffectPrefix, 0) != 0) continue;
    int64_t n = 0;
    out[k.substr(sizeof(kEffectPrefix) - 1)] = absl::SimpleAtoi(v, &n) ? n : -1;
  }
  return out;
}

std::optional<barrier::BarrierRecord> SimBank::Record(
    const barrier::BranchKey& key) const {
  auto r = store_.ReadBarrier(key);
  if (!r.ok()) return std::nullopt;
  return *r;
}

std::map<barrier::BranchKey, barrier::BarrierRecord> SimBank::Records() const {
  std::map<barrier::BranchKey, barrier::BarrierRecord> out;
  (void)store_.ScanBarrier(
      [&](const barrier::BranchKey& k, const barrier::BarrierRecord& r) {
        out[k] = r;
      });
  return out;
}

}  // namespace tcc::sim
