#include "rpc/admin_auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::rpc {
namespace {

constexpr char kBearer[] = "Bearer ";

bool ConstantTimeEqual(const identity::Hash& a, const identity::Hash& b) {
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

AdminAuth::AdminAuth(const std::map<std::string, std::string>& tokens,
                     std::vector<std::string> client_identities,
                     std::string console_key)
    : client_identities_(client_identities.begin(), client_identities.end()),
      console_key_(std::move(console_key)) {
  for (const auto& [token, name] : tokens) {
    tokens_.emplace_back(identity::Sha256(token), name);
  }
}

absl::StatusOr<std::string> AdminAuth::Authenticate(
    const grpc::ServerContextBase& ctx) const {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it != md.end()) {
    const std::string value(it->second.data(), it->second.size());
    if (!absl::StartsWith(value, kBearer)) {
      return absl::UnauthenticatedError(
          "authorization metadata must be 'Bearer <token>'");
    }
    const identity::Hash digest =
        identity::Sha256(std::string_view(value).substr(sizeof(kBearer) - 1));
    const std::string* found = nullptr;
    for (const auto& [hash, name] : tokens_) {  // no early exit: same time
      if (ConstantTimeEqual(hash, digest)) found = &name;
    }
    if (found == nullptr) {
      return absl::UnauthenticatedError("unknown admin token");
    }
    return *found;
  }
  std::vector<std::string> ids = PeerCertIdentities(ctx);
  if (FromConsole(ctx)) {
    auto c = md.find(kConsoleIdentities);
    if (c != md.end()) {
      for (absl::string_view id :
           absl::StrSplit(absl::string_view(c->second.data(), c->second.size()),
                          ',', absl::SkipEmpty())) {
        ids.emplace_back(id);
      }
    }
  }
  if (ids.empty()) {
    return absl::UnauthenticatedError(
        "admin calls need a credential: metadata 'authorization: Bearer "
        "<token>' (admin.token_file) or a client certificate listed in "
        "admin.client_identities");
  }
  for (const auto& id : ids) {
    if (client_identities_.count(id) > 0) return absl::StrCat("cert:", id);
  }
  return absl::PermissionDeniedError(
      absl::StrCat("client certificate '", ids.front(),
                   "' is not an admin (admin.client_identities)"));
}

bool AdminAuth::FromConsole(const grpc::ServerContextBase& ctx) const {
  if (console_key_.empty()) return false;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kConsoleKey);
  if (it == md.end()) return false;
  return ConstantTimeEqual(
      identity::Sha256(std::string_view(it->second.data(), it->second.size())),
      identity::Sha256(console_key_));
}

std::string AdminAuth::AuditPeer(const grpc::ServerContextBase& ctx) const {
  if (FromConsole(ctx)) {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kConsolePeer);
    if (it != md.end()) {
      return absl::StrCat(
          "console:", absl::string_view(it->second.data(), it->second.size()));
    }
  }
  return ctx.peer();
}

std::vector<std::string> PeerCertIdentities(
    const grpc::ServerContextBase& ctx) {
  std::vector<std::string> out;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return out;
  for (const char* property :
       {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const auto& v : auth->FindPropertyValues(property)) {
      std::string s(v.data(), v.size());
      if (!s.empty()) out.push_back(std::move(s));
    }
  }
  return out;
}

std::string PeerAddressWithoutPort(const std::string& peer) {
  std::string_view p = peer;
  if (const size_t colon = p.find(':');
      colon != std::string_view::npos &&
      (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:"))) {
    p = p.substr(colon + 1);
  }
  if (!p.empty() && p.front() == '[') {
    const size_t close = p.find(']');
    if (close != std::string_view::npos)
      return std::string(p.substr(1, close - 1));
  }
  if (const size_t colon = p.rfind(':'); colon != std::string_view::npos) {
    p = p.substr(0, colon);
  }
  return std::string(p);
}

std::string ClientIdentity(const grpc::ServerContextBase& ctx,
                           const std::vector<std::string>& cert_ids) {
  if (!cert_ids.empty()) return absl::StrCat("cert:", cert_ids.front());
  return absl::StrCat("ip:", PeerAddressWithoutPort(ctx.peer()));
}

}  // namespace tcc::rpc
