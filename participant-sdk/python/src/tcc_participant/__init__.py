"""tcc_participant: take part in tccd TCC transactions from Python.

  Participant            actions (Try/Confirm/Cancel handlers) around the barrier
  SqliteStore, PostgresStore  where barrier records live (tcc_participant.stores)
  GrpcParticipantServer  tcc.v1.Participant over gRPC
  HttpParticipantServer  the same over HTTP/1.1 + JSON
  CoordinatorClient      the initiator: Submit, Get, wait
  hashes, ids, failpoint the canonical hashes, id rules, fault injection

See participant-sdk/python/README.md and proto/tcc/v1/participant.proto.
"""

from .barrier import (Answer, Barrier, BarrierOptions, BarrierRecord, BarrierState, BranchCall,
                      BranchKey, HandlerContext, Outcome, QueryAnswer, TryVerdict)
from .participant import Participant
from .status import CallError, Code
from .stores import SqliteStore

__all__ = ["Answer", "Barrier", "BarrierOptions", "BarrierRecord", "BarrierState", "BranchCall",
           "BranchKey", "CallError", "Code", "HandlerContext", "Outcome", "Participant",
           "QueryAnswer", "SqliteStore", "TryVerdict"]
