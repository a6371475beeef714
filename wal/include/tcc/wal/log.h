// The coordinator's write-ahead log and state store (DESIGN.md sections 7 and
// 9): the interface every implementation keeps (in-memory for tests and the
// simulation, RocksDB for the daemon, later etcd for cluster mode, DESIGN.md
// section 14). Nothing here assumes RocksDB or a single process.
//
// Promises:
// - An append with Durability::kDurable completes OK only once its records
//   (and every append accepted before it) survive a crash of the process or
//   the machine. Durable appends from many callers are group committed: one
//   write and one sync serve every append waiting at that moment.
// - An append with Durability::kBuffered completes OK once it is written
//   (the etcd log: held in memory for its gid's next write, etcd_log.h); it
//   may be lost in a crash, but only whole and only together with every
//   later append of its gid (the log keeps a prefix of each gid's appends;
//   the local logs keep one across gids too, the etcd log does not).
// - Appends of one gid are applied in the order Append was called. The caller
//   (the single owner of the gid, DESIGN.md section 8) issues them.
// - Write-once decisions: an append that would record a second, different
//   decision for a gid fails FAILED_PRECONDITION and writes nothing of itself;
//   the same decision again is accepted (idempotent).
// - Approvals are consumed atomically: a Decided or BranchResolved record
//   naming an approval is accepted only if that approval exists, is unused, has
//   not expired at the record's at_ms, and matches the gid, revision, content
//   hash, action (and branch); the approval is marked used in the same durable
//   write. Otherwise the whole append fails FAILED_PRECONDITION.
// - Fail-stop: once a write or sync fails, every waiting append gets the error
//   and every later one is refused (UNAVAILABLE or DATA_LOSS); durability is
//   never left unknown. Reads are refused too (RocksDB log): what a failed
//   group wrote may be readable though it was never made durable.
// - Opening a log whose synced records are corrupt or of an unknown format
//   version fails DATA_LOSS; a torn unsynced tail is dropped silently. A
//   read that finds corrupt synced state later answers DATA_LOSS and stops
//   the log as a failed write does (RocksDB log): nothing more is read or
//   written from a store known to be damaged.
//
// Append errors:
//   FAILED_PRECONDITION  a different decision stands; an approval does not
//                        match, expired or was used; the etcd log: a
//                        registration older than the shard's
//                        deduplication horizon (retention raced it)
//   ALREADY_EXISTS       a Registered record for a gid the log already holds
//   NOT_FOUND            any other record for a gid the log does not hold
//   INVALID_ARGUMENT     an empty append, or records that don't fit together
//   RESOURCE_EXHAUSTED   the append queue is full (back pressure; retry
//                        later); the etcd log: etcd is out of space (a
//                        registration), nothing written
//   ABORTED              the log's view of the gid was stale (another
//                        writer changed it since this log last read or
//                        wrote it: the etcd log): nothing written; the
//                        caller reloads the gid (Read) before it decides
//                        again
//   UNAVAILABLE          the gid's shard is not this log's to write (never
//                        taken, or lost: the etcd log), nothing written
//   UNAVAILABLE/DATA_LOSS the log failed and is stopped (fail-stop; local
//                        logs)
//
// The exact rules (wal/src/internal/txn_rules.h, the same for every
// implementation):
// - Registered is the first record of its append and names the append's gid;
//   the gid, branch ids and participant names must be valid ids
//   (INVALID_ARGUMENT). An interactive transaction starts OPEN, any other
//   TRYING.
// - StateChanged only moves to OPEN, TRYING or AWAITING_APPROVAL
//   (INVALID_ARGUMENT otherwise); after a decision it, and BranchAdded, are
//   FAILED_PRECONDITION.
// - Decided needs Confirm or Cancel (INVALID_ARGUMENT). Its approval must be
//   kForceCancel for Cancel, kForceConfirm or kGateApprove for Confirm. The
//   same decision again is accepted, but an approval it names is checked
//   again (a used one fails).
// - BranchResolved needs a decision and a kResolveBranch approval for that
//   branch. A record that consumes an approval needs at_ms > 0; an approval
//   is expired when at_ms >= expires_at_ms.
// - Finished needs the decision it implies (FAILED_PRECONDITION otherwise);
//   finished_at_ms is the first Finished record's at_ms.
// - A compacted transaction takes no more records (FAILED_PRECONDITION); a
//   forgotten gid can be registered again.
// - The retention policy is an option of each implementation
//   (MemoryLogOptions, RocksDbLogOptions).
//
// Shards (DESIGN.md section 14): the gid space is split into shard_count()
// shards by ShardOfGid; the owner epoch, the recovery scan, the
// deduplication horizon and ownership are per shard. A local log (memory,
// RocksDB) has one shard, shard 0, which it always owns; the etcd log has
// the cluster's, and may lose one (ShardLostFn).
//
// Thread-safety: every method may be called from any thread. Completion
// callbacks run on an implementation thread, or inline inside Append (the
// in-memory log in auto-sync mode): callers must not hold, while calling
// Append, a lock that the callback takes, and should hand the completion to
// their own executor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/wal/records.h"

