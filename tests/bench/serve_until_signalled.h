// Lifecycle of the benchmark's stand-in servers (no-op participant, baseline
// relay): listen, announce "listening on HOST:PORT" (what the test harness
// waits for), serve until SIGINT or SIGTERM, shut down.
//
// Call BlockTerminationSignals() first thing in main, before anything starts
// a thread, so that the signals reach the waiting thread and no other.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tcc::bench {

void BlockTerminationSignals();

// Builds a server for `services` on `listen` (HOST:PORT, port 0 picks a free
// one), prints "listening on HOST:PORT" with the real port, blocks until
// SIGINT or SIGTERM, then shuts down (in-flight calls get a short grace).
// UNAVAILABLE if it cannot listen.
[[nodiscard]] absl::Status ServeUntilSignalled(
    const std::string& listen, const std::vector<grpc::Service*>& services);

}  // namespace tcc::bench
