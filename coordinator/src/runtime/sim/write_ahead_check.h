// The write-ahead rule (DESIGN.md section 7, invariant 13.8), checked on a
// participant call as it leaves tccd: the in-memory WAL must already hold,
// synced, a record from which recovery knows that the call may have
// happened:
//
//   call                     the synced record that implies it
//   Try of branch b          a Registered listing b, or a BranchAdded of b
//   Confirm / Cancel         a Decided with that decision
//
// The one checker: the simulated transport of the driver's tests
// (SimTransport::CheckWriteAhead) and the deterministic simulation
// (tests/sim/) both call it. Queries are read-only and need no record.
//
// Thread-safe as far as MemoryLog is (it reads the log under its lock).
#pragma once

#include <optional>
#include <string>

#include "runtime/environment.h"
#include "tcc/wal/memory_log.h"

namespace tcc::runtime::sim {

// Nothing when `call` may leave now; otherwise what is wrong, for the test's
// report ("write-ahead: ...").
std::optional<std::string> WriteAheadViolation(const wal::MemoryLog& log,
                                               const BranchCall& call);

}  // namespace tcc::runtime::sim
