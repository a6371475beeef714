"""The barrier over PostgreSQL (psycopg2), in the business's own database.

Every call is one PostgreSQL transaction on a pooled connection, with
synchronous_commit on and lock_timeout set (a lock wait past it is
UNAVAILABLE, nothing changed). A key is locked by its row (INSERT a
placeholder ON CONFLICT DO NOTHING, then SELECT ... FOR UPDATE), so calls on
different keys run in parallel and calls on one key in turn.

Tables, in `schema` (created if missing): tcc_barrier, the same layout as
the C++ SDK's PostgresBarrierStore, and whatever the business creates.
"""

import re
import threading

import psycopg2
import psycopg2.errors
import psycopg2.pool

from ..barrier import BarrierRecord, BranchKey, Outcome, PhaseTwoState, TryState
from ..status import CallError, Code

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")

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


class PostgresTxn:
    dialect = "postgres"
    placeholder = "%s"

    def __init__(self, store, conn):
        self._store = store
        self._conn = conn
        self._cur = conn.cursor()
        self._done = False
        self._placeholder = None  # a key whose row we inserted empty
        self._cur.execute(
            f"SET LOCAL lock_timeout = '{int(store.lock_timeout_ms)}ms'; "
            "SET LOCAL synchronous_commit = on")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._done:
            self._done = True
            broken = False
            try:
                self._conn.rollback()
            except psycopg2.Error:
                broken = True
            self._store._release(self._conn, broken or self._conn.closed != 0)
        return False

    def execute(self, sql, params=()):
        """Runs business SQL in this transaction; returns the cursor."""
        self._cur.execute(sql, params)
        return self._cur

    def lock_barrier(self, key):
        s = self._store.schema
        # The row we waited for can be deleted (retention) while we wait; READ
        # COMMITTED then skips it and we would hold no lock: insert again.
        for _ in range(8):
            self._cur.execute(
                f"INSERT INTO {s}.tcc_barrier (gid, created_at_ms, branch_id, try_state, "
                "branch_hash) VALUES (%s, %s, %s, 0, ''::bytea) ON CONFLICT DO NOTHING",
                (key.gid, key.created_at_ms, key.branch_id))
            self._cur.execute(
                f"SELECT {_COLUMNS} FROM {s}.tcc_barrier WHERE gid = %s AND "
                "created_at_ms = %s AND branch_id = %s FOR UPDATE",
                (key.gid, key.created_at_ms, key.branch_id))
            row = self._cur.fetchone()
            if row is None:
                continue
            if row[0] == 0:  # a placeholder: no record
                self._placeholder = key
                return None
            return _record(row)
        raise CallError(Code.UNAVAILABLE,
                        "the barrier row kept being deleted while this call waited for its lock")

    def put_barrier(self, key, r):
        self._cur.execute(
            f"INSERT INTO {self._store.schema}.tcc_barrier (gid, created_at_ms, branch_id, "
            f"{_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (gid, created_at_ms, branch_id) DO UPDATE SET "
            "try_state = EXCLUDED.try_state, branch_hash = EXCLUDED.branch_hash, "
            "try_message = EXCLUDED.try_message, phase_two_state = EXCLUDED.phase_two_state, "
            "phase_two_outcome = EXCLUDED.phase_two_outcome, "
            "phase_two_message = EXCLUDED.phase_two_message, "
            "try_deadline_ms = EXCLUDED.try_deadline_ms, "
            "phase_two_at_ms = EXCLUDED.phase_two_at_ms",
            (key.gid, key.created_at_ms, key.branch_id, int(r.try_state),
             psycopg2.Binary(r.branch_hash), r.try_message, int(r.phase_two),
             int(r.phase_two_outcome), r.phase_two_message, r.try_deadline_ms,
             r.phase_two_at_ms))
        if self._placeholder == key:
            self._placeholder = None

    def delete_barrier(self, key):
        self._cur.execute(
            f"DELETE FROM {self._store.schema}.tcc_barrier WHERE gid = %s AND "
            "created_at_ms = %s AND branch_id = %s", (key.gid, key.created_at_ms, key.branch_id))

    def savepoint(self):
        self._cur.execute("SAVEPOINT tcc_try")

    def rollback_to_savepoint(self):
        self._cur.execute("ROLLBACK TO SAVEPOINT tcc_try")

    def commit(self):
        if self._placeholder is not None:
            # Nothing was recorded for the key: leave no empty row behind.
            self.delete_barrier(self._placeholder)
            self._placeholder = None
        self._conn.commit()
        self._done = True
        self._store._release(self._conn, False)


