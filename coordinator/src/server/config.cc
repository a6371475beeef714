#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tcc/identity/ids.h"

namespace tcc::server {
namespace {

// Walks one YAML mapping: typed reads of known keys, and a final check that
// no other key is there. The first error wins and names the full key path.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, absl::Status* error)
      : node_(node), path_(std::move(path)), error_(error) {
    if (error_->ok() && node_.IsDefined() && !node_.IsNull() &&
        !node_.IsMap()) {
      Fail(path_.empty() ? "(top level)" : path_, "must be a mapping");
    }
  }

  bool ok() const { return error_->ok(); }

  std::string Key(std::string_view key) const {
    return path_.empty() ? std::string(key)
                         : absl::StrCat(path_, ".", std::string(key));
  }

  // The child node, marking the key as known.
  YAML::Node Child(std::string_view key) {
    known_.insert(std::string(key));
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    return node_[std::string(key)];
  }

  void String(std::string_view key, std::string* out) {
    YAML::Node n = Child(key);
    if (!ok() || !n.IsDefined()) return;
    if (n.IsNull()) {
      out->clear();
      return;
    }
    if (!n.IsScalar()) return Fail(Key(key), "must be a string");
    *out = n.Scalar();
  }

  void Bool(std::string_view key, bool* out) {
    YAML::Node n = Child(key);
    if (!ok() || !n.IsDefined()) return;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "true") {
      *out = true;
    } else if (s == "false") {
      *out = false;
    } else {
      Fail(Key(key), "must be true or false");
    }
  }

  template <typename Int>
  void Integer(std::string_view key, Int* out, int64_t min, int64_t max) {
    YAML::Node n = Child(key);
    if (!ok() || !n.IsDefined()) return;
    int64_t v = 0;
    if (!n.IsScalar() || !absl::SimpleAtoi(n.Scalar(), &v)) {
      return Fail(Key(key), "must be an integer");
    }
    if (v < min || v > max) {
      return Fail(Key(key), absl::StrCat("must be between ", min, " and ", max,
                                         ", not ", v));
    }
    *out = static_cast<Int>(v);
  }

  void StringList(std::string_view key, std::vector<std::string>* out) {
    YAML::Node n = Child(key);
    if (!ok() || !n.IsDefined() || n.IsNull()) return;
    if (!n.IsSequence()) return Fail(Key(key), "must be a list of strings");
    out->clear();
    for (const auto& item : n) {
      if (!item.IsScalar() || item.Scalar().empty()) {
        return Fail(Key(key), "must be a list of non-empty strings");
      }
      out->push_back(item.Scalar());
    }
  }

  void OneOf(std::string_view key, std::string* out,
             std::initializer_list<const char*> allowed) {
    String(key, out);
    if (!ok()) return;
    for (const char* a : allowed) {
      if (*out == a) return;
    }
    std::string list;
    for (const char* a : allowed)
      absl::StrAppend(&list, list.empty() ? "" : ", ", a);
    Fail(Key(key), absl::StrCat("must be one of ", list, ", not '", *out, "'"));
  }

  // Call after every read: refuses keys nobody asked for.
  void RejectUnknown() {
    if (!ok() || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (known_.count(key) == 0) {
        return Fail(Key(key), "unknown key");
      }
    }
  }

  void Fail(const std::string& key, std::string_view what) {
    if (!error_->ok()) return;
    *error_ =
        absl::InvalidArgumentError(absl::StrCat(key, ": ", std::string(what)));
  }

 private:
  YAML::Node node_;
  std::string path_;
  absl::Status* error_;
  std::set<std::string> known_;
};

constexpr int64_t kHour = 3600LL * 1000;
constexpr int64_t kDay = 24 * kHour;

