// A small HTTP/1.1 server on 127.0.0.1 (port from the OS) for the HTTP
// transport's tests: real sockets, Boost.Beast parsing, one thread per
// connection; each request is answered as the test's handler says, which
// may also misbehave (no answer, a hang, an endless or oversized body, a
// garbage body, closing the connection). It counts the connections it
// accepted and the most open at once.
//
// Thread-safe; the destructor closes every connection and joins the threads.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tcc::testing {

namespace http = boost::beast::http;

// What the server does with one request.
struct HttpReply {
  enum class Kind {
    kAnswer,   // status + body (+ keep_alive)
    kClose,    // close the connection without answering
    kHang,     // never answer (until the server stops)
    kEndless,  // 200, chunked, a body that never ends
    kRaw,      // write `body` as raw bytes, then close
  };
  Kind kind = Kind::kAnswer;
  int status = 200;
  std::string body;
  bool keep_alive = true;
};

using HttpHandler =
    std::function<HttpReply(const http::request<http::string_body>&)>;

class HttpTestServer {
 public:
  explicit HttpTestServer(HttpHandler handler)
      : handler_(std::move(handler)),
        acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~HttpTestServer() { Stop(); }

  int port() const { return port_; }
  int accepted() const { return accepted_; }
  int max_open() const { return max_open_; }
  int requests() const { return requests_; }

  // Closes the connections that are open now (idle keep-alive ones too).
  void CloseAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* s : sockets_) {
      boost::system::error_code ec;
      s->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    boost::system::error_code ec;
    {
      // A blocked accept() does not return when the acceptor is closed from
      // another thread: wake it with a connection of our own.
      boost::asio::ip::tcp::socket wake(io_);
      wake.connect({boost::asio::ip::make_address("127.0.0.1"),
                    static_cast<unsigned short>(port_)},
                   ec);
    }
    CloseAll();
    if (accept_thread_.joinable()) accept_thread_.join();
    acceptor_.close(ec);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  void AcceptLoop() {
    for (;;) {
      auto socket = std::make_unique<boost::asio::ip::tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec) return;
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      ++accepted_;
      sockets_.insert(socket.get());
      max_open_ = std::max<int>(max_open_, static_cast<int>(sockets_.size()));
      threads_.emplace_back(
          [this, s = std::shared_ptr<boost::asio::ip::tcp::socket>(
                     std::move(socket))] { Serve(*s); });
    }
  }

  void Serve(boost::asio::ip::tcp::socket& socket) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> request;
      boost::system::error_code ec;
      http::read(socket, buffer, request, ec);
      if (ec) break;
      ++requests_;
      HttpReply reply = handler_(request);
      if (reply.kind == HttpReply::Kind::kClose) break;
      if (reply.kind == HttpReply::Kind::kHang) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopped_; });
        break;
      }
      if (reply.kind == HttpReply::Kind::kRaw) {
        boost::asio::write(socket, boost::asio::buffer(reply.body), ec);
        break;
      }
      if (reply.kind == HttpReply::Kind::kEndless) {
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n";
        boost::asio::write(socket, boost::asio::buffer(head), ec);
        const std::string chunk =
            "4000\r\n" + std::string(0x4000, ' ') + "\r\n";
        while (!ec) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (stopped_) break;
          }
          boost::asio::write(socket, boost::asio::buffer(chunk), ec);
        }
        break;
      }
      http::response<http::string_body> response{
          static_cast<http::status>(reply.status), 11};
      response.set(http::field::content_type, "application/json");
      response.keep_alive(reply.keep_alive && request.keep_alive());
      // 1xx, 204 and 304 answers carry no body (Beast refuses one).
      const bool bodiless =
          reply.status < 200 || reply.status == 204 || reply.status == 304;
      if (!bodiless) response.body() = reply.body;
      response.prepare_payload();
      http::write(socket, response, ec);
      if (ec || !response.keep_alive()) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    sockets_.erase(&socket);
    boost::system::error_code ignored;
    socket.close(ignored);
  }

  HttpHandler handler_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::set<boost::asio::ip::tcp::socket*> sockets_;
  std::vector<std::thread> threads_;
  std::atomic<int> accepted_{0};
  std::atomic<int> max_open_{0};
  std::atomic<int> requests_{0};
};

}  // namespace tcc::testing
