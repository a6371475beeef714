// The driver's participant transport (runtime/environment.h) over HTTP/1.1
// with JSON bodies, for participants whose stack has no gRPC (DESIGN.md
// section 15; the protocol is stated in proto/tcc/v1/participant.proto):
// POST <url>/try, /confirm, /cancel, /query with protobuf's JSON mapping of
// the request, the answer the JSON of the response. Boost.Beast for HTTP,
// OpenSSL (Asio's ssl) for https, protobuf's json_util for JSON.
//
// Per participant a pool of at most `max_connections` keep-alive
// connections; that is also the most calls in flight to it (HTTP/1.1, no
// pipelining). Calls made while every connection is busy wait in order and
// leave on the next connection that frees; each call's deadline (its
// timeout_ms, from the driver's adaptive timeouts) starts when it leaves, as
// for gRPC, and every call in flight ends by its deadline, so waiting calls
// always move. A connection is reused after a complete answer that allows
// keep-alive and closed after anything else. A call whose reused connection
// turns out dead (closed by the participant while idle: no byte of an answer
// came back) is sent once more on a new connection (the same call, same
// key: the barrier makes that safe).
//
// A participant whose endpoint says `batch` (it serves POST <url>/batch,
// the JSON of tcc.v1.BatchRequest -> BatchResponse) gets calls batched as
// GrpcTransport batches them: at most `batch_requests_in_flight` requests in
// flight to it; calls made meanwhile wait, in order, and when one ends the
// waiting ones leave together as one /batch request (at most
// Options::batch_max_calls calls and batch_max_bytes bytes of JSON; one
// call alone leaves as a single call to its own path). A batch's deadline
// is the longest of its calls' timeouts; an error of the request is every
// call's error, tagged with its id (runtime::TagRpc) so that the circuit
// breaker counts it once. A /batch answered 404, 405 or 501 (no /batch
// there: nothing ran) gets single calls from then on, up to
// `max_connections` in flight, the refused calls first.
//
// What an answer means is StatusOfHttpAnswer's (below), then
// rpc/participant_mapping.h's, and the driver applies the one classification
// of core/participant_status.h: a 200 that does not parse, an endless or
// oversized body (over `max_response_bytes`), a timeout or a broken
// connection is an unknown outcome, never success and never a failure.
//
// Thread-safe. The transport runs its I/O on a thread of its own; callbacks
// run there and never inside Call/Query.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/environment.h"

namespace tcc::rpc {

// One HTTP participant: where it is and how to reach it.
struct HttpEndpoint {
  bool tls = false;  // https
  std::string host;
  uint16_t port = 0;
  // "" or "/a/b": the URL's path; calls go to <path_prefix>/try etc.
  std::string path_prefix;
  // Keep-alive connections, and so calls in flight, at most.
  int max_connections = 32;
  // https: the CA the participant's certificate must chain to (empty: the
  // system roots), the name it must carry (empty: host), and tccd's client
  // certificate and key (both or neither: mutual TLS).
  std::string ca_file;
  std::string server_name;
  std::string cert_file;
  std::string key_file;
  // It serves POST <path_prefix>/batch (participants.NAME.batch).
  bool batch = false;
  // With `batch`: HTTP requests in flight to it at most (as gRPC's
  // rpcs_in_flight; the most connections too).
  int batch_requests_in_flight = 1;
};

// What an HTTP answer means (DESIGN.md section 15): 200 -> OK (the body is
// the answer, to be parsed); 400 and 422 -> INVALID_ARGUMENT, 409 and 412 ->
// FAILED_PRECONDITION (definite: nothing ran); 429 -> RESOURCE_EXHAUSTED,
// 503 -> UNAVAILABLE, 504 -> DEADLINE_EXCEEDED, any other status ->
// UNKNOWN (all unknown outcomes). The message says the status and, when the
// body is an ErrorResponse, its code and message (else the body's start,
// escaped).
absl::Status StatusOfHttpAnswer(int http_status, std::string_view body);

class HttpTransport final : public runtime::ParticipantTransport {
 public:
  struct Options {
    // The largest answer body read; a longer one (or an endless one) is an
    // unknown outcome. 4 MiB: gRPC's default receive limit.
    int64_t max_response_bytes = 4 << 20;
    // A /batch request's bounds (participant_calls.batch_max_*): calls, and
    // bytes of its JSON body.
    int batch_max_calls = 1024;
    int64_t batch_max_bytes = 1 << 20;
    // Cluster mode: checked as each request leaves (runtime::SendGate); a
    // call still waiting for a connection when it is shut fails
    // NotSentError, not sent.
    runtime::SendGate may_send = nullptr;
  };
  struct Stats {
    int64_t requests = 0;            // HTTP requests sent
    int64_t connections_opened = 0;  // TCP (and TLS) connections made
    int64_t resent_on_new_connection = 0;
    int64_t batches = 0;          // /batch requests
    int64_t batched_calls = 0;    // calls inside them
    int64_t batch_fallbacks = 0;  // participants found without /batch
  };

  // INVALID_ARGUMENT naming the participant when its TLS files cannot be
  // loaded (tccd checks them before, at start: server/tls.h).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HttpTransport>> Create(
      std::map<std::string, HttpEndpoint> endpoints, Options options);
  ~HttpTransport() override;  // Shutdown(5000)

  bool Has(const std::string& participant) const;

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

  // For a stopping daemon: calls made from now on and calls still waiting
  // are dropped (their callbacks never run); calls in flight are cancelled
  // (their callbacks get CANCELLED) and this returns once each has
  // returned, or after `timeout_ms`. Then the I/O thread is joined.
  void Shutdown(int64_t timeout_ms);

  Stats stats() const;

  class Impl;

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  template <typename Response, typename Request, typename Done,
            typename Convert>
  void Send(const std::string& participant, const char* target,
            const char* batch_field, const Request& request, int64_t timeout_ms,
            Done done, Convert convert);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tcc::rpc
