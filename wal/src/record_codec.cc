#include "record_codec.h"

#include <string_view>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"

namespace tcc::wal::internal {
namespace {

enum class Tag : uint8_t {
  kRegistered = 1,
  kBranchAdded = 2,
  kPhaseUpdate = 3,
  kStateChanged = 4,
  kDecided = 5,
  kBranchResolved = 6,
  kFlagged = 7,
  kFinished = 8,
  kEpochTaken = 9,
};

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    char bytes[4];
    for (int i = 0; i < 4; ++i) {
      bytes[i] = static_cast<char>(v >> (8 * (3 - i)));
    }
    out_.append(bytes, sizeof(bytes));
  }
  void U64(uint64_t v) { PutU64(out_, v); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void H(const Hash& h) {
    out_.append(reinterpret_cast<const char*>(h.data()), h.size());
  }
  template <typename E>
  void Enum(E e) {
    U8(static_cast<uint8_t>(e));
  }

 private:
  std::string& out_;
};

// Reads strictly; the first failure sticks and names what was being read.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool ok() const { return error_.empty(); }

  uint8_t U8(const char* what) {
    if (!Need(1, what)) return 0;
    const auto v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  uint32_t U32(const char* what) {
    if (!Need(4, what)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in_[i]);
    in_.remove_prefix(4);
    return v;
  }
  uint64_t U64(const char* what) {
    uint64_t v = 0;
    if (Need(8, what)) (void)GetU64(in_, v);
    return v;
  }
  int64_t I64(const char* what) { return static_cast<int64_t>(U64(what)); }
  bool Bool(const char* what) {
    const uint8_t v = U8(what);
    if (v > 1) Fail(absl::StrCat(what, " is not a bool"));
    return v == 1;
  }
  std::string Str(const char* what) {
    const uint32_t n = U32(what);
    if (!Need(n, what)) return {};
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  Hash H(const char* what) {
    Hash h{};
    if (!Need(h.size(), what)) return h;
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(in_[i]);
    in_.remove_prefix(h.size());
    return h;
  }
  // An enum whose stored values are min..max.
  template <typename E>
  E Enum(const char* what, uint8_t min, uint8_t max) {
    const uint8_t v = U8(what);
    if (ok() && (v < min || v > max)) {
      Fail(absl::StrCat("unknown ", what, " value ", v));
    }
    return static_cast<E>(v);
  }
  // The value's format version, one this build reads (else a failure).
  uint8_t Version(const char* what) {
    const uint8_t v = U8(what);
    if (ok() && (v < kOldestFormatVersion || v > kFormatVersion)) {
      Fail(absl::StrCat("unknown format version ", v, " of ", what));
    }
    return v;
  }
  void Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }
  absl::Status Finish(const char* what) {
    if (ok() && !in_.empty()) {
      Fail(absl::StrCat(in_.size(), " trailing bytes after ", what));
    }
    if (ok()) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("WAL: malformed ", what, ": ", error_));
  }

 private:
  bool Need(size_t n, const char* what) {
    if (!ok()) return false;
    if (in_.size() < n) {
      Fail(absl::StrCat("cut short in ", what));
      return false;
    }
    return true;
  }

  std::string_view in_;
  std::string error_;
};

void PutBranch(Writer& w, const BranchSpec& b) {
  w.Str(b.branch_id);
  w.Str(b.participant);
  w.Str(b.action);
  w.Str(b.payload);
  w.H(b.branch_hash);
}

BranchSpec GetBranch(Reader& r) {
  BranchSpec b;
  b.branch_id = r.Str("branch_id");
  b.participant = r.Str("participant");
  b.action = r.Str("action");
  b.payload = r.Str("payload");
  b.branch_hash = r.H("branch_hash");
  return b;
}

