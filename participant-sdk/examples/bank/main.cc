// tcc-bank: the bank demo participant.
//
//   tcc-bank --name bank-a --listen 127.0.0.1:0 --store rocksdb
//            --data-dir /var/lib/bank-a --accounts 100 --initial-balance 1000
//   tcc-bank --name bank-b --store postgres --pg-url "$TCC_PG_URL" ...
//   tcc-bank ... --tls-cert bank.pem --tls-key bank.key --tls-client-ca ca.pem
//            (mutual TLS: only callers with a certificate from ca.pem)
//
// Prints "listening on HOST:PORT" on stdout once it serves (so callers can
// listen on port 0; with --metrics-listen, a "metrics on HOST:PORT" line for
// Prometheus' /metrics comes first), then serves tcc.v1.Participant and
// tcc.examples.bank.Bank on that port until SIGTERM or SIGINT (exit 0). A
// start refused for want of space (the store's disk is full) exits 4, any
// other failed start 1.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "bank.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tcc/barrier/memory_store.h"
#include "tcc/barrier/postgres_store.h"
#include "tcc/barrier/rocksdb_store.h"
#include "tcc/clock/clock.h"
#include "tcc/participant/participant_server.h"

namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::cerr << "tcc-bank: " << what << ": " << s.ToString() << std::endl;
  return s.code() == absl::StatusCode::kResourceExhausted ? 4 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tcc-bank: the bank demo participant"};
  std::string name = "bank-a";
  std::string listen = "127.0.0.1:0";
  std::string store_kind = "rocksdb";
  std::string data_dir;
  std::string pg_url;
  std::string metrics_listen;
  uint32_t accounts = 10;
  int64_t initial_balance = 1000;
  int64_t clock_skew_ms = 5000;
  int64_t lock_timeout_ms = 2000;
  std::string log_level = "info";
  tcc::participant::ParticipantServerOptions server_options;
  app.add_option("--name", name, "participant name (also the PG schema)");
  app.add_option("--listen", listen, "host:port to serve on (port 0: any)");
  app.add_option("--store", store_kind, "rocksdb | postgres | memory")
      ->check(CLI::IsMember({"rocksdb", "postgres", "memory"}));
  app.add_option("--data-dir", data_dir, "RocksDB directory");
  app.add_option("--pg-url", pg_url, "PostgreSQL URL (default $TCC_PG_URL)");
  app.add_option("--accounts", accounts, "accounts created on first start");
  app.add_option("--initial-balance", initial_balance,
                 "balance of each new account");
  app.add_option("--clock-skew-ms", clock_skew_ms,
                 "allowed clock skew past a try-deadline");
  app.add_option("--lock-timeout-ms", lock_timeout_ms, "store lock wait");
  app.add_option("--metrics-listen", metrics_listen,
                 "host:port for Prometheus /metrics (off when empty)");
  app.add_option("--tls-cert", server_options.tls_cert_file,
                 "PEM certificate chain to serve TLS with (off: plaintext)");
  app.add_option("--tls-key", server_options.tls_key_file,
                 "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", server_options.tls_client_ca_file,
                 "mutual TLS: callers need a certificate chaining to this CA");
  app.add_option("--log-level", log_level,
                 "debug logs every call (gid, branch, attempt, owner epoch)")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  CLI11_PARSE(app, argc, argv);
  server_options.listen_address = listen;
  // gRPC locks absl::Mutex on every call; abseil's deadlock detection (on in
  // this build of abseil) keeps a lock graph for each, a few percent of the
  // process in profiles. tccd and the benchmark tools turn it off too.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Logs go to stderr: stdout carries only the "listening on" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Signals are taken synchronously by sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<tcc::barrier::BarrierStore> store;
  const std::chrono::milliseconds lock_timeout(lock_timeout_ms);
  if (store_kind == "rocksdb") {
    if (data_dir.empty()) {
      return Fail("flags",
                  absl::InvalidArgumentError("--data-dir is required"));
    }
    auto opened = tcc::barrier::RocksDbBarrierStore::Open(
        {.path = data_dir, .lock_timeout = lock_timeout, .group_commit = true});
    if (!opened.ok()) {
      return Fail("open rocksdb store " + data_dir, opened.status());
    }
    store = std::move(*opened);
  } else if (store_kind == "postgres") {
    if (pg_url.empty() && std::getenv("TCC_PG_URL") != nullptr) {
      pg_url = std::getenv("TCC_PG_URL");
    }
    std::string schema = name;
    std::replace(schema.begin(), schema.end(), '-', '_');
    std::replace(schema.begin(), schema.end(), '.', '_');
    std::transform(schema.begin(), schema.end(), schema.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    auto opened = tcc::barrier::PostgresBarrierStore::Open(
        {.url = pg_url, .schema = schema, .lock_timeout = lock_timeout});
    if (!opened.ok()) return Fail("open postgres", opened.status());
    store = std::move(*opened);
  } else {
    store = std::make_unique<tcc::barrier::MemoryBarrierStore>(
        tcc::barrier::MemoryBarrierStore::Options{lock_timeout});
  }
  if (absl::Status s =
          tcc::examples::bank::InitAccounts(*store, accounts, initial_balance);
      !s.ok()) {
    return Fail(
        "create accounts in " + (data_dir.empty() ? store_kind : data_dir), s);
  }

  auto registry = std::make_shared<prometheus::Registry>();
  tcc::participant::Participant participant(
      *store, tcc::clock::SystemClock::Default(),
      {.name = name, .barrier = {.clock_skew_ms = clock_skew_ms}}, registry);
  if (absl::Status s = tcc::examples::bank::RegisterActions(participant);
      !s.ok()) {
    return Fail("register actions", s);
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
    } catch (const std::exception& e) {
      return Fail("metrics listen", absl::UnavailableError(e.what()));
    }
    exposer->RegisterCollectable(registry);
    std::printf("metrics on %s:%d\n",
                metrics_listen.substr(0, metrics_listen.rfind(':')).c_str(),
                exposer->GetListeningPorts().at(0));
  }

  tcc::examples::bank::BankService bank(*store);
  tcc::participant::ParticipantServer server(participant, server_options);
  server.RegisterService(&bank);
  if (absl::Status s = server.Start(); !s.ok()) return Fail("listen", s);
  std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("listening on %s:%d\n", host.c_str(), server.port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{}: signal {}, shutting down", name, sig);
  server.Shutdown();
  return 0;
}
