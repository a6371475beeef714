#include "console/console_server.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "console/assets.h"
#include "google/protobuf/util/json_util.h"
#include "rpc/admin_auth.h"
#include "tcc/v1/admin.grpc.pb.h"

namespace tcc::console {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace v1 = tcc::v1;
using tcp = asio::ip::tcp;

constexpr char kCookie[] = "tccd_console";
constexpr size_t kMaxBodyBytes = 8 * 1024;
constexpr int64_t kWatchMaxMs = 5 * 60 * 1000;
constexpr int64_t kAdminCallMs = 10000;

// Beast's string_view as abseil's (Debian's abseil has its own).
absl::string_view SV(beast::string_view s) { return {s.data(), s.size()}; }

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// "%41b+c" -> "Ab c" (application/x-www-form-urlencoded and query strings).
std::string UrlDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size()) {
      int v = 0;
      if (absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) {
        out.push_back(static_cast<char>(v));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string UrlEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// key=value&... -> the value of `key` ("" when absent).
std::string FormValue(absl::string_view form, absl::string_view key) {
  for (absl::string_view pair : absl::StrSplit(form, '&')) {
    const size_t eq = pair.find('=');
    if (eq == absl::string_view::npos) continue;
    if (UrlDecode(pair.substr(0, eq)) == key) {
      return UrlDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

// The value of cookie `name` in a Cookie header ("" when absent).
std::string CookieValue(absl::string_view header, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t eq = part.find('=');
    if (eq != absl::string_view::npos && part.substr(0, eq) == name) {
      return UrlDecode(part.substr(eq + 1));
    }
  }
  return "";
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 503;
    default:
      return 500;
  }
}

std::string JsonEscape(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string HtmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// The subject CN and DNS/URI SANs of a verified peer certificate (the same
// identities grpc reports for a gRPC client: rpc::PeerCertIdentities).
std::vector<std::string> CertIdentities(SSL* ssl) {
  std::vector<std::string> out;
  if (SSL_get_verify_result(ssl) != X509_V_OK) return out;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return out;
  char cn[256];
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn,
                                sizeof(cn)) > 0) {
    out.emplace_back(cn);
  }
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      const ASN1_STRING* s = nullptr;
      if (n->type == GEN_DNS) s = n->d.dNSName;
      if (n->type == GEN_URI) s = n->d.uniformResourceIdentifier;
      if (s != nullptr) {
        out.emplace_back(
            reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
            static_cast<size_t>(ASN1_STRING_length(s)));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  X509_free(cert);
  return out;
}

// Who the browser is, as the Admin API will check it.
struct Caller {
  std::string address;                  // the browser's IP
  std::string token;                    // from the cookie or a Bearer header
  std::vector<std::string> identities;  // its verified client certificate
  bool has_credential() const { return !token.empty() || !identities.empty(); }
};

}  // namespace

class ConsoleServer::Impl {
 public:
  explicit Impl(ConsoleOptions options)
      : options_(std::move(options)),
        stub_(v1::Admin::NewStub(options_.admin)),
        ssl_(asio::ssl::context::tls_server) {}

  absl::Status Start() {
    const size_t colon = options_.address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "console_listen: want host:port, not ", options_.address));
    }
    std::string host = options_.address.substr(0, colon);
    if (host == "localhost") host = "127.0.0.1";
    int port = 0;
    if (!absl::SimpleAtoi(options_.address.substr(colon + 1), &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("console_listen: bad port in ", options_.address));
    }
    tls_ = !options_.cert_file.empty();
    if (tls_) {
      boost::system::error_code ec;
      ssl_.set_options(
          asio::ssl::context::default_workarounds |
          asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
          asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
      ssl_.use_certificate_chain_file(options_.cert_file, ec);
      if (!ec)
        ssl_.use_private_key_file(options_.key_file, asio::ssl::context::pem,
                                  ec);
      if (!ec && !options_.client_ca_file.empty()) {
        ssl_.load_verify_file(options_.client_ca_file, ec);
        // A certificate is asked for and verified, not required: without
        // one the browser logs in with a token.
        if (!ec) ssl_.set_verify_mode(asio::ssl::verify_peer, ec);
      }
      if (ec) {
        return absl::InvalidArgumentError(
            absl::StrCat("console.tls: ", ec.message()));
      }
    }
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("console_listen: bad host ", host, ": ", ec.message()));
    }
    acceptor_.emplace(io_);
    tcp::endpoint endpoint(addr, static_cast<uint16_t>(port));
    acceptor_->open(endpoint.protocol(), ec);
    if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "console_listen ", options_.address, ": ", ec.message()));
    }
    port_ = acceptor_->local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  ~Impl() {
    stopping_ = true;
    if (acceptor_) {
      ::shutdown(acceptor_->native_handle(), SHUT_RDWR);
      boost::system::error_code ec;
      acceptor_->close(ec);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<Connection> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Connection& c : conns_) {
        ::shutdown(c.fd, SHUT_RDWR);
        if (c.watch != nullptr) c.watch->TryCancel();
      }
      conns.splice(conns.end(), conns_);
    }
    for (Connection& c : conns) {
      if (c.thread.joinable()) c.thread.join();
    }
  }

  int port() const { return port_; }

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    bool done = false;
    grpc::ClientContext* watch = nullptr;  // guarded by mu_
  };

  void AcceptLoop() {
    while (!stopping_) {
      tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_->accept(socket, ec);
      if (ec) {
        if (stopping_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      Reap();
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      const bool full =
          static_cast<int>(conns_.size()) >= options_.max_connections;
      conns_.emplace_back();
      auto it = std::prev(conns_.end());
      it->fd = socket.native_handle();
      it->thread =
          std::thread([this, it, full, s = std::move(socket)]() mutable {
            Serve(std::move(s), *it, full);
            std::lock_guard<std::mutex> l(mu_);
            it->done = true;
          });
    }
  }

  // Joins the threads of connections that ended.
  void Reap() {
    std::list<Connection> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        auto next = std::next(it);
        if (it->done) done.splice(done.end(), conns_, it);
        it = next;
      }
    }
    for (Connection& c : done) c.thread.join();
  }

  void Serve(tcp::socket socket, Connection& conn, bool full) {
    timeval tv{
        static_cast<time_t>(options_.idle_timeout_ms / 1000),
        static_cast<suseconds_t>((options_.idle_timeout_ms % 1000) * 1000)};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv,
               sizeof(tv));
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv,
               sizeof(tv));
    boost::system::error_code ec;
    Caller caller;
    caller.address = socket.remote_endpoint(ec).address().to_string();
    if (tls_) {
      asio::ssl::stream<tcp::socket&> stream(socket, ssl_);
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (ec) return;
      caller.identities = CertIdentities(stream.native_handle());
      ServeStream(stream, conn, caller, full);
      stream.shutdown(ec);
    } else {
      ServeStream(socket, conn, caller, full);
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }

  template <typename Stream>
  void ServeStream(Stream& stream, Connection& conn, const Caller& base,
                   bool full) {
    beast::flat_buffer buffer;
    while (!stopping_) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(8 * 1024);
      parser.body_limit(kMaxBodyBytes);
      boost::system::error_code ec;
      http::read(stream, buffer, parser, ec);
      if (ec) {
        if (ec == http::error::body_limit || ec == http::error::header_limit) {
          Response r = Text(413, "request too large (8 KiB at most)");
          http::write(stream, r, ec);
        }
        return;
      }
      Request req = parser.release();
      if (full) {
        Response r = Text(503, "too many console connections; retry");
        r.keep_alive(false);
        http::write(stream, r, ec);
        return;
      }
      Caller caller = base;
      const std::string cookie =
          CookieValue(SV(req[http::field::cookie]), kCookie);
      const absl::string_view auth = SV(req[http::field::authorization]);
      if (auth.substr(0, 7) == "Bearer ") {
        caller.token = std::string(auth.substr(7));
      } else {
        caller.token = cookie;
      }
      const std::string target(req.target());
      const std::string path = target.substr(0, target.find('?'));
      const std::string query = target.find('?') == std::string::npos
                                    ? ""
                                    : target.substr(target.find('?') + 1);
      if (req.method() == http::verb::get && path == "/api/watch") {
        Watch(stream, conn, caller, FormValue(query, "gid"));
        return;  // an event stream ends with its connection
      }
      Response r = Handle(req, path, query, caller);
      r.keep_alive(req.keep_alive());
      http::write(stream, r, ec);
      if (ec || !req.keep_alive()) return;
    }
  }

  static void Secure(Response& r) {
    r.set(http::field::cache_control, "no-store");
    r.set("X-Content-Type-Options", "nosniff");
    r.set("X-Frame-Options", "DENY");
    // same-origin, not no-referrer: under no-referrer a form POST carries
    // `Origin: null`, which the CSRF check cannot tell from another site.
    r.set("Referrer-Policy", "same-origin");
    r.set("Content-Security-Policy",
          "default-src 'none'; script-src 'self'; style-src 'self'; "
          "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
          "frame-ancestors 'none'; base-uri 'none'");
  }

  static Response Text(int status, std::string body,
                       const char* type = "text/plain; charset=utf-8") {
    Response r{static_cast<http::status>(status), 11};
    r.set(http::field::content_type, type);
    r.body() = std::move(body);
    r.prepare_payload();
    Secure(r);
    return r;
  }

  static Response Redirect(const std::string& to) {
    Response r = Text(303, "");
    r.set(http::field::location, to);
    return r;
  }

  static Response JsonError(const grpc::Status& s) {
    return Text(
        HttpStatusOf(s.error_code()),
        absl::StrCat("{\"code\":\"",
                     absl::StatusCodeToString(
                         static_cast<absl::StatusCode>(s.error_code())),
                     "\",\"message\":\"", JsonEscape(s.error_message()), "\"}"),
        "application/json");
  }

  // The console's own origin as the browser addressed it.
  std::string Origin(const Request& req) const {
    return absl::StrCat(tls_ ? "https://" : "http://",
                        SV(req[http::field::host]));
  }

  // A POST must come from the console's own page (CSRF).
  bool SameOrigin(const Request& req) const {
    const absl::string_view origin = SV(req[http::field::origin]);
    if (origin.empty() || origin != Origin(req)) return false;
    const absl::string_view site = SV(req["Sec-Fetch-Site"]);
    return site.empty() || site == "same-origin";
  }

  void Prepare(grpc::ClientContext& ctx, const Caller& caller,
               int64_t deadline_ms) const {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(deadline_ms));
    ctx.AddMetadata(rpc::kConsoleKey, options_.console_key);
    ctx.AddMetadata(rpc::kConsolePeer, caller.address);
    if (!caller.token.empty()) {
      ctx.AddMetadata("authorization", "Bearer " + caller.token);
    } else if (!caller.identities.empty()) {
      ctx.AddMetadata(rpc::kConsoleIdentities,
                      absl::StrJoin(caller.identities, ","));
    }
  }

  Response LoginPage(int status, const std::string& error) {
    std::string page(kLoginHtml);
    const std::string marker = "<!--error-->";
    if (!error.empty()) {
      page.replace(page.find(marker), marker.size(),
                   "<p class=\"error\" id=\"login-error\">" +
                       HtmlEscape(error) + "</p>");
    }
    return Text(status, page, "text/html; charset=utf-8");
  }

  Response Handle(const Request& req, const std::string& path,
                  const std::string& query, const Caller& caller) {
    if (req.method() == http::verb::post) {
      if (!SameOrigin(req)) {
        return Text(403, "cross-origin request refused");
      }
      if (path == "/login") return Login(req, caller);
      if (path == "/logout") {
        Response r = Redirect("/login");
        r.set(http::field::set_cookie,
              absl::StrCat(kCookie,
                           "=; Path=/; HttpOnly; Secure; SameSite=Strict; "
                           "Max-Age=0"));
        return r;
      }
      return Text(404, "not found");
    }
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      Response r = Text(405, "the console is read-only: GET, or POST /login");
      r.set(http::field::allow, "GET, HEAD, POST");
      return r;
    }
    if (path == "/login") return LoginPage(200, "");
    if (path == "/app.js") {
      return Text(200, std::string(kAppJs), "text/javascript; charset=utf-8");
    }
    if (path == "/app.css") {
      return Text(200, std::string(kAppCss), "text/css; charset=utf-8");
    }
    if (path == "/" || path == "/index.html") {
      if (!caller.has_credential()) return Redirect("/login");
      return Text(200, std::string(kIndexHtml), "text/html; charset=utf-8");
    }
    if (path.rfind("/api/", 0) == 0) return Api(path, query, caller);
    return Text(404, "not found");
  }

  Response Login(const Request& req, const Caller& base) {
    const std::string token = FormValue(req.body(), "token");
    if (token.empty()) return LoginPage(400, "Enter an admin token.");
    Caller caller = base;
    caller.token = token;
    caller.identities.clear();
    grpc::ClientContext ctx;
    Prepare(ctx, caller, kAdminCallMs);
    v1::StatusResponse status;
    grpc::Status s = stub_->Status(&ctx, v1::StatusRequest(), &status);
    if (!s.ok()) {
      return LoginPage(HttpStatusOf(s.error_code()),
                       absl::StrCat("Refused: ", s.error_message()));
    }
    Response r = Redirect("/");
    r.set(http::field::set_cookie,
          absl::StrCat(kCookie, "=", UrlEncode(token),
                       "; Path=/; HttpOnly; Secure; SameSite=Strict; "
                       "Max-Age=43200"));
    return r;
  }

  Response Api(const std::string& path, const std::string& query,
               const Caller& caller) {
    grpc::ClientContext ctx;
    Prepare(ctx, caller, kAdminCallMs);
    if (path == "/api/status") {
      v1::StatusResponse resp;
      grpc::Status s = stub_->Status(&ctx, v1::StatusRequest(), &resp);
      if (!s.ok()) return JsonError(s);
      return Text(200, ToJson(resp), "application/json");
    }
    if (path == "/api/show") {
      v1::ShowRequest req;
      req.set_gid(FormValue(query, "gid"));
      v1::ShowResponse resp;
      grpc::Status s = stub_->Show(&ctx, req, &resp);
      if (!s.ok()) return JsonError(s);
      return Text(200, ToJson(resp), "application/json");
    }
    if (path == "/api/list") {
      v1::ListRequest req;
      for (absl::string_view name :
           absl::StrSplit(FormValue(query, "states"), ',', absl::SkipEmpty())) {
        v1::TxnState state;
        if (!v1::TxnState_Parse(
                absl::StrCat("TXN_STATE_", absl::AsciiStrToUpper(name)),
                &state)) {
          return JsonError(
              grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           absl::StrCat("states: unknown state ", name)));
        }
        req.add_states(state);
      }
      uint64_t n = 0;
      if (absl::SimpleAtoi(FormValue(query, "min_age_ms"), &n)) {
        req.set_min_age_ms(n);
      }
      if (absl::SimpleAtoi(FormValue(query, "page_size"), &n)) {
        req.set_page_size(static_cast<uint32_t>(std::min<uint64_t>(n, 1000)));
      }
      req.set_participant(FormValue(query, "participant"));
      req.set_page_token(FormValue(query, "page_token"));
      v1::ListResponse resp;
      grpc::Status s = stub_->List(&ctx, req, &resp);
      if (!s.ok()) return JsonError(s);
      return Text(200, ToJson(resp), "application/json");
    }
    return Text(404, "{\"code\":\"NOT_FOUND\",\"message\":\"no such API\"}",
                "application/json");
  }

  // Admin.Watch as Server-Sent Events: one `data:` line of JSON per change,
  // until the transaction is final, the stream's 5 minutes are up, the
  // browser goes, or tccd stops.
  template <typename Stream>
  void Watch(Stream& stream, Connection& conn, const Caller& caller,
             const std::string& gid) {
    grpc::ClientContext ctx;
    Prepare(ctx, caller, kWatchMaxMs);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      conn.watch = &ctx;
    }
    v1::WatchRequest req;
    req.set_gid(gid);
    auto reader = stub_->Watch(&ctx, req);
    v1::WatchEvent event;
    bool started = false;
    boost::system::error_code ec;
    while (reader->Read(&event)) {
      if (!started) {
        started = true;
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Connection: close\r\n\r\n";
        asio::write(stream, asio::buffer(head), ec);
        if (ec) break;
      }
      const std::string data = absl::StrCat("data: ", ToJson(event), "\n\n");
      asio::write(stream, asio::buffer(data), ec);
      if (ec) break;
    }
    if (ec) ctx.TryCancel();
    grpc::Status s = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      conn.watch = nullptr;
    }
    if (!started) {
      Response r = JsonError(
          s.ok() ? grpc::Status(grpc::StatusCode::NOT_FOUND, "no events") : s);
      r.keep_alive(false);
      http::write(stream, r, ec);
    }
  }

  ConsoleOptions options_;
  std::unique_ptr<v1::Admin::Stub> stub_;
  asio::ssl::context ssl_;
  bool tls_ = false;
  asio::io_context io_;
  std::optional<tcp::acceptor> acceptor_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::list<Connection> conns_;
};

ConsoleServer::ConsoleServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ConsoleServer::~ConsoleServer() = default;

int ConsoleServer::port() const { return impl_->port(); }

absl::StatusOr<std::unique_ptr<ConsoleServer>> ConsoleServer::Start(
    ConsoleOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<ConsoleServer>(new ConsoleServer(std::move(impl)));
}

}  // namespace tcc::console
