"""GrpcParticipantServer: a Participant as tcc.v1.Participant over gRPC.

Try, Confirm, Cancel and Query run on the server's worker threads; Batch
runs its calls on a pool of its own (batch.BatchRunner), each answered as
if made alone: calls on different keys in parallel, calls on one key in the
batch's order. Every answer is sent after
its local transaction is durable (the stores commit synchronously); between
that and the reply the failpoint participant.after_commit is evaluated.

Listening on port 0 lets the OS choose; `port` tells which after start().
Other gRPC services may be served on the same port (add_service).
"""

import concurrent.futures
import logging

import grpc

from . import wire
from ._proto import participant_pb2_grpc as pb_grpc
from .batch import MAX_BATCH_CALLS, BatchRunner  # noqa: F401 (MAX_BATCH_CALLS: API)
from .participant import after_commit
from .status import CallError, Code
# gRPC's default receive limit; the largest Batch tccd sends.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

log = logging.getLogger("tcc_participant")


def _abort(context, error):
    context.abort(grpc.StatusCode[error.code.name], error.message)


class _Servicer(pb_grpc.ParticipantServicer):
    def __init__(self, participant, batch):
        self._p = participant
        self._batch = batch

    def _branch(self, fn, request, context):
        try:
            answer = fn(wire.call_from_proto(request))
            after_commit()
        except CallError as e:
            _abort(context, e)
        return wire.branch_response(answer)

    def Try(self, request, context):
        return self._branch(self._p.try_, request, context)

    def Confirm(self, request, context):
        return self._branch(self._p.confirm, request, context)

    def Cancel(self, request, context):
        return self._branch(self._p.cancel, request, context)

    def Query(self, request, context):
        try:
            answer = self._p.query(wire.key_from_proto(request.key))
        except CallError as e:
            _abort(context, e)
        return wire.query_response(answer)

    def Batch(self, request, context):
        try:
            return self._batch.run(request)
        except CallError as e:
            _abort(context, e)


class GrpcParticipantServer:
    """Serves `participant` on `listen` ("host:port"; port 0: any). TLS:
    `tls_cert_file`/`tls_key_file` (PEM); with `tls_client_ca_file` too,
    mutual TLS: only callers with a certificate from that CA get in."""

    def __init__(self, participant, listen="127.0.0.1:0", workers=64, batch_workers=32,
                 tls_cert_file="", tls_key_file="", tls_client_ca_file=""):
        self.participant = participant
        self._listen = listen
        self._tls = (tls_cert_file, tls_key_file, tls_client_ca_file)
        self._batch = BatchRunner(participant, batch_workers)
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=workers,
                                                  thread_name_prefix="tcc-grpc"),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
        pb_grpc.add_ParticipantServicer_to_server(_Servicer(participant, self._batch),
                                                  self._server)
        self.port = 0

    def add_service(self, add_fn, servicer):
        """Serves another service on the same port (before start()):
        add_fn is the generated add_XServicer_to_server."""
        add_fn(servicer, self._server)

    def start(self):
        cert, key, client_ca = self._tls
        if cert or key:
            with open(cert, "rb") as f:
                chain = f.read()
            with open(key, "rb") as f:
                private_key = f.read()
            root = None
            if client_ca:
                with open(client_ca, "rb") as f:
                    root = f.read()
            creds = grpc.ssl_server_credentials([(private_key, chain)], root_certificates=root,
                                                require_client_auth=bool(client_ca))
            self.port = self._server.add_secure_port(self._listen, creds)
        else:
            if client_ca:
                raise CallError(Code.INVALID_ARGUMENT,
                                "tls_client_ca_file: needs tls_cert_file and tls_key_file")
            log.warning("%s: participant listener %s is plaintext: anyone who can reach it "
                        "can call Try, Confirm and Cancel", self.participant.name, self._listen)
            self.port = self._server.add_insecure_port(self._listen)
        if self.port == 0:
            raise CallError(Code.UNAVAILABLE, f"cannot listen on {self._listen}")
        self._server.start()
        return self.port

    def stop(self, grace_s=1.0):
        self._server.stop(grace_s).wait()
        self._batch.shutdown()
