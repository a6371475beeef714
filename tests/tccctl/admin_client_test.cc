// tccctl's call layer (coordinator/tccctl/admin_client.h) against a fake
// tcc.v1.Admin on 127.0.0.1: the credential it sends, the status it passes
// back unchanged, its deadline, and Watch's stream.
#include "tccctl/admin_client.h"

#include <catch2/catch.hpp>
#include <string>

#include "fake_admin.h"

namespace {

namespace v1 = tcc::v1;
using tcc::tccctl::AdminClient;
using tcc::tccctl::AdminClientOptions;

using tcc::tccctl::testing::FakeAdminServer;
using tcc::tccctl::testing::Pki;
using Server = FakeAdminServer;

AdminClientOptions Options(const Server& s, const std::string& token = "") {
  AdminClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(s.port);
  o.token = token;
  o.timeout_ms = 5000;
  return o;
}

}  // namespace

TEST_CASE("the token goes as authorization: Bearer; none without one") {
  Server s;
  AdminClient with(Options(s, "s3cret"));
  auto r = with.Status();
  REQUIRE(r.ok());
  CHECK(r->health() == "serving");
  CHECK(s.service.last_authorization() == "Bearer s3cret");

  AdminClient without(Options(s));
  REQUIRE(without.Status().ok());
  CHECK(s.service.last_authorization().empty());
  CHECK(s.service.calls() == 2);
}

TEST_CASE("a refused call comes back with its code and message") {
  Server s;
  s.service.reply =
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "approval used");
  AdminClient client(Options(s, "t"));
  v1::IssueApprovalRequest req;
  req.set_gid("g-1");
  auto r = client.IssueApproval(req);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(r.status().message() == "approval used");
  s.service.reply = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "who?");
  CHECK(client.Show("g-1").status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("each call has the deadline it was given") {
  Server s;
  s.service.show_delay_ms = 10000;
  AdminClientOptions o = Options(s, "t");
  o.timeout_ms = 200;
  AdminClient client(o);
  auto r = client.Show("g-slow");
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("Watch delivers every event, or stops when told") {
  Server s;
  AdminClient client(Options(s, "t"));
  std::vector<uint64_t> seen;
  absl::Status st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    CHECK(e.transaction().gid() == "g-w");
    seen.push_back(e.transaction().revision());
    return true;
  });
  CHECK(st.ok());
  CHECK(seen == std::vector<uint64_t>{0, 1, 2});
  CHECK(s.service.last_authorization() == "Bearer t");

  seen.clear();
  st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    seen.push_back(e.transaction().revision());
    return false;
  });
  CHECK(st.ok());
  CHECK(seen.size() == 1);

  s.service.reply = grpc::Status(grpc::StatusCode::NOT_FOUND, "no g-w");
  s.service.watch_events = 0;
  st = client.Watch("g-w", [](const v1::WatchEvent&) { return true; });
  CHECK(st.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("nobody listening is UNAVAILABLE") {
  int port = 0;
  {
    Server s;
    port = s.port;
  }
  AdminClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.timeout_ms = 2000;
  AdminClient client(o);
  CHECK(client.Status().status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE(
    "TLS: tccd verified against --tls-ca; a client certificate for mTLS") {
  Pki pki;
  {
    Server s(&pki);
    AdminClientOptions o = Options(s, "t");
    o.tls_ca_pem = pki.Read("ca.pem");
    auto r = AdminClient(o).Status();
    INFO(r.status().ToString());
    CHECK(r.ok());
    // By the name in its certificate rather than the address.
    o.tls_server_name = "localhost";
    CHECK(AdminClient(o).Status().ok());
    // A name the certificate does not carry: refused by the client.
    o.tls_server_name = "elsewhere.example";
    CHECK(AdminClient(o).Status().status().code() ==
          absl::StatusCode::kUnavailable);
    // Plaintext to a TLS listener: no answer.
    CHECK(!AdminClient(Options(s, "t")).Status().ok());
    // A CA that did not sign it.
    o = Options(s, "t");
    o.tls_ca_pem = pki.Read("alice.pem");
    CHECK(AdminClient(o).Status().status().code() ==
          absl::StatusCode::kUnavailable);
  }
  {
    Server s(&pki, /*require_client=*/true);
    AdminClientOptions o = Options(s);
    o.tls_ca_pem = pki.Read("ca.pem");
    CHECK(!AdminClient(o).Status().ok());  // no client certificate
    o.tls_cert_pem = pki.Read("alice.pem");
    o.tls_key_pem = pki.Read("alice.key");
    auto r = AdminClient(o).Status();
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(s.service.last_peer_cn() == "alice");
  }
}

TEST_CASE("a token sent in plaintext off this machine is warned about") {
  tcc::tccctl::AdminClientOptions o;
  o.token = "secret-token-1234";
  o.address = "10.0.0.5:7071";
  CHECK(tcc::tccctl::PlaintextTokenWarning(o).find("plaintext to "
                                                   "10.0.0.5:7071") !=
        std::string::npos);
  for (const char* local :
       {"127.0.0.1:7070", "localhost:7070", "[::1]:7070", "::1",
        "unix:/run/tccd.sock", "unix-abstract:tccd", "ipv4:127.0.0.1:7070",
        "dns:///localhost:7070", "dns://8.8.8.8/localhost:7070",
        "ipv6:[::1]:7070"}) {
    INFO(local);
    o.address = local;
    CHECK(tcc::tccctl::PlaintextTokenWarning(o).empty());
  }
  o.address = "dns:///tccd.example.com:7071";
  CHECK_FALSE(tcc::tccctl::PlaintextTokenWarning(o).empty());
  o.address = "10.0.0.5:7071";
  o.tls_ca_pem = "-----BEGIN CERTIFICATE-----";
  CHECK(tcc::tccctl::PlaintextTokenWarning(o).empty());
  o.tls_ca_pem.clear();
  o.token.clear();
  CHECK(tcc::tccctl::PlaintextTokenWarning(o).empty());
}
