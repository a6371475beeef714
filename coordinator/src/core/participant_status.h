// How tccd reads a participant's error (DESIGN.md section 5): the one
// classification, used by the core (what a reply means for the branch) and
// by the driver's participant calls (what it means for the circuit breaker).
//
// Pure; thread-safe.
#pragma once

#include "absl/status/status.h"

namespace tcc::core {

// True for the definite refusals: FAILED_PRECONDITION and INVALID_ARGUMENT,
// a protocol violation or a request the participant cannot read; nothing
// ran (on a Try the branch failed; on a Confirm or Cancel it is STUCK; an
// alert either way). Every other code (UNAVAILABLE, DEADLINE_EXCEEDED,
// RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNKNOWN, CANCELLED, ...) leaves the
// outcome unknown: the handler may have committed before it failed, so tccd
// asks (Query) or retries, never takes it as a failure.
constexpr bool IsDefiniteRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kInvalidArgument;
}

}  // namespace tcc::core
