#include "tmpfs_mount.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tcc::harness {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TmpfsMount>> TmpfsMount::Mount(
    const std::string& dir, uint64_t bytes) {
  if (::mkdir(dir.c_str(), 0700) != 0) return Errno("mkdir " + dir);
  const std::string data = absl::StrCat("size=", bytes, ",mode=0700");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              data.c_str()) != 0) {
    absl::Status failed = Errno(absl::StrCat("mount -t tmpfs -o ", data,
                                             " tmpfs ", dir, " (needs root)"));
    ::rmdir(dir.c_str());
    return failed;
  }
  std::unique_ptr<TmpfsMount> mounted(new TmpfsMount(dir));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Errno("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return Errno("fork");
  }
  if (pid == 0) {
    // The watchdog: its own session, so that a kill of the test's process
    // group spares it; only async-signal-safe calls from here on.
    ::setsid();
    ::close_range(3, static_cast<unsigned>(pipe_fds[0]) - 1, 0);
    ::close_range(static_cast<unsigned>(pipe_fds[0]) + 1, ~0u, 0);
    char byte;
    while (::read(pipe_fds[0], &byte, 1) < 0 && errno == EINTR) {
    }
    (void)::umount2(mounted->dir_.c_str(), MNT_DETACH);
    (void)::rmdir(mounted->dir_.c_str());
    ::_exit(0);
  }
  ::close(pipe_fds[0]);
  mounted->watchdog_ = pid;
  mounted->watchdog_pipe_ = pipe_fds[1];
  return mounted;
}

TmpfsMount::~TmpfsMount() {
  // Said on stderr, not silently left behind: a destructor can't fail.
  if (::umount2(dir_.c_str(), 0) != 0) {
    const int first = errno;
    if (first != EBUSY || ::umount2(dir_.c_str(), MNT_DETACH) != 0) {
      std::fprintf(stderr, "TmpfsMount: umount %s: %s\n", dir_.c_str(),
                   std::strerror(first == EBUSY ? errno : first));
    }
  }
  if (::rmdir(dir_.c_str()) != 0) {
    std::fprintf(stderr, "TmpfsMount: rmdir %s: %s\n", dir_.c_str(),
                 std::strerror(errno));
  }
  if (watchdog_pipe_ >= 0) ::close(watchdog_pipe_);  // it finds nothing left
  if (watchdog_ > 0) (void)::waitpid(watchdog_, nullptr, 0);
}

absl::Status TmpfsMount::Resize(uint64_t bytes) {
  const std::string data = absl::StrCat("size=", bytes);
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV,
              data.c_str()) != 0) {
    return Errno(absl::StrCat("mount -o remount,", data, " ", dir_));
  }
  return absl::OkStatus();
}

absl::Status TmpfsMount::Fill(const std::string& name) {
  const std::string path = dir_ + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return Errno("create " + path);
  const std::vector<char> chunk(64 * 1024, 'f');
  absl::StatusOr<uint64_t> free = FreeBytes();
  if (!free.ok()) {
    ::close(fd);
    return free.status();
  }
  // Bounded: twice the chunks the free space holds, a short write each.
  const uint64_t max_writes = 2 * (*free / chunk.size() + 2);
  absl::Status result = absl::InternalError(
      absl::StrCat(path, ": not full after ", max_writes, " writes"));
  for (uint64_t i = 0; i < max_writes; ++i) {
    if (::write(fd, chunk.data(), chunk.size()) >= 0) continue;
    result = errno == ENOSPC ? absl::OkStatus() : Errno("write " + path);
    break;
  }
  ::close(fd);
  return result;
}

absl::StatusOr<uint64_t> TmpfsMount::FreeBytes() const {
  struct statvfs st;
  if (::statvfs(dir_.c_str(), &st) != 0) return Errno("statvfs " + dir_);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace tcc::harness
