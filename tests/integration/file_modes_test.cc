// What tccd and tcc-bank leave on disk is theirs alone: no file or folder
// under tccd's data dir or a bank's RocksDB store may be readable or
// writable by group or others (mode & 077 == 0), even under umask 0; a data
// dir left looser (by an older tccd) is tightened at the next start; and
// RocksDB keeps no LOG file there (issue 19).
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "test_dirs.h"

namespace {

namespace fs = std::filesystem;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;

// Sets the umask for the test's life: the children inherit it.
struct Umask {
  explicit Umask(mode_t mask) : old(::umask(mask)) {}
  ~Umask() { ::umask(old); }
  mode_t old;
};

mode_t ModeOf(const fs::path& path) {
  struct stat st;
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode;
}

// `dir` itself and everything under it.
std::vector<fs::path> Tree(const fs::path& dir) {
  std::vector<fs::path> out = {dir};
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    out.push_back(e.path());
  }
  return out;
}

// Every entry of the tree whose mode lets group or others in.
std::vector<std::string> OpenToOthers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::path& p : Tree(dir)) {
    const mode_t mode = ModeOf(p);
    if ((mode & 077) != 0) {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "%04o", mode & 07777);
      out.push_back(absl::StrCat(p.string(), " ", octal));
    }
  }
  return out;
}

bool HasRocksDbInfoLog(const fs::path& dir) {
  for (const fs::path& p : Tree(dir)) {
    const std::string name = p.filename().string();
    if (name == "LOG" || name.rfind("LOG.old", 0) == 0) return true;
  }
  return false;
}

void RunSomeTransfers(BankCluster& c) {
  for (int i = 0; i < 20; ++i) {
    auto req = c.Transfer("bank-a", i % 10, "bank-b", (i + 3) % 10, 1);
    auto r = c.client().Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
  }
}

void StopAll(BankCluster& c) {
  absl::StatusOr<int> stopped = c.StopTccd();
  REQUIRE(stopped.ok());
  REQUIRE(WIFEXITED(*stopped));
  REQUIRE(WEXITSTATUS(*stopped) == 0);
  c.KillBank("bank-a");  // reaped: nothing writes any more
  c.KillBank("bank-b");
}

void CheckOwnerOnly(const std::string& root) {
  for (const std::string name : {"tccd", "bank-a", "bank-b"}) {
    const fs::path dir = fs::path(root) / name;
    INFO(dir.string());
    REQUIRE(fs::is_directory(dir));
    const std::vector<std::string> open = OpenToOthers(dir);
    INFO(open.size() << " entries open to group or others, e.g. "
                     << (open.empty() ? "" : open.front()));
    CHECK(open.empty());
    CHECK_FALSE(HasRocksDbInfoLog(dir));
  }
}

ClusterOptions Options(const std::string& root) {
  ClusterOptions o;
  o.root_dir = root;
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = 10;
  return o;
}

}  // namespace

TEST_CASE("tccd's data dir and a bank's store are the owner's alone") {
  const std::string root = tcc::harness::MakeTempDir("tccd-it-modes");
  tcc::harness::Cleanup cleanup{root};
  Umask umask(0);  // nothing may rest on the caller's umask
  BankCluster c(Options(root));
  REQUIRE(c.Start().ok());
  RunSomeTransfers(c);
  StopAll(c);
  CheckOwnerOnly(root);
}

TEST_CASE("a data dir left open to others is made the owner's at start") {
  const std::string root = tcc::harness::MakeTempDir("tccd-it-modes-loose");
  tcc::harness::Cleanup cleanup{root};
  Umask umask(0);
  BankCluster c(Options(root));
  REQUIRE(c.Start().ok());
  RunSomeTransfers(c);
  StopAll(c);
  // What an older tccd left: directories 0755, files 0644.
  for (const std::string name : {"tccd", "bank-a", "bank-b"}) {
    for (const fs::path& p : Tree(fs::path(root) / name)) {
      REQUIRE(::chmod(p.c_str(), fs::is_directory(p) ? 0755 : 0644) == 0);
    }
  }
  REQUIRE(c.StartBank("bank-a").ok());
  REQUIRE(c.StartBank("bank-b").ok());
  REQUIRE(c.StartTccd().ok());
  RunSomeTransfers(c);
  StopAll(c);
  CheckOwnerOnly(root);
  const std::string tccd_log = tcc::harness::ReadFile(root + "/tccd.log");
  CHECK(tccd_log.find("made owner-only") != std::string::npos);
}