class PostgresStore:
    """`dsn`: a libpq URL; `schema`: where the tables live (created if
    missing; [a-z_][a-z0-9_]*); at most `max_connections` at once."""

    authoritative = True  # the primary: the store reads where it writes

    def __init__(self, dsn, schema, lock_timeout_ms=5000, max_connections=64):
        if not _SCHEMA_NAME.match(schema):
            raise CallError(Code.INVALID_ARGUMENT,
                            f"schema {schema!r}: expected [a-z_][a-z0-9_]*, at most 63 bytes")
        self.schema = schema
        self.lock_timeout_ms = lock_timeout_ms
        self._pool = psycopg2.pool.ThreadedConnectionPool(1, max_connections, dsn)
        self._slots = threading.BoundedSemaphore(max_connections)
        conn = self._acquire()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext('tcc_barrier_migration'))")
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {schema}.tcc_barrier ("
                    "gid TEXT NOT NULL, created_at_ms BIGINT NOT NULL, branch_id TEXT NOT NULL, "
                    "try_state SMALLINT NOT NULL, branch_hash BYTEA NOT NULL, "
                    "try_message TEXT NOT NULL DEFAULT '', "
                    "phase_two_state SMALLINT NOT NULL DEFAULT 0, "
                    "phase_two_outcome SMALLINT NOT NULL DEFAULT 0, "
                    "phase_two_message TEXT NOT NULL DEFAULT '', "
                    "try_deadline_ms BIGINT NOT NULL DEFAULT 0, "
                    "phase_two_at_ms BIGINT NOT NULL DEFAULT 0, "
                    "PRIMARY KEY (gid, created_at_ms, branch_id))")
            conn.commit()
        finally:
            self._release(conn, conn.closed != 0)

    def _acquire(self):
        # ThreadedConnectionPool raises when exhausted: wait for a slot.
        if not self._slots.acquire(timeout=self.lock_timeout_ms / 1000.0):
            raise CallError(Code.UNAVAILABLE, "postgres: every connection is busy")
        try:
            conn = self._pool.getconn()
        except psycopg2.Error as e:
            self._slots.release()
            raise CallError(Code.UNAVAILABLE, f"postgres: connect: {e}") from e
        return conn

    def _release(self, conn, broken):
        self._pool.putconn(conn, close=broken)
        self._slots.release()

    def begin(self):
        conn = self._acquire()
        try:
            return PostgresTxn(self, conn)
        except psycopg2.Error as e:
            self._release(conn, True)
            raise CallError(Code.UNAVAILABLE, f"postgres: begin: {e}") from e

    def init_schema(self, sql):
        """Runs the business's CREATE TABLE IF NOT EXISTS ... statements (in
        this store's schema: use {schema} in `sql`)."""
        conn = self._acquire()
        try:
            with conn.cursor() as cur:
                cur.execute(sql.format(schema=self.schema))
            conn.commit()
        finally:
            self._release(conn, conn.closed != 0)

    def read(self, sql, params=()):
        conn = self._acquire()
        try:
            with conn.cursor() as cur:
                cur.execute(sql.format(schema=self.schema), params)
                rows = cur.fetchall()
            conn.rollback()
            return rows
        finally:
            self._release(conn, conn.closed != 0)

    def read_barrier(self, key):
        rows = self.read(
            f"SELECT {_COLUMNS} FROM {{schema}}.tcc_barrier WHERE gid = %s AND "
            "created_at_ms = %s AND branch_id = %s AND try_state <> 0",
            (key.gid, key.created_at_ms, key.branch_id))
        return _record(rows[0]) if rows else None

    def scan_barrier(self):
        rows = self.read(
            f"SELECT gid, created_at_ms, branch_id, {_COLUMNS} FROM {{schema}}.tcc_barrier "
            "WHERE try_state <> 0")
        for row in rows:
            yield BranchKey(row[0], row[1], row[2]), _record(row[3:])

    def close(self):
        self._pool.closeall()
