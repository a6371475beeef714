// The cluster's Log: every record that must outlive a node in etcd, fenced
// by shard ownership (DESIGN.md section 14). It keeps every promise of
// log.h except fail-stop (etcd being unreachable stops nothing: appends wait
// and are sent again); this header says how. The key layout is documented
// in wal/src/etcd/etcd_keys.h, the values in wal/src/etcd/etcd_codec.h.
//
// Ownership: TakeOwnerEpoch(k) campaigns for shard k: it creates
// shards/<k>/owner under the node's lease (options.lease_id) with a Txn
// requiring the key to be absent; the key's create_revision in that Txn's
// own answer is the epoch. A campaign whose answer was lost is resolved by
// reading the key (its lease says whose it is). Taking a shard this log
// owns already deletes its owner key with the fenced delete and campaigns
// again (a higher epoch). A shard another node owns is waited for up to
// options.campaign_wait_ms (its owner's lease may be expiring), then
// UNAVAILABLE. Every write for shard k compares
// mod_revision(owner) == epoch (the owner key is never written after the
// campaign created it under lease_id, so this says create_revision ==
// epoch and lease == lease_id in one compare: group_txn.h); a refused
// fence loses the shard: its waiting appends and every later one are
// UNAVAILABLE, and the ShardLostFn hears of it once, before those waiting
// are answered. A shard not taken is
// UNAVAILABLE too.
//
// Group commit: one committer thread takes every append waiting, checks
// each against the gid's view (the summary and the head's mod_revision as
// this log last read or wrote them; loaded from etcd when it has none, but
// for a gid whose first append in the group registers it: that one is
// taken as absent, and its compare refuses it, ALREADY_EXISTS, if it
// exists after all) with
// the rules of txn_rules.h, and sends one etcd Txn: a nested Txn per shard
// comparing its fence, inside it one per gid (that gid's accepted appends
// merged in order) comparing the head's mod_revision (a registration: the
// head and the compact entry absent, the horizon not above its created_at),
// and the mod_revision of every approval it consumes; a refused gid or a
// lost shard refuses nothing else (the shard's failure branch reads its
// owner key; a gid's has no ops: a refused gid's head, compact entry and
// horizon are read after the group, until etcd answers). No key appears twice
// in a Txn (an append that would repeat one waits for the next); a Txn fits
// options.max_txn_ops (etcd's rule: along each path of the nesting, the sum
// over its levels of the largest of compares, success ops and failure ops) and
// options.max_request_bytes; an append that cannot fit alone is
// INVALID_ARGUMENT. A Txn etcd refuses whole for its size is sent again split,
// in order. A group's answer is bounded too: the records its finishing
// writes delete, which come back in it for the archive, take at most half
// the client's max_message_bytes (group_txn.h), but for a write alone in
// its group; an answer the client refuses is an unknown outcome, resolved
// as a lost one (below). Appends complete once etcd answered their Txn, but for the held
// ones below.
//
// Held buffered appends (DESIGN.md section 14, "Group commit": buffered
// appends ride in the next group and may be lost with the node): a buffered
// append that neither registers, consumes an approval, nor finishes its
// transaction (internal::MayHold), of a gid whose view is current, of an
// owned shard, with nothing of the gid queued or in a group, is checked
// against the rules at once, answered OK, and held in memory. The gid's
// next append (durable, finishing, or any the log does not hold) is queued
// behind them, so they ride in its group, in order; a Txn never carries an
// append without the held ones before it. What is held longer than
// options.hold_buffered_ms (without a next append: a slow participant) is
// queued by the committer, which looks every hold_buffered_ms when idle (so
// a held append waits at most twice that). Read and ScanUnfinished on this
// node show them (after what etcd has, unless another writer changed the
// gid); List and other nodes see them once written. So log.h's prefix holds per
// gid, not across gids: a crash loses a gid's held appends while a later append
// of another gid survives (recovery is per gid: DESIGN.md section 8 asks every
// branch again). A change of a shard's ownership (taken again, lost, released,
// a new lease) forgets what is held for it; a graceful close (the destructor)
// writes it first, waiting at most options.txn_timeout_ms. At most 64 are held
// per gid (a further one is queued behind them) and options.max_queued in all.
// Per transaction this puts its head to etcd 2-3 times instead of once per
// append, and the records of its second phase go to the archive only (the
// finishing group deletes them anyway).
//
// A gid whose compare was refused (someone else wrote it: its view is
// stale) answers its appends ABORTED, and every later append of it too
// until Read(gid) reloads the view (the caller's reload; log.h).
//
// Unknown outcomes: a Txn answered with a status that leaves its outcome
// unknown (etcd::IsUnknownOutcome) stays pending and is sent again,
// identical, until etcd answers; the refused gids' keys, read then, show
// gid by gid whether the head holds this append's (epoch, append_id) (it
// committed) or not (refused). While one is pending nothing else is sent, so
// the appends of a gid keep their order. Only a definitive answer fails an
// append.
//
// Out of space (etcd's quota alarm): registrations are RESOURCE_EXHAUSTED
// and the other appends wait, sent again until space is freed.
//
// Finishing: an append that finishes a transaction deletes its head and
// records and writes its compact entry at done/<k>/<gid>, in one fenced Txn,
// and moves its full record to the local archive (a RocksDB in
// options.archive_dir, not synced: it may be lost with the node): the
// records etcd held come back in that Txn's own answer (its delete returns
// them), so no read precedes it. When that answer was lost and the Txn sent
// again found it committed, the archive keeps no full record of it (Read
// then shows the compact entry, as for a node's lost archive). Read answers a
// finished gid from the compact entry and, if this node's archive has it, the
// full record. Appends to a finished transaction that the rules accept (history
// only: nothing they carry changes the summary) go to the archive alone.
//
// Retention (RunRetention): archived full records go after
// retention.full_record_ms; compact entries after retention.compact_entry_ms
// (the deduplication window), deleted by a fenced Txn that also raises the
// shard's horizon past their created_at. With retention.max_bytes, the
// oldest compact entries go first when their bytes exceed it, but never one
// younger than options.min_dedup_window_ms: then registrations are refused
// (RESOURCE_EXHAUSTED) until they may go.
//
// Limits: ScanUnfinished reads the shard's heads whole. List has no
// registration-time index in etcd (a later part): it reads every shard's
// heads (the unfinished transactions) and sorts them; a query that can match
// a finished transaction (no states, or a final one among them) also reads
// every compact entry, which the deduplication window keeps (at 1,000
// transactions a second and a 1 h window: 3.6 million), so it is refused,
// FAILED_PRECONDITION (not RESOURCE_EXHAUSTED, which is back pressure: a
// retry soon does not help), while etcd holds more than
// options.list_max_finished of them (counted first, keys only). A query of
// unfinished states (tccd's Status, the console's overview) never reads
// them. Read takes one linearizable read Txn.
//
// Thread-safety: every method may be called from any thread. Completion
// callbacks run on the committer thread and must not block for long, nor
// call TakeOwnerEpoch or RunRetention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tcc/etcd/client.h"
#include "tcc/rocksdb_env/info_log.h"
#include "tcc/wal/log.h"

