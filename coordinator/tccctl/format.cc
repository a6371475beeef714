#include "tccctl/format.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace tcc::tccctl {
namespace v1 = tcc::v1;
namespace {

// Strips `prefix` from an enum's name ("TXN_STATE_TRYING" -> "TRYING").
std::string Strip(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) return name.substr(prefix.size());
  return name.empty() ? "?" : name;
}

// Rows of cells -> lines with every column but the last padded to its width,
// two spaces between columns, each line prefixed by `indent`.
std::string Table(const std::vector<std::vector<std::string>>& rows,
                  const std::string& indent = "") {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (row.size() > widths.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(widths[i] - row[i].size() + 2, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// The numbers of an enum's values but its UNSPECIFIED (0), in order.
std::vector<int> Specified(const google::protobuf::EnumDescriptor* values) {
  std::vector<int> numbers;
  for (int i = 0; i < values->value_count(); ++i) {
    if (values->value(i)->number() != 0) {
      numbers.push_back(values->value(i)->number());
    }
  }
  return numbers;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// "408714 (399.1 KiB)"; bytes alone under 1 KiB.
std::string Bytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) return absl::StrCat(n);
  double v = static_cast<double>(n) / 1024;
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return absl::StrCat(n, " (", buf, ")");
}

std::string StuckCount(const v1::TransactionView& txn) {
  int stuck = 0;
  for (const auto& b : txn.branches()) stuck += b.stuck() ? 1 : 0;
  return stuck == 0 ? "" : absl::StrCat("STUCK(", stuck, ")");
}

// "SUCCEEDED EXECUTED, 2 attempts" / "NOT_SENT".
std::string PhaseSummary(const v1::PhaseView& p) {
  std::string s = PhaseStateName(p.state());
  if (p.outcome() != v1::OUTCOME_UNSPECIFIED) {
    absl::StrAppend(&s, " ", OutcomeName(p.outcome()));
  }
  if (p.attempts() > 0) {
    absl::StrAppend(&s, ", ", p.attempts(),
                    p.attempts() == 1 ? " attempt" : " attempts");
  }
  return s;
}

// "confirm", "cancel" (the decision's name in lower case), or "phase 2".
std::string SecondPhaseLabel(v1::Decision d) {
  if (d == v1::DECISION_UNSPECIFIED) return "phase 2";
  return absl::AsciiStrToLower(DecisionName(d));
}

// The age of a transaction: since it was registered (created_at if tccd did
// not say).
int64_t AgeMs(const v1::TransactionView& txn, int64_t now_ms) {
  const int64_t since = txn.registered_at_ms() != 0 ? txn.registered_at_ms()
                                                    : txn.created_at_ms();
  return since == 0 ? 0 : std::max<int64_t>(0, now_ms - since);
}

}  // namespace

int ExitCodeFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitCredential;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return kExitPrecondition;
    default:
      return kExitCallFailed;
  }
}

std::string ExitCodesHelp() {
  return "Exit codes:\n"
         "  0  ok\n"
         "  1  the call failed (server error; status name and message on "
         "stderr)\n"
         "  2  usage error (bad flags, arguments, token or TLS files)\n"
         "  3  tccd unreachable (UNAVAILABLE, DEADLINE_EXCEEDED)\n"
         "  4  credential refused (UNAUTHENTICATED, PERMISSION_DENIED)\n"
         "  5  not found (NOT_FOUND, e.g. an unknown gid)\n"
         "  6  refused precondition (FAILED_PRECONDITION, ABORTED: e.g. an "
         "approval\n"
         "     that does not match, has expired or was used)\n";
}

absl::StatusOr<int64_t> ParseDuration(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty duration");
  int64_t total = 0;
  size_t i = 0;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad duration '", text,
                       "': want a number and a unit, e.g. 500ms, 30s, 5m, 2h"));
    }
    int64_t n = 0;
    while (i < text.size() &&
           std::isdigit(static_cast<unsigned char>(text[i]))) {
      const int digit = text[i] - '0';
      if (n > (kMax - digit) / 10) {
        return absl::InvalidArgumentError(
            absl::StrCat("duration '", text, "' too large"));
      }
      n = n * 10 + digit;
      ++i;
    }
    size_t unit_end = i;
    while (unit_end < text.size() &&
           std::isalpha(static_cast<unsigned char>(text[unit_end]))) {
      ++unit_end;
    }
    const std::string unit = text.substr(i, unit_end - i);
    int64_t scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60 * 1000;
    } else if (unit == "h") {
      scale = 3600 * 1000;
    } else if (unit == "d") {
      scale = 24 * 3600 * 1000;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad duration '", text, "': unit '", unit,
          "' is not one of ms, s, m, h, d (e.g. 500ms, 30s, 5m, 2h)"));
    }
    if (n > (kMax - total) / scale) {
      return absl::InvalidArgumentError(
          absl::StrCat("duration '", text, "' too large"));
    }
    total += n * scale;
    i = unit_end;
  }
  return total;
}

