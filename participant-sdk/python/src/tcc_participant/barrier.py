"""The participant barrier (DESIGN.md section 11; the tables are stated in
proto/tcc/v1/participant.proto, THE BARRIER): the one implementation of the
Try, Confirm and Cancel tables in this SDK, over any BarrierStore.

For every call the barrier opens a local transaction, locks the branch key's
record, applies the table (checks in table order; the first that matches
decides), runs the business handler in the same transaction when the table
says so, writes the record and commits. A handler therefore never sees a
duplicate, a Confirm without its Try, or a Try after its Cancel.

  - A handler that raises, a lock wait that times out or a failed commit
    rolls back everything (business writes and barrier): CallError
    UNAVAILABLE (DATA_LOSS for a record that does not decode); the caller
    may re-send under the same key.
  - Protocol violations (Confirm without a successful Try, Confirm after
    Cancel, Cancel after Confirm) are CallError FAILED_PRECONDITION; nothing
    runs.
  - Answers that change nothing are not committed; answers that wrote are
    returned only after the commit (durable: the stores commit synchronously).

The record layout, as the C++ SDK's (barrier_record.h), so a PostgreSQL table
written by one reads in the other:

  try_state             phase_two    Query answers
  NONE                  NONE         (no record)  NOT_FOUND
  TRIED                 NONE         TRIED
  TRY_REJECTED          NONE         TRY_REJECTED
  CANCELLED_BEFORE_TRY  CANCELLED    CANCELLED_BEFORE_TRY (the marker; its
                                     stored answer is EMPTY_ROLLBACK)
  TRIED|TRY_REJECTED    CONFIRMED    CONFIRMED (only after TRIED)
  TRIED|TRY_REJECTED    CANCELLED    CANCELLED

Thread-safe: the store serialises calls on one key.
"""

import dataclasses
import enum
import time

from . import failpoint
from .status import CallError, Code

BEFORE_LOCK_FAILPOINT = "barrier.before_lock"
AFTER_LOCK_FAILPOINT = "barrier.after_lock"


class Outcome(enum.IntEnum):
    """Numbered as tcc.v1.Outcome."""

    UNSPECIFIED = 0
    EXECUTED = 1
    EMPTY_ROLLBACK = 2
    REJECTED = 3
    HANGING_REFUSED = 4
    CONFLICT = 5


class TryState(enum.IntEnum):
    NONE = 0
    TRIED = 1
    TRY_REJECTED = 2
    CANCELLED_BEFORE_TRY = 3


class PhaseTwoState(enum.IntEnum):
    NONE = 0
    CONFIRMED = 1
    CANCELLED = 2


class BarrierState(enum.IntEnum):
    """Numbered as tcc.v1.BarrierState."""

    UNSPECIFIED = 0
    NOT_FOUND = 1
    TRIED = 2
    TRY_REJECTED = 3
    CANCELLED_BEFORE_TRY = 4
    CONFIRMED = 5
    CANCELLED = 6


@dataclasses.dataclass(frozen=True)
class BranchKey:
    """What a barrier record is keyed by: (gid, created_at_ms, branch_id)."""

    gid: str
    created_at_ms: int
    branch_id: str

    def __str__(self):
        # "gid/created_at_ms/branch_id": ids never contain '/'.
        return f"{self.gid}/{self.created_at_ms}/{self.branch_id}"


@dataclasses.dataclass
class BranchCall:
    """One Try, Confirm or Cancel (a tcc.v1.BranchRequest)."""

    key: BranchKey
    action: str
    payload: bytes
    branch_hash: bytes  # 32 raw bytes
    revision: int = 0
    attempt: int = 1
    owner_epoch: int = 0
    try_deadline_ms: int = 0


@dataclasses.dataclass
class BarrierRecord:
    try_state: TryState = TryState.NONE
    branch_hash: bytes = b""
    try_message: str = ""
    phase_two: PhaseTwoState = PhaseTwoState.NONE
    phase_two_outcome: Outcome = Outcome.UNSPECIFIED
    phase_two_message: str = ""
    # The latest try-deadline any call that wrote the record carried; for a
    # cancel marker, its expiry.
    try_deadline_ms: int = 0
    # When phase 2 completed here (participant's clock); 0 without phase 2.
    phase_two_at_ms: int = 0


