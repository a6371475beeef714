// A data directory of format version 1 (before the Decided record had its
// cause) opened by this build: its decisions and their causes are read, it is
// marked version 2, and new records are appended beside the old ones and
// survive a reopen.
//
// The fixture, fixtures/format_v1_data_dir.kv, is every key and value of a
// data dir written by the core and the RocksDB log of commit 6e052e4 (the
// last to write version 1): one transaction per cause, some finished, some
// not, two approvals consumed. See the fixture's first lines.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>

#include "internal/rocksdb_keys.h"
#include "log_test_util.h"
#include "rocksdb/db.h"
#include "tcc/wal/rocksdb_log.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

std::string Unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out.push_back(text[i]);
    } else if (i + 1 < text.size() && text[i + 1] == '\\') {
      out.push_back('\\');
      ++i;
    } else {
      REQUIRE(i + 3 < text.size());
      REQUIRE(text[i + 1] == 'x');
      out.push_back(
          static_cast<char>(std::stoi(text.substr(i + 2, 2), nullptr, 16)));
      i += 3;
    }
  }
  return out;
}

// The fixture's keys and values (lines "key value", escaped; '#' comments).
std::map<std::string, std::string> Fixture() {
  std::ifstream in(std::string(TCC_WAL_FIXTURES) + "/format_v1_data_dir.kv");
  REQUIRE(in.good());
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    REQUIRE(space != std::string::npos);
    kv[Unescape(line.substr(0, space))] = Unescape(line.substr(space + 1));
  }
  return kv;
}

// Writes the fixture into dir/db, as the old tccd left it (synced).
void WriteFixture(const TempDir& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  REQUIRE(rocksdb::DB::Open(options, (dir.path() / "db").string(), &db).ok());
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : Fixture())
    REQUIRE(batch.Put(key, value).ok());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  REQUIRE(db->Write(wo, &batch).ok());
  delete db;
}

// One key of the closed log's database.
std::string RawGet(const TempDir& dir, const std::string& key) {
  rocksdb::DB* db = nullptr;
  REQUIRE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(),
                                       (dir.path() / "db").string(), &db)
              .ok());
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key, &value);
  delete db;
  REQUIRE(s.ok());
  return value;
}

std::unique_ptr<RocksDbLog> OpenOrDie(const RocksDbLogOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  INFO(log.status().ToString());
  REQUIRE(log.ok());
  return *std::move(log);
}

// The transaction's Decided record (there is at most one in these).
std::optional<Decided> DecidedOf(Log& log, const std::string& gid) {
  absl::StatusOr<TxnLog> txn = log.Read(gid);
  INFO(gid << ": " << txn.status().ToString());
  REQUIRE(txn.ok());
  std::optional<Decided> found;
  for (const Record& r : txn->records) {
    if (const auto* d = std::get_if<Decided>(&r)) {
      REQUIRE_FALSE(found.has_value());
      found = *d;
    }
  }
  return found;
}

TxnState StateOf(Log& log, const std::string& gid) {
  absl::StatusOr<TxnLog> txn = log.Read(gid);
  REQUIRE(txn.ok());
  return txn->summary.state;
}

std::set<std::string> Unfinished(Log& log) {
  std::set<std::string> gids;
  REQUIRE(log.ScanUnfinished(0,
                             [&](TxnLog txn) {
                               gids.insert(txn.summary.gid);
                               return absl::OkStatus();
                             })
              .ok());
  return gids;
}

// After the fixture's times (Unix ms, 2023-11-14).
constexpr int64_t kLater = 1'700'000'100'000;

struct Expected {
  std::string gid;
  TxnState state;
  Decision decision;
  DecisionCause cause;
  std::string reason;
};

// What the old tccd decided, and why (its reasons without their prefixes).
const std::vector<Expected>& OldDecisions() {
  static const std::vector<Expected> expected = {
      {"v1-confirm", TxnState::kConfirmed, Decision::kConfirm,
       DecisionCause::kRule, "every Try EXECUTED"},
      {"v1-rejected", TxnState::kCancelled, Decision::kCancel,
       DecisionCause::kRule, "branch b1 REJECTED: insufficient funds"},
      {"v1-deadline", TxnState::kCancelling, Decision::kCancel,
       DecisionCause::kDeadline,
       "try-deadline passed with branch b0 Try unknown"},
      {"v1-rollback", TxnState::kCancelled, Decision::kCancel,
       DecisionCause::kRollback, "requested by the caller"},
      {"v1-forced", TxnState::kCancelled, Decision::kCancel,
       DecisionCause::kForced, "approval ap-force-1"},
      {"v1-gate", TxnState::kConfirming, Decision::kConfirm,
       DecisionCause::kGate, "approval ap-gate-1"},
      {"v1-witnessed", TxnState::kConfirmed, Decision::kConfirm,
       DecisionCause::kWitnessed,
       "branch b0 (CONFIRMED) witnessed Confirm; the WAL had lost the "
       "decision"},
  };
  return expected;
}

void CheckOldDecisions(Log& log) {
  for (const Expected& e : OldDecisions()) {
    INFO(e.gid);
    std::optional<Decided> d = DecidedOf(log, e.gid);
    REQUIRE(d.has_value());
    CHECK(d->decision == e.decision);
    CHECK(d->cause == e.cause);
    CHECK(d->reason == e.reason);
    CHECK(d->at_ms > 0);
  }
  CHECK(DecidedOf(log, "v1-forced")->approval_id == "ap-force-1");
  CHECK(DecidedOf(log, "v1-gate")->approval_id == "ap-gate-1");
  CHECK_FALSE(DecidedOf(log, "v1-trying").has_value());
}

