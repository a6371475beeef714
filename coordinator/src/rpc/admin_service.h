// tcc.v1.Admin over gRPC's callback API (DESIGN.md section 10).
//
// Every call first authenticates the caller (AdminAuth): no or a wrong
// credential is refused before anything is read or changed. Every call,
// refused or not, is reported to `audit` with who made it, what it asked and
// how it ended (the server logs it).
//
// One-time approvals: IssueApproval binds a new approval to the
// transaction's current revision and content hash (and branch), as the
// request states them, so an operator approves what they saw; a mismatch is
// FAILED_PRECONDITION. ForceDecision, ResolveBranch and Approve check the
// approval first for a clear refusal (missing, other action, other gid or
// branch, used, expired: FAILED_PRECONDITION) and hand it to the driver; the
// WAL checks it again atomically and consumes it in the same durable record as
// the action, so of two concurrent uses exactly one wins.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "rpc/admin_auth.h"
#include "rpc/call_router.h"
#include "rpc/coordinator_backend.h"
#include "rpc/coordinator_service.h"
#include "tcc/v1/admin.grpc.pb.h"

namespace tcc::rpc {

// `text` made safe for one audit log line: control characters and
// backslashes escaped (\n, \xNN), cut at `max_bytes` with "...": a caller's
// gid, reason or approval id can then neither forge lines nor flood the log.
std::string AuditText(std::string_view text, size_t max_bytes = 512);

// One admin call, for the audit log.
struct AdminAudit {
  std::string who;     // the admin identity, or "-" when refused
  std::string peer;    // the caller's address
  std::string method;  // e.g. "ForceDecision"
  std::string target;  // e.g. "gid=g1 decision=Cancel approval=apv-..."
  absl::Status status;
};

struct AdminServiceOptions {
  std::string version;
  // Wall-clock now (Unix ms): approvals' issue and expiry times.
  std::function<int64_t()> now_ms;
  // A new, unguessable approval id.
  std::function<std::string()> new_approval_id;
  int64_t approval_ttl_ms = 15 * 60 * 1000;
  int64_t max_approval_ttl_ms = 24LL * 3600 * 1000;
  std::function<void(const AdminAudit&)> audit;
  // Cluster mode: the membership as the answering node reads it, and the
  // drain of a node. Unset: a local tccd (Cluster answers enabled=false,
  // Drain FAILED_PRECONDITION).
  std::function<absl::StatusOr<tcc::v1::ClusterResponse>()> cluster;
  std::function<absl::StatusOr<uint32_t>(const std::string& node_id)> drain;
  // Cluster mode: where a gid's calls are served (call_router.h). Not owned.
  CallRouter* router = nullptr;
};

class AdminService final : public tcc::v1::Admin::CallbackService {
 public:
  // `coordinator` serves List and Watch (same rules and limits). None of the
  // references is owned.
  AdminService(CoordinatorBackend& backend, CoordinatorService& coordinator,
               const AdminAuth& auth, AdminServiceOptions options)
      : backend_(backend),
        coordinator_(coordinator),
        auth_(auth),
        options_(std::move(options)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const tcc::v1::StatusRequest* request,
                                   tcc::v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Show(grpc::CallbackServerContext* ctx,
                                 const tcc::v1::ShowRequest* request,
                                 tcc::v1::ShowResponse* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const tcc::v1::ListRequest* request,
                                 tcc::v1::ListResponse* response) override;
  grpc::ServerWriteReactor<tcc::v1::WatchEvent>* Watch(
      grpc::CallbackServerContext* ctx,
      const tcc::v1::WatchRequest* request) override;
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
  grpc::ServerUnaryReactor* Cluster(
      grpc::CallbackServerContext* ctx, const tcc::v1::ClusterRequest* request,
      tcc::v1::ClusterResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx,
                                  const tcc::v1::DrainRequest* request,
                                  tcc::v1::DrainResponse* response) override;

 private:
  class Call;

  // Cluster mode: a call for `gid` that another node serves is forwarded
  // there (or refused) and finished by `call`: true. False: serve it here.
  template <typename Request, typename Response, typename Send>
  bool Routed(const Call& call, grpc::CallbackServerContext* ctx,
              const std::string& gid, const Request* request,
              Response* response, Send send);

  // Show's timeline and the approvals its records consumed.
  void AddTimeline(const wal::TxnLog& log, tcc::v1::ShowResponse* response);
  // Cluster mode: the timeline of a finished transaction from `node`, whose
  // archive keeps it (or why not, in timeline_missing); finishes `call`.
  void FetchArchived(const Call& call, grpc::CallbackServerContext* ctx,
                     const std::string& gid, const std::string& node,
                     tcc::v1::ShowResponse* response);

  // Checks the approval before it is handed to the driver.
  [[nodiscard]] absl::Status CheckApproval(const std::string& approval_id,
                                           wal::ApprovalAction action,
                                           const std::string& gid,
                                           const std::string& branch_id);

  CoordinatorBackend& backend_;
  CoordinatorService& coordinator_;
  const AdminAuth& auth_;
  AdminServiceOptions options_;
};

}  // namespace tcc::rpc
