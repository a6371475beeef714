// The proto <-> domain mappings: a view's decision and its cause, and
// timeline entries (a record's kind and one-line summary).
#include <catch2/catch.hpp>

#include "rpc/admin_mapping.h"
#include "rpc/coordinator_mapping.h"

namespace tcc::rpc {
namespace {

TEST_CASE("a view carries the decision's cause and its reason apart") {
  core::TransactionView view;
  view.gid = "g";
  view.state = wal::TxnState::kCancelling;
  view.decision = wal::Decision::kCancel;
  view.decision_cause = wal::DecisionCause::kDeadline;
  view.decision_reason = "try-deadline passed";
  tcc::v1::TransactionView out;
  ToProto(view, &out);
  CHECK(out.decision() == tcc::v1::DECISION_CANCEL);
  CHECK(out.decision_cause() == tcc::v1::DECISION_CAUSE_DEADLINE);
  CHECK(out.decision_reason() == "try-deadline passed");

  const std::pair<wal::DecisionCause, tcc::v1::DecisionCause> causes[] = {
      {wal::DecisionCause::kNone, tcc::v1::DECISION_CAUSE_UNSPECIFIED},
      {wal::DecisionCause::kRule, tcc::v1::DECISION_CAUSE_RULE},
      {wal::DecisionCause::kDeadline, tcc::v1::DECISION_CAUSE_DEADLINE},
      {wal::DecisionCause::kRollback, tcc::v1::DECISION_CAUSE_ROLLBACK},
      {wal::DecisionCause::kForced, tcc::v1::DECISION_CAUSE_FORCED},
      {wal::DecisionCause::kGate, tcc::v1::DECISION_CAUSE_GATE_APPROVED},
      {wal::DecisionCause::kWitnessed, tcc::v1::DECISION_CAUSE_WITNESSED},
  };
  for (const auto& [domain, wire] : causes) {
    CHECK(ToProto(domain) == wire);
  }
}

TEST_CASE("timeline entries name their record and say what it holds") {
  wal::Decided decided;
  decided.decision = wal::Decision::kConfirm;
  decided.cause = wal::DecisionCause::kWitnessed;
  decided.reason = "branch b0 (CONFIRMED) witnessed Confirm";
  decided.at_ms = 5;
  tcc::v1::RecordView view;
  ToProto(wal::Record(decided), &view);
  CHECK(view.kind() == "Decided");
  CHECK(view.at_ms() == 5);
  CHECK(view.summary() ==
        "Confirm, witnessed: branch b0 (CONFIRMED) witnessed Confirm");

  wal::PhaseUpdate phase;
  phase.branch_id = "b1";
  phase.phase = wal::Phase::kCancel;
  phase.state = wal::PhaseState::kSucceeded;
  phase.outcome = wal::Outcome::kEmptyRollback;
  phase.attempts = 2;
  ToProto(wal::Record(phase), &view);
  CHECK(view.kind() == "PhaseUpdate");
  CHECK(view.branch_id() == "b1");
  CHECK(view.summary() == "Cancel: SUCCEEDED EMPTY_ROLLBACK (attempt 2)");

  wal::Finished finished;
  finished.state = wal::TxnState::kCancelled;
  ToProto(wal::Record(finished), &view);
  CHECK(view.kind() == "Finished");
  CHECK(view.summary() == "CANCELLED");
}

}  // namespace
}  // namespace tcc::rpc
