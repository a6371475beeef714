// The participant barrier (DESIGN.md section 11): the one implementation of
// the Try, Confirm and Cancel tables, over any BarrierStore.
//
// For every call the barrier opens a local transaction, locks the branch
// key's record, applies the table (checks in table order; the first that
// matches decides), runs the business handler in the same transaction when
// the table says so, writes the record and commits. A handler therefore
// never sees a duplicate, a Confirm without its Try, or a Try after its
// Cancel, and needs no idempotency code of its own.
//
//   - A handler error (non-OK status or an exception), a lock-wait timeout or
//     a failed commit rolls back everything (business writes and barrier) and
//     the call returns UNAVAILABLE: the caller may retry under the same key.
//   - Protocol violations (Confirm without a successful Try, Confirm after
//     Cancel, Cancel after Confirm) return FAILED_PRECONDITION; nothing runs.
//   - A Try is refused (HANGING_REFUSED) when it finds a Cancel, or when the
//     participant's clock is past its try-deadline plus `clock_skew_ms` and
//     no Try state exists.
//   - Answers that change nothing are not committed; answers that wrote are
//     returned only after Commit() (durable).
//
// The barrier is synchronous and keeps no state of its own besides its
// options: the simulation calls it directly, single-threaded; the
// participant server calls it from many threads (the store serialises calls
// on one key).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/barrier/barrier_record.h"
#include "tcc/barrier/barrier_store.h"
#include "tcc/clock/clock.h"

namespace tcc::barrier {

// Failpoints (tcc/failpoint) around the lock every Try, Confirm and Cancel
// takes on its key's record: before it (the call arrived, nothing locked)
// and after it (the key is locked, the table not yet applied). `error`
// there answers UNAVAILABLE, nothing changed; `sleep` holds the call, for
// races over the wire (tests/conformance/).
inline constexpr char kBeforeLockFailpoint[] = "barrier.before_lock";
inline constexpr char kAfterLockFailpoint[] = "barrier.after_lock";

// One Try, Confirm or Cancel, as the barrier sees it (the wire's
// BranchRequest without transport details).
struct BranchCall {
  BranchKey key;
  std::string action;
  std::string payload;
  // SHA-256 branch hash, 32 raw bytes.
  std::string branch_hash;
  uint64_t revision = 0;
  uint32_t attempt = 1;
  uint64_t owner_epoch = 0;
  // Absolute try-deadline, Unix ms (wall clock).
  int64_t try_deadline_ms = 0;
};

// What a business handler gets: the call, and the local transaction to do its
// writes in.
struct HandlerContext {
  const BranchCall& call;
  LocalTxn& txn;

  // The key to give an outside system (payment provider, mailer, ...) as its
  // idempotency key for this branch: "gid/created_at_ms/branch_id". It is the
  // same for the Try, Confirm and Cancel of one branch; add the phase name
  // when the outside system needs one key per phase.
  std::string IdempotencyKey() const { return ToString(call.key); }
  // The branch hash as 64 lower-case hex characters.
  std::string BranchHashHex() const;
};

// A Try handler's verdict when it did not fail: reserve, or refuse.
class TryVerdict {
 public:
  static TryVerdict Reserve() { return TryVerdict(false, ""); }
  static TryVerdict Refuse(std::string reason) {
    return TryVerdict(true, std::move(reason));
  }
  bool refused() const { return refused_; }
  const std::string& reason() const { return reason_; }

 private:
  TryVerdict(bool refused, std::string reason)
      : refused_(refused), reason_(std::move(reason)) {}
  bool refused_;
  std::string reason_;
};

// Try: OK(Reserve) keeps its writes (EXECUTED); OK(Refuse) discards them
// (REJECTED); an error discards everything (UNAVAILABLE).
using TryHandler =
    std::function<absl::StatusOr<TryVerdict>(const HandlerContext&)>;
// Confirm and Cancel cannot refuse: OK, or an error that rolls back and is
// retried (UNAVAILABLE).
using PhaseTwoHandler = std::function<absl::Status(const HandlerContext&)>;

// The answer of a Try, Confirm or Cancel the barrier understood.
struct BarrierAnswer {
  Outcome outcome = Outcome::kUnspecified;
  bool replayed = false;
  std::string message;
};

// The reverse lookup's answer.
struct QueryAnswer {
  BarrierState state = BarrierState::kNotFound;
  std::string branch_hash;
  bool authoritative = false;
};

struct BarrierOptions {
  // How far the participant's clock may run behind tccd's: a Try is refused
  // by its deadline only once now > try_deadline + clock_skew_ms.
  int64_t clock_skew_ms = 5'000;
  // How long a finished record (one with a phase-2 state) is kept, counted
  // from its phase 2 here (section 9). Must be at least tccd's deduplication
  // horizon.
  int64_t retention_ms = 7LL * 24 * 3600 * 1000;
  // Test only: skips the Try table's anti-hanging rows (a Try after a Cancel,
  // or past its try-deadline, runs the business). The deterministic
  // simulation (tests/sim/) turns it on to show that it catches the broken
  // rule. Off by default; production never sets it.
  bool test_only_skip_anti_hanging = false;
};

class Barrier {
 public:
  // `store` and `clock` must outlive the barrier.
  Barrier(BarrierStore& store, const clock::Clock& clock,
          BarrierOptions options = {});

  [[nodiscard]] absl::StatusOr<BarrierAnswer> Try(const BranchCall& call,
                                                  const TryHandler& handler);
  [[nodiscard]] absl::StatusOr<BarrierAnswer> Confirm(
      const BranchCall& call, const PhaseTwoHandler& handler);
  [[nodiscard]] absl::StatusOr<BarrierAnswer> Cancel(
      const BranchCall& call, const PhaseTwoHandler& handler);

  // Read-only.
  [[nodiscard]] absl::StatusOr<QueryAnswer> Query(const BranchKey& key);

  // Retention (section 9): removes every finished record whose phase 2 is at
  // least `retention_ms` old and whose try-deadline plus `clock_skew_ms` has
  // passed (so a late Try is refused by its deadline alone). Never removes a
  // record without a phase-2 state (TRIED, TRY_REJECTED). Returns how many
  // were removed.
  [[nodiscard]] absl::StatusOr<size_t> CollectGarbage();

  // Whether `record` may be removed at `now_ms` under `options`.
  static bool Removable(const BarrierRecord& record, int64_t now_ms,
                        const BarrierOptions& options);

  const BarrierOptions& options() const { return options_; }
  BarrierStore& store() { return store_; }
  const clock::Clock& clock() const { return clock_; }

 private:
  BarrierStore& store_;
  const clock::Clock& clock_;
  BarrierOptions options_;
};

}  // namespace tcc::barrier
