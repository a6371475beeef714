#include "runtime/recovery.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/memory_budget.h"

namespace tcc::runtime {

Recovery::Recovery(wal::Log& log, RecoveryOptions options,
                   std::shared_ptr<MemoryBudget> budget, Hooks hooks)
    : log_(log),
      options_(options),
      max_queued_(std::max<size_t>(1024, 4 * options.window)),
      budget_(std::move(budget)),
      hooks_(std::move(hooks)) {}

void Recovery::Begin() {
  std::lock_guard<std::mutex> lock(mu_);
  scanning_ = true;
  pending_ = true;
}

void Recovery::Scan() {
  size_t n = 0;
  absl::Status st = log_.ScanUnfinished(options_.shard, [&](wal::TxnLog t) {
    snapshot_taken_.store(true);
    bool full = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return absl::CancelledError("the driver is stopping");
      const int64_t bytes = RecordBytes(t.records);
      budget_->Charge(bytes);
      queue_bytes_ += bytes;
      queue_.push_back(std::move(t));
      full = QueueFull();
    }
    if (++n % 256 == 0 || full) Resume();
    if (full && options_.may_wait) {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock, [&] { return stopping_ || !QueueFull(); });
    }
    return absl::OkStatus();
  });
  snapshot_taken_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    scanning_ = false;
    ForgetIfIdle();
  }
  if (!st.ok() && !absl::IsCancelled(st)) {
    hooks_.failed(
        absl::Status(st.code(), absl::StrCat("recovery scan failed after ", n,
                                             " transactions: ", st.message())));
  } else if (st.ok()) {
    hooks_.scanned(n);
  }
  Resume();
}

void Recovery::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  room_.notify_all();
}

void Recovery::NoteLoaded(const std::string& gid) {
  if (!pending_.load()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (scanning_ || !queue_.empty() || posted_ > 0) loaded_.insert(gid);
}

bool Recovery::Moot(const std::string& gid) {
  std::lock_guard<std::mutex> lock(mu_);
  --posted_;
  const bool loaded = loaded_.count(gid) > 0;
  ForgetIfIdle();
  return loaded;
}

void Recovery::ReleasePlace() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
  }
  Resume();
}

void Recovery::Resume() {
  std::vector<std::shared_ptr<wal::TxnLog>> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (active_ < std::max<size_t>(1, options_.window) && !queue_.empty()) {
      const int64_t bytes = RecordBytes(queue_.front().records);
      budget_->Charge(-bytes);
      queue_bytes_ -= bytes;
      next.push_back(std::make_shared<wal::TxnLog>(std::move(queue_.front())));
      queue_.pop_front();
      ++active_;
      ++posted_;
    }
  }
  if (!next.empty()) room_.notify_all();
  for (auto& t : next) hooks_.resume(std::move(t));
}

bool Recovery::QueueFull() const {
  return queue_.size() >= max_queued_ ||
         (budget_->limit() != 0 &&
          queue_bytes_ >= static_cast<int64_t>(budget_->limit() / 4));
}

void Recovery::ForgetIfIdle() {
  if (!scanning_ && queue_.empty() && posted_ == 0) {
    loaded_.clear();
    pending_ = false;
  }
}

}  // namespace tcc::runtime
