#include "tcc/barrier/memory_store.h"

#include <utility>

namespace tcc::barrier {

class MemoryBarrierStore::Txn final : public LocalTxn {
 public:
  Txn(MemoryBarrierStore& store, uint64_t generation)
      : store_(store), generation_(generation) {}
  ~Txn() override {
    if (!finished_) store_.txn_mu_.unlock();
  }

  absl::StatusOr<std::optional<BarrierRecord>> LockBarrier(
      const BranchKey& key) override {
    if (finished_) return Finished();
    if (auto it = barrier_writes_.find(key); it != barrier_writes_.end()) {
      return it->second;
    }
    std::lock_guard<std::mutex> lock(store_.mu_);
    auto it = store_.barrier_.find(key);
    if (it == store_.barrier_.end()) return std::optional<BarrierRecord>();
    return std::optional<BarrierRecord>(it->second);
  }
  absl::Status PutBarrier(const BranchKey& key,
                          const BarrierRecord& record) override {
    if (finished_) return Finished();
    barrier_writes_[key] = record;
    return absl::OkStatus();
  }
  absl::Status DeleteBarrier(const BranchKey& key) override {
    if (finished_) return Finished();
    barrier_writes_[key] = std::nullopt;
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<std::string>> GetForUpdate(
      std::string_view key) override {
    return Get(key);  // the store-wide lock already serialises everything
  }
  absl::StatusOr<std::optional<std::string>> Get(
      std::string_view key) override {
    if (finished_) return Finished();
    if (auto it = data_writes_.find(key); it != data_writes_.end()) {
      return it->second;
    }
    std::lock_guard<std::mutex> lock(store_.mu_);
    auto it = store_.data_.find(key);
    if (it == store_.data_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  absl::Status Put(std::string_view key, std::string_view value) override {
    if (finished_) return Finished();
    data_writes_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  absl::Status Delete(std::string_view key) override {
    if (finished_) return Finished();
    data_writes_[std::string(key)] = std::nullopt;
    return absl::OkStatus();
  }

  absl::Status SetSavePoint() override {
    if (finished_) return Finished();
    saved_barrier_ = barrier_writes_;
    saved_data_ = data_writes_;
    return absl::OkStatus();
  }
  absl::Status RollbackToSavePoint() override {
    if (finished_) return Finished();
    barrier_writes_ = saved_barrier_;
    data_writes_ = saved_data_;
    return absl::OkStatus();
  }

  absl::Status Commit() override {
    if (finished_) return Finished();
    finished_ = true;
    absl::Status status = absl::OkStatus();
    {
      std::lock_guard<std::mutex> lock(store_.mu_);
      if (store_.generation_ != generation_) {
        status = absl::UnavailableError("memory store crashed before commit");
      } else if (store_.fail_commits_ > 0) {
        --store_.fail_commits_;
        status = absl::UnavailableError("memory store: injected commit fault");
      } else {
        for (auto& [key, rec] : barrier_writes_) {
          if (rec.has_value()) {
            store_.barrier_[key] = *rec;
          } else {
            store_.barrier_.erase(key);
          }
        }
        for (auto& [key, value] : data_writes_) {
          if (value.has_value()) {
            store_.data_[key] = *value;
          } else {
            store_.data_.erase(key);
          }
        }
        ++store_.commits_;
      }
    }
    store_.txn_mu_.unlock();
    return status;
  }

 private:
  static absl::Status Finished() {
    return absl::FailedPreconditionError("local transaction already finished");
  }

  MemoryBarrierStore& store_;
  const uint64_t generation_;
  bool finished_ = false;
  std::map<BranchKey, std::optional<BarrierRecord>> barrier_writes_;
  std::map<std::string, std::optional<std::string>, std::less<>> data_writes_;
  std::map<BranchKey, std::optional<BarrierRecord>> saved_barrier_;
  std::map<std::string, std::optional<std::string>, std::less<>> saved_data_;
};

absl::StatusOr<std::unique_ptr<LocalTxn>> MemoryBarrierStore::Begin() {
  if (!txn_mu_.try_lock_for(options_.lock_timeout)) {
    return absl::UnavailableError("memory store: lock wait timed out");
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_;
  }
  return std::unique_ptr<LocalTxn>(new Txn(*this, generation));
}

absl::StatusOr<std::optional<BarrierRecord>> MemoryBarrierStore::ReadBarrier(
    const BranchKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = barrier_.find(key);
  if (it == barrier_.end()) return std::optional<BarrierRecord>();
  return std::optional<BarrierRecord>(it->second);
}

absl::Status MemoryBarrierStore::ScanBarrier(
    const std::function<void(const BranchKey&, const BarrierRecord&)>& visit) {
  std::map<BranchKey, BarrierRecord> copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy = barrier_;
  }
  for (const auto& [key, rec] : copy) visit(key, rec);
  return absl::OkStatus();
}

void MemoryBarrierStore::Crash() {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
}

void MemoryBarrierStore::FailNextCommits(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_commits_ = n;
}

std::map<std::string, std::string> MemoryBarrierStore::BusinessData() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::map<std::string, std::string>(data_.begin(), data_.end());
}

uint64_t MemoryBarrierStore::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

}  // namespace tcc::barrier
