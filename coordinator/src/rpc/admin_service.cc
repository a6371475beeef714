#include "rpc/admin_service.h"

#include "rpc/coordinator_mapping.h"
#include "rpc/status_mapping.h"
#include "tcc/identity/ids.h"

namespace tcc::rpc {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx,
                                    const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

const absl::Status& NeedsApprovals() {
  static const absl::Status* status = new absl::Status(
      absl::UnimplementedError("needs one-time approvals and admin "
                               "authentication, not in this tccd yet"));
  return *status;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::Status(
    grpc::CallbackServerContext* ctx, const tcc::v1::StatusRequest*,
    tcc::v1::StatusResponse* response) {
  CoordinatorBackend::Health h = backend_.Status();
  response->set_health(h.health);
  response->set_version(version_);
  response->set_wal_bytes(h.wal_bytes);
  response->set_dedup_horizon_ms(h.dedup_horizon_ms);
  for (const auto& [state, count] : h.in_flight) {
    auto* c = response->add_in_flight();
    c->set_state(ToProto(state));
    c->set_count(count);
  }
  response->set_oldest_unfinished_age_ms(h.oldest_unfinished_age_ms);
  response->set_stuck_branches(h.stuck_branches);
  response->set_recovery_total(h.recovery_total);
  response->set_recovery_done(h.recovery_done);
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::RetryNow(
    grpc::CallbackServerContext* ctx, const tcc::v1::RetryNowRequest* request,
    tcc::v1::RetryNowResponse* response) {
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return FinishNow(ctx, s);
  }
  if (!request->branch_id().empty()) {
    if (absl::Status s = identity::ValidateBranchId(request->branch_id());
        !s.ok()) {
      return FinishNow(ctx, s);
    }
  }
  auto* reactor = ctx->DefaultReactor();
  backend_.RetryNow(request->gid(), request->branch_id(),
                    [reactor, response](TxnAnswer a) {
                      if (a.status.ok()) {
                        ToProto(a.view, response->mutable_transaction());
                      }
                      reactor->Finish(ToGrpc(a.status));
                    });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::IssueApproval(
    grpc::CallbackServerContext* ctx, const tcc::v1::IssueApprovalRequest*,
    tcc::v1::IssueApprovalResponse*) {
  return FinishNow(ctx, NeedsApprovals());
}

grpc::ServerUnaryReactor* AdminService::ForceDecision(
    grpc::CallbackServerContext* ctx, const tcc::v1::ForceDecisionRequest*,
    tcc::v1::ForceDecisionResponse*) {
  return FinishNow(ctx, NeedsApprovals());
}

grpc::ServerUnaryReactor* AdminService::ResolveBranch(
    grpc::CallbackServerContext* ctx, const tcc::v1::ResolveBranchRequest*,
    tcc::v1::ResolveBranchResponse*) {
  return FinishNow(ctx, NeedsApprovals());
}

grpc::ServerUnaryReactor* AdminService::Approve(
    grpc::CallbackServerContext* ctx, const tcc::v1::ApproveRequest*,
    tcc::v1::ApproveResponse*) {
  return FinishNow(ctx, NeedsApprovals());
}

}  // namespace tcc::rpc
