#include "cluster/node_membership.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tcc::cluster {

NodeMembership::NodeMembership(wal::NodeOptions options, Hooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)) {}

absl::StatusOr<std::unique_ptr<NodeMembership>> NodeMembership::Join(
    wal::NodeOptions options, Hooks hooks) {
  std::unique_ptr<NodeMembership> m(
      new NodeMembership(std::move(options), std::move(hooks)));
  absl::StatusOr<std::unique_ptr<wal::NodeRegistration>> reg =
      wal::NodeRegistration::Join(m->options_, m->LostFor(1));
  if (!reg.ok()) return reg.status();
  {
    std::lock_guard<std::mutex> lock(m->mu_);
    m->generation_ = 1;
    m->current_ = reg->get();
    m->all_.push_back(*std::move(reg));
  }
  m->rejoiner_ = std::thread([p = m.get()] { p->RejoinLoop(); });
  return m;
}

NodeMembership::~NodeMembership() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (rejoiner_.joinable()) rejoiner_.join();
  for (auto& r : all_) r->keeper().Stop();
}

etcd::LeaseKeeper::LostFn NodeMembership::LostFor(uint64_t generation) {
  return [this, generation](const absl::Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A registration being installed (its keeper may hear of the loss
      // before Join or the rejoin loop makes it the one in use) counts too:
      // dropped, its node would keep a dead lease and never join again.
      if (stop_ || generation < generation_) return;
      lost_generation_ = std::max(lost_generation_, generation);
    }
    losses_.fetch_add(1);
    if (hooks_.lost) hooks_.lost(why);
    cv_.notify_all();
  };
}

void NodeMembership::RejoinLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || lost_generation_ >= generation_; });
    if (stop_) return;
    const uint64_t next = generation_ + 1;
    lock.unlock();
    // Waits out the old registration (it expired with its lease; a new etcd
    // leader may have renewed it once), as a restarted node does.
    absl::StatusOr<std::unique_ptr<wal::NodeRegistration>> reg =
        wal::NodeRegistration::Join(options_, LostFor(next));
    lock.lock();
    if (stop_) {
      if (reg.ok()) (*reg)->keeper().Stop();
      return;
    }
    if (!reg.ok()) {
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
      continue;
    }
    wal::NodeRegistration* old = all_.back().get();
    generation_ = next;
    current_ = reg->get();
    const int64_t lease = (*reg)->lease_id();
    all_.push_back(*std::move(reg));
    // Lost already (heard before it was installed): joined again at once,
    // its lease never handed to the log.
    const bool lost_already = lost_generation_ >= next;
    lock.unlock();
    old->keeper().Stop();  // not under mu_: its thread may be in LostFor
    if (hooks_.rejoined && !lost_already) hooks_.rejoined(lease);
    lock.lock();
  }
}

absl::Status NodeMembership::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (rejoiner_.joinable()) rejoiner_.join();
  return current_.load()->Leave();
}

}  // namespace tcc::cluster
