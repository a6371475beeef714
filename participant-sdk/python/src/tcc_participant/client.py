"""The initiator client: how a Python application hands tccd a global
transaction (tcc.v1.Coordinator, proto/tcc/v1/coordinator.proto).

Identity before the first send: an empty gid gets a new one, a zero
created_at_ms the wall-clock now; both are reused on every retry, so tccd
can tell a retry from a new request. Calls whose outcome is unknown
(UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) are re-sent unchanged
with exponential backoff and full jitter, up to `max_attempts` (and, with
`retry_for_s`, until the waits between attempts add up to that: give it the
cluster's lease TTL and takeover margin, or more, when tccd is a cluster);
a retry that tccd already handled gets the first answer. Every other error is raised as
CallError with tccd's code and message.

    c = CoordinatorClient("127.0.0.1:7070")
    view = c.submit([Branch("b1", "bank-a", "debit", b"1:30"),
                     Branch("b2", "bank-b", "credit", b"2:30")])
    view.state == TXN_STATE_CONFIRMED

Thread-safe: one client may be shared.
"""

import dataclasses
import random
import secrets
import time

import grpc

from ._proto import coordinator_pb2 as cpb
from ._proto import coordinator_pb2_grpc as cpb_grpc
from .status import CallError, Code

FINAL_STATES = (cpb.TXN_STATE_CONFIRMED, cpb.TXN_STATE_CANCELLED)
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED)


@dataclasses.dataclass
class Branch:
    branch_id: str
    participant: str
    action: str
    payload: bytes = b""


def new_gid():
    """"g-" and 32 random hex digits."""
    return "g-" + secrets.token_hex(16)


class CoordinatorClient:
    """`address`: tccd's listen address. TLS: `tls_ca_file` (and
    `tls_cert_file`/`tls_key_file` for mutual TLS)."""

    def __init__(self, address, attempt_timeout_s=30.0, max_attempts=5, backoff_base_s=0.05,
                 backoff_cap_s=2.0, tls_ca_file="", tls_cert_file="", tls_key_file="",
                 tls_server_name="", retry_for_s=0.0, sleep=time.sleep):
        if tls_ca_file:
            def read(path):
                if not path:
                    return None
                with open(path, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(read(tls_ca_file), read(tls_key_file),
                                                 read(tls_cert_file))
            options = ([("grpc.ssl_target_name_override", tls_server_name)]
                       if tls_server_name else [])
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = cpb_grpc.CoordinatorStub(self._channel)
        self._timeout = attempt_timeout_s
        self._attempts = max(1, max_attempts)
        self._base = backoff_base_s
        self._cap = backoff_cap_s
        self._retry_for = float(retry_for_s or 0)
        self._sleep = sleep  # injected by tests
        self._rng = random.Random()

    def close(self):
        self._channel.close()

    def _call(self, method, request):
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(request, timeout=self._timeout)
            except grpc.RpcError as e:
                code = e.code()
                more = attempt < self._attempts or waited < self._retry_for
                if code not in _RETRYABLE or not more:
                    raise CallError(Code[code.name], e.details() or "") from e
            # Full jitter: uniform [0, min(cap, base * 2^attempt)].
            wait = self._rng.uniform(0, min(self._cap, self._base * (2 ** min(attempt, 30))))
            self._sleep(wait)
            waited += max(wait, 0.001)  # bounded with a zero backoff

    def submit_request(self, request):
        """Sends a SubmitRequest (gid and created_at_ms filled when unset, in
        place); returns the SubmitResponse."""
        if not request.gid:
            request.gid = new_gid()
        if request.created_at_ms == 0:
            request.created_at_ms = time.time_ns() // 1_000_000
        return self._call(self._stub.Submit, request)

    def submit(self, branches, gid="", created_at_ms=0, revision=0, try_timeout_ms=0,
               wait_for=cpb.WAIT_FOR_FINISHED):
        """One transaction of `branches`; returns its TransactionView as of
        `wait_for` (finished by default)."""
        request = cpb.SubmitRequest(
            gid=gid, created_at_ms=created_at_ms, revision=revision,
            try_timeout_ms=try_timeout_ms, wait_for=wait_for,
            branches=[cpb.BranchSpec(branch_id=b.branch_id, participant=b.participant,
                                     action=b.action, payload=b.payload) for b in branches])
        return self.submit_request(request).transaction

    def get(self, gid):
        """The transaction's view; CallError NOT_FOUND for an unknown gid."""
        return self._call(self._stub.Get, cpb.GetRequest(gid=gid)).transaction

    def wait(self, gid, timeout_s=60.0, poll_s=0.05):
        """Polls Get until the transaction is CONFIRMED or CANCELLED; returns
        its view. CallError DEADLINE_EXCEEDED after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.get(gid)
            if view.state in FINAL_STATES:
                return view
            if time.monotonic() >= deadline:
                raise CallError(Code.DEADLINE_EXCEEDED,
                                f"{gid} still {cpb.TxnState.Name(view.state)} after {timeout_s} s")
            time.sleep(poll_s)
