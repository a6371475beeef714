#include "runtime/sim/sdk_participant.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tcc::runtime::sim {
namespace {

constexpr char kEffectPrefix[] = "effect/";

// "effect/PHASE/GID/CREATED_AT/BRANCH" (ids never contain '/').
std::string EffectKey(wal::Phase phase, const barrier::BranchKey& key) {
  return absl::StrCat(kEffectPrefix, core::PhaseName(phase), "/",
                      barrier::ToString(key));
}

barrier::BranchCall ToBarrierCall(const BranchCall& c) {
  barrier::BranchCall b;
  b.key = {c.gid, c.created_at_ms, c.spec->branch_id};
  b.action = c.spec->action;
  b.payload = c.spec->payload;
  b.branch_hash.assign(c.spec->branch_hash.begin(), c.spec->branch_hash.end());
  b.revision = c.revision;
  b.attempt = c.attempt;
  b.owner_epoch = c.owner_epoch;
  b.try_deadline_ms = c.try_deadline_ms;
  return b;
}

// The SDK's enums are numbered as the wire contract, like tccd's.
wal::Outcome ToWal(barrier::Outcome o) {
  return static_cast<wal::Outcome>(static_cast<uint8_t>(o));
}
core::BarrierState ToCore(barrier::BarrierState s) {
  return static_cast<core::BarrierState>(static_cast<uint8_t>(s));
}

}  // namespace

ParticipantBusiness AcceptIf(
    std::function<bool(const barrier::BranchCall&)> accept) {
  ParticipantBusiness b;
  b.on_try = [accept = std::move(accept)](const barrier::HandlerContext& c)
      -> absl::StatusOr<barrier::TryVerdict> {
    if (accept && !accept(c.call))
      return barrier::TryVerdict::Refuse("refused");
    return barrier::TryVerdict::Reserve();
  };
  return b;
}

SdkParticipant::SdkParticipant(std::string name,
                               barrier::BarrierOptions options,
                               ParticipantBusiness business)
    : name_(std::move(name)),
      barrier_(store_, clock_, options),
      business_(std::move(business)) {}

absl::StatusOr<BranchAnswer> SdkParticipant::OnCall(const BranchCall& call,
                                                    int64_t now_wall_ms) {
  if (down_) return absl::UnavailableError("participant down");
  clock_.Set(now_wall_ms);
  return Call(call);
}

absl::StatusOr<QueryAnswer> SdkParticipant::OnQuery(const QueryCall& query,
                                                    int64_t now_wall_ms) {
  if (down_) return absl::UnavailableError("participant down");
  clock_.Set(now_wall_ms);
  return Query(query);
}

absl::Status SdkParticipant::CountEffect(const barrier::HandlerContext& c,
                                         wal::Phase phase) {
  auto v = c.txn.GetForUpdate(EffectKey(phase, c.call.key));
  if (!v.ok()) return v.status();
  int64_t n = 0;
  if (v->has_value() && !absl::SimpleAtoi(**v, &n)) {
    return absl::DataLossError("malformed effect counter");
  }
  bool opposite = false;
  if (phase != wal::Phase::kTry) {
    auto o = c.txn.Get(EffectKey(phase == wal::Phase::kConfirm
                                     ? wal::Phase::kCancel
                                     : wal::Phase::kConfirm,
                                 c.call.key));
    if (!o.ok()) return o.status();
    opposite = o->has_value();
  }
  counted_ = CountedEffect{n + 1, opposite};
  return c.txn.Put(EffectKey(phase, c.call.key), absl::StrCat(n + 1));
}

absl::StatusOr<barrier::TryVerdict> SdkParticipant::RunTry(
    const barrier::HandlerContext& c) {
  absl::StatusOr<barrier::TryVerdict> v =
      business_.on_try ? business_.on_try(c) : barrier::TryVerdict::Reserve();
  if (!v.ok() || v->refused()) return v;
  if (absl::Status s = CountEffect(c, wal::Phase::kTry); !s.ok()) return s;
  return v;
}

absl::Status SdkParticipant::RunPhaseTwo(const barrier::HandlerContext& c,
                                         wal::Phase phase) {
  const barrier::PhaseTwoHandler& h = phase == wal::Phase::kConfirm
                                          ? business_.on_confirm
                                          : business_.on_cancel;
  if (h) {
    if (absl::Status s = h(c); !s.ok()) return s;
  }
  return CountEffect(c, phase);
}

absl::StatusOr<BranchAnswer> SdkParticipant::Call(const BranchCall& call) {
  const barrier::BranchCall b = ToBarrierCall(call);
  const std::optional<barrier::BarrierRecord> before = Record(b.key);
  counted_.reset();
  absl::StatusOr<barrier::BarrierAnswer> a;
  switch (call.phase) {
    case wal::Phase::kTry:
      a = barrier_.Try(
          b, [this](const barrier::HandlerContext& c) { return RunTry(c); });
      break;
    case wal::Phase::kConfirm:
      a = barrier_.Confirm(b, [this](const barrier::HandlerContext& c) {
        return RunPhaseTwo(c, wal::Phase::kConfirm);
      });
      break;
    case wal::Phase::kCancel:
      a = barrier_.Cancel(b, [this](const barrier::HandlerContext& c) {
        return RunPhaseTwo(c, wal::Phase::kCancel);
      });
      break;
  }
  if (!a.ok()) return a.status();
  // OK: the call's local transaction committed (or wrote nothing).
  if (counted_.has_value()) CheckEffect(call, b, before);
  return BranchAnswer{ToWal(a->outcome), a->replayed, a->message};
}

