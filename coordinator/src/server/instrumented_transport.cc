#include "server/instrumented_transport.h"

#include <spdlog/spdlog.h>

#include <string>

namespace tcc::server {
namespace {

const char* PhaseLabel(wal::Phase phase) {
  switch (phase) {
    case wal::Phase::kTry:
      return "try";
    case wal::Phase::kConfirm:
      return "confirm";
    case wal::Phase::kCancel:
      return "cancel";
  }
  return "unknown";
}

const char* OutcomeLabel(wal::Outcome outcome) {
  switch (outcome) {
    case wal::Outcome::kExecuted:
      return "executed";
    case wal::Outcome::kEmptyRollback:
      return "empty_rollback";
    case wal::Outcome::kRejected:
      return "rejected";
    case wal::Outcome::kHangingRefused:
      return "hanging_refused";
    case wal::Outcome::kConflict:
      return "conflict";
    case wal::Outcome::kNone:
      break;
  }
  return "none";
}

const char* BarrierLabel(core::BarrierState s) {
  switch (s) {
    case core::BarrierState::kNotFound:
      return "not_found";
    case core::BarrierState::kTried:
      return "tried";
    case core::BarrierState::kTryRejected:
      return "try_rejected";
    case core::BarrierState::kCancelledBeforeTry:
      return "cancelled_before_try";
    case core::BarrierState::kConfirmed:
      return "confirmed";
    case core::BarrierState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

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
  const char* phase = PhaseLabel(call.phase);
  const uint32_t attempt = call.attempt;
  std::string gid = call.gid;
  std::string branch = call.spec->branch_id;
  if (attempt > 1) metrics_.Retry(phase);
  inner_.Call(
      call, timeout_ms,
      [this, start, phase, attempt, gid = std::move(gid),
       branch = std::move(branch),
       done = std::move(done)](absl::StatusOr<runtime::BranchAnswer> answer) {
        const int64_t elapsed = clock_.MonotonicMs() - start;
        const double seconds = static_cast<double>(elapsed) / 1000.0;
        if (answer.ok()) {
          metrics_.BranchCall(phase, OutcomeLabel(answer->outcome),
                              answer->replayed, seconds);
          // Debug: a recovery re-sends every Try it resolves (attempt 2), and
          // an info line each would be hundreds of thousands of lines; the
          // metrics count retries.
          if (attempt > 1) {
            spdlog::debug(
                "gid={} branch={} {} attempt {} answered {}{} after "
                "{} ms",
                gid, branch, phase, attempt, OutcomeLabel(answer->outcome),
                answer->replayed ? " (replayed)" : "", elapsed);
          }
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
          metrics_.Lookup(BarrierLabel(answer->state));
          // Debug: routine in recovery (one per unknown branch); the driver
          // alerts on the answers that are not.
          spdlog::debug("gid={} branch={} lookup: {}{}", gid, branch,
                        BarrierLabel(answer->state),
                        answer->authoritative ? "" : " (not authoritative)");
        } else {
          metrics_.Lookup(CodeLabel(answer.status().code()));
          spdlog::info("gid={} branch={} lookup failed: {}", gid, branch,
                       answer.status().ToString());
        }
        done(std::move(answer));
      });
}

}  // namespace tcc::server
