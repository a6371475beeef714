#include "bank_cluster.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tcc::harness {
namespace {

constexpr int64_t kStartTimeoutMs = 30000;

void SetDeadline(grpc::ClientContext& ctx, int64_t ms) {
  ctx.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(ms, GPR_TIMESPAN)));
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string EnvFileValue(const std::string& file, const std::string& name) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = "export " + name + "=";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

}  // namespace

ClusterEtcd EtcdFromEnvironment() {
  ClusterEtcd etcd;
  const char* wal = std::getenv("TCC_TCCD_WAL");
  if (wal == nullptr || std::string(wal) != "etcd") return etcd;
  std::string endpoints;
  if (const char* file = std::getenv("TCC_ETCD_ENV_FILE")) {
    endpoints = EnvFileValue(file, "TCC_ETCD_ENDPOINTS");
  } else if (const char* e = std::getenv("TCC_ETCD_ENDPOINTS")) {
    endpoints = e;
  }
  // TCC_TCCD_WAL=etcd without an etcd: tccd gets no endpoint and refuses to
  // start, so the test fails (it never silently runs on RocksDB).
  etcd.endpoints = absl::StrSplit(endpoints, ',', absl::SkipEmpty());
  if (etcd.endpoints.empty()) etcd.endpoints = {"127.0.0.1:1"};
  return etcd;
}

BankCluster::BankCluster(ClusterOptions options)
    : options_(std::move(options)) {
  if (options_.etcd.endpoints.empty()) options_.etcd = EtcdFromEnvironment();
  if (on_etcd() && options_.etcd.key_prefix.empty()) {
    static std::atomic<int> n{0};
    options_.etcd.key_prefix = absl::StrCat(
        "/tcc-harness/", ::getpid(), "-", n++, "-",
        std::chrono::steady_clock::now().time_since_epoch().count(), "/");
  }
}

