// A child process for integration tests, drills and benchmarks: started from
// an argv, its stdout and stderr captured (and copied to a log file), waited
// on for a line, signalled (SIGKILL for a crash, SIGTERM for a graceful stop,
// SIGSTOP/SIGCONT for a pause), reaped.
//
// Thread-safe. The destructor kills (SIGKILL) and reaps a child still running,
// so a failing test leaves no process behind.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tcc::harness {

struct ProcessOptions {
  std::vector<std::string> argv;           // argv[0] is the binary's path
  std::map<std::string, std::string> env;  // added to (or replacing in) ours
  std::string log_path;                    // empty: not copied to a file
  std::string name;                        // for messages
};

class Process {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Process>> Start(
      ProcessOptions options);
  ~Process();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return options_.name; }

  // Waits up to `timeout_ms` for an output line matching `pattern`; returns
  // the first capture group (or the whole line). DEADLINE_EXCEEDED on time
  // out, FAILED_PRECONDITION if the process exits first.
  [[nodiscard]] absl::StatusOr<std::string> WaitForLine(
      const std::string& pattern, int64_t timeout_ms);

  // Waits for "listening on HOST:PORT" and returns PORT.
  [[nodiscard]] absl::StatusOr<int> WaitForListening(int64_t timeout_ms);

  // Sends a signal (no-op once the process was reaped).
  void Signal(int sig);

  // Waits up to `timeout_ms` for the process to end; returns its wait status
  // (use WIFEXITED etc.), once its output is read to the end (Output(), the
  // log file). DEADLINE_EXCEEDED if it is still running.
  [[nodiscard]] absl::StatusOr<int> Wait(int64_t timeout_ms);

  // SIGKILL and reap.
  void Kill();

  bool Running();

  // Everything it printed so far.
  std::string Output() const;

 private:
  explicit Process(ProcessOptions options) : options_(std::move(options)) {}
  void ReadLoop(int fd);

  ProcessOptions options_;
  pid_t pid_ = -1;
  std::optional<int> wait_status_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string output_;
  bool eof_ = false;
};

// A free TCP port on 127.0.0.1 (bound and released; another process could
// take it before the caller does, so prefer port 0 where a server allows it).
int FreeLoopbackPort();

}  // namespace tcc::harness
