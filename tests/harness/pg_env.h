// The test PostgreSQL server's URL (scripts/pg.sh; the ctest "postgres"
// fixture writes TCC_PG_ENV_FILE). For Catch2 tests only: FAILs the test
// when there is none.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tcc::testing {

inline std::string PostgresUrl() {
  if (const char* file = std::getenv("TCC_PG_ENV_FILE"); file != nullptr) {
    std::ifstream in(file);
    std::string line;
    const std::string prefix = "export TCC_PG_URL=";
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    FAIL("no TCC_PG_URL in " << file
                             << " (did the postgres fixture start? see "
                                "scripts/pg.sh)");
  }
  if (const char* url = std::getenv("TCC_PG_URL"); url != nullptr && *url) {
    return url;
  }
  FAIL(
      "PostgreSQL is required: set TCC_PG_ENV_FILE or TCC_PG_URL "
      "(eval \"$(scripts/pg.sh start)\")");
  return "";
}

}  // namespace tcc::testing
