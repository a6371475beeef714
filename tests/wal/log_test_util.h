// Helpers for the WAL tests: building records, appending and waiting.
#pragma once

#include <chrono>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "record_codec.h"
#include "tcc/identity/content_hash.h"
#include "tcc/wal/log.h"

namespace tcc::wal::testing {

inline Hash HashOf(std::string_view s) { return identity::Sha256(s); }

inline Registered MakeRegistered(const std::string& gid, int64_t created_at_ms,
                                 std::vector<std::string> participants = {"p1"},
                                 int64_t registered_at_ms = -1) {
  Registered r;
  r.gid = gid;
  r.created_at_ms = created_at_ms;
  r.revision = 7;
  r.try_deadline_ms = created_at_ms + 30000;
  r.registered_at_ms = registered_at_ms < 0 ? created_at_ms : registered_at_ms;
  r.content_hash = HashOf("content:" + gid);
  r.owner_epoch = 1;
  int i = 0;
  for (const std::string& p : participants) {
    BranchSpec b;
    b.branch_id = "b" + std::to_string(i++);
    b.participant = p;
    b.action = "reserve";
    b.payload = std::string(40, 'x');
    b.branch_hash = HashOf(gid + b.branch_id);
    r.branches.push_back(std::move(b));
  }
  return r;
}

inline AppendRequest Req(const std::string& gid, std::vector<Record> records,
                         Durability d = Durability::kDurable) {
  AppendRequest req;
  req.gid = gid;
  req.records = std::move(records);
  req.durability = d;
  return req;
}

// Waits at most 2 minutes (a log that never answers fails the test with
// this, instead of hanging it until ctest's timeout with nothing said).
inline absl::Status AppendAndWait(Log& log, AppendRequest request) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  const std::string gid = request.gid;
  log.Append(std::move(request),
             [promise](absl::Status s) { promise->set_value(std::move(s)); });
  if (result.wait_for(std::chrono::minutes(2)) != std::future_status::ready) {
    return absl::DeadlineExceededError("the log did not answer an append of " +
                                       gid + " within 2 minutes");
  }
  return result.get();
}

inline absl::Status PutApprovalAndWait(Log& log, Approval approval) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  log.PutApproval(std::move(approval), [promise](absl::Status s) {
    promise->set_value(std::move(s));
  });
  return result.get();
}

inline Decided MakeDecided(Decision d, int64_t at_ms = 1000) {
  Decided x;
  x.decision = d;
  x.reason = "test";
  x.at_ms = at_ms;
  return x;
}

inline Finished MakeFinished(TxnState s, int64_t at_ms) {
  Finished f;
  f.state = s;
  f.at_ms = at_ms;
  return f;
}

inline PhaseUpdate MakePhase(const std::string& branch, PhaseState s,
                             int64_t at_ms = 1) {
  PhaseUpdate p;
  p.branch_id = branch;
  p.phase = Phase::kTry;
  p.state = s;
  p.outcome = s == PhaseState::kSucceeded ? Outcome::kExecuted : Outcome::kNone;
  p.attempts = 1;
  p.at_ms = at_ms;
  return p;
}

// Records compare by their encoding (records.h has no operator==).
inline std::vector<std::string> Encoded(const std::vector<Record>& records) {
  std::vector<std::string> out;
  for (const Record& r : records) out.push_back(internal::EncodeRecord(r));
  return out;
}

}  // namespace tcc::wal::testing
