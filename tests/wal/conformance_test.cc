// The conformance suite: the promises of log.h, checked the same way against
// every Log implementation (log_factories.cc lists them).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "log_factories.h"
#include "log_test_util.h"

namespace tcc::wal::testing {
namespace {

const std::vector<LogFactory>& Factories() {
  static const std::vector<LogFactory> factories = LogFactories();
  return factories;
}

// Runs the test case once per implementation, with `h` a fresh log of it.
#define FOR_EACH_LOG(h, retention)                                 \
  const LogFactory& factory =                                      \
      Factories()[GENERATE(range(size_t{0}, Factories().size()))]; \
  INFO("log implementation: " << factory.name);                    \
  std::unique_ptr<LogHarness> h = factory.make(retention)

// Every shard's recovery scan in turn (the one scan of a 1-shard log), as a
// node that owns them all runs them; stops at the first error.
absl::Status ScanEveryShard(
    Log& log, const std::function<absl::Status(uint32_t, TxnLog)>& visit) {
  for (uint32_t k = 0; k < log.shard_count(); ++k) {
    absl::Status s =
        log.ScanUnfinished(k, [&](TxnLog txn) { return visit(k, txn); });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// `gids`, given in registration order, as ScanEveryShard visits them:
// shard by shard, in registration order within each.
std::vector<std::string> InScanOrder(const Log& log,
                                     std::vector<std::string> gids) {
  std::stable_sort(gids.begin(), gids.end(),
                   [&](const std::string& a, const std::string& b) {
                     return log.ShardOf(a) < log.ShardOf(b);
                   });
  return gids;
}

// The deduplication horizon of gid's shard.
int64_t HorizonOf(const Log& log, const std::string& gid) {
  return log.DedupHorizonMs(log.ShardOf(gid));
}

// A gid "<prefix><n>" of `shard`.
std::string GidOfShard(const Log& log, const std::string& prefix,
                       uint32_t shard) {
  for (int n = 0;; ++n) {
    std::string gid = prefix + std::to_string(n);
    if (log.ShardOf(gid) == shard) return gid;
  }
}

absl::Status Register(Log& log, const std::string& gid, int64_t created_at_ms,
                      std::vector<std::string> participants = {"p1"}) {
  return AppendAndWait(
      log, Req(gid, {MakeRegistered(gid, created_at_ms, participants)}));
}

// Registers, decides and finishes a transaction at `finished_at_ms`.
void RegisterFinished(Log& log, const std::string& gid, int64_t created_at_ms,
                      int64_t finished_at_ms) {
  REQUIRE(Register(log, gid, created_at_ms).ok());
  REQUIRE(AppendAndWait(log, Req(gid, {MakeDecided(Decision::kCancel),
                                       MakeFinished(TxnState::kCancelled,
                                                    finished_at_ms)}))
              .ok());
}

size_t RecordCount(Log& log, const std::string& gid) {
  absl::StatusOr<TxnLog> txn = log.Read(gid);
  REQUIRE(txn.ok());
  return txn->records.size();
}

Approval MakeApproval(const std::string& id, ApprovalAction action,
                      const std::string& gid, int64_t expires_at_ms = 5000) {
  Approval a;
  a.approval_id = id;
  a.action = action;
  a.gid = gid;
  a.revision = 7;  // as MakeRegistered
  a.content_hash = HashOf("content:" + gid);
  a.expires_at_ms = expires_at_ms;
  a.issued_by = "admin@example";
  a.issued_at_ms = 900;
  a.reason = "operator fixed it";
  return a;
}

TEST_CASE("records read back whole and in append order") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  Registered reg = MakeRegistered("g1", 100, {"stock", "pay", "stock"});
  std::vector<Record> all = {reg};
  REQUIRE(AppendAndWait(log, Req("g1", {reg})).ok());
  std::vector<Record> more = {MakePhase("b0", PhaseState::kUnknown),
                              MakePhase("b0", PhaseState::kSucceeded)};
  REQUIRE(AppendAndWait(log, Req("g1", more, Durability::kBuffered)).ok());
  all.insert(all.end(), more.begin(), more.end());
  absl::StatusOr<TxnLog> txn = log.Read("g1");
  REQUIRE(txn.ok());
  CHECK(Encoded(txn->records) == Encoded(all));
  CHECK(txn->summary.gid == "g1");
  CHECK(txn->summary.state == TxnState::kTrying);
  CHECK(txn->summary.created_at_ms == 100);
  CHECK(txn->summary.revision == 7);
  CHECK(txn->summary.content_hash == HashOf("content:g1"));
  CHECK(txn->summary.participants == std::vector<std::string>{"pay", "stock"});
  CHECK_FALSE(txn->summary.compacted);
  CHECK(absl::IsNotFound(log.Read("nope").status()));
}

TEST_CASE("an interactive transaction opens, adds branches, commits") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  Registered reg = MakeRegistered("g1", 100, {});
  reg.interactive = true;
  reg.content_hash = Hash{};
  REQUIRE(AppendAndWait(log, Req("g1", {reg})).ok());
  CHECK(log.Read("g1")->summary.state == TxnState::kOpen);
  BranchAdded added;
  added.branch = MakeRegistered("x", 1, {"ledger"}).branches[0];
  REQUIRE(AppendAndWait(log, Req("g1", {added})).ok());
  StateChanged commit;
  commit.state = TxnState::kTrying;
  commit.content_hash = HashOf("committed");
  commit.at_ms = 150;
  REQUIRE(AppendAndWait(log, Req("g1", {commit})).ok());
  TxnSummary s = log.Read("g1")->summary;
  CHECK(s.state == TxnState::kTrying);
  CHECK(s.content_hash == HashOf("committed"));
  CHECK(s.participants == std::vector<std::string>{"ledger"});
}

TEST_CASE("records appended after a reopen follow the earlier ones") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  std::vector<Record> all = {MakeRegistered("g1", 100)};
  REQUIRE(AppendAndWait(h->log(), Req("g1", {all[0]})).ok());
  for (int round = 0; round < 3; ++round) {
    for (uint32_t i = 0; i < 5; ++i) {
      PhaseUpdate p = MakePhase("b0", PhaseState::kUnknown);
      p.attempts = round * 10 + i;
      all.push_back(p);
      REQUIRE(AppendAndWait(h->log(), Req("g1", {p},
                                          round == 1 ? Durability::kBuffered
                                                     : Durability::kDurable))
                  .ok());
    }
    h->Reopen();
    absl::StatusOr<TxnLog> txn = h->log().Read("g1");
    REQUIRE(txn.ok());
    CHECK(Encoded(txn->records) == Encoded(all));
  }
  REQUIRE(AppendAndWait(h->log(),
                        Req("g1", {MakeDecided(Decision::kCancel),
                                   MakeFinished(TxnState::kCancelled, 9)}))
              .ok());
  h->Reopen();
  CHECK(h->log().Read("g1")->records.size() == all.size() + 2);
  CHECK(h->log().Read("g1")->summary.state == TxnState::kCancelled);
}

TEST_CASE("registering a gid twice is ALREADY_EXISTS and writes nothing") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  absl::Status again = Register(log, "g1", 200);
  CHECK(absl::IsAlreadyExists(again));
  CHECK(RecordCount(log, "g1") == 1);
  CHECK(log.Read("g1")->summary.created_at_ms == 100);
}

