// tcc-bank-demo: what `scripts/run.sh` shows. Three transfers between the two
// demo banks through tccd, using only the SDK's initiator client:
//   1. a transfer that goes through (CONFIRMED),
//   2. a transfer the source bank refuses for want of funds (CANCELLED; the
//      credit branch is cancelled too, an empty rollback if it never ran),
//   3. an interactive transfer: Begin, Try, Try, Commit (CONFIRMED).
// Prints each outcome and the balances, then checks them: exit 0 only when
// every outcome is the expected one, money is conserved and nothing stays
// frozen.
//
// --tls-ca (and --tls-cert/--tls-key for mutual TLS) dial tccd, and the
// banks' balance service, over TLS: the demo assumes one PKI for both.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "bank.grpc.pb.h"
#include "tcc/client/coordinator_client.h"
#include "tcc/tls/credentials.h"

namespace {

namespace v1 = tcc::v1;
namespace bank = tcc::examples::bank;

struct Bank {
  std::string name;
  std::unique_ptr<bank::Bank::Stub> stub;
};

bank::Account ReadAccount(Bank& b, uint32_t account) {
  grpc::ClientContext ctx;
  ctx.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_seconds(5, GPR_TIMESPAN)));
  bank::GetAccountRequest req;
  req.set_account(account);
  bank::Account out;
  grpc::Status s = b.stub->GetAccount(&ctx, req, &out);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: GetAccount: %s\n", b.name.c_str(),
                 s.error_message().c_str());
  }
  return out;
}

bank::Totals ReadTotals(Bank& b) {
  grpc::ClientContext ctx;
  ctx.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_seconds(5, GPR_TIMESPAN)));
  bank::Totals out;
  grpc::Status s = b.stub->GetTotals(&ctx, bank::GetTotalsRequest(), &out);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: GetTotals: %s\n", b.name.c_str(),
                 s.error_message().c_str());
  }
  return out;
}

void PrintBalances(Bank& a, Bank& b) {
  std::printf("  balances:");
  for (Bank* x : {&a, &b}) {
    bank::Totals t = ReadTotals(*x);
    std::printf("  %s total %lld (frozen %lld, incoming %lld)", x->name.c_str(),
                static_cast<long long>(t.balance()),
                static_cast<long long>(t.frozen()),
                static_cast<long long>(t.incoming()));
  }
  std::printf("\n");
}

v1::BranchSpec Branch(const std::string& id, const std::string& participant,
                      const std::string& action, uint32_t account,
                      int64_t amount) {
  v1::BranchSpec b;
  b.set_branch_id(id);
  b.set_participant(participant);
  b.set_action(action);
  b.set_payload(std::to_string(account) + ":" + std::to_string(amount));
  return b;
}

