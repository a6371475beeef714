#include "internal/wal_file_check.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace tcc::wal::internal {
namespace {

constexpr uint64_t kBlockSize = 32768;
constexpr size_t kHeaderSize = 7;
constexpr size_t kRecyclableHeaderSize = 11;
constexpr uint8_t kMaxRecordType = 10;
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

uint32_t LoadLE32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return u[0] | (u[1] << 8) | (u[2] << 16) |
         (static_cast<uint32_t>(u[3]) << 24);
}

// The size of the valid record starting at `offset`, or 0 if none does.
uint64_t ValidRecordAt(std::string_view bytes, uint64_t offset) {
  const uint64_t block_end =
      std::min<uint64_t>(bytes.size(), (offset / kBlockSize + 1) * kBlockSize);
  if (block_end - offset < kHeaderSize) return 0;
  const char* p = bytes.data() + offset;
  const auto type = static_cast<uint8_t>(p[6]);
  if (type == 0 || type > kMaxRecordType) return 0;
  const size_t header =
      type >= 5 && type <= 8 ? kRecyclableHeaderSize : kHeaderSize;
  const uint64_t length = static_cast<unsigned char>(p[4]) |
                          (static_cast<unsigned char>(p[5]) << 8);
  if (offset + header + length > block_end) return 0;
  // The crc covers the type byte, the recyclable log number and the payload.
  uint32_t crc = Crc32c(0, std::string_view(p + 6, 1));
  crc = Crc32c(crc, std::string_view(p + kHeaderSize, header - kHeaderSize));
  crc = Crc32c(crc, std::string_view(p + header, length));
  if (crc != Unmask(LoadLE32(p))) return 0;
  return header + length;
}

}  // namespace

uint32_t Crc32c(uint32_t crc, std::string_view data) {
  crc = ~crc;
  for (char ch : data) {
    crc = kCrcTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

WalFileScan ScanWalFile(std::string_view bytes) {
  WalFileScan scan;
  uint64_t offset = 0;
  while (offset < bytes.size()) {
    const uint64_t block_end = (offset / kBlockSize + 1) * kBlockSize;
    if (block_end - offset < kHeaderSize) {  // block trailer padding
      offset = block_end;
      continue;
    }
    const uint64_t n = ValidRecordAt(bytes, offset);
    if (n == 0) {
      scan.damaged = true;
      scan.first_bad = offset;
      break;
    }
    ++scan.valid_records;
    offset += n;
  }
  if (!scan.damaged) return scan;
  for (uint64_t p = scan.first_bad + 1; p + kHeaderSize <= bytes.size(); ++p) {
    if (ValidRecordAt(bytes, p) != 0) {
      scan.valid_after_bad = true;
      scan.valid_at = p;
      break;
    }
  }
  return scan;
}

absl::Status CheckWalFiles(const std::string& db_dir) {
  std::vector<std::pair<uint64_t, std::filesystem::path>> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(db_dir, ec)) {
    const std::filesystem::path& path = entry.path();
    if (path.extension() != ".log") continue;
    const std::string stem = path.stem().string();
    if (stem.empty() || !std::all_of(stem.begin(), stem.end(), [](char c) {
          return c >= '0' && c <= '9';
        })) {
      continue;  // not a WAL file (e.g. RocksDB's info LOG has no .log)
    }
    files.emplace_back(std::stoull(stem), path);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("WAL: can't list ", db_dir, ": ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  std::string damaged_file;
  uint64_t damaged_at = 0;
  for (const auto& [number, path] : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::UnavailableError(
          absl::StrCat("WAL: can't read ", path.string()));
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    const WalFileScan scan = ScanWalFile(bytes);
    if (!damaged_file.empty() && scan.valid_records > 0) {
      return absl::DataLossError(absl::StrCat(
          "WAL: ", damaged_file, " is damaged at offset ", damaged_at,
          " and the later log ", path.string(),
          " holds records: synced records may follow the damage; refusing "
          "to open rather than drop them"));
    }
    if (scan.valid_after_bad) {
      return absl::DataLossError(absl::StrCat(
          "WAL: ", path.string(), " is corrupt at offset ", scan.first_bad,
          " and holds a valid record after it (at offset ", scan.valid_at,
          "): this is not a torn unsynced tail; refusing to open rather "
          "than drop synced records"));
    }
    if (scan.damaged && damaged_file.empty()) {
      damaged_file = path.string();
      damaged_at = scan.first_bad;
    }
  }
  return absl::OkStatus();
}

}  // namespace tcc::wal::internal
