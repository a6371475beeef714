"""The barrier over one SQLite file.

Durability: WAL journal with synchronous=FULL, so a commit returns once it is
on disk. Serialisation: every local transaction is BEGIN IMMEDIATE (SQLite
has one writer at a time), so all calls are serialised, not only those on one
key; a wait longer than `lock_timeout_ms` is UNAVAILABLE, nothing changed.
The threads of one process queue for the write lock on a lock of the store's
own first: SQLite's busy handler waits by sleeping (up to 100 ms a time), so
many threads of one server (a gRPC Batch runs its keys in parallel) spent
most of their time asleep while the lock was free.
Reads (Query, the retention scan) see only committed, hence durable, data.
One connection per thread.

Tables: tcc_barrier (the records, as the C++ SDK's PostgreSQL layout) and
whatever the business creates (init_schema(sql) at start).
"""

import os
import sqlite3
import threading

from ..barrier import BarrierRecord, BranchKey, Outcome, PhaseTwoState, TryState
from ..status import CallError, Code

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tcc_barrier (
  gid TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  branch_id TEXT NOT NULL,
  try_state INTEGER NOT NULL,
  branch_hash BLOB NOT NULL,
  try_message TEXT NOT NULL DEFAULT '',
  phase_two_state INTEGER NOT NULL DEFAULT 0,
  phase_two_outcome INTEGER NOT NULL DEFAULT 0,
  phase_two_message TEXT NOT NULL DEFAULT '',
  try_deadline_ms INTEGER NOT NULL DEFAULT 0,
  phase_two_at_ms INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (gid, created_at_ms, branch_id)
)"""

_COLUMNS = ("try_state, branch_hash, try_message, phase_two_state, phase_two_outcome, "
            "phase_two_message, try_deadline_ms, phase_two_at_ms")


def _record(row):
    try:
        return BarrierRecord(try_state=TryState(row[0]), branch_hash=bytes(row[1]),
                             try_message=row[2], phase_two=PhaseTwoState(row[3]),
                             phase_two_outcome=Outcome(row[4]), phase_two_message=row[5],
                             try_deadline_ms=row[6], phase_two_at_ms=row[7])
    except (ValueError, TypeError) as e:
        raise CallError(Code.DATA_LOSS, f"barrier record does not decode: {e}") from e


class SqliteTxn:
    dialect = "sqlite"
    placeholder = "?"

    def __init__(self, store, conn):
        self._store = store
        self._conn = conn
        self._done = False
        self._savepoint = False
        if not store._writer.acquire(timeout=store.lock_timeout_ms / 1000.0):
            raise CallError(Code.UNAVAILABLE,
                            f"sqlite: waited over {store.lock_timeout_ms} ms for the "
                            "write lock; nothing changed")
        self._held = True
        try:
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._release()
            raise

    def _release(self):
        if self._held:
            self._held = False
            self._store._writer.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._done:
            self._done = True
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self._release()
        return False

    def execute(self, sql, params=()):
        """Runs business SQL in this transaction; returns the cursor."""
        return self._conn.execute(sql, params)

    def lock_barrier(self, key):
        # BEGIN IMMEDIATE already holds the write lock.
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM tcc_barrier WHERE gid = ? AND created_at_ms = ? "
            "AND branch_id = ?", (key.gid, key.created_at_ms, key.branch_id)).fetchone()
        return None if row is None else _record(row)

    def put_barrier(self, key, r):
        self._conn.execute(
            f"INSERT OR REPLACE INTO tcc_barrier (gid, created_at_ms, branch_id, {_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key.gid, key.created_at_ms, key.branch_id, int(r.try_state), r.branch_hash,
             r.try_message, int(r.phase_two), int(r.phase_two_outcome), r.phase_two_message,
             r.try_deadline_ms, r.phase_two_at_ms))

    def delete_barrier(self, key):
        self._conn.execute(
            "DELETE FROM tcc_barrier WHERE gid = ? AND created_at_ms = ? AND branch_id = ?",
            (key.gid, key.created_at_ms, key.branch_id))

    def savepoint(self):
        self._conn.execute("SAVEPOINT tcc_try")
        self._savepoint = True

    def rollback_to_savepoint(self):
        self._conn.execute("ROLLBACK TO SAVEPOINT tcc_try")

    def commit(self):
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as e:
            # After a failed write or sync nothing proves what reached the
            # disk: the store stops (every later call UNAVAILABLE until the
            # process restarts), as the C++ SDK's stores do.
            name = getattr(e, "sqlite_errorname", "")
            if name.startswith("SQLITE_IOERR") or name.startswith("SQLITE_FULL"):
                self._store.failed = f"commit failed ({name}): {e}"
            raise
        self._done = True
        self._release()


class SqliteStore:
    """`path`: the database file (created 0600 if missing)."""

    authoritative = True

    def __init__(self, path, lock_timeout_ms=5000):
        self.failed = None  # why the store stopped, once it has
        self.path = path
        self.lock_timeout_ms = lock_timeout_ms
        self._local = threading.local()
        self._writer = threading.Lock()  # this process's writers, in turn
        if not os.path.exists(path):
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        conn = self._conn()
        # WAL: readers never wait for the writer; FULL: each commit fsyncs.
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise CallError(Code.FAILED_PRECONDITION,
                            f"{path}: SQLite refused WAL journal mode ({mode})")
        conn.execute(_SCHEMA)

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None,
                                   timeout=self.lock_timeout_ms / 1000.0,
                                   check_same_thread=True)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.lock_timeout_ms)}")
            self._local.conn = conn
        return conn

    def begin(self):
        if self.failed:
            raise CallError(Code.UNAVAILABLE, f"sqlite store stopped: {self.failed}")
        try:
            return SqliteTxn(self, self._conn())
        except sqlite3.OperationalError as e:  # "database is locked": the wait timed out
            raise CallError(Code.UNAVAILABLE, f"sqlite: {e}") from e

    def init_schema(self, sql):
        """Runs the business's CREATE TABLE IF NOT EXISTS ... statements."""
        self._conn().executescript(sql)

    def read_barrier(self, key):
        row = self._conn().execute(
            f"SELECT {_COLUMNS} FROM tcc_barrier WHERE gid = ? AND created_at_ms = ? "
            "AND branch_id = ?", (key.gid, key.created_at_ms, key.branch_id)).fetchone()
        return None if row is None else _record(row)

    def scan_barrier(self):
        rows = self._conn().execute(
            f"SELECT gid, created_at_ms, branch_id, {_COLUMNS} FROM tcc_barrier").fetchall()
        for row in rows:
            yield BranchKey(row[0], row[1], row[2]), _record(row[3:])

    def read(self, sql, params=()):
        """A read outside any call (e.g. the bank's balances)."""
        return self._conn().execute(sql, params).fetchall()
