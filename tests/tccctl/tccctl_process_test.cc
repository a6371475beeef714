// The real `tccctl` binary as an operator runs it, against a real tccd and
// two tcc-bank participants (the harness's BankCluster) on 127.0.0.1, tccd
// holding an admin token file: every command, its --json output parsed back
// and compared with what Coordinator.Get says, the exit codes, and the
// one-time approval flows end to end (gate approve, force cancel, resolve a
// phase-2 branch).
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "bank_cluster.h"
#include "fake_admin.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "tcc/v1/admin.pb.h"
#include "test_dirs.h"

namespace {

namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using Clock = std::chrono::steady_clock;
using tcc::harness::ReadFile;

void WriteFile(const std::string& path, const std::string& contents,
               mode_t mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

std::string RandomToken() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%08x", rd());
    out += buf;
  }
  return out;
}

struct CtlResult {
  int exit_code = -1;  // -1: killed (did not end in time)
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const CtlResult& r) {
  return os << "exit " << r.exit_code << "\nstdout:\n"
            << r.out << "\nstderr:\n"
            << r.err;
}

// One tccctl run: stdout and stderr to files, its environment ours without
// TCCCTL_* plus `env`.
class Ctl {
 public:
  Ctl(const std::string& dir, const std::vector<std::string>& args,
      const std::map<std::string, std::string>& env = {}) {
    static int seq = 0;
    const std::string base = dir + "/ctl-" + std::to_string(++seq);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    std::vector<std::string> argv = {TCC_TCCCTL_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("TCCCTL_", 0) != 0) envs.push_back(*e);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    const int out_fd =
        open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err_fd =
        open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(out_fd >= 0);
    REQUIRE(err_fd >= 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(out_fd, 1);
      dup2(err_fd, 2);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    close(out_fd);
    close(err_fd);
  }
  ~Ctl() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  std::string Stdout() const { return ReadFile(out_path_); }

  // Waits up to `timeout_ms` for it to end (then kills it: exit_code -1).
  CtlResult Wait(int64_t timeout_ms = 20000) {
    CtlResult r;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        break;
      }
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    r.out = ReadFile(out_path_);
    r.err = ReadFile(err_path_);
    return r;
  }

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
};

