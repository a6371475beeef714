#include "rpc/admin_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/transaction.h"
#include "rpc/admin_mapping.h"
#include "rpc/coordinator_mapping.h"
#include "rpc/status_mapping.h"
#include "tcc/identity/content_hash.h"
#include "tcc/identity/ids.h"

namespace tcc::rpc {
namespace {

constexpr size_t kMaxReasonBytes = 1024;

// The context of an admin call sent on to another node: the caller's
// deadline, `header` (why it is sent there), and the caller's credential,
// which that node checks again.
std::shared_ptr<grpc::ClientContext> PeerContext(
    const grpc::CallbackServerContext& ctx, const char* header) {
  auto client = std::make_shared<grpc::ClientContext>();
  client->set_deadline(ctx.deadline());
  client->AddMetadata(header, "1");
  const auto& meta = ctx.client_metadata();
  if (auto auth = meta.find("authorization"); auth != meta.end()) {
    client->AddMetadata("authorization",
                        std::string(auth->second.data(), auth->second.size()));
  }
  return client;
}

}  // namespace

std::string AuditText(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 3);
  for (char ch : text) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += ch;
    }
  }
  return out;
}

// One admin call: authenticates it, and finishes it exactly once with an
// audit entry. Copyable, so callbacks carry it.
class AdminService::Call {
 public:
  Call(AdminService& service, grpc::CallbackServerContext* ctx,
       const char* method, std::string target)
      : reactor_(ctx->DefaultReactor()), audit_(service.options_.audit) {
    entry_.method = method;
    entry_.target = std::move(target);
    entry_.peer = service.auth_.AuditPeer(*ctx);
    absl::StatusOr<std::string> who = service.auth_.Authenticate(*ctx);
    if (who.ok()) {
      entry_.who = *who;
    } else {
      entry_.who = "-";
      refused_ = who.status();
    }
  }

  // The refusal when the caller is not an admin (then call Finish with it).
  const absl::Status& refused() const { return refused_; }
  const std::string& who() const { return entry_.who; }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  grpc::ServerUnaryReactor* Finish(const absl::Status& status) const {
    AdminAudit entry = entry_;
    entry.status = status;
    if (audit_) audit_(entry);
    reactor_->Finish(ToGrpc(status));
    return reactor_;
  }

 private:
  grpc::ServerUnaryReactor* reactor_;
  std::function<void(const AdminAudit&)> audit_;
  AdminAudit entry_;
  absl::Status refused_;
};

#define TCC_AUTHENTICATE(call) \
  if (!(call).refused().ok()) return (call).Finish((call).refused())

grpc::ServerUnaryReactor* AdminService::Status(
    grpc::CallbackServerContext* ctx, const tcc::v1::StatusRequest*,
    tcc::v1::StatusResponse* response) {
  Call call(*this, ctx, "Status", "");
  TCC_AUTHENTICATE(call);
  CoordinatorBackend::Health h = backend_.Status();
  response->set_health(h.health);
  response->set_version(options_.version);
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
  response->set_recovery_error(h.recovery_error);
  return call.Finish(absl::OkStatus());
}

template <typename Request, typename Response, typename Send>
bool AdminService::Routed(const Call& call, grpc::CallbackServerContext* ctx,
                          const std::string& gid, const Request* request,
                          Response* response, Send send) {
  CallRouter* router = options_.router;
  if (router == nullptr || !identity::ValidateGid(gid).ok()) return false;
  const CallRouter::Route route = router->ForGid(gid);
  if (route.kind == CallRouter::Route::Kind::kLocal) return false;
  if (route.kind == CallRouter::Route::Kind::kRefuse) {
    call.Finish(route.refusal);
    return true;
  }
  const auto& meta = ctx->client_metadata();
  if (meta.find(kForwardedHeader) != meta.end()) {
    call.Finish(absl::UnavailableError(
        absl::StrCat("gid ", gid,
                     ": forwarded to a node that no longer owns its shard "
                     "(it moved); retry")));
    return true;
  }
  auto client = PeerContext(*ctx, kForwardedHeader);
  send(route.admin_stub, client.get(), request, response,
       [call, client, router](grpc::Status status) {
         router->Forwarded(status);
         call.Finish(FromGrpc(status));
       });
  return true;
}

// The lambda that sends one Admin method to a peer.
#define TCC_ADMIN_SEND(Method, Req, Resp)                \
  [](tcc::v1::Admin::Stub* stub, grpc::ClientContext* c, \
     const tcc::v1::Req* q, tcc::v1::Resp* r,            \
     std::function<void(grpc::Status)> f) {              \
    stub->async()->Method(c, q, r, std::move(f));        \
  }

