#include "tccctl/admin_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tcc::tccctl {
namespace v1 = tcc::v1;
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

std::shared_ptr<grpc::Channel> MakeChannel(const AdminClientOptions& o) {
  grpc::ChannelArguments args;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls_ca_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls_ca_pem;
    ssl.pem_cert_chain = o.tls_cert_pem;
    ssl.pem_private_key = o.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
    if (!o.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(o.tls_server_name);
    }
  }
  return grpc::CreateCustomChannel(o.address, creds, args);
}

}  // namespace

std::string PlaintextTokenWarning(const AdminClientOptions& o) {
  if (o.token.empty() || !o.tls_ca_pem.empty()) return "";
  absl::string_view host = o.address;
  if (absl::StartsWith(host, "unix:") ||
      absl::StartsWith(host, "unix-abstract:")) {
    return "";
  }
  // gRPC target schemes: dns:[//authority/]host:port, ipv4:, ipv6:.
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&host, scheme)) break;
  }
  if (absl::ConsumePrefix(&host, "//")) {
    host = host.substr(std::min(host.find('/'), host.size()));
    absl::ConsumePrefix(&host, "/");
  }
  if (host == "::1" || host == "localhost") return "";
  if (const size_t colon = host.rfind(':'); colon != host.npos) {
    host = host.substr(0, colon);
  }
  host = absl::StripPrefix(absl::StripSuffix(host, "]"), "[");
  if (host == "localhost" || host == "::1" || absl::StartsWith(host, "127.")) {
    return "";
  }
  return absl::StrCat("the admin token goes in plaintext to ", o.address,
                      " (no --tls-ca): anyone on the path can read and reuse "
                      "it");
}

absl::StatusOr<std::string> ParseTokenFile(const std::string& contents) {
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() == 1) return std::string(words[0]);
    if (words.size() == 2) return std::string(words[1]);
    return absl::InvalidArgumentError(
        "token file: want a token, or lines of NAME TOKEN");
  }
  return absl::InvalidArgumentError("token file holds no token");
}

AdminClient::AdminClient(AdminClientOptions options)
    : options_(std::move(options)),
      stub_(v1::Admin::NewStub(MakeChannel(options_))) {}

void AdminClient::Prepare(grpc::ClientContext& ctx, int64_t timeout_ms) const {
  if (timeout_ms > 0) {
    ctx.set_deadline(
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
  }
  if (!options_.token.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + options_.token);
  }
}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> AdminClient::Call(const Request& request,
                                           Method method) {
  grpc::ClientContext ctx;
  Prepare(ctx, options_.timeout_ms);
  Response response;
  grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<v1::StatusResponse> AdminClient::Status() {
  return Call<v1::StatusRequest, v1::StatusResponse>(v1::StatusRequest(),
                                                     &v1::Admin::Stub::Status);
}

absl::StatusOr<v1::ShowResponse> AdminClient::Show(const std::string& gid) {
  v1::ShowRequest request;
  request.set_gid(gid);
  return Call<v1::ShowRequest, v1::ShowResponse>(request,
                                                 &v1::Admin::Stub::Show);
}

absl::StatusOr<v1::ListResponse> AdminClient::List(
    const v1::ListRequest& request) {
  return Call<v1::ListRequest, v1::ListResponse>(request,
                                                 &v1::Admin::Stub::List);
}

absl::Status AdminClient::Watch(
    const std::string& gid,
    const std::function<bool(const v1::WatchEvent&)>& on_event) {
  grpc::ClientContext ctx;
  Prepare(ctx, options_.watch_timeout_ms);
  v1::WatchRequest request;
  request.set_gid(gid);
  std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader =
      stub_->Watch(&ctx, request);
  v1::WatchEvent event;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      ctx.TryCancel();
      // The stream ends CANCELLED now, which the caller asked for.
      (void)reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpc(reader->Finish());
}

absl::StatusOr<v1::RetryNowResponse> AdminClient::RetryNow(
    const v1::RetryNowRequest& request) {
  return Call<v1::RetryNowRequest, v1::RetryNowResponse>(
      request, &v1::Admin::Stub::RetryNow);
}

absl::StatusOr<v1::IssueApprovalResponse> AdminClient::IssueApproval(
    const v1::IssueApprovalRequest& request) {
  return Call<v1::IssueApprovalRequest, v1::IssueApprovalResponse>(
      request, &v1::Admin::Stub::IssueApproval);
}

absl::StatusOr<v1::ForceDecisionResponse> AdminClient::ForceDecision(
    const v1::ForceDecisionRequest& request) {
  return Call<v1::ForceDecisionRequest, v1::ForceDecisionResponse>(
      request, &v1::Admin::Stub::ForceDecision);
}

absl::StatusOr<v1::ResolveBranchResponse> AdminClient::ResolveBranch(
    const v1::ResolveBranchRequest& request) {
  return Call<v1::ResolveBranchRequest, v1::ResolveBranchResponse>(
      request, &v1::Admin::Stub::ResolveBranch);
}

absl::StatusOr<v1::ApproveResponse> AdminClient::Approve(
    const v1::ApproveRequest& request) {
  return Call<v1::ApproveRequest, v1::ApproveResponse>(
      request, &v1::Admin::Stub::Approve);
}

absl::StatusOr<v1::ClusterResponse> AdminClient::Cluster() {
  return Call<v1::ClusterRequest, v1::ClusterResponse>(
      v1::ClusterRequest(), &v1::Admin::Stub::Cluster);
}

absl::StatusOr<v1::DrainResponse> AdminClient::Drain(
    const std::string& node_id) {
  v1::DrainRequest request;
  request.set_node_id(node_id);
  return Call<v1::DrainRequest, v1::DrainResponse>(request,
                                                   &v1::Admin::Stub::Drain);
}

}  // namespace tcc::tccctl
