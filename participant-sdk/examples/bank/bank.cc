#include "bank.h"

#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::examples::bank {
namespace {

using barrier::HandlerContext;
using barrier::LocalTxn;
using barrier::TryVerdict;

constexpr char kAccountCountKey[] = "bank/accounts";

std::string AccountKey(uint32_t account) {
  return absl::StrCat("bank/account/", account);
}

std::string Encode(const AccountState& a) {
  return absl::StrCat(a.balance, " ", a.frozen, " ", a.incoming);
}

absl::StatusOr<AccountState> Decode(const std::string& v) {
  std::vector<absl::string_view> parts = absl::StrSplit(v, ' ');
  AccountState a;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &a.balance) ||
      !absl::SimpleAtoi(parts[1], &a.frozen) ||
      !absl::SimpleAtoi(parts[2], &a.incoming)) {
    return absl::DataLossError(absl::StrCat("malformed account '", v, "'"));
  }
  return a;
}

struct Transfer {
  uint32_t account = 0;
  int64_t amount = 0;
};

// "ACCOUNT:AMOUNT[:PADDING]", AMOUNT > 0. PADDING (anything without a ':')
// is ignored: it lets a benchmark send payloads of a chosen size.
std::optional<Transfer> ParsePayload(const std::string& payload) {
  std::vector<absl::string_view> parts = absl::StrSplit(payload, ':');
  Transfer t;
  if (parts.size() < 2 || parts.size() > 3 ||
      !absl::SimpleAtoi(parts[0], &t.account) ||
      !absl::SimpleAtoi(parts[1], &t.amount) || t.amount <= 0) {
    return std::nullopt;
  }
  return t;
}

// Locks and reads the account; nullopt when it does not exist.
absl::StatusOr<std::optional<AccountState>> LockAccount(LocalTxn& txn,
                                                        uint32_t account) {
  absl::StatusOr<std::optional<std::string>> v =
      txn.GetForUpdate(AccountKey(account));
  if (!v.ok()) return v.status();
  if (!v->has_value()) return std::optional<AccountState>();
  absl::StatusOr<AccountState> a = Decode(**v);
  if (!a.ok()) return a.status();
  return std::optional<AccountState>(*a);
}

absl::Status Save(LocalTxn& txn, uint32_t account, const AccountState& a) {
  return txn.Put(AccountKey(account), Encode(a));
}

// Runs `change` on the payload's account, in the call's transaction. Only
// used by Confirm and Cancel, which cannot refuse: a bad payload or a
// missing account there is an error (retried, then flagged by tccd).
absl::Status Apply(const HandlerContext& c,
                   void (*change)(AccountState&, int64_t)) {
  std::optional<Transfer> t = ParsePayload(c.call.payload);
  if (!t) return absl::InvalidArgumentError("bad payload");
  absl::StatusOr<std::optional<AccountState>> a =
      LockAccount(c.txn, t->account);
  if (!a.ok()) return a.status();
  if (!a->has_value()) return absl::NotFoundError("no such account");
  change(**a, t->amount);
  return Save(c.txn, t->account, **a);
}

absl::StatusOr<TryVerdict> DebitTry(const HandlerContext& c) {
  std::optional<Transfer> t = ParsePayload(c.call.payload);
  if (!t) return TryVerdict::Refuse("payload must be ACCOUNT:AMOUNT");
  absl::StatusOr<std::optional<AccountState>> a =
      LockAccount(c.txn, t->account);
  if (!a.ok()) return a.status();
  if (!a->has_value()) return TryVerdict::Refuse("no such account");
  AccountState& acct = **a;
  if (acct.balance - acct.frozen < t->amount) {
    return TryVerdict::Refuse("insufficient funds");
  }
  acct.frozen += t->amount;
  if (absl::Status s = Save(c.txn, t->account, acct); !s.ok()) return s;
  return TryVerdict::Reserve();
}

absl::StatusOr<TryVerdict> CreditTry(const HandlerContext& c) {
  std::optional<Transfer> t = ParsePayload(c.call.payload);
  if (!t) return TryVerdict::Refuse("payload must be ACCOUNT:AMOUNT");
  absl::StatusOr<std::optional<AccountState>> a =
      LockAccount(c.txn, t->account);
  if (!a.ok()) return a.status();
  if (!a->has_value()) return TryVerdict::Refuse("no such account");
  (*a)->incoming += t->amount;
  if (absl::Status s = Save(c.txn, t->account, **a); !s.ok()) return s;
  return TryVerdict::Reserve();
}

}  // namespace

