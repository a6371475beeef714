"""Content hashes (proto/tcc/v1/participant.proto, HASHES).

SHA-256 over a canonical byte encoding: integers unsigned big-endian, a
"string" is its byte length as u32 then its bytes.

  branch     = "tcc.v1.branch" 0x00  u64 revision  string participant
               string action  string payload
  submission = "tcc.v1.submission" 0x00  u64 revision  u8 approval_gate
               u32 count  count x {string branch_id, string participant,
               string action, string payload}   (sorted by branch_id)

Arguments are bytes, or str (encoded as UTF-8).
"""

import hashlib
import struct


def _b(value):
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _string(value):
    raw = _b(value)
    return struct.pack(">I", len(raw)) + raw


def canonical_branch_encoding(revision, participant, action, payload):
    return (b"tcc.v1.branch\x00" + struct.pack(">Q", revision) +
            _string(participant) + _string(action) + _string(payload))


def canonical_submission_encoding(revision, approval_gate, branches):
    """`branches`: (branch_id, participant, action, payload) tuples."""
    ordered = sorted(((_b(i), _b(p), _b(a), _b(pl)) for i, p, a, pl in branches),
                     key=lambda b: b[0])
    out = (b"tcc.v1.submission\x00" + struct.pack(">Q", revision) +
           bytes([1 if approval_gate else 0]) + struct.pack(">I", len(ordered)))
    for branch_id, participant, action, payload in ordered:
        out += _string(branch_id) + _string(participant) + _string(action) + _string(payload)
    return out


def branch_hash(revision, participant, action, payload):
    """The 32-byte branch hash a BranchRequest carries."""
    return hashlib.sha256(
        canonical_branch_encoding(revision, participant, action, payload)).digest()


def submission_hash(revision, approval_gate, branches):
    """The 32-byte content hash of a whole transaction."""
    return hashlib.sha256(
        canonical_submission_encoding(revision, approval_gate, branches)).digest()
