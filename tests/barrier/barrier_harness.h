// A barrier under test: a store environment, a manual clock, and business
// handlers that record what they did, so tests can assert on outcome,
// `replayed`, whether a handler ran and what was committed.
//
// Each handler increments a committed counter "<phase>/<branch key>" in the
// call's local transaction (so a counter above 1 is a double effect, and a
// rolled-back call leaves it unchanged), and an in-memory count of
// invocations (rolled back or not).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "store_envs.h"
#include "tcc/barrier/barrier.h"
#include "tcc/clock/clock.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/identity/content_hash.h"

namespace tcc::testing {

inline constexpr int64_t kT0 = 1'700'000'000'000;  // the manual clock's start
inline constexpr int64_t kSkewMs = 1'000;
inline constexpr int64_t kDeadlineMs = kT0 + 10'000;

// Turns every failpoint off when it goes, however the test leaves.
struct FailpointsOff {
  ~FailpointsOff() { (void)failpoint::Configure(""); }
};

inline std::string HashOf(std::string_view payload) {
  return identity::ToBytes(identity::BranchHash(1, "p", "act", payload));
}
inline const std::string& H() {
  static const std::string h = HashOf("h");
  return h;
}
inline const std::string& H2() {
  static const std::string h = HashOf("h2");
  return h;
}

inline barrier::BranchCall MakeCall(const std::string& gid,
                                    const std::string& hash,
                                    int64_t deadline = kDeadlineMs,
                                    const std::string& branch = "b1") {
  barrier::BranchCall call;
  call.key = barrier::BranchKey{gid, kT0 - 1000, branch};
  call.action = "act";
  call.payload = "payload";
  call.branch_hash = hash;
  call.revision = 1;
  call.try_deadline_ms = deadline;
  return call;
}

// How the next handler invocation behaves.
struct HandlerScript {
  bool refuse = false;  // Try only
  bool fail = false;    // returns UNAVAILABLE
  bool throw_ = false;  // throws
};

class Recorder {
 public:
  barrier::TryHandler TryHandler(HandlerScript script = {}) {
    return [this, script](const barrier::HandlerContext& c)
               -> absl::StatusOr<barrier::TryVerdict> {
      absl::Status s = Bump("try", c);
      if (!s.ok()) return s;
      if (script.throw_) throw std::runtime_error("boom");
      if (script.fail) return absl::UnavailableError("business down");
      if (script.refuse) return barrier::TryVerdict::Refuse("no funds");
      return barrier::TryVerdict::Reserve();
    };
  }
  barrier::PhaseTwoHandler PhaseTwoHandler(std::string phase,
                                           HandlerScript script = {}) {
    return [this, phase, script](const barrier::HandlerContext& c) {
      absl::Status s = Bump(phase, c);
      if (!s.ok()) return s;
      if (script.throw_) throw std::runtime_error("boom");
      if (script.fail) return absl::UnavailableError("business down");
      return absl::OkStatus();
    };
  }

  int Invocations(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mu_);
    return invocations_[phase];
  }
  int TotalInvocations() {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (auto& [k, v] : invocations_) n += v;
    return n;
  }

 private:
  absl::Status Bump(const std::string& phase,
                    const barrier::HandlerContext& c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++invocations_[phase];
    }
    std::string key = phase + "/" + c.IdempotencyKey();
    auto v = c.txn.GetForUpdate(key);
    if (!v.ok()) return v.status();
    int64_t n = 0;
    if (v->has_value() && !absl::SimpleAtoi(**v, &n)) {
      return absl::DataLossError("bad counter");  // no REQUIRE off-thread
    }
    return c.txn.Put(key, std::to_string(n + 1));
  }

  std::mutex mu_;
  std::map<std::string, int> invocations_;
};

// The committed value of the business counter "<phase>/<key>" (0 if none).
inline int64_t Effect(barrier::BarrierStore& store, const std::string& phase,
                      const barrier::BranchKey& key) {
  auto txn = store.Begin();
  REQUIRE(txn.ok());
  auto v = (*txn)->Get(phase + "/" + barrier::ToString(key));
  REQUIRE(v.ok());
  int64_t n = 0;
  if (v->has_value()) REQUIRE(absl::SimpleAtoi(**v, &n));
  return n;
}

template <class Env>
struct BarrierHarness {
  explicit BarrierHarness(StoreOptions o = {})
      : env(o), clock(kT0), barrier(env.store(), clock, {kSkewMs, 60'000}) {}
  Env env;
  clock::ManualClock clock;
  barrier::Barrier barrier;
  Recorder rec;

  barrier::BarrierStore& store() { return env.store(); }
  absl::StatusOr<barrier::BarrierAnswer> Try(const barrier::BranchCall& c,
                                             HandlerScript s = {}) {
    return barrier.Try(c, rec.TryHandler(s));
  }
  absl::StatusOr<barrier::BarrierAnswer> Confirm(const barrier::BranchCall& c,
                                                 HandlerScript s = {}) {
    return barrier.Confirm(c, rec.PhaseTwoHandler("confirm", s));
  }
  absl::StatusOr<barrier::BarrierAnswer> Cancel(const barrier::BranchCall& c,
                                                HandlerScript s = {}) {
    return barrier.Cancel(c, rec.PhaseTwoHandler("cancel", s));
  }
  barrier::BarrierState State(const barrier::BranchKey& key) {
    auto q = barrier.Query(key);
    REQUIRE(q.ok());
    REQUIRE(q->authoritative);
    return q->state;
  }
  std::optional<barrier::BarrierRecord> Record(const barrier::BranchKey& key) {
    auto r = store().ReadBarrier(key);
    REQUIRE(r.ok());
    return *r;
  }
};

}  // namespace tcc::testing

// Registers `fn<Env>()` as one test case per store, tagged [memory],
// [rocksdb] and [postgres] (ctest runs the last with the postgres fixture).
#define TCC_STORE_TEST_CASE(title, fn)                                         \
  TEST_CASE("memory: " title, "[memory]") { fn<::tcc::testing::MemoryEnv>(); } \
  TEST_CASE("rocksdb: " title, "[rocksdb]") {                                  \
    fn<::tcc::testing::RocksDbEnv>();                                          \
  }                                                                            \
  TEST_CASE("rocksdb, group commit: " title, "[rocksdb]") {                    \
    fn<::tcc::testing::RocksDbGroupCommitEnv>();                               \
  }                                                                            \
  TEST_CASE("postgres: " title, "[postgres]") {                                \
    fn<::tcc::testing::PostgresEnv>();                                         \
  }
