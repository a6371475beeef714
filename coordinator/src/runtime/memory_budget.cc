#include "runtime/memory_budget.h"

#include <algorithm>
#include <variant>

namespace tcc::runtime {

int64_t TxnBytes(const core::Txn& t) {
  constexpr int64_t kTxn = 2048;     // Owner, Txn, their maps
  constexpr int64_t kBranch = 384;   // BranchRuntime
  constexpr int64_t kPending = 128;  // a PendingPersist or a Waiter
  int64_t n =
      kTxn + static_cast<int64_t>(t.gid.size() + t.decision_reason.size() +
                                  t.held_reason.size());
  for (const auto& br : t.branches) {
    n += kBranch +
         static_cast<int64_t>(
             br.spec.branch_id.size() + br.spec.participant.size() +
             br.spec.action.size() + br.spec.payload.size() +
             br.try_phase.last_error.size() +
             br.second_phase.last_error.size() + br.stuck_reason.size());
  }
  n += kPending * static_cast<int64_t>(t.pending.size() + t.waiters.size());
  return n;
}

int64_t BranchBytes(const wal::BranchSpec& b) {
  return 384 + static_cast<int64_t>(b.branch_id.size() + b.participant.size() +
                                    b.action.size() + b.payload.size());
}

int64_t RecordBytes(const std::vector<wal::Record>& records) {
  int64_t n = 0;
  for (const auto& r : records) {
    n += 128;
    if (const auto* reg = std::get_if<wal::Registered>(&r)) {
      for (const auto& b : reg->branches) n += BranchBytes(b);
    } else if (const auto* add = std::get_if<wal::BranchAdded>(&r)) {
      n += BranchBytes(add->branch);
    }
  }
  return n;
}

namespace {
// The innermost live reservation made on this thread (of any budget).
thread_local MemoryBudget::Reservation* current_reservation = nullptr;
}  // namespace

MemoryBudget::Reservation::Reservation(MemoryBudget& budget, uint64_t bytes) {
  if (!budget.Claim(bytes)) return;
  budget_ = &budget;
  left_ = static_cast<int64_t>(bytes);
  outer_ = current_reservation;
  current_reservation = this;
}

MemoryBudget::Reservation::~Reservation() {
  if (budget_ == nullptr) return;
  budget_->claimed_.fetch_sub(left_);
  current_reservation = outer_;
}

void MemoryBudget::Charge(int64_t delta) {
  Use(delta);
  int64_t claim = delta;
  if (delta > 0) {
    for (Reservation* r = current_reservation; r != nullptr; r = r->outer_) {
      if (r->budget_ != this) continue;
      const int64_t take = std::min(r->left_, claim);
      r->left_ -= take;
      claim -= take;
      break;
    }
  }
  if (claim != 0) claimed_.fetch_add(claim);
}

int64_t AdmissionBytes(const std::vector<const wal::BranchSpec*>& branches) {
  int64_t n = 4096;
  for (const auto* b : branches) n += 3 * BranchBytes(*b);
  return n;
}

}  // namespace tcc::runtime
