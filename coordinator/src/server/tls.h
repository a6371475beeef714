// TLS for tccd: the credentials of its listeners (client API, admin API) and
// of its channels to participants, built from the config's `tls`,
// `admin.tls` and `participants.NAME.tls` (config/tccd.yaml).
//
// PEM files are read when the credentials are built (at start): a missing,
// unreadable or malformed file, or a key that is not its certificate's, is
// INVALID_ARGUMENT naming the config key, e.g. "tls.cert_file: /etc/tccd.pem:
// cannot read: No such file or directory". main() runs CheckTlsFiles before
// starting, so such a start fails like any other config error (exit 2).
//
// Branches naming "host:port" directly (allow_direct_targets) are dialled in
// plaintext: no config key says whom such a target must prove to be.
//
// Pure functions of the config and the file system, except that a plaintext
// listener logs a warning; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "server/config.h"

namespace tcc::server {

// Credentials for the listener on `address` described by `tls`; `key` is its
// config key ("tls" or "admin.tls") and `listener` names it in the plaintext
// warning ("client listener", "admin listener"). Mode "" and "plaintext":
// insecure credentials and a WARN log line; "tls": server certificate;
// "mtls": clients must present a certificate chaining to client_ca_file.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ListenerCredentials(const std::string& key, const std::string& listener,
                    const std::string& address, const ListenerTlsConfig& tls);

// How tccd dials one configured participant.
struct ParticipantChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The name the participant's certificate must carry when it is not the
  // address's host (tls.server_name); empty: the host.
  std::string ssl_target_name_override;
};

// Plaintext when participant.tls is off; else TLS trusting tls_ca_file (or
// the system roots), presenting tls_cert_file/tls_key_file when set (mutual
// TLS). Errors name "participants.NAME.tls.<field>".
[[nodiscard]] absl::StatusOr<ParticipantChannelSecurity>
ParticipantChannelCredentials(const ParticipantConfig& participant);

// Builds every credential the config asks for (without logging), so a bad
// TLS file stops the start before anything else happens.
[[nodiscard]] absl::Status CheckTlsFiles(const Config& config);

}  // namespace tcc::server