absl::StatusOr<v1::TxnState> ParseTxnState(const std::string& text) {
  std::string name = absl::AsciiStrToUpper(text);
  if (name.rfind("TXN_STATE_", 0) != 0) name = "TXN_STATE_" + name;
  v1::TxnState state;
  if (!v1::TxnState_Parse(name, &state) || state == v1::TXN_STATE_UNSPECIFIED) {
    std::vector<std::string> known;
    for (int n : Specified(v1::TxnState_descriptor())) {
      known.push_back(
          absl::AsciiStrToLower(StateName(static_cast<v1::TxnState>(n))));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown state '", text, "': one of ", absl::StrJoin(known, ", ")));
  }
  return state;
}

absl::StatusOr<v1::ApprovalAction> ParseApprovalAction(
    const std::string& text) {
  // protobuf's name in lower case, '-' for '_': APPROVAL_ACTION_FORCE_CANCEL
  // is force-cancel.
  std::string name = absl::AsciiStrToUpper(text);
  std::replace(name.begin(), name.end(), '-', '_');
  v1::ApprovalAction action;
  if (absl::AsciiStrToLower(text) == text &&
      text.find('_') == std::string::npos &&
      v1::ApprovalAction_Parse("APPROVAL_ACTION_" + name, &action) &&
      action != v1::APPROVAL_ACTION_UNSPECIFIED) {
    return action;
  }
  std::vector<std::string> known;
  for (int n : Specified(v1::ApprovalAction_descriptor())) {
    std::string spelled =
        absl::AsciiStrToLower(ActionName(static_cast<v1::ApprovalAction>(n)));
    std::replace(spelled.begin(), spelled.end(), '_', '-');
    known.push_back(std::move(spelled));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown approval action '",
                                                 text, "': one of ",
                                                 absl::StrJoin(known, ", ")));
}

absl::StatusOr<std::string> ParseContentHash(const std::string& hex) {
  if (hex.size() != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "content hash must be 64 hex digits, got ", hex.size(), " characters"));
  }
  std::string out;
  out.reserve(32);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("content hash '", hex, "' is not hex"));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  // Floor division, so times before 1970 print correctly too.
  int64_t secs = unix_ms / 1000;
  int64_t millis = unix_ms % 1000;
  if (millis < 0) {
    millis += 1000;
    --secs;
  }
  const time_t t = static_cast<time_t>(secs);
  struct tm tm;
  if (gmtime_r(&t, &tm) == nullptr) return absl::StrCat(unix_ms, "ms");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buf;
}

std::string FormatAge(int64_t ms) {
  if (ms < 0) ms = 0;
  char buf[64];
  if (ms < 1000) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 "ms", ms);
  } else if (ms < 60 * 1000) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 ".%" PRId64 "s", ms / 1000,
                  (ms % 1000) / 100);
  } else if (ms < 3600 * 1000) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 "m%02" PRId64 "s", ms / 60000,
                  (ms / 1000) % 60);
  } else if (ms < 24 * 3600 * 1000) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 "h%02" PRId64 "m", ms / 3600000,
                  (ms / 60000) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRId64 "d%02" PRId64 "h", ms / 86400000,
                  (ms / 3600000) % 24);
  }
  return buf;
}

std::string FormatTimeWithAge(int64_t unix_ms, int64_t now_ms) {
  if (unix_ms == 0) return "-";
  if (unix_ms <= now_ms) {
    return absl::StrCat(FormatTime(unix_ms), " (", FormatAge(now_ms - unix_ms),
                        " ago)");
  }
  return absl::StrCat(FormatTime(unix_ms), " (in ", FormatAge(unix_ms - now_ms),
                      ")");
}

