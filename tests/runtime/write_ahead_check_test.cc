// The one write-ahead checker (runtime/sim/write_ahead_check.h): a call may
// leave only once the record implying it is synced in the in-memory WAL.
#include "runtime/sim/write_ahead_check.h"

#include <catch2/catch.hpp>
#include <string>

namespace tcc::runtime::sim {
namespace {

wal::BranchSpec Branch(const std::string& id) {
  wal::BranchSpec b;
  b.branch_id = id;
  b.participant = "p0";
  b.action = "hold";
  b.payload = "x";
  return b;
}

wal::Registered Registration(const std::string& gid) {
  wal::Registered r;
  r.gid = gid;
  r.created_at_ms = 1000;
  r.revision = 1;
  r.try_deadline_ms = 5000;
  r.branches = {Branch("b0")};
  return r;
}

wal::Decided Decision(wal::Decision d) {
  wal::Decided r;
  r.decision = d;
  r.reason = "test";
  return r;
}

struct Calls {
  wal::BranchSpec b0 = Branch("b0"), b1 = Branch("b1");
  BranchCall Of(const wal::BranchSpec& spec, wal::Phase phase) {
    BranchCall c;
    c.gid = "g1";
    c.created_at_ms = 1000;
    c.spec = &spec;
    c.phase = phase;
    c.attempt = 1;
    c.try_deadline_ms = 5000;
    return c;
  }
};

void Append(wal::MemoryLog& log, wal::Record record) {
  log.Append(
      wal::AppendRequest{"g1", {std::move(record)}, wal::Durability::kDurable},
      [](absl::Status) {});
}

TEST_CASE("write-ahead: a Try waits for its branch's registration to sync",
          "[write_ahead]") {
  wal::MemoryLog log{wal::MemoryLogOptions{false, {}}};
  Calls calls;
  const BranchCall try_b0 = calls.Of(calls.b0, wal::Phase::kTry);
  const BranchCall try_b1 = calls.Of(calls.b1, wal::Phase::kTry);
  std::optional<std::string> v = WriteAheadViolation(log, try_b0);
  REQUIRE(v.has_value());
  CHECK(*v ==
        "write-ahead: Try of g1/b0 sent before the record implying it "
        "was synced");
  Append(log, Registration("g1"));
  CHECK(WriteAheadViolation(log, try_b0).has_value());  // written, unsynced
  log.SyncNow();
  CHECK_FALSE(WriteAheadViolation(log, try_b0).has_value());
  // b1 is not in the registration: only its own BranchAdded implies it.
  CHECK(WriteAheadViolation(log, try_b1).has_value());
  Append(log, wal::BranchAdded{Branch("b1")});
  log.SyncNow();
  CHECK_FALSE(WriteAheadViolation(log, try_b1).has_value());
}

TEST_CASE("write-ahead: a Confirm or Cancel waits for that decision to sync",
          "[write_ahead]") {
  wal::MemoryLog log{wal::MemoryLogOptions{false, {}}};
  Calls calls;
  const BranchCall confirm = calls.Of(calls.b0, wal::Phase::kConfirm);
  const BranchCall cancel = calls.Of(calls.b0, wal::Phase::kCancel);
  Append(log, Registration("g1"));
  log.SyncNow();
  // A registration implies no phase 2.
  CHECK(WriteAheadViolation(log, confirm).has_value());
  CHECK(WriteAheadViolation(log, cancel).has_value());
  Append(log, Decision(wal::Decision::kCancel));
  CHECK(WriteAheadViolation(log, cancel).has_value());  // not yet synced
  log.SyncNow();
  CHECK_FALSE(WriteAheadViolation(log, cancel).has_value());
  // A Cancel decision never implies a Confirm.
  std::optional<std::string> v = WriteAheadViolation(log, confirm);
  REQUIRE(v.has_value());
  CHECK(v->find("Confirm of g1/b0") != std::string::npos);
}

TEST_CASE("write-ahead: another gid's records imply nothing", "[write_ahead]") {
  wal::MemoryLog log{wal::MemoryLogOptions{true, {}}};
  Calls calls;
  log.Append(
      wal::AppendRequest{"g2", {Registration("g2")}, wal::Durability::kDurable},
      [](absl::Status) {});
  CHECK(WriteAheadViolation(log, calls.Of(calls.b0, wal::Phase::kTry))
            .has_value());
}

}  // namespace
}  // namespace tcc::runtime::sim
