#include "server/config.h"

#include <catch2/catch.hpp>
#include <string>

using tcc::server::Config;
using tcc::server::LoadConfigFile;
using tcc::server::ParseConfig;

namespace {

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseConfig(yaml, "test.yaml");
  REQUIRE(!c.ok());
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

}  // namespace

TEST_CASE("the shipped config/tccd.yaml loads and matches the defaults") {
  auto c = LoadConfigFile(TCC_DEFAULT_CONFIG);
  REQUIRE(c.ok());
  Config d;
  CHECK(c->listen == d.listen);
  CHECK(c->metrics_listen == d.metrics_listen);
  CHECK(c->sync_writes);
  CHECK(!c->allow_direct_targets);
  CHECK(c->limits.max_branches == 64);
  CHECK(c->limits.max_payload_bytes == 65536);
  CHECK(c->limits.max_request_bytes == 1048576);
  CHECK(c->retention.full_record_ms == 24LL * 3600 * 1000);
  CHECK(c->retention.compact_entry_ms == 7LL * 24 * 3600 * 1000);
  REQUIRE(c->participants.size() == 2);
  CHECK(c->participants.at("bank-a").address == "127.0.0.1:7101");
  CHECK(c->participants.at("bank-b").try_timeout.max_ms == 5000);
}

TEST_CASE("an empty file gives the defaults") {
  auto c = ParseConfig("", "empty.yaml");
  REQUIRE(c.ok());
  CHECK(c->listen == "127.0.0.1:7070");
  CHECK(c->participants.empty());
}

TEST_CASE("participants: shorthand and full form") {
  auto c = ParseConfig(R"(
participant_defaults:
  timeouts:
    all: {min_ms: 5, max_ms: 900, initial_ms: 100}
participants:
  a: 127.0.0.1:1
  b:
    address: 127.0.0.1:2
    rpcs_in_flight: 8
    timeouts:
      try: {min_ms: 10, max_ms: 20, initial_ms: 15}
)",
                       "t");
  REQUIRE(c.ok());
  CHECK(c->participants.at("a").rpcs_in_flight == 0);  // the global one
  CHECK(c->participants.at("b").rpcs_in_flight == 8);
  CHECK(c->participants.at("a").confirm_timeout.max_ms == 900);
  CHECK(c->participants.at("b").try_timeout.max_ms == 20);
  CHECK(c->participants.at("b").cancel_timeout.min_ms == 5);
}

TEST_CASE("unknown keys are refused, naming the key") {
  CHECK(ErrorOf("listn: 127.0.0.1:1\n") == "test.yaml: listn: unknown key");
  CHECK(ErrorOf("retry: {base_ms: 1, jitter: 2}\n") ==
        "test.yaml: retry.jitter: unknown key");
  CHECK(ErrorOf("participants:\n  a:\n    address: 127.0.0.1:1\n    x: 1\n")
            .find("participants.a.x: unknown key") != std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    timeouts:\n"
                "      tryy: {min_ms: 1}\n")
            .find("participants.a.timeouts.tryy: unknown key") !=
        std::string::npos);
}

TEST_CASE("bad values are refused, naming the key") {
  CHECK(ErrorOf("limits: {max_branches: 0}\n")
            .find("limits.max_branches: must be between 1") !=
        std::string::npos);
  CHECK(ErrorOf("limits: {max_branches: many}\n")
            .find("limits.max_branches: must be an integer") !=
        std::string::npos);
  CHECK(ErrorOf("sync_writes: yes please\n")
            .find("sync_writes: must be true or false") != std::string::npos);
  // Only true is accepted: tccd always fsyncs.
  CHECK(ErrorOf("sync_writes: false\n").find("sync_writes: false is not") !=
        std::string::npos);
  // The WAL serves at most 1,000 per List page.
  CHECK(ErrorOf("limits: {max_list_page: 1001}\n")
            .find("limits.max_list_page: must be between 1") !=
        std::string::npos);
  CHECK(ErrorOf("transactions: {max_clock_skew_ms: -1}\n")
            .find("transactions.max_clock_skew_ms: must be between 0") !=
        std::string::npos);
  CHECK(ErrorOf("log: {level: loud}\n").find("log.level: must be one of") !=
        std::string::npos);
  CHECK(ErrorOf("listen: nowhere\n").find("listen: 'nowhere' is not") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a: {timeouts: {}}\n")
            .find("participants.a.address: required") != std::string::npos);
  CHECK(
      ErrorOf("participants:\n  a b: 127.0.0.1:1\n").find("participants.a b") !=
      std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    timeouts:\n"
                "      try: {min_ms: 50, max_ms: 10}\n")
            .find("participants.a.timeouts.try.max_ms: must be >= min_ms") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a: {address: 'h:1', rpcs_in_flight: 0}\n")
            .find("participants.a.rpcs_in_flight: must be between 1") !=
        std::string::npos);
  CHECK(ErrorOf("retry: {base_ms: 100, cap_ms: 10}\n").find("retry.cap_ms") !=
        std::string::npos);
  CHECK(ErrorOf("listen: [1, 2]\n").find("listen: must be a string") !=
        std::string::npos);
  CHECK(ErrorOf("retry: 5\n").find("retry: must be a mapping") !=
        std::string::npos);
  CHECK(ErrorOf("a: [").find("not valid YAML") != std::string::npos);
}

