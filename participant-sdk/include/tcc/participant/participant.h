// Participant: what a service embeds to take part in tccd transactions.
//
// A service registers its actions (name -> Try, Confirm and Cancel
// handlers); the Participant routes every call to its action through the
// barrier (tcc/barrier/barrier.h), counts the answers in Prometheus metrics
// and logs replays and refusals. Handlers only do business work, in the
// local transaction they are handed; they never see a duplicate, a Confirm
// without its Try or a Try after its Cancel:
//
//   tcc::participant::Participant p(store, tcc::clock::SystemClock::Default());
//   absl::Status s = p.AddAction("debit", {
//       .on_try = [](const HandlerContext& c) -> absl::StatusOr<TryVerdict> {
//         ... read and write through c.txn; TryVerdict::Refuse("...") ...
//         return TryVerdict::Reserve();
//       },
//       .on_confirm = [](const HandlerContext& c) { ...; return OkStatus(); },
//       .on_cancel = [](const HandlerContext& c) { ...; return OkStatus(); }});
//
// The Participant is transport-free (the simulation calls it directly);
// ParticipantServer (participant_server.h) serves it over gRPC.
//
// Metrics (no per-key labels):
//   tcc_participant_calls_total{operation, outcome, replayed}
//     operation: try | confirm | cancel | query
//     outcome:   executed | empty_rollback | rejected | hanging_refused |
//                conflict | (for queries) the barrier state | the lowercase
//                gRPC status code of an error (unavailable,
//                failed_precondition, invalid_argument, ...)
//
// Thread-safety: register actions before the first call; after that every
// method may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/barrier/barrier.h"
#include "tcc/barrier/barrier_store.h"
#include "tcc/clock/clock.h"

namespace prometheus {
class Registry;
class Counter;
template <typename T>
class Family;
}  // namespace prometheus

namespace tcc::participant {

using barrier::BarrierAnswer;
using barrier::BranchCall;
using barrier::BranchKey;
using barrier::HandlerContext;
using barrier::QueryAnswer;
using barrier::TryVerdict;

struct ActionHandlers {
  barrier::TryHandler on_try;
  barrier::PhaseTwoHandler on_confirm;
  barrier::PhaseTwoHandler on_cancel;
};

struct ParticipantOptions {
  // This participant's name, for logs.
  std::string name = "participant";
  barrier::BarrierOptions barrier;
};

class Participant {
 public:
  // `store` and `clock` must outlive the participant. Metrics go to
  // `metrics`, or to a registry of the participant's own when null.
  Participant(barrier::BarrierStore& store, const clock::Clock& clock,
              ParticipantOptions options = {},
              std::shared_ptr<prometheus::Registry> metrics = nullptr);
  ~Participant();

  // INVALID_ARGUMENT for a malformed name, a missing handler or a name
  // already registered.
  [[nodiscard]] absl::Status AddAction(std::string name,
                                       ActionHandlers handlers);

  // INVALID_ARGUMENT for a malformed call (ids, hash length) or an action
  // nobody registered; otherwise what the barrier answers.
  [[nodiscard]] absl::StatusOr<BarrierAnswer> Try(const BranchCall& call);
  [[nodiscard]] absl::StatusOr<BarrierAnswer> Confirm(const BranchCall& call);
  [[nodiscard]] absl::StatusOr<BarrierAnswer> Cancel(const BranchCall& call);
  [[nodiscard]] absl::StatusOr<QueryAnswer> Query(const BranchKey& key);

  barrier::Barrier& barrier() { return barrier_; }
  const std::shared_ptr<prometheus::Registry>& metrics() const {
    return metrics_;
  }
  const std::string& name() const { return options_.name; }

 private:
  enum class Phase { kTry, kConfirm, kCancel };
  absl::StatusOr<BarrierAnswer> Run(Phase phase, const BranchCall& call);
  void Count(std::string_view operation, std::string_view outcome,
             bool replayed);

  ParticipantOptions options_;
  barrier::Barrier barrier_;
  std::map<std::string, ActionHandlers, std::less<>> actions_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Family<prometheus::Counter>* calls_;
};

}  // namespace tcc::participant
