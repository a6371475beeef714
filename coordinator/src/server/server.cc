#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cluster/assignment.h"
#include "cluster/forwarding_router.h"
#include "cluster/node_membership.h"
#include "cluster/shard_manager.h"
#include "console/console_server.h"
#include "rpc/admin_auth.h"
#include "rpc/admin_service.h"
#include "rpc/coordinator_service.h"
#include "rpc/grpc_transport.h"
#include "rpc/http_transport.h"
#include "rpc/participant_client.h"
#include "rpc/participant_router.h"
#include "rpc/rate_limiter.h"
#include "runtime/driver.h"
#include "server/admin_tokens.h"
#include "server/asio_runtime.h"
#include "server/driver_backend.h"
#include "server/instrumented_transport.h"
#include "server/metrics.h"
#include "server/tls.h"
#include "tcc/etcd/client.h"
#include "tcc/rocksdb_env/owner_only_files.h"
#include "tcc/tls/credentials.h"
#include "tcc/wal/etcd_log.h"
#include "tcc/wal/etcd_node.h"
#include "tcc/wal/rocksdb_log.h"

namespace tcc::server {

class Server::Impl {
 public:
  absl::Status Start(const Config& config, const std::string& version);
  absl::Status Stop();
  absl::Status Failure() const;

  Config config_;
  // Before log_: its syncer reports to metrics_ until it is closed.
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  // Cluster mode: the etcd client, the node's membership (its lease) and
  // the etcd log; else the RocksDB log. log_ is whichever it is.
  std::unique_ptr<etcd::Client> etcd_client_;
  std::unique_ptr<cluster::NodeMembership> node_;
  std::unique_ptr<wal::Log> log_;
  wal::RocksDbLog* rocksdb_log_ = nullptr;
  wal::EtcdLog* etcd_log_ = nullptr;
  // The etcd log as the membership hooks see it (they run on the lease
  // keeper's and the rejoin thread): set once it is open, cleared before it
  // closes, used under the lock.
  std::mutex hook_log_mu_;
  wal::EtcdLog* hook_log_ = nullptr;
  // The driver while it runs, for the cluster's lost-shard notices (they
  // come from the log's and the lease's threads).
  std::atomic<runtime::Driver*> live_driver_{nullptr};
  void DropShard(uint32_t shard, const absl::Status& why) {
    if (runtime::Driver* d = live_driver_.load()) d->DropLogShard(shard, why);
  }
  std::unique_ptr<AsioThreads> threads_;
  std::unique_ptr<AsioThreads> scan_thread_;
  std::unique_ptr<SerialExecutor> scan_executor_;
  std::unique_ptr<SystemClockRuntime> clock_;
  std::vector<std::unique_ptr<SerialExecutor>> shards_;
  std::unique_ptr<rpc::ParticipantClient> client_;
  std::unique_ptr<rpc::GrpcTransport> transport_;
  std::unique_ptr<rpc::HttpTransport> http_transport_;  // null: no HTTP ones
  std::unique_ptr<rpc::ParticipantRouter> router_;
  std::unique_ptr<InstrumentedTransport> instrumented_;
  std::unique_ptr<DriverBackend> backend_;
  std::unique_ptr<runtime::Driver> driver_;
  // Cluster mode: which shards this node drives, and where calls for the
  // others go.
  std::unique_ptr<cluster::ShardObserver> shard_observer_;
  std::unique_ptr<cluster::ShardManager> shard_manager_;
  std::unique_ptr<cluster::ForwardingRouter> call_router_;
  std::unique_ptr<rpc::CoordinatorService> coordinator_service_;
  std::unique_ptr<rpc::AdminAuth> admin_auth_;
  std::unique_ptr<rpc::RateLimiter> rate_limiter_;
  std::unique_ptr<rpc::AdminService> admin_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<grpc::Server> admin_server_;
  std::unique_ptr<console::ConsoleServer> console_;
  int port_ = 0;
  int admin_port_ = 0;
  std::atomic<bool> stopped_{false};
  // WalStats': the log's last Stats, and how many times it ran.
  static constexpr uint64_t kEtcdStatsEvery = 8;
  wal::LogStats wal_stats_;
  uint64_t wal_stats_ticks_ = 0;
  absl::Status stopped_failure_;  // Failure() when Stop ran

 private:
  // `local`: the RocksDB log's options, whose sync hooks the etcd log
  // reports its group Txns through (the same metric).
  absl::Status OpenClusterLog(const Config& config,
                              const wal::RocksDbLogOptions& local);
  // Cluster mode, once the driver runs: the shard manager (taking this
  // node's shards before it serves) and the router.
  absl::Status StartShardManager(const Config& config);
  // The Admin API's Cluster and Drain.
  absl::StatusOr<tcc::v1::ClusterResponse> ClusterStatus();
  absl::StatusOr<uint32_t> Drain(const std::string& node_id);
  void ScheduleRetention();
  void ScheduleWalStats();
  void WalStats();
  void ReturnFreedMemory(int64_t memory_bytes);
  int64_t peak_memory_bytes_ = 0;  // since the last trim (timer thread)
  // The allocator's free bytes at their lowest since the last trim, and the
  // WalStats ticks counted (timer thread).
  size_t min_free_bytes_ = SIZE_MAX;
  uint64_t trim_ticks_ = 0;
  int trims_to_follow_ = 0;  // WalStats ticks of follow-up trims
};

namespace {

// RocksDB's warnings and errors (the WAL's, the cluster archive's) in
// tccd's log.
void RocksDbInfoLog(rocksdb_env::InfoLogSeverity severity,
                    std::string_view line) {
  if (severity == rocksdb_env::InfoLogSeverity::kError) {
    spdlog::error("rocksdb: {}", line);
  } else {
    spdlog::warn("rocksdb: {}", line);
  }
}

// How long ago `since_ms` was (ms; 0 when it is 0: none).
int64_t AgeMs(int64_t now_ms, int64_t since_ms) {
  return since_ms == 0 ? 0 : std::max<int64_t>(0, now_ms - since_ms);
}

// 128 random bits, hex: approvals must not be guessable.
std::string NewApprovalId() {
  static std::mutex mu;
  static std::random_device device;
  std::lock_guard<std::mutex> lock(mu);
  std::string id = "apv-";
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&id, absl::Hex(device(), absl::kZeroPad8));
  }
  return id;
}