TEST_CASE("records for an unknown gid are NOT_FOUND") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  CHECK(absl::IsNotFound(AppendAndWait(
      log, Req("ghost", {MakePhase("b0", PhaseState::kUnknown)}))));
  CHECK(absl::IsNotFound(
      AppendAndWait(log, Req("ghost", {MakeDecided(Decision::kCancel)}))));
  CHECK(absl::IsNotFound(log.Read("ghost").status()));
}

TEST_CASE("malformed appends are INVALID_ARGUMENT and write nothing") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  CHECK(absl::IsInvalidArgument(AppendAndWait(log, Req("g1", {}))));
  CHECK(absl::IsInvalidArgument(
      AppendAndWait(log, Req("g1", {MakeRegistered("other", 1)}))));
  CHECK(absl::IsInvalidArgument(
      AppendAndWait(log, Req("bad/gid", {MakeRegistered("bad/gid", 1)}))));
  REQUIRE(Register(log, "g1", 100).ok());
  CHECK(absl::IsInvalidArgument(
      AppendAndWait(log, Req("g1", {MakePhase("b0", PhaseState::kUnknown),
                                    MakeRegistered("g1", 1)}))));
  CHECK(absl::IsInvalidArgument(
      AppendAndWait(log, Req("g1", {MakeDecided(Decision::kNone)}))));
  CHECK(absl::IsInvalidArgument(
      AppendAndWait(log, Req("g1", {MakeFinished(TxnState::kTrying, 5)}))));
  CHECK(RecordCount(log, "g1") == 1);
}

TEST_CASE("a decision is written once; the same one again is accepted") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  REQUIRE(
      AppendAndWait(log, Req("g1", {MakeDecided(Decision::kConfirm)})).ok());
  CHECK(log.Read("g1")->summary.state == TxnState::kConfirming);
  CHECK(log.Read("g1")->summary.decision == Decision::kConfirm);

  // A different decision, even bundled with other records, writes nothing.
  absl::Status other =
      AppendAndWait(log, Req("g1", {MakePhase("b0", PhaseState::kSucceeded),
                                    MakeDecided(Decision::kCancel)}));
  CHECK(absl::IsFailedPrecondition(other));
  CHECK(RecordCount(log, "g1") == 2);
  CHECK(absl::IsFailedPrecondition(
      AppendAndWait(log, Req("g1", {MakeFinished(TxnState::kCancelled, 9)}))));

  CHECK(AppendAndWait(log, Req("g1", {MakeDecided(Decision::kConfirm)})).ok());
  CHECK(log.Read("g1")->summary.decision == Decision::kConfirm);

  // After a reopen the decision still stands.
  h->Reopen();
  CHECK(absl::IsFailedPrecondition(
      AppendAndWait(h->log(), Req("g1", {MakeDecided(Decision::kCancel)}))));
  CHECK(h->log().Read("g1")->summary.decision == Decision::kConfirm);
}

