// A ParticipantTransport decorator that counts and logs every participant
// call: Prometheus `tccd_branch_calls_total{phase,outcome,replayed}` and the
// latency histogram, `tccd_lookups_total{answer}`, and a log line (gid and
// branch id on it) for every re-sent call and every call whose outcome is
// unknown. Everything else passes through unchanged.
//
// Thread-safe.
#pragma once

#include "runtime/environment.h"
#include "server/metrics.h"

namespace tcc::server {

class InstrumentedTransport final : public runtime::ParticipantTransport {
 public:
  InstrumentedTransport(runtime::ParticipantTransport& inner,
                        runtime::Clock& clock, CoordinatorMetrics& metrics)
      : inner_(inner), clock_(clock), metrics_(metrics) {}

  void Call(const runtime::BranchCall& call, int64_t timeout_ms,
            runtime::BranchDone done) override;
  void Query(const runtime::QueryCall& query, int64_t timeout_ms,
             runtime::QueryDone done) override;

 private:
  runtime::ParticipantTransport& inner_;
  runtime::Clock& clock_;
  CoordinatorMetrics& metrics_;
};

}  // namespace tcc::server
