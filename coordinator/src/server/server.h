// The daemon: wires the config into the WAL (RocksDB), the driver (on Asio
// strands and the real clock), the gRPC participant transport, the gRPC
// services, metrics and retention, and runs their lifecycle:
//
//   Start     open the WAL (refusing a corrupt one), take a new owner epoch,
//             start recovery in the background, start serving
//   Stop      stop accepting, answer waiting callers UNAVAILABLE, let queued
//             WAL writes finish, close
//
// Not thread-safe: one thread starts and stops it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace tcc::server {

// `tccd --init-cluster`: creates the cluster under cluster.key_prefix in
// etcd, once (DESIGN.md section 14). What it made, or ALREADY_EXISTS when a
// cluster is there; INVALID_ARGUMENT without cluster mode.
[[nodiscard]] absl::StatusOr<std::string> InitCluster(const Config& config);

class Server {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> Start(
      const Config& config, const std::string& version);
  ~Server();  // Stop()s if still running

  int port() const;          // the client API's bound port
  int admin_port() const;    // == port() when served together
  int metrics_port() const;  // 0 when off
  int console_port() const;  // 0 when off

  // Graceful stop; idempotent. Returns Failure() as it was when stopping
  // (the caller exits non-zero then).
  absl::Status Stop();

  // OK while tccd can go on; else why it must stop: the WAL's fail-stop
  // error (a failed write or sync; DATA_LOSS when a read found its synced
  // state corrupt), or DATA_LOSS when the driver met state it cannot drive
  // (a recovery scan that failed, records that do not replay).
  absl::Status Failure() const;

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tcc::server
