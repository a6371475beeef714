#include "rpc/participant_mapping.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tcc/identity/content_hash.h"

namespace tcc::rpc {
namespace {

absl::StatusOr<wal::Outcome> OutcomeFromProto(tcc::v1::Outcome o) {
  switch (o) {
    case tcc::v1::OUTCOME_EXECUTED:
      return wal::Outcome::kExecuted;
    case tcc::v1::OUTCOME_EMPTY_ROLLBACK:
      return wal::Outcome::kEmptyRollback;
    case tcc::v1::OUTCOME_REJECTED:
      return wal::Outcome::kRejected;
    case tcc::v1::OUTCOME_HANGING_REFUSED:
      return wal::Outcome::kHangingRefused;
    case tcc::v1::OUTCOME_CONFLICT:
      return wal::Outcome::kConflict;
    default:
      return absl::UnknownError(
          absl::StrCat("participant answered without an outcome (", o, ")"));
  }
}

absl::StatusOr<core::BarrierState> BarrierFromProto(tcc::v1::BarrierState s) {
  switch (s) {
    case tcc::v1::BARRIER_STATE_NOT_FOUND:
      return core::BarrierState::kNotFound;
    case tcc::v1::BARRIER_STATE_TRIED:
      return core::BarrierState::kTried;
    case tcc::v1::BARRIER_STATE_TRY_REJECTED:
      return core::BarrierState::kTryRejected;
    case tcc::v1::BARRIER_STATE_CANCELLED_BEFORE_TRY:
      return core::BarrierState::kCancelledBeforeTry;
    case tcc::v1::BARRIER_STATE_CONFIRMED:
      return core::BarrierState::kConfirmed;
    case tcc::v1::BARRIER_STATE_CANCELLED:
      return core::BarrierState::kCancelled;
    default:
      return absl::UnknownError(
          absl::StrCat("participant answered Query without a state (", s, ")"));
  }
}

}  // namespace

ParticipantOp OpOf(wal::Phase phase) {
  switch (phase) {
    case wal::Phase::kTry:
      return ParticipantOp::kTry;
    case wal::Phase::kConfirm:
      return ParticipantOp::kConfirm;
    case wal::Phase::kCancel:
      return ParticipantOp::kCancel;
  }
  return ParticipantOp::kTry;
}

tcc::v1::BranchRequest BranchRequestOf(const runtime::BranchCall& call) {
  const wal::BranchSpec& spec = *call.spec;
  tcc::v1::BranchRequest req;
  req.mutable_key()->set_gid(call.gid);
  req.mutable_key()->set_created_at_ms(call.created_at_ms);
  req.mutable_key()->set_branch_id(spec.branch_id);
  req.set_action(spec.action);
  req.set_payload(spec.payload);
  req.set_branch_hash(identity::ToBytes(spec.branch_hash));
  req.set_revision(call.revision);
  req.set_attempt(call.attempt);
  req.set_owner_epoch(call.owner_epoch);
  req.set_try_deadline_ms(call.try_deadline_ms);
  return req;
}

tcc::v1::QueryRequest QueryRequestOf(const runtime::QueryCall& query) {
  tcc::v1::QueryRequest req;
  req.mutable_key()->set_gid(query.gid);
  req.mutable_key()->set_created_at_ms(query.created_at_ms);
  req.mutable_key()->set_branch_id(query.branch_id);
  return req;
}

absl::StatusOr<runtime::BranchAnswer> BranchAnswerOf(
    tcc::v1::BranchResponse reply) {
  auto outcome = OutcomeFromProto(reply.outcome());
  if (!outcome.ok()) return outcome.status();
  runtime::BranchAnswer answer;
  answer.outcome = *outcome;
  answer.replayed = reply.replayed();
  answer.message = std::move(*reply.mutable_message());
  return answer;
}

absl::StatusOr<runtime::QueryAnswer> QueryAnswerOf(
    const tcc::v1::QueryResponse& reply) {
  auto state = BarrierFromProto(reply.state());
  if (!state.ok()) return state.status();
  runtime::QueryAnswer answer;
  answer.state = *state;
  if (reply.branch_hash().size() == answer.branch_hash.size()) {
    std::copy(reply.branch_hash().begin(), reply.branch_hash().end(),
              answer.branch_hash.begin());
  }
  answer.authoritative = reply.authoritative();
  return answer;
}

}  // namespace tcc::rpc
