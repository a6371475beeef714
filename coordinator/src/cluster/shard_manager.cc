#include "cluster/shard_manager.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/assignment.h"

namespace tcc::cluster {

ShardManager::ShardManager(ShardManagerOptions options, ShardActions actions,
                           ShardObserver* observer)
    : options_(std::move(options)),
      actions_(std::move(actions)),
      observer_(observer != nullptr ? observer : &no_observer_),
      state_(options_.shards) {}

ShardManager::~ShardManager() { Stop(); }

absl::Status ShardManager::RunOnce() {
  std::lock_guard<std::mutex> acting(act_mu_);
  absl::StatusOr<wal::Membership> m =
      wal::ReadMembership(*options_.client, options_.key_prefix,
                          options_.shards, options_.read_sends);
  if (!m.ok()) {
    observer_->OnReadFailed(m.status());
    return m.status();
  }
  auto shared = std::make_shared<const wal::Membership>(*std::move(m));
  std::vector<std::string> assigned(options_.shards);
  const std::vector<std::string> candidates = Candidates(*shared);
  for (uint32_t k = 0; k < options_.shards; ++k) {
    assigned[k] = RendezvousOwner(k, candidates);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    membership_ = shared;
    assigned_ = assigned;
  }
  Act(*shared);
  return absl::OkStatus();
}

void ShardManager::Act(const wal::Membership& m) {
  ActOnMembership(m,
                  OwnershipRound{options_.node_id, options_.now_ms(),
                                 options_.takeover_margin_ms},
                  actions_, state_, *observer_);
}

void ShardManager::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable()) return;
    stop_ = false;
  }
  Watch();
  thread_ = std::thread([this] { Loop(); });
}

void ShardManager::Watch() {
  watches_.clear();
  watch_ended_ = false;
  for (const wal::KeyRange& r : wal::MembershipRanges(options_.key_prefix)) {
    watches_.push_back(std::make_unique<etcd::WatchStream>(
        *options_.client, etcd::WatchSpec{r.key, r.range_end, 0},
        [this](const etcdserverpb::WatchResponse&) { Poke(); },
        [this](const absl::Status&) {
          watch_ended_ = true;
          Poke();
        }));
  }
}

void ShardManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& w : watches_) w->Stop();
  watches_.clear();
}

void ShardManager::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

void ShardManager::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.reread_ms),
                   [this] { return stop_ || poked_; });
      if (stop_) return;
      poked_ = false;
    }
    // A watch that ended (compaction, cancellation) is made again; the
    // read below catches up on what it missed.
    if (watch_ended_.exchange(false)) {
      for (auto& w : watches_) w->Stop();
      Watch();
    }
    // Events come in bursts (a node's lease expiring deletes all its keys):
    // one read for the burst.
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(20),
                   [this] { return stop_; });
      if (stop_) return;
      poked_ = false;
    }
    (void)RunOnce();
  }
}

std::shared_ptr<const wal::Membership> ShardManager::membership() const {
  std::lock_guard<std::mutex> lock(mu_);
  return membership_;
}

std::string ShardManager::AssignedNode(uint32_t shard) const {
  std::lock_guard<std::mutex> lock(mu_);
  return shard < assigned_.size() ? assigned_[shard] : std::string();
}

}  // namespace tcc::cluster
