#include "tcc/identity/content_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>

namespace tcc::identity {
namespace {

void PutU64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s.data(), s.size());
}

void PutTag(std::string& out, std::string_view tag) {
  out.append(tag.data(), tag.size());
  out.push_back('\0');
}

}  // namespace

Hash Sha256(std::string_view bytes) {
  Hash hash{};
  unsigned int len = 0;
  // EVP_Digest only fails on allocation failure; a wrong hash would be worse
  // than a crash.
  if (EVP_Digest(bytes.data(), bytes.size(), hash.data(), &len, EVP_sha256(),
                 nullptr) != 1 ||
      len != hash.size()) {
    std::abort();
  }
  return hash;
}

std::string CanonicalBranchEncoding(uint64_t revision,
                                    std::string_view participant,
                                    std::string_view action,
                                    std::string_view payload) {
  std::string out;
  out.reserve(32 + participant.size() + action.size() + payload.size());
  PutTag(out, "tcc.v1.branch");
  PutU64(out, revision);
  PutString(out, participant);
  PutString(out, action);
  PutString(out, payload);
  return out;
}

std::string CanonicalSubmissionEncoding(uint64_t revision, bool approval_gate,
                                        std::vector<BranchContent> branches) {
  std::sort(branches.begin(), branches.end(),
            [](const BranchContent& a, const BranchContent& b) {
              return a.branch_id < b.branch_id;
            });
  size_t size = 32;
  for (const auto& b : branches) {
    size += 16 + b.branch_id.size() + b.participant.size() + b.action.size() +
            b.payload.size();
  }
  std::string out;
  out.reserve(size);
  PutTag(out, "tcc.v1.submission");
  PutU64(out, revision);
  out.push_back(approval_gate ? '\1' : '\0');
  PutU32(out, static_cast<uint32_t>(branches.size()));
  for (const auto& b : branches) {
    PutString(out, b.branch_id);
    PutString(out, b.participant);
    PutString(out, b.action);
    PutString(out, b.payload);
  }
  return out;
}

Hash BranchHash(uint64_t revision, std::string_view participant,
                std::string_view action, std::string_view payload) {
  return Sha256(
      CanonicalBranchEncoding(revision, participant, action, payload));
}

Hash SubmissionHash(uint64_t revision, bool approval_gate,
                    std::vector<BranchContent> branches) {
  return Sha256(CanonicalSubmissionEncoding(revision, approval_gate,
                                            std::move(branches)));
}

std::string ToHex(const Hash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(hash.size() * 2);
  for (uint8_t b : hash) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

std::string ToBytes(const Hash& hash) {
  return std::string(reinterpret_cast<const char*>(hash.data()), hash.size());
}

}  // namespace tcc::identity
