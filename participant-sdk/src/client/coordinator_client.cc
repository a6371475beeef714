#include "tcc/client/coordinator_client.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <time.h>

#include <algorithm>

namespace tcc::client {
namespace {

bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

// The client's one real wait, used between retries unless a test injects
// its own.
void SystemClockWait(int64_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000),
              static_cast<long>((ms % 1000) * 1000000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void SetDeadline(grpc::ClientContext& ctx, int64_t timeout_ms) {
  ctx.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
}

}  // namespace

CoordinatorClient::CoordinatorClient(ClientOptions options)
    : options_(std::move(options)), rng_(std::random_device{}()) {
  if (!options_.credentials) {
    options_.credentials = grpc::InsecureChannelCredentials();
  }
  if (options_.clock == nullptr)
    options_.clock = &clock::SystemClock::Default();
  if (!options_.wait) options_.wait = SystemClockWait;
  options_.max_attempts = std::max(1, options_.max_attempts);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  if (options_.addresses.empty()) options_.addresses = {options_.address};
  for (const std::string& address : options_.addresses) {
    stubs_.push_back(tcc::v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(address, options_.credentials, args)));
  }
}

std::string CoordinatorClient::NewGid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string gid = "g-";
  for (int i = 0; i < 2; ++i) {
    uint64_t v = rng();
    for (int j = 0; j < 16; ++j) {
      gid.push_back(kHex[v & 0xf]);
      v >>= 4;
    }
  }
  return gid;
}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> CoordinatorClient::CallWithRetries(const Request& req,
                                                            Method method) {
  grpc::Status last;
  int64_t backoff = options_.backoff_base_ms;
  int64_t waited_ms = 0;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, options_.attempt_timeout_ms);
    Response resp;
    const size_t node = current_.load() % stubs_.size();
    last = (stubs_[node].get()->*method)(&ctx, req, &resp);
    if (last.ok()) return resp;
    const bool more =
        attempt < options_.max_attempts || waited_ms < options_.retry_for_ms;
    if (!Retryable(last.error_code()) || !more) break;
    // This node may be down (or between owners of the shard): the next one.
    if (last.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      size_t expected = node;
      current_.compare_exchange_strong(expected, (node + 1) % stubs_.size());
    }
    int64_t wait_ms;
    {
      std::lock_guard<std::mutex> lock(rng_mu_);
      wait_ms = std::uniform_int_distribution<int64_t>(0, backoff)(rng_);
    }
    options_.wait(wait_ms);
    waited_ms += std::max<int64_t>(wait_ms, 1);  // bounded with a 0 backoff
    backoff = std::min(backoff * 2, options_.backoff_cap_ms);
  }
  return FromGrpc(last);
}

absl::StatusOr<tcc::v1::SubmitResponse> CoordinatorClient::Submit(
    tcc::v1::SubmitRequest& req) {
  if (req.gid().empty()) req.set_gid(NewGid());
  if (req.created_at_ms() == 0) {
    req.set_created_at_ms(options_.clock->NowUnixMs());
  }
  return CallWithRetries<tcc::v1::SubmitRequest, tcc::v1::SubmitResponse>(
      req, &tcc::v1::Coordinator::Stub::Submit);
}

absl::StatusOr<tcc::v1::BeginResponse> CoordinatorClient::Begin(
    tcc::v1::BeginRequest& req) {
  if (req.gid().empty()) req.set_gid(NewGid());
  if (req.created_at_ms() == 0) {
    req.set_created_at_ms(options_.clock->NowUnixMs());
  }
  return CallWithRetries<tcc::v1::BeginRequest, tcc::v1::BeginResponse>(
      req, &tcc::v1::Coordinator::Stub::Begin);
}

absl::StatusOr<tcc::v1::TryResponse> CoordinatorClient::Try(
    const tcc::v1::TryRequest& req) {
  return CallWithRetries<tcc::v1::TryRequest, tcc::v1::TryResponse>(
      req, &tcc::v1::Coordinator::Stub::Try);
}

absl::StatusOr<tcc::v1::CommitResponse> CoordinatorClient::Commit(
    const tcc::v1::CommitRequest& req) {
  return CallWithRetries<tcc::v1::CommitRequest, tcc::v1::CommitResponse>(
      req, &tcc::v1::Coordinator::Stub::Commit);
}

absl::StatusOr<tcc::v1::RollbackResponse> CoordinatorClient::Rollback(
    const tcc::v1::RollbackRequest& req) {
  return CallWithRetries<tcc::v1::RollbackRequest, tcc::v1::RollbackResponse>(
      req, &tcc::v1::Coordinator::Stub::Rollback);
}

absl::StatusOr<tcc::v1::TransactionView> CoordinatorClient::Get(
    const std::string& gid) {
  tcc::v1::GetRequest req;
  req.set_gid(gid);
  auto resp = CallWithRetries<tcc::v1::GetRequest, tcc::v1::GetResponse>(
      req, &tcc::v1::Coordinator::Stub::Get);
  if (!resp.ok()) return resp.status();
  return resp->transaction();
}

absl::Status CoordinatorClient::Watch(
    const std::string& gid,
    const std::function<bool(const tcc::v1::TransactionView&)>& on_event) {
  grpc::ClientContext ctx;
  tcc::v1::WatchRequest req;
  req.set_gid(gid);
  auto reader = stubs_[current_.load() % stubs_.size()]->Watch(&ctx, req);
  tcc::v1::WatchEvent event;
  while (reader->Read(&event)) {
    if (!on_event(event.transaction())) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (s.error_code() == grpc::StatusCode::CANCELLED) return absl::OkStatus();
  return FromGrpc(s);
}

}  // namespace tcc::client
