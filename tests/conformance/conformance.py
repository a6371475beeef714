#!/usr/bin/python3
"""The wire conformance suite for tccd participants (tcc.v1.Participant over
gRPC, or the same messages as JSON over HTTP: proto/tcc/v1/participant.proto).

It talks to a participant over the wire only, and checks every row of the
barrier's three tables (Try, Confirm, Cancel) with a Query after each,
duplicates and replays, a call racing its own retry, a Cancel overtaking a
late Try, a kill -9 between the local commit and the reply followed by the
retry, and the bad-input rules. The participant must implement the bank
demo's actions (participant-sdk/examples/bank/bank.proto: `debit` and
`credit`, payload "ACCOUNT:AMOUNT") and serve tcc.examples.bank.Bank over
gRPC, through which the suite sees whether a handler ran (balances, frozen
and incoming amounts). It needs at least 200 accounts of 1000 each.

  conformance.py --protocol grpc|http [--path-prefix P] -- CMD ARG...
      starts the participant with CMD (which must listen on a port of the
      OS's choosing and print "listening on HOST:PORT", optionally preceded
      by "bank service on HOST:PORT"), restarts it with failpoints set
      (TCC_FAILPOINTS: barrier.before_lock, barrier.after_lock,
      participant.after_commit) for the race and crash checks, and stops it
      at the end. The participant's store must survive a restart.
  conformance.py --protocol grpc|http --endpoint HOST:PORT [--bank HOST:PORT]
      an endpoint someone else runs: the checks that need a restart are
      skipped.

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check and ends
with one line:
  conformance: PASS checks=N failed=0 skipped=K
  conformance: FAIL checks=N failed=F skipped=K failed=NAME,NAME,...
Exit status 0 only when nothing failed. Only /usr/bin/python3 and Debian's
python3-grpcio and python3-protobuf; the stubs generated from proto/ must be
on PYTHONPATH (<build>/participant-sdk/python/gen).
"""

import argparse
import concurrent.futures
import hashlib
import http.client
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import grpc
from google.protobuf import json_format

import bank_pb2
import bank_pb2_grpc
from tcc.v1 import participant_pb2 as pb
from tcc.v1 import participant_pb2_grpc as pb_grpc

PARTICIPANT = "conf"  # the name the suite hashes branches under
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VECTORS = os.path.join(HERE, "..", "..", "proto", "tcc", "v1",
                               "content_hash_vectors.json")

OK, INVALID_ARGUMENT, FAILED_PRECONDITION, UNIMPLEMENTED = "OK", "INVALID_ARGUMENT", \
    "FAILED_PRECONDITION", "UNIMPLEMENTED"
DEFINITE = (INVALID_ARGUMENT, FAILED_PRECONDITION)

EXECUTED = pb.OUTCOME_EXECUTED
EMPTY_ROLLBACK = pb.OUTCOME_EMPTY_ROLLBACK
REJECTED = pb.OUTCOME_REJECTED
HANGING_REFUSED = pb.OUTCOME_HANGING_REFUSED
CONFLICT = pb.OUTCOME_CONFLICT


# -- the canonical encoding (participant.proto, HASHES), the suite's own --


def _string(b):
    return struct.pack(">I", len(b)) + b


def branch_encoding(revision, participant, action, payload):
    return (b"tcc.v1.branch\x00" + struct.pack(">Q", revision) + _string(participant) +
            _string(action) + _string(payload))


def submission_encoding(revision, gate, branches):
    out = (b"tcc.v1.submission\x00" + struct.pack(">Q", revision) + bytes([1 if gate else 0]) +
           struct.pack(">I", len(branches)))
    for b in sorted(branches, key=lambda x: x[0]):
        out += b"".join(_string(x) for x in b)
    return out


def branch_hash(revision, action, payload, participant=PARTICIPANT):
    return hashlib.sha256(branch_encoding(revision, participant.encode(), action.encode(),
                                          payload)).digest()


def now_ms():
    return time.time_ns() // 1_000_000


class Failure(Exception):
    pass


def expect(cond, why):
    if not cond:
        raise Failure(why)


# -- the wire: one answer shape for both transports --------------------------


class Reply:
    """`code`: "OK" or a gRPC code name (HTTP statuses read as DESIGN.md
    section 15 says: 400/422 INVALID_ARGUMENT, 409/412 FAILED_PRECONDITION,
    anything else not 200 "UNKNOWN(status)"); `message` the answer."""

    def __init__(self, code, message=None, detail=""):
        self.code = code
        self.message = message
        self.detail = detail

    def __repr__(self):
        if self.code == OK:
            return json_format.MessageToJson(self.message, indent=None)
        return f"{self.code}: {self.detail}"


class GrpcWire:
    def __init__(self, address, creds=None, server_name=""):
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        self.channel = (grpc.secure_channel(address, creds, options=options) if creds else
                        grpc.insecure_channel(address))
        self.stub = pb_grpc.ParticipantStub(self.channel)

    def _do(self, method, request, timeout=15):
        try:
            return Reply(OK, method(request, timeout=timeout))
        except grpc.RpcError as e:
            return Reply(e.code().name, None, e.details() or "")

    def call(self, op, request):
        return self._do({"try": self.stub.Try, "confirm": self.stub.Confirm,
                         "cancel": self.stub.Cancel}[op], request)

    def query(self, request):
        return self._do(self.stub.Query, request)

    def batch(self, request):
        return self._do(self.stub.Batch, request, timeout=60)

    def close(self):
        self.channel.close()


