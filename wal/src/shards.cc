#include "tcc/identity/content_hash.h"
#include "tcc/wal/log.h"

namespace tcc::wal {

uint32_t ShardOfGid(std::string_view gid, uint32_t shards) {
  if (shards <= 1) return 0;
  const Hash h = identity::Sha256(gid);
  uint64_t first = 0;
  for (int i = 0; i < 8; ++i) first = (first << 8) | h[i];
  return static_cast<uint32_t>(first % shards);
}

}  // namespace tcc::wal
