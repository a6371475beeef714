// Throw-away X.509 certificates for tests, made with the openssl command-line
// tool into a directory at test time (never committed): a CA, a server
// certificate for 127.0.0.1 and localhost, client certificates named by
// their subject CN, and a second, unrelated CA to test that trust is
// checked. Keys are EC P-256; certificates are valid for two days from now.
//
//   auto pki = tcc::harness::MakeTestPki(dir);          // CA + server cert
//   auto tccd = pki->IssueClientCert("tccd");           // CN=tccd, from CA
//   auto mallory = pki->IssueClientCert("mallory", /*from_other_ca=*/true);
//
// Not thread-safe (it runs openssl, which keeps a serial file in `dir`).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tcc::harness {

// A certificate and its private key, as PEM file paths.
struct CertFiles {
  std::string cert_file;
  std::string key_file;
};

class TestPki {
 public:
  // The directory everything is written to.
  const std::string& dir() const { return dir_; }
  // The CA every certificate below is issued by (PEM, self-signed).
  const std::string& ca_file() const { return ca_.cert_file; }
  // A server certificate from the CA: CN=localhost, SAN IP:127.0.0.1 and
  // DNS:localhost, extended key usage serverAuth.
  const CertFiles& server() const { return server_; }
  // A CA unrelated to ca_file(), and a server certificate from it for
  // 127.0.0.1/localhost (trusted by nobody who trusts ca_file()).
  const std::string& other_ca_file() const { return other_ca_.cert_file; }
  const CertFiles& other_server() const { return other_server_; }

  // Issues a client certificate with subject CN=`name` (extended key usage
  // clientAuth, no SAN) from the CA, or from the other CA. Files are
  // `<dir>/client-<name>[-other].{pem,key}`; issuing a name twice replaces
  // them. `name` must be [A-Za-z0-9._-]+.
  [[nodiscard]] absl::StatusOr<CertFiles> IssueClientCert(
      const std::string& name, bool from_other_ca = false) const;

 private:
  friend absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);
  std::string dir_;
  CertFiles ca_;
  CertFiles server_;
  CertFiles other_ca_;
  CertFiles other_server_;
};

// Creates `dir` if needed and writes the two CAs and the two server
// certificates into it. Fails (with openssl's output) if openssl is missing
// or fails.
[[nodiscard]] absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);

}  // namespace tcc::harness