TEST_CASE("participant TLS keys") {
  auto c = ParseConfig(
      "participants:\n  a:\n    address: h:1\n    tls:\n"
      "      enabled: true\n      ca_file: ca.pem\n      cert_file: c.pem\n"
      "      key_file: k.pem\n      server_name: bank-a.internal\n",
      "t.yaml");
  REQUIRE(c.ok());
  const auto& p = c->participants.at("a");
  CHECK(p.tls);
  CHECK(p.tls_ca_file == "ca.pem");
  CHECK(p.tls_cert_file == "c.pem");
  CHECK(p.tls_key_file == "k.pem");
  CHECK(p.tls_server_name == "bank-a.internal");
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    tls:\n"
                "      ca_file: ca.pem\n")
            .find("enabled is false") != std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    tls:\n"
                "      enabled: true\n      cert_file: c.pem\n")
            .find("cert_file and key_file go together") != std::string::npos);
}

TEST_CASE("listener TLS: plaintext must be said off loopback") {
  CHECK(ParseConfig("listen: 127.0.0.1:1\n", "t.yaml").ok());
  CHECK(ParseConfig("listen: localhost:1\n", "t.yaml").ok());
  CHECK(ParseConfig("listen: '[::1]:1'\n", "t.yaml").ok());
  CHECK(ErrorOf("listen: 0.0.0.0:7070\n").find("tls.mode: required") !=
        std::string::npos);
  CHECK(
      ParseConfig("listen: 0.0.0.0:7070\ntls: {mode: plaintext}\n", "t").ok());
  CHECK(ErrorOf("tls: {mode: tls}\n").find("needs cert_file and key_file") !=
        std::string::npos);
  CHECK(ErrorOf("tls: {mode: mtls, cert_file: c, key_file: k}\n")
            .find("tls.client_ca_file: required in mtls mode") !=
        std::string::npos);
  CHECK(ErrorOf("tls: {mode: tcp}\n").find("tls.mode: must be one of") !=
        std::string::npos);
  CHECK(
      ErrorOf("tls: {cert_file: c, key_file: k}\n").find("mode is plaintext") !=
      std::string::npos);
  CHECK(ErrorOf("admin_listen: 10.0.0.1:7071\n")
            .find("admin.tls.mode: required") != std::string::npos);
  CHECK(ErrorOf("admin: {tls: {mode: tls, cert_file: c, key_file: k}}\n")
            .find("applies only with admin_listen") != std::string::npos);
  auto c = ParseConfig(
      "admin_listen: 10.0.0.1:7071\n"
      "admin:\n  tls: {mode: mtls, cert_file: c, key_file: k, "
      "client_ca_file: ca}\n  client_identities: [alice, ops-bot]\n",
      "t");
  REQUIRE(c.ok());
  CHECK(c->admin.client_identities ==
        std::vector<std::string>{"alice", "ops-bot"});
  CHECK(tcc::server::EffectiveAdminTls(*c).mode == "mtls");
  CHECK(ErrorOf("admin: {client_identities: [alice]}\n")
            .find("needs the admin listener (or the console) in mtls mode") !=
        std::string::npos);
}

