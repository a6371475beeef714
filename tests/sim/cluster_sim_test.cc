// The cluster simulation's CI profile (issue 23; cluster_simulation.h): a
// fixed set of short seeds over 2-4 nodes and the modelled fenced store,
// every check after every event and at the end of each seed, and proof that
// the seeds exercise the faults they are meant to (takeovers, pauses past
// the lease, lost shards, late Txns, stale reads, ...). A failure prints
// the seed and its draw (replay: scripts/sim.sh --cluster --seed S --short).
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "cluster_simulation.h"
#include "sim_search.h"

namespace tcc::sim {
namespace {

TEST_CASE("cluster: short seeds keep every invariant", "[sim][cluster]") {
  SimOptions options;
  options.cluster = true;
  options.short_run = true;
  std::map<std::string, uint64_t> counts;
  uint64_t transactions = 0, confirmed = 0, faults = 0;
  constexpr uint64_t kSeeds = 2000;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const SeedReport r = RunClusterSeed(seed, options);
    INFO(DescribeFailure(r, options));
    REQUIRE(r.violations.empty());
    transactions += static_cast<uint64_t>(r.transactions);
    confirmed += static_cast<uint64_t>(r.confirmed);
    faults += r.faults;
    for (const auto& [name, n] : r.cluster_counts) counts[name] += n;
  }
  std::string seen;
  for (const auto& [name, n] : counts) {
    seen += name + "=" + std::to_string(n) + " ";
  }
  INFO(seen);
  CHECK(faults > 10 * kSeeds);
  CHECK(confirmed > transactions / 10);
  CHECK(confirmed < transactions * 9 / 10);
  // Every fault class happens, and what it should cause happens too.
  for (const char* name :
       {"node_crash", "pause_past_lease", "keepalive_lost", "store_outage",
        "store_leader_change", "store_partition", "call_answer_lost",
        "txn_applied_after_timeout", "txn_kept_while_down", "stale_read",
        "lease_lost", "shard_lost", "shard_taken_over",
        "call_withheld_untrusted", "blind_create", "blind_create_refused",
        "append_held"}) {
    INFO(name);
    CHECK(counts[name] > 0);
  }
  WARN("cluster: " << kSeeds << " seeds, " << transactions << " transactions, "
                   << faults << " faults: " << seen);
}

TEST_CASE("cluster: a seed replays exactly", "[sim][cluster]") {
  SimOptions options;
  options.cluster = true;
  options.short_run = true;
  for (uint64_t seed : {7u, 4242u}) {
    const SeedReport a = RunClusterSeed(seed, options);
    const SeedReport b = RunClusterSeed(seed, options);
    CHECK(a.events == b.events);
    CHECK(a.faults == b.faults);
    CHECK(a.confirmed == b.confirmed);
    CHECK(a.cluster_counts == b.cluster_counts);
  }
}

// Teeth: each rule breaker of issue 23 is caught, by the check named,
// within a small seed budget (1,000 seeds, 40 s in all). A seed that a
// breaker fails by another check first (an unknown Txn outcome taken as
// refused can also leave its transaction halted forever: termination) is
// reported and passed over: the named check must still fire within the
// budget.
void ExpectCaught(const std::string& breaker, const std::string& check) {
  SimOptions options;
  options.cluster = true;
  options.short_run = true;
  REQUIRE(ApplyBreaker(breaker, options));
  SearchBudget budget;
  budget.seeds = 1000;
  budget.max_seconds = 40;
  uint64_t seeds = 0;
  double seconds = 0;
  std::string others;
  while (true) {
    const SearchSummary s = Search(options, budget);
    seeds += s.seeds;
    seconds += s.seconds;
    INFO("failed by other checks first: " << others);
    REQUIRE(s.failure.has_value());
    INFO(DescribeFailure(*s.failure, options));
    bool named = false;
    for (const std::string& v : s.failure->violations) {
      named = named || v.find(check) != std::string::npos;
    }
    if (named) {
      WARN(breaker << " caught at seed " << s.failure->seed << " after "
                   << seeds << " seeds, " << seconds
                   << " s: " << s.failure->violations.front());
      return;
    }
    others += " seed " + std::to_string(s.failure->seed) + ": " +
              s.failure->violations.front() + ";";
    budget.first_seed = s.failure->seed + 1;
    REQUIRE(seeds < 1000);
    REQUIRE(seconds < 40);
    budget.seeds = 1000 - seeds;
    budget.max_seconds = 40 - seconds;
  }
}

TEST_CASE("cluster teeth: a write without the fence", "[sim][cluster]") {
  ExpectCaught("write-without-fence", "fencing:");
}

TEST_CASE("cluster teeth: a takeover without compare-and-set",
          "[sim][cluster]") {
  ExpectCaught("takeover-without-cas", "epoch:");
}

// The per-gid compare-and-set omitted (after a takeover, and any time): a
// Txn applied late then rolls a transaction back to an older version.
TEST_CASE("cluster teeth: a head write without compare-and-set",
          "[sim][cluster]") {
  ExpectCaught("head-without-cas", "lost update:");
}

TEST_CASE("cluster teeth: an unknown Txn outcome taken as refused",
          "[sim][cluster]") {
  ExpectCaught("unknown-txn-as-refused", "unknown outcome taken as refused");
}

TEST_CASE("cluster teeth: lease trust from the keep-alive's receipt",
          "[sim][cluster]") {
  ExpectCaught("lease-trust-from-receipt", "lease trust:");
}

TEST_CASE("cluster teeth: a restarted node adopting its old owner key",
          "[sim][cluster]") {
  ExpectCaught("restart-adopts-old-owner-key", "epoch:");
}

TEST_CASE("cluster teeth: a takeover without the unknown-Try lookup",
          "[sim][cluster]") {
  ExpectCaught("resume-skips-unknown-try-lookup", "");
}

}  // namespace
}  // namespace tcc::sim