class _Https(http.client.HTTPSConnection):
    """HTTPS whose certificate must name `server_name` (not the host)."""

    def __init__(self, host, port, context, server_name):
        super().__init__(host, port, timeout=15, context=context)
        self._ctx = context
        self._server_name = server_name

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self._server_name)


class HttpWire:
    def __init__(self, address, prefix="", tls=None, server_name=""):
        host, _, port = address.rpartition(":")
        self.host, self.port, self.prefix = host, int(port), prefix
        self.tls, self.server_name = tls, server_name
        self.local = threading.local()
        self.connections = 0

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            if self.tls is not None:
                c = _Https(self.host, self.port, self.tls, self.server_name or self.host)
            else:
                c = http.client.HTTPConnection(self.host, self.port, timeout=15)
            self.local.conn = c
            self.connections += 1
        return c

    def raw(self, method, path, body=b"", headers=None):
        """(status, body bytes); one keep-alive connection per thread."""
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        h.update(headers or {})
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, self.prefix + path, body=body, headers=h)
                r = c.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    c.close()
                    self.local.conn = None
                return r.status, data
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("not reached")

    def _do(self, path, request, response_type):
        body = json_format.MessageToJson(request, preserving_proto_field_name=True,
                                         including_default_value_fields=True).encode()
        try:
            status, data = self.raw("POST", path, body)
        except (http.client.HTTPException, OSError) as e:
            return Reply("UNAVAILABLE", None, f"connection: {e}")
        if path == "/batch" and status in (404, 405, 501):
            # No /batch there (allowed: tccd then sends single calls).
            return Reply(UNIMPLEMENTED, None, data[:300].decode("utf-8", "replace"))
        if status == 200:
            message = response_type()
            try:
                json_format.Parse(data, message, ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError, ValueError) as e:
                return Reply("BAD_200", None, f"a 200 that is not a {response_type.__name__}: "
                                              f"{e}: {data[:200]!r}")
            return Reply(OK, message)
        code = {400: INVALID_ARGUMENT, 422: INVALID_ARGUMENT, 409: FAILED_PRECONDITION,
                412: FAILED_PRECONDITION}.get(status, f"UNKNOWN({status})")
        return Reply(code, None, data[:300].decode("utf-8", "replace"))

    def call(self, op, request):
        return self._do("/" + op, request, pb.BranchResponse)

    def query(self, request):
        return self._do("/query", request, pb.QueryResponse)

    def batch(self, request):
        return self._do("/batch", request, pb.BatchResponse)

    def close(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()


# -- the participant under test --------------------------------------------


class Launched:
    """The participant process, started (and restarted) by the suite."""

    def __init__(self, argv, log_path):
        self.argv = argv
        self.log_path = log_path
        self.proc = None
        self.address = None
        self.bank_address = None

    def start(self, failpoints=""):
        env = dict(os.environ)
        env.pop("TCC_FAILPOINTS", None)
        if failpoints:
            env["TCC_FAILPOINTS"] = failpoints
        log = open(self.log_path, "ab")
        log.write(f"== start (TCC_FAILPOINTS={failpoints!r})\n".encode())
        log.flush()
        self.log_offset = log.tell()  # where this run's stderr begins
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, env=env,
                                     start_new_session=True)
        log.close()
        self.address = self.bank_address = None
        lines = queue.Queue()

        def read(out):  # all of stdout, so the child never blocks on it
            for raw in iter(out.readline, b""):
                lines.put(raw.decode("utf-8", "replace").strip())
            lines.put(None)

        threading.Thread(target=read, args=(self.proc.stdout,), daemon=True).start()
        deadline = time.monotonic() + 60
        while self.address is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if line.startswith("bank service on "):
                self.bank_address = line[len("bank service on "):]
            elif line.startswith("listening on "):
                self.address = line[len("listening on "):]
        if self.address is None:
            self.kill()
            raise Failure(f"the participant did not start: {' '.join(self.argv)} "
                          f"(see {self.log_path})")
        if self.bank_address is None:
            self.bank_address = self.address

    def wait_log(self, text, timeout_s=20):
        """Whether this run's stderr shows `text` within `timeout_s` (read
        every 20 ms, a bounded number of times)."""
        for _ in range(int(timeout_s / 0.02)):
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                if text.encode() in f.read():
                    return True
            time.sleep(0.02)
        return False

    def wait_exit(self, timeout_s=15):
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