// The audit log: every admin call, with who made it.
// Caller-supplied text is escaped and cut (rpc::AuditText).
void LogAdminCall(const rpc::AdminAudit& a) {
  using rpc::AuditText;
  if (a.status.ok()) {
    spdlog::info("admin: {} by {} from {}: {} -> OK", a.method,
                 AuditText(a.who), AuditText(a.peer), AuditText(a.target));
  } else {
    spdlog::warn("admin: {} by {} from {}: {} -> {}", a.method,
                 AuditText(a.who), AuditText(a.peer), AuditText(a.target),
                 AuditText(a.status.ToString()));
  }
}

// A secret from a file (its first line), which must be the owner's alone;
// errors name `key`.
absl::StatusOr<std::string> ReadSecretFile(const std::string& key,
                                           const std::string& path) {
  std::error_code ec;
  const auto perms = std::filesystem::status(path, ec).permissions();
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, ": cannot be read: ", ec.message()));
  }
  using std::filesystem::perms;
  if ((perms & (perms::group_all | perms::others_all)) != perms::none) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": ", path, " is readable by group or others; chmod 600 it"));
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, ": no secret on its first line"));
  }
  return line;
}

runtime::DriverOptions DriverOptionsFrom(const Config& c) {
  runtime::DriverOptions o;
  o.core.default_try_timeout_ms = c.transactions.try_timeout_ms;
  o.core.default_approval_timeout_ms = c.transactions.approval_timeout_ms;
  o.core.max_try_timeout_ms = c.transactions.max_try_timeout_ms;
  o.core.max_approval_timeout_ms = c.transactions.max_approval_timeout_ms;
  o.core.max_branches = c.limits.max_branches;
  o.core.max_payload_bytes = c.limits.max_payload_bytes;
  o.backoff.base_ms = c.retry.base_ms;
  o.backoff.cap_ms = c.retry.cap_ms;
  o.backoff.stuck_retry_ms = c.retry.stuck_retry_ms;
  // Phase-2 budget before STUCK, as a number of failures at the cap.
  o.core.stuck_after_failures = static_cast<uint32_t>(std::max<int64_t>(
      1, c.retry.stuck_after_ms / std::max<int64_t>(1, c.retry.cap_ms)));
  o.breaker.failure_threshold = c.circuit_breaker.failure_threshold;
  o.breaker.open_ms = c.circuit_breaker.open_ms;
  o.recovery_window = c.limits.recovery_window;
  o.max_in_flight_bytes = c.limits.max_in_flight_bytes;
  // Per participant and phase: the config's bounds (each participant's
  // default bounds come from participant_defaults).
  for (const auto& [name, p] : c.participants) {
    auto bounds = [](const TimeoutBounds& b) {
      return runtime::TimeoutBounds{b.min_ms, b.max_ms, b.initial_ms};
    };
    o.timeout_overrides[{name, runtime::CallKind::kTry}] =
        bounds(p.try_timeout);
    o.timeout_overrides[{name, runtime::CallKind::kConfirm}] =
        bounds(p.confirm_timeout);
    o.timeout_overrides[{name, runtime::CallKind::kCancel}] =
        bounds(p.cancel_timeout);
    o.timeout_overrides[{name, runtime::CallKind::kQuery}] =
        bounds(p.query_timeout);
  }
  o.max_clock_skew_ms = c.transactions.max_clock_skew_ms;
  o.rng_seed = std::random_device{}();
  // The one definition of a participant a branch may name.
  std::set<std::string> names;
  for (const auto& [name, p] : c.participants) names.insert(name);
  const bool direct = c.allow_direct_targets;
  o.participant_known = [names, direct](const std::string& name) {
    return names.count(name) != 0 ||
           (direct && name.find(':') != std::string::npos);
  };
  return o;
}

// Log lines of every ownership change (shard and epoch) and their metrics.
class ClusterLogObserver final : public cluster::ShardObserver {
 public:
  explicit ClusterLogObserver(CoordinatorMetrics* metrics)
      : metrics_(metrics) {}
  void OnTook(uint32_t shard, uint64_t epoch, const std::string& from,
              int64_t unowned_ms) override {
    spdlog::info(
        "cluster: took shard {} at epoch {} (last owner: {}; unowned for {} "
        "ms); resuming its unfinished transactions",
        shard, epoch, from.empty() ? "none seen" : from, unowned_ms);
    metrics_->ShardChange("takeover");
  }
  void OnHandedOver(uint32_t shard, uint64_t epoch,
                    const std::string& to) override {
    spdlog::info("cluster: handed shard {} (epoch {}) over to {}", shard, epoch,
                 to);
    metrics_->ShardChange("handover");
  }
  void OnCampaignFailed(uint32_t shard, const absl::Status& why) override {
    spdlog::debug("cluster: shard {}: {}", shard, why.ToString());
  }
  void OnReadFailed(const absl::Status& why) override {
    spdlog::warn("cluster: reading the membership: {}", why.ToString());
  }

 private:
  CoordinatorMetrics* metrics_;
};

}  // namespace