absl::Status InitAccounts(barrier::BarrierStore& store, uint32_t count,
                          int64_t initial_balance) {
  absl::StatusOr<std::unique_ptr<LocalTxn>> txn = store.Begin();
  if (!txn.ok()) return txn.status();
  absl::StatusOr<std::optional<std::string>> existing =
      (*txn)->GetForUpdate(kAccountCountKey);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return absl::OkStatus();  // a restart
  for (uint32_t i = 0; i < count; ++i) {
    if (absl::Status s = Save(**txn, i, AccountState{initial_balance, 0, 0});
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = (*txn)->Put(kAccountCountKey, absl::StrCat(count));
      !s.ok()) {
    return s;
  }
  return (*txn)->Commit();
}

absl::Status RegisterActions(participant::Participant& p) {
  absl::Status debit = p.AddAction(
      "debit", {.on_try = DebitTry,
                .on_confirm =
                    [](const HandlerContext& c) {
                      return Apply(c, [](AccountState& a, int64_t amount) {
                        a.frozen -= amount;
                        a.balance -= amount;
                      });
                    },
                .on_cancel =
                    [](const HandlerContext& c) {
                      return Apply(c, [](AccountState& a, int64_t amount) {
                        a.frozen -= amount;
                      });
                    }});
  if (!debit.ok()) return debit;
  return p.AddAction(
      "credit", {.on_try = CreditTry,
                 .on_confirm =
                     [](const HandlerContext& c) {
                       return Apply(c, [](AccountState& a, int64_t amount) {
                         a.incoming -= amount;
                         a.balance += amount;
                       });
                     },
                 .on_cancel =
                     [](const HandlerContext& c) {
                       return Apply(c, [](AccountState& a, int64_t amount) {
                         a.incoming -= amount;
                       });
                     }});
}

absl::StatusOr<AccountState> ReadAccount(barrier::BarrierStore& store,
                                         uint32_t account) {
  absl::StatusOr<std::unique_ptr<LocalTxn>> txn = store.Begin();
  if (!txn.ok()) return txn.status();
  absl::StatusOr<std::optional<std::string>> v =
      (*txn)->Get(AccountKey(account));
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    return absl::NotFoundError(absl::StrCat("no account ", account));
  }
  return Decode(**v);
}

grpc::Status BankService::GetAccount(grpc::ServerContext*,
                                     const GetAccountRequest* req,
                                     Account* resp) {
  absl::StatusOr<AccountState> a = ReadAccount(store_, req->account());
  if (!a.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(a.status().code()),
                        std::string(a.status().message()));
  }
  resp->set_account(req->account());
  resp->set_balance(a->balance);
  resp->set_frozen(a->frozen);
  resp->set_incoming(a->incoming);
  return grpc::Status::OK;
}

grpc::Status BankService::GetTotals(grpc::ServerContext*,
                                    const GetTotalsRequest*, Totals* resp) {
  absl::StatusOr<std::unique_ptr<LocalTxn>> txn = store_.Begin();
  absl::Status status = txn.status();
  uint32_t count = 0;
  if (status.ok()) {
    absl::StatusOr<std::optional<std::string>> n =
        (*txn)->Get(kAccountCountKey);
    status = n.status();
    if (status.ok() && n->has_value() && !absl::SimpleAtoi(**n, &count)) {
      status = absl::DataLossError("malformed account count");
    }
  }
  for (uint32_t i = 0; status.ok() && i < count; ++i) {
    absl::StatusOr<std::optional<std::string>> v = (*txn)->Get(AccountKey(i));
    status = v.status();
    if (!status.ok()) break;
    if (!v->has_value()) continue;
    absl::StatusOr<AccountState> a = Decode(**v);
    status = a.status();
    if (!status.ok()) break;
    resp->set_balance(resp->balance() + a->balance);
    resp->set_frozen(resp->frozen() + a->frozen);
    resp->set_incoming(resp->incoming() + a->incoming);
  }
  if (!status.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()));
  }
  resp->set_accounts(count);
  return grpc::Status::OK;
}

}  // namespace tcc::examples::bank
