"""json_wire reads and writes exactly what json_format does: the same
message for every body json_format takes (in the common shape and outside
it), json_format's error for every body it refuses, and answers that read
back as the same message."""

import json
import os
import random
import unittest

from google.protobuf import json_format

from tcc.v1 import participant_pb2 as pb
from tcc_participant import json_wire


def branch_request(rng):
    m = pb.BranchRequest()
    m.key.gid = rng.choice(["g-1", "g-" + os.urandom(8).hex(), "", "é"])
    m.key.created_at_ms = rng.choice([0, 1, 1764646464646, 2**63 - 1, -5])
    m.key.branch_id = rng.choice(["b1", "", "branch-üñ"])
    m.action = rng.choice(["debit", "", "credit"])
    m.payload = os.urandom(rng.randrange(0, 120))
    m.branch_hash = os.urandom(rng.choice([0, 1, 2, 3, 31, 32]))
    m.revision = rng.choice([0, 1, 2**64 - 1])
    m.attempt = rng.choice([0, 1, 2**32 - 1])
    m.owner_epoch = rng.choice([0, 7, 2**64 - 1])
    m.try_deadline_ms = rng.choice([0, 1764646469999, -1])
    return m


def reference(body, message_type):
    m = message_type()
    json_format.Parse(body, m, ignore_unknown_fields=True)
    return m


class JsonWire(unittest.TestCase):
    def assertSameAsJsonFormat(self, body, message_type=pb.BranchRequest):
        try:
            want = reference(body, message_type)
        except (json_format.ParseError, UnicodeDecodeError, ValueError, TypeError) as e:
            with self.assertRaises(type(e), msg=body):
                json_wire.parse(body, message_type)
            return
        got = json_wire.parse(body, message_type)
        self.assertEqual(got, want, body)
        if "key" in message_type.DESCRIPTOR.fields_by_name:
            self.assertEqual(got.HasField("key"), want.HasField("key"), body)

    def test_what_json_format_writes_reads_back_the_same(self):
        rng = random.Random(22)
        for _ in range(300):
            m = branch_request(rng)
            for defaults in (True, False):
                body = json_format.MessageToJson(m, preserving_proto_field_name=True,
                                                 including_default_value_fields=defaults)
                self.assertEqual(json_wire.parse(body.encode(), pb.BranchRequest), m)
                camel = json_format.MessageToJson(m, including_default_value_fields=defaults)
                self.assertEqual(json_wire.parse(camel.encode(), pb.BranchRequest), m)
            q = pb.QueryRequest(key=m.key)
            body = json_format.MessageToJson(q, preserving_proto_field_name=True,
                                             including_default_value_fields=True)
            self.assertEqual(json_wire.parse(body.encode(), pb.QueryRequest), q)

    def test_other_shapes_and_errors_as_json_format(self):
        bodies = [
            b"", b"nope", b"[]", b"null", b"{}", b'{"key": "x"}', b"\xff\xfe",
            b'{"key": {}}', b'{"key": null}', b'{"key": {"gid": null}}',
            b'{"action": 5}', b'{"action": "a", "action": "b"}',
            b'{"key": {"gid": "a", "gid": "a"}}',
            b'{"attempt": "7"}', b'{"attempt": 7.0}', b'{"attempt": 7.5}', b'{"attempt": true}',
            b'{"attempt": -1}', b'{"attempt": 4294967296}', b'{"attempt": "007"}',
            b'{"revision": "18446744073709551615"}', b'{"revision": "18446744073709551616"}',
            b'{"revision": -1}', b'{"revision": " 1"}', b'{"revision": "1e3"}',
            b'{"try_deadline_ms": "-9223372036854775808"}',
            b'{"try_deadline_ms": 9223372036854775808}',
            b'{"key": {"created_at_ms": "12"}, "tryDeadlineMs": "5"}',
            b'{"payload": "YWJj"}', b'{"payload": "YWI="}', b'{"payload": "YWI"}',
            b'{"payload": "-_-_"}', b'{"payload": "+/+/"}', b'{"payload": "!!"}',
            b'{"payload": 12}', b'{"branch_hash": ""}',
            b'{"action": "\\ud800"}', b'{"action": "\\u00e9"}',
            b'{"from_the_future": [1, {"a": 2}], "action": "x"}',
            b'{"key": {"gid": "g", "extra": 1}}',
            '{"action": "é"}'.encode("utf-16"),
        ]
        for body in bodies:
            self.assertSameAsJsonFormat(body)
        for body in (b'{"key": {"gid": "g"}}', b'{"key": {"gid": 1}}', b'{}', b'{"x": 1}',
                     b"[]"):
            self.assertSameAsJsonFormat(body, pb.QueryRequest)

    def test_batches_as_json_format(self):
        rng = random.Random(15)
        for _ in range(40):
            calls = []
            for _ in range(rng.randrange(0, 6)):
                kind = rng.choice(["try_call", "confirm_call", "cancel_call", "query_call"])
                m = branch_request(rng)
                calls.append(pb.BatchCall(query_call=pb.QueryRequest(key=m.key))
                             if kind == "query_call" else pb.BatchCall(**{kind: m}))
            batch = pb.BatchRequest(calls=calls)
            for defaults in (True, False):
                body = json_format.MessageToJson(batch, preserving_proto_field_name=True,
                                                 including_default_value_fields=defaults)
                self.assertEqual(json_wire.parse(body.encode(), pb.BatchRequest), batch)
        for body in (b'{"calls": [{}]}', b'{"calls": [{"try_call": {}, "cancel_call": {}}]}',
                     b'{"calls": [{"nope": {}}]}', b'{"calls": 5}', b'{"calls": null}',
                     b'{"calls": [null]}', b'{"calls": [{"query_call": {"key": {"gid": 7}}}]}',
                     b'{"calls": [{"tryCall": {"action": "x"}}]}', b'{}', b'[]'):
            self.assertSameAsJsonFormat(body, pb.BatchRequest)

    def test_answers_read_as_json_format_writes_them(self):
        for outcome in pb.Outcome.values():
            for replayed in (False, True):
                for message in ("", "insufficient funds", 'quote " é \\ \n'):
                    m = pb.BranchResponse(outcome=outcome, replayed=replayed, message=message)
                    want = json_format.MessageToJson(m, preserving_proto_field_name=True,
                                                     including_default_value_fields=True)
                    self.assertEqual(json.loads(json_wire.to_json(m)), json.loads(want))
        results = [pb.BatchResult(branch=pb.BranchResponse(outcome=1, message="m")),
                   pb.BatchResult(code=9, error_message="confirm without try"),
                   pb.BatchResult(query=pb.QueryResponse(state=pb.BARRIER_STATE_TRIED,
                                                         branch_hash=b"\x01" * 32)),
                   pb.BatchResult(branch=pb.BranchResponse(outcome=77))]
        for batch in (pb.BatchResponse(), pb.BatchResponse(results=results)):
            want = json_format.MessageToJson(batch, preserving_proto_field_name=True,
                                             including_default_value_fields=True)
            self.assertEqual(json.loads(json_wire.to_json(batch)), json.loads(want))
        unknown = pb.BranchResponse(outcome=999)
        self.assertEqual(json.loads(json_wire.to_json(unknown))["outcome"], 999)
        q = pb.QueryResponse(state=pb.BARRIER_STATE_TRIED, branch_hash=b"h" * 32,
                             authoritative=True)
        self.assertEqual(json_format.Parse(json_wire.to_json(q), pb.QueryResponse()), q)


if __name__ == "__main__":
    unittest.main()
