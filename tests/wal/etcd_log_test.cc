// The etcd log's own cases (DESIGN.md section 14), beyond the conformance
// suite it passes with the other logs: fences, unknown outcomes (a fault
// proxy of ours drops replies and requests), group limits, stale views,
// retention racing a registration, etcd members down or restarted, etcd out
// of space, and the cluster checks. Real etcd processes throughout.
#include "tcc/wal/etcd_log.h"

#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "etcd/archive.h"
#include "etcd/etcd_codec.h"
#include "etcd/etcd_keys.h"
#include "etcd/group_txn.h"
#include "etcd_fault_proxy.h"
#include "etcd_test_env.h"
#include "log_factories.h"
#include "log_test_util.h"
#include "rocksdb/db.h"
#include "tcc/failpoint/failpoint.h"
#include "tcc/wal/etcd_membership.h"
#include "tcc/wal/etcd_node.h"
#include "temp_dir.h"

namespace tcc::wal::testing {
namespace {

namespace pb = etcdserverpb;
using etcd::testing::EtcdCluster;
using etcd::testing::EtcdFaultProxy;
using etcd::testing::SharedEtcdEndpoints;

absl::Status Register(Log& log, const std::string& gid,
                      int64_t created_at_ms = 100) {
  return AppendAndWait(log, Req(gid, {MakeRegistered(gid, created_at_ms)}));
}

size_t Records(Log& log, const std::string& gid) {
  absl::StatusOr<TxnLog> t = log.Read(gid);
  REQUIRE(t.ok());
  return t->records.size();
}

// Issues every append at once (one group) and returns their statuses.
std::vector<absl::Status> AppendAll(Log& log,
                                    std::vector<AppendRequest> requests) {
  std::vector<std::future<absl::Status>> results;
  for (AppendRequest& r : requests) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    results.push_back(promise->get_future());
    log.Append(std::move(r),
               [promise](absl::Status s) { promise->set_value(std::move(s)); });
  }
  std::vector<absl::Status> out;
  for (auto& f : results) out.push_back(f.get());
  return out;
}

// `n` registrations of gids stem0, stem1, ...
std::vector<AppendRequest> Registrations(const std::string& stem, int n) {
  std::vector<AppendRequest> out;
  for (int i = 0; i < n; ++i) {
    const std::string gid = stem + std::to_string(i);
    out.push_back(Req(gid, {MakeRegistered(gid, 100)}));
  }
  return out;
}

// A gid of shard `k` among `shards`.
std::string GidOfShard(uint32_t k, uint32_t shards, const std::string& stem) {
  for (int i = 0;; ++i) {
    std::string gid = stem + std::to_string(i);
    if (ShardOfGid(gid, shards) == k) return gid;
  }
}

// Takes shard k away from the harness's node: deletes its owner key and
// creates it under another lease (as a node that took the shard over).
int64_t StealShard(EtcdHarness& h, uint32_t k) {
  const internal::etcd_keys::Layout keys(h.prefix());
  absl::StatusOr<pb::LeaseGrantResponse> lease = h.client().LeaseGrant(30);
  REQUIRE(lease.ok());
  pb::TxnRequest t;
  t.add_success()->mutable_request_delete_range()->set_key(keys.Owner(k));
  REQUIRE(h.client().Txn(t).ok());
  pb::TxnRequest put;
  pb::PutRequest* p = put.add_success()->mutable_request_put();
  p->set_key(keys.Owner(k));
  p->set_value("node-2\n127.0.0.1:2");
  p->set_lease(lease->id());
  REQUIRE(h.client().Txn(put).ok());
  return lease->id();
}

TEST_CASE("a fenced write is refused once another node owns the shard") {
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {}, .shards = 2});
  std::atomic<int> lost{0};
  std::atomic<uint32_t> lost_shard{99};
  h.etcd_log().SetShardLostHandler([&](uint32_t k, const absl::Status&) {
    lost_shard = k;
    ++lost;
  });
  const std::string a = GidOfShard(0, 2, "a");
  const std::string b = GidOfShard(1, 2, "b");
  REQUIRE(Register(h.log(), a).ok());
  REQUIRE(Register(h.log(), b).ok());
  CHECK(h.etcd_log().fenced_writes_refused() == 0);
  StealShard(h, 0);
  absl::Status refused =
      AppendAndWait(h.log(), Req(a, {MakePhase("b0", PhaseState::kUnknown)}));
  CHECK(absl::IsUnavailable(refused));
  CHECK(h.etcd_log().fenced_writes_refused() == 1);  // what /metrics shows
  CHECK(lost.load() == 1);
  CHECK(lost_shard.load() == 0);
  CHECK_FALSE(h.etcd_log().Owns(0));
  CHECK(Records(h.log(), a) == 1);  // nothing written
  // Every later write for it is refused too; the other shard goes on.
  CHECK(absl::IsUnavailable(Register(h.log(), GidOfShard(0, 2, "c"))));
  CHECK(AppendAndWait(h.log(), Req(b, {MakePhase("b0", PhaseState::kUnknown)}))
            .ok());
  CHECK(lost.load() == 1);
  // Refused here, not sent: etcd refused one write.
  CHECK(h.etcd_log().fenced_writes_refused() == 1);
}

TEST_CASE(
    "one fence failing inside a multi-shard group refuses only its shard") {
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {}, .shards = 4});
  std::vector<std::string> gids;
  for (uint32_t k = 0; k < 4; ++k) {
    gids.push_back(GidOfShard(k, 4, "g"));
    REQUIRE(Register(h.log(), gids.back()).ok());
  }
  StealShard(h, 2);
  std::vector<AppendRequest> group;
  for (const std::string& g : gids) {
    group.push_back(Req(g, {MakePhase("b0", PhaseState::kSucceeded)}));
  }
  std::vector<absl::Status> got = AppendAll(h.log(), std::move(group));
  for (uint32_t k = 0; k < 4; ++k) {
    INFO("shard " << k << ": " << got[k].ToString());
    if (k == 2) {
      CHECK(absl::IsUnavailable(got[k]));
      CHECK(Records(h.log(), gids[k]) == 1);
    } else {
      CHECK(got[k].ok());
      CHECK(Records(h.log(), gids[k]) == 2);
    }
  }
}

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - t)
      .count();
}

// A harness whose log reaches etcd through `proxy`, each send with an
// attempt deadline of `attempt_ms`, within a Txn timeout of `txn_timeout_ms`.
std::unique_ptr<EtcdHarness> Proxied(EtcdFaultProxy& proxy, int64_t attempt_ms,
                                     int64_t txn_timeout_ms = 5000) {
  auto h = std::make_unique<EtcdHarness>(
      RetentionPolicy{}, EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  h->log_options().txn_attempt_timeout_ms = attempt_ms;
  h->log_options().txn_timeout_ms = txn_timeout_ms;
  h->Reopen();
  return h;
}

TEST_CASE("a Txn committed while its reply is dropped ends OK, stored once") {
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  REQUIRE(Register(h.log(), "g1").ok());
  // The registration of g2 commits in etcd; its answer is lost. The log
  // sends the identical Txn again: its compare fails and the head read back
  // shows the append as this log's own.
  proxy.DropTxnReplies(1);
  CHECK(Register(h.log(), "g2").ok());
  proxy.DropTxnReplies(2);
  CHECK(AppendAndWait(h.log(),
                      Req("g1", {MakePhase("b0", PhaseState::kUnknown),
                                 MakePhase("b0", PhaseState::kSucceeded)}))
            .ok());
  CHECK(Records(h.log(), "g2") == 1);
  CHECK(Records(h.log(), "g1") == 3);
  // And the next append follows them (the view is right).
  CHECK(AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))
            .ok());
  CHECK(Records(h.log(), "g1") == 4);
}

TEST_CASE(
    "each group Txn is reported with its latency from the first send, "
    "resends included, and the appends it carried") {
  // Made before the log, so that they outlive it (its close may still
  // report a group).
  std::mutex mu;
  std::vector<std::pair<int64_t, uint64_t>> reported;  // latency us, appends
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  auto h = Proxied(proxy, 5000);  // no resend but the one asked for below
  h->log_options().now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  h->log_options().on_sync = [&](int64_t us, uint64_t appends) {
    std::lock_guard<std::mutex> lock(mu);
    reported.emplace_back(us, appends);
  };
  h->Reopen();
  for (const absl::Status& s : AppendAll(h->log(), Registrations("r", 5))) {
    CHECK(s.ok());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    uint64_t appends = 0;
    for (const auto& [us, n] : reported) {
      CHECK(us >= 0);
      CHECK(n >= 1);
      appends += n;
    }
    CHECK(reported.size() == h->etcd_log().txns_sent());
    CHECK(appends == h->etcd_log().appends_committed());
    CHECK(appends == 5);
    reported.clear();
  }
  // The answer is lost: the identical Txn goes again after a backoff, and
  // its latency counts from the first send.
  // (An append of a gid the log wrote: no read before its Txn.)
  const uint64_t sent_before = h->etcd_log().txns_sent();
  proxy.DropTxnReplies(1);
  REQUIRE(AppendAndWait(h->log(),
                        Req("r0", {MakePhase("b0", PhaseState::kUnknown)}))
              .ok());
  CHECK(h->etcd_log().txns_sent() == sent_before + 2);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].first >= 50000);  // the log's resend backoff
  CHECK(reported[0].second == 1);
}

