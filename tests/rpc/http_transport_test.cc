// tccd's HTTP participant transport over real sockets on 127.0.0.1 against a
// small Beast server that answers as each test says, misbehaviour included:
// the request is the JSON the contract states; 200 answers are read
// (unknown fields ignored), anything that does not parse is an unknown
// outcome and never an answer; the status codes read as DESIGN.md section 15
// says; an endless, oversized or missing answer ends by the deadline or the
// body limit without a crash; the pool never opens more connections than it
// may, also over 1,000 calls; a connection the participant closed while idle
// is replaced without losing the call; Shutdown ends calls in flight. With
// batch: the calls that waited leave as one /batch, each answered by its
// result, an error of the /batch is every call's (tagged once), and a
// participant without /batch gets single calls.
#include "rpc/http_transport.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/participant_status.h"
#include "rpc/http_test_server.h"
#include "tcc/identity/content_hash.h"
#include "tcc/v1/participant.pb.h"

namespace tcc::testing {
namespace {

using rpc::HttpEndpoint;
using rpc::HttpTransport;

// Waits for `n` answers of type T from the transport's thread.
template <typename T>
class Answers {
 public:
  explicit Answers(size_t n) : got_(n, absl::UnknownError("no answer")) {}
  std::function<void(absl::StatusOr<T>)> Slot(size_t i) {
    return [this, i](absl::StatusOr<T> a) {
      std::lock_guard<std::mutex> lock(mu_);
      got_[i] = std::move(a);
      ++count_;
      cv_.notify_all();
    };
  }
  bool Wait(size_t n, int64_t timeout_ms = 20000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                        [&] { return count_ >= n; });
  }
  absl::StatusOr<T> Get(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return got_[i];
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<absl::StatusOr<T>> got_;
  size_t count_ = 0;
};

struct Branch {
  wal::BranchSpec spec;
  runtime::BranchCall call;
  explicit Branch(std::string gid = "g-1",
                  wal::Phase phase = wal::Phase::kTry) {
    spec.branch_id = "b1";
    spec.participant = "p";
    spec.action = "debit";
    spec.payload = std::string("7:150\0x", 7);
    spec.branch_hash = identity::BranchHash(3, "p", "debit", spec.payload);
    call.gid = std::move(gid);
    call.created_at_ms = 1764633600000;
    call.spec = &spec;
    call.phase = phase;
    call.revision = 3;
    call.attempt = 2;
    call.owner_epoch = 9;
    call.try_deadline_ms = 1764633610000;
  }
};

std::unique_ptr<HttpTransport> Transport(int port, int connections = 4,
                                         std::string prefix = "") {
  HttpEndpoint e;
  e.host = "127.0.0.1";
  e.port = static_cast<uint16_t>(port);
  e.path_prefix = std::move(prefix);
  e.max_connections = connections;
  auto t = HttpTransport::Create({{"p", e}}, {.max_response_bytes = 64 << 10});
  REQUIRE(t.ok());
  return std::move(*t);
}

HttpReply Json(const google::protobuf::Message& m) {
  HttpReply r;
  REQUIRE(google::protobuf::util::MessageToJsonString(m, &r.body).ok());
  return r;
}

HttpReply Executed() {
  v1::BranchResponse resp;
  resp.set_outcome(v1::OUTCOME_EXECUTED);
  return Json(resp);
}

HttpReply Body(int status, std::string body) {
  HttpReply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

absl::StatusOr<runtime::BranchAnswer> CallOnce(HttpTransport& t,
                                               int64_t timeout_ms = 2000) {
  Branch b;
  Answers<runtime::BranchAnswer> answers(1);
  t.Call(b.call, timeout_ms, answers.Slot(0));
  REQUIRE(answers.Wait(1));
  return answers.Get(0);
}

TEST_CASE("a Try goes out as the contract's JSON and its answer comes back") {
  std::mutex mu;
  http::request<http::string_body> seen;
  HttpTestServer server([&](const http::request<http::string_body>& req) {
    std::lock_guard<std::mutex> lock(mu);
    seen = req;
    // Unknown fields are ignored; proto names and camelCase both read.
    return Body(200, R"({"outcome":"OUTCOME_REJECTED","replayed":true,)"
                     R"("message":"insufficient funds","extra":{"x":[1,2]}})");
  });
  auto t = Transport(server.port(), 4, "/tcc/v1");
  auto answer = CallOnce(*t);
  REQUIRE(answer.ok());
  CHECK(answer->outcome == wal::Outcome::kRejected);
  CHECK(answer->replayed);
  CHECK(answer->message == "insufficient funds");

  std::lock_guard<std::mutex> lock(mu);
  CHECK(seen.method() == http::verb::post);
  CHECK(seen.target() == "/tcc/v1/try");
  CHECK(seen[http::field::content_type] == "application/json");
  CHECK(seen["Tcc-Timeout-Ms"] == "2000");
  CHECK(seen.keep_alive());
  // Every field, by its proto name; 64-bit numbers as strings, bytes base64.
  v1::BranchRequest req;
  REQUIRE(google::protobuf::util::JsonStringToMessage(seen.body(), &req).ok());
  CHECK(req.key().gid() == "g-1");
  CHECK(req.key().created_at_ms() == 1764633600000);
  CHECK(req.key().branch_id() == "b1");
  CHECK(req.action() == "debit");
  CHECK(req.payload() == std::string("7:150\0x", 7));
  CHECK(req.branch_hash() == identity::ToBytes(identity::BranchHash(
                                 3, "p", "debit", req.payload())));
  CHECK(req.attempt() == 2);
  CHECK(req.owner_epoch() == 9);
  CHECK(req.try_deadline_ms() == 1764633610000);
  const std::string& body = seen.body();
  CHECK(body.find("\"created_at_ms\":\"1764633600000\"") != std::string::npos);
  CHECK(body.find("\"try_deadline_ms\"") != std::string::npos);
  CHECK(body.find("\"revision\":\"3\"") != std::string::npos);
}

TEST_CASE("Confirm, Cancel and Query go to their paths; Query answers read") {
  std::mutex mu;
  std::vector<std::string> targets;
  HttpTestServer server([&](const http::request<http::string_body>& req) {
    std::lock_guard<std::mutex> lock(mu);
    targets.emplace_back(req.target());
    if (req.target() == "/query") {
      return Body(
          200,
          R"({"state":"BARRIER_STATE_TRIED","authoritative":true,)"
          R"("branchHash":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="})");
    }
    return Executed();
  });
  auto t = Transport(server.port());
  Branch confirm("g-1", wal::Phase::kConfirm),
      cancel("g-2", wal::Phase::kCancel);
  Answers<runtime::BranchAnswer> branch_answers(2);
  t->Call(confirm.call, 2000, branch_answers.Slot(0));
  t->Call(cancel.call, 2000, branch_answers.Slot(1));
  Answers<runtime::QueryAnswer> queries(1);
  t->Query({"g-1", 1764633600000, "b1", "p"}, 2000, queries.Slot(0));
  REQUIRE(branch_answers.Wait(2));
  REQUIRE(queries.Wait(1));
  CHECK(branch_answers.Get(0).ok());
  CHECK(branch_answers.Get(1).ok());
  auto q = queries.Get(0);
  REQUIRE(q.ok());
  CHECK(q->state == core::BarrierState::kTried);
  CHECK(q->authoritative);
  CHECK(q->branch_hash[31] == 31);
  std::lock_guard<std::mutex> lock(mu);
  std::sort(targets.begin(), targets.end());
  CHECK(targets == std::vector<std::string>{"/cancel", "/confirm", "/query"});
}

TEST_CASE("HTTP status codes read as DESIGN.md section 15 says") {
  struct Row {
    int status;
    absl::StatusCode code;
    bool definite;
  };
  const Row rows[] = {
      {400, absl::StatusCode::kInvalidArgument, true},
      {422, absl::StatusCode::kInvalidArgument, true},
      {409, absl::StatusCode::kFailedPrecondition, true},
      {412, absl::StatusCode::kFailedPrecondition, true},
      {429, absl::StatusCode::kResourceExhausted, false},
      {500, absl::StatusCode::kUnknown, false},
      {502, absl::StatusCode::kUnknown, false},
      {503, absl::StatusCode::kUnavailable, false},
      {504, absl::StatusCode::kDeadlineExceeded, false},
      {404, absl::StatusCode::kUnknown, false},
      {301, absl::StatusCode::kUnknown, false},
      {201, absl::StatusCode::kUnknown, false},
      {204, absl::StatusCode::kUnknown, false},
  };
  for (const Row& r : rows) {
    INFO("HTTP " << r.status);
    absl::Status s = rpc::StatusOfHttpAnswer(
        r.status,
        R"({"code":"FAILED_PRECONDITION","message":"confirm after cancel"})");
    CHECK(s.code() == r.code);
    CHECK(core::IsDefiniteRefusal(s.code()) == r.definite);
    CHECK(s.message().find("confirm after cancel") != absl::string_view::npos);
  }
  CHECK(rpc::StatusOfHttpAnswer(200, "anything").ok());
  // A body that is not an ErrorResponse is quoted, escaped and cut.
  absl::Status s = rpc::StatusOfHttpAnswer(503, std::string(1000, '\n'));
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(s.message().size() < 600);

  // And over the wire: each status, end to end.
  std::atomic<int> next{0};
  std::mutex mu;
  HttpTestServer server([&](const http::request<http::string_body>&) {
    return Body(rows[next].status, R"({"code":"X","message":"m"})");
  });
  auto t = Transport(server.port());
  for (next = 0; next < static_cast<int>(std::size(rows)); ++next) {
    INFO("HTTP " << rows[next].status);
    auto answer = CallOnce(*t);
    REQUIRE(!answer.ok());
    CHECK(answer.status().code() == rows[next].code);
  }
}

TEST_CASE("a 200 that is not a BranchResponse is unknown, never an answer") {
  const std::string bodies[] = {
      "",          // empty
      "garbage{",  // not JSON
      "[1,2,3]",   // not an object
      "{}",        // no outcome
      R"({"outcome":"OUTCOME_UNSPECIFIED"})",
      R"({"outcome":"OUTCOME_MAYBE"})",  // an outcome nobody knows
      R"({"outcome":17})",
      // Wrong types (protobuf's reader takes "yes" or "1" for a bool, as
      // its JSON mapping allows; an object or a list it refuses).
      R"({"outcome":"OUTCOME_EXECUTED","replayed":{"x":1}})",
      R"({"outcome":["OUTCOME_EXECUTED"]})",
      std::string("\xff\xfe{\"outcome\":1}", 15),
  };
  std::atomic<int> next{0};
  HttpTestServer server([&](const http::request<http::string_body>&) {
    return Body(200, bodies[next]);
  });
  auto t = Transport(server.port());
  for (next = 0; next < static_cast<int>(std::size(bodies)); ++next) {
    INFO("body " << bodies[next]);
    auto answer = CallOnce(*t);
    REQUIRE(!answer.ok());
    CHECK(!core::IsDefiniteRefusal(answer.status().code()));
  }
}

TEST_CASE("an endless, oversized or garbage answer ends without a crash") {
  enum Mode { kEndless, kOversized, kRawGarbage, kTooLongHeader, kGood };
  Mode mode = kGood;
  std::mutex mu;
  HttpTestServer server([&](const http::request<http::string_body>&) {
    std::lock_guard<std::mutex> lock(mu);
    HttpReply r;
    switch (mode) {
      case kEndless:
        r.kind = HttpReply::Kind::kEndless;
        break;
      case kOversized:
        r = Body(200, std::string(65 << 10, ' ') + R"({"outcome":1})");
        break;
      case kRawGarbage:
        r.kind = HttpReply::Kind::kRaw;
        r.body = "HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n{}";
        break;
      case kTooLongHeader:
        r.kind = HttpReply::Kind::kRaw;
        r.body = "HTTP/1.1 200 OK\r\nX: " + std::string(100000, 'a') +
                 "\r\nContent-Length: 2\r\n\r\n{}";
        break;
      case kGood:
        r = Executed();
        break;
    }
    return r;
  });
  auto t = Transport(server.port());
  for (Mode m : {kEndless, kOversized, kRawGarbage, kTooLongHeader}) {
    {
      std::lock_guard<std::mutex> lock(mu);
      mode = m;
    }
    INFO("mode " << m);
    auto answer = CallOnce(*t, 5000);
    REQUIRE(!answer.ok());
    CHECK(!core::IsDefiniteRefusal(answer.status().code()));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    mode = kGood;
  }
  auto answer = CallOnce(*t);
  REQUIRE(answer.ok());
  CHECK(answer->outcome == wal::Outcome::kExecuted);
}

TEST_CASE(
    "no answer: DEADLINE_EXCEEDED by the call's deadline, then a new "
    "connection works") {
  std::atomic<bool> hang{true};
  HttpTestServer server([&](const http::request<http::string_body>&) {
    if (hang) {
      HttpReply r;
      r.kind = HttpReply::Kind::kHang;
      return r;
    }
    return Executed();
  });
  auto t = Transport(server.port(), 1);
  auto answer = CallOnce(*t, 300);
  REQUIRE(!answer.ok());
  CHECK(answer.status().code() == absl::StatusCode::kDeadlineExceeded);
  hang = false;
  answer = CallOnce(*t);
  REQUIRE(answer.ok());
  CHECK(server.accepted() == 2);
}

TEST_CASE("nobody listening: UNAVAILABLE") {
  int port;
  {
    HttpTestServer gone(
        [](const http::request<http::string_body>&) { return Executed(); });
    port = gone.port();
  }
  auto t = Transport(port);
  auto answer = CallOnce(*t);
  REQUIRE(!answer.ok());
  CHECK(answer.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE(
    "over 1,000 calls the participant sees no more connections than "
    "the pool's size") {
  std::atomic<int> in_handler{0};
  std::atomic<int> most_in_handler{0};
  HttpTestServer server([&](const http::request<http::string_body>&) {
    const int now = ++in_handler;
    int seen = most_in_handler;
    while (now > seen && !most_in_handler.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    --in_handler;
    return Executed();
  });
  constexpr int kPool = 4;
  constexpr size_t kCalls = 1000;
  auto t = Transport(server.port(), kPool);
  std::vector<std::unique_ptr<Branch>> branches;
  Answers<runtime::BranchAnswer> answers(kCalls);
  for (size_t i = 0; i < kCalls; ++i) {
    branches.push_back(std::make_unique<Branch>("g-" + std::to_string(i)));
    t->Call(branches.back()->call, 10000, answers.Slot(i));
  }
  REQUIRE(answers.Wait(kCalls, 60000));
  for (size_t i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    REQUIRE(answers.Get(i).ok());
  }
  CHECK(server.accepted() <= kPool);
  CHECK(server.max_open() <= kPool);
  CHECK(most_in_handler.load() <= kPool);
  CHECK(most_in_handler.load() >= 2);  // the pool was used, not one line
  CHECK(server.requests() == static_cast<int>(kCalls));
  CHECK(t->stats().connections_opened <= kPool);
  CHECK(t->stats().requests == static_cast<int64_t>(kCalls));
}

TEST_CASE(
    "a connection the participant closed while idle is replaced; the "
    "call is not lost") {
  HttpTestServer server(
      [](const http::request<http::string_body>&) { return Executed(); });
  auto t = Transport(server.port(), 1);
  REQUIRE(CallOnce(*t).ok());
  server.CloseAll();  // the idle keep-alive connection goes
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto answer = CallOnce(*t);
  REQUIRE(answer.ok());
  CHECK(server.accepted() == 2);
  CHECK(t->stats().resent_on_new_connection == 1);
  // "Connection: close" answers are honoured: a new connection each.
}

TEST_CASE("Connection: close answers get a new connection for each call") {
  HttpTestServer server([](const http::request<http::string_body>&) {
    HttpReply r = Executed();
    r.keep_alive = false;
    return r;
  });
  auto t = Transport(server.port(), 2);
  for (int i = 0; i < 3; ++i) REQUIRE(CallOnce(*t).ok());
  CHECK(server.accepted() == 3);
  CHECK(t->stats().resent_on_new_connection == 0);
}

TEST_CASE("Shutdown ends calls in flight (CANCELLED) and drops waiting ones") {
  HttpTestServer server([](const http::request<http::string_body>&) {
    HttpReply r;
    r.kind = HttpReply::Kind::kHang;
    return r;
  });
  auto t = Transport(server.port(), 1);
  Branch a("g-a"), b("g-b");
  Answers<runtime::BranchAnswer> answers(2);
  t->Call(a.call, 60000, answers.Slot(0));
  t->Call(b.call, 60000, answers.Slot(1));  // waits for the one connection
  for (int i = 0; i < 4000 && server.requests() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(server.requests() == 1);  // the first is in flight
  t->Shutdown(5000);
  REQUIRE(answers.count() == 1);
  CHECK(answers.Get(0).status().code() == absl::StatusCode::kCancelled);
  // After Shutdown nothing is sent and nothing calls back.
  Branch c("g-c");
  Answers<runtime::BranchAnswer> late(1);
  t->Call(c.call, 1000, late.Slot(0));
  CHECK(!late.Wait(1, 300));
}

// A transport whose participant serves /batch, one request in flight.
std::unique_ptr<HttpTransport> BatchingTransport(int port, int connections = 4,
                                                 int in_flight = 1) {
  HttpEndpoint e;
  e.host = "127.0.0.1";
  e.port = static_cast<uint16_t>(port);
  e.max_connections = connections;
  e.batch = true;
  e.batch_requests_in_flight = in_flight;
  auto t = HttpTransport::Create({{"p", e}}, {.max_response_bytes = 64 << 10});
  REQUIRE(t.ok());
  return std::move(*t);
}

// Holds the first request in the handler until Release().
class Gate {
 public:
  void HoldHere() {
    std::unique_lock<std::mutex> lock(mu_);
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool open_ = false;
};

TEST_CASE(
    "batch: calls made while a request is in flight leave together as one "
    "/batch, each answered as its own result says") {
  Gate gate;
  std::mutex mu;
  std::vector<http::request<http::string_body>> seen;
  HttpTestServer server([&](const http::request<http::string_body>& req) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(req);
    }
    if (req.target() == "/try") {
      gate.HoldHere();
      return Executed();
    }
    v1::BatchResponse resp;
    resp.add_results()->mutable_branch()->set_outcome(v1::OUTCOME_EXECUTED);
    auto* r = resp.add_results();
    r->mutable_branch()->set_outcome(v1::OUTCOME_REJECTED);
    r->mutable_branch()->set_replayed(true);
    r = resp.add_results();
    r->set_code(9);  // FAILED_PRECONDITION
    r->set_error_message("confirm without try");
    resp.add_results()->mutable_query()->set_state(v1::BARRIER_STATE_TRIED);
    resp.add_results();  // code 0 without its reply
    return Json(resp);
  });
  auto t = BatchingTransport(server.port());
  Branch first("g-0");
  Answers<runtime::BranchAnswer> answers(5);
  t->Call(first.call, 5000, answers.Slot(0));
  REQUIRE(gate.WaitHeld());
  Branch b1("g-1"), b2("g-2"), b3("g-3", wal::Phase::kConfirm),
      b4("g-4", wal::Phase::kCancel);
  t->Call(b1.call, 5000, answers.Slot(1));
  t->Call(b2.call, 5000, answers.Slot(2));
  t->Call(b3.call, 5000, answers.Slot(3));
  runtime::QueryCall q;
  q.participant = "p";
  q.gid = "g-5";
  q.created_at_ms = 1764633600000;
  q.branch_id = "b1";
  Answers<runtime::QueryAnswer> queried(1);
  t->Query(q, 7000, queried.Slot(0));
  t->Call(b4.call, 5000, answers.Slot(4));
  gate.Release();
  REQUIRE(answers.Wait(5));
  REQUIRE(queried.Wait(1));

  REQUIRE(answers.Get(0).ok());
  REQUIRE(answers.Get(1).ok());
  CHECK(answers.Get(1)->outcome == wal::Outcome::kExecuted);
  REQUIRE(answers.Get(2).ok());
  CHECK(answers.Get(2)->outcome == wal::Outcome::kRejected);
  CHECK(answers.Get(2)->replayed);
  CHECK(answers.Get(3).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(answers.Get(3).status().message() == "confirm without try");
  REQUIRE(queried.Get(0).ok());
  CHECK(queried.Get(0)->state == core::BarrierState::kTried);
  CHECK(answers.Get(4).status().code() == absl::StatusCode::kUnknown);
  // Every error of the batch carries its id, for the breaker.
  CHECK(runtime::RpcOf(answers.Get(3).status()) != 0);
  CHECK(runtime::RpcOf(answers.Get(3).status()) ==
        runtime::RpcOf(answers.Get(4).status()));

  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].target() == "/batch");
  CHECK(seen[1]["Tcc-Timeout-Ms"] == "7000");  // the longest timeout
  v1::BatchRequest batch;
  REQUIRE(
      google::protobuf::util::JsonStringToMessage(seen[1].body(), &batch).ok());
  REQUIRE(batch.calls_size() == 5);
  CHECK(batch.calls(0).try_call().key().gid() == "g-1");
  CHECK(batch.calls(1).try_call().key().gid() == "g-2");
  CHECK(batch.calls(2).confirm_call().key().gid() == "g-3");
  CHECK(batch.calls(3).query_call().key().gid() == "g-5");
  CHECK(batch.calls(4).cancel_call().key().gid() == "g-4");
  CHECK(batch.calls(4).cancel_call().try_deadline_ms() == 1764633610000);
  CHECK(server.max_open() == 1);  // one request in flight at most
  CHECK(t->stats().batches == 1);
  CHECK(t->stats().batched_calls == 5);
}

TEST_CASE("a call waiting when the send gate shuts is not sent") {
  // The first Try holds the one connection (or the one /batch in flight);
  // three more wait. The gate shuts (the node stopped trusting its cluster
  // lease) while they wait: none may leave when the connection frees.
  const bool batching = GENERATE(false, true);
  INFO("batch: " << batching);
  Gate gate;
  std::atomic<int> requests{0};
  HttpTestServer server([&](const http::request<http::string_body>& req) {
    ++requests;
    if (req.target() == "/try") gate.HoldHere();
    return Executed();
  });
  HttpEndpoint e;
  e.host = "127.0.0.1";
  e.port = static_cast<uint16_t>(server.port());
  e.max_connections = 1;
  e.batch = batching;
  e.batch_requests_in_flight = 1;
  std::atomic<bool> open{true};
  HttpTransport::Options o{.max_response_bytes = 64 << 10};
  o.may_send = [&open] { return open.load(); };
  auto t = HttpTransport::Create({{"p", e}}, o);
  REQUIRE(t.ok());
  std::vector<Branch> branches;
  branches.reserve(4);  // a Branch's call points into it: never moved
  for (int i = 0; i < 4; ++i) branches.emplace_back("g-" + std::to_string(i));
  Answers<runtime::BranchAnswer> answers(4);
  (*t)->Call(branches[0].call, 5000, answers.Slot(0));
  REQUIRE(gate.WaitHeld());
  for (size_t i = 1; i < 4; ++i) {
    (*t)->Call(branches[i].call, 5000, answers.Slot(i));
  }
  open = false;
  gate.Release();
  REQUIRE(answers.Wait(4));
  REQUIRE(answers.Get(0).ok());  // it left while the gate was open
  for (size_t i = 1; i < 4; ++i) {
    INFO("call " << i);
    REQUIRE_FALSE(answers.Get(i).ok());
    CHECK(runtime::IsNotSent(answers.Get(i).status()));
    CHECK(answers.Get(i).status().code() == absl::StatusCode::kUnavailable);
  }
  CHECK(requests.load() == 1);
  // Open again: calls leave as before.
  open = true;
  Branch later("g-9");
  Answers<runtime::BranchAnswer> again(1);
  (*t)->Call(later.call, 5000, again.Slot(0));
  REQUIRE(again.Wait(1));
  CHECK(again.Get(0).ok());
  CHECK(requests.load() == 2);
}

TEST_CASE(
    "batch: an error of the /batch is every call's, tagged once; a wrong "
    "number of results or a body that does not parse is unknown") {
  struct Row {
    HttpReply reply;
    absl::StatusCode code;
  };
  v1::BatchResponse one;
  one.add_results()->mutable_branch()->set_outcome(v1::OUTCOME_EXECUTED);
  const std::vector<Row> rows = {
      {Json(one), absl::StatusCode::kUnknown},  // 1 result for 2 calls
      {Body(200, "{\"results\": 5"), absl::StatusCode::kUnknown},
      {Body(503, ""), absl::StatusCode::kUnavailable},
      {Body(400, ""), absl::StatusCode::kInvalidArgument},
  };
  for (const Row& row : rows) {
    INFO("status " << row.reply.status << " body " << row.reply.body);
    Gate gate;
    HttpTestServer server([&](const http::request<http::string_body>& req) {
      if (req.target() == "/try") {
        gate.HoldHere();
        return Executed();
      }
      return row.reply;
    });
    auto t = BatchingTransport(server.port());
    Branch b0("g-0"), b1("g-1"), b2("g-2");
    Answers<runtime::BranchAnswer> answers(3);
    t->Call(b0.call, 5000, answers.Slot(0));
    REQUIRE(gate.WaitHeld());
    t->Call(b1.call, 5000, answers.Slot(1));
    t->Call(b2.call, 5000, answers.Slot(2));
    gate.Release();
    REQUIRE(answers.Wait(3));
    REQUIRE(answers.Get(0).ok());
    for (size_t i : {1, 2}) {
      CHECK(answers.Get(i).status().code() == row.code);
    }
    CHECK(runtime::RpcOf(answers.Get(1).status()) != 0);
    CHECK(runtime::RpcOf(answers.Get(1).status()) ==
          runtime::RpcOf(answers.Get(2).status()));
  }
}

TEST_CASE(
    "batch: a /batch answered 404 gets single calls from then on; no call "
    "is lost and the pool opens up to its connections") {
  Gate gate;
  std::atomic<int> batches{0};
  std::atomic<int> singles{0};
  HttpTestServer server([&](const http::request<http::string_body>& req) {
    if (req.target() == "/batch") {
      ++batches;
      return Body(404, "no such path");
    }
    if (singles++ == 0) gate.HoldHere();
    return Executed();
  });
  auto t = BatchingTransport(server.port(), 3);
  constexpr size_t kCalls = 8;
  std::vector<std::unique_ptr<Branch>> branches;
  Answers<runtime::BranchAnswer> answers(kCalls);
  branches.push_back(std::make_unique<Branch>("g-0"));
  t->Call(branches.back()->call, 5000, answers.Slot(0));
  REQUIRE(gate.WaitHeld());
  for (size_t i = 1; i < kCalls; ++i) {
    branches.push_back(std::make_unique<Branch>("g-" + std::to_string(i)));
    t->Call(branches.back()->call, 5000, answers.Slot(i));
  }
  gate.Release();
  REQUIRE(answers.Wait(kCalls));
  for (size_t i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    CHECK(answers.Get(i).ok());
  }
  CHECK(batches == 1);
  CHECK(singles == static_cast<int>(kCalls));
  CHECK(t->stats().batch_fallbacks == 1);
  CHECK(server.max_open() <= 3);
  // Later calls go alone at once.
  REQUIRE(CallOnce(*t).ok());
  CHECK(batches == 1);
}

}  // namespace
}  // namespace tcc::testing