void Put(Writer& w, const Registered& r) {
  w.Enum(Tag::kRegistered);
  w.Str(r.gid);
  w.I64(r.created_at_ms);
  w.U64(r.revision);
  w.Bool(r.interactive);
  w.Bool(r.approval_gate);
  w.I64(r.approval_timeout_ms);
  w.I64(r.try_deadline_ms);
  w.I64(r.registered_at_ms);
  w.H(r.content_hash);
  w.U64(r.owner_epoch);
  w.U32(static_cast<uint32_t>(r.branches.size()));
  for (const BranchSpec& b : r.branches) PutBranch(w, b);
}
void Put(Writer& w, const BranchAdded& r) {
  w.Enum(Tag::kBranchAdded);
  PutBranch(w, r.branch);
}
void Put(Writer& w, const PhaseUpdate& r) {
  w.Enum(Tag::kPhaseUpdate);
  w.Str(r.branch_id);
  w.Enum(r.phase);
  w.Enum(r.state);
  w.Enum(r.outcome);
  w.U32(r.attempts);
  w.Str(r.last_error);
  w.I64(r.at_ms);
}
void Put(Writer& w, const StateChanged& r) {
  w.Enum(Tag::kStateChanged);
  w.Enum(r.state);
  w.Bool(r.content_hash.has_value());
  if (r.content_hash.has_value()) w.H(*r.content_hash);
  w.I64(r.approval_deadline_ms);
  w.I64(r.at_ms);
}
void Put(Writer& w, const Decided& r) {
  w.Enum(Tag::kDecided);
  w.Enum(r.decision);
  w.Enum(r.cause);
  w.Str(r.reason);
  w.I64(r.at_ms);
  w.Bool(r.approval_id.has_value());
  if (r.approval_id.has_value()) w.Str(*r.approval_id);
}
void Put(Writer& w, const BranchResolved& r) {
  w.Enum(Tag::kBranchResolved);
  w.Str(r.branch_id);
  w.Str(r.approval_id);
  w.I64(r.at_ms);
}
void Put(Writer& w, const Flagged& r) {
  w.Enum(Tag::kFlagged);
  w.Str(r.branch_id);
  w.Bool(r.stuck);
  w.Str(r.reason);
  w.I64(r.at_ms);
}
void Put(Writer& w, const Finished& r) {
  w.Enum(Tag::kFinished);
  w.Enum(r.state);
  w.I64(r.at_ms);
}
void Put(Writer& w, const EpochTaken& r) {
  w.Enum(Tag::kEpochTaken);
  w.U64(r.owner_epoch);
  w.I64(r.at_ms);
}

// Format version 1 stored a decision's cause as a prefix of its reason.
// This is the one place that still knows those prefixes.
void CauseFromV1Reason(Decided& d) {
  static constexpr struct {
    const char* prefix;
    DecisionCause cause;
  } kPrefixes[] = {
      {"rollback: ", DecisionCause::kRollback},
      {"forced: ", DecisionCause::kForced},
      {"approved: ", DecisionCause::kGate},
      {"deadline: ", DecisionCause::kDeadline},
      {"witnessed: ", DecisionCause::kWitnessed},
  };
  for (const auto& [prefix, cause] : kPrefixes) {
    const std::string_view p(prefix);
    if (std::string_view(d.reason).substr(0, p.size()) == p) {
      d.cause = cause;
      d.reason.erase(0, p.size());
      return;
    }
  }
  d.cause = DecisionCause::kRule;  // the rule's reasons had no prefix
}

Decided GetDecided(Reader& r, uint8_t version) {
  Decided x;
  x.decision = r.Enum<Decision>("decision", 0, 2);
  if (version >= 2) x.cause = r.Enum<DecisionCause>("decision cause", 0, 6);
  x.reason = r.Str("reason");
  x.at_ms = r.I64("at_ms");
  if (r.Bool("has_approval")) x.approval_id = r.Str("approval_id");
  if (version == 1) CauseFromV1Reason(x);
  return x;
}

Record GetRecordBody(Reader& r, uint8_t version) {
  const auto tag = r.Enum<Tag>("record tag", 1, 9);
  if (!r.ok()) return Record{};
  switch (tag) {
    case Tag::kRegistered: {
      Registered x;
      x.gid = r.Str("gid");
      x.created_at_ms = r.I64("created_at_ms");
      x.revision = r.U64("revision");
      x.interactive = r.Bool("interactive");
      x.approval_gate = r.Bool("approval_gate");
      x.approval_timeout_ms = r.I64("approval_timeout_ms");
      x.try_deadline_ms = r.I64("try_deadline_ms");
      x.registered_at_ms = r.I64("registered_at_ms");
      x.content_hash = r.H("content_hash");
      x.owner_epoch = r.U64("owner_epoch");
      const uint32_t n = r.U32("branch count");
      for (uint32_t i = 0; i < n && r.ok(); ++i) {
        x.branches.push_back(GetBranch(r));
      }
      return x;
    }
    case Tag::kBranchAdded:
      return BranchAdded{GetBranch(r)};
    case Tag::kPhaseUpdate: {
      PhaseUpdate x;
      x.branch_id = r.Str("branch_id");
      x.phase = r.Enum<Phase>("phase", 1, 3);
      x.state = r.Enum<PhaseState>("phase state", 1, 4);
      x.outcome = r.Enum<Outcome>("outcome", 0, 5);
      x.attempts = r.U32("attempts");
      x.last_error = r.Str("last_error");
      x.at_ms = r.I64("at_ms");
      return x;
    }
    case Tag::kStateChanged: {
      StateChanged x;
      x.state = r.Enum<TxnState>("state", 1, 7);
      if (r.Bool("has_content_hash")) x.content_hash = r.H("content_hash");
      x.approval_deadline_ms = r.I64("approval_deadline_ms");
      x.at_ms = r.I64("at_ms");
      return x;
    }
    case Tag::kDecided:
      return GetDecided(r, version);
    case Tag::kBranchResolved: {
      BranchResolved x;
      x.branch_id = r.Str("branch_id");
      x.approval_id = r.Str("approval_id");
      x.at_ms = r.I64("at_ms");
      return x;
    }
    case Tag::kFlagged: {
      Flagged x;
      x.branch_id = r.Str("branch_id");
      x.stuck = r.Bool("stuck");
      x.reason = r.Str("reason");
      x.at_ms = r.I64("at_ms");
      return x;
    }
    case Tag::kFinished: {
      Finished x;
      x.state = r.Enum<TxnState>("state", 1, 7);
      x.at_ms = r.I64("at_ms");
      return x;
    }
    case Tag::kEpochTaken: {
      EpochTaken x;
      x.owner_epoch = r.U64("owner_epoch");
      x.at_ms = r.I64("at_ms");
      return x;
    }
  }
  return Record{};
}

}  // namespace

