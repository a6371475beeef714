// What the driver runs on, injected so that tests and the simulation run it
// deterministically and the daemon runs it on Asio and gRPC (DESIGN.md
// section 8; STYLE.md "Time").
//
//   Executor             runs tasks; one per shard, serial (a strand)
//   Clock                wall and monotonic time, one-shot timers
//   ParticipantTransport Try/Confirm/Cancel/Query calls, asynchronous
//
// Implementations: sim/ (deterministic executor, simulated clock, simulated
// transport) for tests; the daemon provides Asio strands, a real clock (the
// only place that reads the system clock) and the gRPC transport.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "core/transaction.h"
#include "tcc/wal/records.h"

namespace tcc::runtime {

// Runs posted tasks. The driver requires each executor it is given to run its
// tasks one at a time, in posting order (a strand); different executors may
// run in parallel. Post is thread-safe and never runs the task inline.
// Dispatch is Post, except that an executor may run the task on the calling
// thread before returning when nothing else of it is running or queued (saving
// a thread hand-off); callers use it only where they hold no lock the task
// may take and may spend the task's time (completions, request handlers).
class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Post(std::function<void()> task) = 0;
  virtual void Dispatch(std::function<void()> task) { Post(std::move(task)); }
};

using TimerId = uint64_t;

// Time. WallMs is Unix ms (the clock persisted deadlines are in); MonotonicMs
// never goes back (durations, timers). Schedule runs `fn` once, on a thread of
// the clock's choosing, after `delay_ms` of monotonic time; Cancel is
// best-effort (a timer already firing may still run). Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t WallMs() const = 0;
  virtual int64_t MonotonicMs() const = 0;
  virtual TimerId Schedule(int64_t delay_ms, std::function<void()> fn) = 0;
  virtual void Cancel(TimerId id) = 0;
};

// One Try, Confirm or Cancel (tcc.v1.BranchRequest). `spec` points into the
// driver's state, or at `read_back`, and is valid only during the Call: copy
// what you keep.
struct BranchCall {
  std::string gid;
  int64_t created_at_ms = 0;
  const wal::BranchSpec* spec = nullptr;
  wal::Phase phase = wal::Phase::kTry;
  uint64_t revision = 0;
  uint32_t attempt = 0;
  uint64_t owner_epoch = 0;
  int64_t try_deadline_ms = 0;
  // The branch with its payload read back from the WAL for this call, when
  // the driver keeps the payload there only (memory pressure); else null.
  std::shared_ptr<const wal::BranchSpec> read_back;
};

// A participant's answer (tcc.v1.BranchResponse).
struct BranchAnswer {
  wal::Outcome outcome = wal::Outcome::kNone;
  bool replayed = false;
  std::string message;
};

struct QueryCall {
  std::string gid;
  int64_t created_at_ms = 0;
  std::string branch_id;
  std::string participant;
};

// The reverse lookup's answer (tcc.v1.QueryResponse).
struct QueryAnswer {
  core::BarrierState state = core::BarrierState::kNotFound;
  wal::Hash branch_hash{};
  bool authoritative = false;
};

// A transport that carries several calls in one request (a batch) tags each
// of their errors with that request's id (TagRpc): a batch that times out
// is one failure of the participant, not one per call it carried, and the
// circuit breaker counts it once (CircuitBreakers::OnResult). Untagged
// errors (id 0) each count. The driver strips the tag (ReceivedStatus)
// before an error goes anywhere else (the core, logs, the WAL).
inline constexpr char kRpcIdPayload[] = "tcc.rpc_id";
inline constexpr char kNotSentPayload[] = "tcc.not_sent";  // NotSentError
inline void TagRpc(absl::Status& status, uint64_t rpc_id) {
  if (!status.ok() && rpc_id != 0) {
    status.SetPayload(kRpcIdPayload, absl::Cord(std::to_string(rpc_id)));
  }
}
inline uint64_t RpcOf(const absl::Status& status) {
  if (status.ok()) return 0;
  const absl::optional<absl::Cord> p = status.GetPayload(kRpcIdPayload);
  uint64_t id = 0;
  if (!p.has_value() || !absl::SimpleAtoi(std::string(*p), &id)) return 0;
  return id;
}

// What tccd keeps of a text a participant sent (an answer's message, an
// error's message): at most kMaxParticipantText bytes, the rest cut and
// marked so. It goes into the WAL with every attempt, into logs, views and
// the memory of the transaction, so its size is bounded whatever the
// participant (or its gRPC or HTTP stack) sends.
inline constexpr size_t kMaxParticipantText = 1024;
std::string ClipParticipantText(std::string text);
// An error as a transport returned it, as the rest of tccd keeps it: the
// transport's marks (TagRpc, NotSentError) stripped, its message clipped.
absl::Status ReceivedStatus(const absl::Status& status);

// Cluster mode: whether calls may leave this process now (the node trusts
// its lease, DESIGN.md section 14). A transport asks it when a call
// actually leaves, after whatever wait in its queue, and fails a call it
// then keeps with NotSentError. Unset: always.
using SendGate = std::function<bool()>;

// A call or query a transport did not send (its SendGate was shut when it
// was to leave) fails with this error: it never left, so nothing happened
// at the participant, unlike after any other transport error (whose outcome
// is unknown). The mark is a payload (kNotSentPayload), stripped with
// ReceivedStatus.
// Also the text of a call the driver does not build for that reason.
inline constexpr char kNotSentMessage[] =
    "this node cannot trust its cluster lease now: the call was not sent";
inline absl::Status NotSentError() {
  absl::Status s = absl::UnavailableError(kNotSentMessage);
  s.SetPayload(kNotSentPayload, absl::Cord("1"));
  return s;
}
inline bool IsNotSent(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kNotSentPayload).has_value();
}

using BranchDone = std::function<void(absl::StatusOr<BranchAnswer>)>;
using QueryDone = std::function<void(absl::StatusOr<QueryAnswer>)>;

// Moves calls to participants. `done` is called once with the answer or the
// transport's error; when `timeout_ms` passes first, with DEADLINE_EXCEEDED.
// (A simulated transport may call it a second time to model a duplicated
// reply; the driver tolerates that.) Callbacks may run on any thread, never
// inside Call/Query. Thread-safe.
class ParticipantTransport {
 public:
  virtual ~ParticipantTransport() = default;
  virtual void Call(const BranchCall& call, int64_t timeout_ms,
                    BranchDone done) = 0;
  virtual void Query(const QueryCall& query, int64_t timeout_ms,
                     QueryDone done) = 0;
};

}  // namespace tcc::runtime