namespace tcc::wal {

struct EtcdLogOptions {
  etcd::Client* client = nullptr;  // not owned; outlives the log
  std::string key_prefix;          // the cluster's, ending in '/'
  std::string node_id;
  std::string node_address;  // written into the owner keys it creates
  int64_t lease_id = 0;      // the node's lease (cluster membership)
  // The local archive of finished transactions' full records (a RocksDB,
  // owner-only files), and where its RocksDB warnings and errors go (null:
  // stderr).
  std::string archive_dir;
  rocksdb_env::InfoLogSink info_log = nullptr;
  RetentionPolicy retention;
  int64_t min_dedup_window_ms = 0;
  // etcd's --max-txn-ops and --max-request-bytes (the group's limits).
  size_t max_txn_ops = 1024;
  size_t max_request_bytes = 4 << 20;
  size_t max_queued = 100000;  // beyond it Append is RESOURCE_EXHAUSTED
  int64_t txn_timeout_ms = 5000;
  // A group's Txn, and every other call of the log's (reads, the ownership
  // Txns, retention's), is sent with this deadline (at most txn_timeout_ms);
  // from the second send that waits it out on, each next send waits twice as
  // long, up to txn_timeout_ms (a send that fails at once changes nothing).
  // etcd never answers a Txn that a follower forwarded to a leader that then
  // died (the proposal is lost with it): such a Txn is sent again after this
  // deadline, not after txn_timeout_ms; the second send keeps it, since it may
  // reach a member that has not yet noticed the leader's death. So losing
  // etcd's leader stalls appends about as long as etcd takes to elect another.
  int64_t txn_attempt_timeout_ms = 1000;
  // How long a buffered append may be held for its gid's next group (see
  // "Held buffered appends" above); 0: none is held, every append waits for
  // its own Txn.
  int64_t hold_buffered_ms = 500;
  // Between sends of a Txn whose outcome is unknown (doubling up to 1 s).
  int64_t resend_backoff_ms = 50;
  // TakeOwnerEpoch on a shard another node owns waits this long for its
  // owner key to go (the owner's lease to expire) before it answers
  // UNAVAILABLE. 0: answers at once.
  int64_t campaign_wait_ms = 0;
  // The most compact entries a List that can match finished transactions
  // reads (see "Limits" above).
  size_t list_max_finished = 100000;
  // Called by the committer after each group Txn etcd committed, with how
  // long it took from its first send to etcd's answer (resends of the
  // identical Txn included; a group split for etcd's limits is timed anew)
  // and how many appends it carried (a gid refused inside it, on its
  // compare or its shard's fence, included): the figures of RocksDbLog's
  // on_sync, for the same latency metric. `now_us` is the monotonic clock
  // it is measured with (this library reads no clock). Both or neither;
  // must be quick and thread-safe.
  std::function<int64_t()> now_us;
  std::function<void(int64_t txn_us, uint64_t appends)> on_sync;
};

// What InitCluster wrote, and what Open checks.
struct ClusterInfo {
  uint64_t etcd_cluster_id = 0;
  uint32_t shards = 0;
  int64_t created_revision = 0;
};

// Creates the cluster under `key_prefix` once (DESIGN.md section 14): the
// cluster record with etcd's cluster_id, `shards` and every shard's horizon.
// ALREADY_EXISTS if a cluster is there already (nothing written).
[[nodiscard]] absl::StatusOr<ClusterInfo> InitCluster(
    etcd::Client& client, const std::string& key_prefix, uint32_t shards);

// Reads the cluster under `key_prefix` and checks it against etcd:
// FAILED_PRECONDITION when there is none (a node never takes an empty or
// replaced etcd for a new cluster), DATA_LOSS when etcd's cluster_id is
// another or its revision went back below the cluster's creation.
[[nodiscard]] absl::StatusOr<ClusterInfo> ReadCluster(
    etcd::Client& client, const std::string& key_prefix);

class EtcdLog final : public Log {
 public:
  // Checks the cluster (ReadCluster), opens the archive and starts the
  // committer. No shard is taken yet.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdLog>> Open(
      EtcdLogOptions options);
  // Stops the committer after the Txn in flight; appends still waiting are
  // UNAVAILABLE (their outcome, if sent, is in etcd for the next reader).
  ~EtcdLog() override;
  EtcdLog(const EtcdLog&) = delete;
  EtcdLog& operator=(const EtcdLog&) = delete;

