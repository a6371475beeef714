// The bank harness: tccd and bank participants as real processes on
// 127.0.0.1, an initiator client and the banks' balance readers, kill and
// restart on request, and the end-of-run checks (every transaction final, all
// its branches confirmed or all cancelled, money conserved, nothing frozen).
// Integration tests, drills and benchmarks build on it.
//
// Not thread-safe, except client() and the read-only checks, which may be
// used from several threads.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bank.grpc.pb.h"
#include "process.h"
#include "tcc/client/coordinator_client.h"
#include "test_certs.h"

namespace tcc::harness {

// The whole cluster over TLS, with certificates made at start (TestPki under
// `<root_dir>/pki`): every bank serves mutual TLS and accepts only callers
// with a certificate from the PKI's CA; tccd dials them with TLS, trusting
// that CA and presenting its client certificate (CN=tccd); tccd's client
// listener serves `listener_mode`; the harness's clients trust the CA (and,
// for mtls, present CN=harness). tccd's config is then a YAML file the
// harness writes (`<root_dir>/tccd.yaml`, passed with --config).
struct ClusterTls {
  bool enabled = false;
  std::string listener_mode = "tls";  // tccd's client listener: tls or mtls
  // Per bank: the CA tccd trusts for it instead of the PKI's (to test a
  // wrong one). Applies at tccd's next start.
  std::map<std::string, std::string> participant_ca_file;
  // Serve the admin API on its own port (admin_listen 127.0.0.1:0, printed
  // as "admin port N") in mutual TLS with the PKI's server certificate and CA.
  bool admin_listener = false;
  // Client-certificate identities (CNs) that are admins
  // (admin.client_identities); needs admin_listener or listener_mode mtls.
  std::vector<std::string> admin_client_identities;
};

// A bank run by the Python SDK's example (participant-sdk/python/examples/
// bank/bank.py under /usr/bin/python3) instead of tcc-bank: tccd calls it
// over `protocol` (http: participants.NAME.url http://127.0.0.1:PORT), its
// store is "sqlite" (a file under root_dir) or "postgres" (pg_url); the
// harness reads its accounts through the Bank gRPC service it also serves.
struct PythonBank {
  std::string protocol = "http";
  std::string store = "sqlite";
};

// tccd in cluster mode on etcd (DESIGN.md section 14): one node owning
// every shard, under a key prefix of its own. The cluster is created with
// `tccd --init-cluster` before tccd's first start.
struct ClusterEtcd {
  std::vector<std::string> endpoints;  // empty: tccd on its RocksDB WAL
  std::string key_prefix;              // empty: a fresh one
  uint32_t shards = 8;
  int64_t lease_ttl_ms = 2000;
  int64_t lease_margin_ms = 500;
  std::string node_id = "node-1";
};

// The etcd the environment names for a second configuration of a test:
// with TCC_TCCD_WAL=etcd, the fixture's cluster (TCC_ETCD_ENV_FILE, or
// TCC_ETCD_ENDPOINTS) and a fresh key prefix; else none. BankCluster uses it
// when its options name no etcd.
ClusterEtcd EtcdFromEnvironment();

struct ClusterOptions {
  std::string root_dir;  // data dirs and logs go under it
  // Remove root_dir when the cluster goes (unless TCC_KEEP_TEST_DIRS is set):
  // each tccd and bank data dir takes tens of MB.
  bool remove_root_dir = false;
  std::string tccd_bin;  // path to tccd
  std::string bank_bin;  // path to tcc-bank
  std::vector<std::string> banks = {"bank-a", "bank-b"};
  uint32_t accounts = 100;
  int64_t initial_balance = 1000;
  std::string store = "rocksdb";  // or "postgres" (needs pg_url)
  // Per-bank store, overriding `store` for the banks named here.
  std::map<std::string, std::string> bank_store;
  std::string pg_url;
  std::vector<std::string> tccd_args;  // extra flags
  // Serve tccd's /metrics on a port the OS picks (tccd_metrics_port()).
  bool metrics = false;
  std::map<std::string, std::string> tccd_env;
  std::map<std::string, std::map<std::string, std::string>> bank_env;
  // The banks' --log-level: "debug" logs every call they get, with its owner
  // epoch ("epoch=N").
  std::string bank_log_level = "info";
  ClusterTls tls;
  // Banks (by name, among `banks`) run by the Python SDK; the script and the
  // PYTHONPATH it needs (the generated stubs, the SDK's sources).
  std::map<std::string, PythonBank> python_banks;
  std::string python_bank_script;
  std::string python_path;
  // Empty endpoints: EtcdFromEnvironment() decides.
  ClusterEtcd etcd;
};

class BankCluster {
 public:
  explicit BankCluster(ClusterOptions options);
  ~BankCluster();

