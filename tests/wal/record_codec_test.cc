// The record codec: round trips of every record, summary and approval, a
// pinned encoding, and strict decoding (DATA_LOSS for anything malformed).
#include "record_codec.h"

#include <catch2/catch.hpp>

#include "log_test_util.h"

namespace tcc::wal::testing {
namespace {

using internal::DecodeApproval;
using internal::DecodeRecord;
using internal::DecodeSummary;
using internal::EncodeApproval;
using internal::EncodeRecord;
using internal::EncodeSummary;

std::vector<Record> EveryRecord() {
  Registered reg = MakeRegistered("gid:1.a-b", -5, {"pay", "stock"});
  reg.interactive = true;
  reg.approval_gate = true;
  reg.approval_timeout_ms = 60000;
  reg.revision = 0xFFFFFFFFFFFFFFFFull;
  reg.owner_epoch = 1ull << 40;
  reg.branches[1].payload = std::string("\0bin\xff", 5);
  BranchAdded added{MakeRegistered("x", 1, {"ledger"}).branches[0]};
  PhaseUpdate phase = MakePhase("b0", PhaseState::kFailed, 77);
  phase.phase = Phase::kCancel;
  phase.outcome = Outcome::kConflict;
  phase.attempts = 4000000000u;
  phase.last_error = "UNAVAILABLE: connection reset";
  StateChanged commit;
  commit.state = TxnState::kAwaitingApproval;
  commit.content_hash = HashOf("c");
  commit.approval_deadline_ms = 99;
  commit.at_ms = 98;
  StateChanged plain;
  plain.state = TxnState::kTrying;
  Decided forced = MakeDecided(Decision::kConfirm, 5);
  forced.cause = DecisionCause::kForced;
  forced.approval_id = "ap-1";
  BranchResolved resolved{"b1", "ap-2", 6};
  Flagged flagged{"b1", false, "phase 2 budget spent", 7};
  return {reg,
          added,
          phase,
          commit,
          plain,
          MakeDecided(Decision::kCancel, 4),
          forced,
          resolved,
          flagged,
          MakeFinished(TxnState::kCancelled, 8),
          EpochTaken{3, 9}};
}

TEST_CASE("every record survives an encode-decode round trip") {
  for (const Record& r : EveryRecord()) {
    const std::string bytes = EncodeRecord(r);
    INFO("record index " << r.index());
    CHECK(static_cast<uint8_t>(bytes[0]) == internal::kFormatVersion);
    absl::StatusOr<Record> back = DecodeRecord(bytes);
    REQUIRE(back.ok());
    CHECK(back->index() == r.index());
    CHECK(EncodeRecord(*back) == bytes);
  }
  // Spot-check fields, not only the re-encoding.
  absl::StatusOr<Record> reg = DecodeRecord(EncodeRecord(EveryRecord()[0]));
  const Registered& x = std::get<Registered>(*reg);
  CHECK(x.gid == "gid:1.a-b");
  CHECK(x.created_at_ms == -5);
  CHECK(x.revision == 0xFFFFFFFFFFFFFFFFull);
  CHECK(x.interactive);
  CHECK(x.branches.size() == 2);
  CHECK(x.branches[1].payload == std::string("\0bin\xff", 5));
  CHECK(x.branches[1].branch_hash == HashOf("gid:1.a-bb1"));
  absl::StatusOr<Record> forced = DecodeRecord(EncodeRecord(EveryRecord()[6]));
  REQUIRE(forced.ok());
  const Decided& d = std::get<Decided>(*forced);
  CHECK(d.cause == DecisionCause::kForced);
  CHECK(d.reason == "test");
  REQUIRE(d.approval_id.has_value());
  CHECK(*d.approval_id == "ap-1");
}

TEST_CASE("a decision's cause survives the round trip, every cause") {
  for (uint8_t c = 0; c <= 6; ++c) {
    Decided d = MakeDecided(Decision::kCancel, 7);
    d.cause = static_cast<DecisionCause>(c);
    absl::StatusOr<Record> back = DecodeRecord(EncodeRecord(d));
    REQUIRE(back.ok());
    CHECK(std::get<Decided>(*back).cause == d.cause);
  }
  std::string bad = EncodeRecord(MakeDecided(Decision::kCancel, 7));
  bad[3] = 7;  // version, tag, decision, then the cause
  CHECK(absl::IsDataLoss(DecodeRecord(bad).status()));
}

// A Decided record as format version 1 wrote it: no cause field, the cause
// a prefix of the reason.
std::string V1Decided(Decision decision, const std::string& reason,
                      int64_t at_ms,
                      std::optional<std::string> approval = std::nullopt) {
  std::string out("\x01\x05", 2);
  out.push_back(static_cast<char>(decision));
  const uint32_t n = static_cast<uint32_t>(reason.size());
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += reason;
  internal::PutU64(out, static_cast<uint64_t>(at_ms));
  out.push_back(approval.has_value() ? 1 : 0);
  if (approval.has_value()) {
    const uint32_t m = static_cast<uint32_t>(approval->size());
    for (int i = 3; i >= 0; --i) {
      out.push_back(static_cast<char>(m >> (8 * i)));
    }
    out += *approval;
  }
  return out;
}

TEST_CASE("a version-1 Decided takes its cause from its reason's prefix") {
  struct Case {
    std::string stored;
    DecisionCause cause;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"every Try EXECUTED", DecisionCause::kRule, "every Try EXECUTED"},
      {"branch b1 REJECTED: no funds", DecisionCause::kRule,
       "branch b1 REJECTED: no funds"},
      {"rollback: requested by the caller", DecisionCause::kRollback,
       "requested by the caller"},
      {"forced: approval ap-1", DecisionCause::kForced, "approval ap-1"},
      {"approved: approval ap-2", DecisionCause::kGate, "approval ap-2"},
      {"deadline: OPEN deadline passed", DecisionCause::kDeadline,
       "OPEN deadline passed"},
      {"witnessed: b0 witnessed Confirm; the WAL had lost the decision",
       DecisionCause::kWitnessed,
       "b0 witnessed Confirm; the WAL had lost the decision"},
      // Only a prefix counts.
      {"branch b1 REJECTED: forced: no", DecisionCause::kRule,
       "branch b1 REJECTED: forced: no"},
  };
  for (const Case& c : cases) {
    INFO(c.stored);
    absl::StatusOr<Record> back =
        DecodeRecord(V1Decided(Decision::kCancel, c.stored, 1234));
    REQUIRE(back.ok());
    const Decided& d = std::get<Decided>(*back);
    CHECK(d.decision == Decision::kCancel);
    CHECK(d.cause == c.cause);
    CHECK(d.reason == c.reason);
    CHECK(d.at_ms == 1234);
    CHECK_FALSE(d.approval_id.has_value());
  }
  absl::StatusOr<Record> forced = DecodeRecord(
      V1Decided(Decision::kConfirm, "forced: approval ap-9", 5, "ap-9"));
  REQUIRE(forced.ok());
  const Decided& f = std::get<Decided>(*forced);
  CHECK(f.cause == DecisionCause::kForced);
  REQUIRE(f.approval_id.has_value());
  CHECK(*f.approval_id == "ap-9");
  // Written again, it is version 2 with the cause as a field.
  const std::string again = EncodeRecord(f);
  CHECK(static_cast<uint8_t>(again[0]) == 2);
  CHECK(std::get<Decided>(*DecodeRecord(again)).cause ==
        DecisionCause::kForced);
  // Version 1 decodes strictly too.
  const std::string v1 = V1Decided(Decision::kCancel, "rollback: x", 1);
  for (size_t n = 0; n < v1.size(); ++n) {
    CHECK(absl::IsDataLoss(DecodeRecord(v1.substr(0, n)).status()));
  }
  CHECK(absl::IsDataLoss(DecodeRecord(v1 + '\0').status()));
}

TEST_CASE("version-1 records, summaries and approvals decode as they were") {
  // Layouts other than Decided's did not change: the same bytes with the
  // version byte 1 decode to the same value.
  for (const Record& r : EveryRecord()) {
    if (std::holds_alternative<Decided>(r)) continue;
    std::string v1 = EncodeRecord(r);
    v1[0] = 1;
    INFO("record index " << r.index());
    absl::StatusOr<Record> back = DecodeRecord(v1);
    REQUIRE(back.ok());
    CHECK(EncodeRecord(*back) == EncodeRecord(r));
  }
  TxnSummary s;
  s.gid = "g1";
  s.participants = {"a"};
  std::string summary = EncodeSummary(s, 3, 300);
  summary[0] = 1;
  absl::StatusOr<internal::StoredSummary> back = DecodeSummary(summary);
  REQUIRE(back.ok());
  CHECK(back->summary.gid == "g1");
  CHECK(back->record_count == 3);
  Approval a;
  a.approval_id = "ap";
  std::string approval = EncodeApproval(a);
  approval[0] = 1;
  absl::StatusOr<Approval> ab = DecodeApproval(approval);
  REQUIRE(ab.ok());
  CHECK(ab->approval_id == "ap");
}

TEST_CASE("the encoding is pinned") {
  // Finished{CANCELLED, at 258}: version 2, tag 8, state 7, i64 258.
  const std::string expected("\x02\x08\x07\0\0\0\0\0\0\x01\x02", 11);
  CHECK(EncodeRecord(MakeFinished(TxnState::kCancelled, 258)) == expected);
  const std::string epoch(
      "\x02\x09\0\0\0\0\0\0\0\x03\xff\xff\xff\xff\xff\xff"
      "\xff\xff",
      18);
  CHECK(EncodeRecord(EpochTaken{3, -1}) == epoch);
  // Decided{Cancel, witnessed, "r", at 1, approval "a"}: version 2, tag 5,
  // decision 2, cause 6, string "r", i64 1, has_approval 1, string "a".
  Decided d = MakeDecided(Decision::kCancel, 1);
  d.cause = DecisionCause::kWitnessed;
  d.reason = "r";
  d.approval_id = "a";
  const std::string decided(
      "\x02\x05\x02\x06\0\0\0\x01r\0\0\0\0\0\0\0\x01\x01\0\0\0\x01"
      "a",
      23);
  CHECK(EncodeRecord(d) == decided);
}

TEST_CASE("summaries and approvals round trip") {
  TxnSummary s;
  s.gid = "g1";
  s.state = TxnState::kConfirmed;
  s.decision = Decision::kConfirm;
  s.content_hash = HashOf("h");
  s.revision = 3;
  s.created_at_ms = 10;
  s.registered_at_ms = 11;
  s.finished_at_ms = 12;
  s.participants = {"a", "b"};
  s.compacted = true;
  absl::StatusOr<internal::StoredSummary> back =
      DecodeSummary(EncodeSummary(s, 42, 4242));
  REQUIRE(back.ok());
  CHECK(back->record_count == 42);
  CHECK(back->record_bytes == 4242);
  CHECK(EncodeSummary(back->summary, 42, 4242) == EncodeSummary(s, 42, 4242));
  CHECK(back->summary.participants == s.participants);
  CHECK(back->summary.compacted);

  Approval a;
  a.approval_id = "ap";
  a.action = ApprovalAction::kResolveBranch;
  a.gid = "g1";
  a.revision = 9;
  a.content_hash = HashOf("h");
  a.branch_id = "b2";
  a.expires_at_ms = 100;
  a.issued_by = "ops";
  a.issued_at_ms = 50;
  a.reason = "fixed by hand";
  a.used_at_ms = 70;
  absl::StatusOr<Approval> ab = DecodeApproval(EncodeApproval(a));
  REQUIRE(ab.ok());
  CHECK(EncodeApproval(*ab) == EncodeApproval(a));
  CHECK(ab->branch_id == "b2");
  CHECK(ab->used_at_ms == 70);
}

TEST_CASE("every truncation and any trailing byte is DATA_LOSS") {
  for (const Record& r : EveryRecord()) {
    const std::string bytes = EncodeRecord(r);
    for (size_t n = 0; n < bytes.size(); ++n) {
      INFO("record " << r.index() << " cut to " << n);
      CHECK(absl::IsDataLoss(DecodeRecord(bytes.substr(0, n)).status()));
    }
    CHECK(absl::IsDataLoss(DecodeRecord(bytes + '\0').status()));
  }
  const std::string summary = EncodeSummary(TxnSummary{});
  for (size_t n = 0; n < summary.size(); ++n) {
    CHECK(absl::IsDataLoss(DecodeSummary(summary.substr(0, n)).status()));
  }
  CHECK(absl::IsDataLoss(DecodeSummary(summary + "x").status()));
  const std::string approval = EncodeApproval(Approval{});
  for (size_t n = 0; n < approval.size(); ++n) {
    CHECK(absl::IsDataLoss(DecodeApproval(approval.substr(0, n)).status()));
  }
  CHECK(absl::IsDataLoss(DecodeApproval(approval + "x").status()));
}

TEST_CASE("unknown versions, tags, enum values and bools are DATA_LOSS") {
  std::string finished = EncodeRecord(MakeFinished(TxnState::kConfirmed, 1));
  std::string v3 = finished;
  v3[0] = 3;
  absl::Status s = DecodeRecord(v3).status();
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find("unknown format version 3") !=
        std::string::npos);
  std::string v0 = finished;
  v0[0] = 0;
  CHECK(absl::IsDataLoss(DecodeRecord(v0).status()));
  std::string tag = finished;
  tag[1] = 10;
  CHECK(absl::IsDataLoss(DecodeRecord(tag).status()));
  tag[1] = 0;
  CHECK(absl::IsDataLoss(DecodeRecord(tag).status()));
  std::string state = finished;
  state[2] = 8;
  CHECK(absl::IsDataLoss(DecodeRecord(state).status()));
  std::string flagged = EncodeRecord(Flagged{"b", true, "", 1});
  // version, tag, u32 len 1, 'b', then the bool at offset 7.
  REQUIRE(flagged[7] == 1);
  flagged[7] = 2;
  CHECK(absl::IsDataLoss(DecodeRecord(flagged).status()));
  std::string summary = EncodeSummary(TxnSummary{});
  summary[0] = 9;
  CHECK(absl::IsDataLoss(DecodeSummary(summary).status()));
  std::string approval = EncodeApproval(Approval{});
  approval[0] = 9;
  CHECK(absl::IsDataLoss(DecodeApproval(approval).status()));
  CHECK(absl::IsDataLoss(DecodeRecord("").status()));
}

}  // namespace
}  // namespace tcc::wal::testing
