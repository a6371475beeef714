// Fixed vectors were computed independently (Python hashlib over the encoding
// documented in content_hash.h), so they pin the encoding, not just this code.
#include "tcc/identity/content_hash.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

using tcc::identity::BranchContent;
using tcc::identity::BranchHash;
using tcc::identity::CanonicalBranchEncoding;
using tcc::identity::SubmissionHash;
using tcc::identity::ToBytes;
using tcc::identity::ToHex;

namespace {

const std::string kPayloadA = R"({"account":"A1","amount":100})";
const std::string kPayloadB = R"({"account":"B9","amount":100})";

std::vector<BranchContent> Transfer() {
  return {{"b1", "bank-a", "transfer-out", kPayloadA},
          {"b2", "bank-b", "transfer-in", kPayloadB}};
}

}  // namespace

TEST_CASE("sha256 of the empty string") {
  CHECK(ToHex(tcc::identity::Sha256("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("branch hash fixed vectors") {
  CHECK(ToHex(BranchHash(7, "bank-a", "transfer-out", kPayloadA)) ==
        "c344eb4656547643adcf5f648e1f19bf30c24f52b74799cd36f0735009f874fa");
  CHECK(ToHex(BranchHash(0, "", "", "")) ==
        "861f182414ec7157445f25b2da16eb810ac759865fc1bae2d75543e24e9a6579");
}

TEST_CASE("submission hash fixed vectors") {
  CHECK(ToHex(SubmissionHash(7, false, Transfer())) ==
        "df29d71aab8a21d7f52cd2acd3b670c02a487c8d9be286d731b8d9332b9366d8");
  CHECK(ToHex(SubmissionHash(0, true, {})) ==
        "60d279cc174a38eabb08cc159b48d06e1b47250e992171dc153e22f266ad9561");
}

TEST_CASE("branch order does not change the submission hash") {
  auto forward = Transfer();
  auto backward = Transfer();
  std::swap(backward[0], backward[1]);
  CHECK(SubmissionHash(7, false, forward) ==
        SubmissionHash(7, false, backward));
}

TEST_CASE("any changed byte of the content changes the submission hash") {
  const auto base = SubmissionHash(7, false, Transfer());
  // Every byte position of every field of every branch, flipped one at a time.
  for (size_t branch = 0; branch < 2; ++branch) {
    for (int field = 0; field < 4; ++field) {
      auto original = Transfer();
      std::string_view* target[] = {
          &original[branch].branch_id, &original[branch].participant,
          &original[branch].action, &original[branch].payload};
      std::string value(*target[field]);
      for (size_t i = 0; i < value.size(); ++i) {
        std::string changed = value;
        changed[i] = static_cast<char>(changed[i] ^ 0x01);
        auto branches = Transfer();
        std::string_view* slot[] = {
            &branches[branch].branch_id, &branches[branch].participant,
            &branches[branch].action, &branches[branch].payload};
        *slot[field] = changed;
        INFO("branch " << branch << " field " << field << " byte " << i);
        CHECK(SubmissionHash(7, false, branches) != base);
      }
    }
  }
  CHECK(SubmissionHash(8, false, Transfer()) != base);  // revision
  CHECK(SubmissionHash(7, true, Transfer()) != base);   // gate flag
  auto fewer = Transfer();
  fewer.pop_back();
  CHECK(SubmissionHash(7, false, fewer) != base);
}

TEST_CASE("field boundaries are unambiguous") {
  // Moving a byte from one field to the next must change the hash.
  CHECK(BranchHash(1, "ab", "c", "") != BranchHash(1, "a", "bc", ""));
  CHECK(BranchHash(1, "", "", "x") != BranchHash(1, "", "x", ""));
  std::vector<BranchContent> one = {{"b1", "p", "a", "xy"}};
  std::vector<BranchContent> two = {{"b1", "p", "ax", "y"}};
  CHECK(SubmissionHash(1, false, one) != SubmissionHash(1, false, two));
}

TEST_CASE("branch hash covers participant, action, payload and revision") {
  const auto base = BranchHash(3, "bank-a", "transfer-out", kPayloadA);
  CHECK(BranchHash(3, "bank-a", "transfer-out", kPayloadA) == base);
  CHECK(BranchHash(4, "bank-a", "transfer-out", kPayloadA) != base);
  CHECK(BranchHash(3, "bank-b", "transfer-out", kPayloadA) != base);
  CHECK(BranchHash(3, "bank-a", "transfer-in", kPayloadA) != base);
  CHECK(BranchHash(3, "bank-a", "transfer-out", kPayloadB) != base);
}

TEST_CASE("payloads are hashed as bytes, including zero bytes") {
  std::string with_nul("a\0b", 3);
  std::string other("a\0c", 3);
  CHECK(BranchHash(1, "p", "a", with_nul) != BranchHash(1, "p", "a", other));
  CHECK(CanonicalBranchEncoding(1, "p", "a", with_nul).size() ==
        14 + 8 + (4 + 1) + (4 + 1) + (4 + 3));
  CHECK(ToBytes(BranchHash(1, "p", "a", with_nul)).size() == 32);
}

TEST_CASE("the vectors file of participant.proto: every encoding and hash") {
  std::ifstream in(TCC_HASH_VECTORS);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct doc;
  REQUIRE(google::protobuf::util::JsonStringToMessage(text.str(), &doc).ok());
  // By reference: the lists below point into the document.
  auto field = [](const google::protobuf::Struct& s,
                  const std::string& k) -> const google::protobuf::Value& {
    return s.fields().at(k);
  };
  auto bytes = [&](const google::protobuf::Struct& s, const std::string& k) {
    return absl::HexStringToBytes(field(s, k).string_value());
  };
  const auto& branches = field(doc, "branch").list_value().values();
  REQUIRE(branches.size() >= 3);
  for (const auto& v : branches) {
    const auto& b = v.struct_value();
    const auto rev = static_cast<uint64_t>(field(b, "revision").number_value());
    const std::string enc = CanonicalBranchEncoding(
        rev, bytes(b, "participant_hex"), bytes(b, "action_hex"),
        bytes(b, "payload_hex"));
    CHECK(absl::BytesToHexString(enc) ==
          field(b, "encoding_hex").string_value());
    CHECK(ToHex(BranchHash(rev, bytes(b, "participant_hex"),
                           bytes(b, "action_hex"), bytes(b, "payload_hex"))) ==
          field(b, "sha256_hex").string_value());
  }
  const auto& subs = field(doc, "submission").list_value().values();
  REQUIRE(subs.size() >= 2);
  for (const auto& v : subs) {
    const auto& s = v.struct_value();
    std::vector<std::string> storage;
    for (const auto& x : field(s, "branches").list_value().values()) {
      for (const char* k :
           {"branch_id_hex", "participant_hex", "action_hex", "payload_hex"}) {
        storage.push_back(bytes(x.struct_value(), k));
      }
    }
    std::vector<BranchContent> content;
    for (size_t i = 0; i + 3 < storage.size(); i += 4) {
      content.push_back(
          {storage[i], storage[i + 1], storage[i + 2], storage[i + 3]});
    }
    const auto rev = static_cast<uint64_t>(field(s, "revision").number_value());
    const bool gate = field(s, "approval_gate").bool_value();
    CHECK(absl::BytesToHexString(tcc::identity::CanonicalSubmissionEncoding(
              rev, gate, content)) == field(s, "encoding_hex").string_value());
    CHECK(ToHex(SubmissionHash(rev, gate, content)) ==
          field(s, "sha256_hex").string_value());
  }
}

TEST_CASE("the hashes are SHA-256 of the canonical encodings, large too") {
  // The hashes stream the encoding into the digest piece by piece; the
  // encodings are built whole. Both come from one definition: this pins
  // that they agree, for payloads up to 64 KiB and branches in any order.
  std::mt19937_64 rng(20261207);
  auto bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
  };
  for (size_t size : {size_t{0}, size_t{1}, size_t{63}, size_t{64},
                      size_t{4095}, size_t{16384}, size_t{65536}}) {
    const uint64_t revision = rng();
    const std::string participant = bytes(rng() % 40);
    const std::string action = bytes(rng() % 40);
    const std::string payload = bytes(size);
    INFO("payload of " << size << " bytes");
    CHECK(BranchHash(revision, participant, action, payload) ==
          tcc::identity::Sha256(
              CanonicalBranchEncoding(revision, participant, action, payload)));
    // Three branches, given in reverse order of their ids.
    const std::string ids[] = {"b3", "b2", "b1"};
    std::vector<std::string> parts;  // participant, action, payload of each
    for (int i = 0; i < 3; ++i) {
      parts.push_back(bytes(9));
      parts.push_back(bytes(9));
      parts.push_back(bytes(size));
    }
    std::vector<BranchContent> content;
    for (int i = 0; i < 3; ++i) {
      content.push_back(
          {ids[i], parts[3 * i], parts[3 * i + 1], parts[3 * i + 2]});
    }
    const bool gate = size % 2 == 1;
    CHECK(SubmissionHash(revision, gate, content) ==
          tcc::identity::Sha256(tcc::identity::CanonicalSubmissionEncoding(
              revision, gate, content)));
  }
}
