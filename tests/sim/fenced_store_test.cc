// The modelled fenced store (fenced_store.h) behaves as etcd does at its
// worst, and its fencing oracle fires: the behaviours the cluster
// simulation relies on, one by one.
#include "fenced_store.h"

#include <catch2/catch.hpp>

namespace tcc::sim {
namespace {

StoreOp Put(const std::string& key, const std::string& text,
            int64_t lease = 0) {
  StoreOp op;
  op.kind = StoreOp::Kind::kPut;
  op.key = key;
  op.value.text = text;
  op.lease = lease;
  return op;
}

StoreOp Get(const std::string& key) {
  StoreOp op;
  op.kind = StoreOp::Kind::kGet;
  op.key = key;
  return op;
}

StoreOp Nested(StoreTxn txn) {
  StoreOp op;
  op.kind = StoreOp::Kind::kTxn;
  op.txn = std::make_shared<const StoreTxn>(std::move(txn));
  return op;
}

TEST_CASE("fenced store: a group naming a key twice is refused whole",
          "[sim][store]") {
  FencedStore store(1, 1);
  StoreTxn inner;
  inner.success = {Put("b", "2")};
  StoreTxn t;
  t.success = {Put("a", "1"), Put("b", "1"), Nested(inner)};
  auto r = store.Apply(t, 0);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_FALSE(store.Get("a").has_value());  // nothing applied
  t.success = {Put("a", "1"), Nested(inner)};
  REQUIRE(store.Apply(t, 0).ok());
  CHECK(store.Get("b")->value.text == "2");
}

TEST_CASE("fenced store: revisions, compares and failure reads",
          "[sim][store]") {
  FencedStore store(1, 1);
  StoreTxn create;
  create.compares = {{"k", StoreCompare::Target::kCreateRevision, 0}};
  create.success = {Put("k", "x"), Get("k")};
  create.failure = {Get("k")};
  auto first = store.Apply(create, 0);
  REQUIRE(first.ok());
  CHECK(first->succeeded);
  const KeyValue kv = first->results[1].kvs.at(0);  // its own answer
  CHECK(kv.create_revision == first->revision);
  auto again = store.Apply(create, 0);
  REQUIRE(again.ok());
  CHECK_FALSE(again->succeeded);
  CHECK(again->results[0].kvs.at(0).create_revision == kv.create_revision);
  // A put over a key keeps its create_revision: an epoch taken without the
  // compare is the old owner's.
  StoreTxn overwrite;
  overwrite.success = {Put("k", "y")};
  REQUIRE(store.Apply(overwrite, 0).ok());
  CHECK(store.Get("k")->create_revision == kv.create_revision);
  CHECK(store.Get("k")->mod_revision > kv.mod_revision);
}

TEST_CASE("fenced store: unpinned reads may be stale, pinned ones are exact",
          "[sim][store]") {
  FencedStore store(1, 7);
  store.set_max_stale_revisions(5);
  int64_t revision_of_1 = 0;
  for (int i = 1; i <= 10; ++i) {
    StoreTxn t;
    t.success = {Put("k", std::to_string(i))};
    auto r = store.Apply(t, 0);
    REQUIRE(r.ok());
    if (i == 1) revision_of_1 = r->revision;
  }
  bool stale = false;
  for (int i = 0; i < 50; ++i) {
    auto r = store.Range("k", false, ReadMode{});
    REQUIRE(r.ok());
    stale = stale || r->at(0).value.text != "10";
    auto lin = store.Range("k", false, ReadMode{0, true});
    CHECK(lin->at(0).value.text == "10");
  }
  CHECK(stale);
  CHECK(store.stale_reads() > 0);
  auto pinned = store.Range("k", false, ReadMode{revision_of_1, false});
  CHECK(pinned->at(0).value.text == "1");
  CHECK(store.Range("k", false, ReadMode{store.revision() + 5, false})
            .status()
            .code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("fenced store: leases expire with their keys; a new leader renews",
          "[sim][store]") {
  FencedStore store(1, 1);
  const int64_t lease = store.Grant(1000, 0);
  StoreTxn t;
  t.success = {Put("nodes/a", "a", lease)};
  REQUIRE(store.Apply(t, 0).ok());
  CHECK(store.KeepAlive(lease, 500) == 1000);  // now lives to 1500
  CHECK(store.LeaseAlive(lease, 1499));
  CHECK_FALSE(store.LeaseAlive(lease, 1500));
  store.RenewAllLeases(1400);  // to 2400
  CHECK(store.LeaseAlive(lease, 2399));
  store.ExpireLeases(2400);
  CHECK_FALSE(store.Get("nodes/a").has_value());
  CHECK(store.KeepAlive(lease, 2400) == 0);  // gone
}

TEST_CASE("fenced store: the fencing oracle sees a write from a stale epoch",
          "[sim][store]") {
  FencedStore store(2, 1);
  const int64_t lease = store.Grant(10'000, 0);
  StoreTxn own;
  own.success = {Put(OwnerKey(1), "n1", lease), Get(OwnerKey(1))};
  auto o = store.Apply(own, 0);
  REQUIRE(o.ok());
  const uint64_t epoch =
      static_cast<uint64_t>(o->results[1].kvs.at(0).create_revision);
  StoreTxn w;
  w.writer = "n1";
  w.writer_lease = lease;
  w.claimed_epochs[1] = epoch;
  w.success = {Put(HeadKey(1, "g"), "")};
  REQUIRE(store.Apply(w, 0).ok());
  CHECK(store.violations().empty());
  w.claimed_epochs[1] = epoch - 1;  // an older owner, unfenced
  REQUIRE(store.Apply(w, 0).ok());
  CHECK(store.violations().size() == 1);
}

}  // namespace
}  // namespace tcc::sim
