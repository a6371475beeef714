#include "cluster/rendezvous.h"

namespace tcc::cluster {
namespace {

// FNV-1a over the node id, then the shard, finished with splitmix64's mixer
// (FNV alone weighs ids differing in their last byte too alike).
uint64_t Weight(const std::string& node_id, uint32_t shard) {
  uint64_t h = 14695981039346656037ull;
  auto add = [&h](uint8_t b) {
    h ^= b;
    h *= 1099511628211ull;
  };
  for (char c : node_id) add(static_cast<uint8_t>(c));
  add(0);
  for (int i = 0; i < 4; ++i) add(static_cast<uint8_t>(shard >> (8 * i)));
  h += 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace

std::string RendezvousOwner(uint32_t shard,
                            const std::vector<std::string>& candidates) {
  std::string best;
  uint64_t best_weight = 0;
  for (const std::string& id : candidates) {
    const uint64_t w = Weight(id, shard);
    if (best.empty() || w > best_weight || (w == best_weight && id < best)) {
      best = id;
      best_weight = w;
    }
  }
  return best;
}

}  // namespace tcc::cluster
