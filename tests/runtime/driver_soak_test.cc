// Many concurrent transactions through the driver over lossy, duplicating,
// reordering links, with crashes of the coordinator at random effects, per
// seed; then the faults stop and everything must finish (DESIGN.md section
// 13). A small version of issue 7's simulation, over the same environment:
// the participants run the SDK's real barrier on its in-memory store.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "runtime/driver.h"
#include "runtime/sim/sdk_participant.h"
#include "runtime/sim/sim_environment.h"
#include "tcc/barrier/barrier.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/wal/memory_log.h"

namespace tcc::runtime {
namespace {

struct CountingObserver : DriverObserver {
  uint64_t effects = 0;
  void OnEffect(const std::string&, const core::Effect&) override { ++effects; }
};

bool Accepts(const std::string& payload) {
  return payload.find("reject") == std::string::npos;
}

// The participants share tccd's simulated clock: no skew allowed, unless a
// test asks for the SDK's default.
barrier::BarrierOptions NoSkew() {
  barrier::BarrierOptions o;
  o.clock_skew_ms = 0;
  return o;
}

struct SeedResult {
  std::string failure;  // empty when every invariant held
  int crashes = 0;
  int confirmed = 0;
  int cancelled = 0;
};

SeedResult RunSeed(uint64_t seed, core::RuleBreakers breakers = {},
                   const barrier::BarrierOptions& barrier_options = NoSkew()) {
  SeedResult out;
  std::mt19937_64 rng(seed);
  auto uniform = [&](double a, double b) {
    return std::uniform_real_distribution<double>(a, b)(rng);
  };
  sim::DeterministicExecutor exec;
  sim::SimClock clock;
  wal::MemoryLog log(wal::MemoryLogOptions{false, {}});
  sim::SimTransport transport(clock, seed * 7919 + 1);
  transport.CheckWriteAhead(&log);
  std::map<std::string, std::unique_ptr<sim::SdkParticipant>> parts;
  const int n_parts = 3;
  for (int i = 0; i < n_parts; ++i) {
    const std::string name = "p" + std::to_string(i);
    parts[name] = std::make_unique<sim::SdkParticipant>(
        name, barrier_options, sim::AcceptIf([](const barrier::BranchCall& c) {
          return Accepts(c.payload);
        }));
    transport.Add(name, parts[name].get());
  }
  // Faults drawn per seed (swarm testing).
  const double loss = uniform(0, 0.2), dup = uniform(0, 0.3);
  const int64_t max_latency = static_cast<int64_t>(uniform(2, 1500));
  auto set_faults = [&](bool on) {
    for (int i = 0; i < n_parts; ++i) {
      auto& f = transport.faults("p" + std::to_string(i));
      f.lose_request = on ? loss / 2 : 0;
      f.lose_reply = on ? loss / 2 : 0;
      f.duplicate = on ? dup : 0;
      f.duplicate_request = on ? dup : 0;
      f.max_latency_ms = on ? max_latency : 5;
    }
  };
  set_faults(true);

  DriverOptions options;
  options.rng_seed = seed;
  options.core.breakers = breakers;
  CountingObserver observer;
  std::unique_ptr<Driver> driver;
  auto start = [&] {
    driver =
        std::make_unique<Driver>(options, std::vector<Executor*>{&exec, &exec},
                                 clock, transport, log, &observer);
    REQUIRE(driver->Start().ok());
  };
  start();

  // The workload.
  const int n_txns = 12;
  std::vector<core::SubmitSpec> specs;
  for (int t = 0; t < n_txns; ++t) {
    core::SubmitSpec s;
    s.gid = "s" + std::to_string(seed) + "-t" + std::to_string(t);
    s.created_at_ms = clock.WallMs();
    s.revision = 1;
    s.try_timeout_ms = static_cast<int64_t>(uniform(500, 4000));
    s.wait_for = static_cast<core::WaitFor>(1 + t % 3);
    const int branches = 1 + static_cast<int>(uniform(0, n_parts));
    for (int b = 0; b < branches && b < n_parts; ++b) {
      wal::BranchSpec br;
      br.branch_id = "b" + std::to_string(b);
      br.participant = "p" + std::to_string(b);
      br.action = "move";
      br.payload = uniform(0, 1) < 0.2 ? "reject" : "ok";
      s.branches.push_back(br);
    }
    specs.push_back(std::move(s));
  }
  using Slot = std::shared_ptr<std::optional<absl::StatusOr<DriverReply>>>;
  std::vector<Slot> answers(n_txns);
  auto submit = [&](int t) {
    answers[t] = std::make_shared<std::optional<absl::StatusOr<DriverReply>>>();
    Slot slot = answers[t];
    driver->Submit(specs[t], [slot](absl::StatusOr<DriverReply> r) {
      *slot = std::move(r);
    });
  };
  for (int t = 0; t < n_txns; ++t) submit(t);
  std::map<std::string, wal::Decision> told;
  auto note_told = [&] {
    for (int t = 0; t < n_txns; ++t) {
      if (answers[t] && answers[t]->has_value() && (*answers[t])->ok()) {
        const auto& v = (**answers[t])->transaction;
        if (v.decision != wal::Decision::kNone) {
          auto [it, fresh] = told.emplace(specs[t].gid, v.decision);
          if (!fresh && it->second != v.decision) {
            out.failure = "decision changed for " + specs[t].gid;
          }
        }
      }
    }
  };

  // Faulty phase, with up to two crashes at random effects.
  sim::SimLoop loop(exec, clock, &log);
  const int crashes = static_cast<int>(uniform(0, 3));
  std::vector<uint64_t> crash_at;
  for (int c = 0; c < crashes; ++c) {
    crash_at.push_back(static_cast<uint64_t>(uniform(1, 400)));
  }
  std::sort(crash_at.begin(), crash_at.end());
  // Each crash stops the driver right before an effect (failpoint
  // driver.before_effect), possibly in the middle of a step.
  struct Guard {
    ~Guard() { (void)failpoint::Configure(""); }
  } guard;
  uint64_t counted = 0;  // effects evaluated before the current configuration
  auto arm = [&](size_t i) {
    (void)failpoint::Configure(
        i < crash_at.size()
            ? "driver.before_effect=error@" +
                  std::to_string(std::max<uint64_t>(1, crash_at[i] - counted))
            : "");
  };
  arm(0);
  const int64_t faulty_until = clock.MonotonicMs() + 20'000;
  size_t next_crash = 0;
  // The wall clock steps once, forward or back (NTP, an operator).
  const int64_t jump_at =
      clock.MonotonicMs() + static_cast<int64_t>(uniform(0, 5000));
  const int64_t jump_by = static_cast<int64_t>(uniform(-3000, 3000));
  bool jumped = false;
  auto crash = [&] {
    counted = std::max(counted, crash_at[next_crash]);
    ++next_crash;
    arm(next_crash);
    ++out.crashes;
    note_told();
    driver.reset();
    exec.Clear();
    // The network keeps delivering what was in flight: late requests still
    // reach participants; replies find no one (the driver is gone).
    log.Crash(static_cast<size_t>(
        uniform(0, static_cast<double>(log.Unsynced()) + 1)));
    start();
    for (int t = 0; t < n_txns; ++t) {  // clients retry unanswered requests
      if (!answers[t]->has_value() || !(*answers[t])->ok()) submit(t);
    }
  };
  while (clock.MonotonicMs() < faulty_until) {
    if (!jumped && clock.MonotonicMs() >= jump_at) {
      jumped = true;
      clock.JumpWall(jump_by);
    }
    if (driver->halted()) {
      crash();
      continue;
    }
    if (!loop.StepOnce(faulty_until)) break;
  }
  if (driver->halted()) crash();
  (void)failpoint::Configure("");
  note_told();
  // Healthy phase: every request is answered, every transaction finishes.
  set_faults(false);
  for (int t = 0; t < n_txns; ++t) {
    if (answers[t]->has_value() && !(*answers[t])->ok()) submit(t);
  }
  const bool finished = loop.RunUntil(
      [&] {
        for (int t = 0; t < n_txns; ++t) {
          if (!answers[t]->has_value()) return false;
          auto stored = log.Read(specs[t].gid);
          if (!stored.ok() || !wal::IsFinal(stored->summary.state))
            return false;
        }
        return true;
      },
      3'600'000);
  note_told();
  if (!out.failure.empty()) return out;
  if (!finished) {
    out.failure = "not every transaction finished after the faults stopped";
    return out;
  }
  for (int t = 0; t < n_txns; ++t) {
    if (!(*answers[t])->ok()) {
      out.failure =
          specs[t].gid + " answered " + (*answers[t])->status().ToString();
      return out;
    }
    auto stored = log.Read(specs[t].gid);
    const bool confirmed = stored->summary.state == core::TxnState::kConfirmed;
    (confirmed ? out.confirmed : out.cancelled)++;
    bool any_reject = false;
    for (const auto& b : specs[t].branches) any_reject |= b.payload == "reject";
    if (confirmed && any_reject) {
      out.failure = specs[t].gid + " confirmed with a rejected branch";
      return out;
    }
    if (told.count(specs[t].gid) &&
        told[specs[t].gid] != stored->summary.decision) {
      out.failure = specs[t].gid + ": the decision told differs from the final";
      return out;
    }
    // Atomicity: every branch's barrier agrees with the final state.
    for (const auto& b : specs[t].branches) {
      const auto rec = parts[b.participant]->Record(
          {specs[t].gid, specs[t].created_at_ms, b.branch_id});
      const bool branch_confirmed =
          rec.has_value() &&
          rec->phase_two == barrier::PhaseTwoState::kConfirmed;
      if (branch_confirmed != confirmed) {
        out.failure = specs[t].gid + "/" + b.branch_id + " breaks atomicity";
        return out;
      }
    }
  }
  for (const auto& [name, p] : parts) {
    if (p->Held() != 0) out.failure = name + " holds a reservation";
    if (p->ExactlyOnceViolations() != 0) out.failure = name + " ran twice";
    if (!p->violations().empty()) out.failure = p->violations()[0];
  }
  if (!transport.violations().empty()) out.failure = transport.violations()[0];
  return out;
}

TEST_CASE(
    "soak: lossy links, duplicates, reordering, wall-clock steps and "
    "crashes, per seed",
    "[driver][soak]") {
  int crashes = 0, confirmed = 0, cancelled = 0;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    SeedResult r = RunSeed(seed);
    INFO("seed " << seed);
    REQUIRE(r.failure == "");
    crashes += r.crashes;
    confirmed += r.confirmed;
    cancelled += r.cancelled;
  }
  CHECK(crashes > 20);
  CHECK(confirmed > 100);
  CHECK(cancelled > 50);
  WARN("soak: crashes=" << crashes << " confirmed=" << confirmed
                        << " cancelled=" << cancelled);
}

// The same with the barrier's default options (5 s of allowed clock skew):
// a late Try may still reserve inside the skew, and the Cancel that follows
// releases it.
TEST_CASE("soak with the barrier's default clock skew", "[driver][soak]") {
  int confirmed = 0, cancelled = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SeedResult r = RunSeed(seed, {}, barrier::BarrierOptions{});
    INFO("seed " << seed);
    REQUIRE(r.failure == "");
    confirmed += r.confirmed;
    cancelled += r.cancelled;
  }
  CHECK(confirmed > 100);
  CHECK(cancelled > 50);
}

// The soak has teeth: each of the core's rule breakers is caught within a few
// seeds.
uint64_t SeedsToCatch(core::RuleBreakers breakers) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    if (!RunSeed(seed, breakers).failure.empty()) return seed;
  }
  return 0;
}

TEST_CASE("soak catches each rule breaker", "[driver][soak][breakers]") {
  core::RuleBreakers a, b, c;
  a.skip_cancel_for_unconfirmed_try = true;
  b.act_before_decision_durable = true;
  c.replayed_rejected_is_success = true;
  const uint64_t sa = SeedsToCatch(a), sb = SeedsToCatch(b),
                 sc = SeedsToCatch(c);
  CHECK(sa > 0);
  CHECK(sb > 0);
  CHECK(sc > 0);
  WARN("caught at seeds: (a) " << sa << " (b) " << sb << " (c) " << sc);
}

}  // namespace
}  // namespace tcc::runtime
