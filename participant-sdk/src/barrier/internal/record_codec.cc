#include "barrier/internal/record_codec.h"

#include <cstdint>

namespace tcc::barrier::internal {
namespace {

constexpr uint8_t kRecordVersion = 1;
constexpr uint64_t kSignFlip = uint64_t{1} << 63;

void PutU64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v) {
    if (in_.size() < 1) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (in_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v = (*v << 8) | static_cast<uint8_t>(in_[i]);
    in_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v = (*v << 8) | static_cast<uint8_t>(in_[i]);
    in_.remove_prefix(8);
    return true;
  }
  bool String(std::string* s) {
    uint32_t n;
    if (!U32(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string EncodeKey(const BranchKey& key) {
  std::string out;
  PutString(out, key.gid);
  PutU64(out, static_cast<uint64_t>(key.created_at_ms) ^ kSignFlip);
  PutString(out, key.branch_id);
  return out;
}

absl::StatusOr<BranchKey> DecodeKey(std::string_view bytes) {
  Reader r(bytes);
  BranchKey key;
  uint64_t created;
  if (!r.String(&key.gid) || !r.U64(&created) || !r.String(&key.branch_id) ||
      !r.done()) {
    return absl::DataLossError("malformed barrier key");
  }
  key.created_at_ms = static_cast<int64_t>(created ^ kSignFlip);
  return key;
}

std::string EncodeRecord(const BarrierRecord& rec) {
  std::string out;
  out.push_back(static_cast<char>(kRecordVersion));
  out.push_back(static_cast<char>(rec.try_state));
  out.push_back(static_cast<char>(rec.phase_two));
  out.push_back(static_cast<char>(rec.phase_two_outcome));
  PutU64(out, static_cast<uint64_t>(rec.try_deadline_ms));
  PutU64(out, static_cast<uint64_t>(rec.phase_two_at_ms));
  PutString(out, rec.branch_hash);
  PutString(out, rec.try_message);
  PutString(out, rec.phase_two_message);
  return out;
}

absl::StatusOr<BarrierRecord> DecodeRecord(std::string_view bytes) {
  Reader r(bytes);
  uint8_t version, try_state, phase_two, outcome;
  uint64_t deadline, at;
  BarrierRecord rec;
  if (!r.U8(&version) || version != kRecordVersion || !r.U8(&try_state) ||
      try_state > 3 || !r.U8(&phase_two) || phase_two > 2 || !r.U8(&outcome) ||
      outcome > 5 || !r.U64(&deadline) || !r.U64(&at) ||
      !r.String(&rec.branch_hash) || !r.String(&rec.try_message) ||
      !r.String(&rec.phase_two_message) || !r.done()) {
    return absl::DataLossError("malformed barrier record");
  }
  rec.try_state = static_cast<TryState>(try_state);
  rec.phase_two = static_cast<PhaseTwoState>(phase_two);
  rec.phase_two_outcome = static_cast<Outcome>(outcome);
  rec.try_deadline_ms = static_cast<int64_t>(deadline);
  rec.phase_two_at_ms = static_cast<int64_t>(at);
  return rec;
}

}  // namespace tcc::barrier::internal
