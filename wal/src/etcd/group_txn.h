// One group commit of the etcd log as one etcd Txn (DESIGN.md section 14,
// "Group commit"): what it writes, what it costs against etcd's limits, and
// the Txn itself. Pure: no I/O, no locks; thread-compatible.
//
// The Txn, top down:
//   success: one nested Txn per shard, then one per new approval
//   shard Txn   compare  the shard's fence (AddShardFence)
//               success  one nested Txn per gid of the shard, in order
//               failure  range owner
//   gid Txn     compare  a registration: create_revision(head) == 0,
//                        create_revision(done) == 0, value(horizon) <
//                        created_at + 1; else mod_revision(head) == the
//                        view's; and mod_revision(approval) == the one read,
//                        for each approval it consumes
//               success  put its new records (one key, or in the head:
//                        see "Inline records" below) and its head; a
//                        finishing one deletes head and record keys (their
//                        values returned, for the archive; no delete when
//                        it has none) and puts done instead;
//                        put each consumed approval
//               failure  nothing (the etcd log reads a refused gid's
//                        head, done and horizon after the group)
//   approval    compare  create_revision(approval) == 0
//               success  put;  failure  range
//   last, at the top: put quota/<node> (empty), so etcd's quota sees it
//
// Inline records: a transaction's first records live in its head while
// they are all it has and take at most kInlineMaxBytes encoded; a later
// append's records then go into the head too (the head is put anyway), and
// the first append that would pass the limit writes a record key as above,
// and so does every one after it, the head keeping its inline records. On
// etcd every key costs a put, a tombstone and an index entry on each
// member, which for a small transaction (two branches, 100 B payloads:
// registration, decision, end) is most of its cost: its records then take
// no key at all, and its end no range delete. What a head put rewrites is
// bounded by kInlineMaxBytes, never the whole transaction (large payloads
// go to record keys from the registration on).
//
// Cost (etcd's --max-txn-ops rule): a level costs the largest of its
// compares, success ops and failure ops, and along every path the levels'
// costs add up: top (shards + approvals + the quota put) + shard (its gids, at
// least 2) + gid (its own) must stay within max_txn_ops.
//
// The answer: the record keys the finishing writes delete come back in it,
// and a client takes answers of a bounded size only (one it refuses leaves
// the Txn's outcome unknown, and the archive without those records): their
// bytes, as each head counts them (HeadValue::record_key_bytes), stay within
// GroupLimits::max_answer_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "etcd/etcd_keys.h"
#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"
#include "tcc/wal/log.h"

namespace tcc::wal::internal {

// An approval as read from etcd for a group (mod_revision 0: absent).
struct ApprovalState {
  std::optional<Approval> approval;
  int64_t mod_revision = 0;
};

// One gid's appends in a group, merged in order.
struct GidWrite {
  std::string gid;
  uint32_t shard = 0;
  bool registers = false;         // the head did not exist before the group
  bool finishes = false;          // the group finishes the transaction
  int64_t created_at_ms = 0;      // registrations: the horizon compare
  int64_t head_mod_revision = 0;  // others: the head compare
  uint64_t first_seq = 0;         // its record count before the group
  // The head's inline records before the group (HeadValue::inline_records:
  // the gid's records 0 to size-1, EncodeRecord of each).
  std::vector<std::string> inline_before;
  std::vector<Record> records;  // new records (not written if finishing)
  // EncodeRecord of each of `records`, when the writer has them (the etcd
  // log encodes an append's records on the appending thread, once); empty
  // otherwise, and then they are encoded when needed.
  std::vector<std::string> encoded;
  TxnSummary summary;  // after the group
  uint64_t owner_epoch = 0;
  uint64_t append_id = 0;
  // Approvals it consumes (marked used) and the mod_revision read.
  std::vector<std::pair<Approval, int64_t>> consumed;
  std::string compact_value;  // finishing: the compact entry
  std::vector<size_t> items;  // the group's items it answers
  // Its record keys' bytes before the group (HeadValue::record_key_bytes;
  // 0 with record keys: unknown).
  uint64_t record_key_bytes = 0;
};

// The most a head holds of its transaction's records (their encoded bytes).
constexpr size_t kInlineMaxBytes = 2048;

// Whether w's new records go into its head (see "Inline records" above).
bool RecordsInline(const GidWrite& w);
// The head's inline records after w.
std::vector<std::string> InlineAfter(const GidWrite& w);
// Whether the gid had records under record keys before the group.
inline bool HasRecordKeys(const GidWrite& w) {
  return w.first_seq > w.inline_before.size();
}

struct NewApproval {
  Approval approval;
  size_t item = 0;
};

struct GroupLimits {
  size_t max_txn_ops = 1024;
  size_t max_request_bytes = 4 << 20;
  // The most the group's answer may carry of the record keys its finishing
  // writes delete (0: no bound). A write whose record keys' bytes are
  // unknown counts as the whole of it; one write alone always fits.
  size_t max_answer_bytes = 0;
};

// The shard fences: epoch per shard; and the node's quota probe key
// (etcd_keys.h), put at the top level of every group.
struct Fences {
  const std::vector<uint64_t>* epochs = nullptr;
  std::string quota_key;
};

// The fence of every write for shard `shard` (DESIGN.md section 14,
// "Ownership and fencing"): one compare, mod_revision(owner) == epoch. It
// says what DESIGN's two compares say, create_revision(owner) == epoch and
// lease(owner) == the node's lease, in one read of the key: the owner key
// is created by the campaign's Txn (at revision epoch, under the node's
// lease) and never written again, and only a put changes a key's lease, so
// a key whose last write is at revision epoch is that very key with that
// lease; a key deleted and created again, or written since, has a later
// mod_revision (etcd revisions only grow).
void AddShardFence(etcdserverpb::TxnRequest& txn, const etcd_keys::Layout& keys,
                   uint32_t shard, uint64_t epoch);

class GroupTxn {
 public:
  GroupTxn(const etcd_keys::Layout& keys, GroupLimits limits)
      : keys_(keys), limits_(limits) {}