TEST_CASE("two concurrent different decisions: exactly one stands") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  for (int round = 0; round < 20; ++round) {
    const std::string gid = "race" + std::to_string(round);
    REQUIRE(Register(log, gid, 100).ok());
    absl::Status a, b;
    std::thread ta([&] {
      a = AppendAndWait(log, Req(gid, {MakeDecided(Decision::kConfirm)}));
    });
    std::thread tb([&] {
      b = AppendAndWait(log, Req(gid, {MakeDecided(Decision::kCancel)}));
    });
    ta.join();
    tb.join();
    REQUIRE(a.ok() != b.ok());
    CHECK((absl::IsFailedPrecondition(a) || absl::IsFailedPrecondition(b)));
    CHECK(log.Read(gid)->summary.decision ==
          (a.ok() ? Decision::kConfirm : Decision::kCancel));
  }
}

TEST_CASE("a decided transaction can't go back or add branches") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  REQUIRE(AppendAndWait(log, Req("g1", {MakeDecided(Decision::kCancel)})).ok());
  StateChanged back;
  back.state = TxnState::kTrying;
  CHECK(absl::IsFailedPrecondition(AppendAndWait(log, Req("g1", {back}))));
  BranchAdded added;
  added.branch = MakeRegistered("x", 1).branches[0];
  CHECK(absl::IsFailedPrecondition(AppendAndWait(log, Req("g1", {added}))));
  StateChanged to_decision;
  to_decision.state = TxnState::kConfirming;
  CHECK(absl::IsInvalidArgument(AppendAndWait(log, Req("g1", {to_decision}))));
}

TEST_CASE("summaries follow the records") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100, {"b", "a"}).ok());
  StateChanged gate;
  gate.state = TxnState::kAwaitingApproval;
  REQUIRE(AppendAndWait(log, Req("g1", {gate})).ok());
  CHECK(log.Read("g1")->summary.state == TxnState::kAwaitingApproval);
  REQUIRE(
      AppendAndWait(log, Req("g1", {MakeDecided(Decision::kConfirm)})).ok());
  CHECK(log.Read("g1")->summary.finished_at_ms == 0);
  REQUIRE(
      AppendAndWait(log, Req("g1", {MakeFinished(TxnState::kConfirmed, 4321)},
                             Durability::kBuffered))
          .ok());
  TxnSummary s = log.Read("g1")->summary;
  CHECK(s.state == TxnState::kConfirmed);
  CHECK(s.decision == Decision::kConfirm);
  CHECK(s.finished_at_ms == 4321);
  CHECK(s.participants == std::vector<std::string>{"a", "b"});
  CHECK(h->log().Stats().unfinished == 0);
  h->Reopen();
  TxnSummary after = h->log().Read("g1")->summary;
  CHECK(after.state == TxnState::kConfirmed);
  CHECK(after.finished_at_ms == 4321);
  CHECK(after.participants == std::vector<std::string>{"a", "b"});
}

