// The etcd client against real etcd processes (the fixture's 3-member
// cluster, or a cluster of the test's own when it kills members or needs
// TLS and auth).
#include "tcc/etcd/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "etcd_fault_proxy.h"
#include "etcd_test_env.h"
#include "tcc/etcd/lease_keeper.h"
#include "tcc/etcd/watch_stream.h"

namespace tcc::etcd::testing {
namespace {

namespace pb = etcdserverpb;

std::unique_ptr<Client> Connect(ClientOptions o) {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(std::move(o));
  REQUIRE(c.ok());
  return *std::move(c);
}

std::unique_ptr<Client> Shared() {
  ClientOptions o;
  o.endpoints = SharedEtcdEndpoints();
  return Connect(o);
}

void Put(pb::TxnRequest& t, const std::string& k, const std::string& v,
         int64_t lease = 0) {
  pb::PutRequest* p = t.add_success()->mutable_request_put();
  p->set_key(k);
  p->set_value(v);
  p->set_lease(lease);
}

absl::StatusOr<std::string> Get(Client& c, const std::string& key) {
  pb::RangeRequest r;
  r.set_key(key);
  absl::StatusOr<pb::RangeResponse> got = c.Range(r);
  if (!got.ok()) return got.status();
  if (got->kvs_size() == 0) return absl::NotFoundError(key);
  return got->kvs(0).value();
}

// Waits (real time) until `pred` holds, up to `ms`.
template <typename Pred>
bool Eventually(Pred pred, int ms) {
  for (int waited = 0; waited < ms; waited += 20) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

TEST_CASE("options are checked, naming the setting") {
  ClientOptions o;
  o.config_prefix = "cluster.etcd.";
  absl::Status s = ValidateClientOptions(o);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("cluster.etcd.endpoints"));
  o.endpoints = {"http://127.0.0.1:2379"};
  CHECK_THAT(std::string(ValidateClientOptions(o).message()),
             Catch::Contains("is not host:port"));
  o.endpoints = {"127.0.0.1:2379"};
  o.user = "tcc";
  CHECK_THAT(std::string(ValidateClientOptions(o).message()),
             Catch::Contains("cluster.etcd.password"));
  o.password = "x";
  CHECK(ValidateClientOptions(o).ok());
  o.leader_check_ms = -1;
  CHECK_THAT(std::string(ValidateClientOptions(o).message()),
             Catch::Contains("cluster.etcd.leader_check_ms"));
}

TEST_CASE("a Txn with nested Txns commits, and its compares choose branches") {
  std::unique_ptr<Client> c = Shared();
  const std::string p = UniqueKeyPrefix("nested");
  pb::TxnRequest t;
  pb::TxnRequest* inner = t.add_success()->mutable_request_txn();
  pb::Compare* absent = inner->add_compare();
  absent->set_key(p + "a");
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  Put(*inner, p + "a", "1");
  inner->add_failure()->mutable_request_range()->set_key(p + "a");
  pb::TxnRequest* other = t.add_success()->mutable_request_txn();
  Put(*other, p + "b", "2");
  absl::StatusOr<pb::TxnResponse> first = c->Txn(t);
  REQUIRE(first.ok());
  CHECK(first->responses(0).response_txn().succeeded());
  CHECK(Get(*c, p + "a").value() == "1");
  CHECK(Get(*c, p + "b").value() == "2");
  // Again: the first nested Txn's compare fails, its failure branch reads
  // the key; the second one applies again.
  absl::StatusOr<pb::TxnResponse> second = c->Txn(t);
  REQUIRE(second.ok());
  const pb::TxnResponse& r = second->responses(0).response_txn();
  CHECK_FALSE(r.succeeded());
  REQUIRE(r.responses(0).response_range().kvs_size() == 1);
  CHECK(r.responses(0).response_range().kvs(0).mod_revision() ==
        first->header().revision());
}

TEST_CASE("--max-txn-ops counts along the nesting; a key twice is refused") {
  std::unique_ptr<Client> c = Shared();
  const std::string p = UniqueKeyPrefix("ops");
  // The fixture runs etcd with --max-txn-ops 1024: the top level costs 1,
  // the nested one its puts.
  auto nested = [&](int puts) {
    pb::TxnRequest t;
    pb::TxnRequest* inner = t.add_success()->mutable_request_txn();
    for (int i = 0; i < puts; ++i) Put(*inner, p + std::to_string(i), "v");
    return c->Txn(t);
  };
  CHECK(nested(1023).ok());
  absl::StatusOr<pb::TxnResponse> over = nested(1024);
  CHECK(IsTooLarge(over.status()));
  pb::TxnRequest twice;
  Put(*twice.add_success()->mutable_request_txn(), p + "k", "1");
  Put(*twice.add_success()->mutable_request_txn(), p + "k", "2");
  absl::StatusOr<pb::TxnResponse> dup = c->Txn(twice);
  CHECK(absl::IsInvalidArgument(dup.status()));
  CHECK_THAT(std::string(dup.status().message()),
             Catch::Contains("duplicate key"));
}

TEST_CASE(
    "a Txn whose answer is over the client's limit is an unknown outcome") {
  // etcd applied it and answered; the client would not take the answer
  // (its max_message_bytes). Nothing says whether its compares held: an
  // unknown outcome, never "too large" (which says nothing was applied and
  // has the caller split the Txn and send its parts again).
  ClientOptions o;
  o.endpoints = SharedEtcdEndpoints();
  o.max_message_bytes = 64 << 10;
  std::unique_ptr<Client> c = Connect(o);
  const std::string p = UniqueKeyPrefix("answer");
  pb::TxnRequest put;
  Put(put, p + "a", std::string(40 << 10, 'a'));
  REQUIRE(c->Txn(put).ok());
  pb::TxnRequest put2;
  Put(put2, p + "b", std::string(40 << 10, 'b'));
  REQUIRE(c->Txn(put2).ok());
  pb::TxnRequest del;  // small; its answer carries both values (80 KiB)
  pb::DeleteRangeRequest* d = del.add_success()->mutable_request_delete_range();
  d->set_key(p);
  d->set_range_end(p + "\xff");
  d->set_prev_kv(true);
  absl::StatusOr<pb::TxnResponse> r = c->Txn(del);
  INFO(r.status().ToString());
  CHECK_FALSE(r.ok());
  CHECK(IsUnknownOutcome(r.status()));
  CHECK_FALSE(IsTooLarge(r.status()));
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("max_message_bytes"));
  // It did apply.
  CHECK(absl::IsNotFound(Get(*c, p + "a").status()));
  CHECK(absl::IsNotFound(Get(*c, p + "b").status()));
  // A request over the client's limit is not sent: too large, not unknown.
  pb::TxnRequest big;
  Put(big, p + "c", std::string(80 << 10, 'c'));
  absl::StatusOr<pb::TxnResponse> over = c->Txn(big);
  INFO(over.status().ToString());
  CHECK(IsTooLarge(over.status()));
  CHECK_FALSE(IsUnknownOutcome(over.status()));
  CHECK(absl::IsNotFound(Get(*c, p + "c").status()));
}

TEST_CASE("a call past its deadline is DEADLINE_EXCEEDED, an unknown outcome") {
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  ClientOptions o;
  o.endpoints = {proxy.endpoint()};
  std::unique_ptr<Client> c = Connect(o);
  REQUIRE(c->Status().ok());
  proxy.SetBlackhole(true);
  pb::TxnRequest t;
  Put(t, UniqueKeyPrefix("deadline") + "k", "v");
  absl::StatusOr<pb::TxnResponse> r = c->Txn(t, 300);
  CHECK(absl::IsDeadlineExceeded(r.status()));
  CHECK(IsUnknownOutcome(r.status()));
  proxy.SetBlackhole(false);
  // A dropped reply: etcd applied it, the client cannot know.
  proxy.DropTxnReplies(1);
  const std::string key = UniqueKeyPrefix("dropped") + "k";
  pb::TxnRequest put;
  Put(put, key, "applied");
  absl::StatusOr<pb::TxnResponse> lost = c->Txn(put);
  CHECK(IsUnknownOutcome(lost.status()));
  CHECK(Get(*c, key).value() == "applied");
}

TEST_CASE("a member killed: reads, writes and a keep-alive go on elsewhere") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> c = Connect((*cluster)->Client());
  std::atomic<bool> lost{false};
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper = LeaseKeeper::Grant(
      *c, LeaseKeeperOptions{.ttl_ms = 2000, .margin_ms = 500},
      SystemBootClock::Default(), [&](const absl::Status&) { lost = true; });
  REQUIRE(keeper.ok());
  const std::string key = UniqueKeyPrefix("kill") + "leased";
  pb::TxnRequest t;
  Put(t, key, "v", (*keeper)->lease_id());
  REQUIRE(c->Txn(t).ok());
  REQUIRE(Eventually([&] { return (*keeper)->answered() >= 1; }, 3000));
  // Kill the member the client uses, mid keep-alive.
  const size_t member = c->CurrentTarget().member;
  REQUIRE((*cluster)->KillMember(static_cast<int>(member) + 1).ok());
  const uint64_t before = (*keeper)->answered();
  // Three TTLs later the lease is still there: kept alive by another member.
  std::this_thread::sleep_for(std::chrono::milliseconds(6000));
  CHECK_FALSE(lost.load());
  CHECK((*keeper)->answered() > before);
  CHECK((*keeper)->Trusted());
  CHECK(Get(*c, key).value() == "v");
  absl::StatusOr<pb::LeaseTimeToLiveResponse> ttl =
      c->LeaseTimeToLive((*keeper)->lease_id());
  REQUIRE(ttl.ok());
  CHECK(ttl->ttl() > 0);
  // Revoked: its key goes at once.
  REQUIRE((*keeper)->Revoke().ok());
  CHECK(absl::IsNotFound(Get(*c, key).status()));
}

