// Seed searches over the simulation: run seeds in order until a budget
// (seeds, wall time) is spent or the first violation, and sum them up in the
// one line every run ends with:
//   sim: seeds=N transactions=N faults=N crashes=N violations=N
// Used by the tcc-sim CLI and the ctest budgets. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "simulation.h"

namespace tcc::sim {

struct SearchBudget {
  uint64_t first_seed = 1;
  uint64_t seeds = 0;      // 0: no limit on seeds
  double max_seconds = 0;  // 0: no limit on time (real time)
};

struct SearchSummary {
  uint64_t seeds = 0;
  uint64_t transactions = 0;
  uint64_t confirmed = 0;
  uint64_t faults = 0;
  uint64_t crashes = 0;
  uint64_t violations = 0;
  std::optional<SeedReport> failure;  // the first failing seed, if any
  double seconds = 0;

  std::string Line() const;
};

// Stops at the first violation.
SearchSummary Search(const SimOptions& options, const SearchBudget& budget);

// A failing seed, printable: seed, parameters, violations, how to replay.
std::string DescribeFailure(const SeedReport& report,
                            const SimOptions& options);

// The rule breakers by name (--break on the command line):
//   skip-cancel-for-unconfirmed-try, act-before-decision-durable,
//   replayed-rejected-is-success (the core's), barrier-skip-anti-hanging.
// False for an unknown name.
bool ApplyBreaker(const std::string& name, SimOptions& options);
// The command-line flags that select `options` (for replay lines).
std::string OptionFlags(const SimOptions& options);

}  // namespace tcc::sim
