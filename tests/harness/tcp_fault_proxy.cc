#include "tcp_fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tcc::harness {
namespace {

constexpr int kPollMs = 20;

void NoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Writes all of `n` bytes; false once the peer is gone.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpFaultProxy>> TcpFaultProxy::Start(
    const std::string& target) {
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(target.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError("not HOST:PORT: " + target);
  }
  return Start(target.substr(0, colon), port);
}

absl::StatusOr<std::unique_ptr<TcpFaultProxy>> TcpFaultProxy::Start(
    const std::string& target_host, int target_port) {
  std::unique_ptr<TcpFaultProxy> p(new TcpFaultProxy(target_host, target_port));
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return absl::InternalError("socket failed");
  int one = 1;
  (void)setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0 ||
      ::listen(p->listen_fd_, 64) != 0) {
    return absl::InternalError(
        absl::StrCat("proxy cannot listen: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  p->port_ = ntohs(addr.sin_port);
  TcpFaultProxy* raw = p.get();
  p->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  return p;
}

TcpFaultProxy::~TcpFaultProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  CloseAll();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) {
    if (c->up.joinable()) c->up.join();
    if (c->down.joinable()) c->down.join();
    ::close(c->client_fd);
    ::close(c->server_fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string TcpFaultProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpFaultProxy::SetMode(Mode mode) {
  mode_ = mode;
  if (mode == Mode::kReject) CloseAll();
}

void TcpFaultProxy::Close(Connection* c) {
  if (c->closed.exchange(true)) return;
  // shutdown, not close: the pumps still poll these descriptors; they are
  // closed once both pumps were joined.
  ::shutdown(c->client_fd, SHUT_RDWR);
  ::shutdown(c->server_fd, SHUT_RDWR);
}

void TcpFaultProxy::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) Close(c.get());
}

void TcpFaultProxy::AcceptLoop() {
  while (!stop_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, kPollMs * 5) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    ++connections_;
    if (mode_ == Mode::kReject) {
      ::close(client);
      continue;
    }
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (server < 0 || ::inet_pton(AF_INET, host_.c_str(), &to.sin_addr) != 1 ||
        ::connect(server, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      // The target is down: the caller sees a refused connection.
      if (server >= 0) ::close(server);
      ::close(client);
      continue;
    }
    NoDelay(client);
    NoDelay(server);
    auto c = std::make_unique<Connection>();
    c->client_fd = client;
    c->server_fd = server;
    Connection* raw = c.get();
    c->up =
        std::thread([this, raw] { Pump(raw, raw->client_fd, raw->server_fd); });
    c->down =
        std::thread([this, raw] { Pump(raw, raw->server_fd, raw->client_fd); });
    std::lock_guard<std::mutex> lock(mu_);
    conns_.push_back(std::move(c));
  }
}

void TcpFaultProxy::Pump(Connection* c, int from, int to) {
  char buf[64 << 10];
  while (!stop_ && !c->closed) {
    const Mode mode = mode_;
    if (mode == Mode::kReject) break;
    if (mode == Mode::kBlackhole) {
      // Left unread: the sender's window fills, as over a dead link.
      ::poll(nullptr, 0, kPollMs);
      continue;
    }
    pollfd pfd{from, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, kPollMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    if (mode_ != Mode::kPass) continue;  // cut while it waited
    const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0 || !WriteAll(to, buf, static_cast<size_t>(n))) break;
  }
  Close(c);
}

}  // namespace tcc::harness
