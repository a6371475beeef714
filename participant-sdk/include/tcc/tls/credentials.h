// gRPC TLS credentials from PEM files, shared by tccd (its listeners, its
// channels to participants), the participant server and the initiator
// client.
//
// Every file is read and parsed when the credentials are built: a missing,
// unreadable or malformed file, or a private key that does not belong to its
// certificate, is an error naming the setting it came from (`prefix` followed
// by the field name, e.g. "participants.bank-a.tls.ca_file: /etc/x.pem:
// cannot read: No such file or directory"), never a server that starts and
// then fails every handshake.
//
// Pure functions of the file system; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace tcc::tls {

// A listener's certificate, and for mutual TLS the CA client certificates
// must chain to.
struct ServerTlsFiles {
  std::string cert_file;  // PEM certificate chain (required)
  std::string key_file;   // PEM private key of its first certificate
  // Not empty: mutual TLS. A client must present a certificate chaining to
  // one of these PEM certificates, or the handshake fails.
  std::string client_ca_file;
};

// A client's view of TLS: whom to trust, and its own certificate for mutual
// TLS.
struct ChannelTlsFiles {
  std::string ca_file;    // PEM roots; empty: the system roots
  std::string cert_file;  // with key_file: present this certificate
  std::string key_file;
};

// Reads a PEM file that holds at least one X.509 certificate.
[[nodiscard]] absl::StatusOr<std::string> ReadCertificatePem(
    const std::string& what, const std::string& path);

// Reads a PEM file that holds a private key.
[[nodiscard]] absl::StatusOr<std::string> ReadPrivateKeyPem(
    const std::string& what, const std::string& path);

// Server credentials: TLS, or mutual TLS when client_ca_file is set
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY). Errors name
// `prefix` + "cert_file" / "key_file" / "client_ca_file".
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentials(const ServerTlsFiles& files, const std::string& prefix = "");

// Channel credentials: TLS trusting ca_file (or the system roots), with a
// client certificate when cert_file and key_file are set (both or neither).
// Errors name `prefix` + "ca_file" / "cert_file" / "key_file".
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
ChannelCredentials(const ChannelTlsFiles& files,
                   const std::string& prefix = "");

}  // namespace tcc::tls
