#include "tcc/etcd/client.h"

#include <grpc/support/time.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tcc/etcd/boot_clock.h"

namespace tcc::etcd {
namespace {

gpr_timespec DeadlineIn(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

bool Passed(gpr_timespec deadline) {
  return gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0;
}

int64_t MsLeft(gpr_timespec deadline) {
  gpr_timespec left = gpr_time_sub(deadline, gpr_now(GPR_CLOCK_MONOTONIC));
  return left.tv_sec * 1000 + left.tv_nsec / 1000000;
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& endpoint) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("etcd ", endpoint, ": ", s.error_message()));
}

// A member that cannot serve now: the transport failed, or it has no leader
// (it is cut off from the majority). Another member may serve.
bool MemberUnusable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

bool IsInvalidToken(const absl::Status& s) {
  return absl::IsUnauthenticated(s) &&
         absl::StrContains(s.message(), "invalid auth token");
}

// A member without a leader (its cluster lost its quorum, or it is cut off
// from the others) answers at once with UNAVAILABLE "etcdserver: no leader"
// instead of holding the call until its deadline: the client moves on to
// the next member, and the caller hears of the outage in milliseconds, not
// seconds. etcd refuses such a call before proposing anything.
void RequireLeader(grpc::ClientContext& context) {
  context.AddMetadata("hasleader", "true");
}

}  // namespace

bool IsUnknownOutcome(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

bool IsNoSpace(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         absl::StrContains(s.message(), "database space exceeded");
}

bool IsAnswerTooLarge(const absl::Status& s) {
  // gRPC's own check of a message this client received ("Received ...",
  // from the C++ core; etcd's server, in Go, says "grpc: received message
  // larger than max" of a request it refused unread); UNKNOWN is how Txn
  // passes it on.
  return (absl::IsResourceExhausted(s) || absl::IsUnknown(s)) &&
         absl::StrContains(s.message(), "Received message larger than max");
}

bool IsTooLarge(const absl::Status& s) {
  return (absl::IsInvalidArgument(s) &&
          (absl::StrContains(s.message(), "too many operations") ||
           absl::StrContains(s.message(), "request is too large"))) ||
         (absl::IsResourceExhausted(s) && !IsAnswerTooLarge(s) &&
          absl::StrContains(s.message(), "larger than max"));
}

bool IsCompacted(const absl::Status& s) {
  return absl::IsOutOfRange(s) &&
         absl::StrContains(s.message(), "has been compacted");
}

absl::Status ValidateClientOptions(const ClientOptions& o) {
  const std::string& p = o.config_prefix;
  if (o.endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, "endpoints: at least one etcd member (host:port)"));
  }
  for (const std::string& e : o.endpoints) {
    std::vector<std::string> parts = absl::StrSplit(e, ':');
    if (e.empty() || absl::StrContains(e, "://") || parts.size() < 2 ||
        parts.back().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, "endpoints: '", e,
                       "' is not host:port (no scheme: TLS is ", p, "tls)"));
    }
  }
  if (o.user.empty() != o.password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, o.user.empty() ? "user" : "password",
                     ": user and password go together"));
  }
  if (!o.tls &&
      (!o.tls_files.ca_file.empty() || !o.tls_files.cert_file.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, "tls: certificate files are set but TLS is off"));
  }
  if (o.call_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, "call_timeout_ms must be positive"));
  }
  if (o.leader_check_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, "leader_check_ms must not be negative"));
  }
  return absl::OkStatus();
}

Client::Client(ClientOptions options) : options_(std::move(options)) {}

Client::~Client() {
  {
    std::lock_guard<std::mutex> lock(leader_mu_);
    stopping_ = true;
  }
  leader_cv_.notify_all();
  if (leader_thread_.joinable()) leader_thread_.join();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  std::unique_ptr<Client> client(new Client(std::move(options)));
  if (absl::Status s = client->Init(); !s.ok()) return s;
  return client;
}

