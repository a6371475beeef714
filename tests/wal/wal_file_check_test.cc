// The check of RocksDB's WAL files: torn tails pass, damage with records
// after it does not.
#include "internal/wal_file_check.h"

#include <catch2/catch.hpp>

namespace tcc::wal::internal {
namespace {

// One record in RocksDB's log format (full type, legacy header).
std::string LogRecord(const std::string& payload, uint8_t type = 1) {
  uint32_t crc = Crc32c(0, std::string(1, static_cast<char>(type)));
  crc = Crc32c(crc, payload);
  const uint32_t rot = (crc >> 15) | (crc << 17);
  const uint32_t masked = rot + 0xa282ead8u;
  std::string out;
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(masked >> (8 * i)));
  out.push_back(static_cast<char>(payload.size() & 0xff));
  out.push_back(static_cast<char>(payload.size() >> 8));
  out.push_back(static_cast<char>(type));
  return out + payload;
}

std::string Records(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += LogRecord(std::string(100 + i, 'a' + i % 26));
  return out;
}

TEST_CASE("crc32c matches the Castagnoli check value") {
  CHECK(Crc32c(0, "123456789") == 0xE3069283u);
  CHECK(Crc32c(Crc32c(0, "1234"), "56789") == 0xE3069283u);
}

TEST_CASE("a clean log file has no bad spot") {
  const std::string log = Records(20);
  WalFileScan scan = ScanWalFile(log);
  CHECK_FALSE(scan.damaged);
  CHECK(scan.valid_records == 20);
  CHECK_FALSE(ScanWalFile("").damaged);
}

TEST_CASE("block trailers are padding, not damage") {
  // Fill a block up to 5 bytes before its end, pad, continue in the next.
  std::string log = LogRecord(std::string(32768 - 7 - 5, 'p'));
  log += std::string(5, '\0');
  log += Records(3);
  WalFileScan scan = ScanWalFile(log);
  CHECK_FALSE(scan.damaged);
  CHECK(scan.valid_records == 4);
}

TEST_CASE("a torn tail is damage with nothing valid after it") {
  const std::string log = Records(20);
  const std::string tail = LogRecord(std::string(300, 't'));
  for (size_t cut = 1; cut < tail.size(); cut += 37) {
    INFO("cut at " << cut);
    WalFileScan cut_short = ScanWalFile(log + tail.substr(0, cut));
    CHECK(cut_short.damaged);
    CHECK_FALSE(cut_short.valid_after_bad);
    CHECK(cut_short.valid_records == 20);
    WalFileScan zeroed = ScanWalFile(log + tail.substr(0, cut) +
                                     std::string(tail.size() - cut, '\0'));
    CHECK(zeroed.damaged);
    CHECK_FALSE(zeroed.valid_after_bad);
  }
  CHECK_FALSE(ScanWalFile(log + std::string(4096, '\0')).valid_after_bad);
}

TEST_CASE("damage followed by a valid record is found") {
  std::string log = Records(30);
  SECTION("a flipped payload byte") { log[500] ^= 0x20; }
  SECTION("a zeroed header") {
    for (int i = 0; i < 7; ++i)
      log[LogRecord(std::string(100, 'a')).size() + i] = 0;
  }
  SECTION("a length field grown past its block") {
    log[5] = static_cast<char>(0x7f);
  }
  WalFileScan scan = ScanWalFile(log);
  CHECK(scan.damaged);
  CHECK(scan.valid_after_bad);
  CHECK(scan.valid_at > scan.first_bad);
}

}  // namespace
}  // namespace tcc::wal::internal
