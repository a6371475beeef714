// The etcd log's key layout under the cluster's key prefix P (DESIGN.md
// section 14). Gids and approval ids are of [A-Za-z0-9._:-], which has no
// '/', so "rec/<k>/<gid>/" prefixes one gid's records only. Shards are
// written as 4 decimal digits (at most 9999 shards) so that keys sort by
// shard.
//
//   P cluster                  the cluster record (etcd_codec.h): etcd's
//                              cluster_id, the shard count, the revision it
//                              was created at. Written once (--init-cluster)
//   P nodes/<node_id>          a live node, under its lease; the value is
//                              its address
//   P drain/<node_id>          the node is being drained (tccctl drain),
//                              under that node's lease; empty
//   P shards/<k>/owner         the shard's owner (node id, address), under
//                              its lease; created only if absent and never
//                              written again; its create_revision is the
//                              owner epoch
//   P shards/<k>/horizon       the shard's deduplication horizon, 16 hex
//                              digits of the sortable i64 (compares in
//                              order); exists from the cluster's creation
//   P head/<k>/<gid>           an unfinished transaction's head (its
//                              summary, record count, the epoch and append
//                              id of its last append, and its first
//                              records while they are small: group_txn.h
//                              "Inline records"); every append compares
//                              its mod_revision
//   P rec/<k>/<gid>/<seq>      the gid's records from number seq (16 hex
//                              digits) on, as one group wrote them (one
//                              record or a batch: etcd_codec.h); none
//                              while the head holds them all
//   P done/<k>/<gid>           a finished transaction's compact entry
//                              (summary, finished_at, the node whose
//                              archive holds its full record), for the
//                              deduplication window
//   P approvals/<id>           an approval (record_codec.h)
//   P quota/<node_id>          empty; every group Txn of the node puts it at
//                              its top level, so that etcd's backend quota
//                              sees the Txn (etcd 3.4 counts only a Txn's
//                              top-level puts against the quota: one made
//                              of nested Txns alone would pass an etcd out
//                              of space, and never raise its alarm)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tcc::wal::internal::etcd_keys {

inline std::string ShardPart(uint32_t shard) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04u", shard);
  return buf;
}

// The first key after every key that starts with `prefix`.
inline std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key: etcd's "from key" range end
}

class Layout {
 public:
  explicit Layout(std::string prefix) : p_(std::move(prefix)) {}
  const std::string& prefix() const { return p_; }
  std::string Cluster() const { return p_ + "cluster"; }
  std::string Node(std::string_view id) const {
    return p_ + "nodes/" + std::string(id);
  }
  std::string AllNodes() const { return p_ + "nodes/"; }
  std::string Drain(std::string_view id) const {
    return p_ + "drain/" + std::string(id);
  }
  std::string AllDrain() const { return p_ + "drain/"; }
  std::string AllShards() const { return p_ + "shards/"; }
  std::string Owner(uint32_t k) const {
    return p_ + "shards/" + ShardPart(k) + "/owner";
  }
  std::string Horizon(uint32_t k) const {
    return p_ + "shards/" + ShardPart(k) + "/horizon";
  }
  std::string HeadPrefix(uint32_t k) const {
    return p_ + "head/" + ShardPart(k) + "/";
  }
  std::string AllHeads() const { return p_ + "head/"; }
  std::string Head(uint32_t k, std::string_view gid) const {
    return HeadPrefix(k) + std::string(gid);
  }
  std::string RecordPrefix(uint32_t k, std::string_view gid) const {
    return p_ + "rec/" + ShardPart(k) + "/" + std::string(gid) + "/";
  }
  std::string Record(uint32_t k, std::string_view gid, uint64_t seq) const {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx",
                  static_cast<unsigned long long>(seq));
    return RecordPrefix(k, gid) + buf;
  }
  std::string DonePrefix(uint32_t k) const {
    return p_ + "done/" + ShardPart(k) + "/";
  }
  std::string AllDone() const { return p_ + "done/"; }
  std::string Done(uint32_t k, std::string_view gid) const {
    return DonePrefix(k) + std::string(gid);
  }
  std::string Approval(std::string_view id) const {
    return p_ + "approvals/" + std::string(id);
  }
  std::string QuotaProbe(std::string_view node_id) const {
    return p_ + "quota/" + std::string(node_id);
  }

 private:
  std::string p_;
};

}  // namespace tcc::wal::internal::etcd_keys
