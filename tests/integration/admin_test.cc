// The admin API end to end over a real tccd and real banks: credentials
// (refused calls change nothing), one-time approvals (match, each kind of
// mismatch, expiry, reuse, two concurrent uses, a crash right after one was
// consumed), the approval gate both ways, the audit log, and the per-client
// rate limit (issue 9).
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "bank_cluster.h"
#include "http_get.h"
#include "tcc/v1/admin.grpc.pb.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-fedcba9876543210";

std::string TempDir(const std::string& name) {
  return tcc::harness::MakeTempDir("tccd-admin-" + name);
}

using tcc::harness::Cleanup;
using tcc::harness::ReadFile;

std::string WriteTokens(const std::string& dir, mode_t mode = 0600) {
  const std::string path = dir + "/admin-tokens";
  std::ofstream(path) << "# who token\nalice " << kAliceToken << "\nbob "
                      << kBobToken << "\n";
  REQUIRE(chmod(path.c_str(), mode) == 0);
  return path;
}

ClusterOptions Options(const std::string& dir,
                       std::vector<std::string> extra = {}) {
  ClusterOptions o;
  o.root_dir = dir;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  o.tccd_args = {"--admin-token-file", WriteTokens(dir)};
  for (auto& e : extra) o.tccd_args.push_back(std::move(e));
  return o;
}

// The Admin API as one operator (or nobody, with an empty token).
class Admin {
 public:
  Admin(int port, std::string token) : token_(std::move(token)) {
    stub_ = v1::Admin::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    if (!token_.empty()) {
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    }
    return (stub_.get()->*method)(&ctx, req, resp);
  }

