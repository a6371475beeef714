// N tccd nodes of one cluster on etcd (DESIGN.md section 14) as real
// processes on 127.0.0.1, for the cluster drills: each node is a slot with a
// node id, a client port fixed at its first start (so it is the same after a
// restart), a data dir and a log file of its own; the harness starts, kills
// (-9), pauses (SIGSTOP/SIGCONT), stops and restarts a node with the same
// id, deletes its data dir, adds nodes, points one node at other etcd
// endpoints (fault proxies) for its next start, scrapes each node's
// /metrics, and reads the membership and the shards' owners from etcd.
// The banks are a BankCluster's (StartBanks); their ports go in the
// participants.
//
// Not thread-safe, except ScrapeMetrics, ReadMembership and the accessors of
// a slot that exists, which may be used from a monitor thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "process.h"
#include "tcc/etcd/client.h"
#include "tcc/wal/etcd_membership.h"

namespace tcc::harness {

struct TccdNodesOptions {
  std::string root_dir;  // each node's data dir, config and log under it
  std::string tccd_bin;
  std::vector<std::string> etcd_endpoints;
  std::string key_prefix;  // empty: a fresh one
  uint32_t shards = 16;
  int64_t lease_ttl_ms = 2000;
  int64_t lease_margin_ms = 500;
  int64_t takeover_margin_ms = 2000;
  // name -> 127.0.0.1 port of each participant (plaintext gRPC).
  std::map<std::string, int> participants;
  // YAML put before the harness's own keys in every node's config (timeouts,
  // retries; not cluster: or participants:).
  std::string extra_config;
  // Flags added to every node's command line (e.g. --admin-token-file).
  std::vector<std::string> extra_args;
  // YAML put inside every node's cluster: section, each line indented two
  // spaces (e.g. "  peers:\n    tls: true\n").
  std::string cluster_extra;
};

class TccdNodes {
 public:
  explicit TccdNodes(TccdNodesOptions options);
  ~TccdNodes();  // kills every node still running
  TccdNodes(const TccdNodes&) = delete;
  TccdNodes& operator=(const TccdNodes&) = delete;

  // Connects the harness's etcd client and creates the cluster
  // (tccd --init-cluster), once, before any node starts.
  [[nodiscard]] absl::Status InitCluster();

  // A new slot (not started): node id `node_id` (empty: "node-<n>"), a port.
  // Its index.
  int AddNode(const std::string& node_id = "");
  // Starts node i and waits (up to timeout_ms) until it serves. A node whose
  // old lease is still alive waits it out first (DESIGN.md 14), so allow the
  // TTL and an election.
  [[nodiscard]] absl::Status StartNode(int i, int64_t timeout_ms = 60000);
  // Starts a process with node i's id and config but another data dir and
  // port, and waits for it to end (a second process with a running node's
  // id must refuse to start). Its wait status and output.
  [[nodiscard]] absl::StatusOr<std::pair<int, std::string>> RunDuplicate(
      int i, int64_t timeout_ms);
  void KillNode(int i);  // SIGKILL + reap
  void PauseNode(int i);
  void ResumeNode(int i);
  // SIGTERM, waits; its wait status.
  [[nodiscard]] absl::StatusOr<int> StopNode(int i, int64_t timeout_ms = 30000);
  // rm -rf its data dir (the node must not be running).
  void DeleteDataDir(int i);
  // The etcd endpoints node i's next start dials (e.g. fault proxies).
  void SetEtcdEndpoints(int i, std::vector<std::string> endpoints);

  size_t size() {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    return nodes_.size();
  }
  bool Running(int i);
  const std::string& node_id(int i) const { return nodes_[i]->id; }
  // The index of the slot with this node id, or -1.
  int IndexOf(const std::string& node_id) const;
  std::string address(int i) const;
  // Client addresses of the given slots (empty: every slot).
  std::vector<std::string> Addresses(const std::vector<int>& which = {}) const;
  std::string log_path(int i) const;
  Process* process(int i) { return nodes_[i]->process.get(); }
  const std::string& key_prefix() const { return options_.key_prefix; }
  uint32_t shards() const { return options_.shards; }
  int64_t lease_ttl_ms() const { return options_.lease_ttl_ms; }
  int64_t takeover_margin_ms() const { return options_.takeover_margin_ms; }

  // Node i's /metrics page (UNAVAILABLE when it is not running).
  [[nodiscard]] absl::StatusOr<std::string> ScrapeMetrics(int i);
  // One linearizable read of nodes/, drain/ and the shards' owners.
  [[nodiscard]] absl::StatusOr<wal::Membership> ReadMembership();
  // drain/<node id of i> written straight to etcd (wal::MarkDraining, what
  // the Admin API's Drain writes; drill 5 drains through `tccctl drain`).
  [[nodiscard]] absl::Status Drain(int i);
  etcd::Client* etcd() { return etcd_.get(); }

 private:
  struct Node {
    std::string id;
    int port = 0;
    int metrics_port = 0;
    int starts = 0;
    std::vector<std::string> etcd_endpoints;
    std::unique_ptr<Process> process;
  };
  std::string DataDir(int i) const;
  // Writes node i's config; its path.
  [[nodiscard]] absl::StatusOr<std::string> WriteConfig(int i) const;

  TccdNodesOptions options_;
  std::unique_ptr<etcd::Client> etcd_;
  // A deque: slots stay where they are when nodes are added (a monitor
  // thread may read one meanwhile).
  std::deque<std::unique_ptr<Node>> nodes_;
  // Guards nodes_' layout and the metrics ports (a monitor thread reads
  // them).
  std::mutex metrics_mu_;
};

// The value of one series on a Prometheus page, `series` as written there
// (`tccd_alerts_total{kind="lost_decision"}`); nullopt when absent.
std::optional<double> MetricValue(const std::string& page,
                                  const std::string& series);

}  // namespace tcc::harness
