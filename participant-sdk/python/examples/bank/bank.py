#!/usr/bin/python3
"""py-bank: the bank demo participant in Python, on the Python SDK.

The same accounts and actions as the C++ tcc-bank
(participant-sdk/examples/bank/bank.proto): `debit` (Try freezes AMOUNT,
refused when balance - frozen < AMOUNT; Confirm takes it out; Cancel
unfreezes) and `credit` (Try announces AMOUNT as incoming; Confirm adds it;
Cancel drops it), payload "ACCOUNT:AMOUNT[:PADDING]". The handlers hold no
idempotency code: the barrier runs them once per branch.

  bank.py --name bank-b --protocol http --listen 127.0.0.1:0 \
          --store postgres --pg-url "$TCC_PG_URL" --accounts 10
  bank.py --name bank-c --protocol grpc --store sqlite --db /var/lib/bank-c.db

Serves tcc.v1.Participant over --protocol (http: POST /try ... on --listen;
grpc: on --listen), and tcc.examples.bank.Bank over gRPC for reading
accounts (on --listen with grpc, on --bank-listen with http); with http also
POST /bank/get-account and /bank/get-totals (JSON) and GET /metrics.
Prints "bank service on HOST:PORT" then "listening on HOST:PORT" on stdout
once it serves (logs go to stderr), and stops on SIGTERM or SIGINT (exit 0).
A start refused for want of space exits 4, any other failed start 1.
"""

import argparse
import concurrent.futures
import logging
import os
import signal
import sqlite3
import sys
import threading

import grpc

import bank_pb2
import bank_pb2_grpc
from tcc_participant import BarrierOptions, CallError, Code, Participant, TryVerdict
from tcc_participant.grpc_server import GrpcParticipantServer
from tcc_participant.http_server import HttpParticipantServer, json_route


class Accounts:
    """The accounts table, in the store's database (SQLite or PostgreSQL)."""

    def __init__(self, store):
        self.store = store
        postgres = getattr(store, "schema", None) is not None
        self.table = f"{store.schema}.bank_account" if postgres else "bank_account"
        self.q = "%s" if postgres else "?"
        self.lock = " FOR UPDATE" if postgres else ""  # SQLite: the txn holds the lock
        ddl = (f"CREATE TABLE IF NOT EXISTS {self.table} (id INTEGER PRIMARY KEY, "
               "balance BIGINT NOT NULL, frozen BIGINT NOT NULL, incoming BIGINT NOT NULL)")
        store.init_schema(ddl.replace(self.table, "{schema}.bank_account") if postgres else ddl)

    def create(self, count, initial_balance):
        """Accounts 0..count-1, unless they exist (a restart keeps them)."""
        with self.store.begin() as txn:
            conflict = "ON CONFLICT DO NOTHING"
            insert = "INSERT" if self.q == "%s" else "INSERT OR IGNORE"
            q = self.q
            for i in range(count):
                txn.execute(f"{insert} INTO {self.table} (id, balance, frozen, incoming) "
                            f"VALUES ({q}, {q}, 0, 0) {conflict if q == '%s' else ''}",
                            (i, initial_balance))
            txn.commit()

    def lock_account(self, txn, account):
        row = txn.execute(f"SELECT balance, frozen, incoming FROM {self.table} "
                          f"WHERE id = {self.q}{self.lock}", (account,)).fetchone()
        return None if row is None else list(row)

    def save(self, txn, account, a):
        q = self.q
        txn.execute(f"UPDATE {self.table} SET balance = {q}, frozen = {q}, incoming = {q} "
                    f"WHERE id = {q}", (a[0], a[1], a[2], account))

    def read(self, account):
        q = self.q
        rows = self.store.read(f"SELECT balance, frozen, incoming FROM {self.table} "
                               f"WHERE id = {q}", (account,))
        return rows[0] if rows else None

    def totals(self):
        rows = self.store.read(f"SELECT count(*), coalesce(sum(balance), 0), "
                               f"coalesce(sum(frozen), 0), coalesce(sum(incoming), 0) "
                               f"FROM {self.table}")
        return rows[0]


