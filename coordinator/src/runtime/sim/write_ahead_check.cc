#include "runtime/sim/write_ahead_check.h"

#include <variant>

#include "absl/strings/str_cat.h"

namespace tcc::runtime::sim {
namespace {

// Whether `record` implies that `call` may have happened.
bool Implies(const wal::Record& record, const BranchCall& call) {
  const std::string& branch_id = call.spec->branch_id;
  if (call.phase == wal::Phase::kTry) {
    if (const auto* reg = std::get_if<wal::Registered>(&record)) {
      for (const wal::BranchSpec& b : reg->branches) {
        if (b.branch_id == branch_id) return true;
      }
    }
    if (const auto* add = std::get_if<wal::BranchAdded>(&record)) {
      return add->branch.branch_id == branch_id;
    }
    return false;
  }
  const wal::Decision needed = call.phase == wal::Phase::kConfirm
                                   ? wal::Decision::kConfirm
                                   : wal::Decision::kCancel;
  const auto* decided = std::get_if<wal::Decided>(&record);
  return decided != nullptr && decided->decision == needed;
}

}  // namespace

std::optional<std::string> WriteAheadViolation(const wal::MemoryLog& log,
                                               const BranchCall& call) {
  if (log.IsDurable(call.gid,
                    [&](const wal::Record& r) { return Implies(r, call); })) {
    return std::nullopt;
  }
  return absl::StrCat("write-ahead: ", core::PhaseName(call.phase), " of ",
                      call.gid, "/", call.spec->branch_id,
                      " sent before the record implying it was synced");
}

}  // namespace tcc::runtime::sim
