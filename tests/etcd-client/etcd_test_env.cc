#include "etcd_test_env.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tcc::etcd::testing {
namespace {

std::string ScriptPath() { return TCC_SOURCE_DIR "/scripts/etcd.sh"; }

std::string EnvValue(const std::string& file, const std::string& name) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = "export " + name + "=";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

}  // namespace

std::vector<std::string> SharedEtcdEndpoints() {
  const char* file = std::getenv("TCC_ETCD_ENV_FILE");
  std::string endpoints;
  if (file != nullptr) {
    endpoints = EnvValue(file, "TCC_ETCD_ENDPOINTS");
    if (endpoints.empty()) {
      FAIL("no TCC_ETCD_ENDPOINTS in " << file
                                       << " (did the etcd fixture start? see "
                                          "scripts/etcd.sh)");
    }
  } else if (const char* e = std::getenv("TCC_ETCD_ENDPOINTS");
             e != nullptr && *e) {
    endpoints = e;
  } else {
    FAIL(
        "no etcd: run under ctest (the etcd fixture), or set "
        "TCC_ETCD_ENDPOINTS (eval \"$(scripts/etcd.sh start)\")");
  }
  return absl::StrSplit(endpoints, ',', absl::SkipEmpty());
}

std::string UniqueKeyPrefix(const std::string& name) {
  static std::atomic<int> n{0};
  return absl::StrCat("/tcc-test/", ::getpid(), "-", n++, "-", name, "/");
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    EtcdClusterOptions options) {
  static std::atomic<int> n{0};
  const std::string env_file =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("tcc-etcd-test-", ::getpid(), "-", n++, ".env"))
          .string();
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(options, env_file));
  // --owner-pid: the script stops the cluster when this process is gone,
  // even if it never runs the destructor (a test killed by its timeout).
  std::string args = absl::StrCat("start --members ", options.members,
                                  " --owner-pid ", ::getpid());
  if (options.tls) args += " --tls";
  if (options.auth) {
    absl::StrAppend(&args, " --auth --auth-token-ttl ",
                    options.auth_token_ttl_s);
  }
  if (options.quota_backend_bytes > 0) {
    absl::StrAppend(&args, " --quota-backend-bytes ",
                    options.quota_backend_bytes);
  }
  if (options.max_txn_ops > 0) {
    absl::StrAppend(&args, " --max-txn-ops ", options.max_txn_ops);
  }
  absl::StrAppend(&args, " ", env_file);
  if (absl::Status s = cluster->Script(args); !s.ok()) return s;
  cluster->dir_ = EnvValue(env_file, "TCC_ETCD_DIR");
  cluster->endpoints_ = absl::StrSplit(EnvValue(env_file, "TCC_ETCD_ENDPOINTS"),
                                       ',', absl::SkipEmpty());
  if (cluster->endpoints_.empty()) {
    return absl::InternalError("etcd.sh start wrote no endpoints");
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  (void)Script("stop " + env_file_);  // removes the env file too
  std::error_code ec;
  std::filesystem::remove(env_file_, ec);  // a failed start leaves it
}

absl::Status EtcdCluster::Script(const std::string& args) const {
  const std::string command =
      absl::StrCat("bash ", ScriptPath(), " ", args, " >/dev/null");
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("`", command, "` exited with ", rc));
  }
  return absl::OkStatus();
}

ClientOptions EtcdCluster::Client() const {
  ClientOptions o;
  o.endpoints = endpoints_;
  if (options_.tls) {
    o.tls = true;
    o.tls_files.ca_file = dir_ + "/ca.pem";
    o.tls_files.cert_file = dir_ + "/client.pem";
    o.tls_files.key_file = dir_ + "/client-key.pem";
  }
  if (options_.auth) {
    o.user = "tcc";
    o.password = "tcc-password";
  }
  return o;
}

absl::Status EtcdCluster::KillMember(int n) {
  return Script(absl::StrCat("kill-member ", n, " ", env_file_));
}
absl::Status EtcdCluster::StopMember(int n) {
  return Script(absl::StrCat("stop-member ", n, " ", env_file_));
}
absl::Status EtcdCluster::StartMember(int n) {
  return Script(absl::StrCat("start-member ", n, " ", env_file_));
}
absl::Status EtcdCluster::StartMembers(const std::vector<int>& members) {
  return Script(absl::StrCat("start-member ", absl::StrJoin(members, ","), " ",
                             env_file_));
}

absl::Status EtcdCluster::FreeSpace(const std::string& prefix) {
  return Script(absl::StrCat("free-space '", prefix, "' ", env_file_));
}

int EtcdCluster::MemberPid(int n) const {
  std::ifstream in(absl::StrCat(dir_, "/m", n, ".pid"));
  int pid = 0;
  in >> pid;
  return pid;
}

absl::Status EtcdCluster::PauseMember(int n) {
  const int pid = MemberPid(n);
  if (pid <= 0 || ::kill(pid, SIGSTOP) != 0) {
    return absl::InternalError(absl::StrCat("can't stop member ", n));
  }
  return absl::OkStatus();
}

absl::Status EtcdCluster::ResumeMember(int n) {
  const int pid = MemberPid(n);
  if (pid <= 0 || ::kill(pid, SIGCONT) != 0) {
    return absl::InternalError(absl::StrCat("can't continue member ", n));
  }
  return absl::OkStatus();
}

}  // namespace tcc::etcd::testing
