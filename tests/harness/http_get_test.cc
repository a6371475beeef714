// HttpGet against a one-shot HTTP server on a loopback socket.
#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

namespace {

// Serves one connection on 127.0.0.1 with `reply`, after reading the
// request's head; the request is kept for the test to look at.
class OneShotHttp {
 public:
  explicit OneShotHttp(std::string reply) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_, 1) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, reply = std::move(reply)] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        request_.append(buf, static_cast<size_t>(n));
      }
      ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    });
  }
  ~OneShotHttp() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Read after the GET returned (the thread has answered by then).
  const std::string& request() const { return request_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("metric pages are fetched with a plain HTTP GET") {
  SECTION("200: the body") {
    OneShotHttp server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
        "tccd_up 1\n");
    auto body = tcc::testing::HttpGet(server.Url("/metrics"), 5000);
    REQUIRE(body.ok());
    CHECK(*body == "tccd_up 1\n");
    CHECK(server.request().rfind("GET /metrics HTTP/1.0\r\n", 0) == 0);
  }
  SECTION("another status: UNAVAILABLE, naming it") {
    OneShotHttp server("HTTP/1.1 404 Not Found\r\n\r\nno");
    auto body = tcc::testing::HttpGet(server.Url("/metrics"), 5000);
    REQUIRE(body.status().code() == absl::StatusCode::kUnavailable);
    CHECK(std::string(body.status().message()).find("404") !=
          std::string::npos);
  }
  SECTION("nothing listening: UNAVAILABLE") {
    std::string url;
    {
      OneShotHttp gone("HTTP/1.0 200 OK\r\n\r\n");
      url = gone.Url("/");
    }
    CHECK(tcc::testing::HttpGet(url, 2000).status().code() ==
          absl::StatusCode::kUnavailable);
  }
  SECTION("not http://IPV4:PORT: INVALID_ARGUMENT") {
    for (const char* url : {"https://127.0.0.1:1/x", "http://localhost:80/",
                            "http://127.0.0.1/metrics", "http://127.0.0.1:0/",
                            "http://127.0.0.1:99999/", "ftp://x"}) {
      INFO(url);
      CHECK(tcc::testing::HttpGet(url, 100).status().code() ==
            absl::StatusCode::kInvalidArgument);
    }
  }
}
