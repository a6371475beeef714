// Crash tests with the real RocksDB over a file system that, on a simulated
// power cut, drops, cuts short or zero-fills what was written but not synced
// (fault_injection_fs.h); fail-stop on injected write and sync errors; and the
// cases that must refuse to open.
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "fault_injection_fs.h"
#include "internal/rocksdb_keys.h"
#include "log_test_util.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/wal/rocksdb_log.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

std::unique_ptr<RocksDbLog> OpenOrDie(const RocksDbLogOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  INFO(log.status().ToString());
  REQUIRE(log.ok());
  return *std::move(log);
}

// Writes one key into the closed log's RocksDB directly (synced), past the
// log: what a damaged or foreign database would hold.
void RawPut(const TempDir& dir, const std::string& key,
            const std::string& value) {
  rocksdb::DB* db = nullptr;
  REQUIRE(
      rocksdb::DB::Open(rocksdb::Options(), (dir.path() / "db").string(), &db)
          .ok());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  REQUIRE(db->Put(wo, key, value).ok());
  delete db;
}

PhaseUpdate Marker(uint32_t seq) {
  PhaseUpdate p = MakePhase("b0", PhaseState::kUnknown);
  p.attempts = seq;
  p.last_error = std::string(100 + seq % 50, 'e');
  return p;
}

// One writer's history: which of its appends were acknowledged, and how.
struct Writer {
  std::string gid;
  std::vector<Durability> durability;  // index = seq - 1
  std::vector<bool> acked;
};

TEST_CASE("after a crash every durable ack is there, whole; nothing is half") {
  std::mt19937_64 rng(20261130);
  constexpr int kRounds = 36;
  constexpr int kWriters = 4;
  for (int round = 0; round < kRounds; ++round) {
    INFO("round " << round);
    TempDir dir;
    auto fs = std::make_shared<FaultInjectionFs>();
    RocksDbLogOptions options;
    options.data_dir = dir.str();
    options.file_system = fs;
    auto log = OpenOrDie(options);

    std::vector<Writer> writers(kWriters);
    std::mutex mu;
    std::condition_variable cv;
    int acks = 0;
    int finished = 0;
    const int crash_after = 5 + static_cast<int>(rng() % 120);
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      Writer& writer = writers[w];
      writer.gid = "g" + std::to_string(w);
      const uint64_t seed = rng();
      threads.emplace_back([&, seed] {
        std::mt19937_64 local(seed);
        auto count = [&](int ack, int finish) {
          std::lock_guard<std::mutex> lock(mu);
          acks += ack;
          finished += finish;
          cv.notify_all();
        };
        if (!AppendAndWait(*log,
                           Req(writer.gid, {MakeRegistered(writer.gid, 1)}))
                 .ok()) {
          count(0, 1);
          return;
        }
        for (uint32_t seq = 1; seq <= 300; ++seq) {
          const Durability d =
              local() % 3 == 0 ? Durability::kDurable : Durability::kBuffered;
          writer.durability.push_back(d);
          // Two records per append: a torn append would show one alone.
          const absl::Status s = AppendAndWait(
              *log, Req(writer.gid, {Marker(seq), Marker(seq)}, d));
          writer.acked.push_back(s.ok());
          if (!s.ok()) break;
          count(1, 0);
        }
        count(0, 1);
      });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock,
              [&] { return acks >= crash_after || finished == kWriters; });
    }
    fs->Freeze();  // the power goes out
    for (std::thread& t : threads) t.join();
    log.reset();
    const auto mode = static_cast<TearMode>(rng() % 3);
    fs->SimulateCrash(mode, rng);

    // Reopen over a clean file system.
    options.file_system = nullptr;
    auto reopened = RocksDbLog::Open(options);
    INFO("tear mode " << static_cast<int>(mode) << ": "
                      << reopened.status().ToString());
    REQUIRE(reopened.ok());
    for (const Writer& writer : writers) {
      size_t last_durable_ack = 0;
      for (size_t i = 0; i < writer.acked.size(); ++i) {
        if (writer.acked[i] && writer.durability[i] == Durability::kDurable) {
          last_durable_ack = i + 1;
        }
      }
      absl::StatusOr<TxnLog> txn = (*reopened)->Read(writer.gid);
      if (!txn.ok()) {
        // Its registration was never acknowledged.
        CHECK(absl::IsNotFound(txn.status()));
        CHECK(last_durable_ack == 0);
        continue;
      }
      const std::vector<Record>& records = txn->records;
      REQUIRE(!records.empty());
      CHECK(std::holds_alternative<Registered>(records[0]));
      REQUIRE(records.size() % 2 == 1);
      const size_t kept = records.size() / 2;
      for (size_t k = 0; k < kept; ++k) {
        const auto& a = std::get<PhaseUpdate>(records[1 + 2 * k]);
        const auto& b = std::get<PhaseUpdate>(records[2 + 2 * k]);
        REQUIRE(a.attempts == k + 1);
        REQUIRE(b.attempts == k + 1);
        REQUIRE(a.last_error.size() == 100 + (k + 1) % 50);
      }
      CHECK(kept >= last_durable_ack);
      CHECK(kept <= writer.durability.size());
    }
    // The reopened log works.
    CHECK(AppendAndWait(**reopened, Req("after", {MakeRegistered("after", 1)}))
              .ok());
  }
}

