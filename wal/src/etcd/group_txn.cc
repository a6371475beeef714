#include "etcd/group_txn.h"

#include <algorithm>

#include "etcd/etcd_codec.h"
#include "record_codec.h"

namespace tcc::wal::internal {
namespace {

namespace pb = etcdserverpb;
using etcd_keys::PrefixEnd;

// What etcd adds per op and per key beyond the bytes (a generous bound of
// the protobuf framing, and of the raft request that wraps the Txn).
constexpr size_t kOpOverhead = 24;
constexpr size_t kRequestSlack = 16 << 10;
// What an answer adds per key it returns beyond its key and value (its
// revisions, version and lease, and the framing): a generous bound.
constexpr size_t kKvOverhead = 64;

pb::Compare* AddCompare(pb::TxnRequest& txn, const std::string& key,
                        pb::Compare::CompareTarget target,
                        pb::Compare::CompareResult result) {
  pb::Compare* c = txn.add_compare();
  c->set_key(key);
  c->set_target(target);
  c->set_result(result);
  return c;
}

void AddRange(pb::TxnRequest& txn, const std::string& key) {
  txn.add_failure()->mutable_request_range()->set_key(key);
}

void AddPut(pb::TxnRequest& txn, const std::string& key, std::string value) {
  pb::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(key);
  p->set_value(std::move(value));
}

// The value of w's record key, and its size, from w.encoded when it has
// them all.
bool HasEncoded(const GidWrite& w) {
  return !w.encoded.empty() && w.encoded.size() == w.records.size();
}
size_t RecordsSize(const GidWrite& w) {
  return HasEncoded(w) ? RecordsValueSize(w.encoded)
                       : EncodeRecords(w.records).size();
}
std::string RecordsOf(const GidWrite& w) {
  return HasEncoded(w) ? RecordsValue(w.encoded) : EncodeRecords(w.records);
}

// EncodeRecord of each of w's new records.
std::vector<std::string> EncodedOf(const GidWrite& w) {
  if (HasEncoded(w)) return w.encoded;
  std::vector<std::string> out;
  out.reserve(w.records.size());
  for (const Record& r : w.records) out.push_back(EncodeRecord(r));
  return out;
}

// The encoded size of w's new records, each on its own.
size_t NewRecordBytes(const GidWrite& w) {
  size_t bytes = 0;
  if (HasEncoded(w)) {
    for (const std::string& r : w.encoded) bytes += r.size();
  } else {
    for (const Record& r : w.records) bytes += EncodeRecord(r).size();
  }
  return bytes;
}

size_t InlineBytes(const std::vector<std::string>& records) {
  size_t bytes = 0;
  for (const std::string& r : records) bytes += 4 + r.size();
  return bytes;
}

HeadValue HeadOf(const GidWrite& w, uint64_t record_key_bytes) {
  HeadValue h;
  h.record_key_bytes = record_key_bytes;
  h.owner_epoch = w.owner_epoch;
  h.append_id = w.append_id;
  h.record_count = w.first_seq + w.records.size();
  h.summary = w.summary;
  h.inline_records = InlineAfter(w);
  return h;
}

}  // namespace

bool RecordsInline(const GidWrite& w) {
  if (w.records.empty() || w.finishes || HasRecordKeys(w)) return false;
  size_t bytes = NewRecordBytes(w);
  for (const std::string& r : w.inline_before) bytes += r.size();
  return bytes <= kInlineMaxBytes;
}

std::vector<std::string> InlineAfter(const GidWrite& w) {
  std::vector<std::string> out = w.inline_before;
  if (RecordsInline(w)) {
    for (std::string& r : EncodedOf(w)) out.push_back(std::move(r));
  }
  return out;
}

void AddShardFence(pb::TxnRequest& txn, const etcd_keys::Layout& keys,
                   uint32_t shard, uint64_t epoch) {
  AddCompare(txn, keys.Owner(shard), pb::Compare::MOD, pb::Compare::EQUAL)
      ->set_mod_revision(static_cast<int64_t>(epoch));
}

size_t GroupTxn::GidCost(const GidWrite& w) {
  const size_t a = w.consumed.size();
  const size_t compares = (w.registers ? 3 : 1) + a;
  size_t success = a;
  if (w.finishes) {
    // done; and the head, and the record keys if it has any
    success += w.registers ? 1 : (HasRecordKeys(w) ? 3 : 2);
  } else {
    // the records' key (unless none, or inline), the head
    success += (w.records.empty() || RecordsInline(w) ? 0 : 1) + 1;
  }
  return std::max(compares, success);
}

size_t GroupTxn::GidBytes(const GidWrite& w) const {
  const size_t key = keys_.Head(w.shard, w.gid).size() + 24;
  size_t bytes = 6 * (key + kOpOverhead);
  if (w.finishes) {
    bytes += w.compact_value.size() + 2 * EncodeSummary(w.summary).size();
  } else {
    bytes +=
        EncodeSummary(w.summary).size() + 24 + 4 + InlineBytes(w.inline_before);
    if (RecordsInline(w)) {
      bytes += 4 * w.records.size() + NewRecordBytes(w);  // framed, in the head
    } else if (!w.records.empty()) {
      bytes += key + kOpOverhead + RecordsSize(w);
    }
  }
  for (const auto& [a, rev] : w.consumed) {
    bytes += 3 * (keys_.Approval(a.approval_id).size() + kOpOverhead) +
             EncodeApproval(a).size();
  }
  return bytes;
}

size_t GroupTxn::AnswerBytes(const GidWrite& w) const {
  if (!w.finishes || w.registers || !HasRecordKeys(w)) return 0;
  if (w.record_key_bytes == 0) {
    return std::max<size_t>(1, limits_.max_answer_bytes);  // unknown
  }
  // Every record key holds one record at least.
  const size_t keys = w.first_seq - w.inline_before.size();
  return w.record_key_bytes + keys * kKvOverhead;
}

uint64_t GroupTxn::RecordKeyBytesAfter(const GidWrite& w) const {
  if (w.finishes || (HasRecordKeys(w) && w.record_key_bytes == 0)) return 0;
  uint64_t bytes = w.record_key_bytes;
  if (!w.records.empty() && !RecordsInline(w)) {
    bytes += keys_.Record(w.shard, w.gid, w.first_seq).size() + RecordsSize(w);
  }
  return bytes;
}

size_t GroupTxn::OpsWith(uint32_t shard, size_t gids, size_t gid_max,
                         size_t shards, size_t approvals) const {
  size_t deepest = approvals > 0 ? 1 : 0;
  bool seen = false;
  for (const auto& [k, st] : stats_) {
    size_t n = st.gids, m = st.gid_max;
    if (k == shard) {
      n = gids;
      m = gid_max;
      seen = true;
    }
    deepest = std::max(deepest, std::max<size_t>(2, n) + m);
  }
  if (!seen && gids > 0) {
    deepest = std::max(deepest, std::max<size_t>(2, gids) + gid_max);
  }
  return shards + approvals + 1 + deepest;  // 1: the quota probe's put
}

bool GroupTxn::Fits(const GidWrite& w) const {
  auto st = stats_.find(w.shard);
  ShardStats next = st == stats_.end() ? ShardStats{} : st->second;
  size_t bytes = bytes_;
  size_t answer = answer_bytes_;
  auto old = costs_.find(w.gid);
  if (old != costs_.end()) {
    bytes -= old->second.bytes;
    answer -= old->second.answer;
  } else {
    ++next.gids;
  }
  next.gid_max = std::max(next.gid_max, GidCost(w));
  bytes += GidBytes(w);
  const size_t shards = stats_.size() + (st == stats_.end() ? 1 : 0);
  // The answer: the first write that answers records always fits.
  const size_t mine = AnswerBytes(w);
  const bool answer_fits = limits_.max_answer_bytes == 0 || mine == 0 ||
                           answer == 0 ||
                           answer + mine <= limits_.max_answer_bytes;
  return OpsWith(w.shard, next.gids, next.gid_max, shards, approvals_.size()) <=
             limits_.max_txn_ops &&
         bytes + kRequestSlack <= limits_.max_request_bytes && answer_fits;
}

bool GroupTxn::FitsAlone(const GidWrite& w) const {
  GroupTxn alone(keys_, limits_);
  return alone.Fits(w);
}

bool GroupTxn::FitsApproval(const Approval& a) const {
  const size_t bytes = bytes_ + EncodeApproval(a).size() +
                       3 * (keys_.Approval(a.approval_id).size() + kOpOverhead);
  return OpsWith(UINT32_MAX, 0, 0, stats_.size(), approvals_.size() + 1) <=
             limits_.max_txn_ops &&
         bytes + kRequestSlack <= limits_.max_request_bytes;
}

void GroupTxn::Put(GidWrite w) {
  ShardStats& st = stats_[w.shard];
  auto old = costs_.find(w.gid);
  if (old != costs_.end()) {
    bytes_ -= old->second.bytes;
    answer_bytes_ -= old->second.answer;
  } else {
    ++st.gids;
    auto it = std::find_if(order_.begin(), order_.end(),
                           [&](const auto& s) { return s.first == w.shard; });
    if (it == order_.end()) {
      order_.push_back({w.shard, {w.gid}});
    } else {
      it->second.push_back(w.gid);
    }
  }
  st.gid_max = std::max(st.gid_max, GidCost(w));
  const WriteCost cost{GidBytes(w), AnswerBytes(w)};
  bytes_ += cost.bytes;
  answer_bytes_ += cost.answer;
  costs_[w.gid] = cost;
  std::string gid = w.gid;
  writes_[gid] = std::move(w);
}

void GroupTxn::Remove(std::string gid) {
  auto w = writes_.find(gid);
  if (w == writes_.end()) return;
  auto cost = costs_.find(gid);
  bytes_ -= cost->second.bytes;
  answer_bytes_ -= cost->second.answer;
  costs_.erase(cost);
  const uint32_t shard = w->second.shard;
  writes_.erase(w);
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    if (it->first != shard) continue;
    it->second.erase(std::remove(it->second.begin(), it->second.end(), gid),
                     it->second.end());
    if (it->second.empty()) {
      order_.erase(it);
      stats_.erase(shard);
    } else {
      // The largest cost again, from the writes left (removals are rare).
      ShardStats& st = stats_[shard];
      st.gids = it->second.size();
      st.gid_max = 0;
      for (const std::string& g : it->second) {
        st.gid_max = std::max(st.gid_max, GidCost(writes_.at(g)));
      }
    }
    break;
  }
}

