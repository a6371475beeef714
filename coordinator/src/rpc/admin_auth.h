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
// The web console (coordinator/src/console) calls the Admin API in-process
// for a browser, with the browser's own credential: its token as above, or
// the identities of the client certificate the console verified, sent as
// metadata kConsoleIdentities together with kConsoleKey, this process's
// secret (random, never leaves the process): without the key the identities
// metadata is ignored. kConsolePeer then names the browser in the audit log.
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

inline constexpr char kConsoleKey[] = "x-tccd-console-key";
inline constexpr char kConsoleIdentities[] = "x-tccd-console-identities";
inline constexpr char kConsolePeer[] = "x-tccd-console-peer";

class AdminAuth {
 public:
  // `tokens`: token -> the admin's name. `client_identities`: certificate
  // identities allowed. Both empty: every admin call is refused.
  // `console_key`: the console's secret (empty: no console).
  AdminAuth(const std::map<std::string, std::string>& tokens,
            std::vector<std::string> client_identities,
            std::string console_key = "");

  // The caller's admin identity: "NAME" for a token, "cert:ID" for a client
  // certificate.
  [[nodiscard]] absl::StatusOr<std::string> Authenticate(
      const grpc::ServerContextBase& ctx) const;

  // The caller's address for the audit log: the browser's ("console:ADDR")
  // for the console's calls, else the gRPC peer.
  std::string AuditPeer(const grpc::ServerContextBase& ctx) const;

  const std::string& console_key() const { return console_key_; }

  bool configured() const {
    return !tokens_.empty() || !client_identities_.empty();
  }

 private:
  std::vector<std::pair<identity::Hash, std::string>> tokens_;
  std::set<std::string> client_identities_;
  std::string console_key_;

  // Whether the call carries the console's key.
  bool FromConsole(const grpc::ServerContextBase& ctx) const;
};

// The identities of the caller's verified TLS client certificate: its subject
// CN and SANs (empty without one).
std::vector<std::string> PeerCertIdentities(const grpc::ServerContextBase& ctx);

// Who a Coordinator caller is, for per-client limits: "cert:ID" (the first
// of `cert_ids`, its PeerCertIdentities) with mutual TLS, else "ip:ADDRESS"
// (the peer's address without its port).
std::string ClientIdentity(const grpc::ServerContextBase& ctx,
                           const std::vector<std::string>& cert_ids);

// "ipv4:127.0.0.1:5000" -> "127.0.0.1"; "ipv6:[::1]:5000" -> "::1".
std::string PeerAddressWithoutPort(const std::string& peer);

}  // namespace tcc::rpc
