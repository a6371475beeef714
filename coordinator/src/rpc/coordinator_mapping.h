// Proto <-> domain mapping for tcc.v1.Coordinator: the wire messages on one
// side, the core's specs and views (core/transaction.h) on the other. Nothing
// else: validation of ids and sizes is the core's, of participant names and
// the deduplication horizon the service's.
//
// Pure functions; thread-safe.
#pragma once

#include "core/transaction.h"
#include "tcc/v1/coordinator.pb.h"

namespace tcc::rpc {

core::WaitFor FromProto(tcc::v1::WaitFor wait_for);
core::BranchSpec FromProto(const tcc::v1::BranchSpec& branch);
core::SubmitSpec FromProto(const tcc::v1::SubmitRequest& request);
core::BeginSpec FromProto(const tcc::v1::BeginRequest& request);

tcc::v1::TxnState ToProto(wal::TxnState state);
// TXN_STATE_UNSPECIFIED (or an unknown value) maps to nothing: false.
bool FromProto(tcc::v1::TxnState state, wal::TxnState* out);
tcc::v1::Decision ToProto(wal::Decision decision);
tcc::v1::DecisionCause ToProto(wal::DecisionCause cause);
tcc::v1::Outcome ToProto(wal::Outcome outcome);
tcc::v1::PhaseState ToProto(wal::PhaseState state);

void ToProto(const core::BranchView& view, tcc::v1::BranchView* out);
void ToProto(const core::TransactionView& view, tcc::v1::TransactionView* out);

}  // namespace tcc::rpc