std::string StateName(v1::TxnState state) {
  return Strip(v1::TxnState_Name(state), "TXN_STATE_");
}
std::string DecisionName(v1::Decision decision) {
  if (decision == v1::DECISION_UNSPECIFIED) return "-";
  return Strip(v1::Decision_Name(decision), "DECISION_");
}
std::string PhaseStateName(v1::PhaseState state) {
  return Strip(v1::PhaseState_Name(state), "PHASE_STATE_");
}
std::string OutcomeName(v1::Outcome outcome) {
  return Strip(v1::Outcome_Name(outcome), "OUTCOME_");
}
std::string ActionName(v1::ApprovalAction action) {
  return Strip(v1::ApprovalAction_Name(action), "APPROVAL_ACTION_");
}
std::string CauseName(v1::DecisionCause cause) {
  if (cause == v1::DECISION_CAUSE_UNSPECIFIED) return "";
  std::string name = absl::AsciiStrToLower(
      Strip(v1::DecisionCause_Name(cause), "DECISION_CAUSE_"));
  std::replace(name.begin(), name.end(), '_', ' ');
  return name;
}
bool IsFinal(v1::TxnState state) {
  return state == v1::TXN_STATE_CONFIRMED || state == v1::TXN_STATE_CANCELLED;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  // Printing a well-formed message cannot fail; if it ever does, say so in
  // valid JSON rather than print half an object.
  if (!status.ok()) {
    return "{\"error\":\"cannot print " + message.GetTypeName() + " as JSON\"}";
  }
  return out;
}

std::string FormatCluster(const v1::ClusterResponse& c) {
  if (!c.enabled()) {
    return "not a cluster: one tccd on its local RocksDB WAL\n";
  }
  std::string out = absl::StrCat("answered by ", c.node_id(),
                                 " at etcd revision ", c.revision(), "\n");
  absl::StrAppend(&out, "nodes (", c.nodes_size(), "):\n");
  absl::StrAppend(
      &out, absl::StrFormat("  %-16s %-22s %-10s %-7s %s\n", "NODE", "ADDRESS",
                            "LEASE LEFT", "SHARDS", "STATE"));
  for (const auto& n : c.nodes()) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "  %-16s %-22s %-10s %-7d %s\n", n.node_id(), n.address(),
                  n.lease_ttl_left_ms() < 0 ? std::string("?")
                                            : FormatAge(n.lease_ttl_left_ms()),
                  n.shards_owned(), n.draining() ? "draining" : "live"));
  }
  std::map<std::string, std::vector<std::string>> by_owner;
  std::vector<std::string> moving;
  for (const auto& s : c.shards()) {
    const std::string key = s.owner().empty() ? "" : s.owner();
    by_owner[key].push_back(s.owner().empty()
                                ? absl::StrCat(s.shard())
                                : absl::StrCat(s.shard(), "@", s.epoch()));
    if (!s.owner().empty() && !s.assigned().empty() &&
        s.owner() != s.assigned()) {
      moving.push_back(
          absl::StrCat(s.shard(), " ", s.owner(), "->", s.assigned()));
    }
  }
  absl::StrAppend(&out, "shards (", c.shards_size(), ", shard@epoch):\n");
  for (const auto& [owner, list] : by_owner) {
    if (owner.empty()) continue;
    absl::StrAppend(&out, "  ", owner, ": ", absl::StrJoin(list, " "), "\n");
  }
  absl::StrAppend(&out, "unowned: ", c.unowned_shards());
  if (by_owner.count("") != 0) {
    absl::StrAppend(&out, " (", absl::StrJoin(by_owner[""], " "), ")");
  }
  absl::StrAppend(&out, "\n");
  if (!moving.empty()) {
    absl::StrAppend(&out, "moving to their assigned node: ",
                    absl::StrJoin(moving, ", "), "\n");
  }
  absl::StrAppend(&out, "recovering at ", c.node_id(), ": ",
                  c.recovering_shards(), " shards\n");
  return out;
}

