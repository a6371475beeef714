// TLS end to end: tccd and tcc-bank processes on 127.0.0.1 with certificates
// made by openssl at test time (tests/harness/test_certs.h). Clients reach
// tccd over TLS or mutual TLS, tccd reaches the banks over mutual TLS, and
// everyone without the right certificate or trust is refused before any
// state changes.
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "tcc/v1/admin.grpc.pb.h"
#include "tcc/v1/participant.grpc.pb.h"
#include "test_certs.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::CertFiles;
using tcc::harness::ClusterOptions;
using tcc::harness::ReadFile;
using tcc::harness::TestPki;

std::string TempDir(const std::string& name) {
  return tcc::harness::MakeTempDir("tccd-tls-" + name);
}

using tcc::harness::Cleanup;

ClusterOptions TlsOptions(const std::string& dir,
                          const std::string& listener_mode) {
  ClusterOptions o;
  o.root_dir = dir;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  o.tls.enabled = true;
  o.tls.listener_mode = listener_mode;
  return o;
}

// TLS trusting `ca_file`, presenting `cert` when it has files.
std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& ca_file,
                                              const CertFiles& cert = {}) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadFile(ca_file);
  if (!cert.cert_file.empty()) {
    o.pem_cert_chain = ReadFile(cert.cert_file);
    o.pem_private_key = ReadFile(cert.key_file);
  }
  return grpc::SslCredentials(o);
}

// A client of tccd with these credentials, one attempt of 3 s.
std::unique_ptr<tcc::client::CoordinatorClient> ClientWith(
    int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  tcc::client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.credentials = std::move(credentials);
  o.max_attempts = 1;
  o.attempt_timeout_ms = 3000;
  return std::make_unique<tcc::client::CoordinatorClient>(o);
}

// Submits a transfer with `client`; it must fail, and tccd (asked by the
// harness's own, trusted client) must not know the gid.
void CheckSubmitRefused(BankCluster& c, tcc::client::CoordinatorClient& client,
                        uint32_t account) {
  auto req = c.Transfer("bank-a", account, "bank-b", account, 10);
  auto r = client.Submit(req);
  INFO(r.status().ToString());
  CHECK_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kUnavailable);
  auto got = c.client().Get(req.gid());
  CHECK(got.status().code() == absl::StatusCode::kNotFound);
}

constexpr uint32_t kProbeAccount = 14;

// A branch call of no transaction of tccd's, straight to a bank.
v1::BranchRequest Probe() {
  v1::BranchRequest req;
  req.mutable_key()->set_gid("tls-probe");
  req.mutable_key()->set_created_at_ms(1);
  req.mutable_key()->set_branch_id("debit");
  req.set_action("debit");
  req.set_payload(absl::StrCat(kProbeAccount, ":10"));
  req.set_branch_hash(std::string(32, 'h'));
  req.set_revision(1);
  req.set_attempt(1);
  req.set_owner_epoch(1);
  req.set_try_deadline_ms(std::numeric_limits<int64_t>::max() / 2);
  return req;
}

// Sends the probe's Try (or Cancel) to a bank with these credentials; the
// gRPC status.
grpc::Status CallBank(int port,
                      std::shared_ptr<grpc::ChannelCredentials> credentials,
                      bool is_try) {
  auto stub = v1::Participant::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), std::move(credentials)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::BranchResponse resp;
  grpc::Status s = is_try ? stub->Try(&ctx, Probe(), &resp)
                          : stub->Cancel(&ctx, Probe(), &resp);
  if (s.ok() && resp.outcome() != v1::OUTCOME_EXECUTED) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        v1::Outcome_Name(resp.outcome()));
  }
  return s;
}

// What the bank's barrier holds for the probe's key (asked with the
// harness's accepted certificate).
v1::BarrierState ProbeState(BankCluster& c, int port) {
  auto stub = v1::Participant::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), c.ClientCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::QueryRequest req;
  *req.mutable_key() = Probe().key();
  v1::QueryResponse resp;
  grpc::Status s = stub->Query(&ctx, req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp.state();
}

}  // namespace

