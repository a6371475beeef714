// Where a Coordinator call for a gid is served (DESIGN.md section 14,
// "Routing"): here, at the node that owns the gid's shard (one hop over an
// internal channel), or nowhere yet (UNAVAILABLE while the shard has no
// owner, which clients retry with the same gid and created_at). The
// Coordinator service asks before it hands a call to its backend; a call
// that was forwarded once (it carries kForwardedHeader) is never forwarded
// again: a node that does not own its shard any more answers UNAVAILABLE.
//
// The Admin API's calls for one gid (Show, RetryNow, approvals, forced
// decisions) are routed the same way, with the caller's `authorization`
// metadata (its bearer token) passed along: every node must accept the same
// admin credentials, and serve the Admin API on its advertised address.
//
// A local tccd has no router: everything is served here.
//
// Thread-safety: implementations are called from any gRPC thread.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "tcc/v1/admin.grpc.pb.h"
#include "tcc/v1/coordinator.grpc.pb.h"

namespace tcc::rpc {

// Metadata a forwarding node puts on the call it forwards.
inline constexpr char kForwardedHeader[] = "x-tccd-forwarded";
// Metadata on an Admin Show sent to a finished transaction's archive node:
// answer from the local archive (the timeline and approvals), no routing.
inline constexpr char kArchiveHeader[] = "x-tccd-archive";

class CallRouter {
 public:
  struct Route {
    enum class Kind { kLocal, kForward, kRefuse };
    Kind kind = Kind::kLocal;
    // kForward: the owner's services (its advertised address).
    tcc::v1::Coordinator::Stub* stub = nullptr;
    tcc::v1::Admin::Stub* admin_stub = nullptr;
    absl::Status refusal;  // kRefuse
  };
  virtual ~CallRouter() = default;
  virtual Route ForGid(std::string_view gid) = 0;
  // The node `node_id` (a finished transaction's archive node, say): its
  // services (kForward), kLocal for this node, kRefuse (UNAVAILABLE) when
  // it is not a live node.
  virtual Route ForNode(std::string_view node_id) = 0;
  // A forwarded call ended with `status` (for metrics).
  virtual void Forwarded(const grpc::Status& /*status*/) {}
};

}  // namespace tcc::rpc
