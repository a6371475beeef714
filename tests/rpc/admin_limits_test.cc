// The per-client rate limiter on an injected clock, and how peers are named.
#include <catch2/catch.hpp>

#include "rpc/admin_auth.h"
#include "rpc/admin_service.h"
#include "rpc/rate_limiter.h"

using tcc::rpc::PeerAddressWithoutPort;
using tcc::rpc::RateLimiter;

TEST_CASE("token bucket: burst, refill by the clock, clients apart") {
  int64_t now = 1000;
  RateLimiter limiter(10, 5, [&] { return now; });
  REQUIRE(limiter.enabled());
  for (int i = 0; i < 5; ++i) CHECK(limiter.Admit("a"));
  CHECK(!limiter.Admit("a"));  // the burst is spent
  CHECK(limiter.Admit("b"));   // another client has its own bucket
  now += 99;                   // 0.99 tokens: not yet
  CHECK(!limiter.Admit("a"));
  now += 1;  // 10/s: one token per 100 ms
  CHECK(limiter.Admit("a"));
  CHECK(!limiter.Admit("a"));
  now += 10'000;  // refills up to the burst, no more
  for (int i = 0; i < 5; ++i) CHECK(limiter.Admit("a"));
  CHECK(!limiter.Admit("a"));
  now -= 5000;  // a clock going back never adds tokens
  CHECK(!limiter.Admit("a"));
}

TEST_CASE("rate 0 means no limit; burst 0 means one second's worth") {
  int64_t now = 0;
  RateLimiter off(0, 0, [&] { return now; });
  CHECK(!off.enabled());
  for (int i = 0; i < 1000; ++i) CHECK(off.Admit("a"));
  RateLimiter one_second(3, 0, [&] { return now; });
  CHECK(one_second.Admit("a"));
  CHECK(one_second.Admit("a"));
  CHECK(one_second.Admit("a"));
  CHECK(!one_second.Admit("a"));
}

TEST_CASE("bounded memory: idle buckets go, then new clients share one") {
  int64_t now = 0;
  RateLimiter limiter(
      1, 2, [&] { return now; }, /*max_clients=*/2);
  CHECK(limiter.Admit("a"));
  CHECK(limiter.Admit("b"));
  CHECK(limiter.clients() == 2);
  // Both busy: "c" and "d" share the overflow bucket (2 tokens).
  CHECK(limiter.Admit("c"));
  CHECK(limiter.Admit("d"));
  CHECK(!limiter.Admit("c"));
  CHECK(limiter.clients() == 2);
  now += 5000;  // a and b refilled: idle, dropped for the newcomer
  CHECK(limiter.Admit("e"));
  CHECK(limiter.clients() == 1);
}

TEST_CASE("peer addresses lose their port") {
  CHECK(PeerAddressWithoutPort("ipv4:127.0.0.1:5000") == "127.0.0.1");
  CHECK(PeerAddressWithoutPort("ipv6:[::1]:5000") == "::1");
  CHECK(PeerAddressWithoutPort("unix:/tmp/sock") == "unix");
}

TEST_CASE("audit text: a caller cannot forge or flood audit lines") {
  using tcc::rpc::AuditText;
  CHECK(AuditText("gid=g1 reason=ok") == "gid=g1 reason=ok");
  const std::string forged =
      "x\n2026-12-01T00:00:00Z I admin: ForceDecision by alice -> OK";
  const std::string safe = AuditText(forged);
  CHECK(safe.find('\n') == std::string::npos);
  CHECK(safe.rfind("x\\n2026", 0) == 0);
  CHECK(AuditText("a\rb\x01"
                  "c\\d") == "a\\x0db\\x01c\\\\d");
  const std::string long_text(5000, 'r');
  CHECK(AuditText(long_text).size() == 512 + 3);
  CHECK(AuditText(long_text, 10) == "rrrrrrrrrr...");
}