class Suite:
    def __init__(self, args):
        self.args = args
        self.run = secrets.token_hex(4)
        self.n = 0
        self.next_account = 1
        self.results = []
        self.launched = None
        self.wire = None
        self.bank = None
        self.tls = None
        if args.tls_ca:
            self.tls = ssl.create_default_context(cafile=args.tls_ca)
            if args.tls_cert:
                self.tls.load_cert_chain(args.tls_cert, args.tls_key)
            if args.tls_server_name:
                self.tls.check_hostname = True

    # -- plumbing --

    def connect(self, address, bank_address):
        if self.wire is not None:
            self.wire.close()
        if self.args.protocol == "grpc":
            creds = None
            if self.args.tls_ca:
                def read(p):
                    if not p:
                        return None
                    with open(p, "rb") as f:
                        return f.read()
                creds = grpc.ssl_channel_credentials(read(self.args.tls_ca),
                                                     read(self.args.tls_key),
                                                     read(self.args.tls_cert))
            self.wire = GrpcWire(address, creds, self.args.tls_server_name)
        else:
            self.wire = HttpWire(address, self.args.path_prefix, self.tls,
                                 self.args.tls_server_name)
        self.bank = bank_pb2_grpc.BankStub(grpc.insecure_channel(bank_address))

    def start(self, failpoints=""):
        self.launched.start(failpoints)
        self.connect(self.launched.address, self.launched.bank_address)

    def restart(self, failpoints=""):
        if self.launched is None:
            raise Skip("needs --launch (the suite restarts the participant)")
        self.launched.stop()
        self.start(failpoints)

    def key(self):
        self.n += 1
        return pb.BranchKey(gid=f"conf-{self.run}-{self.n}", created_at_ms=now_ms(),
                            branch_id="b1")

    def account(self):
        a = self.next_account
        self.next_account += 1
        return a

    def req(self, key, action, payload, revision=1, deadline_ms=None, h=None, attempt=1):
        if deadline_ms is None:
            deadline_ms = now_ms() + 60_000
        return pb.BranchRequest(key=key, action=action, payload=payload,
                                branch_hash=h if h is not None else branch_hash(revision, action,
                                                                                payload),
                                revision=revision, attempt=attempt, owner_epoch=1,
                                try_deadline_ms=deadline_ms)

    def balances(self, account):
        a = self.bank.GetAccount(bank_pb2.GetAccountRequest(account=account), timeout=10)
        return (a.balance, a.frozen, a.incoming)

    def call(self, op, request, outcome=None, replayed=None, code=OK):
        r = self.wire.call(op, request)
        what = f"{op} {request.key.gid}"
        if code != OK:
            expect(r.code == code, f"{what}: expected {code}, got {r}")
            return r
        expect(r.code == OK, f"{what}: expected an answer, got {r}")
        if outcome is not None:
            expect(r.message.outcome == outcome,
                   f"{what}: expected {pb.Outcome.Name(outcome)}, got {r}")
        if replayed is not None:
            expect(r.message.replayed == replayed,
                   f"{what}: expected replayed={replayed}, got {r}")
        return r

    def query(self, key, state, h=None):
        r = self.wire.query(pb.QueryRequest(key=key))
        expect(r.code == OK, f"query {key.gid}: expected an answer, got {r}")
        expect(r.message.state == state, f"query {key.gid}: expected "
               f"{pb.BarrierState.Name(state)}, got {r}")
        expect(r.message.authoritative, f"query {key.gid}: not authoritative: {r}")
        if h is not None:
            expect(r.message.branch_hash == h,
                   f"query {key.gid}: branch_hash {r.message.branch_hash.hex()}, "
                   f"expected {h.hex()}")
        return r

    def same(self, account, before, why=""):
        after = self.balances(account)
        expect(after == before, f"account {account} changed {before} -> {after}{why}")

    def moved(self, account, before, delta):
        after = self.balances(account)
        want = tuple(b + d for b, d in zip(before, delta))
        expect(after == want, f"account {account}: {before} -> {after}, expected {want}")

    def check(self, name, fn):
        if self.args.only and not any(name.startswith(o) for o in self.args.only):
            return
        try:
            fn()
            self.results.append((name, "ok", ""))
            print(f"ok {name}", flush=True)
        except Skip as e:
            self.results.append((name, "skip", str(e)))
            print(f"skip {name}: {e}", flush=True)
        except Failure as e:
            self.results.append((name, "FAIL", str(e)))
            print(f"FAIL {name}: {e}", flush=True)
        except Exception as e:  # the suite's own trouble counts as a failure
            self.results.append((name, "FAIL", f"{type(e).__name__}: {e}"))
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)

    # -- the checks --

    def vectors(self):
        with open(self.args.vectors) as f:
            v = json.load(f)
        for b in v["branch"]:
            enc = branch_encoding(b["revision"], bytes.fromhex(b["participant_hex"]),
                                  bytes.fromhex(b["action_hex"]), bytes.fromhex(b["payload_hex"]))
            expect(enc.hex() == b["encoding_hex"], f"branch encoding {enc.hex()}")
            expect(hashlib.sha256(enc).hexdigest() == b["sha256_hex"], "branch hash")
        for s in v["submission"]:
            enc = submission_encoding(
                s["revision"], s["approval_gate"],
                [tuple(bytes.fromhex(x[k]) for k in ("branch_id_hex", "participant_hex",
                                                      "action_hex", "payload_hex"))
                 for x in s["branches"]])
            expect(enc.hex() == s["encoding_hex"], f"submission encoding {enc.hex()}")
            expect(hashlib.sha256(enc).hexdigest() == s["sha256_hex"], "submission hash")

    def bad_input(self):
        a = self.account()
        before = self.balances(a)
        payload = f"{a}:5".encode()
        good = self.req(self.key(), "debit", payload)
        cases = []

        def variant(name, op, mutate):
            r = pb.BranchRequest()
            r.CopyFrom(good)
            r.key.gid = f"{good.key.gid}-{name}" if name not in ("gid-empty", "gid-bad",
                                                                 "gid-long") else r.key.gid
            mutate(r)
            cases.append((name, op, r))

        for op in ("try", "confirm", "cancel"):
            variant(f"gid-empty-{op}", op, lambda r: setattr(r.key, "gid", ""))
            variant(f"gid-bad-{op}", op, lambda r: setattr(r.key, "gid", "a/b"))
            variant(f"gid-long-{op}", op, lambda r: setattr(r.key, "gid", "g" * 129))
            variant(f"branch-empty-{op}", op, lambda r: setattr(r.key, "branch_id", ""))
            variant(f"branch-long-{op}", op, lambda r: setattr(r.key, "branch_id", "b" * 65))
            variant(f"action-unknown-{op}", op, lambda r: setattr(r, "action", "no-such-action"))
            variant(f"action-bad-{op}", op, lambda r: setattr(r, "action", "de bit"))
            variant(f"hash-short-{op}", op, lambda r: setattr(r, "branch_hash", b"\x01" * 31))
            variant(f"hash-long-{op}", op, lambda r: setattr(r, "branch_hash", b"\x01" * 33))
            variant(f"hash-empty-{op}", op, lambda r: setattr(r, "branch_hash", b""))
            variant(f"created-zero-{op}", op, lambda r: setattr(r.key, "created_at_ms", 0))
            variant(f"created-negative-{op}", op, lambda r: setattr(r.key, "created_at_ms", -5))
            variant(f"deadline-zero-{op}", op, lambda r: setattr(r, "try_deadline_ms", 0))
        for name, op, r in cases:
            got = self.wire.call(op, r)
            expect(got.code == INVALID_ARGUMENT, f"{name}: expected INVALID_ARGUMENT, got {got}")
            q = self.wire.query(pb.QueryRequest(key=r.key))
            if q.code == OK:
                expect(q.message.state == pb.BARRIER_STATE_NOT_FOUND,
                       f"{name}: the refused call left {q}")
        for name, key in (("gid-empty", pb.BranchKey(created_at_ms=1, branch_id="b")),
                          ("created-zero", pb.BranchKey(gid="g", branch_id="b")),
                          ("branch-bad", pb.BranchKey(gid="g", created_at_ms=1, branch_id="x y"))):
            got = self.wire.query(pb.QueryRequest(key=key))
            expect(got.code == INVALID_ARGUMENT, f"query {name}: expected INVALID_ARGUMENT, "
                                                 f"got {got}")
        self.same(a, before, " by refused calls")
        # The good call still works: nothing above held its key.
        self.call("try", good, EXECUTED, False)

    def bad_http(self):
        if self.args.protocol != "http":
            raise Skip("HTTP only")
        w = self.wire
        for body in (b"not json", b"[1,2]", b'{"key": 7}', b'{"key": {"gid": ["x"]}}'):
            status, data = w.raw("POST", "/try", body)
            expect(status in (400, 422), f"body {body!r}: expected 400, got {status} {data!r}")
        status, data = w.raw("POST", "/no-such-call", b"{}")
        expect(status not in (200, 400, 409, 412, 422),
               f"an unknown path must not read as an answer or a definite refusal: {status}")
        # Unknown request fields are ignored (tccd may add fields).
        a = self.account()
        key = self.key()
        r = self.req(key, "debit", f"{a}:3".encode())
        doc = json.loads(json_format.MessageToJson(r, preserving_proto_field_name=True))
        doc["field_from_the_future"] = {"x": 1}
        status, data = w.raw("POST", "/try", json.dumps(doc).encode())
        expect(status == 200, f"a request with an unknown field: {status} {data!r}")
        answer = json_format.Parse(data, pb.BranchResponse(), ignore_unknown_fields=True)
        expect(answer.outcome == EXECUTED, f"a request with an unknown field: {data!r}")
        # camelCase names (protobuf's canonical JSON) read too.
        key2 = self.key()
        camel = json_format.MessageToJson(self.req(key2, "debit", f"{a}:2".encode()))
        status, data = w.raw("POST", "/try", camel.encode())
        expect(status == 200 and b"OUTCOME_EXECUTED" in data, f"camelCase: {status} {data!r}")

    def bad_batch(self):
        # gRPC's Batch, or HTTP's POST /batch (the same messages as JSON).
        keys = [self.key() for _ in range(1025)]
        a = self.account()
        big = pb.BatchRequest(calls=[pb.BatchCall(try_call=self.req(k, "debit", f"{a}:1".encode()))
                                     for k in keys])
        r = self.wire.batch(big)
        if r.code == UNIMPLEMENTED:
            raise Skip("the participant has no Batch (allowed)")
        expect(r.code == INVALID_ARGUMENT, f"a batch of 1,025: expected INVALID_ARGUMENT, got {r}")
        self.query(keys[0], pb.BARRIER_STATE_NOT_FOUND)
        self.query(keys[-1], pb.BARRIER_STATE_NOT_FOUND)
        empty = pb.BatchRequest(calls=[pb.BatchCall(try_call=self.req(keys[0], "debit",
                                                                      f"{a}:1".encode())),
                                       pb.BatchCall()])
        r = self.wire.batch(empty)
        expect(r.code == INVALID_ARGUMENT, f"a batch call naming none: expected "
                                           f"INVALID_ARGUMENT, got {r}")
        self.query(keys[0], pb.BARRIER_STATE_NOT_FOUND)

    def batch_as_alone(self):
        a = self.account()
        before = self.balances(a)
        k1, k2, k3 = self.key(), self.key(), self.key()
        t1 = self.req(k1, "debit", f"{a}:7".encode())
        calls = [pb.BatchCall(try_call=t1),
                 pb.BatchCall(try_call=self.req(k2, "debit", f"{a}:999999".encode())),
                 pb.BatchCall(confirm_call=self.req(k3, "debit", f"{a}:1".encode())),
                 pb.BatchCall(query_call=pb.QueryRequest(key=k3)),
                 pb.BatchCall(try_call=self.req(pb.BranchKey(gid="", created_at_ms=1,
                                                             branch_id="b"), "debit", b"1:1"))]
        r = self.wire.batch(pb.BatchRequest(calls=calls))
        if r.code == UNIMPLEMENTED:
            raise Skip("the participant has no Batch (allowed)")
        expect(r.code == OK and len(r.message.results) == 5, f"batch: {r}")
        res = r.message.results
        expect(res[0].code == 0 and res[0].branch.outcome == EXECUTED, f"batch[0]: {res[0]}")
        expect(res[1].code == 0 and res[1].branch.outcome == REJECTED, f"batch[1]: {res[1]}")
        expect(res[2].code == 9, f"batch[2]: confirm without try: {res[2]}")  # FAILED_PRECONDITION
        expect(res[3].code == 0 and res[3].query.state == pb.BARRIER_STATE_NOT_FOUND,
               f"batch[3]: {res[3]}")
        expect(res[4].code == 3, f"batch[4]: a bad gid: {res[4]}")  # INVALID_ARGUMENT
        self.moved(a, before, (0, 7, 0))
        self.call("try", t1, EXECUTED, True)

    # Try table

    def try_executes(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:40".encode())
        self.call("try", r, EXECUTED, False)
        self.moved(a, before, (0, 40, 0))
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)
        c, k2 = self.account(), self.key()
        before = self.balances(c)
        r2 = self.req(k2, "credit", f"{c}:15".encode())
        self.call("try", r2, EXECUTED, False)
        self.moved(c, before, (0, 0, 15))
        self.query(k2, pb.BARRIER_STATE_TRIED, r2.branch_hash)

    def try_rejects(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:{before[0] + 1}".encode())
        self.call("try", r, REJECTED, False)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_TRY_REJECTED, r.branch_hash)

    def try_replays_executed(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:11".encode())
        self.call("try", r, EXECUTED, False)
        before = self.balances(a)
        r.attempt = 2
        self.call("try", r, EXECUTED, True)
        self.same(a, before, " by a replayed Try")
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)

    def try_replays_rejected(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:{before[0] + 5}".encode())
        self.call("try", r, REJECTED, False)
        r.attempt = 2
        self.call("try", r, REJECTED, True)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_TRY_REJECTED, r.branch_hash)

    def try_conflicts(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:9".encode())
        self.call("try", r, EXECUTED, False)
        before = self.balances(a)
        other = self.req(k, "debit", f"{a}:10".encode())
        self.call("try", other, CONFLICT, False)
        self.same(a, before, " by a conflicting Try")
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)
        # Under a TRY_REJECTED record too.
        k2 = self.key()
        rej = self.req(k2, "debit", f"{a}:99999999".encode())
        self.call("try", rej, REJECTED, False)
        self.call("try", self.req(k2, "debit", f"{a}:1".encode()), CONFLICT, False)
        self.same(a, before)
        self.query(k2, pb.BARRIER_STATE_TRY_REJECTED, rej.branch_hash)

    def try_after_empty_rollback(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:12".encode())
        self.call("cancel", r, EMPTY_ROLLBACK, False)
        self.call("try", r, HANGING_REFUSED, False)
        self.same(a, before, " by a Try after its Cancel")
        self.query(k, pb.BARRIER_STATE_CANCELLED_BEFORE_TRY, r.branch_hash)
        # Another hash after the marker: still refused as hanging (row 1 first).
        self.call("try", self.req(k, "debit", f"{a}:13".encode()), HANGING_REFUSED, False)
        self.same(a, before)

    def try_after_cancel(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:14".encode())
        self.call("try", r, EXECUTED, False)
        self.call("cancel", r, EXECUTED, False)
        self.same(a, before)
        self.call("try", r, HANGING_REFUSED, False)
        self.same(a, before, " by a Try after its Cancel")
        self.query(k, pb.BARRIER_STATE_CANCELLED, r.branch_hash)

    def try_past_deadline(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:16".encode(), deadline_ms=now_ms() - 3_600_000)
        self.call("try", r, HANGING_REFUSED, False)
        self.same(a, before, " by a Try past its deadline")
        # A refusal for lateness leaves no marker.
        self.query(k, pb.BARRIER_STATE_NOT_FOUND)

    def try_replay_past_deadline(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:18".encode())
        self.call("try", r, EXECUTED, False)
        before = self.balances(a)
        late = pb.BranchRequest()
        late.CopyFrom(r)
        late.try_deadline_ms = now_ms() - 3_600_000
        # The stored answer comes before the deadline's row.
        self.call("try", late, EXECUTED, True)
        self.same(a, before)

    # Confirm table

    def confirm_executes(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:21".encode())
        self.call("try", r, EXECUTED, False)
        self.call("confirm", r, EXECUTED, False)
        self.moved(a, before, (-21, 0, 0))
        self.query(k, pb.BARRIER_STATE_CONFIRMED, r.branch_hash)
        c, k2 = self.account(), self.key()
        before = self.balances(c)
        r2 = self.req(k2, "credit", f"{c}:22".encode())
        self.call("try", r2, EXECUTED, False)
        self.call("confirm", r2, EXECUTED, False)
        self.moved(c, before, (22, 0, 0))
        self.query(k2, pb.BARRIER_STATE_CONFIRMED, r2.branch_hash)

    def confirm_replays(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:23".encode())
        self.call("try", r, EXECUTED, False)
        self.call("confirm", r, EXECUTED, False)
        before = self.balances(a)
        self.call("confirm", r, EXECUTED, True)
        self.same(a, before, " by a replayed Confirm")
        self.query(k, pb.BARRIER_STATE_CONFIRMED, r.branch_hash)
        # The Try, replayed after the Confirm: still its stored answer.
        self.call("try", r, EXECUTED, True)
        self.same(a, before)

    def confirm_after_cancel(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:24".encode())
        self.call("try", r, EXECUTED, False)
        self.call("cancel", r, EXECUTED, False)
        self.call("confirm", r, code=FAILED_PRECONDITION)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CANCELLED, r.branch_hash)
        k2 = self.key()
        r2 = self.req(k2, "debit", f"{a}:25".encode())
        self.call("cancel", r2, EMPTY_ROLLBACK, False)
        self.call("confirm", r2, code=FAILED_PRECONDITION)
        self.same(a, before)
        self.query(k2, pb.BARRIER_STATE_CANCELLED_BEFORE_TRY, r2.branch_hash)

    def confirm_conflicts(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:26".encode())
        self.call("try", r, EXECUTED, False)
        before = self.balances(a)
        self.call("confirm", self.req(k, "debit", f"{a}:27".encode()), CONFLICT, False)
        self.same(a, before, " by a conflicting Confirm")
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)
        self.call("confirm", r, EXECUTED, False)
        before = self.balances(a)
        self.call("confirm", self.req(k, "debit", f"{a}:28".encode()), CONFLICT, False)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CONFIRMED, r.branch_hash)

    def confirm_without_try(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:29".encode())
        self.call("confirm", r, code=FAILED_PRECONDITION)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_NOT_FOUND)
        k2 = self.key()
        rej = self.req(k2, "debit", f"{a}:99999999".encode())
        self.call("try", rej, REJECTED, False)
        self.call("confirm", rej, code=FAILED_PRECONDITION)
        self.same(a, before)
        self.query(k2, pb.BARRIER_STATE_TRY_REJECTED, rej.branch_hash)

    # Cancel table

    def cancel_executes(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:31".encode())
        self.call("try", r, EXECUTED, False)
        self.call("cancel", r, EXECUTED, False)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CANCELLED, r.branch_hash)
        self.call("cancel", r, EXECUTED, True)
        self.same(a, before, " by a replayed Cancel")
        self.query(k, pb.BARRIER_STATE_CANCELLED, r.branch_hash)

    def cancel_empty_rollback(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:32".encode())
        self.call("cancel", r, EMPTY_ROLLBACK, False)
        self.query(k, pb.BARRIER_STATE_CANCELLED_BEFORE_TRY, r.branch_hash)
        later = pb.BranchRequest()
        later.CopyFrom(r)
        later.try_deadline_ms = r.try_deadline_ms + 60_000  # raises the marker's expiry
        self.call("cancel", later, EMPTY_ROLLBACK, True)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CANCELLED_BEFORE_TRY, r.branch_hash)

    def cancel_after_rejected(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:99999999".encode())
        self.call("try", r, REJECTED, False)
        self.call("cancel", r, EMPTY_ROLLBACK, False)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CANCELLED, r.branch_hash)
        self.call("cancel", r, EMPTY_ROLLBACK, True)

    def cancel_after_confirm(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:33".encode())
        self.call("try", r, EXECUTED, False)
        self.call("confirm", r, EXECUTED, False)
        before = self.balances(a)
        self.call("cancel", r, code=FAILED_PRECONDITION)
        self.same(a, before)
        self.query(k, pb.BARRIER_STATE_CONFIRMED, r.branch_hash)

    def cancel_conflicts(self):
        a, k = self.account(), self.key()
        r = self.req(k, "debit", f"{a}:34".encode())
        self.call("try", r, EXECUTED, False)
        before = self.balances(a)
        self.call("cancel", self.req(k, "debit", f"{a}:35".encode()), CONFLICT, False)
        self.same(a, before, " by a conflicting Cancel")
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)

    # Duplicates

    def duplicates_in_turn(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:36".encode())
        replays = [self.call("try", r, EXECUTED).message.replayed for _ in range(5)]
        expect(replays == [False, True, True, True, True], f"replayed flags {replays}")
        self.moved(a, before, (0, 36, 0))

    def duplicates_at_once(self):
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:37".encode())
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda _: self.wire.call("try", r), range(8)))
        for x in replies:
            expect(x.code == OK and x.message.outcome == EXECUTED, f"a duplicate Try: {x}")
        fresh = [x for x in replies if not x.message.replayed]
        expect(len(fresh) == 1, f"{len(fresh)} of 8 concurrent duplicates were not replayed")
        self.moved(a, before, (0, 37, 0))
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda _: self.wire.call("confirm", r), range(8)))
        for x in replies:
            expect(x.code == OK and x.message.outcome == EXECUTED, f"a duplicate Confirm: {x}")
        fresh = [x for x in replies if not x.message.replayed]
        expect(len(fresh) == 1, f"{len(fresh)} of 8 concurrent Confirms were not replayed")
        self.moved(a, before, (-37, 0, 0))

    def try_cancel_pairs(self):
        a = self.account()
        before = self.balances(a)
        pairs = [self.req(self.key(), "debit", f"{a}:1".encode()) for _ in range(20)]

        def race(r):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                t = pool.submit(self.wire.call, "try", r)
                c = pool.submit(self.wire.call, "cancel", r)
                return t.result(), c.result()

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            results = list(pool.map(race, pairs))
        for r, (t, c) in zip(pairs, results):
            expect(t.code == OK and c.code == OK, f"{r.key.gid}: try {t}, cancel {c}")
            ran = (t.message.outcome, c.message.outcome)
            expect(ran in ((EXECUTED, EXECUTED), (HANGING_REFUSED, EMPTY_ROLLBACK)),
                   f"{r.key.gid}: try {t}, cancel {c}: not one of the two consistent orders")
            q = self.wire.query(pb.QueryRequest(key=r.key))
            expect(q.code == OK and q.message.state in (pb.BARRIER_STATE_CANCELLED,
                                                        pb.BARRIER_STATE_CANCELLED_BEFORE_TRY),
                   f"{r.key.gid}: after the race {q}")
        self.same(a, before, " after Try/Cancel races")

    # Races held by failpoints, and the crash (need a restart)

    def retry_while_first_held(self):
        self.restart("barrier.after_lock=sleep(1500)@1")
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:41".encode())
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(self.wire.call, "try", r)
            # The retry leaves once the first holds the key's lock.
            held = self.launched.wait_log("failpoint barrier.after_lock: sleep")
            retry = pool.submit(self.wire.call, "try", r)
            replies = [first.result(), retry.result()]
        expect(held, "the participant never said the first Try was held "
               "(failpoint barrier.after_lock: sleep, on its stderr)")
        for x in replies:
            expect(x.code == OK and x.message.outcome == EXECUTED, f"Try and its retry: {x}")
        expect(sorted(x.message.replayed for x in replies) == [False, True],
               f"exactly one of a Try and its racing retry runs: {replies}")
        self.moved(a, before, (0, 41, 0))
        self.query(k, pb.BARRIER_STATE_TRIED, r.branch_hash)

    def cancel_overtakes_late_try(self):
        self.restart("barrier.before_lock=sleep(1500)@1")
        a, k = self.account(), self.key()
        before = self.balances(a)
        r = self.req(k, "debit", f"{a}:42".encode())
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            late_try = pool.submit(self.wire.call, "try", r)
            # The Cancel leaves once the Try has arrived and waits before
            # its lock.
            held = self.launched.wait_log("failpoint barrier.before_lock: sleep")
            cancel = pool.submit(self.wire.call, "cancel", r)
            c = cancel.result()
            t = late_try.result()
        expect(held, "the participant never said the Try was held "
               "(failpoint barrier.before_lock: sleep, on its stderr)")
        expect(c.code == OK and c.message.outcome == EMPTY_ROLLBACK,
               f"the Cancel that overtook its Try: {c}")
        expect(t.code == OK and t.message.outcome == HANGING_REFUSED,
               f"the late Try after its Cancel: {t}")
        self.same(a, before, " by a late Try")
        self.query(k, pb.BARRIER_STATE_CANCELLED_BEFORE_TRY, r.branch_hash)

    def crash_between_commit_and_reply(self):
        for op in ("try", "confirm"):
            a, k = self.account(), self.key()
            r = self.req(k, "debit", f"{a}:43".encode())
            if op == "confirm":
                self.restart()
                self.call("try", r, EXECUTED, False)
            before = self.balances(a)
            self.restart("participant.after_commit=crash@1")
            got = self.wire.call(op, r)
            expect(got.code != OK and got.code not in DEFINITE,
                   f"{op}: the crash must leave the outcome unknown, got {got}")
            code = self.launched.wait_exit()
            expect(code is not None, f"{op}: the participant did not die at the failpoint")
            self.start()
            r.attempt = 2
            self.call(op, r, EXECUTED, True)
            delta = (0, 43, 0) if op == "try" else (-43, -43, 0)
            self.moved(a, before, delta)
            self.query(k, pb.BARRIER_STATE_TRIED if op == "try" else pb.BARRIER_STATE_CONFIRMED,
                       r.branch_hash)
        self.restart()

    def run_all(self):
        c = self.check
        c("vectors/hashes", self.vectors)
        c("bad-input/fields", self.bad_input)
        c("bad-input/http-bodies", self.bad_http)
        c("bad-input/batch", self.bad_batch)
        c("batch/each-as-alone", self.batch_as_alone)
        c("try/nothing-executes", self.try_executes)
        c("try/nothing-rejects", self.try_rejects)
        c("try/tried-replays", self.try_replays_executed)
        c("try/rejected-replays", self.try_replays_rejected)
        c("try/other-hash-conflicts", self.try_conflicts)
        c("try/after-empty-rollback-refused", self.try_after_empty_rollback)
        c("try/after-cancel-refused", self.try_after_cancel)
        c("try/past-deadline-refused", self.try_past_deadline)
        c("try/tried-replays-past-deadline", self.try_replay_past_deadline)
        c("confirm/tried-executes", self.confirm_executes)
        c("confirm/confirmed-replays", self.confirm_replays)
        c("confirm/after-cancel-refused", self.confirm_after_cancel)
        c("confirm/other-hash-conflicts", self.confirm_conflicts)
        c("confirm/without-try-refused", self.confirm_without_try)
        c("cancel/tried-executes-and-replays", self.cancel_executes)
        c("cancel/nothing-empty-rollback", self.cancel_empty_rollback)
        c("cancel/rejected-empty-rollback", self.cancel_after_rejected)
        c("cancel/after-confirm-refused", self.cancel_after_confirm)
        c("cancel/other-hash-conflicts", self.cancel_conflicts)
        c("duplicates/in-turn", self.duplicates_in_turn)
        c("duplicates/at-once", self.duplicates_at_once)
        c("races/try-cancel-pairs", self.try_cancel_pairs)
        c("races/retry-while-first-held", self.retry_while_first_held)
        c("races/cancel-overtakes-late-try", self.cancel_overtakes_late_try)
        c("crash/kill9-between-commit-and-reply", self.crash_between_commit_and_reply)


class Skip(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=["grpc", "http"], required=True)
    ap.add_argument("--endpoint", help="HOST:PORT of a participant run elsewhere")
    ap.add_argument("--bank", help="HOST:PORT of its Bank service (default: --endpoint)")
    ap.add_argument("--path-prefix", default="", help="http: the url's path")
    ap.add_argument("--vectors", default=DEFAULT_VECTORS)
    ap.add_argument("--log", default="", help="the launched participant's stderr")
    ap.add_argument("--only", action="append", default=[], help="checks starting with this")
    ap.add_argument("--tls-ca", default="")
    ap.add_argument("--tls-cert", default="")
    ap.add_argument("--tls-key", default="")
    ap.add_argument("--tls-server-name", default="")
    ap.add_argument("--scratch", default="",
                    help="a directory made empty for the participant ({scratch} in CMD) "
                         "and removed at the end (kept with TCC_KEEP_TEST_DIRS)")
    ap.add_argument("--pg-env-file", default="",
                    help="a file of `export TCC_PG_URL=...` (scripts/pg.sh start FILE): "
                         "{pg_url} in CMD, and TCC_PG_URL for the participant")
    ap.add_argument("--expect-fail", default="",
                    help="NAME,NAME: the participant is broken on purpose; exit 0 only "
                         "if the suite fails and each NAME is among the failed checks")
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- CMD ARG...: the participant to start")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.endpoint):
        ap.error("give either --endpoint or -- CMD ARG...")
    suite = Suite(args)
    subst = {"run": suite.run, "scratch": args.scratch, "pg_url": ""}
    if args.pg_env_file:
        with open(args.pg_env_file) as f:
            for line in f:
                if line.startswith("export TCC_PG_URL="):
                    subst["pg_url"] = line.split("=", 1)[1].strip()
        if not subst["pg_url"]:
            ap.error(f"{args.pg_env_file}: no TCC_PG_URL (is the postgres fixture up?)")
        os.environ["TCC_PG_URL"] = subst["pg_url"]
    if args.scratch:
        shutil.rmtree(args.scratch, ignore_errors=True)
        os.makedirs(args.scratch, mode=0o700)
    command = [c.format(**subst) for c in command]
    t0 = time.monotonic()
    try:
        if command:
            log = args.log or os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                           f"conformance-{suite.run}.log")
            suite.launched = Launched(command, log)
            print(f"participant log: {log}", flush=True)
            suite.start()
        else:
            suite.connect(args.endpoint, args.bank or args.endpoint)
        suite.run_all()
    except Failure as e:
        suite.results.append(("start", "FAIL", str(e)))
        print(f"FAIL start: {e}", flush=True)
    finally:
        if suite.launched is not None:
            suite.launched.stop()
        if args.scratch and not os.environ.get("TCC_KEEP_TEST_DIRS"):
            shutil.rmtree(args.scratch, ignore_errors=True)
    failed = [n for n, s, _ in suite.results if s == "FAIL"]
    skipped = sum(1 for _, s, _ in suite.results if s == "skip")
    line = (f"checks={len(suite.results)} failed={len(failed)} skipped={skipped} "
            f"seconds={time.monotonic() - t0:.1f}")
    verdict = (f"conformance: FAIL {line} failed_checks={','.join(failed)}" if failed else
               f"conformance: PASS {line}")
    print(verdict, flush=True)
    if args.expect_fail:
        wanted = [n for n in args.expect_fail.split(",") if n]
        missed = [n for n in wanted if n not in failed]
        if failed and not missed:
            print(f"conformance: the broken participant was caught by {','.join(wanted)}",
                  flush=True)
            return 0
        print(f"conformance: the broken participant was NOT caught by "
              f"{','.join(missed) or '(nothing failed)'}", flush=True)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
