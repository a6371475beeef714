// The one place where absl::Status and grpc::Status meet. Their codes are the
// same numbers (absl's codes are gRPC's); messages pass through unchanged.
//
// Pure functions; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tcc::rpc {

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// True for the codes whose outcome is unknown and may be retried
// (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED), and for
// UNKNOWN, CANCELLED and INTERNAL from the transport, which say just as little
// about whether the peer acted (DESIGN.md section 5).
bool IsTransient(absl::StatusCode code);

}  // namespace tcc::rpc
