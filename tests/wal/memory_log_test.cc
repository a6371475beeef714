// What the in-memory log adds for tests: manual sync, crashes that keep a
// prefix, failure injection and the durability query.
#include "tcc/wal/memory_log.h"

#include <catch2/catch.hpp>
#include <random>

#include "log_test_util.h"

namespace tcc::wal::testing {
namespace {

struct Recorder {
  std::vector<std::pair<int, absl::Status>> done;
  AppendDone Callback(int id) {
    return [this, id](absl::Status s) { done.emplace_back(id, std::move(s)); };
  }
};

MemoryLogOptions Manual(RetentionPolicy retention = {}) {
  MemoryLogOptions options;
  options.auto_sync = false;
  options.retention = retention;
  return options;
}

bool IsDecision(const Record& r) { return std::holds_alternative<Decided>(r); }

TEST_CASE("manual sync: durable appends wait for SyncNow, in order") {
  MemoryLog log(Manual());
  Recorder rec;
  log.Append(Req("g1", {MakeRegistered("g1", 1)}), rec.Callback(1));
  log.Append(Req("g2", {MakeRegistered("g2", 1)}), rec.Callback(2));
  log.Append(
      Req("g1", {MakePhase("b0", PhaseState::kUnknown)}, Durability::kBuffered),
      rec.Callback(3));
  REQUIRE(rec.done.size() == 1);  // the buffered one, at once
  CHECK(rec.done[0].first == 3);
  CHECK(rec.done[0].second.ok());
  CHECK(log.WaitingDurable() == 2);
  CHECK(log.Unsynced() == 3);
  // Written appends are visible to reads before they are synced.
  CHECK(log.Read("g1")->records.size() == 2);
  CHECK(log.SyncedRecords("g1").empty());

  CHECK(log.SyncNow() == 2);
  REQUIRE(rec.done.size() == 3);
  CHECK(rec.done[1].first == 1);
  CHECK(rec.done[2].first == 2);
  CHECK(log.SyncedRecords("g1").size() == 2);
  CHECK(log.Unsynced() == 0);
  CHECK(log.SyncNow() == 0);
  CHECK(log.Stats().syncs == 1);
  CHECK(log.Stats().synced_appends == 2);
  CHECK(log.Stats().buffered_appends == 1);
}

TEST_CASE("IsDurable answers only for synced records") {
  MemoryLog log(Manual());
  Recorder rec;
  log.Append(Req("g1", {MakeRegistered("g1", 1)}), rec.Callback(1));
  log.SyncNow();
  log.Append(Req("g1", {MakeDecided(Decision::kConfirm)}), rec.Callback(2));
  CHECK_FALSE(log.IsDurable("g1", IsDecision));
  CHECK(log.Read("g1")->summary.decision == Decision::kConfirm);
  log.SyncNow();
  CHECK(log.IsDurable("g1", IsDecision));
  CHECK_FALSE(log.IsDurable("other", IsDecision));
}

TEST_CASE("Crash keeps synced appends plus a whole-append prefix") {
  MemoryLog log(Manual());
  Recorder rec;
  log.Append(Req("g1", {MakeRegistered("g1", 1)}), rec.Callback(1));
  log.SyncNow();
  // Three unsynced appends, the second with two records.
  log.Append(
      Req("g1", {MakePhase("b0", PhaseState::kUnknown)}, Durability::kBuffered),
      rec.Callback(2));
  log.Append(Req("g1", {MakePhase("b0", PhaseState::kSucceeded),
                        MakeDecided(Decision::kConfirm)}),
             rec.Callback(3));
  log.Append(
      Req("g1", {MakeFinished(TxnState::kConfirmed, 9)}, Durability::kBuffered),
      rec.Callback(4));
  const size_t callbacks = rec.done.size();

  SECTION("keep none") {
    log.Crash(0);
    CHECK(log.Read("g1")->records.size() == 1);
    CHECK(log.Read("g1")->summary.decision == Decision::kNone);
  }
  SECTION("keep two") {
    log.Crash(2);
    CHECK(log.Read("g1")->records.size() == 4);
    CHECK(log.Read("g1")->summary.decision == Decision::kConfirm);
    CHECK(log.Read("g1")->summary.state == TxnState::kConfirming);
    // What a crash kept is on disk now.
    CHECK(log.IsDurable("g1", IsDecision));
  }
  SECTION("keep more than there is") {
    log.Crash(100);
    CHECK(log.Read("g1")->summary.state == TxnState::kConfirmed);
  }
  // The waiting durable append's callback is never called.
  CHECK(rec.done.size() == callbacks);
  CHECK(log.Unsynced() == 0);
  CHECK(log.WaitingDurable() == 0);
  log.SyncNow();
  CHECK(rec.done.size() == callbacks);
}

TEST_CASE("owner epoch and horizon survive any crash") {
  RetentionPolicy at_once;
  at_once.full_record_ms = 0;
  at_once.compact_entry_ms = 0;
  MemoryLog log(Manual(at_once));
  Recorder rec;
  log.Append(Req("g1", {MakeRegistered("g1", 41)}), rec.Callback(1));
  log.Append(Req("g1", {MakeDecided(Decision::kCancel),
                        MakeFinished(TxnState::kCancelled, 50)}),
             rec.Callback(2));
  log.SyncNow();
  REQUIRE(log.RunRetention(60).ok());
  CHECK(log.DedupHorizonMs(0) == 42);
  const uint64_t epoch = *log.TakeOwnerEpoch(0);
  log.Crash(0);
  CHECK(log.DedupHorizonMs(0) == 42);
  CHECK(*log.TakeOwnerEpoch(0) > epoch);
  CHECK(absl::IsNotFound(log.Read("g1").status()));
}

TEST_CASE("an injected write failure fails stop until a crash") {
  MemoryLog log(Manual());
  Recorder rec;
  log.Append(Req("g1", {MakeRegistered("g1", 1)}), rec.Callback(1));
  log.InjectWriteFailure(absl::DataLossError("disk gone"));
  log.Append(Req("g2", {MakeRegistered("g2", 1)}), rec.Callback(2));
  REQUIRE(rec.done.size() == 2);
  // The waiting append and the failed one get the error, in that order.
  CHECK(rec.done[0].first == 1);
  CHECK(absl::IsDataLoss(rec.done[0].second));
  CHECK(rec.done[1].first == 2);
  CHECK(absl::IsDataLoss(rec.done[1].second));
  CHECK(absl::IsNotFound(log.Read("g2").status()));
  // Every later call is refused.
  log.Append(Req("g3", {MakeRegistered("g3", 1)}, Durability::kBuffered),
             rec.Callback(3));
  CHECK(absl::IsDataLoss(rec.done[2].second));
  log.PutApproval(Approval{}, rec.Callback(4));
  CHECK(absl::IsDataLoss(rec.done[3].second));
  CHECK(absl::IsDataLoss(log.TakeOwnerEpoch(0).status()));
  CHECK(absl::IsDataLoss(log.RunRetention(1)));
  CHECK(log.SyncNow() == 0);
  CHECK(absl::IsDataLoss(log.failure()));

  log.Crash(1);  // g1 was written: the crash may keep it
  CHECK(log.failure().ok());
  CHECK(log.Read("g1").ok());
  log.Append(Req("g3", {MakeRegistered("g3", 1)}), rec.Callback(5));
  CHECK(log.SyncNow() == 1);
  CHECK(rec.done.back().second.ok());
}

TEST_CASE("an injected sync failure fails every waiting append") {
  SECTION("manual") {
    MemoryLog log(Manual());
    Recorder rec;
    for (int i = 0; i < 5; ++i) {
      const std::string gid = "g" + std::to_string(i);
      log.Append(Req(gid, {MakeRegistered(gid, 1)}), rec.Callback(i));
    }
    log.InjectSyncFailure(absl::UnavailableError("fsync: EIO"));
    CHECK(log.SyncNow() == 0);
    REQUIRE(rec.done.size() == 5);
    for (int i = 0; i < 5; ++i) {
      CHECK(rec.done[i].first == i);
      CHECK(absl::IsUnavailable(rec.done[i].second));
    }
    CHECK(log.SyncedRecords("g0").empty());
    log.Append(Req("g9", {MakeRegistered("g9", 1)}), rec.Callback(9));
    CHECK(absl::IsUnavailable(rec.done.back().second));
  }
  SECTION("auto sync") {
    MemoryLog log;
    Recorder rec;
    log.Append(Req("g0", {MakeRegistered("g0", 1)}), rec.Callback(0));
    log.InjectSyncFailure(absl::UnavailableError("fsync: EIO"));
    log.Append(Req("g1", {MakeRegistered("g1", 1)}), rec.Callback(1));
    REQUIRE(rec.done.size() == 2);
    CHECK(rec.done[0].second.ok());
    CHECK(absl::IsUnavailable(rec.done[1].second));
    CHECK(log.IsDurable("g0", [](const Record&) { return true; }));
    CHECK_FALSE(log.IsDurable("g1", [](const Record&) { return true; }));
  }
}

TEST_CASE("the size budget compacts the oldest finished first") {
  // Measure one finished transaction's full and compact size, then allow a
  // budget that needs exactly the oldest ones compacted.
  MemoryLog sizer;
  REQUIRE(AppendAndWait(sizer, Req("f0", {MakeRegistered("f0", 100)})).ok());
  REQUIRE(AppendAndWait(sizer,
                        Req("f0", {MakeDecided(Decision::kCancel),
                                   MakeFinished(TxnState::kCancelled, 1000)}))
              .ok());
  const uint64_t full = sizer.Stats().bytes_on_disk;
  REQUIRE(sizer.RunRetention(1000 + RetentionPolicy{}.full_record_ms).ok());
  const uint64_t compact = sizer.Stats().bytes_on_disk;
  REQUIRE(compact < full);

  MemoryLogOptions options;
  options.retention.max_bytes = 7 * full + 3 * compact;
  MemoryLog log(options);
  for (int i = 0; i < 10; ++i) {
    const std::string gid = "f" + std::to_string(i);  // same sizes as f0
    REQUIRE(AppendAndWait(log, Req(gid, {MakeRegistered(gid, 100)})).ok());
    REQUIRE(AppendAndWait(log, Req(gid, {MakeDecided(Decision::kCancel),
                                         MakeFinished(TxnState::kCancelled,
                                                      1000 + 10 - i)}))
                .ok());
  }
  REQUIRE(log.RunRetention(1100).ok());
  // f9, f8, f7 finished first.
  for (int i = 0; i < 10; ++i) {
    INFO(i);
    CHECK(log.Read("f" + std::to_string(i))->summary.compacted == (i >= 7));
  }
  CHECK(log.DedupHorizonMs(0) == 0);
}

// Random histories: after a crash, every acknowledged durable append is there
// whole, and what is there is a prefix of what was written.
TEST_CASE("random crashes keep a prefix that holds every durable ack") {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 300; ++round) {
    MemoryLog log(Manual());
    Recorder rec;
    log.Append(Req("g", {MakeRegistered("g", 1)}), rec.Callback(0));
    log.SyncNow();
    rec.done.clear();
    const int appends = 1 + static_cast<int>(rng() % 30);
    std::vector<bool> durable(appends + 1, false);
    for (int seq = 1; seq <= appends; ++seq) {
      // Two records per append, both marked with its sequence number.
      PhaseUpdate p = MakePhase("b0", PhaseState::kUnknown);
      p.attempts = static_cast<uint32_t>(seq);
      const Durability d =
          rng() % 2 ? Durability::kDurable : Durability::kBuffered;
      durable[seq] = d == Durability::kDurable;
      log.Append(Req("g", {p, p}, d), rec.Callback(seq));
      if (rng() % 4 == 0) log.SyncNow();
    }
    log.Crash(rng() % (log.Unsynced() + 1));
    int max_durable_acked = 0;
    for (const auto& [id, status] : rec.done) {
      REQUIRE(status.ok());
      if (durable[id]) max_durable_acked = std::max(max_durable_acked, id);
    }
    std::vector<Record> records = log.Read("g")->records;
    REQUIRE(records.size() % 2 == 1);  // Registered + whole appends
    const int kept = static_cast<int>(records.size() / 2);
    for (int k = 0; k < kept; ++k) {
      CHECK(std::get<PhaseUpdate>(records[1 + 2 * k]).attempts == k + 1u);
      CHECK(std::get<PhaseUpdate>(records[2 + 2 * k]).attempts == k + 1u);
    }
    CHECK(kept >= max_durable_acked);
  }
}

}  // namespace
}  // namespace tcc::wal::testing
