#include "bank_load.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"

namespace tcc::harness {

namespace v1 = tcc::v1;

BankLoad::BankLoad(BankLoadOptions options, std::vector<std::string> addresses)
    : options_(std::move(options)), addresses_(std::move(addresses)) {}

BankLoad::~BankLoad() { Stop(); }

void BankLoad::Start() {
  stop_ = false;
  for (int t = 0; t < options_.threads; ++t) {
    threads_.emplace_back([this, t] { Loop(t); });
  }
}

void BankLoad::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void BankLoad::SetAddresses(std::vector<std::string> addresses) {
  std::lock_guard<std::mutex> lock(mu_);
  addresses_ = std::move(addresses);
  ++addresses_version_;
}

std::set<std::string> BankLoad::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

LoadCounts BankLoad::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

std::unique_ptr<client::CoordinatorClient> BankLoad::NewClient(
    const std::vector<std::string>& addresses, int max_attempts,
    int64_t attempt_timeout_ms) const {
  client::ClientOptions o;
  o.addresses = addresses;
  o.max_attempts = max_attempts;
  o.attempt_timeout_ms = attempt_timeout_ms;
  o.backoff_base_ms = 50;
  o.backoff_cap_ms = 500;
  return std::make_unique<client::CoordinatorClient>(o);
}

void BankLoad::Loop(int thread) {
  std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(thread));
  uint64_t version = ~uint64_t{0};
  std::unique_ptr<client::CoordinatorClient> client;
  for (int n = 0; !stop_; ++n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (version != addresses_version_) {
        version = addresses_version_;
        client = NewClient(addresses_, options_.max_attempts,
                           options_.attempt_timeout_ms);
      }
    }
    (void)Transfer(*client, rng,
                   absl::StrCat(options_.gid_prefix, "-", options_.seed, "-",
                                thread, "-", n));
    if (options_.pause_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.pause_ms));
    }
  }
}

absl::Status BankLoad::SubmitThrough(
    const std::vector<std::string>& addresses) {
  static std::atomic<int> n{0};
  std::mt19937_64 rng(options_.seed * 7919 + static_cast<uint64_t>(n));
  auto client =
      NewClient(addresses, options_.max_attempts, options_.attempt_timeout_ms);
  return Transfer(
      *client, rng,
      absl::StrCat(options_.gid_prefix, "-", options_.seed, "-one-", n++));
}

absl::Status BankLoad::Transfer(client::CoordinatorClient& client,
                                std::mt19937_64& rng, const std::string& gid) {
  const int64_t amount = 1 + static_cast<int64_t>(rng() % 100);
  const auto& banks = options_.banks;
  const std::string& from = banks[rng() % banks.size()];
  const std::string& to = banks[rng() % banks.size()];
  std::vector<Leg> legs = {
      {from, static_cast<uint32_t>(rng() % options_.accounts), -amount},
      {to, static_cast<uint32_t>(rng() % options_.accounts), amount}};
  v1::SubmitRequest req;
  req.set_gid(gid);
  for (size_t i = 0; i < legs.size(); ++i) {
    auto* b = req.add_branches();
    b->set_branch_id(i == 0 ? "debit" : "credit");
    b->set_participant(legs[i].bank);
    b->set_action(i == 0 ? "debit" : "credit");
    b->set_payload(absl::StrCat(legs[i].account, ":", amount));
  }
  req.set_try_timeout_ms(options_.try_timeout_ms);
  req.set_wait_for(v1::WAIT_FOR_FINISHED);
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfers_[req.gid()] = legs;
    in_flight_.insert(req.gid());
    ++counts_.submitted;
  }
  auto r = client.Submit(req);
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(req.gid());
  const v1::Decision d =
      r.ok() ? r->transaction().decision() : v1::DECISION_UNSPECIFIED;
  if (d == v1::DECISION_CONFIRM || d == v1::DECISION_CANCEL) {
    acknowledged_[req.gid()] = d;
    ++counts_.acknowledged;
    return absl::OkStatus();
  }
  ++counts_.failed;
  return r.ok() ? absl::UnknownError("answered without a decision")
                : r.status();
}

LoadVerdict BankLoad::Check(BankCluster& banks, int64_t timeout_ms) {
  std::map<std::string, std::vector<Leg>> transfers;
  std::map<std::string, v1::Decision> acknowledged;
  std::vector<std::string> addresses;
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfers = transfers_;
    acknowledged = acknowledged_;
    addresses = addresses_;
  }
  LoadVerdict out;
  auto checker = NewClient(addresses, 10, 5000);
  std::vector<std::string> known;
  for (const auto& [gid, legs] : transfers) {
    auto v = checker->Get(gid);
    if (v.ok()) {
      known.push_back(gid);
    } else if (v.status().code() == absl::StatusCode::kNotFound) {
      ++out.unknown;
      if (acknowledged.count(gid)) {
        out.violations.push_back(
            absl::StrCat(gid, ": decision acknowledged, now unknown"));
      }
    } else {
      out.violations.push_back(
          absl::StrCat(gid, ": Get failed: ", v.status().ToString()));
    }
  }
  out.known = static_cast<int64_t>(known.size());
  if (absl::Status s = banks.CheckFinal(known, timeout_ms); !s.ok()) {
    out.violations.push_back(absl::StrCat("final check: ", s.ToString()));
    return out;
  }
  std::map<std::pair<std::string, uint32_t>, int64_t> expected;
  for (const auto& bank : options_.banks) {
    for (uint32_t a = 0; a < options_.accounts; ++a) {
      expected[{bank, a}] = options_.initial_balance;
    }
  }
  for (const auto& gid : known) {
    auto v = checker->Get(gid);
    if (!v.ok()) {
      out.violations.push_back(
          absl::StrCat(gid, ": Get failed: ", v.status().ToString()));
      continue;
    }
    const bool confirmed = v->state() == v1::TXN_STATE_CONFIRMED;
    confirmed ? ++out.confirmed : ++out.cancelled;
    for (const auto& b : v->branches()) {
      if (b.stuck()) {
        out.violations.push_back(
            absl::StrCat(gid, ": branch ", b.branch_id(), " STUCK"));
      }
    }
    if (auto it = acknowledged.find(gid); it != acknowledged.end()) {
      if ((it->second == v1::DECISION_CONFIRM) != confirmed) {
        out.violations.push_back(
            absl::StrCat(gid, ": acknowledged ", v1::Decision_Name(it->second),
                         " but ended ", v1::TxnState_Name(v->state())));
      }
    }
    if (!confirmed) continue;
    for (const Leg& leg : transfers[gid]) {
      expected[{leg.bank, leg.account}] += leg.delta;
    }
  }
  int mismatches = 0;
  for (const auto& [key, want] : expected) {
    auto a = banks.Account(key.first, key.second);
    if (!a.ok()) {
      out.violations.push_back(absl::StrCat("GetAccount ", key.first, "/",
                                            key.second, ": ",
                                            a.status().ToString()));
      continue;
    }
    if (a->balance() != want || a->frozen() != 0 || a->incoming() != 0) {
      if (++mismatches <= 10) {
        out.violations.push_back(
            absl::StrCat(key.first, " account ", key.second, ": balance ",
                         a->balance(), " expected ", want, " (frozen ",
                         a->frozen(), ", incoming ", a->incoming(), ")"));
      }
    }
  }
  return out;
}

}  // namespace tcc::harness
