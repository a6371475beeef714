#include "log_factories.h"

#include <catch2/catch.hpp>

#include "etcd_test_env.h"
#include "tcc/etcd/lease_keeper.h"
#include "tcc/wal/etcd_log.h"
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

EtcdHarness::EtcdHarness(const RetentionPolicy& retention,
                         EtcdHarnessOptions options)
    : options_(std::move(options)) {
  if (options_.endpoints.empty()) {
    options_.endpoints = etcd::testing::SharedEtcdEndpoints();
  }
  etcd::ClientOptions co;
  co.endpoints = options_.endpoints;
  if (options_.max_message_bytes > 0) {
    co.max_message_bytes = options_.max_message_bytes;
  }
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Connect(co);
  REQUIRE(client.ok());
  client_ = *std::move(client);
  prefix_ = etcd::testing::UniqueKeyPrefix("wal");
  absl::StatusOr<ClusterInfo> cluster =
      InitCluster(*client_, prefix_, options_.shards);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeeper>> keeper =
      etcd::LeaseKeeper::Grant(
          *client_,
          etcd::LeaseKeeperOptions{.ttl_ms = 10000, .margin_ms = 1000},
          etcd::SystemBootClock::Default(), nullptr);
  REQUIRE(keeper.ok());
  keeper_ = *std::move(keeper);
  log_options_.client = client_.get();
  log_options_.key_prefix = prefix_;
  log_options_.node_id = "node-1";
  log_options_.node_address = "127.0.0.1:1";
  log_options_.lease_id = keeper_->lease_id();
  log_options_.archive_dir = (archive_dir_.path() / "archive").string();
  log_options_.retention = retention;
  log_options_.max_txn_ops = options_.max_txn_ops;
  log_options_.max_request_bytes = options_.max_request_bytes;
  Reopen();
}

EtcdHarness::~EtcdHarness() {
  log_.reset();
  keeper_.reset();
}

Log& EtcdHarness::log() { return *log_; }

void EtcdHarness::Reopen() {
  log_.reset();
  absl::StatusOr<std::unique_ptr<EtcdLog>> opened = EtcdLog::Open(log_options_);
  INFO(opened.status().ToString());
  REQUIRE(opened.ok());
  log_ = *std::move(opened);
  for (uint32_t k = 0; k < log_->shard_count(); ++k) {
    absl::StatusOr<uint64_t> epoch = log_->TakeOwnerEpoch(k);
    INFO(epoch.status().ToString());
    REQUIRE(epoch.ok());
  }
}

std::vector<LogFactory> LogFactories() {
  std::vector<LogFactory> factories;
  factories.push_back({"memory", [](const RetentionPolicy& retention) {
                         return std::make_unique<MemoryHarness>(retention);
                       }});
  factories.push_back({"rocksdb", [](const RetentionPolicy& retention) {
                         return std::make_unique<RocksDbHarness>(retention);
                       }});
  factories.push_back({"etcd",
                       [](const RetentionPolicy& retention) {
                         return std::make_unique<EtcdHarness>(retention);
                       },
                       /*tracks_oldest_unfinished=*/false});
  // The same with 4 shards: the suite's gids spread over them, so a group's
  // Txn carries several shards' fences (one nested Txn each) and the reads
  // and scans go shard by shard.
  factories.push_back({"etcd-4-shards",
                       [](const RetentionPolicy& retention) {
                         EtcdHarnessOptions options;
                         options.shards = 4;
                         return std::make_unique<EtcdHarness>(retention,
                                                              options);
                       },
                       /*tracks_oldest_unfinished=*/false});
  return factories;
}

}  // namespace tcc::wal::testing