// DESIGN.md section 10: a crash can neither lose a used approval nor make it
// usable again; the decision and the use are one write.
TEST_CASE("after a crash an approval is used exactly when its decision is") {
  std::mt19937_64 rng(777);
  for (int round = 0; round < 12; ++round) {
    INFO("round " << round);
    TempDir dir;
    auto fs = std::make_shared<FaultInjectionFs>();
    RocksDbLogOptions options;
    options.data_dir = dir.str();
    options.file_system = fs;
    auto log = OpenOrDie(options);
    constexpr int kTxns = 40;
    std::vector<bool> acked(kTxns, false);
    for (int i = 0; i < kTxns; ++i) {
      const std::string gid = "g" + std::to_string(i);
      REQUIRE(AppendAndWait(*log, Req(gid, {MakeRegistered(gid, 1)})).ok());
      Approval a;
      a.approval_id = "ap" + std::to_string(i);
      a.action = ApprovalAction::kForceCancel;
      a.gid = gid;
      a.revision = 7;
      a.content_hash = HashOf("content:" + gid);
      a.expires_at_ms = 10000;
      REQUIRE(PutApprovalAndWait(*log, a).ok());
    }
    // Decide them all at once, from many callers; the power goes out after a
    // random number of acknowledgements.
    const int crash_after = static_cast<int>(rng() % kTxns);
    std::mutex mu;
    std::condition_variable cv;
    int acks = 0;
    int finished = 0;
    for (int i = 0; i < kTxns; ++i) {
      Decided d = MakeDecided(Decision::kCancel, 500);
      d.approval_id = "ap" + std::to_string(i);
      const Durability durability =
          rng() % 4 == 0 ? Durability::kBuffered : Durability::kDurable;
      log->Append(Req("g" + std::to_string(i), {d}, durability),
                  [&, i, durability](absl::Status s) {
                    std::lock_guard<std::mutex> lock(mu);
                    if (s.ok() && durability == Durability::kDurable) {
                      acked[i] = true;
                    }
                    acks += s.ok() ? 1 : 0;
                    ++finished;
                    cv.notify_all();
                  });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return acks >= crash_after || finished == kTxns; });
    }
    fs->Freeze();
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return finished == kTxns; });
    }
    log.reset();
    fs->SimulateCrash(static_cast<TearMode>(rng() % 3), rng);
    options.file_system = nullptr;
    auto reopened = OpenOrDie(options);
    for (int i = 0; i < kTxns; ++i) {
      INFO("txn " << i);
      absl::StatusOr<TxnLog> txn = reopened->Read("g" + std::to_string(i));
      absl::StatusOr<Approval> a =
          reopened->ReadApproval("ap" + std::to_string(i));
      REQUIRE(txn.ok());
      REQUIRE(a.ok());
      const bool decided = txn->summary.decision == Decision::kCancel;
      CHECK(decided == (a->used_at_ms == 500));
      if (acked[i]) CHECK(decided);
      if (!decided) {
        // Still usable, exactly once.
        Decided d = MakeDecided(Decision::kCancel, 600);
        d.approval_id = a->approval_id;
        CHECK(AppendAndWait(*reopened, Req(txn->summary.gid, {d})).ok());
        CHECK(absl::IsFailedPrecondition(
            AppendAndWait(*reopened, Req(txn->summary.gid, {d}))));
      }
    }
  }
}

