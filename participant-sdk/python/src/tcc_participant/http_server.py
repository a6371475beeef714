"""HttpParticipantServer: a Participant over HTTP/1.1 with JSON bodies, the
protocol stated in proto/tcc/v1/participant.proto (TRANSPORTS; DESIGN.md
section 15):

  POST <prefix>/try | /confirm | /cancel   BranchRequest -> BranchResponse
  POST <prefix>/query                      QueryRequest  -> QueryResponse
  GET  /metrics                            Prometheus text

Bodies are protobuf's JSON mapping, read ignoring unknown fields, written
with the .proto field names and every field. An error answers its HTTP
status (status.http_status_of: INVALID_ARGUMENT 400, FAILED_PRECONDITION
412, UNAVAILABLE 503, ...) with an ErrorResponse body. A body that is not
JSON of the request is 400 (nothing ran); a body over 4 MiB is 413 and the
connection closes; a request without Content-Length is 411. Connections are
kept alive (HTTP/1.1) and closed after `idle_timeout_s` without a request.
The same handlers as the gRPC server, and the same failpoint
(participant.after_commit) between the durable commit and the reply.

One thread per connection (the standard library's ThreadingHTTPServer);
TLS with `tls_cert_file`/`tls_key_file`, mutual TLS with
`tls_client_ca_file` (the handshake runs on the connection's thread).
"""

import http.server
import logging
import socket
import ssl
import threading

import prometheus_client
from google.protobuf import json_format

from . import wire
from ._proto import participant_pb2 as pb
from .participant import after_commit
from .status import CallError, Code, http_status_of

MAX_BODY_BYTES = 4 * 1024 * 1024

log = logging.getLogger("tcc_participant")


def to_json(message):
    return json_format.MessageToJson(message, preserving_proto_field_name=True,
                                     including_default_value_fields=True,
                                     indent=None).encode()


