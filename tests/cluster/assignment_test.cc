// Rendezvous assignment (coordinator/src/cluster/assignment.h): the same
// answer everywhere, shards spread over the nodes, and a node joining or
// leaving moves only the shards it gains or held.
#include "cluster/assignment.h"

#include <map>
#include <string>
#include <vector>

#include "catch2/catch.hpp"

namespace tcc::cluster {
namespace {

std::vector<std::string> Assign(uint32_t shards,
                                const std::vector<std::string>& nodes) {
  std::vector<std::string> out;
  for (uint32_t k = 0; k < shards; ++k)
    out.push_back(RendezvousOwner(k, nodes));
  return out;
}

TEST_CASE("rendezvous: no candidates, no owner; one, it owns everything") {
  CHECK(RendezvousOwner(3, {}).empty());
  for (const std::string& owner : Assign(64, {"node-1"})) {
    CHECK(owner == "node-1");
  }
}

TEST_CASE("rendezvous: the order of the candidates does not matter") {
  CHECK(Assign(64, {"node-1", "node-2", "node-3"}) ==
        Assign(64, {"node-3", "node-1", "node-2"}));
}

TEST_CASE("rendezvous: known answers (the same on every platform)") {
  // Pinned: a change of the weight function would move shards between
  // nodes of different versions during an upgrade.
  const std::vector<std::string> a = Assign(8, {"node-1", "node-2", "node-3"});
  std::string joined;
  for (const std::string& s : a) joined += s.back();
  CHECK(joined == "12113121");
}

TEST_CASE("rendezvous: 1024 shards over 3 nodes, each gets 25-42%") {
  std::map<std::string, int> count;
  for (const std::string& o : Assign(1024, {"node-1", "node-2", "node-3"})) {
    ++count[o];
  }
  REQUIRE(count.size() == 3);
  for (const auto& [node, n] : count) {
    INFO(node << " owns " << n);
    CHECK(n >= 256);
    CHECK(n <= 430);
  }
}

TEST_CASE(
    "rendezvous: a node joining takes shards only to itself; one "
    "leaving gives away only its own") {
  const auto three = Assign(512, {"node-1", "node-2", "node-3"});
  const auto four = Assign(512, {"node-1", "node-2", "node-3", "node-4"});
  int moved = 0;
  for (size_t k = 0; k < three.size(); ++k) {
    if (three[k] != four[k]) {
      CHECK(four[k] == "node-4");
      ++moved;
    }
  }
  CHECK(moved > 512 / 8);  // about a quarter
  CHECK(moved < 512 / 2);
  const auto two = Assign(512, {"node-1", "node-3"});
  for (size_t k = 0; k < three.size(); ++k) {
    if (three[k] != "node-2") CHECK(two[k] == three[k]);
  }
}

TEST_CASE("candidates: draining nodes are left out, unless all are") {
  wal::Membership m;
  m.nodes = {{"node-1", "a:1", 1, false},
             {"node-2", "a:2", 2, true},
             {"node-3", "a:3", 3, false}};
  CHECK(Candidates(m) == std::vector<std::string>{"node-1", "node-3"});
  for (auto& n : m.nodes) n.draining = true;
  CHECK(Candidates(m) ==
        std::vector<std::string>{"node-1", "node-2", "node-3"});
}

}  // namespace
}  // namespace tcc::cluster
