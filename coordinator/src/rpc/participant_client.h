// The gRPC client tccd uses to call participants (tcc.v1.Participant): one
// channel per configured participant, asynchronous calls (gRPC's callback
// API) with a per-call deadline, so no coordinator thread waits on the
// network.
//
// It only moves messages: a reply is handed back as it came, and any gRPC
// error (including a deadline) as its status. What a timeout means (an
// unknown outcome, DESIGN.md section 1) is the driver's business.
//
// Thread-safe: Add before use; Call and Query from any thread. Completion
// callbacks run on gRPC's threads and must not block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace tcc::rpc {

enum class ParticipantOp { kTry, kConfirm, kCancel };

using BranchReply =
    std::function<void(absl::StatusOr<tcc::v1::BranchResponse>)>;
using QueryReply = std::function<void(absl::StatusOr<tcc::v1::QueryResponse>)>;
using BatchReply = std::function<void(absl::StatusOr<tcc::v1::BatchResponse>)>;

class ParticipantClient {
 public:
  ParticipantClient() = default;
  ParticipantClient(const ParticipantClient&) = delete;
  ParticipantClient& operator=(const ParticipantClient&) = delete;

  // Opens a channel to `address` for `name` (plaintext when `credentials` is
  // null; with TLS, the peer's certificate must name
  // `ssl_target_name_override` when set, else the address's host).
  // ALREADY_EXISTS if the name is taken.
  [[nodiscard]] absl::Status Add(
      const std::string& name, const std::string& address,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
      const std::string& ssl_target_name_override = "");

  bool Has(const std::string& name) const;

  // Sends Try, Confirm or Cancel; `done` gets the reply or the gRPC error
  // (NOT_FOUND locally for an unknown participant name).
  void Call(const std::string& participant, ParticipantOp op,
            const tcc::v1::BranchRequest& request, int64_t timeout_ms,
            BranchReply done);

  void Query(const std::string& participant,
             const tcc::v1::QueryRequest& request, int64_t timeout_ms,
             QueryReply done);

  // Sends a Batch; `done` gets every call's result or the Batch's error.
  // `request` is moved from.
  void Batch(const std::string& participant, tcc::v1::BatchRequest request,
             int64_t timeout_ms, BatchReply done);

  // For a stopping daemon: calls made from now on are dropped (their
  // callbacks never run), calls in flight are cancelled, and this returns
  // once every callback of a call in flight has returned (or after
  // `timeout_ms`). Afterwards nothing the callbacks reference is touched.
  void Shutdown(int64_t timeout_ms);

 private:
  // One unary call: deadline, registration, the reply handed to `done`.
  template <typename Request, typename Response, typename Reply, typename Start>
  void Send(const std::string& participant, Request request, int64_t timeout_ms,
            Reply done, Start start);

  // Registers a call in flight; false when stopping (drop the call).
  bool Begin(grpc::ClientContext* context);
  void End(grpc::ClientContext* context);

  tcc::v1::Participant::Stub* Stub(const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<tcc::v1::Participant::Stub>> stubs_;

  std::mutex calls_mu_;
  std::condition_variable calls_cv_;
  std::set<grpc::ClientContext*> in_flight_;
  bool stopping_ = false;
};

}  // namespace tcc::rpc
