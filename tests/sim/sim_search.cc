#include "sim_search.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "cluster_simulation.h"

namespace tcc::sim {

std::string SearchSummary::Line() const {
  return absl::StrCat("sim: seeds=", seeds, " transactions=", transactions,
                      " faults=", faults, " crashes=", crashes,
                      " violations=", violations);
}

SearchSummary Search(const SimOptions& options, const SearchBudget& budget) {
  // Wall time only bounds how long a search runs; it never reaches a seed.
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  SearchSummary s;
  for (uint64_t seed = budget.first_seed;; ++seed) {
    if (budget.seeds != 0 && s.seeds >= budget.seeds) break;
    if (budget.max_seconds > 0 && elapsed() >= budget.max_seconds) break;
    SeedReport r = options.cluster ? RunClusterSeed(seed, options)
                                   : RunSeed(seed, options);
    ++s.seeds;
    s.transactions += r.transactions;
    s.confirmed += r.confirmed;
    s.faults += r.faults;
    s.crashes += r.crashes;
    if (!r.violations.empty()) {
      s.violations += r.violations.size();
      s.failure = std::move(r);
      break;
    }
  }
  s.seconds = elapsed();
  return s;
}

std::string DescribeFailure(const SeedReport& r, const SimOptions& options) {
  std::string out = absl::StrCat("sim: VIOLATION at seed ", r.seed, "\n",
                                 "sim: params ", r.params.Describe(), "\n");
  if (!r.cluster_params.empty()) {
    absl::StrAppend(&out, "sim: cluster ", r.cluster_params, "\n");
  }
  for (const std::string& v : r.violations) {
    absl::StrAppend(&out, "sim:   ", v, "\n");
  }
  absl::StrAppend(&out, "sim: replay with scripts/sim.sh --seed ", r.seed,
                  OptionFlags(options));
  return out;
}

bool ApplyBreaker(const std::string& name, SimOptions& options) {
  if (name == "skip-cancel-for-unconfirmed-try") {
    options.breakers.skip_cancel_for_unconfirmed_try = true;
  } else if (name == "act-before-decision-durable") {
    options.breakers.act_before_decision_durable = true;
  } else if (name == "replayed-rejected-is-success") {
    options.breakers.replayed_rejected_is_success = true;
  } else if (name == "barrier-skip-anti-hanging") {
    options.barrier_skip_anti_hanging = true;
  } else if (name == "resume-skips-unknown-try-lookup") {
    options.breakers.resume_skips_unknown_try_lookup = true;
  } else if (name == "write-without-fence") {
    options.cluster_breakers.write_without_fence = true;
  } else if (name == "takeover-without-cas") {
    options.cluster_breakers.takeover_without_cas = true;
  } else if (name == "unknown-txn-as-refused") {
    options.cluster_breakers.unknown_txn_as_refused = true;
  } else if (name == "lease-trust-from-receipt") {
    options.cluster_breakers.lease_trust_from_receipt = true;
  } else if (name == "head-without-cas") {
    options.cluster_breakers.head_without_cas = true;
  } else if (name == "restart-adopts-old-owner-key") {
    options.cluster_breakers.restart_adopts_old_owner_key = true;
  } else {
    return false;
  }
  return true;
}

std::string OptionFlags(const SimOptions& o) {
  std::string out;
  if (o.cluster) out += " --cluster";
  if (o.short_run) out += " --short";
  if (o.slow_links_stay) out += " --slow-links-stay";
  if (!o.check_write_ahead) out += " --no-write-ahead-check";
  if (o.breakers.skip_cancel_for_unconfirmed_try) {
    out += " --break skip-cancel-for-unconfirmed-try";
  }
  if (o.breakers.act_before_decision_durable) {
    out += " --break act-before-decision-durable";
  }
  if (o.breakers.replayed_rejected_is_success) {
    out += " --break replayed-rejected-is-success";
  }
  if (o.barrier_skip_anti_hanging) out += " --break barrier-skip-anti-hanging";
  if (o.breakers.resume_skips_unknown_try_lookup) {
    out += " --break resume-skips-unknown-try-lookup";
  }
  const ClusterBreakers& c = o.cluster_breakers;
  if (c.write_without_fence) out += " --break write-without-fence";
  if (c.takeover_without_cas) out += " --break takeover-without-cas";
  if (c.unknown_txn_as_refused) out += " --break unknown-txn-as-refused";
  if (c.lease_trust_from_receipt) out += " --break lease-trust-from-receipt";
  if (c.head_without_cas) out += " --break head-without-cas";
  if (c.restart_adopts_old_owner_key) {
    out += " --break restart-adopts-old-owner-key";
  }
  return out;
}

}  // namespace tcc::sim