void SdkParticipant::CheckEffect(
    const BranchCall& call, const barrier::BranchCall& b,
    const std::optional<barrier::BarrierRecord>& before) {
  const std::string where = absl::StrCat(
      name_, " ", core::PhaseName(call.phase), " ", barrier::ToString(b.key));
  if (counted_->count > 1) {
    violations_.push_back(absl::StrCat("exactly-once: ", where, " took effect ",
                                       counted_->count, " times"));
  }
  if (counted_->opposite) {
    violations_.push_back(absl::StrCat(
        "exactly-once: ", where, " took effect after the opposite phase 2"));
  }
  if (call.phase != wal::Phase::kTry) return;
  // No hanging (section 13.5): a reservation is only made before any Cancel
  // of the key and before try-deadline + skew by this participant's clock.
  const int64_t now = clock_.NowUnixMs();
  const int64_t skew = barrier_.options().clock_skew_ms;
  if (now > b.try_deadline_ms + skew) {
    violations_.push_back(absl::StrCat("no hanging: ", where, " reserved at ",
                                       now, ", past its try-deadline ",
                                       b.try_deadline_ms, " + skew ", skew));
  }
  if (before.has_value() &&
      before->phase_two == barrier::PhaseTwoState::kCancelled) {
    violations_.push_back(
        absl::StrCat("no hanging: ", where, " reserved after its Cancel"));
  }
}

absl::StatusOr<QueryAnswer> SdkParticipant::Query(const QueryCall& query) {
  auto a = barrier_.Query({query.gid, query.created_at_ms, query.branch_id});
  if (!a.ok()) return a.status();
  QueryAnswer out;
  out.state = ToCore(a->state);
  if (a->branch_hash.size() == out.branch_hash.size()) {
    std::copy(a->branch_hash.begin(), a->branch_hash.end(),
              out.branch_hash.begin());
  }
  out.authoritative = a->authoritative;
  return out;
}

std::optional<barrier::BarrierRecord> SdkParticipant::Record(
    const barrier::BranchKey& key) const {
  auto r = store_.ReadBarrier(key);
  if (!r.ok()) return std::nullopt;
  return *r;
}

std::map<barrier::BranchKey, barrier::BarrierRecord> SdkParticipant::Records()
    const {
  std::map<barrier::BranchKey, barrier::BarrierRecord> out;
  (void)store_.ScanBarrier(  // the in-memory store's scan cannot fail
      [&](const barrier::BranchKey& k, const barrier::BarrierRecord& r) {
        out[k] = r;
      });
  return out;
}

std::map<barrier::BranchKey, EffectCounts> SdkParticipant::Effects() const {
  std::map<barrier::BranchKey, EffectCounts> out;
  for (const auto& [k, v] : store_.BusinessData()) {
    if (k.rfind(kEffectPrefix, 0) != 0) continue;
    std::vector<std::string> parts =
        absl::StrSplit(k.substr(sizeof(kEffectPrefix) - 1), '/');
    barrier::BranchKey key;
    int64_t n = -1;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &key.created_at_ms)) {
      continue;  // not a counter this class wrote
    }
    key.gid = parts[1];
    key.branch_id = parts[3];
    if (!absl::SimpleAtoi(v, &n)) n = -1;  // malformed: never 0 or 1
    EffectCounts& c = out[key];
    if (parts[0] == core::PhaseName(wal::Phase::kTry)) c.tries = n;
    if (parts[0] == core::PhaseName(wal::Phase::kConfirm)) c.confirms = n;
    if (parts[0] == core::PhaseName(wal::Phase::kCancel)) c.cancels = n;
  }
  return out;
}

EffectCounts SdkParticipant::EffectsOf(const barrier::BranchKey& key) const {
  const std::map<barrier::BranchKey, EffectCounts> all = Effects();
  auto it = all.find(key);
  return it == all.end() ? EffectCounts{} : it->second;
}

int SdkParticipant::Held() const {
  int n = 0;
  for (const auto& [k, r] : Records()) {
    n += r.try_state == barrier::TryState::kTried &&
         r.phase_two == barrier::PhaseTwoState::kNone;
  }
  return n;
}

int SdkParticipant::ExactlyOnceViolations() const {
  int n = 0;
  for (const auto& [k, c] : Effects()) {
    const auto wrong = [](int64_t count) { return count < 0 || count > 1; };
    n += wrong(c.tries) || wrong(c.confirms) || wrong(c.cancels) ||
         (c.confirms > 0 && c.cancels > 0);
  }
  return n;
}

}  // namespace tcc::runtime::sim
