// A fake tcc.v1.Admin for tccctl's tests, on 127.0.0.1 (plaintext, TLS or
// mutual TLS), that records the credential of each call; and the PEM files
// for its TLS, made with the openssl command in a temp dir.
//
// Thread-safe where gRPC calls it (the recorded values are locked).
#pragma once

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "tcc/v1/admin.grpc.pb.h"

namespace tcc::tccctl::testing {

// Records the authorization metadata of every call; answers with `reply`.
class FakeAdmin final : public tcc::v1::Admin::Service {
 public:
  grpc::Status reply = grpc::Status::OK;
  // Show blocks this long before answering (for deadlines).
  int show_delay_ms = 0;
  int watch_events = 3;

  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorization_;
  }
  std::string last_peer_cn() {
    std::lock_guard<std::mutex> lock(mu_);
    return peer_cn_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  grpc::Status Status(grpc::ServerContext* ctx, const tcc::v1::StatusRequest*,
                      tcc::v1::StatusResponse* response) override {
    Record(ctx);
    response->set_health("serving");
    return reply;
  }
  grpc::Status Show(grpc::ServerContext* ctx,
                    const tcc::v1::ShowRequest* request,
                    tcc::v1::ShowResponse* response) override {
    Record(ctx);
    // Waits for the client to give up, bounded by show_delay_ms.
    for (int waited = 0; waited < show_delay_ms && !ctx->IsCancelled();
         waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    response->mutable_transaction()->set_gid(request->gid());
    return reply;
  }
  grpc::Status IssueApproval(
      grpc::ServerContext* ctx, const tcc::v1::IssueApprovalRequest* request,
      tcc::v1::IssueApprovalResponse* response) override {
    Record(ctx);
    response->mutable_approval()->set_gid(request->gid());
    response->mutable_approval()->set_reason(request->reason());
    response->mutable_approval()->set_action(request->action());
    return reply;
  }
  grpc::Status Watch(grpc::ServerContext* ctx,
                     const tcc::v1::WatchRequest* request,
                     grpc::ServerWriter<tcc::v1::WatchEvent>* writer) override {
    Record(ctx);
    for (int i = 0; i < watch_events; ++i) {
      tcc::v1::WatchEvent e;
      e.mutable_transaction()->set_gid(request->gid());
      e.mutable_transaction()->set_revision(static_cast<uint64_t>(i));
      if (!writer->Write(e)) break;
    }
    return reply;
  }

 private:
  void Record(grpc::ServerContext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    authorization_.clear();
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) {
      authorization_ = std::string(it->second.data(), it->second.size());
    }
    peer_cn_.clear();
    for (const auto& cn :
         ctx->auth_context()->FindPropertyValues("x509_common_name")) {
      peer_cn_ = std::string(cn.data(), cn.size());
    }
  }

  std::mutex mu_;
  std::string authorization_;
  std::string peer_cn_;
  int calls_ = 0;
};

// PEM files for TLS tests, made with the openssl command: a CA, a server
// certificate for 127.0.0.1 and "localhost", a client certificate "alice".
struct Pki {
  // Removes the dir when Pki goes, also when its constructor's REQUIRE throws.
  struct OwnedDir {
    std::string path;
    OwnedDir() {
      std::string tmpl = std::filesystem::temp_directory_path().string() +
                         "/tccctl-pki-XXXXXX";
      REQUIRE(mkdtemp(tmpl.data()) != nullptr);
      path = tmpl;
    }
    ~OwnedDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  OwnedDir owned;
  std::string dir = owned.path;

  Pki() {
    const std::string script =
        "set -e; cd '" + dir +
        "'; k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
        "openssl req -x509 $k -keyout ca.key -out ca.pem -days 1 "
        "-subj /CN=tccctl-test-ca; "
        "for n in server alice; do "
        "openssl req $k -keyout $n.key -out $n.csr -subj /CN=$n; done; "
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext; "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out server.pem -days 1 -extfile san.ext; "
        "openssl x509 -req -in alice.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out alice.pem -days 1";
    {
      std::ofstream out(dir + "/make-pki.sh");
      out << script << "\n";
    }
    const std::string cmd =
        "bash '" + dir + "/make-pki.sh' >'" + dir + "/openssl.log' 2>&1";
    const int rc = std::system(cmd.c_str());
    INFO(Read("openssl.log"));
    REQUIRE(rc == 0);
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir + "/" + name);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  }
};

struct FakeAdminServer {
  FakeAdmin service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // Plaintext without `pki`; with it TLS, and mutual TLS when `require_client`.
  explicit FakeAdminServer(const Pki* pki = nullptr,
                           bool require_client = false) {
    std::shared_ptr<grpc::ServerCredentials> creds =
        grpc::InsecureServerCredentials();
    if (pki != nullptr) {
      grpc::SslServerCredentialsOptions o(
          require_client
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
      o.pem_root_certs = pki->Read("ca.pem");
      o.pem_key_cert_pairs.push_back(
          {pki->Read("server.key"), pki->Read("server.pem")});
      creds = grpc::SslServerCredentials(o);
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port > 0);
  }
  ~FakeAdminServer() { server->Shutdown(); }
};

}  // namespace tcc::tccctl::testing