  // The ops and bytes `w` costs as it stands.
  static size_t GidCost(const GidWrite& w);
  size_t GidBytes(const GidWrite& w) const;
  // What the group's answer carries for `w`: the record keys a finishing
  // write deletes (at most, framing included), limits.max_answer_bytes when
  // unknown; 0 for any other write.
  size_t AnswerBytes(const GidWrite& w) const;
  // Its record keys' bytes after the group (the head it puts says so; 0 if
  // unknown before, or finishing).
  uint64_t RecordKeyBytesAfter(const GidWrite& w) const;

  // Whether the group still fits etcd's limits with `w` in it (replacing
  // the write of the same gid, if any).
  bool Fits(const GidWrite& w) const;
  bool FitsApproval(const Approval& a) const;
  // Whether `w` would fit a group of its own.
  bool FitsAlone(const GidWrite& w) const;

  // Adds or replaces the write of w.gid.
  void Put(GidWrite w);
  // By value: callers pass the gid of the write it destroys.
  void Remove(std::string gid);
  void AddApproval(NewApproval a);
  void RemoveApproval(size_t index);

  bool empty() const { return order_.empty() && approvals_.empty(); }
  // Shards in order, and in each the gids' writes in order.
  const std::vector<std::pair<uint32_t, std::vector<std::string>>>& shards()
      const {
    return order_;
  }
  const std::map<std::string, GidWrite>& writes() const { return writes_; }
  GidWrite* Find(const std::string& gid);
  const std::vector<NewApproval>& approvals() const { return approvals_; }

  etcdserverpb::TxnRequest Build(const Fences& fences) const;

 private:
  // Ops along the deepest path if shard `shard` held `gids` gids whose
  // largest cost is `gid_max` (the others as they are), with `shards`
  // shards and `approvals` new approvals.
  size_t OpsWith(uint32_t shard, size_t gids, size_t gid_max, size_t shards,
                 size_t approvals) const;
  void BuildGid(const GidWrite& w, etcdserverpb::TxnRequest& out) const;

  struct ShardStats {
    size_t gids = 0;
    size_t gid_max = 0;  // the largest GidCost of its writes
  };

  const etcd_keys::Layout& keys_;
  const GroupLimits limits_;
  std::vector<std::pair<uint32_t, std::vector<std::string>>> order_;
  std::map<std::string, GidWrite> writes_;
  // What each write costs: its GidBytes and its AnswerBytes.
  struct WriteCost {
    size_t bytes = 0;
    size_t answer = 0;
  };
  std::map<std::string, WriteCost> costs_;
  size_t answer_bytes_ = 0;  // of writes_
  std::map<uint32_t, ShardStats> stats_;
  std::vector<NewApproval> approvals_;
  size_t bytes_ = 0;  // of writes_ and approvals_
};

}  // namespace tcc::wal::internal