absl::Status Server::Impl::Start(const Config& config,
                                 const std::string& version) {
  config_ = config;
  // Nothing in data_dir is for group or others (the WAL holds every
  // payload): created 0700, and a looser one tightened, with a warning.
  if (std::error_code ec =
          rocksdb_env::CreateOwnerOnlyDirectories(config.data_dir);
      ec) {
    const std::string message = absl::StrCat("data_dir ", config.data_dir,
                                             ": cannot create: ", ec.message());
    return ec == std::errc::no_space_on_device
               ? absl::ResourceExhaustedError(message)
               : absl::FailedPreconditionError(message);
  }
  int tightened = 0;
  if (std::error_code ec =
          rocksdb_env::RestrictToOwner(config.data_dir, &tightened);
      ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir ", config.data_dir,
                     ": cannot make it owner-only: ", ec.message()));
  }
  if (tightened > 0) {
    spdlog::warn(
        "data_dir {}: {} files and directories were open to group or "
        "others; made owner-only",
        config.data_dir, tightened);
  }
  wal::RocksDbLogOptions wal_options;
  wal_options.data_dir = (std::filesystem::path(config.data_dir) / "wal");
  wal_options.info_log = RocksDbInfoLog;
  wal_options.retention.full_record_ms = config.retention.full_record_ms;
  wal_options.retention.compact_entry_ms = config.retention.compact_entry_ms;
  wal_options.retention.max_bytes = config.retention.max_bytes;
  std::map<std::string, std::string> tokens;
  if (!config.admin.token_file.empty()) {
    auto loaded = LoadAdminTokens(config.admin.token_file);
    if (!loaded.ok()) return loaded.status();
    tokens = std::move(*loaded);
  }
  // The console's key: it speaks for browsers with verified certificates.
  const std::string console_key =
      config.console_listen.empty() ? "" : NewApprovalId();
  admin_auth_ = std::make_unique<rpc::AdminAuth>(
      tokens, config.admin.client_identities, console_key);
  if (!admin_auth_->configured()) {
    spdlog::warn(
        "no admin credential configured (admin.token_file, "
        "admin.client_identities): every admin call is refused and the "
        "approval gate is off");
  }
  // Made before the WAL opens: its syncer reports each sync.
  metrics_ = std::make_unique<CoordinatorMetrics>();
  {
    std::vector<std::string> names;
    for (const auto& [name, p] : config.participants) names.push_back(name);
    metrics_->ExportParticipants(names);
  }
  wal_options.now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  wal_options.on_sync = [metrics = metrics_.get()](int64_t sync_us,
                                                   uint64_t appends) {
    metrics->WalSync(static_cast<double>(sync_us) / 1e6,
                     static_cast<int64_t>(appends));
  };
  if (config.cluster.enabled) {
    if (absl::Status s = OpenClusterLog(config, wal_options); !s.ok()) {
      return s;
    }
  } else {
    auto log = wal::RocksDbLog::Open(wal_options);
    if (!log.ok()) return log.status();
    rocksdb_log_ = log->get();
    log_ = std::move(*log);
  }

  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  threads_ = std::make_unique<AsioThreads>(cores);
  clock_ = std::make_unique<SystemClockRuntime>();
  const size_t shards = config.shards == 0 ? cores : config.shards;
  std::vector<runtime::Executor*> shard_ptrs;
  for (size_t i = 0; i < shards; ++i) {
    shards_.push_back(std::make_unique<SerialExecutor>(threads_->context()));
    shard_ptrs.push_back(shards_.back().get());
  }

  client_ = std::make_unique<rpc::ParticipantClient>();
  std::map<std::string, rpc::HttpEndpoint> http_endpoints;
  std::set<std::string> http_names;
  for (const auto& [name, p] : config.participants) {
    if (p.protocol == "http") {
      auto url = ParseParticipantUrl(
          absl::StrCat("participants.", name, ".url"), p.url);
      if (!url.ok()) return url.status();
      rpc::HttpEndpoint& e = http_endpoints[name];
      e.tls = url->https;
      e.host = url->host;
      e.port = url->port;
      e.path_prefix = url->path;
      e.max_connections = static_cast<int>(
          p.connections > 0 ? p.connections
                            : config.participant_calls.http_connections);
      e.ca_file = p.tls_ca_file;
      e.server_name = p.tls_server_name;
      e.cert_file = p.tls_cert_file;
      e.key_file = p.tls_key_file;
      e.batch = p.batch;
      e.batch_requests_in_flight = static_cast<int>(
          p.rpcs_in_flight > 0 ? p.rpcs_in_flight
                               : config.participant_calls.rpcs_in_flight);
      http_names.insert(name);
      continue;
    }
    auto security = ParticipantChannelCredentials(p);
    if (!security.ok()) return security.status();
    if (absl::Status s = client_->Add(name, p.address, security->credentials,
                                      security->ssl_target_name_override);
        !s.ok()) {
      return s;
    }
  }
  // Cluster mode: past its lease's trust the node sends no participant call
  // (DESIGN.md section 14). The one rule, asked by the driver as it builds
  // a call and by the transports as a call leaves (after any wait in their
  // queues).
  runtime::SendGate send_gate;
  if (node_ != nullptr) {
    cluster::NodeMembership* node = node_.get();
    send_gate = [node] { return node->Trusted(); };
  }
  if (!http_endpoints.empty()) {
    auto http = rpc::HttpTransport::Create(
        std::move(http_endpoints),
        {.batch_max_calls =
             static_cast<int>(config.participant_calls.batch_max_calls),
         .batch_max_bytes =
             static_cast<int64_t>(config.participant_calls.batch_max_bytes),
         .may_send = send_gate});
    if (!http.ok()) return http.status();
    http_transport_ = std::move(*http);
  }
  std::map<std::string, int> rpcs_in_flight_for;
  for (const auto& [name, p] : config.participants) {
    if (p.rpcs_in_flight > 0 && p.protocol != "http") {
      rpcs_in_flight_for[name] = static_cast<int>(p.rpcs_in_flight);
    }
  }
  transport_ = std::make_unique<rpc::GrpcTransport>(
      *client_,
      [this](std::function<void()> task) {
        boost::asio::post(threads_->context(), std::move(task));
      },
      rpc::GrpcTransport::Options{
          .allow_direct_targets = config.allow_direct_targets,
          .rpcs_in_flight =
              static_cast<int>(config.participant_calls.rpcs_in_flight),
          .rpcs_in_flight_for = std::move(rpcs_in_flight_for),
          .batch_max_calls =
              static_cast<int>(config.participant_calls.batch_max_calls),
          .batch_max_bytes =
              static_cast<int64_t>(config.participant_calls.batch_max_bytes),
          .max_outstanding =
              static_cast<int>(config.participant_calls.max_outstanding),
          .may_send = send_gate});

  if (!config.metrics_listen.empty()) {
    auto endpoint =
        MetricsEndpoint::Start(config.metrics_listen, metrics_->registry());
    if (!endpoint.ok()) return endpoint.status();
    metrics_endpoint_ = std::move(*endpoint);
  }

  router_ = std::make_unique<rpc::ParticipantRouter>(
      *transport_, http_transport_.get(), std::move(http_names));
  instrumented_ =
      std::make_unique<InstrumentedTransport>(*router_, *clock_, *metrics_);
  backend_ = std::make_unique<DriverBackend>(*log_, *clock_, metrics_.get());
  // The recovery scan gets a thread of its own: on a shard's it held that
  // shard (and, with one pool thread per core, a core's share of every
  // shard) for the seconds a large scan takes.
  scan_thread_ = std::make_unique<AsioThreads>(1);
  scan_executor_ = std::make_unique<SerialExecutor>(scan_thread_->context());
  runtime::DriverOptions driver_options = DriverOptionsFrom(config);
  driver_options.scan_executor = scan_executor_.get();
  // Nobody could approve a gated transaction without an admin credential.
  driver_options.approval_gate_enabled = admin_auth_->configured();
  if (node_ != nullptr) {
    driver_options.may_call = [send_gate](const std::string&) {
      return send_gate();
    };
    // The shard manager adopts shards one by one.
    driver_options.adopt_shards_at_start = false;
  }
  driver_ =
      std::make_unique<runtime::Driver>(driver_options, shard_ptrs, *clock_,
                                        *instrumented_, *log_, backend_.get());
  backend_->Attach(driver_.get());
  live_driver_ = driver_.get();
  backend_->SetMaxInFlight(config.limits.max_in_flight);
  if (absl::Status s = driver_->Start(); !s.ok()) {
    // The WAL stopped on a write of the start (the owner epoch): the start
    // fails with that write's own error (no space: RESOURCE_EXHAUSTED).
    if (absl::Status cause = rocksdb_log_ != nullptr
                                 ? rocksdb_log_->failure_cause()
                                 : absl::OkStatus();
        !cause.ok()) {
      return absl::Status(cause.code(),
                          absl::StrCat("starting: ", s.message()));
    }
    return s;
  }
  if (etcd_log_ != nullptr) {
    if (absl::Status s = StartShardManager(config); !s.ok()) return s;
  }

  rpc::CoordinatorServiceOptions svc;
  svc.now_ms = [this] { return clock_->WallMs(); };
  svc.max_list_page = config.limits.max_list_page;
  svc.max_watch_streams = config.limits.max_watch_streams;
  rate_limiter_ = std::make_unique<rpc::RateLimiter>(
      config.limits.client_requests_per_s, config.limits.client_burst,
      [this] { return clock_->MonotonicMs(); });
  svc.rate_limiter = rate_limiter_.get();
  if (config.cluster.enabled) {
    svc.peer_identities = config.cluster.peers.identities;
    if (config.limits.client_requests_per_s > 0 &&
        svc.peer_identities.empty()) {
      spdlog::warn(
          "limits.client_requests_per_s is on and cluster.peers.identities "
          "is empty: the calls other nodes forward here count against their "
          "own identity and may be refused RESOURCE_EXHAUSTED; list the "
          "nodes' certificate identities (mtls listeners)");
    }
  }
  svc.router = call_router_.get();
  coordinator_service_ =
      std::make_unique<rpc::CoordinatorService>(*backend_, svc);
  rpc::AdminServiceOptions admin_options;
  admin_options.version = version;
  admin_options.now_ms = [this] { return clock_->WallMs(); };
  admin_options.new_approval_id = NewApprovalId;
  admin_options.approval_ttl_ms = config.admin.approval_ttl_ms;
  admin_options.max_approval_ttl_ms = config.admin.max_approval_ttl_ms;
  admin_options.audit = LogAdminCall;
  if (shard_manager_ != nullptr) {
    admin_options.cluster = [this] { return ClusterStatus(); };
    admin_options.drain = [this](const std::string& node_id) {
      return Drain(node_id);
    };
    admin_options.router = call_router_.get();
  }
  admin_service_ = std::make_unique<rpc::AdminService>(
      *backend_, *coordinator_service_, *admin_auth_, admin_options);

  const bool admin_apart = !config.admin_listen.empty();
  auto listener_credentials =
      ListenerCredentials("tls", "client listener", config.listen, config.tls);
  if (!listener_credentials.ok()) return listener_credentials.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, *listener_credentials, &port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config.limits.max_request_bytes));
  builder.RegisterService(coordinator_service_.get());
  if (!admin_apart) builder.RegisterService(admin_service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (!grpc_server_ || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen));
  }
  admin_port_ = port_;
  if (admin_apart) {
    auto admin_credentials =
        ListenerCredentials("admin.tls", "admin listener", config.admin_listen,
                            EffectiveAdminTls(config));
    if (!admin_credentials.ok()) return admin_credentials.status();
    grpc::ServerBuilder admin;
    admin.AddListeningPort(config.admin_listen, *admin_credentials,
                           &admin_port_);
    admin.SetMaxReceiveMessageSize(
        static_cast<int>(config.limits.max_request_bytes));
    admin.RegisterService(admin_service_.get());
    admin_server_ = admin.BuildAndStart();
    if (!admin_server_ || admin_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", config.admin_listen));
    }
  }
  if (!config.console_listen.empty()) {
    grpc::Server* admin =
        admin_apart ? admin_server_.get() : grpc_server_.get();
    auto console = console::ConsoleServer::Start(console::ConsoleOptions{
        .address = config.console_listen,
        .cert_file = config.console.tls.cert_file,
        .key_file = config.console.tls.key_file,
        .client_ca_file = config.console.tls.client_ca_file,
        .admin = admin->InProcessChannel(grpc::ChannelArguments()),
        .console_key = admin_auth_->console_key(),
        .max_connections = static_cast<int>(config.console.max_connections),
        .idle_timeout_ms = 30000});
    if (!console.ok()) return console.status();
    console_ = std::move(*console);
  }
  ScheduleRetention();
  WalStats();  // the gauges are right from the first scrape; then every 250 ms
  return absl::OkStatus();
}

