#include "process_cpu.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::bench {

absl::StatusOr<double> ParseProcStatCpuSeconds(const std::string& stat,
                                               long ticks_per_second) {
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || ticks_per_second <= 0) {
    return absl::InvalidArgumentError("not a /proc/PID/stat line");
  }
  // After "pid (comm)" come field 3 (state) onwards; utime and stime are
  // fields 14 and 15, i.e. the 12th and 13th after the parenthesis.
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0;
  uint64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InvalidArgumentError("not a /proc/PID/stat line");
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(ticks_per_second);
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::stringstream text;
  text << in.rdbuf();
  return ParseProcStatCpuSeconds(text.str(), sysconf(_SC_CLK_TCK));
}

std::string ProcessName(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  if (!in || !std::getline(in, name) || name.empty()) return "?";
  return name;
}

}  // namespace tcc::bench
