// The admin token file: format, limits and permissions.
#include "server/admin_tokens.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using tcc::server::LoadAdminTokens;
using tcc::server::ParseAdminTokens;

namespace {

std::string ErrorOf(const std::string& text) {
  auto t = ParseAdminTokens(text, "tokens");
  REQUIRE(!t.ok());
  CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

}  // namespace

TEST_CASE("token file: NAME TOKEN lines, comments, blank lines") {
  auto t = ParseAdminTokens(
      "# operators\n\nalice 0123456789abcdef0123\n  bob\tfedcba9876543210  \n",
      "tokens");
  REQUIRE(t.ok());
  CHECK(t->size() == 2);
  CHECK(t->at("0123456789abcdef0123") == "alice");
  CHECK(t->at("fedcba9876543210") == "bob");
}

TEST_CASE("token file: bad lines are refused with file and line") {
  CHECK(ErrorOf("alice\n").find("tokens:1: expected 'NAME TOKEN'") !=
        std::string::npos);
  CHECK(ErrorOf("# c\nalice short\n").find("tokens:2: token must be 16") !=
        std::string::npos);
  CHECK(ErrorOf("al!ce 0123456789abcdef\n").find("name 'al!ce'") !=
        std::string::npos);
  CHECK(ErrorOf("a 0123456789abcdef\nb 0123456789abcdef\n")
            .find("tokens:2: token repeated") != std::string::npos);
  CHECK(ErrorOf("# nothing\n").find("no tokens") != std::string::npos);
  CHECK(ErrorOf("a b c\n").find("expected") != std::string::npos);
}

TEST_CASE("token file: must not be readable by group or others") {
  std::string dir =
      std::filesystem::temp_directory_path().string() + "/tcc-tokens-XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const std::string path = dir + "/tokens";
  std::ofstream(path) << "alice 0123456789abcdef\n";
  REQUIRE(chmod(path.c_str(), 0640) == 0);
  auto refused = LoadAdminTokens(path);
  REQUIRE(!refused.ok());
  CHECK(std::string(refused.status().message()).find("chmod 600") !=
        std::string::npos);
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  auto ok = LoadAdminTokens(path);
  REQUIRE(ok.ok());
  CHECK(ok->at("0123456789abcdef") == "alice");
  CHECK(!LoadAdminTokens(dir + "/missing").ok());
  std::filesystem::remove_all(dir);
}