absl::Status Client::Init() {
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (options_.tls) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls =
        tls::ChannelCredentials(options_.tls_files,
                                options_.config_prefix + "tls.");
    if (!tls.ok()) return tls.status();
    creds = *std::move(tls);
  }
  creds_ = std::move(creds);
  for (const std::string& endpoint : options_.endpoints) {
    Member m;
    m.endpoint = endpoint;
    m.conn = MakeConn(endpoint);
    members_.push_back(std::move(m));
  }
  if (options_.leader_check_ms > 0 && members_.size() > 1) {
    leader_thread_ = std::thread([this] { LeaderLoop(); });
  }
  return absl::OkStatus();
}

void Client::LeaderLoop() {
  const int64_t every = options_.leader_check_ms;
  std::unique_lock<std::mutex> lock(leader_mu_);
  while (!stopping_) {
    lock.unlock();
    // A member that does not answer within the period is skipped this time.
    (void)UseLeader(std::min<int64_t>(every, options_.call_timeout_ms));
    lock.lock();
    leader_cv_.wait_for(lock, std::chrono::milliseconds(every),
                        [this] { return stopping_; });
  }
}

absl::StatusOr<size_t> Client::UseLeader(int64_t timeout_ms) {
  if (timeout_ms <= 0) timeout_ms = options_.call_timeout_ms;
  const gpr_timespec deadline = DeadlineIn(timeout_ms);
  // A failover while the members are asked wins over their (older) answers.
  size_t in_use = current_.load();
  // Asked at once, each on its own thread of gRPC's: a member that hangs
  // costs the period, not the period times the members.
  struct Ask {
    std::shared_ptr<const Conn> conn;  // kept while its call is out
    grpc::ClientContext context;
    etcdserverpb::StatusResponse response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Ask>> asks;
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;
  // With auth, the token as every call gets it (newer etcd checks it on
  // Status too): authenticated first if there is none yet.
  std::string token;
  for (size_t i = 0; i < members_.size(); ++i) {
    auto ask = std::make_unique<Ask>();
    ask->context.set_deadline(deadline);
    if (absl::Status s = PrepareContext(ask->context, &token); !s.ok()) {
      return s;
    }
    asks.push_back(std::move(ask));
  }
  etcdserverpb::StatusRequest request;
  for (size_t i = 0; i < members_.size(); ++i) {
    Ask* ask = asks[i].get();
    {
      std::lock_guard<std::mutex> lock(mu);
      ++pending;
    }
    ask->conn = ConnOf(i);
    ask->conn->maintenance->async()->Status(
        &ask->context, &request, &ask->response,
        [ask, &mu, &cv, &pending](grpc::Status status) {
          std::lock_guard<std::mutex> lock(mu);
          ask->status = std::move(status);
          if (--pending == 0) cv.notify_all();
        });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });  // each has the deadline
  }
  // The leader as the answer with the highest raft term names it.
  const etcdserverpb::StatusResponse* newest = nullptr;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!asks[i]->status.ok()) {
      if (IsInvalidToken(FromGrpc(asks[i]->status, members_[i].endpoint))) {
        InvalidateToken(token);  // the next check authenticates again
      }
      continue;
    }
    const etcdserverpb::StatusResponse& r = asks[i]->response;
    if (r.leader() != 0 &&
        (newest == nullptr || r.raftterm() > newest->raftterm())) {
      newest = &r;
    }
  }
  if (newest != nullptr) {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (asks[i]->status.ok() &&
          asks[i]->response.header().member_id() == newest->leader()) {
        if (!current_.compare_exchange_strong(in_use, i) && in_use != i) {
          return absl::UnavailableError(
              "etcd: the client moved to another member while it asked "
              "which one leads");
        }
        return i;
      }
    }
  }
  return absl::UnavailableError(
      "etcd: no member named a leader that answered its status");
}

std::shared_ptr<const Client::Conn> Client::MakeConn(
    const std::string& endpoint) const {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Also the least time a connection attempt is given.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(options_.grpc_keepalive_time_ms));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  // One connection per member and client (not shared with other clients
  // of the process), so that a member's failure is seen per client.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto conn = std::make_shared<Conn>();
  conn->channel = grpc::CreateCustomChannel(endpoint, creds_, args);
  conn->kv = etcdserverpb::KV::NewStub(conn->channel);
  conn->lease = etcdserverpb::Lease::NewStub(conn->channel);
  conn->maintenance = etcdserverpb::Maintenance::NewStub(conn->channel);
  conn->auth = etcdserverpb::Auth::NewStub(conn->channel);
  return conn;
}

