// Every interleaving of one transaction's messages, timeouts, duplicates,
// durable acknowledgements, retries and its deadline, with the invariants of
// DESIGN.md section 13 checked after every step (protocol_model.h).
#include <catch2/catch.hpp>

#include "protocol_model.h"

namespace tcc::core::testing {
namespace {}  // namespace
ModelConfig Config(int branches, std::vector<bool> rejects) {
  ModelConfig c;
  c.branches = branches;
  c.rejects = std::move(rejects);
  return c;
}

namespace {
void ExpectClean(const ModelConfig& c) {
  ExploreStats s = Explore(c);
  INFO("states=" << s.states << " leaves=" << s.leaves
                 << " finals=" << s.finals);
  INFO(s.violation);
  CHECK(s.violation.empty());
  CHECK(s.states > 100);
  if (c.max_depth == 0) CHECK(s.finals == s.leaves);
}

// Fault budgets keep the state space finite: every call of a branch may time
// out (once per branch), every call reply may be duplicated once, a Query may
// be answered by a lagging replica once per branch.
TEST_CASE("two branches, both Trys succeed: every interleaving completes",
          "[interleaving]") {
  ModelConfig c = Config(2, {false, false});
  c.timeouts_per_branch = 1;
  c.dups_allowed = 1;
  c.query_faults_per_branch = 0;
  ExpectClean(c);
  // Lagging replicas too (timeouts on one branch).
  c.query_faults_per_branch = 1;
  c.timeout_branches = 1;
  ExpectClean(c);
}

TEST_CASE("two branches, one Try rejected: every interleaving cancels",
          "[interleaving]") {
  ModelConfig c = Config(2, {false, true});
  c.query_faults_per_branch = 0;
  ExpectClean(c);
}

TEST_CASE("two branches, both rejected", "[interleaving]") {
  ModelConfig c = Config(2, {true, true});
  c.dups_allowed = 0;
  c.query_faults_per_branch = 0;
  ExpectClean(c);
}

TEST_CASE("interactive, two branches: Begin, Try, Try, Commit",
          "[interleaving]") {
  ModelConfig c = Config(2, {false, false});
  c.interactive = true;
  c.dups_allowed = 0;
  c.query_faults_per_branch = 0;
  ExpectClean(c);
  c.rejects = {true, false};
  c.timeouts_per_branch = 0;
  c.dups_allowed = 1;
  ExpectClean(c);
}

TEST_CASE("three branches to 12 events deep", "[interleaving]") {
  ModelConfig c = Config(3, {false, false, true});
  c.max_depth = 12;
  c.timeouts_per_branch = 0;
  c.query_faults_per_branch = 0;
  ExpectClean(c);
  c.rejects = {false, false, false};
  c.timeouts_per_branch = 1;
  c.timeout_branches = 1;
  c.dups_allowed = 0;
  ExpectClean(c);
}

TEST_CASE(
    "a coordinator crash anywhere, then recovery: every interleaving "
    "completes",
    "[interleaving][crash]") {
  for (auto rejects :
       {std::vector<bool>{false, false}, std::vector<bool>{false, true}}) {
    ModelConfig c = Config(2, rejects);
    c.crashes = 1;
    c.timeouts_per_branch = 1;
    c.timeout_branches = 1;
    c.dups_allowed = 0;
    c.query_faults_per_branch = 0;
    ExpectClean(c);
  }
}

TEST_CASE("approval gate: approval or its deadline, in every interleaving",
          "[interleaving]") {
  ModelConfig c = Config(2, {false, false});
  c.approval_gate = true;
  c.dups_allowed = 0;
  c.query_faults_per_branch = 0;
  c.crashes = 1;
  c.timeout_branches = 1;
  ExpectClean(c);
}

// The harness has teeth: each rule breaker is caught.
TEST_CASE("rule breaker (a): skipping Cancel for an unknown Try is caught",
          "[interleaving][breakers]") {
  ModelConfig c = Config(2, {false, true});
  c.options.breakers.skip_cancel_for_unconfirmed_try = true;
  ExploreStats s = Explore(c);
  INFO(s.violation);
  CHECK(s.violation.find("CANCELLED but b") != std::string::npos);
}

TEST_CASE("rule breaker (b): acting before the decision is durable is caught",
          "[interleaving][breakers]") {
  ModelConfig c = Config(2, {false, false});
  c.options.breakers.act_before_decision_durable = true;
  ExploreStats s = Explore(c);
  CHECK(s.violation.find("write-ahead") != std::string::npos);
}

TEST_CASE("rule breaker (c): a replayed REJECTED taken as success is caught",
          "[interleaving][breakers]") {
  ModelConfig c = Config(2, {false, true});
  c.options.breakers.replayed_rejected_is_success = true;
  ExploreStats s = Explore(c);
  INFO(s.violation);
  CHECK(s.violation.find("never reserved") != std::string::npos);
}

}  // namespace
}  // namespace tcc::core::testing
