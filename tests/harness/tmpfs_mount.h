// A small real file system for full-disk tests: a tmpfs mounted on a new
// directory, grown or filled on request, unmounted and removed when the
// object goes. A watchdog process unmounts and removes it too if the test
// process dies first (an abort, SIGKILL at a ctest timeout), so no outcome
// leaves a mount behind. Mounting needs root (CAP_SYS_ADMIN): Mount fails,
// and the test with it, where it can't mount; it never skips.
//
// Not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tcc::harness {

class TmpfsMount {
 public:
  // Mounts a tmpfs of `bytes` (rounded up to pages by the kernel) on the
  // new directory `dir` (its parent must exist; `dir` must not).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TmpfsMount>> Mount(
      const std::string& dir, uint64_t bytes);
  // Unmounts (lazily when still busy) and removes the directory; a failure
  // is printed on stderr.
  ~TmpfsMount();

  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  const std::string& dir() const { return dir_; }

  // mount -o remount,size=BYTES: what is stored stays.
  [[nodiscard]] absl::Status Resize(uint64_t bytes);

  // Writes `dir()/name` until the file system is full (ENOSPC); OK once
  // full, the error for anything else.
  [[nodiscard]] absl::Status Fill(const std::string& name);

  // Bytes free (statvfs).
  [[nodiscard]] absl::StatusOr<uint64_t> FreeBytes() const;

 private:
  explicit TmpfsMount(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
  // The watchdog: it cleans up once it reads end-of-file on this pipe,
  // which our exit (of any kind) or the destructor closes.
  pid_t watchdog_ = -1;
  int watchdog_pipe_ = -1;
};

}  // namespace tcc::harness