grpc::ServerUnaryReactor* AdminService::Cluster(
    grpc::CallbackServerContext* ctx, const tcc::v1::ClusterRequest*,
    tcc::v1::ClusterResponse* response) {
  Call call(*this, ctx, "Cluster", "");
  TCC_AUTHENTICATE(call);
  if (!options_.cluster) {
    response->set_enabled(false);
    return call.Finish(absl::OkStatus());
  }
  absl::StatusOr<tcc::v1::ClusterResponse> c = options_.cluster();
  if (!c.ok()) return call.Finish(c.status());
  *response = *std::move(c);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::Drain(
    grpc::CallbackServerContext* ctx, const tcc::v1::DrainRequest* request,
    tcc::v1::DrainResponse* response) {
  Call call(*this, ctx, "Drain", absl::StrCat("node=", request->node_id()));
  TCC_AUTHENTICATE(call);
  if (!options_.drain) {
    return call.Finish(absl::FailedPreconditionError(
        "not a cluster: a local tccd has no nodes to drain"));
  }
  if (absl::Status s = identity::ValidateGid(request->node_id()); !s.ok()) {
    return call.Finish(
        absl::InvalidArgumentError(absl::StrCat("node_id: ", s.message())));
  }
  absl::StatusOr<uint32_t> owned = options_.drain(request->node_id());
  if (!owned.ok()) return call.Finish(owned.status());
  response->set_shards_owned(*owned);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::Show(
    grpc::CallbackServerContext* ctx, const tcc::v1::ShowRequest* request,
    tcc::v1::ShowResponse* response) {
  Call call(*this, ctx, "Show", absl::StrCat("gid=", request->gid()));
  TCC_AUTHENTICATE(call);
  const auto& meta = ctx->client_metadata();
  const bool for_archive =
      options_.router != nullptr && meta.find(kArchiveHeader) != meta.end();
  if (!for_archive && Routed(call, ctx, request->gid(), request, response,
                             TCC_ADMIN_SEND(Show, ShowRequest, ShowResponse))) {
    return call.reactor();
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  if (for_archive) {
    // Another node's Show of a transaction this node finished: the records
    // its archive keeps (the other node has the rest).
    absl::StatusOr<wal::TxnLog> log = backend_.ReadLog(request->gid());
    if (!log.ok()) return call.Finish(log.status());
    AddTimeline(*log, response);
    return call.Finish(absl::OkStatus());
  }
  backend_.Get(request->gid(), [this, call, ctx, response,
                                gid = request->gid()](TxnAnswer a) {
    if (!a.status.ok()) {
      call.Finish(a.status);
      return;
    }
    ToProto(a.view, response->mutable_transaction());
    absl::StatusOr<wal::TxnLog> log = backend_.ReadLog(gid);
    if (log.ok()) {
      AddTimeline(*log, response);
      response->set_archive_node(log->summary.archive_node);
      if (log->summary.compacted && !log->summary.archive_node.empty() &&
          options_.router != nullptr) {
        FetchArchived(call, ctx, gid, log->summary.archive_node, response);
        return;
      }
    } else if (log.status().code() != absl::StatusCode::kNotFound) {
      call.Finish(log.status());
      return;
    }
    call.Finish(absl::OkStatus());
  });
  return call.reactor();
}

void AdminService::AddTimeline(const wal::TxnLog& log,
                               tcc::v1::ShowResponse* response) {
  for (const wal::Record& r : log.records) {
    ToProto(r, response->add_timeline());
    const std::string& id = response->timeline().rbegin()->approval_id();
    if (id.empty()) continue;
    absl::StatusOr<wal::Approval> approval = backend_.ReadApproval(id);
    if (approval.ok()) ToProto(*approval, response->add_approvals());
  }
}

void AdminService::FetchArchived(const Call& call,
                                 grpc::CallbackServerContext* ctx,
                                 const std::string& gid,
                                 const std::string& node,
                                 tcc::v1::ShowResponse* response) {
  CallRouter* router = options_.router;
  const CallRouter::Route route = router->ForNode(node);
  if (route.kind == CallRouter::Route::Kind::kLocal) {
    // This node's own archive had nothing: retention compacted it.
    call.Finish(absl::OkStatus());
    return;
  }
  if (route.kind == CallRouter::Route::Kind::kRefuse) {
    response->set_timeline_missing(absl::StrCat(
        "its full record was kept by node ", node,
        ", which is not live (its archive went with it): only the compact "
        "entry is left"));
    call.Finish(absl::OkStatus());
    return;
  }
  auto client = PeerContext(*ctx, kArchiveHeader);
  auto request = std::make_shared<tcc::v1::ShowRequest>();
  request->set_gid(gid);
  auto archived = std::make_shared<tcc::v1::ShowResponse>();
  route.admin_stub->async()->Show(
      client.get(), request.get(), archived.get(),
      [call, client, request, archived, router, node,
       response](grpc::Status status) {
        router->Forwarded(status);
        if (status.ok()) {
          *response->mutable_timeline() = archived->timeline();
          *response->mutable_approvals() = archived->approvals();
        } else {
          response->set_timeline_missing(
              absl::StrCat("its full record is kept by node ", node,
                           ", which did not answer: ", status.error_message()));
        }
        call.Finish(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* AdminService::List(
    grpc::CallbackServerContext* ctx, const tcc::v1::ListRequest* request,
    tcc::v1::ListResponse* response) {
  AdminAudit entry;
  entry.peer = auth_.AuditPeer(*ctx);
  entry.method = "List";
  absl::StatusOr<std::string> who = auth_.Authenticate(*ctx);
  entry.who = who.ok() ? *who : "-";
  entry.status = who.status();
  if (options_.audit) options_.audit(entry);
  if (!who.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(who.status()));
    return reactor;
  }
  return coordinator_.List(ctx, request, response);
}

grpc::ServerWriteReactor<tcc::v1::WatchEvent>* AdminService::Watch(
    grpc::CallbackServerContext* ctx, const tcc::v1::WatchRequest* request) {
  AdminAudit entry;
  entry.peer = auth_.AuditPeer(*ctx);
  entry.method = "Watch";
  entry.target = absl::StrCat("gid=", request->gid());
  absl::StatusOr<std::string> who = auth_.Authenticate(*ctx);
  entry.who = who.ok() ? *who : "-";
  entry.status = who.status();
  if (options_.audit) options_.audit(entry);
  if (!who.ok()) return RefuseWatch(who.status());
  return coordinator_.AdminWatch(*request);
}

grpc::ServerUnaryReactor* AdminService::RetryNow(
    grpc::CallbackServerContext* ctx, const tcc::v1::RetryNowRequest* request,
    tcc::v1::RetryNowResponse* response) {
  Call call(
      *this, ctx, "RetryNow",
      absl::StrCat("gid=", request->gid(), " branch=", request->branch_id()));
  TCC_AUTHENTICATE(call);
  if (Routed(call, ctx, request->gid(), request, response,
             TCC_ADMIN_SEND(RetryNow, RetryNowRequest, RetryNowResponse))) {
    return call.reactor();
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  if (!request->branch_id().empty()) {
    if (absl::Status s = identity::ValidateBranchId(request->branch_id());
        !s.ok()) {
      return call.Finish(s);
    }
  }
  backend_.RetryNow(request->gid(), request->branch_id(),
                    [call, response](TxnAnswer a) {
                      if (a.status.ok()) {
                        ToProto(a.view, response->mutable_transaction());
                      }
                      call.Finish(a.status);
                    });
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::IssueApproval(
    grpc::CallbackServerContext* ctx,
    const tcc::v1::IssueApprovalRequest* request,
    tcc::v1::IssueApprovalResponse* response) {
  Call call(
      *this, ctx, "IssueApproval",
      absl::StrCat("action=", tcc::v1::ApprovalAction_Name(request->action()),
                   " gid=", request->gid(), " revision=", request->revision(),
                   " branch=", request->branch_id(),
                   " reason=", request->reason()));
  TCC_AUTHENTICATE(call);
  if (Routed(call, ctx, request->gid(), request, response,
             TCC_ADMIN_SEND(IssueApproval, IssueApprovalRequest,
                            IssueApprovalResponse))) {
    return call.reactor();
  }
  wal::Approval a;
  if (!FromProto(request->action(), &a.action)) {
    return call.Finish(absl::InvalidArgumentError(
        "action is required: FORCE_CONFIRM, FORCE_CANCEL, RESOLVE_BRANCH or "
        "GATE_APPROVE"));
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  if (a.action == wal::ApprovalAction::kResolveBranch) {
    if (absl::Status s = identity::ValidateBranchId(request->branch_id());
        !s.ok()) {
      return call.Finish(absl::InvalidArgumentError(absl::StrCat(
          "RESOLVE_BRANCH needs branch_id: ", std::string(s.message()))));
    }
  } else if (!request->branch_id().empty()) {
    return call.Finish(absl::InvalidArgumentError(
        "branch_id is only for RESOLVE_BRANCH approvals"));
  }
  if (!request->content_hash().empty() &&
      request->content_hash().size() != a.content_hash.size()) {
    return call.Finish(absl::InvalidArgumentError(
        "content_hash must be 32 bytes (SHA-256), or empty for a "
        "transaction still OPEN"));
  }
  if (request->reason().empty() || request->reason().size() > kMaxReasonBytes) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("reason is required (at most ", kMaxReasonBytes,
                     " bytes): it is kept in the audit trail")));
  }
  const int64_t ttl =
      request->ttl_ms() == 0 ? options_.approval_ttl_ms : request->ttl_ms();
  if (ttl > options_.max_approval_ttl_ms) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("ttl_ms ", ttl, " is over admin.max_approval_ttl_ms (",
                     options_.max_approval_ttl_ms, ")")));
  }
  a.gid = request->gid();
  a.revision = request->revision();
  if (!request->content_hash().empty()) {
    std::copy(request->content_hash().begin(), request->content_hash().end(),
              a.content_hash.begin());
  }
  a.branch_id = request->branch_id();
  a.reason = request->reason();
  a.issued_by = call.who();
  a.issued_at_ms = options_.now_ms();
  a.expires_at_ms = a.issued_at_ms + ttl;
  a.approval_id = options_.new_approval_id();
  // Bind to what the operator saw: the transaction must still be at that
  // revision and content hash (and have that branch).
  std::string gid = a.gid;
  backend_.Get(std::move(gid), [this, call, response,
                                a = std::move(a)](TxnAnswer t) mutable {
    if (!t.status.ok()) {
      call.Finish(t.status);
      return;
    }
    const identity::Hash current =
        t.view.content_hash ? *t.view.content_hash : identity::Hash{};
    if (t.view.revision != a.revision || current != a.content_hash) {
      call.Finish(absl::FailedPreconditionError(absl::StrCat(
          "gid ", a.gid, " is at revision ", t.view.revision, " content hash ",
          identity::ToHex(current), "; the approval names revision ",
          a.revision, " content hash ", identity::ToHex(a.content_hash),
          ": look at the transaction again (tccctl show)")));
      return;
    }
    if (wal::IsFinal(t.view.state)) {
      call.Finish(absl::FailedPreconditionError(absl::StrCat(
          "gid ", a.gid, " is already ", core::TxnStateName(t.view.state))));
      return;
    }
    // An OPEN transaction has no content hash yet; Commit fixes one, so an
    // approval bound to it now could never be used for what follows Commit.
    if (t.view.state == wal::TxnState::kOpen &&
        a.action != wal::ApprovalAction::kForceCancel) {
      call.Finish(absl::FailedPreconditionError(absl::StrCat(
          "gid ", a.gid,
          " is OPEN (not committed): only FORCE_CANCEL can be approved now")));
      return;
    }
    if (a.action == wal::ApprovalAction::kResolveBranch) {
      bool found = false;
      for (const auto& b : t.view.branches) found |= b.branch_id == a.branch_id;
      if (!found) {
        call.Finish(absl::NotFoundError(
            absl::StrCat("gid ", a.gid, " has no branch ", a.branch_id)));
        return;
      }
    }
    tcc::v1::Approval proto;
    ToProto(a, &proto);
    backend_.IssueApproval(std::move(a),
                           [call, response, proto](absl::Status s) mutable {
                             if (s.ok())
                               *response->mutable_approval() = std::move(proto);
                             call.Finish(s);
                           });
  });
  return call.reactor();
}

absl::Status AdminService::CheckApproval(const std::string& approval_id,
                                         wal::ApprovalAction action,
                                         const std::string& gid,
                                         const std::string& branch_id) {
  if (approval_id.empty()) {
    return absl::InvalidArgumentError(
        "approval_id is required (tccctl issue-approval)");
  }
  absl::StatusOr<wal::Approval> a = backend_.ReadApproval(approval_id);
  if (a.status().code() == absl::StatusCode::kNotFound) {
    return absl::FailedPreconditionError(
        absl::StrCat("no approval ", approval_id));
  }
  if (!a.ok()) return a.status();
  if (a->action != action) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", approval_id, " allows ",
                     tcc::v1::ApprovalAction_Name(ToProto(a->action)), ", not ",
                     tcc::v1::ApprovalAction_Name(ToProto(action))));
  }
  if (a->gid != gid || a->branch_id != branch_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("approval ", approval_id, " is for gid ", a->gid,
                     a->branch_id.empty() ? "" : " branch ", a->branch_id));
  }
  if (a->used_at_ms != 0) {
    return absl::FailedPreconditionError(absl::StrCat("approval ", approval_id,
                                                      " was already used (at ",
                                                      a->used_at_ms, ")"));
  }
  if (options_.now_ms() >= a->expires_at_ms) {
    return absl::FailedPreconditionError(absl::StrCat(
        "approval ", approval_id, " expired at ", a->expires_at_ms));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminService::ForceDecision(
    grpc::CallbackServerContext* ctx,
    const tcc::v1::ForceDecisionRequest* request,
    tcc::v1::ForceDecisionResponse* response) {
  Call call(*this, ctx, "ForceDecision",
            absl::StrCat("gid=", request->gid(), " decision=",
                         tcc::v1::Decision_Name(request->decision()),
                         " approval=", request->approval_id()));
  TCC_AUTHENTICATE(call);
  if (Routed(call, ctx, request->gid(), request, response,
             TCC_ADMIN_SEND(ForceDecision, ForceDecisionRequest,
                            ForceDecisionResponse))) {
    return call.reactor();
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  wal::Decision decision;
  wal::ApprovalAction action;
  if (request->decision() == tcc::v1::DECISION_CONFIRM) {
    decision = wal::Decision::kConfirm;
    action = wal::ApprovalAction::kForceConfirm;
  } else if (request->decision() == tcc::v1::DECISION_CANCEL) {
    decision = wal::Decision::kCancel;
    action = wal::ApprovalAction::kForceCancel;
  } else {
    return call.Finish(absl::InvalidArgumentError(
        "decision must be DECISION_CONFIRM or DECISION_CANCEL"));
  }
  if (absl::Status s =
          CheckApproval(request->approval_id(), action, request->gid(), "");
      !s.ok()) {
    return call.Finish(s);
  }
  backend_.ForceDecision(request->gid(), decision, request->approval_id(),
                         [call, response](TxnAnswer a) {
                           if (a.status.ok()) {
                             ToProto(a.view, response->mutable_transaction());
                           }
                           call.Finish(a.status);
                         });
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::ResolveBranch(
    grpc::CallbackServerContext* ctx,
    const tcc::v1::ResolveBranchRequest* request,
    tcc::v1::ResolveBranchResponse* response) {
  Call call(
      *this, ctx, "ResolveBranch",
      absl::StrCat("gid=", request->gid(), " branch=", request->branch_id(),
                   " approval=", request->approval_id()));
  TCC_AUTHENTICATE(call);
  if (Routed(call, ctx, request->gid(), request, response,
             TCC_ADMIN_SEND(ResolveBranch, ResolveBranchRequest,
                            ResolveBranchResponse))) {
    return call.reactor();
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  if (absl::Status s = identity::ValidateBranchId(request->branch_id());
      !s.ok()) {
    return call.Finish(s);
  }
  if (absl::Status s = CheckApproval(request->approval_id(),
                                     wal::ApprovalAction::kResolveBranch,
                                     request->gid(), request->branch_id());
      !s.ok()) {
    return call.Finish(s);
  }
  backend_.ResolveBranch(request->gid(), request->branch_id(),
                         request->approval_id(), [call, response](TxnAnswer a) {
                           if (a.status.ok()) {
                             ToProto(a.view, response->mutable_transaction());
                           }
                           call.Finish(a.status);
                         });
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::Approve(
    grpc::CallbackServerContext* ctx, const tcc::v1::ApproveRequest* request,
    tcc::v1::ApproveResponse* response) {
  Call call(*this, ctx, "Approve",
            absl::StrCat("gid=", request->gid(),
                         " approval=", request->approval_id()));
  TCC_AUTHENTICATE(call);
  if (Routed(call, ctx, request->gid(), request, response,
             TCC_ADMIN_SEND(Approve, ApproveRequest, ApproveResponse))) {
    return call.reactor();
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return call.Finish(s);
  }
  if (absl::Status s =
          CheckApproval(request->approval_id(),
                        wal::ApprovalAction::kGateApprove, request->gid(), "");
      !s.ok()) {
    return call.Finish(s);
  }
  backend_.Approve(request->gid(), request->approval_id(),
                   [call, response](TxnAnswer a) {
                     if (a.status.ok()) {
                       ToProto(a.view, response->mutable_transaction());
                     }
                     call.Finish(a.status);
                   });
  return call.reactor();
}

#undef TCC_AUTHENTICATE

}  // namespace tcc::rpc
