"""Shared by the SDK's tests: stores to run on (SQLite always; PostgreSQL
when TCC_PG_ENV_FILE or TCC_PG_URL names a server), and a bank-like
participant whose handlers count what they did."""

import os
import secrets
import shutil
import tempfile
import time

from tcc_participant import Participant, TryVerdict
from tcc_participant.barrier import BranchCall, BranchKey
from tcc_participant.hashes import branch_hash


def pg_url():
    path = os.environ.get("TCC_PG_ENV_FILE", "")
    if path:
        with open(path) as f:
            for line in f:
                if line.startswith("export TCC_PG_URL="):
                    return line.split("=", 1)[1].strip()
        raise RuntimeError(f"{path}: no TCC_PG_URL")
    return os.environ.get("TCC_PG_URL", "")


class Stores:
    """Yields (name, store factory) for each store the run covers."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tcc-py-test.")

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def sqlite(self, lock_timeout_ms=2000):
        from tcc_participant.stores import SqliteStore
        return SqliteStore(os.path.join(self.dir, f"{secrets.token_hex(4)}.db"),
                           lock_timeout_ms=lock_timeout_ms)

    def postgres(self, lock_timeout_ms=2000):
        from tcc_participant.stores import PostgresStore
        return PostgresStore(pg_url(), f"t_{secrets.token_hex(6)}",
                             lock_timeout_ms=lock_timeout_ms, max_connections=16)

    def all(self):
        kinds = [("sqlite", self.sqlite)]
        if pg_url():
            kinds.append(("postgres", self.postgres))
        return kinds


def counting_participant(store, **kw):
    """A participant with action "work": each handler adds a row to `effects`
    (phase, key) in the call's transaction; payload b"refuse" refuses, b"fail"
    raises after writing."""
    q = "%s" if getattr(store, "schema", None) else "?"
    table = f"{store.schema}.effects" if getattr(store, "schema", None) else "effects"
    ddl = f"CREATE TABLE IF NOT EXISTS {table} (phase TEXT NOT NULL, k TEXT NOT NULL)"
    store.init_schema(ddl.replace(table, "{schema}.effects") if q == "%s" else ddl)
    p = Participant(store, name="test", **kw)

    def effect(phase):
        def handler(c):
            c.txn.execute(f"INSERT INTO {table} (phase, k) VALUES ({q}, {q})",
                          (phase, str(c.call.key)))
            if c.call.payload == b"fail":
                raise RuntimeError("handler failed")
            if phase == "try":
                if c.call.payload == b"refuse":
                    return TryVerdict.refuse("no")
                return TryVerdict.reserve()
            return None
        return handler

    p.add_action("work", effect("try"), effect("confirm"), effect("cancel"))

    def effects(key=None):
        rows = store.read(f"SELECT phase, k FROM {table}")
        return sorted(ph for ph, k in rows if key is None or k == str(key))

    return p, effects


_n = [0]


def call(payload=b"ok", deadline_ms=None, revision=1, key=None):
    _n[0] += 1
    key = key or BranchKey(f"g-{secrets.token_hex(4)}-{_n[0]}", time.time_ns() // 1_000_000, "b1")
    return BranchCall(key=key, action="work", payload=payload,
                      branch_hash=branch_hash(revision, "test", "work", payload),
                      revision=revision,
                      try_deadline_ms=deadline_ms or time.time_ns() // 1_000_000 + 60_000)
