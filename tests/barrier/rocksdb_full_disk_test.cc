// RocksDbBarrierStore on a disk that fills (a small tmpfs the test mounts;
// needs root): commits fail with a "no space" error, the store stops (no
// commit is acknowledged durable after that, even with room again), opening
// it again on the full disk is refused with that error, the process never
// aborts, and with room again everything acknowledged before is there.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tcc/barrier/rocksdb_store.h"
#include "test_dirs.h"
#include "tmpfs_mount.h"

namespace tcc::barrier {
namespace {

using harness::TmpfsMount;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kThreads = 4;
constexpr int kMaxCommitsPerThread = 4000;  // 1 MiB fills long before

// Commits key = value; with group commit, waits for WhenDurable as a
// participant does before it answers. OK once durable.
absl::Status CommitDurably(RocksDbBarrierStore& store, const std::string& key,
                           const std::string& value) {
  auto txn = store.Begin();
  if (!txn.ok()) return txn.status();
  if (absl::Status s = (*txn)->Put(key, value); !s.ok()) return s;
  if (absl::Status s = (*txn)->Commit(); !s.ok()) return s;
  std::promise<absl::Status> durable;
  store.WhenDurable([&](absl::Status s) { durable.set_value(std::move(s)); });
  return durable.get_future().get();
}

TEST_CASE("a RocksDB barrier store on a full disk stops, and does not abort") {
  const bool group_commit = GENERATE(true, false);
  INFO((group_commit ? "group commit" : "a synced commit each"));
  const std::string root = harness::MakeTempDir("tcc-barrier-full-disk");
  harness::Cleanup cleanup{root};
  auto disk = TmpfsMount::Mount(root + "/disk", 1 * kMiB);
  INFO(disk.status().ToString());
  REQUIRE(disk.ok());
  const std::string path = (*disk)->dir() + "/store";
  const RocksDbBarrierStore::Options options{.path = path,
                                             .group_commit = group_commit};
  const std::string value(2048, 'v');
  std::map<std::string, std::string> durable;  // acknowledged
  {
    auto store = RocksDbBarrierStore::Open(options);
    INFO(store.status().ToString());
    REQUIRE(store.ok());
    std::mutex mu;
    std::atomic<bool> failed{false};
    std::string first_error;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kMaxCommitsPerThread && !failed; ++i) {
          const std::string key = absl::StrCat("k", t, "-", i);
          absl::Status s = CommitDurably(**store, key, value);
          std::lock_guard<std::mutex> lock(mu);
          if (s.ok()) {
            durable[key] = value;
          } else if (!failed.exchange(true)) {
            first_error = s.ToString();
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    INFO(first_error);
    REQUIRE(failed);
    CHECK(absl::AsciiStrToLower(first_error).find("no space left on device") !=
          std::string::npos);
    REQUIRE(!durable.empty());

    // Stopped: with room again, nothing more is acknowledged durable.
    REQUIRE((*disk)->Resize(64 * kMiB).ok());
    CHECK_FALSE(CommitDurably(**store, "after", value).ok());
  }
  // Full again (the same size, or a filler file where the closed store left
  // room): opening is refused, saying why.
  REQUIRE((*disk)->Resize(1 * kMiB).ok());
  REQUIRE((*disk)->Fill("filler").ok());
  {
    auto full = RocksDbBarrierStore::Open(options);
    INFO(full.status().ToString());
    REQUIRE_FALSE(full.ok());
    CHECK(absl::AsciiStrToLower(full.status().message())
              .find("no space left on device") != std::string::npos);
  }
  REQUIRE((*disk)->Resize(64 * kMiB).ok());
  auto reopened = RocksDbBarrierStore::Open(options);
  INFO(reopened.status().ToString());
  REQUIRE(reopened.ok());
  auto txn = (*reopened)->Begin();
  REQUIRE(txn.ok());
  for (const auto& [key, v] : durable) {
    auto got = (*txn)->Get(key);
    INFO(key << ": " << got.status().ToString());
    REQUIRE(got.ok());
    CHECK(got->value_or("") == v);
  }
}

}  // namespace
}  // namespace tcc::barrier
