// One etcd watch (the Watch service) on a key or a range, delivered to a
// callback from a thread of the stream's own.
//
// Events arrive in revision order. A stream that fails (its member died or
// lost its leader) is opened again on the next member from the revision
// after the last one delivered, so nothing is skipped and nothing delivered
// twice. A watch can still end: etcd compacted the revisions it needed (the
// end status is OUT_OF_RANGE, with the compact revision in its message), or
// etcd cancelled it; the caller then reads what it watches again (DESIGN.md
// section 14: a node also reads shards/ and nodes/ every TTL, because a watch
// can end or go quiet). `on_end` is called once, unless Stop() ended it.
//
// Thread-safety: Stop() and the destructor may be called from any thread but
// the callbacks'; the callbacks run on the stream's thread, one at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "tcc/etcd/client.h"

namespace tcc::etcd {

struct WatchSpec {
  std::string key;
  std::string range_end;       // empty: the key alone
  int64_t start_revision = 0;  // 0: from now
};

class WatchStream {
 public:
  using EventsFn = std::function<void(const etcdserverpb::WatchResponse&)>;
  using EndFn = std::function<void(const absl::Status&)>;

  // Starts watching; `client` must outlive the stream.
  WatchStream(Client& client, WatchSpec spec, EventsFn on_events, EndFn on_end);
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  void Stop();
  // The revision of the last delivered event (0 before any).
  int64_t last_revision() const { return last_revision_.load(); }

 private:
  void Loop();
  // One stream's life; returns true when the watch ended for good.
  bool RunStream();

  Client& client_;
  const WatchSpec spec_;
  const EventsFn on_events_;
  const EndFn on_end_;
  std::atomic<int64_t> last_revision_{0};
  std::atomic<bool> stop_{false};
  std::mutex context_mu_;
  std::condition_variable stop_cv_;
  grpc::ClientContext* context_ = nullptr;  // of the open stream
  std::thread thread_;
};

}  // namespace tcc::etcd
