#include "cluster/forwarding_router.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "tcc/wal/log.h"

namespace tcc::cluster {

ForwardingRouter::ForwardingRouter(ForwardingRouterOptions options)
    : options_(std::move(options)) {}

rpc::CallRouter::Route ForwardingRouter::ForGid(std::string_view gid) {
  const uint32_t k = wal::ShardOfGid(gid, options_.shards);
  Route route;
  if (options_.drives(k)) return route;  // kLocal
  std::shared_ptr<const wal::Membership> m = options_.membership();
  const wal::ShardOwnerInfo* owner =
      m != nullptr && k < m->owners.size() && m->owners[k].has_value()
          ? &*m->owners[k]
          : nullptr;
  if (owner == nullptr || owner->node_id == options_.node_id ||
      owner->address.empty()) {
    route.kind = Route::Kind::kRefuse;
    route.refusal = absl::UnavailableError(absl::StrCat(
        "shard ", k, " of gid ", std::string(gid),
        " has no owner at the moment (a takeover or hand-over is under "
        "way); retry with the same gid and created_at"));
    return route;
  }
  route.kind = Route::Kind::kForward;
  const Peer& peer = PeerFor(owner->address);
  route.stub = peer.coordinator.get();
  route.admin_stub = peer.admin.get();
  return route;
}

rpc::CallRouter::Route ForwardingRouter::ForNode(std::string_view node_id) {
  Route route;
  if (node_id == options_.node_id) return route;  // kLocal
  std::shared_ptr<const wal::Membership> m = options_.membership();
  if (m != nullptr) {
    for (const wal::MemberInfo& n : m->nodes) {
      if (n.node_id != node_id || n.address.empty()) continue;
      route.kind = Route::Kind::kForward;
      const Peer& peer = PeerFor(n.address);
      route.stub = peer.coordinator.get();
      route.admin_stub = peer.admin.get();
      return route;
    }
  }
  route.kind = Route::Kind::kRefuse;
  route.refusal = absl::UnavailableError(
      absl::StrCat("node ", std::string(node_id), " is not a live node"));
  return route;
}

void ForwardingRouter::Forwarded(const grpc::Status& status) {
  if (options_.on_forwarded) options_.on_forwarded(status);
}

const ForwardingRouter::Peer& ForwardingRouter::PeerFor(
    const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(address);
  if (it != peers_.end()) return it->second;
  grpc::ChannelArguments args;
  if (!options_.peer_server_name.empty()) {
    args.SetSslTargetNameOverride(options_.peer_server_name);
  }
  // A node's forwarded calls may be many at once: one channel per peer
  // multiplexes them (HTTP/2 streams).
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  auto creds = options_.peer_credentials != nullptr
                   ? options_.peer_credentials
                   : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateCustomChannel(address, creds, args);
  Peer peer{tcc::v1::Coordinator::NewStub(channel),
            tcc::v1::Admin::NewStub(channel)};
  return peers_.emplace(address, std::move(peer)).first->second;
}

}  // namespace tcc::cluster