def parse_payload(payload):
    """(account, amount) from "ACCOUNT:AMOUNT[:PADDING]", or None."""
    parts = payload.split(b":")
    if len(parts) < 2 or len(parts) > 3:
        return None
    try:
        account, amount = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    if account < 0 or amount <= 0:
        return None
    return account, amount


def register_actions(participant, accounts):
    def apply(change):
        def handler(c):
            t = parse_payload(c.call.payload)
            if t is None:
                raise ValueError("bad payload")
            a = accounts.lock_account(c.txn, t[0])
            if a is None:
                raise LookupError("no such account")
            change(a, t[1])
            accounts.save(c.txn, t[0], a)
        return handler

    def debit_try(c):
        t = parse_payload(c.call.payload)
        if t is None:
            return TryVerdict.refuse("payload must be ACCOUNT:AMOUNT")
        a = accounts.lock_account(c.txn, t[0])
        if a is None:
            return TryVerdict.refuse("no such account")
        if a[0] - a[1] < t[1]:
            return TryVerdict.refuse("insufficient funds")
        a[1] += t[1]
        accounts.save(c.txn, t[0], a)
        return TryVerdict.reserve()

    def credit_try(c):
        t = parse_payload(c.call.payload)
        if t is None:
            return TryVerdict.refuse("payload must be ACCOUNT:AMOUNT")
        a = accounts.lock_account(c.txn, t[0])
        if a is None:
            return TryVerdict.refuse("no such account")
        a[2] += t[1]
        accounts.save(c.txn, t[0], a)
        return TryVerdict.reserve()

    def debit_confirm(a, amount):
        a[1] -= amount
        a[0] -= amount

    def debit_cancel(a, amount):
        a[1] -= amount

    def credit_confirm(a, amount):
        a[2] -= amount
        a[0] += amount

    def credit_cancel(a, amount):
        a[2] -= amount

    participant.add_action("debit", debit_try, apply(debit_confirm), apply(debit_cancel))
    participant.add_action("credit", credit_try, apply(credit_confirm), apply(credit_cancel))


class BankService(bank_pb2_grpc.BankServicer):
    def __init__(self, accounts):
        self.accounts = accounts

    def get_account(self, request):
        a = self.accounts.read(request.account)
        if a is None:
            raise CallError(Code.NOT_FOUND, f"no account {request.account}")
        return bank_pb2.Account(account=request.account, balance=a[0], frozen=a[1],
                                incoming=a[2])

    def get_totals(self, request):
        n, balance, frozen, incoming = (int(x) for x in self.accounts.totals())
        return bank_pb2.Totals(accounts=n, balance=balance, frozen=frozen, incoming=incoming)

    def GetAccount(self, request, context):
        try:
            return self.get_account(request)
        except CallError as e:
            context.abort(grpc.StatusCode[e.code.name], e.message)

    def GetTotals(self, request, context):
        return self.get_totals(request)


def open_store(args):
    if args.store == "sqlite":
        if not args.db:
            raise CallError(Code.INVALID_ARGUMENT, "--db is required with --store sqlite")
        from tcc_participant.stores import SqliteStore
        return SqliteStore(args.db, lock_timeout_ms=args.lock_timeout_ms)
    from tcc_participant.stores import PostgresStore
    url = args.pg_url or os.environ.get("TCC_PG_URL", "")
    if not url:
        raise CallError(Code.INVALID_ARGUMENT, "--pg-url (or $TCC_PG_URL) is required")
    schema = args.name.replace("-", "_").replace(".", "_").lower()
    return PostgresStore(url, schema, lock_timeout_ms=args.lock_timeout_ms,
                         max_connections=args.pg_connections)