void ReadBounds(MapReader& parent, std::string_view key, TimeoutBounds* b,
                absl::Status* error) {
  MapReader r(parent.Child(key), parent.Key(key), error);
  r.Integer("min_ms", &b->min_ms, 1, kHour);
  r.Integer("max_ms", &b->max_ms, 1, kHour);
  r.Integer("initial_ms", &b->initial_ms, 1, kHour);
  r.RejectUnknown();
}

void ReadListenerTls(MapReader& parent, std::string_view key,
                     ListenerTlsConfig* t, absl::Status* error) {
  MapReader r(parent.Child(key), parent.Key(key), error);
  r.String("mode", &t->mode);
  if (r.ok() && !t->mode.empty()) {
    r.OneOf("mode", &t->mode, {"plaintext", "tls", "mtls"});
  }
  r.String("cert_file", &t->cert_file);
  r.String("key_file", &t->key_file);
  r.String("client_ca_file", &t->client_ca_file);
  r.RejectUnknown();
}

void ReadParticipant(const std::string& name, const YAML::Node& node,
                     const std::string& path, const TimeoutBounds& defaults,
                     ParticipantConfig* p, absl::Status* error) {
  p->name = name;
  p->try_timeout = p->confirm_timeout = p->cancel_timeout = p->query_timeout =
      defaults;
  if (node.IsScalar()) {  // shorthand: `bank-a: 127.0.0.1:7101`
    const std::string& v = node.Scalar();
    if (v.rfind("http://", 0) == 0 || v.rfind("https://", 0) == 0) {
      p->protocol = "http";  // `py-bank: http://127.0.0.1:8081`
      p->url = v;
      p->tls = v.rfind("https://", 0) == 0;
    } else {
      p->address = v;
    }
    return;
  }
  MapReader r(node, path, error);
  r.String("protocol", &p->protocol);
  if (r.ok() && !p->protocol.empty()) {
    r.OneOf("protocol", &p->protocol, {"grpc", "http"});
  }
  if (p->protocol.empty()) p->protocol = "grpc";
  r.String("address", &p->address);
  r.String("url", &p->url);
  r.Integer("rpcs_in_flight", &p->rpcs_in_flight, 1, 100000);
  r.Integer("connections", &p->connections, 1, 10000);
  r.Bool("batch", &p->batch);
  {
    MapReader t(r.Child("timeouts"), r.Key("timeouts"), error);
    ReadBounds(t, "try", &p->try_timeout, error);
    ReadBounds(t, "confirm", &p->confirm_timeout, error);
    ReadBounds(t, "cancel", &p->cancel_timeout, error);
    ReadBounds(t, "query", &p->query_timeout, error);
    t.RejectUnknown();
  }
  {
    MapReader t(r.Child("tls"), r.Key("tls"), error);
    t.Bool("enabled", &p->tls);
    t.String("ca_file", &p->tls_ca_file);
    t.String("cert_file", &p->tls_cert_file);
    t.String("key_file", &p->tls_key_file);
    t.String("server_name", &p->tls_server_name);
    t.RejectUnknown();
  }
  r.RejectUnknown();
  if (!error->ok()) return;
  if (p->protocol == "http") {
    if (p->url.empty()) {
      *error = absl::InvalidArgumentError(
          absl::StrCat(path, ".url: required for protocol http"));
    } else if (!p->address.empty()) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          path, ".address: for protocol grpc; an http participant has a url"));
    } else if (p->rpcs_in_flight != 0 && !p->batch) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          path,
          ".rpcs_in_flight: for protocol grpc (or http with batch: true); "
          "an http participant has connections"));
    } else if (p->url.rfind("https://", 0) == 0) {
      p->tls = true;  // the scheme says it; tls: holds the files
    } else if (p->tls) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          path, ".tls.enabled: true with an http:// url; say https://"));
    }
  } else {
    if (p->address.empty()) {
      *error =
          absl::InvalidArgumentError(absl::StrCat(path, ".address: required"));
    } else if (!p->url.empty()) {
      *error = absl::InvalidArgumentError(
          absl::StrCat(path, ".url: for protocol http (say protocol: http)"));
    } else if (p->connections != 0) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          path,
          ".connections: for protocol http; a grpc participant has "
          "rpcs_in_flight"));
    } else if (p->batch) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          path,
          ".batch: for protocol http; gRPC participants always get "
          "Batch calls"));
    }
  }
}

