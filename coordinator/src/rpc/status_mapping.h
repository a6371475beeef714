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

// What a participant's error means is core::IsDefiniteRefusal's business
// (core/participant_status.h), not the mapping's.

}  // namespace tcc::rpc
