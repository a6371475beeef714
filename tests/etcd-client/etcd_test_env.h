// etcd for tests, on real etcd processes started by scripts/etcd.sh:
// - SharedEtcdEndpoints(): the 3-member cluster of the "etcd" CTest
//   fixture (TCC_ETCD_ENV_FILE), which tests share, each under a key prefix
//   of its own (UniqueKeyPrefix). A test that needs it and finds none FAILS:
//   it never skips.
// - EtcdCluster: a cluster of the test's own, for tests that kill, stop,
//   pause or restart members, or need TLS, auth or a tiny quota; stopped
//   (every member, its directory removed) when it goes.
//
// Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/etcd/client.h"

namespace tcc::etcd::testing {

// The fixture cluster's endpoints; FAILs the test when there is none.
std::vector<std::string> SharedEtcdEndpoints();
// A prefix no other test (or run) uses: "/tcc-test/<pid>-<n>-<name>/".
std::string UniqueKeyPrefix(const std::string& name);

struct EtcdClusterOptions {
  int members = 1;
  bool tls = false;   // mutual TLS (certificates in dir())
  bool auth = false;  // user tcc / tcc-password
  int auth_token_ttl_s = 300;
  int64_t quota_backend_bytes = 0;  // 0: the script's default
  int max_txn_ops = 0;              // 0: the script's default (1024)
};

class EtcdCluster {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(
      EtcdClusterOptions options);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  const std::string& dir() const { return dir_; }
  // A client's options for this cluster: its endpoints, and its TLS files
  // (the client certificate) and user when it has them.
  ClientOptions Client() const;

  // Member n is 1-based.
  [[nodiscard]] absl::Status KillMember(int n);   // SIGKILL, waits
  [[nodiscard]] absl::Status StopMember(int n);   // SIGTERM, waits
  [[nodiscard]] absl::Status StartMember(int n);  // waits until it serves
  // Starts them all, then waits until each serves (members that need each
  // other for a quorum).
  [[nodiscard]] absl::Status StartMembers(const std::vector<int>& members);
  [[nodiscard]] absl::Status PauseMember(int n);   // SIGSTOP
  [[nodiscard]] absl::Status ResumeMember(int n);  // SIGCONT
  // etcd's out-of-space procedure (scripts/etcd.sh free-space): deletes the
  // keys under `prefix`, compacts, defragments, disarms the alarm.
  [[nodiscard]] absl::Status FreeSpace(const std::string& prefix);
  // The member's pid (0 if none).
  int MemberPid(int n) const;

 private:
  EtcdCluster(EtcdClusterOptions options, std::string env_file)
      : options_(options), env_file_(std::move(env_file)) {}
  absl::Status Script(const std::string& args) const;

  EtcdClusterOptions options_;
  std::string env_file_;
  std::string dir_;
  std::vector<std::string> endpoints_;
};

}  // namespace tcc::etcd::testing
