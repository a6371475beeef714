#include "rpc/grpc_transport.h"

#include <algorithm>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "rpc/participant_mapping.h"

namespace tcc::rpc {
namespace {

// What a call adds to a Batch beyond its own serialized size: the
// BatchRequest field's tag and length and the BatchCall oneof's tag and
// length (1 + 5 bytes each at most). Counted so that a Batch's serialized
// size stays within batch_max_bytes (participant.proto promises it).
constexpr int64_t kBatchFramingBytes = 12;

}  // namespace

GrpcTransport::GrpcTransport(ParticipantClient& client,
                             std::function<void(std::function<void()>)> post,
                             Options options)
    : client_(client), post_(std::move(post)), options_([&] {
        options.rpcs_in_flight = std::max(1, options.rpcs_in_flight);
        options.batch_max_calls = std::max(1, options.batch_max_calls);
        options.max_outstanding = std::max(1, options.max_outstanding);
        return options;
      }()) {}

GrpcTransport::Stats GrpcTransport::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void GrpcTransport::Admit(const std::string& participant, Pending call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    windows_[participant].waiting.push_back(std::move(call));
  }
  Pump(participant, 0);
}

void GrpcTransport::Pump(const std::string& participant, int ended,
                         std::deque<Pending> requeue_front) {
  // Asked once here, outside the lock: what would leave now stays if the
  // gate is shut (runtime::SendGate; a node past its lease's trust).
  const bool gate_open = !options_.may_send || options_.may_send();
  std::vector<std::vector<Pending>> to_send;
  std::vector<Pending> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Window& w = windows_[participant];
    w.in_flight -= ended;
    while (!requeue_front.empty()) {
      w.waiting.push_front(std::move(requeue_front.back()));
      requeue_front.pop_back();
    }
    const bool batching = !w.no_batch && options_.batch_max_calls > 1;
    const auto own = options_.rpcs_in_flight_for.find(participant);
    const int rpcs = own != options_.rpcs_in_flight_for.end()
                         ? std::max(1, own->second)
                         : options_.rpcs_in_flight;
    const int limit = batching ? rpcs : options_.max_outstanding;
    if (!gate_open && w.in_flight < limit) {
      // Calls would leave now, and may not: every waiting call is answered
      // not sent, not only the next group's (with room in the window and
      // nothing leaving, no call's end would pump the rest later). With no
      // room they wait: the end of a call in flight pumps again.
      kept.assign(std::make_move_iterator(w.waiting.begin()),
                  std::make_move_iterator(w.waiting.end()));
      w.waiting.clear();
    }
    while (w.in_flight < limit && !w.waiting.empty()) {
      std::vector<Pending> group;
      int64_t bytes = 0;
      do {
        bytes += w.waiting.front().bytes;
        group.push_back(std::move(w.waiting.front()));
        w.waiting.pop_front();
      } while (batching && !w.waiting.empty() &&
               static_cast<int>(group.size()) < options_.batch_max_calls &&
               bytes + w.waiting.front().bytes <= options_.batch_max_bytes);
      ++w.in_flight;
      if (group.size() == 1) {
        ++stats_.single_calls;
      } else {
        ++stats_.batches;
        stats_.batched_calls += static_cast<int64_t>(group.size());
      }
      to_send.push_back(std::move(group));
    }
  }
  if (!kept.empty()) {
    // Answered on another thread: Pump may run inside Call.
    post_([kept = std::make_shared<std::vector<Pending>>(std::move(kept))] {
      for (Pending& call : *kept) Fail(call, runtime::NotSentError());
    });
  }
  for (std::vector<Pending>& group : to_send) {
    if (group.size() == 1) {
      SendOne(participant, std::move(group.front()));
    } else {
      SendBatch(participant, std::move(group));
    }
  }
}

void GrpcTransport::SendOne(const std::string& participant, Pending call) {
  if (call.is_query) {
    client_.Query(participant, call.query, call.timeout_ms,
                  [this, participant, done = std::move(call.query_done)](
                      absl::StatusOr<tcc::v1::QueryResponse> reply) {
                    OnQueryReply(std::move(reply), done);
                    Pump(participant, 1);
                  });
    return;
  }
  client_.Call(participant, call.op, call.branch, call.timeout_ms,
               [this, participant, done = std::move(call.branch_done)](
                   absl::StatusOr<tcc::v1::BranchResponse> reply) {
                 OnBranchReply(std::move(reply), done);
                 Pump(participant, 1);
               });
}

