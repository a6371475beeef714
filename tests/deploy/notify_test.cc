// The installed tccd (from the .deb, unpacked by package_test.sh) under a
// service manager's notification socket: READY=1 once it serves, then
// STOPPING=1 on SIGTERM and exit 0. No systemd runs here, so the test binds
// the socket itself, as systemd would for a Type=notify unit.
//
//   TCC_INSTALLED_ROOT  the unpacked package (usr/bin/tccd, etc/tccd/...)
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "process.h"
#include "test_dirs.h"

namespace {

// A datagram socket bound at `path`, as systemd's NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof(addr.sun_path));
    path.copy(addr.sun_path, path.size());
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  // The next message, or "" after `timeout_ms`.
  std::string Receive(int timeout_ms) {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Messages until one holds `what` (each up to 30 s); all of them.
std::string ReceiveUntil(NotifySocket& s, const std::string& what) {
  std::string all;
  for (int i = 0; i < 10; ++i) {
    const std::string m = s.Receive(30000);
    if (m.empty()) break;
    all += m + "\n";
    if (m.find(what) != std::string::npos) break;
  }
  return all;
}

}  // namespace

TEST_CASE("the installed tccd tells its service manager READY and STOPPING") {
  const char* root_env = std::getenv("TCC_INSTALLED_ROOT");
  REQUIRE(root_env != nullptr);
  const std::filesystem::path root(root_env);
  const std::string dir = tcc::harness::MakeTempDir("tccd-notify");
  NotifySocket notify(dir + "/notify.sock");

  // The packaged config, with a data dir and ports of this test's.
  auto p = tcc::harness::Process::Start(
      {.argv = {(root / "usr/bin/tccd").string(), "--config",
                (root / "etc/tccd/tccd.yaml").string(), "--data-dir",
                dir + "/data", "--listen", "127.0.0.1:0", "--metrics-listen",
                "127.0.0.1:0"},
       .env = {{"NOTIFY_SOCKET", dir + "/notify.sock"}},
       .log_path = dir + "/tccd.log",
       .name = "tccd"});
  REQUIRE(p.ok());
  const std::string ready = ReceiveUntil(notify, "READY=1");
  INFO((*p)->Output());
  CHECK(ready.find("READY=1") != std::string::npos);
  CHECK(ready.find("STATUS=serving on 127.0.0.1:") != std::string::npos);
  // READY comes after the listener is up: the line was written to the pipe
  // before it (main.cc flushes stdout first). The test's reader thread may
  // not have read it yet when READY arrives, so wait for it briefly rather
  // than look at what was read so far (CI once saw it missing at that point).
  CHECK((*p)->WaitForListening(5000).ok());
  CHECK(ready.find("STOPPING=1") == std::string::npos);

  (*p)->Signal(SIGTERM);
  const std::string stopping = ReceiveUntil(notify, "STOPPING=1");
  CHECK(stopping.find("STOPPING=1") != std::string::npos);
  auto status = (*p)->Wait(30000);
  REQUIRE(status.ok());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  std::filesystem::remove_all(dir);
}
