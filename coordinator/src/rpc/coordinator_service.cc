#include "rpc/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "rpc/admin_auth.h"
#include "rpc/coordinator_mapping.h"
#include "rpc/status_mapping.h"
#include "tcc/identity/ids.h"

namespace tcc::rpc {
namespace {

// How long the caller still waits (its deadline) in ms, 0 when it set none
// (or one further than a day off, which is as good as none).
int64_t AnswerWithinMs(const grpc::CallbackServerContext* ctx,
                       const std::function<int64_t()>& now_ms) {
  if (!now_ms) return 0;
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return 0;
  const int64_t at = std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline.time_since_epoch())
                         .count();
  const int64_t left = at - now_ms();
  if (left > 24LL * 3600 * 1000) return 0;
  return std::max<int64_t>(1, left);
}

grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx,
                                 const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Finishes a unary call with the backend's answer, filling the response
// with `fill` when the status is OK.
template <typename Fill>
AnswerDone FinishWith(grpc::ServerUnaryReactor* reactor, Fill fill) {
  return [reactor, fill = std::move(fill)](TxnAnswer answer) {
    if (answer.status.ok()) fill(answer);
    reactor->Finish(ToGrpc(answer.status));
  };
}

}  // namespace

template <typename Request, typename Response, typename Send>
grpc::ServerUnaryReactor* CoordinatorService::MaybeRoute(
    grpc::CallbackServerContext* ctx, std::string_view gid,
    const Request* request, Response* response, Send send) {
  CallRouter* router = options_.router;
  // An invalid gid is refused here, by the admission rules.
  if (router == nullptr || !identity::ValidateGid(gid).ok()) return nullptr;
  const CallRouter::Route route = router->ForGid(gid);
  if (route.kind == CallRouter::Route::Kind::kLocal) return nullptr;
  if (route.kind == CallRouter::Route::Kind::kRefuse) {
    return Refuse(ctx, route.refusal);
  }
  const auto& meta = ctx->client_metadata();
  if (meta.find(kForwardedHeader) != meta.end()) {
    return Refuse(ctx, absl::UnavailableError(absl::StrCat(
                           "gid ", std::string(gid),
                           ": forwarded to a node that no longer owns its "
                           "shard (it moved); retry")));
  }
  auto* reactor = ctx->DefaultReactor();
  auto client = std::make_shared<grpc::ClientContext>();
  client->set_deadline(ctx->deadline());
  client->AddMetadata(kForwardedHeader, "1");
  send(route.stub, client.get(), request, response,
       [reactor, client, router](grpc::Status status) {
         router->Forwarded(status);
         reactor->Finish(status);
       });
  return reactor;
}

CoordinatorService::CoordinatorService(CoordinatorBackend& backend,
                                       CoordinatorServiceOptions options)
    : backend_(backend), options_(std::move(options)) {}

