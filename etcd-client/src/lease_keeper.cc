#include "tcc/etcd/lease_keeper.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tcc::etcd {

absl::StatusOr<std::unique_ptr<LeaseKeeper>> LeaseKeeper::Grant(
    Client& client, LeaseKeeperOptions options, BootClock& clock, LostFn lost) {
  if (options.ttl_ms < 2000 || options.ttl_ms % 1000 != 0) {
    return absl::InvalidArgumentError(
        "a lease TTL is whole seconds, at least 2 s");
  }
  if (options.margin_ms < 0 || options.margin_ms >= options.ttl_ms) {
    return absl::InvalidArgumentError(
        "the lease margin must be at least 0 and below the TTL");
  }
  const int64_t sent_at = clock.NowMs();
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> granted =
      client.LeaseGrant(options.ttl_ms / 1000, options.grant_timeout_ms);
  if (!granted.ok()) return granted.status();
  const int64_t ttl_ms = granted->ttl() * 1000;
  return std::unique_ptr<LeaseKeeper>(
      new LeaseKeeper(client, options, clock, std::move(lost), granted->id(),
                      ttl_ms, sent_at + ttl_ms - options.margin_ms));
}

LeaseKeeper::LeaseKeeper(Client& client, LeaseKeeperOptions options,
                         BootClock& clock, LostFn lost, int64_t lease_id,
                         int64_t ttl_ms, int64_t trusted_until_ms)
    : client_(client),
      options_(options),
      clock_(clock),
      lost_fn_(std::move(lost)),
      lease_id_(lease_id),
      ttl_ms_(ttl_ms),
      trusted_until_ms_(trusted_until_ms) {
  thread_ = std::thread([this] { Loop(); });
}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

absl::Status LeaseKeeper::Revoke() {
  Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = true;
    trusted_until_ms_ = 0;
  }
  return client_.LeaseRevoke(lease_id_);
}

int64_t LeaseKeeper::trusted_until_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_ ? 0 : trusted_until_ms_;
}

bool LeaseKeeper::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

uint64_t LeaseKeeper::answered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answered_;
}

void LeaseKeeper::OnAnswer(int64_t sent_at_ms, int64_t ttl_s) {
  bool now_lost = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++answered_;
    if (ttl_s <= 0) {
      now_lost = !lost_;
      lost_ = true;
      stop_ = true;
    } else {
      trusted_until_ms_ = std::max(
          trusted_until_ms_, sent_at_ms + ttl_s * 1000 - options_.margin_ms);
    }
  }
  cv_.notify_all();
  if (now_lost && lost_fn_) {
    lost_fn_(absl::UnavailableError(
        absl::StrCat("etcd lease ", lease_id_,
                     " is gone (keep-alive answered TTL ", ttl_s, ")")));
  }
}

void LeaseKeeper::Loop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    RunStream();
    // Before the next stream, a short pause (a member that refuses at once
    // would otherwise be spun on).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
  }
}

void LeaseKeeper::RunStream() {
  const int64_t interval =
      options_.interval_ms > 0 ? options_.interval_ms : ttl_ms_ / 3;
  Client::StreamTarget target = client_.CurrentTarget();
  auto stub = etcdserverpb::Lease::NewStub(target.channel);
  grpc::ClientContext context;
  std::string token;
  if (!client_.PrepareContext(context, &token).ok()) {
    client_.MemberFailed(target.member);
    return;
  }
  std::unique_ptr<
      grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                               etcdserverpb::LeaseKeepAliveResponse>>
      stream = stub->LeaseKeepAlive(&context);
  // Send times of the keep-alives not yet answered, oldest first: etcd
  // answers a stream's requests in order.
  std::mutex sent_mu;
  std::deque<int64_t> sent;
  std::atomic<bool> broken{false};
  std::thread reader([&] {
    etcdserverpb::LeaseKeepAliveResponse response;
    while (stream->Read(&response)) {
      int64_t sent_at = 0;
      {
        std::lock_guard<std::mutex> lock(sent_mu);
        if (sent.empty()) continue;  // not ours: etcd answers only requests
        sent_at = sent.front();
        sent.pop_front();
      }
      OnAnswer(sent_at, response.ttl());
    }
    broken = true;
    cv_.notify_all();
  });
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_id_);
  bool stalled = false;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(sent_mu);
      // A keep-alive unanswered for longer than the interval: the member is
      // stuck (stopped, or cut off); another one may answer.
      if (!sent.empty() && clock_.NowMs() - sent.front() > interval) {
        stalled = true;
      }
      if (!stalled) sent.push_back(clock_.NowMs());
    }
    if (stalled || broken || !stream->Write(request)) break;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(interval),
                 [&] { return stop_ || broken.load(); });
    if (stop_ || broken) break;
  }
  context.TryCancel();
  reader.join();
  grpc::Status finished = stream->Finish();
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stop_;
  }
  if (!stopping) {
    if (finished.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      client_.InvalidateToken(token);
    }
    client_.MemberFailed(target.member);
  }
}

}  // namespace tcc::etcd
