// RocksDB's info log, sent to a sink the embedding process chooses (tccd:
// spdlog) instead of a LOG file in the database's own directory: on a full
// disk RocksDB's LOG writer aborts the process (an assertion) when it writes
// again after a failed write, and what it has to log then is that the disk
// is full. Warnings and errors reach the sink; informational lines and the
// header (the options dump at every open) do not.
//
// Thread-safe: RocksDB logs from any of its threads, so the sink must be
// callable from any thread. An exception from the sink is swallowed (none
// may reach RocksDB).
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace rocksdb {
class Logger;
}  // namespace rocksdb

namespace tcc::rocksdb_env {

enum class InfoLogSeverity { kWarning, kError };

// `message` is one line, without a trailing newline.
using InfoLogSink =
    std::function<void(InfoLogSeverity severity, std::string_view message)>;

// The logger to set as rocksdb::Options::info_log. A null sink writes each
// line to stderr, prefixed "rocksdb: ".
std::shared_ptr<rocksdb::Logger> NewInfoLog(InfoLogSink sink);

}  // namespace tcc::rocksdb_env