TEST_CASE(
    "TLS cluster: transfers over TLS and participant mTLS conserve money; "
    "plaintext and wrongly trusting callers change nothing") {
  const std::string dir = TempDir("tls");
  Cleanup cleanup{dir};
  BankCluster c(TlsOptions(dir, "tls"));
  REQUIRE_OK(c.Start());
  const TestPki& pki = *c.pki();

  std::vector<std::string> gids;
  for (uint32_t i = 1; i <= 4; ++i) {
    auto req = c.Transfer("bank-a", i, "bank-b", i + 1, 10 * i);
    auto r = c.client().Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->transaction().state() == v1::TXN_STATE_CONFIRMED);
    gids.push_back(req.gid());
  }
  // The bank refuses (insufficient funds) over TLS too: cancelled everywhere.
  auto big = c.Transfer("bank-b", 7, "bank-a", 7, 5000);
  auto rb = c.client().Submit(big);
  REQUIRE(rb.ok());
  CHECK(rb->transaction().state() == v1::TXN_STATE_CANCELLED);
  gids.push_back(big.gid());
  CHECK(c.Account("bank-a", 1)->balance() == 990);
  CHECK(c.Account("bank-b", 2)->balance() == 1010);

  {
    INFO("a plaintext client is refused");
    auto plain = ClientWith(c.tccd_port(), grpc::InsecureChannelCredentials());
    CheckSubmitRefused(c, *plain, 11);
  }
  {
    INFO("a client trusting another CA is refused");
    auto wrong = ClientWith(c.tccd_port(), Tls(pki.other_ca_file()));
    CheckSubmitRefused(c, *wrong, 12);
  }
  {
    INFO("a client trusting the CA gets through (the control)");
    auto right = ClientWith(c.tccd_port(), Tls(pki.ca_file()));
    auto req = c.Transfer("bank-a", 13, "bank-b", 13, 10);
    auto r = right->Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->transaction().state() == v1::TXN_STATE_CONFIRMED);
    gids.push_back(req.gid());
  }
  {
    INFO("a bank in mTLS refuses plaintext, cert-less and foreign callers");
    const int port = c.bank_port("bank-a");
    CHECK_FALSE(CallBank(port, grpc::InsecureChannelCredentials(), true).ok());
    CHECK_FALSE(CallBank(port, Tls(pki.ca_file()), true).ok());
    auto foreign = pki.IssueClientCert("mallory", /*from_other_ca=*/true);
    REQUIRE(foreign.ok());
    CHECK_FALSE(CallBank(port, Tls(pki.ca_file(), *foreign), true).ok());
    CHECK(ProbeState(c, port) == v1::BARRIER_STATE_NOT_FOUND);
    auto account = c.Account("bank-a", kProbeAccount);
    REQUIRE(account.ok());
    CHECK(account->balance() == 1000);
    CHECK(account->frozen() == 0);
    // The control: a certificate from the CA is let in, and the Try runs;
    // then its Cancel releases the reservation.
    auto tccd_like = pki.IssueClientCert("another-tccd");
    REQUIRE(tccd_like.ok());
    grpc::Status tried = CallBank(port, Tls(pki.ca_file(), *tccd_like), true);
    INFO(tried.error_message());
    CHECK(tried.ok());
    CHECK(ProbeState(c, port) == v1::BARRIER_STATE_TRIED);
    CHECK(c.Account("bank-a", kProbeAccount)->frozen() == 10);
    CHECK(CallBank(port, Tls(pki.ca_file(), *tccd_like), false).ok());
    CHECK(ProbeState(c, port) == v1::BARRIER_STATE_CANCELLED);
  }
  CHECK_OK(c.CheckFinal(gids, 20000));
}