def main():
    ap = argparse.ArgumentParser(description="py-bank: the bank demo participant in Python")
    ap.add_argument("--name", default="bank-b", help="participant name (also the PG schema)")
    ap.add_argument("--protocol", choices=["grpc", "http"], default="http")
    ap.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0: any)")
    ap.add_argument("--bank-listen", default="127.0.0.1:0",
                    help="http: where the Bank gRPC service listens")
    ap.add_argument("--path-prefix", default="", help="http: calls under this path")
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--db", default="", help="SQLite database file")
    ap.add_argument("--pg-url", default="", help="PostgreSQL URL (default $TCC_PG_URL)")
    ap.add_argument("--pg-connections", type=int, default=64)
    ap.add_argument("--accounts", type=int, default=10)
    ap.add_argument("--initial-balance", type=int, default=1000)
    ap.add_argument("--clock-skew-ms", type=int, default=5000)
    ap.add_argument("--lock-timeout-ms", type=int, default=5000)
    ap.add_argument("--retention-every-s", type=float, default=3600.0)
    ap.add_argument("--tls-cert", default="")
    ap.add_argument("--tls-key", default="")
    ap.add_argument("--tls-client-ca", default="")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--test-only-break", action="append", default=[],
                    choices=["skip-anti-hanging", "replayed-rejected-as-executed"],
                    help="test only: break one barrier rule (tests/conformance shows it)")
    args = ap.parse_args()
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format=f"%(asctime)s {args.name} %(levelname)s %(message)s")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        store = open_store(args)
        accounts = Accounts(store)
        accounts.create(args.accounts, args.initial_balance)
    except (CallError, sqlite3.Error, OSError, Exception) as e:  # noqa: B014
        full = "disk is full" in str(e) or "No space left" in str(e)
        print(f"py-bank: open store: {e}", file=sys.stderr)
        return 4 if full else 1

    options = BarrierOptions(
        clock_skew_ms=args.clock_skew_ms,
        test_only_skip_anti_hanging="skip-anti-hanging" in args.test_only_break,
        test_only_replayed_rejected_as_executed=(
            "replayed-rejected-as-executed" in args.test_only_break))
    participant = Participant(store, name=args.name, options=options)
    register_actions(participant, accounts)
    participant.start_retention(args.retention_every_s)
    bank = BankService(accounts)
    tls = dict(tls_cert_file=args.tls_cert, tls_key_file=args.tls_key,
               tls_client_ca_file=args.tls_client_ca)
    servers = []
    try:
        if args.protocol == "grpc":
            server = GrpcParticipantServer(participant, args.listen, **tls)
            server.add_service(bank_pb2_grpc.add_BankServicer_to_server, bank)
            port = server.start()
            bank_address = f"{args.listen.rpartition(':')[0]}:{port}"
            servers.append(server)
        else:
            bank_server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
            bank_pb2_grpc.add_BankServicer_to_server(bank, bank_server)
            bank_port = bank_server.add_insecure_port(args.bank_listen)
            if bank_port == 0:
                raise CallError(Code.UNAVAILABLE, f"cannot listen on {args.bank_listen}")
            bank_server.start()
            bank_address = f"{args.bank_listen.rpartition(':')[0]}:{bank_port}"
            server = HttpParticipantServer(participant, args.listen, args.path_prefix, **tls)
            server.add_route("POST", "/bank/get-account",
                             json_route(bank_pb2.GetAccountRequest, bank.get_account))
            server.add_route("POST", "/bank/get-totals",
                             json_route(bank_pb2.GetTotalsRequest, bank.get_totals))
            port = server.start()
            servers.append(server)
    except (CallError, OSError, RuntimeError) as e:
        print(f"py-bank: listen: {e}", file=sys.stderr)
        return 1
    host = args.listen.rpartition(":")[0]
    print(f"bank service on {bank_address}", flush=True)
    print(f"listening on {host}:{port}", flush=True)
    while not stop.wait(1.0):
        pass
    logging.info("signal received, shutting down")
    for s in servers:
        s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