// Member i's status, asked of that member alone.
pb::StatusResponse StatusOf(const std::string& endpoint) {
  auto channel =
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  auto stub = pb::Maintenance::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  pb::StatusResponse r;
  grpc::Status s = stub->Status(&context, pb::StatusRequest(), &r);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return r;
}

// The leader every member names (endpoints.size() until they agree).
size_t LeaderIndex(const std::vector<std::string>& endpoints) {
  std::vector<pb::StatusResponse> all;
  for (const std::string& e : endpoints) all.push_back(StatusOf(e));
  size_t at = endpoints.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].leader() == 0 || all[i].leader() != all[0].leader() ||
        all[i].raftterm() != all[0].raftterm()) {
      return endpoints.size();
    }
    if (all[i].header().member_id() == all[i].leader()) at = i;
  }
  return at;
}

// Moves etcd's leadership from member `from` (the leader) to `to`.
void MoveLeader(const std::vector<std::string>& endpoints, size_t from,
                size_t to) {
  auto channel =
      grpc::CreateChannel(endpoints[from], grpc::InsecureChannelCredentials());
  auto stub = pb::Maintenance::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  pb::MoveLeaderRequest move;
  move.set_targetid(StatusOf(endpoints[to]).header().member_id());
  pb::MoveLeaderResponse moved;
  grpc::Status s = stub->MoveLeader(&context, move, &moved);
  INFO(s.error_message());
  REQUIRE(s.ok());
  REQUIRE(Eventually([&] { return LeaderIndex(endpoints) == to; }, 5000));
}

