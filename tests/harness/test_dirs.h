// What integration tests share: status checks for Catch2, temp dirs that go
// away with the test (kept when TCC_KEEP_TEST_DIRS is set, to read logs), and
// reading a file whole.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"

#define CHECK_OK(expr)              \
  do {                              \
    const absl::Status s_ = (expr); \
    INFO(s_.ToString());            \
    CHECK(s_.ok());                 \
  } while (0)

#define REQUIRE_OK(expr)            \
  do {                              \
    const absl::Status s_ = (expr); \
    INFO(s_.ToString());            \
    REQUIRE(s_.ok());               \
  } while (0)

namespace tcc::harness {

// A new directory /tmp/PREFIX-XXXXXX.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/" +
                     prefix + "-XXXXXX";
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

// Removes `dir` when it goes out of scope.
struct Cleanup {
  std::string dir;
  ~Cleanup() {
    if (std::getenv("TCC_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// The whole contents of `path` ("" if it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tcc::harness
