// The simulation has teeth: with each test-only rule breaker on (the core's
// three, and the barrier without its anti-hanging rows), a small seed budget
// finds a violation of DESIGN.md section 13.
#include <catch2/catch.hpp>
#include <string>

#include "sim_search.h"

namespace tcc::sim {
namespace {

void ExpectCaught(const std::string& breaker, bool check_write_ahead = true) {
  SimOptions options;
  options.short_run = true;
  options.check_write_ahead = check_write_ahead;
  REQUIRE(ApplyBreaker(breaker, options));
  SearchBudget budget;
  budget.seeds = 500;
  budget.max_seconds = 20;
  const SearchSummary s = Search(options, budget);
  REQUIRE(s.failure.has_value());
  WARN(breaker << " caught at seed " << s.failure->seed << " after " << s.seeds
               << " seeds, " << s.seconds
               << " s: " << s.failure->violations.front());
}

TEST_CASE("teeth: anti-hanging assumption broken in the core", "[sim][teeth]") {
  ExpectCaught("skip-cancel-for-unconfirmed-try");
}

TEST_CASE("teeth: decision acted on before it is durable", "[sim][teeth]") {
  ExpectCaught("act-before-decision-durable");
}

// Without the write-ahead check on calls, a decision acted on before it is
// durable is still caught: a crash loses it (no lost decision, section
// 13.3), or recovery decides the other way.
TEST_CASE("teeth: decision acted on before durable, by its consequences",
          "[sim][teeth]") {
  ExpectCaught("act-before-decision-durable", /*check_write_ahead=*/false);
}

TEST_CASE("teeth: a replayed REJECTED taken as success", "[sim][teeth]") {
  ExpectCaught("replayed-rejected-is-success");
}

TEST_CASE("teeth: barrier without its anti-hanging rows", "[sim][teeth]") {
  ExpectCaught("barrier-skip-anti-hanging");
}

}  // namespace
}  // namespace tcc::sim
