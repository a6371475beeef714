#include "rpc/grpc_transport.h"

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

}  // namespace

GrpcTransport::GrpcTransport(ParticipantClient& client,
                             std::function<void(std::function<void()>)> post,
                             bool allow_direct_targets, int max_outstanding)
    : client_(client),
      post_(std::move(post)),
      allow_direct_targets_(allow_direct_targets),
      max_outstanding_(std::max(1, max_outstanding)) {}

void GrpcTransport::Admit(const std::string& participant,
                          std::function<void()> send) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Window& w = windows_[participant];
    if (w.outstanding >= max_outstanding_) {
      w.waiting.push_back(std::move(send));
      return;
    }
    ++w.outstanding;
  }
  send();
}

void GrpcTransport::Release(const std::string& participant) {
  std::function<void()> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Window& w = windows_[participant];
    if (w.waiting.empty()) {
      --w.outstanding;
      return;
    }
    next = std::move(w.waiting.front());  // takes over the slot
    w.waiting.pop_front();
  }
  next();
}

absl::Status GrpcTransport::Reachable(const std::string& participant) {
  if (client_.Has(participant)) return absl::OkStatus();
  if (allow_direct_targets_ && participant.find(':') != std::string::npos) {
    absl::Status s = client_.Add(participant, participant);
    if (s.ok() || s.code() == absl::StatusCode::kAlreadyExists) {
      return absl::OkStatus();
    }
    return s;
  }
  // Unknown names are refused at the API; one reaching here (e.g. a
  // participant removed from the config while its transactions were in
  // flight) stays unknown and is retried until an operator acts.
  return absl::UnavailableError(
      absl::StrCat("participant '", participant, "' is not configured"));
}

void GrpcTransport::Call(const runtime::BranchCall& call, int64_t timeout_ms,
                         runtime::BranchDone done) {
  const wal::BranchSpec& spec = *call.spec;
  if (absl::Status s = Reachable(spec.participant); !s.ok()) {
    post_([done = std::move(done), s] { done(s); });
    return;
  }
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
  const std::string participant = spec.participant;
  const ParticipantOp op = OpOf(call.phase);
  Admit(participant, [this, participant, op, req = std::move(req), timeout_ms,
                      done = std::move(done)]() mutable {
    client_.Call(participant, op, req, timeout_ms,
                 [this, participant, done = std::move(done)](
                     absl::StatusOr<tcc::v1::BranchResponse> reply) {
                   Release(participant);
                   OnBranchReply(std::move(reply), done);
                 });
  });
}

void GrpcTransport::OnBranchReply(absl::StatusOr<tcc::v1::BranchResponse> reply,
                                  const runtime::BranchDone& done) {
  if (!reply.ok()) return done(reply.status());
  auto outcome = OutcomeFromProto(reply->outcome());
  if (!outcome.ok()) return done(outcome.status());
  runtime::BranchAnswer answer;
  answer.outcome = *outcome;
  answer.replayed = reply->replayed();
  answer.message = reply->message();
  done(std::move(answer));
}

void GrpcTransport::Query(const runtime::QueryCall& query, int64_t timeout_ms,
                          runtime::QueryDone done) {
  if (absl::Status s = Reachable(query.participant); !s.ok()) {
    post_([done = std::move(done), s] { done(s); });
    return;
  }
  tcc::v1::QueryRequest req;
  req.mutable_key()->set_gid(query.gid);
  req.mutable_key()->set_created_at_ms(query.created_at_ms);
  req.mutable_key()->set_branch_id(query.branch_id);
  const std::string participant = query.participant;
  Admit(participant, [this, participant, req = std::move(req), timeout_ms,
                      done = std::move(done)]() mutable {
    client_.Query(participant, req, timeout_ms,
                  [this, participant, done = std::move(done)](
                      absl::StatusOr<tcc::v1::QueryResponse> reply) {
                    Release(participant);
                    OnQueryReply(std::move(reply), done);
                  });
  });
}

void GrpcTransport::OnQueryReply(absl::StatusOr<tcc::v1::QueryResponse> reply,
                                 const runtime::QueryDone& done) {
  if (!reply.ok()) return done(reply.status());
  auto state = BarrierFromProto(reply->state());
  if (!state.ok()) return done(state.status());
  runtime::QueryAnswer answer;
  answer.state = *state;
  if (reply->branch_hash().size() == answer.branch_hash.size()) {
    std::copy(reply->branch_hash().begin(), reply->branch_hash().end(),
              answer.branch_hash.begin());
  }
  answer.authoritative = reply->authoritative();
  done(std::move(answer));
}

}  // namespace tcc::rpc
