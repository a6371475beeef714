#include "process.h"

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

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

TEST_CASE("free loopback port") {
  int port = tcc::harness::FreeLoopbackPort();
  CHECK(port > 0);
  CHECK(port < 65536);
}