const char* StateName(v1::TxnState s) {
  return v1::TxnState_Name(s).c_str() + std::string("TXN_STATE_").size();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tcc-bank-demo: three transfers through tccd"};
  std::string tccd = "127.0.0.1:7070";
  std::string bank_a = "127.0.0.1:7101";
  std::string bank_b = "127.0.0.1:7102";
  app.add_option("--tccd", tccd,
                 "tccd's address; a cluster's nodes comma-separated (any "
                 "node serves; a node down or a shard between owners is "
                 "retried at the next)");
  app.add_option("--bank-a", bank_a, "bank-a's address (for balances)");
  app.add_option("--bank-b", bank_b, "bank-b's address (for balances)");
  std::string get_gid;
  app.add_option("--get", get_gid,
                 "only print transaction GID as tccd sees it (tcc.v1 Get)");
  tcc::tls::ChannelTlsFiles tls;
  app.add_option("--tls-ca", tls.ca_file,
                 "dial over TLS, trusting this PEM CA (off: plaintext)");
  app.add_option("--tls-cert", tls.cert_file,
                 "mutual TLS: this PEM client certificate (needs --tls-ca)");
  app.add_option("--tls-key", tls.key_file, "private key of --tls-cert");
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!tls.ca_file.empty()) {
    auto built = tcc::tls::ChannelCredentials(tls, "--tls-");
    if (!built.ok()) {
      std::fprintf(stderr, "%s\n", built.status().ToString().c_str());
      return 2;
    }
    credentials = *built;
  } else if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    std::fprintf(stderr, "--tls-cert and --tls-key need --tls-ca\n");
    return 2;
  }
  tcc::client::ClientOptions options;
  options.address = tccd;
  if (tccd.find(',') != std::string::npos) {
    for (size_t at = 0; at <= tccd.size();) {
      const size_t comma = std::min(tccd.find(',', at), tccd.size());
      if (comma > at) options.addresses.push_back(tccd.substr(at, comma - at));
      at = comma + 1;
    }
    // A takeover takes up to the lease TTL and the takeover margin: room
    // for it in the retries, 15 s of backoff whatever the jitter drew (10
    // attempts alone once ran out 2.3 s into a takeover with a 2 s TTL).
    options.retry_for_ms = 15000;
  }
  options.credentials = credentials;
  tcc::client::CoordinatorClient client(options);
  if (!get_gid.empty()) {
    auto view = client.Get(get_gid);
    if (!view.ok()) {
      std::fprintf(stderr, "Get %s: %s\n", get_gid.c_str(),
                   view.status().ToString().c_str());
      return 1;
    }
    std::printf("%s", view->DebugString().c_str());
    return 0;
  }
  Bank a{"bank-a",
         bank::Bank::NewStub(grpc::CreateChannel(bank_a, credentials))};
  Bank b{"bank-b",
         bank::Bank::NewStub(grpc::CreateChannel(bank_b, credentials))};
  const int64_t total_before =
      ReadTotals(a).balance() + ReadTotals(b).balance();
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("  %s %s\n", ok ? "ok:" : "UNEXPECTED:", what);
    if (!ok) ++failures;
  };

  std::printf("\n1. transfer 30 from bank-a account 1 to bank-b account 2\n");
  PrintBalances(a, b);
  const int64_t a1 = ReadAccount(a, 1).balance();
  const int64_t b2 = ReadAccount(b, 2).balance();
  v1::SubmitRequest t1;
  *t1.add_branches() = Branch("debit", "bank-a", "debit", 1, 30);
  *t1.add_branches() = Branch("credit", "bank-b", "credit", 2, 30);
  t1.set_wait_for(v1::WAIT_FOR_FINISHED);
  auto r1 = client.Submit(t1);
  if (!r1.ok()) {
    std::printf("  Submit failed: %s\n", r1.status().ToString().c_str());
    ++failures;
  } else {
    std::printf("  gid %s -> %s\n", t1.gid().c_str(),
                StateName(r1->transaction().state()));
    expect(r1->transaction().state() == v1::TXN_STATE_CONFIRMED, "confirmed");
    expect(ReadAccount(a, 1).balance() == a1 - 30 &&
               ReadAccount(b, 2).balance() == b2 + 30,
           "30 moved from bank-a/1 to bank-b/2");
  }
  PrintBalances(a, b);

  std::printf(
      "\n2. transfer 1000000 from bank-a account 3: more than it has\n");
  const int64_t a3 = ReadAccount(a, 3).balance();
  v1::SubmitRequest t2;
  *t2.add_branches() = Branch("debit", "bank-a", "debit", 3, 1000000);
  *t2.add_branches() = Branch("credit", "bank-b", "credit", 4, 1000000);
  auto r2 = client.Submit(t2);
  if (!r2.ok()) {
    std::printf("  Submit failed: %s\n", r2.status().ToString().c_str());
    ++failures;
  } else {
    std::printf("  gid %s -> %s: %s\n", t2.gid().c_str(),
                StateName(r2->transaction().state()),
                r2->transaction().decision_reason().c_str());
    expect(r2->transaction().state() == v1::TXN_STATE_CANCELLED, "cancelled");
    expect(ReadAccount(a, 3).balance() == a3, "bank-a/3 unchanged");
  }
  PrintBalances(a, b);

  std::printf(
      "\n3. interactive: Begin, Try debit bank-b/5, Try credit "
      "bank-a/6, Commit\n");
  const int64_t b5 = ReadAccount(b, 5).balance();
  const int64_t a6 = ReadAccount(a, 6).balance();
  v1::BeginRequest begin;
  begin.set_timeout_ms(30000);
  auto rb = client.Begin(begin);
  bool interactive_ok = rb.ok();
  for (const auto& branch : {Branch("debit", "bank-b", "debit", 5, 10),
                             Branch("credit", "bank-a", "credit", 6, 10)}) {
    if (!interactive_ok) break;
    v1::TryRequest tr;
    tr.set_gid(begin.gid());
    *tr.mutable_branch() = branch;
    auto r = client.Try(tr);
    interactive_ok = r.ok();
    if (r.ok()) {
      std::printf("  Try %s -> %s\n", branch.branch_id().c_str(),
                  v1::PhaseState_Name(r->branch().try_phase().state()).c_str());
    } else {
      std::printf("  Try failed: %s\n", r.status().ToString().c_str());
    }
  }
  if (interactive_ok) {
    v1::CommitRequest commit;
    commit.set_gid(begin.gid());
    commit.add_expected_branch_ids("debit");
    commit.add_expected_branch_ids("credit");
    commit.set_wait_for(v1::WAIT_FOR_FINISHED);
    auto rc = client.Commit(commit);
    if (rc.ok()) {
      std::printf("  gid %s -> %s\n", begin.gid().c_str(),
                  StateName(rc->transaction().state()));
      expect(rc->transaction().state() == v1::TXN_STATE_CONFIRMED, "confirmed");
      expect(ReadAccount(b, 5).balance() == b5 - 10 &&
                 ReadAccount(a, 6).balance() == a6 + 10,
             "10 moved from bank-b/5 to bank-a/6");
    } else {
      std::printf("  Commit failed: %s\n", rc.status().ToString().c_str());
      ++failures;
    }
  } else {
    if (!rb.ok()) {
      std::printf("  Begin failed: %s\n", rb.status().ToString().c_str());
    }
    ++failures;
  }
  PrintBalances(a, b);

  const bank::Totals ta = ReadTotals(a), tb = ReadTotals(b);
  expect(ta.balance() + tb.balance() == total_before,
         "money conserved across both banks");
  expect(ta.frozen() == 0 && tb.frozen() == 0 && ta.incoming() == 0 &&
             tb.incoming() == 0,
         "nothing frozen or pending");
  std::string tls_flags;
  if (!tls.ca_file.empty()) tls_flags += " --tls-ca " + tls.ca_file;
  if (!tls.cert_file.empty()) {
    tls_flags += " --tls-cert " + tls.cert_file + " --tls-key " + tls.key_file;
  }
  std::printf("\nLook a transaction up: %s --tccd %s%s --get %s\n", argv[0],
              tccd.c_str(), tls_flags.c_str(), t1.gid().c_str());
  std::printf("demo: %s (%d unexpected)\n", failures == 0 ? "PASS" : "FAIL",
              failures);
  return failures == 0 ? 0 : 1;
}