BankCluster::~BankCluster() {
  if (tccd_) tccd_->Kill();
  for (auto& [name, p] : banks_) {
    if (p) p->Kill();
  }
  if (options_.remove_root_dir &&
      std::getenv("TCC_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(options_.root_dir, ec);
  }
}

absl::Status BankCluster::Start() {
  if (absl::Status s = StartBanks(); !s.ok()) return s;
  tccd_port_ = FreeLoopbackPort();
  if (absl::Status s = StartTccd(); !s.ok()) return s;
  client_ = NewClient();
  return absl::OkStatus();
}

void BankCluster::SetClientAddresses(std::vector<std::string> addresses) {
  client_addresses_ = std::move(addresses);
  client_ = NewClient();
}

absl::Status BankCluster::StartBanks() {
  std::filesystem::create_directories(options_.root_dir);
  if (options_.tls.enabled && !pki_) {
    auto pki = MakeTestPki(options_.root_dir + "/pki");
    if (!pki.ok()) return pki.status();
    auto tccd = pki->IssueClientCert("tccd");
    if (!tccd.ok()) return tccd.status();
    auto harness = pki->IssueClientCert("harness");
    if (!harness.ok()) return harness.status();
    pki_ = std::move(*pki);
    tccd_cert_ = *tccd;
    harness_cert_ = *harness;
  }
  for (const auto& name : options_.banks) {
    if (absl::Status s = StartBank(name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BankCluster::StartBank(const std::string& name) {
  const int port = bank_ports_.count(name) ? bank_ports_[name] : 0;
  if (auto py = options_.python_banks.find(name);
      py != options_.python_banks.end()) {
    const int service_port =
        bank_service_ports_.count(name) ? bank_service_ports_[name] : 0;
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     options_.python_bank_script,
                                     "--name",
                                     name,
                                     "--protocol",
                                     py->second.protocol,
                                     "--listen",
                                     absl::StrCat("127.0.0.1:", port),
                                     "--bank-listen",
                                     absl::StrCat("127.0.0.1:", service_port),
                                     "--store",
                                     py->second.store,
                                     "--accounts",
                                     std::to_string(options_.accounts),
                                     "--initial-balance",
                                     std::to_string(options_.initial_balance)};
    if (py->second.store == "postgres") {
      argv.insert(argv.end(), {"--pg-url", options_.pg_url});
    } else {
      argv.insert(argv.end(), {"--db", options_.root_dir + "/" + name + ".db"});
    }
    if (pki_) {
      argv.insert(argv.end(), {"--tls-cert", pki_->server().cert_file,
                               "--tls-key", pki_->server().key_file,
                               "--tls-client-ca", pki_->ca_file()});
    }
    // The Bank service: on the participant's port (TLS when the cluster is)
    // for a gRPC bank, on a plaintext port of its own for an HTTP one.
    const bool grpc_bank = py->second.protocol == "grpc";
    std::map<std::string, std::string> env;
    if (options_.bank_env.count(name)) env = options_.bank_env[name];
    env["PYTHONPATH"] = options_.python_path;
    env["PYTHONDONTWRITEBYTECODE"] = "1";
    // A port just released by a killed bank can take a moment to be free.
    absl::Status last;
    for (int attempt = 0; attempt < 20; ++attempt) {
      auto p = Process::Start(ProcessOptions{
          argv, env, options_.root_dir + "/" + name + ".log", name});
      if (!p.ok()) return p.status();
      auto service = (*p)->WaitForLine(R"(^bank service on [^:]+:(\d+)$)",
                                       kStartTimeoutMs);
      auto listening = service.ok() ? (*p)->WaitForListening(kStartTimeoutMs)
                                    : absl::StatusOr<int>(service.status());
      if (listening.ok()) {
        bank_ports_[name] = *listening;
        bank_service_ports_[name] = std::stoi(*service);
        banks_[name] = std::move(*p);
        if (!bank_stubs_.count(name)) {
          bank_stubs_[name] =
              tcc::examples::bank::Bank::NewStub(grpc::CreateChannel(
                  absl::StrCat("127.0.0.1:", *service),
                  grpc_bank ? ClientCredentials()
                            : grpc::InsecureChannelCredentials()));
        }
        return absl::OkStatus();
      }
      last = listening.status();
      const std::string output = (*p)->Output();
      (*p)->Kill();
      if (output.find("Address already in use") == std::string::npos &&
          output.find("cannot listen") == std::string::npos) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return last;
  }
  const std::string store = options_.bank_store.count(name)
                                ? options_.bank_store.at(name)
                                : options_.store;
  std::vector<std::string> argv = {options_.bank_bin,
                                   "--name",
                                   name,
                                   "--listen",
                                   absl::StrCat("127.0.0.1:", port),
                                   "--store",
                                   store,
                                   "--data-dir",
                                   options_.root_dir + "/" + name,
                                   "--accounts",
                                   std::to_string(options_.accounts),
                                   "--initial-balance",
                                   std::to_string(options_.initial_balance),
                                   "--log-level",
                                   options_.bank_log_level};
  if (store == "postgres") {
    argv.push_back("--pg-url");
    argv.push_back(options_.pg_url);
  }
  if (pki_) {
    argv.insert(argv.end(),
                {"--tls-cert", pki_->server().cert_file, "--tls-key",
                 pki_->server().key_file, "--tls-client-ca", pki_->ca_file()});
  }
  std::map<std::string, std::string> env;
  if (options_.bank_env.count(name)) env = options_.bank_env[name];
  auto p = Process::Start(
      ProcessOptions{argv, env, options_.root_dir + "/" + name + ".log", name});
  if (!p.ok()) return p.status();
  auto listening = (*p)->WaitForListening(kStartTimeoutMs);
  if (!listening.ok()) return listening.status();
  bank_ports_[name] = *listening;
  banks_[name] = std::move(*p);
  if (!bank_stubs_.count(name)) {
    bank_stubs_[name] = tcc::examples::bank::Bank::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", *listening), ClientCredentials()));
  }
  return absl::OkStatus();
}

void BankCluster::KillBank(const std::string& name) {
  if (banks_[name]) banks_[name]->Kill();
}

absl::Status BankCluster::StartTccd() {
  std::vector<std::string> argv = {options_.tccd_bin,
                                   "--data-dir",
                                   options_.root_dir + "/tccd",
                                   "--listen",
                                   absl::StrCat("127.0.0.1:", tccd_port_),
                                   "--metrics-listen",
                                   options_.metrics ? "127.0.0.1:0" : "off",
                                   "--log-level",
                                   "info"};
  // A test's own --config (in tccd_args) is merged into the config the
  // harness writes, when it writes one (tccd reads one config file).
  std::vector<std::string> extra_args;
  std::string own_config;
  for (size_t i = 0; i < options_.tccd_args.size(); ++i) {
    const std::string& a = options_.tccd_args[i];
    if ((pki_ || on_etcd()) && a == "--config" &&
        i + 1 < options_.tccd_args.size()) {
      own_config = ReadWholeFile(options_.tccd_args[++i]);
      continue;
    }
    extra_args.push_back(a);
  }
  if (pki_ || on_etcd()) {
    auto config = WriteTccdConfig(own_config);
    if (!config.ok()) return config.status();
    tccd_config_path_ = *config;
    argv.push_back("--config");
    argv.push_back(*config);
    if (on_etcd() && tccd_starts_ == 0) {
      // The cluster is created once, before the first start.
      auto init = Process::Start(ProcessOptions{
          {options_.tccd_bin, "--config", *config, "--init-cluster"},
          options_.tccd_env,
          options_.root_dir + "/tccd-init.log",
          "tccd --init-cluster"});
      if (!init.ok()) return init.status();
      auto code = (*init)->Wait(kStartTimeoutMs);
      if (!code.ok()) return code.status();
      if (*code != 0) {
        return absl::InternalError(
            absl::StrCat("tccd --init-cluster exited ", *code, ": ",
                         ReadWholeFile(options_.root_dir + "/tccd-init.log")));
      }
    }
  } else {
    for (const auto& name : options_.banks) {
      auto py = options_.python_banks.find(name);
      const bool http =
          py != options_.python_banks.end() && py->second.protocol == "http";
      argv.push_back("--participant");
      argv.push_back(absl::StrCat(
          name,
          http ? "=http://127.0.0.1:" : "=127.0.0.1:", bank_ports_[name]));
    }
  }
  for (const auto& a : extra_args) argv.push_back(a);
  ++tccd_starts_;
  // A port just released by a killed tccd can take a moment to be free.
  absl::Status last;
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto p = Process::Start(ProcessOptions{
        argv, options_.tccd_env, options_.root_dir + "/tccd.log", "tccd"});
    if (!p.ok()) return p.status();
    auto listening = (*p)->WaitForListening(kStartTimeoutMs);
    if (listening.ok()) {
      if (options_.metrics) {
        // Printed before the listening line.
        auto port = (*p)->WaitForLine(R"(^metrics: http://[^ ]*:(\d+)/)", 0);
        if (!port.ok()) return port.status();
        tccd_metrics_port_ = std::stoi(*port);
      }
      tccd_ = std::move(*p);
      return absl::OkStatus();
    }
    last = listening.status();
    (*p)->Kill();
    if (last.message().find("cannot listen") == absl::string_view::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return last;
}

void BankCluster::KillTccd() {
  if (tccd_) tccd_->Kill();
}

absl::StatusOr<int> BankCluster::StopTccd(int64_t timeout_ms) {
  if (!tccd_) return absl::FailedPreconditionError("tccd not started");
  tccd_->Signal(SIGTERM);
  return tccd_->Wait(timeout_ms);
}

std::string BankCluster::ClusterYaml() const {
  const ClusterEtcd& e = options_.etcd;
  std::string yaml = absl::StrCat(
      "cluster:\n  enabled: true\n  node_id: ", e.node_id,
      "\n  advertise_address: 127.0.0.1:", tccd_port_ == 0 ? 1 : tccd_port_,
      "\n  key_prefix: \"", e.key_prefix, "\"\n  shards: ", e.shards,
      "\n  lease_ttl_ms: ", e.lease_ttl_ms,
      "\n  lease_margin_ms: ", e.lease_margin_ms,
      "\n  dedup_window_ms: 3600000\n  min_dedup_window_ms: 0",
      "\n  etcd:\n    endpoints: [", absl::StrJoin(e.endpoints, ", "), "]\n");
  if (!pki_) {
    absl::StrAppend(&yaml, "participants:\n");
    for (const auto& name : options_.banks) {
      auto py = options_.python_banks.find(name);
      const bool http =
          py != options_.python_banks.end() && py->second.protocol == "http";
      absl::StrAppend(
          &yaml, "  ", name, ":\n",
          http ? absl::StrCat("    protocol: http\n    url: http://127.0.0.1:",
                              bank_ports_.at(name), "\n")
               : absl::StrCat("    address: 127.0.0.1:", bank_ports_.at(name),
                              "\n"));
    }
  }
  return yaml;
}

absl::StatusOr<std::string> BankCluster::WriteTccdConfig(
    const std::string& own_config) {
  std::string yaml = own_config;
  if (!yaml.empty() && yaml.back() != '\n') yaml += '\n';
  if (on_etcd()) yaml += ClusterYaml();
  if (!pki_) {
    const std::string path = options_.root_dir + "/tccd-cluster.yaml";
    std::ofstream out(path, std::ios::trunc);
    out << yaml;
    out.close();
    if (!out) return absl::InternalError("cannot write " + path);
    return path;
  }
  // Paths are quoted: the root dir is a temp dir without quotes in it.
  auto q = [](const std::string& path) {
    return absl::StrCat("\"", path, "\"");
  };
  yaml += absl::StrCat("tls:\n  mode: ", options_.tls.listener_mode,
                       "\n  cert_file: ", q(pki_->server().cert_file),
                       "\n  key_file: ", q(pki_->server().key_file), "\n");
  if (options_.tls.listener_mode == "mtls") {
    absl::StrAppend(&yaml, "  client_ca_file: ", q(pki_->ca_file()), "\n");
  }
  if (options_.tls.admin_listener) {
    absl::StrAppend(
        &yaml, "admin_listen: 127.0.0.1:0\nadmin:\n  tls:\n",
        "    mode: mtls\n    cert_file: ", q(pki_->server().cert_file),
        "\n    key_file: ", q(pki_->server().key_file),
        "\n    client_ca_file: ", q(pki_->ca_file()), "\n");
  }
  if (!options_.tls.admin_client_identities.empty()) {
    if (!options_.tls.admin_listener) absl::StrAppend(&yaml, "admin:\n");
    absl::StrAppend(&yaml, "  client_identities: [",
                    absl::StrJoin(options_.tls.admin_client_identities, ", "),
                    "]\n");
  }
  absl::StrAppend(&yaml, "participants:\n");
  for (const auto& name : options_.banks) {
    const auto ca = options_.tls.participant_ca_file.find(name);
    auto py = options_.python_banks.find(name);
    const bool http =
        py != options_.python_banks.end() && py->second.protocol == "http";
    absl::StrAppend(
        &yaml, "  ", name, ":\n",
        http ? absl::StrCat("    protocol: http\n    url: https://127.0.0.1:",
                            bank_ports_[name], "\n")
             : absl::StrCat("    address: 127.0.0.1:", bank_ports_[name], "\n"),
        http ? "    tls:\n" : "    tls:\n      enabled: true\n",
        "      ca_file: ",
        q(ca == options_.tls.participant_ca_file.end() ? pki_->ca_file()
                                                       : ca->second),
        "\n      cert_file: ", q(tccd_cert_.cert_file),
        "\n      key_file: ", q(tccd_cert_.key_file), "\n");
  }
  const std::string path = options_.root_dir + "/tccd.yaml";
  std::ofstream out(path, std::ios::trunc);
  out << yaml;
  out.close();
  if (!out) return absl::InternalError("cannot write " + path);
  return path;
}

std::shared_ptr<grpc::ChannelCredentials> BankCluster::ClientCredentials()
    const {
  if (!pki_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadWholeFile(pki_->ca_file());
  ssl.pem_cert_chain = ReadWholeFile(harness_cert_.cert_file);
  ssl.pem_private_key = ReadWholeFile(harness_cert_.key_file);
  return grpc::SslCredentials(ssl);
}

std::unique_ptr<client::CoordinatorClient> BankCluster::NewClient(
    int max_attempts, int64_t attempt_timeout_ms) {
  client::ClientOptions o;
  o.credentials = ClientCredentials();
  o.address = absl::StrCat("127.0.0.1:", tccd_port_);
  o.addresses = client_addresses_;
  o.max_attempts = max_attempts;
  o.attempt_timeout_ms = attempt_timeout_ms;
  o.backoff_base_ms = 100;
  o.backoff_cap_ms = 1000;
  return std::make_unique<client::CoordinatorClient>(o);
}

std::shared_ptr<grpc::Channel> BankCluster::TccdChannel() {
  return grpc::CreateChannel(client_addresses_.empty()
                                 ? absl::StrCat("127.0.0.1:", tccd_port_)
                                 : client_addresses_.front(),
                             ClientCredentials());
}

tcc::v1::SubmitRequest BankCluster::Transfer(const std::string& from_bank,
                                             uint32_t from,
                                             const std::string& to_bank,
                                             uint32_t to, int64_t amount) {
  tcc::v1::SubmitRequest req;
  auto* d = req.add_branches();
  d->set_branch_id("debit");
  d->set_participant(from_bank);
  d->set_action("debit");
  d->set_payload(absl::StrCat(from, ":", amount));
  auto* c = req.add_branches();
  c->set_branch_id("credit");
  c->set_participant(to_bank);
  c->set_action("credit");
  c->set_payload(absl::StrCat(to, ":", amount));
  req.set_wait_for(tcc::v1::WAIT_FOR_FINISHED);
  return req;
}

absl::StatusOr<tcc::examples::bank::Totals> BankCluster::Totals(
    const std::string& bank) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 10000);
  tcc::examples::bank::Totals out;
  grpc::Status s = bank_stubs_.at(bank)->GetTotals(
      &ctx, tcc::examples::bank::GetTotalsRequest(), &out);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat(bank, ": ", s.error_message()));
  }
  return out;
}

absl::StatusOr<tcc::examples::bank::Account> BankCluster::Account(
    const std::string& bank, uint32_t account) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 10000);
  tcc::examples::bank::GetAccountRequest req;
  req.set_account(account);
  tcc::examples::bank::Account out;
  grpc::Status s = bank_stubs_.at(bank)->GetAccount(&ctx, req, &out);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat(bank, ": ", s.error_message()));
  }
  return out;
}

