// The records the WAL benchmark and profile append: a 200-byte PhaseUpdate
// and a two-branch registration.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "record_codec.h"
#include "tcc/wal/records.h"

namespace tcc::wal::bench {

// A record whose encoding is 200 bytes.
inline Record Record200(uint32_t seq) {
  PhaseUpdate p;
  p.branch_id = "b0";
  p.state = PhaseState::kUnknown;
  p.attempts = seq;
  p.at_ms = seq;
  const size_t base = internal::EncodeRecord(p).size();
  p.last_error = std::string(200 - base, 'e');
  return p;
}

inline Registered Registration(const std::string& gid, int64_t at) {
  Registered r;
  r.gid = gid;
  r.created_at_ms = at;
  r.registered_at_ms = at;
  r.try_deadline_ms = at + 30000;
  r.revision = 1;
  for (int i = 0; i < 2; ++i) {
    BranchSpec b;
    b.branch_id = absl::StrCat("b", i);
    b.participant = i == 0 ? "stock" : "payment";
    b.action = "reserve";
    b.payload = std::string(64, 'p');
    r.branches.push_back(b);
  }
  return r;
}

}  // namespace tcc::wal::bench
