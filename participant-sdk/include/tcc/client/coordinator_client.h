// The initiator client: how an application hands tccd a global transaction
// (tcc.v1.Coordinator, DESIGN.md section 4).
//
// Identity before the first send: when the caller leaves the gid empty the
// client generates one, and when created_at is 0 it stamps the wall-clock
// now; both are then reused on every retry, so tccd can tell a retry from a
// new request. Calls whose outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED,
// RESOURCE_EXHAUSTED) are retried with the same request, with exponential
// backoff and full jitter, up to `max_attempts` (or for `retry_for_ms` of
// backoff); a retry of a Submit or Commit
// that tccd already handled gets the first answer, never a second
// transaction. Every other status is returned as tccd sent it (for example
// ABORTED from Commit carries why the transaction could not commit).
//
// A cluster (DESIGN.md section 14): give every node's address; any node
// serves any call (forwarding it to its shard's owner), and an attempt that
// fails UNAVAILABLE or DEADLINE_EXCEEDED (a node down, a shard between
// owners) is retried at the next node, with the same gid and created_at.
//
// Calls block the calling thread. Thread-safe: one client may be shared.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/clock/clock.h"
#include "tcc/v1/coordinator.grpc.pb.h"

namespace tcc::client {

struct ClientOptions {
  std::string address = "127.0.0.1:7070";  // tccd's listen address
  // A cluster's nodes (host:port each); when set, `address` is not used.
  std::vector<std::string> addresses;
  // Deadline of one attempt. A Submit waiting for WAIT_FOR_FINISHED needs
  // room for the whole transaction.
  int64_t attempt_timeout_ms = 30000;
  int max_attempts = 5;
  // When > 0, a retryable failure is retried past max_attempts until the
  // waits between attempts add up to this (the time spent in attempts comes
  // on top). For a cluster, give it at least the lease TTL and the takeover
  // margin: while a dead node's lease runs out, every attempt at its gids
  // fails at once, and full jitter can spend max_attempts in well under a
  // second (10 attempts were seen to run out 2.3 s into a 2 s-TTL takeover).
  int64_t retry_for_ms = 0;
  int64_t backoff_base_ms = 50;
  int64_t backoff_cap_ms = 2000;
  // null: plaintext. TLS from PEM files: tcc::tls::ChannelCredentials
  // (tcc/tls/credentials.h).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Injected for tests; null: the system clock, real waits.
  const clock::Clock* clock = nullptr;
  std::function<void(int64_t ms)> wait;
};

class CoordinatorClient {
 public:
  explicit CoordinatorClient(ClientOptions options);

  // A new gid: "g-" followed by 32 random hex digits.
  static std::string NewGid();

  // Fills gid and created_at_ms when unset, then sends with retries. The
  // request is updated in place, so the caller can log the gid it got.
  absl::StatusOr<tcc::v1::SubmitResponse> Submit(tcc::v1::SubmitRequest& req);
  absl::StatusOr<tcc::v1::BeginResponse> Begin(tcc::v1::BeginRequest& req);
  absl::StatusOr<tcc::v1::TryResponse> Try(const tcc::v1::TryRequest& req);
  absl::StatusOr<tcc::v1::CommitResponse> Commit(
      const tcc::v1::CommitRequest& req);
  absl::StatusOr<tcc::v1::RollbackResponse> Rollback(
      const tcc::v1::RollbackRequest& req);
  absl::StatusOr<tcc::v1::TransactionView> Get(const std::string& gid);

  // Streams one transaction's changes to `on_event` until it is final, the
  // stream ends or `on_event` returns false. Not retried.
  absl::Status Watch(
      const std::string& gid,
      const std::function<bool(const tcc::v1::TransactionView&)>& on_event);

 private:
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> CallWithRetries(const Request& req, Method method);

  ClientOptions options_;
  // One stub per node address; calls start at `current_` and move on after
  // a failure that says the node may be down.
  std::vector<std::unique_ptr<tcc::v1::Coordinator::Stub>> stubs_;
  std::atomic<size_t> current_{0};
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

}  // namespace tcc::client