namespace tcc::wal {

enum class Durability : uint8_t {
  kDurable,   // completes after the records are synced to disk
  kBuffered,  // completes after the records are written, not waited for
};

// One append: records for one gid, applied together or not at all.
struct AppendRequest {
  std::string gid;
  std::vector<Record> records;
  Durability durability = Durability::kDurable;
};

// Called once per append with its result.
using AppendDone = std::function<void(absl::Status)>;

// The shard of `gid` among `shards` (at least 1): the first 8 bytes of
// SHA-256(gid), big-endian, mod `shards` (DESIGN.md section 14). Every node
// and every log computes it so.
uint32_t ShardOfGid(std::string_view gid, uint32_t shards);

// Hears that the log lost a shard (its fence was refused, or its lease is
// gone): nothing more is written for it, and its owners must go (DESIGN.md
// section 14, "Ownership and fencing").
using ShardLostFn =
    std::function<void(uint32_t shard, const absl::Status& why)>;

// What the log knows of a transaction apart from its records: for duplicate
// and conflict checks and for lists. It outlives the full record as a compact
// entry (DESIGN.md section 9).
struct TxnSummary {
  std::string gid;
  TxnState state = TxnState::kTrying;
  Decision decision = Decision::kNone;
  Hash content_hash{};
  uint64_t revision = 0;
  int64_t created_at_ms = 0;
  int64_t registered_at_ms = 0;
  int64_t finished_at_ms = 0;             // 0 while unfinished
  std::vector<std::string> participants;  // sorted, unique
  bool compacted = false;  // only the compact entry is left (no records)
  // Cluster mode, a finished transaction: the node whose local archive
  // keeps its full record (its compact entry names it; DESIGN.md section 14,
  // "Finishing"). Read from another node, `compacted` is then true there:
  // the records are that node's. Empty for a local tccd's logs.
  std::string archive_node;
};

// A transaction as stored: its summary and its whole record history, in
// append order (empty when compacted).
struct TxnLog {
  TxnSummary summary;
  std::vector<Record> records;
};

struct ListQuery {
  std::vector<TxnState> states;      // empty: any state
  int64_t registered_before_ms = 0;  // 0: any age; else registered_at < this
  std::string participant;           // empty: any
  size_t page_size = 100;            // 1..1000
  std::string page_token;            // from ListPage::next_page_token
  // A page examines at most this many transactions (a filter matching few
  // would otherwise read the whole index in one call): it may then hold
  // fewer than page_size, even none, with a next_page_token to go on from.
  size_t scan_budget = 10000;
};

struct ListPage {
  std::vector<TxnSummary> items;  // oldest registration first
  std::string next_page_token;    // empty when there are no more
};

// DESIGN.md section 9. The size budget wins over time: when the data is over
// max_bytes, the oldest finished transactions go first (full records, then
// compact entries), never an unfinished one.
struct RetentionPolicy {
  int64_t full_record_ms = 24LL * 3600 * 1000;        // after finishing
  int64_t compact_entry_ms = 7LL * 24 * 3600 * 1000;  // after finishing
  uint64_t max_bytes = 0;                             // 0: no size budget
};

struct LogStats {
  uint64_t bytes_on_disk = 0;
  uint64_t syncs = 0;           // fsyncs (or equivalent) so far
  uint64_t synced_appends = 0;  // durable appends completed
  uint64_t buffered_appends = 0;
  uint64_t unfinished = 0;  // transactions not yet final
  int64_t dedup_horizon_ms = 0;
  // When the oldest unfinished transaction was registered (Unix ms; 0:
  // none), for its age. The etcd log leaves it 0 (its heads are keyed by
  // gid, with no index by time): in cluster mode the age gauge reads 0.
  int64_t oldest_unfinished_registered_ms = 0;
};

class Log {
 public:
  virtual ~Log() = default;

