// tcc.v1.Coordinator over gRPC's callback API: checks what only the daemon
// can check (participant names against the config, the deduplication
// horizon, features not enabled), maps protos to the core's specs, hands them
// to the backend and maps the answers back. No thread waits on a transaction:
// a Submit waiting for WAIT_FOR_FINISHED holds a reactor, not a thread.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "rpc/coordinator_backend.h"
#include "rpc/rate_limiter.h"
#include "tcc/v1/coordinator.grpc.pb.h"

namespace tcc::rpc {

struct CoordinatorServiceOptions {
  // True when `name` is a configured participant.
  std::function<bool(const std::string& name)> participant_known;
  // Branches may name "host:port" directly (config allow_direct_targets).
  bool allow_direct_targets = false;
  // Wall-clock now (Unix ms), for List's min_age and the created_at bound.
  std::function<int64_t()> now_ms;
  // A created_at_ms further ahead of now_ms is refused (INVALID_ARGUMENT).
  int64_t max_clock_skew_ms = 5 * 60 * 1000;
  // The WAL's deduplication horizon (Unix ms).
  std::function<int64_t()> dedup_horizon_ms;
  int64_t max_try_timeout_ms = 10 * 60 * 1000;
  int64_t max_approval_timeout_ms = 24LL * 3600 * 1000;
  // A gated Submit/Begin is refused (FAILED_PRECONDITION) when false: no
  // admin credential is configured, so nobody could ever approve it.
  bool approval_gate_enabled = false;
  uint32_t max_list_page = 1000;
  uint32_t max_watch_streams = 1000;
  // Per-client rate limit (null or disabled: none); excess calls get
  // RESOURCE_EXHAUSTED and change nothing. Not owned.
  RateLimiter* rate_limiter = nullptr;
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

  // Checks a branch's participant against the config. Exposed for tests.
  [[nodiscard]] absl::Status CheckParticipant(const std::string& name) const;

 private:
  [[nodiscard]] absl::Status CheckCreatedAt(int64_t created_at_ms) const;
  [[nodiscard]] static absl::Status CheckWaitFor(int wait_for);
  // What Submit and Begin both check: gid, created_at, the gate, timeouts.
  [[nodiscard]] absl::Status CheckNewTransaction(const std::string& gid,
                                                 int64_t created_at_ms,
                                                 bool approval_gate,
                                                 uint32_t approval_timeout_ms,
                                                 const char* timeout_name,
                                                 uint32_t timeout_ms) const;
  [[nodiscard]] absl::Status CheckRate(grpc::CallbackServerContext* ctx);
  grpc::ServerWriteReactor<tcc::v1::WatchEvent>* StartWatch(
      const tcc::v1::WatchRequest& request, std::atomic<uint32_t>& streams);

  CoordinatorBackend& backend_;
  CoordinatorServiceOptions options_;
  std::atomic<uint32_t> watch_streams_{0};
  std::atomic<uint32_t> admin_watch_streams_{0};
};

}  // namespace tcc::rpc
