#include "tccd_nodes.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "http_get.h"

namespace tcc::harness {
namespace {

constexpr int64_t kInitTimeoutMs = 30000;

}  // namespace

std::optional<double> MetricValue(const std::string& page,
                                  const std::string& series) {
  size_t at = 0;
  while ((at = page.find(series, at)) != std::string::npos) {
    const bool line_start = at == 0 || page[at - 1] == '\n';
    const size_t after = at + series.size();
    if (line_start && after < page.size() && page[after] == ' ') {
      const size_t end = page.find('\n', after);
      return std::stod(page.substr(after + 1, end - after - 1));
    }
    at = after;
  }
  return std::nullopt;
}

TccdNodes::TccdNodes(TccdNodesOptions options) : options_(std::move(options)) {
  if (options_.key_prefix.empty()) {
    static std::atomic<int> n{0};
    options_.key_prefix = absl::StrCat(
        "/tcc-nodes/", ::getpid(), "-", n++, "-",
        std::chrono::steady_clock::now().time_since_epoch().count(), "/");
  }
}

TccdNodes::~TccdNodes() {
  for (auto& n : nodes_) {
    if (n->process) n->process->Kill();
  }
}

absl::Status TccdNodes::InitCluster() {
  etcd::ClientOptions co;
  co.endpoints = options_.etcd_endpoints;
  co.call_timeout_ms = 5000;
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Connect(co);
  if (!client.ok()) return client.status();
  etcd_ = *std::move(client);
  std::filesystem::create_directories(options_.root_dir);
  const int probe = AddNode("init");
  absl::StatusOr<std::string> config = WriteConfig(probe);
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    nodes_.pop_back();
  }
  if (!config.ok()) return config.status();
  auto init = Process::Start(
      ProcessOptions{{options_.tccd_bin, "--config", *config, "--init-cluster"},
                     {},
                     options_.root_dir + "/tccd-init.log",
                     "tccd --init-cluster"});
  if (!init.ok()) return init.status();
  auto code = (*init)->Wait(kInitTimeoutMs);
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return absl::InternalError(absl::StrCat("tccd --init-cluster exited ",
                                            *code, ": ", (*init)->Output()));
  }
  return absl::OkStatus();
}

int TccdNodes::AddNode(const std::string& node_id) {
  auto n = std::make_unique<Node>();
  n->id = node_id.empty() ? absl::StrCat("node-", nodes_.size() + 1) : node_id;
  n->port = FreeLoopbackPort();
  n->etcd_endpoints = options_.etcd_endpoints;
  std::lock_guard<std::mutex> lock(metrics_mu_);
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

std::string TccdNodes::DataDir(int i) const {
  return absl::StrCat(options_.root_dir, "/", nodes_[i]->id, "-data");
}

std::string TccdNodes::log_path(int i) const {
  return absl::StrCat(options_.root_dir, "/", nodes_[i]->id, ".log");
}

std::string TccdNodes::address(int i) const {
  return absl::StrCat("127.0.0.1:", nodes_[i]->port);
}

std::vector<std::string> TccdNodes::Addresses(
    const std::vector<int>& which) const {
  std::vector<std::string> out;
  if (which.empty()) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      out.push_back(address(static_cast<int>(i)));
    }
  } else {
    for (int i : which) out.push_back(address(i));
  }
  return out;
}

int TccdNodes::IndexOf(const std::string& node_id) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->id == node_id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<std::string> TccdNodes::WriteConfig(int i) const {
  const Node& n = *nodes_[i];
  std::string yaml = options_.extra_config;
  if (!yaml.empty() && yaml.back() != '\n') yaml += '\n';
  absl::StrAppend(
      &yaml, "cluster:\n  enabled: true\n  node_id: ", n.id,
      "\n  advertise_address: 127.0.0.1:", n.port, "\n  key_prefix: \"",
      options_.key_prefix, "\"\n  shards: ", options_.shards,
      "\n  lease_ttl_ms: ", options_.lease_ttl_ms,
      "\n  lease_margin_ms: ", options_.lease_margin_ms,
      "\n  takeover_margin_ms: ", options_.takeover_margin_ms,
      "\n  dedup_window_ms: 3600000\n  min_dedup_window_ms: 0",
      "\n  etcd:\n    endpoints: [", absl::StrJoin(n.etcd_endpoints, ", "),
      "]\n", options_.cluster_extra, "participants:\n");
  for (const auto& [name, port] : options_.participants) {
    absl::StrAppend(&yaml, "  ", name, ":\n    address: 127.0.0.1:", port,
                    "\n");
  }
  const std::string path = absl::StrCat(options_.root_dir, "/", n.id, ".yaml");
  std::ofstream out(path, std::ios::trunc);
  out << yaml;
  out.close();
  if (!out) return absl::InternalError("cannot write " + path);
  return path;
}