TEST_CASE("a data dir of format version 1 is read, upgraded and appended to") {
  TempDir dir;
  WriteFixture(dir);
  REQUIRE(RawGet(dir, internal::keys::kFormatVersion) == std::string("\x01"));
  const std::string old_record =
      RawGet(dir, internal::keys::Record("v1-confirm", 0));
  REQUIRE(old_record[0] == '\x01');
  RocksDbLogOptions options;
  options.data_dir = dir.str();

  {
    auto log = OpenOrDie(options);
    for (const Expected& e : OldDecisions()) {
      INFO(e.gid);
      CHECK(StateOf(*log, e.gid) == e.state);
    }
    CHECK(StateOf(*log, "v1-open") == TxnState::kOpen);
    CHECK(StateOf(*log, "v1-trying") == TxnState::kTrying);
    CheckOldDecisions(*log);
    CHECK_FALSE(DecidedOf(*log, "v1-open").has_value());
    absl::StatusOr<Approval> used = log->ReadApproval("ap-force-1");
    REQUIRE(used.ok());
    CHECK(used->action == ApprovalAction::kForceCancel);
    CHECK(used->gid == "v1-forced");
    CHECK(used->used_at_ms > 0);
    CHECK(Unfinished(*log) == std::set<std::string>{"v1-deadline", "v1-gate",
                                                    "v1-open", "v1-trying"});
    CHECK(log->Stats().unfinished == 4);
    CHECK(log->TakeOwnerEpoch(0).value() == 3);  // the old log took 1 and 2

    // The old summaries drive the append rules: a decision is written once.
    CHECK(absl::IsFailedPrecondition(AppendAndWait(
        *log, Req("v1-confirm", {MakeDecided(Decision::kCancel, kLater)}))));
    // The unfinished ones finish.
    PhaseUpdate confirmed = MakePhase("b0", PhaseState::kSucceeded, kLater);
    confirmed.phase = Phase::kConfirm;
    confirmed.outcome = Outcome::kExecuted;
    REQUIRE(
        AppendAndWait(
            *log, Req("v1-gate", {confirmed, MakeFinished(TxnState::kConfirmed,
                                                          kLater + 1)}))
            .ok());
    REQUIRE(AppendAndWait(*log,
                          Req("v1-deadline",
                              {MakeFinished(TxnState::kCancelled, kLater + 2)},
                              Durability::kBuffered))
                .ok());
    // The interactive one is decided, a new one registered and decided.
    Decided rollback = MakeDecided(Decision::kCancel, kLater + 3);
    rollback.cause = DecisionCause::kRollback;
    rollback.reason = "requested by the caller";
    REQUIRE(AppendAndWait(*log, Req("v1-open", {rollback})).ok());
    Decided deadline = MakeDecided(Decision::kCancel, kLater + 4);
    deadline.cause = DecisionCause::kDeadline;
    deadline.reason = "try-deadline passed";
    REQUIRE(AppendAndWait(*log, Req("v2-new", {MakeRegistered("v2-new", kLater),
                                               deadline}))
                .ok());
  }
  // Marked version 2 at open; the old values stay as they were written, the
  // new ones are version 2.
  CHECK(RawGet(dir, internal::keys::kFormatVersion) == std::string("\x02"));
  CHECK(RawGet(dir, internal::keys::Record("v1-confirm", 0)) == old_record);
  CHECK(RawGet(dir, internal::keys::Record("v2-new", 1))[0] == '\x02');

  auto log = OpenOrDie(options);
  CheckOldDecisions(*log);
  CHECK(StateOf(*log, "v1-gate") == TxnState::kConfirmed);
  CHECK(StateOf(*log, "v1-deadline") == TxnState::kCancelled);
  CHECK(StateOf(*log, "v1-open") == TxnState::kCancelling);
  std::optional<Decided> open = DecidedOf(*log, "v1-open");
  REQUIRE(open.has_value());
  CHECK(open->cause == DecisionCause::kRollback);
  std::optional<Decided> fresh = DecidedOf(*log, "v2-new");
  REQUIRE(fresh.has_value());
  CHECK(fresh->cause == DecisionCause::kDeadline);
  CHECK(fresh->reason == "try-deadline passed");
  CHECK(Unfinished(*log) ==
        std::set<std::string>{"v1-open", "v1-trying", "v2-new"});

  SECTION("retention compacts the old transactions") {
    // A day and a bit after the fixture's: its finished ones are compacted
    // (their summaries written again, as version 2).
    REQUIRE(log->RunRetention(kLater + 24LL * 3600 * 1000).ok());
    absl::StatusOr<TxnLog> compacted = log->Read("v1-confirm");
    REQUIRE(compacted.ok());
    CHECK(compacted->summary.compacted);
    CHECK(compacted->summary.state == TxnState::kConfirmed);
    CHECK(compacted->records.empty());
    CHECK(DecidedOf(*log, "v1-trying") == std::nullopt);
  }
}

}  // namespace
}  // namespace tcc::wal::testing
