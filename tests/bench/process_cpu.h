// CPU time used by a process, read from Linux's /proc/PID/stat (utime +
// stime), for "CPU seconds per 1,000 transactions" in benchmark reports.
// Thread-safe (no state).
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace tcc::bench {

// utime + stime in seconds from the text of a /proc/PID/stat file.
// INVALID_ARGUMENT if it does not parse. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
[[nodiscard]] absl::StatusOr<double> ParseProcStatCpuSeconds(
    const std::string& stat, long ticks_per_second);

// utime + stime of `pid` in seconds. NOT_FOUND if the process is gone.
[[nodiscard]] absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

// The command name of `pid` (/proc/PID/comm), or "?" if unreadable.
std::string ProcessName(pid_t pid);

}  // namespace tcc::bench
