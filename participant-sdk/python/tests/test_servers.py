"""The SDK's two servers over loopback: the same handlers behind gRPC and
HTTP/JSON; HTTP's bodies, statuses and limits as participant.proto states
(400 for a body it cannot read, 412 for a protocol violation, 503 for a
transient error, 411/413 for a missing or oversized body, 404 elsewhere),
keep-alive, /metrics, TLS and mutual TLS; gRPC's Batch, each call as alone."""

import http.client
import json
import os
import socket
import ssl
import subprocess
import time
import unittest

import grpc
from google.protobuf import json_format

from common import Stores, call, counting_participant
from tcc.v1 import participant_pb2 as pb
from tcc.v1 import participant_pb2_grpc as pb_grpc
from tcc_participant.grpc_server import GrpcParticipantServer
from tcc_participant.http_server import HttpParticipantServer


def to_req(c):
    return pb.BranchRequest(key=pb.BranchKey(gid=c.key.gid, created_at_ms=c.key.created_at_ms,
                                             branch_id=c.key.branch_id),
                            action=c.action, payload=c.payload, branch_hash=c.branch_hash,
                            revision=c.revision, attempt=1, try_deadline_ms=c.try_deadline_ms)


def js(msg):
    return json_format.MessageToJson(msg, preserving_proto_field_name=True).encode()


class HttpServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stores = Stores()
        cls.p, effects = counting_participant(cls.stores.sqlite())
        cls.effects = staticmethod(effects)  # not a method of the test
        cls.server = HttpParticipantServer(cls.p, "127.0.0.1:0", path_prefix="/tcc/")
        cls.port = cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.stores.close()

    def post(self, path, body, conn=None, headers=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()  # its own connection; a caller's stays open for reuse
        return r.status, data, r

    def test_calls_and_answers_as_json(self):
        c = call()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        status, body, r = self.post("/tcc/try", js(to_req(c)), conn)
        self.assertEqual(status, 200, body)
        self.assertEqual(r.getheader("Content-Type"), "application/json")
        doc = json.loads(body)
        # The .proto's names, every field present.
        self.assertEqual(doc, {"outcome": "OUTCOME_EXECUTED", "replayed": False, "message": ""})
        status, body, _ = self.post("/tcc/try", js(to_req(c)), conn)  # same connection
        self.assertTrue(json.loads(body)["replayed"])
        q = pb.QueryRequest(key=to_req(c).key)
        status, body, _ = self.post("/tcc/query", js(q), conn)
        answer = json_format.Parse(body, pb.QueryResponse())
        self.assertEqual(answer.state, pb.BARRIER_STATE_TRIED)
        self.assertEqual(answer.branch_hash, c.branch_hash)
        self.assertTrue(answer.authoritative)
        status, body, _ = self.post("/tcc/confirm", js(to_req(c)), conn)
        self.assertEqual(json.loads(body)["outcome"], "OUTCOME_EXECUTED")
        conn.close()
        self.assertEqual(self.effects(c.key), ["confirm", "try"])

    def test_errors_are_their_statuses(self):
        c = call()
        status, body, _ = self.post("/tcc/confirm", js(to_req(c)))
        self.assertEqual(status, 412)  # confirm without a try
        self.assertEqual(json.loads(body)["code"], "FAILED_PRECONDITION")
        status, body, _ = self.post("/tcc/try", js(to_req(call(b"fail"))))
        self.assertEqual(status, 503)
        self.assertEqual(json.loads(body)["code"], "UNAVAILABLE")
        bad = to_req(call())
        bad.branch_hash = b"short"
        status, body, _ = self.post("/tcc/try", js(bad))
        self.assertEqual(status, 400)
        self.assertIn("branch_hash", json.loads(body)["message"])
        for body in (b"nope", b"[]", b'{"key": "x"}', b"\xff\xfe"):
            status, _, _ = self.post("/tcc/try", body)
            self.assertEqual(status, 400, body)
        status, _, _ = self.post("/try", js(to_req(call())))  # outside the prefix
        self.assertEqual(status, 404)
        self.assertEqual(self.effects(c.key), [])

    def test_unknown_request_fields_are_ignored(self):
        c = call()
        doc = json.loads(js(to_req(c)))
        doc["from_the_future"] = [1, {"a": 2}]
        status, body, _ = self.post("/tcc/try", json.dumps(doc).encode())
        self.assertEqual(status, 200, body)

    def test_body_limits(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"POST /tcc/try HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
        reply = s.recv(4096)
        self.assertIn(b" 413 ", reply.split(b"\r\n")[0])
        s.close()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"POST /tcc/try HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"2\r\n{}\r\n0\r\n\r\n")
        self.assertIn(b" 411 ", s.recv(4096).split(b"\r\n")[0])
        s.close()

    def test_batch_each_as_alone(self):
        calls = [call() for _ in range(40)]
        req = pb.BatchRequest(calls=[pb.BatchCall(try_call=to_req(c)) for c in calls] +
                              [pb.BatchCall(confirm_call=to_req(call())),
                               pb.BatchCall(query_call=pb.QueryRequest(key=to_req(calls[0]).key)),
                               pb.BatchCall(try_call=to_req(call(b"fail")))])
        status, body, _ = self.post("/tcc/batch", js(req))
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["results"][0], {"code": 0, "error_message": "", "branch": {
            "outcome": "OUTCOME_EXECUTED", "replayed": False, "message": ""}})
        resp = json_format.Parse(body, pb.BatchResponse())
        self.assertEqual(len(resp.results), 43)
        for r in resp.results[:40]:
            self.assertEqual((r.code, r.branch.outcome), (0, pb.OUTCOME_EXECUTED))
        self.assertEqual(resp.results[40].code, 9)  # confirm without try
        # After calls[0]'s Try: calls on one key run in the batch's order.
        self.assertEqual(resp.results[41].query.state, pb.BARRIER_STATE_TRIED)
        self.assertEqual(resp.results[42].code, 14)  # the handler failed: UNAVAILABLE
        self.assertFalse(resp.results[42].HasField("branch"))
        for c in calls:
            self.assertEqual(self.effects(c.key), ["try"])
        for bad in (js(pb.BatchRequest(calls=[pb.BatchCall()])),
                    js(pb.BatchRequest(calls=[pb.BatchCall(try_call=to_req(call()))] * 1025)),
                    b'{"calls": [{"try_call": {}, "cancel_call": {}}]}', b'{"calls": 5}'):
            status, body, _ = self.post("/tcc/batch", bad)
            self.assertEqual(status, 400, body[:200])
            self.assertEqual(json.loads(body)["code"], "INVALID_ARGUMENT")

    def test_metrics(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        self.post("/tcc/try", js(to_req(call())), conn)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        text = r.read().decode()
        self.assertEqual(r.status, 200)
        self.assertIn('tcc_participant_calls_total{operation="try",outcome="executed",'
                      'replayed="false"}', text)
        self.assertIn("tcc_participant_http_connections_total", text)
        conn.close()


class HttpTls(unittest.TestCase):
    """HTTPS with mutual TLS: a caller without the CA's certificate is
    refused at the handshake; one with it gets answers."""

    @classmethod
    def setUpClass(cls):
        cls.stores = Stores()
        d = cls.stores.dir

        def run(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=test-ca", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
        for name in ("server", "client"):
            run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr")
            ext = f"{d}/{name}.ext"
            with open(ext, "w") as f:
                f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
            run("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem", "-CAkey",
                f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-out", f"{d}/{name}.pem",
                "-extfile", ext)
        cls.p, _ = counting_participant(cls.stores.sqlite())
        cls.server = HttpParticipantServer(cls.p, "127.0.0.1:0",
                                           tls_cert_file=f"{d}/server.pem",
                                           tls_key_file=f"{d}/server.key",
                                           tls_client_ca_file=f"{d}/ca.pem")
        cls.port = cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.stores.close()

    def context(self, with_cert):
        d = self.stores.dir
        ctx = ssl.create_default_context(cafile=f"{d}/ca.pem")
        if with_cert:
            ctx.load_cert_chain(f"{d}/client.pem", f"{d}/client.key")
        return ctx

    def test_mutual_tls(self):
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10,
                                           context=self.context(True))
        conn.request("POST", "/try", body=js(to_req(call())),
                     headers={"Content-Type": "application/json"})
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10,
                                           context=self.context(False))
        with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            conn.request("POST", "/try", body=js(to_req(call())))
            conn.getresponse().read()
        conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        with self.assertRaises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("POST", "/try", body=b"{}")
            plain.getresponse().read()
        plain.close()


class GrpcServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stores = Stores()
        cls.p, effects = counting_participant(cls.stores.sqlite())
        cls.effects = staticmethod(effects)  # not a method of the test
        cls.server = GrpcParticipantServer(cls.p, "127.0.0.1:0")
        cls.port = cls.server.start()
        cls.stub = pb_grpc.ParticipantStub(grpc.insecure_channel(f"127.0.0.1:{cls.port}"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.stores.close()

    def test_the_same_handlers_and_codes(self):
        c = call()
        self.assertEqual(self.stub.Try(to_req(c), timeout=10).outcome, pb.OUTCOME_EXECUTED)
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Confirm(to_req(call()), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Try(to_req(call(b"fail")), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_batch_each_as_alone(self):
        calls = [call() for _ in range(40)]
        req = pb.BatchRequest(calls=[pb.BatchCall(try_call=to_req(c)) for c in calls] +
                              [pb.BatchCall(confirm_call=to_req(call())),
                               pb.BatchCall(query_call=pb.QueryRequest(key=to_req(calls[0]).key))])
        resp = self.stub.Batch(req, timeout=30)
        self.assertEqual(len(resp.results), 42)
        for r in resp.results[:40]:
            self.assertEqual((r.code, r.branch.outcome), (0, pb.OUTCOME_EXECUTED))
        self.assertEqual(resp.results[40].code, 9)
        # After calls[0]'s Try: calls on one key run in the batch's order.
        self.assertEqual(resp.results[41].query.state, pb.BARRIER_STATE_TRIED)
        for c in calls:
            self.assertEqual(self.effects(c.key), ["try"])
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Batch(pb.BatchRequest(calls=[pb.BatchCall()]), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