TEST_CASE("the console: off by default, TLS required off loopback") {
  auto c = tcc::server::ParseConfig("", "t");
  REQUIRE(c.ok());
  CHECK(c->console_listen.empty());
  CHECK(c->console.max_connections == 64);
  auto on = tcc::server::ParseConfig(
      "console_listen: 127.0.0.1:7080\nconsole: {max_connections: 8}\n", "t");
  REQUIRE(on.ok());
  CHECK(on->console_listen == "127.0.0.1:7080");
  CHECK(on->console.max_connections == 8);
  // Off loopback the session cookie would travel in the clear: refused,
  // even when plaintext is said outright.
  CHECK(ErrorOf("console_listen: 0.0.0.0:7080\n").find("console.tls.mode") !=
        std::string::npos);
  CHECK(ErrorOf("console_listen: 10.1.2.3:7080\n"
                "console: {tls: {mode: plaintext}}\n")
            .find("tls or mtls required for 10.1.2.3:7080") !=
        std::string::npos);
  CHECK(ErrorOf("console: {tls: {mode: tls, cert_file: c, key_file: k}}\n")
            .find("only with console_listen") != std::string::npos);
  CHECK(ErrorOf("console_listen: 127.0.0.1:7080\n"
                "console: {max_connections: 0}\n")
            .find("max_connections") != std::string::npos);
  // A console in mtls lets listed certificates sign in.
  auto mtls = tcc::server::ParseConfig(
      "console_listen: 10.1.2.3:7080\n"
      "console: {tls: {mode: mtls, cert_file: c, key_file: k, "
      "client_ca_file: ca}}\nadmin: {client_identities: [alice]}\n",
      "t");
  CHECK(mtls.ok());
}

TEST_CASE("admin and rate-limit keys") {
  auto c = ParseConfig(
      "admin: {token_file: /etc/tccd/tokens, approval_ttl_ms: 60000}\n"
      "limits: {client_requests_per_s: 100, client_burst: 200}\n",
      "t");
  REQUIRE(c.ok());
  CHECK(c->admin.token_file == "/etc/tccd/tokens");
  CHECK(c->admin.approval_ttl_ms == 60000);
  CHECK(c->limits.client_requests_per_s == 100);
  CHECK(c->limits.client_burst == 200);
  CHECK(ErrorOf("admin: {approval_ttl_ms: 90000000, max_approval_ttl_ms: "
                "60000}\n")
            .find("approval_ttl_ms: must be <=") != std::string::npos);
}

TEST_CASE("--participant flag") {
  Config c;
  CHECK(tcc::server::AddParticipantFlag(c, "bank-c=127.0.0.1:7103").ok());
  CHECK(c.participants.at("bank-c").address == "127.0.0.1:7103");
  CHECK(!tcc::server::AddParticipantFlag(c, "bank-c").ok());
  CHECK(!tcc::server::AddParticipantFlag(c, "b c=127.0.0.1:1").ok());
  CHECK(!tcc::server::AddParticipantFlag(c, "d=127.0.0.1").ok());
}

TEST_CASE("a missing file is NOT_FOUND") {
  CHECK(LoadConfigFile("/nonexistent/tccd.yaml").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("HTTP participants: protocol, url, connections, tls") {
  auto c = ParseConfig(R"(
participant_calls:
  http_connections: 7
participants:
  short: http://127.0.0.1:8081
  full:
    protocol: http
    url: https://py-bank.internal:8443/tcc/v1/
    connections: 3
    tls:
      ca_file: ca.pem
      server_name: py-bank
  g:
    protocol: grpc
    address: 127.0.0.1:1
)",
                       "t");
  REQUIRE(c.ok());
  CHECK(c->participant_calls.http_connections == 7);
  const auto& s = c->participants.at("short");
  CHECK(s.protocol == "http");
  CHECK(s.url == "http://127.0.0.1:8081");
  CHECK(!s.tls);
  CHECK(s.connections == 0);
  const auto& f = c->participants.at("full");
  CHECK(f.protocol == "http");
  CHECK(f.tls);  // https:// is TLS
  CHECK(f.connections == 3);
  CHECK(f.tls_ca_file == "ca.pem");
  CHECK(c->participants.at("g").protocol == "grpc");

  auto u = tcc::server::ParseParticipantUrl("k", f.url);
  REQUIRE(u.ok());
  CHECK(u->https);
  CHECK(u->host == "py-bank.internal");
  CHECK(u->port == 8443);
  CHECK(u->path == "/tcc/v1");  // trailing '/' dropped
  u = tcc::server::ParseParticipantUrl("k", "http://[::1]:80");
  REQUIRE(u.ok());
  CHECK(u->host == "::1");
  CHECK(u->path.empty());

  // Bad input is refused, naming the key; nothing is half-applied.
  CHECK(ErrorOf("participants:\n  a:\n    protocol: http\n")
            .find("participants.a.url: required") != std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    protocol: http\n    url: "
                "http://h:1\n    address: h:1\n")
            .find("participants.a.address: for protocol grpc") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    protocol: ftp\n    url: x\n")
            .find("participants.a.protocol: must be one of grpc, http") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    url: http://h:1\n")
            .find("participants.a.url: for protocol http") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    connections: 2\n")
            .find("participants.a.connections: for protocol http") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    protocol: http\n    url: "
                "http://h:1\n    rpcs_in_flight: 2\n")
            .find("participants.a.rpcs_in_flight: for protocol grpc") !=
        std::string::npos);
  CHECK(ErrorOf("participants:\n  a:\n    protocol: http\n    url: "
                "http://h:1\n    tls: {enabled: true}\n")
            .find("say https://") != std::string::npos);
  for (const char* bad :
       {"http://h", "http://h:0", "http://h:65536", "http://h:1?x=1",
        "http://h:1#f", "http://user@h:1", "http:// h:1", "http://h:1/a b"}) {
    INFO(bad);
    CHECK(ErrorOf(std::string("participants:\n  a: ") + bad + "\n")
              .find("participants.a") != std::string::npos);
  }
  CHECK(ErrorOf("participants:\n  a:\n    protocol: http\n    url: "
                "http://h:1\n    connections: 0\n")
            .find("participants.a.connections: must be between 1") !=
        std::string::npos);
}