absl::Status ValidateAddress(const std::string& key, const std::string& addr,
                             bool allow_empty) {
  if (addr.empty()) {
    return allow_empty ? absl::OkStatus()
                       : absl::InvalidArgumentError(
                             absl::StrCat(key, ": required (host:port)"));
  }
  const size_t colon = addr.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": '", addr, "' is not host:port"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBounds(const std::string& key, const TimeoutBounds& b) {
  if (b.min_ms > b.max_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ".max_ms: must be >= min_ms (", b.min_ms, "), not ", b.max_ms));
  }
  if (b.initial_ms < b.min_ms || b.initial_ms > b.max_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".initial_ms: must be within [min_ms, max_ms], not ",
                     b.initial_ms));
  }
  return absl::OkStatus();
}

absl::Status ValidateListenerTls(const std::string& key,
                                 const ListenerTlsConfig& t,
                                 const std::string& address) {
  if (t.mode.empty() && !IsLoopbackAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ".mode: required for ", address,
        " (not a loopback address): say tls or mtls, or plaintext to accept "
        "unencrypted, unauthenticated traffic"));
  }
  if (t.mode == "tls" || t.mode == "mtls") {
    if (t.cert_file.empty() || t.key_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ": mode ", t.mode, " needs cert_file and key_file"));
    }
  }
  if (t.mode == "mtls" && t.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".client_ca_file: required in mtls mode"));
  }
  if (t.mode != "mtls" && !t.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".client_ca_file: only for mode mtls"));
  }
  if ((t.mode.empty() || t.mode == "plaintext") &&
      !(t.cert_file.empty() && t.key_file.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": cert_file/key_file set but mode is plaintext; say tls"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  std::string_view host =
      colon == std::string_view::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

const ListenerTlsConfig& EffectiveAdminTls(const Config& config) {
  return config.admin_listen.empty() ? config.tls : config.admin.tls;
}

absl::StatusOr<Config> ParseConfig(std::string_view yaml_text,
                                   std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": not valid YAML: ", e.what()));
  }
  Config c;
  absl::Status error;
  MapReader top(root, "", &error);
  top.String("listen", &c.listen);
  top.String("admin_listen", &c.admin_listen);
  top.String("metrics_listen", &c.metrics_listen);
  top.String("console_listen", &c.console_listen);
  top.String("data_dir", &c.data_dir);
  top.Bool("allow_direct_targets", &c.allow_direct_targets);
  top.Bool("sync_writes", &c.sync_writes);
  top.Integer("shards", &c.shards, 0, 256);

  ReadListenerTls(top, "tls", &c.tls, &error);
  {
    MapReader r(top.Child("console"), top.Key("console"), &error);
    ReadListenerTls(r, "tls", &c.console.tls, &error);
    r.Integer("max_connections", &c.console.max_connections, 1, 10000);
  }
  {
    MapReader r(top.Child("admin"), top.Key("admin"), &error);
    r.String("token_file", &c.admin.token_file);
    r.StringList("client_identities", &c.admin.client_identities);
    ReadListenerTls(r, "tls", &c.admin.tls, &error);
    r.Integer("approval_ttl_ms", &c.admin.approval_ttl_ms, 1000, 7 * kDay);
    r.Integer("max_approval_ttl_ms", &c.admin.max_approval_ttl_ms, 1000,
              7 * kDay);
    r.RejectUnknown();
  }

  TimeoutBounds default_bounds;
  {
    MapReader r(top.Child("participant_defaults"),
                top.Key("participant_defaults"), &error);
    MapReader t(r.Child("timeouts"), r.Key("timeouts"), &error);
    ReadBounds(t, "all", &default_bounds, &error);
    t.RejectUnknown();
    r.RejectUnknown();
  }
  {
    YAML::Node ps = top.Child("participants");
    if (error.ok() && ps.IsDefined() && !ps.IsNull()) {
      if (!ps.IsMap()) {
        top.Fail("participants", "must be a mapping of name -> address");
      } else {
        for (const auto& kv : ps) {
          const std::string name = kv.first.as<std::string>();
          const std::string path = absl::StrCat("participants.", name);
          if (absl::Status s = identity::ValidateParticipantName(name);
              !s.ok() && error.ok()) {
            error = absl::InvalidArgumentError(
                absl::StrCat(path, ": ", std::string(s.message())));
          }
          ParticipantConfig p;
          ReadParticipant(name, kv.second, path, default_bounds, &p, &error);
          c.participants[name] = std::move(p);
        }
      }
    }
  }
  {
    MapReader r(top.Child("retry"), top.Key("retry"), &error);
    r.Integer("base_ms", &c.retry.base_ms, 1, kHour);
    r.Integer("cap_ms", &c.retry.cap_ms, 1, kDay);
    r.Integer("stuck_after_ms", &c.retry.stuck_after_ms, 1, 30 * kDay);
    r.Integer("stuck_retry_ms", &c.retry.stuck_retry_ms, 1, kDay);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("circuit_breaker"), top.Key("circuit_breaker"),
                &error);
    r.Integer("failure_threshold", &c.circuit_breaker.failure_threshold, 1,
              1000000);
    r.Integer("open_ms", &c.circuit_breaker.open_ms, 1, kHour);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("participant_calls"), top.Key("participant_calls"),
                &error);
    ParticipantCallsConfig& pc = c.participant_calls;
    r.Integer("rpcs_in_flight", &pc.rpcs_in_flight, 1, 100000);
    r.Integer("batch_max_calls", &pc.batch_max_calls, 1, 1024);
    r.Integer("batch_max_bytes", &pc.batch_max_bytes, 1024, 4 * 1024 * 1024);
    r.Integer("max_outstanding", &pc.max_outstanding, 1, 1000000);
    r.Integer("http_connections", &pc.http_connections, 1, 10000);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("transactions"), top.Key("transactions"), &error);
    r.Integer("try_timeout_ms", &c.transactions.try_timeout_ms, 1, kDay);
    r.Integer("max_try_timeout_ms", &c.transactions.max_try_timeout_ms, 1,
              kDay);
    r.Integer("approval_timeout_ms", &c.transactions.approval_timeout_ms, 1,
              7 * kDay);
    r.Integer("max_approval_timeout_ms",
              &c.transactions.max_approval_timeout_ms, 1, 7 * kDay);
    r.Integer("max_clock_skew_ms", &c.transactions.max_clock_skew_ms, 0, kDay);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("limits"), top.Key("limits"), &error);
    r.Integer("max_branches", &c.limits.max_branches, 1, 10000);
    r.Integer("max_payload_bytes", &c.limits.max_payload_bytes, 0,
              64LL * 1024 * 1024);
    r.Integer("max_request_bytes", &c.limits.max_request_bytes, 1024,
              256LL * 1024 * 1024);
    r.Integer("max_in_flight", &c.limits.max_in_flight, 1, 100000000);
    r.Integer("max_in_flight_bytes", &c.limits.max_in_flight_bytes, 1ull << 20,
              1ull << 40);
    r.Integer("recovery_window", &c.limits.recovery_window, 1, 100000000);
    r.Integer("max_watch_streams", &c.limits.max_watch_streams, 0, 1000000);
    // The WAL serves at most 1,000 per page (internal::ValidateListQuery).
    r.Integer("max_list_page", &c.limits.max_list_page, 1, 1000);
    r.Integer("client_requests_per_s", &c.limits.client_requests_per_s, 0,
              10000000);
    r.Integer("client_burst", &c.limits.client_burst, 0, 100000000);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("retention"), top.Key("retention"), &error);
    r.Integer("full_record_ms", &c.retention.full_record_ms, 0, 365 * kDay);
    r.Integer("compact_entry_ms", &c.retention.compact_entry_ms, 0,
              3650 * kDay);
    r.Integer("max_bytes", &c.retention.max_bytes, 0, INT64_MAX);
    r.Integer("run_every_ms", &c.retention.run_every_ms, 100, kDay);
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("log"), top.Key("log"), &error);
    r.OneOf("level", &c.log.level, {"trace", "debug", "info", "warn", "error"});
    r.OneOf("format", &c.log.format, {"text", "json"});
    r.RejectUnknown();
  }
  {
    MapReader r(top.Child("cluster"), top.Key("cluster"), &error);
    ClusterConfig& cl = c.cluster;
    r.Bool("enabled", &cl.enabled);
    r.String("node_id", &cl.node_id);
    r.String("advertise_address", &cl.advertise_address);
    r.String("key_prefix", &cl.key_prefix);
    r.Integer("shards", &cl.shards, 1, 9999);
    r.Integer("lease_ttl_ms", &cl.lease_ttl_ms, 2000, 600 * 1000);
    r.Integer("lease_margin_ms", &cl.lease_margin_ms, 0, 600 * 1000);
    r.Integer("takeover_margin_ms", &cl.takeover_margin_ms, 0, kHour);
    r.Integer("dedup_window_ms", &cl.dedup_window_ms, 60 * 1000, 30 * kDay);
    r.Integer("min_dedup_window_ms", &cl.min_dedup_window_ms, 0, 30 * kDay);
    r.Integer("hold_buffered_ms", &cl.hold_buffered_ms, 0, 60 * 1000);
    {
      MapReader e(r.Child("etcd"), r.Key("etcd"), &error);
      e.StringList("endpoints", &cl.etcd.endpoints);
      e.Bool("tls", &cl.etcd.tls);
      e.String("ca_file", &cl.etcd.ca_file);
      e.String("cert_file", &cl.etcd.cert_file);
      e.String("key_file", &cl.etcd.key_file);
      e.String("user", &cl.etcd.user);
      e.String("password", &cl.etcd.password);
      e.String("password_file", &cl.etcd.password_file);
      e.Integer("call_timeout_ms", &cl.etcd.call_timeout_ms, 100, 600 * 1000);
      e.Integer("txn_attempt_timeout_ms", &cl.etcd.txn_attempt_timeout_ms, 100,
                600 * 1000);
      e.Integer("leader_check_ms", &cl.etcd.leader_check_ms, 0, 60 * 1000);
      e.Integer("max_txn_ops", &cl.etcd.max_txn_ops, 16, 1000000);
      e.Integer("max_request_bytes", &cl.etcd.max_request_bytes, 64 << 10,
                1LL << 31);
      e.RejectUnknown();
    }
    {
      MapReader e(r.Child("peers"), r.Key("peers"), &error);
      e.Bool("tls", &cl.peers.tls);
      e.String("ca_file", &cl.peers.ca_file);
      e.String("cert_file", &cl.peers.cert_file);
      e.String("key_file", &cl.peers.key_file);
      e.String("server_name", &cl.peers.server_name);
      e.StringList("identities", &cl.peers.identities);
      e.RejectUnknown();
    }
    r.RejectUnknown();
  }
  top.RejectUnknown();
  if (!error.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": ", std::string(error.message())));
  }
  if (absl::Status s = ValidateConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": ", std::string(s.message())));
  }
  return c;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("config file ", path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path);
}

