#include "tcc/rocksdb_env/info_log.h"

#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>

#include "rocksdb/env.h"

namespace tcc::rocksdb_env {
namespace {

class SinkLogger final : public rocksdb::Logger {
 public:
  explicit SinkLogger(InfoLogSink sink)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL),
        sink_(std::move(sink)) {}

  void Logv(const char* /*format*/, va_list /*ap*/) override {
    // Lines without a level are informational: dropped.
  }
  void LogHeader(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override {
    if (level < rocksdb::InfoLogLevel::WARN_LEVEL ||
        level >= rocksdb::InfoLogLevel::HEADER_LEVEL) {
      return;
    }
    std::string line = Format(format, ap);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
      line.pop_back();
    }
    const InfoLogSeverity severity = level == rocksdb::InfoLogLevel::WARN_LEVEL
                                         ? InfoLogSeverity::kWarning
                                         : InfoLogSeverity::kError;
    try {
      if (sink_) {
        sink_(severity, line);
      } else {
        std::fprintf(stderr, "rocksdb: %s\n", line.c_str());
      }
    } catch (...) {
      // Nothing may propagate into RocksDB; the line is lost.
    }
  }

 private:
  static std::string Format(const char* format, va_list ap) {
    char small[512];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(small, sizeof(small), format, copy);
    va_end(copy);
    if (n < 0) return format;
    if (static_cast<size_t>(n) < sizeof(small)) return std::string(small, n);
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(out.data(), out.size(), format, ap);
    out.resize(static_cast<size_t>(n));
    return out;
  }

  const InfoLogSink sink_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewInfoLog(InfoLogSink sink) {
  return std::make_shared<SinkLogger>(std::move(sink));
}

}  // namespace tcc::rocksdb_env