  // Appends records for one gid; `done` is called exactly once.
  virtual void Append(AppendRequest request, AppendDone done) = 0;

  // Stores a newly issued approval durably (DESIGN.md section 10). An id that
  // exists already is ALREADY_EXISTS.
  virtual void PutApproval(Approval approval, AppendDone done) = 0;

  // One transaction; NOT_FOUND if the log never held it or has forgotten it.
  [[nodiscard]] virtual absl::StatusOr<TxnLog> Read(std::string_view gid) = 0;

  // Read, for a request that creates `gid` when it is absent (Submit,
  // Begin). A log whose reads go to a remote store may answer NOT_FOUND
  // without asking it (`*blind` true) for a gid it holds no view of, while
  // the store answered it within kBlindCreateWindowMs: the registration's
  // own check then finds a gid that existed after all, and that append
  // fails ALREADY_EXISTS or ABORTED with nothing written, as do (ABORTED)
  // the gid's appends issued behind it before its answer, which were meant
  // for the transaction it registered; the caller then reads with Read.
  // Only a registration after a blind answer skips the read. Most new gids
  // are new, so the store is not asked for them at all.
  static constexpr int64_t kBlindCreateWindowMs = 1000;
  [[nodiscard]] virtual absl::StatusOr<TxnLog> ReadForCreate(
      std::string_view gid, bool* blind) {
    *blind = false;
    return Read(gid);
  }

  [[nodiscard]] virtual absl::StatusOr<Approval> ReadApproval(
      std::string_view approval_id) = 0;

  // Transactions by state, age and participant, paged.
  [[nodiscard]] virtual absl::StatusOr<ListPage> List(
      const ListQuery& query) = 0;

  // The number of shards (fixed for the log's life; 1 for a local log).
  virtual uint32_t shard_count() const = 0;
  uint32_t ShardOf(std::string_view gid) const {
    return ShardOfGid(gid, shard_count());
  }

  // Calls `visit` for every transaction of `shard` not yet final (the
  // recovery scan), in registration order. Stops at, and returns, the first
  // error `visit` returns. INVALID_ARGUMENT for a shard out of range.
  [[nodiscard]] virtual absl::Status ScanUnfinished(
      uint32_t shard, const std::function<absl::Status(TxnLog)>& visit) = 0;

  // Durably takes a new owner epoch for `shard`, greater than every epoch
  // taken before for it (a restarted process, or a new owner of the shard,
  // drives with a higher epoch).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> TakeOwnerEpoch(
      uint32_t shard) = 0;

  // Who hears of a lost shard; set before the first TakeOwnerEpoch. A local
  // log never loses its shard and ignores it.
  virtual void SetShardLostHandler(ShardLostFn /*lost*/) {}

  // Applies the retention policy as of `now_ms` (wall clock): removes full
  // records and compact entries of finished transactions that are due. Runs
  // without stalling appends. Raises the deduplication horizon.
  [[nodiscard]] virtual absl::Status RunRetention(int64_t now_ms) = 0;

  // The oldest created_at (Unix ms) the log can still answer for in `shard`:
  // one more than the largest created_at of any transaction of the shard it
  // has forgotten (0 when it has forgotten none). Durable: it never goes
  // back, across restarts too.
  virtual int64_t DedupHorizonMs(uint32_t shard) const = 0;

  virtual LogStats Stats() const = 0;
};

}  // namespace tcc::wal
