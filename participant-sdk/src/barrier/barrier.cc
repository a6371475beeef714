#include "tcc/barrier/barrier.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::barrier {
namespace {

using RecordOr = absl::StatusOr<std::optional<BarrierRecord>>;

// Any failure on the way (store, lock wait, handler, commit) is transient
// for the caller: nothing was changed, or the commit's fate is unknown; the
// same call may be sent again.
// A store error, as the caller sees it: UNAVAILABLE (retry; the outcome is
// unknown), except a corrupt record, which stays DATA_LOSS so that it reads
// as what it is (tccd retries it all the same, and operators see it).
absl::Status Transient(std::string_view what, const absl::Status& cause) {
  std::string message = absl::StrCat(std::string(what), ": ", cause.ToString());
  if (cause.code() == absl::StatusCode::kDataLoss) {
    return absl::DataLossError(std::move(message));
  }
  return absl::UnavailableError(std::move(message));
}

BarrierAnswer Answer(Outcome outcome, bool replayed, std::string message = "") {
  return BarrierAnswer{outcome, replayed, std::move(message)};
}

bool HasTryState(const std::optional<BarrierRecord>& rec) {
  return rec.has_value() && rec->try_state != TryState::kNone;
}

bool IsCancelled(const std::optional<BarrierRecord>& rec) {
  return rec.has_value() && rec->phase_two == PhaseTwoState::kCancelled;
}

// Runs a handler, turning an exception into a status: no exception leaves
// the barrier.
template <class Fn>
auto RunHandler(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("handler threw: ", std::string(e.what())));
  } catch (...) {
    return absl::UnavailableError("handler threw a non-standard exception");
  }
}

struct Locked {
  std::unique_ptr<LocalTxn> txn;
  std::optional<BarrierRecord> record;
};

absl::StatusOr<Locked> BeginAndLock(BarrierStore& store, const BranchKey& key) {
  // A call held here has arrived but not yet locked its key (a late Try
  // whose Cancel overtakes it).
  if (absl::Status s = failpoint::Eval(kBeforeLockFailpoint); !s.ok()) {
    return Transient("failpoint", s);
  }
  absl::StatusOr<std::unique_ptr<LocalTxn>> txn = store.Begin();
  if (!txn.ok()) return Transient("begin local transaction", txn.status());
  RecordOr rec = (*txn)->LockBarrier(key);
  if (!rec.ok()) return Transient("lock barrier record", rec.status());
  // A call held here holds its key's lock (its own retry waits behind it).
  if (absl::Status s = failpoint::Eval(kAfterLockFailpoint); !s.ok()) {
    return Transient("failpoint", s);
  }
  return Locked{std::move(*txn), std::move(*rec)};
}

absl::Status PutAndCommit(LocalTxn& txn, const BranchKey& key,
                          const BarrierRecord& record) {
  if (absl::Status s = txn.PutBarrier(key, record); !s.ok()) {
    return Transient("write barrier record", s);
  }
  if (absl::Status s = txn.Commit(); !s.ok()) {
    return Transient("commit local transaction", s);
  }
  return absl::OkStatus();
}

}  // namespace

std::string HandlerContext::BranchHashHex() const {
  return absl::BytesToHexString(
      absl::string_view(call.branch_hash.data(), call.branch_hash.size()));
}

Barrier::Barrier(BarrierStore& store, const clock::Clock& clock,
                 BarrierOptions options)
    : store_(store), clock_(clock), options_(options) {}

