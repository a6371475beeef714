#include "tcc/wal/etcd_node.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "etcd/etcd_keys.h"
#include "etcd/send_deadlines.h"

namespace tcc::wal {
namespace {

namespace pb = etcdserverpb;

// Waits `ms` of real time (between polls of an old lease).
void Pause(int64_t ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::milliseconds(ms), [] { return false; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeRegistration>> NodeRegistration::Join(
    NodeOptions o, etcd::LeaseKeeper::LostFn lost) {
  etcd::BootClock& clock =
      o.clock != nullptr ? *o.clock : etcd::SystemBootClock::Default();
  // A grant whose answer never came leaves a lease nobody keeps alive: it
  // expires by itself.
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeeper>> keeper =
      internal::ResendTimeouts(o.sends, [&](int64_t ms) {
        return etcd::LeaseKeeper::Grant(
            *o.client,
            etcd::LeaseKeeperOptions{.ttl_ms = o.lease_ttl_ms,
                                     .margin_ms = o.lease_margin_ms,
                                     .grant_timeout_ms = ms},
            clock, lost);
      });
  if (!keeper.ok()) return keeper.status();
  const internal::etcd_keys::Layout keys(o.key_prefix);
  const std::string key = keys.Node(o.node_id);
  pb::TxnRequest join;
  pb::Compare* absent = join.add_compare();
  absent->set_key(key);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = join.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(o.address);
  put->set_lease((*keeper)->lease_id());
  join.add_failure()->mutable_request_range()->set_key(key);
  int64_t old_lease = 0;
  int64_t last_ttl = -1;
  int renewals = 0;
  int64_t waited_ms = 0;
  int64_t wait_limit_ms = 0;
  internal::SendDeadlines deadline(o.sends.attempt_ms, o.sends.total_ms);
  while (true) {
    absl::StatusOr<pb::TxnResponse> r = o.client->Txn(join, deadline.ms());
    if (!r.ok()) {
      if (!etcd::IsUnknownOutcome(r.status())) return r.status();
      deadline.After(r.status());
      Pause(200);
      continue;
    }
    if (r->succeeded()) break;
    const pb::RangeResponse& found = r->responses(0).response_range();
    if (found.kvs_size() == 0) continue;  // expired meanwhile
    const int64_t lease = found.kvs(0).lease();
    if (lease == (*keeper)->lease_id()) break;  // ours: a lost answer
    absl::StatusOr<pb::LeaseTimeToLiveResponse> ttl = internal::ResendTimeouts(
        o.sends,
        [&](int64_t ms) { return o.client->LeaseTimeToLive(lease, ms); });
    if (!ttl.ok()) return ttl.status();
    if (lease != old_lease) {
      old_lease = lease;
      last_ttl = -1;
      renewals = 0;
      waited_ms = 0;
      wait_limit_ms = ttl->grantedttl() * 1000 + o.election_timeout_ms + 1000;
    }
    // A TTL that went up since the last look, twice: someone keeps it
    // alive (once could be a new etcd leader renewing every lease).
    if (last_ttl >= 0 && ttl->ttl() > last_ttl) ++renewals;
    if (renewals >= 2) {
      return absl::AlreadyExistsError(absl::StrCat(
          "cluster.node_id ", o.node_id,
          ": another tccd with this node id is running (its lease ", lease,
          " is being kept alive)"));
    }
    if (waited_ms > wait_limit_ms) {
      // Longer than its TTL plus an election: someone keeps it alive
      // (renewals in whole seconds may not show in the TTLs read).
      return absl::AlreadyExistsError(absl::StrCat(
          "cluster.node_id ", o.node_id,
          ": another tccd with this node id is running (its registration's "
          "lease ",
          lease, " did not expire within ", wait_limit_ms,
          " ms, more than its TTL and an etcd election)"));
    }
    last_ttl = ttl->ttl();
    Pause(500);
    waited_ms += 500;
  }
  return std::unique_ptr<NodeRegistration>(
      new NodeRegistration(*std::move(keeper)));
}

NodeRegistration::~NodeRegistration() { keeper_->Stop(); }

absl::Status NodeRegistration::Leave() { return keeper_->Revoke(); }

}  // namespace tcc::wal