TEST_CASE("a Txn whose request is dropped is sent again and applied once") {
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  REQUIRE(Register(h.log(), "g1").ok());
  proxy.DropTxnRequests(3);
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)})).ok());
  CHECK(Records(h.log(), "g1") == 2);
  CHECK(h.log().Read("g1")->summary.decision == Decision::kCancel);
}

TEST_CASE(
    "a Txn etcd never answers is sent again after its attempt's deadline") {
  // etcd loses a proposal that a follower forwarded to a leader that then
  // died, and never answers its Txn. The log must not wait out its whole
  // Txn timeout (here 30 s) before sending it again: each send waits at most
  // its attempt's deadline (here 300 ms; from the second send that waits it
  // out on, twice the one before).
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300, 30000);
  EtcdHarness& h = *hp;
  REQUIRE(Register(h.log(), "g1").ok());
  proxy.LoseTxnRequests(1);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(Register(h.log(), "g2").ok());
  const int64_t one_lost_ms = MsSince(t0);
  // Three lost in a row: 300 + 300 + 600 ms of deadlines, then it lands.
  proxy.LoseTxnRequests(3);
  t0 = std::chrono::steady_clock::now();
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)})).ok());
  const int64_t three_lost_ms = MsSince(t0);
  INFO("one lost: " << one_lost_ms << " ms; three lost: " << three_lost_ms
                    << " ms");
  // The first lost is the read of g2 before its registration (a read Txn,
  // sent again like the others: before, it waited out the client's 5 s call
  // timeout). Waiting out the log's Txn timeout even once would take 30 s.
  CHECK(one_lost_ms < 4000);
  CHECK(three_lost_ms < 15000);
  CHECK(three_lost_ms >= 1200);  // each send waited its own deadline
  CHECK(Records(h.log(), "g2") == 1);
  CHECK(Records(h.log(), "g1") == 2);
  CHECK(h.log().Read("g1")->summary.decision == Decision::kCancel);
}

TEST_CASE(
    "a takeover's calls etcd never answers are sent again after their "
    "attempt's deadline") {
  // A takeover often runs while etcd elects a leader (the machine that died
  // may have held etcd's leader too): the owner read, the fenced delete, the
  // campaign, the release and the shard's scan must each be sent again after
  // the attempt's deadline (here 300 ms), not wait out the client's 5 s call
  // timeout while the shard has no owner.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300, 30000);
  EtcdHarness& h = *hp;
  REQUIRE(Register(h.log(), "g1").ok());
  absl::StatusOr<uint64_t> first = h.log().TakeOwnerEpoch(0);
  REQUIRE(first.ok());
  // Owned already: the owner read and the fenced delete are lost once each.
  proxy.LoseRangeRequests(1);
  proxy.LoseTxnRequests(1);
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<uint64_t> second = h.log().TakeOwnerEpoch(0);
  const int64_t retake_ms = MsSince(t0);
  INFO("retake: " << second.status().ToString() << " after " << retake_ms
                  << " ms");
  REQUIRE(second.ok());
  CHECK(*second > *first);
  // The release's fenced delete is lost once.
  proxy.LoseTxnRequests(1);
  t0 = std::chrono::steady_clock::now();
  CHECK(h.etcd_log().ReleaseShard(0).ok());
  const int64_t release_ms = MsSince(t0);
  CHECK_FALSE(h.etcd_log().Owns(0));
  // Unowned: the campaign is lost once.
  proxy.LoseTxnRequests(1);
  t0 = std::chrono::steady_clock::now();
  absl::StatusOr<uint64_t> third = h.log().TakeOwnerEpoch(0);
  const int64_t campaign_ms = MsSince(t0);
  REQUIRE(third.ok());
  CHECK(*third > *second);
  // The scan's first page is lost once.
  proxy.LoseRangeRequests(1);
  std::vector<std::string> found;
  t0 = std::chrono::steady_clock::now();
  CHECK(h.log()
            .ScanUnfinished(0,
                            [&](TxnLog t) {
                              found.push_back(t.summary.gid);
                              return absl::OkStatus();
                            })
            .ok());
  const int64_t scan_ms = MsSince(t0);
  INFO("retake " << retake_ms << " ms, release " << release_ms
                 << " ms, campaign " << campaign_ms << " ms, scan " << scan_ms
                 << " ms");
  CHECK(retake_ms < 4000);
  CHECK(release_ms < 4000);
  CHECK(campaign_ms < 4000);
  CHECK(scan_ms < 4000);
  CHECK(found == std::vector<std::string>{"g1"});
  // The shard is this log's again: an append goes through.
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)})).ok());
}

TEST_CASE("a membership read etcd never answers is sent again") {
  // The shard manager reads the membership before every takeover round.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300, 30000);
  EtcdHarness& h = *hp;
  REQUIRE(h.log().TakeOwnerEpoch(0).ok());
  proxy.LoseTxnRequests(2);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Membership> m =
      ReadMembership(h.client(), h.prefix(), 1, etcd::SendTimeouts{300, 30000});
  const int64_t ms = MsSince(t0);
  INFO("two lost: " << ms << " ms");
  REQUIRE(m.ok());
  REQUIRE(m->owners.size() == 1);
  CHECK(m->owners[0].has_value());
  CHECK(ms < 4000);
  CHECK(ms >= 600);  // each send waited its own deadline
}

TEST_CASE("a node's registration calls etcd never answers are sent again") {
  // A node joins at start and again after its lease was lost (an etcd
  // outage, often with a leader change): the lease grant and the
  // registration Txn are each sent again after the attempt's deadline (here
  // 300 ms), not after the client's 5 s call timeout.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300, 30000);
  EtcdHarness& h = *hp;
  NodeOptions o;
  o.client = &h.client();
  o.key_prefix = h.prefix();
  o.node_id = "n-lost";
  o.address = "127.0.0.1:1";
  o.lease_ttl_ms = 2000;
  o.lease_margin_ms = 500;
  o.sends = {300, 30000};
  proxy.LoseLeaseGrants(1);
  proxy.LoseTxnRequests(1);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<NodeRegistration>> reg =
      NodeRegistration::Join(o, [](const absl::Status&) {});
  const int64_t ms = MsSince(t0);
  INFO("join: " << reg.status().ToString() << " after " << ms << " ms");
  REQUIRE(reg.ok());
  CHECK(ms < 4000);
  CHECK(ms >= 600);  // each lost send waited its own deadline
  absl::StatusOr<Membership> m = ReadMembership(h.client(), h.prefix(), 1);
  REQUIRE(m.ok());
  REQUIRE(m->nodes.size() == 1);
  CHECK(m->nodes[0].node_id == "n-lost");
  CHECK(m->nodes[0].lease == (*reg)->lease_id());
  CHECK((*reg)->Leave().ok());
}

TEST_CASE("a hand-over etcd refused is done by the next one") {
  // The shard manager hands a shard over with the fenced delete of its
  // owner key. When etcd refuses that delete (too many requests; out of
  // space refuses deletes too), the key stands and the next round, which
  // still reads it as this node's, must delete it: until then the shard's
  // assigned node waits for a live owner that drives nothing.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300);
  EtcdHarness& h = *hp;
  REQUIRE(Register(h.log(), "g1").ok());
  absl::StatusOr<uint64_t> epoch = h.log().TakeOwnerEpoch(0);
  REQUIRE(epoch.ok());
  proxy.RefuseWrites(1);
  const absl::Status refused = h.etcd_log().ReleaseShard(0, *epoch);
  INFO("refused: " << refused.ToString());
  CHECK(absl::IsResourceExhausted(refused));
  CHECK_FALSE(h.etcd_log().Owns(0));  // nothing more is written for it
  absl::StatusOr<Membership> m = ReadMembership(h.client(), h.prefix(), 1);
  REQUIRE(m.ok());
  REQUIRE(m->owners[0].has_value());  // the key stands
  CHECK(m->owners[0]->epoch == *epoch);
  CHECK(h.etcd_log().ReleaseShard(0, m->owners[0]->epoch).ok());
  m = ReadMembership(h.client(), h.prefix(), 1);
  REQUIRE(m.ok());
  CHECK_FALSE(m->owners[0].has_value());
}

TEST_CASE(
    "an append etcd refuses after a send whose outcome was lost is resolved "
    "as the send it follows") {
  // The first copy of the group's Txn commits and its answer is lost; the
  // second is refused ("too many requests"). That refusal says nothing of
  // the first copy, which may even apply later: only an answer to the
  // identical Txn resolves it.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  REQUIRE(Register(h.log(), "g1").ok());
  proxy.DropTxnReplies(1);
  proxy.RefuseWrites(1);
  const absl::Status s =
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)}));
  INFO("append: " << s.ToString());
  CHECK(s.ok());
  CHECK(Records(h.log(), "g1") == 2);
  CHECK(h.log().Read("g1")->summary.decision == Decision::kCancel);
}

TEST_CASE("a Txn etcd applied and answered 'out of space' is not refused") {
  // etcd applies the Txn whose apply crosses its quota, then answers it "out
  // of space": a registration so answered may be in etcd, and an append
  // behind it must not be judged as if it were not.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  REQUIRE(Register(h.log(), "g1").ok());
  proxy.ApplyThenNoSpace(1);
  const absl::Status reg = Register(h.log(), "g2");
  proxy.ApplyThenNoSpace(1);
  const absl::Status decided =
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)}));
  INFO("registration: " << reg.ToString()
                        << "; decision: " << decided.ToString());
  CHECK(Records(h.log(), "g2") == 1);  // it is in etcd: so it was answered
  CHECK(reg.ok());
  CHECK(Records(h.log(), "g1") == 2);
  CHECK(decided.ok());
  CHECK(h.log().Read("g1")->summary.decision == Decision::kCancel);
}