absl::StatusOr<BarrierAnswer> Barrier::Try(const BranchCall& call,
                                           const TryHandler& handler) {
  absl::StatusOr<Locked> locked = BeginAndLock(store_, call.key);
  if (!locked.ok()) return locked.status();
  LocalTxn& txn = *locked->txn;
  const std::optional<BarrierRecord>& rec = locked->record;

  const bool anti_hanging = !options_.test_only_skip_anti_hanging;
  // Row 1: any Cancel.
  if (anti_hanging && IsCancelled(rec)) {
    return Answer(Outcome::kHangingRefused, false, "the branch was cancelled");
  }
  // Row 2: past the try-deadline (+ skew) and no Try state.
  if (anti_hanging && !HasTryState(rec) &&
      clock_.NowUnixMs() > call.try_deadline_ms + options_.clock_skew_ms) {
    return Answer(Outcome::kHangingRefused, false,
                  "the try-deadline has passed");
  }
  if (HasTryState(rec)) {
    // Row 3: another hash.
    if (rec->branch_hash != call.branch_hash) {
      return Answer(Outcome::kConflict, false,
                    "the key is held by another branch hash");
    }
    // Rows 4 and 5: the stored answer.
    if (rec->try_state == TryState::kTried) {
      return Answer(Outcome::kExecuted, true, rec->try_message);
    }
    if (rec->try_state == TryState::kTryRejected) {
      return Answer(Outcome::kRejected, true, rec->try_message);
    }
  }

  // Row 6: nothing. Run the business.
  if (absl::Status s = txn.SetSavePoint(); !s.ok()) {
    return Transient("set savepoint", s);
  }
  HandlerContext ctx{call, txn};
  absl::StatusOr<TryVerdict> verdict =
      RunHandler([&]() -> absl::StatusOr<TryVerdict> { return handler(ctx); });
  if (!verdict.ok()) return Transient("try handler", verdict.status());

  BarrierRecord record;
  record.branch_hash = call.branch_hash;
  record.try_deadline_ms = call.try_deadline_ms;
  if (verdict->refused()) {
    // A refusal keeps no business change.
    if (absl::Status s = txn.RollbackToSavePoint(); !s.ok()) {
      return Transient("roll back refused try", s);
    }
    record.try_state = TryState::kTryRejected;
    record.try_message = verdict->reason();
  } else {
    record.try_state = TryState::kTried;
  }
  if (absl::Status s = PutAndCommit(txn, call.key, record); !s.ok()) return s;
  return verdict->refused()
             ? Answer(Outcome::kRejected, false, verdict->reason())
             : Answer(Outcome::kExecuted, false);
}

absl::StatusOr<BarrierAnswer> Barrier::Confirm(const BranchCall& call,
                                               const PhaseTwoHandler& handler) {
  absl::StatusOr<Locked> locked = BeginAndLock(store_, call.key);
  if (!locked.ok()) return locked.status();
  LocalTxn& txn = *locked->txn;
  const std::optional<BarrierRecord>& rec = locked->record;

  // Row 1: CONFIRMED (h).
  if (rec.has_value() && rec->phase_two == PhaseTwoState::kConfirmed &&
      rec->branch_hash == call.branch_hash) {
    return Answer(rec->phase_two_outcome, true, rec->phase_two_message);
  }
  // Row 2: any Cancel.
  if (IsCancelled(rec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("confirm after cancel of ", ToString(call.key)));
  }
  // Row 3: another hash.
  if (HasTryState(rec) && rec->branch_hash != call.branch_hash) {
    return Answer(Outcome::kConflict, false,
                  "the key is held by another branch hash");
  }
  // Row 5: no Try, or TRY_REJECTED.
  if (!HasTryState(rec) || rec->try_state != TryState::kTried) {
    return absl::FailedPreconditionError(absl::StrCat(
        "confirm without a successful try of ", ToString(call.key)));
  }
  // Row 4: TRIED (h).
  HandlerContext ctx{call, txn};
  absl::Status s = RunHandler([&]() -> absl::Status { return handler(ctx); });
  if (!s.ok()) return Transient("confirm handler", s);
  BarrierRecord record = *rec;
  record.phase_two = PhaseTwoState::kConfirmed;
  record.phase_two_outcome = Outcome::kExecuted;
  record.phase_two_at_ms = clock_.NowUnixMs();
  if (absl::Status c = PutAndCommit(txn, call.key, record); !c.ok()) return c;
  return Answer(Outcome::kExecuted, false);
}

