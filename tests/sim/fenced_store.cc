#include "fenced_store.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tcc::sim {
namespace {

// The keys a Txn's ops may write along one branch, nested Txns included
// (both of their branches: either may run).
void WrittenKeys(const std::vector<StoreOp>& ops,
                 std::vector<std::string>& out) {
  for (const StoreOp& op : ops) {
    if (op.kind == StoreOp::Kind::kPut || op.kind == StoreOp::Kind::kDelete) {
      out.push_back(op.key);
    } else if (op.kind == StoreOp::Kind::kTxn) {
      WrittenKeys(op.txn->success, out);
      WrittenKeys(op.txn->failure, out);
    }
  }
}

bool HasDuplicate(std::vector<std::string> keys) {
  std::sort(keys.begin(), keys.end());
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

// The shard of a key under txn/<k>/, if it is one.
std::optional<uint32_t> ShardOfKey(const std::string& key) {
  if (key.rfind("txn/", 0) != 0) return std::nullopt;
  const size_t slash = key.find('/', 4);
  uint32_t k = 0;
  if (slash == std::string::npos ||
      !absl::SimpleAtoi(key.substr(4, slash - 4), &k)) {
    return std::nullopt;
  }
  return k;
}

}  // namespace

std::string OwnerKey(uint32_t shard) {
  return absl::StrCat("shards/", shard, "/owner");
}
std::string NodeKey(const std::string& node_id) {
  return absl::StrCat("nodes/", node_id);
}
std::string HeadKey(uint32_t shard, const std::string& gid) {
  return absl::StrCat("txn/", shard, "/", gid);
}
std::string HeadPrefix(uint32_t shard) {
  return absl::StrCat("txn/", shard, "/");
}

FencedStore::FencedStore(uint32_t shards, uint64_t seed)
    : shards_(shards), rng_state_(seed * 0x2545F4914F6CDD1DULL + 1) {}

bool FencedStore::NamesKeyTwice(const StoreTxn& txn) const {
  for (const auto* branch : {&txn.success, &txn.failure}) {
    std::vector<std::string> keys;
    WrittenKeys(*branch, keys);
    if (HasDuplicate(std::move(keys))) return true;
    for (const StoreOp& op : *branch) {
      if (op.kind == StoreOp::Kind::kTxn && NamesKeyTwice(*op.txn)) {
        return true;
      }
    }
  }
  return false;
}

bool FencedStore::Evaluate(const StoreCompare& c) const {
  auto it = kvs_.find(c.key);
  int64_t v = 0;
  if (it != kvs_.end()) {
    switch (c.target) {
      case StoreCompare::Target::kCreateRevision:
        v = it->second.create_revision;
        break;
      case StoreCompare::Target::kModRevision:
        v = it->second.mod_revision;
        break;
      case StoreCompare::Target::kLease:
        v = it->second.lease;
        break;
    }
  }
  return v == c.equals;
}

absl::StatusOr<TxnResult> FencedStore::Apply(const StoreTxn& txn,
                                             int64_t now_ms) {
  ExpireLeases(now_ms);
  if (NamesKeyTwice(txn)) {
    return absl::InvalidArgumentError("duplicate key given in txn request");
  }
  TxnResult out;
  bool wrote = false;
  Run(txn, txn, out, wrote);
  if (wrote) ++revision_;
  out.revision = revision_ - 1;  // the Txn's own, if it wrote
  return out;
}

// Writes happen at revision_ (the Txn's one revision); Apply moves past it.
void FencedStore::Run(const StoreTxn& txn, const StoreTxn& root, TxnResult& out,
                      bool& wrote) {
  bool ok = true;
  for (const StoreCompare& c : txn.compares) ok = ok && Evaluate(c);
  out.succeeded = ok;
  for (const StoreOp& op : ok ? txn.success : txn.failure) {
    OpResult r;
    switch (op.kind) {
      case StoreOp::Kind::kGet:  // sees this Txn's own writes before it
        for (auto it = kvs_.lower_bound(op.key);
             it != kvs_.end() && (op.prefix ? it->first.rfind(op.key, 0) == 0
                                            : it->first == op.key);
             ++it) {
          r.kvs.push_back(it->second);
        }
        break;
      case StoreOp::Kind::kPut: {
        CheckFence(root, op.key);
        KeyValue kv;
        kv.key = op.key;
        kv.value = op.value;
        auto it = kvs_.find(op.key);
        kv.create_revision =
            it == kvs_.end() ? revision_ : it->second.create_revision;
        kv.mod_revision = revision_;
        kv.lease = op.lease;
        if (op.lease != 0 && leases_.count(op.lease) == 0) break;  // refused
        // (A copy of the same append again is no lost update.)
        if (op.seen_mod_revision >= 0 &&
            op.seen_mod_revision !=
                (it == kvs_.end() ? 0 : it->second.mod_revision) &&
            !(it != kvs_.end() && op.value.append_id != 0 &&
              it->second.value.append_id == op.value.append_id)) {
          violations_.push_back(absl::StrCat(
              "lost update: ", root.writer, " wrote ", op.key,
              " over a version it had not seen (it saw mod_revision ",
              op.seen_mod_revision, ", the store holds ",
              it == kvs_.end() ? 0 : it->second.mod_revision, ")"));
        }
        Write(op.key, kv);
        wrote = true;
        if (kv.value.txn && on_head_written) on_head_written(kv);
        break;
      }
      case StoreOp::Kind::kDelete:
        if (kvs_.count(op.key) != 0) {
          CheckFence(root, op.key);
          Write(op.key, std::nullopt);
          wrote = true;
        }
        break;
      case StoreOp::Kind::kTxn: {
        auto nested = std::make_shared<TxnResult>();
        Run(*op.txn, root, *nested, wrote);
        r.txn = std::move(nested);
        break;
      }
    }
    out.results.push_back(std::move(r));
  }
}

void FencedStore::CheckFence(const StoreTxn& txn, const std::string& key) {
  const std::optional<uint32_t> shard = ShardOfKey(key);
  if (!shard) return;
  auto claimed = txn.claimed_epochs.find(*shard);
  auto owner = kvs_.find(OwnerKey(*shard));
  const uint64_t epoch =
      owner == kvs_.end()
          ? 0
          : static_cast<uint64_t>(owner->second.create_revision);
  const int64_t lease = owner == kvs_.end() ? 0 : owner->second.lease;
  if (claimed == txn.claimed_epochs.end() || claimed->second != epoch ||
      txn.writer_lease != lease) {
    violations_.push_back(absl::StrCat(
        "fencing: the store accepted a write of ", key, " from ", txn.writer,
        " (epoch ", claimed == txn.claimed_epochs.end() ? 0 : claimed->second,
        ", lease ", txn.writer_lease, ") while shard ", *shard, "'s epoch is ",
        epoch, " (lease ", lease, ")"));
  }
}

void FencedStore::Write(const std::string& key, std::optional<KeyValue> kv) {
  ++writes_;
  history_[key].push_back(Version{revision_, kv});
  if (kv) {
    kvs_[key] = *std::move(kv);
  } else {
    kvs_.erase(key);
  }
}

std::optional<KeyValue> FencedStore::At(const std::string& key,
                                        int64_t revision) const {
  auto h = history_.find(key);
  if (h == history_.end()) return std::nullopt;
  const std::optional<KeyValue>* found = nullptr;
  for (const Version& v : h->second) {
    if (v.mod_revision > revision) break;
    found = &v.kv;
  }
  return found == nullptr ? std::nullopt : *found;
}

absl::StatusOr<std::vector<KeyValue>> FencedStore::Range(const std::string& key,
                                                         bool prefix,
                                                         ReadMode mode) {
  int64_t at = revision_ - 1;
  if (mode.revision > 0) {
    if (mode.revision > at) {
      return absl::OutOfRangeError("required revision is a future revision");
    }
    at = mode.revision;
  } else if (!mode.linearizable && max_stale_ > 0) {
    rng_state_ ^= rng_state_ << 13;
    rng_state_ ^= rng_state_ >> 7;
    rng_state_ ^= rng_state_ << 17;
    const int64_t behind = std::max<int64_t>(
        1, at - static_cast<int64_t>(rng_state_ %
                                     static_cast<uint64_t>(max_stale_ + 1)));
    if (behind < at) ++stale_reads_;
    at = behind;
  }
  std::vector<KeyValue> out;
  if (!prefix) {
    if (std::optional<KeyValue> kv = At(key, at)) out.push_back(*kv);
    return out;
  }
  for (auto it = history_.lower_bound(key);
       it != history_.end() && it->first.rfind(key, 0) == 0; ++it) {
    if (std::optional<KeyValue> kv = At(it->first, at)) out.push_back(*kv);
  }
  return out;
}

std::optional<KeyValue> FencedStore::Get(const std::string& key) const {
  auto it = kvs_.find(key);
  if (it == kvs_.end()) return std::nullopt;
  return it->second;
}

int64_t FencedStore::Grant(int64_t ttl_ms, int64_t now_ms) {
  const int64_t id = next_lease_++;
  leases_[id] = Lease{ttl_ms, now_ms + ttl_ms};
  return id;
}

int64_t FencedStore::KeepAlive(int64_t lease, int64_t now_ms) {
  ExpireLeases(now_ms);
  auto it = leases_.find(lease);
  if (it == leases_.end()) return 0;
  it->second.expires_at_ms = now_ms + it->second.ttl_ms;
  return it->second.ttl_ms;
}

void FencedStore::ExpireLeases(int64_t now_ms) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires_at_ms > now_ms) {
      ++it;
      continue;
    }
    bool wrote = false;
    std::vector<std::string> keys;
    for (const auto& [key, kv] : kvs_) {
      if (kv.lease == it->first) keys.push_back(key);
    }
    for (const std::string& key : keys) {
      Write(key, std::nullopt);
      wrote = true;
    }
    if (wrote) ++revision_;
    it = leases_.erase(it);
  }
}

void FencedStore::RenewAllLeases(int64_t now_ms) {
  for (auto& [id, lease] : leases_) {
    lease.expires_at_ms = std::max(lease.expires_at_ms, now_ms + lease.ttl_ms);
  }
}

bool FencedStore::LeaseAlive(int64_t lease, int64_t now_ms) const {
  auto it = leases_.find(lease);
  return it != leases_.end() && it->second.expires_at_ms > now_ms;
}

}  // namespace tcc::sim
