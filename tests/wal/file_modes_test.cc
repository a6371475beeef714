// The log's files and directories are its owner's alone (mode & 077 == 0),
// on the OS's file system and on an injected one, whatever the umask; a
// data dir left looser is tightened at open, with a warning to info_log.
// Large records are kept in blob files (owner-only too).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "fault_injection_fs.h"
#include "log_test_util.h"
#include "tcc/wal/rocksdb_log.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

namespace fs = std::filesystem;

struct Umask {
  explicit Umask(mode_t mask) : old(::umask(mask)) {}
  ~Umask() { ::umask(old); }
  mode_t old;
};

// Every entry under `dir` (and `dir`) whose mode lets group or others in.
std::vector<std::string> OpenToOthers(const fs::path& dir) {
  std::vector<fs::path> all = {dir};
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    all.push_back(e.path());
  }
  std::vector<std::string> out;
  for (const fs::path& p : all) {
    struct stat st;
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    if ((st.st_mode & 077) != 0) out.push_back(p.string());
  }
  return out;
}

// Opens, writes (and, reopened, flushes the WAL into a table file), closes.
void UseLog(const RocksDbLogOptions& options, const std::string& prefix) {
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
    INFO(log.status().ToString());
    REQUIRE(log.ok());
    REQUIRE((*log)->TakeOwnerEpoch(0).ok());
    const std::string gid = prefix + std::to_string(round);
    REQUIRE(AppendAndWait(**log, Req(gid, {MakeRegistered(gid, 1)})).ok());
  }
}

TEST_CASE("the log's files and directories are the owner's alone") {
  const bool injected = GENERATE(false, true);
  INFO((injected ? "an injected file system" : "the OS's file system"));
  Umask umask(0);
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = (dir.path() / "data").string();  // the log creates it
  if (injected) options.file_system = std::make_shared<FaultInjectionFs>();
  UseLog(options, "g");
  bool has_table = false;
  for (const auto& e : fs::directory_iterator(dir.path() / "data" / "db")) {
    has_table = has_table || e.path().extension() == ".sst";
  }
  CHECK(has_table);
  const std::vector<std::string> open = OpenToOthers(dir.path() / "data");
  INFO((open.empty() ? "" : open.front()));
  CHECK(open.empty());
}

TEST_CASE("large records go to blob files, owner-only, and read back whole") {
  // Registrations of a few KiB and more are kept in RocksDB's blob files
  // once flushed (rocksdb_log.cc, kBlobMinBytes), where compactions do not
  // copy them again; small records stay in the tables.
  Umask umask(0);
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  auto payload = [](int i) {
    return std::string(16 * 1024, static_cast<char>('a' + i % 26));
  };
  for (int round = 0; round < 3; ++round) {  // write; flushed at reopen; read
    absl::StatusOr<std::unique_ptr<RocksDbLog>> log = RocksDbLog::Open(options);
    INFO(log.status().ToString());
    REQUIRE(log.ok());
    REQUIRE((*log)->TakeOwnerEpoch(0).ok());
    for (int i = 0; i < 20; ++i) {
      const std::string gid = "big" + std::to_string(i);
      if (round == 0) {
        Registered r = MakeRegistered(gid, 1, {"p1", "p2"});
        for (BranchSpec& b : r.branches) b.payload = payload(i);
        REQUIRE(AppendAndWait(**log, Req(gid, {r})).ok());
        REQUIRE(AppendAndWait(**log, Req("small" + std::to_string(i),
                                         {MakeRegistered(
                                             "small" + std::to_string(i), 1)}))
                    .ok());
      }
      absl::StatusOr<TxnLog> t = (*log)->Read(gid);
      REQUIRE(t.ok());
      REQUIRE(t->records.size() == 1);
      const Registered& r = std::get<Registered>(t->records[0]);
      REQUIRE(r.branches.size() == 2);
      CHECK(r.branches[1].payload == payload(i));
      CHECK((*log)->Read("small" + std::to_string(i)).ok());
    }
  }
  size_t blobs = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "db")) {
    if (e.path().extension() == ".blob") ++blobs;
  }
  CHECK(blobs > 0);
  const std::vector<std::string> open = OpenToOthers(dir.path());
  INFO((open.empty() ? "" : open.front()));
  CHECK(open.empty());
}

TEST_CASE("a data dir left open to others is tightened at open") {
  Umask umask(0);
  TempDir dir;
  RocksDbLogOptions options;
  options.data_dir = dir.str();
  std::mutex mu;
  std::vector<std::string> warnings;
  options.info_log = [&](rocksdb_env::InfoLogSeverity, std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    warnings.emplace_back(line);
  };
  UseLog(options, "before");
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    fs::permissions(e.path(),
                    e.is_directory() ? fs::perms(0755) : fs::perms(0644));
  }
  fs::permissions(dir.path(), fs::perms(0755));
  REQUIRE_FALSE(OpenToOthers(dir.path()).empty());
  {
    std::lock_guard<std::mutex> lock(mu);
    warnings.clear();
  }
  UseLog(options, "after");
  CHECK(OpenToOthers(dir.path()).empty());
  bool warned = false;
  for (const std::string& w : warnings) {
    warned = warned || w.find("made owner-only") != std::string::npos;
  }
  CHECK(warned);
}

}  // namespace
}  // namespace tcc::wal::testing