TEST_CASE("List pages through every match, oldest registration first") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  // 25 transactions registered at 1000, 1010, ...; every third finished;
  // the even ones also call participant "ledger".
  for (int i = 0; i < 25; ++i) {
    const std::string gid = "g" + std::to_string(100 - i);  // not in time order
    std::vector<std::string> parts = {"stock"};
    if (i % 2 == 0) parts.push_back("ledger");
    REQUIRE(AppendAndWait(log,
                          Req(gid, {MakeRegistered(gid, 1000 + 10 * i, parts)}))
                .ok());
    if (i % 3 == 0) {
      REQUIRE(AppendAndWait(
                  log, Req(gid, {MakeDecided(Decision::kCancel),
                                 MakeFinished(TxnState::kCancelled, 5000)}))
                  .ok());
    }
  }
  auto all_pages = [&](ListQuery q) {
    std::vector<std::string> gids;
    std::vector<int64_t> times;
    int pages = 0;
    while (true) {
      absl::StatusOr<ListPage> page = log.List(q);
      REQUIRE(page.ok());
      REQUIRE(page->items.size() <= q.page_size);
      ++pages;
      for (const TxnSummary& s : page->items) {
        gids.push_back(s.gid);
        times.push_back(s.registered_at_ms);
      }
      if (page->next_page_token.empty()) break;
      q.page_token = page->next_page_token;
      REQUIRE(pages < 100);
    }
    CHECK(std::is_sorted(times.begin(), times.end()));
    return std::make_pair(gids, pages);
  };
  ListQuery q;
  q.page_size = 10;
  auto [everything, pages] = all_pages(q);
  CHECK(everything.size() == 25);
  CHECK(pages == 3);
  CHECK(everything.front() == "g100");

  q.states = {TxnState::kCancelled};
  CHECK(all_pages(q).first.size() == 9);  // i = 0, 3, ..., 24
  q.states = {TxnState::kTrying, TxnState::kCancelled};
  CHECK(all_pages(q).first.size() == 25);
  q.states = {};
  q.participant = "ledger";
  CHECK(all_pages(q).first.size() == 13);
  q.participant = "";
  q.registered_before_ms = 1050;  // i = 0..4
  CHECK(all_pages(q).first ==
        std::vector<std::string>{"g100", "g99", "g98", "g97", "g96"});
  // Exactly one full page: no token.
  q.page_size = 5;
  absl::StatusOr<ListPage> exact = log.List(q);
  REQUIRE(exact.ok());
  CHECK(exact->items.size() == 5);
  CHECK(exact->next_page_token.empty());

  // A page examines at most scan_budget transactions: a selective filter
  // gets short (or empty) pages with a token, and paging still finds all.
  q = ListQuery{};
  q.page_size = 10;
  q.scan_budget = 2;
  q.states = {TxnState::kCancelled};
  absl::StatusOr<ListPage> first = log.List(q);
  REQUIRE(first.ok());
  CHECK(first->items.size() == 1);  // g100 (cancelled), g99 (trying)
  CHECK_FALSE(first->next_page_token.empty());
  auto [cancelled, budget_pages] = all_pages(q);
  CHECK(cancelled.size() == 9);
  CHECK(budget_pages >= 12);
  q.states = {};
  q.scan_budget = 4;
  q.participant = "ledger";
  CHECK(all_pages(q).first.size() == 13);

  ListQuery bad;
  bad.scan_budget = 0;
  CHECK(absl::IsInvalidArgument(log.List(bad).status()));
  bad.scan_budget = 10000;
  bad.page_size = 0;
  CHECK(absl::IsInvalidArgument(log.List(bad).status()));
  bad.page_size = 1001;
  CHECK(absl::IsInvalidArgument(log.List(bad).status()));
  bad.page_size = 10;
  bad.page_token = "garbage";
  CHECK(absl::IsInvalidArgument(log.List(bad).status()));
}

TEST_CASE(
    "ScanUnfinished: a long scan sees one view, each transaction once, while "
    "the log changes under it") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  constexpr int kTxns = 700;  // several of the scan's batches
  for (int i = 0; i < kTxns; ++i) {
    REQUIRE(Register(log, "s" + std::to_string(i), 10000 + i).ok());
  }
  // Registration times by shard, as visited; and what changed under the
  // scan of the shard it was in.
  std::map<uint32_t, std::vector<int64_t>> times;
  std::set<std::string> seen;
  std::string late, finished;
  REQUIRE(ScanEveryShard(log, [&](uint32_t shard, TxnLog txn) {
            times[shard].push_back(txn.summary.registered_at_ms);
            seen.insert(txn.summary.gid);
            if (seen.size() == 300) {
              // Between visits: a new one registers in this shard, and
              // the shard's last one, not yet visited, finishes. The
              // shard's scan has one view, from before both.
              late = GidOfShard(log, "late", shard);
              for (int i = kTxns - 1; i >= 0 && finished.empty(); --i) {
                const std::string gid = "s" + std::to_string(i);
                if (log.ShardOf(gid) == shard) finished = gid;
              }
              CHECK(finished != txn.summary.gid);
              CHECK(Register(log, late, 20000).ok());
              CHECK(AppendAndWait(
                        log, Req(finished,
                                 {MakeDecided(Decision::kConfirm),
                                  MakeFinished(TxnState::kConfirmed, 30000)}))
                        .ok());
            }
            return absl::OkStatus();
          }).ok());
  size_t visits = 0;
  for (const auto& [shard, in_shard] : times) {
    visits += in_shard.size();
    CHECK(std::is_sorted(in_shard.begin(), in_shard.end()));
  }
  CHECK(visits == kTxns);
  CHECK(seen.size() == kTxns);
  REQUIRE(!late.empty());
  CHECK(seen.count(late) == 0);
  CHECK(seen.count(finished) == 1);
}

