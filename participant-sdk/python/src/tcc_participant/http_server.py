"""HttpParticipantServer: a Participant over HTTP/1.1 with JSON bodies, the
protocol stated in proto/tcc/v1/participant.proto (TRANSPORTS; DESIGN.md
section 15):

  POST <prefix>/try | /confirm | /cancel   BranchRequest -> BranchResponse
  POST <prefix>/query                      QueryRequest  -> QueryResponse
  POST <prefix>/batch                      BatchRequest  -> BatchResponse
  GET  /metrics                            Prometheus text

/batch carries the calls of gRPC's Batch (batch.BatchRunner: each call
answered as if alone, its status in its result; more than 1,024 calls or a
call naming none is 400 and runs nothing); tccd sends it to participants
configured with `batch: true`.

Bodies are protobuf's JSON mapping, read ignoring unknown fields, written
with the .proto field names and every field. An error answers its HTTP
status (status.http_status_of: INVALID_ARGUMENT 400, FAILED_PRECONDITION
412, UNAVAILABLE 503, ...) with an ErrorResponse body. A body that is not
JSON of the request is 400 (nothing ran); a body over 4 MiB is 413 and the
connection closes; a request without Content-Length is 411. Connections are
kept alive (HTTP/1.1) and closed after `idle_timeout_s` without a request.
The same handlers as the gRPC server, and the same failpoint
(participant.after_commit) between the durable commit and the reply.

One thread per connection (socketserver's ThreadingTCPServer; the
requests are read by _Handler, not http.server, for its cost);
TLS with `tls_cert_file`/`tls_key_file`, mutual TLS with
`tls_client_ca_file` (the handshake runs on the connection's thread).
"""

import email.utils
import logging
import socket
import socketserver
import ssl
import threading
import time

import prometheus_client
from google.protobuf import json_format

from . import json_wire, wire
from ._proto import participant_pb2 as pb
from .batch import BatchRunner
from .participant import after_commit
from .status import CallError, Code, http_status_of

MAX_BODY_BYTES = 4 * 1024 * 1024
# A request line or header line longer than this is refused (414 / 431),
# and so are more header lines than _MAX_HEADERS (as http.server does).
_MAX_LINE_BYTES = 65536
_MAX_HEADERS = 100

log = logging.getLogger("tcc_participant")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required",
            412: "Precondition Failed", 413: "Content Too Large", 414: "URI Too Long",
            429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
            504: "Gateway Timeout", 505: "HTTP Version Not Supported"}


def to_json(message):
    return json_wire.to_json(message)


def error_body(code, message):
    return to_json(pb.ErrorResponse(code=Code(code).name, message=message))


class _Date:
    """The Date header's value, formatted once a second."""

    def __init__(self):
        self._second = None
        self._value = ""

    def now(self):
        second = int(time.time())
        if second != self._second:
            self._value = email.utils.formatdate(second, usegmt=True)
            self._second = second
        return self._value


_date = _Date()


class _BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


_OTHER_TYPES = {"/query": pb.QueryRequest, "/batch": pb.BatchRequest}


