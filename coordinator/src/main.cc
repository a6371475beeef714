// tccd: flags and config -> server. The only code no test reaches.
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/config.h"
#include "server/logging.h"
#include "server/server.h"
#include "server/service_notify.h"
#include "server/tls.h"

namespace {

constexpr char kDefaultConfig[] = "config/tccd.yaml";

int Fail(const std::string& what) {
  std::fprintf(stderr, "tccd: %s\n", what.c_str());
  return 2;
}

// The exit code for a server that failed: 3 when the WAL's synced state is
// corrupt (DATA_LOSS; never restart it blindly), 4 for a fail-stop (a
// failed write or sync).
int FailureExitCode(const absl::Status& failure) {
  return absl::IsDataLoss(failure) ? 3 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil with mutex deadlock detection on; it costs ~5% of
  // CPU on the hot path and finds nothing a test would not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"tccd: TCC (Try-Confirm-Cancel) transaction coordinator"};
  std::string config_path;
  std::string data_dir, listen, admin_listen, metrics_listen, console_listen,
      log_level, log_format;
  std::string admin_token_file;
  std::vector<std::string> participants;
  bool allow_direct_targets = false;
  bool version = false;
  bool init_cluster = false;
  app.add_option("--config", config_path,
                 "path to tccd.yaml (default: config/tccd.yaml if present)");
  app.add_option("--data-dir", data_dir, "overrides data_dir");
  app.add_option("--listen", listen,
                 "overrides listen (host:port; port 0 picks one)");
  app.add_option("--admin-listen", admin_listen, "overrides admin_listen");
  app.add_option("--metrics-listen", metrics_listen,
                 "overrides metrics_listen ('off' turns metrics off)");
  app.add_option("--console-listen", console_listen,
                 "overrides console_listen (the web console; 'off': none)");
  app.add_option("--admin-token-file", admin_token_file,
                 "overrides admin.token_file");
  app.add_option("--log-level", log_level, "overrides log.level");
  app.add_option("--log-format", log_format, "overrides log.format");
  app.add_option("--participant", participants,
                 "NAME=HOST:PORT (gRPC) or NAME=http[s]://HOST:PORT[/PATH] "
                 "(HTTP), adds or overrides a participant (repeatable)");
  app.add_flag("--allow-direct-targets", allow_direct_targets,
               "overrides allow_direct_targets to true");
  app.add_flag("--version", version, "print the version and exit");
  app.add_flag("--init-cluster", init_cluster,
               "create the cluster under cluster.key_prefix in etcd (once: "
               "refused if one is there) and exit");
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::printf("tccd %s\n", TCC_VERSION);
    return 0;
  }

  tcc::server::Config config;
  if (config_path.empty()) {
    if (FILE* f = std::fopen(kDefaultConfig, "r"); f != nullptr) {
      std::fclose(f);
      config_path = kDefaultConfig;
    }
  }
  if (!config_path.empty()) {
    auto loaded = tcc::server::LoadConfigFile(config_path);
    if (!loaded.ok()) return Fail(loaded.status().ToString());
    config = *loaded;
  }
  if (!data_dir.empty()) config.data_dir = data_dir;
  if (!listen.empty()) config.listen = listen;
  if (!admin_listen.empty()) config.admin_listen = admin_listen;
  if (!console_listen.empty()) {
    config.console_listen = console_listen == "off" ? "" : console_listen;
  }
  if (!metrics_listen.empty()) {
    config.metrics_listen = metrics_listen == "off" ? "" : metrics_listen;
  }
  if (!admin_token_file.empty()) config.admin.token_file = admin_token_file;
  if (!log_level.empty()) config.log.level = log_level;
  if (!log_format.empty()) config.log.format = log_format;
  if (allow_direct_targets) config.allow_direct_targets = true;
  for (const auto& p : participants) {
    if (absl::Status s = tcc::server::AddParticipantFlag(config, p); !s.ok()) {
      return Fail(s.ToString());
    }
  }
  if (absl::Status s = tcc::server::ValidateConfig(config); !s.ok()) {
    return Fail(s.ToString());
  }
  if (absl::Status s = tcc::server::CheckTlsFiles(config); !s.ok()) {
    return Fail(s.ToString());
  }
  if (absl::Status s =
          tcc::server::ConfigureLogging(config.log.level, config.log.format);
      !s.ok()) {
    return Fail(s.ToString());
  }

  if (init_cluster) {
    absl::StatusOr<std::string> made = tcc::server::InitCluster(config);
    if (!made.ok()) {
      std::fprintf(stderr, "tccd: --init-cluster: %s\n",
                   made.status().ToString().c_str());
      return made.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::printf("tccd: %s\n", made->c_str());
    return 0;
  }

  // Signals are taken synchronously by this thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = tcc::server::Server::Start(config, TCC_VERSION);
  if (!server.ok()) {
    std::fprintf(stderr, "tccd: cannot start: %s\n",
                 server.status().ToString().c_str());
    switch (server.status().code()) {
      case absl::StatusCode::kDataLoss:
        return 3;
      case absl::StatusCode::kInvalidArgument:  // e.g. admin.token_file
        return 2;
      case absl::StatusCode::kResourceExhausted:  // no space on the data dir
        return 4;
      default:
        return 1;
    }
  }
  const std::string host = config.listen.substr(0, config.listen.rfind(':'));
  std::printf("tccd %s: data dir %s, admin port %d\n", TCC_VERSION,
              config.data_dir.c_str(), (*server)->admin_port());
  if (!config.metrics_listen.empty()) {
    std::printf("metrics: http://%s:%d/metrics\n", host.c_str(),
                (*server)->metrics_port());
  }
  if (!config.console_listen.empty()) {
    const std::string console_host =
        config.console_listen.substr(0, config.console_listen.rfind(':'));
    std::printf(
        "console: %s://%s:%d/\n",
        config.console.tls.mode == "tls" || config.console.tls.mode == "mtls"
            ? "https"
            : "http",
        console_host.c_str(), (*server)->console_port());
  }
  // The line scripts and tests wait for.
  std::printf("listening on %s:%d\n", host.c_str(), (*server)->port());
  std::fflush(stdout);
  tcc::server::NotifyReady(
      absl::StrCat("serving on ", host, ":", (*server)->port()));

  // Wait for SIGTERM/SIGINT, checking the WAL's health between waits.
  const timespec tick{0, 200 * 1000 * 1000};
  while (true) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      std::printf("tccd: signal %d, stopping\n", sig);
      std::fflush(stdout);
      tcc::server::NotifyStopping("stopping (signal)");
      break;
    }
    if (absl::Status failure = (*server)->Failure(); !failure.ok()) {
      std::fprintf(stderr, "tccd: stopping: %s\n", failure.ToString().c_str());
      tcc::server::NotifyStopping("fail-stop: " + failure.ToString());
      (void)(*server)->Stop();
      return FailureExitCode(failure);
    }
  }
  absl::Status stopped = (*server)->Stop();
  if (!stopped.ok()) {
    std::fprintf(stderr, "tccd: failed: %s\n", stopped.ToString().c_str());
    return FailureExitCode(stopped);
  }
  std::printf("tccd: stopped\n");
  return 0;
}
