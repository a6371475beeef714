#include "rpc/http_transport.h"

#include <google/protobuf/util/json_util.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rpc/participant_mapping.h"

namespace tcc::rpc {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::redirect_error;
using asio::use_awaitable;

// The most of an error body quoted in a status message.
constexpr size_t kQuotedBodyBytes = 200;

std::string Quote(std::string_view body) {
  std::string_view head = body.substr(0, kQuotedBodyBytes);
  std::string quoted =
      absl::CHexEscape(absl::string_view(head.data(), head.size()));
  if (body.size() > head.size()) absl::StrAppend(&quoted, "...");
  return quoted;
}

google::protobuf::util::JsonParseOptions ParseOptions() {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;  // participants may add fields
  return o;
}

// Field names as in the .proto file, every field present (defaults too), so
// that a participant written by hand finds every key it reads.
google::protobuf::util::JsonPrintOptions PrintOptions() {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  return o;
}

// Reads `body` as `message`: OK, or UNKNOWN saying why it is not one.
template <typename Message>
absl::Status ParseAnswer(std::string_view body, Message* message) {
  auto s = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), message,
      ParseOptions());
  if (s.ok()) return absl::OkStatus();
  return absl::UnknownError(absl::StrCat(
      "participant answered HTTP 200 with a body that is not a ",
      message->GetTypeName(), " (", s.ToString(), "): ", Quote(body)));
}

const char* PathOf(ParticipantOp op) {
  switch (op) {
    case ParticipantOp::kTry:
      return "/try";
    case ParticipantOp::kConfirm:
      return "/confirm";
    case ParticipantOp::kCancel:
      return "/cancel";
  }
  return "/try";
}

const char* BatchFieldOf(ParticipantOp op) {
  switch (op) {
    case ParticipantOp::kTry:
      return "try_call";
    case ParticipantOp::kConfirm:
      return "confirm_call";
    case ParticipantOp::kCancel:
      return "cancel_call";
  }
  return "try_call";
}

// An HTTP answer as it came: the status and the body.
struct Answer {
  int status = 0;
  std::string body;
};

// One request waiting for, or on, a connection: a single call, or a
// /batch of them (made when it leaves).
struct Job {
  std::string target;  // path
  std::string body;    // JSON
  int64_t timeout_ms = 0;
  std::function<void(absl::StatusOr<Answer>)> done;
  // A single call: its field in a BatchCall ("try_call", ...) and where its
  // result goes when it travels in a /batch (an error, or a result whose
  // code is 0 carrying the reply its field expects). Null in a /batch.
  const char* batch_field = nullptr;
  std::function<void(absl::StatusOr<tcc::v1::BatchResult>)> batch_done;
};

constexpr char kQueryField[] = "query_call";

// What a call adds to a /batch body beyond its own JSON: {"FIELD":...} and
// a comma; and the body's own {"calls":[]}.
int64_t BatchedBytes(const Job& job) {
  return static_cast<int64_t>(job.body.size() + std::strlen(job.batch_field)) +
         6;
}
constexpr int64_t kBatchEnvelopeBytes = 12;

// A /batch answered with one of these has no /batch there: nothing ran.
bool NoBatchThere(int http_status) {
  return http_status == 404 || http_status == 405 || http_status == 501;
}

bool TakeReply(tcc::v1::BatchResult& r, tcc::v1::BranchResponse* out) {
  if (!r.has_branch()) return false;
  *out = std::move(*r.mutable_branch());
  return true;
}
bool TakeReply(tcc::v1::BatchResult& r, tcc::v1::QueryResponse* out) {
  if (!r.has_query()) return false;
  *out = std::move(*r.mutable_query());
  return true;
}

// A keep-alive connection: plaintext or TLS, connected on first use.
struct Connection {
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  bool used = false;  // carried a complete exchange before

  bool connected() const { return plain != nullptr || secure != nullptr; }
  beast::tcp_stream& lowest() {
    return secure ? beast::get_lowest_layer(*secure) : *plain;
  }
};

