#include "tcc/participant/participant.h"

#include <cctype>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "spdlog/spdlog.h"
#include "tcc/identity/ids.h"

namespace tcc::participant {
namespace {

constexpr size_t kBranchHashBytes = 32;

std::string LowerCodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = static_cast<char>(std::tolower(c));
  return name;
}

absl::Status ValidateCreatedAt(int64_t created_at_ms) {
  if (created_at_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "created_at_ms: must be > 0 (Unix ms), got ", created_at_ms));
  }
  return absl::OkStatus();
}

// Every branch call carries its transaction's try-deadline: a Try is
// refused after it, and a Cancel's marker is kept at least until it (the
// marker is what refuses a late Try), so a Cancel without it would leave a
// marker that retention may drop while a Try can still arrive.
absl::Status ValidateCall(const BranchCall& call) {
  if (call.try_deadline_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "try_deadline_ms: required (Unix ms > 0), got ", call.try_deadline_ms));
  }
  if (absl::Status s = ValidateCreatedAt(call.key.created_at_ms); !s.ok()) {
    return s;
  }
  if (absl::Status s = identity::ValidateGid(call.key.gid); !s.ok()) return s;
  if (absl::Status s = identity::ValidateBranchId(call.key.branch_id);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = identity::ValidateAction(call.action); !s.ok()) {
    return s;
  }
  if (call.branch_hash.size() != kBranchHashBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch_hash: expected ", kBranchHashBytes, " bytes, got ",
                     call.branch_hash.size()));
  }
  return absl::OkStatus();
}

}  // namespace

Participant::Participant(barrier::BarrierStore& store,
                         const clock::Clock& clock, ParticipantOptions options,
                         std::shared_ptr<prometheus::Registry> metrics)
    : options_(std::move(options)),
      barrier_(store, clock, options_.barrier),
      metrics_(metrics != nullptr ? std::move(metrics)
                                  : std::make_shared<prometheus::Registry>()),
      calls_(&prometheus::BuildCounter()
                  .Name("tcc_participant_calls_total")
                  .Help("Participant calls answered, by operation, outcome "
                        "and whether the answer was replayed")
                  .Register(*metrics_)) {}

Participant::~Participant() = default;

absl::Status Participant::AddAction(std::string name, ActionHandlers handlers) {
  if (absl::Status s = identity::ValidateAction(name); !s.ok()) return s;
  if (!handlers.on_try || !handlers.on_confirm || !handlers.on_cancel) {
    return absl::InvalidArgumentError(
        absl::StrCat("action ", name,
                     ": Try, Confirm and Cancel handlers "
                     "are all required"));
  }
  if (actions_.count(name) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("action ", name, " is already registered"));
  }
  actions_.emplace(std::move(name), std::move(handlers));
  return absl::OkStatus();
}

void Participant::Count(std::string_view operation, std::string_view outcome,
                        bool replayed) {
  calls_
      ->Add({{"operation", std::string(operation)},
             {"outcome", std::string(outcome)},
             {"replayed", replayed ? "true" : "false"}})
      .Increment();
}

absl::StatusOr<BarrierAnswer> Participant::Run(Phase phase,
                                               const BranchCall& call) {
  const char* op = phase == Phase::kTry       ? "try"
                   : phase == Phase::kConfirm ? "confirm"
                                              : "cancel";
  absl::StatusOr<BarrierAnswer> answer;
  auto action = actions_.find(call.action);
  if (absl::Status s = ValidateCall(call); !s.ok()) {
    answer = s;
  } else if (action == actions_.end()) {
    answer = absl::InvalidArgumentError(
        absl::StrCat("unknown action '", call.action, "'"));
  } else if (phase == Phase::kTry) {
    answer = barrier_.Try(call, action->second.on_try);
  } else if (phase == Phase::kConfirm) {
    answer = barrier_.Confirm(call, action->second.on_confirm);
  } else {
    answer = barrier_.Cancel(call, action->second.on_cancel);
  }

  // Ids come from the network: escaped, so a malformed one cannot forge log
  // lines (valid ids print unchanged).
  auto where = [&] {
    return absl::StrCat(
        op, " gid=",
        absl::CEscape(
            absl::string_view(call.key.gid.data(), call.key.gid.size())),
        " branch=",
        absl::CEscape(absl::string_view(call.key.branch_id.data(),
                                        call.key.branch_id.size())),
        " created_at=", call.key.created_at_ms, " attempt=", call.attempt,
        " epoch=", call.owner_epoch, " action=",
        absl::CEscape(
            absl::string_view(call.action.data(), call.action.size())));
  };
  if (!answer.ok()) {
    Count(op, LowerCodeName(answer.status().code()), false);
    if (answer.status().code() == absl::StatusCode::kUnavailable) {
      spdlog::warn("{}: {}: {}", options_.name, where(),
                   answer.status().ToString());
    } else if (answer.status().code() ==
               absl::StatusCode::kFailedPrecondition) {
      // A protocol violation: tccd flags the branch STUCK for an operator.
      spdlog::warn("{}: {} protocol violation: {}", options_.name, where(),
                   answer.status().ToString());
    } else {
      spdlog::info("{}: {} refused: {}", options_.name, where(),
                   answer.status().ToString());
    }
    return answer;
  }
  const std::string_view outcome = barrier::OutcomeName(answer->outcome);
  Count(op, outcome, answer->replayed);
  const bool refusal = answer->outcome == barrier::Outcome::kRejected ||
                       answer->outcome == barrier::Outcome::kHangingRefused ||
                       answer->outcome == barrier::Outcome::kConflict;
  if (answer->replayed || refusal) {
    spdlog::info("{}: {} -> {}{}{}{}", options_.name, where(), outcome,
                 answer->replayed ? " (replayed)" : "",
                 answer->message.empty() ? "" : ": ", answer->message);
  } else if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("{}: {} -> {}", options_.name, where(), outcome);
  }
  return answer;
}

absl::StatusOr<BarrierAnswer> Participant::Try(const BranchCall& call) {
  return Run(Phase::kTry, call);
}
absl::StatusOr<BarrierAnswer> Participant::Confirm(const BranchCall& call) {
  return Run(Phase::kConfirm, call);
}
absl::StatusOr<BarrierAnswer> Participant::Cancel(const BranchCall& call) {
  return Run(Phase::kCancel, call);
}

absl::StatusOr<QueryAnswer> Participant::Query(const BranchKey& key) {
  absl::StatusOr<QueryAnswer> answer;
  if (absl::Status s = identity::ValidateGid(key.gid); !s.ok()) {
    answer = s;
  } else if (absl::Status b = identity::ValidateBranchId(key.branch_id);
             !b.ok()) {
    answer = b;
  } else if (absl::Status c = ValidateCreatedAt(key.created_at_ms); !c.ok()) {
    answer = c;
  } else {
    answer = barrier_.Query(key);
  }
  Count("query",
        answer.ok() ? barrier::BarrierStateName(answer->state)
                    : LowerCodeName(answer.status().code()),
        false);
  return answer;
}

}  // namespace tcc::participant
