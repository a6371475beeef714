"""The HTTP transport's JSON bodies: protobuf's JSON mapping of the tcc.v1
messages, read and written as google.protobuf.json_format does.

json_format walks every field through descriptors in Python (about 70 us
for a BranchRequest); the participant's requests and answers have a fixed,
flat shape, so the common case is done here directly: a body whose keys are
the .proto field names and whose values have the types json_format itself
writes (strings for 64-bit integers, standard padded base64 for bytes) is
converted here, and anything else (camelCase names, unknown fields, numbers
given as strings of another form, nulls, duplicates, errors) goes to
json_format, which decides. So the answer is always json_format's: the
same message, or its ParseError (tests/python_sdk: test_json_wire.py
compares the two).
"""

import base64
import binascii
import json
import re

from google.protobuf import json_format

from ._proto import participant_pb2 as pb

_INT_STRING = re.compile(r"-?(0|[1-9][0-9]{0,19})\Z")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")
_KEY_FIELDS = frozenset(("gid", "created_at_ms", "branch_id"))
_BRANCH_FIELDS = frozenset(("key", "action", "payload", "branch_hash", "revision", "attempt",
                            "owner_epoch", "try_deadline_ms"))


class _Fallback(Exception):
    """Not the common shape: json_format decides."""


def _pairs(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Fallback()  # a duplicate key: json_format's error
    return d


def _int(value):
    if type(value) is int:
        return value
    if type(value) is str and _INT_STRING.match(value):
        return int(value)
    raise _Fallback()


def _str(value):
    if type(value) is not str:
        raise _Fallback()
    try:
        value.encode("utf-8")  # an unpaired surrogate: json_format refuses it
    except UnicodeEncodeError:
        raise _Fallback() from None
    return value


def _bytes(value):
    if type(value) is not str or not _BASE64.match(value):
        raise _Fallback()
    return base64.b64decode(value)


_CONVERT = {"gid": _str, "created_at_ms": _int, "branch_id": _str, "action": _str,
            "payload": _bytes, "branch_hash": _bytes, "revision": _int, "attempt": _int,
            "owner_epoch": _int, "try_deadline_ms": _int}


def _key(doc):
    if type(doc) is not dict or not _KEY_FIELDS.issuperset(doc):
        raise _Fallback()
    return pb.BranchKey(**{name: _CONVERT[name](value) for name, value in doc.items()})


def _load(body):
    text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
    return json.loads(text, object_pairs_hook=_pairs)


def _branch_fields(doc):
    if type(doc) is not dict or not _BRANCH_FIELDS.issuperset(doc):
        raise _Fallback()
    fields = {}
    for name, value in doc.items():
        fields[name] = _key(value) if name == "key" else _CONVERT[name](value)
    return fields


def _query_message(doc):
    if type(doc) is not dict or not doc.keys() <= {"key"}:
        raise _Fallback()
    return pb.QueryRequest(**({"key": _key(doc["key"])} if "key" in doc else {}))


def _branch_request(body):
    return pb.BranchRequest(**_branch_fields(_load(body)))


def _query_request(body):
    return _query_message(_load(body))


_BATCH_CALLS = frozenset(("try_call", "confirm_call", "cancel_call", "query_call"))


def _batch_request(body):
    doc = _load(body)
    if type(doc) is not dict or not doc.keys() <= {"calls"}:
        raise _Fallback()
    calls = doc.get("calls", [])
    if type(calls) is not list:
        raise _Fallback()
    out = []
    for c in calls:
        if type(c) is not dict or len(c) != 1:
            raise _Fallback()  # none or two: json_format (and the runner) refuse
        (kind, value), = c.items()
        if kind not in _BATCH_CALLS:
            raise _Fallback()
        if kind == "query_call":
            out.append(pb.BatchCall(query_call=_query_message(value)))
        else:
            out.append(pb.BatchCall(**{kind: pb.BranchRequest(**_branch_fields(value))}))
    return pb.BatchRequest(calls=out)


_READERS = {pb.BranchRequest: _branch_request, pb.QueryRequest: _query_request,
            pb.BatchRequest: _batch_request}


def parse(body, message_type):
    """`body` (bytes) read as `message_type` ignoring unknown fields, as
    json_format.Parse would: the message, or json_format's ParseError (or
    UnicodeDecodeError / ValueError / TypeError, as it raises them)."""
    reader = _READERS.get(message_type)
    if reader is not None:
        try:
            return reader(body)
        except (_Fallback, ValueError, TypeError, binascii.Error):
            pass  # json_format decides, and says why when it refuses
    message = message_type()
    json_format.Parse(body, message, ignore_unknown_fields=True)
    return message


def _to_dict(message):
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     including_default_value_fields=True)


def _branch_dict(m):
    if m.outcome not in _OUTCOMES:
        return _to_dict(m)  # an unknown number: json_format writes it
    return {"outcome": _OUTCOME_NAMES[m.outcome], "replayed": m.replayed,
            "message": m.message}


def _result_dict(r):
    reply = r.WhichOneof("reply")
    d = {"code": r.code, "error_message": r.error_message}
    if reply == "branch":
        d["branch"] = _branch_dict(r.branch)
    elif reply == "query":
        d["query"] = _to_dict(r.query)
    return d


def to_json(message):
    """`message` as JSON: the .proto's field names, every field present
    (json_format's MessageToJson with those options, the same document)."""
    kind = type(message)
    if kind is pb.BranchResponse:
        return json.dumps(_branch_dict(message)).encode()
    if kind is pb.BatchResponse:
        return json.dumps({"results": [_result_dict(r) for r in message.results]}).encode()
    return json_format.MessageToJson(message, preserving_proto_field_name=True,
                                     including_default_value_fields=True,
                                     indent=None).encode()


_OUTCOMES = frozenset(pb.Outcome.values())
_OUTCOME_NAMES = {v: pb.Outcome.Name(v) for v in _OUTCOMES}

__all__ = ["parse", "to_json"]
