// DriverBackend::Status (tccctl status, Admin Status) over the in-memory WAL:
// it counts unfinished transactions to the end of the index, however many
// finished ones lie ahead of them, where a List page examines at most
// ListQuery::scan_budget (10,000) transactions.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/sim/sim_environment.h"
#include "server/driver_backend.h"
#include "tcc/wal/memory_log.h"

namespace tcc::server {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;

// Appends `records` for `gid`; the in-memory log (auto_sync) completes the
// append inside Append.
absl::Status Append(wal::Log& log, const std::string& gid,
                    std::vector<wal::Record> records) {
  wal::AppendRequest request;
  request.gid = gid;
  request.records = std::move(records);
  absl::Status result = absl::UnknownError("append not completed");
  log.Append(std::move(request), [&](absl::Status s) { result = s; });
  return result;
}

wal::Registered MakeRegistered(const std::string& gid, int64_t at_ms) {
  wal::Registered r;
  r.gid = gid;
  r.created_at_ms = at_ms;
  r.registered_at_ms = at_ms;
  r.revision = 1;
  r.try_deadline_ms = at_ms + 30'000;
  r.owner_epoch = 1;
  return r;
}

TEST_CASE("Status counts unfinished transactions behind a page's scan budget") {
  wal::MemoryLog log;
  // Oldest first: more finished transactions than one List page examines
  // (wal::ListQuery{}.scan_budget), then 99,001 TRYING ones, within
  // Status's bound of 100,000 a state (100 pages of 1,000). Bounded pages
  // would still page past the finished ones, so fewer TRYING ones would not
  // show it: what goes wrong is that the budget-cut first page (empty) costs
  // one of Status's 100 pages, and the last TRYING one is never reached.
  const size_t kFinished = wal::ListQuery{}.scan_budget + 1;
  constexpr uint64_t kTrying = 99'001;
  int64_t at_ms = kT0;
  for (size_t i = 0; i < kFinished; ++i) {
    const std::string gid = "f-" + std::to_string(i);
    wal::Decided decided;
    decided.decision = wal::Decision::kCancel;
    decided.reason = "test";
    decided.at_ms = at_ms;
    wal::Finished finished;
    finished.state = wal::TxnState::kCancelled;
    finished.at_ms = at_ms;
    absl::Status s =
        Append(log, gid, {MakeRegistered(gid, at_ms++), decided, finished});
    if (!s.ok()) FAIL(s.ToString());
  }
  const int64_t oldest_trying_ms = at_ms;
  for (uint64_t i = 0; i < kTrying; ++i) {
    const std::string gid = "t-" + std::to_string(i);
    absl::Status s = Append(log, gid, {MakeRegistered(gid, at_ms++)});
    if (!s.ok()) FAIL(s.ToString());
  }

  runtime::sim::SimClock clock(at_ms + 5'000);
  DriverBackend backend(log, clock, /*metrics=*/nullptr);
  const rpc::CoordinatorBackend::Health health = backend.Status();

  // Bounded pages: 99,000, and (with the oldest age taken from the first
  // page only, as before the fix) an oldest age of 0.
  REQUIRE(health.in_flight.size() == 1);
  CHECK(health.in_flight[0].first == wal::TxnState::kTrying);
  CHECK(health.in_flight[0].second == kTrying);
  CHECK(health.oldest_unfinished_age_ms ==
        static_cast<uint64_t>(clock.WallMs() - oldest_trying_ms));
}

}  // namespace
}  // namespace tcc::server