// A call's deadline: when its timer fires first, the connection is closed
// (every operation on it ends) and the call reads as DEADLINE_EXCEEDED.
// Shared with the timer's handler, which may run after the call is over.
struct Deadline {
  explicit Deadline(asio::any_io_executor ex) : timer(std::move(ex)) {}
  asio::steady_timer timer;
  Connection* connection = nullptr;  // valid while !over
  tcp::resolver* resolver = nullptr;
  bool fired = false;
  bool over = false;
};

}  // namespace

absl::Status StatusOfHttpAnswer(int http_status, std::string_view body) {
  if (http_status == 200) return absl::OkStatus();
  std::string what = absl::StrCat("participant answered HTTP ", http_status);
  tcc::v1::ErrorResponse error;
  if (!body.empty() &&
      google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(body.data(), body.size()), &error,
          ParseOptions())
          .ok() &&
      (!error.code().empty() || !error.message().empty())) {
    absl::StrAppend(&what, " ", absl::CHexEscape(error.code()), ": ",
                    absl::CHexEscape(error.message()));
  } else if (!body.empty()) {
    absl::StrAppend(&what, ": ", Quote(body));
  }
  switch (http_status) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(what);
    case 409:
    case 412:
      return absl::FailedPreconditionError(what);
    case 429:
      return absl::ResourceExhaustedError(what);
    case 503:
      return absl::UnavailableError(what);
    case 504:
      return absl::DeadlineExceededError(what);
    default:
      return absl::UnknownError(what);
  }
}

class HttpTransport::Impl {
 public:
  // One participant's connections and the calls waiting for one.
  struct Pool {
    std::string name;
    HttpEndpoint endpoint;
    std::string host_header;
    std::unique_ptr<ssl::context> tls;

    std::mutex mu;
    std::deque<Job> waiting;                        // under mu
    std::vector<std::unique_ptr<Connection>> idle;  // under mu
    std::set<Connection*> busy;                     // under mu
    int open = 0;           // idle + busy + being opened; <= Limit(), under mu
    bool no_batch = false;  // /batch refused (under mu)
  };

  explicit Impl(Options options)
      : options_(options), work_(ctx_.get_executor()) {}

  absl::Status AddPool(const std::string& name, HttpEndpoint endpoint);
  void StartThread() {
    thread_ = std::thread([this] { ctx_.run(); });
  }

  Pool* Find(const std::string& participant) const {
    auto it = pools_.find(participant);
    return it == pools_.end() ? nullptr : it->second.get();
  }

  // Sends `job` on a free connection, or queues it.
  void Submit(Pool& pool, Job job);
  // Whether waiting calls to `pool` leave together. REQUIRES: pool.mu held.
  bool Batching(const Pool& pool) const {
    return pool.endpoint.batch && !pool.no_batch &&
           options_.batch_max_calls > 1;
  }
  // Connections (so requests in flight) to `pool` at most. REQUIRES:
  // pool.mu held.
  int Limit(const Pool& pool) const {
    return Batching(pool) ? std::min(pool.endpoint.max_connections,
                                     pool.endpoint.batch_requests_in_flight)
                          : pool.endpoint.max_connections;
  }
  // Runs `fn` on the I/O thread (dropped once stopping).
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    asio::post(ctx_, std::move(fn));
  }
  void Shutdown(int64_t timeout_ms);
  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // Serves `job`, then the calls waiting, on `connection`, until none waits.
  awaitable<void> Serve(Pool& pool, std::unique_ptr<Connection> connection,
                        Job job);
  // One request and its answer; `reusable` says whether the connection may
  // carry another, `answered` whether any byte of an answer came back.
  awaitable<absl::StatusOr<Answer>> Exchange(Pool& pool, Connection& c,
                                             const Job& job, bool* reusable,
                                             bool* answered);
  awaitable<beast::error_code> Connect(Pool& pool, Connection& c,
                                       Deadline& deadline);
  absl::Status ErrorOf(const beast::error_code& ec, const Deadline& deadline,
                       const Job& job, std::string_view during) const;
  void EndCoroutine();
  // The next request from `pool.waiting` (not empty): its first call, or
  // with batching the calls that fit in one /batch (`*batched` of them; 0
  // for a single call). REQUIRES: pool.mu held.
  Job TakeNext(Pool& pool, int* batched);
  // Gives each call of a /batch its result, or the request's error tagged
  // with `id`; a /batch that is not there puts the calls back in front.
  void OnBatchAnswer(Pool& pool, uint64_t id, std::vector<Job>& calls,
                     absl::StatusOr<Answer> answer);
  void Count(int64_t Stats::*field, int64_t n = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.*field += n;
  }

  const Options options_;
  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::map<std::string, std::unique_ptr<Pool>> pools_;  // fixed after Create

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  bool stopping_ = false;  // under mu_
  int running_ = 0;        // Serve coroutines, under mu_
  Stats stats_;            // under mu_
  std::atomic<uint64_t> next_batch_id_{0};
};