TEST_CASE("a shard's scan etcd compacted every time fails, nothing partial") {
  // The scan reads the shard at one revision, page by page, and starts
  // again when etcd compacted that revision meanwhile; after its last round
  // it must fail, not visit what it has (here: nothing) as the shard.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  REQUIRE(Register(h.log(), "g1").ok());
  std::vector<std::string> found;
  auto visit = [&](TxnLog t) {
    found.push_back(t.summary.gid);
    return absl::OkStatus();
  };
  proxy.CompactRanges(3);
  const absl::Status s = h.log().ScanUnfinished(0, visit);
  INFO("scan: " << s.ToString());
  CHECK_FALSE(s.ok());
  CHECK(found.empty());
  found.clear();
  CHECK(h.log().ScanUnfinished(0, visit).ok());
  CHECK(found == std::vector<std::string>{"g1"});
}

TEST_CASE("a group sent at an epoch the shard moved past loses nothing else") {
  // A group's Txn is sent again, fenced at the epoch it was built at, while
  // the node takes the same shard again (a new epoch). Its fence is refused:
  // that group's appends are answered, and the shard, owned at the new
  // epoch, must stay owned (not reported lost, dropped and taken a third
  // time).
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 1500, 30000);
  EtcdHarness& h = *hp;
  REQUIRE(Register(h.log(), "g1").ok());
  absl::StatusOr<uint64_t> first = h.log().TakeOwnerEpoch(0);
  REQUIRE(first.ok());
  std::atomic<int> lost_reports{0};
  h.log().SetShardLostHandler(
      [&](uint32_t, const absl::Status&) { lost_reports.fetch_add(1); });
  proxy.LoseTxnRequests(1);  // the group's first send waits 1.5 s
  std::future<absl::Status> append = std::async(std::launch::async, [&] {
    return AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)}));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // sent
  absl::StatusOr<uint64_t> second = h.log().TakeOwnerEpoch(0);
  REQUIRE(second.ok());
  CHECK(*second > *first);
  const absl::Status s = append.get();
  INFO("append: " << s.ToString());
  CHECK(absl::IsUnavailable(s));  // fenced at the old epoch: refused
  CHECK(h.etcd_log().Owns(0));
  CHECK(lost_reports.load() == 0);
  // The shard goes on at its new epoch.
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)})).ok());
}

TEST_CASE("a takeover etcd never answers ends after the Txn timeout") {
  // While etcd has no majority nothing it is sent is answered. A campaign
  // or a hand-over must end with an error after the log's Txn timeout (the
  // shard manager tries again next round), not hold the manager's thread,
  // and with it the daemon's shutdown, until etcd is back.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300, 2000);
  EtcdHarness& h = *hp;
  REQUIRE(h.log().TakeOwnerEpoch(0).ok());
  REQUIRE(h.etcd_log().ReleaseShard(0).ok());
  proxy.LoseTxnRequests(1000000);  // its reads are answered, not its Txns
  const auto t0 = std::chrono::steady_clock::now();
  std::future<absl::StatusOr<uint64_t>> campaign =
      std::async(std::launch::async, [&] { return h.log().TakeOwnerEpoch(0); });
  const bool ended =
      campaign.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const int64_t ms = MsSince(t0);
  proxy.LoseTxnRequests(0);  // so that it ends if it had not
  absl::StatusOr<uint64_t> got = campaign.get();
  INFO("campaign: " << got.status().ToString() << " after " << ms << " ms");
  CHECK(ended);
  CHECK_FALSE(got.ok());
  CHECK(ms < 6000);
  // etcd back: the next round takes it.
  CHECK(h.log().TakeOwnerEpoch(0).ok());
}

TEST_CASE(
    "Stats keeps its last count of unfinished ones while etcd is silent") {
  // Stats runs on a pool thread of tccd's (the gauges, every 2 s on etcd):
  // it must not hold that thread for the call timeout, nor report 0.
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  std::unique_ptr<EtcdHarness> hp = Proxied(proxy, 300);
  EtcdHarness& h = *hp;
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(Register(h.log(), "g2").ok());
  CHECK(h.log().Stats().unfinished == 2);
  proxy.SetBlackhole(true);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t silent = h.log().Stats().unfinished;
  const int64_t ms = MsSince(t0);
  proxy.SetBlackhole(false);
  CHECK(silent == 2);
  CHECK(ms < 4000);  // the client's call timeout is 5 s
}

TEST_CASE("Stats counts the unfinished ones of the shards this node owns") {
  // tccd resets its in-flight count (limits.max_in_flight) from this every
  // 2 s: a count of every node's heads would make each node refuse new
  // transactions once the whole cluster held the limit.
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {}, .shards = 2});
  REQUIRE(Register(h.log(), GidOfShard(0, 2, "s0-")).ok());
  REQUIRE(Register(h.log(), GidOfShard(1, 2, "s1-")).ok());
  CHECK(h.log().Stats().unfinished == 2);
  REQUIRE(h.etcd_log().ReleaseShard(1).ok());  // as if another node took it
  CHECK(h.log().Stats().unfinished == 1);
}

TEST_CASE("a lost campaign reply is resolved by reading the owner key") {
  EtcdFaultProxy proxy(SharedEtcdEndpoints()[0]);
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {proxy.endpoint()}});
  absl::StatusOr<uint64_t> before = h.log().TakeOwnerEpoch(0);
  REQUIRE(before.ok());
  // The fenced delete answers, the campaign's answer is lost: the key read
  // back carries this node's lease, its create_revision is the epoch.
  proxy.DropTxnReplies(0);
  const int forwarded = proxy.txns_forwarded();
  proxy.DropTxnReplies(2);
  absl::StatusOr<uint64_t> after = h.log().TakeOwnerEpoch(0);
  REQUIRE(after.ok());
  CHECK(*after > *before);
  CHECK(proxy.txns_forwarded() > forwarded + 2);
  CHECK(Register(h.log(), "g1").ok());  // the fence holds with that epoch
}

TEST_CASE("two appends of one gid in one group land in order") {
  EtcdHarness h(RetentionPolicy{});
  REQUIRE(Register(h.log(), "g1").ok());
  std::vector<AppendRequest> group;
  for (uint32_t i = 0; i < 10; ++i) {
    PhaseUpdate p = MakePhase("b0", PhaseState::kUnknown);
    p.attempts = i;
    group.push_back(
        Req("g1", {p}, i % 2 ? Durability::kBuffered : Durability::kDurable));
  }
  group.push_back(Req("g1", {MakeDecided(Decision::kConfirm)}));
  group.push_back(Req("g1", {MakeDecided(Decision::kCancel)}));
  std::vector<absl::Status> got = AppendAll(h.log(), std::move(group));
  for (size_t i = 0; i < 11; ++i) CHECK(got[i].ok());
  CHECK(absl::IsFailedPrecondition(got[11]));
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  REQUIRE(t->records.size() == 12);
  for (uint32_t i = 0; i < 10; ++i) {
    CHECK(std::get<PhaseUpdate>(t->records[1 + i]).attempts == i);
  }
}

// The keys under [key, PrefixEnd(key)) in etcd (just `key` if `exact`).
std::vector<mvccpb::KeyValue> KeysInEtcd(EtcdHarness& h, const std::string& key,
                                         bool exact = false) {
  pb::RangeRequest r;
  r.set_key(key);
  if (!exact) r.set_range_end(internal::etcd_keys::PrefixEnd(key));
  absl::StatusOr<pb::RangeResponse> got = h.client().Range(r);
  REQUIRE(got.ok());
  return {got->kvs().begin(), got->kvs().end()};
}

// The records etcd itself holds for `gid` (not what the log holds back):
// its head's inline ones, then its record keys'.
size_t RecordsInEtcd(EtcdHarness& h, const std::string& gid) {
  const internal::etcd_keys::Layout keys(h.prefix());
  const uint32_t k = ShardOfGid(gid, h.etcd_log().shard_count());
  size_t n = 0;
  for (const auto& kv : KeysInEtcd(h, keys.Head(k, gid), true)) {
    absl::StatusOr<internal::HeadValue> head =
        internal::DecodeHead(kv.value(), kv.key());
    REQUIRE(head.ok());
    n += head->inline_records.size();
  }
  std::vector<Record> records;
  for (const auto& kv : KeysInEtcd(h, keys.RecordPrefix(k, gid))) {
    REQUIRE(internal::DecodeRecordsTo(kv.value(), kv.key(), records).ok());
  }
  return n + records.size();
}

// A harness whose log holds buffered appends up to `hold_ms`.
std::unique_ptr<EtcdHarness> Holding(int64_t hold_ms) {
  auto h = std::make_unique<EtcdHarness>(RetentionPolicy{});
  h->log_options().hold_buffered_ms = hold_ms;
  h->Reopen();
  return h;
}

// A buffered phase update of branch b0 (what the driver holds back most).
absl::Status AppendBuffered(Log& log, const std::string& gid, PhaseState s) {
  return AppendAndWait(log,
                       Req(gid, {MakePhase("b0", s)}, Durability::kBuffered));
}

