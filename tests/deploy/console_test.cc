// The web console end to end: a real tccd with bank traffic, its console on
// loopback, and Debian's headless Chromium driven over the DevTools protocol
// (a WebSocket, Boost.Beast). The test asserts what the pages show:
//   - without a credential the API answers 401 and the page sends the
//     browser to /login; a cross-origin POST is refused and sets nothing;
//   - after login the overview shows tccd serving; a gated transfer whose
//     participant then dies appears as a stuck branch, and leaves the list
//     when the participant is back;
//   - a transaction's page shows the same record timeline as
//     `tccctl show --json`, and moves live (Watch) when it is approved.
// Screenshots go to TCC_ARTIFACTS_DIR.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bank_cluster.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "http_get.h"
#include "process.h"
#include "tcc/v1/admin.grpc.pb.h"
#include "test_certs.h"
#include "test_dirs.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace v1 = tcc::v1;
using google::protobuf::Struct;
using google::protobuf::Value;
using tcc::harness::BankCluster;
using tcc::harness::ClusterOptions;
using tcc::harness::Process;

constexpr char kToken[] = "console-test-token-0123456789abcdef";

Struct ParseJson(const std::string& json) {
  Struct s;
  INFO(json.substr(0, 300));
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &s).ok());
  return s;
}

std::string Quote(const std::string& s) {
  Value v;
  v.set_string_value(s);
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

struct HttpReply {
  int status = 0;
  std::string location, set_cookie, body;
};

// One HTTP/1.1 request to 127.0.0.1:port (30 s at most; throws on a
// transport error).
HttpReply Http(int port, http::verb method, const std::string& target,
               std::vector<std::pair<std::string, std::string>> headers = {},
               const std::string& body = "") {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(30));
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                         static_cast<uint16_t>(port)));
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, absl::StrCat("127.0.0.1:", port));
  for (auto& [k, v] : headers) req.set(k, v);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/x-www-form-urlencoded");
    req.body() = body;
  }
  req.prepare_payload();
  req.keep_alive(false);
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  HttpReply r;
  r.status = static_cast<int>(res.result_int());
  r.location = std::string(res[http::field::location]);
  r.set_cookie = std::string(res[http::field::set_cookie]);
  r.body = res.body();
  return r;
}

// Headless Chromium, one page, driven over the DevTools protocol.
class Browser {
 public:
  explicit Browser(const std::string& dir) {
    auto p = Process::Start(
        {.argv = {"/usr/bin/chromium", "--headless=new", "--no-sandbox",
                  "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage",
                  "--user-data-dir=" + dir + "/profile",
                  "--remote-debugging-address=127.0.0.1",
                  "--remote-debugging-port=0", "--window-size=1280,900",
                  "about:blank"},
         .env = {},
         .log_path = dir + "/chromium.log",
         .name = "chromium"});
    REQUIRE(p.ok());
    process_ = std::move(*p);
    auto port = process_->WaitForLine(
        R"(DevTools listening on ws://127\.0\.0\.1:(\d+)/)", 60000);
    INFO(process_->Output());
    REQUIRE(port.ok());
    REQUIRE(absl::SimpleAtoi(*port, &port_));
    // The page target's WebSocket.
    std::string path;
    for (int i = 0; i < 50 && path.empty(); ++i) {
      HttpReply list;
      try {
        list = Http(port_, http::verb::get, "/json/list");
      } catch (const std::exception& e) {
        WARN("DevTools /json/list: " << e.what() << " (retrying)");
      }
      if (list.status == 200) {
        Value v;
        REQUIRE(
            google::protobuf::util::JsonStringToMessage(list.body, &v).ok());
        for (const auto& t : v.list_value().values()) {
          const auto& f = t.struct_value().fields();
          if (f.at("type").string_value() == "page") {
            const std::string url = f.at("webSocketDebuggerUrl").string_value();
            path = url.substr(url.find("/devtools/"));
            break;
          }
        }
      }
      if (path.empty())
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(!path.empty());
    asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"),
                               static_cast<uint16_t>(port_));
    try {
      ws_.next_layer().expires_after(std::chrono::seconds(30));
      ws_.next_layer().connect(ep);
      ws_.handshake(absl::StrCat("127.0.0.1:", port_), path);
    } catch (const std::exception& e) {
      FAIL("DevTools WebSocket " << path << ": " << e.what() << "\n"
                                 << LogTail());
    }
    Send("Page.enable", "{}");
    Send("Emulation.setDeviceMetricsOverride",
         R"({"width":1280,"height":900,"deviceScaleFactor":1,"mobile":false})");
  }

