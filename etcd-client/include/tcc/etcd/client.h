// A client of etcd's v3 API over gRPC (DESIGN.md section 14): the KV
// service (Range, Txn with nested Txns), leases (grant, revoke; keep-alive
// is lease_keeper.h), watches (watch_stream.h), the cluster's status, and
// the Auth service's Authenticate. The messages are etcd's own
// (etcdserverpb, generated at build time from the .proto files Debian
// ships): a Txn is built as etcd defines it.
//
// Promises:
// - Endpoints: several members; a call goes to the member in use, and a
//   member that fails at the transport level (UNAVAILABLE,
//   DEADLINE_EXCEEDED) or has no leader is left for the next one, in turn.
//   Reads (Range, Status) are retried on the next members within their
//   deadline. A Txn is never re-sent by the client: its outcome after such
//   an error is unknown (etcd may have committed it), and only the caller,
//   who knows what its compares protect, may send it again (the etcd log
//   does, DESIGN.md section 14 "Unknown outcomes"). The one exception is a
//   refusal etcd makes before proposing anything (an expired auth token):
//   that Txn is sent again after a new token.
// - Range and Txn require a leader (etcd's "hasleader" metadata): a member
//   whose cluster has no quorum refuses them at once (UNAVAILABLE, "no
//   leader") instead of holding them until the deadline.
// - The leader: with leader_check_ms > 0 and several endpoints, a thread of
//   the client asks every member for its status that often and makes the
//   leader's member the one in use (writes then reach the leader without a
//   follower forwarding them and waiting to apply them itself). A failover
//   moves on as above; the next check comes back to the leader, unless the
//   client moved on while the check asked.
// - Deadlines: every call has one (its own, or options.call_timeout_ms).
// - TLS: the members' certificates are checked against tls.ca_file; with
//   cert_file and key_file the client presents its own (mutual TLS).
// - Auth: with a user, the client authenticates (Auth.Authenticate) before
//   its first call and sends the token with every call; a call refused for
//   an invalid or expired token authenticates again and is sent again, once.
// - Errors are etcd's gRPC statuses as absl::Status (same code, etcd's
//   message), prefixed with the member's address.
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tcc/tls/credentials.h"

namespace tcc::etcd {

struct ClientOptions {
  // host:port of each member (at least one).
  std::vector<std::string> endpoints;
  // TLS to the members (https client URLs). Off: plaintext.
  bool tls = false;
  tls::ChannelTlsFiles tls_files;
  // etcd user and password (both or neither). Empty: no auth.
  std::string user;
  std::string password;
  // The deadline of a call that names none.
  int64_t call_timeout_ms = 5000;
  // gRPC keepalive pings on idle connections; must be above the members'
  // --grpc-keepalive-min-time or they close the connection.
  int64_t grpc_keepalive_time_ms = 10000;
  // > 0: how often the client looks for etcd's leader and uses its member
  // (see the header comment); 0: the members in turn, from the first.
  int64_t leader_check_ms = 0;
  // The largest message the client sends or receives.
  int max_message_bytes = 8 << 20;
  // Where setting errors point to ("cluster.etcd." in tccd).
  std::string config_prefix;
};

// Checks options (endpoints, TLS files, user and password together);
// INVALID_ARGUMENT naming the setting (`config_prefix` + its name).
[[nodiscard]] absl::Status ValidateClientOptions(const ClientOptions& options);

// How a caller sends one call again (tccd's rule: wal/src/etcd/
// send_deadlines.h): each send at most `attempt_ms`, sent again when it
// waited that out (etcd never answers a call that a follower forwarded to a
// leader that then died), for at most `total_ms`. 0: one send with
// ClientOptions::call_timeout_ms.
struct SendTimeouts {
  int64_t attempt_ms = 0;
  int64_t total_ms = 0;
};

// True for a status etcd answers when it may have applied the request
// anyway, or never received it (the outcome is unknown): UNAVAILABLE,
// DEADLINE_EXCEEDED, CANCELLED, UNKNOWN, INTERNAL, ABORTED.
bool IsUnknownOutcome(const absl::Status& status);
// True for etcd's "database space exceeded" (its quota alarm is on).
bool IsNoSpace(const absl::Status& status);
// True for a Txn etcd refused for its size: too many operations, a request
// too large (for --max-txn-ops or --max-request-bytes, or gRPC's limit on
// what this client sends or etcd receives). Nothing of it was applied. An
// answer larger than the client's max_message_bytes is not this: etcd
// applied the Txn, and Txn says UNKNOWN (an unknown outcome).
bool IsTooLarge(const absl::Status& status);
// True for an answer larger than the client's max_message_bytes, which the
// client refused (etcd did the call, and is reachable): RESOURCE_EXHAUSTED
// from a Range, which may ask for less (a smaller limit); UNKNOWN from a Txn
// (an unknown outcome).
bool IsAnswerTooLarge(const absl::Status& status);
// True for "required revision has been compacted".
bool IsCompacted(const absl::Status& status);

class Client {
 public:
  // Makes channels to every endpoint (no call is made yet: a cluster that is
  // down is found by the first call). INVALID_ARGUMENT for bad options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Connect(
      ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Linearizable unless the request says serializable. Retried on the next
  // members within the deadline. `timeout_ms` 0: options.call_timeout_ms.
  [[nodiscard]] absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request, int64_t timeout_ms = 0);

