// tcc.v1.Admin over gRPC's callback API. For now: Status and RetryNow. Forcing
// decisions, resolving branches, approvals and the approval gate need one-time
// approvals and admin authentication (issue 9) and answer UNIMPLEMENTED until
// then.
//
// Thread-safe.
#pragma once

#include <string>

#include "rpc/coordinator_backend.h"
#include "tcc/v1/admin.grpc.pb.h"

namespace tcc::rpc {

class AdminService final : public tcc::v1::Admin::CallbackService {
 public:
  AdminService(CoordinatorBackend& backend, std::string version)
      : backend_(backend), version_(std::move(version)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const tcc::v1::StatusRequest* request,
                                   tcc::v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* RetryNow(
      grpc::CallbackServerContext* ctx, const tcc::v1::RetryNowRequest* request,
      tcc::v1::RetryNowResponse* response) override;
  grpc::ServerUnaryReactor* IssueApproval(
      grpc::CallbackServerContext* ctx,
      const tcc::v1::IssueApprovalRequest* request,
      tcc::v1::IssueApprovalResponse* response) override;
  grpc::ServerUnaryReactor* ForceDecision(
      grpc::CallbackServerContext* ctx,
      const tcc::v1::ForceDecisionRequest* request,
      tcc::v1::ForceDecisionResponse* response) override;
  grpc::ServerUnaryReactor* ResolveBranch(
      grpc::CallbackServerContext* ctx,
      const tcc::v1::ResolveBranchRequest* request,
      tcc::v1::ResolveBranchResponse* response) override;
  grpc::ServerUnaryReactor* Approve(
      grpc::CallbackServerContext* ctx, const tcc::v1::ApproveRequest* request,
      tcc::v1::ApproveResponse* response) override;

 private:
  CoordinatorBackend& backend_;
  std::string version_;
};

}  // namespace tcc::rpc
