#include "transfer_plan.h"

#include "absl/strings/str_cat.h"

namespace tcc::bench {
namespace {

// SplitMix64: a fast, well-mixed hash of a counter; good enough to pick
// uniform accounts, and stateless.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, n) (the modulo bias is below 2^-40 for n <= 2^24).
int64_t Uniform(uint64_t random, int64_t n) {
  return static_cast<int64_t>(random % static_cast<uint64_t>(n));
}

}  // namespace

std::string AccountName(int64_t account) { return absl::StrCat("A", account); }

std::string JsonPayloadFormat::Encode(const TransferLeg& leg,
                                      size_t payload_bytes) const {
  std::string body = absl::StrCat("{\"account\":\"", AccountName(leg.account),
                                  "\",\"amount\":", leg.amount);
  constexpr size_t kPadOverhead = sizeof(",\"pad\":\"\"}") - 1;
  if (body.size() + 1 + kPadOverhead <= payload_bytes) {
    size_t pad = payload_bytes - body.size() - kPadOverhead;
    absl::StrAppend(&body, ",\"pad\":\"", std::string(pad, 'x'), "\"");
  }
  body.push_back('}');
  return body;
}

std::string BankPayloadFormat::Encode(const TransferLeg& leg,
                                      size_t payload_bytes) const {
  std::string body = absl::StrCat(leg.account, ":", leg.amount);
  if (body.size() + 2 <= payload_bytes) {
    body.push_back(':');
    body.append(payload_bytes - body.size(), 'x');
  }
  return body;
}

absl::StatusOr<std::unique_ptr<PayloadFormat>> MakePayloadFormat(
    const std::string& name) {
  if (name == "json") return std::make_unique<JsonPayloadFormat>();
  if (name == "bank") return std::make_unique<BankPayloadFormat>();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown payload format '", name, "' (known: json, bank)"));
}

absl::StatusOr<TransferPlanner> TransferPlanner::Create(TransferShape shape) {
  if (shape.branches < 1) {
    return absl::InvalidArgumentError("branches must be at least 1");
  }
  if (shape.participants.empty()) {
    return absl::InvalidArgumentError("at least one participant is needed");
  }
  for (const auto& p : shape.participants) {
    if (p.empty()) return absl::InvalidArgumentError("empty participant name");
  }
  if (shape.accounts < 2) {
    return absl::InvalidArgumentError("accounts must be at least 2");
  }
  return TransferPlanner(std::move(shape));
}

std::vector<TransferLeg> TransferPlanner::Plan(uint64_t sequence) const {
  const int n = shape_.branches;
  const auto& participants = shape_.participants;
  std::vector<TransferLeg> legs(n);
  uint64_t state = Mix(shape_.seed ^ Mix(sequence));
  const int64_t debited = Uniform(state, shape_.accounts);
  legs[0] = TransferLeg{participants[0], "debit", debited,
                        n == 1 ? 1 : static_cast<int64_t>(n - 1)};
  for (int i = 1; i < n; ++i) {
    state = Mix(state);
    // Uniform over the accounts other than the debited one.
    int64_t credited = Uniform(state, shape_.accounts - 1);
    if (credited >= debited) ++credited;
    legs[i] = TransferLeg{participants[i % participants.size()], "credit",
                          credited, 1};
  }
  return legs;
}

}  // namespace tcc::bench
