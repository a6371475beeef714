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

TEST_CASE("answer: finishing writes' records fit the client's answer limit") {
  const etcd_keys::Layout keys("/p/");
  GroupTxn group(keys, GroupLimits{100000, 4 << 20, 256 << 10});
  // A finishing write of a gid with 3 records under record keys of 100 KiB.
  auto finishing = [](const std::string& gid, uint64_t bytes) {
    GidWrite w = Write(0, gid, false, 1, true);
    w.record_key_bytes = bytes;
    return w;
  };
  CHECK(group.AnswerBytes(finishing("f", 100 << 10)) >= (100u << 10));
  CHECK(group.AnswerBytes(Write(0, "p", false, 1)) == 0);  // not finishing
  GidWrite inline_only = finishing("i", 0);
  inline_only.inline_before = {"r0", "r1", "r2"};  // no record keys
  CHECK(group.AnswerBytes(inline_only) == 0);
  REQUIRE(group.Fits(finishing("f0", 100 << 10)));
  group.Put(finishing("f0", 100 << 10));
  REQUIRE(group.Fits(finishing("f1", 100 << 10)));
  group.Put(finishing("f1", 100 << 10));
  CHECK_FALSE(group.Fits(finishing("f2", 100 << 10)));
  // Writes that answer nothing still fit; a write replacing its own is
  // counted once.
  CHECK(group.Fits(Write(0, "p", false, 1)));
  CHECK(group.Fits(finishing("f1", 100 << 10)));
  // Removed, its share of the answer goes with it.
  group.Remove("f1");
  CHECK(group.Fits(finishing("f2", 100 << 10)));
  // Unknown bytes (record keys, a head of an earlier version): alone only.
  GroupTxn fresh(keys, GroupLimits{100000, 4 << 20, 256 << 10});
  REQUIRE(fresh.Fits(finishing("u", 0)));
  fresh.Put(finishing("u", 0));
  CHECK_FALSE(fresh.Fits(finishing("f", 1)));
  // Larger than the limit alone: still fits a group of its own.
  CHECK(fresh.FitsAlone(finishing("huge", 10 << 20)));
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

// Every key put, at any depth, along success branches, with its value.
std::map<std::string, std::string> Puts(const pb::TxnRequest& txn) {
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
  return puts;
}

// A registration whose record passes kInlineMaxBytes.
Registered BigRegistered(const std::string& gid) {
  Registered r = MakeRegistered(gid, 100);
  r.branches[0].payload = std::string(kInlineMaxBytes, 'p');
  return r;
}

// The encoded records of `w`'s append.
std::vector<std::string> EncodedRecords(const GidWrite& w) {
  std::vector<std::string> out;
  for (const Record& r : w.records) out.push_back(EncodeRecord(r));
  return out;
}

TEST_CASE("a head says how many bytes its record keys hold") {
  const etcd_keys::Layout keys("/p/");
  GroupTxn group(keys, GroupLimits{1024, 4 << 20});
  GidWrite w = Write(0, "g", true, 1);
  w.records[0] = BigRegistered("g");  // past the head: a record key
  const uint64_t after = group.RecordKeyBytesAfter(w);
  CHECK(after > kInlineMaxBytes);
  group.Put(w);
  const std::vector<uint64_t> epochs(1, 1);
  const std::map<std::string, std::string> puts =
      Puts(group.Build(Fences{&epochs, "/p/quota/n1"}));
  absl::StatusOr<HeadValue> head =
      DecodeHead(puts.at(keys.Head(0, "g")), keys.Head(0, "g"));
  REQUIRE(head.ok());
  CHECK(head->record_key_bytes == after);
  // Exactly the record key's key and value.
  const std::string rec = keys.Record(0, "g", 0);
  CHECK(after == rec.size() + puts.at(rec).size());
  // The next write adds its own; unknown stays unknown (0).
  GidWrite next = Write(0, "g", false, 1);
  next.first_seq = 1;
  next.record_key_bytes = after;
  next.records[0] = BigRegistered("g");
  CHECK(group.RecordKeyBytesAfter(next) > after);
  next.record_key_bytes = 0;
  CHECK(group.RecordKeyBytesAfter(next) == 0);
}

TEST_CASE("a small transaction's records live in its head until they grow") {
  const etcd_keys::Layout keys("/p/");
  const std::vector<uint64_t> epochs(1, 9);
  auto build = [&](const GidWrite& w) {
    GroupTxn group(keys, GroupLimits{1024, 4 << 20});
    group.Put(w);
    const pb::TxnRequest txn = group.Build(Fences{&epochs, "/p/quota/n1"});
    // The gid's own level costs what GidCost says.
    CHECK(
        EtcdOpsNeeded(txn.success(0).request_txn().success(0).request_txn()) ==
        GroupTxn::GidCost(w));
    return txn;
  };
  auto head_of = [&](const std::map<std::string, std::string>& puts) {
    REQUIRE(puts.count(keys.Head(0, "g")) == 1);
    absl::StatusOr<HeadValue> h = DecodeHead(puts.at(keys.Head(0, "g")), "k");
    REQUIRE(h.ok());
    return *h;
  };
  // The registration: in the head, no record key.
  GidWrite reg = Write(0, "g", true, 1);
  CHECK(RecordsInline(reg));
  std::map<std::string, std::string> puts = Puts(build(reg));
  CHECK(puts.size() == 2);  // the head and the quota probe
  HeadValue h = head_of(puts);
  CHECK(h.record_count == 1);
  CHECK(h.inline_records == EncodedRecords(reg));
  // The next append's records join it there (the head is put anyway).
  GidWrite next = Write(0, "g", false, 2);
  next.first_seq = 1;
  next.inline_before = h.inline_records;
  CHECK(RecordsInline(next));
  puts = Puts(build(next));
  CHECK(puts.size() == 2);
  h = head_of(puts);
  CHECK(h.record_count == 3);
  REQUIRE(h.inline_records.size() == 3);
  CHECK(h.inline_records[2] == EncodeRecord(next.records[1]));
  // One that would pass kInlineMaxBytes gets a record key, numbered by its
  // first record; the head keeps what it holds, and so it stays.
  GidWrite large = Write(0, "g", false, 1);
  std::get<PhaseUpdate>(large.records[0]).last_error =
      std::string(kInlineMaxBytes, 'e');
  large.first_seq = 3;
  large.inline_before = h.inline_records;
  CHECK_FALSE(RecordsInline(large));
  puts = Puts(build(large));
  REQUIRE(puts.count(keys.Record(0, "g", 3)) == 1);
  CHECK(puts.at(keys.Record(0, "g", 3)) == EncodeRecord(large.records[0]));
  CHECK(head_of(puts).inline_records == h.inline_records);
  CHECK(head_of(puts).record_count == 4);
  GidWrite after = Write(0, "g", false, 1);
  after.first_seq = 4;
  after.inline_before = h.inline_records;
  CHECK(HasRecordKeys(after));
  CHECK_FALSE(RecordsInline(after));
  CHECK(Puts(build(after)).count(keys.Record(0, "g", 4)) == 1);
  // The end: the head goes, and the record keys only if there are any.
  auto deletes = [&](const GidWrite& w) {
    std::multiset<std::string> written;
    WrittenKeys(build(w), written);
    written.erase(keys.Done(0, "g"));
    written.erase("/p/quota/n1");
    return written;
  };
  GidWrite end = Write(0, "g", false, 1, true);
  end.first_seq = 3;
  end.inline_before = h.inline_records;
  CHECK(deletes(end) == std::multiset<std::string>{keys.Head(0, "g")});
  end.first_seq = 4;
  CHECK(deletes(end) == std::multiset<std::string>{keys.Head(0, "g"),
                                                   keys.RecordPrefix(0, "g")});
  // Heads with and without records read back; a damaged one is DATA_LOSS.
  HeadValue plain;
  plain.record_count = 2;
  plain.summary.gid = "g";
  const std::string v1 = EncodeHead(plain);
  CHECK(v1[0] == 1);  // what the previous version wrote
  absl::StatusOr<HeadValue> back = DecodeHead(v1, "k");
  REQUIRE(back.ok());
  CHECK(back->inline_records.empty());
  HeadValue with = plain;
  with.inline_records = EncodedRecords(reg);
  const std::string v2 = EncodeHead(with);
  back = DecodeHead(v2, "k");
  REQUIRE(back.ok());
  CHECK(back->inline_records == with.inline_records);
  CHECK(back->record_count == 2);
  with.record_count = 0;  // more records inline than it has
  CHECK(absl::IsDataLoss(DecodeHead(EncodeHead(with), "k").status()));
  std::string bad = v2;
  bad[1 + 8 + 8 + 4 + 4] ^= 0x7f;  // the inline record's version byte
  CHECK(absl::IsDataLoss(DecodeHead(bad, "/p/head/0000/g").status()));
  CHECK(absl::IsDataLoss(DecodeHead(v2.substr(0, 25), "k").status()));
}

TEST_CASE("a gid's records go under one key, and read back in order") {
  const etcd_keys::Layout keys("/p/");
  const std::vector<uint64_t> epochs(2, 9);
  GroupTxn group(keys, GroupLimits{1024, 4 << 20});
  GidWrite three = Write(1, "b", false, 3);
  std::get<PhaseUpdate>(three.records[1]).attempts = 7;
  const std::vector<Record> written = three.records;
  group.Put(std::move(three));
  GidWrite big = Write(0, "big", true, 1);
  big.records[0] = BigRegistered("big");
  group.Put(std::move(big));
  std::map<std::string, std::string> puts =
      Puts(group.Build(Fences{&epochs, "/p/quota/n1"}));
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
  // every record: each version's keys read back. (A registration of this
  // size lives in its head; one past kInlineMaxBytes gets a record key.)
  CHECK(puts[keys.Record(0, "big", 0)] == EncodeRecord(BigRegistered("big")));
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
