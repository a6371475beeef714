// The daemon's Log: RocksDB on local disk, with group commit, a recovery
// scan index, retention and fail-stop (DESIGN.md sections 7 and 9). It keeps
// every promise of log.h; this header says how.
//
// Data dir layout: <data_dir>/TCC_WAL (a marker, written once the database
// exists) and <data_dir>/db (RocksDB). The key layout is documented in
// wal/src/internal/rocksdb_keys.h, the value encodings in
// wal/src/record_codec.h. Everything in the data dir is the owner's alone
// (files 0600, directories 0700, whatever the umask): Open creates it so and
// tightens what it finds looser, with a warning to `info_log`.
//
// Group commit: one writer at a time owns every write. Append, PutApproval,
// TakeOwnerEpoch and the removals of RunRetention queue up; the writer takes
// everything waiting, checks each item against the state as the items before
// it leave it (the one place that checks and applies, so write-once decisions
// and approval consumption hold under any concurrency), puts the accepted
// ones into one WriteBatch and writes it to RocksDB's WAL. Buffered appends
// (and refused items) complete then, on the writer's thread. The writer is
// the writer thread, or, for an Append that finds nothing written, queued or
// being synced, the appending thread itself: it writes its own append inline
// (completing it inside Append when buffered), which saves waking the writer
// thread; under load appends queue and the writer thread takes them as a
// group. The durable ones
// go to a syncer thread, which syncs the WAL once for every group written
// since its last sync and completes them, while the writer already writes
// the next group (a pipeline of two: checking, encoding and the memtable
// insert of a group overlap the previous group's sync; moving RocksDB's WAL
// buffer to its file and syncing take turns, because after an I/O error its
// WAL writer must not be synced again). The queue is bounded (`max_queued`):
// beyond it Append fails RESOURCE_EXHAUSTED at once.
//
// Failpoints (tcc/failpoint): wal.before_write and wal.after_write,
// evaluated by the writer for each group; wal.before_sync and
// wal.after_sync, by the syncer for each sync.
//
// Fail-stop: a failed write or sync (or an `error` failpoint) fails every
// item of the group and everything queued with UNAVAILABLE, and refuses
// everything later; failure() says why (a daemon exits non-zero on it), and
// failure_cause() is that write's or sync's own error.
//
// A full disk: RocksDB's no-space errors are RESOURCE_EXHAUSTED "no space
// left on device" (Open, failure_cause()), and so is ENOSPC while Open
// creates the data dir or writes the marker.
//
// Opening: a torn unsynced tail of RocksDB's WAL is dropped; a corrupt
// record with records after it, corrupt tables or an unknown format version
// fail Open with DATA_LOSS and a message naming what and where. Recovery
// runs RocksDB with WALRecoveryMode::kPointInTimeRecovery after a check of
// the WAL files of its own (wal/src/internal/wal_file_check.h says why). A
// data dir whose marker exists but whose database does not is DATA_LOSS: the
// log never starts over on an empty database when it had state. A stored
// counter (owner epoch, deduplication horizon, live bytes) is 0 only when
// absent: one that does not decode fails Open with DATA_LOSS naming its key,
// one that can't be read with the read's error (they never go back).
//
// Retention: RunRetention scans the finished-transaction indexes on the
// caller's thread and hands the removals to the writer in small batches, so
// appends keep flowing between them. The size budget (max_bytes) measures
// the key and value bytes the log holds (m/live_bytes), not file sizes,
// which lag deletions until RocksDB compacts.
//
// Thread-safety: every method may be called from any thread. Completion
// callbacks run on the writer or the syncer thread and must not block for
// long; they must not call TakeOwnerEpoch or RunRetention (which wait for
// the writer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tcc/rocksdb_env/info_log.h"
#include "tcc/wal/log.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace tcc::wal {

struct RocksDbLogOptions {
  std::string data_dir;
  RetentionPolicy retention;
  // Items waiting for the writer beyond which Append is RESOURCE_EXHAUSTED.
  size_t max_queued = 100000;
  // Removals per retention batch handed to the writer.
  size_t retention_batch = 256;
  // The file system RocksDB runs on (tests inject faults); null: the OS's.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Where RocksDB's warnings and errors go (its info log; no LOG file is
  // written in the data dir). Null: stderr.
  rocksdb_env::InfoLogSink info_log = nullptr;
  // Called by the syncer after each sync that succeeded, with how long it
  // took and how many durable appends it completed (for a latency metric).
  // `now_us` is the monotonic clock it is measured with (this library reads
  // no clock). Both or neither; must be quick and thread-safe.
  std::function<int64_t()> now_us;
  std::function<void(int64_t sync_us, uint64_t appends)> on_sync;
};

class RocksDbLog final : public Log {
 public:
  // Opens (or creates) the log in options.data_dir; see the header comment
  // for what refuses to open.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RocksDbLog>> Open(
      RocksDbLogOptions options);

  // Stops the writer after it completed everything queued, then closes.
  ~RocksDbLog() override;

  RocksDbLog(const RocksDbLog&) = delete;
  RocksDbLog& operator=(const RocksDbLog&) = delete;

  void Append(AppendRequest request, AppendDone done) override;
  void PutApproval(Approval approval, AppendDone done) override;
  [[nodiscard]] absl::StatusOr<TxnLog> Read(std::string_view gid) override;
  [[nodiscard]] absl::StatusOr<Approval> ReadApproval(
      std::string_view approval_id) override;
  [[nodiscard]] absl::StatusOr<ListPage> List(const ListQuery& query) override;
  uint32_t shard_count() const override { return 1; }
  [[nodiscard]] absl::Status ScanUnfinished(
      uint32_t shard,
      const std::function<absl::Status(TxnLog)>& visit) override;
  [[nodiscard]] absl::StatusOr<uint64_t> TakeOwnerEpoch(
      uint32_t shard) override;
  [[nodiscard]] absl::Status RunRetention(int64_t now_ms) override;
  int64_t DedupHorizonMs(uint32_t shard) const override;
  LogStats Stats() const override;

  // OK while the log works; the fail-stop error (UNAVAILABLE) once it
  // failed.
  absl::Status failure() const;
  // OK while the log works; once it failed, the error of the write or sync
  // that stopped it, with its own code (RESOURCE_EXHAUSTED: no space left).
  absl::Status failure_cause() const;

  // Durable appends completed per sync so far (the mean group size).
  double MeanGroupSize() const;

  class Impl;

 private:
  explicit RocksDbLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tcc::wal
