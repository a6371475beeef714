#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tcc::testing {
namespace {

// Closes the socket on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits until `fd` is ready for `events` or `deadline` passes.
bool WaitFor(int fd, short events,
             std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string LoopbackUrl(int port, const std::string& path) {
  return absl::StrCat("http://127.0.0.1:", port, path);
}

absl::StatusOr<std::string> HttpGet(const std::string& url, int timeout_ms) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("not an http URL: ", url));
  }
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  const std::string path =
      slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("no port in ", url));
  }
  const std::string host = host_port.substr(0, colon);
  int port = 0;
  const std::string port_text = host_port.substr(colon + 1);
  auto [p, ec] = std::from_chars(port_text.data(),
                                 port_text.data() + port_text.size(), port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (ec != std::errc() || p != port_text.data() + port_text.size() ||
      port <= 0 || port > 65535 ||
      ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("want http://IPV4:PORT/PATH, got ", url));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Fd s{::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("socket: ", std::strerror(errno)));
  }
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS || !WaitFor(s.fd, POLLOUT, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("connect to ", host_port, " failed or timed out"));
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return absl::UnavailableError(
          absl::StrCat("connect to ", host_port, ": ", std::strerror(err)));
    }
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent,
                             MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
               !WaitFor(s.fd, POLLOUT, deadline)) {
      return absl::UnavailableError(absl::StrCat("send to ", host_port));
    }
  }
  std::string response;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if ((errno != EAGAIN && errno != EINTR) ||
               !WaitFor(s.fd, POLLIN, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("no whole reply from ", host_port, " in time"));
    }
  }
  // "HTTP/1.x 200 ..." then headers, a blank line, the body.
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12 ||
      response.compare(9, 3, "200") != 0 || body == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("unexpected reply from ", url, ": ",
                     response.substr(0, response.find('\r'))));
  }
  return response.substr(body + 4);
}

}  // namespace tcc::testing