TEST_CASE("an injected sync error fails every waiting append, then all") {
  TempDir dir;
  auto fs = std::make_shared<FaultInjectionFs>();
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  options.file_system = fs;
  auto log = OpenOrDie(options);
  REQUIRE(AppendAndWait(*log, Req("ok", {MakeRegistered("ok", 1)})).ok());
  fs->FailSyncs();
  std::atomic<int> ok{0}, unavailable{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      const std::string gid = "g" + std::to_string(t);
      const absl::Status s =
          AppendAndWait(*log, Req(gid, {MakeRegistered(gid, 1)}));
      if (s.ok()) ++ok;
      if (absl::IsUnavailable(s)) ++unavailable;
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(ok == 0);
  CHECK(unavailable == 16);
  CHECK(absl::IsUnavailable(log->failure()));
  fs->ClearFailures();  // even a disk that works again: the log stays stopped
  CHECK(absl::IsUnavailable(AppendAndWait(
      *log,
      Req("later", {MakeRegistered("later", 1)}, Durability::kBuffered))));
  CHECK(absl::IsUnavailable(PutApprovalAndWait(*log, Approval{})));
  CHECK(absl::IsUnavailable(log->TakeOwnerEpoch(0).status()));
  // Reads are refused too: the failed appends were written to RocksDB before
  // their sync failed, so a read could show a record that was never durable
  // (a decision reloaded from it would be acted on: found by the crash
  // drill).
  CHECK(absl::IsUnavailable(log->Read("g0").status()));
  CHECK(absl::IsUnavailable(log->Read("ok").status()));
  CHECK(absl::IsUnavailable(log->List(ListQuery{}).status()));
  CHECK(absl::IsUnavailable(
      log->ScanUnfinished(0, [](TxnLog) { return absl::OkStatus(); })));
  // Reopening recovers what was synced.
  log.reset();
  options.file_system = nullptr;
  auto reopened = OpenOrDie(options);
  CHECK(reopened->Read("ok").ok());
  CHECK(reopened->failure().ok());
}

TEST_CASE("an injected write error fails stop too") {
  TempDir dir;
  auto fs = std::make_shared<FaultInjectionFs>();
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  options.file_system = fs;
  auto log = OpenOrDie(options);
  fs->FailWrites();
  CHECK(absl::IsUnavailable(AppendAndWait(
      *log, Req("g", {MakeRegistered("g", 1)}, Durability::kBuffered))));
  CHECK(absl::IsUnavailable(
      AppendAndWait(*log, Req("h", {MakeRegistered("h", 1)}))));
  CHECK(!log->failure().ok());
}

TEST_CASE("an error failpoint at a persistence point fails stop") {
  const char* point = GENERATE("wal.before_write", "wal.after_write",
                               "wal.before_sync", "wal.after_sync");
  INFO(point);
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  auto log = OpenOrDie(options);
  REQUIRE(AppendAndWait(*log, Req("a", {MakeRegistered("a", 1)})).ok());
  REQUIRE(failpoint::Configure(std::string(point) + "=error").ok());
  const absl::Status s =
      AppendAndWait(*log, Req("b", {MakeRegistered("b", 1)}));
  REQUIRE(failpoint::Configure("").ok());
  CHECK(absl::IsUnavailable(s));
  CHECK(absl::IsUnavailable(
      AppendAndWait(*log, Req("c", {MakeRegistered("c", 1)}))));
}

// Returns the WAL files (*.log with a number) of a data dir.
std::vector<std::filesystem::path> WalFiles(const TempDir& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "db")) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".log" && !stem.empty() &&
        std::isdigit(static_cast<unsigned char>(stem[0]))) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Fills a log with 300 synced appends and closes it; returns the WAL file
// that holds them.
std::filesystem::path FillAndClose(const TempDir& dir) {
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  auto log = OpenOrDie(options);
  for (int i = 0; i < 300; ++i) {
    const std::string gid = "g" + std::to_string(i);
    REQUIRE(AppendAndWait(*log, Req(gid, {MakeRegistered(gid, i)})).ok());
  }
  log.reset();
  std::vector<std::filesystem::path> wals = WalFiles(dir);
  REQUIRE(!wals.empty());
  REQUIRE(std::filesystem::file_size(wals.back()) > 50000);
  return wals.back();
}

