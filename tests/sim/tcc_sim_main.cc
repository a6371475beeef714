// tcc-sim: runs the deterministic simulation (tests/sim/simulation.h) over
// seeds and prints, last, the summary line
//   sim: seeds=N transactions=N faults=N crashes=N violations=N
// The first violation prints its seed, its drawn parameters and how to replay
// it, and stops the run (exit status 1).
//
//   tcc-sim --seed S            replays one seed exactly
//   tcc-sim --seeds N [--first F]
//   tcc-sim --minutes M [--first F]
//   --short                     the CI profile (smaller seeds)
//   --cluster                   the cluster simulation (cluster_simulation.h):
//                               N nodes over the modelled fenced store
//   --break NAME                turn a test-only rule breaker on (repeatable)
//   --no-write-ahead-check      other checks only (teeth for decisions)
//   --slow-links-stay           slow links stay slow in the liveness phase
//   --trace                     every call, answer and crash to stderr
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cluster_simulation.h"
#include "sim_search.h"

int main(int argc, char** argv) {
  CLI::App app{"tccd's deterministic simulation"};
  uint64_t seed = 0, seeds = 0, first = 1;
  double minutes = 0;
  bool short_run = false, trace = false;
  std::vector<std::string> breakers;
  app.add_option("--seed", seed, "run this one seed");
  app.add_option("--seeds", seeds, "run this many seeds");
  app.add_option("--first", first, "first seed of a search");
  app.add_option("--minutes", minutes, "search for this long");
  app.add_flag("--short", short_run, "the CI profile: smaller seeds");
  bool cluster = false;
  app.add_flag("--cluster", cluster,
               "N nodes over the modelled fenced store (issue 23)");
  bool slow_links_stay = false, no_write_ahead_check = false;
  app.add_flag("--no-write-ahead-check", no_write_ahead_check,
               "skip the write-ahead check on calls");
  app.add_flag("--slow-links-stay", slow_links_stay,
               "keep the seed's link latency when the faults stop");
  app.add_option("--break", breakers, "a test-only rule breaker to turn on");
  app.add_flag("--trace", trace, "trace every event to stderr (one seed)");
  CLI11_PARSE(app, argc, argv);

  tcc::sim::SimOptions options;
  options.short_run = short_run;
  options.cluster = cluster;
  options.trace = trace;
  options.slow_links_stay = slow_links_stay;
  options.check_write_ahead = !no_write_ahead_check;
  for (const std::string& b : breakers) {
    if (!tcc::sim::ApplyBreaker(b, options)) {
      std::fprintf(stderr, "tcc-sim: unknown breaker '%s'\n", b.c_str());
      return 2;
    }
  }
  tcc::sim::SearchBudget budget;
  if (seed != 0) {
    budget.first_seed = seed;
    budget.seeds = 1;
    tcc::sim::SeedReport r = cluster ? tcc::sim::RunClusterSeed(seed, options)
                                     : tcc::sim::RunSeed(seed, options);
    std::printf("sim: seed %llu params %s\n",
                static_cast<unsigned long long>(seed),
                r.params.Describe().c_str());
    std::printf(
        "sim: seed %llu: %d transactions (%d confirmed, %d "
        "cancelled), %llu events, %llu faults, %llu crashes\n",
        static_cast<unsigned long long>(seed), r.transactions, r.confirmed,
        r.cancelled, static_cast<unsigned long long>(r.events),
        static_cast<unsigned long long>(r.faults),
        static_cast<unsigned long long>(r.crashes));
    if (!r.violations.empty()) {
      std::printf("%s\n", tcc::sim::DescribeFailure(r, options).c_str());
    }
    std::printf(
        "sim: seeds=1 transactions=%d faults=%llu crashes=%llu "
        "violations=%zu\n",
        r.transactions, static_cast<unsigned long long>(r.faults),
        static_cast<unsigned long long>(r.crashes), r.violations.size());
    return r.violations.empty() ? 0 : 1;
  }
  budget.first_seed = first;
  budget.seeds = seeds;
  budget.max_seconds = minutes * 60;
  if (seeds == 0 && minutes == 0) budget.seeds = 100;
  tcc::sim::SearchSummary s = tcc::sim::Search(options, budget);
  if (s.failure) {
    std::printf("%s\n", tcc::sim::DescribeFailure(*s.failure, options).c_str());
  }
  std::printf("sim: %.1f s, %llu of %llu transactions confirmed\n", s.seconds,
              static_cast<unsigned long long>(s.confirmed),
              static_cast<unsigned long long>(s.transactions));
  std::printf("%s\n", s.Line().c_str());
  return s.violations == 0 ? 0 : 1;
}
