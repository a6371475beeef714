#include "cluster/assignment.h"

namespace tcc::cluster {
std::vector<std::string> Candidates(const wal::Membership& m) {
  std::vector<std::string> live, serving;
  for (const wal::MemberInfo& n : m.nodes) {
    live.push_back(n.node_id);
    if (!n.draining) serving.push_back(n.node_id);
  }
  return serving.empty() ? live : serving;
}

}  // namespace tcc::cluster