TEST_CASE("a buffered append is held for its gid's next group, Read shows it") {
  std::unique_ptr<EtcdHarness> held = Holding(60000);  // a next append only
  EtcdHarness& h = *held;
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(Register(h.log(), "g2").ok());
  const uint64_t sent = h.etcd_log().txns_sent();
  // Answered at once, nothing sent: etcd still has the registration only.
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kUnknown).ok());
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kSucceeded).ok());
  CHECK(h.etcd_log().appends_held() == 2);
  CHECK(h.etcd_log().txns_sent() == sent);
  CHECK(RecordsInEtcd(h, "g1") == 1);
  // This node's Read shows them, after what etcd has.
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  REQUIRE(t->records.size() == 3);
  CHECK(std::get<PhaseUpdate>(t->records[1]).state == PhaseState::kUnknown);
  CHECK(std::get<PhaseUpdate>(t->records[2]).state == PhaseState::kSucceeded);
  // Another gid's durable append leaves g1's held ones held: the prefix is
  // per gid.
  REQUIRE(
      AppendAndWait(h.log(), Req("g2", {MakeDecided(Decision::kCancel)})).ok());
  CHECK(RecordsInEtcd(h, "g2") == 2);
  CHECK(RecordsInEtcd(h, "g1") == 1);
  // g1's next durable append takes them along, in order, in one Txn.
  const uint64_t before = h.etcd_log().txns_sent();
  REQUIRE(AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))
              .ok());
  CHECK(h.etcd_log().txns_sent() == before + 1);
  CHECK(RecordsInEtcd(h, "g1") == 4);
  // A buffered append the rules refuse is not held: the committer answers
  // it (and would send what is held before it).
  CHECK(absl::IsInvalidArgument(AppendAndWait(
      h.log(),
      Req("g1", {MakeDecided(Decision::kNone)}, Durability::kBuffered))));
  CHECK(h.etcd_log().appends_held() == 2);
  h.Reopen();  // nothing held now: what a new log reads is etcd's
  t = h.log().Read("g1");
  REQUIRE(t.ok());
  REQUIRE(t->records.size() == 4);
  CHECK(std::get<PhaseUpdate>(t->records[1]).state == PhaseState::kUnknown);
  CHECK(std::get<PhaseUpdate>(t->records[2]).state == PhaseState::kSucceeded);
  CHECK(t->summary.decision == Decision::kConfirm);
}

TEST_CASE("held appends are written once held long enough, or at close") {
  std::unique_ptr<EtcdHarness> held = Holding(300);
  EtcdHarness& h = *held;
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kUnknown).ok());
  CHECK(RecordsInEtcd(h, "g1") == 1);  // held for 300 ms
  bool written = false;
  for (int i = 0; i < 100 && !written; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    written = RecordsInEtcd(h, "g1") == 2;
  }
  CHECK(written);
  // A graceful close writes what it holds.
  h.log_options().hold_buffered_ms = 60000;
  h.Reopen();
  CHECK(Records(h.log(), "g1") == 2);  // a view: its next append may be held
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kSucceeded).ok());
  CHECK(RecordsInEtcd(h, "g1") == 2);
  h.Reopen();
  CHECK(RecordsInEtcd(h, "g1") == 3);
  CHECK(Records(h.log(), "g1") == 3);
}

TEST_CASE("what is held is forgotten when the shard's ownership changes") {
  std::unique_ptr<EtcdHarness> held = Holding(60000);
  EtcdHarness& h = *held;
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kUnknown).ok());
  CHECK(Records(h.log(), "g1") == 2);
  // Taken again (a new epoch: the driver reloads from etcd), the held
  // append is lost, as a buffered append may be; nothing after it was
  // written, and the next appends follow what etcd has.
  REQUIRE(h.etcd_log().TakeOwnerEpoch(0).ok());
  CHECK(Records(h.log(), "g1") == 1);
  REQUIRE(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kCancel)})).ok());
  CHECK(RecordsInEtcd(h, "g1") == 2);
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  CHECK(std::holds_alternative<Decided>(t->records[1]));
}

TEST_CASE(
    "List reads compact entries only for a query that can match a finished "
    "one, and refuses one past list_max_finished") {
  EtcdHarnessOptions options;
  options.shards = 4;
  EtcdHarness h(RetentionPolicy{}, options);
  h.log_options().list_max_finished = 3;
  h.Reopen();
  for (int i = 0; i < 3; ++i) {
    const std::string gid = "f" + std::to_string(i);
    REQUIRE(Register(h.log(), gid, 100 + i).ok());
    REQUIRE(AppendAndWait(h.log(), Req(gid, {MakeDecided(Decision::kConfirm)}))
                .ok());
    REQUIRE(
        AppendAndWait(h.log(), Req(gid, {MakeFinished(TxnState::kConfirmed, 9)},
                                   Durability::kBuffered))
            .ok());
  }
  REQUIRE(Register(h.log(), "open", 200).ok());
  ListQuery any;
  absl::StatusOr<ListPage> all = h.log().List(any);
  REQUIRE(all.ok());
  REQUIRE(all->items.size() == 4);
  CHECK(all->items[0].gid == "f0");
  CHECK_FALSE(all->items[0].compacted);  // the archive has it
  CHECK(all->items[3].gid == "open");

  // A compact entry no List can decode: one that reads compact entries
  // fails on it; one of unfinished states reads none.
  const internal::etcd_keys::Layout keys(h.prefix());
  pb::TxnRequest put;
  pb::PutRequest* p = put.add_success()->mutable_request_put();
  p->set_key(keys.Done(ShardOfGid("broken", 4), "broken"));
  p->set_value("not a compact entry");
  REQUIRE(h.client().Txn(put).ok());
  ListQuery unfinished;
  unfinished.states = {TxnState::kOpen, TxnState::kTrying,
                       TxnState::kConfirming, TxnState::kCancelling};
  absl::StatusOr<ListPage> open = h.log().List(unfinished);
  INFO(open.status().ToString());
  REQUIRE(open.ok());
  REQUIRE(open->items.size() == 1);
  CHECK(open->items[0].gid == "open");

  // Four compact entries now, past the limit of 3: refused, whatever the
  // query's other filters, before any is read.
  for (std::vector<TxnState> states :
       {std::vector<TxnState>{}, std::vector<TxnState>{TxnState::kConfirmed},
        std::vector<TxnState>{TxnState::kOpen, TxnState::kCancelled}}) {
    ListQuery q;
    q.states = states;
    absl::Status s = h.log().List(q).status();
    INFO(s.ToString());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(absl::StrContains(s.message(), "4 finished transactions"));
  }
  // Within the limit, the broken one is read, and is DATA_LOSS.
  h.log_options().list_max_finished = 4;
  h.Reopen();
  CHECK(absl::IsDataLoss(h.log().List(any).status()));
  CHECK(h.log().List(unfinished).ok());
}

TEST_CASE(
    "retention erases the archive's full records when they are due, also "
    "those of a shard the node no longer owns") {
  RetentionPolicy policy;
  policy.full_record_ms = 1000;
  policy.compact_entry_ms = 2000;
  EtcdHarnessOptions options;
  options.shards = 2;
  EtcdHarness h(policy, options);
  const std::string lost = GidOfShard(0, 2, "lost");
  const std::string kept = GidOfShard(1, 2, "kept");
  for (const std::string& gid : {lost, kept}) {
    REQUIRE(Register(h.log(), gid).ok());
    REQUIRE(AppendAndWait(h.log(), Req(gid, {MakeDecided(Decision::kConfirm)}))
                .ok());
    REQUIRE(AppendAndWait(h.log(),
                          Req(gid, {MakeFinished(TxnState::kConfirmed, 9)}))
                .ok());
  }
  auto compacted = [&](const std::string& gid) {
    absl::StatusOr<TxnLog> t = h.log().Read(gid);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    return t->summary.compacted;
  };
  CHECK_FALSE(compacted(lost));
  CHECK_FALSE(compacted(kept));
  // Shard 0 goes to another node, and this log hears of it (its fence is
  // refused); the compact entry stays, for the new owner's retention.
  StealShard(h, 0);
  CHECK(absl::IsUnavailable(Register(h.log(), GidOfShard(0, 2, "after"))));
  REQUIRE_FALSE(h.etcd_log().Owns(0));
  REQUIRE(h.etcd_log().RunRetention(9 + 999).ok());  // not yet due
  CHECK_FALSE(compacted(lost));
  CHECK_FALSE(compacted(kept));
  // Due: both full records go, the lost shard's too (nothing else would
  // ever erase it from this node's archive).
  REQUIRE(h.etcd_log().RunRetention(9 + 1000).ok());
  CHECK(compacted(kept));
  CHECK(compacted(lost));
}