  grpc::Status Show(const std::string& gid, v1::ShowResponse* out) {
    v1::ShowRequest r;
    r.set_gid(gid);
    // Read-only, so retried when the connection broke: a channel to a
    // restarted tccd may first reuse the dead connection.
    grpc::Status st;
    for (int i = 0; i < 5; ++i) {
      st = Call(&v1::Admin::Stub::Show, r, out);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return st;
  }
  v1::TransactionView View(const std::string& gid) {
    v1::ShowResponse s;
    grpc::Status st = Show(gid, &s);
    INFO(st.error_message());
    REQUIRE(st.ok());
    return s.transaction();
  }
  // Issues an approval bound to the transaction as it stands now.
  grpc::Status Issue(v1::ApprovalAction action, const std::string& gid,
                     v1::Approval* out, const std::string& branch = "",
                     uint32_t ttl_ms = 0) {
    const v1::TransactionView t = View(gid);
    v1::IssueApprovalRequest r;
    r.set_action(action);
    r.set_gid(gid);
    r.set_revision(t.revision());
    r.set_content_hash(t.content_hash());
    r.set_branch_id(branch);
    r.set_ttl_ms(ttl_ms);
    r.set_reason("test: " + gid);
    v1::IssueApprovalResponse resp;
    grpc::Status st = Call(&v1::Admin::Stub::IssueApproval, r, &resp);
    *out = resp.approval();
    if (!st.ok()) UNSCOPED_INFO("IssueApproval: " << st.error_message());
    return st;
  }
  grpc::Status Approve(const std::string& gid, const std::string& approval,
                       v1::ApproveResponse* out = nullptr) {
    v1::ApproveRequest r;
    r.set_gid(gid);
    r.set_approval_id(approval);
    v1::ApproveResponse resp;
    return Call(&v1::Admin::Stub::Approve, r, out ? out : &resp);
  }
  grpc::Status Force(const std::string& gid, v1::Decision d,
                     const std::string& approval) {
    v1::ForceDecisionRequest r;
    r.set_gid(gid);
    r.set_decision(d);
    r.set_approval_id(approval);
    v1::ForceDecisionResponse resp;
    return Call(&v1::Admin::Stub::ForceDecision, r, &resp);
  }
  grpc::Status Resolve(const std::string& gid, const std::string& branch,
                       const std::string& approval) {
    v1::ResolveBranchRequest r;
    r.set_gid(gid);
    r.set_branch_id(branch);
    r.set_approval_id(approval);
    v1::ResolveBranchResponse resp;
    return Call(&v1::Admin::Stub::ResolveBranch, r, &resp);
  }

 private:
  std::string token_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

// Submits a gated transfer and waits until its Trys are done.
v1::SubmitRequest GatedTransfer(BankCluster& c, Admin& admin, uint32_t from,
                                uint32_t to, int64_t amount,
                                uint32_t approval_timeout_ms = 60000) {
  auto req = c.Transfer("bank-a", from, "bank-b", to, amount);
  req.set_approval_gate(true);
  req.set_approval_timeout_ms(approval_timeout_ms);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  auto r = c.client().Submit(req);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  for (int i = 0; i < 200; ++i) {
    if (admin.View(req.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(admin.View(req.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);
  return req;
}

v1::TransactionView WaitFinal(Admin& admin, const std::string& gid) {
  v1::TransactionView t;
  for (int i = 0; i < 400; ++i) {
    t = admin.View(gid);
    if (t.state() == v1::TXN_STATE_CONFIRMED ||
        t.state() == v1::TXN_STATE_CANCELLED) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return t;
}

int64_t BalanceOf(BankCluster& c, const std::string& bank, uint32_t account) {
  auto a = c.Account(bank, account);
  REQUIRE(a.ok());
  return a->balance();
}

}  // namespace

TEST_CASE("admin calls need a credential; refused ones change nothing") {
  const std::string dir = TempDir("auth");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  Admin nobody(c.tccd_port(), "");
  Admin wrong(c.tccd_port(), "not-a-token-0123456789");
  auto req = GatedTransfer(c, alice, 1, 2, 30);

  v1::StatusResponse status;
  CHECK(nobody.Call(&v1::Admin::Stub::Status, v1::StatusRequest(), &status)
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(wrong.Call(&v1::Admin::Stub::Status, v1::StatusRequest(), &status)
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);
  v1::ShowResponse show;
  CHECK(nobody.Show(req.gid(), &show).error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);
  v1::ListResponse list;
  CHECK(wrong.Call(&v1::Admin::Stub::List, v1::ListRequest(), &list)
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);

  // A real approval, used with no or a wrong credential: refused, unused.
  v1::Approval a;
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_FORCE_CANCEL, req.gid(), &a).ok());
  CHECK(nobody.Force(req.gid(), v1::DECISION_CANCEL, a.approval_id())
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(wrong.Force(req.gid(), v1::DECISION_CANCEL, a.approval_id())
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);
  v1::IssueApprovalRequest issue;
  issue.set_action(v1::APPROVAL_ACTION_GATE_APPROVE);
  issue.set_gid(req.gid());
  issue.set_revision(a.revision());
  issue.set_content_hash(a.content_hash());
  issue.set_reason("not allowed");
  v1::IssueApprovalResponse issued;
  CHECK(wrong.Call(&v1::Admin::Stub::IssueApproval, issue, &issued)
            .error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(alice.View(req.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);

  // Status works with a credential; the refused calls are in the audit log.
  REQUIRE(
      alice.Call(&v1::Admin::Stub::Status, v1::StatusRequest(), &status).ok());
  CHECK(status.health() == "serving");
  // The approval is still usable: nothing above consumed it.
  REQUIRE(alice.Force(req.gid(), v1::DECISION_CANCEL, a.approval_id()).ok());
  CHECK(WaitFinal(alice, req.gid()).state() == v1::TXN_STATE_CANCELLED);
  CHECK(BalanceOf(c, "bank-a", 1) == 1000);
  CHECK(c.CheckFinal({req.gid()}, 10000).ok());

  const std::string log = ReadFile(dir + "/tccd.log");
  CHECK(log.find("admin: ForceDecision by - from") != std::string::npos);
  CHECK(log.find("UNAUTHENTICATED") != std::string::npos);
  CHECK(log.find("admin: ForceDecision by alice") != std::string::npos);
  CHECK(log.find("admin: IssueApproval by alice") != std::string::npos);
}

TEST_CASE("a token file readable by others stops the start") {
  const std::string dir = TempDir("perm");
  Cleanup cleanup{dir};
  const std::string tokens = WriteTokens(dir, 0644);
  tcc::harness::ProcessOptions po;
  po.argv = {TCC_TCCD_BIN, "--data-dir",         dir + "/tccd",
             "--listen",   "127.0.0.1:0",        "--metrics-listen",
             "off",        "--admin-token-file", tokens};
  po.log_path = dir + "/tccd.log";
  po.name = "tccd";
  auto p = tcc::harness::Process::Start(po);
  REQUIRE(p.ok());
  auto exit = (*p)->Wait(20000);
  REQUIRE(exit.ok());
  CHECK(WIFEXITED(*exit));
  CHECK(WEXITSTATUS(*exit) == 2);
  CHECK(ReadFile(dir + "/tccd.log").find("chmod 600") != std::string::npos);
}

TEST_CASE("approval gate: approve confirms; one approval, one use") {
  const std::string dir = TempDir("gate");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  Admin bob(c.tccd_port(), kBobToken);
  auto req = GatedTransfer(c, alice, 3, 4, 40);
  CHECK(BalanceOf(c, "bank-b", 4) == 1000);  // held, not moved

  v1::Approval a;
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_GATE_APPROVE, req.gid(), &a).ok());
  CHECK(a.issued_by() == "alice");
  CHECK(a.approval_id().rfind("apv-", 0) == 0);
  CHECK(a.used_at_ms() == 0);
  CHECK(a.expires_at_ms() > a.issued_at_ms());

  // Two operators use it at once: exactly one wins. A use that comes while
  // the winner's decision waits for its sync is told UNAVAILABLE (that
  // decision may yet be refused) and retries, as tccctl's user would.
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (Admin* who : {&alice, &bob, &alice, &bob}) {
    threads.emplace_back([&, who] {
      grpc::Status s = who->Approve(req.gid(), a.approval_id());
      for (int i = 0;
           i < 100 && s.error_code() == grpc::StatusCode::UNAVAILABLE; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        s = who->Approve(req.gid(), a.approval_id());
      }
      if (s.ok()) {
        ++ok;
      } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        ++refused;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 1);
  CHECK(refused == 3);
  CHECK(WaitFinal(alice, req.gid()).state() == v1::TXN_STATE_CONFIRMED);
  CHECK(BalanceOf(c, "bank-a", 3) == 960);
  CHECK(BalanceOf(c, "bank-b", 4) == 1040);

  // Reuse later: refused, nothing changes.
  grpc::Status again = bob.Approve(req.gid(), a.approval_id());
  CHECK(again.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(again.error_message().find("already used") != std::string::npos);

  // The audit trail: the decision record names the approval, which shows
  // who issued it and when it was used.
  v1::ShowResponse show;
  REQUIRE(alice.Show(req.gid(), &show).ok());
  bool decided = false;
  for (const auto& r : show.timeline()) {
    if (r.kind() == "Decided") {
      decided = true;
      CHECK(r.approval_id() == a.approval_id());
    }
  }
  CHECK(decided);
  CHECK(show.timeline(0).kind() == "Registered");
  CHECK(show.timeline(show.timeline_size() - 1).kind() == "Finished");
  REQUIRE(show.approvals_size() == 1);
  CHECK(show.approvals(0).issued_by() == "alice");
  CHECK(show.approvals(0).reason() == "test: " + req.gid());
  CHECK(show.approvals(0).used_at_ms() > 0);
  CHECK(c.CheckFinal({req.gid()}, 10000).ok());
}

TEST_CASE("approval gate: the approval deadline cancels") {
  const std::string dir = TempDir("gate-deadline");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  auto req = GatedTransfer(c, alice, 5, 6, 50, /*approval_timeout_ms=*/1500);
  const v1::TransactionView t = WaitFinal(alice, req.gid());
  CHECK(t.state() == v1::TXN_STATE_CANCELLED);
  CHECK(BalanceOf(c, "bank-a", 5) == 1000);
  CHECK(c.CheckFinal({req.gid()}, 10000).ok());
}

TEST_CASE("approvals that do not match exactly are refused") {
  const std::string dir = TempDir("mismatch");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  auto one = GatedTransfer(c, alice, 7, 8, 10);
  auto two = GatedTransfer(c, alice, 9, 10, 10);
  const v1::TransactionView t = alice.View(one.gid());

  SECTION("issue: wrong revision or content hash, unknown gid, no reason") {
    v1::IssueApprovalRequest r;
    r.set_action(v1::APPROVAL_ACTION_FORCE_CANCEL);
    r.set_gid(one.gid());
    r.set_revision(t.revision() + 1);
    r.set_content_hash(t.content_hash());
    r.set_reason("x");
    v1::IssueApprovalResponse resp;
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
    r.set_revision(t.revision());
    std::string hash = t.content_hash();
    hash[0] ^= 1;
    r.set_content_hash(hash);
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
    r.set_content_hash(t.content_hash());
    r.set_reason("");
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    r.set_reason("x");
    r.set_ttl_ms(25u * 3600 * 1000);  // over max_approval_ttl_ms (24 h)
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    r.set_ttl_ms(0);
    r.set_gid("no-such-gid");
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::NOT_FOUND);
    r.set_gid(one.gid());
    r.set_action(v1::APPROVAL_ACTION_UNSPECIFIED);
    CHECK(alice.Call(&v1::Admin::Stub::IssueApproval, r, &resp).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("use: other gid, other action, other decision, unknown id") {
    v1::Approval cancel_one;
    REQUIRE(
        alice.Issue(v1::APPROVAL_ACTION_FORCE_CANCEL, one.gid(), &cancel_one)
            .ok());
    // Another gid.
    CHECK(alice.Force(two.gid(), v1::DECISION_CANCEL, cancel_one.approval_id())
              .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    // Another action.
    CHECK(alice.Approve(one.gid(), cancel_one.approval_id()).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(alice.Force(one.gid(), v1::DECISION_CONFIRM, cancel_one.approval_id())
              .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(alice.Force(one.gid(), v1::DECISION_CANCEL, "apv-doesnotexist")
              .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(alice.Force(one.gid(), v1::DECISION_CANCEL, "").error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    // Nothing changed, and the approval is still good for what it names.
    CHECK(alice.View(one.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);
    CHECK(alice.View(two.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);
    REQUIRE(
        alice.Force(one.gid(), v1::DECISION_CANCEL, cancel_one.approval_id())
            .ok());
    CHECK(WaitFinal(alice, one.gid()).state() == v1::TXN_STATE_CANCELLED);
  }
  SECTION("expired") {
    v1::Approval a;
    REQUIRE(alice
                .Issue(v1::APPROVAL_ACTION_GATE_APPROVE, two.gid(), &a, "",
                       /*ttl_ms=*/300)
                .ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    grpc::Status s = alice.Approve(two.gid(), a.approval_id());
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(s.error_message().find("expired") != std::string::npos);
    CHECK(alice.View(two.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);
  }
  SECTION("force Confirm needs every Try EXECUTED; it is here") {
    v1::Approval a;
    REQUIRE(alice.Issue(v1::APPROVAL_ACTION_FORCE_CONFIRM, two.gid(), &a).ok());
    REQUIRE(alice.Force(two.gid(), v1::DECISION_CONFIRM, a.approval_id()).ok());
    CHECK(WaitFinal(alice, two.gid()).state() == v1::TXN_STATE_CONFIRMED);
    CHECK(BalanceOf(c, "bank-b", 10) == 1010);
  }
}

TEST_CASE("a consumed approval stays consumed across a crash") {
  const std::string dir = TempDir("crash");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  auto req = GatedTransfer(c, alice, 11, 12, 70);
  v1::Approval a;
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_FORCE_CANCEL, req.gid(), &a).ok());
  REQUIRE(alice.Force(req.gid(), v1::DECISION_CANCEL, a.approval_id()).ok());
  c.KillTccd();  // right after the answer: the consumption was durable
  REQUIRE(c.StartTccd().ok());
  Admin after(c.tccd_port(), kAliceToken);
  CHECK(WaitFinal(after, req.gid()).state() == v1::TXN_STATE_CANCELLED);
  grpc::Status s = after.Force(req.gid(), v1::DECISION_CANCEL, a.approval_id());
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  v1::ShowResponse show;
  REQUIRE(after.Show(req.gid(), &show).ok());
  REQUIRE(show.approvals_size() == 1);
  CHECK(show.approvals(0).used_at_ms() > 0);
  CHECK(c.CheckFinal({req.gid()}, 15000).ok());
}

TEST_CASE("resolve a phase-2 branch by hand") {
  const std::string dir = TempDir("resolve");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  auto req = GatedTransfer(c, alice, 13, 14, 20);
  std::string credit;
  for (const auto& b : req.branches()) {
    if (b.participant() == "bank-b") credit = b.branch_id();
  }
  REQUIRE(!credit.empty());
  // Not in phase 2 yet: refused.
  v1::Approval early;
  REQUIRE(
      alice.Issue(v1::APPROVAL_ACTION_RESOLVE_BRANCH, req.gid(), &early, credit)
          .ok());
  CHECK(alice.Resolve(req.gid(), credit, early.approval_id()).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  // bank-b goes away; the decision is Confirm; its Confirm can't land.
  c.KillBank("bank-b");
  v1::Approval go;
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_GATE_APPROVE, req.gid(), &go).ok());
  REQUIRE(alice.Approve(req.gid(), go.approval_id()).ok());
  CHECK(alice.View(req.gid()).state() == v1::TXN_STATE_CONFIRMING);
  // A branch-bound approval only fits its branch.
  v1::Approval other;
  std::string debit;
  for (const auto& b : req.branches()) {
    if (b.participant() == "bank-a") debit = b.branch_id();
  }
  REQUIRE(
      alice.Issue(v1::APPROVAL_ACTION_RESOLVE_BRANCH, req.gid(), &other, debit)
          .ok());
  CHECK(alice.Resolve(req.gid(), credit, other.approval_id()).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  v1::Approval fix;
  REQUIRE(
      alice.Issue(v1::APPROVAL_ACTION_RESOLVE_BRANCH, req.gid(), &fix, credit)
          .ok());
  REQUIRE(alice.Resolve(req.gid(), credit, fix.approval_id()).ok());
  const v1::TransactionView t = WaitFinal(alice, req.gid());
  CHECK(t.state() == v1::TXN_STATE_CONFIRMED);
  v1::ShowResponse show;
  REQUIRE(alice.Show(req.gid(), &show).ok());
  bool resolved = false;
  for (const auto& r : show.timeline()) {
    if (r.kind() == "BranchResolved") {
      resolved = true;
      CHECK(r.branch_id() == credit);
      CHECK(r.approval_id() == fix.approval_id());
    }
  }
  CHECK(resolved);
  CHECK(show.approvals_size() == 2);  // the gate and the resolve
}

TEST_CASE("a STUCK branch resolved by hand is no longer counted stuck") {
  const std::string dir = TempDir("unstuck");
  Cleanup cleanup{dir};
  // Two failed Confirms (at a 100 ms cap) flag a branch STUCK.
  std::ofstream(dir + "/tccd.yaml")
      << "retry:\n  base_ms: 20\n  cap_ms: 100\n  stuck_after_ms: 200\n";
  ClusterOptions o = Options(dir, {"--config", dir + "/tccd.yaml"});
  o.metrics = true;
  BankCluster c(o);
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  auto status = [&] {
    v1::StatusResponse s;
    REQUIRE(alice.Call(&v1::Admin::Stub::Status, v1::StatusRequest(), &s).ok());
    return s;
  };
  // The gauge is refreshed every 250 ms.
  auto metric_says = [&](const std::string& line) {
    for (int i = 0; i < 100; ++i) {
      auto page = tcc::testing::HttpGet(
          tcc::testing::LoopbackUrl(c.tccd_metrics_port(), "/metrics"), 5000);
      if (page.ok() && page->find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  CHECK(metric_says("tccd_stuck_branches 0\n"));
  auto req = GatedTransfer(c, alice, 15, 16, 20);
  std::string credit;
  for (const auto& b : req.branches()) {
    if (b.participant() == "bank-b") credit = b.branch_id();
  }
  c.KillBank("bank-b");
  v1::Approval go;
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_GATE_APPROVE, req.gid(), &go).ok());
  REQUIRE(alice.Approve(req.gid(), go.approval_id()).ok());
  for (int i = 0; i < 200 && status().stuck_branches() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(status().stuck_branches() == 1);
  CHECK(metric_says("tccd_stuck_branches 1\n"));
  v1::Approval fix;
  REQUIRE(
      alice.Issue(v1::APPROVAL_ACTION_RESOLVE_BRANCH, req.gid(), &fix, credit)
          .ok());
  REQUIRE(alice.Resolve(req.gid(), credit, fix.approval_id()).ok());
  CHECK(WaitFinal(alice, req.gid()).state() == v1::TXN_STATE_CONFIRMED);
  // The alert clears: nothing is stuck any more.
  CHECK(status().stuck_branches() == 0);
  CHECK(metric_says("tccd_stuck_branches 0\n"));
}

TEST_CASE("the per-client rate limit refuses the excess and changes nothing") {
  const std::string dir = TempDir("rate");
  Cleanup cleanup{dir};
  // One call a second, bursts of 3: a quick run of calls overflows it.
  BankCluster c(Options(dir, {"--config", dir + "/tccd.yaml"}));
  std::ofstream(dir + "/tccd.yaml")
      << "limits:\n  client_requests_per_s: 1\n  client_burst: 3\n";
  // The harness's own calls count too: start, then wait for a full bucket.
  REQUIRE(c.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  auto client = c.NewClient(/*max_attempts=*/1);
  int refused = 0;
  std::vector<std::string> refused_gids;
  for (int i = 0; i < 12; ++i) {
    auto req = c.Transfer("bank-a", 15, "bank-b", 16, 1);
    auto r = client->Submit(req);
    if (r.status().code() == absl::StatusCode::kResourceExhausted) {
      ++refused;
      refused_gids.push_back(req.gid());
    } else {
      INFO(r.status().ToString());
      CHECK(r.ok());
    }
  }
  CHECK(refused >= 6);
  // Refused Submits left nothing behind.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  Admin alice(c.tccd_port(), kAliceToken);  // the admin API is not limited
  for (const auto& gid : refused_gids) {
    v1::ShowResponse show;
    CHECK(alice.Show(gid, &show).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  CHECK(BalanceOf(c, "bank-a", 15) == 1000 - (12 - refused));
}

TEST_CASE("clients holding every Watch stream do not lock operators out") {
  const std::string dir = TempDir("watch");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir, {"--config", dir + "/tccd.yaml"}));
  std::ofstream(dir + "/tccd.yaml") << "limits:\n  max_watch_streams: 1\n";
  REQUIRE(c.Start().ok());
  c.KillBank("bank-b");  // the transaction stays TRYING: streams stay open
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 3);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  req.set_try_timeout_ms(60000);
  REQUIRE(c.client().Submit(req).ok());
  auto channel = c.TccdChannel();
  auto clients = v1::Coordinator::NewStub(channel);
  v1::WatchRequest w;
  w.set_gid(req.gid());
  v1::WatchEvent event;
  // A client takes the one stream.
  grpc::ClientContext held;
  auto first = clients->Watch(&held, w);
  REQUIRE(first->Read(&event));
  // Another client is refused...
  grpc::ClientContext second_ctx;
  auto second = clients->Watch(&second_ctx, w);
  CHECK_FALSE(second->Read(&event));
  CHECK(second->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  // ...an operator is not.
  auto admins = v1::Admin::NewStub(channel);
  grpc::ClientContext admin_ctx;
  admin_ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kAliceToken));
  auto admin = admins->Watch(&admin_ctx, w);
  REQUIRE(admin->Read(&event));
  CHECK(event.transaction().gid() == req.gid());
  held.TryCancel();
  admin_ctx.TryCancel();
  (void)first->Finish();
  (void)admin->Finish();
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK(c.CheckFinal({req.gid()}, 30000).ok());
}

TEST_CASE("an OPEN transaction can only be approved for Cancel") {
  const std::string dir = TempDir("open");
  Cleanup cleanup{dir};
  BankCluster c(Options(dir));
  REQUIRE(c.Start().ok());
  Admin alice(c.tccd_port(), kAliceToken);
  v1::BeginRequest begin;
  begin.set_timeout_ms(60000);
  REQUIRE(c.client().Begin(begin).ok());
  REQUIRE(alice.View(begin.gid()).state() == v1::TXN_STATE_OPEN);
  v1::Approval a;
  // No content hash before Commit: a Confirm-side approval could never fit.
  CHECK(alice.Issue(v1::APPROVAL_ACTION_GATE_APPROVE, begin.gid(), &a)
            .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(alice.Issue(v1::APPROVAL_ACTION_FORCE_CONFIRM, begin.gid(), &a)
            .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(alice.Issue(v1::APPROVAL_ACTION_FORCE_CANCEL, begin.gid(), &a).ok());
  REQUIRE(alice.Force(begin.gid(), v1::DECISION_CANCEL, a.approval_id()).ok());
  CHECK(WaitFinal(alice, begin.gid()).state() == v1::TXN_STATE_CANCELLED);
}