absl::Status HttpTransport::Impl::AddPool(const std::string& name,
                                          HttpEndpoint endpoint) {
  auto pool = std::make_unique<Pool>();
  pool->name = name;
  pool->host_header = absl::StrCat(endpoint.host, ":", endpoint.port);
  endpoint.max_connections = std::max(1, endpoint.max_connections);
  endpoint.batch_requests_in_flight =
      std::max(1, endpoint.batch_requests_in_flight);
  if (endpoint.tls) {
    std::string key = "ca_file";
    try {
      auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
      context->set_options(ssl::context::default_workarounds |
                           ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                           ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      context->set_verify_mode(ssl::verify_peer);
      if (endpoint.ca_file.empty()) {
        context->set_default_verify_paths();
      } else {
        context->load_verify_file(endpoint.ca_file);
      }
      if (!endpoint.cert_file.empty()) {
        key = "cert_file";
        context->use_certificate_chain_file(endpoint.cert_file);
        key = "key_file";
        context->use_private_key_file(endpoint.key_file, ssl::context::pem);
      }
      pool->tls = std::move(context);
    } catch (const boost::system::system_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("participants.", name, ".tls.", key, ": ", e.what()));
    }
  }
  pool->endpoint = std::move(endpoint);
  pools_[name] = std::move(pool);
  return absl::OkStatus();
}

void HttpTransport::Impl::Submit(Pool& pool, Job job) {
  std::unique_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // dropped: the daemon is going
    ++running_;
  }
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (!pool.idle.empty()) {
      connection = std::move(pool.idle.back());
      pool.idle.pop_back();
    } else if (pool.open < Limit(pool)) {
      ++pool.open;
      connection = std::make_unique<Connection>();
    } else {
      pool.waiting.push_back(std::move(job));
    }
    if (connection) pool.busy.insert(connection.get());
  }
  if (!connection) {
    EndCoroutine();  // queued: a connection that frees takes it
    return;
  }
  // Posted, so that no answer is ever delivered inside Call/Query.
  asio::post(ctx_, [this, &pool, connection = std::move(connection),
                    job = std::move(job)]() mutable {
    asio::co_spawn(ctx_, Serve(pool, std::move(connection), std::move(job)),
                   asio::detached);
  });
}

void HttpTransport::Impl::EndCoroutine() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--running_ == 0) idle_cv_.notify_all();
}