TEST_CASE(
    "the archive erases by finish time: not a gid finished anew, and an "
    "archive of the earlier version is indexed when opened") {
  TempDir dir;
  const std::string path = (dir.path() / "archive").string();
  auto finished = [](const std::string& gid, int64_t at_ms) {
    TxnLog t;
    t.summary.gid = gid;
    t.summary.state = TxnState::kConfirmed;
    t.summary.finished_at_ms = at_ms;
    t.records.push_back(MakeRegistered(gid, 100));
    return t;
  };
  {
    absl::StatusOr<std::unique_ptr<internal::Archive>> a =
        internal::Archive::Open(path, nullptr);
    REQUIRE(a.ok());
    REQUIRE((*a)->PutAll({finished("old", 10), finished("again", 20)}).ok());
    // "again" is erased, registered anew and finished later: its first
    // finish's index key stays behind.
    REQUIRE((*a)->Erase("again").ok());
    REQUIRE((*a)->Put(finished("again", 500)).ok());
    absl::StatusOr<size_t> erased = (*a)->EraseFinishedBefore(100);
    REQUIRE(erased.ok());
    CHECK(*erased == 1);
    CHECK(absl::IsNotFound((*a)->Get("old").status()));
    CHECK((*a)->Get("again").ok());
    REQUIRE((*a)->Put(finished("older", 30)).ok());
  }
  {
    // As the earlier version left it: records, no index.
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::Options(), path, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(
        db->NewIterator(rocksdb::ReadOptions()));
    std::vector<std::string> index;
    for (it->Seek("f/"); it->Valid() && it->key().starts_with("f/");
         it->Next()) {
      index.push_back(it->key().ToString());
    }
    CHECK(index.size() == 2);  // again at 500, older at 30
    for (const std::string& k : index) {
      REQUIRE(db->Delete(rocksdb::WriteOptions(), k).ok());
    }
    REQUIRE(db->Delete(rocksdb::WriteOptions(), "m/finish_index").ok());
  }
  absl::StatusOr<std::unique_ptr<internal::Archive>> a =
      internal::Archive::Open(path, nullptr);
  REQUIRE(a.ok());
  absl::StatusOr<size_t> erased = (*a)->EraseFinishedBefore(100);
  REQUIRE(erased.ok());
  CHECK(*erased == 1);
  CHECK(absl::IsNotFound((*a)->Get("older").status()));
  CHECK((*a)->Get("again").ok());
  erased = (*a)->EraseFinishedBefore(501);
  REQUIRE(erased.ok());
  CHECK(*erased == 1);
  CHECK(absl::IsNotFound((*a)->Get("again").status()));
}

TEST_CASE(
    "the archive's large records go to blob files, owner-only, and read back "
    "whole") {
  TempDir dir;
  const std::string path = (dir.path() / "archive").string();
  const mode_t old_umask = ::umask(0);  // whatever the process allows
  // 48 records of 512 KiB (24 MiB, past one 16 MiB memtable), of
  // incompressible payloads.
  std::mt19937_64 rng(7);
  auto big = [&](const std::string& gid) {
    TxnLog t;
    t.summary.gid = gid;
    t.summary.state = TxnState::kConfirmed;
    t.summary.finished_at_ms = 1000;
    Registered r = MakeRegistered(gid, 100);
    r.branches[0].payload.resize(512 * 1024);
    for (char& c : r.branches[0].payload) c = static_cast<char>(rng());
    t.records.push_back(std::move(r));
    return t;
  };
  std::string payload_of_g3;
  {
    absl::StatusOr<std::unique_ptr<internal::Archive>> a =
        internal::Archive::Open(path, nullptr);
    REQUIRE(a.ok());
    for (int i = 0; i < 48; ++i) {
      TxnLog t = big("g" + std::to_string(i));
      if (i == 3) {
        payload_of_g3 = std::get<Registered>(t.records[0]).branches[0].payload;
      }
      REQUIRE((*a)->Put(t).ok());
    }
  }
  // Reopened: what was not flushed before the close is flushed from the
  // archive's WAL as it opens, so its large records are in blob files now
  // whatever the background flushes had done.
  absl::StatusOr<std::unique_ptr<internal::Archive>> a =
      internal::Archive::Open(path, nullptr);
  REQUIRE(a.ok());
  ::umask(old_umask);
  size_t blobs = 0;
  std::vector<std::string> open_to_others;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path)) {
    if (e.path().extension() == ".blob") ++blobs;
    struct stat st;
    REQUIRE(::lstat(e.path().c_str(), &st) == 0);
    if ((st.st_mode & 077) != 0) open_to_others.push_back(e.path().string());
  }
  CHECK(blobs >= 1);
  CHECK(open_to_others.empty());
  absl::StatusOr<TxnLog> g3 = (*a)->Get("g3");
  REQUIRE(g3.ok());
  REQUIRE(g3->records.size() == 1);
  CHECK(std::get<Registered>(g3->records[0]).branches[0].payload ==
        payload_of_g3);
}

TEST_CASE("a finishing append takes the held ones to the archive") {
  std::unique_ptr<EtcdHarness> held = Holding(60000);
  EtcdHarness& h = *held;
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))
              .ok());
  REQUIRE(AppendBuffered(h.log(), "g1", PhaseState::kUnknown).ok());
  const uint64_t before = h.etcd_log().txns_sent();
  REQUIRE(
      AppendAndWait(h.log(), Req("g1", {MakeFinished(TxnState::kConfirmed, 9)},
                                 Durability::kBuffered))
          .ok());
  CHECK(h.etcd_log().txns_sent() == before + 1);
  CHECK(RecordsInEtcd(h, "g1") == 0);  // the compact entry instead
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  CHECK(t->summary.state == TxnState::kConfirmed);
  REQUIRE(t->records.size() == 4);  // from the archive, the held one too
  CHECK(std::holds_alternative<PhaseUpdate>(t->records[2]));
  CHECK(std::holds_alternative<Finished>(t->records[3]));
}

TEST_CASE("a small transaction's records live in its head, then record keys") {
  EtcdHarness h(RetentionPolicy{});
  const internal::etcd_keys::Layout keys(h.prefix());
  const uint32_t k = ShardOfGid("g1", h.etcd_log().shard_count());
  auto record_keys = [&] {
    return KeysInEtcd(h, keys.RecordPrefix(k, "g1")).size();
  };
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))
              .ok());
  CHECK(RecordsInEtcd(h, "g1") == 2);
  CHECK(record_keys() == 0);  // both in the head
  // Records past the head's limit go under record keys from then on.
  PhaseUpdate large = MakePhase("b0", PhaseState::kUnknown);
  large.last_error = std::string(internal::kInlineMaxBytes, 'e');
  REQUIRE(AppendAndWait(h.log(), Req("g1", {large})).ok());
  REQUIRE(AppendAndWait(h.log(),
                        Req("g1", {MakePhase("b0", PhaseState::kSucceeded)}))
              .ok());
  CHECK(record_keys() == 2);
  CHECK(RecordsInEtcd(h, "g1") == 4);
  // Read, and a new log's scan, see all four in order.
  auto check = [&](const std::vector<Record>& records) {
    REQUIRE(records.size() == 4);
    CHECK(std::holds_alternative<Registered>(records[0]));
    CHECK(std::holds_alternative<Decided>(records[1]));
    CHECK(std::get<PhaseUpdate>(records[2]).last_error == large.last_error);
    CHECK(std::get<PhaseUpdate>(records[3]).state == PhaseState::kSucceeded);
  };
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  check(t->records);
  h.Reopen();
  bool seen = false;
  REQUIRE(h.etcd_log()
              .ScanUnfinished(k,
                              [&](TxnLog txn) {
                                if (txn.summary.gid != "g1") {
                                  return absl::OkStatus();
                                }
                                seen = true;
                                check(txn.records);
                                return absl::OkStatus();
                              })
              .ok());
  CHECK(seen);
  // The end takes head and record keys to the archive, all of them.
  REQUIRE(
      AppendAndWait(h.log(), Req("g1", {MakeFinished(TxnState::kConfirmed, 9)},
                                 Durability::kBuffered))
          .ok());
  CHECK(RecordsInEtcd(h, "g1") == 0);
  CHECK(record_keys() == 0);
  t = h.log().Read("g1");
  REQUIRE(t.ok());
  REQUIRE(t->records.size() == 5);
  t->records.pop_back();
  check(t->records);
  // A small one ends with its head alone: nothing under rec/ ever.
  REQUIRE(Register(h.log(), "g2").ok());
  REQUIRE(
      AppendAndWait(h.log(), Req("g2", {MakeDecided(Decision::kCancel)})).ok());
  REQUIRE(
      AppendAndWait(h.log(), Req("g2", {MakeFinished(TxnState::kCancelled, 9)},
                                 Durability::kBuffered))
          .ok());
  const uint32_t k2 = ShardOfGid("g2", h.etcd_log().shard_count());
  CHECK(KeysInEtcd(h, keys.RecordPrefix(k2, "g2")).empty());
  CHECK(KeysInEtcd(h, keys.Head(k2, "g2"), true).empty());
  t = h.log().Read("g2");
  REQUIRE(t.ok());
  CHECK(t->records.size() == 3);
  CHECK(t->summary.state == TxnState::kCancelled);
}

