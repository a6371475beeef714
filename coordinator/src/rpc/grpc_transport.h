// The driver's participant transport (runtime/environment.h) over gRPC:
// domain calls -> tcc.v1.Participant requests through ParticipantClient, and
// the answers back, read by rpc/participant_mapping.h (a reply that breaks
// the contract is an UNKNOWN error: the outcome stays unknown).
//
// Calls to one participant are bounded and batched. At most
// `rpcs_in_flight` gRPC calls are in flight to a participant; calls made
// meanwhile wait, in order, and when one of those ends the waiting ones leave
// together as one Batch call (at most `batch_max_calls` calls, serialized
// in at most `batch_max_bytes`; a call bigger than that alone leaves alone). So
// batches form only under load: a call never waits for a batch to fill, only
// for a call already in flight. Each call's timeout starts when it leaves; a
// batch's deadline is the longest of its calls' timeouts. An error of the Batch
// itself is every call's error (their outcomes unknown, as for the same error
// of each alone). Every error of a batched call is tagged with the Batch's id
// (runtime::TagRpc), so the circuit breaker counts one failed Batch once.
//
// A participant answering Batch with UNIMPLEMENTED (a server without it; then
// nothing in the batch ran) gets single calls from then on, at most
// `max_outstanding` in flight, the calls of the refused batch first. Without
// a bound a burst (the recovery of 100,000 transactions resumes them all at
// once) sends more calls than the participant can answer within their
// timeouts, and every timeout is retried: a storm that never lets the
// participant catch up. Every call in flight ends by its deadline, so waiting
// calls always move.
//
// Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "rpc/participant_client.h"
#include "runtime/environment.h"

namespace tcc::rpc {

class GrpcTransport final : public runtime::ParticipantTransport {
 public:
  struct Options {
    bool allow_direct_targets = false;
    int rpcs_in_flight = 1;
    // Participants with their own rpcs_in_flight.
    std::map<std::string, int> rpcs_in_flight_for = {};
    int batch_max_calls = 1024;
    int64_t batch_max_bytes = 1024 * 1024;
    int max_outstanding = 512;
    // Cluster mode: checked as calls leave (runtime::SendGate); a call still
    // waiting in a window when it is shut fails NotSentError, not sent.
    runtime::SendGate may_send = nullptr;
  };
  // What went out, for tests and metrics.
  struct Stats {
    int64_t single_calls = 0;     // gRPC calls carrying one call
    int64_t batches = 0;          // Batch calls
    int64_t batched_calls = 0;    // calls inside them
    int64_t batch_fallbacks = 0;  // participants found without Batch
  };

  // `post` runs a task later on another thread (errors found before a call
  // leaves must not be reported inside Call). With `allow_direct_targets`, a
  // participant not configured but shaped "host:port" gets a channel on first
  // use.
  GrpcTransport(ParticipantClient& client,
                std::function<void(std::function<void()>)> post,
                Options options);

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

  Stats stats() const;

 private:
  // One call waiting to leave (exactly one of branch or query).
  struct Pending {
    bool is_query = false;
    ParticipantOp op = ParticipantOp::kTry;
    tcc::v1::BranchRequest branch;
    runtime::BranchDone branch_done;
    tcc::v1::QueryRequest query;
    runtime::QueryDone query_done;
    int64_t timeout_ms = 0;
    int64_t bytes = 0;
  };
  struct Window {
    int in_flight = 0;         // gRPC calls
    bool no_batch = false;     // answered Batch with UNIMPLEMENTED
    bool batch_known = false;  // answered a Batch
    std::deque<Pending> waiting;
  };

  // OK when `participant` has a channel (opening one for a direct target).
  absl::Status Reachable(const std::string& participant);

  // Queues `call` and sends what the window allows.
  void Admit(const std::string& participant, Pending call);
  // Sends waiting calls while `participant`'s window has room: one gRPC
  // call each, or one Batch for all that fit. `ended` gRPC calls just ended.
  void Pump(const std::string& participant, int ended,
            std::deque<Pending> requeue_front = {});
  void SendOne(const std::string& participant, Pending call);
  void SendBatch(const std::string& participant, std::vector<Pending> calls);
  static void Fail(Pending& call, const absl::Status& status);
  static void OnBranchReply(absl::StatusOr<tcc::v1::BranchResponse> reply,
                            const runtime::BranchDone& done);
  static void OnQueryReply(absl::StatusOr<tcc::v1::QueryResponse> reply,
                           const runtime::QueryDone& done);

  ParticipantClient& client_;
  std::function<void(std::function<void()>)> post_;
  const Options options_;

  mutable std::mutex mu_;
  std::map<std::string, Window> windows_;  // by participant
  uint64_t next_batch_id_ = 0;             // under mu_
  Stats stats_;
};

}  // namespace tcc::rpc
