// The node's local archive of finished transactions' full records (DESIGN.md
// section 14, "What lives where"): a RocksDB of its own, written without
// sync (what it holds may be lost with the node), and the highest etcd
// revision this node has seen (an etcd whose revision went back below it
// was restored from a snapshot: DATA_LOSS).
//
//   t/<gid>            summary (record_codec.h), u32 n, n x (u32 size,
//                      record)
//   f/<finished_at>/<gid>  empty: t/<gid>'s finish time (8 bytes, big
//                      endian, so in time order), for EraseFinishedBefore;
//                      may outlive t/<gid> (Erase leaves it); every final
//                      record has one
//   m/finish_index     present once every t/ has its f/ (an archive of an
//                      earlier version gets them when opened)
//   m/max_revision     u64
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/rocksdb_env/info_log.h"
#include "tcc/wal/log.h"

namespace rocksdb {
class DB;
class Env;
}  // namespace rocksdb

namespace tcc::wal::internal {

class Archive {
 public:
  // Files 0600 and directories 0700, as the RocksDB log's (one left looser
  // is tightened, with a warning); RocksDB's warnings and errors go to
  // `info_log` (null: stderr), never to a LOG file in `dir`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Archive>> Open(
      const std::string& dir, rocksdb_env::InfoLogSink info_log);
  ~Archive();
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  // NOT_FOUND when it holds no full record of the gid.
  [[nodiscard]] absl::StatusOr<TxnLog> Get(std::string_view gid) const;
  [[nodiscard]] absl::Status Put(const TxnLog& txn);
  // Several in one write (one group's finished transactions).
  [[nodiscard]] absl::Status PutAll(const std::vector<TxnLog>& txns);
  [[nodiscard]] absl::Status Erase(std::string_view gid);
  // Erases every full record of a transaction finished before `before_ms`
  // (whichever shard it is of: a node keeps no record of a shard it lost
  // longer than it would have kept it), reading only those. Returns how
  // many it erased.
  [[nodiscard]] absl::StatusOr<size_t> EraseFinishedBefore(int64_t before_ms);
  // 0 when never set.
  [[nodiscard]] absl::StatusOr<int64_t> MaxRevision() const;
  [[nodiscard]] absl::Status RaiseMaxRevision(int64_t revision);
  uint64_t BytesOnDisk() const;

 private:
  Archive(std::unique_ptr<rocksdb::Env> env, std::unique_ptr<rocksdb::DB> db,
          std::string dir);
  // Adds the f/ keys to an archive that has none yet (see above).
  absl::Status IndexOnce();
  std::unique_ptr<rocksdb::Env> env_;  // outlives db_
  std::unique_ptr<rocksdb::DB> db_;
  const std::string dir_;
  // Put, PutAll, Erase and EraseFinishedBefore's check-and-delete.
  std::mutex write_mu_;
};

}  // namespace tcc::wal::internal