  ~Browser() {
    beast::error_code ec;
    ws_.close(websocket::close_code::normal, ec);
    process_->Kill();
  }

  // A DevTools command; its "result". A transport error (Chromium gone, or
  // silent for 60 s) fails the test with what Chromium printed.
  Struct Send(const std::string& method, const std::string& params) {
    const int id = ++next_id_;
    try {
      ws_.next_layer().expires_after(std::chrono::seconds(60));
      ws_.write(
          asio::buffer(absl::StrCat("{\"id\":", id, ",\"method\":\"", method,
                                    "\",\"params\":", params, "}")));
    } catch (const std::exception& e) {
      FAIL("DevTools " << method << ": " << e.what() << "\n" << LogTail());
    }
    while (true) {
      beast::flat_buffer buffer;
      try {
        ws_.next_layer().expires_after(std::chrono::seconds(60));
        ws_.read(buffer);
      } catch (const std::exception& e) {
        FAIL("DevTools " << method << " (reply): " << e.what() << "\n"
                         << LogTail());
      }
      Struct m = ParseJson(beast::buffers_to_string(buffer.data()));
      auto it = m.fields().find("id");
      if (it == m.fields().end() || it->second.number_value() != id) continue;
      INFO(method << " " << params);
      REQUIRE(m.fields().count("error") == 0);
      return m.fields().at("result").struct_value();
    }
  }

  void Navigate(const std::string& url) {
    Send("Page.navigate", absl::StrCat("{\"url\":", Quote(url), "}"));
    WaitFor("document.readyState === 'complete'");
  }

  // The value of a JavaScript expression, as a string ("" for null).
  std::string Eval(const std::string& expr) {
    Struct r =
        Send("Runtime.evaluate", absl::StrCat("{\"expression\":", Quote(expr),
                                              ",\"returnByValue\":true}"));
    const Value& v =
        r.fields().at("result").struct_value().fields().count("value")
            ? r.fields().at("result").struct_value().fields().at("value")
            : Value();
    if (v.has_string_value()) return v.string_value();
    if (v.has_bool_value()) return v.bool_value() ? "true" : "false";
    if (v.has_number_value()) return absl::StrCat(v.number_value());
    return "";
  }

  // Polls (bounded: 30 s) until `expr` is true.
  bool WaitFor(const std::string& expr) {
    for (int i = 0; i < 300; ++i) {
      if (Eval("!!(" + expr + ")") == "true") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // The text of the element with this id ("" when absent).
  std::string Text(const std::string& id) {
    return Eval("(document.getElementById(" + Quote(id) +
                ") || {}).innerText || ''");
  }

  // The end of what Chromium printed, for a failure's message.
  std::string LogTail() const {
    const std::string out = process_->Output();
    return "chromium printed: " +
           (out.size() > 3000 ? "..." + out.substr(out.size() - 3000) : out);
  }

  void Screenshot(const std::string& path) {
    Struct r = Send("Page.captureScreenshot", R"({"format":"png"})");
    std::string png;
    REQUIRE(absl::Base64Unescape(r.fields().at("data").string_value(), &png));
    std::ofstream(path, std::ios::binary) << png;
  }

 private:
  std::unique_ptr<Process> process_;
  int port_ = 0;
  asio::io_context io_;
  websocket::stream<beast::tcp_stream> ws_{io_};
  int next_id_ = 0;
};

// tcc.v1.Admin as the test's operator.
class Admin {
 public:
  explicit Admin(int port)
      : stub_(v1::Admin::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials()))) {}
  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    return (stub_.get()->*method)(&ctx, req, resp);
  }
  v1::TransactionView View(const std::string& gid) {
    v1::ShowRequest r;
    r.set_gid(gid);
    v1::ShowResponse s;
    REQUIRE(Call(&v1::Admin::Stub::Show, r, &s).ok());
    return s.transaction();
  }
  void Approve(const std::string& gid) {
    const v1::TransactionView t = View(gid);
    v1::IssueApprovalRequest r;
    r.set_action(v1::APPROVAL_ACTION_GATE_APPROVE);
    r.set_gid(gid);
    r.set_revision(t.revision());
    r.set_content_hash(t.content_hash());
    r.set_reason("console test");
    v1::IssueApprovalResponse issued;
    REQUIRE(Call(&v1::Admin::Stub::IssueApproval, r, &issued).ok());
    v1::ApproveRequest a;
    a.set_gid(gid);
    a.set_approval_id(issued.approval().approval_id());
    v1::ApproveResponse resp;
    REQUIRE(Call(&v1::Admin::Stub::Approve, a, &resp).ok());
  }

 private:
  std::unique_ptr<v1::Admin::Stub> stub_;
};

