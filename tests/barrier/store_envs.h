// Test environments, one per BarrierStore implementation, so the same test
// body runs on every store: a fresh, empty store on real parts (RocksDB in a
// temporary directory, PostgreSQL in a schema of its own on the server the
// "postgres" CTest fixture started), removed afterwards.
//
// PostgreSQL is found through the file named by TCC_PG_ENV_FILE (written by
// `scripts/pg.sh start FILE`, the fixture) or else TCC_PG_URL. A test that
// needs it and finds neither FAILS: it never skips.
#pragma once

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pqxx/pqxx>
#include <string>

#include "../harness/pg_env.h"
#include "tcc/barrier/memory_store.h"
#include "tcc/barrier/postgres_store.h"
#include "tcc/barrier/rocksdb_store.h"

namespace tcc::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "tcc-test.XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct StoreOptions {
  std::chrono::milliseconds lock_timeout{2000};
};

class MemoryEnv {
 public:
  static constexpr const char* kName = "memory";
  explicit MemoryEnv(StoreOptions o = {})
      : store_(barrier::MemoryBarrierStore::Options{o.lock_timeout}) {}
  barrier::MemoryBarrierStore& store() { return store_; }

 private:
  barrier::MemoryBarrierStore store_;
};

class RocksDbEnv {
 public:
  static constexpr const char* kName = "rocksdb";
  explicit RocksDbEnv(StoreOptions o = {}) {
    auto opened = barrier::RocksDbBarrierStore::Open(
        {.path = dir_.path() + "/db", .lock_timeout = o.lock_timeout});
    REQUIRE(opened.ok());
    store_ = std::move(*opened);
  }
  barrier::RocksDbBarrierStore& store() { return *store_; }

 private:
  TempDir dir_;
  std::unique_ptr<barrier::RocksDbBarrierStore> store_;
};

// RocksDB with group commit: commits return before they are durable, and
// WhenDurable waits for the syncer.
class RocksDbGroupCommitEnv {
 public:
  static constexpr const char* kName = "rocksdb-group-commit";
  explicit RocksDbGroupCommitEnv(StoreOptions o = {}) {
    auto opened =
        barrier::RocksDbBarrierStore::Open({.path = dir_.path() + "/db",
                                            .lock_timeout = o.lock_timeout,
                                            .group_commit = true});
    REQUIRE(opened.ok());
    store_ = std::move(*opened);
  }
  barrier::RocksDbBarrierStore& store() { return *store_; }

 private:
  TempDir dir_;
  std::unique_ptr<barrier::RocksDbBarrierStore> store_;
};

class PostgresEnv {
 public:
  static constexpr const char* kName = "postgres";
  explicit PostgresEnv(StoreOptions o = {}) : url_(PostgresUrl()) {
    static std::atomic<int> counter{0};
    schema_ = "t_" + std::to_string(getpid()) + "_" +
              std::to_string(counter.fetch_add(1));
    auto opened = barrier::PostgresBarrierStore::Open(
        {.url = url_, .schema = schema_, .lock_timeout = o.lock_timeout});
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    store_ = std::move(*opened);
  }
  ~PostgresEnv() {
    store_.reset();
    try {
      pqxx::connection conn(url_);
      pqxx::work w(conn);
      w.exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      w.commit();
    } catch (const std::exception&) {
      // The server is going away with the fixture anyway.
    }
  }
  barrier::PostgresBarrierStore& store() { return *store_; }
  const std::string& url() const { return url_; }
  const std::string& schema() const { return schema_; }

 private:
  std::string url_;
  std::string schema_;
  std::unique_ptr<barrier::PostgresBarrierStore> store_;
};

}  // namespace tcc::testing