TEST_CASE("a read while a finished gid's archive write is on the way waits") {
  // The finishing Txn commits; its records reach this node's archive only
  // after its answer. A read in between found the compact entry and no
  // archived record, and said the transaction was compacted (no records).
  EtcdHarness h(RetentionPolicy{});
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))
              .ok());
  REQUIRE(failpoint::Configure("etcd_log.before_archive=sleep(1500)").ok());
  std::future<absl::Status> finishing = std::async(std::launch::async, [&] {
    return AppendAndWait(h.log(),
                         Req("g1", {MakeFinished(TxnState::kConfirmed, 9)}));
  });
  const internal::etcd_keys::Layout keys(h.prefix());
  const uint32_t k = ShardOfGid("g1", h.etcd_log().shard_count());
  bool committed = false;
  for (int i = 0; i < 100 && !committed; ++i) {
    committed = !KeysInEtcd(h, keys.Done(k, "g1"), true).empty();
    if (!committed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(committed);
  CHECK(finishing.wait_for(std::chrono::seconds(0)) !=
        std::future_status::ready);  // the archive write is stalled
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(failpoint::Configure("").ok());
  REQUIRE(t.ok());
  CHECK_FALSE(t->summary.compacted);
  CHECK(t->summary.state == TxnState::kConfirmed);
  CHECK(t->records.size() == 3);
  CHECK(finishing.get().ok());
}

TEST_CASE("groups fit --max-txn-ops along the nesting, and requests' bytes") {
  // A log told etcd takes 40 ops per Txn: along a path a registration costs
  // 3 (top: the shards) + its shard's gids + 3 (its compares), so one Txn
  // holds at most 3 x 34 = 102 of them and 120 at once need two Txns or more
  // (group_txn_test checks the cost rule itself).
  EtcdHarness h(
      RetentionPolicy{},
      EtcdHarnessOptions{.endpoints = {}, .shards = 3, .max_txn_ops = 40});
  const uint64_t before = h.etcd_log().txns_sent();
  for (const absl::Status& s : AppendAll(h.log(), Registrations("g", 120))) {
    CHECK(s.ok());
  }
  CHECK(h.etcd_log().txns_sent() - before >= 2);
  CHECK(h.log().Stats().unfinished == 120);
}

TEST_CASE("groups at exactly etcd's --max-txn-ops are taken whole") {
  // etcd itself limited to 40 ops per Txn, and the log told so: the largest
  // groups the log builds are exactly at the limit, and etcd takes every
  // one of them (a Txn over it would be refused, "too many operations in
  // txn request", and sent again smaller).
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 1, .max_txn_ops = 40});
  REQUIRE(cluster.ok());
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = (*cluster)->endpoints(),
                                   .shards = 3,
                                   .max_txn_ops = 40});
  const uint64_t sent = h.etcd_log().txns_sent();
  const uint64_t refused = h.etcd_log().txns_refused_too_large();
  for (const absl::Status& s : AppendAll(h.log(), Registrations("g", 300))) {
    CHECK(s.ok());
  }
  CHECK(h.etcd_log().txns_sent() - sent >= 3);  // 300 > 3 x 34 per Txn
  CHECK(h.etcd_log().txns_refused_too_large() == refused);
  CHECK(h.log().Stats().unfinished == 300);
  // Told one more than etcd takes, the log's full groups are refused as too
  // large, sent again smaller, and still every append lands once.
  EtcdHarness over(RetentionPolicy{},
                   EtcdHarnessOptions{.endpoints = (*cluster)->endpoints(),
                                      .shards = 3,
                                      .max_txn_ops = 41});
  for (const absl::Status& s : AppendAll(over.log(), Registrations("h", 300))) {
    CHECK(s.ok());
  }
  CHECK(over.etcd_log().txns_refused_too_large() > 0);
  CHECK(over.log().Stats().unfinished == 300);
}

TEST_CASE(
    "a create's read is blind; a registration of a gid that exists is "
    "refused") {
  EtcdHarness h(RetentionPolicy{});
  REQUIRE(Register(h.log(), "open", 100).ok());
  REQUIRE(Register(h.log(), "done", 100).ok());
  REQUIRE(AppendAndWait(h.log(),
                        Req("done", {MakeDecided(Decision::kConfirm),
                                     MakeFinished(TxnState::kConfirmed, 2000)}))
              .ok());
  // A new log (a restarted node) has no view of either. It is blind only
  // while etcd answers: its open answered a moment ago.
  h.Reopen();
  for (const std::string gid : {"open", "done", "new"}) {
    bool blind = false;
    absl::StatusOr<TxnLog> read = h.log().ReadForCreate(gid, &blind);
    CHECK(blind);
    CHECK(absl::IsNotFound(read.status()));
  }
  // Registering them: the new one lands; the two that exist are refused
  // and nothing of the attempt is written.
  std::vector<AppendRequest> regs;
  for (const std::string gid : {"open", "done", "new"}) {
    regs.push_back(Req(gid, {MakeRegistered(gid, 200)}));
  }
  std::vector<absl::Status> got = AppendAll(h.log(), std::move(regs));
  INFO(got[0].ToString() << " / " << got[1].ToString());
  CHECK((absl::IsAlreadyExists(got[0]) || absl::IsAborted(got[0])));
  CHECK((absl::IsAlreadyExists(got[1]) || absl::IsAborted(got[1])));
  CHECK(got[2].ok());
  absl::StatusOr<TxnLog> open = h.log().Read("open");
  REQUIRE(open.ok());
  CHECK(open->summary.created_at_ms == 100);
  CHECK(open->records.size() == 1);
  absl::StatusOr<TxnLog> done = h.log().Read("done");
  REQUIRE(done.ok());
  CHECK(done->summary.created_at_ms == 100);
  CHECK(done->summary.state == TxnState::kConfirmed);
  // With a view (read, or registered here), the read is real.
  for (const std::string gid : {"open", "new"}) {
    bool blind = true;
    CHECK(h.log().ReadForCreate(gid, &blind).ok());
    CHECK(!blind);
  }
}

// Registers "open" (unfinished) and "done" (finished, its full record in
// the archive) in `log`.
void OpenAndDone(Log& log) {
  REQUIRE(Register(log, "open", 100).ok());
  REQUIRE(Register(log, "done", 100).ok());
  REQUIRE(AppendAndWait(log,
                        Req("done", {MakeDecided(Decision::kCancel),
                                     MakeFinished(TxnState::kCancelled, 2000)}))
              .ok());
}

// Registrations of "open" and "done" with other content, each with the
// appends its caller would pipeline behind it.
std::vector<AppendRequest> RegisterAgainAndGoOn() {
  std::vector<AppendRequest> g;
  g.push_back(Req("open", {MakeRegistered("open", 200, {"p1", "p2"})}));
  g.push_back(Req("open", {MakeDecided(Decision::kConfirm)}));
  g.push_back(Req("done", {MakeRegistered("done", 100, {"p1", "p2"})}));
  g.push_back(Req("done", {MakeDecided(Decision::kConfirm),
                           MakeFinished(TxnState::kConfirmed, 3000)}));
  g.push_back(Req("done", {MakeDecided(Decision::kCancel)}));
  return g;
}

// "open" and "done" as OpenAndDone left them (plus `open_records` of open).
void CheckAsRegistered(Log& log, size_t open_records) {
  absl::StatusOr<TxnLog> open = log.Read("open");
  REQUIRE(open.ok());
  CHECK(open->summary.created_at_ms == 100);
  CHECK(open->records.size() == open_records);
  absl::StatusOr<TxnLog> done = log.Read("done");
  REQUIRE(done.ok());
  CHECK(done->summary.state == TxnState::kCancelled);
  CHECK(done->summary.decision == Decision::kCancel);
  for (const TxnLog* t : {&*open, &*done}) {
    REQUIRE(!t->records.empty());
    CHECK(std::get<Registered>(t->records[0]).branches.size() == 1);
  }
}

TEST_CASE(
    "appends behind a registration etcd refuses: refused if it was blind, "
    "else judged as the other logs judge them") {
  // A group may carry, behind a registration, the gid's next appends. When
  // etcd refuses the registration (the gid exists), a blind one's followers
  // (its caller's, for another transaction) are refused with nothing
  // written; when the gid was not read blind, the log reads it first and
  // answers every append as the memory log does. Before: every append of a
  // registration taken as absent (blind or not) was answered with the
  // registration's ALREADY_EXISTS, the deferred ones ABORTED
  // (wal_conformance_test once saw that where the model answered
  // FAILED_PRECONDITION), and a registered-and-finished attempt overwrote
  // the archive's full record of the finished gid.
  EtcdHarness h(RetentionPolicy{});
  OpenAndDone(h.log());
  SECTION("after a blind read") {
    h.Reopen();  // no views
    for (const std::string gid : {"open", "done"}) {
      bool blind = false;
      (void)h.log().ReadForCreate(gid, &blind);
      REQUIRE(blind);
    }
    std::vector<absl::Status> got = AppendAll(h.log(), RegisterAgainAndGoOn());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("append " << i << ": " << got[i].ToString());
      CHECK((i == 0 || i == 2 ? absl::IsAlreadyExists(got[i])
                              : absl::IsAborted(got[i])));
    }
    CheckAsRegistered(h.log(), 1);
  }
  SECTION("without one") {
    std::unique_ptr<LogHarness> model =
        LogFactories()[0].make(RetentionPolicy{});
    REQUIRE(LogFactories()[0].name == "memory");
    OpenAndDone(model->log());
    h.Reopen();  // no views
    std::vector<absl::Status> got = AppendAll(h.log(), RegisterAgainAndGoOn());
    std::vector<absl::Status> want =
        AppendAll(model->log(), RegisterAgainAndGoOn());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("append " << i << ": " << got[i].ToString()
                     << "; the memory log: " << want[i].ToString());
      CHECK(got[i].code() == want[i].code());
    }
    CHECK(got[1].ok());  // the open transaction's decision
    CHECK(absl::IsFailedPrecondition(got[3]));  // decided Cancel already
    CheckAsRegistered(h.log(), 2);
    CheckAsRegistered(model->log(), 2);
  }
}

TEST_CASE("a registration too large for one etcd request is INVALID_ARGUMENT") {
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = {},
                                   .shards = 1,
                                   .max_txn_ops = 1024,
                                   .max_request_bytes = 256 << 10});
  Registered big = MakeRegistered("big", 100);
  big.branches[0].payload = std::string(300 << 10, 'x');
  absl::Status s = AppendAndWait(h.log(), Req("big", {big}));
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("max-request-bytes"));
  CHECK(absl::IsNotFound(h.log().Read("big").status()));
  CHECK(Register(h.log(), "small").ok());
}

