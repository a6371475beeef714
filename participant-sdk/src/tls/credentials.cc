#include "tcc/tls/credentials.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tcc::tls {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

absl::StatusOr<std::string> ReadFile(const std::string& what,
                                     const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no file given"));
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", path, ": read error"));
  }
  return text;
}

BioPtr MemBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The first certificate of a PEM text, or null.
X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  if (!bio) return nullptr;
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

PkeyPtr PrivateKey(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  if (!bio) return nullptr;
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

// Reads a certificate and its key and checks they belong together.
absl::Status ReadPair(const std::string& cert_what,
                      const std::string& cert_path, const std::string& key_what,
                      const std::string& key_path, std::string* cert_pem,
                      std::string* key_pem) {
  auto cert = ReadCertificatePem(cert_what, cert_path);
  if (!cert.ok()) return cert.status();
  auto key = ReadPrivateKeyPem(key_what, key_path);
  if (!key.ok()) return key.status();
  X509Ptr x = FirstCertificate(*cert);
  PkeyPtr k = PrivateKey(*key);
  const bool match = x && k && X509_check_private_key(x.get(), k.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_what, ": ", key_path, ": not the private key of ",
                     cert_what, " (", cert_path, ")"));
  }
  *cert_pem = std::move(*cert);
  *key_pem = std::move(*key);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadCertificatePem(const std::string& what,
                                               const std::string& path) {
  auto text = ReadFile(what, path);
  if (!text.ok()) return text.status();
  if (!FirstCertificate(*text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", path, ": no PEM certificate in it"));
  }
  return text;
}

absl::StatusOr<std::string> ReadPrivateKeyPem(const std::string& what,
                                              const std::string& path) {
  auto text = ReadFile(what, path);
  if (!text.ok()) return text.status();
  if (!PrivateKey(*text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", path, ": no PEM private key in it (or it is encrypted)"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsFiles& files, const std::string& prefix) {
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  if (absl::Status s =
          ReadPair(prefix + "cert_file", files.cert_file, prefix + "key_file",
                   files.key_file, &pair.cert_chain, &pair.private_key);
      !s.ok()) {
    return s;
  }
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!files.client_ca_file.empty()) {
    auto ca =
        ReadCertificatePem(prefix + "client_ca_file", files.client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = std::move(*ca);
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ChannelTlsFiles& files, const std::string& prefix) {
  grpc::SslCredentialsOptions options;
  if (!files.ca_file.empty()) {
    auto ca = ReadCertificatePem(prefix + "ca_file", files.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = std::move(*ca);
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cert_file and ", prefix, "key_file go together"));
  }
  if (!files.cert_file.empty()) {
    if (absl::Status s = ReadPair(
            prefix + "cert_file", files.cert_file, prefix + "key_file",
            files.key_file, &options.pem_cert_chain, &options.pem_private_key);
        !s.ok()) {
      return s;
    }
  }
  return grpc::SslCredentials(options);
}

}  // namespace tcc::tls
