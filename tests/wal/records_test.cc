// The names of the records' enums and of the records (wal/src/records.cc):
// every stored value has one, and out of range is "?".
#include "tcc/wal/records.h"

#include <catch2/catch.hpp>
#include <string>

namespace tcc::wal {
namespace {

template <typename E>
std::string Names(const char* (*name)(E), int first, int last) {
  std::string out;
  for (int v = first; v <= last; ++v) {
    if (!out.empty()) out += ",";
    out += name(static_cast<E>(v));
  }
  return out;
}

TEST_CASE("every stored enum value has its one name") {
  CHECK(Names(TxnStateName, 1, 7) ==
        "OPEN,TRYING,AWAITING_APPROVAL,CONFIRMING,CONFIRMED,CANCELLING,"
        "CANCELLED");
  CHECK(Names(DecisionName, 0, 2) == "none,Confirm,Cancel");
  CHECK(Names(DecisionCauseName, 0, 6) ==
        "none,rule,deadline,rollback,forced,gate approved,witnessed");
  CHECK(Names(PhaseName, 1, 3) == "Try,Confirm,Cancel");
  CHECK(Names(PhaseStateName, 1, 4) == "NOT_SENT,UNKNOWN,SUCCEEDED,FAILED");
  CHECK(Names(OutcomeName, 0, 5) ==
        "NONE,EXECUTED,EMPTY_ROLLBACK,REJECTED,HANGING_REFUSED,CONFLICT");
  CHECK(Names(ApprovalActionName, 1, 4) ==
        "force-confirm,force-cancel,resolve-branch,gate-approve");
  CHECK(std::string(TxnStateName(static_cast<TxnState>(8))) == "?");
  CHECK(std::string(OutcomeName(static_cast<Outcome>(6))) == "?");
  CHECK(std::string(DecisionCauseName(static_cast<DecisionCause>(7))) == "?");
}

TEST_CASE("every record kind has its name") {
  CHECK(std::string(RecordName(Registered{})) == "Registered");
  CHECK(std::string(RecordName(BranchAdded{})) == "BranchAdded");
  CHECK(std::string(RecordName(PhaseUpdate{})) == "PhaseUpdate");
  CHECK(std::string(RecordName(StateChanged{})) == "StateChanged");
  CHECK(std::string(RecordName(Decided{})) == "Decided");
  CHECK(std::string(RecordName(BranchResolved{})) == "BranchResolved");
  CHECK(std::string(RecordName(Flagged{})) == "Flagged");
  CHECK(std::string(RecordName(Finished{})) == "Finished");
  CHECK(std::string(RecordName(EpochTaken{})) == "EpochTaken");
}

}  // namespace
}  // namespace tcc::wal