awaitable<void> HttpTransport::Impl::Serve(
    Pool& pool, std::unique_ptr<Connection> connection, Job job) {
  for (;;) {
    bool dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped = stopping_;  // as a call made after Shutdown
    }
    if (dropped) {
      std::lock_guard<std::mutex> lock(pool.mu);
      pool.busy.erase(connection.get());
      --pool.open;
      break;
    }
    bool reusable = false;
    bool answered = false;
    const bool reused = connection->used;
    absl::StatusOr<Answer> answer =
        co_await Exchange(pool, *connection, job, &reusable, &answered);
    // Kept by the send gate (Exchange): nothing left, nothing to resend.
    const bool gated = runtime::IsNotSent(answer.status());
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    if (!gated && !answer.ok() && reused && !answered && !stopping &&
        answer.status().code() == absl::StatusCode::kUnavailable) {
      // The participant had closed this idle connection: nothing of the
      // call reached a handler that answered. Once more, on a new one.
      Count(&Stats::resent_on_new_connection);
      {
        std::lock_guard<std::mutex> lock(pool.mu);
        pool.busy.erase(connection.get());
        connection = std::make_unique<Connection>();
        pool.busy.insert(connection.get());
      }
      answer = co_await Exchange(pool, *connection, job, &reusable, &answered);
    }
    job.done(std::move(answer));
    std::optional<Job> next;
    int batched = 0;
    // Calls a grown limit (a /batch refused) lets leave now, each on a
    // connection of its own.
    std::vector<Job> more;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    {
      std::lock_guard<std::mutex> lock(pool.mu);
      pool.busy.erase(connection.get());
      if (!reusable || stopping) {
        connection.reset();
        --pool.open;
        if (!stopping && !pool.waiting.empty() && pool.open < Limit(pool)) {
          ++pool.open;
          connection = std::make_unique<Connection>();
        }
      }
      if (connection) {
        if (!pool.waiting.empty()) {
          next = TakeNext(pool, &batched);
          pool.busy.insert(connection.get());
        } else {
          pool.idle.push_back(std::move(connection));
        }
      }
      while (!stopping && !pool.waiting.empty() && pool.open < Limit(pool)) {
        ++pool.open;
        int ignored;
        more.push_back(TakeNext(pool, &ignored));
      }
    }
    if (batched > 0) {
      Count(&Stats::batches);
      Count(&Stats::batched_calls, batched);
    }
    for (Job& extra : more) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++running_;
      }
      auto fresh = std::make_unique<Connection>();
      {
        std::lock_guard<std::mutex> lock(pool.mu);
        pool.busy.insert(fresh.get());
      }
      asio::co_spawn(ctx_, Serve(pool, std::move(fresh), std::move(extra)),
                     asio::detached);
    }
    if (!next) break;
    job = std::move(*next);
  }
  EndCoroutine();
}

Job HttpTransport::Impl::TakeNext(Pool& pool, int* batched) {
  *batched = 0;
  Job first = std::move(pool.waiting.front());
  pool.waiting.pop_front();
  if (!Batching(pool) || pool.waiting.empty()) return first;
  int64_t bytes = kBatchEnvelopeBytes + BatchedBytes(first);
  if (bytes > options_.batch_max_bytes) return first;  // it travels alone
  std::vector<Job> calls;
  calls.push_back(std::move(first));
  while (!pool.waiting.empty() &&
         static_cast<int>(calls.size()) < options_.batch_max_calls &&
         bytes + BatchedBytes(pool.waiting.front()) <=
             options_.batch_max_bytes) {
    bytes += BatchedBytes(pool.waiting.front());
    calls.push_back(std::move(pool.waiting.front()));
    pool.waiting.pop_front();
  }
  if (calls.size() == 1) return std::move(calls.front());
  *batched = static_cast<int>(calls.size());
  // The body: each call's JSON (json_util's, made by Send) as its
  // BatchCall field, in order: {"calls":[{"try_call":{...}},...]}.
  Job batch;
  batch.target = "/batch";
  batch.body.reserve(static_cast<size_t>(bytes));
  batch.body = "{\"calls\":[";
  for (size_t i = 0; i < calls.size(); ++i) {
    absl::StrAppend(&batch.body, i == 0 ? "" : ",", "{\"", calls[i].batch_field,
                    "\":", calls[i].body, "}");
    batch.timeout_ms = std::max(batch.timeout_ms, calls[i].timeout_ms);
  }
  batch.body += "]}";
  const uint64_t id = ++next_batch_id_;
  auto shared = std::make_shared<std::vector<Job>>(std::move(calls));
  batch.done = [this, &pool, id, shared](absl::StatusOr<Answer> answer) {
    OnBatchAnswer(pool, id, *shared, std::move(answer));
  };
  return batch;
}

