"""A tcc.v1.BatchRequest run for both servers (gRPC's Batch, HTTP's
POST /batch): each call answered as if made alone (its result carries its
own status code), calls on different keys in parallel on a pool of
threads, calls on one key in the batch's order. More than MAX_BATCH_CALLS
calls, or a call naming none, is INVALID_ARGUMENT and runs nothing.
Between each call's durable commit and its result the failpoint
participant.after_commit is evaluated, as for a call alone.
"""

import concurrent.futures

from . import wire
from ._proto import participant_pb2 as pb
from .participant import after_commit
from .status import CallError, Code

MAX_BATCH_CALLS = 1024


class BatchRunner:
    def __init__(self, participant, workers=32, thread_name_prefix="tcc-batch"):
        self._p = participant
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=thread_name_prefix)

    def _one(self, call):
        result = pb.BatchResult()
        kind = call.WhichOneof("call")
        p = self._p
        try:
            if kind == "query_call":
                result.query.CopyFrom(
                    wire.query_response(p.query(wire.key_from_proto(call.query_call.key))))
            else:
                fn = {"try_call": p.try_, "confirm_call": p.confirm,
                      "cancel_call": p.cancel}[kind]
                answer = fn(wire.call_from_proto(getattr(call, kind)))
                after_commit()
                result.branch.CopyFrom(wire.branch_response(answer))
        except CallError as e:
            result.Clear()
            result.code = int(e.code)
            result.error_message = e.message
        return result

    def run(self, request):
        """The BatchResponse of `request`; CallError (INVALID_ARGUMENT) for
        a batch that runs nothing."""
        if len(request.calls) > MAX_BATCH_CALLS:
            raise CallError(Code.INVALID_ARGUMENT,
                            f"a batch carries at most {MAX_BATCH_CALLS} calls; "
                            f"this one has {len(request.calls)}; nothing ran")
        groups = {}
        for i, call in enumerate(request.calls):
            kind = call.WhichOneof("call")
            if kind is None:
                raise CallError(Code.INVALID_ARGUMENT,
                                f"batch call {i} names no call; nothing ran")
            k = getattr(call, kind).key
            groups.setdefault((k.gid, k.created_at_ms, k.branch_id), []).append(i)
        results = [None] * len(request.calls)

        def run(indices):
            for i in indices:
                results[i] = self._one(request.calls[i])

        if len(groups) == 1:
            run(next(iter(groups.values())))
        else:
            list(self._pool.map(run, groups.values()))
        return pb.BatchResponse(results=results)

    def shutdown(self):
        self._pool.shutdown(wait=False)


__all__ = ["BatchRunner", "MAX_BATCH_CALLS"]
