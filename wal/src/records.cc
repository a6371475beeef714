#include "tcc/wal/records.h"

namespace tcc::wal {

const char* DecisionCauseName(DecisionCause cause) {
  switch (cause) {
    case DecisionCause::kNone:
      return "none";
    case DecisionCause::kRule:
      return "rule";
    case DecisionCause::kDeadline:
      return "deadline";
    case DecisionCause::kRollback:
      return "rollback";
    case DecisionCause::kForced:
      return "forced";
    case DecisionCause::kGate:
      return "gate approved";
    case DecisionCause::kWitnessed:
      return "witnessed";
  }
  return "?";
}

}  // namespace tcc::wal
