// A check of RocksDB's own write-ahead log files before the DB is opened, to
// tell a torn unsynced tail (normal after a crash) from a corrupt record with
// records after it (DATA_LOSS). DESIGN.md section 7.
//
// Why: no WALRecoveryMode does exactly that on its own (RocksDB 7.8).
// kTolerateCorruptedTailRecords refuses a zero-filled torn tail (checksum
// mismatch) and silently stops at a corrupt length field with synced records
// after it; kAbsoluteConsistency refuses every torn tail; kPointInTimeRecovery
// accepts every torn tail but also silently drops whatever follows a corrupt
// record. So the log opens with kPointInTimeRecovery after this check has
// made sure that nothing valid follows the first bad spot: then what point in
// time recovery drops is only the torn tail.
//
// The RocksDB log format (db/log_format.h, stable since LevelDB): the file is
// a sequence of 32 KiB blocks; a block holds records, each a header
//   u32 masked crc32c (little-endian), u16 length (LE), u8 type
// (11 bytes for the recyclable types 5..8, which add a u32 log number) and
// `length` payload bytes, never crossing a block end; fewer than a header's
// bytes left in a block are zero padding. The crc covers the type byte, the
// log number (recyclable types) and the payload.
//
// The first bad spot is a header or record that does not parse or whose crc
// does not match. After it, a torn tail holds only zeros, a cut, or bytes
// that happen to be no valid record; any offset after it where a whole valid
// record starts (type in range, fits its block, crc matches) means data
// followed the damage: DATA_LOSS. A file with a bad spot followed by a later
// file with any valid record is DATA_LOSS too.
//
// Pure functions over bytes plus one that reads a directory; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace tcc::wal::internal {

// CRC-32C (Castagnoli) of `data`, extending `crc` (0 to start).
uint32_t Crc32c(uint32_t crc, std::string_view data);

struct WalFileScan {
  bool damaged = false;          // a bad spot exists
  uint64_t first_bad = 0;        // its offset, when damaged
  bool valid_after_bad = false;  // a valid record starts after it
  uint64_t valid_at = 0;         // the first such offset
  uint64_t valid_records = 0;    // records before the bad spot
};

// Scans one WAL file's bytes.
WalFileScan ScanWalFile(std::string_view bytes);

// Scans every *.log file in `db_dir` in file-number order; OK when each is
// clean or only torn at its tail, else DATA_LOSS naming the file and offset.
[[nodiscard]] absl::Status CheckWalFiles(const std::string& db_dir);

}  // namespace tcc::wal::internal