TEST_CASE("ScanUnfinished visits every unfinished transaction in order") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  if (factory.tracks_oldest_unfinished) {
    CHECK(log.Stats().oldest_unfinished_registered_ms == 0);  // none yet
  }
  for (int i = 0; i < 10; ++i) {
    const std::string gid = "g" + std::to_string(i);
    REQUIRE(Register(log, gid, 2000 - 100 * i).ok());
    REQUIRE(AppendAndWait(log, Req(gid, {MakePhase("b0", PhaseState::kUnknown)},
                                   Durability::kBuffered))
                .ok());
  }
  for (int i : {1, 4, 7}) {
    const std::string gid = "g" + std::to_string(i);
    REQUIRE(
        AppendAndWait(log, Req(gid, {MakeDecided(Decision::kConfirm),
                                     MakeFinished(TxnState::kConfirmed, 3000)}))
            .ok());
  }
  REQUIRE(AppendAndWait(log, Req("g2", {MakeDecided(Decision::kCancel)})).ok());
  std::vector<std::string> seen;
  REQUIRE(ScanEveryShard(log, [&](uint32_t, TxnLog txn) {
            seen.push_back(txn.summary.gid);
            CHECK(txn.records.size() >= 2);
            return absl::OkStatus();
          }).ok());
  CHECK(seen == InScanOrder(log, {"g9", "g8", "g6", "g5", "g3", "g2", "g0"}));
  CHECK(log.Stats().unfinished == 7);
  if (factory.tracks_oldest_unfinished) {
    CHECK(log.Stats().oldest_unfinished_registered_ms == 1100);  // g9
  }

  int visits = 0;
  absl::Status stop = ScanEveryShard(log, [&](uint32_t, TxnLog) {
    return ++visits == 3 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  CHECK(absl::IsCancelled(stop));
  CHECK(visits == 3);
}

TEST_CASE("the oldest unfinished registration follows every change") {
  // RocksDbLog seeks it from where it last found it (rocksdb_log.cc,
  // stats_from_ms_): registrations out of time order, finishes of the
  // oldest, none left, and reopens must all still give the right one.
  FOR_EACH_LOG(h, RetentionPolicy{});
  if (!factory.tracks_oldest_unfinished) return;
  auto oldest = [&] {
    return h->log().Stats().oldest_unfinished_registered_ms;
  };
  auto finish = [&](const std::string& gid) {
    REQUIRE(AppendAndWait(h->log(),
                          Req(gid, {MakeDecided(Decision::kCancel),
                                    MakeFinished(TxnState::kCancelled, 9000)}))
                .ok());
  };
  // Many finished before the first unfinished one.
  for (int i = 0; i < 200; ++i) {
    RegisterFinished(h->log(), "f" + std::to_string(i), 100 + i, 8000);
  }
  CHECK(oldest() == 0);
  REQUIRE(Register(h->log(), "g5000", 5000).ok());
  CHECK(oldest() == 5000);
  REQUIRE(Register(h->log(), "g4000", 4000).ok());  // registered later, older
  CHECK(oldest() == 4000);
  REQUIRE(Register(h->log(), "g6000", 6000).ok());
  CHECK(oldest() == 4000);
  finish("g4000");
  CHECK(oldest() == 5000);
  REQUIRE(Register(h->log(), "g4500", 4500).ok());  // behind the last found
  CHECK(oldest() == 4500);
  finish("g4500");
  finish("g5000");
  CHECK(oldest() == 6000);
  h->Reopen();
  CHECK(oldest() == 6000);
  finish("g6000");
  CHECK(oldest() == 0);
  REQUIRE(Register(h->log(), "g3000", 3000).ok());  // after none, older
  CHECK(oldest() == 3000);
  h->Reopen();
  CHECK(oldest() == 3000);
  REQUIRE(Register(h->log(), "g2000", 2000).ok());
  CHECK(oldest() == 2000);
}

TEST_CASE("owner epochs grow, across reopens too") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  absl::StatusOr<uint64_t> e1 = h->log().TakeOwnerEpoch(0);
  absl::StatusOr<uint64_t> e2 = h->log().TakeOwnerEpoch(0);
  REQUIRE(e1.ok());
  REQUIRE(e2.ok());
  CHECK(*e2 > *e1);
  h->Reopen();
  absl::StatusOr<uint64_t> e3 = h->log().TakeOwnerEpoch(0);
  REQUIRE(e3.ok());
  CHECK(*e3 > *e2);
}

TEST_CASE("approvals: stored once, read back") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  Approval a = MakeApproval("ap1", ApprovalAction::kForceCancel, "g1");
  REQUIRE(PutApprovalAndWait(log, a).ok());
  CHECK(absl::IsAlreadyExists(PutApprovalAndWait(log, a)));
  absl::StatusOr<Approval> read = log.ReadApproval("ap1");
  REQUIRE(read.ok());
  CHECK(read->gid == "g1");
  CHECK(read->issued_by == "admin@example");
  CHECK(read->used_at_ms == 0);
  CHECK(absl::IsNotFound(log.ReadApproval("nope").status()));
  Approval used = a;
  used.approval_id = "ap2";
  used.used_at_ms = 5;
  CHECK(absl::IsInvalidArgument(PutApprovalAndWait(log, used)));
}

TEST_CASE("a matching approval is consumed with the decision it allows") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  REQUIRE(PutApprovalAndWait(
              log, MakeApproval("ap1", ApprovalAction::kForceCancel, "g1"))
              .ok());
  Decided d = MakeDecided(Decision::kCancel, 1500);
  d.approval_id = "ap1";
  REQUIRE(AppendAndWait(log, Req("g1", {d})).ok());
  CHECK(log.ReadApproval("ap1")->used_at_ms == 1500);
  CHECK(log.Read("g1")->summary.decision == Decision::kCancel);

  // Used: the same decision again naming it is refused, nothing written.
  const size_t before = RecordCount(log, "g1");
  CHECK(absl::IsFailedPrecondition(AppendAndWait(log, Req("g1", {d}))));
  CHECK(RecordCount(log, "g1") == before);

  // A reopen neither loses the use nor makes it usable again.
  h->Reopen();
  CHECK(h->log().ReadApproval("ap1")->used_at_ms == 1500);
  CHECK(absl::IsFailedPrecondition(AppendAndWait(h->log(), Req("g1", {d}))));
}

