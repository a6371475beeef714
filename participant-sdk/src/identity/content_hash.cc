#include "tcc/identity/content_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace tcc::identity {
namespace {

// The canonical encodings (content_hash.h) are written once, below, to a
// sink: a string (the Canonical*Encoding functions) or a SHA-256 digest fed
// piece by piece (the hashes), so that hashing a submission does not first
// copy its payloads into one buffer.

// Appends to a string.
class StringSink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  void Put(std::string_view bytes) { out_.append(bytes.data(), bytes.size()); }

 private:
  std::string& out_;
};

// Feeds a SHA-256 digest. EVP calls fail only on allocation failure; a wrong
// hash would be worse than a crash.
class DigestSink {
 public:
  DigestSink() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr ||
        EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) {
      std::abort();
    }
  }
  void Put(std::string_view bytes) {
    if (EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1) {
      std::abort();
    }
  }
  Hash Finish() {
    Hash hash{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), hash.data(), &len) != 1 ||
        len != hash.size()) {
      std::abort();
    }
    return hash;
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

// `v` as `Bytes` bytes, big-endian.
template <int Bytes, class Sink>
void PutBigEndian(Sink& out, uint64_t v) {
  char b[Bytes];
  for (int i = 0; i < Bytes; ++i) {
    b[i] = static_cast<char>((v >> (8 * (Bytes - 1 - i))) & 0xff);
  }
  out.Put(std::string_view(b, sizeof(b)));
}

template <class Sink>
void PutString(Sink& out, std::string_view s) {
  PutBigEndian<4>(out, static_cast<uint32_t>(s.size()));
  out.Put(s);
}

template <class Sink>
void PutTag(Sink& out, std::string_view tag) {
  out.Put(tag);
  out.Put(std::string_view("\0", 1));
}

template <class Sink>
void EncodeBranch(Sink& out, uint64_t revision, std::string_view participant,
                  std::string_view action, std::string_view payload) {
  PutTag(out, "tcc.v1.branch");
  PutBigEndian<8>(out, revision);
  PutString(out, participant);
  PutString(out, action);
  PutString(out, payload);
}

template <class Sink>
void EncodeSubmission(Sink& out, uint64_t revision, bool approval_gate,
                      std::vector<BranchContent> branches) {
  std::sort(branches.begin(), branches.end(),
            [](const BranchContent& a, const BranchContent& b) {
              return a.branch_id < b.branch_id;
            });
  PutTag(out, "tcc.v1.submission");
  PutBigEndian<8>(out, revision);
  out.Put(approval_gate ? std::string_view("\1", 1)
                        : std::string_view("\0", 1));
  PutBigEndian<4>(out, static_cast<uint32_t>(branches.size()));
  for (const auto& b : branches) {
    PutString(out, b.branch_id);
    PutString(out, b.participant);
    PutString(out, b.action);
    PutString(out, b.payload);
  }
}

}  // namespace

Hash Sha256(std::string_view bytes) {
  DigestSink digest;
  digest.Put(bytes);
  return digest.Finish();
}

std::string CanonicalBranchEncoding(uint64_t revision,
                                    std::string_view participant,
                                    std::string_view action,
                                    std::string_view payload) {
  std::string out;
  out.reserve(32 + participant.size() + action.size() + payload.size());
  StringSink sink(out);
  EncodeBranch(sink, revision, participant, action, payload);
  return out;
}

std::string CanonicalSubmissionEncoding(uint64_t revision, bool approval_gate,
                                        std::vector<BranchContent> branches) {
  size_t size = 32;
  for (const auto& b : branches) {
    size += 16 + b.branch_id.size() + b.participant.size() + b.action.size() +
            b.payload.size();
  }
  std::string out;
  out.reserve(size);
  StringSink sink(out);
  EncodeSubmission(sink, revision, approval_gate, std::move(branches));
  return out;
}

Hash BranchHash(uint64_t revision, std::string_view participant,
                std::string_view action, std::string_view payload) {
  DigestSink digest;
  EncodeBranch(digest, revision, participant, action, payload);
  return digest.Finish();
}

Hash SubmissionHash(uint64_t revision, bool approval_gate,
                    std::vector<BranchContent> branches) {
  DigestSink digest;
  EncodeSubmission(digest, revision, approval_gate, std::move(branches));
  return digest.Finish();
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