// Waits for a leader all members agree on and, if it is member 0, moves it
// to member 1. The leader's index (never 0).
size_t LeaderOffFirst(const std::vector<std::string>& endpoints) {
  size_t leader = endpoints.size();
  REQUIRE(Eventually(
      [&] { return (leader = LeaderIndex(endpoints)) < endpoints.size(); },
      5000));
  if (leader == 0) {
    MoveLeader(endpoints, 0, 1);
    leader = 1;
  }
  return leader;
}

TEST_CASE("the client finds etcd's leader and follows it when it moves") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  const std::vector<std::string>& endpoints = (*cluster)->endpoints();
  auto move_leader = [&](size_t from, size_t to) {
    MoveLeader(endpoints, from, to);
  };
  // Not the first member's: the client's default would find it anyway.
  const size_t leader = LeaderOffFirst(endpoints);

  // Off (the default): the first member is used, whichever leads.
  std::unique_ptr<Client> plain = Connect((*cluster)->Client());
  pb::TxnRequest t;
  Put(t, UniqueKeyPrefix("leader") + "k", "v");
  REQUIRE(plain->Txn(t).ok());
  CHECK(plain->CurrentTarget().member == 0);

  // UseLeader names the leader's member and makes it the one in use.
  absl::StatusOr<size_t> found = plain->UseLeader(2000);
  REQUIRE(found.ok());
  CHECK(*found == leader);
  CHECK(plain->CurrentTarget().member == leader);

  // On: the client's own checks follow the leader when it moves.
  ClientOptions o = (*cluster)->Client();
  o.leader_check_ms = 100;
  std::unique_ptr<Client> following = Connect(o);
  REQUIRE(Eventually(
      [&] { return following->CurrentTarget().member == leader; }, 3000));
  const size_t next = (leader + 1) % endpoints.size();
  move_leader(leader, next);
  CHECK(Eventually([&] { return following->CurrentTarget().member == next; },
                   3000));
  // Its writes still go through.
  pb::TxnRequest t2;
  Put(t2, UniqueKeyPrefix("leader") + "k2", "v");
  CHECK(following->Txn(t2).ok());

  // A member killed: the client leaves it, and UseLeader skips it.
  REQUIRE((*cluster)->KillMember(static_cast<int>(next) + 1).ok());
  REQUIRE(Eventually(
      [&] {
        absl::StatusOr<size_t> l = plain->UseLeader(500);
        return l.ok() && *l != next;
      },
      10000));
  CHECK(Eventually([&] { return following->CurrentTarget().member != next; },
                   10000));
  pb::TxnRequest t3;
  Put(t3, UniqueKeyPrefix("leader") + "k3", "v");
  CHECK(following->Txn(t3).ok());
}