TEST_CASE("the gate approval confirms; resolve-branch approvals resolve") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  REQUIRE(PutApprovalAndWait(
              log, MakeApproval("gate", ApprovalAction::kGateApprove, "g1"))
              .ok());
  Approval resolve = MakeApproval("fix", ApprovalAction::kResolveBranch, "g1");
  resolve.branch_id = "b0";
  REQUIRE(PutApprovalAndWait(log, resolve).ok());
  BranchResolved r;
  r.branch_id = "b0";
  r.approval_id = "fix";
  r.at_ms = 1200;
  // Before a decision there is no phase-2 branch to resolve.
  CHECK(absl::IsFailedPrecondition(AppendAndWait(log, Req("g1", {r}))));
  Decided d = MakeDecided(Decision::kConfirm, 1100);
  d.approval_id = "gate";
  REQUIRE(AppendAndWait(log, Req("g1", {d})).ok());
  CHECK(log.ReadApproval("gate")->used_at_ms == 1100);
  BranchResolved wrong_branch = r;
  wrong_branch.branch_id = "b9";
  CHECK(absl::IsFailedPrecondition(
      AppendAndWait(log, Req("g1", {wrong_branch}))));
  CHECK(AppendAndWait(log, Req("g1", {r})).ok());
  CHECK(log.ReadApproval("fix")->used_at_ms == 1200);
}

TEST_CASE("an approval that does not match exactly is refused, unused") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  REQUIRE(Register(log, "g1", 100).ok());
  REQUIRE(Register(log, "g2", 100).ok());
  struct Case {
    const char* what;
    Approval approval;
    int64_t at_ms;
    const char* says;  // in the error message
  };
  auto base = [] {
    return MakeApproval("ap", ApprovalAction::kForceCancel, "g1", 5000);
  };
  std::vector<Case> cases;
  {
    Approval a = base();
    a.gid = "g2";
    a.content_hash = HashOf("content:g1");
    cases.push_back({"other gid", a, 1000, "is for another gid"});
  }
  {
    Approval a = base();
    a.revision = 8;
    cases.push_back({"other revision", a, 1000, "is for another revision"});
  }
  {
    Approval a = base();
    a.content_hash = HashOf("something else");
    cases.push_back(
        {"other content hash", a, 1000, "is for another content hash"});
  }
  {
    Approval a = base();
    a.action = ApprovalAction::kForceConfirm;
    cases.push_back(
        {"other action", a, 1000, "is for force-confirm, not force-cancel"});
  }
  {
    Approval a = base();
    a.action = ApprovalAction::kResolveBranch;
    a.branch_id = "b0";
    cases.push_back({"a branch approval", a, 1000,
                     "is for resolve-branch, not force-cancel"});
  }
  cases.push_back({"expired", base(), 5000, "expired at 5000"});
  cases.push_back({"long expired", base(), 9000, "expired at 5000"});
  int n = 0;
  for (Case& c : cases) {
    INFO(c.what);
    c.approval.approval_id = "ap" + std::to_string(n++);
    REQUIRE(PutApprovalAndWait(log, c.approval).ok());
    Decided d = MakeDecided(Decision::kCancel, c.at_ms);
    d.approval_id = c.approval.approval_id;
    absl::Status st = AppendAndWait(log, Req("g1", {d}));
    CHECK(absl::IsFailedPrecondition(st));
    CHECK_THAT(std::string(st.message()), Catch::Contains(c.says));
    CHECK(log.ReadApproval(c.approval.approval_id)->used_at_ms == 0);
  }
  Decided missing = MakeDecided(Decision::kCancel, 1000);
  missing.approval_id = "never-issued";
  CHECK(absl::IsFailedPrecondition(AppendAndWait(log, Req("g1", {missing}))));
  CHECK(RecordCount(log, "g1") == 1);
  CHECK(log.Read("g1")->summary.decision == Decision::kNone);
}

TEST_CASE("two concurrent uses of one approval: exactly one wins") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  for (int round = 0; round < 20; ++round) {
    const std::string gid = "g" + std::to_string(round);
    const std::string id = "ap" + std::to_string(round);
    REQUIRE(Register(log, gid, 100).ok());
    REQUIRE(PutApprovalAndWait(
                log, MakeApproval(id, ApprovalAction::kForceCancel, gid))
                .ok());
    Decided d = MakeDecided(Decision::kCancel, 1000);
    d.approval_id = id;
    std::atomic<int> wins{0};
    std::atomic<int> refused{0};
    auto use = [&] {
      absl::Status s = AppendAndWait(log, Req(gid, {d}));
      if (s.ok()) ++wins;
      if (absl::IsFailedPrecondition(s)) ++refused;
    };
    std::thread t1(use), t2(use);
    t1.join();
    t2.join();
    CHECK(wins == 1);
    CHECK(refused == 1);
  }
}

