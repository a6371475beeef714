#include "tcc/failpoint/failpoint.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace fp = tcc::failpoint;

TEST_CASE("an unconfigured failpoint does nothing") {
  REQUIRE(fp::Configure("").ok());
  CHECK(fp::Eval("wal.before_sync").ok());
  CHECK(fp::Hits("wal.before_sync") == 0);
}

TEST_CASE("error fires on every evaluation") {
  REQUIRE(fp::Configure("a=error").ok());
  for (int i = 0; i < 3; ++i) {
    absl::Status s = fp::Eval("a");
    CHECK(s.code() == absl::StatusCode::kUnavailable);
    CHECK(s.message() == "failpoint a");
  }
  CHECK(fp::Eval("b").ok());
  CHECK(fp::Hits("a") == 3);
}

TEST_CASE("@N fires only on the Nth evaluation, @N+ from it on") {
  REQUIRE(fp::Configure("a=error@2;b=error@3+").ok());
  CHECK(fp::Eval("a").ok());
  CHECK(!fp::Eval("a").ok());
  CHECK(fp::Eval("a").ok());
  CHECK(fp::Eval("b").ok());
  CHECK(fp::Eval("b").ok());
  CHECK(!fp::Eval("b").ok());
  CHECK(!fp::Eval("b").ok());
}

TEST_CASE("off and sleep return OK") {
  REQUIRE(fp::Configure("a=off;b=sleep(1)").ok());
  CHECK(fp::Eval("a").ok());
  CHECK(fp::Eval("b").ok());
  CHECK(fp::Hits("b") == 1);
}

TEST_CASE("a malformed spec is refused and changes nothing") {
  REQUIRE(fp::Configure("a=error").ok());
  for (const char* bad : {"a", "=crash", "a=explode", "a=error@0", "a=error@x",
                          "a=sleep(x)", "a=sleep(5"}) {
    INFO(bad);
    CHECK(fp::Configure(bad).code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(!fp::Eval("a").ok());  // the old configuration still holds
}

TEST_CASE("TCC_FAILPOINTS in the environment switches a point on") {
  REQUIRE(setenv(fp::kEnvVar, "from.env=error", 1) == 0);
  fp::ConfigureFromEnv();
  CHECK(fp::Eval("from.env").code() == absl::StatusCode::kUnavailable);
  REQUIRE(unsetenv(fp::kEnvVar) == 0);
  fp::ConfigureFromEnv();
  CHECK(fp::Eval("from.env").ok());
}

TEST_CASE("crash kills the process with SIGKILL at that point") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv(fp::kEnvVar, "die.here=crash@2", 1);
    fp::ConfigureFromEnv();
    if (!fp::Eval("die.here").ok()) _exit(3);
    (void)fp::Eval("die.here");  // crashes
    _exit(0);                    // not reached when the failpoint works
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}
