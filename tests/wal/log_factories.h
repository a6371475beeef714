// The Log implementations the conformance suite runs against: each factory
// makes a fresh, empty log over its own storage.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tcc/wal/log.h"

namespace tcc::wal::testing {

class LogHarness {
 public:
  virtual ~LogHarness() = default;
  virtual Log& log() = 0;
  // Closes the log and opens it again over the same storage (a clean
  // restart: everything acknowledged is kept).
  virtual void Reopen() = 0;
};

struct LogFactory {
  std::string name;
  std::function<std::unique_ptr<LogHarness>(const RetentionPolicy&)> make;
};

std::vector<LogFactory> LogFactories();

}  // namespace tcc::wal::testing