std::string FormatStatus(const v1::StatusResponse& status, int64_t now_ms) {
  uint64_t in_flight = 0;
  std::vector<std::string> by_state;
  for (const auto& c : status.in_flight()) {
    in_flight += c.count();
    if (c.count() > 0) {
      by_state.push_back(absl::StrCat(StateName(c.state()), " ", c.count()));
    }
  }
  std::string horizon = "-";
  if (status.dedup_horizon_ms() != 0) {
    horizon =
        absl::StrCat(FormatTime(status.dedup_horizon_ms()), " (",
                     FormatAge(now_ms - status.dedup_horizon_ms()), " ago)");
  }
  std::string recovery = absl::StrCat(status.recovery_done(), "/",
                                      status.recovery_total(), " done");
  if (!status.recovery_error().empty()) {
    recovery = absl::StrCat("FAILED: ", status.recovery_error());
  } else if (status.health() == "recovering" && status.recovery_total() == 0) {
    recovery = "scanning the WAL";
  } else if (status.recovery_total() == 0) {
    recovery = "nothing to recover";
  } else if (status.recovery_done() >= status.recovery_total()) {
    absl::StrAppend(&recovery, " (complete)");
  }
  std::string flight = absl::StrCat(in_flight);
  if (!by_state.empty()) {
    absl::StrAppend(&flight, " (", absl::StrJoin(by_state, ", "), ")");
  }
  return Table({
      {"health", status.health()},
      {"version", OrDash(status.version())},
      {"wal bytes", Bytes(status.wal_bytes())},
      {"dedup horizon", horizon},
      {"in flight", flight},
      {"oldest unfinished", status.oldest_unfinished_age_ms() == 0
                                ? "-"
                                : FormatAge(static_cast<int64_t>(
                                      status.oldest_unfinished_age_ms()))},
      {"stuck branches", absl::StrCat(status.stuck_branches())},
      {"recovery", recovery},
  });
}

std::string FormatList(const std::vector<v1::TransactionView>& txns,
                       const std::string& next_page_token, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"GID", "STATE", "DECISION", "AGE", "BRANCHES", "STUCK"}};
  for (const auto& t : txns) {
    // A summary (List's view of a finished transaction) has no branches.
    rows.push_back(
        {t.gid(), StateName(t.state()), DecisionName(t.decision()),
         FormatAge(AgeMs(t, now_ms)),
         t.branches_size() == 0 ? "-" : absl::StrCat(t.branches_size()),
         StuckCount(t)});
  }
  std::string out = Table(rows);
  absl::StrAppend(&out, txns.size(),
                  txns.size() == 1 ? " transaction\n" : " transactions\n");
  if (!next_page_token.empty()) {
    absl::StrAppend(&out, "more: --page-token ", next_page_token,
                    " (or --all)\n");
  }
  return out;
}

std::string FormatTransaction(const v1::TransactionView& txn, int64_t now_ms) {
  std::string decision = DecisionName(txn.decision());
  const std::string cause = CauseName(txn.decision_cause());
  if (!cause.empty() || !txn.decision_reason().empty()) {
    absl::StrAppend(
        &decision, " (", cause,
        !cause.empty() && !txn.decision_reason().empty() ? ": " : "",
        txn.decision_reason(), ")");
  }
  std::string gate = "off";
  if (txn.approval_gate()) {
    gate = absl::StrCat("on, approval deadline ",
                        FormatTimeWithAge(txn.approval_deadline_ms(), now_ms));
  }
  std::vector<std::vector<std::string>> rows = {
      {"gid", txn.gid()},
      {"state", StateName(txn.state())},
      {"decision", decision},
      {"revision", absl::StrCat(txn.revision())},
      {"content hash", OrDash(Hex(txn.content_hash()))},
      {"interactive", txn.interactive() ? "yes" : "no"},
      {"created", FormatTimeWithAge(txn.created_at_ms(), now_ms)},
      {"registered", FormatTimeWithAge(txn.registered_at_ms(), now_ms)},
      {"try deadline", FormatTimeWithAge(txn.try_deadline_ms(), now_ms)},
      {"decided", FormatTimeWithAge(txn.decided_at_ms(), now_ms)},
      {"finished", FormatTimeWithAge(txn.finished_at_ms(), now_ms)},
      {"owner epoch", absl::StrCat(txn.owner_epoch())},
      {"approval gate", gate},
  };
  if (!txn.held_reason().empty()) {
    rows.insert(rows.begin() + 3,
                {"held", absl::StrCat("for an operator (tccctl force): ",
                                      txn.held_reason())});
  }
  std::string out = Table(rows);
  absl::StrAppend(&out, "branches (", txn.branches_size(), ")\n");
  const std::string second = SecondPhaseLabel(txn.decision());
  for (const auto& b : txn.branches()) {
    absl::StrAppend(&out, "  ", b.branch_id(), ": ", b.participant(), " ",
                    b.action(), ", payload ", b.payload_size(), " bytes",
                    b.stuck() ? "  STUCK" : "", "\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& [label, phase] :
         {std::pair<std::string, const v1::PhaseView*>{"try", &b.try_phase()},
          {second, &b.second_phase()}}) {
      rows.push_back({label, PhaseSummary(*phase),
                      phase->updated_at_ms() == 0
                          ? ""
                          : absl::StrCat("updated ",
                                         FormatTimeWithAge(
                                             phase->updated_at_ms(), now_ms))});
      if (!phase->last_error().empty()) {
        rows.push_back({"", absl::StrCat("last error: ", phase->last_error())});
      }
    }
    absl::StrAppend(&out, Table(rows, "    "));
  }
  return out;
}

