// Proto <-> domain mapping for tcc.v1.Admin: approvals and the record
// timeline. Pure functions; thread-safe.
#pragma once

#include "tcc/v1/admin.pb.h"
#include "tcc/wal/records.h"

namespace tcc::rpc {

tcc::v1::ApprovalAction ToProto(wal::ApprovalAction action);
// APPROVAL_ACTION_UNSPECIFIED (or an unknown value): false.
bool FromProto(tcc::v1::ApprovalAction action, wal::ApprovalAction* out);
void ToProto(const wal::Approval& approval, tcc::v1::Approval* out);

// One WAL record as a timeline entry: kind, time, branch, approval, and a
// one-line human summary.
void ToProto(const wal::Record& record, tcc::v1::RecordView* out);

}  // namespace tcc::rpc
