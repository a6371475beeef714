// Who is calling: admin credentials for tcc.v1.Admin (DESIGN.md section 10),
// and the client identity the Coordinator's rate limit counts by.
//
// An admin proves who they are with either
// - metadata `authorization: Bearer <token>`, a token of the configured
//   token file (compared as SHA-256 digests, in constant time), or
// - a TLS client certificate whose identity (subject CN or a SAN) is listed.
// No credential: UNAUTHENTICATED. An unknown token: UNAUTHENTICATED. A
// verified certificate whose identity is not listed: PERMISSION_DENIED.
//
// Thread-safe (immutable after construction).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "tcc/identity/content_hash.h"

namespace tcc::rpc {

class AdminAuth {
 public:
  // `tokens`: token -> the admin's name. `client_identities`: certificate
  // identities allowed. Both empty: every admin call is refused.
  AdminAuth(const std::map<std::string, std::string>& tokens,
            std::vector<std::string> client_identities);

  // The caller's admin identity: "NAME" for a token, "cert:ID" for a client
  // certificate.
  [[nodiscard]] absl::StatusOr<std::string> Authenticate(
      const grpc::ServerContextBase& ctx) const;

  bool configured() const {
    return !tokens_.empty() || !client_identities_.empty();
  }

 private:
  std::vector<std::pair<identity::Hash, std::string>> tokens_;
  std::set<std::string> client_identities_;
};

// The identities of the caller's verified TLS client certificate: its subject
// CN and SANs (empty without one).
std::vector<std::string> PeerCertIdentities(const grpc::ServerContextBase& ctx);

// Who a Coordinator caller is, for per-client limits: "cert:ID" (the first
// certificate identity) with mutual TLS, else "ip:ADDRESS" (the peer's
// address without its port).
std::string ClientIdentity(const grpc::ServerContextBase& ctx);

// "ipv4:127.0.0.1:5000" -> "127.0.0.1"; "ipv6:[::1]:5000" -> "::1".
std::string PeerAddressWithoutPort(const std::string& peer);

}  // namespace tcc::rpc
