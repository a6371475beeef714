#include "cluster/ownership.h"

#include "absl/strings/str_cat.h"
#include "cluster/assignment.h"

namespace tcc::cluster {

void ActOnMembership(const wal::Membership& m, const OwnershipRound& round,
                     const ShardActions& actions, OwnershipState& state,
                     ShardObserver& observer) {
  const std::vector<std::string> candidates = Candidates(m);
  const int64_t lease = actions.lease_id();
  const int64_t now = round.now_ms;
  auto live = [&m](const std::string& id) {
    for (const wal::MemberInfo& n : m.nodes) {
      if (n.node_id == id) return true;
    }
    return false;
  };
  for (uint32_t k = 0; k < static_cast<uint32_t>(m.owners.size()); ++k) {
    if (actions.halted && actions.halted()) return;
    const std::optional<wal::ShardOwnerInfo>& owner = m.owners[k];
    const std::string assigned = RendezvousOwner(k, candidates);
    if (!owner.has_value()) {
      if (state.unowned_since[k] == 0) state.unowned_since[k] = now;
      const bool mine = assigned == round.node_id;
      const bool overdue =
          now - state.unowned_since[k] >= round.takeover_margin_ms;
      // A shard this node drives but whose key is gone (it expired with a
      // lease, or was released) is not this node's any more.
      if (actions.drives(k)) {
        actions.drop(k, absl::UnavailableError(
                            absl::StrCat("shard ", k, "'s owner key is gone")));
      }
      if (!(mine || overdue) || !actions.trusted()) continue;
      absl::StatusOr<uint64_t> epoch = actions.adopt(k);
      if (!epoch.ok()) {
        observer.OnCampaignFailed(k, epoch.status());
        continue;
      }
      observer.OnTook(k, *epoch, state.last_owner[k],
                      now - state.unowned_since[k]);
      state.unowned_since[k] = 0;
      state.last_owner[k] = round.node_id;
      continue;
    }
    state.unowned_since[k] = 0;
    state.last_owner[k] = owner->node_id;
    const bool ours = owner->node_id == round.node_id && owner->lease == lease;
    if (!ours) {
      // Another node's (or an older process's of this id, expiring).
      if (actions.drives(k)) {
        actions.drop(k, absl::UnavailableError(absl::StrCat(
                            "shard ", k, " is owned by ", owner->node_id,
                            " (epoch ", owner->epoch, ")")));
      }
      continue;
    }
    if (assigned != round.node_id && !assigned.empty() && live(assigned)) {
      // Hand-over: stop taking its gids, then the fenced delete.
      if (actions.drives(k)) {
        actions.drop(k, absl::UnavailableError(absl::StrCat(
                            "shard ", k, " was handed over to ", assigned)));
      }
      if (absl::Status s = actions.release(k, owner->epoch); !s.ok()) {
        observer.OnCampaignFailed(k, s);
        continue;
      }
      observer.OnHandedOver(k, owner->epoch, assigned);
      continue;
    }
    if (!actions.drives(k) && actions.trusted()) {
      // Its key is this node's but the driver let it go (a scan that
      // failed, a lost campaign answer): taken again, with a new epoch.
      absl::StatusOr<uint64_t> epoch = actions.adopt(k);
      if (!epoch.ok()) {
        observer.OnCampaignFailed(k, epoch.status());
        continue;
      }
      observer.OnTook(k, *epoch, round.node_id, 0);
    }
  }
}

}  // namespace tcc::cluster