std::shared_ptr<const Client::Conn> Client::ConnOf(size_t member) const {
  std::lock_guard<std::mutex> lock(conns_mu_);
  return members_[member].conn;
}

void Client::NoteCall(size_t member, const absl::Status& s) {
  // How long a member's calls may fail for the transport before its
  // channel is made again (and no sooner again after that).
  constexpr int64_t kRebuildAfterMs = 3000;
  const bool failed = MemberUnusable(s);
  std::lock_guard<std::mutex> lock(conns_mu_);
  Member& m = members_[member];
  if (!failed) {
    m.failing_since_ms = 0;
    return;
  }
  const int64_t now = SystemBootClock::Default().NowMs();
  if (m.failing_since_ms == 0) {
    m.failing_since_ms = now;
    return;
  }
  if (now - m.failing_since_ms < kRebuildAfterMs ||
      now - m.rebuilt_at_ms < kRebuildAfterMs) {
    return;
  }
  m.conn = MakeConn(m.endpoint);  // calls in flight keep the old one
  m.rebuilt_at_ms = now;
  m.failing_since_ms = now;
}

std::string Client::Token() {
  std::lock_guard<std::mutex> lock(token_mu_);
  return token_;
}

void Client::InvalidateToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(token_mu_);
  if (token_ == token) token_.clear();
}

absl::Status Client::Authenticate(const Conn& conn, const std::string& endpoint,
                                  int64_t deadline_ms, std::string& token_out) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(deadline_ms));
  etcdserverpb::AuthenticateRequest request;
  request.set_name(options_.user);
  request.set_password(options_.password);
  etcdserverpb::AuthenticateResponse response;
  absl::Status s =
      FromGrpc(conn.auth->Authenticate(&context, request, &response), endpoint);
  if (!s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat("authenticating as ", options_.user, ": ", s.message()));
  }
  std::lock_guard<std::mutex> lock(token_mu_);
  token_ = response.token();
  token_out = token_;
  return absl::OkStatus();
}

absl::Status Client::PrepareContext(grpc::ClientContext& context,
                                    std::string* token_out) {
  if (options_.user.empty()) return absl::OkStatus();
  std::string token = Token();
  if (token.empty()) {
    const size_t i = current_.load() % members_.size();
    if (absl::Status s = Authenticate(*ConnOf(i), members_[i].endpoint,
                                      options_.call_timeout_ms, token);
        !s.ok()) {
      NoteCall(i, s);
      if (MemberUnusable(s)) MemberFailed(i);
      return s;
    }
  }
  context.AddMetadata("token", token);
  if (token_out != nullptr) *token_out = token;
  return absl::OkStatus();
}

void Client::MemberFailed(size_t member) {
  // A stream's failure counts as a failing call too.
  NoteCall(member, absl::UnavailableError("a call or stream failed"));
  size_t expected = member;
  // Only the first to see this member fail moves on (others may have moved
  // already).
  current_.compare_exchange_strong(expected, (member + 1) % members_.size());
}

Client::StreamTarget Client::CurrentTarget() const {
  const size_t i = current_.load() % members_.size();
  return StreamTarget{i, ConnOf(i)->channel, members_[i].endpoint};
}

template <typename Call>
absl::Status Client::Run(int64_t timeout_ms, bool retry, const Call& call) {
  if (timeout_ms <= 0) timeout_ms = options_.call_timeout_ms;
  const gpr_timespec deadline = DeadlineIn(timeout_ms);
  bool reauthenticated = false;
  size_t tried = 0;
  absl::Status last;
  while (true) {
    const size_t i = current_.load() % members_.size();
    const std::shared_ptr<const Conn> conn = ConnOf(i);
    const std::string& endpoint = members_[i].endpoint;
    grpc::ClientContext context;
    context.set_deadline(deadline);
    std::string token;
    if (!options_.user.empty()) {
      token = Token();
      if (token.empty()) {
        last = Authenticate(*conn, endpoint,
                            std::max<int64_t>(1, MsLeft(deadline)), token);
      }
      if (last.ok() || !token.empty()) context.AddMetadata("token", token);
    }
    if (last.ok()) last = FromGrpc(call(*conn, context), endpoint);
    NoteCall(i, last);
    if (last.ok()) return last;
    if (IsInvalidToken(last) && !reauthenticated) {
      // Refused before anything was proposed: safe to send again.
      InvalidateToken(token);
      reauthenticated = true;
      last = absl::OkStatus();
      continue;
    }
    if (!MemberUnusable(last)) return last;
    MemberFailed(i);
    if (!retry || ++tried >= 3 * members_.size() || Passed(deadline)) {
      return last;
    }
    last = absl::OkStatus();
  }
}