absl::Status CoordinatorService::CheckWaitFor(int wait_for) {
  if (!tcc::v1::WaitFor_IsValid(wait_for)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wait_for ", wait_for));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::Submit(
    grpc::CallbackServerContext* ctx, const tcc::v1::SubmitRequest* request,
    tcc::v1::SubmitResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::SubmitRequest* q, tcc::v1::SubmitResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Submit(c, q, r, std::move(f));
          })) {
    return routed;
  }
  if (absl::Status s = CheckWaitFor(request->wait_for()); !s.ok()) {
    return Refuse(ctx, s);
  }
  auto* reactor = ctx->DefaultReactor();
  core::SubmitSpec spec = FromProto(*request);
  spec.answer_within_ms = AnswerWithinMs(ctx, options_.now_ms);
  backend_.Submit(std::move(spec),
                  FinishWith(reactor, [response](const TxnAnswer& a) {
                    ToProto(a.view, response->mutable_transaction());
                    response->set_duplicate(a.duplicate);
                  }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Begin(
    grpc::CallbackServerContext* ctx, const tcc::v1::BeginRequest* request,
    tcc::v1::BeginResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::BeginRequest* q, tcc::v1::BeginResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Begin(c, q, r, std::move(f));
          })) {
    return routed;
  }
  auto* reactor = ctx->DefaultReactor();
  core::BeginSpec spec = FromProto(*request);
  spec.answer_within_ms = AnswerWithinMs(ctx, options_.now_ms);
  backend_.Begin(std::move(spec),
                 FinishWith(reactor, [response](const TxnAnswer& a) {
                   ToProto(a.view, response->mutable_transaction());
                   response->set_duplicate(a.duplicate);
                 }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Try(
    grpc::CallbackServerContext* ctx, const tcc::v1::TryRequest* request,
    tcc::v1::TryResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::TryRequest* q, tcc::v1::TryResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Try(c, q, r, std::move(f));
          })) {
    return routed;
  }
  if (!request->has_branch()) {
    return Refuse(ctx, absl::InvalidArgumentError("branch is required"));
  }
  auto* reactor = ctx->DefaultReactor();
  backend_.Try(
      request->gid(), FromProto(request->branch()),
      FinishWith(reactor,
                 [response](const TxnAnswer& a) {
                   if (a.branch >= 0 &&
                       a.branch < static_cast<int>(a.view.branches.size())) {
                     ToProto(a.view.branches[a.branch],
                             response->mutable_branch());
                   }
                   response->set_duplicate(a.duplicate);
                 }),
      AnswerWithinMs(ctx, options_.now_ms));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Commit(
    grpc::CallbackServerContext* ctx, const tcc::v1::CommitRequest* request,
    tcc::v1::CommitResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::CommitRequest* q, tcc::v1::CommitResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Commit(c, q, r, std::move(f));
          })) {
    return routed;
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return Refuse(ctx, s);
  }
  if (absl::Status s = CheckWaitFor(request->wait_for()); !s.ok()) {
    return Refuse(ctx, s);
  }
  std::vector<std::string> expected(request->expected_branch_ids().begin(),
                                    request->expected_branch_ids().end());
  auto* reactor = ctx->DefaultReactor();
  backend_.Commit(request->gid(), std::move(expected),
                  FromProto(request->wait_for()),
                  FinishWith(reactor, [response](const TxnAnswer& a) {
                    ToProto(a.view, response->mutable_transaction());
                  }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Rollback(
    grpc::CallbackServerContext* ctx, const tcc::v1::RollbackRequest* request,
    tcc::v1::RollbackResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::RollbackRequest* q, tcc::v1::RollbackResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Rollback(c, q, r, std::move(f));
          })) {
    return routed;
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return Refuse(ctx, s);
  }
  if (absl::Status s = CheckWaitFor(request->wait_for()); !s.ok()) {
    return Refuse(ctx, s);
  }
  auto* reactor = ctx->DefaultReactor();
  backend_.Rollback(request->gid(), FromProto(request->wait_for()),
                    FinishWith(reactor, [response](const TxnAnswer& a) {
                      ToProto(a.view, response->mutable_transaction());
                    }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Get(
    grpc::CallbackServerContext* ctx, const tcc::v1::GetRequest* request,
    tcc::v1::GetResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  if (auto* routed = MaybeRoute(
          ctx, request->gid(), request, response,
          [](tcc::v1::Coordinator::Stub* stub, grpc::ClientContext* c,
             const tcc::v1::GetRequest* q, tcc::v1::GetResponse* r,
             std::function<void(grpc::Status)> f) {
            stub->async()->Get(c, q, r, std::move(f));
          })) {
    return routed;
  }
  if (absl::Status s = identity::ValidateGid(request->gid()); !s.ok()) {
    return Refuse(ctx, s);
  }
  auto* reactor = ctx->DefaultReactor();
  backend_.Get(request->gid(),
               FinishWith(reactor, [response](const TxnAnswer& a) {
                 ToProto(a.view, response->mutable_transaction());
               }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::List(
    grpc::CallbackServerContext* ctx, const tcc::v1::ListRequest* request,
    tcc::v1::ListResponse* response) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return Refuse(ctx, s);
  wal::ListQuery query;
  for (int s : request->states()) {
    wal::TxnState state;
    if (!FromProto(static_cast<tcc::v1::TxnState>(s), &state)) {
      return Refuse(ctx, absl::InvalidArgumentError(
                             absl::StrCat("unknown state ", s, " in states")));
    }
    query.states.push_back(state);
  }
  if (!request->participant().empty()) {
    if (absl::Status s =
            identity::ValidateParticipantName(request->participant());
        !s.ok()) {
      return Refuse(ctx, s);
    }
    query.participant = request->participant();
  }
  if (request->page_size() > options_.max_list_page) {
    return Refuse(ctx,
                  absl::InvalidArgumentError(absl::StrCat(
                      "page_size is over the limit ", options_.max_list_page)));
  }
  query.page_size = request->page_size() == 0
                        ? std::min<uint32_t>(100, options_.max_list_page)
                        : request->page_size();
  query.page_token = request->page_token();
  if (request->min_age_ms() > 0 && options_.now_ms) {
    const int64_t now = options_.now_ms();
    // Older than the clock itself: nothing qualifies (and now - age must
    // not wrap).
    if (request->min_age_ms() >=
        static_cast<uint64_t>(std::max<int64_t>(now, 0))) {
      return Refuse(ctx, absl::OkStatus());  // an empty page
    }
    query.registered_before_ms =
        now - static_cast<int64_t>(request->min_age_ms());
  }
  auto page = backend_.List(query);
  if (!page.ok()) return Refuse(ctx, page.status());
  for (const wal::TxnSummary& s : page->items) {
    tcc::v1::TransactionView* v = response->add_transactions();
    v->set_gid(s.gid);
    v->set_state(ToProto(s.state));
    v->set_decision(ToProto(s.decision));
    if (s.state != wal::TxnState::kOpen) {
      v->set_content_hash(identity::ToBytes(s.content_hash));
    }
    v->set_revision(s.revision);
    v->set_created_at_ms(s.created_at_ms);
    v->set_registered_at_ms(s.registered_at_ms);
    v->set_finished_at_ms(s.finished_at_ms);
  }
  response->set_next_page_token(page->next_page_token);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

// Streams views in order, one write in flight at a time; finishes after the
// final state, or when the client goes away.
class WatchReactor final
    : public grpc::ServerWriteReactor<tcc::v1::WatchEvent> {
 public:
  explicit WatchReactor(std::atomic<uint32_t>& streams) : streams_(streams) {}

  void Subscribe(CoordinatorBackend& backend, const std::string& gid) {
    auto sub =
        backend.Watch(gid, [this](absl::StatusOr<core::TransactionView> view) {
          OnChange(std::move(view));
        });
    std::lock_guard<std::mutex> lock(mu_);
    subscription_ = std::move(sub);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    queue_.pop_front();
    NextLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    std::unique_ptr<WatchSubscription> sub;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sub = std::move(subscription_);
      done_ = true;
    }
    sub.reset();  // no more OnChange after this returns
    streams_.fetch_sub(1);
    delete this;
  }

 private:
  void OnChange(absl::StatusOr<core::TransactionView> view) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || done_ || final_queued_ || error_) return;
    if (!view.ok()) {
      error_ = ToGrpc(view.status());
      if (!writing_) FinishLocked(*error_);
      return;
    }
    tcc::v1::WatchEvent event;
    ToProto(*view, event.mutable_transaction());
    // Each event is the whole transaction: while one is being written, only
    // the newest waiting one matters. A reader slower than the changes (a
    // branch retried for hours changes at every attempt) skips the ones in
    // between instead of growing the queue without bound.
    if (queue_.size() >= 2) {
      queue_.back() = std::move(event);
    } else {
      queue_.push_back(std::move(event));
    }
    if (wal::IsFinal(view->state)) final_queued_ = true;
    NextLocked();
  }

  void NextLocked() {
    if (writing_ || finished_) return;
    if (queue_.empty()) {
      if (error_) {
        FinishLocked(*error_);
      } else if (final_queued_) {
        FinishLocked(grpc::Status::OK);
      }
      return;
    }
    writing_ = true;
    StartWrite(&queue_.front());
  }

  void FinishLocked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  std::atomic<uint32_t>& streams_;
  std::mutex mu_;
  std::deque<tcc::v1::WatchEvent> queue_;
  std::unique_ptr<WatchSubscription> subscription_;
  std::optional<grpc::Status> error_;
  bool writing_ = false;
  bool final_queued_ = false;
  bool finished_ = false;
  bool done_ = false;
};

class RefusedWatch final
    : public grpc::ServerWriteReactor<tcc::v1::WatchEvent> {
 public:
  explicit RefusedWatch(const absl::Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

// Cluster mode: every Watch, so that the stream follows its gid across a
// takeover or a hand-over. Every kRelayPollMs the relay asks the router
// where the gid is served: while this node drives its shard, the driver's
// own subscription pushes each change (none is missed); elsewhere the
// gid's view is polled with a Get forwarded to the owner (changes closer
// together than a poll may be seen as one). A shard moving away (it goes
// quiet here) or arriving switches the mode at the next tick. The stream
// ends after the final state, on NOT_FOUND, when the client goes, or after
// kRelayMaxUnowned polls without an owner. Callbacks (the Get, the timer,
// the subscription) share `State` with the reactor and touch the reactor
// only until OnDone.
constexpr int64_t kRelayPollMs = 100;
constexpr int kRelayMaxUnowned = 600;  // a minute without an owner

// The relays' one timer thread (made on first use, for the process's life):
// runs each task at its time. Tasks must not block.
class RelayTimer {
 public:
  static RelayTimer& Get() {
    static RelayTimer* timer = new RelayTimer();  // never destroyed
    return *timer;
  }
  void After(int64_t ms, std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.emplace(
          std::chrono::steady_clock::now() + std::chrono::milliseconds(ms),
          std::move(task));
    }
    cv_.notify_one();
  }

 private:
  RelayTimer() {
    std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (tasks_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = tasks_.begin();
      if (first->first > std::chrono::steady_clock::now()) {
        cv_.wait_until(lock, first->first);
        continue;
      }
      std::function<void()> task = std::move(first->second);
      tasks_.erase(first);
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>>
      tasks_;
};

class RelayWatch final : public grpc::ServerWriteReactor<tcc::v1::WatchEvent> {
 public:
  RelayWatch(CallRouter& router, CoordinatorBackend& backend, std::string gid,
             std::atomic<uint32_t>& streams)
      : state_(std::make_shared<State>()), streams_(streams) {
    state_->router = &router;
    state_->backend = &backend;
    state_->gid = std::move(gid);
    state_->reactor = this;
    Tick(state_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->writing = false;
    if (!ok) return FinishLocked(*state_, grpc::Status::CANCELLED);
    if (state_->finish_after_write) {
      return FinishLocked(*state_, *state_->finish_after_write);
    }
    if (state_->final_sent) return FinishLocked(*state_, grpc::Status::OK);
    if (state_->pending) {
      state_->event = *std::move(state_->pending);
      state_->pending.reset();
      WriteLocked(*state_);
    }
  }

  void OnCancel() override {
    grpc::ClientContext* in_flight = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->cancelled = true;
      in_flight = state_->client.get();  // not replaced once finished
      FinishLocked(*state_, grpc::Status::CANCELLED);
    }
    if (in_flight != nullptr) in_flight->TryCancel();
  }

  void OnDone() override {
    std::unique_ptr<WatchSubscription> sub;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->reactor = nullptr;  // a pending tick or poll finds it gone
      sub = std::move(state_->subscription);
    }
    sub.reset();  // no more pushes once this returns
    streams_.fetch_sub(1);
    delete this;
  }

 private:
  struct State {
    std::mutex mu;
    RelayWatch* reactor = nullptr;  // null once OnDone ran
    CallRouter* router = nullptr;
    CoordinatorBackend* backend = nullptr;
    std::string gid;
    // Push mode: the driver's subscription (this node drives the shard);
    // `resubscribe` once it ended with UNAVAILABLE.
    std::unique_ptr<WatchSubscription> subscription;
    bool resubscribe = false;
    // Poll mode: the Get in flight.
    bool polling = false;
    std::unique_ptr<grpc::ClientContext> client;
    tcc::v1::GetRequest request;
    tcc::v1::GetResponse response;
    // The write in flight, and the newest view waiting behind it.
    tcc::v1::WatchEvent event;
    std::optional<tcc::v1::WatchEvent> pending;
    bool writing = false;
    std::optional<grpc::Status> finish_after_write;
    std::string last;  // the last view queued, serialized
    int unowned = 0;
    bool cancelled = false;
    bool finished = false;
    bool final_sent = false;
  };

  static bool Over(const State& st) {
    return st.finished || st.reactor == nullptr;
  }

  // Finishes now, or once the write in flight is done.
  static void FinishLocked(State& st, grpc::Status status) {
    if (Over(st)) return;
    if (st.writing) {
      if (!st.finish_after_write) st.finish_after_write = std::move(status);
      return;
    }
    st.finished = true;
    st.reactor->Finish(std::move(status));
  }

  static void WriteLocked(State& st) {
    st.writing = true;
    wal::TxnState state;
    st.final_sent = FromProto(st.event.transaction().state(), &state) &&
                    wal::IsFinal(state);
    st.reactor->StartWrite(&st.event);
  }

  // Queues a view (skipping one equal to the last): written now, or after
  // the write in flight (only the newest waiting one matters).
  static void EmitLocked(State& st, const tcc::v1::TransactionView& view) {
    std::string now = view.SerializeAsString();
    if (now == st.last || st.final_sent) return;
    st.last = std::move(now);
    tcc::v1::WatchEvent e;
    *e.mutable_transaction() = view;
    if (st.writing) {
      st.pending = std::move(e);
      return;
    }
    st.event = std::move(e);
    WriteLocked(st);
  }

  // Where the gid is served now: push here, or poll the owner.
  static void Tick(const std::shared_ptr<State>& st) {
    enum class Todo { kNothing, kSubscribe, kPoll };
    Todo todo = Todo::kNothing;
    std::unique_ptr<WatchSubscription> gone;
    CallRouter::Route route;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (Over(*st)) return;
      if (st->backend->stopping()) {
        // As a local Watch ends when tccd stops (the backend ends it): the
        // client watches again at another node, not held until gRPC's
        // shutdown deadline cancels the stream.
        return FinishLocked(
            *st, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "tccd is stopping; watch again at another "
                              "node"));
      }
      route = st->router->ForGid(st->gid);
      if (route.kind == CallRouter::Route::Kind::kLocal) {
        if (st->subscription == nullptr || st->resubscribe) {
          gone = std::move(st->subscription);
          st->resubscribe = false;
          todo = Todo::kSubscribe;
        }
      } else {
        gone = std::move(st->subscription);  // the shard moved away
        if (!st->polling) {
          st->polling = true;
          todo = Todo::kPoll;
          if (route.kind == CallRouter::Route::Kind::kForward) {
            st->client = std::make_unique<grpc::ClientContext>();
            st->client->set_deadline(std::chrono::system_clock::now() +
                                     std::chrono::seconds(5));
            st->client->AddMetadata(kForwardedHeader, "1");
            st->request.set_gid(st->gid);
            st->response.Clear();
          }
        }
      }
    }
    // Outside st->mu: a subscription's end waits for a push in progress,
    // which takes st->mu.
    gone.reset();
    RelayTimer::Get().After(kRelayPollMs, [st] { Tick(st); });
    if (todo == Todo::kSubscribe) {
      std::unique_ptr<WatchSubscription> sub = st->backend->Watch(
          st->gid, [st](absl::StatusOr<core::TransactionView> view) {
            Pushed(st, std::move(view));
          });
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (!Over(*st) && st->subscription == nullptr) {
          st->subscription = std::move(sub);
        }
      }
      sub.reset();  // the stream ended meanwhile: dropped here
      return;
    }
    if (todo != Todo::kPoll) return;
    if (route.kind == CallRouter::Route::Kind::kRefuse) {
      return Polled(st, route.refusal, nullptr);
    }
    route.stub->async()->Get(
        st->client.get(), &st->request, &st->response, [st](grpc::Status s) {
          Polled(st, FromGrpc(s), &st->response.transaction());
        });
  }

  // A change the driver pushed (push mode).
  static void Pushed(const std::shared_ptr<State>& st,
                     absl::StatusOr<core::TransactionView> view) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (Over(*st)) return;
    if (st->cancelled) return FinishLocked(*st, grpc::Status::CANCELLED);
    if (!view.ok()) {
      // The shard is moving or being taken (the next tick subscribes
      // again, or polls its new owner), or the gid is not there.
      if (absl::IsUnavailable(view.status())) {
        st->resubscribe = true;
        return;
      }
      return FinishLocked(*st, ToGrpc(view.status()));
    }
    st->unowned = 0;
    tcc::v1::TransactionView v;
    ToProto(*view, &v);
    EmitLocked(*st, v);
  }

  // A poll's answer (poll mode).
  static void Polled(const std::shared_ptr<State>& st, const absl::Status& s,
                     const tcc::v1::TransactionView* view) {
    std::lock_guard<std::mutex> lock(st->mu);
    st->polling = false;
    if (Over(*st)) return;
    if (st->cancelled) return FinishLocked(*st, grpc::Status::CANCELLED);
    // Pushes took over meanwhile (the shard came here): they are newer.
    if (st->subscription != nullptr) return;
    if (!s.ok()) {
      const bool moving = absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
      if (moving && ++st->unowned < kRelayMaxUnowned) return;
      return FinishLocked(*st, ToGrpc(s));
    }
    st->unowned = 0;
    EmitLocked(*st, *view);
  }

  std::shared_ptr<State> state_;
  std::atomic<uint32_t>& streams_;
};

}  // namespace

