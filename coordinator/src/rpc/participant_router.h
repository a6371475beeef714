// Picks the transport of each call by its participant: the ones configured
// with `protocol: http` go to the HTTP transport, every other one (and
// direct "host:port" targets) to gRPC. One transport interface, two
// implementations; what happens around a call (breaker, timeouts, retries)
// is the driver's and the same for both.
//
// Thread-safe; the set of HTTP participants is fixed at construction.
#pragma once

#include <set>
#include <string>

#include "runtime/environment.h"

namespace tcc::rpc {

class ParticipantRouter final : public runtime::ParticipantTransport {
 public:
  // `grpc` and `http` must outlive the router; `http` may be null when no
  // participant speaks HTTP.
  ParticipantRouter(runtime::ParticipantTransport& grpc,
                    runtime::ParticipantTransport* http,
                    std::set<std::string> http_participants)
      : grpc_(grpc),
        http_(http),
        http_participants_(std::move(http_participants)) {}

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override {
    For(call.spec->participant).Call(call, timeout_ms, std::move(done));
  }
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override {
    For(query.participant).Query(query, timeout_ms, std::move(done));
  }

 private:
  runtime::ParticipantTransport& For(const std::string& participant) {
    if (http_ != nullptr && http_participants_.count(participant) != 0) {
      return *http_;
    }
    return grpc_;
  }

  runtime::ParticipantTransport& grpc_;
  runtime::ParticipantTransport* http_;
  const std::set<std::string> http_participants_;
};

}  // namespace tcc::rpc
