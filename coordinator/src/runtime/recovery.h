// The recovery scan of one log (DESIGN.md section 8): it streams the
// transactions the log holds unfinished (Log::ScanUnfinished) into a queue
// and hands them to the driver to resume, while at most `window` resumed
// ones are not yet durably decided (a resumption holds a place until then;
// ReleasePlace gives it back). The scan pauses while its queue is full, by
// count (max(1024, 4 x window)) or by bytes (a quarter of the memory
// budget), so memory stays bounded whatever the backlog.
//
// Requests are served meanwhile, and may load any gid from the log. A
// resumption the scan queued before such a load is moot (the loaded owner is
// newer): from Begin() until the last queued resumption ran, the driver
// notes the gids it loads (NoteLoaded) and each resumption asks Moot()
// first. A gid the log lacks is noted only until the scan has its snapshot
// (SnapshotTaken): after that it cannot be in the scan, and noting every new
// gid for a recovery that lasts minutes would grow without bound.
//
// One Recovery scans one log; a cluster node runs one per shard it takes.
//
// Thread-safety: Scan runs on one thread (the scan executor) and may block
// it while the queue is full (when `may_wait`); every other method may be
// called from any thread. Hooks run without this class's lock held.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "absl/status/status.h"
#include "runtime/memory_budget.h"
#include "tcc/wal/log.h"

namespace tcc::runtime {

struct RecoveryOptions {
  // Resumed and not yet durably decided at once (at least 1).
  size_t window = 4096;
  // The scan may wait for room in its queue: only on an executor of its
  // own (a shard waiting there would never run the resumptions that make
  // room).
  bool may_wait = false;
  // The shard of the log it scans.
  uint32_t shard = 0;
};

class Recovery {
 public:
  struct Hooks {
    // Resumes one scanned transaction, holding a place: posted to its
    // shard, where it calls Moot() first and ReleasePlace() when it no
    // longer holds the place (at once, if it is moot or decided already).
    std::function<void(std::shared_ptr<wal::TxnLog>)> resume;
    // The scan ended: it found `found` unfinished transactions.
    std::function<void(size_t found)> scanned;
    // The scan failed (not when Stop ended it): transactions may be left
    // undriven.
    std::function<void(const absl::Status&)> failed;
  };

  Recovery(wal::Log& log, RecoveryOptions options,
           std::shared_ptr<MemoryBudget> budget, Hooks hooks);
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Loads are noted from now on; call before any request is served.
  void Begin();
  // Streams the scan (blocking the calling thread until it ends).
  void Scan();
  // A scan waiting for room gives up; call before the executors stop.
  void Stop();

  // For a load from the log: before reading, whether a gid the log lacks
  // can still be in the scan (false once it has its snapshot).
  bool SnapshotTaken() const { return snapshot_taken_.load(); }
  // After reading: `gid` was loaded (found, or missing before the
  // snapshot).
  void NoteLoaded(const std::string& gid);
  // For a resumption as it runs: whether a load since the scan made it moot.
  bool Moot(const std::string& gid);
  // A resumption gives its place back (moot, dropped, or durably decided).
  void ReleasePlace();

 private:
  // Hands queued transactions to hooks.resume while the window has room.
  void Resume();
  // REQUIRES: mu_ is held.
  bool QueueFull() const;
  // REQUIRES: mu_ is held. Forgets the noted gids once nothing queued or
  // posted can need them.
  void ForgetIfIdle();

  wal::Log& log_;
  const RecoveryOptions options_;
  const size_t max_queued_;
  std::shared_ptr<MemoryBudget> budget_;
  const Hooks hooks_;

  mutable std::mutex mu_;
  std::condition_variable room_;  // the scan waits on it for room
  bool stopping_ = false;
  bool scanning_ = false;
  std::deque<wal::TxnLog> queue_;
  int64_t queue_bytes_ = 0;  // what the budget was charged for queue_
  size_t active_ = 0;        // places held
  size_t posted_ = 0;        // resumptions handed out and not yet run
  std::unordered_set<std::string> loaded_;
  // Resumptions queued or posted: loads are noted.
  std::atomic<bool> pending_{false};
  std::atomic<bool> snapshot_taken_{false};
};

}  // namespace tcc::runtime
