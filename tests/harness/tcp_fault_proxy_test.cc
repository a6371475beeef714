// The drills' TCP fault proxy: passes bytes both ways, holds them while
// blackholed (and delivers them after), closes connections when rejecting.
#include "tcp_fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

namespace {

using tcc::harness::TcpFaultProxy;

// An echo server on 127.0.0.1:0 serving one connection at a time.
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[256];
        ssize_t n;
        while ((n = ::recv(c, buf, sizeof(buf), 0)) > 0) {
          (void)::send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
        }
        ::close(c);
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

int Dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// What arrives on fd within timeout_ms ("" if nothing; "EOF" if closed).
std::string ReadSome(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return "";
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  if (n <= 0) return "EOF";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

TEST_CASE("the fault proxy passes, blackholes and rejects") {
  EchoServer echo;
  auto proxy = TcpFaultProxy::Start("127.0.0.1", echo.port());
  REQUIRE(proxy.ok());
  const int fd = Dial((*proxy)->port());
  REQUIRE(::send(fd, "ping", 4, 0) == 4);
  CHECK(ReadSome(fd, 2000) == "ping");

  (*proxy)->SetMode(TcpFaultProxy::Mode::kBlackhole);
  REQUIRE(::send(fd, "held", 4, 0) == 4);
  CHECK(ReadSome(fd, 300).empty());  // nothing comes through
  (*proxy)->SetMode(TcpFaultProxy::Mode::kPass);
  CHECK(ReadSome(fd, 2000) == "held");  // what waited flows on

  (*proxy)->SetMode(TcpFaultProxy::Mode::kReject);
  CHECK(ReadSome(fd, 2000) == "EOF");
  ::close(fd);
  const int again = Dial((*proxy)->port());  // accepted, then closed
  CHECK(ReadSome(again, 2000) == "EOF");
  ::close(again);
  CHECK((*proxy)->connections() == 2);
}