class _Handler(socketserver.StreamRequestHandler):
    """One connection: HTTP/1.1 requests in turn, kept alive until the
    caller closes it, asks to (Connection: close, or HTTP/1.0 without
    keep-alive), sends something this server refuses, or is idle for
    idle_timeout_s. Each answer leaves in one write; TCP_NODELAY, so no
    answer waits for the caller's delayed ACK. Requests are read by a
    parser of the few rules this protocol needs (request line, headers,
    Content-Length; no chunked bodies): http.server's email-based header
    parsing cost about 50 us a request."""

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
        if self._refused:
            return
        try:
            while self._one_request():
                pass
        except (OSError, ValueError) as e:  # a timeout, a reset, a closed file
            log.debug("%s: connection from %s: %s", self.server.participant.name,
                      self.client_address[0], e)

    def _send(self, status, body, content_type="application/json", close=False):
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
                f"Server: tcc-participant\r\nDate: {_date.now()}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n")
        if close:
            head += "Connection: close\r\n"
        self.connection.sendall(head.encode("latin-1") + b"\r\n" + body)

    def _error(self, code, message, close=False):
        self._send(http_status_of(code), error_body(code, message), close=close)

    def _read_head(self):
        """(method, path, version, headers with lowercase names), or None
        when the caller closed the connection between requests."""
        line = self.rfile.readline(_MAX_LINE_BYTES + 1)
        while line in (b"\r\n", b"\n"):  # tolerated before a request (RFC 9112 2.2)
            line = self.rfile.readline(_MAX_LINE_BYTES + 1)
        if not line:
            return None
        if len(line) > _MAX_LINE_BYTES:
            raise _BadRequest(414, "request line too long")
        words = line.decode("latin-1").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            raise _BadRequest(400, f"bad request line {line[:100]!r}")
        method, path, version = words
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _BadRequest(505 if version >= "HTTP/2" else 400,
                              f"unsupported version {version[:20]!r}")
        headers = {}
        while True:
            line = self.rfile.readline(_MAX_LINE_BYTES + 1)
            if len(line) > _MAX_LINE_BYTES:
                raise _BadRequest(431, "header line too long")
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise ConnectionError("closed inside a request's header")
            if len(headers) >= _MAX_HEADERS:
                raise _BadRequest(431, f"more than {_MAX_HEADERS} headers")
            name, colon, value = line.decode("latin-1").partition(":")
            name = name.lower()
            if not colon or not name or name != name.strip():
                raise _BadRequest(400, f"bad header line {line[:100]!r}")
            value = value.strip()
            if name not in headers:
                headers[name] = value
            elif name == "content-length":
                if headers[name] != value:
                    raise _BadRequest(400, "two different Content-Length headers")
            else:  # a list, as RFC 9110 5.3 joins them
                headers[name] = f"{headers[name]}, {value}"
        return method, path, version, headers

    def _one_request(self):
        """Serves one request; False when the connection is to close."""
        try:
            head = self._read_head()
        except _BadRequest as e:
            self._send(e.status, error_body(Code.INVALID_ARGUMENT, e.message), close=True)
            return False
        if head is None:
            return False
        method, path, version, headers = head
        connection = headers.get("connection", "").lower()
        keep_alive = ("close" not in connection if version == "HTTP/1.1"
                      else "keep-alive" in connection)
        if path.startswith("//"):  # as http.server: never an absolute URI
            path = "/" + path.lstrip("/")
        if method == "GET":
            # A GET has no body here; one that sends one is not kept alive.
            if headers.get("content-length", "0") not in ("", "0") or \
                    "transfer-encoding" in headers:
                keep_alive = False
            self._get(path, close=not keep_alive)
            return keep_alive
        if method != "POST":
            self._send(501, error_body(Code.UNIMPLEMENTED, f"unsupported method {method!r}"),
                       close=True)
            return False
        body = self._body(headers)
        if body is None:
            return False
        self._post(path, body, close=not keep_alive)
        return keep_alive

    def _get(self, path, close):
        route = self.server.routes.get(("GET", path))
        if route is not None:
            status, content_type, body = route(b"")
            return self._send(status, body, content_type, close=close)
        if path == "/metrics":
            return self._send(200, prometheus_client.generate_latest(self.server.registry),
                              prometheus_client.CONTENT_TYPE_LATEST, close=close)
        self._error(Code.NOT_FOUND, f"no GET {path}", close=close)

    def _body(self, headers):
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._send(411, error_body(Code.INVALID_ARGUMENT, "send Content-Length"),
                       close=True)
            return None
        length = headers.get("content-length")
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
        if headers.get("expect", "").lower() == "100-continue":
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(n)
        if len(body) != n:
            raise ConnectionError("closed inside a request's body")
        return body

    def _post(self, path, body, close):
        route = self.server.routes.get(("POST", path))
        if route is not None:
            status, content_type, out = route(body)
            return self._send(status, out, content_type, close=close)
        prefix = self.server.path_prefix
        op = path[len(prefix):] if path.startswith(prefix) else None
        p = self.server.participant
        fns = {"/try": p.try_, "/confirm": p.confirm, "/cancel": p.cancel}
        if op not in fns and op not in _OTHER_TYPES:
            return self._error(Code.NOT_FOUND, f"no POST {path}", close=close)
        request_type = _OTHER_TYPES.get(op, pb.BranchRequest)
        try:
            request = json_wire.parse(body, request_type)
        except (json_format.ParseError, UnicodeDecodeError, ValueError, TypeError) as e:
            # TypeError: json_format's answer to some bodies (b"null").
            return self._error(Code.INVALID_ARGUMENT,
                               f"the body is not a {request_type.DESCRIPTOR.full_name}: {e}",
                               close=close)
        try:
            if op == "/query":
                out = wire.query_response(p.query(wire.key_from_proto(request.key)))
            elif op == "/batch":
                out = self.server.batch.run(request)
            else:
                out = wire.branch_response(fns[op](wire.call_from_proto(request)))
                after_commit()
        except CallError as e:
            return self._error(e.code, e.message, close=close)
        self._send(200, to_json(out), close=close)


class _Server(socketserver.ThreadingTCPServer):
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
                 idle_timeout_s=60.0, batch_workers=32):
        host, _, port = listen.rpartition(":")
        self.participant = participant
        self._address = (host.strip("[]"), int(port))
        self._prefix = path_prefix.rstrip("/")
        self._tls = (tls_cert_file, tls_key_file, tls_client_ca_file)
        self._idle_timeout_s = idle_timeout_s
        self._batch = BatchRunner(participant, batch_workers, "tcc-http-batch")
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
        server.batch = self._batch
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
        self._batch.shutdown()


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