TEST_CASE(
    "mTLS client and admin listeners refuse clients without a certificate "
    "from their CA") {
  const std::string dir = TempDir("mtls");
  Cleanup cleanup{dir};
  ClusterOptions o = TlsOptions(dir, "mtls");
  o.tls.admin_listener = true;
  o.tls.admin_client_identities = {"alice"};
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  const TestPki& pki = *c.pki();

  auto alice = pki.IssueClientCert("alice");
  REQUIRE(alice.ok());
  auto with_cert = ClientWith(c.tccd_port(), Tls(pki.ca_file(), *alice));
  auto req = c.Transfer("bank-a", 1, "bank-b", 1, 10);
  auto r = with_cert->Submit(req);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->transaction().state() == v1::TXN_STATE_CONFIRMED);

  auto no_cert = ClientWith(c.tccd_port(), Tls(pki.ca_file()));
  CheckSubmitRefused(c, *no_cert, 2);
  auto foreign = pki.IssueClientCert("alice", /*from_other_ca=*/true);
  REQUIRE(foreign.ok());
  auto foreign_client = ClientWith(c.tccd_port(), Tls(pki.ca_file(), *foreign));
  CheckSubmitRefused(c, *foreign_client, 3);
  auto plain = ClientWith(c.tccd_port(), grpc::InsecureChannelCredentials());
  CheckSubmitRefused(c, *plain, 4);
  CHECK_OK(c.CheckFinal({req.gid()}, 20000));

  // The admin listener (admin.tls, mtls) lets no one in without a
  // certificate from the CA; whoever it lets in gets an answer from the
  // admin service (which may still refuse them: admin authentication).
  auto admin_port = c.tccd()->WaitForLine("admin port ([0-9]+)", 5000);
  REQUIRE(admin_port.ok());
  auto admin_status = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = v1::Admin::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", *admin_port), std::move(creds)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(3));
    v1::StatusResponse resp;
    return stub->Status(&ctx, v1::StatusRequest(), &resp).error_code();
  };
  CHECK(admin_status(grpc::InsecureChannelCredentials()) ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(admin_status(Tls(pki.ca_file())) == grpc::StatusCode::UNAVAILABLE);
  CHECK(admin_status(Tls(pki.ca_file(), *foreign)) ==
        grpc::StatusCode::UNAVAILABLE);
  // Past TLS, the certificate's identity is the admin credential: alice is
  // listed in admin.client_identities, mallory (same CA) is not.
  CHECK(admin_status(Tls(pki.ca_file(), *alice)) == grpc::StatusCode::OK);
  auto mallory = pki.IssueClientCert("mallory");
  REQUIRE(mallory.ok());
  CHECK(admin_status(Tls(pki.ca_file(), *mallory)) ==
        grpc::StatusCode::PERMISSION_DENIED);
  CHECK(c.tccd()->WaitForLine("admin: Status by cert:alice from", 5000).ok());
  {
    // The admin listener has the client listener's request size limit
    // (limits.max_request_bytes, 1 MiB), not gRPC's 4 MiB.
    auto stub = v1::Admin::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", *admin_port), Tls(pki.ca_file(), *alice)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    v1::IssueApprovalRequest big;
    big.set_gid("g-big");
    big.set_reason(std::string(2 * 1024 * 1024, 'r'));
    v1::IssueApprovalResponse resp;
    CHECK(stub->IssueApproval(&ctx, big, &resp).error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
}

TEST_CASE(
    "tccd trusting the wrong CA for a participant: unknown, never "
    "half-applied, finished once the CA is fixed") {
  const std::string dir = TempDir("wrong-ca");
  Cleanup cleanup{dir};
  ClusterOptions o = TlsOptions(dir, "tls");
  // bank-b's certificate chains to the PKI's CA; tccd trusts the other one.
  o.tls.participant_ca_file["bank-b"] = dir + "/pki/other-ca.pem";
  BankCluster c(o);
  REQUIRE_OK(c.Start());

  auto req = c.Transfer("bank-a", 5, "bank-b", 6, 30);
  req.set_try_timeout_ms(2500);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  auto r = c.client().Submit(req);
  INFO(r.status().ToString());
  REQUIRE(r.ok());

  // While the Try deadline runs: bank-b's Try is unknown (sent, never
  // answered), not failed, and no decision is made.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto view = c.client().Get(req.gid());
  REQUIRE(view.ok());
  INFO(view->DebugString());
  CHECK(view->state() == v1::TXN_STATE_TRYING);
  CHECK(view->decision() == v1::DECISION_UNSPECIFIED);
  for (const auto& b : view->branches()) {
    if (b.participant() == "bank-b") {
      CHECK(b.try_phase().state() == v1::PHASE_STATE_UNKNOWN);
      CHECK(b.try_phase().outcome() != v1::OUTCOME_EXECUTED);
    } else {
      CHECK(b.try_phase().outcome() == v1::OUTCOME_EXECUTED);
    }
  }
  // bank-b never ran anything: nothing incoming, its account untouched.
  auto b6 = c.Account("bank-b", 6);
  REQUIRE(b6.ok());
  CHECK(b6->balance() == 1000);
  CHECK(b6->incoming() == 0);

  // Past the try-deadline the unknown Try makes tccd cancel; bank-b's
  // Cancel cannot get through either, so the transaction is not final.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  view = c.client().Get(req.gid());
  REQUIRE(view.ok());
  INFO(view->DebugString());
  CHECK(view->decision() == v1::DECISION_CANCEL);
  CHECK(view->state() == v1::TXN_STATE_CANCELLING);
  CHECK(c.Account("bank-b", 6)->balance() == 1000);

  // Fix the CA and restart tccd: the Cancel reaches bank-b, all is final,
  // and no money moved.
  c.SetTccdTls(TlsOptions(dir, "tls").tls);
  auto stopped = c.StopTccd();
  REQUIRE(stopped.ok());
  REQUIRE_OK(c.StartTccd());
  CHECK_OK(c.CheckFinal({req.gid()}, 20000));
  CHECK(c.Account("bank-a", 5)->balance() == 1000);
  CHECK(c.Account("bank-b", 6)->balance() == 1000);
}

TEST_CASE("tccd refuses to start with a missing or bad TLS file") {
  const std::string dir = TempDir("bad-files");
  Cleanup cleanup{dir};
  auto pki = tcc::harness::MakeTestPki(dir + "/pki");
  REQUIRE(pki.ok());
  {
    std::ofstream junk(dir + "/junk.pem");
    junk << "not a certificate\n";
  }
  struct Case {
    std::string name;
    std::string yaml;
    std::string expect;  // in tccd's stderr
  };
  const std::string cert = pki->server().cert_file;
  const std::string key = pki->server().key_file;
  const std::string missing = dir + "/missing.pem";
  const std::vector<Case> cases = {
      {"missing cert_file",
       absl::StrCat("tls: {mode: tls, cert_file: \"", missing,
                    "\", key_file: \"", key, "\"}\n"),
       absl::StrCat("tls.cert_file: ", missing, ": cannot read")},
      {"not a certificate",
       absl::StrCat("tls: {mode: tls, cert_file: \"", dir,
                    "/junk.pem\", key_file: \"", key, "\"}\n"),
       "tls.cert_file: " + dir + "/junk.pem: no PEM certificate"},
      {"key of another certificate",
       absl::StrCat("tls: {mode: tls, cert_file: \"", cert, "\", key_file: \"",
                    pki->other_server().key_file, "\"}\n"),
       "tls.key_file: "},
      {"missing client CA",
       absl::StrCat("tls: {mode: mtls, cert_file: \"", cert, "\", key_file: \"",
                    key, "\", client_ca_file: \"", missing, "\"}\n"),
       "tls.client_ca_file: " + missing},
      {"missing participant CA",
       absl::StrCat("participants:\n  bank-a:\n    address: 127.0.0.1:1\n"
                    "    tls: {enabled: true, ca_file: \"",
                    missing, "\"}\n"),
       "participants.bank-a.tls.ca_file: " + missing},
  };
  for (const Case& k : cases) {
    {
      INFO(k.name);
      const std::string config = dir + "/tccd.yaml";
      {
        std::ofstream out(config, std::ios::trunc);
        out << "listen: 127.0.0.1:0\nmetrics_listen: \"\"\n" << k.yaml;
      }
      auto p = tcc::harness::Process::Start(tcc::harness::ProcessOptions{
          {TCC_TCCD_BIN, "--config", config, "--data-dir", dir + "/data"},
          {},
          "",
          "tccd"});
      REQUIRE(p.ok());
      auto status = (*p)->Wait(20000);
      REQUIRE(status.ok());
      INFO((*p)->Output());
      CHECK(WIFEXITED(*status));
      CHECK(WEXITSTATUS(*status) == 2);
      CHECK((*p)->Output().find(k.expect) != std::string::npos);
      CHECK((*p)->Output().find("listening on") == std::string::npos);
    }
  }
}
