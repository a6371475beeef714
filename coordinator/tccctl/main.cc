// tccctl: the operators' command line over tccd's Admin API (tcc.v1.Admin).
// Flags -> one call (admin_client.h) -> output (format.h) -> exit code. The
// only code of tccctl no unit test reaches; tests/tccctl/ runs the binary.
#include <sys/stat.h>
#include <time.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "tcc/clock/clock.h"
#include "tccctl/admin_client.h"
#include "tccctl/format.h"

namespace {

namespace v1 = tcc::v1;
using tcc::tccctl::AdminClient;
using tcc::tccctl::AdminClientOptions;

constexpr char kDescription[] =
    "tccctl: look at and operate tccd through its Admin API (tcc.v1.Admin).";

constexpr char kFooter[] =
    "Credentials: --token-file (or TCCCTL_TOKEN_FILE) names a file holding "
    "the\n"
    "token, or tccd's `NAME TOKEN` lines (the first non-comment line is "
    "used);\n"
    "it is sent as `authorization: Bearer TOKEN`. TLS: --tls-ca (server CA),\n"
    "plus --tls-cert/--tls-key for mutual TLS; plaintext without --tls-ca.\n"
    "Durations: 500ms, 30s, 5m, 2h, 1d, or sums such as 1h30m.\n"
    "--json prints one JSON object per result (per event for watch), with\n"
    "proto field names; 64-bit numbers are strings and bytes base64.\n\n";

int64_t NowMs() { return tcc::clock::SystemClock::Default().NowUnixMs(); }

// Prints a usage error (not a failed call) and returns exit code 2.
int Usage(const std::string& what) {
  std::fprintf(stderr, "tccctl: %s\n", what.c_str());
  return tcc::tccctl::kExitUsage;
}

// Prints a failed call and returns its exit code.
int Failed(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", tcc::tccctl::FormatError(status).c_str());
  return tcc::tccctl::ExitCodeFor(status.code());
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void Print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void PrintJson(const google::protobuf::Message& m) {
  Print(tcc::tccctl::ToJson(m) + "\n");
}

struct Globals {
  std::string addr = "127.0.0.1:7070";
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  int64_t timeout_ms = 5000;
  bool json = false;
};

// Builds the client from the global flags; a usage error (exit 2) when a
// file cannot be read or the flags do not fit together.
absl::StatusOr<AdminClientOptions> ClientOptions(const Globals& g) {
  AdminClientOptions o;
  o.address = g.addr;
  o.timeout_ms = g.timeout_ms;
  if (g.timeout_ms <= 0) {
    return absl::InvalidArgumentError("--timeout-ms must be positive");
  }
  if (!g.token_file.empty()) {
    auto contents = ReadFile(g.token_file);
    if (!contents.ok()) return contents.status();
    auto token = tcc::tccctl::ParseTokenFile(*contents);
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          g.token_file, ": ", std::string(token.status().message())));
    }
    struct stat st;
    if (stat(g.token_file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      std::fprintf(stderr,
                   "tccctl: warning: %s is readable by group or others "
                   "(chmod 600 it)\n",
                   g.token_file.c_str());
    }
    o.token = *token;
  }
  if (g.tls_cert.empty() != g.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together (mutual TLS)");
  }
  if (!g.tls_cert.empty() && g.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert needs --tls-ca (TLS is off without it)");
  }
  if (!g.tls_server_name.empty() && g.tls_ca.empty()) {
    return absl::InvalidArgumentError("--tls-server-name needs --tls-ca");
  }
  for (auto [path, out] : {std::pair{&g.tls_ca, &o.tls_ca_pem},
                           std::pair{&g.tls_cert, &o.tls_cert_pem},
                           std::pair{&g.tls_key, &o.tls_key_pem}}) {
    if (path->empty()) continue;
    auto pem = ReadFile(*path);
    if (!pem.ok()) return pem.status();
    *out = *pem;
  }
  o.tls_server_name = g.tls_server_name;
  if (std::string w = tcc::tccctl::PlaintextTokenWarning(o); !w.empty()) {
    std::fprintf(stderr, "tccctl: warning: %s\n", w.c_str());
  }
  return o;
}

