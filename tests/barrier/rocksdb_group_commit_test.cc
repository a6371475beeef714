// RocksDbBarrierStore with group commit: Commit() returns before the sync,
// WhenDurable() answers once a sync covers everything committed before it
// (or with the sync's error), and what was committed survives a reopen.
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "barrier/internal/record_codec.h"
#include "barrier_harness.h"
#include "rocksdb/db.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::testing {
namespace {

absl::Status CommitPut(barrier::BarrierStore& store, const std::string& key) {
  auto txn = store.Begin();
  if (!txn.ok()) return txn.status();
  if (absl::Status s = (*txn)->Put(key, "1"); !s.ok()) return s;
  return (*txn)->Commit();
}

// A group-committing store at DIR/db (opened again on the same data).
std::unique_ptr<barrier::RocksDbBarrierStore> OpenGroupCommit(
    const TempDir& dir) {
  auto store = barrier::RocksDbBarrierStore::Open(
      {.path = dir.path() + "/db", .group_commit = true});
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return std::move(*store);
}

TEST_CASE("rocksdb group commit: WhenDurable answers every caller once",
          "[rocksdb]") {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  {
    auto store = barrier::RocksDbBarrierStore::Open(
        {.path = path, .group_commit = true});
    REQUIRE(store.ok());
    CHECK((*store)->groups_commits());
    std::atomic<int> answered{0};
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const std::string key =
              "k" + std::to_string(t) + "-" + std::to_string(i);
          if (!CommitPut(**store, key).ok()) ++failed;
          (*store)->WhenDurable([&](absl::Status s) {
            if (!s.ok()) ++failed;
            ++answered;
          });
        }
      });
    }
    for (auto& th : threads) th.join();
    store->reset();  // the syncer serves whoever still waits, then stops
    CHECK(answered.load() == kThreads * kPerThread);
    CHECK(failed.load() == 0);
  }
  auto reopened = barrier::RocksDbBarrierStore::Open({.path = path});
  REQUIRE(reopened.ok());
  auto txn = (*reopened)->Begin();
  REQUIRE(txn.ok());
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      auto v = (*txn)->Get("k" + std::to_string(t) + "-" + std::to_string(i));
      REQUIRE(v.ok());
      CHECK(v->has_value());
    }
  }
}

TEST_CASE("rocksdb group commit: a failed sync fails its waiters",
          "[rocksdb]") {
  TempDir dir;
  FailpointsOff off;
  auto store = OpenGroupCommit(dir);
  REQUIRE(failpoint::Configure("barrier.before_synced_commit=error").ok());
  // Commit itself does not sync (nor evaluate the failpoint) any more.
  REQUIRE(CommitPut(*store, "a").ok());
  std::atomic<bool> done{false};
  absl::Status result;
  store->WhenDurable([&](absl::Status s) {
    result = s;
    done = true;
  });
  store.reset();
  REQUIRE(done.load());
  CHECK_FALSE(result.ok());
}

TEST_CASE(
    "rocksdb group commit: after a failed sync every later one fails too "
    "(fail-stop)",
    "[rocksdb]") {
  TempDir dir;
  FailpointsOff off;
  auto store = OpenGroupCommit(dir);
  auto durable = [&]() {
    std::promise<absl::Status> p;
    auto f = p.get_future();
    store->WhenDurable([&p](absl::Status s) { p.set_value(s); });
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    return f.get();
  };
  REQUIRE(CommitPut(*store, "a").ok());
  CHECK(durable().ok());
  REQUIRE(failpoint::Configure("barrier.before_synced_commit=error").ok());
  REQUIRE(CommitPut(*store, "b").ok());
  const absl::Status failed = durable();
  CHECK(failed.code() == absl::StatusCode::kUnavailable);
  // The disk is "back": a sync would succeed now, but "b" may be lost
  // whatever it says. Nothing is reported durable any more, and nothing more
  // is committed, until the store is opened again.
  REQUIRE(failpoint::Configure("").ok());
  CHECK(durable().code() == absl::StatusCode::kUnavailable);
  const absl::Status later = CommitPut(*store, "c");
  CHECK(later.code() == absl::StatusCode::kUnavailable);
  CHECK(later.message().find("stopped after a failed write or sync") !=
        std::string::npos);
  CHECK(durable().code() == absl::StatusCode::kUnavailable);
  store.reset();
  store = OpenGroupCommit(dir);
  REQUIRE(CommitPut(*store, "d").ok());
  CHECK(durable().ok());
}

TEST_CASE("rocksdb store: a corrupt barrier record is DATA_LOSS everywhere",
          "[rocksdb]") {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  const barrier::BranchCall call = MakeCall("g", H());
  {
    auto store = barrier::RocksDbBarrierStore::Open({.path = path});
    REQUIRE(store.ok());
  }
  {
    // The record's bytes rot on disk (written here past the store).
    rocksdb::DBOptions options;
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {"tcc_barrier", rocksdb::ColumnFamilyOptions()}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, path, families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    REQUIRE(db->Put(rocksdb::WriteOptions(), handles[1],
                    barrier::internal::EncodeKey(call.key), "\x07garbage")
                .ok());
    for (auto* h : handles) REQUIRE(db->DestroyColumnFamilyHandle(h).ok());
  }
  auto store = barrier::RocksDbBarrierStore::Open({.path = path});
  REQUIRE(store.ok());
  clock::ManualClock clock(kT0);
  barrier::Barrier b(**store, clock, {kSkewMs, 60'000});
  Recorder rec;
  // Not UNAVAILABLE (which reads as "try again later"): what it is.
  CHECK(b.Try(call, rec.TryHandler()).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(b.Confirm(call, rec.PhaseTwoHandler("confirm")).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(b.Cancel(call, rec.PhaseTwoHandler("cancel")).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(b.Query(call.key).status().code() == absl::StatusCode::kDataLoss);
  CHECK(rec.TotalInvocations() == 0);
}

TEST_CASE("rocksdb store without group commit: WhenDurable answers at once",
          "[rocksdb]") {
  TempDir dir;
  auto store = barrier::RocksDbBarrierStore::Open({.path = dir.path() + "/db"});
  REQUIRE(store.ok());
  CHECK_FALSE((*store)->groups_commits());
  REQUIRE(CommitPut(**store, "a").ok());
  bool called = false;
  (*store)->WhenDurable([&](absl::Status s) {
    CHECK(s.ok());
    called = true;
  });
  CHECK(called);
}

}  // namespace
}  // namespace tcc::testing
