#include "server/instrumented_transport.h"

#include <spdlog/spdlog.h>

#include <string>

#include "absl/strings/ascii.h"

namespace tcc::server {
namespace {

// A metric label: the one name of the value (wal/records.h, core), in lower
// case ("try", "empty_rollback", "cancelled_before_try").
std::string Label(const char* name) { return absl::AsciiStrToLower(name); }

// "unavailable", "deadline_exceeded", ...: the status code as a label.
std::string CodeLabel(absl::StatusCode code) {
  std::string s = absl::StatusCodeToString(code);
  for (char& c : s) {
    c = (c == ' ') ? '_' : static_cast<char>(std::tolower(c));
  }
  return s;
}

}  // namespace

void InstrumentedTransport::Call(const runtime::BranchCall& call,
                                 int64_t timeout_ms, runtime::BranchDone done) {
  const int64_t start = clock_.MonotonicMs();
  std::string phase = Label(wal::PhaseName(call.phase));
  const uint32_t attempt = call.attempt;
  std::string gid = call.gid;
  std::string branch = call.spec->branch_id;
  if (attempt > 1) metrics_.Retry(phase);
  inner_.Call(
      call, timeout_ms,
      [this, start, phase = std::move(phase), attempt, gid = std::move(gid),
       branch = std::move(branch),
       done = std::move(done)](absl::StatusOr<runtime::BranchAnswer> answer) {
        const int64_t elapsed = clock_.MonotonicMs() - start;
        const double seconds = static_cast<double>(elapsed) / 1000.0;
        if (answer.ok()) {
          const std::string outcome = Label(wal::OutcomeName(answer->outcome));
          metrics_.BranchCall(phase, outcome, answer->replayed, seconds);
          // Debug: a recovery re-sends every Try it resolves (attempt 2), and
          // an info line each would be hundreds of thousands of lines; the
          // metrics count retries.
          if (attempt > 1) {
            spdlog::debug(
                "gid={} branch={} {} attempt {} answered {}{} after "
                "{} ms",
                gid, branch, phase, attempt, outcome,
                answer->replayed ? " (replayed)" : "", elapsed);
          }
        } else if (runtime::IsNotSent(answer.status())) {
          // Kept by the transport's send gate (the lease's trust ended while
          // it waited): it never left; one line a call would flood the log
          // when a node with deep queues loses its lease.
          metrics_.BranchCall(phase, "not_sent", false, seconds);
          spdlog::debug("gid={} branch={} {} attempt {} not sent: {}", gid,
                        branch, phase, attempt,
                        std::string(answer.status().message()));
        } else {
          metrics_.BranchCall(phase, CodeLabel(answer.status().code()), false,
                              seconds);
          spdlog::info(
              "gid={} branch={} {} attempt {} outcome unknown after "
              "{} ms: {}",
              gid, branch, phase, attempt, elapsed, answer.status().ToString());
        }
        done(std::move(answer));
      });
}

void InstrumentedTransport::Query(const runtime::QueryCall& query,
                                  int64_t timeout_ms, runtime::QueryDone done) {
  std::string gid = query.gid;
  std::string branch = query.branch_id;
  inner_.Query(
      query, timeout_ms,
      [this, gid = std::move(gid), branch = std::move(branch),
       done = std::move(done)](absl::StatusOr<runtime::QueryAnswer> answer) {
        if (answer.ok()) {
          const std::string state =
              Label(core::BarrierStateName(answer->state));
          metrics_.Lookup(state);
          // Debug: routine in recovery (one per unknown branch); the driver
          // alerts on the answers that are not.
          spdlog::debug("gid={} branch={} lookup: {}{}", gid, branch, state,
                        answer->authoritative ? "" : " (not authoritative)");
        } else if (runtime::IsNotSent(answer.status())) {
          metrics_.Lookup("not_sent");  // the transport's send gate kept it
        } else {
          metrics_.Lookup(CodeLabel(answer.status().code()));
          spdlog::info("gid={} branch={} lookup failed: {}", gid, branch,
                       answer.status().ToString());
        }
        done(std::move(answer));
      });
}

}  // namespace tcc::server
