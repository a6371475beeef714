// The bank demo participant (bank-a, bank-b): accounts with a balance, a
// frozen amount and an incoming amount, kept in the participant store's
// key-value data, and the `debit` and `credit` actions (see bank.proto).
//
// Built from the SDK only, as a user would: the handlers below contain no
// idempotency code; the barrier makes them run once per branch.
//
// Thread-safe (every access goes through a store transaction).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bank.grpc.pb.h"
#include "tcc/barrier/barrier_store.h"
#include "tcc/participant/participant.h"

namespace tcc::examples::bank {

struct AccountState {
  int64_t balance = 0;
  int64_t frozen = 0;
  int64_t incoming = 0;
};

// Creates accounts 0..count-1 with `initial_balance` unless the store already
// holds accounts (a restart keeps them).
[[nodiscard]] absl::Status InitAccounts(barrier::BarrierStore& store,
                                        uint32_t count,
                                        int64_t initial_balance);

// Registers the "debit" and "credit" actions.
[[nodiscard]] absl::Status RegisterActions(participant::Participant& p);

// Reads one account (NOT_FOUND when it does not exist).
[[nodiscard]] absl::StatusOr<AccountState> ReadAccount(
    barrier::BarrierStore& store, uint32_t account);

// The Bank gRPC service over a store.
class BankService final : public Bank::Service {
 public:
  explicit BankService(barrier::BarrierStore& store) : store_(store) {}
  grpc::Status GetAccount(grpc::ServerContext*, const GetAccountRequest* req,
                          Account* resp) override;
  grpc::Status GetTotals(grpc::ServerContext*, const GetTotalsRequest* req,
                         Totals* resp) override;

 private:
  barrier::BarrierStore& store_;
};

}  // namespace tcc::examples::bank
