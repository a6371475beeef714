// tcc.v1.Participant messages <-> the driver's participant calls
// (runtime/environment.h), shared by every transport (gRPC, HTTP): one
// reading of a participant's answer whatever carried it. A reply that breaks
// the contract (no outcome, no barrier state) is an UNKNOWN error: the
// outcome stays unknown, never success.
//
// Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "rpc/participant_client.h"
#include "runtime/environment.h"
#include "tcc/v1/participant.pb.h"

namespace tcc::rpc {

// The request for one Try, Confirm or Cancel.
tcc::v1::BranchRequest BranchRequestOf(const runtime::BranchCall& call);
tcc::v1::QueryRequest QueryRequestOf(const runtime::QueryCall& query);

ParticipantOp OpOf(wal::Phase phase);

// The answer, or UNKNOWN when the reply carries no outcome (or state).
absl::StatusOr<runtime::BranchAnswer> BranchAnswerOf(
    tcc::v1::BranchResponse reply);
absl::StatusOr<runtime::QueryAnswer> QueryAnswerOf(
    const tcc::v1::QueryResponse& reply);

}  // namespace tcc::rpc
