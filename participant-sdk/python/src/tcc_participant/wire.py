"""tcc.v1 messages <-> the barrier's calls and answers, for both servers."""

from ._proto import participant_pb2 as pb
from .barrier import BranchCall, BranchKey


def key_from_proto(key):
    return BranchKey(key.gid, key.created_at_ms, key.branch_id)


def call_from_proto(req):
    return BranchCall(key=key_from_proto(req.key), action=req.action, payload=req.payload,
                      branch_hash=req.branch_hash, revision=req.revision,
                      attempt=req.attempt, owner_epoch=req.owner_epoch,
                      try_deadline_ms=req.try_deadline_ms)


def branch_response(answer):
    return pb.BranchResponse(outcome=int(answer.outcome), replayed=answer.replayed,
                             message=answer.message)


def query_response(answer):
    return pb.QueryResponse(state=int(answer.state), branch_hash=answer.branch_hash,
                            authoritative=answer.authoritative)
