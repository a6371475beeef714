#include "log_factories.h"

#include <catch2/catch.hpp>

#include "tcc/wal/memory_log.h"
#include "tcc/wal/rocksdb_log.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

class MemoryHarness final : public LogHarness {
 public:
  explicit MemoryHarness(const RetentionPolicy& retention)
      : log_(Options(retention)) {}
  Log& log() override { return log_; }
  void Reopen() override { log_.Crash(log_.Unsynced()); }

 private:
  static MemoryLogOptions Options(const RetentionPolicy& retention) {
    MemoryLogOptions options;
    options.retention = retention;
    return options;
  }
  MemoryLog log_;
};

class RocksDbHarness final : public LogHarness {
 public:
  explicit RocksDbHarness(const RetentionPolicy& retention) {
    options_.data_dir = dir_.str();
    options_.retention = retention;
    Reopen();
  }
  Log& log() override { return *log_; }
  void Reopen() override {
    log_.reset();
    absl::StatusOr<std::unique_ptr<RocksDbLog>> opened =
        RocksDbLog::Open(options_);
    REQUIRE(opened.ok());
    log_ = *std::move(opened);
  }

 private:
  TempDir dir_;
  RocksDbLogOptions options_;
  std::unique_ptr<RocksDbLog> log_;
};

}  // namespace

std::vector<LogFactory> LogFactories() {
  std::vector<LogFactory> factories;
  factories.push_back({"memory", [](const RetentionPolicy& retention) {
                         return std::make_unique<MemoryHarness>(retention);
                       }});
  factories.push_back({"rocksdb", [](const RetentionPolicy& retention) {
                         return std::make_unique<RocksDbHarness>(retention);
                       }});
  return factories;
}

}  // namespace tcc::wal::testing