// The WAL counts its syncs and unfinished transactions itself (no callback
// per sync), the transport its gRPC calls: every 250 ms their counters go to
// /metrics and the exact
// unfinished count resets the backend's in-flight count (so it cannot drift).
void Server::Impl::ScheduleWalStats() {
  // Timers fire on the clock's thread: the work goes to the pool.
  clock_->Schedule(250, [this] {
    boost::asio::post(threads_->context(), [this] { WalStats(); });
  });
}

void Server::Impl::WalStats() {
  if (stopped_) return;
  // On etcd, Stats counts every head in etcd (etcd walks its index over
  // them: milliseconds of its CPU at a few thousand), so there it is asked
  // every kEtcdStatsEvery-th time (2 s), and its figures stand meanwhile.
  const bool fresh =
      etcd_log_ == nullptr || wal_stats_ticks_++ % kEtcdStatsEvery == 0;
  if (fresh) wal_stats_ = log_->Stats();
  const wal::LogStats& stats = wal_stats_;
  metrics_->SetWalTotals(stats.syncs, stats.synced_appends);
  if (etcd_log_ != nullptr) {
    metrics_->SetEtcdTotals(
        {.group_txns = etcd_log_->txns_sent(),
         .appends = etcd_log_->appends_committed(),
         .client_txns = etcd_client_->txns_sent(),
         .appends_held = etcd_log_->appends_held(),
         .fenced_writes_refused = etcd_log_->fenced_writes_refused()});
  }
  const rpc::GrpcTransport::Stats calls = transport_->stats();
  metrics_->SetParticipantRpcTotals(calls.single_calls, calls.batches,
                                    calls.batched_calls, calls.batch_fallbacks);
  if (http_transport_) {
    const rpc::HttpTransport::Stats http = http_transport_->stats();
    metrics_->SetHttpTotals(http.requests, http.connections_opened);
  }
  if (fresh) backend_->ReconcileInFlight(stats.unfinished);
  const int64_t now = clock_->WallMs();
  const runtime::Driver::InDoubt doubt = driver_->in_doubt();
  // The etcd log has no index by time: in cluster mode the oldest is the
  // driver's, of the transactions it holds (every unfinished one of the
  // shards this node owns, once their scans resumed them).
  const int64_t oldest_registered_ms =
      etcd_log_ != nullptr ? driver_->oldest_unfinished_registered_ms()
                           : stats.oldest_unfinished_registered_ms;
  metrics_->SetUnfinished(static_cast<int64_t>(stats.unfinished),
                          AgeMs(now, oldest_registered_ms), doubt.transactions,
                          AgeMs(now, doubt.oldest_since_ms));
  backend_->ExportRecovery();
  metrics_->SetStuckBranches(driver_->stuck_branches());
  const int64_t memory = driver_->memory_bytes();
  metrics_->SetMemoryBytes(memory, driver_->memory_high_water_bytes());
  ReturnFreedMemory(memory);
  if (shard_manager_ != nullptr) {
    int64_t owned = 0, unowned = 0;
    for (uint32_t k = 0; k < etcd_log_->shard_count(); ++k) {
      if (driver_->OwnsShard(k)) ++owned;
    }
    if (auto m = shard_manager_->membership()) {
      for (const auto& o : m->owners) unowned += o.has_value() ? 0 : 1;
    }
    metrics_->SetClusterShards(owned, unowned);
  }
  ScheduleWalStats();
}