void PutU64(std::string& out, uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(v >> (8 * (7 - i)));
  out.append(bytes, sizeof(bytes));
}

bool GetU64(std::string_view& in, uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(8);
  return true;
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}

bool GetU32(std::string_view& in, uint32_t& v) {
  if (in.size() < 4) return false;
  v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(4);
  return true;
}

void EncodeRecordTo(const Record& record, std::string& out) {
  Writer w(out);
  w.U8(kFormatVersion);
  std::visit([&w](const auto& r) { Put(w, r); }, record);
}

std::string EncodeRecord(const Record& record) {
  std::string out;
  EncodeRecordTo(record, out);
  return out;
}

absl::StatusOr<Record> DecodeRecord(std::string_view bytes) {
  Reader r(bytes);
  const uint8_t version = r.Version("record");
  Record record;
  if (r.ok()) record = GetRecordBody(r, version);
  if (absl::Status s = r.Finish("record"); !s.ok()) return s;
  return record;
}

std::string EncodeSummary(const TxnSummary& s, uint64_t record_count,
                          uint64_t record_bytes) {
  std::string out;
  Writer w(out);
  w.U8(kFormatVersion);
  w.Str(s.gid);
  w.Enum(s.state);
  w.Enum(s.decision);
  w.H(s.content_hash);
  w.U64(s.revision);
  w.I64(s.created_at_ms);
  w.I64(s.registered_at_ms);
  w.I64(s.finished_at_ms);
  w.U32(static_cast<uint32_t>(s.participants.size()));
  for (const std::string& p : s.participants) w.Str(p);
  w.Bool(s.compacted);
  w.U64(record_count);
  w.U64(record_bytes);
  return out;
}

absl::StatusOr<StoredSummary> DecodeSummary(std::string_view bytes) {
  Reader r(bytes);
  StoredSummary out;
  TxnSummary& s = out.summary;
  r.Version("summary");
  s.gid = r.Str("gid");
  s.state = r.Enum<TxnState>("state", 1, 7);
  s.decision = r.Enum<Decision>("decision", 0, 2);
  s.content_hash = r.H("content_hash");
  s.revision = r.U64("revision");
  s.created_at_ms = r.I64("created_at_ms");
  s.registered_at_ms = r.I64("registered_at_ms");
  s.finished_at_ms = r.I64("finished_at_ms");
  const uint32_t n = r.U32("participant count");
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    s.participants.push_back(r.Str("participant"));
  }
  s.compacted = r.Bool("compacted");
  out.record_count = r.U64("record_count");
  out.record_bytes = r.U64("record_bytes");
  if (absl::Status st = r.Finish("summary"); !st.ok()) return st;
  return out;
}

std::string EncodeApproval(const Approval& a) {
  std::string out;
  Writer w(out);
  w.U8(kFormatVersion);
  w.Str(a.approval_id);
  w.Enum(a.action);
  w.Str(a.gid);
  w.U64(a.revision);
  w.H(a.content_hash);
  w.Str(a.branch_id);
  w.I64(a.expires_at_ms);
  w.Str(a.issued_by);
  w.I64(a.issued_at_ms);
  w.Str(a.reason);
  w.I64(a.used_at_ms);
  return out;
}

absl::StatusOr<Approval> DecodeApproval(std::string_view bytes) {
  Reader r(bytes);
  Approval a;
  r.Version("approval");
  a.approval_id = r.Str("approval_id");
  a.action = r.Enum<ApprovalAction>("approval action", 1, 4);
  a.gid = r.Str("gid");
  a.revision = r.U64("revision");
  a.content_hash = r.H("content_hash");
  a.branch_id = r.Str("branch_id");
  a.expires_at_ms = r.I64("expires_at_ms");
  a.issued_by = r.Str("issued_by");
  a.issued_at_ms = r.I64("issued_at_ms");
  a.reason = r.Str("reason");
  a.used_at_ms = r.I64("used_at_ms");
  if (absl::Status st = r.Finish("approval"); !st.ok()) return st;
  return a;
}

}  // namespace tcc::wal::internal