std::string FormatShow(const v1::ShowResponse& show, int64_t now_ms) {
  std::string out = FormatTransaction(show.transaction(), now_ms);
  absl::StrAppend(
      &out, "timeline (", show.timeline_size(), " records",
      show.archive_node().empty()
          ? ""
          : absl::StrCat(", archived by node ", show.archive_node()),
      ")\n");
  if (!show.timeline_missing().empty()) {
    absl::StrAppend(&out, "  (none shown: ", show.timeline_missing(), ")\n");
  } else if (show.timeline_size() == 0) {
    absl::StrAppend(&out, "  (none kept: compacted by retention)\n");
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : show.timeline()) {
    std::string about;
    if (!r.branch_id().empty()) about = absl::StrCat("branch=", r.branch_id());
    if (!r.approval_id().empty()) {
      absl::StrAppend(&about, about.empty() ? "" : " ",
                      "approval=", r.approval_id());
    }
    rows.push_back({FormatTime(r.at_ms()), r.kind(), about, r.summary()});
  }
  absl::StrAppend(&out, Table(rows, "  "));
  absl::StrAppend(&out, "approvals used (", show.approvals_size(), ")\n");
  for (const auto& a : show.approvals()) {
    absl::StrAppend(&out, "  ", a.approval_id(), ": ", ActionName(a.action()));
    if (!a.branch_id().empty())
      absl::StrAppend(&out, " branch ", a.branch_id());
    absl::StrAppend(&out, ", issued by ", OrDash(a.issued_by()), " at ",
                    FormatTime(a.issued_at_ms()), ", used at ",
                    FormatTime(a.used_at_ms()), ", bound to revision ",
                    a.revision(), " hash ", OrDash(Hex(a.content_hash())),
                    "\n    reason: ", OrDash(a.reason()), "\n");
  }
  return out;
}

std::string FormatWatchEvent(const v1::WatchEvent& event, int64_t now_ms) {
  const auto& t = event.transaction();
  std::vector<std::string> branches;
  for (const auto& b : t.branches()) {
    std::string s = absl::StrCat(
        b.branch_id(), " try=", PhaseStateName(b.try_phase().state()));
    if (b.second_phase().state() != v1::PHASE_STATE_UNSPECIFIED &&
        b.second_phase().state() != v1::PHASE_STATE_NOT_SENT) {
      absl::StrAppend(&s, " ", SecondPhaseLabel(t.decision()), "=",
                      PhaseStateName(b.second_phase().state()));
    }
    if (b.stuck()) absl::StrAppend(&s, " STUCK");
    branches.push_back(s);
  }
  return absl::StrCat(FormatTime(now_ms), "  ", t.gid(), "  ",
                      StateName(t.state()),
                      "  decision=", DecisionName(t.decision()), "  ",
                      absl::StrJoin(branches, "; "), "\n");
}

std::string FormatApproval(const v1::Approval& approval, int64_t now_ms) {
  return Table({
      {"approval", approval.approval_id()},
      {"action", ActionName(approval.action())},
      {"gid", approval.gid()},
      {"branch", OrDash(approval.branch_id())},
      {"revision", absl::StrCat(approval.revision())},
      {"content hash", OrDash(Hex(approval.content_hash()))},
      {"expires", FormatTimeWithAge(approval.expires_at_ms(), now_ms)},
      {"issued by", OrDash(approval.issued_by())},
      {"issued at", FormatTimeWithAge(approval.issued_at_ms(), now_ms)},
      {"reason", OrDash(approval.reason())},
      {"used at", approval.used_at_ms() == 0
                      ? "unused"
                      : FormatTimeWithAge(approval.used_at_ms(), now_ms)},
  });
}

std::string FormatError(const absl::Status& status) {
  return absl::StrCat("tccctl: ", absl::StatusCodeToString(status.code()), ": ",
                      std::string(status.message()));
}

}  // namespace tcc::tccctl
