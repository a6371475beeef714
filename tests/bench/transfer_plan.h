// What one benchmark transaction asks of its branches: a transfer between
// uniformly random accounts, and how each branch's share of it is encoded as
// that branch's opaque payload.
//
// The payload encoding is pluggable (PayloadFormat) because the participants
// decide what they parse: the no-op participant parses nothing, the bank
// participants parse whatever the bank's format is.
//
// Planning is a pure function of (seed, sequence number), so any thread can
// plan any transaction without shared state, and a run is reproducible.
// Everything here is thread-safe (const after construction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tcc::bench {

// One branch's part of a transfer.
struct TransferLeg {
  std::string participant;  // a participant name known to the coordinator
  std::string action;       // "debit" or "credit"
  int64_t account = 0;      // in [0, accounts)
  int64_t amount = 0;
};

// Encodes one leg as a branch payload of (about) a requested size.
class PayloadFormat {
 public:
  virtual ~PayloadFormat() = default;
  // The payload for `leg`, padded to `payload_bytes` when the encoding is
  // shorter; never truncated (a payload may exceed a tiny size asked for).
  virtual std::string Encode(const TransferLeg& leg,
                             size_t payload_bytes) const = 0;
};

// {"account":"A123","amount":1} with a "pad" field of 'x' bringing it up to
// the requested size, so the payload stays valid JSON at any size.
class JsonPayloadFormat final : public PayloadFormat {
 public:
  std::string Encode(const TransferLeg& leg,
                     size_t payload_bytes) const override;
};

// The bank example's format: "ACCOUNT:AMOUNT" (the account as its number),
// with an ignored third field ":xxx..." bringing it up to the requested size
// when that is larger (the bank accepts "ACCOUNT:AMOUNT[:PADDING]").
class BankPayloadFormat final : public PayloadFormat {
 public:
  std::string Encode(const TransferLeg& leg,
                     size_t payload_bytes) const override;
};

// By name: "json" or "bank". INVALID_ARGUMENT for an unknown name.
[[nodiscard]] absl::StatusOr<std::unique_ptr<PayloadFormat>> MakePayloadFormat(
    const std::string& name);

struct TransferShape {
  int branches = 2;                       // legs per transaction, >= 1
  std::vector<std::string> participants;  // leg i goes to participants[i % n]
  int64_t accounts = 10000;               // accounts per participant, >= 2
  uint64_t seed = 1;
};

// Plans transfers of a fixed shape. Leg 0 debits (branches - 1) units from
// one account (1 unit when there is a single leg); legs 1.. each credit one
// unit to another account, so the money moved sums to zero whenever there is
// more than one leg. Accounts are uniformly random and no credited account
// equals the debited one.
class TransferPlanner {
 public:
  // INVALID_ARGUMENT on a shape that cannot be planned.
  [[nodiscard]] static absl::StatusOr<TransferPlanner> Create(
      TransferShape shape);

  // The legs of transaction number `sequence` (same input, same legs).
  std::vector<TransferLeg> Plan(uint64_t sequence) const;

  const TransferShape& shape() const { return shape_; }

 private:
  explicit TransferPlanner(TransferShape shape) : shape_(std::move(shape)) {}
  TransferShape shape_;
};

// "A<n>": how an account number is written in payloads.
std::string AccountName(int64_t account);

}  // namespace tcc::bench