TEST_CASE("HTTP participants with batch: true take rpcs_in_flight") {
  auto c = ParseConfig(R"(
participants:
  py:
    protocol: http
    url: http://127.0.0.1:8081
    batch: true
    rpcs_in_flight: 2
  plain: http://127.0.0.1:8082
)",
                       "t");
  REQUIRE(c.ok());
  CHECK(c->participants.at("py").batch);
  CHECK(c->participants.at("py").rpcs_in_flight == 2);
  CHECK(!c->participants.at("plain").batch);  // off unless said
  CHECK(ErrorOf("participants:\n  a:\n    address: h:1\n    batch: true\n")
            .find("participants.a.batch: for protocol http") !=
        std::string::npos);
  // A --participant flag sets the url and keeps the config's batch.
  Config f = *c;
  REQUIRE(tcc::server::AddParticipantFlag(f, "py=http://127.0.0.1:9").ok());
  CHECK(f.participants.at("py").batch);
  CHECK(f.participants.at("py").rpcs_in_flight == 2);
  CHECK(tcc::server::ValidateConfig(f).ok());
  REQUIRE(tcc::server::AddParticipantFlag(f, "py=127.0.0.1:9").ok());
  CHECK(!f.participants.at("py").batch);
}

TEST_CASE("--participant flag with an HTTP url") {
  Config c;
  REQUIRE(tcc::server::AddParticipantFlag(c, "py=http://127.0.0.1:9/x").ok());
  CHECK(c.participants.at("py").protocol == "http");
  CHECK(c.participants.at("py").url == "http://127.0.0.1:9/x");
  CHECK(c.participants.at("py").address.empty());
  CHECK(tcc::server::ValidateConfig(c).ok());
  REQUIRE(tcc::server::AddParticipantFlag(c, "py=127.0.0.1:10").ok());
  CHECK(c.participants.at("py").protocol == "grpc");
  CHECK(c.participants.at("py").url.empty());
  CHECK(!tcc::server::AddParticipantFlag(c, "q=http://127.0.0.1").ok());
  CHECK(!tcc::server::AddParticipantFlag(c, "r=127.0.0.1").ok());
  CHECK(c.participants.count("q") == 0);  // a refused flag changes nothing
  CHECK(c.participants.count("r") == 0);
  CHECK(tcc::server::ValidateConfig(c).ok());
}

