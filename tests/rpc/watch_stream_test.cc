// The Coordinator service's Watch stream over real gRPC on 127.0.0.1, with a
// fake backend the test pushes changes through: a reader slower than the
// changes gets the first event, then only the newest, so the stream holds at
// most two events; the final state is never skipped and ends the stream OK.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rpc/coordinator_backend.h"
#include "rpc/coordinator_service.h"
#include "tcc/v1/coordinator.grpc.pb.h"

namespace tcc::rpc {
namespace {

using OnChange = std::function<void(absl::StatusOr<core::TransactionView>)>;

// A backend whose only working call is Watch: it keeps the stream's callback
// so the test can push changes, as the driver would, from its own thread.
class PushingBackend final : public CoordinatorBackend {
 public:
  // Blocks until a Watch stream has subscribed; false after 10 s.
  bool WaitForWatch() {
    return subscribed_future_.wait_for(std::chrono::seconds(10)) ==
           std::future_status::ready;
  }

  // Calls the subscribed stream's callback, unless it has unsubscribed.
  void Push(core::TransactionView view) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->on_change) shared_->on_change(std::move(view));
  }

  std::unique_ptr<WatchSubscription> Watch(std::string,
                                           OnChange on_change) override {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->on_change = std::move(on_change);
    }
    subscribed_.set_value();
    return std::make_unique<Subscription>(shared_);
  }

  void Submit(core::SubmitSpec, AnswerDone done) override { Refuse(done); }
  void Begin(core::BeginSpec, AnswerDone done) override { Refuse(done); }
  void Try(std::string, core::BranchSpec, AnswerDone done,
           int64_t) override {
    Refuse(done);
  }
  void Commit(std::string, std::vector<std::string>, core::WaitFor,
              AnswerDone done) override {
    Refuse(done);
  }
  void Rollback(std::string, core::WaitFor, AnswerDone done) override {
    Refuse(done);
  }
  void Get(std::string, AnswerDone done) override { Refuse(done); }
  absl::StatusOr<wal::ListPage> List(const wal::ListQuery&) override {
    return absl::UnimplementedError("not in this test");
  }
  void RetryNow(std::string, std::string, AnswerDone done) override {
    Refuse(done);
  }
  void IssueApproval(wal::Approval,
                     std::function<void(absl::Status)> done) override {
    done(absl::UnimplementedError("not in this test"));
  }
  absl::StatusOr<wal::Approval> ReadApproval(const std::string&) override {
    return absl::UnimplementedError("not in this test");
  }
  void ForceDecision(std::string, wal::Decision, std::string,
                     AnswerDone done) override {
    Refuse(done);
  }
  void ResolveBranch(std::string, std::string, std::string,
                     AnswerDone done) override {
    Refuse(done);
  }
  void Approve(std::string, std::string, AnswerDone done) override {
    Refuse(done);
  }
  absl::StatusOr<wal::TxnLog> ReadLog(const std::string&) override {
    return absl::UnimplementedError("not in this test");
  }
  Health Status() override { return {}; }

 private:
  struct Shared {
    std::mutex mu;  // held while calling on_change; unsubscribing waits on it
    OnChange on_change;
  };
  // Dropping it ends the callbacks (and waits for one in progress), as the
  // backend contract says.
  class Subscription final : public WatchSubscription {
   public:
    explicit Subscription(std::shared_ptr<Shared> shared)
        : shared_(std::move(shared)) {}
    ~Subscription() override {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->on_change = nullptr;
    }

   private:
    std::shared_ptr<Shared> shared_;
  };

  static void Refuse(const AnswerDone& done) {
    TxnAnswer answer;
    answer.status = absl::UnimplementedError("not in this test");
    done(std::move(answer));
  }

  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::promise<void> subscribed_;
  std::future<void> subscribed_future_ = subscribed_.get_future();
};

// Revision `revision` of transaction "g-watch", in `state`. The ballast makes
// each event larger than HTTP/2's flow-control window, so a write cannot
// complete while the client reads nothing: a slow reader without sleeping.
core::TransactionView View(uint64_t revision, wal::TxnState state) {
  core::TransactionView view;
  view.gid = "g-watch";
  view.state = state;
  view.revision = revision;
  view.decision_reason = std::string(512 * 1024, 'r');
  return view;
}

TEST_CASE("a slow Watch reader gets the first and the newest events, ends OK") {
  PushingBackend backend;
  CoordinatorService service(backend, CoordinatorServiceOptions{});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);

  // No BDP probing: the client's window stays at its initial size.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = tcc::v1::Coordinator::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  // A stream that never ends after the final state fails here, not by hanging.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  tcc::v1::WatchRequest request;
  request.set_gid("g-watch");
  std::unique_ptr<grpc::ClientReader<tcc::v1::WatchEvent>> reader =
      stub->Watch(&ctx, request);
  REQUIRE(backend.WaitForWatch());

  // The changes all arrive before the client reads one event.
  constexpr uint64_t kChanges = 100;
  for (uint64_t revision = 1; revision < kChanges; ++revision) {
    backend.Push(View(revision, wal::TxnState::kTrying));
  }
  backend.Push(View(kChanges, wal::TxnState::kConfirmed));

  std::vector<tcc::v1::TransactionView> received;
  tcc::v1::WatchEvent event;
  while (reader->Read(&event)) {
    event.mutable_transaction()->clear_decision_reason();  // the ballast
    received.push_back(event.transaction());
  }
  const grpc::Status status = reader->Finish();
  server->Shutdown();

  INFO("events received: " << received.size() << " of " << kChanges);
  INFO("status: " << status.error_code() << " " << status.error_message());
  CHECK(status.ok());
  REQUIRE(received.size() >= 2);
  // The writes that left before the window filled, the one it blocked, and
  // the newest: far fewer than were pushed (without coalescing, all 100).
  CHECK(received.size() <= kChanges / 10);
  // The first change is the one being written: never replaced.
  CHECK(received.front().revision() == 1);
  // In order, none repeated; the last is the final state.
  for (size_t i = 1; i < received.size(); ++i) {
    CHECK(received[i].revision() > received[i - 1].revision());
  }
  for (size_t i = 0; i + 1 < received.size(); ++i) {
    CHECK(received[i].state() == tcc::v1::TXN_STATE_TRYING);
  }
  CHECK(received.back().revision() == kChanges);
  CHECK(received.back().state() == tcc::v1::TXN_STATE_CONFIRMED);
}

}  // namespace
}  // namespace tcc::rpc
