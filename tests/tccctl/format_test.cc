// tccctl's formatting and argument parsing (coordinator/tccctl/format.h) and
// its token file reading (admin_client.h): what an operator reads and types.
#include "tccctl/format.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "tccctl/admin_client.h"

namespace {

namespace v1 = tcc::v1;
using namespace tcc::tccctl;  // NOLINT: the unit under test

constexpr int64_t kNow = 1764516223123;  // 2025-11-30T15:23:43.123Z

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

v1::TransactionView SampleTxn() {
  v1::TransactionView t;
  t.set_gid("g-stuck-1");
  t.set_state(v1::TXN_STATE_CONFIRMING);
  t.set_decision(v1::DECISION_CONFIRM);
  t.set_decision_reason("every Try EXECUTED");
  t.set_content_hash(std::string(32, '\xab'));
  t.set_revision(7);
  t.set_created_at_ms(kNow - 65000);
  t.set_registered_at_ms(kNow - 64000);
  t.set_decided_at_ms(kNow - 63000);
  t.set_owner_epoch(3);
  auto* debit = t.add_branches();
  debit->set_branch_id("debit");
  debit->set_participant("bank-a");
  debit->set_action("debit");
  debit->set_payload_size(5);
  debit->mutable_try_phase()->set_state(v1::PHASE_STATE_SUCCEEDED);
  debit->mutable_try_phase()->set_outcome(v1::OUTCOME_EXECUTED);
  debit->mutable_try_phase()->set_attempts(1);
  debit->mutable_second_phase()->set_state(v1::PHASE_STATE_SUCCEEDED);
  debit->mutable_second_phase()->set_outcome(v1::OUTCOME_EXECUTED);
  debit->mutable_second_phase()->set_attempts(1);
  auto* credit = t.add_branches();
  credit->set_branch_id("credit");
  credit->set_participant("bank-b");
  credit->set_action("credit");
  credit->mutable_try_phase()->set_state(v1::PHASE_STATE_SUCCEEDED);
  credit->mutable_try_phase()->set_outcome(v1::OUTCOME_EXECUTED);
  credit->mutable_second_phase()->set_state(v1::PHASE_STATE_UNKNOWN);
  credit->mutable_second_phase()->set_attempts(12);
  credit->mutable_second_phase()->set_last_error("UNAVAILABLE: connect failed");
  credit->set_stuck(true);
  return t;
}

}  // namespace

