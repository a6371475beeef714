// Group commit in the RocksDB log: appends that wait together share one
// sync; the queue is bounded; buffered appends ride along.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "fault_injection_fs.h"
#include "log_test_util.h"
#include "tcc/wal/rocksdb_log.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

// Holds the first sync after Arm() until Release(), and says when it got
// there, so a test can queue work behind a sync in flight.
class SyncGate {
 public:
  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
  }
  void OnSync() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!armed_) return;
    armed_ = false;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !held_; });
  }
  void AwaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool held_ = false;
};

struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<absl::Status> results;
  AppendDone Callback() {
    return [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(s));
      cv.notify_all();
    };
  }
  void AwaitCount(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return results.size() >= n; });
  }
};

struct GatedLog {
  TempDir dir;
  std::shared_ptr<FaultInjectionFs> fs = std::make_shared<FaultInjectionFs>();
  SyncGate gate;
  std::unique_ptr<RocksDbLog> log;

  explicit GatedLog(size_t max_queued = 100000) {
    fs->SetSyncDelay([this] { gate.OnSync(); });
    RocksDbLogOptions options;
    options.data_dir = dir.str();
    options.file_system = fs;
    options.max_queued = max_queued;
    absl::StatusOr<std::unique_ptr<RocksDbLog>> opened =
        RocksDbLog::Open(options);
    REQUIRE(opened.ok());
    log = *std::move(opened);
  }
};

// Appends from a thread of its own into an idle log, which that thread then
// writes itself, and holds it inside the append's completion callback until
// `gate` is released: it is the writer meanwhile. Returns once it holds.
std::thread HoldInlineWriter(Log* log, SyncGate& gate) {
  gate.Arm();
  std::thread first([log, &gate] {
    log->Append(
        Req("first", {MakeRegistered("first", 1)}, Durability::kBuffered),
        [&gate](absl::Status s) {
          CHECK(s.ok());
          gate.OnSync();
        });
  });
  gate.AwaitHeld();
  return first;
}

TEST_CASE("appends that wait together share one write and one sync") {
  GatedLog g;
  // Hold the writer while 100 appends queue up behind it.
  SyncGate writer_gate;
  std::thread first = HoldInlineWriter(g.log.get(), writer_gate);
  Completions done;
  for (int i = 0; i < 100; ++i) {
    const std::string gid = "g" + std::to_string(i);
    g.log->Append(
        Req(gid, {MakeRegistered(gid, 1)},
            i % 4 == 3 ? Durability::kBuffered : Durability::kDurable),
        done.Callback());
  }
  {
    std::lock_guard<std::mutex> lock(done.mu);
    CHECK(done.results.empty());
  }
  writer_gate.Release();
  first.join();
  done.AwaitCount(100);
  for (const absl::Status& s : done.results) CHECK(s.ok());
  const LogStats stats = g.log->Stats();
  CHECK(stats.syncs == 1);  // one for all 75 durable appends
  CHECK(stats.synced_appends == 75);
  CHECK(stats.buffered_appends == 26);
  CHECK(g.log->MeanGroupSize() == Approx(75.0));
}

TEST_CASE("closing while an appending thread writes its own append ends") {
  // The log closes while an appending thread writes its own append: the
  // writer thread, told to stop meanwhile, must still be woken once that
  // write ends (CI once saw a graceful stop of tccd hang here).
  GatedLog g;
  SyncGate writer_gate;
  std::thread first = HoldInlineWriter(g.log.get(), writer_gate);
  std::promise<void> closed;
  std::future<void> closed_future = closed.get_future();
  std::thread closer([&] {
    delete g.log.release();
    closed.set_value();
  });
  // Long enough for the close to tell the writer thread to stop (an append
  // sent now to look would be queued, and a queued append wakes the writer).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  writer_gate.Release();
  first.join();
  const bool ended = closed_future.wait_for(std::chrono::seconds(10)) ==
                     std::future_status::ready;
  if (!ended) {
    // The closer waits forever: leave it behind and end the test binary.
    closer.detach();
    FAIL_CHECK("closing the log did not end within 10 s");
    std::_Exit(1);
  }
  closer.join();
}

