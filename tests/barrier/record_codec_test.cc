// The RocksDB store's byte encodings round-trip, keep keys ordered by time,
// and refuse anything malformed with DATA_LOSS.
#include "barrier/internal/record_codec.h"

#include <catch2/catch.hpp>

namespace tcc::barrier::internal {
namespace {

TEST_CASE("record codec: keys and records round-trip", "[memory]") {
  BranchKey key{"gid-1", -5, "b:1"};
  auto k = DecodeKey(EncodeKey(key));
  REQUIRE(k.ok());
  CHECK(*k == key);
  BarrierRecord rec;
  rec.try_state = TryState::kTried;
  rec.branch_hash = std::string(32, '\xab');
  rec.try_message = "m";
  rec.phase_two = PhaseTwoState::kCancelled;
  rec.phase_two_outcome = Outcome::kExecuted;
  rec.phase_two_message = "x";
  rec.try_deadline_ms = 1'700'000'000'123;
  rec.phase_two_at_ms = 1'700'000'000'456;
  auto r = DecodeRecord(EncodeRecord(rec));
  REQUIRE(r.ok());
  CHECK(*r == rec);
}

TEST_CASE("record codec: keys of one gid sort by created_at", "[memory]") {
  CHECK(EncodeKey({"g", -1, "b"}) < EncodeKey({"g", 0, "b"}));
  CHECK(EncodeKey({"g", 1, "b"}) < EncodeKey({"g", 2, "b"}));
}

TEST_CASE("record codec: malformed bytes are DATA_LOSS", "[memory]") {
  std::string good = EncodeRecord(BarrierRecord{});
  CHECK(DecodeRecord(good.substr(0, good.size() - 1)).status().code() ==
        absl::StatusCode::kDataLoss);
  std::string bad_version = good;
  bad_version[0] = 9;
  CHECK(DecodeRecord(bad_version).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(DecodeRecord(good + "x").status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(DecodeKey("abc").status().code() == absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tcc::barrier::internal
