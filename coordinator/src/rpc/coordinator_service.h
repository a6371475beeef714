// tcc.v1.Coordinator over gRPC's callback API: maps protos to the core's
// specs (refusing what has no mapping: an unknown enum value, a missing
// message), applies the per-client rate limit, hands the specs to the backend
// and maps the answers back. It checks no admission rule itself: those are
// core/admission.h's, which the driver applies. No thread waits on a
// transaction: a Submit waiting for WAIT_FOR_FINISHED holds a reactor, not a
// thread.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rpc/call_router.h"
#include "rpc/coordinator_backend.h"
#include "rpc/rate_limiter.h"
#include "tcc/v1/coordinator.grpc.pb.h"

namespace tcc::rpc {

struct CoordinatorServiceOptions {
  // Wall-clock now (Unix ms), for List's min_age and a call's deadline.
  std::function<int64_t()> now_ms;
  uint32_t max_list_page = 1000;
  uint32_t max_watch_streams = 1000;
  // Per-client rate limit (null or disabled: none); excess calls get
  // RESOURCE_EXHAUSTED and change nothing. Not owned.
  RateLimiter* rate_limiter = nullptr;
  // Cluster mode: the TLS client identities of the nodes
  // (cluster.peers.identities). Their calls were forwarded for callers the
  // node they called rate-limited already: not limited again.
  std::vector<std::string> peer_identities;
  // Cluster mode: where each gid's calls are served (call_router.h). Null:
  // here. Not owned.
  CallRouter* router = nullptr;
};

// A Watch stream that ends at once with `status`.
grpc::ServerWriteReactor<tcc::v1::WatchEvent>* RefuseWatch(
    const absl::Status& status);

class CoordinatorService final : public tcc::v1::Coordinator::CallbackService {
 public:
  CoordinatorService(CoordinatorBackend& backend,
                     CoordinatorServiceOptions options);

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const tcc::v1::SubmitRequest* request,
                                   tcc::v1::SubmitResponse* response) override;
  grpc::ServerUnaryReactor* Begin(grpc::CallbackServerContext* ctx,
                                  const tcc::v1::BeginRequest* request,
                                  tcc::v1::BeginResponse* response) override;
  grpc::ServerUnaryReactor* Try(grpc::CallbackServerContext* ctx,
                                const tcc::v1::TryRequest* request,
                                tcc::v1::TryResponse* response) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx,
                                   const tcc::v1::CommitRequest* request,
                                   tcc::v1::CommitResponse* response) override;
  grpc::ServerUnaryReactor* Rollback(
      grpc::CallbackServerContext* ctx, const tcc::v1::RollbackRequest* request,
      tcc::v1::RollbackResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const tcc::v1::GetRequest* request,
                                tcc::v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const tcc::v1::ListRequest* request,
                                 tcc::v1::ListResponse* response) override;
  grpc::ServerWriteReactor<tcc::v1::WatchEvent>* Watch(
      grpc::CallbackServerContext* ctx,
      const tcc::v1::WatchRequest* request) override;

  // The admin API's Watch (already authenticated): the same streams, but
  // counted apart (max_watch_streams more) and not rate-limited, so that
  // clients holding every stream cannot lock operators out.
  grpc::ServerWriteReactor<tcc::v1::WatchEvent>* AdminWatch(
      const tcc::v1::WatchRequest& request);

 private:
  [[nodiscard]] static absl::Status CheckWaitFor(int wait_for);
  [[nodiscard]] absl::Status CheckRate(grpc::CallbackServerContext* ctx);
  // Cluster mode: a call for `gid` that this node does not serve is
  // forwarded to its shard's owner or refused; the reactor that finishes it
  // (null: serve it here).
  template <typename Request, typename Response, typename Send>
  grpc::ServerUnaryReactor* MaybeRoute(grpc::CallbackServerContext* ctx,
                                       std::string_view gid,
                                       const Request* request,
                                       Response* response, Send send);
  grpc::ServerWriteReactor<tcc::v1::WatchEvent>* StartWatch(
      const tcc::v1::WatchRequest& request, std::atomic<uint32_t>& streams);

  CoordinatorBackend& backend_;
  CoordinatorServiceOptions options_;
  std::atomic<uint32_t> watch_streams_{0};
  std::atomic<uint32_t> admin_watch_streams_{0};
};

}  // namespace tcc::rpc