// A transaction after an action: JSON, or the transaction's view.
int PrintTxnResult(const Globals& g, const google::protobuf::Message& response,
                   const v1::TransactionView& txn, const std::string& what) {
  if (g.json) {
    PrintJson(response);
  } else {
    Print(
        absl::StrCat(what, "\n", tcc::tccctl::FormatTransaction(txn, NowMs())));
  }
  return tcc::tccctl::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "tccctl"};
  app.footer(std::string(kFooter) + tcc::tccctl::ExitCodesHelp());
  app.require_subcommand(1);
  Globals g;
  app.add_option("--addr", g.addr, "tccd's admin address HOST:PORT")
      ->envname("TCCCTL_ADDR")
      ->capture_default_str();
  app.add_option("--token-file", g.token_file,
                 "file with the admin token (or NAME TOKEN lines)")
      ->envname("TCCCTL_TOKEN_FILE");
  app.add_option("--tls-ca", g.tls_ca,
                 "PEM CA of tccd's certificate: TLS on (plaintext without)");
  app.add_option("--tls-cert", g.tls_cert, "PEM client certificate (mTLS)");
  app.add_option("--tls-key", g.tls_key, "PEM client key (mTLS)");
  app.add_option("--tls-server-name", g.tls_server_name,
                 "name tccd's certificate carries, if not the host of --addr");
  CLI::Option* timeout_opt =
      app.add_option("--timeout-ms", g.timeout_ms,
                     "deadline of each call (watch: none unless given)")
          ->capture_default_str();
  app.add_flag("--json", g.json, "print JSON, one object per result");

  auto sub = [&app](const std::string& name, const std::string& help) {
    CLI::App* s = app.add_subcommand(name, help);
    s->fallthrough();
    return s;
  };

  CLI::App* status_cmd =
      sub("status",
          "health, version, WAL size, dedup horizon, in-flight transactions, "
          "stuck branches, recovery progress");

  CLI::App* list_cmd =
      sub("list", "transactions by state, age, participant (paged)");
  std::vector<std::string> list_states;
  std::string list_min_age, list_participant, list_page_token;
  uint32_t list_page_size = 0;
  bool list_all = false;
  list_cmd->add_option("--state", list_states,
                       "only this state (repeatable): open, trying, "
                       "awaiting_approval, confirming, confirmed, cancelling, "
                       "cancelled");
  list_cmd->add_option("--min-age", list_min_age,
                       "only transactions registered at least this long ago");
  list_cmd->add_option("--participant", list_participant,
                       "only transactions with a branch on this participant");
  list_cmd->add_option("--page-size", list_page_size,
                       "at most this many a page (tccd's default 100)");
  list_cmd->add_option("--page-token", list_page_token,
                       "continue from a previous page");
  list_cmd->add_flag("--all", list_all, "follow every page to the end");

  CLI::App* show_cmd =
      sub("show",
          "one transaction: header, branches, record timeline, approvals used");
  std::string gid;
  show_cmd->add_option("gid", gid, "global transaction id")->required();

  CLI::App* watch_cmd =
      sub("watch", "print each change of a transaction until it is final");
  watch_cmd->add_option("gid", gid, "global transaction id")->required();

  CLI::App* retry_cmd =
      sub("retry",
          "re-send now the calls of a transaction that wait for a "
          "backoff timer");
  std::string branch;
  retry_cmd->add_option("gid", gid, "global transaction id")->required();
  retry_cmd->add_option("--branch", branch, "only this branch");

  CLI::App* issue_cmd = sub(
      "issue-approval",
      "issue a one-time approval bound to the transaction's revision and "
      "content hash (as Show gives them now, or --revision/--content-hash)");
  std::string issue_action, issue_ttl, issue_reason, issue_hash;
  uint64_t issue_revision = 0;
  issue_cmd
      ->add_option("action", issue_action,
                   "force-confirm | force-cancel | resolve-branch | "
                   "gate-approve")
      ->required();
  issue_cmd->add_option("gid", gid, "global transaction id")->required();
  issue_cmd->add_option("--branch", branch,
                        "the branch (resolve-branch only, required there)");
  issue_cmd->add_option("--ttl", issue_ttl,
                        "validity (tccd's default when not given)");
  issue_cmd
      ->add_option("--reason", issue_reason, "why (kept in the audit trail)")
      ->required();
  CLI::Option* revision_opt =
      issue_cmd->add_option("--revision", issue_revision,
                            "bind to this revision (with --content-hash)");
  CLI::Option* hash_opt = issue_cmd->add_option(
      "--content-hash", issue_hash,
      "bind to this content hash, 64 hex digits (with --revision)");

  CLI::App* force_cmd = sub("force",
                            "force the decision (consumes a force-confirm or "
                            "force-cancel approval)");
  std::string decision, approval_id;
  force_cmd->add_option("gid", gid, "global transaction id")->required();
  force_cmd->add_option("decision", decision, "confirm | cancel")
      ->required()
      ->check(CLI::IsMember({"confirm", "cancel"}));
  force_cmd->add_option("--approval", approval_id, "the approval's id")
      ->required();

  CLI::App* resolve_cmd =
      sub("resolve",
          "mark a phase-2 branch resolved by hand (consumes a "
          "resolve-branch approval)");
  resolve_cmd->add_option("gid", gid, "global transaction id")->required();
  resolve_cmd->add_option("branch", branch, "the branch id")->required();
  resolve_cmd->add_option("--approval", approval_id, "the approval's id")
      ->required();

  CLI::App* approve_cmd =
      sub("approve",
          "let a transaction waiting in AWAITING_APPROVAL go on to "
          "Confirm (consumes a gate-approve approval)");
  approve_cmd->add_option("gid", gid, "global transaction id")->required();
  approve_cmd->add_option("--approval", approval_id, "the approval's id")
      ->required();

  CLI::App* cluster_cmd =
      sub("cluster",
          "cluster mode: the nodes (lease left, shards, draining), the shards "
          "by owner with their epochs, the shards without an owner");

  CLI::App* drain_cmd =
      sub("drain",
          "cluster mode: move a node's shards to the others, then wait until "
          "it owns none (it can then be stopped)");
  std::string drain_node;
  drain_cmd->add_option("node", drain_node, "the node id")->required();
  bool drain_no_wait = false;
  drain_cmd->add_flag("--no-wait", drain_no_wait,
                      "mark the node and return at once");
  std::string drain_wait = "120s";
  drain_cmd
      ->add_option("--wait", drain_wait,
                   "wait at most this long for its shards to move")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? tcc::tccctl::kExitOk : tcc::tccctl::kExitUsage;
  }

  auto options = ClientOptions(g);
  if (!options.ok()) return Usage(std::string(options.status().message()));
  if (*watch_cmd && timeout_opt->count() > 0) {
    options->watch_timeout_ms = g.timeout_ms;
  }
  AdminClient client(*options);
  const bool json = g.json;

  if (*status_cmd) {
    auto r = client.Status();
    if (!r.ok()) return Failed(r.status());
    if (json) {
      PrintJson(*r);
    } else {
      Print(tcc::tccctl::FormatStatus(*r, NowMs()));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*cluster_cmd) {
    auto r = client.Cluster();
    if (!r.ok()) return Failed(r.status());
    if (json) {
      PrintJson(*r);
    } else {
      Print(tcc::tccctl::FormatCluster(*r));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*drain_cmd) {
    auto wait = tcc::tccctl::ParseDuration(drain_wait);
    if (!wait.ok()) return Usage(std::string(wait.status().message()));
    auto r = client.Drain(drain_node);
    if (!r.ok()) return Failed(r.status());
    if (!json) {
      Print(absl::StrCat("draining ", drain_node, ": ", r->shards_owned(),
                         " shards to move\n"));
    }
    if (drain_no_wait) return tcc::tccctl::kExitOk;
    const int64_t until = NowMs() + *wait;
    uint32_t left = r->shards_owned();
    while (true) {
      auto c = client.Cluster();
      if (!c.ok()) return Failed(c.status());
      left = 0;
      for (const auto& n : c->nodes()) {
        if (n.node_id() == drain_node) left = n.shards_owned();
      }
      if (left == 0) break;
      if (NowMs() >= until) {
        return Failed(absl::DeadlineExceededError(absl::StrCat(
            drain_node, " still owns ", left, " shards after ", drain_wait)));
      }
      struct timespec ts {
        0, 200 * 1000 * 1000
      };
      nanosleep(&ts, nullptr);
    }
    if (json) {
      v1::DrainResponse done;
      done.set_shards_owned(0);
      PrintJson(done);
    } else {
      Print(
          absl::StrCat(drain_node, " owns no shard now: it can be stopped\n"));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*list_cmd) {
    v1::ListRequest request;
    for (const auto& s : list_states) {
      auto state = tcc::tccctl::ParseTxnState(s);
      if (!state.ok()) return Usage(std::string(state.status().message()));
      request.add_states(*state);
    }
    if (!list_min_age.empty()) {
      auto age = tcc::tccctl::ParseDuration(list_min_age);
      if (!age.ok()) return Usage(std::string(age.status().message()));
      request.set_min_age_ms(static_cast<uint64_t>(*age));
    }
    request.set_participant(list_participant);
    request.set_page_size(list_page_size);
    request.set_page_token(list_page_token);
    v1::ListResponse all;
    // --all: follow the pages, bounded so that a server handing out the same
    // token forever cannot keep tccctl looping.
    constexpr int kMaxPages = 100000;
    for (int page = 0; page < kMaxPages; ++page) {
      auto r = client.List(request);
      if (!r.ok()) return Failed(r.status());
      for (auto& t : *r->mutable_transactions()) {
        *all.add_transactions() = std::move(t);
      }
      all.set_next_page_token(r->next_page_token());
      if (!list_all || r->next_page_token().empty() ||
          r->next_page_token() == request.page_token()) {
        break;
      }
      request.set_page_token(r->next_page_token());
    }
    // List answers with summaries (no branches). An unfinished transaction's
    // branches are what an operator needs (how many, which are STUCK), so
    // those rows get the full view, one Show each; finished rows stay
    // summaries.
    for (auto& t : *all.mutable_transactions()) {
      if (tcc::tccctl::IsFinal(t.state()) || t.branches_size() > 0) continue;
      auto shown = client.Show(t.gid());
      if (shown.ok()) t = shown->transaction();
    }
    if (json) {
      PrintJson(all);
    } else {
      std::vector<v1::TransactionView> txns(all.transactions().begin(),
                                            all.transactions().end());
      Print(tcc::tccctl::FormatList(txns, all.next_page_token(), NowMs()));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*show_cmd) {
    auto r = client.Show(gid);
    if (!r.ok()) return Failed(r.status());
    if (json) {
      PrintJson(*r);
    } else {
      Print(tcc::tccctl::FormatShow(*r, NowMs()));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*watch_cmd) {
    v1::TxnState last = v1::TXN_STATE_UNSPECIFIED;
    absl::Status s = client.Watch(gid, [&](const v1::WatchEvent& e) {
      last = e.transaction().state();
      if (json) {
        PrintJson(e);
      } else {
        Print(tcc::tccctl::FormatWatchEvent(e, NowMs()));
      }
      return !tcc::tccctl::IsFinal(last);
    });
    if (!s.ok()) return Failed(s);
    if (!tcc::tccctl::IsFinal(last)) {
      return Failed(absl::UnknownError(
          absl::StrCat("the stream ended while ", gid, " is ",
                       tcc::tccctl::StateName(last))));
    }
    return tcc::tccctl::kExitOk;
  }

  if (*retry_cmd) {
    v1::RetryNowRequest request;
    request.set_gid(gid);
    request.set_branch_id(branch);
    auto r = client.RetryNow(request);
    if (!r.ok()) return Failed(r.status());
    return PrintTxnResult(g, *r, r->transaction(), "retried");
  }

  if (*issue_cmd) {
    auto action = tcc::tccctl::ParseApprovalAction(issue_action);
    if (!action.ok()) return Usage(std::string(action.status().message()));
    if (*action == v1::APPROVAL_ACTION_RESOLVE_BRANCH && branch.empty()) {
      return Usage("resolve-branch needs --branch");
    }
    if (*action != v1::APPROVAL_ACTION_RESOLVE_BRANCH && !branch.empty()) {
      return Usage("--branch is for resolve-branch only");
    }
    v1::IssueApprovalRequest request;
    request.set_action(*action);
    request.set_gid(gid);
    request.set_branch_id(branch);
    request.set_reason(issue_reason);
    if (!issue_ttl.empty()) {
      auto ttl = tcc::tccctl::ParseDuration(issue_ttl);
      if (!ttl.ok()) return Usage(std::string(ttl.status().message()));
      if (*ttl <= 0 || *ttl > static_cast<int64_t>(UINT32_MAX)) {
        return Usage("--ttl must be between 1ms and 49d");
      }
      request.set_ttl_ms(static_cast<uint32_t>(*ttl));
    }
    if ((revision_opt->count() > 0) != (hash_opt->count() > 0)) {
      return Usage("--revision and --content-hash go together");
    }
    if (revision_opt->count() > 0) {
      auto hash = tcc::tccctl::ParseContentHash(issue_hash);
      if (!hash.ok()) return Usage(std::string(hash.status().message()));
      request.set_revision(issue_revision);
      request.set_content_hash(*hash);
    } else {
      // Bind to what the transaction is now.
      auto shown = client.Show(gid);
      if (!shown.ok()) return Failed(shown.status());
      request.set_revision(shown->transaction().revision());
      request.set_content_hash(shown->transaction().content_hash());
    }
    auto r = client.IssueApproval(request);
    if (!r.ok()) return Failed(r.status());
    if (json) {
      PrintJson(*r);
      return tcc::tccctl::kExitOk;
    }
    const v1::Approval& a = r->approval();
    std::string use;
    switch (a.action()) {
      case v1::APPROVAL_ACTION_FORCE_CONFIRM:
        use = absl::StrCat("tccctl force ", a.gid(), " confirm");
        break;
      case v1::APPROVAL_ACTION_FORCE_CANCEL:
        use = absl::StrCat("tccctl force ", a.gid(), " cancel");
        break;
      case v1::APPROVAL_ACTION_RESOLVE_BRANCH:
        use = absl::StrCat("tccctl resolve ", a.gid(), " ", a.branch_id());
        break;
      default:
        use = absl::StrCat("tccctl approve ", a.gid());
        break;
    }
    Print(absl::StrCat(tcc::tccctl::FormatApproval(a, NowMs()), "use it:  ",
                       use, " --approval ", a.approval_id(), "\n"));
    return tcc::tccctl::kExitOk;
  }

  if (*force_cmd) {
    v1::ForceDecisionRequest request;
    request.set_gid(gid);
    request.set_decision(decision == "confirm" ? v1::DECISION_CONFIRM
                                               : v1::DECISION_CANCEL);
    request.set_approval_id(approval_id);
    auto r = client.ForceDecision(request);
    if (!r.ok()) return Failed(r.status());
    return PrintTxnResult(g, *r, r->transaction(),
                          absl::StrCat("forced ", decision));
  }

  if (*resolve_cmd) {
    v1::ResolveBranchRequest request;
    request.set_gid(gid);
    request.set_branch_id(branch);
    request.set_approval_id(approval_id);
    auto r = client.ResolveBranch(request);
    if (!r.ok()) return Failed(r.status());
    return PrintTxnResult(g, *r, r->transaction(),
                          absl::StrCat("resolved branch ", branch));
  }

  if (*approve_cmd) {
    v1::ApproveRequest request;
    request.set_gid(gid);
    request.set_approval_id(approval_id);
    auto r = client.Approve(request);
    if (!r.ok()) return Failed(r.status());
    return PrintTxnResult(g, *r, r->transaction(), "approved");
  }
  return Usage("no command");  // require_subcommand(1) makes this unreachable
}