  // Starts every bank, then tccd. Each keeps its port across restarts.
  [[nodiscard]] absl::Status Start();
  // Starts every bank only: the tccd nodes are someone else's (TccdNodes);
  // point the clients at them with SetClientAddresses.
  [[nodiscard]] absl::Status StartBanks();
  // The tccd addresses (host:port) NewClient, client() and CheckFinal dial
  // from now on, instead of the one tccd's port (a cluster's nodes).
  void SetClientAddresses(std::vector<std::string> addresses);

  [[nodiscard]] absl::Status StartTccd();
  void KillTccd();  // SIGKILL + reap
  // SIGTERM; returns its exit status once it ended.
  [[nodiscard]] absl::StatusOr<int> StopTccd(int64_t timeout_ms = 30000);
  [[nodiscard]] absl::Status StartBank(const std::string& name);
  void KillBank(const std::string& name);
  Process* tccd() { return tccd_.get(); }
  // Environment for a bank's next start (e.g. to clear a failpoint).
  void SetBankEnv(const std::string& name,
                  std::map<std::string, std::string> env) {
    options_.bank_env[name] = std::move(env);
  }
  Process* bank(const std::string& name) { return banks_[name].get(); }
  // Environment for tccd's next start (e.g. failpoints, LD_PRELOAD).
  void SetTccdEnv(std::map<std::string, std::string> env) {
    options_.tccd_env = std::move(env);
  }

  // The TLS settings for tccd's next start (e.g. to fix a participant's CA).
  void SetTccdTls(ClusterTls tls) { options_.tls = std::move(tls); }
  // The certificates of a TLS cluster (null without TLS).
  const TestPki* pki() const { return pki_ ? &*pki_ : nullptr; }
  // How the harness dials tccd and the banks: plaintext, or TLS trusting the
  // PKI's CA with the CN=harness client certificate.
  std::shared_ptr<grpc::ChannelCredentials> ClientCredentials() const;

  int tccd_port() const { return tccd_port_; }
  // The config file the harness wrote for tccd's last start (TLS or
  // cluster mode; empty otherwise).
  const std::string& tccd_config_path() const { return tccd_config_path_; }
  // tccd's metrics port (options.metrics), as of its last start.
  int tccd_metrics_port() const { return tccd_metrics_port_; }
  int bank_port(const std::string& name) { return bank_ports_[name]; }
  client::CoordinatorClient& client() { return *client_; }
  std::unique_ptr<client::CoordinatorClient> NewClient(
      int max_attempts = 5, int64_t attempt_timeout_ms = 30000);
  // A channel to tccd's client listener (its credentials), for raw stubs.
  std::shared_ptr<grpc::Channel> TccdChannel();

  // One transfer: debit `amount` from `from_bank`/`from` and credit it to
  // `to_bank`/`to`.
  tcc::v1::SubmitRequest Transfer(const std::string& from_bank, uint32_t from,
                                  const std::string& to_bank, uint32_t to,
                                  int64_t amount);

  [[nodiscard]] absl::StatusOr<tcc::examples::bank::Totals> Totals(
      const std::string& bank);
  [[nodiscard]] absl::StatusOr<tcc::examples::bank::Account> Account(
      const std::string& bank, uint32_t account);

  // Waits (up to `timeout_ms`) until every gid is CONFIRMED or CANCELLED,
  // then checks each is all-confirmed or all-cancelled, and that the banks
  // hold the initial money with nothing frozen or pending. OK, or what broke.
  [[nodiscard]] absl::Status CheckFinal(const std::vector<std::string>& gids,
                                        int64_t timeout_ms);

  int64_t initial_total() const {
    return static_cast<int64_t>(options_.banks.size()) * options_.accounts *
           options_.initial_balance;
  }

 private:
  // Writes tccd's YAML config (the test's own `own_config` text, then TLS,
  // the participants, cluster mode); returns its path.
  [[nodiscard]] absl::StatusOr<std::string> WriteTccdConfig(
      const std::string& own_config);
  // The config's `cluster:` section, and the participants in plaintext.
  std::string ClusterYaml() const;

 public:
  // True when tccd runs on etcd.
  bool on_etcd() const { return !options_.etcd.endpoints.empty(); }
  const ClusterEtcd& etcd() const { return options_.etcd; }

 private:
  ClusterOptions options_;
  std::optional<TestPki> pki_;
  CertFiles tccd_cert_;
  CertFiles harness_cert_;
  std::unique_ptr<Process> tccd_;
  int tccd_port_ = 0;
  std::string tccd_config_path_;
  int tccd_metrics_port_ = 0;
  int tccd_starts_ = 0;
  std::map<std::string, std::unique_ptr<Process>> banks_;
  std::map<std::string, int> bank_ports_;
  // Where each bank serves tcc.examples.bank.Bank (a Python HTTP bank: a
  // port of its own; every other bank: bank_ports_).
  std::map<std::string, int> bank_service_ports_;
  std::map<std::string, std::unique_ptr<tcc::examples::bank::Bank::Stub>>
      bank_stubs_;
  std::unique_ptr<client::CoordinatorClient> client_;
  std::vector<std::string> client_addresses_;  // empty: tccd_port_
};

}  // namespace tcc::harness