  void Append(AppendRequest request, AppendDone done) override;
  void PutApproval(Approval approval, AppendDone done) override;
  [[nodiscard]] absl::StatusOr<TxnLog> Read(std::string_view gid) override;
  // Blind (no etcd read) for a gid without a view while etcd answered
  // within the last second; the registration's compare-and-set (head and
  // compact entry absent) refuses one that exists, ALREADY_EXISTS, with
  // nothing written. Otherwise: Read. Read keeps the view of an unfinished
  // gid of an owned shard, so a create after it is not blind.
  [[nodiscard]] absl::StatusOr<TxnLog> ReadForCreate(std::string_view gid,
                                                     bool* blind) override;
  [[nodiscard]] absl::StatusOr<Approval> ReadApproval(
      std::string_view approval_id) override;
  [[nodiscard]] absl::StatusOr<ListPage> List(const ListQuery& query) override;
  uint32_t shard_count() const override;
  [[nodiscard]] absl::Status ScanUnfinished(
      uint32_t shard,
      const std::function<absl::Status(TxnLog)>& visit) override;
  [[nodiscard]] absl::StatusOr<uint64_t> TakeOwnerEpoch(
      uint32_t shard) override;
  void SetShardLostHandler(ShardLostFn lost) override;
  [[nodiscard]] absl::Status RunRetention(int64_t now_ms) override;
  int64_t DedupHorizonMs(uint32_t shard) const override;
  LogStats Stats() const override;

  // Gives shard k up: the fenced delete of its owner key, the one this log
  // created when it owns k, else the one created at revision `epoch` (the
  // membership read's; 0: none); from then on no Txn of this log commits
  // for it. An error leaves the key in etcd: the caller releases again (the
  // next membership read still shows the key as this node's).
  [[nodiscard]] absl::Status ReleaseShard(uint32_t shard, uint64_t epoch = 0);
  // The node joined again with a new lease (its old one was lost, and every
  // owner key with it): campaigns and fences use `lease_id` from now on,
  // and no shard is owned until taken again.
  void SetLease(int64_t lease_id);
  // OK while the log can go on; DATA_LOSS once etcd was found to be another
  // cluster's, or restored to an older revision (the daemon stops).
  absl::Status failure() const;
  // True while the shard is taken and not lost.
  bool Owns(uint32_t shard) const;
  const ClusterInfo& cluster() const;
  // etcd Txns sent for appends (resends included), the appends they
  // committed, and the mean per committed Txn: the group commit's figures.
  uint64_t txns_sent() const;
  uint64_t appends_committed() const;
  // Buffered appends answered at once and held for a later group (each is
  // counted in appends_committed() too, once written).
  uint64_t appends_held() const;
  double MeanAppendsPerTxn() const;
  // Group Txns etcd refused as too large (over its --max-txn-ops or
  // --max-request-bytes), each sent again smaller: 0 while the log's
  // limits are etcd's.
  uint64_t txns_refused_too_large() const;
  // This node's Txns etcd refused on a shard's fence (the shard had another
  // owner, or none): a group Txn's part for one shard, or a retention Txn.
  // Each also loses the shard (its writes are answered UNAVAILABLE).
  uint64_t fenced_writes_refused() const;

  class Impl;

 private:
  explicit EtcdLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tcc::wal