// After a backlog drains, the allocator keeps the pages it had: they go back
// to the system once the transaction state has shrunk by 8 MiB since its
// peak (glibc's malloc_trim walks every arena; it takes a few ms).
// What the budget does not count (gRPC's and the transports' buffers, the
// WAL's) is often freed a moment after the state it served: after a trim,
// four more follow, one a second, for that. And whatever is freed later
// still (the etcd log's archive frees a memtable of payloads when it has
// flushed it, seconds after the drain): once a second the allocator's free
// bytes are read (mallinfo2: a walk of the arenas' bins), and when 16 MiB
// more is free than at the lowest since the last trim, it trims. Without
// that, tccd on etcd kept about 33 MiB free but resident after a drained
// backlog (gdb's malloc_trim took it from 94 MiB to 61), and
// memory_integration_etcd_test failed in one CI run of three.
void Server::Impl::ReturnFreedMemory(int64_t memory_bytes) {
  auto trim = [this] {
    malloc_trim(0);
    min_free_bytes_ = SIZE_MAX;  // pages of free chunks went back
  };
  peak_memory_bytes_ = std::max(peak_memory_bytes_, memory_bytes);
  if (peak_memory_bytes_ - memory_bytes >= (8 << 20)) {
    trim();
    peak_memory_bytes_ = memory_bytes;
    trims_to_follow_ = 4 * 4;  // ticks of 250 ms
    return;
  }
  if (trims_to_follow_ > 0 && --trims_to_follow_ % 4 == 0) {
    trim();
    return;
  }
  if (++trim_ticks_ % 4 != 0) return;
  const size_t free_bytes = mallinfo2().fordblks;
  min_free_bytes_ = std::min(min_free_bytes_, free_bytes);
  if (free_bytes - min_free_bytes_ >= (16u << 20)) trim();
}