absl::Status ValidateClusterConfig(const ClusterConfig& cl) {
  auto bad = [](const char* key, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.", key, ": ", std::string(what)));
  };
  if (!cl.enabled) return absl::OkStatus();
  if (cl.node_id.empty()) return bad("node_id", "required in cluster mode");
  if (!identity::ValidateGid(cl.node_id).ok() || cl.node_id.size() > 64) {
    return bad("node_id", "1-64 bytes of [A-Za-z0-9._:-]");
  }
  if (cl.advertise_address.empty()) {
    return bad("advertise_address", "required in cluster mode (host:port)");
  }
  if (absl::Status s = ValidateAddress("cluster.advertise_address",
                                       cl.advertise_address, false);
      !s.ok()) {
    return s;
  }
  if (cl.etcd.endpoints.empty()) {
    return bad("etcd.endpoints", "at least one etcd member (host:port)");
  }
  for (const std::string& e : cl.etcd.endpoints) {
    if (e.find("://") != std::string::npos) {
      return bad("etcd.endpoints",
                 absl::StrCat("'", e,
                              "' is not host:port (no scheme: cluster.etcd.tls "
                              "says whether it is https)"));
    }
    if (absl::Status s = ValidateAddress("cluster.etcd.endpoints", e, false);
        !s.ok()) {
      return s;
    }
  }
  if (!cl.etcd.tls && (!cl.etcd.ca_file.empty() || !cl.etcd.cert_file.empty() ||
                       !cl.etcd.key_file.empty())) {
    return bad("etcd.tls", "certificate files are set but tls is false");
  }
  if (cl.etcd.cert_file.empty() != cl.etcd.key_file.empty()) {
    return bad(cl.etcd.cert_file.empty() ? "etcd.cert_file" : "etcd.key_file",
               "cert_file and key_file go together");
  }
  if (!cl.etcd.password.empty() && !cl.etcd.password_file.empty()) {
    return bad("etcd.password_file", "set password or password_file, not both");
  }
  const bool has_password =
      !cl.etcd.password.empty() || !cl.etcd.password_file.empty();
  if (cl.etcd.user.empty() == has_password) {
    return bad(cl.etcd.user.empty() ? "etcd.user" : "etcd.password",
               "user and password go together");
  }
  if (!cl.peers.tls &&
      (!cl.peers.ca_file.empty() || !cl.peers.cert_file.empty() ||
       !cl.peers.key_file.empty() || !cl.peers.server_name.empty())) {
    return bad("peers.tls", "TLS settings are set but tls is false");
  }
  if (cl.peers.cert_file.empty() != cl.peers.key_file.empty()) {
    return bad(
        cl.peers.cert_file.empty() ? "peers.cert_file" : "peers.key_file",
        "cert_file and key_file go together");
  }
  if (!cl.peers.tls && !IsLoopbackAddress(cl.advertise_address)) {
    return bad("peers.tls",
               "nodes forward calls to each other: plaintext only on "
               "loopback (cluster.advertise_address is not)");
  }
  if (cl.key_prefix.empty() || cl.key_prefix.back() != '/') {
    return bad("key_prefix", "must end with '/'");
  }
  if (cl.lease_ttl_ms % 1000 != 0) {
    return bad("lease_ttl_ms", "whole seconds (etcd leases are)");
  }
  if (cl.lease_margin_ms >= cl.lease_ttl_ms / 2) {
    return bad("lease_margin_ms", "must be below half of lease_ttl_ms");
  }
  if (cl.min_dedup_window_ms > cl.dedup_window_ms) {
    return bad("min_dedup_window_ms", "must be <= dedup_window_ms");
  }
  if (cl.etcd.leader_check_ms > 0 && cl.etcd.leader_check_ms < 100) {
    return bad("etcd.leader_check_ms", "must be 0 (off) or 100 to 60000");
  }
  if (cl.etcd.txn_attempt_timeout_ms > cl.etcd.call_timeout_ms) {
    return bad("etcd.txn_attempt_timeout_ms",
               "must be <= etcd.call_timeout_ms");
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(const Config& c) {
  if (absl::Status s = ValidateAddress("listen", c.listen, false); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateClusterConfig(c.cluster); !s.ok()) return s;
  if (absl::Status s = ValidateAddress("admin_listen", c.admin_listen, true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ValidateAddress("metrics_listen", c.metrics_listen, true);
      !s.ok()) {
    return s;
  }
  if (c.data_dir.empty()) {
    return absl::InvalidArgumentError("data_dir: required");
  }
  if (absl::Status s = ValidateListenerTls("tls", c.tls, c.listen); !s.ok()) {
    return s;
  }
  if (!c.admin_listen.empty()) {
    if (absl::Status s =
            ValidateListenerTls("admin.tls", c.admin.tls, c.admin_listen);
        !s.ok()) {
      return s;
    }
  } else if (!c.admin.tls.mode.empty()) {
    return absl::InvalidArgumentError(
        "admin.tls: applies only with admin_listen set (the admin API is "
        "served on `listen` with `tls`)");
  }
  if (absl::Status s =
          ValidateAddress("console_listen", c.console_listen, true);
      !s.ok()) {
    return s;
  }
  if (!c.console_listen.empty()) {
    if (absl::Status s =
            ValidateListenerTls("console.tls", c.console.tls, c.console_listen);
        !s.ok()) {
      return s;
    }
    if (!IsLoopbackAddress(c.console_listen) && c.console.tls.mode != "tls" &&
        c.console.tls.mode != "mtls") {
      return absl::InvalidArgumentError(absl::StrCat(
          "console.tls.mode: tls or mtls required for ", c.console_listen,
          " (not a loopback address): the console's session cookie carries "
          "an admin token"));
    }
  } else if (!c.console.tls.mode.empty()) {
    return absl::InvalidArgumentError(
        "console.tls: applies only with console_listen set");
  }
  if (c.cluster.enabled && !c.cluster.peers.identities.empty() &&
      c.tls.mode != "mtls") {
    return absl::InvalidArgumentError(
        "cluster.peers.identities: needs the client listener in mtls mode "
        "(tls.mode), which checks the nodes' certificates");
  }
  if (!c.admin.client_identities.empty() &&
      EffectiveAdminTls(c).mode != "mtls" &&
      (c.console_listen.empty() || c.console.tls.mode != "mtls")) {
    return absl::InvalidArgumentError(
        "admin.client_identities: needs the admin listener (or the console) "
        "in mtls mode");
  }
  if (c.admin.approval_ttl_ms > c.admin.max_approval_ttl_ms) {
    return absl::InvalidArgumentError(
        "admin.approval_ttl_ms: must be <= max_approval_ttl_ms");
  }
  for (const auto& [name, p] : c.participants) {
    const std::string key = absl::StrCat("participants.", name);
    if (p.protocol == "http") {
      auto url = ParseParticipantUrl(key + ".url", p.url);
      if (!url.ok()) return url.status();
      if (url->https != p.tls) {
        return absl::InvalidArgumentError(absl::StrCat(
            key, ".url: https:// is TLS and http:// plaintext; tls.enabled ",
            p.tls ? "true" : "false", " says otherwise"));
      }
    } else if (absl::Status s =
                   ValidateAddress(key + ".address", p.address, false);
               !s.ok()) {
      return s;
    }
    if (!p.tls && !(p.tls_ca_file.empty() && p.tls_cert_file.empty() &&
                    p.tls_key_file.empty() && p.tls_server_name.empty())) {
      return absl::InvalidArgumentError(absl::StrCat(
          key,
          ".tls: files are set but enabled is false; say enabled: true "
          "or remove them"));
    }
    if (p.tls_cert_file.empty() != p.tls_key_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ".tls: cert_file and key_file go together (mutual TLS)"));
    }
    const std::pair<const char*, const TimeoutBounds*> bounds[] = {
        {"try", &p.try_timeout},
        {"confirm", &p.confirm_timeout},
        {"cancel", &p.cancel_timeout},
        {"query", &p.query_timeout}};
    for (const auto& [phase, b] : bounds) {
      if (absl::Status s =
              ValidateBounds(absl::StrCat(key, ".timeouts.", phase), *b);
          !s.ok()) {
        return s;
      }
    }
  }
  if (c.retry.base_ms > c.retry.cap_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retry.cap_ms: must be >= base_ms (", c.retry.base_ms, ")"));
  }
  if (!c.sync_writes) {
    return absl::InvalidArgumentError(
        "sync_writes: false is not supported: tccd fsyncs every durable WAL "
        "write (group committed), or a crash could lose an acknowledged "
        "decision");
  }
  if (c.transactions.try_timeout_ms > c.transactions.max_try_timeout_ms) {
    return absl::InvalidArgumentError(
        "transactions.try_timeout_ms: must be <= max_try_timeout_ms");
  }
  if (c.transactions.approval_timeout_ms >
      c.transactions.max_approval_timeout_ms) {
    return absl::InvalidArgumentError(
        "transactions.approval_timeout_ms: must be <= "
        "max_approval_timeout_ms");
  }
  if (c.limits.max_payload_bytes > c.limits.max_request_bytes) {
    return absl::InvalidArgumentError(
        "limits.max_payload_bytes: must be <= max_request_bytes");
  }
  if (c.log.format != "text" && c.log.format != "json") {
    return absl::InvalidArgumentError("log.format: must be text or json");
  }
  return absl::OkStatus();
}

absl::StatusOr<ParticipantUrl> ParseParticipantUrl(const std::string& key,
                                                   std::string_view url) {
  // scheme, host (name, IPv4, or [IPv6]), port, optional path.
  static const std::regex kUrl(
      R"(^(http|https)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?$)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_match(url.begin(), url.end(), m, kUrl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": '", std::string(url),
        "' is not http://HOST:PORT[/PATH] or https://HOST:PORT[/PATH]"));
  }
  ParticipantUrl u;
  u.https = m[1].str() == "https";
  u.host = m[2].str();
  if (!u.host.empty() && u.host.front() == '[') {
    u.host = u.host.substr(1, u.host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(m[3].str(), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": port ", m[3].str(), " is not 1-65535"));
  }
  u.port = static_cast<uint16_t>(port);
  u.path = m[4].matched ? m[4].str() : "";
  while (!u.path.empty() && u.path.back() == '/') u.path.pop_back();
  return u;
}