// A harness whose client takes answers of at most `max_message_bytes`, and
// whose log sends requests of at most 200 KiB (one 100 KiB record fits).
EtcdHarnessOptions SmallAnswers(int max_message_bytes) {
  return EtcdHarnessOptions{.endpoints = {},
                            .shards = 1,
                            .max_txn_ops = 1024,
                            .max_request_bytes = 200 << 10,
                            .max_message_bytes = max_message_bytes};
}

// A registration of `gid` whose payload is 100 KiB of `fill`.
Registered Registration100KiB(const std::string& gid, char fill) {
  Registered r = MakeRegistered(gid, 100);
  r.branches[0].payload = std::string(100 << 10, fill);
  return r;
}

TEST_CASE(
    "records that outweigh the client's answer limit are scanned in smaller "
    "pages, and finished whole in groups whose answers fit") {
  // A finishing write deletes its gid's record keys and gets their values
  // back in the group's answer (for the archive). 8 gids of 100 KiB of
  // records each would answer 800 KiB to a client that takes 256 KiB: the
  // groups must be cut by what they answer, not only by what they send.
  // Before they were, etcd applied the group, the client refused the
  // answer, the log took it for "too large" (nothing applied), sent the
  // halves again and answered ABORTED ("another writer changed it"), and
  // the archive got no full record.
  EtcdHarness h(RetentionPolicy{}, SmallAnswers(256 << 10));
  constexpr int kGids = 8;
  std::vector<AppendRequest> registrations;
  for (int i = 0; i < kGids; ++i) {
    const std::string gid = "big" + std::to_string(i);
    registrations.push_back(
        Req(gid, {Registration100KiB(gid, static_cast<char>('a' + i))}));
  }
  for (const absl::Status& s : AppendAll(h.log(), std::move(registrations))) {
    REQUIRE(s.ok());
  }
  // A scan (a takeover's) reads them all though one page of 1000 keys
  // would answer 800 KiB: its pages get fewer keys. Before, it failed
  // RESOURCE_EXHAUSTED every time, and the shard could not be taken.
  int scanned = 0;
  size_t payload_bytes = 0;
  const absl::Status scan = h.log().ScanUnfinished(0, [&](TxnLog t) {
    payload_bytes +=
        std::get<Registered>(t.records[0]).branches[0].payload.size();
    ++scanned;
    return absl::OkStatus();
  });
  INFO(scan.ToString());
  REQUIRE(scan.ok());
  CHECK(scanned == kGids);
  CHECK(payload_bytes == kGids * (100u << 10));
  // One gid whose records are more than one answer takes (3 record keys
  // of about 100 KiB) reads whole: its record keys in pages. Before, the
  // read was an unknown outcome ("etcd did not answer the read; retry")
  // for ever, and it marked etcd unreachable.
  {
    REQUIRE(
        AppendAndWait(h.log(), Req("wide", {Registration100KiB("wide", 'w')}))
            .ok());
    for (int i = 0; i < 2; ++i) {
      PhaseUpdate u = MakePhase("b0", PhaseState::kUnknown);
      u.last_error = std::string(100 << 10, static_cast<char>('0' + i));
      REQUIRE(AppendAndWait(h.log(), Req("wide", {u})).ok());
    }
    absl::StatusOr<TxnLog> wide = h.log().Read("wide");
    INFO(wide.status().ToString());
    REQUIRE(wide.ok());
    REQUIRE(wide->records.size() == 3);
    CHECK(std::get<PhaseUpdate>(wide->records[2]).last_error ==
          std::string(100 << 10, '1'));
    CHECK(h.log().Read("big0").ok());  // and etcd is not taken for down
  }
  std::vector<AppendRequest> decisions;
  std::vector<AppendRequest> finishes;
  for (int i = 0; i < kGids; ++i) {
    const std::string gid = "big" + std::to_string(i);
    decisions.push_back(Req(gid, {MakeDecided(Decision::kCancel)}));
    finishes.push_back(Req(gid, {MakeFinished(TxnState::kCancelled, 9)}));
  }
  for (const absl::Status& s : AppendAll(h.log(), std::move(decisions))) {
    REQUIRE(s.ok());
  }
  const uint64_t sent = h.etcd_log().txns_sent();
  for (const absl::Status& s : AppendAll(h.log(), std::move(finishes))) {
    INFO(s.ToString());
    CHECK(s.ok());
  }
  // 100 KiB each against an answer of at most 256 KiB: one or two a group,
  // and none refused for its size (what an answer the client refused was
  // taken for before).
  CHECK(h.etcd_log().txns_sent() - sent >= kGids / 2);
  CHECK(h.etcd_log().txns_refused_too_large() == 0);
  for (int i = 0; i < kGids; ++i) {
    const std::string gid = "big" + std::to_string(i);
    INFO(gid);
    absl::StatusOr<TxnLog> t = h.log().Read(gid);
    REQUIRE(t.ok());
    CHECK(t->summary.state == TxnState::kCancelled);
    CHECK_FALSE(t->summary.compacted);  // the archive has it whole
    REQUIRE(t->records.size() == 3);
    CHECK(std::get<Registered>(t->records[0]).branches[0].payload ==
          std::string(100 << 10, static_cast<char>('a' + i)));
  }
}

TEST_CASE(
    "after a reopen, finishing writes size their answers from their heads") {
  // A new log (a restart, a takeover) knows a gid from its head only: the
  // head says what its record keys hold, so finishing writes still share
  // groups within the answer's bound (a head that did not say so, as an
  // earlier version's, would put each alone).
  EtcdHarness h(RetentionPolicy{}, SmallAnswers(512 << 10));
  constexpr int kGids = 6;
  for (int i = 0; i < kGids; ++i) {
    const std::string gid = "re" + std::to_string(i);
    REQUIRE(AppendAndWait(
                h.log(),
                Req(gid, {Registration100KiB(gid, static_cast<char>('a' + i))}))
                .ok());
    REQUIRE(AppendAndWait(h.log(), Req(gid, {MakeDecided(Decision::kCancel)}))
                .ok());
  }
  h.Reopen();
  const uint64_t sent = h.etcd_log().txns_sent();
  std::vector<AppendRequest> finishes;
  for (int i = 0; i < kGids; ++i) {
    finishes.push_back(
        Req("re" + std::to_string(i), {MakeFinished(TxnState::kCancelled, 9)}));
  }
  for (const absl::Status& s : AppendAll(h.log(), std::move(finishes))) {
    INFO(s.ToString());
    CHECK(s.ok());
  }
  // Two of 100 KiB fit an answer bound of 256 KiB: fewer Txns than gids.
  CHECK(h.etcd_log().txns_sent() - sent <= kGids - 2);
  CHECK(h.etcd_log().txns_refused_too_large() == 0);
  for (int i = 0; i < kGids; ++i) {
    absl::StatusOr<TxnLog> t = h.log().Read("re" + std::to_string(i));
    REQUIRE(t.ok());
    CHECK_FALSE(t->summary.compacted);
    CHECK(t->records.size() == 3);
  }
}

TEST_CASE("a write after a stale read is ABORTED until the gid is read again") {
  EtcdHarness h(RetentionPolicy{});
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE(Register(h.log(), "g2").ok());
  // Another writer (a second log on the same lease, as a deposed and
  // restored owner would be) appends to g1 behind this log's back.
  EtcdLogOptions other_options = h.log_options();
  other_options.archive_dir += "-other";
  absl::StatusOr<std::unique_ptr<EtcdLog>> other = EtcdLog::Open(other_options);
  REQUIRE(other.ok());
  REQUIRE((*other)->TakeOwnerEpoch(0).ok());
  REQUIRE(
      AppendAndWait(**other, Req("g1", {MakeDecided(Decision::kCancel)})).ok());
  // The first log's epoch is gone with the owner key it had: take it back.
  REQUIRE(h.etcd_log().TakeOwnerEpoch(0).ok());
  // One group, one stale gid: that gid is ABORTED, the other commits.
  std::vector<absl::Status> got =
      AppendAll(h.log(), {Req("g1", {MakeDecided(Decision::kConfirm)}),
                          Req("g2", {MakePhase("b0", PhaseState::kUnknown)})});
  CHECK(absl::IsAborted(got[0]));
  CHECK(got[1].ok());
  // Still ABORTED until the caller reads it again...
  CHECK(absl::IsAborted(AppendAndWait(
      h.log(), Req("g1", {MakePhase("b0", PhaseState::kUnknown)}))));
  absl::StatusOr<TxnLog> fresh = h.log().Read("g1");
  REQUIRE(fresh.ok());
  CHECK(fresh->summary.decision == Decision::kCancel);
  // ...then the rules see the decision that stands.
  CHECK(absl::IsFailedPrecondition(
      AppendAndWait(h.log(), Req("g1", {MakeDecided(Decision::kConfirm)}))));
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakePhase("b0", PhaseState::kUnknown)}))
          .ok());
  CHECK(Records(h.log(), "g1") == 3);
}

