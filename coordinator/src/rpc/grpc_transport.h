// The driver's participant transport (runtime/environment.h) over gRPC:
// domain calls -> tcc.v1.Participant requests through ParticipantClient, and
// the answers back. A reply that breaks the contract (no outcome, no barrier
// state) is an UNKNOWN error: the outcome stays unknown.
//
// Thread-safe.
#pragma once

#include <functional>
#include <string>

#include "rpc/participant_client.h"
#include "runtime/environment.h"

namespace tcc::rpc {

class GrpcTransport final : public runtime::ParticipantTransport {
 public:
  // `post` runs a task later on another thread (errors found before a call
  // leaves must not be reported inside Call). With `allow_direct_targets`, a
  // participant not configured but shaped "host:port" gets a channel on first
  // use.
  GrpcTransport(ParticipantClient& client,
                std::function<void(std::function<void()>)> post,
                bool allow_direct_targets);

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

 private:
  // OK when `participant` has a channel (opening one for a direct target).
  absl::Status Reachable(const std::string& participant);

  ParticipantClient& client_;
  std::function<void(std::function<void()>)> post_;
  bool allow_direct_targets_;
};

}  // namespace tcc::rpc
