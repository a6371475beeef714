#include "tcc/wal/etcd_membership.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "absl/strings/str_cat.h"
#include "etcd/etcd_keys.h"
#include "etcd/send_deadlines.h"

namespace tcc::wal {
namespace {

namespace pb = etcdserverpb;
using internal::etcd_keys::Layout;
using internal::etcd_keys::PrefixEnd;

void AddRangeOp(pb::TxnRequest& txn, const std::string& prefix) {
  pb::RangeRequest* r = txn.add_success()->mutable_request_range();
  r->set_key(prefix);
  r->set_range_end(PrefixEnd(prefix));
}

}  // namespace

absl::StatusOr<Membership> ReadMembership(etcd::Client& client,
                                          const std::string& key_prefix,
                                          uint32_t shards,
                                          const etcd::SendTimeouts& sends) {
  const Layout keys(key_prefix);
  pb::TxnRequest read;  // no compares: the success branch, at one revision
  AddRangeOp(read, keys.AllNodes());
  AddRangeOp(read, keys.AllDrain());
  AddRangeOp(read, keys.AllShards());
  absl::StatusOr<pb::TxnResponse> r;
  // A read-only Txn may be sent again: it changes nothing.
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = internal::ResendTimeouts(
        sends, [&](int64_t ms) { return client.Txn(read, ms); });
    if (r.ok() || !etcd::IsUnknownOutcome(r.status())) break;
  }
  if (!r.ok()) return r.status();
  if (r->responses_size() != 3) {
    return absl::InternalError("etcd answered a read Txn without its ranges");
  }
  Membership m;
  m.revision = r->header().revision();
  m.owners.resize(shards);
  std::map<std::string, MemberInfo> nodes;
  for (const auto& kv : r->responses(0).response_range().kvs()) {
    MemberInfo& n = nodes[kv.key().substr(keys.AllNodes().size())];
    n.node_id = kv.key().substr(keys.AllNodes().size());
    n.address = kv.value();
    n.lease = kv.lease();
  }
  for (const auto& kv : r->responses(1).response_range().kvs()) {
    auto it = nodes.find(kv.key().substr(keys.AllDrain().size()));
    if (it != nodes.end() && it->second.lease == kv.lease()) {
      it->second.draining = true;
    }
  }
  for (auto& [id, n] : nodes) m.nodes.push_back(std::move(n));
  // shards/<kkkk>/owner (horizons are under shards/ too).
  for (const auto& kv : r->responses(2).response_range().kvs()) {
    std::string_view rest = kv.key();
    rest.remove_prefix(keys.AllShards().size());
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos || rest.substr(slash) != "/owner") {
      continue;
    }
    uint32_t k = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + slash, k);
    if (ec != std::errc() || end != rest.data() + slash || k >= shards) {
      return absl::DataLossError(
          absl::StrCat("etcd: malformed owner key ", kv.key()));
    }
    const std::string& v = kv.value();
    const size_t nl = v.find('\n');
    ShardOwnerInfo o;
    o.node_id = v.substr(0, nl);
    o.address = nl == std::string::npos ? "" : v.substr(nl + 1);
    o.epoch = static_cast<uint64_t>(kv.create_revision());
    o.lease = kv.lease();
    m.owners[k] = std::move(o);
  }
  return m;
}

absl::Status MarkDraining(etcd::Client& client, const std::string& key_prefix,
                          const std::string& node_id) {
  const Layout keys(key_prefix);
  pb::RangeRequest get;
  get.set_key(keys.Node(node_id));
  absl::StatusOr<pb::RangeResponse> node = client.Range(get);
  if (!node.ok()) return node.status();
  if (node->kvs_size() == 0) {
    return absl::NotFoundError(
        absl::StrCat("no live node ", node_id, " in the cluster"));
  }
  // Under the node's lease, if that is still the node's registration.
  pb::TxnRequest mark;
  pb::Compare* same = mark.add_compare();
  same->set_key(keys.Node(node_id));
  same->set_target(pb::Compare::LEASE);
  same->set_result(pb::Compare::EQUAL);
  same->set_lease(node->kvs(0).lease());
  pb::PutRequest* put = mark.add_success()->mutable_request_put();
  put->set_key(keys.Drain(node_id));
  put->set_lease(node->kvs(0).lease());
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<pb::TxnResponse> r = client.Txn(mark);
    if (r.ok()) {
      if (r->succeeded()) return absl::OkStatus();
      return absl::NotFoundError(absl::StrCat(
          "node ", node_id, " left the cluster meanwhile (nothing to drain)"));
    }
    // Putting the same key again is harmless.
    if (!etcd::IsUnknownOutcome(r.status()) || attempt >= 2) {
      return r.status();
    }
  }
}

std::vector<KeyRange> MembershipRanges(const std::string& key_prefix) {
  const Layout keys(key_prefix);
  std::vector<KeyRange> out;
  for (const std::string& p :
       {keys.AllNodes(), keys.AllDrain(), keys.AllShards()}) {
    out.push_back(KeyRange{p, PrefixEnd(p)});
  }
  return out;
}

}  // namespace tcc::wal