TEST_CASE("ParseDuration takes ms, s, m, h, d and sums of them") {
  const std::vector<std::pair<std::string, int64_t>> good = {
      {"0ms", 0},         {"500ms", 500},    {"30s", 30000},
      {"5m", 300000},     {"2h", 7200000},   {"1d", 86400000},
      {"1h30m", 5400000}, {"1m500ms", 60500}};
  for (const auto& [text, ms] : good) {
    INFO(text);
    auto d = ParseDuration(text);
    REQUIRE(d.ok());
    CHECK(*d == ms);
  }
  for (const std::string bad :
       {"", "5", "-5s", "5x", "ms", "1.5s", "5 s", "s5",
        "99999999999999999999s", "9223372036854775807d"}) {
    INFO(bad);
    auto d = ParseDuration(bad);
    CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("exit codes follow the status code") {
  using C = absl::StatusCode;
  const std::vector<std::pair<C, int>> table = {{C::kOk, 0},
                                                {C::kUnknown, 1},
                                                {C::kInternal, 1},
                                                {C::kInvalidArgument, 1},
                                                {C::kUnimplemented, 1},
                                                {C::kAlreadyExists, 1},
                                                {C::kResourceExhausted, 1},
                                                {C::kUnavailable, 3},
                                                {C::kDeadlineExceeded, 3},
                                                {C::kUnauthenticated, 4},
                                                {C::kPermissionDenied, 4},
                                                {C::kNotFound, 5},
                                                {C::kFailedPrecondition, 6},
                                                {C::kAborted, 6}};
  for (const auto& [code, exit] : table) {
    INFO(absl::StatusCodeToString(code));
    CHECK(ExitCodeFor(code) == exit);
  }
  // The help text names every code it can return.
  for (int code = 0; code <= 6; ++code) {
    CHECK(Contains(ExitCodesHelp(), "  " + std::to_string(code) + "  "));
  }
  CHECK(FormatError(absl::NotFoundError("no gid g-1")) ==
        "tccctl: NOT_FOUND: no gid g-1");
}

TEST_CASE("times are ISO-8601 UTC with milliseconds; ages are short") {
  CHECK(FormatTime(0) == "-");
  CHECK(FormatTime(kNow) == "2025-11-30T15:23:43.123Z");
  CHECK(FormatTime(1) == "1970-01-01T00:00:00.001Z");
  CHECK(FormatTime(-1) == "1969-12-31T23:59:59.999Z");
  const std::vector<std::pair<int64_t, std::string>> ages = {
      {-5, "0ms"},         {0, "0ms"},          {999, "999ms"},
      {1000, "1.0s"},      {12345, "12.3s"},    {60000, "1m00s"},
      {312000, "5m12s"},   {3600000, "1h00m"},  {11100000, "3h05m"},
      {86400000, "1d00h"}, {183600000, "2d03h"}};
  for (const auto& [ms, text] : ages) {
    INFO(ms);
    CHECK(FormatAge(ms) == text);
  }
  CHECK(FormatTimeWithAge(kNow - 1500, kNow) ==
        "2025-11-30T15:23:41.623Z (1.5s ago)");
  CHECK(FormatTimeWithAge(kNow + 60000, kNow) ==
        "2025-11-30T15:24:43.123Z (in 1m00s)");
  CHECK(FormatTimeWithAge(0, kNow) == "-");
}

TEST_CASE("states, approval actions and content hashes parse as typed") {
  CHECK(*ParseTxnState("trying") == v1::TXN_STATE_TRYING);
  CHECK(*ParseTxnState("CONFIRMED") == v1::TXN_STATE_CONFIRMED);
  CHECK(*ParseTxnState("txn_state_cancelling") == v1::TXN_STATE_CANCELLING);
  CHECK(*ParseTxnState("awaiting_approval") == v1::TXN_STATE_AWAITING_APPROVAL);
  CHECK(!ParseTxnState("unspecified").ok());
  CHECK(!ParseTxnState("done").ok());

  CHECK(*ParseApprovalAction("force-confirm") ==
        v1::APPROVAL_ACTION_FORCE_CONFIRM);
  CHECK(*ParseApprovalAction("force-cancel") ==
        v1::APPROVAL_ACTION_FORCE_CANCEL);
  CHECK(*ParseApprovalAction("resolve-branch") ==
        v1::APPROVAL_ACTION_RESOLVE_BRANCH);
  CHECK(*ParseApprovalAction("gate-approve") ==
        v1::APPROVAL_ACTION_GATE_APPROVE);
  CHECK(!ParseApprovalAction("force_cancel").ok());
  CHECK(!ParseApprovalAction("FORCE-CANCEL").ok());
  CHECK(!ParseApprovalAction("unspecified").ok());
  CHECK(ParseApprovalAction("x").status().message() ==
        "unknown approval action 'x': one of force-confirm, force-cancel, "
        "resolve-branch, gate-approve");
  CHECK(ParseTxnState("done").status().message() ==
        "unknown state 'done': one of open, trying, awaiting_approval, "
        "confirming, confirmed, cancelling, cancelled");

  std::string bytes;
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<char>(i * 8));
  const std::string hex = Hex(bytes);
  CHECK(hex.substr(0, 8) == "00081018");
  auto back = ParseContentHash(hex);
  REQUIRE(back.ok());
  CHECK(*back == bytes);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  CHECK(*ParseContentHash(upper) == bytes);
  CHECK(!ParseContentHash(hex.substr(2)).ok());
  CHECK(!ParseContentHash("zz" + hex.substr(2)).ok());
}

TEST_CASE("the token file holds a token or NAME TOKEN lines") {
  CHECK(*ParseTokenFile("s3cret\n") == "s3cret");
  CHECK(*ParseTokenFile("# admins\n\n  alice  s3cret \nbob other\n") ==
        "s3cret");
  CHECK(*ParseTokenFile("alice\ts3cret") == "s3cret");
  CHECK(!ParseTokenFile("").ok());
  CHECK(!ParseTokenFile("# only a comment\n\n").ok());
  CHECK(!ParseTokenFile("alice s3cret extra\n").ok());
}

TEST_CASE("status shows counts by state, the horizon's age and recovery") {
  v1::StatusResponse s;
  s.set_health("recovering");
  s.set_version("0.1.0");
  s.set_wal_bytes(123456);
  s.set_dedup_horizon_ms(kNow - 2 * 3600 * 1000);
  auto* trying = s.add_in_flight();
  trying->set_state(v1::TXN_STATE_TRYING);
  trying->set_count(1);
  auto* confirming = s.add_in_flight();
  confirming->set_state(v1::TXN_STATE_CONFIRMING);
  confirming->set_count(2);
  auto* none = s.add_in_flight();
  none->set_state(v1::TXN_STATE_CANCELLING);
  none->set_count(0);
  s.set_oldest_unfinished_age_ms(4200);
  s.set_stuck_branches(1);
  s.set_recovery_total(5);
  s.set_recovery_done(2);
  const std::string out = FormatStatus(s, kNow);
  INFO(out);
  const auto lines = Lines(out);
  REQUIRE(lines.size() == 8);
  CHECK(lines[0] == "health             recovering");
  CHECK(lines[2] == "wal bytes          123456 (120.6 KiB)");
  CHECK(lines[3] == "dedup horizon      2025-11-30T13:23:43.123Z (2h00m ago)");
  CHECK(lines[4] == "in flight          3 (TRYING 1, CONFIRMING 2)");
  CHECK(lines[5] == "oldest unfinished  4.2s");
  CHECK(lines[6] == "stuck branches     1");
  CHECK(lines[7] == "recovery           2/5 done");

  s.set_recovery_done(5);
  CHECK(Contains(FormatStatus(s, kNow), "5/5 done (complete)"));
  s.clear_in_flight();
  s.set_recovery_total(0);
  // While the scan runs nothing is known yet; a scan that failed says so.
  CHECK(Contains(FormatStatus(s, kNow), "recovery           scanning the WAL"));
  s.set_health("failed");
  s.set_recovery_error("DATA_LOSS: recovery scan failed after 3 transactions");
  CHECK(Contains(FormatStatus(s, kNow),
                 "recovery           FAILED: DATA_LOSS: recovery scan failed"));
  s.set_recovery_error("");
  s.set_health("serving");
  s.set_oldest_unfinished_age_ms(0);
  s.set_wal_bytes(1000);
  const std::string idle = FormatStatus(s, kNow);
  CHECK(Contains(idle, "wal bytes          1000\n"));
  s.set_wal_bytes(5ull << 30);
  CHECK(Contains(FormatStatus(s, kNow),
                 "wal bytes          5368709120 (5.0 GiB)\n"));
  CHECK(Contains(idle, "in flight          0\n"));
  CHECK(Contains(idle, "oldest unfinished  -\n"));
  CHECK(Contains(idle, "recovery           nothing to recover"));
}

TEST_CASE("list prints aligned columns, a stuck marker and the next page") {
  v1::TransactionView a = SampleTxn();
  v1::TransactionView b;
  b.set_gid("g-2");
  b.set_state(v1::TXN_STATE_TRYING);
  b.set_registered_at_ms(kNow - 500);
  b.add_branches();
  v1::TransactionView summary;
  summary.set_gid("g-3");
  summary.set_state(v1::TXN_STATE_CANCELLED);
  summary.set_decision(v1::DECISION_CANCEL);
  summary.set_registered_at_ms(kNow - 3 * 86400000LL);
  const std::string out = FormatList({a, b, summary}, "tok-9", kNow);
  INFO(out);
  const auto lines = Lines(out);
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "GID        STATE       DECISION  AGE    BRANCHES  STUCK");
  CHECK(lines[1] ==
        "g-stuck-1  CONFIRMING  CONFIRM   1m04s  2         STUCK(1)");
  CHECK(lines[2] == "g-2        TRYING      -         500ms  1");
  CHECK(lines[3] == "g-3        CANCELLED   CANCEL    3d00h  -");
  CHECK(lines[4] == "3 transactions");
  CHECK(lines[5] == "more: --page-token tok-9 (or --all)");
  CHECK(Lines(FormatList({}, "", kNow)).back() == "0 transactions");
}