GidWrite* GroupTxn::Find(const std::string& gid) {
  auto it = writes_.find(gid);
  return it == writes_.end() ? nullptr : &it->second;
}

void GroupTxn::AddApproval(NewApproval a) {
  bytes_ += EncodeApproval(a.approval).size() +
            3 * (keys_.Approval(a.approval.approval_id).size() + kOpOverhead);
  approvals_.push_back(std::move(a));
}

void GroupTxn::RemoveApproval(size_t index) {
  const Approval& a = approvals_[index].approval;
  bytes_ -= EncodeApproval(a).size() +
            3 * (keys_.Approval(a.approval_id).size() + kOpOverhead);
  approvals_.erase(approvals_.begin() + static_cast<ptrdiff_t>(index));
}

void GroupTxn::BuildGid(const GidWrite& w, pb::TxnRequest& t) const {
  const std::string head = keys_.Head(w.shard, w.gid);
  const std::string done = keys_.Done(w.shard, w.gid);
  const std::string horizon = keys_.Horizon(w.shard);
  if (w.registers) {
    AddCompare(t, head, pb::Compare::CREATE, pb::Compare::EQUAL)
        ->set_create_revision(0);
    AddCompare(t, done, pb::Compare::CREATE, pb::Compare::EQUAL)
        ->set_create_revision(0);
    const int64_t after =
        w.created_at_ms == INT64_MAX ? w.created_at_ms : w.created_at_ms + 1;
    AddCompare(t, horizon, pb::Compare::VALUE, pb::Compare::LESS)
        ->set_value(EncodeHorizon(after));
  } else {
    AddCompare(t, head, pb::Compare::MOD, pb::Compare::EQUAL)
        ->set_mod_revision(w.head_mod_revision);
  }
  for (const auto& [a, rev] : w.consumed) {
    AddCompare(t, keys_.Approval(a.approval_id), pb::Compare::MOD,
               pb::Compare::EQUAL)
        ->set_mod_revision(rev);
    AddPut(t, keys_.Approval(a.approval_id), EncodeApproval(a));
  }
  if (w.finishes) {
    if (!w.registers) {
      t.add_success()->mutable_request_delete_range()->set_key(head);
      if (HasRecordKeys(w)) {
        pb::DeleteRangeRequest* d =
            t.add_success()->mutable_request_delete_range();
        const std::string rec = keys_.RecordPrefix(w.shard, w.gid);
        d->set_key(rec);
        d->set_range_end(PrefixEnd(rec));
        d->set_prev_kv(true);  // the records, for the node's archive
      }
    }
    AddPut(t, done, w.compact_value);
  } else {
    // Its records in the head, or under one key numbered by the first of
    // them.
    if (!w.records.empty() && !RecordsInline(w)) {
      AddPut(t, keys_.Record(w.shard, w.gid, w.first_seq), RecordsOf(w));
    }
    AddPut(t, head, EncodeHead(HeadOf(w, RecordKeyBytesAfter(w))));
  }
  // No failure ops: a refused gid's keys are read after the group (the
  // etcd log), not carried in every Txn for the rare refusal.
}

pb::TxnRequest GroupTxn::Build(const Fences& fences) const {
  pb::TxnRequest top;
  for (const auto& [shard, gids] : order_) {
    pb::TxnRequest* s = top.add_success()->mutable_request_txn();
    AddShardFence(*s, keys_, shard, (*fences.epochs)[shard]);
    AddRange(*s, keys_.Owner(shard));
    for (const std::string& g : gids) {
      BuildGid(writes_.at(g), *s->add_success()->mutable_request_txn());
    }
  }
  for (const NewApproval& a : approvals_) {
    pb::TxnRequest* t = top.add_success()->mutable_request_txn();
    const std::string key = keys_.Approval(a.approval.approval_id);
    AddCompare(*t, key, pb::Compare::CREATE, pb::Compare::EQUAL)
        ->set_create_revision(0);
    AddPut(*t, key, EncodeApproval(a.approval));
    AddRange(*t, key);
  }
  top.add_success()->mutable_request_put()->set_key(fences.quota_key);
  return top;
}

}  // namespace tcc::wal::internal
