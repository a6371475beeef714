#include "tcc/etcd/watch_stream.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tcc::etcd {

WatchStream::WatchStream(Client& client, WatchSpec spec, EventsFn on_events,
                         EndFn on_end)
    : client_(client),
      spec_(std::move(spec)),
      on_events_(std::move(on_events)),
      on_end_(std::move(on_end)) {
  if (spec_.start_revision > 0) last_revision_ = spec_.start_revision - 1;
  thread_ = std::thread([this] { Loop(); });
}

WatchStream::~WatchStream() { Stop(); }

void WatchStream::Stop() {
  {
    std::lock_guard<std::mutex> lock(context_mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WatchStream::Loop() {
  while (!stop_) {
    if (RunStream()) return;
    if (stop_) return;
    // A short pause before the next member (one refusing at once would
    // otherwise be spun on).
    std::unique_lock<std::mutex> lock(context_mu_);
    stop_cv_.wait_for(lock, std::chrono::milliseconds(100),
                      [&] { return stop_.load(); });
  }
}

bool WatchStream::RunStream() {
  Client::StreamTarget target = client_.CurrentTarget();
  auto stub = etcdserverpb::Watch::NewStub(target.channel);
  grpc::ClientContext context;
  std::string token;
  if (!client_.PrepareContext(context, &token).ok()) {
    client_.MemberFailed(target.member);
    return false;
  }
  // Watches of a member without a leader would go quiet: etcd's clients ask
  // for this metadata so the member refuses instead.
  context.AddMetadata("hasleader", "true");
  {
    std::lock_guard<std::mutex> lock(context_mu_);
    if (stop_) return true;
    context_ = &context;
  }
  auto stream = stub->Watch(&context);
  etcdserverpb::WatchRequest create;
  etcdserverpb::WatchCreateRequest* c = create.mutable_create_request();
  c->set_key(spec_.key);
  c->set_range_end(spec_.range_end);
  const int64_t last = last_revision_.load();
  if (last > 0 || spec_.start_revision > 0) c->set_start_revision(last + 1);
  bool ended = false;
  absl::Status end;
  if (stream->Write(create)) {
    etcdserverpb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.created() && spec_.start_revision == 0 &&
          last_revision_.load() == 0) {
        // A watch "from now": now is this revision. A stream made again
        // after a failure starts after it, not at its own now (the changes
        // made while no stream was open would be skipped).
        last_revision_ = response.header().revision();
      }
      if (response.compact_revision() != 0) {
        end = absl::OutOfRangeError(
            absl::StrCat("etcd watch of ", spec_.key, ": revisions up to ",
                         response.compact_revision(), " were compacted"));
        ended = true;
        break;
      }
      if (response.canceled()) {
        end = absl::CancelledError(
            absl::StrCat("etcd watch of ", spec_.key,
                         " cancelled: ", response.cancel_reason()));
        ended = true;
        break;
      }
      if (response.events_size() > 0) {
        last_revision_ =
            response.events(response.events_size() - 1).kv().mod_revision();
        on_events_(response);
      }
    }
  }
  context.TryCancel();
  grpc::Status finished = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(context_mu_);
    context_ = nullptr;
  }
  if (stop_) return true;
  if (ended) {
    if (on_end_) on_end_(end);
    return true;
  }
  if (finished.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    client_.InvalidateToken(token);
  }
  client_.MemberFailed(target.member);
  return false;
}

}  // namespace tcc::etcd
