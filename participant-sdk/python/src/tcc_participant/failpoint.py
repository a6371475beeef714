"""Failpoints: named places where a test makes the process crash, fail or
stall, without a special build (the same syntax as the C++ SDK's,
participant-sdk/include/tcc/failpoint/failpoint.h).

Nothing fires unless named in the environment variable TCC_FAILPOINTS, read
at the first evaluation; production never sets it. The value is a
';'-separated list of NAME=ACTION[@N|@N+], ACTION one of
  crash      SIGKILL to this process at once (as `kill -9`)
  error      evaluate() raises CallError(UNAVAILABLE, "failpoint NAME")
  sleep(MS)  the calling thread stalls MS milliseconds, then goes on
             (saying "failpoint NAME: sleep MS ms" on stderr first)
  off        nothing
and @N fires on the Nth evaluation only (1-based), @N+ on the Nth and every
later one; no trigger: every evaluation.

The points of this SDK (the C++ SDK has the same):
  barrier.before_lock      a Try/Confirm/Cancel arrived, its key not locked
  barrier.after_lock       its key locked, the table not yet applied
  participant.after_commit the call's local transaction is durable, the
                           reply not yet sent (crash: the caller never hears)

Thread-safe.
"""

import os
import re
import signal
import sys
import threading
import time

from .status import CallError, Code

ENV_VAR = "TCC_FAILPOINTS"

_SPEC = re.compile(r"^([A-Za-z0-9._-]+)=(crash|error|off|sleep\((\d+)\))(?:@(\d+)(\+)?)?$")

_lock = threading.Lock()
_points = None  # name -> [action, sleep_ms, nth, and_later, hits]


def parse(spec):
    """The configuration `spec` describes; ValueError when malformed."""
    points = {}
    for item in (spec or "").split(";"):
        item = item.strip()
        if not item:
            continue
        m = _SPEC.match(item)
        if not m:
            raise ValueError(f"{ENV_VAR}: cannot read {item!r} "
                             "(NAME=crash|error|off|sleep(MS)[@N|@N+])")
        name, action, ms, nth, later = m.groups()
        if action.startswith("sleep"):
            action = "sleep"
        n = int(nth) if nth else 0
        if nth is not None and n < 1:
            raise ValueError(f"{ENV_VAR}: {item!r}: @N counts from 1")
        points[name] = [action, int(ms or 0), n, bool(later), 0]
    return points


def configure(spec):
    """Replaces the configuration (tests); ValueError changes nothing."""
    global _points
    parsed = parse(spec)
    with _lock:
        _points = parsed


def _load():
    global _points
    with _lock:
        if _points is None:
            # A malformed value stops the process: a crash test must not run
            # without its faults.
            try:
                _points = parse(os.environ.get(ENV_VAR, ""))
            except ValueError as e:
                os.write(2, (str(e) + "\n").encode())
                os._exit(2)
        return _points


def hits(name):
    """How often `name` was evaluated since configured (0 if not configured)."""
    points = _load()
    with _lock:
        p = points.get(name)
        return p[4] if p else 0


def evaluate(name):
    """Evaluates the failpoint `name`: may not return (crash), return late
    (sleep), or raise CallError (error)."""
    points = _points if _points is not None else _load()
    if not points or name not in points:
        return
    with _lock:
        p = points[name]
        p[4] += 1
        action, ms, nth, later, count = p
    fires = nth == 0 or count == nth or (later and count >= nth)
    if not fires or action == "off":
        return
    if action == "crash":
        print(f"failpoint {name}: crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # not reached
    if action == "sleep":
        # Said before the stall, so a test can tell the call is held.
        print(f"failpoint {name}: sleep {ms} ms", file=sys.stderr, flush=True)
        time.sleep(ms / 1000.0)
        return
    raise CallError(Code.UNAVAILABLE, f"failpoint {name}")