TEST_CASE("show prints the header, every branch, the timeline and approvals") {
  v1::ShowResponse show;
  *show.mutable_transaction() = SampleTxn();
  auto* r1 = show.add_timeline();
  r1->set_at_ms(kNow - 64000);
  r1->set_kind("Registered");
  r1->set_summary("2 branches");
  auto* r2 = show.add_timeline();
  r2->set_at_ms(kNow - 1000);
  r2->set_kind("BranchResolved");
  r2->set_branch_id("credit");
  r2->set_approval_id("ap-1");
  r2->set_summary("resolved by hand");
  auto* ap = show.add_approvals();
  ap->set_approval_id("ap-1");
  ap->set_action(v1::APPROVAL_ACTION_RESOLVE_BRANCH);
  ap->set_branch_id("credit");
  ap->set_issued_by("alice");
  ap->set_issued_at_ms(kNow - 2000);
  ap->set_used_at_ms(kNow - 1000);
  ap->set_revision(7);
  ap->set_reason("credited by hand, ticket 42");
  const std::string out = FormatShow(show, kNow);
  INFO(out);
  CHECK(Contains(out, "gid            g-stuck-1\n"));
  CHECK(Contains(out, "state          CONFIRMING\n"));
  CHECK(Contains(out, "decision       CONFIRM (every Try EXECUTED)\n"));
  std::string ab;
  for (int i = 0; i < 32; ++i) ab += "ab";
  CHECK(Contains(out, "content hash   " + ab + "\n"));
  CHECK(Contains(out, "registered     2025-11-30T15:22:39.123Z (1m04s ago)"));
  CHECK(Contains(out, "finished       -\n"));
  CHECK(Contains(out, "owner epoch    3\n"));
  CHECK(Contains(out, "approval gate  off\n"));
  CHECK(Contains(out, "branches (2)\n"));
  CHECK(Contains(out, "  credit: bank-b credit, payload 0 bytes  STUCK\n"));
  CHECK(Contains(out, "    try      SUCCEEDED EXECUTED\n"));
  CHECK(Contains(out, "    confirm  UNKNOWN, 12 attempts\n"));
  CHECK(
      Contains(out, "             last error: UNAVAILABLE: connect failed\n"));
  CHECK(Contains(out, "    confirm  SUCCEEDED EXECUTED, 1 attempt\n"));
  CHECK(Contains(out, "timeline (2 records)\n"));
  CHECK(Contains(out,
                 "  2025-11-30T15:23:42.123Z  BranchResolved  "
                 "branch=credit approval=ap-1  resolved by hand\n"));
  CHECK(Contains(out, "approvals used (1)\n"));
  CHECK(Contains(out,
                 "  ap-1: RESOLVE_BRANCH branch credit, issued by alice "
                 "at 2025-11-30T15:23:41.123Z, used at "
                 "2025-11-30T15:23:42.123Z"));
  CHECK(Contains(out, "reason: credited by hand, ticket 42\n"));
  CHECK(!Contains(out, "held"));
  // A transaction held for an operator says so, below its decision.
  show.mutable_transaction()->set_held_reason(
      "branch a (CONFIRMED) witnesses Confirm, branch b (CANCELLED) Cancel");
  CHECK(Contains(FormatShow(show, kNow),
                 "decision       CONFIRM (every Try EXECUTED)\n"
                 "held           for an operator (tccctl force): branch a "
                 "(CONFIRMED) witnesses Confirm, branch b (CANCELLED) "
                 "Cancel\n"));
}