TEST_CASE("retention racing a registration at the horizon refuses it") {
  RetentionPolicy policy;
  policy.full_record_ms = 1000;
  policy.compact_entry_ms = 2000;
  EtcdHarness h(policy);
  REQUIRE(Register(h.log(), "old", 500).ok());
  REQUIRE(AppendAndWait(h.log(),
                        Req("old", {MakeDecided(Decision::kCancel),
                                    MakeFinished(TxnState::kCancelled, 1000)}))
              .ok());
  // Another node's retention (a second log, same lease) raises the horizon
  // to 501 while this log still believes it is 0: its registration of a
  // created_at below it is refused by etcd's compare, not by a local check.
  EtcdLogOptions other_options = h.log_options();
  other_options.archive_dir += "-other";
  absl::StatusOr<std::unique_ptr<EtcdLog>> other = EtcdLog::Open(other_options);
  REQUIRE(other.ok());
  REQUIRE((*other)->TakeOwnerEpoch(0).ok());
  REQUIRE((*other)->RunRetention(5000).ok());
  CHECK((*other)->DedupHorizonMs(0) == 501);
  REQUIRE(h.etcd_log().TakeOwnerEpoch(0).ok());  // back to this log
  CHECK(h.log().DedupHorizonMs(0) == 501);       // read with the campaign
  CHECK(absl::IsFailedPrecondition(Register(h.log(), "young", 400)));
  CHECK(Register(h.log(), "fresh", 501).ok());
}

TEST_CASE("a member down: appends go on; etcd restarted mid-append: it lands") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = (*cluster)->endpoints()});
  REQUIRE(Register(h.log(), "g1").ok());
  REQUIRE((*cluster)->KillMember(1).ok());
  CHECK(Register(h.log(), "g2").ok());
  CHECK(
      AppendAndWait(h.log(), Req("g1", {MakePhase("b0", PhaseState::kUnknown)}))
          .ok());
  // Without a majority nothing commits: the append waits, and lands once
  // the members are back (no error, no exit).
  REQUIRE((*cluster)->StopMember(2).ok());
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> pending = promise->get_future();
  h.log().Append(Req("g1", {MakeDecided(Decision::kConfirm)}),
                 [promise](absl::Status s) { promise->set_value(s); });
  CHECK(pending.wait_for(std::chrono::seconds(3)) ==
        std::future_status::timeout);
  // A read meanwhile is UNAVAILABLE (retry), etcd's "no leader" or the
  // log's own refusal while etcd does not answer, not a deadline: the
  // caller is a driver's shard thread.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<TxnLog> read = h.log().Read("g2");
    INFO(read.status().ToString());
    CHECK(absl::IsUnavailable(read.status()));
  }
  REQUIRE((*cluster)->StartMembers({2, 1}).ok());
  REQUIRE(pending.wait_for(std::chrono::seconds(60)) ==
          std::future_status::ready);
  CHECK(pending.get().ok());
  CHECK(Records(h.log(), "g1") == 3);
  CHECK(Records(h.log(), "g2") == 1);
}

TEST_CASE("etcd restarted whole mid-append: the append lands once") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 3});
  REQUIRE(cluster.ok());
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = (*cluster)->endpoints()});
  REQUIRE(Register(h.log(), "g1").ok());
  for (int m = 1; m <= 3; ++m) REQUIRE((*cluster)->StopMember(m).ok());
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> pending = promise->get_future();
  h.log().Append(Req("g1", {MakeDecided(Decision::kConfirm)}),
                 [promise](absl::Status s) { promise->set_value(s); });
  CHECK(pending.wait_for(std::chrono::seconds(2)) ==
        std::future_status::timeout);
  REQUIRE((*cluster)->StartMembers({1, 2, 3}).ok());
  REQUIRE(pending.wait_for(std::chrono::seconds(60)) ==
          std::future_status::ready);
  CHECK(pending.get().ok());
  absl::StatusOr<TxnLog> t = h.log().Read("g1");
  REQUIRE(t.ok());
  CHECK(t->records.size() == 2);
  CHECK(t->summary.decision == Decision::kConfirm);
}

TEST_CASE("etcd out of space: appends wait, and go on once space is freed") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 1, .quota_backend_bytes = 2 << 20});
  REQUIRE(cluster.ok());
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = (*cluster)->endpoints()});
  REQUIRE(Register(h.log(), "open").ok());
  // Someone else's keys take etcd to its quota: its NOSPACE alarm goes on.
  // etcd checks the quota against its size as of its last backend commit
  // (every 100 ms), so puts go on past the quota until one is refused
  // (bounded: 64 MiB at most).
  absl::StatusOr<std::unique_ptr<etcd::Client>> filler =
      etcd::Client::Connect((*cluster)->Client());
  REQUIRE(filler.ok());
  absl::Status put;
  for (int i = 0; i < 2048 && put.ok(); ++i) {
    pb::TxnRequest t;
    pb::PutRequest* p = t.add_success()->mutable_request_put();
    p->set_key("/filler/" + std::to_string(i));
    p->set_value(std::string(32 << 10, 'x'));
    put = (*filler)->Txn(t).status();
  }
  INFO(put.ToString());
  REQUIRE(etcd::IsNoSpace(put));
  CHECK(absl::IsResourceExhausted(Register(h.log(), "refused")));
  // An append of an open transaction is not refused: it waits for space.
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> pending = promise->get_future();
  h.log().Append(Req("open", {MakePhase("b0", PhaseState::kUnknown)}),
                 [promise](absl::Status s) { promise->set_value(s); });
  CHECK(pending.wait_for(std::chrono::seconds(2)) ==
        std::future_status::timeout);
  // The operator frees space: the append lands, registrations go on.
  REQUIRE((*cluster)->FreeSpace("/filler/").ok());
  REQUIRE(pending.wait_for(std::chrono::seconds(60)) ==
          std::future_status::ready);
  CHECK(pending.get().ok());
  CHECK(Records(h.log(), "open") == 2);
  CHECK(absl::IsNotFound(h.log().Read("refused").status()));
  CHECK(Register(h.log(), "after").ok());
}

TEST_CASE("etcd out of space refuses registrations and loses nothing") {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start({.members = 1, .quota_backend_bytes = 2 << 20});
  REQUIRE(cluster.ok());
  EtcdHarness h(RetentionPolicy{},
                EtcdHarnessOptions{.endpoints = (*cluster)->endpoints()});
  std::vector<std::string> registered;
  absl::Status last;
  // Bounded: etcd checks its quota against its size as of its last backend
  // commit, so appends go on a little past it.
  for (int i = 0; i < 1024 && last.ok(); ++i) {
    const std::string gid = "g" + std::to_string(i);
    Registered r = MakeRegistered(gid, 100);
    r.branches[0].payload = std::string(16 << 10, 'x');
    last = AppendAndWait(h.log(), Req(gid, {r}));
    if (last.ok()) registered.push_back(gid);
  }
  INFO(last.ToString());
  CHECK(absl::IsResourceExhausted(last));
  CHECK_THAT(std::string(last.message()), Catch::Contains("out of space"));
  REQUIRE(!registered.empty());
  for (const std::string& gid : registered) {
    CHECK(Records(h.log(), gid) == 1);
  }
}

TEST_CASE("a prefix with no cluster, or another etcd, is refused") {
  etcd::ClientOptions co;
  co.endpoints = SharedEtcdEndpoints();
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Connect(co);
  REQUIRE(client.ok());
  const std::string prefix = etcd::testing::UniqueKeyPrefix("nocluster");
  absl::StatusOr<ClusterInfo> none = ReadCluster(**client, prefix);
  CHECK(absl::IsFailedPrecondition(none.status()));
  CHECK_THAT(std::string(none.status().message()),
             Catch::Contains("--init-cluster"));
  REQUIRE(InitCluster(**client, prefix, 8).ok());
  CHECK(absl::IsAlreadyExists(InitCluster(**client, prefix, 8).status()));
  absl::StatusOr<ClusterInfo> read = ReadCluster(**client, prefix);
  REQUIRE(read.ok());
  CHECK(read->shards == 8);
  // The same record as if written on another etcd (another cluster_id).
  internal::ClusterRecord moved{read->etcd_cluster_id + 1, 8,
                                read->created_revision};
  pb::TxnRequest t;
  pb::PutRequest* p = t.add_success()->mutable_request_put();
  p->set_key(prefix + "cluster");
  p->set_value(internal::EncodeCluster(moved));
  REQUIRE((*client)->Txn(t).ok());
  CHECK(absl::IsDataLoss(ReadCluster(**client, prefix).status()));
}

TEST_CASE(
    "a node whose archive saw a later etcd revision than etcd has now "
    "refuses to open it: etcd was restored from a snapshot (DATA_LOSS)",
    "[etcd]") {
  EtcdHarness h(RetentionPolicy{});
  REQUIRE(Register(h.log(), "seen").ok());
  absl::StatusOr<pb::StatusResponse> status = h.client().Status();
  REQUIRE(status.ok());
  const int64_t now = status->header().revision();
  // The archive of a node that saw `revision` (it keeps the highest it saw).
  auto open_with_seen = [&](const TempDir& dir, int64_t revision) {
    EtcdLogOptions o = h.log_options();
    o.archive_dir = dir.str() + "/archive";
    {
      absl::StatusOr<std::unique_ptr<internal::Archive>> a =
          internal::Archive::Open(o.archive_dir, nullptr);
      REQUIRE(a.ok());
      REQUIRE((*a)->RaiseMaxRevision(revision).ok());
    }
    return EtcdLog::Open(o);
  };
  const TempDir behind;
  absl::StatusOr<std::unique_ptr<EtcdLog>> refused =
      open_with_seen(behind, now + 1000);
  CHECK(absl::IsDataLoss(refused.status()));
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("restored from a snapshot"));
  // What it saw is etcd's own revision or older: it opens.
  const TempDir current;
  absl::StatusOr<std::unique_ptr<EtcdLog>> opened =
      open_with_seen(current, now);
  INFO(opened.status().ToString());
  CHECK(opened.ok());
}

}  // namespace
}  // namespace tcc::wal::testing