absl::StatusOr<BarrierAnswer> Barrier::Cancel(const BranchCall& call,
                                              const PhaseTwoHandler& handler) {
  absl::StatusOr<Locked> locked = BeginAndLock(store_, call.key);
  if (!locked.ok()) return locked.status();
  LocalTxn& txn = *locked->txn;
  const std::optional<BarrierRecord>& rec = locked->record;

  // Row 1: CANCELLED or CANCELLED_BEFORE_TRY: the stored answer; the
  // marker's expiry raised to this call's try-deadline if later.
  if (IsCancelled(rec)) {
    BarrierAnswer answer =
        Answer(rec->phase_two_outcome, true, rec->phase_two_message);
    if (call.try_deadline_ms > rec->try_deadline_ms) {
      BarrierRecord raised = *rec;
      raised.try_deadline_ms = call.try_deadline_ms;
      if (absl::Status s = PutAndCommit(txn, call.key, raised); !s.ok()) {
        return s;
      }
    }
    return answer;
  }
  // Row 2: CONFIRMED.
  if (rec.has_value() && rec->phase_two == PhaseTwoState::kConfirmed) {
    return absl::FailedPreconditionError(
        absl::StrCat("cancel after confirm of ", ToString(call.key)));
  }
  // Row 3: another hash.
  if (HasTryState(rec) && rec->branch_hash != call.branch_hash) {
    return Answer(Outcome::kConflict, false,
                  "the key is held by another branch hash");
  }
  const int64_t now = clock_.NowUnixMs();
  // Row 4: nothing: the empty-rollback marker.
  if (!HasTryState(rec)) {
    BarrierRecord marker;
    marker.try_state = TryState::kCancelledBeforeTry;
    marker.branch_hash = call.branch_hash;
    marker.phase_two = PhaseTwoState::kCancelled;
    marker.phase_two_outcome = Outcome::kEmptyRollback;
    marker.try_deadline_ms = call.try_deadline_ms;
    marker.phase_two_at_ms = now;
    if (absl::Status s = PutAndCommit(txn, call.key, marker); !s.ok()) {
      return s;
    }
    return Answer(Outcome::kEmptyRollback, false);
  }
  BarrierRecord record = *rec;
  record.phase_two = PhaseTwoState::kCancelled;
  record.phase_two_at_ms = now;
  record.try_deadline_ms =
      std::max(record.try_deadline_ms, call.try_deadline_ms);
  if (rec->try_state == TryState::kTryRejected) {
    // Row 5: TRY_REJECTED (h): nothing was reserved.
    record.phase_two_outcome = Outcome::kEmptyRollback;
  } else {
    // Row 6: TRIED (h): undo the reservation.
    HandlerContext ctx{call, txn};
    absl::Status s = RunHandler([&]() -> absl::Status { return handler(ctx); });
    if (!s.ok()) return Transient("cancel handler", s);
    record.phase_two_outcome = Outcome::kExecuted;
  }
  if (absl::Status s = PutAndCommit(txn, call.key, record); !s.ok()) return s;
  return Answer(record.phase_two_outcome, false);
}

absl::StatusOr<QueryAnswer> Barrier::Query(const BranchKey& key) {
  RecordOr rec = store_.ReadBarrier(key);
  if (!rec.ok()) return Transient("read barrier record", rec.status());
  QueryAnswer answer;
  answer.state = BarrierStateOf(rec->has_value() ? &**rec : nullptr);
  if (rec->has_value()) answer.branch_hash = (*rec)->branch_hash;
  answer.authoritative = store_.authoritative();
  return answer;
}

bool Barrier::Removable(const BarrierRecord& record, int64_t now_ms,
                        const BarrierOptions& options) {
  if (record.phase_two == PhaseTwoState::kNone) return false;
  return now_ms >= record.phase_two_at_ms + options.retention_ms &&
         now_ms > record.try_deadline_ms + options.clock_skew_ms;
}

absl::StatusOr<size_t> Barrier::CollectGarbage() {
  const int64_t now = clock_.NowUnixMs();
  std::vector<BranchKey> candidates;
  absl::Status scan =
      store_.ScanBarrier([&](const BranchKey& key, const BarrierRecord& rec) {
        if (Removable(rec, now, options_)) candidates.push_back(key);
      });
  if (!scan.ok()) return scan;
  size_t removed = 0;
  for (const BranchKey& key : candidates) {
    absl::StatusOr<Locked> locked = BeginAndLock(store_, key);
    if (!locked.ok()) return locked.status();
    // Re-check under the lock: a Cancel may have raised the expiry since.
    if (!locked->record.has_value() ||
        !Removable(*locked->record, now, options_)) {
      continue;
    }
    if (absl::Status s = locked->txn->DeleteBarrier(key); !s.ok()) return s;
    if (absl::Status s = locked->txn->Commit(); !s.ok()) return s;
    ++removed;
  }
  return removed;
}

}  // namespace tcc::barrier
