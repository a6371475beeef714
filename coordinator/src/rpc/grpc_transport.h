// The driver's participant transport (runtime/environment.h) over gRPC:
// domain calls -> tcc.v1.Participant requests through ParticipantClient, and
// the answers back. A reply that breaks the contract (no outcome, no barrier
// state) is an UNKNOWN error: the outcome stays unknown.
//
// At most `max_outstanding` calls (Try, Confirm, Cancel and Query together)
// are outstanding to one participant; later ones wait, in order, for one to
// end, and their timeout starts when they leave. Without it a burst (the
// recovery of 100,000 transactions resumes them all at once) sends more
// calls than the participant can answer within their timeouts, and every
// timeout is retried: a storm that never lets the participant catch up.
// Every outstanding call ends by its deadline, so waiting calls always move.
//
// Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "rpc/participant_client.h"
#include "runtime/environment.h"

namespace tcc::rpc {

class GrpcTransport final : public runtime::ParticipantTransport {
 public:
  // `post` runs a task later on another thread (errors found before a call
  // leaves must not be reported inside Call). With `allow_direct_targets`, a
  // participant not configured but shaped "host:port" gets a channel on first
  // use.
  GrpcTransport(ParticipantClient& client,
                std::function<void(std::function<void()>)> post,
                bool allow_direct_targets, int max_outstanding = 512);

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

 private:
  // OK when `participant` has a channel (opening one for a direct target).
  absl::Status Reachable(const std::string& participant);

  // Sends now (`send` must call Release(participant) once its call ended)
  // or queues it behind the outstanding calls to `participant`.
  void Admit(const std::string& participant, std::function<void()> send);
  void Release(const std::string& participant);
  static void OnBranchReply(absl::StatusOr<tcc::v1::BranchResponse> reply,
                            const runtime::BranchDone& done);
  static void OnQueryReply(absl::StatusOr<tcc::v1::QueryResponse> reply,
                           const runtime::QueryDone& done);

  ParticipantClient& client_;
  std::function<void(std::function<void()>)> post_;
  bool allow_direct_targets_;
  const int max_outstanding_;

  struct Window {
    int outstanding = 0;
    std::deque<std::function<void()>> waiting;
  };
  std::mutex mu_;
  std::map<std::string, Window> windows_;  // by participant
};

}  // namespace tcc::rpc
