#include "test_certs.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "process.h"

namespace tcc::harness {
namespace {

constexpr int64_t kOpensslTimeoutMs = 30000;

// The extensions of each kind of certificate (openssl config sections).
constexpr char kOpensslConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

absl::StatusOr<std::string> FindOpenssl() {
  const char* path = std::getenv("PATH");
  for (auto dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir, "/openssl");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError("openssl: not found on PATH");
}

absl::Status RunOpenssl(const std::string& dir, std::vector<std::string> args) {
  auto openssl = FindOpenssl();
  if (!openssl.ok()) return openssl.status();
  args.insert(args.begin(), *openssl);
  const std::string command = absl::StrJoin(args, " ");
  auto p = Process::Start(ProcessOptions{args, {}, "", "openssl"});
  if (!p.ok()) return p.status();
  auto status = (*p)->Wait(kOpensslTimeoutMs);
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(
        absl::StrCat("in ", dir, ": ", command, " failed: ", (*p)->Output()));
  }
  return absl::OkStatus();
}

std::string Config(const std::string& dir) { return dir + "/openssl.cnf"; }

// A self-signed CA certificate.
absl::StatusOr<CertFiles> MakeCa(const std::string& dir,
                                 const std::string& stem,
                                 const std::string& cn) {
  CertFiles ca{dir + "/" + stem + ".pem", dir + "/" + stem + ".key"};
  if (absl::Status s = RunOpenssl(
          dir, {"req", "-config", Config(dir), "-x509", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                ca.key_file, "-out", ca.cert_file, "-days", "2", "-subj",
                "/CN=" + cn, "-extensions", "ca"});
      !s.ok()) {
    return s;
  }
  return ca;
}

// A key, and a certificate for it issued by `ca` with the extensions of
// config section `kind`.
absl::StatusOr<CertFiles> Issue(const std::string& dir, const CertFiles& ca,
                                const std::string& stem, const std::string& cn,
                                const std::string& kind) {
  CertFiles out{dir + "/" + stem + ".pem", dir + "/" + stem + ".key"};
  const std::string csr = dir + "/" + stem + ".csr";
  if (absl::Status s = RunOpenssl(
          dir, {"req", "-config", Config(dir), "-new", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                out.key_file, "-out", csr, "-subj", "/CN=" + cn});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = RunOpenssl(
          dir, {"x509", "-req", "-in", csr, "-CA", ca.cert_file, "-CAkey",
                ca.key_file, "-CAserial", ca.cert_file + ".srl",
                "-CAcreateserial", "-days", "2", "-extfile", Config(dir),
                "-extensions", kind, "-out", out.cert_file});
      !s.ok()) {
    return s;
  }
  std::filesystem::remove(csr);
  return out;
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  {
    std::ofstream cnf(Config(dir), std::ios::trunc);
    cnf << kOpensslConfig;
    if (!cnf) return absl::InternalError("cannot write " + Config(dir));
  }
  TestPki pki;
  pki.dir_ = dir;
  auto ca = MakeCa(dir, "ca", "tcc test CA");
  if (!ca.ok()) return ca.status();
  pki.ca_ = *ca;
  auto other = MakeCa(dir, "other-ca", "tcc other test CA");
  if (!other.ok()) return other.status();
  pki.other_ca_ = *other;
  auto server = Issue(dir, pki.ca_, "server", "localhost", "server");
  if (!server.ok()) return server.status();
  pki.server_ = *server;
  auto other_server =
      Issue(dir, pki.other_ca_, "other-server", "localhost", "server");
  if (!other_server.ok()) return other_server.status();
  pki.other_server_ = *other_server;
  return pki;
}

absl::StatusOr<CertFiles> TestPki::IssueClientCert(const std::string& name,
                                                   bool from_other_ca) const {
  if (name.empty() ||
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv"
                             "wxyz0123456789._-") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("client certificate name '", name, "': [A-Za-z0-9._-]+"));
  }
  return Issue(dir_, from_other_ca ? other_ca_ : ca_,
               absl::StrCat("client-", name, from_other_ca ? "-other" : ""),
               name, "client");
}

}  // namespace tcc::harness
