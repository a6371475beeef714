// tccd's configuration: what `config/tccd.yaml` holds and the flags that
// override it. Every key is documented in config/tccd.yaml itself; this header
// is the typed form.
//
// Loading is strict: an unknown key, a value of the wrong type or out of its
// range stops the start with INVALID_ARGUMENT naming the key (e.g.
// "participants.bank-a.timeouts.try.max_ms: must be >= min_ms (50)").
//
// Pure data and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tcc::server {

// Bounds for the adaptive per-call timeout of one phase (DESIGN.md section 8:
// about 2x the participant's observed p99, clamped to these).
struct TimeoutBounds {
  int64_t min_ms = 250;
  int64_t max_ms = 5000;
  int64_t initial_ms = 1000;  // before any latency was observed
};

struct ParticipantConfig {
  std::string name;
  // How tccd reaches it: "grpc" (tcc.v1.Participant at `address`) or "http"
  // (POST <url>/try, /confirm, /cancel, /query with JSON bodies, DESIGN.md
  // section 15).
  std::string protocol = "grpc";
  std::string address;  // grpc: host:port
  // http: http://HOST:PORT[/PATH] or https://HOST:PORT[/PATH] (https: TLS,
  // with the tls_* settings below).
  std::string url;
  // http: keep-alive connections to it, which is also the most calls in
  // flight; 0: participant_calls.http_connections.
  uint32_t connections = 0;
  // http: it serves POST <url>/batch (tcc.v1.BatchRequest's JSON, as gRPC's
  // Batch; README "Writing a participant in any language"), so calls made
  // while rpcs_in_flight requests are in flight leave together, as for
  // gRPC. Off: one request per call, up to `connections` in flight.
  bool batch = false;
  TimeoutBounds try_timeout;
  TimeoutBounds confirm_timeout;
  TimeoutBounds cancel_timeout;
  TimeoutBounds query_timeout;
  // gRPC calls (http with batch: requests) in flight to it; 0:
  // participant_calls.rpcs_in_flight. More
  // for a participant whose calls can take long (a slow call holds the
  // calls behind it only in its own lane).
  uint32_t rpcs_in_flight = 0;
  // TLS to the participant: the participant's certificate must chain to
  // tls_ca_file (empty: the system roots) and name tls_server_name (empty: the
  // address's host). Mutual TLS when cert and key are set. Off: plaintext.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
};