absl::StatusOr<etcdserverpb::RangeResponse> Client::Range(
    const etcdserverpb::RangeRequest& request, int64_t timeout_ms) {
  etcdserverpb::RangeResponse response;
  absl::Status s = Run(timeout_ms, /*retry=*/true,
                       [&](const Conn& m, grpc::ClientContext& c) {
                         response.Clear();
                         RequireLeader(c);
                         return m.kv->Range(&c, request, &response);
                       });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> Client::Txn(
    const etcdserverpb::TxnRequest& request, int64_t timeout_ms) {
  etcdserverpb::TxnResponse response;
  absl::Status s = Run(timeout_ms, /*retry=*/false,
                       [&](const Conn& m, grpc::ClientContext& c) {
                         response.Clear();
                         RequireLeader(c);
                         txns_sent_.fetch_add(1);
                         return m.kv->Txn(&c, request, &response);
                       });
  if (absl::IsResourceExhausted(s) && IsAnswerTooLarge(s)) {
    // etcd applied the Txn (or refused its compares) and answered; this
    // client would not take the answer. Which of the two is unknown.
    return absl::UnknownError(absl::StrCat(
        s.message(),
        ": etcd's answer is larger than the client's "
        "max_message_bytes (",
        options_.max_message_bytes,
        "), the Txn's outcome is unknown (it was applied if its compares "
        "held)"));
  }
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> Client::LeaseGrant(
    int64_t ttl_seconds, int64_t timeout_ms) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  // Not retried: a grant whose answer was lost leaves a lease nobody keeps
  // alive, which expires by itself.
  absl::Status s = Run(timeout_ms, /*retry=*/false,
                       [&](const Conn& m, grpc::ClientContext& c) {
                         response.Clear();
                         return m.lease->LeaseGrant(&c, request, &response);
                       });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd lease grant: ", response.error()));
  }
  return response;
}

absl::Status Client::LeaseRevoke(int64_t lease_id, int64_t timeout_ms) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  return Run(timeout_ms, /*retry=*/true,
             [&](const Conn& m, grpc::ClientContext& c) {
               return m.lease->LeaseRevoke(&c, request, &response);
             });
}

absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> Client::LeaseTimeToLive(
    int64_t lease_id, int64_t timeout_ms) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseTimeToLiveResponse response;
  absl::Status s = Run(
      timeout_ms, /*retry=*/true, [&](const Conn& m, grpc::ClientContext& c) {
        response.Clear();
        return m.lease->LeaseTimeToLive(&c, request, &response);
      });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::StatusResponse> Client::Status(
    int64_t timeout_ms) {
  etcdserverpb::StatusRequest request;
  etcdserverpb::StatusResponse response;
  absl::Status s = Run(timeout_ms, /*retry=*/true,
                       [&](const Conn& m, grpc::ClientContext& c) {
                         response.Clear();
                         return m.maintenance->Status(&c, request, &response);
                       });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::AlarmResponse> Client::Alarms(int64_t timeout_ms) {
  etcdserverpb::AlarmRequest request;
  request.set_action(etcdserverpb::AlarmRequest::GET);
  etcdserverpb::AlarmResponse response;
  absl::Status s = Run(timeout_ms, /*retry=*/true,
                       [&](const Conn& m, grpc::ClientContext& c) {
                         response.Clear();
                         return m.maintenance->Alarm(&c, request, &response);
                       });
  if (!s.ok()) return s;
  return response;
}

}  // namespace tcc::etcd