TEST_CASE("while a sync is in flight, appends wait and then share one") {
  GatedLog g;
  Completions done;
  g.gate.Arm();
  g.log->Append(Req("first", {MakeRegistered("first", 1)}), done.Callback());
  g.gate.AwaitHeld();  // the syncer is inside the first append's sync
  for (int i = 0; i < 50; ++i) {
    const std::string gid = "g" + std::to_string(i);
    g.log->Append(Req(gid, {MakeRegistered(gid, 1)}), done.Callback());
  }
  {
    std::lock_guard<std::mutex> lock(done.mu);
    CHECK(done.results.empty());  // nothing is acknowledged before its sync
  }
  g.gate.Release();
  done.AwaitCount(51);
  for (const absl::Status& s : done.results) CHECK(s.ok());
  // The first sync, then at most two more for the 50 (the writer may have
  // taken some of them as a group of their own before the rest queued).
  CHECK(g.log->Stats().syncs >= 2);
  CHECK(g.log->Stats().syncs <= 3);
}

TEST_CASE("a full queue pushes back with RESOURCE_EXHAUSTED") {
  GatedLog g(/*max_queued=*/10);
  // Hold the writer inside a buffered append's completion callback (on a
  // thread of its own: see the test above).
  SyncGate writer_gate;
  writer_gate.Arm();
  std::promise<void> first_done;
  std::thread first([&] {
    g.log->Append(
        Req("first", {MakeRegistered("first", 1)}, Durability::kBuffered),
        [&](absl::Status s) {
          CHECK(s.ok());
          writer_gate.OnSync();
          first_done.set_value();
        });
  });
  writer_gate.AwaitHeld();
  int exhausted = 0;
  Completions done;
  for (int i = 0; i < 30; ++i) {
    const std::string gid = "g" + std::to_string(i);
    g.log->Append(Req(gid, {MakeRegistered(gid, 1)}), [&](absl::Status s) {
      if (absl::IsResourceExhausted(s)) {
        ++exhausted;  // on this thread, at once
      } else {
        done.Callback()(std::move(s));
      }
    });
  }
  CHECK(exhausted == 20);
  writer_gate.Release();
  first_done.get_future().wait();
  first.join();
  done.AwaitCount(10);
  for (const absl::Status& s : done.results) CHECK(s.ok());
  // The queue takes more again.
  CHECK(AppendAndWait(*g.log, Req("later", {MakeRegistered("later", 1)})).ok());
  ListQuery q;
  q.page_size = 100;
  CHECK(g.log->List(q)->items.size() == 12);
}

TEST_CASE("retention runs while appends go on") {
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  options.retention.full_record_ms = 10;
  options.retention.compact_entry_ms = 20;
  options.retention_batch = 16;
  absl::StatusOr<std::unique_ptr<RocksDbLog>> opened =
      RocksDbLog::Open(options);
  REQUIRE(opened.ok());
  RocksDbLog& log = **opened;
  for (int i = 0; i < 300; ++i) {
    const std::string gid = "old" + std::to_string(i);
    REQUIRE(AppendAndWait(log, Req(gid,
                                   {MakeRegistered(gid, i),
                                    MakeDecided(Decision::kCancel),
                                    MakeFinished(TxnState::kCancelled, 100)},
                                   Durability::kBuffered))
                .ok());
  }
  std::thread appender([&log] {
    for (int i = 0; i < 200; ++i) {
      const std::string gid = "new" + std::to_string(i);
      CHECK(AppendAndWait(log, Req(gid, {MakeRegistered(gid, 5000)})).ok());
    }
  });
  REQUIRE(log.RunRetention(1000).ok());
  appender.join();
  CHECK(absl::IsNotFound(log.Read("old0").status()));
  CHECK(log.DedupHorizonMs(0) == 300);
  CHECK(log.Stats().unfinished == 200);
  ListQuery q;
  q.page_size = 1000;
  CHECK(log.List(q)->items.size() == 200);
}

}  // namespace
}  // namespace tcc::wal::testing
