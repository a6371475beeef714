// tccctl's call layer (coordinator/tccctl/admin_client.h) against a fake
// tcc.v1.Admin on 127.0.0.1: the credential it sends, the status it passes
// back unchanged, its deadline, and Watch's stream.
#include "tccctl/admin_client.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace v1 = tcc::v1;
using tcc::tccctl::AdminClient;
using tcc::tccctl::AdminClientOptions;

// Records the authorization metadata of every call; answers with `reply`.
class FakeAdmin final : public v1::Admin::Service {
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

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                      v1::StatusResponse* response) override {
    Record(ctx);
    response->set_health("serving");
    return reply;
  }
  grpc::Status Show(grpc::ServerContext* ctx, const v1::ShowRequest* request,
                    v1::ShowResponse* response) override {
    Record(ctx);
    // Waits for the client to give up, bounded by show_delay_ms.
    for (int waited = 0; waited < show_delay_ms && !ctx->IsCancelled();
         waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    response->mutable_transaction()->set_gid(request->gid());
    return reply;
  }
  grpc::Status IssueApproval(grpc::ServerContext* ctx,
                             const v1::IssueApprovalRequest* request,
                             v1::IssueApprovalResponse* response) override {
    Record(ctx);
    response->mutable_approval()->set_gid(request->gid());
    response->mutable_approval()->set_reason(request->reason());
    response->mutable_approval()->set_action(request->action());
    return reply;
  }
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::WatchEvent>* writer) override {
    Record(ctx);
    for (int i = 0; i < watch_events; ++i) {
      v1::WatchEvent e;
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
  std::string dir;
  Pki() {
    std::string tmpl =
        std::filesystem::temp_directory_path().string() + "/tccctl-pki-XXXXXX";
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
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
  ~Pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir + "/" + name);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  }
};

struct Server {
  FakeAdmin service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // Plaintext without `pki`; with it TLS, and mutual TLS when `require_client`.
  explicit Server(const Pki* pki = nullptr, bool require_client = false) {
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
  ~Server() { server->Shutdown(); }
  AdminClientOptions Options(const std::string& token = "") const {
    AdminClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port);
    o.token = token;
    o.timeout_ms = 5000;
    return o;
  }
};

}  // namespace

TEST_CASE("the token goes as authorization: Bearer; none without one") {
  Server s;
  AdminClient with(s.Options("s3cret"));
  auto r = with.Status();
  REQUIRE(r.ok());
  CHECK(r->health() == "serving");
  CHECK(s.service.last_authorization() == "Bearer s3cret");

  AdminClient without(s.Options());
  REQUIRE(without.Status().ok());
  CHECK(s.service.last_authorization().empty());
  CHECK(s.service.calls() == 2);
}

TEST_CASE("a refused call comes back with its code and message") {
  Server s;
  s.service.reply =
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "approval used");
  AdminClient client(s.Options("t"));
  v1::IssueApprovalRequest req;
  req.set_gid("g-1");
  auto r = client.IssueApproval(req);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(r.status().message() == "approval used");
  s.service.reply = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "who?");
  CHECK(client.Show("g-1").status().code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("each call has the deadline it was given") {
  Server s;
  s.service.show_delay_ms = 10000;
  AdminClientOptions o = s.Options("t");
  o.timeout_ms = 200;
  AdminClient client(o);
  auto r = client.Show("g-slow");
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("Watch delivers every event, or stops when told") {
  Server s;
  AdminClient client(s.Options("t"));
  std::vector<uint64_t> seen;
  absl::Status st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    CHECK(e.transaction().gid() == "g-w");
    seen.push_back(e.transaction().revision());
    return true;
  });
  CHECK(st.ok());
  CHECK(seen == std::vector<uint64_t>{0, 1, 2});
  CHECK(s.service.last_authorization() == "Bearer t");

  seen.clear();
  st = client.Watch("g-w", [&](const v1::WatchEvent& e) {
    seen.push_back(e.transaction().revision());
    return false;
  });
  CHECK(st.ok());
  CHECK(seen.size() == 1);

  s.service.reply = grpc::Status(grpc::StatusCode::NOT_FOUND, "no g-w");
  s.service.watch_events = 0;
  st = client.Watch("g-w", [](const v1::WatchEvent&) { return true; });
  CHECK(st.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("nobody listening is UNAVAILABLE") {
  int port = 0;
  {
    Server s;
    port = s.port;
  }
  AdminClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.timeout_ms = 2000;
  AdminClient client(o);
  CHECK(client.Status().status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE(
    "TLS: tccd verified against --tls-ca; a client certificate for mTLS") {
  Pki pki;
  {
    Server s(&pki);
    AdminClientOptions o = s.Options("t");
    o.tls_ca_pem = pki.Read("ca.pem");
    auto r = AdminClient(o).Status();
    INFO(r.status().ToString());
    CHECK(r.ok());
    // By the name in its certificate rather than the address.
    o.tls_server_name = "localhost";
    CHECK(AdminClient(o).Status().ok());
    // A name the certificate does not carry: refused by the client.
    o.tls_server_name = "elsewhere.example";
    CHECK(AdminClient(o).Status().status().code() ==
          absl::StatusCode::kUnavailable);
    // Plaintext to a TLS listener: no answer.
    CHECK(!AdminClient(s.Options("t")).Status().ok());
    // A CA that did not sign it.
    o = s.Options("t");
    o.tls_ca_pem = pki.Read("alice.pem");
    CHECK(AdminClient(o).Status().status().code() ==
          absl::StatusCode::kUnavailable);
  }
  {
    Server s(&pki, /*require_client=*/true);
    AdminClientOptions o = s.Options();
    o.tls_ca_pem = pki.Read("ca.pem");
    CHECK(!AdminClient(o).Status().ok());  // no client certificate
    o.tls_cert_pem = pki.Read("alice.pem");
    o.tls_key_pem = pki.Read("alice.key");
    auto r = AdminClient(o).Status();
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(s.service.last_peer_cn() == "alice");
  }
}