TEST_CASE("retention compacts, then forgets, and raises the horizon") {
  RetentionPolicy policy;
  policy.full_record_ms = 1000;
  policy.compact_entry_ms = 5000;
  FOR_EACH_LOG(h, policy);
  Log& log = h->log();
  CHECK(HorizonOf(log, "old") == 0);
  RegisterFinished(log, "old", 500, 10000);
  RegisterFinished(log, "young", 700, 12000);
  REQUIRE(Register(log, "open", 100).ok());  // never removed

  REQUIRE(log.RunRetention(10999).ok());
  CHECK_FALSE(log.Read("old")->summary.compacted);
  REQUIRE(log.RunRetention(11000).ok());
  absl::StatusOr<TxnLog> old = log.Read("old");
  REQUIRE(old.ok());
  CHECK(old->summary.compacted);
  CHECK(old->records.empty());
  CHECK(old->summary.decision == Decision::kCancel);
  CHECK(old->summary.content_hash == HashOf("content:old"));
  CHECK(old->summary.created_at_ms == 500);
  CHECK(HorizonOf(log, "old") == 0);
  // A compacted transaction takes no more records.
  CHECK(absl::IsFailedPrecondition(AppendAndWait(
      log, Req("old", {MakePhase("b0", PhaseState::kSucceeded)}))));

  REQUIRE(log.RunRetention(15000).ok());
  CHECK(absl::IsNotFound(log.Read("old").status()));
  CHECK(HorizonOf(log, "old") == 501);
  CHECK(log.Read("young")->summary.compacted);
  CHECK(log.Read("open").ok());

  // Never back: not with an earlier clock, not after a reopen.
  REQUIRE(log.RunRetention(100).ok());
  CHECK(HorizonOf(log, "old") == 501);
  h->Reopen();
  CHECK(HorizonOf(h->log(), "old") == 501);
  CHECK(absl::IsNotFound(h->log().Read("old").status()));
  REQUIRE(h->log().RunRetention(17000).ok());
  CHECK(HorizonOf(h->log(), "young") == 701);
  // (In another shard than young's, old's stays where old put it.)
  CHECK(HorizonOf(h->log(), "old") ==
        (h->log().ShardOf("old") == h->log().ShardOf("young") ? 701 : 501));
  CHECK(h->log().Read("open").ok());
  CHECK(h->log().Stats().dedup_horizon_ms == 701);
  // A forgotten gid can be registered again (a new incarnation).
  CHECK(Register(h->log(), "old", 20000).ok());
}

TEST_CASE("without a size budget, retention keeps what time keeps") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  for (int i = 0; i < 5; ++i) {
    RegisterFinished(log, "f" + std::to_string(i), 100 + i, 1000 + i);
  }
  REQUIRE(log.RunRetention(2000).ok());
  REQUIRE(log.Read("f0").ok());
  CHECK_FALSE(log.Read("f0")->summary.compacted);
  for (uint32_t k = 0; k < log.shard_count(); ++k) {
    CHECK(log.DedupHorizonMs(k) == 0);
  }
}

TEST_CASE("the size budget removes finished transactions, never open ones") {
  RetentionPolicy tight;
  tight.max_bytes = 1;  // everything finished must go
  FOR_EACH_LOG(h, tight);
  Log& log = h->log();
  REQUIRE(Register(log, "open0", 1).ok());
  for (int i = 0; i < 20; ++i) {
    RegisterFinished(log, "f" + std::to_string(i), 100 + i, 1000 + i);
  }
  REQUIRE(log.RunRetention(2000).ok());
  for (int i = 0; i < 20; ++i) {
    CHECK(absl::IsNotFound(log.Read("f" + std::to_string(i)).status()));
  }
  CHECK(log.Read("open0").ok());
  CHECK(HorizonOf(log, "f19") == 120);  // the newest of its shard
}

TEST_CASE("appends of many gids from many threads all land") {
  FOR_EACH_LOG(h, RetentionPolicy{});
  Log& log = h->log();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 25; ++i) {
        const std::string gid =
            "t" + std::to_string(t) + "-" + std::to_string(i);
        CHECK(AppendAndWait(log, Req(gid, {MakeRegistered(gid, 100)})).ok());
        CHECK(
            AppendAndWait(log, Req(gid, {MakePhase("b0", PhaseState::kUnknown)},
                                   Durability::kBuffered))
                .ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ListQuery q;
  q.page_size = 1000;
  CHECK(log.List(q)->items.size() == 200);
  CHECK(RecordCount(log, "t3-7") == 2);
}

// Issues every append of `requests` at once (so that they share groups) and
// returns each one's status code, in order.
std::vector<absl::StatusCode> AppendAll(Log& log,
                                        std::vector<AppendRequest> requests) {
  std::vector<std::future<absl::Status>> results;
  for (AppendRequest& request : requests) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    results.push_back(promise->get_future());
    log.Append(std::move(request),
               [promise](absl::Status s) { promise->set_value(std::move(s)); });
  }
  std::vector<absl::StatusCode> codes;
  for (std::future<absl::Status>& r : results) codes.push_back(r.get().code());
  return codes;
}