TEST_CASE("keep-alive answers delayed past the margin end the lease's trust") {
  std::unique_ptr<Client> direct = Shared();
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  ClientOptions o;
  o.endpoints = {proxy.endpoint()};
  std::unique_ptr<Client> c = Connect(o);
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper = LeaseKeeper::Grant(
      *c,
      LeaseKeeperOptions{.ttl_ms = 3000, .margin_ms = 1000, .interval_ms = 500},
      SystemBootClock::Default(), nullptr);
  REQUIRE(keeper.ok());
  REQUIRE(Eventually([&] { return (*keeper)->answered() >= 2; }, 3000));
  CHECK((*keeper)->Trusted());
  // Answers now come 2.5 s after their send: each only vouches for send +
  // TTL - margin = send + 2 s, which has passed when it arrives.
  proxy.SetKeepAliveDelayMs(2500);
  CHECK(Eventually([&] { return !(*keeper)->Trusted(); }, 6000));
  // etcd still holds the lease (it did get the keep-alives)...
  absl::StatusOr<pb::LeaseTimeToLiveResponse> ttl =
      direct->LeaseTimeToLive((*keeper)->lease_id());
  REQUIRE(ttl.ok());
  CHECK(ttl->ttl() > 0);
  // ...and prompt answers bring the trust back.
  proxy.SetKeepAliveDelayMs(0);
  CHECK(Eventually([&] { return (*keeper)->Trusted(); }, 6000));
  (*keeper)->Stop();
}