namespace {

// The etcd client of cluster mode, from `cluster.etcd`.
absl::StatusOr<std::unique_ptr<etcd::Client>> ConnectEtcd(
    const ClusterConfig& cl) {
  etcd::ClientOptions co;
  co.endpoints = cl.etcd.endpoints;
  co.tls = cl.etcd.tls;
  co.tls_files.ca_file = cl.etcd.ca_file;
  co.tls_files.cert_file = cl.etcd.cert_file;
  co.tls_files.key_file = cl.etcd.key_file;
  co.user = cl.etcd.user;
  co.password = cl.etcd.password;
  if (!cl.etcd.password_file.empty()) {
    absl::StatusOr<std::string> password =
        ReadSecretFile("cluster.etcd.password_file", cl.etcd.password_file);
    if (!password.ok()) return password.status();
    co.password = *password;
  }
  co.call_timeout_ms = cl.etcd.call_timeout_ms;
  co.leader_check_ms = cl.etcd.leader_check_ms;
  co.max_message_bytes = static_cast<int>(
      std::min<uint64_t>(cl.etcd.max_request_bytes * 2, INT32_MAX));
  co.config_prefix = "cluster.etcd.";
  return etcd::Client::Connect(co);
}

// How cluster mode's etcd calls outside the log (membership reads, the
// node's registration) are sent: as the log's, each send with the attempt
// deadline, for at most the call timeout in all.
etcd::SendTimeouts EtcdSends(const ClusterConfig& cl) {
  return {cl.etcd.txn_attempt_timeout_ms, cl.etcd.call_timeout_ms};
}

}  // namespace

absl::StatusOr<std::string> InitCluster(const Config& config) {
  if (!config.cluster.enabled) {
    return absl::InvalidArgumentError(
        "cluster.enabled: --init-cluster needs cluster mode on");
  }
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      ConnectEtcd(config.cluster);
  if (!client.ok()) return client.status();
  absl::StatusOr<wal::ClusterInfo> info = wal::InitCluster(
      **client, config.cluster.key_prefix, config.cluster.shards);
  if (!info.ok()) return info.status();
  return absl::StrCat("created the cluster under '", config.cluster.key_prefix,
                      "': ", info->shards, " shards, etcd cluster_id ",
                      info->etcd_cluster_id, ", at revision ",
                      info->created_revision);
}

// Cluster mode (DESIGN.md section 14): the etcd client, the node's lease
// and registration, and the etcd log over the cluster that --init-cluster
// created (a prefix without one is refused).
absl::Status Server::Impl::OpenClusterLog(const Config& config,
                                          const wal::RocksDbLogOptions& local) {
  const ClusterConfig& cl = config.cluster;
  absl::StatusOr<std::unique_ptr<etcd::Client>> client = ConnectEtcd(cl);
  if (!client.ok()) return client.status();
  etcd_client_ = *std::move(client);
  absl::StatusOr<wal::ClusterInfo> cluster =
      wal::ReadCluster(*etcd_client_, cl.key_prefix);
  if (!cluster.ok()) return cluster.status();
  if (cluster->shards != cl.shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster.shards: ", cl.shards, ", but the cluster under '",
        cl.key_prefix, "' was created with ", cluster->shards,
        " (the shard count is fixed when the cluster is created)"));
  }
  wal::NodeOptions node;
  node.client = etcd_client_.get();
  node.key_prefix = cl.key_prefix;
  node.node_id = cl.node_id;
  node.address = cl.advertise_address;
  node.lease_ttl_ms = cl.lease_ttl_ms;
  node.lease_margin_ms = cl.lease_margin_ms;
  node.sends = EtcdSends(cl);
  cluster::NodeMembership::Hooks hooks;
  hooks.lost = [this](const absl::Status& why) {
    // The shards it drove, as shard@epoch (tccctl cluster's form): the
    // epochs its calls carried until now.
    std::vector<std::string> owned;
    {
      std::lock_guard<std::mutex> lock(hook_log_mu_);
      if (hook_log_ != nullptr) {
        for (uint32_t k = 0; k < hook_log_->shard_count(); ++k) {
          if (runtime::Driver* d = live_driver_.load(); d && d->OwnsShard(k)) {
            owned.push_back(absl::StrCat(k, "@", d->owner_epoch(k)));
            metrics_->ShardChange("lost");
          }
          DropShard(k, why);
        }
      }
    }
    spdlog::error(
        "cluster: {}; every shard is lost ({} driven: {}), joining "
        "again",
        why.ToString(), owned.size(),
        owned.empty() ? "none" : absl::StrJoin(owned, " "));
  };
  hooks.rejoined = [this](int64_t lease) {
    spdlog::info("cluster: node {} joined again (lease {})",
                 config_.cluster.node_id, lease);
    {
      std::lock_guard<std::mutex> lock(hook_log_mu_);
      if (hook_log_ != nullptr) hook_log_->SetLease(lease);
    }
    if (shard_manager_ != nullptr) shard_manager_->Poke();
  };
  absl::StatusOr<std::unique_ptr<cluster::NodeMembership>> joined =
      cluster::NodeMembership::Join(node, std::move(hooks));
  if (!joined.ok()) return joined.status();
  node_ = *std::move(joined);
  wal::EtcdLogOptions lo;
  lo.client = etcd_client_.get();
  lo.key_prefix = cl.key_prefix;
  lo.node_id = cl.node_id;
  lo.node_address = cl.advertise_address;
  lo.lease_id = node_->lease_id();
  lo.archive_dir = (std::filesystem::path(config.data_dir) / "archive");
  lo.info_log = RocksDbInfoLog;
  lo.retention.full_record_ms = config.retention.full_record_ms;
  lo.retention.compact_entry_ms = cl.dedup_window_ms;
  lo.retention.max_bytes = config.retention.max_bytes;
  lo.min_dedup_window_ms = cl.min_dedup_window_ms;
  lo.hold_buffered_ms = cl.hold_buffered_ms;
  lo.max_txn_ops = cl.etcd.max_txn_ops;
  lo.max_request_bytes = cl.etcd.max_request_bytes;
  lo.txn_timeout_ms = cl.etcd.call_timeout_ms;
  lo.txn_attempt_timeout_ms = cl.etcd.txn_attempt_timeout_ms;
  // The shard manager campaigns again on its next round: a campaign for a
  // shard another node owns answers at once.
  lo.campaign_wait_ms = 0;
  lo.now_us = local.now_us;
  lo.on_sync = local.on_sync;
  absl::StatusOr<std::unique_ptr<wal::EtcdLog>> log = wal::EtcdLog::Open(lo);
  if (!log.ok()) return log.status();
  etcd_log_ = log->get();
  {
    // The lease as of now: one lost and joined again while the log opened
    // (an etcd outage longer than the TTL) was not the log's to hear of.
    std::lock_guard<std::mutex> lock(hook_log_mu_);
    hook_log_ = etcd_log_;
    hook_log_->SetLease(node_->lease_id());
  }
  etcd_log_->SetShardLostHandler(
      [this](uint32_t shard, const absl::Status& why) {
        // The epoch the node held it at (its calls carried it), before
        // DropShard forgets it.
        runtime::Driver* d = live_driver_.load();
        const uint64_t epoch = d != nullptr ? d->owner_epoch(shard) : 0;
        spdlog::error("cluster: shard {} (epoch {}) lost: {}", shard, epoch,
                      why.ToString());
        DropShard(shard, why);
        metrics_->ShardChange("lost");
        if (shard_manager_ != nullptr) shard_manager_->Poke();
      });
  log_ = *std::move(log);
  spdlog::info("cluster: node {} joined (lease {}), {} shards under '{}'",
               cl.node_id, node_->lease_id(), cluster->shards, cl.key_prefix);
  return absl::OkStatus();
}

