"""Barrier stores: where the barrier records live, next to the business data,
written in the same local transaction.

  SqliteStore    one SQLite file (WAL journal, synchronous FULL): small
                 services and tests
  PostgresStore  PostgreSQL through psycopg2 (synchronous_commit on, row
                 locks): the business database most participants use

A store's begin() returns a LocalTxn, a context manager that rolls back on
exit unless commit() was called. LocalTxn: lock_barrier(key) (locks the key,
returns its BarrierRecord or None), put_barrier, delete_barrier, savepoint,
rollback_to_savepoint, commit, and for the business execute(sql, params)
(placeholders: txn.placeholder, "?" for SQLite, "%s" for PostgreSQL) and
txn.dialect ("sqlite" or "postgres").
"""

from .sqlite_store import SqliteStore

__all__ = ["SqliteStore", "PostgresStore"]


def __getattr__(name):
    # psycopg2 only when the PostgreSQL store is used.
    if name == "PostgresStore":
        from .postgres_store import PostgresStore
        return PostgresStore
    raise AttributeError(name)