void Overwrite(const std::filesystem::path& file, uint64_t offset,
               const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_CASE("a corrupt synced record with records after it is DATA_LOSS") {
  const double where = GENERATE(0.1, 0.5, 0.9);
  const int how = GENERATE(0, 1);  // a flipped byte, or zeros over a header
  INFO("at " << where << " how " << how);
  TempDir dir;
  const std::filesystem::path wal = FillAndClose(dir);
  const uint64_t offset =
      static_cast<uint64_t>(std::filesystem::file_size(wal) * where);
  Overwrite(wal, offset,
            how == 0 ? std::string("\x5a") : std::string(16, '\0'));
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  REQUIRE_FALSE(log.ok());
  CHECK(absl::IsDataLoss(log.status()));
  CHECK(std::string(log.status().message()).find("refusing to open") !=
        std::string::npos);
}

TEST_CASE("a torn tail after a clean close opens with everything synced") {
  const int how = GENERATE(0, 1);  // zeros appended, or half a record
  TempDir dir;
  const std::filesystem::path wal = FillAndClose(dir);
  const uint64_t size = std::filesystem::file_size(wal);
  if (how == 0) {
    Overwrite(wal, size, std::string(5000, '\0'));
  } else {
    // A header promising 200 bytes, and only 20 of them.
    std::string torn("\x12\x34\x56\x78\xc8\x00\x01", 7);
    torn += std::string(20, 'x');
    Overwrite(wal, size, torn);
  }
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  auto log = OpenOrDie(options);
  for (int i = 0; i < 300; ++i) {
    CHECK(log->Read("g" + std::to_string(i)).ok());
  }
}

TEST_CASE("a data dir whose database vanished refuses to start over") {
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  {
    auto log = OpenOrDie(options);
    REQUIRE(AppendAndWait(*log, Req("g", {MakeRegistered("g", 1)})).ok());
  }
  std::filesystem::remove_all(dir.path() / "db");
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  REQUIRE_FALSE(log.ok());
  CHECK(absl::IsDataLoss(log.status()));
  CHECK(std::string(log.status().message()).find("start over") !=
        std::string::npos);
}

TEST_CASE("an unknown format version or a corrupt stored value is DATA_LOSS") {
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  {
    auto log = OpenOrDie(options);
    REQUIRE(AppendAndWait(*log, Req("g", {MakeRegistered("g", 1)})).ok());
  }
  auto raw_put = [&](const std::string& key, const std::string& value) {
    RawPut(dir, key, value);
  };
  SECTION("a record that does not decode") {
    raw_put(internal::keys::Record("g", 0), std::string("\x01\x63", 2));
    auto log = OpenOrDie(options);
    CHECK(absl::IsDataLoss(log->Read("g").status()));
  }
  SECTION("a format version from the future") {
    raw_put("m/format_version",
            std::string(1, static_cast<char>(internal::kFormatVersion + 1)));
    absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
    REQUIRE_FALSE(log.ok());
    CHECK(absl::IsDataLoss(log.status()));
    CHECK(std::string(log.status().message())
              .find("format version " +
                    std::to_string(internal::kFormatVersion + 1)) !=
          std::string::npos);
  }
}

TEST_CASE("a stored counter that does not decode fails the open, naming it") {
  const std::string key = GENERATE(std::string(internal::keys::kOwnerEpoch),
                                   std::string(internal::keys::kDedupHorizon),
                                   std::string(internal::keys::kLiveBytes));
  const size_t size = GENERATE(0, 3, 9);  // a counter is 8 bytes
  INFO(key << " holding " << size << " bytes");
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  {
    auto log = OpenOrDie(options);
    REQUIRE(log->TakeOwnerEpoch(0).ok());
    REQUIRE(AppendAndWait(*log, Req("g", {MakeRegistered("g", 1)})).ok());
  }
  RawPut(dir, key, std::string(size, '\x07'));
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  REQUIRE_FALSE(log.ok());
  CHECK(absl::IsDataLoss(log.status()));
  CHECK(std::string(log.status().message()).find(key) != std::string::npos);
}

// Flushes the closed log's memtable into a table file (past the log), with
// a Bloom filter as the log's own tables have: a lookup of a key the table
// does not hold reads none of its data.
void RawFlush(const TempDir& dir) {
  rocksdb::Options options;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::DB* db = nullptr;
  REQUIRE(rocksdb::DB::Open(options, (dir.path() / "db").string(), &db).ok());
  REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());
  delete db;
}