absl::Status Server::Impl::StartShardManager(const Config& config) {
  const ClusterConfig& cl = config.cluster;
  const uint32_t shards = etcd_log_->shard_count();
  runtime::Driver* driver = driver_.get();
  wal::EtcdLog* log = etcd_log_;
  cluster::NodeMembership* node = node_.get();
  cluster::ShardManagerOptions mo;
  mo.client = etcd_client_.get();
  mo.key_prefix = cl.key_prefix;
  mo.node_id = cl.node_id;
  mo.shards = shards;
  mo.takeover_margin_ms = cl.takeover_margin_ms;
  mo.reread_ms = std::min<int64_t>(1000, cl.lease_ttl_ms);
  mo.read_sends = EtcdSends(cl);
  mo.now_ms = [this] { return clock_->MonotonicMs(); };
  cluster::ShardActions actions;
  actions.lease_id = [node] { return node->lease_id(); };
  actions.trusted = [node] { return node->Trusted(); };
  actions.drives = [driver](uint32_t k) { return driver->OwnsShard(k); };
  DriverBackend* backend = backend_.get();
  backend->RecoverPerShard();
  actions.adopt = [driver, backend](uint32_t k) {
    // Noted before: the scan may end before AdoptShard returns.
    backend->ShardAdopting(k, true);
    absl::StatusOr<uint64_t> epoch = driver->AdoptShard(k);
    if (!epoch.ok()) backend->ShardAdopting(k, false);
    return epoch;
  };
  actions.drop = [driver](uint32_t k, const absl::Status& why) {
    driver->DropLogShard(k, why);
  };
  actions.release = [log](uint32_t k, uint64_t epoch) {
    return log->ReleaseShard(k, epoch);
  };
  shard_observer_ = std::make_unique<ClusterLogObserver>(metrics_.get());
  shard_manager_ = std::make_unique<cluster::ShardManager>(
      mo, std::move(actions), shard_observer_.get());
  // The shards assigned to this node are taken before it serves (all of
  // them for the first node; the others hand theirs over in a moment).
  if (absl::Status s = shard_manager_->RunOnce(); !s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat("cluster: reading the membership: ", s.message()));
  }
  // Calls are forwarded to the address a node advertises: two nodes with
  // one address would forward to each other's listener.
  if (auto m = shard_manager_->membership()) {
    for (const wal::MemberInfo& n : m->nodes) {
      if (n.node_id != cl.node_id && n.address == cl.advertise_address) {
        return absl::FailedPreconditionError(
            absl::StrCat("cluster.advertise_address: ", cl.advertise_address,
                         " is advertised by node ", n.node_id,
                         " already (each node needs its own)"));
      }
    }
  }
  cluster::ForwardingRouterOptions ro;
  ro.node_id = cl.node_id;
  ro.shards = shards;
  ro.drives = [driver](uint32_t k) { return driver->OwnsShard(k); };
  cluster::ShardManager* manager = shard_manager_.get();
  ro.membership = [manager] { return manager->membership(); };
  if (cl.peers.tls) {
    tls::ChannelTlsFiles files;
    files.ca_file = cl.peers.ca_file;
    files.cert_file = cl.peers.cert_file;
    files.key_file = cl.peers.key_file;
    auto creds = tls::ChannelCredentials(files, "cluster.peers.");
    if (!creds.ok()) return creds.status();
    ro.peer_credentials = *std::move(creds);
    ro.peer_server_name = cl.peers.server_name;
  }
  CoordinatorMetrics* metrics = metrics_.get();
  ro.on_forwarded = [metrics](const grpc::Status& st) {
    metrics->Forwarded(
        st.ok() ? "ok"
                : absl::StatusCodeToString(
                      static_cast<absl::StatusCode>(st.error_code())));
  };
  call_router_ = std::make_unique<cluster::ForwardingRouter>(std::move(ro));
  shard_manager_->Start();
  return absl::OkStatus();
}