// A gated transfer, waiting in AWAITING_APPROVAL (its Trys done).
std::string GatedTransfer(BankCluster& c, Admin& admin, uint32_t from,
                          uint32_t to) {
  auto req = c.Transfer("bank-a", from, "bank-b", to, 7);
  req.set_approval_gate(true);
  req.set_approval_timeout_ms(120000);
  req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
  REQUIRE(c.client().Submit(req).ok());
  for (int i = 0; i < 200; ++i) {
    if (admin.View(req.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(admin.View(req.gid()).state() == v1::TXN_STATE_AWAITING_APPROVAL);
  return req.gid();
}

std::string RunCapture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// A cluster whose tccd serves the console on 127.0.0.1 (a free port), with
// alice's admin token in DIR/admin-tokens and `yaml` as DIR/tccd.yaml.
ClusterOptions ConsoleCluster(const std::string& dir, const std::string& yaml,
                              uint32_t accounts) {
  const std::string tokens = dir + "/admin-tokens";
  std::ofstream(tokens) << "alice " << kToken << "\n";
  REQUIRE(chmod(tokens.c_str(), 0600) == 0);
  std::ofstream(dir + "/tccd.yaml") << yaml;
  ClusterOptions o;
  o.root_dir = dir + "/cluster";
  o.tccd_bin = TCC_TCCD_BIN;
  o.bank_bin = TCC_BANK_BIN;
  o.accounts = accounts;
  o.tccd_args = {"--config", dir + "/tccd.yaml", "--admin-token-file",
                 tokens,     "--console-listen", "127.0.0.1:0"};
  return o;
}

// The console's port, as tccd printed it (`scheme` http or https).
int ConsolePort(BankCluster& c, const std::string& scheme) {
  auto port_text = c.tccd()->WaitForLine(
      "^console: " + scheme + R"(://127\.0\.0\.1:(\d+)/)", 10000);
  REQUIRE(port_text.ok());
  int port = 0;
  REQUIRE(absl::SimpleAtoi(*port_text, &port));
  return port;
}

}  // namespace

TEST_CASE("the console shows what tccd holds, to admins only") {
  const std::string dir = tcc::harness::MakeTempDir("tccd-console");
  // Removed last, after the browser (declared later) has exited: Chromium
  // deletes its cache files as it goes, and a removal racing it failed
  // the test with "cannot remove all: No such file or directory".
  const tcc::harness::Cleanup cleanup{dir};
  const std::string artifacts = TCC_ARTIFACTS_DIR;
  std::filesystem::create_directories(artifacts);
  const std::string tokens = dir + "/admin-tokens";
  // Two failed Confirms (at a 100 ms cap) flag a branch STUCK; stuck ones
  // are retried every 300 ms.
  BankCluster c(ConsoleCluster(
      dir,
      "retry:\n  base_ms: 20\n  cap_ms: 100\n  stuck_after_ms: 200\n"
      "  stuck_retry_ms: 300\n",
      10));
  REQUIRE(c.Start().ok());
  const int port = ConsolePort(c, "http");
  const std::string origin = absl::StrCat("http://127.0.0.1:", port);
  Admin admin(c.tccd_port());

  // --- Refusals, over plain HTTP.
  CHECK(Http(port, http::verb::get, "/api/status").status == 401);
  {
    HttpReply page = Http(port, http::verb::get, "/");
    CHECK(page.status == 303);
    CHECK(page.location == "/login");
  }
  CHECK(Http(port, http::verb::get, "/api/status",
             {{"Cookie", "tccd_console=not-a-token-of-ours"}})
            .status == 401);
  {
    // A cross-origin POST (another site's form) is refused and sets nothing.
    HttpReply r = Http(port, http::verb::post, "/login",
                       {{"Origin", "http://evil.example"}},
                       absl::StrCat("token=", kToken));
    CHECK(r.status == 403);
    CHECK(r.set_cookie.empty());
    HttpReply none = Http(port, http::verb::post, "/login", {},
                          absl::StrCat("token=", kToken));
    CHECK(none.status == 403);  // no Origin at all
    CHECK(none.set_cookie.empty());
    HttpReply wrong = Http(port, http::verb::post, "/login",
                           {{"Origin", origin}}, "token=wrong-token");
    CHECK(wrong.status == 401);
    CHECK(wrong.set_cookie.empty());
    CHECK(wrong.body.find("unknown admin token") != std::string::npos);
    HttpReply ok = Http(port, http::verb::post, "/login", {{"Origin", origin}},
                        absl::StrCat("token=", kToken));
    CHECK(ok.status == 303);
    CHECK(ok.set_cookie.find("HttpOnly") != std::string::npos);
    CHECK(ok.set_cookie.find("Secure") != std::string::npos);
    CHECK(ok.set_cookie.find("SameSite=Strict") != std::string::npos);
  }
  CHECK(Http(port, http::verb::delete_, "/api/status").status == 405);
  // Each console request was audited by the Admin API, naming the console.
  CHECK(
      c.tccd()
          ->WaitForLine(R"(admin: Status by - from console:127\.0\.0\.1)", 5000)
          .ok());

  // --- In the browser.
  Browser browser(dir);
  browser.Navigate(origin + "/");
  CHECK(browser.WaitFor("location.pathname === '/login'"));
  browser.Eval(
      absl::StrCat("document.getElementById('token').value = ", Quote(kToken),
                   "; document.getElementById('login-form').submit()"));
  const bool signed_in = browser.WaitFor(
      "location.pathname === '/' && document.getElementById('card-health')");
  INFO(browser.Eval("location.href + ' ' + document.body.innerText"));
  REQUIRE(signed_in);
  CHECK(browser.Text("card-health").find("serving") != std::string::npos);
  CHECK(browser.WaitFor(
      "document.getElementById('stuck') && "
      "document.getElementById('stuck').innerText.includes('No branch is "
      "stuck')"));

  // A transaction's page moves live: approved, it goes to CONFIRMED.
  const std::string live = GatedTransfer(c, admin, 1, 2);
  browser.Navigate(origin + "/#/txn/" + live);
  CHECK(
      browser.WaitFor("document.getElementById('txn-state') && "
                      "document.getElementById('txn-state').innerText"
                      ".includes('awaiting_approval')"));
  browser.Screenshot(artifacts + "/console-awaiting-approval.png");
  admin.Approve(live);
  CHECK(browser.WaitFor(
      "document.getElementById('txn-state').innerText.includes('confirmed')"));
  CHECK(browser.Text("live").find("Final") != std::string::npos);

  // The timeline matches tccctl's: the same records, in the same order.
  {
    const std::string json = RunCapture(
        absl::StrCat(TCC_TCCCTL_BIN, " --addr 127.0.0.1:", c.tccd_port(),
                     " --token-file ", tokens, " --json show ", live));
    Struct show = ParseJson(json);
    std::string kinds;
    for (const auto& r : show.fields().at("timeline").list_value().values()) {
      kinds += r.struct_value().fields().at("kind").string_value() + "|";
    }
    REQUIRE(!kinds.empty());
    browser.Navigate(origin + "/#/txn/" + live);
    CHECK(
        browser.WaitFor("document.querySelectorAll('#timeline tbody tr')"
                        ".length > 0"));
    const std::string shown = browser.Eval(
        "Array.from(document.querySelectorAll('#timeline tbody tr'))"
        ".map(r => r.children[1].innerText + '|').join('')");
    CHECK(shown == kinds);
    CHECK(browser.Eval("document.querySelectorAll('#approvals tbody tr')"
                       ".length") == "1");  // the gate approval it consumed
    browser.Screenshot(artifacts + "/console-transaction.png");
  }

  // A participant fails: its branch appears as stuck on the overview.
  const std::string stuck = GatedTransfer(c, admin, 3, 4);
  c.KillBank("bank-b");
  admin.Approve(stuck);
  browser.Navigate(origin + "/#/");
  CHECK(browser.WaitFor(
      absl::StrCat("document.getElementById('stuck') && "
                   "document.getElementById('stuck').innerText.includes(",
                   Quote(stuck),
                   ") && document.getElementById('stuck').innerText"
                   ".includes('bank-b')")));
  CHECK(browser.Text("card-stuck").find("1") != std::string::npos);
  browser.Screenshot(artifacts + "/console-overview-stuck.png");
  // Back: Confirm goes through, the list empties.
  REQUIRE(c.StartBank("bank-b").ok());
  CHECK(browser.WaitFor(
      "document.getElementById('stuck') && "
      "document.getElementById('stuck').innerText.includes('No branch is "
      "stuck')"));
  for (int i = 0; i < 200; ++i) {
    if (admin.View(stuck).state() == v1::TXN_STATE_CONFIRMED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(admin.View(stuck).state() == v1::TXN_STATE_CONFIRMED);

  // Signing out clears the cookie: the API refuses again.
  browser.Eval("document.querySelector('form.logout').submit()");
  CHECK(browser.WaitFor("location.pathname === '/login'"));
  CHECK(browser.Eval("fetch('/api/status').then(r => r.status)").empty());
  browser.Navigate(origin + "/");
  CHECK(browser.WaitFor("location.pathname === '/login'"));
}

namespace {

// One HTTPS GET to 127.0.0.1:port trusting `ca`, with a client certificate
// when `client` names one; the status, or -1 when TLS itself failed.
int HttpsGet(int port, const std::string& ca,
             const tcc::harness::CertFiles* client, const std::string& target,
             const std::string& cookie = "") {
  namespace ssl = asio::ssl;
  asio::io_context io;
  ssl::context ctx(ssl::context::tls_client);
  ctx.load_verify_file(ca);
  if (client != nullptr) {
    ctx.use_certificate_chain_file(client->cert_file);
    ctx.use_private_key_file(client->key_file, ssl::context::pem);
  }
  ssl::stream<beast::tcp_stream> stream(io, ctx);
  stream.set_verify_mode(ssl::verify_peer);
  beast::error_code ec;
  beast::get_lowest_layer(stream).connect(asio::ip::tcp::endpoint(
      asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  stream.handshake(ssl::stream_base::client, ec);
  if (ec) return -1;
  http::request<http::string_body> req{http::verb::get, target, 11};
  req.set(http::field::host, absl::StrCat("127.0.0.1:", port));
  if (!cookie.empty()) req.set(http::field::cookie, cookie);
  req.keep_alive(false);
  http::write(stream, req, ec);
  if (ec) return -1;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res, ec);
  if (ec) return -1;
  return static_cast<int>(res.result_int());
}

}  // namespace

TEST_CASE("the console over mutual TLS: a listed certificate signs in") {
  const std::string dir = tcc::harness::MakeTempDir("tccd-console-tls");
  // Removed last, after the browser (declared later) has exited: Chromium
  // deletes its cache files as it goes, and a removal racing it failed
  // the test with "cannot remove all: No such file or directory".
  const tcc::harness::Cleanup cleanup{dir};
  auto pki = tcc::harness::MakeTestPki(dir + "/pki");
  REQUIRE(pki.ok());
  auto ops = pki->IssueClientCert("ops");
  auto mallory = pki->IssueClientCert("mallory");
  auto stranger = pki->IssueClientCert("ops", /*from_other_ca=*/true);
  REQUIRE(ops.ok());
  REQUIRE(mallory.ok());
  REQUIRE(stranger.ok());
  BankCluster c(ConsoleCluster(
      dir,
      absl::StrCat("console:\n  tls:\n    mode: mtls\n    cert_file: ",
                   pki->server().cert_file,
                   "\n    key_file: ", pki->server().key_file,
                   "\n    client_ca_file: ", pki->ca_file(),
                   "\nconsole_listen: 127.0.0.1:0\n"
                   "admin:\n  client_identities: [ops]\n"),
      4));
  REQUIRE(c.Start().ok());
  const int port = ConsolePort(c, "https");

  // A listed certificate needs no login.
  CHECK(HttpsGet(port, pki->ca_file(), &*ops, "/api/status") == 200);
  CHECK(HttpsGet(port, pki->ca_file(), &*ops, "/") == 200);
  CHECK(c.tccd()
            ->WaitForLine(R"(admin: Status by cert:ops from console:127)", 5000)
            .ok());
  // One from the CA but not listed: known, not an admin.
  CHECK(HttpsGet(port, pki->ca_file(), &*mallory, "/api/status") == 403);
  // One from another CA: refused in the handshake.
  CHECK(HttpsGet(port, pki->ca_file(), &*stranger, "/api/status") == -1);
  // No certificate: a token still signs in; nothing at all is 401.
  CHECK(HttpsGet(port, pki->ca_file(), nullptr, "/api/status") == 401);
  CHECK(HttpsGet(port, pki->ca_file(), nullptr, "/api/status",
                 absl::StrCat("tccd_console=", kToken)) == 200);
  // Plain HTTP on the TLS port gets nothing.
  CHECK_THROWS(Http(port, http::verb::get, "/api/status"));
}