// The table file of the closed log that holds `key` and nothing else.
std::string TableHoldingOnly(const TempDir& dir, const std::string& key) {
  rocksdb::DB* db = nullptr;
  REQUIRE(
      rocksdb::DB::Open(rocksdb::Options(), (dir.path() / "db").string(), &db)
          .ok());
  std::vector<rocksdb::LiveFileMetaData> tables;
  db->GetLiveFilesMetaData(&tables);
  delete db;
  for (const rocksdb::LiveFileMetaData& t : tables) {
    if (t.smallestkey == key && t.largestkey == key) {
      return t.db_path + "/" + t.relative_filename;
    }
  }
  FAIL("no table holds only " << key);
  return "";
}

TEST_CASE("a stored counter that can't be read fails the open") {
  // The owner epoch alone in a table file of its own (the format version is
  // in another), whose data block then reads back an I/O error or a block
  // that fails its checksum.
  const bool damaged = GENERATE(false, true);
  INFO((damaged ? "damaged block" : "read error"));
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  { auto log = OpenOrDie(options); }
  RawFlush(dir);
  {
    auto log = OpenOrDie(options);
    REQUIRE(log->TakeOwnerEpoch(0).ok());
  }
  RawFlush(dir);
  const std::string table = TableHoldingOnly(dir, internal::keys::kOwnerEpoch);
  const uint64_t table_size = std::filesystem::file_size(table);
  INFO(table << ", " << table_size << " bytes");
  auto fs = std::make_shared<FaultInjectionFs>();
  if (damaged) {
    Overwrite(table, 0, std::string(16, '\xff'));
  } else {
    // Offset 0 is the data block; opening the table reads its tail (the
    // whole of a file this small) in one read first.
    fs->FailReads([table, table_size](const std::string& fname, uint64_t offset,
                                      size_t n) {
      return fname == table && offset == 0 && n < table_size;
    });
    options.file_system = fs;
  }
  absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
  if (!damaged) CHECK(fs->failed_reads() > 0);
  REQUIRE_FALSE(log.ok());
  INFO(log.status().ToString());
  CHECK(std::string(log.status().message()).find(internal::keys::kOwnerEpoch) !=
        std::string::npos);
  if (damaged) {
    CHECK(absl::IsDataLoss(log.status()));
  } else {
    CHECK(absl::IsUnavailable(log.status()));
  }
}

TEST_CASE("the size budget stops on an index key it cannot remove") {
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  options.retention.max_bytes = 1;  // everything finished must go
  {
    auto log = OpenOrDie(options);
    // Unfinished: its bytes count, and nothing may remove them.
    REQUIRE(AppendAndWait(*log, Req("g", {MakeRegistered("g", 1)})).ok());
  }
  // A finished-index key whose summary is gone (a damaged database).
  RawPut(dir, internal::keys::TimeIndex('f', 1000, "ghost"), "");
  auto log = OpenOrDie(options);
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  RocksDbLog* raw = log.get();
  std::thread retention(
      [raw, done] { done->set_value(raw->RunRetention(2'000'000'000'000)); });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    retention.detach();  // spinning: the test fails, the log is leaked
    (void)log.release();
    FAIL("RunRetention did not return");
  }
  retention.join();
  CHECK(result.get().ok());
  CHECK(log->Read("g").ok());  // the unfinished transaction is untouched
}