def barrier_state_of(record):
    """What Query reports for `record` (None: NOT_FOUND)."""
    if record is None or record.try_state == TryState.NONE:
        return BarrierState.NOT_FOUND
    if record.try_state == TryState.CANCELLED_BEFORE_TRY:
        return BarrierState.CANCELLED_BEFORE_TRY
    if record.phase_two == PhaseTwoState.CONFIRMED:
        return BarrierState.CONFIRMED
    if record.phase_two == PhaseTwoState.CANCELLED:
        return BarrierState.CANCELLED
    if record.try_state == TryState.TRIED:
        return BarrierState.TRIED
    return BarrierState.TRY_REJECTED


@dataclasses.dataclass
class Answer:
    """The answer of a Try, Confirm or Cancel the barrier understood."""

    outcome: Outcome
    replayed: bool = False
    message: str = ""
    wrote: bool = False  # the call committed a write (for logs and tests)


@dataclasses.dataclass
class QueryAnswer:
    state: BarrierState
    branch_hash: bytes = b""
    authoritative: bool = False


class TryVerdict:
    """A Try handler's verdict: reserve, or refuse (its writes discarded)."""

    __slots__ = ("refused", "reason")

    def __init__(self, refused, reason=""):
        self.refused = refused
        self.reason = reason

    @staticmethod
    def reserve():
        return TryVerdict(False)

    @staticmethod
    def refuse(reason):
        return TryVerdict(True, reason)


class HandlerContext:
    """What a business handler gets: the call, and the local transaction to
    do its writes in (txn.execute(sql, params), txn.dialect)."""

    __slots__ = ("call", "txn")

    def __init__(self, call, txn):
        self.call = call
        self.txn = txn

    def idempotency_key(self):
        """The key to give an outside system as its idempotency key for this
        branch (the same for its Try, Confirm and Cancel)."""
        return str(self.call.key)

    def branch_hash_hex(self):
        return self.call.branch_hash.hex()


@dataclasses.dataclass
class BarrierOptions:
    # How far this participant's clock may run behind tccd's: a Try is refused
    # by its deadline only once now > try_deadline + clock_skew_ms.
    clock_skew_ms: int = 5_000
    # How long a finished record is kept, from its phase 2 here (at least
    # tccd's deduplication horizon).
    retention_ms: int = 7 * 24 * 3600 * 1000
    # Test only, each breaks one rule so that tests/conformance/ can show it
    # catches it. Production never sets them.
    test_only_skip_anti_hanging: bool = False
    test_only_replayed_rejected_as_executed: bool = False


def _transient(what, error):
    """A store error as the caller sees it: UNAVAILABLE (retry; the outcome
    is unknown), except a corrupt record, which stays DATA_LOSS."""
    code = getattr(error, "code", None)
    if code == Code.DATA_LOSS:
        return CallError(Code.DATA_LOSS, f"{what}: {error}")
    return CallError(Code.UNAVAILABLE, f"{what}: {error}")


def _system_now_ms():
    return time.time_ns() // 1_000_000


