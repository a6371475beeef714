// tccd's TLS credential builder (server/tls.h) over certificates made by
// openssl at test time: what each config asks for is built, and every bad
// file is refused with the config key that named it.
#include "server/tls.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "test_certs.h"

namespace tcc::server {
namespace {

using harness::TestPki;

struct Pki {
  Pki() {
    std::string tmpl = std::filesystem::temp_directory_path().string() +
                       "/tccd-tls-unit-XXXXXX";
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    auto made = harness::MakeTestPki(dir);
    INFO(made.status().ToString());
    REQUIRE(made.ok());
    pki = std::make_unique<TestPki>(*made);
    auto tccd = pki->IssueClientCert("tccd");
    REQUIRE(tccd.ok());
    tccd_cert = *tccd;
  }
  ~Pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  ListenerTlsConfig Listener(const std::string& mode) const {
    ListenerTlsConfig t;
    t.mode = mode;
    t.cert_file = pki->server().cert_file;
    t.key_file = pki->server().key_file;
    if (mode == "mtls") t.client_ca_file = pki->ca_file();
    return t;
  }
  ParticipantConfig Participant() const {
    ParticipantConfig p;
    p.name = "bank-a";
    p.address = "127.0.0.1:7101";
    p.tls = true;
    p.tls_ca_file = pki->ca_file();
    p.tls_cert_file = tccd_cert.cert_file;
    p.tls_key_file = tccd_cert.key_file;
    return p;
  }

  std::string dir;
  std::unique_ptr<TestPki> pki;
  harness::CertFiles tccd_cert;
};

// The status message contains `text`.
bool Says(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST_CASE("listener credentials: plaintext, tls and mtls are built") {
  Pki p;
  for (const char* mode : {"", "plaintext", "tls", "mtls"}) {
    INFO(mode);
    ListenerTlsConfig t = p.Listener(mode);
    if (std::string(mode).empty() || std::string(mode) == "plaintext") t = {};
    t.mode = mode;
    auto c = ListenerCredentials("tls", "client listener", "127.0.0.1:0", t);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    CHECK(*c != nullptr);
  }
}

TEST_CASE("listener credentials: bad files are refused naming the key") {
  Pki p;
  const std::string missing = p.dir + "/missing.pem";
  {
    std::ofstream junk(p.dir + "/junk.pem");
    junk << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  }
  ListenerTlsConfig t = p.Listener("tls");
  t.cert_file = missing;
  auto s = ListenerCredentials("tls", "client listener", "x:1", t).status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Says(s, "tls.cert_file: " + missing + ": cannot read"));

  t = p.Listener("tls");
  t.cert_file = p.dir + "/junk.pem";
  s = ListenerCredentials("tls", "client listener", "x:1", t).status();
  CHECK(Says(s, "tls.cert_file: " + p.dir + "/junk.pem: no PEM certificate"));

  t = p.Listener("tls");
  t.key_file = p.pki->ca_file();  // a certificate, not a key
  s = ListenerCredentials("admin.tls", "admin listener", "x:1", t).status();
  CHECK(Says(s, "admin.tls.key_file: "));

  t = p.Listener("tls");
  t.key_file = p.pki->other_server().key_file;
  s = ListenerCredentials("tls", "client listener", "x:1", t).status();
  CHECK(Says(s, "not the private key of tls.cert_file"));

  t = p.Listener("mtls");
  t.client_ca_file = missing;
  s = ListenerCredentials("tls", "client listener", "x:1", t).status();
  CHECK(Says(s, "tls.client_ca_file: " + missing));
}

TEST_CASE("participant channel credentials") {
  Pki p;
  ParticipantConfig off;
  off.name = "bank-a";
  auto plain = ParticipantChannelCredentials(off);
  REQUIRE(plain.ok());
  CHECK(plain->credentials != nullptr);
  CHECK(plain->ssl_target_name_override.empty());

  ParticipantConfig mutual = p.Participant();
  mutual.tls_server_name = "localhost";
  auto tls = ParticipantChannelCredentials(mutual);
  INFO(tls.status().ToString());
  REQUIRE(tls.ok());
  CHECK(tls->credentials != nullptr);
  CHECK(tls->ssl_target_name_override == "localhost");

  ParticipantConfig system_roots = p.Participant();
  system_roots.tls_ca_file.clear();
  system_roots.tls_cert_file.clear();
  system_roots.tls_key_file.clear();
  CHECK(ParticipantChannelCredentials(system_roots).ok());

  ParticipantConfig bad = p.Participant();
  bad.tls_cert_file = p.dir + "/missing.pem";
  auto s = ParticipantChannelCredentials(bad).status();
  CHECK(
      Says(s, "participants.bank-a.tls.cert_file: " + p.dir + "/missing.pem"));
  bad = p.Participant();
  bad.tls_ca_file = p.tccd_cert.key_file;
  s = ParticipantChannelCredentials(bad).status();
  CHECK(Says(s, "participants.bank-a.tls.ca_file: "));
}

TEST_CASE("CheckTlsFiles covers the client, admin and participant settings") {
  Pki p;
  Config c;
  c.tls = p.Listener("mtls");
  c.participants["bank-a"] = p.Participant();
  CHECK(CheckTlsFiles(c).ok());

  // admin.tls applies only with admin_listen set.
  c.admin.tls = p.Listener("tls");
  c.admin.tls.cert_file = p.dir + "/missing.pem";
  CHECK(CheckTlsFiles(c).ok());
  c.admin_listen = "127.0.0.1:0";
  CHECK(Says(CheckTlsFiles(c), "admin.tls.cert_file"));
  c.admin.tls = p.Listener("tls");
  CHECK(CheckTlsFiles(c).ok());

  c.participants["bank-a"].tls_key_file = p.dir + "/missing.key";
  CHECK(Says(CheckTlsFiles(c), "participants.bank-a.tls.key_file"));
}

}  // namespace
}  // namespace tcc::server