  // Sent once (see the header comment).
  [[nodiscard]] absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request, int64_t timeout_ms = 0);

  [[nodiscard]] absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(
      int64_t ttl_seconds, int64_t timeout_ms = 0);
  [[nodiscard]] absl::Status LeaseRevoke(int64_t lease_id,
                                         int64_t timeout_ms = 0);
  // The lease's remaining TTL (-1 when it has expired or never existed).
  [[nodiscard]] absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse>
  LeaseTimeToLive(int64_t lease_id, int64_t timeout_ms = 0);

  // The member in use's status (its header carries the cluster_id and the
  // current revision; `errors` its alarms, e.g. NOSPACE).
  [[nodiscard]] absl::StatusOr<etcdserverpb::StatusResponse> Status(
      int64_t timeout_ms = 0);
  // Asks every member for its status (each at most `timeout_ms`) and makes
  // the leader's member, as the answer with the highest raft term names
  // it, the one in use. Its index in options().endpoints; UNAVAILABLE when
  // no member answering knows a leader that answered.
  [[nodiscard]] absl::StatusOr<size_t> UseLeader(int64_t timeout_ms);
  // The cluster's alarms (NOSPACE when it is out of space).
  [[nodiscard]] absl::StatusOr<etcdserverpb::AlarmResponse> Alarms(
      int64_t timeout_ms = 0);

  // For the streams (lease_keeper.h, watch_stream.h): the member in use, a
  // context carrying the auth token, and the report of a failed stream
  // (moves on to the next member).
  struct StreamTarget {
    size_t member = 0;
    std::shared_ptr<grpc::Channel> channel;
    std::string endpoint;
  };
  StreamTarget CurrentTarget() const;
  // Adds the auth token (authenticating first if needed) to `context`;
  // `token`, when given, gets it (for InvalidateToken).
  [[nodiscard]] absl::Status PrepareContext(grpc::ClientContext& context,
                                            std::string* token = nullptr);
  void MemberFailed(size_t member);
  // The token was refused: the next PrepareContext authenticates again.
  void InvalidateToken(const std::string& token);

  const ClientOptions& options() const { return options_; }
  // Calls made so far that reached a member (for the benchmark's counts).
  uint64_t txns_sent() const { return txns_sent_.load(); }

 private:
  // One member's channel and stubs. Replaced whole (never changed) when the
  // channel has failed for a while: a gRPC channel to a member that was
  // restarted can stay failing ("tcp handshaker shutdown") while the member
  // serves others.
  struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Maintenance::Stub> maintenance;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };
  struct Member {
    std::string endpoint;
    std::shared_ptr<const Conn> conn;  // guarded by conns_mu_
    // Since when its calls fail for the transport (0: they don't); guarded
    // by conns_mu_.
    int64_t failing_since_ms = 0;
    int64_t rebuilt_at_ms = 0;  // guarded by conns_mu_
  };
  explicit Client(ClientOptions options);
  absl::Status Init();
  std::shared_ptr<const Conn> MakeConn(const std::string& endpoint) const;
  std::shared_ptr<const Conn> ConnOf(size_t member) const;
  // A call on `member` ended with `s`: a transport failure that lasts
  // rebuilds its channel (see Conn).
  void NoteCall(size_t member, const absl::Status& s);

  // Runs `call(member, context)` on the member in use; on a transport
  // failure moves on to the next member and, when `retry` (reads), calls
  // again there until the deadline. An invalid token authenticates again
  // and calls again once, in any case.
  template <typename Call>
  absl::Status Run(int64_t timeout_ms, bool retry, const Call& call);
  absl::Status Authenticate(const Conn& conn, const std::string& endpoint,
                            int64_t deadline_ms, std::string& token_out);
  std::string Token();
  // The leader thread (options.leader_check_ms): UseLeader, then waits.
  void LeaderLoop();

  const ClientOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;  // set by Init
  mutable std::mutex conns_mu_;
  std::vector<Member> members_;  // its size is fixed by Init
  std::atomic<size_t> current_{0};
  std::atomic<uint64_t> txns_sent_{0};
  mutable std::mutex token_mu_;
  std::string token_;  // empty: none yet (or no auth)
  std::mutex leader_mu_;
  std::condition_variable leader_cv_;
  bool stopping_ = false;  // guarded by leader_mu_
  std::thread leader_thread_;
};

}  // namespace tcc::etcd
