#include "process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

using tcc::harness::Process;
using tcc::harness::ProcessOptions;

TEST_CASE("a child's output is captured and waited for") {
  auto p = Process::Start(
      ProcessOptions{{"/bin/sh", "-c",
                      "echo starting; echo 'listening on 127.0.0.1:4242'; "
                      "echo err >&2; exit 3"},
                     {},
                     "",
                     "sh"});
  REQUIRE(p.ok());
  auto port = (*p)->WaitForListening(10000);
  REQUIRE(port.ok());
  CHECK(*port == 4242);
  auto status = (*p)->Wait(10000);
  REQUIRE(status.ok());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 3);
  // The reader may still be draining; the line arrives before EOF.
  CHECK((*p)->WaitForLine("^err$", 10000).ok());
}

TEST_CASE("environment is passed and a line never printed is an error") {
  auto p = Process::Start(
      ProcessOptions{{"/bin/sh", "-c", "echo \"fp=$TCC_FAILPOINTS\""},
                     {{"TCC_FAILPOINTS", "x=crash"}},
                     "",
                     "sh"});
  REQUIRE(p.ok());
  auto line = (*p)->WaitForLine("fp=(.*)", 10000);
  REQUIRE(line.ok());
  CHECK(*line == "x=crash");
  CHECK((*p)->WaitForLine("never", 10000).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("kill -9 ends a running child") {
  auto p =
      Process::Start(ProcessOptions{{"/bin/sleep", "100"}, {}, "", "sleep"});
  REQUIRE(p.ok());
  CHECK((*p)->Running());
  CHECK((*p)->Wait(50).status().code() == absl::StatusCode::kDeadlineExceeded);
  (*p)->Signal(SIGKILL);
  auto status = (*p)->Wait(10000);
  REQUIRE(status.ok());
  CHECK(WIFSIGNALED(*status));
  CHECK(WTERMSIG(*status) == SIGKILL);
  CHECK(!(*p)->Running());
}

// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
bool Ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         line[paren + 2] == 'Z';
}

// Forks a test process of our own that starts `sleep 60` (from its main
// thread, or from a thread that ends first) and hands back its pid; then
// kills that test process with SIGKILL, as a test piped into `head` dies
// of SIGPIPE: no destructor runs. Returns the sleep's pid.
pid_t StartAndKillParent(bool from_worker_thread) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t parent = fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    pid_t child = -1;
    std::unique_ptr<Process> keep;
    auto start = [&] {
      auto p =
          Process::Start(ProcessOptions{{"/bin/sleep", "60"}, {}, "", "sleep"});
      if (p.ok()) {
        child = (*p)->pid();
        keep = *std::move(p);
      }
    };
    if (from_worker_thread) {
      std::thread(start).join();
    } else {
      start();
    }
    if (write(fds[1], &child, sizeof child) != sizeof child) _exit(1);
    pause();
    _exit(0);
  }
  pid_t child = -1;
  REQUIRE(read(fds[0], &child, sizeof child) == sizeof child);
  close(fds[0]);
  close(fds[1]);
  REQUIRE(child > 0);
  kill(parent, SIGKILL);
  int status = 0;
  waitpid(parent, &status, 0);
  return child;
}

TEST_CASE("a child started from the main thread dies with the test process") {
  const pid_t child = StartAndKillParent(false);
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    ended = Ended(child);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(ended);
  if (!ended) kill(child, SIGKILL);
}

TEST_CASE("a child started from a thread that ended goes on running") {
  // Drills start nodes again from worker threads: those must outlive them.
  const pid_t child = StartAndKillParent(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(Ended(child));
  kill(child, SIGKILL);
}

TEST_CASE("free loopback port") {
  int port = tcc::harness::FreeLoopbackPort();
  CHECK(port > 0);
  CHECK(port < 65536);
}