// The recovery scan warms the writer's index with the summaries it read
// (as of its snapshot). A transaction changed after that snapshot, and
// dropped from the index before the warm-up arrives, must not be warmed
// back to its old summary: the next append would be planned against it.
TEST_CASE("a scan's warm-up never brings back a summary changed after it") {
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  {
    auto log = OpenOrDie(options);
    REQUIRE(AppendAndWait(*log, Req("g", {MakeRegistered("g", 1)})).ok());
    REQUIRE(AppendAndWait(*log, Req("g", {Marker(1)})).ok());
  }
  auto log = OpenOrDie(options);  // an empty index, as after a restart
  REQUIRE(failpoint::Configure("wal.scan_before_warm=sleep(800)").ok());
  std::vector<TxnLog> seen;
  std::thread scan([&] {
    CHECK(log->ScanUnfinished(0,
                              [&](TxnLog txn) {
                                seen.push_back(std::move(txn));
                                return absl::OkStatus();
                              })
              .ok());
  });
  // The scan has read "g" (2 records, TRYING) and stalls before warming:
  // meanwhile "g" is decided and finished, and leaves the index (final).
  for (int i = 0; i < 500 && failpoint::Hits("wal.scan_before_warm") == 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(failpoint::Hits("wal.scan_before_warm") == 1);
  REQUIRE(
      AppendAndWait(*log, Req("g", {MakeDecided(Decision::kConfirm),
                                    MakeFinished(TxnState::kConfirmed, 2000)}))
          .ok());
  scan.join();
  REQUIRE(failpoint::Configure("").ok());
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].records.size() == 2);
  // Planned against the stale summary (2 records, TRYING) this would
  // overwrite the third record and make "g" unfinished again; against the
  // truth it is the fifth.
  REQUIRE(
      AppendAndWait(*log, Req("g", {Marker(2)}, Durability::kBuffered)).ok());
  absl::StatusOr<TxnLog> g = log->Read("g");
  REQUIRE(g.ok());
  CHECK(g->summary.state == TxnState::kConfirmed);
  REQUIRE(g->records.size() == 5);
  CHECK(std::holds_alternative<Decided>(g->records[2]));
  CHECK(std::holds_alternative<Finished>(g->records[3]));
  CHECK(std::holds_alternative<PhaseUpdate>(g->records[4]));
  CHECK(log->Stats().unfinished == 0);
}

// The same history with and without a scan before it: the warmed index
// plans every append as one loaded from the database would (record
// numbers, byte counts, the unfinished count).
TEST_CASE("appends after a scan's warm-up write what a cold index writes") {
  auto run = [](bool scan) {
    TempDir dir;
    RocksDbLogOptions options;
    options.data_dir = dir.str();
    {
      auto log = OpenOrDie(options);
      for (int i = 0; i < 600; ++i) {  // more than one warm-up batch
        const std::string gid = "g" + std::to_string(i);
        REQUIRE(
            AppendAndWait(*log, Req(gid, {MakeRegistered(gid, 1 + i)})).ok());
        for (uint32_t k = 1; k <= static_cast<uint32_t>(i % 3); ++k) {
          REQUIRE(
              AppendAndWait(*log, Req(gid, {Marker(k)}, Durability::kBuffered))
                  .ok());
        }
      }
    }
    std::vector<std::string> history;
    {
      auto log = OpenOrDie(options);
      if (scan) {
        int visited = 0;
        REQUIRE(log->ScanUnfinished(0,
                                    [&](TxnLog) {
                                      ++visited;
                                      return absl::OkStatus();
                                    })
                    .ok());
        CHECK(visited == 600);
      }
      for (int i = 0; i < 600; ++i) {
        const std::string gid = "g" + std::to_string(i);
        std::vector<Record> more = {Marker(7)};
        if (i % 2 == 0) {
          more.push_back(MakeDecided(Decision::kCancel));
          more.push_back(MakeFinished(TxnState::kCancelled, 5000));
        }
        REQUIRE(AppendAndWait(*log, Req(gid, std::move(more))).ok());
      }
      CHECK(log->Stats().unfinished == 300);
      for (int i = 0; i < 600; ++i) {
        absl::StatusOr<TxnLog> txn = log->Read("g" + std::to_string(i));
        REQUIRE(txn.ok());
        history.push_back(absl::StrCat(txn->summary.gid, " ",
                                       static_cast<int>(txn->summary.state),
                                       " ", txn->records.size()));
      }
    }
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(),
                                         (dir.path() / "db").string(), &raw)
                .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    // Every key and value: record numbers, stored summaries with their
    // counts, indexes, the live byte count.
    std::unique_ptr<rocksdb::Iterator> it(
        db->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      history.push_back(it->key().ToString() + "=" + it->value().ToString());
    }
    REQUIRE(it->status().ok());
    return history;
  };
  const std::vector<std::string> cold = run(false);
  const std::vector<std::string> warmed = run(true);
  CHECK(cold.size() > 600 * 3);
  CHECK(warmed == cold);
}

}  // namespace
}  // namespace tcc::wal::testing
