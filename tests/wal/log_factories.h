// The Log implementations the conformance suite runs against: each factory
// makes a fresh, empty log over its own storage.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tcc/etcd/client.h"
#include "tcc/etcd/lease_keeper.h"
#include "tcc/wal/etcd_log.h"
#include "tcc/wal/log.h"
#include "temp_dir.h"

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
  // Whether Stats() gives oldest_unfinished_registered_ms (log.h).
  bool tracks_oldest_unfinished = true;
};

std::vector<LogFactory> LogFactories();

// The etcd log over a cluster of its own under a fresh key prefix of the
// fixture's etcd (or of `endpoints`), its lease kept alive by the harness,
// every shard taken at each (re)open.
struct EtcdHarnessOptions {
  std::vector<std::string> endpoints;  // empty: the fixture's
  uint32_t shards = 1;
  size_t max_txn_ops = 1024;
  size_t max_request_bytes = 4 << 20;
  int max_message_bytes = 0;  // the client's (0: its default)
};

class EtcdHarness final : public LogHarness {
 public:
  explicit EtcdHarness(const RetentionPolicy& retention,
                       EtcdHarnessOptions options = {});
  ~EtcdHarness() override;
  Log& log() override;
  void Reopen() override;
  EtcdLog& etcd_log() { return *log_; }
  etcd::Client& client() { return *client_; }
  const std::string& prefix() const { return prefix_; }
  int64_t lease_id() const { return keeper_->lease_id(); }
  EtcdLogOptions& log_options() { return log_options_; }

 private:
  EtcdHarnessOptions options_;
  TempDir archive_dir_;
  std::unique_ptr<etcd::Client> client_;
  std::string prefix_;
  std::unique_ptr<etcd::LeaseKeeper> keeper_;
  EtcdLogOptions log_options_;
  std::unique_ptr<EtcdLog> log_;
};

}  // namespace tcc::wal::testing
