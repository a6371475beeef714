// A modelled fenced store for the cluster simulation (DESIGN.md section 14):
// etcd as tccd sees it, at its worst. Keys carry create_revision,
// mod_revision and a lease; one revision counter for the store; Txns with
// compares on create_revision, mod_revision and lease, success and failure
// ops, nested Txns; leases with a TTL, kept alive, expiring with their keys.
//
// The worst of etcd it shows, each where its caller can meet it:
// - a Txn whose answer timed out may still apply, late (the network decides
//   when it arrives; a store without a leader may keep it and apply it when
//   it has one again);
// - a read neither linearizable nor pinned to a revision may be stale (it
//   answers as of an older revision);
// - a Txn that names a key twice (put or delete, along any path of its
//   nesting) is refused whole, INVALID_ARGUMENT, nothing applied;
// - a new leader (after unavailability, or a leader change) renews every
//   lease: their TTLs start again.
//
// Values are not bytes: the model keeps what the writer meant (the owner's
// node id, a transaction's records), so no codec is needed.
//
// The oracle (invariant 9, fencing): a Txn carries, beside what etcd would
// see, the writer's claims (its lease, its epoch per shard); every write
// under txn/<k>/ that the store applies is checked against the shard's
// owner key at that moment. A write from an epoch that is not the current
// one is a violation, whatever the Txn compared.
//
// Not thread-safe; one simulation per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tcc/wal/log.h"

namespace tcc::sim {

// A stored value: what the writer meant.
struct StoreValue {
  std::string text;  // owner and member keys: the node id
  // Transaction heads: the transaction as committed, the epoch and the
  // append that wrote this version, and every append id the transaction
  // holds (the model of record keys named by the append that wrote them:
  // the log reads it to tell an unknown outcome; the oracle checks it).
  std::shared_ptr<const wal::TxnLog> txn;
  uint64_t writer_epoch = 0;
  uint64_t append_id = 0;
  std::shared_ptr<const std::vector<uint64_t>> appends;
};

struct KeyValue {
  std::string key;
  StoreValue value;
  int64_t create_revision = 0;  // 0: absent
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct StoreTxn;

struct StoreOp {
  enum class Kind : uint8_t { kPut, kDelete, kGet, kTxn };
  Kind kind = Kind::kGet;
  std::string key;
  bool prefix = false;  // kGet only: every key starting with `key`
  StoreValue value;     // kPut
  int64_t lease = 0;    // kPut
  std::shared_ptr<const StoreTxn> txn;  // kTxn
  // The oracle's (kPut): the mod_revision the writer last saw of the key
  // (-1: none claimed). A put over a later version is a lost update.
  int64_t seen_mod_revision = -1;
};

struct StoreCompare {
  enum class Target : uint8_t { kCreateRevision, kModRevision, kLease };
  std::string key;
  Target target = Target::kModRevision;
  int64_t equals = 0;  // an absent key has 0 for all three
};

struct StoreTxn {
  std::vector<StoreCompare> compares;
  std::vector<StoreOp> success, failure;
  // The oracle's: who wrote it and which epoch it claims per shard.
  std::string writer;
  int64_t writer_lease = 0;
  std::map<uint32_t, uint64_t> claimed_epochs;
};

struct OpResult {
  std::vector<KeyValue> kvs;                    // kGet
  std::shared_ptr<const struct TxnResult> txn;  // kTxn
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after it
  std::vector<OpResult> results;
};

// How a read sees the store.
struct ReadMode {
  int64_t revision = 0;       // > 0: exactly as of this revision
  bool linearizable = false;  // else, unpinned: may be stale
};

class FencedStore {
 public:
  explicit FencedStore(uint32_t shards, uint64_t seed);

  // Applies `txn` now. INVALID_ARGUMENT (nothing applied) when it names a
  // key twice along a path.
  absl::StatusOr<TxnResult> Apply(const StoreTxn& txn, int64_t now_ms);
  // A range read (a key, or every key under a prefix).
  absl::StatusOr<std::vector<KeyValue>> Range(const std::string& key,
                                              bool prefix, ReadMode mode);

  // Leases (TTL in ms). KeepAlive answers the TTL granted, or 0 when the
  // lease is gone.
  int64_t Grant(int64_t ttl_ms, int64_t now_ms);
  int64_t KeepAlive(int64_t lease, int64_t now_ms);
  // Revokes every lease past its expiry (with its keys).
  void ExpireLeases(int64_t now_ms);
  // A new leader: every lease's TTL starts again.
  void RenewAllLeases(int64_t now_ms);
  // Whether `lease` is still granted and not past its expiry at `now_ms`
  // (the oracle of lease trust).
  bool LeaseAlive(int64_t lease, int64_t now_ms) const;

  int64_t revision() const { return revision_; }
  // Stale reads: an unpinned read lags up to this many revisions (0: none).
  void set_max_stale_revisions(int64_t n) { max_stale_ = n; }

  // The current owner epoch of a shard (0: unowned) and its lease.
  std::optional<KeyValue> Get(const std::string& key) const;

  // Fencing violations seen (invariant 9), in order.
  const std::vector<std::string>& violations() const { return violations_; }
  // Writes applied (every put or delete); unpinned reads answered stale.
  uint64_t writes() const { return writes_; }
  uint64_t stale_reads() const { return stale_reads_; }
  // Called for every transaction head the store writes.
  std::function<void(const KeyValue&)> on_head_written;

 private:
  struct Version {
    int64_t mod_revision = 0;
    std::optional<KeyValue> kv;  // nullopt: deleted
  };
  struct Lease {
    int64_t ttl_ms = 0;
    int64_t expires_at_ms = 0;
  };
  bool NamesKeyTwice(const StoreTxn& txn) const;
  bool Evaluate(const StoreCompare& c) const;
  // `root`: the Txn sent (its claims are the oracle's).
  void Run(const StoreTxn& txn, const StoreTxn& root, TxnResult& out,
           bool& wrote);
  void Write(const std::string& key, std::optional<KeyValue> kv);
  void CheckFence(const StoreTxn& txn, const std::string& key);
  std::optional<KeyValue> At(const std::string& key, int64_t revision) const;

  const uint32_t shards_;
  uint64_t rng_state_;
  int64_t revision_ = 1;
  int64_t max_stale_ = 0;
  std::map<std::string, KeyValue> kvs_;
  std::map<std::string, std::vector<Version>> history_;
  std::map<int64_t, Lease> leases_;
  int64_t next_lease_ = 0x1000;
  std::vector<std::string> violations_;
  uint64_t writes_ = 0;
  uint64_t stale_reads_ = 0;
};

// The key layout (as wal/src/etcd/etcd_keys.h, without the prefix).
std::string OwnerKey(uint32_t shard);
std::string NodeKey(const std::string& node_id);
std::string HeadKey(uint32_t shard, const std::string& gid);
std::string HeadPrefix(uint32_t shard);

}  // namespace tcc::sim
