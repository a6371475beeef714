"""Participant: what a service embeds to take part in tccd transactions.

A service registers its actions (name -> Try, Confirm and Cancel handlers);
the Participant checks every call (ids, hash length, times: a bad one is
INVALID_ARGUMENT and changes nothing), routes it through the barrier, counts
the answers in Prometheus metrics and logs replays and refusals. Handlers
only do business work, in the local transaction they are handed:

    p = Participant(SqliteStore("bank.db"), name="py-bank")
    p.add_action("debit",
                 on_try=lambda c: TryVerdict.reserve(),      # or .refuse(why)
                 on_confirm=lambda c: None,
                 on_cancel=lambda c: None)

The Participant is transport-free; GrpcParticipantServer and
HttpParticipantServer serve it (the same handlers over both).

Metrics (no per-key labels):
  tcc_participant_calls_total{operation, outcome, replayed}
    operation: try | confirm | cancel | query
    outcome:   executed | empty_rollback | rejected | hanging_refused |
               conflict | (queries) the barrier state | the lowercase code
               of an error (unavailable, failed_precondition, ...)

Thread-safety: register actions before the first call; then any method may
be called from any thread.
"""

import logging
import threading

import prometheus_client

from . import failpoint, ids
from .barrier import Barrier, BarrierOptions, BranchCall, BranchKey, Outcome
from .status import CallError, Code, invalid_argument

AFTER_COMMIT_FAILPOINT = "participant.after_commit"

BRANCH_HASH_BYTES = 32

log = logging.getLogger("tcc_participant")


def _validate_created_at(created_at_ms):
    if not isinstance(created_at_ms, int) or created_at_ms <= 0:
        raise invalid_argument(f"created_at_ms: must be > 0 (Unix ms), got {created_at_ms}")


def validate_key(key):
    ids.validate_gid(key.gid)
    ids.validate_branch_id(key.branch_id)
    _validate_created_at(key.created_at_ms)


def validate_call(call):
    """INVALID_ARGUMENT for a call the participant cannot take."""
    # Every branch call carries its try-deadline: a Try is refused after it,
    # and a Cancel's marker is kept at least until it.
    if call.try_deadline_ms <= 0:
        raise invalid_argument(
            f"try_deadline_ms: required (Unix ms > 0), got {call.try_deadline_ms}")
    validate_key(call.key)
    ids.validate_action(call.action)
    if len(call.branch_hash) != BRANCH_HASH_BYTES:
        raise invalid_argument(
            f"branch_hash: expected {BRANCH_HASH_BYTES} bytes, got {len(call.branch_hash)}")


class _Action:
    __slots__ = ("on_try", "on_confirm", "on_cancel")

    def __init__(self, on_try, on_confirm, on_cancel):
        self.on_try = on_try
        self.on_confirm = on_confirm
        self.on_cancel = on_cancel


class Participant:
    """`store`: a barrier store (tcc_participant.stores); `registry`: the
    Prometheus registry the metrics go to (a new one when None)."""

    def __init__(self, store, name="participant", options=None, registry=None, now_ms=None):
        self.name = name
        self.barrier = (Barrier(store, options or BarrierOptions()) if now_ms is None else
                        Barrier(store, options or BarrierOptions(), now_ms))
        self.registry = registry if registry is not None else prometheus_client.CollectorRegistry()
        self._calls = prometheus_client.Counter(
            "tcc_participant_calls", "Participant calls answered, by operation, outcome "
            "and whether the answer was replayed", ["operation", "outcome", "replayed"],
            registry=self.registry)
        self._actions = {}
        self._retention = None

    @property
    def store(self):
        return self.barrier.store

    def add_action(self, name, on_try, on_confirm, on_cancel):
        """Registers an action; INVALID_ARGUMENT for a bad name, a missing
        handler or a name already taken. on_try returns TryVerdict.reserve()
        or TryVerdict.refuse(reason); on_confirm and on_cancel return nothing
        (raising rolls everything back: UNAVAILABLE, tccd re-sends)."""
        ids.validate_action(name)
        if not (callable(on_try) and callable(on_confirm) and callable(on_cancel)):
            raise invalid_argument(f"action {name}: Try, Confirm and Cancel handlers "
                                   "are all required")
        if name in self._actions:
            raise invalid_argument(f"action {name} is already registered")
        self._actions[name] = _Action(on_try, on_confirm, on_cancel)

    # -- calls --------------------------------------------------------------

    def try_(self, call):
        return self._run("try", call)

    def confirm(self, call):
        return self._run("confirm", call)

    def cancel(self, call):
        return self._run("cancel", call)

    def query(self, key):
        try:
            validate_key(key)
            answer = self.barrier.query(key)
        except CallError as e:
            self._count("query", e.code.name.lower(), False)
            raise
        self._count("query", answer.state.name.lower(), False)
        return answer

    def _run(self, op, call):
        where = (f"{op} gid={call.key.gid!r} branch={call.key.branch_id!r} "
                 f"created_at={call.key.created_at_ms} attempt={call.attempt} "
                 f"epoch={call.owner_epoch} action={call.action!r}")
        try:
            validate_call(call)
            action = self._actions.get(call.action)
            if action is None:
                raise invalid_argument(f"unknown action {call.action!r}")
            if op == "try":
                answer = self.barrier.try_(call, action.on_try)
            elif op == "confirm":
                answer = self.barrier.confirm(call, action.on_confirm)
            else:
                answer = self.barrier.cancel(call, action.on_cancel)
        except CallError as e:
            self._count(op, e.code.name.lower(), False)
            if e.code == Code.UNAVAILABLE:
                log.warning("%s: %s: %s", self.name, where, e)
            elif e.code == Code.FAILED_PRECONDITION:
                # A protocol violation: tccd flags the branch STUCK.
                log.warning("%s: %s protocol violation: %s", self.name, where, e)
            else:
                log.info("%s: %s refused: %s", self.name, where, e)
            raise
        outcome = answer.outcome.name.lower()
        self._count(op, outcome, answer.replayed)
        refusal = answer.outcome in (Outcome.REJECTED, Outcome.HANGING_REFUSED, Outcome.CONFLICT)
        if answer.replayed or refusal:
            log.info("%s: %s -> %s%s%s", self.name, where, outcome,
                     " (replayed)" if answer.replayed else "",
                     f": {answer.message}" if answer.message else "")
        else:
            log.debug("%s: %s -> %s", self.name, where, outcome)
        return answer

    def _count(self, op, outcome, replayed):
        self._calls.labels(op, outcome, "true" if replayed else "false").inc()

    # -- retention ------------------------------------------------------------

    def start_retention(self, every_s=3600.0):
        """Runs barrier.collect_garbage() every `every_s` seconds on a daemon
        thread (DESIGN.md section 9); errors are logged and retried."""
        stop = threading.Event()

        def loop():
            while not stop.wait(every_s):
                try:
                    removed = self.barrier.collect_garbage()
                    if removed:
                        log.info("%s: retention removed %d finished records", self.name, removed)
                except Exception as e:  # retried at the next round
                    log.warning("%s: retention: %s", self.name, e)

        thread = threading.Thread(target=loop, name="tcc-retention", daemon=True)
        thread.start()
        self._retention = stop
        return stop


def after_commit():
    """Evaluated by the servers between a call's durable commit and its
    reply (a crash there loses only the reply)."""
    failpoint.evaluate(AFTER_COMMIT_FAILPOINT)


__all__ = ["Participant", "BranchCall", "BranchKey", "validate_call", "validate_key",
           "after_commit", "AFTER_COMMIT_FAILPOINT"]