absl::Status TccdNodes::StartNode(int i, int64_t timeout_ms) {
  Node& n = *nodes_[i];
  if (n.process && n.process->Running()) {
    return absl::FailedPreconditionError(n.id + " is running");
  }
  absl::StatusOr<std::string> config = WriteConfig(i);
  if (!config.ok()) return config.status();
  ++n.starts;
  std::vector<std::string> argv = {
      options_.tccd_bin, "--config",    *config,    "--data-dir",
      DataDir(i),        "--listen",    address(i), "--metrics-listen",
      "127.0.0.1:0",     "--log-level", "info"};
  argv.insert(argv.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  absl::Status last;
  // A port just released by a killed node can take a moment to be free.
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto p = Process::Start(ProcessOptions{
        argv, {}, log_path(i), absl::StrCat("tccd ", n.id, " #", n.starts)});
    if (!p.ok()) return p.status();
    auto listening = (*p)->WaitForListening(timeout_ms);
    if (listening.ok()) {
      auto port = (*p)->WaitForLine(R"(^metrics: http://[^ ]*:(\d+)/)", 0);
      if (!port.ok()) return port.status();
      {
        std::lock_guard<std::mutex> lock(metrics_mu_);
        n.metrics_port = std::stoi(*port);
      }
      n.process = std::move(*p);
      return absl::OkStatus();
    }
    last = absl::Status(listening.status().code(),
                        absl::StrCat(n.id, ": ", listening.status().message()));
    (*p)->Kill();
    if (last.message().find("cannot listen") == absl::string_view::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return last;
}

absl::StatusOr<std::pair<int, std::string>> TccdNodes::RunDuplicate(
    int i, int64_t timeout_ms) {
  absl::StatusOr<std::string> config = WriteConfig(i);
  if (!config.ok()) return config.status();
  const std::string dir = DataDir(i) + "-duplicate";
  auto p = Process::Start(
      ProcessOptions{{options_.tccd_bin, "--config", *config, "--data-dir", dir,
                      "--listen", "127.0.0.1:0", "--metrics-listen", "off"},
                     {},
                     log_path(i) + ".duplicate",
                     "tccd duplicate " + nodes_[i]->id});
  if (!p.ok()) return p.status();
  auto status = (*p)->Wait(timeout_ms);
  const std::string out = (*p)->Output();
  (*p)->Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!status.ok()) {
    return absl::Status(status.status().code(),
                        absl::StrCat("the duplicate still runs: ", out));
  }
  return std::make_pair(*status, out);
}

void TccdNodes::KillNode(int i) {
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    nodes_[i]->metrics_port = 0;
  }
  if (nodes_[i]->process) nodes_[i]->process->Kill();
}

void TccdNodes::PauseNode(int i) {
  if (nodes_[i]->process) nodes_[i]->process->Signal(SIGSTOP);
}

void TccdNodes::ResumeNode(int i) {
  if (nodes_[i]->process) nodes_[i]->process->Signal(SIGCONT);
}

absl::StatusOr<int> TccdNodes::StopNode(int i, int64_t timeout_ms) {
  Node& n = *nodes_[i];
  if (!n.process) return absl::FailedPreconditionError(n.id + " not started");
  n.process->Signal(SIGCONT);
  n.process->Signal(SIGTERM);
  absl::StatusOr<int> status = n.process->Wait(timeout_ms);
  std::lock_guard<std::mutex> lock(metrics_mu_);
  n.metrics_port = 0;
  return status;
}

void TccdNodes::DeleteDataDir(int i) {
  std::error_code ec;
  std::filesystem::remove_all(DataDir(i), ec);
}

void TccdNodes::SetEtcdEndpoints(int i, std::vector<std::string> endpoints) {
  nodes_[i]->etcd_endpoints = std::move(endpoints);
}

bool TccdNodes::Running(int i) {
  return nodes_[i]->process && nodes_[i]->process->Running();
}

absl::StatusOr<std::string> TccdNodes::ScrapeMetrics(int i) {
  int port = 0;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    if (static_cast<size_t>(i) >= nodes_.size()) {
      return absl::NotFoundError(absl::StrCat("no node ", i));
    }
    port = nodes_[i]->metrics_port;
  }
  if (port == 0) return absl::UnavailableError("not running");
  return testing::HttpGet(testing::LoopbackUrl(port, "/metrics"), 2000);
}

absl::StatusOr<wal::Membership> TccdNodes::ReadMembership() {
  if (!etcd_) return absl::FailedPreconditionError("InitCluster first");
  return wal::ReadMembership(*etcd_, options_.key_prefix, options_.shards);
}

absl::Status TccdNodes::Drain(int i) {
  if (!etcd_) return absl::FailedPreconditionError("InitCluster first");
  return wal::MarkDraining(*etcd_, options_.key_prefix, nodes_[i]->id);
}

}  // namespace tcc::harness
