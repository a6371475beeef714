// The cluster's CallRouter (rpc/call_router.h; DESIGN.md section 14,
// "Routing"): a gid whose shard this node drives is served here; one whose
// shard another node owns (as the shard manager last read it) is forwarded
// to that node's advertised address over a channel kept per node; one whose
// shard has no owner now is UNAVAILABLE (retry: a takeover or a hand-over
// is under way).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/security/credentials.h"
#include "rpc/call_router.h"
#include "tcc/wal/etcd_membership.h"

namespace tcc::cluster {

struct ForwardingRouterOptions {
  std::string node_id;
  uint32_t shards = 0;
  // Whether this node's driver drives the shard now.
  std::function<bool(uint32_t)> drives;
  // The membership as last read (may be null before the first read).
  std::function<std::shared_ptr<const wal::Membership>()> membership;
  // The channels to the other nodes: their credentials (null: plaintext)
  // and, with TLS, the name their certificates must carry (empty: the
  // address's host).
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  std::string peer_server_name;
  // Hears how each forwarded call ended (metrics); may be unset.
  std::function<void(const grpc::Status&)> on_forwarded;
};

class ForwardingRouter final : public rpc::CallRouter {
 public:
  explicit ForwardingRouter(ForwardingRouterOptions options);
  Route ForGid(std::string_view gid) override;
  Route ForNode(std::string_view node_id) override;
  void Forwarded(const grpc::Status& status) override;

 private:
  struct Peer {
    std::unique_ptr<tcc::v1::Coordinator::Stub> coordinator;
    std::unique_ptr<tcc::v1::Admin::Stub> admin;
  };
  const Peer& PeerFor(const std::string& address);

  const ForwardingRouterOptions options_;
  std::mutex mu_;
  std::map<std::string, Peer> peers_;
};

}  // namespace tcc::cluster