absl::StatusOr<tcc::v1::ClusterResponse> Server::Impl::ClusterStatus() {
  const uint32_t shards = etcd_log_->shard_count();
  absl::StatusOr<wal::Membership> m =
      wal::ReadMembership(*etcd_client_, config_.cluster.key_prefix, shards,
                          EtcdSends(config_.cluster));
  if (!m.ok()) return m.status();
  tcc::v1::ClusterResponse r;
  r.set_enabled(true);
  r.set_node_id(config_.cluster.node_id);
  r.set_revision(m->revision);
  const std::vector<std::string> candidates = cluster::Candidates(*m);
  std::map<std::string, uint32_t> owned;
  uint32_t unowned = 0;
  for (uint32_t k = 0; k < shards; ++k) {
    tcc::v1::ClusterShard* sh = r.add_shards();
    sh->set_shard(k);
    sh->set_assigned(cluster::RendezvousOwner(k, candidates));
    if (!m->owners[k].has_value()) {
      ++unowned;
      continue;
    }
    sh->set_owner(m->owners[k]->node_id);
    sh->set_epoch(m->owners[k]->epoch);
    ++owned[m->owners[k]->node_id];
  }
  r.set_unowned_shards(unowned);
  for (const wal::MemberInfo& n : m->nodes) {
    tcc::v1::ClusterNode* node = r.add_nodes();
    node->set_node_id(n.node_id);
    node->set_address(n.address);
    node->set_draining(n.draining);
    node->set_lease_id(n.lease);
    absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> ttl =
        etcd_client_->LeaseTimeToLive(n.lease);
    node->set_lease_ttl_left_ms(ttl.ok() && ttl->ttl() >= 0 ? ttl->ttl() * 1000
                                                            : -1);
    node->set_shards_owned(owned[n.node_id]);
  }
  r.set_recovering_shards(backend_->recovering_shards());
  return r;
}

absl::StatusOr<uint32_t> Server::Impl::Drain(const std::string& node_id) {
  const uint32_t shards = etcd_log_->shard_count();
  absl::StatusOr<wal::Membership> m =
      wal::ReadMembership(*etcd_client_, config_.cluster.key_prefix, shards,
                          EtcdSends(config_.cluster));
  if (!m.ok()) return m.status();
  uint32_t owned = 0;
  for (const auto& o : m->owners) {
    if (o.has_value() && o->node_id == node_id) ++owned;
  }
  if (absl::Status s =
          wal::MarkDraining(*etcd_client_, config_.cluster.key_prefix, node_id);
      !s.ok()) {
    return s;
  }
  spdlog::info("cluster: node {} marked draining ({} shards to move)", node_id,
               owned);
  return owned;
}

void Server::Impl::ScheduleRetention() {
  clock_->Schedule(config_.retention.run_every_ms, [this] {
    boost::asio::post(threads_->context(), [this] {
      if (stopped_) return;
      if (absl::Status s = log_->RunRetention(clock_->WallMs()); !s.ok()) {
        spdlog::warn("retention: {}", s.ToString());
      }
      ScheduleRetention();
    });
  });
}

absl::Status Server::Impl::Failure() const {
  if (rocksdb_log_ != nullptr) {
    if (absl::Status f = rocksdb_log_->failure(); !f.ok()) return f;
  }
  if (etcd_log_ != nullptr) {
    if (absl::Status f = etcd_log_->failure(); !f.ok()) return f;
  }
  if (backend_ != nullptr) return backend_->fatal();
  return absl::OkStatus();
}

absl::Status Server::Impl::Stop() {
  if (stopped_) return stopped_failure_;
  stopped_ = true;
  console_.reset();  // its Watch streams cancelled, its threads joined
  // Stop accepting; callers still waiting are answered UNAVAILABLE so the
  // servers can finish their calls.
  if (backend_) backend_->Shutdown();
  const gpr_timespec deadline = gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(5, GPR_TIMESPAN));
  if (grpc_server_) grpc_server_->Shutdown(deadline);
  if (admin_server_) admin_server_->Shutdown(deadline);
  if (backend_) backend_->Shutdown();  // anything that slipped in meanwhile
  // No shard is taken or given from now on (the lease's revocation below
  // frees this node's shards for the others at once).
  if (shard_manager_) shard_manager_->Stop();
  // Join the threads before the driver goes, so no task runs into it; keep
  // the io_context itself until the WAL's writer (which may still post
  // completions) is gone.
  // A scan waiting for room in its queue would wait for the shards forever.
  if (driver_) driver_->StopRecovery();
  if (threads_) threads_->Stop();
  if (clock_) clock_->Stop();  // no timer fires into what goes below
  if (scan_thread_) scan_thread_->Stop();  // a running scan ends first
  // Participant calls still in flight would call back into the transport,
  // the metrics and the driver: cancel them and wait for their callbacks.
  if (client_) client_->Shutdown(5000);
  if (http_transport_) http_transport_->Shutdown(5000);
  stopped_failure_ = Failure();
  live_driver_ = nullptr;
  driver_.reset();
  {
    std::lock_guard<std::mutex> lock(hook_log_mu_);
    hook_log_ = nullptr;  // the membership hooks leave it alone from now
  }
  log_.reset();  // completes every queued append, then closes
  rocksdb_log_ = nullptr;
  etcd_log_ = nullptr;
  if (node_) {
    // Leaving: the lease goes, and with it the node's registration and its
    // owner keys (a restart need not wait for them to expire).
    if (absl::Status s = node_->Leave(); !s.ok()) {
      spdlog::warn("cluster: leaving: {}", s.ToString());
    }
    node_.reset();
  }
  etcd_client_.reset();
  clock_.reset();
  shards_.clear();
  scan_executor_.reset();
  scan_thread_.reset();
  threads_.reset();
  metrics_endpoint_.reset();
  return stopped_failure_;
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { (void)Stop(); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const Config& config, const std::string& version) {
  auto impl = std::make_unique<Impl>();
  if (absl::Status s = impl->Start(config, version); !s.ok()) {
    (void)impl->Stop();
    return s;
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port_; }
int Server::admin_port() const { return impl_->admin_port_; }
int Server::console_port() const {
  return impl_->console_ ? impl_->console_->port() : 0;
}
int Server::metrics_port() const {
  return impl_->metrics_endpoint_ ? impl_->metrics_endpoint_->port() : 0;
}
absl::Status Server::Stop() { return impl_->Stop(); }
absl::Status Server::Failure() const { return impl_->Failure(); }

}  // namespace tcc::server
