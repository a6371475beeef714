// The driver's calls to participants (DESIGN.md sections 5 and 8): the
// circuit breaker's admission, adaptive per-call timeouts, room in the memory
// budget for what a call holds, the hand-off to the transport, and one reply
// path: every answer or error of a Try, Confirm, Cancel or Query comes back,
// once, as the core event that reports it, the participant's status read as
// DESIGN.md section 5 says (core::IsDefiniteRefusal).
//
// It holds no transaction. A call that cannot go now waits here without its
// payload (a phase-2 call while its participant's breaker is open, or any
// call while the memory budget has no room for it and other calls are in
// flight) and is handed back through Hooks::resume when it may go: the
// driver then checks that its branch still waits for it and sends it
// (SendAdmitted), or gives it up (Abandon).
//
// Thread-safe. Hooks run on any thread (the transport's, the clock's, the
// caller's), never under a lock of this class; answers for a destroyed
// ParticipantCalls are dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/machine.h"
#include "runtime/call_policies.h"
#include "runtime/environment.h"
#include "runtime/memory_budget.h"

namespace tcc::runtime {

struct ParticipantCallsOptions {
  TimeoutBounds timeouts;
  // Per (participant, call kind) bounds that replace `timeouts` for them.
  TimeoutOverrides timeout_overrides;
  BreakerOptions breaker;
  // Cluster mode: whether a query for `gid` may go now (DriverOptions::
  // may_call: the node trusts its lease). One it refuses is not sent: it
  // fails UNAVAILABLE, and the lookup stays unknown and is asked again.
  // Unset: always. (Calls are checked where they are built, by the driver,
  // and again by the transport as they leave: runtime::SendGate; a call the
  // transport kept comes back marked not sent, runtime::NotSentError, and
  // is answered as one that never left.)
  std::function<bool(const std::string& gid)> may_call;
};

class ParticipantCalls {
 public:
  struct Hooks {
    // The core event answering a call or query of `gid` (CallReplyEvent or
    // QueryReplyEvent), to step on gid's shard.
    std::function<void(const std::string& gid, core::Event event)> deliver;
    // A call that waited may go now (as the breaker's probe, or not).
    std::function<void(const std::string& gid, const core::CallEffect& call,
                       const std::string& participant, bool as_probe)>
        resume;
    // A participant's breaker changed state.
    std::function<void(const std::string& participant, BreakerState state)>
        breaker_changed;
  };

  // `budget` is shared with the driver. Clock and transport must outlive
  // this object.
  ParticipantCalls(ParticipantCallsOptions options, Clock& clock,
                   ParticipantTransport& transport,
                   std::shared_ptr<MemoryBudget> budget, Hooks hooks);
  ~ParticipantCalls();
  ParticipantCalls(const ParticipantCalls&) = delete;
  ParticipantCalls& operator=(const ParticipantCalls&) = delete;

  // Builds a call when it may go: the branch's call with `spec` pointing at
  // the payload (valid until Send returns), or why it cannot be built (it is
  // then answered as a failed attempt that never left).
  using BuildCall = std::function<absl::StatusOr<BranchCall>()>;

  // A Try, Confirm or Cancel the core asked for (`call`) to `participant`:
  // sent now (when its breaker and the memory budget allow), or waiting
  // (hooks.resume gives it back), or failed fast (a Try while the breaker is
  // open: hooks.deliver gets a reply marked not sent). `payload_bytes`: the
  // size of what the transport will hold while the call is in flight.
  void Send(const std::string& gid, const std::string& participant,
            const core::CallEffect& call, int64_t payload_bytes,
            const BuildCall& build);
  // The same for a call hooks.resume gave back (with its `as_probe`): the
  // breaker already let it go; only the memory budget may still hold it.
  void SendAdmitted(const std::string& gid, const std::string& participant,
                    const core::CallEffect& call, bool as_probe,
                    int64_t payload_bytes, const BuildCall& build);
  // A call hooks.resume gave back that is no longer wanted (its transaction
  // went, or moved on): if it was the probe, the next waiting call is.
  void Abandon(const std::string& participant, bool as_probe);

  // A Query (DESIGN.md section 8): refused UNAVAILABLE at once while the
  // breaker is open, else sent; answered through hooks.deliver.
  void Query(const QueryCall& query, const core::QueryEffect& effect);

  BreakerState breaker_state(const std::string& participant) const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tcc::runtime
