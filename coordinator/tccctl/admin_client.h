// tccctl's call layer: one tcc.v1.Admin call per method, with the operator's
// credential (metadata `authorization: Bearer <token>`, and/or a TLS client
// certificate) and a deadline. Answers are returned as tccd sent them; the
// gRPC status becomes an absl::Status with the same code and message. No
// retries: an operator's command runs once and says what happened.
//
// Thread-compatible (one command uses one client).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/v1/admin.grpc.pb.h"

namespace tcc::tccctl {

struct AdminClientOptions {
  std::string address = "127.0.0.1:7070";
  // Sent as `authorization: Bearer <token>`; empty: no token sent.
  std::string token;
  // TLS: on when tls_ca_pem is set (PEM contents, not paths). A client
  // certificate and key (both or neither) make it mutual TLS.
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // The name the server's certificate must carry, when not the host of
  // `address` (e.g. "localhost" while dialling 127.0.0.1).
  std::string tls_server_name;
  // Deadline of each unary call; Watch has none unless watch_timeout_ms > 0.
  int64_t timeout_ms = 5000;
  int64_t watch_timeout_ms = 0;
};

// A warning when `o` would send a token in plaintext off this machine (no
// TLS, an address that is not loopback or a unix socket); empty otherwise.
std::string PlaintextTokenWarning(const AdminClientOptions& o);

// The token in a token file's contents: the whole file when it holds one
// word, else the second word of the first line that is neither empty nor a
// `#` comment (tccd's `NAME TOKEN` format). INVALID_ARGUMENT when none.
absl::StatusOr<std::string> ParseTokenFile(const std::string& contents);

class AdminClient {
 public:
  explicit AdminClient(AdminClientOptions options);

  absl::StatusOr<tcc::v1::StatusResponse> Status();
  absl::StatusOr<tcc::v1::ShowResponse> Show(const std::string& gid);
  absl::StatusOr<tcc::v1::ListResponse> List(
      const tcc::v1::ListRequest& request);
  // Calls `on_event` for every event until the stream ends (OK after the
  // final state) or `on_event` returns false (then OK too).
  absl::Status Watch(
      const std::string& gid,
      const std::function<bool(const tcc::v1::WatchEvent&)>& on_event);
  absl::StatusOr<tcc::v1::RetryNowResponse> RetryNow(
      const tcc::v1::RetryNowRequest& request);
  absl::StatusOr<tcc::v1::IssueApprovalResponse> IssueApproval(
      const tcc::v1::IssueApprovalRequest& request);
  absl::StatusOr<tcc::v1::ForceDecisionResponse> ForceDecision(
      const tcc::v1::ForceDecisionRequest& request);
  absl::StatusOr<tcc::v1::ResolveBranchResponse> ResolveBranch(
      const tcc::v1::ResolveBranchRequest& request);
  absl::StatusOr<tcc::v1::ApproveResponse> Approve(
      const tcc::v1::ApproveRequest& request);
  absl::StatusOr<tcc::v1::ClusterResponse> Cluster();
  absl::StatusOr<tcc::v1::DrainResponse> Drain(const std::string& node_id);

 private:
  void Prepare(grpc::ClientContext& ctx, int64_t timeout_ms) const;
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Call(const Request& request, Method method);

  AdminClientOptions options_;
  std::unique_ptr<tcc::v1::Admin::Stub> stub_;
};

}  // namespace tcc::tccctl
