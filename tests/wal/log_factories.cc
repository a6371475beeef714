#include "log_factories.h"

#include "tcc/wal/memory_log.h"

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

}  // namespace

std::vector<LogFactory> LogFactories() {
  std::vector<LogFactory> factories;
  factories.push_back({"memory", [](const RetentionPolicy& retention) {
                         return std::make_unique<MemoryHarness>(retention);
                       }});
  return factories;
}

}  // namespace tcc::wal::testing