TEST_CASE("a keep-alive's answer vouches from its send, never its receipt") {
  // A clock of the test's: the keep-alive leaves at t=0, its answer is held
  // 400 ms (real) by the proxy while the clock moves to t=2000. The answer
  // says TTL 6 s: trust until 0 + 6000 - 1000 = 5000, not 2000 + 5000.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  ClientOptions o;
  o.endpoints = {proxy.endpoint()};
  std::unique_ptr<Client> c = Connect(o);
  ManualBootClock clock(0);
  proxy.SetKeepAliveDelayMs(400);
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper = LeaseKeeper::Grant(
      *c,
      LeaseKeeperOptions{
          .ttl_ms = 6000, .margin_ms = 1000, .interval_ms = 3000},
      clock, nullptr);
  REQUIRE(keeper.ok());
  // From the grant's send, as well.
  CHECK((*keeper)->trusted_until_ms() == 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE((*keeper)->answered() == 0);  // the first keep-alive is held
  clock.Advance(2000);
  REQUIRE(Eventually([&] { return (*keeper)->answered() >= 1; }, 2000));
  CHECK((*keeper)->trusted_until_ms() == 5000);
  clock.Advance(2999);  // t = 4999
  CHECK((*keeper)->Trusted());
  clock.Advance(2);  // t = 5001
  CHECK_FALSE((*keeper)->Trusted());
  (*keeper)->Stop();
}

TEST_CASE("a lease that expired is reported lost once") {
  std::unique_ptr<Client> c = Shared();
  std::atomic<int> lost{0};
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper = LeaseKeeper::Grant(
      *c, LeaseKeeperOptions{.ttl_ms = 2000, .margin_ms = 500},
      SystemBootClock::Default(), [&](const absl::Status&) { ++lost; });
  REQUIRE(keeper.ok());
  // Someone else revokes it: the next keep-alive is answered TTL 0.
  REQUIRE(c->LeaseRevoke((*keeper)->lease_id()).ok());
  CHECK(Eventually([&] { return lost.load() == 1; }, 3000));
  CHECK((*keeper)->lost());
  CHECK_FALSE((*keeper)->Trusted());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  CHECK(lost.load() == 1);
}

// The values a WatchStream delivers, in order (its events come on its own
// thread).
class WatchedValues {
 public:
  WatchStream::EventsFn Sink() {
    return [this](const pb::WatchResponse& r) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const mvccpb::Event& e : r.events()) seen_.push_back(e.kv().value());
    };
  }
  std::vector<std::string> values() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
};

TEST_CASE("a watch delivers every change, across a member's death") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> c = Connect((*cluster)->Client());
  const std::string p = UniqueKeyPrefix("watch");
  WatchedValues watched;
  WatchStream watch(*c, WatchSpec{p, p + "\xff", 0}, watched.Sink(), nullptr);
  auto count = [&] { return watched.count(); };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < 5; ++i) {
    pb::TxnRequest t;
    Put(t, p + "k", std::to_string(i));
    REQUIRE(c->Txn(t).ok());
  }
  REQUIRE(Eventually([&] { return count() == 5; }, 5000));
  REQUIRE((*cluster)
              ->KillMember(static_cast<int>(c->CurrentTarget().member) + 1)
              .ok());
  for (int i = 5; i < 10; ++i) {
    // Each put only over the one before it, so that a retry of a put whose
    // answer was lost (the dead member, or no leader while the survivors
    // elect one) cannot apply it twice; retried for up to 10 s.
    pb::TxnRequest t;
    pb::Compare* after = t.add_compare();
    after->set_key(p + "k");
    after->set_target(pb::Compare::VALUE);
    after->set_result(pb::Compare::EQUAL);
    after->set_value(std::to_string(i - 1));
    Put(t, p + "k", std::to_string(i));
    absl::StatusOr<pb::TxnResponse> r = c->Txn(t);
    for (int tries = 0; !r.ok() && tries < 50; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      r = c->Txn(t);
    }
    INFO(r.status().ToString());
    REQUIRE(r.ok());
  }
  REQUIRE(Eventually([&] { return count() == 10; }, 10000));
  const std::vector<std::string> seen = watched.values();
  for (int i = 0; i < 10; ++i) CHECK(seen[i] == std::to_string(i));
  watch.Stop();
}

