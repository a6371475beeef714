#include "tcc/identity/ids.h"

#include <catch2/catch.hpp>
#include <string>

using tcc::identity::ValidateAction;
using tcc::identity::ValidateBranchId;
using tcc::identity::ValidateGid;
using tcc::identity::ValidateParticipantName;

TEST_CASE("gid accepts the whole alphabet") {
  CHECK(ValidateGid("a").ok());
  CHECK(ValidateGid("ABCXYZabcxyz0123456789._:-").ok());
  CHECK(ValidateGid("order:2026-11-30.42_x").ok());
}

TEST_CASE("gid length limits: 1 to 128 bytes") {
  CHECK(ValidateGid(std::string(128, 'g')).ok());
  absl::Status too_long = ValidateGid(std::string(129, 'g'));
  CHECK(too_long.code() == absl::StatusCode::kInvalidArgument);
  CHECK(too_long.message().find("129") != std::string::npos);
  absl::Status empty = ValidateGid("");
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);
  CHECK(empty.message().find("empty") != std::string::npos);
}

TEST_CASE("gid refuses every byte outside the alphabet") {
  int refused = 0;
  for (int c = 0; c < 256; ++c) {
    std::string gid = "ok";
    gid.push_back(static_cast<char>(c));
    bool allowed = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                   (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
                   c == '-';
    absl::Status s = ValidateGid(gid);
    CHECK(s.ok() == allowed);
    if (!s.ok()) {
      ++refused;
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(s.message().find("offset 2") != std::string::npos);
    }
  }
  CHECK(refused == 256 - 66);
}

TEST_CASE("branch id length limits: 1 to 64 bytes") {
  CHECK(ValidateBranchId("b").ok());
  CHECK(ValidateBranchId(std::string(64, 'b')).ok());
  CHECK(ValidateBranchId(std::string(65, 'b')).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ValidateBranchId("").code() == absl::StatusCode::kInvalidArgument);
  CHECK(ValidateBranchId("b 1").code() == absl::StatusCode::kInvalidArgument);
  CHECK(ValidateBranchId("b/1").code() == absl::StatusCode::kInvalidArgument);
  CHECK(ValidateBranchId(std::string("b\0", 2)).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("action and participant name limits") {
  CHECK(ValidateAction(std::string(128, 'a')).ok());
  CHECK(!ValidateAction(std::string(129, 'a')).ok());
  CHECK(!ValidateAction("").ok());
  CHECK(ValidateParticipantName("bank-a").ok());
  CHECK(ValidateParticipantName(std::string(64, 'p')).ok());
  CHECK(!ValidateParticipantName(std::string(65, 'p')).ok());
  CHECK(!ValidateParticipantName("10.0.0.1/x").ok());
}

TEST_CASE("error messages name the field") {
  CHECK(ValidateGid("").message().find("gid") != std::string::npos);
  CHECK(ValidateBranchId("").message().find("branch id") != std::string::npos);
  CHECK(ValidateAction("").message().find("action") != std::string::npos);
}