TEST_CASE("show names the archive node, and why a timeline is missing") {
  v1::ShowResponse show;
  *show.mutable_transaction() = SampleTxn();
  show.add_timeline()->set_kind("Registered");
  show.set_archive_node("node-1");
  CHECK(Contains(FormatShow(show, kNow),
                 "timeline (1 records, archived by node node-1)\n"));
  show.clear_timeline();
  CHECK(Contains(FormatShow(show, kNow),
                 "(none kept: compacted by retention)\n"));
  show.set_timeline_missing("node node-1 is not live");
  const std::string out = FormatShow(show, kNow);
  CHECK(Contains(out, "  (none shown: node node-1 is not live)\n"));
  CHECK(!Contains(out, "compacted by retention"));
}

TEST_CASE("the decision line shows the decision's cause from its field") {
  v1::TransactionView t = SampleTxn();
  t.set_decision_cause(v1::DECISION_CAUSE_WITNESSED);
  t.set_decision_reason("branch b0 (CONFIRMED) witnessed Confirm");
  CHECK(Contains(FormatTransaction(t, kNow),
                 "decision       CONFIRM (witnessed: branch b0 (CONFIRMED) "
                 "witnessed Confirm)\n"));
  t.set_decision(v1::DECISION_CANCEL);
  t.set_decision_cause(v1::DECISION_CAUSE_GATE_APPROVED);
  t.clear_decision_reason();
  CHECK(Contains(FormatTransaction(t, kNow),
                 "decision       CANCEL (gate approved)\n"));
  CHECK(CauseName(v1::DECISION_CAUSE_UNSPECIFIED).empty());
  CHECK(CauseName(v1::DECISION_CAUSE_DEADLINE) == "deadline");
  CHECK(Contains(ToJson(t),
                 "\"decision_cause\":\"DECISION_CAUSE_GATE_APPROVED\""));
}