TEST_CASE(
    "a watch from now that saw nothing yet misses nothing across a "
    "failover") {
  // The watch's member (the first, a follower) stops before any event came;
  // a write commits through the leader meanwhile; then the member dies and
  // the watch moves on. The stream made again must start after the first
  // one's "now", not at its own (which is after the write).
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  const std::vector<std::string>& endpoints = (*cluster)->endpoints();
  const size_t leader = LeaderOffFirst(endpoints);
  std::unique_ptr<Client> watching = Connect((*cluster)->Client());
  REQUIRE(watching->CurrentTarget().member == 0);
  ClientOptions on_leader = (*cluster)->Client();
  on_leader.endpoints = {endpoints[leader]};
  std::unique_ptr<Client> writer = Connect(on_leader);
  const std::string p = UniqueKeyPrefix("watch-now");
  WatchedValues watched;
  WatchStream watch(*watching, WatchSpec{p, p + "\xff", 0}, watched.Sink(),
                    nullptr);
  // The stream is open (etcd answers "created" within milliseconds).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Paused, it holds the stream open and hears nothing; the write commits
  // on the other two; then it dies and the stream is made again.
  REQUIRE((*cluster)->PauseMember(1).ok());
  pb::TxnRequest t;
  Put(t, p + "k", "while-down");
  REQUIRE(writer->Txn(t).ok());
  REQUIRE((*cluster)->KillMember(1).ok());
  CHECK(Eventually([&] { return watched.count() == 1; }, 10000));
  const std::vector<std::string> seen = watched.values();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "while-down");
}

TEST_CASE("mutual TLS and auth: a wrong certificate is refused, tokens renew") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(
      {.members = 1, .tls = true, .auth = true, .auth_token_ttl_s = 2});
  REQUIRE(cluster.ok());
  const std::string dir = (*cluster)->dir();
  const std::string key = UniqueKeyPrefix("auth") + "k";
  {
    std::unique_ptr<Client> c = Connect((*cluster)->Client());
    pb::TxnRequest t;
    Put(t, key, "v");
    REQUIRE(c->Txn(t).ok());
    // The leader check authenticates as every call does.
    absl::StatusOr<size_t> leader = c->UseLeader(2000);
    INFO(leader.status().ToString());
    CHECK(leader.ok());
    // Simple tokens expire after 2 s: the client authenticates again.
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    CHECK(Get(*c, key).value() == "v");
    CHECK(c->Txn(t).ok());
    CHECK(c->UseLeader(2000).ok());
  }
  {
    ClientOptions o = (*cluster)->Client();
    o.tls_files.cert_file = dir + "/other-client.pem";
    o.tls_files.key_file = dir + "/other-client-key.pem";
    std::unique_ptr<Client> c = Connect(o);
    absl::StatusOr<std::string> got = Get(*c, key);
    CHECK_FALSE(got.ok());
    CHECK(absl::IsUnavailable(got.status()));
  }
  {
    ClientOptions o = (*cluster)->Client();
    o.password = "wrong";
    std::unique_ptr<Client> c = Connect(o);
    CHECK(absl::IsInvalidArgument(c->UseLeader(2000).status()));
    absl::StatusOr<std::string> got = Get(*c, key);
    CHECK(absl::IsInvalidArgument(got.status()));
    CHECK_THAT(std::string(got.status().message()),
               Catch::Contains("authentication failed"));
  }
  {
    // No user nor password: etcd takes the client certificate's CN as the
    // user (--client-cert-auth), so CN=tcc may read ...
    ClientOptions o = (*cluster)->Client();
    o.user.clear();
    o.password.clear();
    std::unique_ptr<Client> c = Connect(o);
    CHECK(Get(*c, key).value() == "v");
  }
  {
    // ... and CN=nobody, no etcd user, may not.
    ClientOptions o = (*cluster)->Client();
    o.user.clear();
    o.password.clear();
    o.tls_files.cert_file = dir + "/nobody-client.pem";
    o.tls_files.key_file = dir + "/nobody-client-key.pem";
    std::unique_ptr<Client> c = Connect(o);
    absl::StatusOr<std::string> got = Get(*c, key);
    INFO(got.status().ToString());
    CHECK(absl::IsPermissionDenied(got.status()));
  }
}

}  // namespace
}  // namespace tcc::etcd::testing
