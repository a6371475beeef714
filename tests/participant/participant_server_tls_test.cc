// The participant server's TLS options over real gRPC on loopback, with
// certificates made by openssl at test time: in mutual TLS only a caller
// with a certificate from the client CA gets an answer; bad files stop
// Start() with the option named.
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tcc/barrier/memory_store.h"
#include "tcc/clock/clock.h"
#include "tcc/participant/participant_server.h"
#include "tcc/v1/participant.grpc.pb.h"
#include "test_certs.h"
#include "test_dirs.h"

namespace tcc::testing {
namespace {

using harness::ReadFile;

struct Fixture {
  Fixture()
      : clock(1'000'000),
        participant(store, clock, {.name = "p", .barrier = {}}) {
    auto made = harness::MakeTestPki(dir);
    INFO(made.status().ToString());
    REQUIRE(made.ok());
    pki = std::make_unique<harness::TestPki>(*made);
  }

  // Query over a channel with these credentials.
  grpc::Status Query(int port,
                     std::shared_ptr<grpc::ChannelCredentials> credentials) {
    auto stub = v1::Participant::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), std::move(credentials)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(3));
    v1::QueryRequest req;
    req.mutable_key()->set_gid("g1");
    req.mutable_key()->set_created_at_ms(1);
    req.mutable_key()->set_branch_id("b1");
    v1::QueryResponse resp;
    return stub->Query(&ctx, req, &resp);
  }

  std::shared_ptr<grpc::ChannelCredentials> Tls(
      const std::string& ca, const harness::CertFiles& cert = {}) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadFile(ca);
    if (!cert.cert_file.empty()) {
      o.pem_cert_chain = ReadFile(cert.cert_file);
      o.pem_private_key = ReadFile(cert.key_file);
    }
    return grpc::SslCredentials(o);
  }

  std::string dir = harness::MakeTempDir("tcc-participant-tls");
  harness::Cleanup cleanup{dir};
  std::unique_ptr<harness::TestPki> pki;
  barrier::MemoryBarrierStore store;
  clock::ManualClock clock;
  participant::Participant participant;
};

TEST_CASE("participant server in mutual TLS answers only certified callers") {
  Fixture f;
  participant::ParticipantServer server(
      f.participant, {.listen_address = "127.0.0.1:0",
                      .tls_cert_file = f.pki->server().cert_file,
                      .tls_key_file = f.pki->server().key_file,
                      .tls_client_ca_file = f.pki->ca_file()});
  REQUIRE(server.Start().ok());
  const int port = server.port();
  auto tccd = f.pki->IssueClientCert("tccd");
  REQUIRE(tccd.ok());
  auto foreign = f.pki->IssueClientCert("tccd", /*from_other_ca=*/true);
  REQUIRE(foreign.ok());

  grpc::Status ok = f.Query(port, f.Tls(f.pki->ca_file(), *tccd));
  INFO(ok.error_message());
  CHECK(ok.ok());
  CHECK(f.Query(port, grpc::InsecureChannelCredentials()).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(f.Query(port, f.Tls(f.pki->ca_file())).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(f.Query(port, f.Tls(f.pki->ca_file(), *foreign)).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  // A caller that does not trust the server's CA gives up on its own.
  CHECK_FALSE(f.Query(port, f.Tls(f.pki->other_ca_file(), *tccd)).ok());
  server.Shutdown();
}

TEST_CASE(
    "participant server in TLS without a client CA takes any caller "
    "that trusts it") {
  Fixture f;
  participant::ParticipantServer server(
      f.participant, {.listen_address = "127.0.0.1:0",
                      .tls_cert_file = f.pki->server().cert_file,
                      .tls_key_file = f.pki->server().key_file,
                      .tls_client_ca_file = ""});
  REQUIRE(server.Start().ok());
  CHECK(f.Query(server.port(), f.Tls(f.pki->ca_file())).ok());
  CHECK_FALSE(f.Query(server.port(), grpc::InsecureChannelCredentials()).ok());
  server.Shutdown();
}

TEST_CASE("participant server: bad TLS options stop Start naming the option") {
  Fixture f;
  const std::string missing = f.dir + "/missing.pem";
  {
    participant::ParticipantServer server(
        f.participant, {.listen_address = "127.0.0.1:0",
                        .tls_cert_file = missing,
                        .tls_key_file = f.pki->server().key_file,
                        .tls_client_ca_file = ""});
    absl::Status s = server.Start();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("tls_cert_file: " + missing) !=
          absl::string_view::npos);
  }
  {
    participant::ParticipantServer server(
        f.participant, {.listen_address = "127.0.0.1:0",
                        .tls_cert_file = "",
                        .tls_key_file = "",
                        .tls_client_ca_file = f.pki->ca_file()});
    absl::Status s = server.Start();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("tls_client_ca_file") != absl::string_view::npos);
  }
  {
    participant::ParticipantServer server(
        f.participant, {.listen_address = "127.0.0.1:0",
                        .tls_cert_file = f.pki->server().cert_file,
                        .tls_key_file = f.pki->server().key_file,
                        .tls_client_ca_file = missing});
    absl::Status s = server.Start();
    CHECK(s.message().find("tls_client_ca_file: " + missing) !=
          absl::string_view::npos);
  }
}

}  // namespace
}  // namespace tcc::testing
