#include "tcc/failpoint/failpoint.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tcc::failpoint {
namespace {

enum class Action { kOff, kCrash, kError, kSleep };

struct Point {
  Action action = Action::kOff;
  uint64_t sleep_ms = 0;
  uint64_t from_hit = 1;   // first hit (1-based) that fires
  uint64_t until_hit = 0;  // last hit that fires; 0 = no limit
  uint64_t hits = 0;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Point, std::less<>> points;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

std::atomic<bool> g_any_enabled{false};
std::once_flag g_env_once;

absl::Status ParsePoint(absl::string_view item, std::string* name,
                        Point* point) {
  std::vector<absl::string_view> kv =
      absl::StrSplit(item, absl::MaxSplits('=', 1));
  if (kv.size() != 2 || kv[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("failpoint spec '", item, "': expected NAME=ACTION"));
  }
  *name = std::string(absl::StripAsciiWhitespace(kv[0]));
  absl::string_view action = absl::StripAsciiWhitespace(kv[1]);
  if (size_t at = action.find('@'); at != absl::string_view::npos) {
    absl::string_view trigger = action.substr(at + 1);
    action = action.substr(0, at);
    bool open_ended = absl::ConsumeSuffix(&trigger, "+");
    uint64_t n = 0;
    if (!absl::SimpleAtoi(trigger, &n) || n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "failpoint '", *name, "': bad trigger '@", trigger, "'"));
    }
    point->from_hit = n;
    point->until_hit = open_ended ? 0 : n;
  }
  if (action == "crash") {
    point->action = Action::kCrash;
  } else if (action == "error") {
    point->action = Action::kError;
  } else if (action == "off") {
    point->action = Action::kOff;
  } else if (absl::ConsumePrefix(&action, "sleep(") &&
             absl::ConsumeSuffix(&action, ")") &&
             absl::SimpleAtoi(action, &point->sleep_ms)) {
    point->action = Action::kSleep;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("failpoint '", *name, "': unknown action '", kv[1],
                     "' (crash, error, sleep(MS), off)"));
  }
  return absl::OkStatus();
}

// Fault injection only: stalls the calling thread. Not a clock read, and
// never reached unless a test enabled a sleep failpoint.
void Stall(uint64_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000),
              static_cast<long>((ms % 1000) * 1000000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

}  // namespace

absl::Status Configure(std::string_view spec) {
  std::map<std::string, Point, std::less<>> points;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(spec.data(), spec.size()), ';',
                      absl::SkipWhitespace())) {
    std::string name;
    Point point;
    if (absl::Status s = ParsePoint(item, &name, &point); !s.ok()) return s;
    points[name] = point;
  }
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.points = std::move(points);
  g_any_enabled.store(!registry.points.empty(), std::memory_order_release);
  return absl::OkStatus();
}

void ConfigureFromEnv() {
  const char* spec = std::getenv(kEnvVar);
  absl::Status s = Configure(spec == nullptr ? "" : spec);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kEnvVar, s.ToString().c_str());
    std::abort();
  }
}

absl::Status Eval(std::string_view name) {
  std::call_once(g_env_once, [] {
    if (std::getenv(kEnvVar) != nullptr) ConfigureFromEnv();
  });
  if (!g_any_enabled.load(std::memory_order_acquire)) return absl::OkStatus();
  Action action = Action::kOff;
  uint64_t sleep_ms = 0;
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.points.find(name);
    if (it == registry.points.end()) return absl::OkStatus();
    Point& p = it->second;
    ++p.hits;
    if (p.hits < p.from_hit || (p.until_hit != 0 && p.hits > p.until_hit)) {
      return absl::OkStatus();
    }
    action = p.action;
    sleep_ms = p.sleep_ms;
  }
  switch (action) {
    case Action::kOff:
      return absl::OkStatus();
    case Action::kCrash:
      std::fprintf(stderr, "failpoint %.*s: crash\n",
                   static_cast<int>(name.size()), name.data());
      kill(getpid(), SIGKILL);
      _exit(137);  // not reached
    case Action::kError:
      return absl::UnavailableError(
          absl::StrCat("failpoint ", std::string(name)));
    case Action::kSleep:
      // Said before the stall, so a test can tell the call is held.
      std::fprintf(stderr, "failpoint %.*s: sleep %llu ms\n",
                   static_cast<int>(name.size()), name.data(),
                   static_cast<unsigned long long>(sleep_ms));
      Stall(sleep_ms);
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

uint64_t Hits(std::string_view name) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto it = registry.points.find(name);
  return it == registry.points.end() ? 0 : it->second.hits;
}

}  // namespace tcc::failpoint