TEST_CASE("watch prints one line per event; approvals show their binding") {
  v1::WatchEvent e;
  *e.mutable_transaction() = SampleTxn();
  CHECK(FormatWatchEvent(e, kNow) ==
        "2025-11-30T15:23:43.123Z  g-stuck-1  CONFIRMING  decision=CONFIRM  "
        "debit try=SUCCEEDED confirm=SUCCEEDED; credit try=SUCCEEDED "
        "confirm=UNKNOWN STUCK\n");

  v1::Approval a;
  a.set_approval_id("ap-7");
  a.set_action(v1::APPROVAL_ACTION_GATE_APPROVE);
  a.set_gid("g-9");
  a.set_revision(2);
  a.set_content_hash(std::string(32, '\x01'));
  a.set_expires_at_ms(kNow + 900000);
  a.set_issued_by("alice");
  a.set_issued_at_ms(kNow);
  a.set_reason("ticket 1");
  const std::string out = FormatApproval(a, kNow);
  INFO(out);
  CHECK(Contains(out, "approval      ap-7\n"));
  CHECK(Contains(out, "action        GATE_APPROVE\n"));
  CHECK(Contains(out, "branch        -\n"));
  std::string ones;
  for (int i = 0; i < 32; ++i) ones += "01";
  CHECK(Contains(out, "content hash  " + ones + "\n"));
  CHECK(Contains(out, "expires       2025-11-30T15:38:43.123Z (in 15m00s)\n"));
  CHECK(Contains(out, "used at       unused\n"));
}

TEST_CASE("JSON is one line, proto field names, and parses back") {
  v1::ShowResponse show;
  *show.mutable_transaction() = SampleTxn();
  show.add_timeline()->set_kind("Registered");
  const std::string json = ToJson(show);
  INFO(json);
  CHECK(json.find('\n') == std::string::npos);
  CHECK(Contains(json, "\"decision_reason\":\"every Try EXECUTED\""));
  CHECK(Contains(json, "\"state\":\"TXN_STATE_CONFIRMING\""));
  // Fields at their default are printed too, so scripts can rely on them.
  CHECK(Contains(json, "\"finished_at_ms\":\"0\""));
  v1::ShowResponse back;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(show, back));

  v1::StatusResponse empty;
  CHECK(Contains(ToJson(empty), "\"recovery_done\":\"0\""));
}