void HttpTransport::Impl::OnBatchAnswer(Pool& pool, uint64_t id,
                                        std::vector<Job>& calls,
                                        absl::StatusOr<Answer> answer) {
  if (answer.ok() && NoBatchThere(answer->status)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;  // dropped, as calls waiting at Shutdown
    }
    bool first_refusal;
    {
      std::lock_guard<std::mutex> lock(pool.mu);
      first_refusal = !pool.no_batch;
      pool.no_batch = true;
      for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
        pool.waiting.push_front(std::move(*it));
      }
    }
    if (first_refusal) Count(&Stats::batch_fallbacks);
    return;
  }
  tcc::v1::BatchResponse response;
  absl::Status error = answer.status();
  if (error.ok()) error = StatusOfHttpAnswer(answer->status, answer->body);
  if (error.ok()) error = ParseAnswer(answer->body, &response);
  if (error.ok() && response.results_size() != static_cast<int>(calls.size())) {
    error = absl::UnknownError(
        absl::StrCat("participant answered a /batch of ", calls.size(),
                     " calls with ", response.results_size(), " results"));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    Job& c = calls[i];
    absl::Status s = error;
    tcc::v1::BatchResult* r = nullptr;
    if (s.ok()) {
      r = response.mutable_results(static_cast<int>(i));
      const bool query = std::strcmp(c.batch_field, kQueryField) == 0;
      if (r->code() != 0) {
        s = absl::Status(static_cast<absl::StatusCode>(r->code()),
                         r->error_message());
      } else if (query ? !r->has_query() : !r->has_branch()) {
        s = absl::UnknownError(
            "participant answered a batched call without its reply");
      }
    }
    if (!s.ok()) {
      runtime::TagRpc(s, id);
      c.batch_done(std::move(s));
    } else {
      c.batch_done(std::move(*r));
    }
  }
}

absl::Status HttpTransport::Impl::ErrorOf(const beast::error_code& ec,
                                          const Deadline& deadline,
                                          const Job& job,
                                          std::string_view during) const {
  if (deadline.fired) {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer from the participant within ", job.timeout_ms,
                     " ms (HTTP, ", std::string(during), ")"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::CancelledError("tccd is stopping");
  }
  if (ec == http::error::body_limit) {
    return absl::UnknownError(
        absl::StrCat("participant's HTTP answer is longer than ",
                     options_.max_response_bytes, " bytes"));
  }
  // The peer closed the connection: broken, not malformed.
  if (ec != http::error::end_of_stream && ec != http::error::partial_message &&
      ec.category() == beast::error_code(http::error::body_limit).category()) {
    return absl::UnknownError(absl::StrCat(
        "participant's HTTP answer does not parse: ", ec.message()));
  }
  return absl::UnavailableError(
      absl::StrCat("HTTP ", std::string(during), " failed: ", ec.message()));
}

awaitable<beast::error_code> HttpTransport::Impl::Connect(Pool& pool,
                                                          Connection& c,
                                                          Deadline& deadline) {
  auto ex = co_await asio::this_coro::executor;
  const HttpEndpoint& e = pool.endpoint;
  beast::error_code ec;
  if (pool.tls) {
    c.secure =
        std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ex, *pool.tls);
    const std::string& name = e.server_name.empty() ? e.host : e.server_name;
    // SNI, and the name the certificate must carry.
    SSL_set_tlsext_host_name(c.secure->native_handle(), name.c_str());
    c.secure->set_verify_callback(ssl::host_name_verification(name));
  } else {
    c.plain = std::make_unique<beast::tcp_stream>(ex);
  }
  deadline.connection = &c;
  tcp::resolver resolver(ex);
  deadline.resolver = &resolver;
  auto endpoints = co_await resolver.async_resolve(
      e.host, std::to_string(e.port), redirect_error(use_awaitable, ec));
  deadline.resolver = nullptr;
  if (ec || deadline.fired) {
    co_return ec ? ec : beast::error_code(asio::error::timed_out);
  }
  co_await c.lowest().async_connect(endpoints,
                                    redirect_error(use_awaitable, ec));
  if (ec) co_return ec;
  c.lowest().socket().set_option(tcp::no_delay(true), ec);
  ec = {};
  if (c.secure) {
    co_await c.secure->async_handshake(ssl::stream_base::client,
                                       redirect_error(use_awaitable, ec));
    if (ec) co_return ec;
  }
  Count(&Stats::connections_opened);
  co_return ec;
}

