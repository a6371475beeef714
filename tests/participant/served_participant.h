// A participant with two actions served by the SDK's participant server on
// 127.0.0.1 (port chosen by the OS), on `Env`'s barrier store
// (tests/barrier/store_envs.h) and a manual clock at kT0: "reserve" accepts
// every Try, "refuse" rejects every Try; the Recorder counts what ran.
#pragma once

#include <memory>
#include <string>

#include "barrier/barrier_harness.h"
#include "tcc/participant/participant_server.h"

namespace tcc::testing {

template <typename Env>
struct ServedParticipant {
  explicit ServedParticipant(const std::string& name = "test-participant")
      : clock(kT0),
        participant(env.store(), clock,
                    {.name = name, .barrier = {.clock_skew_ms = kSkewMs}}) {
    REQUIRE(
        participant
            .AddAction("reserve", {.on_try = rec.TryHandler(),
                                   .on_confirm = rec.PhaseTwoHandler("confirm"),
                                   .on_cancel = rec.PhaseTwoHandler("cancel")})
            .ok());
    REQUIRE(
        participant
            .AddAction("refuse", {.on_try = rec.TryHandler({.refuse = true}),
                                  .on_confirm = rec.PhaseTwoHandler("confirm"),
                                  .on_cancel = rec.PhaseTwoHandler("cancel")})
            .ok());
    server = std::make_unique<participant::ParticipantServer>(participant);
    REQUIRE(server->Start().ok());
    REQUIRE(server->port() > 0);
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(server->port());
  }

  Env env;
  clock::ManualClock clock;
  Recorder rec;
  participant::Participant participant;
  std::unique_ptr<participant::ParticipantServer> server;
};

}  // namespace tcc::testing
