// Failpoints: named places in the code where a test can make the process
// crash, fail or stall, without a special build.
//
// Every build compiles them in; they do nothing unless enabled by name in the
// environment variable TCC_FAILPOINTS, read once at the first evaluation.
// Production never sets it. The syntax is a ';'-separated list of
//
//   NAME=ACTION[@N|@N+]
//
// where ACTION is one of
//   crash       the process kills itself with SIGKILL at once (as `kill -9`:
//               nothing is flushed, no destructor runs)
//   error       Eval() returns UNAVAILABLE("failpoint NAME")
//   sleep(MS)   the calling thread stalls for MS milliseconds, then goes on
//               (saying "failpoint NAME: sleep MS ms" on stderr first)
//   off         nothing (the same as leaving it out)
// and the optional trigger says on which evaluations it fires: `@N` only on
// the Nth (1-based), `@N+` on the Nth and every later one; without a trigger,
// on every evaluation. Example:
//
//   TCC_FAILPOINTS='wal.before_sync=crash@3;rpc.before_reply=sleep(200)'
//
// Thread-safe. When nothing is enabled an evaluation is one relaxed atomic
// load.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace tcc::failpoint {

// The environment variable that enables failpoints.
inline constexpr char kEnvVar[] = "TCC_FAILPOINTS";

// Evaluates the failpoint `name`: OK unless it is enabled with `error` and
// fires now; may not return (crash) or return late (sleep).
[[nodiscard]] absl::Status Eval(std::string_view name);

// Replaces the whole configuration with `spec` (the syntax above). For tests
// and for the env var; INVALID_ARGUMENT on a malformed spec, which changes
// nothing.
[[nodiscard]] absl::Status Configure(std::string_view spec);

// Replaces the configuration with the environment variable's value (or with
// nothing when it is unset). A malformed value aborts the process: a crash
// test must not silently run without its faults.
void ConfigureFromEnv();

// How many times `name` was evaluated since it was configured (0 when it is
// not configured: unconfigured points are not counted).
uint64_t Hits(std::string_view name);

}  // namespace tcc::failpoint

// Evaluates a failpoint and returns its error from the enclosing function,
// which must return absl::Status or absl::StatusOr<T>.
#define TCC_FAILPOINT_RETURN(name)                                 \
  do {                                                             \
    if (absl::Status tcc_fp_status = ::tcc::failpoint::Eval(name); \
        !tcc_fp_status.ok()) {                                     \
      return tcc_fp_status;                                        \
    }                                                              \
  } while (0)