grpc::ServerWriteReactor<tcc::v1::WatchEvent>* RefuseWatch(
    const absl::Status& status) {
  return new RefusedWatch(status);
}

absl::Status CoordinatorService::CheckRate(grpc::CallbackServerContext* ctx) {
  if (options_.rate_limiter == nullptr || !options_.rate_limiter->enabled()) {
    return absl::OkStatus();
  }
  const std::vector<std::string> cert_ids = PeerCertIdentities(*ctx);
  // A call a node forwarded: the node its caller called limited it.
  for (const std::string& id : cert_ids) {
    if (std::find(options_.peer_identities.begin(),
                  options_.peer_identities.end(),
                  id) != options_.peer_identities.end()) {
      return absl::OkStatus();
    }
  }
  const std::string client = ClientIdentity(*ctx, cert_ids);
  if (options_.rate_limiter->Admit(client)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("too many requests from ", client,
                   " (limits.client_requests_per_s); retry later"));
}

grpc::ServerWriteReactor<tcc::v1::WatchEvent>* CoordinatorService::Watch(
    grpc::CallbackServerContext* ctx, const tcc::v1::WatchRequest* request) {
  if (absl::Status s = CheckRate(ctx); !s.ok()) return new RefusedWatch(s);
  return StartWatch(*request, watch_streams_);
}

grpc::ServerWriteReactor<tcc::v1::WatchEvent>* CoordinatorService::AdminWatch(
    const tcc::v1::WatchRequest& request) {
  return StartWatch(request, admin_watch_streams_);
}

grpc::ServerWriteReactor<tcc::v1::WatchEvent>* CoordinatorService::StartWatch(
    const tcc::v1::WatchRequest& request, std::atomic<uint32_t>& streams) {
  if (absl::Status s = identity::ValidateGid(request.gid()); !s.ok()) {
    return new RefusedWatch(s);
  }
  if (streams.fetch_add(1) >= options_.max_watch_streams) {
    streams.fetch_sub(1);
    return new RefusedWatch(absl::ResourceExhaustedError(absl::StrCat(
        "too many Watch streams (limit ", options_.max_watch_streams, ")")));
  }
  // Cluster mode: relayed even while this node owns the gid's shard, so the
  // stream follows the gid when the shard moves away (a subscription to
  // this node's driver would just go quiet then).
  if (options_.router != nullptr) {
    return new RelayWatch(*options_.router, backend_, request.gid(), streams);
  }
  auto* reactor = new WatchReactor(streams);
  reactor->Subscribe(backend_, request.gid());
  return reactor;
}

}  // namespace tcc::rpc