// What a log says of `gid`: its summary and records, or why not.
std::string Describe(Log& log, const std::string& gid) {
  absl::StatusOr<TxnLog> txn = log.Read(gid);
  if (!txn.ok()) return txn.status().ToString();
  const TxnSummary& s = txn->summary;
  std::string out = internal::EncodeSummary(s);
  for (const std::string& r : Encoded(txn->records)) out += "|" + r;
  return out;
}

TEST_CASE("a log reopened mid-way answers every append as one never closed") {
  // The RocksDB log's writer decides appends from an in-memory index that
  // is rebuilt from disk after a reopen: the two must agree, and agree with
  // the in-memory log (the model, never reopened here).
  RetentionPolicy policy;
  policy.full_record_ms = 1000;
  policy.compact_entry_ms = 5000;
  const LogFactory& factory =
      Factories()[GENERATE(range(size_t{0}, Factories().size()))];
  INFO("log implementation: " << factory.name);
  std::unique_ptr<LogHarness> kept = factory.make(policy);
  std::unique_ptr<LogHarness> reopened = factory.make(policy);
  REQUIRE(Factories()[0].name == "memory");
  std::unique_ptr<LogHarness> model = Factories()[0].make(policy);
  constexpr int kGids = 40;
  auto gid = [](int i) { return "g" + std::to_string(i); };

  std::vector<AppendRequest> first;
  for (int i = 0; i < kGids; ++i) {
    first.push_back(Req(gid(i), {MakeRegistered(gid(i), 100 + i)}));
    first.push_back(Req(gid(i), {MakePhase("b0", PhaseState::kUnknown, i)},
                        Durability::kBuffered));
    if (i % 4 == 0) {
      first.push_back(Req(gid(i), {MakeRegistered(gid(i), 100 + i)}));
    }
    if (i % 3 == 0) {
      first.push_back(
          Req(gid(i), {MakeDecided(Decision::kCancel),
                       MakeFinished(TxnState::kCancelled, 10000 + i)}));
    }
    if (i % 5 == 0) {
      first.push_back(Req(gid(i), {MakeDecided(Decision::kConfirm)}));
    }
    first.push_back(Req("unknown" + std::to_string(i),
                        {MakePhase("b0", PhaseState::kUnknown)}));
  }
  const std::vector<absl::StatusCode> first_codes =
      AppendAll(model->log(), first);
  CHECK(AppendAll(kept->log(), first) == first_codes);
  CHECK(AppendAll(reopened->log(), first) == first_codes);
  for (LogHarness* h : {model.get(), kept.get(), reopened.get()}) {
    REQUIRE(h->log().RunRetention(11020).ok());  // compacts i <= 20
    REQUIRE(h->log().RunRetention(15010).ok());  // forgets i <= 10
  }
  reopened->Reopen();

  std::vector<AppendRequest> second;
  for (int i = 0; i < kGids; ++i) {
    second.push_back(Req(gid(i), {MakePhase("b0", PhaseState::kSucceeded, i)}));
    second.push_back(Req(gid(i), {MakeRegistered(gid(i), 20000 + i)}));
    second.push_back(Req(gid(i), {MakeDecided(Decision::kConfirm)}));
    second.push_back(
        Req(gid(i), {MakeFinished(TxnState::kConfirmed, 20000 + i)}));
    second.push_back(Req(gid(i), {MakeDecided(Decision::kCancel)}));
  }
  const std::vector<absl::StatusCode> second_codes =
      AppendAll(model->log(), second);
  CHECK(AppendAll(kept->log(), second) == second_codes);
  CHECK(AppendAll(reopened->log(), second) == second_codes);
  // Every kind of answer came up (the cases are all exercised).
  for (absl::StatusCode code :
       {absl::StatusCode::kOk, absl::StatusCode::kAlreadyExists,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kNotFound}) {
    CHECK(std::count(first_codes.begin(), first_codes.end(), code) +
              std::count(second_codes.begin(), second_codes.end(), code) >
          0);
  }
  reopened->Reopen();
  for (int i = 0; i < kGids; ++i) {
    INFO("gid " << gid(i));
    const std::string expected = Describe(model->log(), gid(i));
    CHECK(Describe(kept->log(), gid(i)) == expected);
    CHECK(Describe(reopened->log(), gid(i)) == expected);
  }
  ListQuery q;
  q.page_size = 1000;
  for (LogHarness* h : {kept.get(), reopened.get()}) {
    CHECK(h->log().List(q)->items.size() == model->log().List(q)->items.size());
    CHECK(h->log().Stats().unfinished == model->log().Stats().unfinished);
  }
}

}  // namespace
}  // namespace tcc::wal::testing