awaitable<absl::StatusOr<Answer>> HttpTransport::Impl::Exchange(
    Pool& pool, Connection& c, const Job& job, bool* reusable, bool* answered) {
  auto ex = co_await asio::this_coro::executor;
  *reusable = false;
  *answered = false;
  auto deadline = std::make_shared<Deadline>(ex);
  deadline->connection = c.connected() ? &c : nullptr;
  deadline->timer.expires_after(std::chrono::milliseconds(job.timeout_ms));
  deadline->timer.async_wait([deadline](const beast::error_code& ec) {
    if (ec || deadline->over) return;
    deadline->fired = true;
    if (deadline->resolver != nullptr) deadline->resolver->cancel();
    if (deadline->connection != nullptr && deadline->connection->connected()) {
      beast::error_code ignored;
      deadline->connection->lowest().socket().close(ignored);
    }
  });
  // However this ends, the timer no longer touches the connection.
  struct Disarm {
    std::shared_ptr<Deadline> d;
    ~Disarm() {
      d->over = true;
      d->timer.cancel();
    }
  } disarm{deadline};

  beast::error_code ec;
  if (!c.connected()) {
    ec = co_await Connect(pool, c, *deadline);
    if (ec) co_return ErrorOf(ec, *deadline, job, "connect");
  }
  // Cluster mode: the gate is asked as the request is about to be written,
  // after its waits for a connection and for connecting
  // (runtime::SendGate). Shut: not sent; the connection stays open.
  if (options_.may_send && !options_.may_send()) {
    *reusable = true;
    co_return runtime::NotSentError();
  }
  http::request<http::string_body> request{
      http::verb::post, absl::StrCat(pool.endpoint.path_prefix, job.target),
      11};
  request.set(http::field::host, pool.host_header);
  request.set(http::field::content_type, "application/json");
  request.set(http::field::accept, "application/json");
  request.set("Tcc-Timeout-Ms", std::to_string(job.timeout_ms));
  request.keep_alive(true);
  request.body() = job.body;
  request.prepare_payload();
  Count(&Stats::requests);
  if (c.secure) {
    co_await http::async_write(*c.secure, request,
                               redirect_error(use_awaitable, ec));
  } else {
    co_await http::async_write(*c.plain, request,
                               redirect_error(use_awaitable, ec));
  }
  if (ec) co_return ErrorOf(ec, *deadline, job, "write");

  http::response_parser<http::string_body> parser;
  parser.body_limit(static_cast<uint64_t>(options_.max_response_bytes));
  // The header first, on its own: Boost 1.74's parser, reading eagerly (as
  // async_read does), lets a Content-Length over the body limit through;
  // the header alone is checked against it.
  if (c.secure) {
    co_await http::async_read_header(*c.secure, c.buffer, parser,
                                     redirect_error(use_awaitable, ec));
  } else {
    co_await http::async_read_header(*c.plain, c.buffer, parser,
                                     redirect_error(use_awaitable, ec));
  }
  if (!ec && parser.content_length().has_value() &&
      *parser.content_length() >
          static_cast<uint64_t>(options_.max_response_bytes)) {
    ec = http::error::body_limit;
  }
  if (!ec && !parser.is_done()) {
    if (c.secure) {
      co_await http::async_read(*c.secure, c.buffer, parser,
                                redirect_error(use_awaitable, ec));
    } else {
      co_await http::async_read(*c.plain, c.buffer, parser,
                                redirect_error(use_awaitable, ec));
    }
  }
  *answered = parser.got_some();
  if (ec) co_return ErrorOf(ec, *deadline, job, "read");
  if (deadline->fired) co_return ErrorOf(ec, *deadline, job, "read");
  http::response<http::string_body> response = parser.release();
  c.used = true;
  *reusable = response.keep_alive() && !response.need_eof();
  co_return Answer{static_cast<int>(response.result_int()),
                   std::move(response.body())};
}