absl::Status BankCluster::CheckFinal(const std::vector<std::string>& gids,
                                     int64_t timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto checker = NewClient(3, 5000);
  for (const auto& gid : gids) {
    while (true) {
      auto view = checker->Get(gid);
      if (view.ok() && (view->state() == tcc::v1::TXN_STATE_CONFIRMED ||
                        view->state() == tcc::v1::TXN_STATE_CANCELLED)) {
        const bool confirmed = view->state() == tcc::v1::TXN_STATE_CONFIRMED;
        for (const auto& b : view->branches()) {
          const auto& p2 = b.second_phase();
          const bool done = p2.state() == tcc::v1::PHASE_STATE_SUCCEEDED;
          const bool never_tried =
              !confirmed &&
              b.try_phase().state() == tcc::v1::PHASE_STATE_NOT_SENT;
          if (!done && !never_tried) {
            return absl::InternalError(
                absl::StrCat(gid, " is ", tcc::v1::TxnState_Name(view->state()),
                             " but branch ", b.branch_id(), " phase 2 is ",
                             tcc::v1::PhaseState_Name(p2.state())));
          }
          if (confirmed &&
              b.try_phase().outcome() != tcc::v1::OUTCOME_EXECUTED) {
            return absl::InternalError(
                absl::StrCat(gid, " confirmed with branch ", b.branch_id(),
                             " whose Try is not EXECUTED"));
          }
        }
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(gid, " not final in time: ",
                         view.ok() ? tcc::v1::TxnState_Name(view->state())
                                   : view.status().ToString()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  int64_t total = 0;
  for (const auto& bank : options_.banks) {
    // Reservations are released by phase 2, which may still be finishing at
    // a participant right after tccd marked the transaction final: wait.
    while (true) {
      auto t = Totals(bank);
      if (!t.ok()) return t.status();
      if (t->frozen() == 0 && t->incoming() == 0) {
        total += t->balance();
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::InternalError(absl::StrCat(bank, " still holds frozen ",
                                                t->frozen(), " incoming ",
                                                t->incoming()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (total != initial_total()) {
    return absl::InternalError(
        absl::StrCat("money not conserved: ", total, " != ", initial_total()));
  }
  return absl::OkStatus();
}

}  // namespace tcc::harness