template <typename M>
M ParseJson(const std::string& text) {
  INFO(text);
  M m;
  REQUIRE(google::protobuf::util::JsonStringToMessage(text, &m).ok());
  return m;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A cluster with an admin token file (mode 0600, `alice TOKEN`) and a
// client-side token file for tccctl; every tccctl run goes to its listener.
// Removes a temp dir when it goes, also when a REQUIRE in a constructor
// that holds it throws.
struct OwnedDir {
  std::string path;
  tcc::harness::Cleanup cleanup;
  explicit OwnedDir(const std::string& name)
      : path(tcc::harness::MakeTempDir("tccctl-it-" + name)), cleanup{path} {}
};

struct Fixture {
  OwnedDir owned;
  std::string dir;
  std::string token_file;
  std::unique_ptr<BankCluster> cluster;

  explicit Fixture(const std::string& name, const std::string& config_yaml = "")
      : owned(name), dir(owned.path) {
    const std::string token = RandomToken();
    WriteFile(dir + "/admin-tokens", "# tccd admins\nalice " + token + "\n",
              0600);
    token_file = dir + "/alice.token";
    WriteFile(token_file, "alice " + token + "\n", 0600);
    ClusterOptions o;
    o.root_dir = dir;
    o.tccd_bin = TCC_TCCD_BIN;
    o.bank_bin = TCC_BANK_BIN;
    o.accounts = 20;
    o.initial_balance = 1000;
    o.tccd_args = {"--admin-token-file", dir + "/admin-tokens"};
    if (!config_yaml.empty()) {
      WriteFile(dir + "/tccd.yaml", config_yaml, 0600);
      o.tccd_args.push_back("--config");
      o.tccd_args.push_back(dir + "/tccd.yaml");
    }
    cluster = std::make_unique<BankCluster>(o);
    const absl::Status started = cluster->Start();
    INFO(started.ToString());
    REQUIRE(started.ok());
  }
  ~Fixture() { cluster.reset(); }  // processes stop before the dir goes

  std::string Addr() const {
    return "127.0.0.1:" + std::to_string(cluster->tccd_port());
  }

  // tccctl with --addr and --token-file, then `args`.
  std::unique_ptr<Ctl> Start(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--addr", Addr(), "--token-file",
                                    token_file};
    all.insert(all.end(), args.begin(), args.end());
    return std::make_unique<Ctl>(dir, all);
  }
  CtlResult Run(const std::vector<std::string>& args) {
    return Start(args)->Wait();
  }
  // As Run, and requires exit 0.
  std::string Ok(const std::vector<std::string>& args) {
    CtlResult r = Run(args);
    INFO(r);
    REQUIRE(r.exit_code == 0);
    return r.out;
  }

  v1::TransactionView Get(const std::string& gid) {
    auto view = cluster->client().Get(gid);
    INFO(view.status().ToString());
    REQUIRE(view.ok());
    return *view;
  }

  // Polls Get until `pred` holds (up to `timeout_ms`).
  v1::TransactionView WaitFor(
      const std::string& gid,
      const std::function<bool(const v1::TransactionView&)>& pred,
      int64_t timeout_ms = 15000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      v1::TransactionView view = Get(gid);
      if (pred(view)) return view;
      INFO(view.DebugString());
      REQUIRE(Clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Submits a gated transfer (answered once registered) and waits until it
  // stands in AWAITING_APPROVAL.
  std::string SubmitGated(uint32_t from, uint32_t to, int64_t amount) {
    v1::SubmitRequest req =
        cluster->Transfer("bank-a", from, "bank-b", to, amount);
    req.set_approval_gate(true);
    req.set_approval_timeout_ms(120000);
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    auto r = cluster->client().Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    WaitFor(req.gid(), [](const v1::TransactionView& v) {
      return v.state() == v1::TXN_STATE_AWAITING_APPROVAL;
    });
    return req.gid();
  }

  // `issue-approval ... --json`, parsed; requires exit 0.
  v1::Approval Issue(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--json", "issue-approval"};
    all.insert(all.end(), args.begin(), args.end());
    return ParseJson<v1::IssueApprovalResponse>(Ok(all)).approval();
  }
};

// "" when equal, else what differs.
std::string ViewDiff(const v1::TransactionView& a,
                     const v1::TransactionView& b) {
  google::protobuf::util::MessageDifferencer d;
  std::string report;
  d.ReportDifferencesToString(&report);
  return d.Compare(a, b) ? "" : report;
}

// List answers with summaries for finished transactions: the fields a
// summary carries must be Get's.
bool SameSummary(const v1::TransactionView& summary,
                 const v1::TransactionView& full) {
  return summary.gid() == full.gid() && summary.state() == full.state() &&
         summary.decision() == full.decision() &&
         summary.content_hash() == full.content_hash() &&
         summary.revision() == full.revision() &&
         summary.created_at_ms() == full.created_at_ms() &&
         summary.registered_at_ms() == full.registered_at_ms() &&
         summary.finished_at_ms() == full.finished_at_ms();
}

}  // namespace

TEST_CASE("tccctl status, list, show, watch, retry and their exit codes") {
  Fixture f("reads");
  auto& c = *f.cluster;
  auto ok_req = c.Transfer("bank-a", 1, "bank-b", 2, 25);
  REQUIRE(c.client().Submit(ok_req).ok());
  auto refused_req = c.Transfer("bank-a", 3, "bank-b", 4, 5000);  // too much
  REQUIRE(c.client().Submit(refused_req).ok());
  const v1::TransactionView confirmed = f.Get(ok_req.gid());
  const v1::TransactionView cancelled = f.Get(refused_req.gid());
  REQUIRE(confirmed.state() == v1::TXN_STATE_CONFIRMED);
  REQUIRE(cancelled.state() == v1::TXN_STATE_CANCELLED);

  // status
  const std::string status_text = f.Ok({"status"});
  CHECK(Contains(status_text, "health             serving\n"));
  CHECK(Contains(status_text, "in flight          0\n"));
  auto status = ParseJson<v1::StatusResponse>(f.Ok({"status", "--json"}));
  CHECK(status.health() == "serving");
  CHECK(!status.version().empty());
  CHECK(status.wal_bytes() > 0);
  CHECK(status.stuck_branches() == 0);

  // The address and token file from the environment.
  {
    Ctl env_ctl(
        f.dir, {"--json", "status"},
        {{"TCCCTL_ADDR", f.Addr()}, {"TCCCTL_TOKEN_FILE", f.token_file}});
    CtlResult r = env_ctl.Wait();
    INFO(r);
    CHECK(r.exit_code == 0);
    CHECK(ParseJson<v1::StatusResponse>(r.out).health() == "serving");
  }

  // list: both, then by state, then paged.
  auto all = ParseJson<v1::ListResponse>(f.Ok({"--json", "list"}));
  REQUIRE(all.transactions_size() == 2);
  for (const auto& t : all.transactions()) {
    INFO(t.DebugString());
    CHECK(SameSummary(t, f.Get(t.gid())));
  }
  auto only_confirmed = ParseJson<v1::ListResponse>(
      f.Ok({"list", "--state", "confirmed", "--json"}));
  REQUIRE(only_confirmed.transactions_size() == 1);
  CHECK(only_confirmed.transactions(0).gid() == ok_req.gid());
  auto both_states = ParseJson<v1::ListResponse>(
      f.Ok({"list", "--state", "confirmed", "--state", "CANCELLED", "--json"}));
  CHECK(both_states.transactions_size() == 2);
  auto old_only =
      ParseJson<v1::ListResponse>(f.Ok({"list", "--min-age", "1h", "--json"}));
  CHECK(old_only.transactions_size() == 0);
  auto by_participant = ParseJson<v1::ListResponse>(
      f.Ok({"list", "--participant", "bank-b", "--json"}));
  CHECK(by_participant.transactions_size() == 2);
  auto page =
      ParseJson<v1::ListResponse>(f.Ok({"list", "--page-size", "1", "--json"}));
  CHECK(page.transactions_size() == 1);
  CHECK(!page.next_page_token().empty());
  auto rest = ParseJson<v1::ListResponse>(
      f.Ok({"list", "--page-size", "1", "--page-token", page.next_page_token(),
            "--json"}));
  REQUIRE(rest.transactions_size() == 1);
  CHECK(rest.transactions(0).gid() != page.transactions(0).gid());
  auto followed = ParseJson<v1::ListResponse>(
      f.Ok({"list", "--page-size", "1", "--all", "--json"}));
  CHECK(followed.transactions_size() == 2);
  CHECK(followed.next_page_token().empty());
  const std::string list_text = f.Ok({"list"});
  INFO(list_text);
  CHECK(Contains(list_text, "GID"));
  CHECK(Contains(list_text, ok_req.gid()));
  CHECK(Contains(list_text, "CONFIRMED"));
  CHECK(Contains(list_text, "2 transactions"));

  // show: the same view as Get, the timeline from registration to finish.
  auto show =
      ParseJson<v1::ShowResponse>(f.Ok({"show", ok_req.gid(), "--json"}));
  CHECK(ViewDiff(show.transaction(), confirmed) == "");
  REQUIRE(show.timeline_size() >= 2);
  CHECK(show.timeline(0).kind() == "Registered");
  CHECK(show.timeline(show.timeline_size() - 1).kind() == "Finished");
  CHECK(show.approvals_size() == 0);
  const std::string show_text = f.Ok({"show", refused_req.gid()});
  INFO(show_text);
  CHECK(Contains(show_text, "state          CANCELLED\n"));
  CHECK(Contains(show_text, "REJECTED"));
  CHECK(Contains(show_text, "  debit: bank-a debit"));
  CHECK(Contains(show_text, "  credit: bank-b credit"));
  CHECK(Contains(show_text, "timeline ("));

  // watch of a final transaction: one event, exit 0.
  CtlResult watched = f.Run({"watch", ok_req.gid(), "--json"});
  INFO(watched);
  CHECK(watched.exit_code == 0);
  const auto events = Lines(watched.out);
  REQUIRE(events.size() == 1);
  CHECK(ViewDiff(ParseJson<v1::WatchEvent>(events[0]).transaction(),
                 confirmed) == "");

  // retry of a finished transaction sends nothing and says where it stands.
  auto retried =
      ParseJson<v1::RetryNowResponse>(f.Ok({"retry", ok_req.gid(), "--json"}));
  CHECK(retried.transaction().gid() == ok_req.gid());
  CHECK(retried.transaction().state() == v1::TXN_STATE_CONFIRMED);

  // Exit codes.
  CHECK(f.Run({"show", "g-unknown"}).exit_code == 5);
  CHECK(f.Run({"watch", "g-unknown"}).exit_code == 5);
  CHECK(f.Run({"retry", "g-unknown"}).exit_code == 5);
  {
    CtlResult r = f.Run({"show", "g-unknown"});
    CHECK(Contains(r.err, "NOT_FOUND"));
    CHECK(r.out.empty());
  }
  {  // no token
    Ctl ctl(f.dir, {"--addr", f.Addr(), "status"});
    CtlResult r = ctl.Wait();
    INFO(r);
    CHECK(r.exit_code == 4);
    CHECK((Contains(r.err, "UNAUTHENTICATED") ||
           Contains(r.err, "PERMISSION_DENIED")));
  }
  {  // a wrong token
    WriteFile(f.dir + "/wrong.token", "alice not-the-token\n", 0600);
    Ctl ctl(f.dir, {"--addr", f.Addr(), "--token-file", f.dir + "/wrong.token",
                    "show", ok_req.gid()});
    CtlResult r = ctl.Wait();
    INFO(r);
    CHECK(r.exit_code == 4);
  }
  {  // nobody listening
    const int port = tcc::harness::FreeLoopbackPort();
    Ctl ctl(f.dir, {"--addr", "127.0.0.1:" + std::to_string(port),
                    "--token-file", f.token_file, "status"});
    CtlResult r = ctl.Wait();
    INFO(r);
    CHECK(r.exit_code == 3);
    CHECK(Contains(r.err, "UNAVAILABLE"));
  }
  {  // tccd paused: the deadline passes
    c.tccd()->Signal(SIGSTOP);
    CtlResult r = f.Run({"--timeout-ms", "300", "status"});
    c.tccd()->Signal(SIGCONT);
    INFO(r);
    CHECK(r.exit_code == 3);
    CHECK(Contains(r.err, "DEADLINE_EXCEEDED"));
  }
  // Usage errors.
  CHECK(f.Run({"show"}).exit_code == 2);
  CHECK(f.Run({"frobnicate"}).exit_code == 2);
  CHECK(f.Run({"list", "--min-age", "5x"}).exit_code == 2);
  CHECK(f.Run({"list", "--state", "done"}).exit_code == 2);
  CHECK(f.Run({"issue-approval", "bogus", ok_req.gid(), "--reason", "r"})
            .exit_code == 2);
  CHECK(f.Run({"issue-approval", "resolve-branch", ok_req.gid(), "--reason",
               "no branch given"})
            .exit_code == 2);
  CHECK(f.Run({"force", ok_req.gid(), "maybe", "--approval", "x"}).exit_code ==
        2);
  {
    Ctl ctl(f.dir,
            {"--addr", f.Addr(), "--token-file", f.dir + "/missing", "status"});
    CHECK(ctl.Wait().exit_code == 2);
  }
  CHECK(f.Run({"--help"}).exit_code == 0);
  CHECK_OK(c.CheckFinal({ok_req.gid(), refused_req.gid()}, 10000));
}

TEST_CASE("tccctl approval gate: issue, approve once, watch it confirm") {
  Fixture f("gate");
  auto& c = *f.cluster;
  const std::string gid = f.SubmitGated(1, 2, 30);
  const v1::TransactionView waiting = f.Get(gid);

  // A watcher started now sees AWAITING_APPROVAL first, CONFIRMED last.
  auto watch = f.Start({"--timeout-ms", "20000", "watch", gid, "--json"});
  {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Lines(watch->Stdout()).empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  const v1::Approval a = f.Issue(
      {"gate-approve", gid, "--reason", "ticket 1: reviewed", "--ttl", "5m"});
  CHECK(!a.approval_id().empty());
  CHECK(a.action() == v1::APPROVAL_ACTION_GATE_APPROVE);
  CHECK(a.gid() == gid);
  CHECK(a.revision() == waiting.revision());
  CHECK(a.content_hash() == waiting.content_hash());
  CHECK(a.issued_by() == "alice");
  CHECK(a.reason() == "ticket 1: reviewed");
  CHECK(a.used_at_ms() == 0);
  CHECK(a.expires_at_ms() - a.issued_at_ms() == 300000);

  auto approved = ParseJson<v1::ApproveResponse>(
      f.Ok({"approve", gid, "--approval", a.approval_id(), "--json"}));
  CHECK(approved.transaction().decision() == v1::DECISION_CONFIRM);
  // Used once: the second use is refused.
  CtlResult again = f.Run({"approve", gid, "--approval", a.approval_id()});
  INFO(again);
  CHECK(again.exit_code == 6);

  CHECK_OK(c.CheckFinal({gid}, 15000));
  CtlResult watched = watch->Wait();
  INFO(watched);
  CHECK(watched.exit_code == 0);
  const auto events = Lines(watched.out);
  REQUIRE(events.size() >= 2);
  CHECK(ParseJson<v1::WatchEvent>(events.front()).transaction().state() ==
        v1::TXN_STATE_AWAITING_APPROVAL);
  // The last event is the final state. (Not compared with Get field by
  // field: tccd's last Watch view can still show a branch's Confirm UNKNOWN
  // and an earlier finished_at than Get a moment later; reported.)
  const v1::TransactionView last =
      ParseJson<v1::WatchEvent>(events.back()).transaction();
  CHECK(last.gid() == gid);
  CHECK(last.state() == v1::TXN_STATE_CONFIRMED);
  CHECK(last.decision() == v1::DECISION_CONFIRM);
  CHECK(f.Get(gid).state() == v1::TXN_STATE_CONFIRMED);

  // The audit trail: the approval, used, in show; the record that used it.
  auto show = ParseJson<v1::ShowResponse>(f.Ok({"--json", "show", gid}));
  REQUIRE(show.approvals_size() == 1);
  CHECK(show.approvals(0).approval_id() == a.approval_id());
  CHECK(show.approvals(0).issued_by() == "alice");
  CHECK(show.approvals(0).reason() == "ticket 1: reviewed");
  CHECK(show.approvals(0).used_at_ms() > 0);
  bool recorded = false;
  for (const auto& r : show.timeline()) {
    recorded = recorded || r.approval_id() == a.approval_id();
  }
  CHECK(recorded);
  const std::string text = f.Ok({"show", gid});
  INFO(text);
  CHECK(Contains(text, "approvals used (1)"));
  CHECK(Contains(text, a.approval_id() + ": GATE_APPROVE, issued by alice"));
  CHECK(Contains(text, "reason: ticket 1: reviewed"));

  // The human form of issue-approval says how to use it.
  const std::string gid2 = f.SubmitGated(3, 4, 40);
  const std::string issued =
      f.Ok({"issue-approval", "gate-approve", gid2, "--reason", "ticket 2"});
  INFO(issued);
  CHECK(Contains(issued, "action        GATE_APPROVE\n"));
  CHECK(Contains(issued, "issued by     alice\n"));
  CHECK(Contains(issued, "use it:  tccctl approve " + gid2 + " --approval "));
}

TEST_CASE("tccctl refuses expired and mismatched approvals; force cancel") {
  Fixture f("force");
  auto& c = *f.cluster;
  const std::string gid = f.SubmitGated(5, 6, 50);
  const v1::TransactionView waiting = f.Get(gid);

  // Expired.
  const v1::Approval brief =
      f.Issue({"gate-approve", gid, "--reason", "too slow", "--ttl", "1ms"});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CtlResult expired =
      f.Run({"approve", gid, "--approval", brief.approval_id()});
  INFO(expired);
  CHECK(expired.exit_code == 6);

  // Bound to another revision than the transaction's: refused when issued or
  // when used, and nothing changes.
  CtlResult stale_issue =
      f.Run({"--json", "issue-approval", "force-cancel", gid, "--reason",
             "saw another revision", "--revision",
             std::to_string(waiting.revision() + 1), "--content-hash",
             std::string(64, '0')});
  INFO(stale_issue);
  if (stale_issue.exit_code == 0) {
    const auto stale =
        ParseJson<v1::IssueApprovalResponse>(stale_issue.out).approval();
    CtlResult used =
        f.Run({"force", gid, "cancel", "--approval", stale.approval_id()});
    INFO(used);
    CHECK(used.exit_code == 6);
  } else {
    CHECK(stale_issue.exit_code == 6);
  }

  // Another action than the approval allows.
  const v1::Approval cancel_ok =
      f.Issue({"force-cancel", gid, "--reason", "customer withdrew"});
  CtlResult wrong_action =
      f.Run({"force", gid, "confirm", "--approval", cancel_ok.approval_id()});
  INFO(wrong_action);
  CHECK(wrong_action.exit_code == 6);
  CtlResult wrong_use =
      f.Run({"approve", gid, "--approval", cancel_ok.approval_id()});
  INFO(wrong_use);
  CHECK(wrong_use.exit_code == 6);
  CHECK(f.Get(gid).state() == v1::TXN_STATE_AWAITING_APPROVAL);

  // Bound explicitly to what the operator saw: accepted.
  const v1::Approval pinned =
      f.Issue({"force-cancel", gid, "--reason", "as seen", "--revision",
               std::to_string(waiting.revision()), "--content-hash", [&] {
                 static constexpr char kDigits[] = "0123456789abcdef";
                 std::string hex;
                 for (unsigned char ch : waiting.content_hash()) {
                   hex.push_back(kDigits[ch >> 4]);
                   hex.push_back(kDigits[ch & 15]);
                 }
                 return hex;
               }()});
  CHECK(pinned.revision() == waiting.revision());
  CHECK(pinned.content_hash() == waiting.content_hash());

  auto forced = ParseJson<v1::ForceDecisionResponse>(
      f.Ok({"force", gid, "cancel", "--approval", cancel_ok.approval_id(),
            "--json"}));
  CHECK(forced.transaction().decision() == v1::DECISION_CANCEL);
  // One decision: a second force (with the other approval) is refused.
  CtlResult twice =
      f.Run({"force", gid, "cancel", "--approval", pinned.approval_id()});
  INFO(twice);
  CHECK(twice.exit_code == 6);
  CHECK_OK(c.CheckFinal({gid}, 15000));
  CHECK(f.Get(gid).state() == v1::TXN_STATE_CANCELLED);

  auto show = ParseJson<v1::ShowResponse>(f.Ok({"--json", "show", gid}));
  REQUIRE(show.approvals_size() == 1);
  CHECK(show.approvals(0).approval_id() == cancel_ok.approval_id());
  CHECK(show.approvals(0).action() == v1::APPROVAL_ACTION_FORCE_CANCEL);
  CHECK(show.approvals(0).reason() == "customer withdrew");
}

TEST_CASE("tccctl resolve: a phase-2 branch on a dead bank, resolved by hand") {
  // Phase-2 failures flag a branch STUCK after 1 s here (10 min by default).
  Fixture f("resolve",
            "retry:\n  base_ms: 20\n  cap_ms: 200\n  stuck_after_ms: 1000\n"
            "  stuck_retry_ms: 200\n");
  auto& c = *f.cluster;
  const std::string gid = f.SubmitGated(7, 8, 60);
  c.KillBank("bank-b");  // the credit branch's Confirm cannot get through
  const v1::Approval gate =
      f.Issue({"gate-approve", gid, "--reason", "go ahead"});
  f.Ok({"approve", gid, "--approval", gate.approval_id()});
  const v1::TransactionView stuck =
      f.WaitFor(gid, [](const v1::TransactionView& v) {
        for (const auto& b : v.branches()) {
          if (b.branch_id() == "credit" && b.stuck()) return true;
        }
        return false;
      });
  CHECK(stuck.state() == v1::TXN_STATE_CONFIRMING);

  // Operators see it.
  auto status = ParseJson<v1::StatusResponse>(f.Ok({"--json", "status"}));
  CHECK(status.stuck_branches() >= 1);
  const std::string list_text = f.Ok({"list", "--state", "confirming"});
  INFO(list_text);
  CHECK(Contains(list_text, gid));
  CHECK(Contains(list_text, "STUCK(1)"));
  auto listed = ParseJson<v1::ListResponse>(
      f.Ok({"--json", "list", "--state", "confirming"}));
  REQUIRE(listed.transactions_size() == 1);
  REQUIRE(listed.transactions(0).branches_size() == 2);
  CHECK(listed.transactions(0).branches(0).branch_id() == "credit");
  CHECK(listed.transactions(0).branches(0).stuck());
  CHECK(Contains(f.Ok({"show", gid}), "  credit: bank-b credit, payload"));
  f.Ok({"retry", gid, "--branch", "credit"});

  // The gate approval (used) cannot resolve; a resolve approval for another
  // branch cannot either.
  CHECK(f.Run({"resolve", gid, "credit", "--approval", gate.approval_id()})
            .exit_code == 6);
  const v1::Approval other = f.Issue(
      {"resolve-branch", gid, "--branch", "debit", "--reason", "wrong branch"});
  CHECK(other.branch_id() == "debit");
  CHECK(f.Run({"resolve", gid, "credit", "--approval", other.approval_id()})
            .exit_code == 6);

  const v1::Approval fix = f.Issue({"resolve-branch", gid, "--branch", "credit",
                                    "--reason", "credited by hand, ticket 9"});
  auto resolved = ParseJson<v1::ResolveBranchResponse>(f.Ok(
      {"--json", "resolve", gid, "credit", "--approval", fix.approval_id()}));
  CHECK(resolved.transaction().gid() == gid);
  const v1::TransactionView done =
      f.WaitFor(gid, [](const v1::TransactionView& v) {
        return v.state() == v1::TXN_STATE_CONFIRMED;
      });
  CHECK(done.finished_at_ms() > 0);

  auto show = ParseJson<v1::ShowResponse>(f.Ok({"--json", "show", gid}));
  CHECK(show.approvals_size() == 2);
  bool resolved_record = false;
  for (const auto& r : show.timeline()) {
    if (r.kind() == "BranchResolved") {
      resolved_record = true;
      CHECK(r.branch_id() == "credit");
      CHECK(r.approval_id() == fix.approval_id());
    }
  }
  CHECK(resolved_record);
}

TEST_CASE("tccctl --tls-ca/--tls-cert/--tls-key reach an mTLS admin listener") {
  // A fake Admin with mutual TLS stands in for tccd's admin listener: what is
  // tested here is how tccctl's flags become the TLS handshake.
  tcc::tccctl::testing::Pki pki;
  tcc::tccctl::testing::FakeAdminServer server(&pki, /*require_client=*/true);
  OwnedDir owned("tls");
  const std::string& dir = owned.path;
  const std::string addr = "127.0.0.1:" + std::to_string(server.port);
  const std::string p = pki.dir + "/";
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--addr", addr});
    Ctl ctl(dir, args);
    return ctl.Wait();
  };
  CtlResult ok = run({"--tls-ca", p + "ca.pem", "--tls-cert", p + "alice.pem",
                      "--tls-key", p + "alice.key", "--json", "status"});
  INFO(ok);
  CHECK(ok.exit_code == 0);
  CHECK(ParseJson<v1::StatusResponse>(ok.out).health() == "serving");
  CHECK(server.service.last_peer_cn() == "alice");
  CHECK(
      run({"--tls-ca", p + "ca.pem", "--tls-cert", p + "alice.pem", "--tls-key",
           p + "alice.key", "--tls-server-name", "localhost", "status"})
          .exit_code == 0);
  // No client certificate, or plaintext: the handshake fails (unreachable).
  CHECK(run({"--tls-ca", p + "ca.pem", "status"}).exit_code == 3);
  CHECK(run({"--timeout-ms", "1000", "status"}).exit_code == 3);
  // Flags that do not fit together, or files that are not there: usage.
  CHECK(run({"--tls-ca", p + "ca.pem", "--tls-cert", p + "alice.pem", "status"})
            .exit_code == 2);
  CHECK(run({"--tls-cert", p + "alice.pem", "--tls-key", p + "alice.key",
             "status"})
            .exit_code == 2);
  CHECK(run({"--tls-ca", p + "missing.pem", "status"}).exit_code == 2);
}

TEST_CASE(
    "tccctl over tccd's mTLS admin listener: the certificate is the "
    "credential") {
  OwnedDir owned("tls-admin");
  ClusterOptions o;
  o.root_dir = owned.path;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  o.tls.enabled = true;
  o.tls.listener_mode = "tls";
  o.tls.admin_listener = true;
  o.tls.admin_client_identities = {"alice"};
  BankCluster c(o);
  const absl::Status started = c.Start();
  INFO(started.ToString());
  REQUIRE(started.ok());
  REQUIRE(c.pki() != nullptr);
  const tcc::harness::TestPki& pki = *c.pki();
  auto alice = pki.IssueClientCert("alice");
  auto mallory = pki.IssueClientCert("mallory");
  REQUIRE(alice.ok());
  REQUIRE(mallory.ok());
  auto port = c.tccd()->WaitForLine("admin port ([0-9]+)", 5000);
  REQUIRE(port.ok());
  const std::string addr = "127.0.0.1:" + *port;
  auto req = c.Transfer("bank-a", 1, "bank-b", 2, 15);
  REQUIRE(c.client().Submit(req).ok());

  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--addr", addr, "--tls-ca", pki.ca_file()});
    Ctl ctl(owned.path, args);
    return ctl.Wait();
  };
  CtlResult shown = run({"--tls-cert", alice->cert_file, "--tls-key",
                         alice->key_file, "--json", "show", req.gid()});
  INFO(shown);
  REQUIRE(shown.exit_code == 0);
  CHECK(ParseJson<v1::ShowResponse>(shown.out).transaction().state() ==
        v1::TXN_STATE_CONFIRMED);
  CHECK(run({"--tls-cert", alice->cert_file, "--tls-key", alice->key_file,
             "--tls-server-name", "localhost", "status"})
            .exit_code == 0);
  // Same CA, not listed: refused by admin authentication.
  CtlResult refused = run({"--tls-cert", mallory->cert_file, "--tls-key",
                           mallory->key_file, "status"});
  INFO(refused);
  CHECK(refused.exit_code == 4);
  CHECK(Contains(refused.err, "PERMISSION_DENIED"));
  // No certificate: the handshake fails.
  CHECK(run({"status"}).exit_code == 3);
}