void GrpcTransport::SendBatch(const std::string& participant,
                              std::vector<Pending> calls) {
  tcc::v1::BatchRequest request;
  int64_t timeout_ms = 0;
  // Once the participant is known to take batches, the requests move into
  // the batch (the calls keep their callbacks); until then they are copied,
  // to be sent alone if it has no Batch.
  bool known;
  uint64_t batch_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = windows_[participant].batch_known;
    batch_id = ++next_batch_id_;
  }
  auto take = [known](auto& message) {
    return known ? std::move(message) : message;
  };
  for (Pending& c : calls) {
    timeout_ms = std::max(timeout_ms, c.timeout_ms);
    tcc::v1::BatchCall* bc = request.add_calls();
    if (c.is_query) {
      *bc->mutable_query_call() = take(c.query);
      continue;
    }
    switch (c.op) {
      case ParticipantOp::kTry:
        *bc->mutable_try_call() = take(c.branch);
        break;
      case ParticipantOp::kConfirm:
        *bc->mutable_confirm_call() = take(c.branch);
        break;
      case ParticipantOp::kCancel:
        *bc->mutable_cancel_call() = take(c.branch);
        break;
    }
  }
  client_.Batch(
      participant, std::move(request), timeout_ms,
      [this, participant, batch_id, calls = std::move(calls)](
          absl::StatusOr<tcc::v1::BatchResponse> reply) mutable {
        if (!reply.ok() &&
            reply.status().code() == absl::StatusCode::kUnimplemented) {
          // No Batch there: nothing ran. Single calls from now on, these
          // first.
          {
            std::lock_guard<std::mutex> lock(mu_);
            Window& w = windows_[participant];
            if (!w.no_batch) ++stats_.batch_fallbacks;
            w.no_batch = true;
          }
          std::deque<Pending> again(std::make_move_iterator(calls.begin()),
                                    std::make_move_iterator(calls.end()));
          Pump(participant, 1, std::move(again));
          return;
        }
        if (reply.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          windows_[participant].batch_known = true;
        }
        if (reply.ok() &&
            reply->results_size() != static_cast<int>(calls.size())) {
          reply = absl::UnknownError(
              absl::StrCat("participant answered a batch of ", calls.size(),
                           " calls with ", reply->results_size(), " results"));
        }
        // Every error below came with this one Batch: tagged with its id.
        auto fail = [batch_id](Pending& c, absl::Status status) {
          runtime::TagRpc(status, batch_id);
          Fail(c, status);
        };
        for (size_t i = 0; i < calls.size(); ++i) {
          Pending& c = calls[i];
          if (!reply.ok()) {
            fail(c, reply.status());
            continue;
          }
          tcc::v1::BatchResult& r =
              *reply->mutable_results(static_cast<int>(i));
          if (r.code() != 0) {
            fail(c, absl::Status(static_cast<absl::StatusCode>(r.code()),
                                 r.error_message()));
          } else if (c.is_query) {
            if (!r.has_query()) {
              fail(c, absl::UnknownError("participant answered a batched "
                                         "Query without its reply"));
            } else {
              OnQueryReply(std::move(*r.mutable_query()), c.query_done);
            }
          } else if (!r.has_branch()) {
            fail(c, absl::UnknownError(
                        "participant answered a batched call without its "
                        "reply"));
          } else {
            OnBranchReply(std::move(*r.mutable_branch()), c.branch_done);
          }
        }
        Pump(participant, 1);
      });
}

void GrpcTransport::Fail(Pending& call, const absl::Status& status) {
  if (call.is_query) {
    call.query_done(status);
  } else {
    call.branch_done(status);
  }
}

absl::Status GrpcTransport::Reachable(const std::string& participant) {
  if (client_.Has(participant)) return absl::OkStatus();
  if (options_.allow_direct_targets &&
      participant.find(':') != std::string::npos) {
    absl::Status s = client_.Add(participant, participant);
    if (s.ok() || s.code() == absl::StatusCode::kAlreadyExists) {
      return absl::OkStatus();
    }
    return s;
  }
  // Unknown names are refused at the API; one reaching here (e.g. a
  // participant removed from the config while its transactions were in
  // flight) stays unknown and is retried until an operator acts.
  return absl::UnavailableError(
      absl::StrCat("participant '", participant, "' is not configured"));
}

void GrpcTransport::Call(const runtime::BranchCall& call, int64_t timeout_ms,
                         runtime::BranchDone done) {
  const std::string& participant = call.spec->participant;
  if (absl::Status s = Reachable(participant); !s.ok()) {
    post_([done = std::move(done), s] { done(s); });
    return;
  }
  Pending p;
  p.op = OpOf(call.phase);
  p.branch = BranchRequestOf(call);
  p.bytes = static_cast<int64_t>(p.branch.ByteSizeLong()) + kBatchFramingBytes;
  p.branch_done = std::move(done);
  p.timeout_ms = timeout_ms;
  Admit(participant, std::move(p));
}

void GrpcTransport::OnBranchReply(absl::StatusOr<tcc::v1::BranchResponse> reply,
                                  const runtime::BranchDone& done) {
  if (!reply.ok()) return done(reply.status());
  done(BranchAnswerOf(std::move(*reply)));
}

void GrpcTransport::Query(const runtime::QueryCall& query, int64_t timeout_ms,
                          runtime::QueryDone done) {
  if (absl::Status s = Reachable(query.participant); !s.ok()) {
    post_([done = std::move(done), s] { done(s); });
    return;
  }
  Pending p;
  p.is_query = true;
  p.query = QueryRequestOf(query);
  p.bytes = static_cast<int64_t>(p.query.ByteSizeLong()) + kBatchFramingBytes;
  p.query_done = std::move(done);
  p.timeout_ms = timeout_ms;
  Admit(query.participant, std::move(p));
}

void GrpcTransport::OnQueryReply(absl::StatusOr<tcc::v1::QueryResponse> reply,
                                 const runtime::QueryDone& done) {
  if (!reply.ok()) return done(reply.status());
  done(QueryAnswerOf(*reply));
}

}  // namespace tcc::rpc
