// Every order of Try, Confirm and Cancel on one key, with duplicates, calls
// under another branch hash, business refusals and the clock passing the
// try-deadline: each answer is checked against a small model of DESIGN.md
// section 11's tables, and after every sequence the business effects obey
// the exactly-once invariants (DESIGN.md section 13.2 and 13.5).
#include <vector>

#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::Outcome;
using Code = absl::StatusCode;

enum class Op {
  kTry,
  kTryRefused,
  kConfirm,
  kCancel,
  kTry2,
  kConfirm2,
  kCancel2,
  kLate
};
constexpr Op kOps[] = {Op::kTry,  Op::kTryRefused, Op::kConfirm, Op::kCancel,
                       Op::kTry2, Op::kConfirm2,   Op::kCancel2, Op::kLate};
const char* kOpNames[] = {"T", "R", "C", "X", "T2", "C2", "X2", "L"};

// The tables, written a second time, as plainly as possible.
struct Model {
  int try_state = 0;  // 0 none, 1 tried, 2 rejected, 3 cancelled-before-try
  int phase_two = 0;  // 0 none, 1 confirmed, 2 cancelled
  int hash = 0;       // 1 = H, 2 = H2
  Outcome stored_cancel = Outcome::kUnspecified;
  bool late = false;
  int tries = 0, confirms = 0, cancels = 0;  // expected business effects
};

struct Expected {
  Code code = Code::kOk;
  Outcome outcome = Outcome::kUnspecified;
  bool replayed = false;
};

Expected Step(Model& m, Op op) {
  const int h =
      (op == Op::kTry2 || op == Op::kConfirm2 || op == Op::kCancel2) ? 2 : 1;
  switch (op) {
    case Op::kTry:
    case Op::kTryRefused:
    case Op::kTry2:
      if (m.phase_two == 2) return {Code::kOk, Outcome::kHangingRefused};
      if (m.try_state == 0 && m.late) {
        return {Code::kOk, Outcome::kHangingRefused};
      }
      if (m.try_state != 0 && m.hash != h) {
        return {Code::kOk, Outcome::kConflict};
      }
      if (m.try_state == 1) return {Code::kOk, Outcome::kExecuted, true};
      if (m.try_state == 2) return {Code::kOk, Outcome::kRejected, true};
      m.hash = h;
      if (op == Op::kTryRefused) {
        m.try_state = 2;
        return {Code::kOk, Outcome::kRejected};
      }
      m.try_state = 1;
      ++m.tries;
      return {Code::kOk, Outcome::kExecuted};
    case Op::kConfirm:
    case Op::kConfirm2:
      if (m.phase_two == 1 && m.hash == h) {
        return {Code::kOk, Outcome::kExecuted, true};
      }
      if (m.phase_two == 2) return {Code::kFailedPrecondition};
      if (m.try_state != 0 && m.hash != h) {
        return {Code::kOk, Outcome::kConflict};
      }
      if (m.try_state == 1) {
        m.phase_two = 1;
        ++m.confirms;
        return {Code::kOk, Outcome::kExecuted};
      }
      return {Code::kFailedPrecondition};
    case Op::kCancel:
    case Op::kCancel2:
      if (m.phase_two == 2) return {Code::kOk, m.stored_cancel, true};
      if (m.phase_two == 1) return {Code::kFailedPrecondition};
      if (m.try_state != 0 && m.hash != h) {
        return {Code::kOk, Outcome::kConflict};
      }
      m.phase_two = 2;
      if (m.try_state == 0) {
        m.try_state = 3;
        m.hash = h;
        m.stored_cancel = Outcome::kEmptyRollback;
      } else if (m.try_state == 2) {
        m.stored_cancel = Outcome::kEmptyRollback;
      } else {
        m.stored_cancel = Outcome::kExecuted;
        ++m.cancels;
      }
      return {Code::kOk, m.stored_cancel};
    case Op::kLate:
      m.late = true;
      return {};
  }
  return {};
}

template <class Env>
void RunSequences(int length) {
  BarrierHarness<Env> h;
  std::vector<int> digits(length, 0);
  const int n = static_cast<int>(std::size(kOps));
  int sequences = 0;
  while (true) {
    ++sequences;
    std::string name;
    for (int d : digits) name += std::string(kOpNames[d]) + " ";
    INFO(Env::kName << ": sequence " << name);
    const std::string gid = "order." + std::to_string(sequences);
    h.clock.Set(kT0);
    Model model;
    for (int d : digits) {
      const Op op = kOps[d];
      if (op == Op::kLate) {
        h.clock.Set(kDeadlineMs + kSkewMs + 1);
        Step(model, op);
        continue;
      }
      const bool other =
          op == Op::kTry2 || op == Op::kConfirm2 || op == Op::kCancel2;
      barrier::BranchCall call = MakeCall(gid, other ? H2() : H());
      absl::StatusOr<barrier::BarrierAnswer> got;
      switch (op) {
        case Op::kTry:
        case Op::kTry2:
          got = h.Try(call);
          break;
        case Op::kTryRefused:
          got = h.Try(call, HandlerScript{.refuse = true});
          break;
        case Op::kConfirm:
        case Op::kConfirm2:
          got = h.Confirm(call);
          break;
        default:
          got = h.Cancel(call);
          break;
      }
      Expected want = Step(model, op);
      INFO("op " << kOpNames[d]);
      REQUIRE(got.status().code() == want.code);
      if (got.ok()) {
        REQUIRE(got->outcome == want.outcome);
        REQUIRE(got->replayed == want.replayed);
      }
    }
    const barrier::BranchKey key = MakeCall(gid, H()).key;
    const int64_t tries = Effect(h.store(), "try", key);
    const int64_t confirms = Effect(h.store(), "confirm", key);
    const int64_t cancels = Effect(h.store(), "cancel", key);
    // Exactly once, never both, never without the Try.
    REQUIRE(tries <= 1);
    REQUIRE(confirms + cancels <= tries);
    REQUIRE(tries == model.tries);
    REQUIRE(confirms == model.confirms);
    REQUIRE(cancels == model.cancels);

    int i = length - 1;
    while (i >= 0 && ++digits[i] == n) digits[i--] = 0;
    if (i < 0) break;
  }
}

template <class Env>
void EveryOrderOfLengthThree() {
  RunSequences<Env>(3);
}

TCC_STORE_TEST_CASE("every order of three calls on one key",
                    EveryOrderOfLengthThree)

TEST_CASE("memory: every order of four calls on one key", "[memory]") {
  RunSequences<MemoryEnv>(4);
}

}  // namespace
}  // namespace tcc::testing