def error_body(code, message):
    return to_json(pb.ErrorResponse(code=Code(code).name, message=message))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tcc-participant"
    # Headers and body leave in one write (the server flushes after each
    # request); with TCP_NODELAY no answer waits for the caller's delayed ACK.
    wbufsize = 1 << 16

    def setup(self):
        super().setup()
        self._refused = False
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connection.settimeout(self.server.idle_timeout_s)
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (ssl.SSLError, OSError) as e:
                log.info("%s: TLS handshake with %s failed: %s",
                         self.server.participant.name, self.client_address[0], e)
                self._refused = True
                return
        self.server.count_connection()

    def handle(self):
        if not self._refused:
            super().handle()

    def log_message(self, fmt, *args):  # access logs only at debug
        log.debug("%s: %s", self.server.participant.name, fmt % args)

    def _send(self, status, body, content_type="application/json", close=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code, message, close=False):
        self._send(http_status_of(code), error_body(code, message), close=close)

    def do_GET(self):
        route = self.server.routes.get(("GET", self.path))
        if route is not None:
            status, content_type, body = route(b"")
            return self._send(status, body, content_type)
        if self.path == "/metrics":
            return self._send(200, prometheus_client.generate_latest(self.server.registry),
                              prometheus_client.CONTENT_TYPE_LATEST)
        self._error(Code.NOT_FOUND, f"no GET {self.path}")

    def _body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self._send(411, error_body(Code.INVALID_ARGUMENT, "send Content-Length"),
                       close=True)
            return None
        length = self.headers.get("Content-Length")
        try:
            n = int(length)
        except (TypeError, ValueError):
            self._send(411, error_body(Code.INVALID_ARGUMENT, "Content-Length required"),
                       close=True)
            return None
        if n < 0 or n > MAX_BODY_BYTES:
            self._send(413, error_body(Code.RESOURCE_EXHAUSTED,
                                       f"body of {n} bytes; at most {MAX_BODY_BYTES}"),
                       close=True)
            return None
        return self.rfile.read(n)

    def do_POST(self):
        body = self._body()
        if body is None:
            return
        route = self.server.routes.get(("POST", self.path))
        if route is not None:
            status, content_type, out = route(body)
            return self._send(status, out, content_type)
        prefix = self.server.path_prefix
        op = self.path[len(prefix):] if self.path.startswith(prefix) else None
        p = self.server.participant
        fns = {"/try": p.try_, "/confirm": p.confirm, "/cancel": p.cancel}
        if op not in fns and op != "/query":
            return self._error(Code.NOT_FOUND, f"no POST {self.path}")
        request = pb.QueryRequest() if op == "/query" else pb.BranchRequest()
        try:
            json_format.Parse(body, request, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as e:
            return self._error(Code.INVALID_ARGUMENT,
                               f"the body is not a {request.DESCRIPTOR.full_name}: {e}")
        try:
            if op == "/query":
                out = wire.query_response(p.query(wire.key_from_proto(request.key)))
            else:
                out = wire.branch_response(fns[op](wire.call_from_proto(request)))
                after_commit()
        except CallError as e:
            return self._error(e.code, e.message)
        self._send(200, to_json(out))


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # A peer that went away (reset, timeout): not this server's error.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class HttpParticipantServer:
    """Serves `participant` on `listen` ("host:port"; port 0: any), its
    calls under `path_prefix` ("" or "/a/b": tccd's url ends with it)."""

    def __init__(self, participant, listen="127.0.0.1:0", path_prefix="",
                 tls_cert_file="", tls_key_file="", tls_client_ca_file="",
                 idle_timeout_s=60.0):
        host, _, port = listen.rpartition(":")
        self.participant = participant
        self._address = (host.strip("[]"), int(port))
        self._prefix = path_prefix.rstrip("/")
        self._tls = (tls_cert_file, tls_key_file, tls_client_ca_file)
        self._idle_timeout_s = idle_timeout_s
        self._routes = {}
        self._server = None
        self._thread = None
        self.port = 0
        self._connections = prometheus_client.Counter(
            "tcc_participant_http_connections", "HTTP connections accepted",
            registry=participant.registry)

    def add_route(self, method, path, fn):
        """Serves `fn(body) -> (status, content_type, body)` at `path`
        (before start(); e.g. the bank's balances)."""
        self._routes[(method, path)] = fn

    def start(self):
        family = socket.AF_INET6 if ":" in self._address[0] else socket.AF_INET
        _Server.address_family = family
        server = _Server(self._address, _Handler)
        server.participant = self.participant
        server.registry = self.participant.registry
        server.routes = dict(self._routes)
        server.path_prefix = self._prefix
        server.idle_timeout_s = self._idle_timeout_s
        server.count_connection = self._connections.inc
        cert, key, client_ca = self._tls
        if cert or key:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert, key)
            if client_ca:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(client_ca)
            server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
        else:
            if client_ca:
                raise CallError(Code.INVALID_ARGUMENT,
                                "tls_client_ca_file: needs tls_cert_file and tls_key_file")
            log.warning("%s: participant listener %s:%d is plaintext: anyone who can reach "
                        "it can call Try, Confirm and Cancel", self.participant.name,
                        *self._address)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, name="tcc-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        return self.port

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def json_route(request_type, fn):
    """A route for add_route that reads `request_type` JSON and answers the
    JSON of what `fn(request)` returns (CallError: its status)."""

    def route(body):
        request = request_type()
        try:
            json_format.Parse(body, request, ignore_unknown_fields=True)
            return 200, "application/json", to_json(fn(request))
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as e:
            return 400, "application/json", error_body(Code.INVALID_ARGUMENT, str(e))
        except CallError as e:
            return http_status_of(e.code), "application/json", error_body(e.code, e.message)

    return route


__all__ = ["HttpParticipantServer", "json_route", "MAX_BODY_BYTES", "to_json"]
