// A node's membership in the cluster (DESIGN.md section 14, "Membership and
// leases"): one etcd lease, kept alive every TTL/3 (etcd::LeaseKeeper), and
// nodes/<node_id> registered under it with a Txn requiring the key to be
// absent. A node restarted after a crash finds its old registration and
// waits for it to expire (up to the old lease's TTL plus an election
// timeout, since a new etcd leader renews every lease); it refuses to start
// (ALREADY_EXISTS) only if the old lease is being kept alive, that is,
// another process with that node id is running.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tcc/etcd/boot_clock.h"
#include "tcc/etcd/client.h"
#include "tcc/etcd/lease_keeper.h"

namespace tcc::wal {

struct NodeOptions {
  etcd::Client* client = nullptr;  // not owned
  std::string key_prefix;
  std::string node_id;
  std::string address;
  int64_t lease_ttl_ms = 5000;
  int64_t lease_margin_ms = 1000;
  // How long etcd may take to elect a leader (its --election-timeout):
  // added to the old lease's TTL when waiting for it to expire.
  int64_t election_timeout_ms = 1000;
  // The lease grant, the registration Txn and the old lease's TTL read are
  // each sent as this says (tccd: as the etcd log's sends, etcd_log.h
  // txn_attempt_timeout_ms); the registration, safe to send again as it is,
  // also after any other unknown outcome, each send longer from the second
  // that waited its deadline out (send_deadlines.h).
  etcd::SendTimeouts sends;
  etcd::BootClock* clock = nullptr;  // null: the system's
};

class NodeRegistration {
 public:
  // Grants the lease and registers the node (waiting out an old
  // registration; see above). `lost` hears once that the lease is gone.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeRegistration>> Join(
      NodeOptions options, etcd::LeaseKeeper::LostFn lost);
  // Stops the keep-alives; the lease expires by itself (Leave revokes it).
  ~NodeRegistration();

  int64_t lease_id() const { return keeper_->lease_id(); }
  // True while the lease may be trusted (DESIGN.md section 14).
  bool Trusted() const { return keeper_->Trusted(); }
  etcd::LeaseKeeper& keeper() { return *keeper_; }
  // Revokes the lease: the registration and every owner key go at once.
  [[nodiscard]] absl::Status Leave();

 private:
  explicit NodeRegistration(std::unique_ptr<etcd::LeaseKeeper> keeper)
      : keeper_(std::move(keeper)) {}
  std::unique_ptr<etcd::LeaseKeeper> keeper_;
};

}  // namespace tcc::wal