void HttpTransport::Impl::Shutdown(int64_t timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  for (auto& [name, pool] : pools_) {
    std::lock_guard<std::mutex> lock(pool->mu);
    pool->waiting.clear();  // never sent: dropped
    pool->idle.clear();
  }
  // Closing a socket ends every operation on it: the calls in flight end
  // (CANCELLED) and their coroutines return.
  asio::post(ctx_, [this] {
    for (auto& [name, pool] : pools_) {
      std::lock_guard<std::mutex> lock(pool->mu);
      for (Connection* c : pool->busy) {
        if (c->connected()) {
          beast::error_code ignored;
          c->lowest().socket().close(ignored);
        }
      }
    }
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [this] { return running_ == 0; });
  }
  work_.reset();
  ctx_.stop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(
    std::map<std::string, HttpEndpoint> endpoints, Options options) {
  auto impl = std::make_unique<Impl>(options);
  for (auto& [name, endpoint] : endpoints) {
    if (absl::Status s = impl->AddPool(name, std::move(endpoint)); !s.ok()) {
      return s;
    }
  }
  impl->StartThread();
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

HttpTransport::~HttpTransport() { Shutdown(5000); }

bool HttpTransport::Has(const std::string& participant) const {
  return impl_->Find(participant) != nullptr;
}

void HttpTransport::Shutdown(int64_t timeout_ms) {
  impl_->Shutdown(timeout_ms);
}

HttpTransport::Stats HttpTransport::stats() const { return impl_->stats(); }

// Sends `request` as JSON to `target` of `participant`; `done` gets the
// answer read as `Response` and converted by `convert`, or the error.
template <typename Response, typename Request, typename Done, typename Convert>
void HttpTransport::Send(const std::string& participant, const char* target,
                         const char* batch_field, const Request& request,
                         int64_t timeout_ms, Done done, Convert convert) {
  Impl::Pool* pool = impl_->Find(participant);
  if (pool == nullptr) {
    // The router sends only HTTP participants here.
    impl_->Post([done = std::move(done), participant] {
      done(absl::UnavailableError(absl::StrCat(
          "participant '", participant, "' is not an HTTP participant")));
    });
    return;
  }
  Job job;
  job.timeout_ms = timeout_ms;
  job.target = target;
  if (auto s = google::protobuf::util::MessageToJsonString(request, &job.body,
                                                           PrintOptions());
      !s.ok()) {
    impl_->Post([done = std::move(done), message = s.ToString()] {
      done(absl::InternalError(
          absl::StrCat("cannot write the request as JSON: ", message)));
    });
    return;
  }
  // Alone or in a /batch: one of the two runs, once.
  auto reply = std::make_shared<std::pair<Done, Convert>>(std::move(done),
                                                          std::move(convert));
  job.done = [reply](absl::StatusOr<Answer> answer) {
    if (!answer.ok()) return reply->first(answer.status());
    if (absl::Status s = StatusOfHttpAnswer(answer->status, answer->body);
        !s.ok()) {
      return reply->first(s);
    }
    Response response;
    if (absl::Status s = ParseAnswer(answer->body, &response); !s.ok()) {
      return reply->first(s);
    }
    reply->first(reply->second(std::move(response)));
  };
  job.batch_field = batch_field;
  job.batch_done = [reply](absl::StatusOr<tcc::v1::BatchResult> result) {
    if (!result.ok()) return reply->first(result.status());
    Response response;
    if (!TakeReply(*result, &response)) {  // OnBatchAnswer checked
      return reply->first(absl::InternalError("batched reply missing"));
    }
    reply->first(reply->second(std::move(response)));
  };
  impl_->Submit(*pool, std::move(job));
}

void HttpTransport::Call(const runtime::BranchCall& call, int64_t timeout_ms,
                         runtime::BranchDone done) {
  const ParticipantOp op = OpOf(call.phase);
  Send<tcc::v1::BranchResponse>(call.spec->participant, PathOf(op),
                                BatchFieldOf(op), BranchRequestOf(call),
                                timeout_ms, std::move(done),
                                [](tcc::v1::BranchResponse response) {
                                  return BranchAnswerOf(std::move(response));
                                });
}

void HttpTransport::Query(const runtime::QueryCall& query, int64_t timeout_ms,
                          runtime::QueryDone done) {
  Send<tcc::v1::QueryResponse>(
      query.participant, "/query", kQueryField, QueryRequestOf(query),
      timeout_ms, std::move(done), [](const tcc::v1::QueryResponse& response) {
        return QueryAnswerOf(response);
      });
}

}  // namespace tcc::rpc
