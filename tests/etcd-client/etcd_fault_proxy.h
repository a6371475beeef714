// A gRPC proxy of our own between a client and one real etcd member, for
// the faults a test must make happen at a chosen moment (the unknown
// outcomes of DESIGN.md section 14): it serves etcd's KV, Lease and
// Maintenance services on 127.0.0.1 (a port the OS picks) and forwards
// every call to the member, except as told:
// - DropTxnReplies(n): the next n Txns are forwarded (etcd applies them)
//   and answered UNAVAILABLE, as if the reply was lost;
// - DropTxnRequests(n): the next n Txns are answered UNAVAILABLE without
//   being forwarded;
// - LoseTxnRequests(n): the next n Txns are neither forwarded nor answered:
//   each waits out its caller's deadline (as a proposal that a follower
//   forwarded to a leader that then died: etcd never answers it);
// - LoseRangeRequests(n): the same for the next n Ranges (a read that a
//   follower forwarded to a leader that then died);
// - LoseLeaseGrants(n): the same for the next n LeaseGrants (a grant is a
//   proposal too);
// - RefuseWrites(n): the next n Txns that write (a put or a delete, nested
//   ones included) are answered RESOURCE_EXHAUSTED "etcdserver: too many
//   requests" without being forwarded (etcd's refusal when its apply lags),
//   once no DropTxnReplies are pending;
// - ApplyThenNoSpace(n): the next n Txns that write are forwarded (etcd
//   applies them) and answered RESOURCE_EXHAUSTED "etcdserver: mvcc:
//   database space exceeded", as etcd answers the Txn whose apply crossed
//   its quota (its quotaApplierV3 applies, then reports no space);
// - CompactRanges(n): the next n Ranges are answered OUT_OF_RANGE
//   "etcdserver: mvcc: required revision has been compacted";
// - SetKeepAliveDelayMs(ms): each keep-alive's answer is held that long;
// - SetBlackhole(true): every call waits out its deadline (a member that
//   stopped answering).
//
// Thread-safety: the knobs may be set from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/server.h"

namespace tcc::etcd::testing {

class EtcdFaultProxy {
 public:
  // `upstream`: the member's host:port (plaintext).
  explicit EtcdFaultProxy(const std::string& upstream);
  ~EtcdFaultProxy();
  EtcdFaultProxy(const EtcdFaultProxy&) = delete;
  EtcdFaultProxy& operator=(const EtcdFaultProxy&) = delete;

  // host:port to point a client at.
  std::string endpoint() const;

  void DropTxnReplies(int n) { drop_replies_ = n; }
  void DropTxnRequests(int n) { drop_requests_ = n; }
  void LoseTxnRequests(int n) { lose_requests_ = n; }
  void LoseRangeRequests(int n) { lose_ranges_ = n; }
  void LoseLeaseGrants(int n) { lose_grants_ = n; }
  void RefuseWrites(int n) { refuse_writes_ = n; }
  void ApplyThenNoSpace(int n) { apply_then_no_space_ = n; }
  void CompactRanges(int n) { compact_ranges_ = n; }
  void SetKeepAliveDelayMs(int64_t ms) { keepalive_delay_ms_ = ms; }
  void SetBlackhole(bool on) { blackhole_ = on; }
  // Txns forwarded so far (dropped replies included).
  int txns_forwarded() const { return txns_forwarded_.load(); }

  class Services;

 private:
  std::atomic<int> drop_replies_{0};
  std::atomic<int> drop_requests_{0};
  std::atomic<int> lose_requests_{0};
  std::atomic<int> lose_ranges_{0};
  std::atomic<int> lose_grants_{0};
  std::atomic<int> refuse_writes_{0};
  std::atomic<int> apply_then_no_space_{0};
  std::atomic<int> compact_ranges_{0};
  std::atomic<int64_t> keepalive_delay_ms_{0};
  std::atomic<bool> blackhole_{false};
  std::atomic<int> txns_forwarded_{0};
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tcc::etcd::testing