// TLS on one of tccd's listeners.
//   plaintext  no TLS. Allowed without saying so only on a loopback address
//              (127.0.0.0/8, ::1, localhost); logged as a warning at start.
//   tls        server certificate only.
//   mtls       clients must present a certificate chaining to client_ca_file;
//              its identity names the client (rate limits, admin identities).
// Empty mode: plaintext on loopback, refused elsewhere.
struct ListenerTlsConfig {
  std::string mode;  // "", "plaintext", "tls", "mtls"
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

// Who may call tcc.v1.Admin (DESIGN.md section 10). With neither set, every
// admin call is refused (UNAUTHENTICATED).
struct AdminConfig {
  // Bearer tokens: a file of `NAME TOKEN` lines (NAME is the identity logged
  // and recorded as an approval's issuer; '#' starts a comment). Read at
  // start; the file must not be readable by group or others.
  std::string token_file;
  // TLS client-certificate identities (subject CN or a DNS/URI SAN) allowed
  // as admins; needs the admin listener in mtls mode.
  std::vector<std::string> client_identities;
  // TLS of the admin listener when admin_listen is set (else `tls` applies).
  ListenerTlsConfig tls;
  // Validity of an approval when IssueApproval gives none, and the most.
  int64_t approval_ttl_ms = 15 * 60 * 1000;
  int64_t max_approval_ttl_ms = 24LL * 3600 * 1000;
};

struct RetryConfig {
  int64_t base_ms = 20;   // first backoff (full jitter: uniform [0, b])
  int64_t cap_ms = 5000;  // backoff never above this
  int64_t stuck_after_ms = 10 * 60 * 1000;  // phase-2 budget before STUCK
  int64_t stuck_retry_ms = 60 * 1000;       // retry period once STUCK
};

struct CircuitBreakerConfig {
  uint32_t failure_threshold = 5;  // consecutive failures that open it
  int64_t open_ms = 2000;          // open this long before a probe
};

// How calls travel to each participant (every participant alike). At most
// `rpcs_in_flight` gRPC calls are in flight to one participant; calls made
// meanwhile wait and leave together, when one of those ends, as one Batch
// (at most `batch_max_calls` calls and `batch_max_bytes` bytes): batches form
// only under load, no call waits for a batch to fill. A participant that
// answers Batch with UNIMPLEMENTED gets single calls, at most
// `max_outstanding` in flight. batch_max_calls 1: no batching, single calls
// up to `max_outstanding`.
struct ParticipantCallsConfig {
  uint32_t rpcs_in_flight = 1;
  uint32_t batch_max_calls = 1024;
  uint64_t batch_max_bytes = 1024 * 1024;
  uint32_t max_outstanding = 512;
  // HTTP participants without batch (no batches): keep-alive connections to
  // each, the most calls in flight to it (participants.NAME.connections
  // overrides). With batch, the fields above apply (the bytes: JSON's).
  uint32_t http_connections = 32;
};

struct TransactionDefaults {
  int64_t try_timeout_ms = 10 * 1000;  // when a Submit gives none
  int64_t max_try_timeout_ms = 10 * 60 * 1000;
  int64_t approval_timeout_ms = 5 * 60 * 1000;
  int64_t max_approval_timeout_ms = 24LL * 3600 * 1000;
  // A created_at_ms further ahead of tccd's clock is refused.
  int64_t max_clock_skew_ms = 5 * 60 * 1000;
};

struct LimitsConfig {
  uint32_t max_branches = 64;
  uint64_t max_payload_bytes = 64 * 1024;    // one branch
  uint64_t max_request_bytes = 1024 * 1024;  // one gRPC message
  uint64_t max_in_flight = 100000;           // unfinished transactions
  // Bytes of transaction state in memory (runtime::MemoryBudget).
  uint64_t max_in_flight_bytes = 512ull << 20;
  // Transactions found unfinished at start that are resumed and undecided
  // at once (the rest wait their turn; requests may load any at any time).
  uint32_t recovery_window = 4096;
  uint32_t max_watch_streams = 1000;
  uint32_t max_list_page = 1000;
  // Coordinator calls per second per client identity (mTLS certificate
  // identity, else the peer's IP address): a token bucket of this rate and
  // `client_burst` capacity. 0: no limit. Excess: RESOURCE_EXHAUSTED.
  uint32_t client_requests_per_s = 0;
  uint32_t client_burst = 0;  // 0: one second's worth
};

struct RetentionConfig {
  int64_t full_record_ms = 24LL * 3600 * 1000;
  int64_t compact_entry_ms = 7LL * 24 * 3600 * 1000;
  uint64_t max_bytes = 0;  // 0: no budget
  int64_t run_every_ms = 60 * 1000;
};

// Cluster mode (DESIGN.md section 14): the WAL is etcd, shared by the
// cluster's nodes. Off: one process on its RocksDB WAL, nothing changes.
struct ClusterEtcdConfig {
  std::vector<std::string> endpoints;  // host:port of each member
  bool tls = false;                    // https to the members
  std::string ca_file;                 // members' CA (empty: system roots)
  std::string cert_file;               // with key_file: mutual TLS
  std::string key_file;
  std::string user;      // etcd auth (with password)
  std::string password;  // or password_file
  std::string password_file;
  int64_t call_timeout_ms = 5000;
  // The first send of a group commit's Txn (or of a read Txn of the etcd
  // log) waits this long for etcd's answer; from the second send that waits
  // it out on, each next one waits twice as long, up to call_timeout_ms:
  // etcd never answers a Txn whose proposal was lost with a leader that
  // died.
  int64_t txn_attempt_timeout_ms = 1000;
  // How often the node asks the members which is etcd's leader and sends
  // its calls there (etcd::ClientOptions::leader_check_ms); 0: off.
  int64_t leader_check_ms = 1000;
  // etcd's --max-txn-ops and --max-request-bytes (the group commit's
  // limits; must not exceed what the members run with).
  uint32_t max_txn_ops = 1024;
  uint64_t max_request_bytes = 4 << 20;
};

// How a node dials the others to forward calls (DESIGN.md section 14,
// "Routing"). tls off: plaintext, allowed only when every listen address
// is loopback (as for the listeners). On: the nodes' certificates must
// chain to ca_file and name server_name (empty: the advertised host); with
// cert_file and key_file the node presents its own (for nodes in mtls mode).
struct ClusterPeersConfig {
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  // The TLS client identities (subject CN or a DNS/URI SAN) of the nodes'
  // certificates: a call from one is a call forwarded by a node, whose
  // caller its limits (client_requests_per_s) admitted already, so it is
  // not limited again here under the node's identity. Needs the client
  // listener in mtls mode.
  std::vector<std::string> identities;
};

struct ClusterConfig {
  bool enabled = false;
  std::string node_id;            // unique per node; [A-Za-z0-9._:-]
  std::string advertise_address;  // host:port other nodes and clients dial
  ClusterEtcdConfig etcd;
  ClusterPeersConfig peers;
  std::string key_prefix = "/tccd/";  // ends with '/'
  // Used only when the cluster is created (--init-cluster); a different
  // value at start is refused, naming the key.
  uint32_t shards = 64;
  int64_t lease_ttl_ms = 5000;     // whole seconds, at least 2 s
  int64_t lease_margin_ms = 1000;  // trust ends this long before the TTL
  int64_t takeover_margin_ms = 2000;
  int64_t dedup_window_ms = 3600 * 1000;  // compact entries in etcd
  int64_t min_dedup_window_ms = 10 * 60 * 1000;
  // A buffered append (a call sent, its answer) is held at most this long
  // for its transaction's next etcd write (wal::EtcdLogOptions); 0: each is
  // written on its own.
  int64_t hold_buffered_ms = 500;
};

struct LogConfig {
  std::string level = "info";   // trace, debug, info, warn, error
  std::string format = "text";  // text or json
};

// The web console (coordinator/src/console): read-only pages over the
// Admin API, with its credentials. TLS is required off loopback (the
// session cookie carries an admin token): mode tls or mtls; in mtls a
// browser's client certificate listed in admin.client_identities signs in
// without a token.
struct ConsoleConfig {
  ListenerTlsConfig tls;
  uint32_t max_connections = 64;
};

struct Config {
  std::string listen = "127.0.0.1:7070";  // tcc.v1.Coordinator
  std::string admin_listen;               // tcc.v1.Admin; empty: on `listen`
  std::string metrics_listen = "127.0.0.1:9464";  // /metrics; empty: off
  std::string console_listen;  // the web console, host:port; empty: off
  ConsoleConfig console;
  std::string data_dir = "./data";
  bool allow_direct_targets = false;  // branches naming "host:port" directly
  bool sync_writes = true;            // only true is accepted (the key is kept)
  uint32_t shards = 0;                // 0: one per core
  ListenerTlsConfig tls;              // the client listener (`listen`)
  AdminConfig admin;
  std::map<std::string, ParticipantConfig> participants;
  RetryConfig retry;
  CircuitBreakerConfig circuit_breaker;
  ParticipantCallsConfig participant_calls;
  TransactionDefaults transactions;
  LimitsConfig limits;
  RetentionConfig retention;
  LogConfig log;
  ClusterConfig cluster;
};

// Parses YAML text (`source` names it in errors). Missing keys keep their
// defaults; unknown keys and bad values are INVALID_ARGUMENT naming the key.
[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view yaml_text,
                                                 std::string_view source);

// Reads and parses a file; NOT_FOUND if it does not exist.
[[nodiscard]] absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// Checks the `cluster:` section (ValidateConfig calls it): INVALID_ARGUMENT
// naming the key.
[[nodiscard]] absl::Status ValidateClusterConfig(const ClusterConfig& cluster);

// Checks cross-field rules (addresses look like host:port, bounds ordered...).
[[nodiscard]] absl::Status ValidateConfig(const Config& config);

// True for 127.0.0.0/8, ::1 and localhost (host:port or bare host).
bool IsLoopbackAddress(std::string_view address);

// The TLS settings the admin API is served with: `admin.tls` when
// admin_listen is set, else the client listener's `tls`.
const ListenerTlsConfig& EffectiveAdminTls(const Config& config);

// A participant's HTTP base URL, taken apart: http[s]://HOST:PORT[/PATH].
// HOST is a name, an IPv4 address or a bracketed IPv6 address; PORT is
// required; PATH (without a trailing '/') prefixes every call's path.
struct ParticipantUrl {
  bool https = false;
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string path;  // "" or "/a/b"
};
// INVALID_ARGUMENT naming `key` when `url` is not of that form.
[[nodiscard]] absl::StatusOr<ParticipantUrl> ParseParticipantUrl(
    const std::string& key, std::string_view url);

// Applies a `--participant NAME=HOST:PORT` (gRPC) or
// `--participant NAME=http[s]://HOST:PORT[/PATH]` (HTTP) flag value.
[[nodiscard]] absl::Status AddParticipantFlag(Config& config,
                                              std::string_view flag);

}  // namespace tcc::server
