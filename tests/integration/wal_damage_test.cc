// A damaged WAL, as a disk or a crash leaves it, under the real tccd and
// tcc-bank processes (DESIGN.md sections 7 and 8; issue 19):
// - the newest synced record damaged (which the log cannot tell from a torn
//   tail, so it drops it) after the participants confirmed: the lost decision
//   is taken from their barriers, never reversed by the try-deadline;
// - a damaged table file: tccd stops (exit 3) once its recovery scan meets
//   it, even though it had begun serving.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "rocksdb/db.h"
#include "test_dirs.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = tcc::v1;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

ClusterOptions Options(const std::string& name) {
  ClusterOptions o;
  o.root_dir = tcc::harness::MakeTempDir("tccd-damage-" + name);
  o.remove_root_dir = true;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 20;
  o.initial_balance = 1000;
  return o;
}

fs::path WalDb(const ClusterOptions& o) {
  return fs::path(o.root_dir) / "tccd" / "wal" / "db";
}

std::vector<fs::path> FilesEndingIn(const fs::path& dir,
                                    const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// RocksDB's log format (db/log_format.h): 32 KiB blocks of records, each a
// 7-byte header (crc32c, u16 length, type: 1 full, 2 first, 3 middle, 4
// last) and its payload; a write batch is one logical record. The offset
// of the first fragment of the first logical record whose payload holds
// `needle`, if any.
std::optional<uint64_t> FindLogicalRecord(const std::string& bytes,
                                          const std::string& needle) {
  constexpr uint64_t kBlock = 32768;
  constexpr uint64_t kHeader = 7;
  uint64_t pos = 0;
  uint64_t start = 0;
  std::string payload;
  while (pos + kHeader <= bytes.size()) {
    const uint64_t left = kBlock - pos % kBlock;
    if (left < kHeader) {
      pos += left;  // the block's zero padding
      continue;
    }
    const auto len =
        static_cast<uint64_t>(static_cast<uint8_t>(bytes[pos + 4]) |
                              (static_cast<uint8_t>(bytes[pos + 5]) << 8));
    const auto type = static_cast<uint8_t>(bytes[pos + 6]);
    if (type < 1 || type > 4 || pos + kHeader + len > bytes.size()) break;
    if (type == 1 || type == 2) {
      start = pos;
      payload.clear();
    }
    payload.append(bytes, pos + kHeader, len);
    if ((type == 1 || type == 4) && payload.find(needle) != std::string::npos) {
      return start;
    }
    pos += kHeader + len;
  }
  return std::nullopt;
}

// What tccd shows for `gid` once it is final (or the last view after
// `timeout_ms`).
v1::TransactionView WaitFinal(BankCluster& c, const std::string& gid,
                              int64_t timeout_ms) {
  v1::TransactionView last;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    auto v = c.client().Get(gid);
    if (v.ok()) {
      last = *v;
      if (last.state() == v1::TXN_STATE_CONFIRMED ||
          last.state() == v1::TXN_STATE_CANCELLED) {
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return last;
}

TEST_CASE("a decision lost from the WAL is taken from the barriers") {
  ClusterOptions o = Options("lost-decision");
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  // A 2 s try-deadline: a restarted tccd that let the deadline decide
  // would cancel within the test's wait.
  v1::SubmitRequest req = c.Transfer("bank-a", 1, "bank-b", 2, 40);
  req.set_try_timeout_ms(2000);
  auto first = c.client().Submit(req);
  REQUIRE(first.ok());
  REQUIRE(first->transaction().state() == v1::TXN_STATE_CONFIRMED);
  const std::string gid = first->transaction().gid();
  c.KillTccd();

  // Damage the WAL's newest synced record (the group that holds the
  // decision): cut the file there and leave a half-written record, as a
  // crash with a bad sector would. The log drops it as a torn tail, and
  // with it everything after (the phase-2 records, Finished).
  const std::vector<fs::path> logs = FilesEndingIn(WalDb(o), ".log");
  REQUIRE(!logs.empty());
  const fs::path wal = logs.back();
  std::string bytes = tcc::harness::ReadFile(wal.string());
  const std::optional<uint64_t> at =
      FindLogicalRecord(bytes, "every Try EXECUTED");
  REQUIRE(at.has_value());
  bytes.resize(*at);
  bytes += std::string("\x12\x34\x56\x78\xc8\x00\x01", 7) + "torn";
  {
    std::ofstream out(wal, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  REQUIRE_OK(c.StartTccd());
  const v1::TransactionView t = WaitFinal(c, gid, 15000);
  INFO(c.tccd()->Output());
  // Confirmed, as the banks had confirmed: the decision was adopted from
  // their barriers, not reversed by the try-deadline that passed.
  CHECK(t.state() == v1::TXN_STATE_CONFIRMED);
  CHECK(t.decision() == v1::DECISION_CONFIRM);
  CHECK(t.decision_cause() == v1::DECISION_CAUSE_WITNESSED);
  for (const auto& b : t.branches()) {
    CHECK_FALSE(b.stuck());
    CHECK(b.second_phase().state() == v1::PHASE_STATE_SUCCEEDED);
  }
  // The operator hears that the WAL lost a decision.
  CHECK(c.tccd()->Output().find("lost decision") != std::string::npos);
  // The money moved once.
  auto a = c.Account("bank-a", 1);
  auto b = c.Account("bank-b", 2);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->balance() == 960);
  CHECK(b->balance() == 1040);
  CHECK_OK(c.CheckFinal({gid}, 10000));
}

TEST_CASE("a damaged table file stops tccd (exit 3) after it began serving") {
  ClusterOptions o = Options("table");
  // No Try leaves: the transactions stay TRYING in the WAL, for the scan.
  o.tccd_env = {{"TCC_FAILPOINTS", "driver.before_try_send=error"}};
  BankCluster c(o);
  REQUIRE_OK(c.Start());
  const std::string marker(64, 'M');
  std::vector<std::string> gids;
  for (int i = 0; i < 200; ++i) {
    v1::SubmitRequest req =
        c.Transfer("bank-a", 1 + i % 10, "bank-b", 1 + i % 10, 1);
    for (auto& br : *req.mutable_branches()) {
      br.set_payload(br.payload() + ":" + marker);
    }
    req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
    req.set_try_timeout_ms(600000);
    auto r = c.client().Submit(req);
    REQUIRE(r.ok());
    gids.push_back(r->transaction().gid());
  }
  c.KillTccd();

  // Move the records into a table file (a flush), then damage one of its
  // data blocks where the records are: RocksDB's block checksum catches it
  // on read.
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options ro;
    ro.compression = rocksdb::kNoCompression;  // the marker stays readable
    REQUIRE(rocksdb::DB::Open(ro, WalDb(o).string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());
    REQUIRE(db->Close().ok());
  }
  const std::vector<fs::path> tables = FilesEndingIn(WalDb(o), ".sst");
  REQUIRE(!tables.empty());
  bool damaged = false;
  for (const fs::path& table : tables) {
    std::string bytes = tcc::harness::ReadFile(table.string());
    const size_t hit = bytes.find(marker, bytes.size() / 2);
    if (hit == std::string::npos) continue;
    bytes[hit + 3] ^= 0x20;
    std::ofstream out(table, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    damaged = true;
    break;
  }
  REQUIRE(damaged);

  c.SetTccdEnv({});
  // It opens (the damaged block is not read at open) and serves; then its
  // recovery scan reads the block.
  REQUIRE_OK(c.StartTccd());
  auto status = c.tccd()->Wait(20000);
  INFO(c.tccd()->Output());
  REQUIRE(status.ok());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 3);
  CHECK(c.tccd()->Output().find("DATA_LOSS") != std::string::npos);
}

}  // namespace
