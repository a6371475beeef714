// A TCP proxy on loopback that a test can cut: it listens on 127.0.0.1 (a
// port the OS picks), forwards every connection to one target host:port,
// and on request stops forwarding, to put a network partition between a
// process and one server (toxiproxy and netem are not available here):
//   kPass       bytes flow both ways;
//   kBlackhole  nothing flows: bytes are left unread in the kernel's buffers
//               (as a partition that drops packets looks to both ends: calls
//               time out, nothing is refused), new connections are accepted
//               and wait; back to kPass, what waited flows on;
//   kReject     every connection is closed at once and new ones are closed
//               as they come (a refused peer: calls fail fast).
//
// Thread-safe. One thread accepts, two threads pump each connection; the
// destructor closes everything and joins them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace tcc::harness {

class TcpFaultProxy {
 public:
  enum class Mode { kPass, kBlackhole, kReject };

  // Listens on 127.0.0.1:0 and forwards to `target_host`:`target_port`
  // (a numeric IPv4 address).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TcpFaultProxy>> Start(
      const std::string& target_host, int target_port);
  // "HOST:PORT".
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TcpFaultProxy>> Start(
      const std::string& target);
  ~TcpFaultProxy();
  TcpFaultProxy(const TcpFaultProxy&) = delete;
  TcpFaultProxy& operator=(const TcpFaultProxy&) = delete;

  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:PORT"
  void SetMode(Mode mode);
  Mode mode() const { return mode_.load(); }
  // Connections accepted so far.
  int64_t connections() const { return connections_.load(); }

 private:
  struct Connection {
    int client_fd = -1;
    int server_fd = -1;
    std::thread up;    // client -> server
    std::thread down;  // server -> client
    std::atomic<bool> closed{false};
  };

  TcpFaultProxy(std::string host, int target_port)
      : host_(std::move(host)), target_port_(target_port) {}
  void AcceptLoop();
  void Pump(Connection* c, int from, int to);
  static void Close(Connection* c);
  void CloseAll();

  const std::string host_;
  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<Mode> mode_{Mode::kPass};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> conns_;  // guarded by mu_
};

}  // namespace tcc::harness
