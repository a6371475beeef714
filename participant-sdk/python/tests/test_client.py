"""The initiator client's retries against a fake tccd over loopback: a
Coordinator whose Submit fails UNAVAILABLE a given number of times."""

import threading
import unittest
from concurrent import futures

import grpc

from tcc.v1 import coordinator_pb2 as cpb
from tcc.v1 import coordinator_pb2_grpc as cpb_grpc
from tcc_participant.client import Branch, CoordinatorClient
from tcc_participant.status import CallError, Code


class Flaky(cpb_grpc.CoordinatorServicer):
    def __init__(self, failures, code=grpc.StatusCode.UNAVAILABLE):
        self.failures = failures
        self.code = code
        self.seen = []
        self.lock = threading.Lock()

    def Submit(self, request, context):
        with self.lock:
            self.seen.append(request)
            n = len(self.seen)
        if n <= self.failures:
            context.abort(self.code, "try again")
        return cpb.SubmitResponse(transaction=cpb.TransactionView(
            gid=request.gid, state=cpb.TXN_STATE_CONFIRMED))


class ClientRetryTest(unittest.TestCase):
    def serve(self, servicer):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        cpb_grpc.add_CoordinatorServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        return f"127.0.0.1:{port}"

    def client(self, address, **kw):
        waits = []
        c = CoordinatorClient(address, attempt_timeout_s=5, sleep=waits.append, **kw)
        self.addCleanup(c.close)
        return c, waits

    def branches(self):
        return [Branch("b1", "bank-a", "debit", b"1:5")]

    def test_max_attempts_alone(self):
        flaky = Flaky(100)
        c, waits = self.client(self.serve(flaky), max_attempts=3)
        with self.assertRaises(CallError) as e:
            c.submit(self.branches())
        self.assertEqual(e.exception.code, Code.UNAVAILABLE)
        self.assertEqual(len(flaky.seen), 3)
        self.assertEqual(len(waits), 2)
        # Every attempt carried the same gid and created_at_ms.
        self.assertEqual(len({(r.gid, r.created_at_ms) for r in flaky.seen}), 1)

    def test_retry_for_outlasts_max_attempts(self):
        flaky = Flaky(1000)
        c, waits = self.client(self.serve(flaky), max_attempts=2, retry_for_s=3.0)
        with self.assertRaises(CallError) as e:
            c.submit(self.branches())
        self.assertEqual(e.exception.code, Code.UNAVAILABLE)
        counted = [max(w, 0.001) for w in waits]
        self.assertGreaterEqual(sum(counted), 3.0)
        self.assertLess(sum(counted[:-1]), 3.0)
        self.assertEqual(len(flaky.seen), len(waits) + 1)

    def test_retry_for_gets_the_answer_after_a_takeover(self):
        flaky = Flaky(12)
        c, _ = self.client(self.serve(flaky), max_attempts=2, backoff_cap_s=0.001,
                           retry_for_s=1.0)
        view = c.submit(self.branches())
        self.assertEqual(view.state, cpb.TXN_STATE_CONFIRMED)
        self.assertEqual(len(flaky.seen), 13)

    def test_a_permanent_error_is_not_retried(self):
        flaky = Flaky(100, grpc.StatusCode.ALREADY_EXISTS)
        c, waits = self.client(self.serve(flaky), retry_for_s=3.0)
        with self.assertRaises(CallError) as e:
            c.submit(self.branches())
        self.assertEqual(e.exception.code, Code.ALREADY_EXISTS)
        self.assertEqual(len(flaky.seen), 1)
        self.assertEqual(waits, [])


if __name__ == "__main__":
    unittest.main()