absl::Status AddParticipantFlag(Config& config, std::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--participant '", std::string(flag),
                     "': expected NAME=HOST:PORT or NAME=http://HOST:PORT"));
  }
  const std::string name(flag.substr(0, eq));
  const std::string address(flag.substr(eq + 1));
  if (absl::Status s = identity::ValidateParticipantName(name); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--participant: ", std::string(s.message())));
  }
  // Checked before the config changes: a refused flag leaves it as it was.
  const bool http =
      address.rfind("http://", 0) == 0 || address.rfind("https://", 0) == 0;
  const std::string key = absl::StrCat("--participant ", name);
  bool https = false;
  if (http) {
    auto url = ParseParticipantUrl(key, address);
    if (!url.ok()) return url.status();
    https = url->https;
  } else if (absl::Status s = ValidateAddress(key, address, false); !s.ok()) {
    return s;
  }
  ParticipantConfig& p = config.participants[name];
  if (p.name.empty()) {
    p.name = name;
  }
  if (http) {
    p.protocol = "http";
    p.url = address;
    p.address.clear();
    if (!p.batch) p.rpcs_in_flight = 0;  // the config's batch setting stays
    p.tls = https;
    return absl::OkStatus();
  }
  p.protocol = "grpc";
  p.url.clear();
  p.connections = 0;
  p.batch = false;
  p.address = address;
  return absl::OkStatus();
}

}  // namespace tcc::server