class Barrier:
    """The tables over `store`; `now_ms` is the participant's wall clock
    (injected for tests)."""

    def __init__(self, store, options=None, now_ms=_system_now_ms):
        self.store = store
        self.options = options or BarrierOptions()
        self.now_ms = now_ms

    # -- the three tables -------------------------------------------------

    def try_(self, call, handler):
        with self._locked(call.key) as (txn, rec):
            anti_hanging = not self.options.test_only_skip_anti_hanging
            has_try = rec is not None and rec.try_state != TryState.NONE
            # Row 1: any Cancel.
            if anti_hanging and rec is not None and rec.phase_two == PhaseTwoState.CANCELLED:
                return Answer(Outcome.HANGING_REFUSED, False, "the branch was cancelled")
            # Row 2: past the try-deadline (+ skew) and no Try state.
            if (anti_hanging and not has_try and
                    self.now_ms() > call.try_deadline_ms + self.options.clock_skew_ms):
                return Answer(Outcome.HANGING_REFUSED, False, "the try-deadline has passed")
            if has_try:
                # Row 3: another hash.
                if rec.branch_hash != call.branch_hash:
                    return Answer(Outcome.CONFLICT, False,
                                  "the key is held by another branch hash")
                # Rows 4 and 5: the stored answer.
                if rec.try_state == TryState.TRIED:
                    return Answer(Outcome.EXECUTED, True, rec.try_message)
                if rec.try_state == TryState.TRY_REJECTED:
                    if self.options.test_only_replayed_rejected_as_executed:
                        return Answer(Outcome.EXECUTED, True, rec.try_message)
                    return Answer(Outcome.REJECTED, True, rec.try_message)
            # Row 6 (or, with the anti-hanging rows skipped, anything else):
            # run the business.
            txn.savepoint()
            verdict = self._run(handler, HandlerContext(call, txn), "try handler")
            if not isinstance(verdict, TryVerdict):
                raise CallError(Code.UNAVAILABLE,
                                "try handler: returned neither TryVerdict.reserve() "
                                "nor TryVerdict.refuse(reason)")
            record = BarrierRecord(branch_hash=call.branch_hash,
                                   try_deadline_ms=call.try_deadline_ms)
            if verdict.refused:
                txn.rollback_to_savepoint()  # a refusal keeps no business change
                record.try_state = TryState.TRY_REJECTED
                record.try_message = verdict.reason
            else:
                record.try_state = TryState.TRIED
            self._put_and_commit(txn, call.key, record)
            if verdict.refused:
                return Answer(Outcome.REJECTED, False, verdict.reason, wrote=True)
            return Answer(Outcome.EXECUTED, False, wrote=True)

    def confirm(self, call, handler):
        with self._locked(call.key) as (txn, rec):
            has_try = rec is not None and rec.try_state != TryState.NONE
            # Row 1: CONFIRMED (h).
            if (rec is not None and rec.phase_two == PhaseTwoState.CONFIRMED and
                    rec.branch_hash == call.branch_hash):
                return Answer(rec.phase_two_outcome, True, rec.phase_two_message)
            # Row 2: any Cancel.
            if rec is not None and rec.phase_two == PhaseTwoState.CANCELLED:
                raise CallError(Code.FAILED_PRECONDITION,
                                f"confirm after cancel of {call.key}")
            # Row 3: another hash.
            if has_try and rec.branch_hash != call.branch_hash:
                return Answer(Outcome.CONFLICT, False, "the key is held by another branch hash")
            # Row 5: no Try, or TRY_REJECTED.
            if not has_try or rec.try_state != TryState.TRIED:
                raise CallError(Code.FAILED_PRECONDITION,
                                f"confirm without a successful try of {call.key}")
            # Row 4: TRIED (h).
            self._run(handler, HandlerContext(call, txn), "confirm handler")
            record = dataclasses.replace(rec, phase_two=PhaseTwoState.CONFIRMED,
                                         phase_two_outcome=Outcome.EXECUTED,
                                         phase_two_at_ms=self.now_ms())
            self._put_and_commit(txn, call.key, record)
            return Answer(Outcome.EXECUTED, False, wrote=True)

    def cancel(self, call, handler):
        with self._locked(call.key) as (txn, rec):
            has_try = rec is not None and rec.try_state != TryState.NONE
            # Row 1: CANCELLED or CANCELLED_BEFORE_TRY: the stored answer; the
            # marker's expiry raised to this call's try-deadline if later.
            if rec is not None and rec.phase_two == PhaseTwoState.CANCELLED:
                answer = Answer(rec.phase_two_outcome, True, rec.phase_two_message)
                if call.try_deadline_ms > rec.try_deadline_ms:
                    self._put_and_commit(
                        txn, call.key,
                        dataclasses.replace(rec, try_deadline_ms=call.try_deadline_ms))
                    answer.wrote = True
                return answer
            # Row 2: CONFIRMED.
            if rec is not None and rec.phase_two == PhaseTwoState.CONFIRMED:
                raise CallError(Code.FAILED_PRECONDITION,
                                f"cancel after confirm of {call.key}")
            # Row 3: another hash.
            if has_try and rec.branch_hash != call.branch_hash:
                return Answer(Outcome.CONFLICT, False, "the key is held by another branch hash")
            now = self.now_ms()
            # Row 4: nothing: the empty-rollback marker.
            if not has_try:
                marker = BarrierRecord(try_state=TryState.CANCELLED_BEFORE_TRY,
                                       branch_hash=call.branch_hash,
                                       phase_two=PhaseTwoState.CANCELLED,
                                       phase_two_outcome=Outcome.EMPTY_ROLLBACK,
                                       try_deadline_ms=call.try_deadline_ms,
                                       phase_two_at_ms=now)
                self._put_and_commit(txn, call.key, marker)
                return Answer(Outcome.EMPTY_ROLLBACK, False, wrote=True)
            record = dataclasses.replace(
                rec, phase_two=PhaseTwoState.CANCELLED, phase_two_at_ms=now,
                try_deadline_ms=max(rec.try_deadline_ms, call.try_deadline_ms))
            if rec.try_state == TryState.TRY_REJECTED:
                # Row 5: TRY_REJECTED (h): nothing was reserved.
                record.phase_two_outcome = Outcome.EMPTY_ROLLBACK
            else:
                # Row 6: TRIED (h): undo the reservation.
                self._run(handler, HandlerContext(call, txn), "cancel handler")
                record.phase_two_outcome = Outcome.EXECUTED
            self._put_and_commit(txn, call.key, record)
            return Answer(record.phase_two_outcome, False, wrote=True)

    # -- reverse lookup and retention -------------------------------------

    def query(self, key):
        """Read-only: what the barrier holds for `key`."""
        try:
            rec = self.store.read_barrier(key)
        except CallError as e:
            raise _transient("read barrier record", e) from e
        except Exception as e:  # the store's driver
            raise _transient("read barrier record", e) from e
        return QueryAnswer(state=barrier_state_of(rec),
                           branch_hash=rec.branch_hash if rec is not None else b"",
                           authoritative=self.store.authoritative)

    @staticmethod
    def removable(record, now_ms, options):
        """Whether `record` may be removed at `now_ms` (DESIGN.md section 9)."""
        if record.phase_two == PhaseTwoState.NONE:
            return False  # a Try without its phase 2 is never removed
        return (now_ms >= record.phase_two_at_ms + options.retention_ms and
                now_ms > record.try_deadline_ms + options.clock_skew_ms)

    def collect_garbage(self):
        """Removes every finished record past retention (and past its
        try-deadline plus the skew); returns how many."""
        now = self.now_ms()
        candidates = [key for key, rec in self.store.scan_barrier()
                      if self.removable(rec, now, self.options)]
        removed = 0
        for key in candidates:
            with self.store.begin() as txn:
                rec = txn.lock_barrier(key)
                # Re-checked under the lock: a Cancel may have raised it since.
                if rec is None or not self.removable(rec, now, self.options):
                    continue
                txn.delete_barrier(key)
                txn.commit()
                removed += 1
        return removed

    # -- helpers ----------------------------------------------------------

    def _locked(self, key):
        return _Locked(self.store, key)

    @staticmethod
    def _run(handler, ctx, what):
        try:
            return handler(ctx)
        except Exception as e:  # any handler failure is transient
            raise CallError(Code.UNAVAILABLE, f"{what}: {type(e).__name__}: {e}") from e

    @staticmethod
    def _put_and_commit(txn, key, record):
        try:
            txn.put_barrier(key, record)
        except Exception as e:
            raise _transient("write barrier record", e) from e
        try:
            txn.commit()
        except Exception as e:
            raise _transient("commit local transaction", e) from e


class _Locked:
    """Begins a local transaction and locks `key`'s record; rolls back on
    exit unless committed."""

    def __init__(self, store, key):
        self.store = store
        self.key = key
        self.txn = None

    def __enter__(self):
        failpoint.evaluate(BEFORE_LOCK_FAILPOINT)
        try:
            self.txn = self.store.begin()
            self.txn.__enter__()
        except CallError as e:
            raise _transient("begin local transaction", e) from e
        except Exception as e:
            raise _transient("begin local transaction", e) from e
        try:
            record = self.txn.lock_barrier(self.key)
        except Exception as e:
            self.txn.__exit__(type(e), e, None)
            raise _transient("lock barrier record", e) from e
        try:
            failpoint.evaluate(AFTER_LOCK_FAILPOINT)
        except Exception as e:
            self.txn.__exit__(type(e), e, None)
            raise
        return self.txn, record

    def __exit__(self, exc_type, exc, tb):
        self.txn.__exit__(exc_type, exc, tb)
        return False
