// GroupTxn's cost against etcd's own rule for --max-txn-ops (etcd 3.4's
// checkTxnRequest: a level costs the largest of its compares, success ops and
// failure ops, and a nested Txn is checked against what its parent left),
// written here from etcd's code so that the two can disagree; and its Txn's
// shape (no key written twice).
#include "etcd/group_txn.h"

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "etcd/etcd_codec.h"
#include "log_test_util.h"
#include "record_codec.h"

namespace tcc::wal::internal {
namespace {

namespace pb = etcdserverpb;
using testing::MakePhase;
using testing::MakeRegistered;

// The smallest --max-txn-ops etcd accepts `txn` with.
size_t EtcdOpsNeeded(const pb::TxnRequest& txn) {
  size_t level = static_cast<size_t>(
      std::max({txn.compare_size(), txn.success_size(), txn.failure_size()}));
  size_t deeper = 0;
  for (const auto* ops : {&txn.success(), &txn.failure()}) {
    for (const pb::RequestOp& op : *ops) {
      if (op.has_request_txn()) {
        deeper = std::max(deeper, EtcdOpsNeeded(op.request_txn()));
      }
    }
  }
  return level + deeper;
}

// Every key put or deleted, at any depth, along success branches (etcd
// refuses a Txn that writes one twice).
void WrittenKeys(const pb::TxnRequest& txn, std::multiset<std::string>& out) {
  for (const pb::RequestOp& op : txn.success()) {
    if (op.has_request_put()) out.insert(op.request_put().key());
    if (op.has_request_delete_range()) {
      out.insert(op.request_delete_range().key());
    }
    if (op.has_request_txn()) WrittenKeys(op.request_txn(), out);
  }
}

GidWrite Write(uint32_t shard, const std::string& gid, bool registers,
               int records, bool finishes = false) {
  GidWrite w;
  w.gid = gid;
  w.shard = shard;
  w.registers = registers;
  w.finishes = finishes;
  w.first_seq = registers ? 0 : 3;
  for (int i = 0; i < records; ++i) {
    if (registers && i == 0) {
      w.records.push_back(MakeRegistered(gid, 100));
    } else {
      w.records.push_back(MakePhase("b0", PhaseState::kUnknown));
    }
  }
  w.summary.gid = gid;
  if (finishes) w.compact_value = "compact";
  return w;
}

TEST_CASE("Fits agrees with etcd's --max-txn-ops rule on random groups") {
  const etcd_keys::Layout keys("/p/");
  std::mt19937 rng(7);
  const std::vector<uint64_t> epochs(16, 5);
  const Fences fences{&epochs, keys.QuotaProbe("n1")};
  for (int round = 0; round < 300; ++round) {
    const size_t limit = 8 + rng() % 120;
    GroupTxn group(keys, GroupLimits{limit, 4 << 20});
    int refused = 0;
    for (int i = 0; i < 200 && refused < 20; ++i) {
      GidWrite w = Write(rng() % 16, "g" + std::to_string(rng() % 60),
                         rng() % 2, 1 + rng() % 6, rng() % 5 == 0);
      if (GidWrite* old = group.Find(w.gid)) w.shard = old->shard;
      if (!group.Fits(w)) {
        ++refused;
        continue;
      }
      group.Put(std::move(w));
      const pb::TxnRequest txn = group.Build(fences);
      INFO("round " << round << " limit " << limit);
      REQUIRE(EtcdOpsNeeded(txn) <= limit);
    }
    // And it fills groups: with this many refusals the group is near the
    // limit (a cost that counted too much would refuse early).
    if (refused == 20) {
      CHECK(EtcdOpsNeeded(group.Build(fences)) + 12 >= limit);
    }
  }
}

TEST_CASE("a group's Txn writes no key twice and fences every shard") {
  const etcd_keys::Layout keys("/p/");
  const std::vector<uint64_t> epochs(4, 9);
  GroupTxn group(keys, GroupLimits{1024, 4 << 20});
  group.Put(Write(0, "a", true, 1));
  group.Put(Write(1, "b", false, 3));
  group.Put(Write(1, "c", false, 2, /*finishes=*/true));
  group.Put(Write(3, "d", true, 2, /*finishes=*/true));
  const pb::TxnRequest txn = group.Build(Fences{&epochs, "/p/quota/n1"});
  std::multiset<std::string> written;
  WrittenKeys(txn, written);
  for (const std::string& k : written) {
    INFO(k);
    CHECK(written.count(k) == 1);
  }
  REQUIRE(txn.success_size() == 4);  // shards 0, 1, 3, the quota probe
  // Last, a top-level put: etcd's quota counts only those.
  CHECK(txn.success(3).request_put().key() == "/p/quota/n1");
  for (int i = 0; i < 3; ++i) {
    const pb::TxnRequest& shard = txn.success(i).request_txn();
    // The fence: the owner key's last write is the campaign at the epoch.
    REQUIRE(shard.compare_size() == 1);
    const uint32_t k[] = {0, 1, 3};
    CHECK(shard.compare(0).key() == keys.Owner(k[i]));
    CHECK(shard.compare(0).target() == pb::Compare::MOD);
    CHECK(shard.compare(0).result() == pb::Compare::EQUAL);
    CHECK(shard.compare(0).mod_revision() == 9);
  }
  // A registration compares the head and the compact entry absent and the
  // horizon not above its created_at.
  const pb::TxnRequest& reg =
      txn.success(0).request_txn().success(0).request_txn();
  REQUIRE(reg.compare_size() == 3);
  CHECK(reg.compare(2).target() == pb::Compare::VALUE);
  CHECK(reg.compare(2).result() == pb::Compare::LESS);
}

TEST_CASE("bytes: a group stays under --max-request-bytes") {
  const etcd_keys::Layout keys("/p/");
  GroupTxn group(keys, GroupLimits{100000, 256 << 10});
  int added = 0;
  for (int i = 0; i < 1000; ++i) {
    GidWrite w = Write(0, "g" + std::to_string(i), true, 1);
    std::get<Registered>(w.records[0]).branches[0].payload =
        std::string(4096, 'x');
    if (!group.Fits(w)) break;
    group.Put(std::move(w));
    ++added;
  }
  CHECK(added > 10);
  CHECK(added < 64);
  const std::vector<uint64_t> epochs(1, 1);
  CHECK(group.Build(Fences{&epochs, "/p/quota/n1"}).ByteSizeLong() <
        (256u << 10));
}

TEST_CASE("Remove given the gid of the write it removes") {
  // The etcd log removes a write by its own gid (w.gid), which the removal
  // destroys: the group must not read it afterwards.
  const etcd_keys::Layout keys("/p/");
  GroupTxn group(keys, GroupLimits{1024, 4 << 20});
  group.Put(Write(0, "a-gid-long-enough-to-be-on-the-heap-0", true, 1));
  group.Put(Write(0, "a-gid-long-enough-to-be-on-the-heap-1", false, 2));
  group.Put(Write(0, "a-gid-long-enough-to-be-on-the-heap-2", false, 3));
  group.Remove(group.Find("a-gid-long-enough-to-be-on-the-heap-1")->gid);
  REQUIRE(group.shards().size() == 1);
  CHECK(group.shards()[0].second ==
        std::vector<std::string>{"a-gid-long-enough-to-be-on-the-heap-0",
                                 "a-gid-long-enough-to-be-on-the-heap-2"});
  CHECK(group.writes().size() == 2);
  const std::vector<uint64_t> epochs(1, 1);
  CHECK(group.Build(Fences{&epochs, "/p/quota/n1"})
            .success(0)
            .request_txn()
            .success_size() == 2);
}

TEST_CASE("a gid's records go under one key, and read back in order") {
  const etcd_keys::Layout keys("/p/");
  const std::vector<uint64_t> epochs(2, 9);
  GroupTxn group(keys, GroupLimits{1024, 4 << 20});
  GidWrite three = Write(1, "b", false, 3);
  std::get<PhaseUpdate>(three.records[1]).attempts = 7;
  const std::vector<Record> written = three.records;
  group.Put(std::move(three));
  group.Put(Write(0, "a", true, 1));
  const pb::TxnRequest txn = group.Build(Fences{&epochs, "/p/quota/n1"});
  std::map<std::string, std::string> puts;
  std::function<void(const pb::TxnRequest&)> collect =
      [&](const pb::TxnRequest& t) {
        for (const pb::RequestOp& op : t.success()) {
          if (op.has_request_put()) {
            puts[op.request_put().key()] = op.request_put().value();
          }
          if (op.has_request_txn()) collect(op.request_txn());
        }
      };
  collect(txn);
  // b's three records (numbers 3-5) under rec/.../b/<3>, nothing at 4 or 5.
  REQUIRE(puts.count(keys.Record(1, "b", 3)) == 1);
  CHECK(puts.count(keys.Record(1, "b", 4)) == 0);
  std::vector<Record> read;
  REQUIRE(DecodeRecordsTo(puts[keys.Record(1, "b", 3)], "k", read).ok());
  REQUIRE(read.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(EncodeRecord(read[i]) == EncodeRecord(written[i]));
  }
  // A lone record is stored as one record, as the previous version stored
  // every record: each version's keys read back.
  CHECK(puts[keys.Record(0, "a", 0)] == EncodeRecord(MakeRegistered("a", 100)));
  read.clear();
  REQUIRE(DecodeRecordsTo(EncodeRecord(written[1]), "k", read).ok());
  REQUIRE(read.size() == 1);
  CHECK(EncodeRecord(read[0]) == EncodeRecord(written[1]));
  // Anything cut short or trailing is DATA_LOSS naming the key.
  const std::string batch = EncodeRecords(written);
  for (const std::string& bad : {batch.substr(0, batch.size() - 1), batch + "x",
                                 batch.substr(0, 3), std::string(1, '\xB0')}) {
    read.clear();
    const absl::Status s = DecodeRecordsTo(bad, "/p/rec/0001/b/x", read);
    CHECK(absl::IsDataLoss(s));
    CHECK_THAT(std::string(s.message()), Catch::Contains("/p/rec/0001/b/x"));
  }
}

TEST_CASE("records encoded by the writer build the same Txn and size") {
  const etcd_keys::Layout keys("/p/");
  const std::vector<uint64_t> epochs(2, 9);
  for (int n : {1, 3}) {
    INFO(n);
    GidWrite plain = Write(1, "b", n == 1, n);
    GidWrite pre = plain;
    for (const Record& r : pre.records) pre.encoded.push_back(EncodeRecord(r));
    GroupTxn a(keys, GroupLimits{1024, 4 << 20});
    GroupTxn b(keys, GroupLimits{1024, 4 << 20});
    CHECK(a.GidBytes(plain) == b.GidBytes(pre));
    CHECK(RecordsValue(pre.encoded) == EncodeRecords(plain.records));
    CHECK(RecordsValueSize(pre.encoded) == EncodeRecords(plain.records).size());
    a.Put(std::move(plain));
    b.Put(std::move(pre));
    CHECK(a.Build(Fences{&epochs, "/p/quota/n1"}).SerializeAsString() ==
          b.Build(Fences{&epochs, "/p/quota/n1"}).SerializeAsString());
  }
}

}  // namespace
}  // namespace tcc::wal::internal
