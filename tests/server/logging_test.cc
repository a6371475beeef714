#include "server/logging.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

TEST_CASE("JSON escaping") {
  using tcc::server::JsonEscape;
  CHECK(JsonEscape("plain") == "plain");
  CHECK(JsonEscape("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(JsonEscape("x\ny\tz") == "x\\ny\\tz");
  CHECK(JsonEscape(std::string("\x01", 1)) == "\\u0001");
}

TEST_CASE("json format writes one escaped JSON object per line") {
  // Redirect stderr to a file for the duration of the test.
  char path[] = "/tmp/tcc-logging-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = dup(2);
  REQUIRE(dup2(fd, 2) == 2);
  REQUIRE(tcc::server::ConfigureLogging("info", "json").ok());
  spdlog::info("gid={} branch={} said \"no\"", "g1", "b1");
  spdlog::debug("not shown at info");
  spdlog::default_logger()->flush();
  REQUIRE(dup2(saved, 2) == 2);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  const std::string out = text.str();
  CHECK(out.find(R"("level":"info","msg":"gid=g1 branch=b1 said \"no\""})") !=
        std::string::npos);
  CHECK(out.find("not shown") == std::string::npos);
  spdlog::drop("tccd");
}

TEST_CASE("bad level or format is refused") {
  CHECK(tcc::server::ConfigureLogging("loud", "text").code() ==
        absl::StatusCode::kInvalidArgument);
  spdlog::drop("tccd");
  CHECK(tcc::server::ConfigureLogging("info", "xml").code() ==
        absl::StatusCode::kInvalidArgument);
  spdlog::drop("tccd");
}
