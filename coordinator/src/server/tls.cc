#include "server/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "tcc/tls/credentials.h"

namespace tcc::server {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildListener(
    const std::string& key, const ListenerTlsConfig& tls) {
  if (tls.mode.empty() || tls.mode == "plaintext") {
    return grpc::InsecureServerCredentials();
  }
  if (tls.mode != "tls" && tls.mode != "mtls") {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".mode: unknown mode ", tls.mode));
  }
  if (tls.mode == "mtls" && tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".client_ca_file: required in mtls mode"));
  }
  return tls::ServerCredentials(
      {.cert_file = tls.cert_file,
       .key_file = tls.key_file,
       .client_ca_file = tls.mode == "mtls" ? tls.client_ca_file : ""},
      key + ".");
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const std::string& key, const std::string& listener,
    const std::string& address, const ListenerTlsConfig& tls) {
  auto credentials = BuildListener(key, tls);
  if (credentials.ok() && (tls.mode.empty() || tls.mode == "plaintext")) {
    spdlog::warn(
        "{} {} is plaintext ({}.mode: {}): anyone who can reach it can read "
        "and forge its calls; set {}.mode to tls or mtls",
        listener, address, key, tls.mode.empty() ? "\"\"" : tls.mode, key);
  }
  return credentials;
}

absl::StatusOr<ParticipantChannelSecurity> ParticipantChannelCredentials(
    const ParticipantConfig& participant) {
  ParticipantChannelSecurity security;
  if (!participant.tls) {
    security.credentials = grpc::InsecureChannelCredentials();
    return security;
  }
  auto credentials = tls::ChannelCredentials(
      {.ca_file = participant.tls_ca_file,
       .cert_file = participant.tls_cert_file,
       .key_file = participant.tls_key_file},
      absl::StrCat("participants.", participant.name, ".tls."));
  if (!credentials.ok()) return credentials.status();
  security.credentials = std::move(*credentials);
  security.ssl_target_name_override = participant.tls_server_name;
  return security;
}

absl::Status CheckTlsFiles(const Config& config) {
  if (auto s = BuildListener("tls", config.tls); !s.ok()) return s.status();
  if (!config.admin_listen.empty()) {
    if (auto s = BuildListener("admin.tls", config.admin.tls); !s.ok()) {
      return s.status();
    }
  }
  for (const auto& [name, p] : config.participants) {
    if (auto s = ParticipantChannelCredentials(p); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

}  // namespace tcc::server