TEST_CASE("cluster: off by default; when on, every key is checked by name") {
  {
    auto c = ParseConfig("", "empty.yaml");
    REQUIRE(c.ok());
    CHECK_FALSE(c->cluster.enabled);
    CHECK(c->cluster.shards == 64);
    CHECK(c->cluster.lease_ttl_ms == 5000);
  }
  const std::string base =
      "cluster:\n  enabled: true\n  node_id: n1\n"
      "  advertise_address: 127.0.0.1:7070\n"
      "  etcd:\n    endpoints: [127.0.0.1:2379, 127.0.0.1:2380]\n";
  {
    auto c = ParseConfig(base, "ok.yaml");
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    CHECK(c->cluster.etcd.endpoints.size() == 2);
    CHECK(c->cluster.key_prefix == "/tccd/");
    CHECK(c->cluster.hold_buffered_ms == 500);
    CHECK(c->cluster.etcd.txn_attempt_timeout_ms == 1000);
    CHECK(c->cluster.etcd.leader_check_ms == 1000);
  }
  CHECK(ParseConfig(base + "    leader_check_ms: 0\n", "ok.yaml").ok());
  CHECK_THAT(ErrorOf(base + "    leader_check_ms: 10\n"),
             Catch::Contains("cluster.etcd.leader_check_ms: must be 0 (off) "
                             "or 100 to 60000"));
  CHECK_THAT(ErrorOf(base + "    txn_attempt_timeout_ms: 6000\n"),
             Catch::Contains("cluster.etcd.txn_attempt_timeout_ms: must be <= "
                             "etcd.call_timeout_ms"));
  CHECK_THAT(ErrorOf(base + "    txn_attempt_timeout_ms: 50\n"),
             Catch::Contains("txn_attempt_timeout_ms: must be between"));
  {
    auto c = ParseConfig(base + "  hold_buffered_ms: 0\n", "ok.yaml");
    REQUIRE(c.ok());
    CHECK(c->cluster.hold_buffered_ms == 0);
  }
  CHECK_THAT(ErrorOf(base + "  hold_buffered_ms: 60001\n"),
             Catch::Contains("cluster.hold_buffered_ms: must be between"));
  {
    // The nodes' identities: only with an mtls client listener, which
    // checks their certificates.
    const std::string peers =
        "  peers: {tls: true, ca_file: ca, cert_file: c, key_file: k, "
        "identities: [tccd-node]}\n";
    CHECK_THAT(ErrorOf(base + peers),
               Catch::Contains("cluster.peers.identities: needs the client "
                               "listener in mtls mode"));
    auto c = ParseConfig(base + peers +
                             "tls: {mode: mtls, cert_file: c, key_file: k, "
                             "client_ca_file: ca}\n",
                         "ok.yaml");
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    CHECK(c->cluster.peers.identities == std::vector<std::string>{"tccd-node"});
    CHECK_THAT(ErrorOf(base + "  peers: {identities: [\"\"]}\n"),
               Catch::Contains("cluster.peers.identities: must be a list of "
                               "non-empty strings"));
  }
  CHECK_THAT(ErrorOf("cluster:\n  enabled: true\n"),
             Catch::Contains("cluster.node_id"));
  CHECK_THAT(ErrorOf("cluster:\n  enabled: true\n  node_id: n1\n"),
             Catch::Contains("cluster.advertise_address"));
  CHECK_THAT(ErrorOf("cluster:\n  enabled: true\n  node_id: n1\n"
                     "  advertise_address: 127.0.0.1:1\n"),
             Catch::Contains("cluster.etcd.endpoints"));
  CHECK_THAT(ErrorOf(base + "  node_id_typo: x\n"),
             Catch::Contains("cluster.node_id_typo: unknown key"));
  CHECK_THAT(ErrorOf(base + "  lease_ttl_ms: 2500\n"),
             Catch::Contains("cluster.lease_ttl_ms: whole seconds"));
  CHECK_THAT(ErrorOf(base + "  lease_ttl_ms: 1000\n"),
             Catch::Contains("cluster.lease_ttl_ms: must be between"));
  CHECK_THAT(ErrorOf(base + "  lease_margin_ms: 3000\n"),
             Catch::Contains("cluster.lease_margin_ms"));
  CHECK_THAT(ErrorOf(base + "  key_prefix: /tccd\n"),
             Catch::Contains("cluster.key_prefix: must end with '/'"));
  CHECK_THAT(ErrorOf(base + "  shards: 0\n"),
             Catch::Contains("cluster.shards: must be between"));
  CHECK_THAT(ErrorOf("cluster:\n  enabled: true\n  node_id: bad/id\n"
                     "  advertise_address: 127.0.0.1:7070\n"
                     "  etcd:\n    endpoints: [127.0.0.1:2379]\n"),
             Catch::Contains("cluster.node_id: 1-64 bytes"));
  CHECK_THAT(ErrorOf(base + "  min_dedup_window_ms: 7200000\n"),
             Catch::Contains("cluster.min_dedup_window_ms"));
  CHECK_THAT(ErrorOf(base + "    user: tcc\n"),
             Catch::Contains("cluster.etcd.password"));
  CHECK_THAT(ErrorOf(base + "    ca_file: /x.pem\n"),
             Catch::Contains("cluster.etcd.tls"));
  CHECK_THAT(ErrorOf(base + "    tls: true\n    cert_file: /c.pem\n"),
             Catch::Contains("cluster.etcd.key_file"));
  CHECK_THAT(ErrorOf("cluster:\n  enabled: true\n  node_id: n1\n"
                     "  advertise_address: 127.0.0.1:7070\n"
                     "  etcd:\n    endpoints: [http://127.0.0.1:2379]\n"),
             Catch::Contains("cluster.etcd.endpoints"));
  // Off: the section may be incomplete (nothing of it is used).
  CHECK(ParseConfig("cluster:\n  enabled: false\n  shards: 16\n", "off.yaml")
            .ok());
}
