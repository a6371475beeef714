// tccd's web console: a read-only page for operators (README.md, "The
// console"), on its own HTTP listener (config console_listen; off by
// default: the gRPC listeners cannot serve pages).
//
// What it shows comes from tcc.v1.Admin, called in-process with the
// browser's own credential, so the console can see exactly what that admin
// could with tccctl, and every request is checked and audited by the Admin
// API itself (AdminAuth, the audit log, "from console:ADDRESS"):
//   GET  /login, POST /login   a form for the admin token; a valid one is
//                              kept in a Secure, HttpOnly, SameSite=Strict
//                              cookie (tccd_console)
//   POST /logout               clears it
//   GET  /, /app.js, /app.css  the page (assets built into the binary)
//   GET  /api/status           Admin.Status as JSON
//   GET  /api/list?states=confirming,cancelling&min_age_ms=&participant=
//                  &page_size=&page_token=      Admin.List as JSON
//   GET  /api/show?gid=        Admin.Show as JSON
//   GET  /api/watch?gid=       Admin.Watch as Server-Sent Events
// A browser with a verified client certificate (TLS mode mtls) needs no
// login: its certificate's identities are what admin.client_identities
// checks. No credential: 401 (the page goes to /login).
//
// CSRF: the only POSTs are /login and /logout, and a POST is refused (403,
// nothing changes) unless its Origin is the console's own; the cookie is
// SameSite=Strict, so other sites' requests never carry it. Pages are sent
// with a Content-Security-Policy that allows only the console's own scripts
// and no framing.
//
// Limits: at most `max_connections` open connections (beyond: 503), a
// request's headers and body at most 8 KiB each, an idle connection closed
// after `idle_timeout_ms`, a Watch stream after 5 minutes (the page
// reconnects).
//
// Thread-safe; one thread per connection, all joined by the destructor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tcc::console {

struct ConsoleOptions {
  std::string address;  // host:port; port 0 picks a free one (port())
  // TLS: with cert_file and key_file, HTTPS; with client_ca_file too, a
  // browser's client certificate is verified when it sends one (mtls).
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // tcc.v1.Admin in this process, and the key that lets the console speak
  // for a browser's verified certificate (rpc::AdminAuth).
  std::shared_ptr<grpc::Channel> admin;
  std::string console_key;
  int max_connections = 64;
  int64_t idle_timeout_ms = 30000;
};

class ConsoleServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ConsoleServer>> Start(
      ConsoleOptions options);
  ~ConsoleServer();  // closes every connection and joins its thread
  int port() const;

  class Impl;

 private:
  explicit ConsoleServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tcc::console
