#include "tcc/wal/etcd_log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "etcd/archive.h"
#include "etcd/etcd_codec.h"
#include "etcd/etcd_keys.h"
#include "etcd/group_txn.h"
#include "etcd/send_deadlines.h"
#include "internal/txn_rules.h"
#include "record_codec.h"
#include "tcc/etcd/boot_clock.h"
#include "tcc/failpoint/failpoint.h"

namespace tcc::wal {
namespace {

using internal::Archive;
using internal::CompactEntry;
using internal::HeadValue;
using internal::etcd_keys::Layout;
using internal::etcd_keys::PrefixEnd;
namespace pb = etcdserverpb;

constexpr uint32_t kMaxShards = 9999;
// A gid's held buffered appends at most; a further one is queued behind
// them (etcd_log.h).
constexpr size_t kMaxHeldPerGid = 64;

void AddRange(pb::TxnRequest& txn, bool success, const std::string& key,
              const std::string& range_end = "") {
  pb::RangeRequest* r = (success ? txn.add_success() : txn.add_failure())
                            ->mutable_request_range();
  r->set_key(key);
  if (!range_end.empty()) r->set_range_end(range_end);
}

// The first kv of a range response, or null.
const mvccpb::KeyValue* FirstKv(const pb::ResponseOp& op) {
  if (!op.has_response_range() || op.response_range().kvs_size() == 0) {
    return nullptr;
  }
  return &op.response_range().kvs(0);
}

// Whether this thread is an etcd log's committer (whose own callbacks must
// not wait for its answers).
thread_local bool on_committer = false;

// Appends the records of `inline_records` (a head's, checked by DecodeHead)
// to `out`.
absl::Status DecodeInline(const std::vector<std::string>& inline_records,
                          std::vector<Record>& out) {
  for (const std::string& bytes : inline_records) {
    absl::StatusOr<Record> r = internal::DecodeRecord(bytes);
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return absl::OkStatus();
}
absl::Status DecodeInline(const HeadValue& head, std::string_view key,
                          std::vector<Record>& out) {
  absl::Status s = DecodeInline(head.inline_records, out);
  if (!s.ok()) {
    return absl::DataLossError(absl::StrCat("etcd log: the value of ",
                                            std::string(key), " ",
                                            std::string(s.message())));
  }
  return s;
}

// Pages through [key, range_end) at `revision` (0: the current one),
// calling `each` for every kv. A compacted revision is OUT_OF_RANGE.
using RangeFn =
    std::function<absl::StatusOr<pb::RangeResponse>(const pb::RangeRequest&)>;
absl::Status RangeAll(
    const RangeFn& range, const std::string& key, const std::string& range_end,
    int64_t revision,
    const std::function<absl::Status(const mvccpb::KeyValue&)>& each,
    int64_t* read_revision = nullptr) {
  std::string from = key;
  // Keys a page: 1000, fewer from a page whose answer is more than the
  // client takes (large records) on: the keys of one range are alike, and a
  // refused page cost etcd the whole read.
  int64_t limit = 1000;
  while (true) {
    pb::RangeRequest request;
    request.set_key(from);
    request.set_range_end(range_end);
    request.set_limit(limit);
    request.set_revision(revision);
    absl::StatusOr<pb::RangeResponse> page = range(request);
    if (etcd::IsAnswerTooLarge(page.status()) && limit > 1) {
      limit /= 2;
      continue;
    }
    if (!page.ok()) return page.status();
    // Every page at the same revision as the first (a consistent view).
    if (revision == 0) revision = page->header().revision();
    if (read_revision != nullptr) *read_revision = revision;
    for (const mvccpb::KeyValue& kv : page->kvs()) {
      if (absl::Status s = each(kv); !s.ok()) return s;
    }
    if (!page->more() || page->kvs_size() == 0) return absl::OkStatus();
    from = page->kvs(page->kvs_size() - 1).key() + std::string(1, '\0');
  }
}

// The cluster checks (DESIGN.md section 14, "Losing etcd").
absl::Status CheckHeader(const ClusterInfo& cluster,
                         const pb::ResponseHeader& header) {
  if (header.cluster_id() != cluster.etcd_cluster_id) {
    return absl::DataLossError(absl::StrCat(
        "etcd's cluster_id is ", header.cluster_id(), ", not the cluster's ",
        cluster.etcd_cluster_id,
        ": this is another etcd (or one rebuilt); tccd refuses it"));
  }
  if (header.revision() < cluster.created_revision) {
    return absl::DataLossError(absl::StrCat(
        "etcd's revision ", header.revision(),
        " is below the cluster's creation revision ", cluster.created_revision,
        ": etcd was restored from a snapshot; tccd refuses it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterInfo> InitCluster(etcd::Client& client,
                                        const std::string& key_prefix,
                                        uint32_t shards) {
  if (shards < 1 || shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.shards must be 1..", kMaxShards));
  }
  absl::StatusOr<pb::StatusResponse> status = client.Status();
  if (!status.ok()) return status.status();
  const Layout keys(key_prefix);
  internal::ClusterRecord record;
  record.etcd_cluster_id = status->header().cluster_id();
  record.shards = shards;
  record.created_revision = status->header().revision();
  pb::TxnRequest txn;
  pb::Compare* absent = txn.add_compare();
  absent->set_key(keys.Cluster());
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(keys.Cluster());
  put->set_value(internal::EncodeCluster(record));
  for (uint32_t k = 0; k < shards; ++k) {
    pb::PutRequest* h = txn.add_success()->mutable_request_put();
    h->set_key(keys.Horizon(k));
    h->set_value(internal::EncodeHorizon(0));
  }
  AddRange(txn, false, keys.Cluster());
  // Sent until answered: a lost answer shows as "exists" with our record.
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<pb::TxnResponse> r = client.Txn(txn);
    if (!r.ok()) {
      if (etcd::IsUnknownOutcome(r.status()) && attempt < 20) continue;
      return r.status();
    }
    if (r->succeeded()) {
      return ClusterInfo{record.etcd_cluster_id, shards,
                         record.created_revision};
    }
    const mvccpb::KeyValue* kv = FirstKv(r->responses(0));
    if (attempt > 0 && kv != nullptr &&
        kv->value() == internal::EncodeCluster(record)) {
      return ClusterInfo{record.etcd_cluster_id, shards,
                         record.created_revision};
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "a cluster exists already under the key prefix '", key_prefix, "'"));
  }
}

absl::StatusOr<ClusterInfo> ReadCluster(etcd::Client& client,
                                        const std::string& key_prefix) {
  const Layout keys(key_prefix);
  pb::RangeRequest request;
  request.set_key(keys.Cluster());
  absl::StatusOr<pb::RangeResponse> r = client.Range(request);
  if (!r.ok()) return r.status();
  if (r->kvs_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd holds no tccd cluster under the key prefix '", key_prefix,
        "' (cluster.key_prefix): create it once with `tccd --init-cluster`; "
        "a node never takes an empty etcd for a new cluster"));
  }
  absl::StatusOr<internal::ClusterRecord> record =
      internal::DecodeCluster(r->kvs(0).value(), keys.Cluster());
  if (!record.ok()) return record.status();
  ClusterInfo info{record->etcd_cluster_id, record->shards,
                   record->created_revision};
  if (absl::Status s = CheckHeader(info, r->header()); !s.ok()) return s;
  return info;
}

// --- The log ---

class EtcdLog::Impl {
 public:
  // One append or new approval waiting for the committer.
  struct Item {
    bool approval = false;
    AppendRequest append;
    // An append's: its gid's shard, and its records encoded (EncodeRecord
    // of each), both made on the appending thread, off the committer's.
    uint32_t shard = 0;
    std::vector<std::string> encoded;
    std::unique_ptr<Approval> new_approval;
    AppendDone done;  // null once answered
  };

  Impl(EtcdLogOptions options, ClusterInfo cluster,
       std::unique_ptr<Archive> archive)
      : options_(std::move(options)),
        cluster_(cluster),
        keys_(options_.key_prefix),
        archive_(std::move(archive)),
        shards_(cluster.shards),
        lease_id_(options_.lease_id) {}

  ~Impl() {
    {
      // A graceful close writes what it holds (etcd_log.h), for at most
      // one Txn timeout.
      std::unique_lock<std::mutex> lock(mu_);
      std::vector<std::string> gids;
      for (const auto& [gid, held] : held_) gids.push_back(gid);
      for (const std::string& gid : gids) ReleaseHeldLocked(gid);
      cv_.notify_all();
      drained_.wait_for(lock,
                        std::chrono::milliseconds(options_.txn_timeout_ms),
                        [&] { return unsent_.empty(); });
      stop_ = true;
    }
    cv_.notify_all();
    answered_.notify_all();
    if (committer_.joinable()) committer_.join();
    std::deque<Item> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(queue_);
    }
    for (Item& item : left) {
      Complete(item, absl::UnavailableError("the etcd log is closing"));
    }
  }

  void Start() {
    committer_ = std::thread([this] { CommitterLoop(); });
  }

  // Answers a buffered append at once, holding it for the gid's next group
  // (etcd_log.h, "Held buffered appends"), when the rules allow
  // (internal::MayHold) and it can be checked here: the gid's view is
  // current, nothing of it is queued or in a group, its shard is owned.
  bool Hold(Item& item);

  void Enqueue(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!item.approval) ReleaseHeldLocked(item.append.gid);
      if (queue_.size() < options_.max_queued && !stop_) {
        if (!item.approval) ++unsent_[item.append.gid];
        queue_.push_back(std::move(item));
        item.done = nullptr;
      }
    }
    if (item.done) {
      item.done(absl::ResourceExhaustedError(
          absl::StrCat("the etcd log's queue is full (", options_.max_queued,
                       " appends waiting); retry later")));
      return;
    }
    cv_.notify_one();
  }

  absl::StatusOr<TxnLog> Read(std::string_view gid);
  absl::StatusOr<TxnLog> ReadForCreate(std::string_view gid, bool* blind);
  absl::StatusOr<Approval> ReadApproval(std::string_view id);
  absl::StatusOr<ListPage> List(const ListQuery& query);
  absl::Status ScanUnfinished(uint32_t shard,
                              const std::function<absl::Status(TxnLog)>& visit);
  absl::StatusOr<uint64_t> TakeOwnerEpoch(uint32_t shard);
  absl::Status ReleaseShard(uint32_t shard, uint64_t epoch);
  void SetLease(int64_t lease_id) {
    std::lock_guard<std::mutex> lock(mu_);
    lease_id_ = lease_id;
    // Every owner key of the old lease went with it.
    for (ShardState& st : shards_) st.owned = false;
    DropHeldLocked(-1);
  }
  absl::Status RunRetention(int64_t now_ms);
  LogStats Stats() const;

  void SetShardLostHandler(ShardLostFn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_fn_ = std::move(fn);
  }
  int64_t Horizon(uint32_t shard) const {
    return shard < shards_.size() ? shards_[shard].horizon_ms.load() : 0;
  }
  bool Owns(uint32_t shard) const {
    std::lock_guard<std::mutex> lock(mu_);
    return shard < shards_.size() && shards_[shard].owned &&
           !shards_[shard].lost;
  }
  const ClusterInfo& cluster() const { return cluster_; }
  absl::Status failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  // Records a DATA_LOSS found in an answer of etcd's (passes `s` through).
  absl::Status NoteFatal(absl::Status s) {
    if (absl::IsDataLoss(s)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.ok()) failure_ = s;
    }
    return s;
  }
  uint64_t txns_sent() const { return txns_sent_.load(); }
  uint64_t txns_refused_too_large() const {
    return txns_refused_too_large_.load();
  }
  uint64_t appends_committed() const { return appends_committed_.load(); }
  uint64_t appends_held() const { return appends_held_.load(); }
  uint64_t fenced_writes_refused() const {
    return fenced_writes_refused_.load();
  }
  double MeanAppendsPerTxn() const {
    const uint64_t t = txns_committed_.load();
    return t == 0 ? 0.0 : static_cast<double>(appends_committed_.load()) / t;
  }

 private:
  struct ShardState {
    bool owned = false;
    bool lost = false;
    uint64_t epoch = 0;
    std::atomic<int64_t> horizon_ms{0};
  };

  // What this log knows of a gid it read or wrote.
  struct View {
    bool head = false;      // an unfinished transaction (head/ exists)
    bool finished = false;  // a compact entry (done/ exists)
    int64_t head_mod_revision = 0;
    uint64_t record_count = 0;
    TxnSummary summary;
    bool stale = false;  // a compare was refused: ABORTED until a Read
    // The head's inline records (HeadValue::inline_records): its next
    // write puts them again (group_txn.h, "Inline records").
    std::vector<std::string> inline_records;
    // HeadValue::record_key_bytes (0 with record keys: unknown).
    uint64_t record_key_bytes = 0;
  };

  void Complete(Item& item, absl::Status status) {
    if (item.done) {
      if (!item.approval) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = unsent_.find(item.append.gid);
        if (it != unsent_.end() && --it->second == 0) {
          unsent_.erase(it);
          answered_.notify_all();
          if (unsent_.empty()) drained_.notify_all();
        }
      }
      AppendDone done = std::move(item.done);
      item.done = nullptr;
      done(std::move(status));
    }
  }

  // Held buffered appends of one gid, answered already, in order.
  struct Held {
    int64_t since_ms = 0;       // boot clock: when the first was held
    std::vector<Item> appends;  // their done: nothing (answered)
    TxnSummary summary;         // the gid's, after them
  };
  // Queues `gid`'s held appends (items answered already: nobody waits for
  // their outcome), ahead of anything queued for it after. Under mu_.
  void ReleaseHeldLocked(const std::string& gid);
  // Queues the held appends due (held options.hold_buffered_ms); returns
  // when the next are due (0: none held). Under mu_.
  int64_t ReleaseDueHeldLocked(int64_t now_ms);
  // Adds what this log holds of `txn`'s gid to it (as read from etcd, its
  // head at `head_mod_revision`), unless another writer wrote the gid since
  // this log did (its view's head is another). Under mu_.
  void MergeHeldLocked(int64_t head_mod_revision, TxnLog& txn) {
    auto h = held_.find(txn.summary.gid);
    auto v = views_.find(txn.summary.gid);
    if (h == held_.end() || v == views_.end() ||
        v->second.head_mod_revision != head_mod_revision) {
      return;
    }
    for (const Item& a : h->second.appends) {
      txn.records.insert(txn.records.end(), a.append.records.begin(),
                         a.append.records.end());
    }
    txn.summary = h->second.summary;
  }
  // Forgets what is held for gids of `shard` (every shard: -1) when
  // ownership changes: written later under another epoch, it would follow
  // what the new owner reads (they may be lost, as buffered appends may).
  // Under mu_.
  void DropHeldLocked(int64_t shard);

  void CommitterLoop();
  void ProcessGroup(std::vector<Item>& items);
  // A group's limits: etcd's (the options), and of its answer, the records
  // its finishing writes get back, half of what the client takes of an
  // answer (its max_message_bytes): the rest is for the answer's other
  // parts. An answer the client refused would leave the group's outcome
  // unknown, and the archive without those records.
  internal::GroupLimits Limits() const {
    return internal::GroupLimits{
        options_.max_txn_ops, options_.max_request_bytes,
        static_cast<size_t>(options_.client->options().max_message_bytes) / 2};
  }
  // A read-only Txn (ranges only), sent with the attempt deadline and, each
  // time it waits that out, sent again (from the second time on with twice
  // the deadline), for at most txn_timeout_ms in all (etcd_log.h,
  // txn_attempt_timeout_ms). Any other failure is returned at once.
  absl::StatusOr<pb::TxnResponse> ReadTxn(const pb::TxnRequest& txn);
  // The same for a Range (RangeAll's pages, single-key reads).
  absl::StatusOr<pb::RangeResponse> ReadRange(const pb::RangeRequest& request);
  // `send(deadline_ms)` as ReadTxn sends its Txn.
  template <typename Send>
  auto Resend(const Send& send) -> decltype(send(int64_t{0}));
  // A Txn that is safe to send again as it is (its compares make a second
  // apply impossible, or an answer the caller reads: the ownership Txns,
  // retention's), sent until etcd answers it or refuses it: each send with
  // the attempt deadline (SendDeadlines), an unknown outcome sent again
  // after a backoff, any other failure returned. Ends with the last send's
  // unknown outcome once txn_timeout_ms passed, or the log stops: its
  // callers try again later (the next round, the next retention run), so
  // while etcd has no majority they do not hold their thread, nor the
  // daemon's shutdown, until it is back.
  absl::StatusOr<pb::TxnResponse> SendUntilAnswered(const pb::TxnRequest& txn);
  // Reads each of `keys` (one key each) in as few Txns as
  // options.max_txn_ops allows: `kvs[i]` is keys[i]'s kv, or null when it
  // is absent, pointing into `pages`. The first error ends it.
  absl::Status ReadKeys(const std::vector<std::string>& keys,
                        std::vector<pb::TxnResponse>& pages,
                        std::vector<const mvccpb::KeyValue*>& kvs);
  // A gid's view from its head and compact entry as read (null: absent).
  absl::StatusOr<View> ViewOf(const std::string& gid,
                              const mvccpb::KeyValue* head,
                              const mvccpb::KeyValue* done);
  // Loads the views of `gids` (and the approvals `approval_ids`) from etcd.
  absl::Status Prefetch(const std::vector<std::string>& gids,
                        const std::set<std::string>& approval_ids,
                        std::map<std::string, internal::ApprovalState>& out);
  // Shard `shard`'s fence at `epoch` was refused: lost, unless the log has
  // taken it again since (a later epoch), when the refusal is only that
  // Txn's.
  void LoseShard(uint32_t shard, uint64_t epoch, const absl::Status& why);
  void WaitBackoff(int64_t& backoff_ms);
  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }
  absl::StatusOr<TxnLog> ReadEtcd(std::string_view gid, View* view_out,
                                  int64_t timeout_ms = 0);
  // Whether etcd answered: a read or the committer's Txn that succeeded
  // marks it reachable, one that failed with an unknown outcome (no leader,
  // no member reachable, a deadline) unreachable from then on.
  void NoteReachable(const absl::Status& s);
  // A caller's read while etcd is unreachable (for kOutageAfterMs): refused
  // at once (UNAVAILABLE) but one every kProbeEveryMs, which goes to etcd with
  // a short deadline
  // (`timeout_ms`). A driver's shard thread that reads a new gid thus waits
  // milliseconds, not etcd's call timeout, while etcd has no quorum or this
  // node is cut off from it.
  absl::Status ReadGate(int64_t* timeout_ms);

  const EtcdLogOptions options_;
  // RangeAll's pages, each read as ReadRange reads.
  const RangeFn read_range_ = [this](const pb::RangeRequest& request) {
    return ReadRange(request);
  };
  const ClusterInfo cluster_;
  const Layout keys_;
  std::unique_ptr<Archive> archive_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Item> queue_;
  std::vector<ShardState> shards_;
  // The node's lease (options.lease_id, then SetLease's).
  std::atomic<int64_t> lease_id_;
  std::unordered_map<std::string, View> views_;
  // Gids ReadForCreate answered blind, and when (boot clock): only their
  // registrations are taken as absent. Forgotten once a registration of
  // the gid is processed, or when a later blind answer finds it older than
  // kBlindKeptMs (which bounds the map).
  static constexpr int64_t kBlindKeptMs = 10000;
  void NoteBlindLocked(std::string gid) {
    const int64_t now = etcd::SystemBootClock::Default().NowMs();
    while (!blind_order_.empty() &&
           now - blind_order_.front().first > kBlindKeptMs) {
      auto b = blind_.find(blind_order_.front().second);
      if (b != blind_.end() && b->second == blind_order_.front().first) {
        blind_.erase(b);
      }
      blind_order_.pop_front();
    }
    blind_[gid] = now;
    blind_order_.emplace_back(now, std::move(gid));
  }
  std::unordered_map<std::string, int64_t> blind_;
  std::deque<std::pair<int64_t, std::string>> blind_order_;
  std::unordered_map<std::string, Held> held_;
  std::deque<std::pair<int64_t, std::string>> held_order_;  // since, gid
  size_t held_count_ = 0;                                   // appends
  // Appends queued or in a group, per gid (none: no entry); its drain is
  // what a graceful close waits for.
  std::unordered_map<std::string, size_t> unsent_;
  std::condition_variable drained_;
  std::condition_variable answered_;  // a gid's unsent_ went to none
  ShardLostFn lost_fn_;
  absl::Status failure_;
  std::thread committer_;
  // Since when (boot clock ms) etcd has not answered (0: it answers), and
  // when a caller's read last went to it meanwhile.
  std::atomic<int64_t> unreachable_since_ms_{0};
  std::atomic<int64_t> last_probe_ms_{0};
  // When etcd last answered one of this log's calls (boot clock ms).
  std::atomic<int64_t> last_answer_ms_{0};

  std::atomic<uint64_t> next_append_id_{1};
  std::atomic<uint64_t> txns_sent_{0};
  std::atomic<uint64_t> txns_refused_too_large_{0};
  std::atomic<uint64_t> fenced_writes_refused_{0};
  std::atomic<uint64_t> txns_committed_{0};
  std::atomic<uint64_t> appends_committed_{0};
  std::atomic<uint64_t> synced_appends_{0};
  mutable std::atomic<uint64_t> last_unfinished_{0};  // Stats' last count
  std::atomic<uint64_t> buffered_appends_{0};
  std::atomic<uint64_t> appends_held_{0};
  // Registrations refused (RESOURCE_EXHAUSTED) while the size budget would
  // cut the deduplication window below its minimum.
  std::atomic<bool> window_exhausted_{false};

  friend class EtcdLog;
};

// --- Reads ---

namespace {

constexpr int64_t kOutageAfterMs = 200;
constexpr int64_t kProbeEveryMs = 500;
constexpr int64_t kProbeTimeoutMs = 1000;

// etcd's reachability is timed on the clock lease trust is.
int64_t NowMs() { return etcd::SystemBootClock::Default().NowMs(); }

}  // namespace

void EtcdLog::Impl::NoteReachable(const absl::Status& s) {
  // NOT_FOUND: etcd answered "absent"; an answer too large for the client
  // is an answer too.
  if (s.ok() || absl::IsNotFound(s) || etcd::IsAnswerTooLarge(s)) {
    last_answer_ms_.store(NowMs());
    unreachable_since_ms_.store(0);
  } else if (etcd::IsUnknownOutcome(s)) {
    int64_t none = 0;
    unreachable_since_ms_.compare_exchange_strong(none, NowMs());
  }
}

absl::Status EtcdLog::Impl::ReadGate(int64_t* timeout_ms) {
  const int64_t since = unreachable_since_ms_.load();
  if (since == 0) return absl::OkStatus();
  const int64_t now = NowMs();
  int64_t last = last_probe_ms_.load();
  // One failure is not an outage yet (a member restarting, a leader moving).
  if (now - since < kOutageAfterMs ||
      (now - last >= kProbeEveryMs &&
       last_probe_ms_.compare_exchange_strong(last, now))) {
    *timeout_ms = std::min<int64_t>(kProbeTimeoutMs, options_.txn_timeout_ms);
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "etcd has answered none of this node's calls for ", now - since,
      " ms (no quorum, or this node is cut off from it): nothing was read "
      "or written; retry (the same gid and created_at)"));
}

absl::StatusOr<TxnLog> EtcdLog::Impl::ReadEtcd(std::string_view gid_view,
                                               View* view_out,
                                               int64_t timeout_ms) {
  const std::string gid(gid_view);
  const uint32_t k = ShardOfGid(gid, cluster_.shards);
  pb::TxnRequest txn;
  AddRange(txn, true, keys_.Head(k, gid));
  const std::string rec = keys_.RecordPrefix(k, gid);
  AddRange(txn, true, rec, PrefixEnd(rec));
  AddRange(txn, true, keys_.Done(k, gid));
  // A probe has its own short deadline (ReadGate); any other read is sent
  // as the committer's are (ReadTxn), so a read lost with etcd's leader is
  // sent again in about a second instead of waiting out the call timeout.
  auto send = [&](const pb::TxnRequest& t) {
    return timeout_ms > 0 ? options_.client->Txn(t, timeout_ms) : ReadTxn(t);
  };
  absl::StatusOr<pb::TxnResponse> r = send(txn);
  if (etcd::IsAnswerTooLarge(r.status())) {
    // Records more than the client takes in one answer: the head and the
    // compact entry, then the record keys in pages at that revision.
    pb::TxnRequest small;
    AddRange(small, true, keys_.Head(k, gid));
    AddRange(small, true, keys_.Done(k, gid));
    r = send(small);
    if (!r.ok()) return r.status();
    pb::ResponseOp records;
    records.mutable_response_range();
    absl::Status s =
        RangeAll(read_range_, rec, PrefixEnd(rec), r->header().revision(),
                 [&](const mvccpb::KeyValue& kv) {
                   *records.mutable_response_range()->add_kvs() = kv;
                   return absl::OkStatus();
                 });
    if (!s.ok()) return s;
    // As the one Txn answers: head, records, compact entry.
    pb::ResponseOp done = std::move(*r->mutable_responses(1));
    *r->mutable_responses(1) = std::move(records);
    *r->add_responses() = std::move(done);
  }
  if (!r.ok()) return r.status();
  if (absl::Status s = CheckHeader(cluster_, r->header()); !s.ok()) return s;
  View view;
  TxnLog out;
  if (const mvccpb::KeyValue* head = FirstKv(r->responses(0))) {
    absl::StatusOr<HeadValue> h =
        internal::DecodeHead(head->value(), head->key());
    if (!h.ok()) return h.status();
    if (absl::Status s = DecodeInline(*h, head->key(), out.records); !s.ok()) {
      return s;
    }
    for (const mvccpb::KeyValue& kv : r->responses(1).response_range().kvs()) {
      if (absl::Status s =
              internal::DecodeRecordsTo(kv.value(), kv.key(), out.records);
          !s.ok()) {
        return s;
      }
      view.record_key_bytes += kv.key().size() + kv.value().size();
    }
    if (out.records.size() != h->record_count) {
      return absl::DataLossError(
          absl::StrCat("etcd log: gid ", gid, " has ", out.records.size(),
                       " records, its head says ", h->record_count));
    }
    out.summary = h->summary;
    view.head = true;
    view.head_mod_revision = head->mod_revision();
    view.record_count = h->record_count;
    view.summary = std::move(h->summary);
    view.inline_records = std::move(h->inline_records);
  } else if (const mvccpb::KeyValue* done = FirstKv(r->responses(2))) {
    absl::StatusOr<CompactEntry> entry =
        internal::DecodeCompact(done->value(), done->key());
    if (!entry.ok()) return entry.status();
    out.summary = entry->summary;
    out.summary.archive_node = entry->archive_node;
    absl::StatusOr<TxnLog> full = archive_->Get(gid);
    if (!full.ok() && entry->archive_node == options_.node_id &&
        !on_committer) {
      // This node finished it; its full record reaches the archive after
      // the finishing Txn's answer, before the append is answered: wait
      // for that (bounded), or this read would call it compacted.
      {
        std::unique_lock<std::mutex> lock(mu_);
        answered_.wait_for(lock,
                           std::chrono::milliseconds(options_.txn_timeout_ms),
                           [&] { return stop_ || unsent_.count(gid) == 0; });
      }
      full = archive_->Get(gid);
    }
    if (full.ok() &&
        full->summary.created_at_ms == entry->summary.created_at_ms &&
        full->summary.content_hash == entry->summary.content_hash) {
      out = *std::move(full);
      out.summary.compacted = false;
      out.summary.archive_node = entry->archive_node;
    } else {
      out.summary.compacted = true;
    }
    view.finished = true;
    view.summary = out.summary;
  } else {
    if (view_out != nullptr) *view_out = view;
    return absl::NotFoundError(absl::StrCat("gid ", gid, " is not in the log"));
  }
  if (view_out != nullptr) *view_out = view;
  return out;
}

absl::StatusOr<TxnLog> EtcdLog::Impl::Read(std::string_view gid) {
  int64_t timeout_ms = 0;
  if (absl::Status s = ReadGate(&timeout_ms); !s.ok()) return s;
  View view;
  absl::StatusOr<TxnLog> read = ReadEtcd(gid, &view, timeout_ms);
  NoteReachable(read.status());
  if (etcd::IsUnknownOutcome(read.status())) {
    // A read changes nothing: whatever etcd did, the caller may retry.
    return absl::UnavailableError(
        absl::StrCat("etcd did not answer the read of gid ", std::string(gid),
                     ": ", read.status().message(), "; retry"));
  }
  if (read.ok() || absl::IsNotFound(read.status())) {
    // The caller's reload: a stale view is current again. An unfinished
    // gid's of a shard this node owns is kept (a create of it is then not
    // blind, and its next append needs no read), unless the committer
    // holds a newer one.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = views_.find(std::string(gid));
    if (it != views_.end() && it->second.stale) {
      views_.erase(it);
      it = views_.end();
    }
    const uint32_t k = ShardOfGid(std::string(gid), cluster_.shards);
    if (it == views_.end() && view.head && shards_[k].owned &&
        !shards_[k].lost) {
      views_.emplace(std::string(gid), view);
    }
    if (read.ok()) MergeHeldLocked(view.head_mod_revision, *read);
  }
  return read;
}

absl::StatusOr<TxnLog> EtcdLog::Impl::ReadForCreate(std::string_view gid,
                                                    bool* blind) {
  *blind = false;
  // Blind only while etcd is known to answer now: a registration queued
  // behind a Txn that hangs would hold its caller until that Txn's deadline,
  // where a real read is refused at once (ReadGate).
  if (unreachable_since_ms_.load() == 0 &&
      NowMs() - last_answer_ms_.load() < Log::kBlindCreateWindowMs) {
    std::lock_guard<std::mutex> lock(mu_);
    if (views_.find(std::string(gid)) == views_.end()) {
      *blind = true;
      NoteBlindLocked(std::string(gid));
      return absl::NotFoundError(absl::StrCat(
          "gid ", std::string(gid),
          " not read: its registration checks etcd (blind create)"));
    }
  }
  return Read(gid);
}

absl::StatusOr<Approval> EtcdLog::Impl::ReadApproval(std::string_view id) {
  pb::RangeRequest request;
  request.set_key(keys_.Approval(id));
  absl::StatusOr<pb::RangeResponse> r = ReadRange(request);
  if (!r.ok()) return r.status();
  if (r->kvs_size() == 0) {
    return absl::NotFoundError(
        absl::StrCat("approval ", std::string(id), " does not exist"));
  }
  return internal::DecodeApproval(r->kvs(0).value());
}

absl::StatusOr<ListPage> EtcdLog::Impl::List(const ListQuery& query) {
  if (absl::Status s = internal::ValidateListQuery(query); !s.ok()) return s;
  absl::StatusOr<std::optional<internal::ListPosition>> pos =
      internal::DecodePageToken(query.page_token);
  if (!pos.ok()) return pos.status();
  // Compact entries are all final: only a query that can match a final
  // state reads them, and only while there are few enough (etcd_log.h).
  bool finished_too = query.states.empty();
  for (TxnState st : query.states) finished_too = finished_too || IsFinal(st);
  if (finished_too) {
    pb::RangeRequest count;
    count.set_key(keys_.AllDone());
    count.set_range_end(PrefixEnd(keys_.AllDone()));
    count.set_count_only(true);
    absl::StatusOr<pb::RangeResponse> n = ReadRange(count);
    if (!n.ok()) return n.status();
    if (static_cast<uint64_t>(n->count()) > options_.list_max_finished) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd holds ", n->count(),
          " finished transactions (the deduplication window's), more than a "
          "List reads (",
          options_.list_max_finished,
          "): list unfinished states only, or read a transaction by gid"));
    }
  }
  std::map<std::pair<int64_t, std::string>, TxnSummary> all;
  absl::Status s = RangeAll(
      read_range_, keys_.AllHeads(), PrefixEnd(keys_.AllHeads()), 0,
      [&](const mvccpb::KeyValue& kv) -> absl::Status {
        absl::StatusOr<HeadValue> h =
            internal::DecodeHead(kv.value(), kv.key());
        if (!h.ok()) return h.status();
        auto key = std::make_pair(h->summary.registered_at_ms, h->summary.gid);
        all[key] = std::move(h->summary);
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  std::set<std::string> finished;  // gids from compact entries
  if (finished_too) {
    s = RangeAll(read_range_, keys_.AllDone(), PrefixEnd(keys_.AllDone()), 0,
                 [&](const mvccpb::KeyValue& kv) -> absl::Status {
                   absl::StatusOr<CompactEntry> e =
                       internal::DecodeCompact(kv.value(), kv.key());
                   if (!e.ok()) return e.status();
                   auto key = std::make_pair(e->summary.registered_at_ms,
                                             e->summary.gid);
                   finished.insert(e->summary.gid);
                   all[key] = std::move(e->summary);
                   return absl::OkStatus();
                 });
    if (!s.ok()) return s;
  }
  auto it = all.begin();
  if (pos->has_value()) {
    it = all.upper_bound({(*pos)->registered_at_ms, (*pos)->gid});
  }
  ListPage page;
  size_t examined = 0;
  for (; it != all.end(); ++it) {
    const TxnSummary& summary = it->second;
    if (query.registered_before_ms != 0 &&
        summary.registered_at_ms >= query.registered_before_ms) {
      break;
    }
    if (examined++ == query.scan_budget) {  // as RocksDbLog::List
      auto last = std::prev(it);
      page.next_page_token =
          internal::EncodePageToken(last->first.first, last->first.second);
      break;
    }
    if (!internal::MatchesQuery(summary, query)) continue;
    if (page.items.size() == query.page_size) {
      const TxnSummary& last = page.items.back();
      page.next_page_token =
          internal::EncodePageToken(last.registered_at_ms, last.gid);
      break;
    }
    page.items.push_back(summary);
  }
  // Compacted: the archive no longer has the full record (looked up for
  // the page's items only).
  for (TxnSummary& summary : page.items) {
    if (finished.count(summary.gid) > 0) {
      summary.compacted = !archive_->Get(summary.gid).ok();
    }
  }
  return page;
}

absl::Status EtcdLog::Impl::ScanUnfinished(
    uint32_t shard, const std::function<absl::Status(TxnLog)>& visit) {
  if (shard >= cluster_.shards) {
    return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
  }
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!shards_[shard].owned || shards_[shard].lost) {
      return absl::UnavailableError(
          absl::StrCat("shard ", shard, " is not this node's"));
    }
    epoch = shards_[shard].epoch;
  }
  // One linearizable view, at the current revision (at least the epoch: it
  // holds every write of every earlier owner, and this log's own since),
  // paged at that revision; started again if etcd compacted it meanwhile.
  std::map<std::string, TxnLog> txns;
  std::map<std::string, int64_t> head_revisions;
  constexpr int kRounds = 3;
  bool whole = false;  // a round read the shard at one revision to its end
  for (int round = 0; round < kRounds && !whole; ++round) {
    txns.clear();
    head_revisions.clear();
    int64_t at = 0;
    const int64_t revision = 0;
    absl::Status s = RangeAll(
        read_range_, keys_.HeadPrefix(shard),
        PrefixEnd(keys_.HeadPrefix(shard)), revision,
        [&](const mvccpb::KeyValue& kv) -> absl::Status {
          absl::StatusOr<HeadValue> h =
              internal::DecodeHead(kv.value(), kv.key());
          if (!h.ok()) return h.status();
          if (IsFinal(h->summary.state)) return absl::OkStatus();
          head_revisions[h->summary.gid] = kv.mod_revision();
          TxnLog& t = txns[h->summary.gid];
          t.summary = std::move(h->summary);
          // Its first records, then its record keys' (below, in order).
          return DecodeInline(*h, kv.key(), t.records);
        },
        &at);
    if (etcd::IsCompacted(s)) continue;
    if (!s.ok()) return s;
    if (at < static_cast<int64_t>(epoch)) {
      return NoteFatal(absl::DataLossError(
          absl::StrCat("etcd's revision ", at, " is below shard ", shard,
                       "'s epoch ", epoch, ": etcd went back")));
    }
    const std::string rec =
        keys_.prefix() + "rec/" + internal::etcd_keys::ShardPart(shard) + "/";
    s = RangeAll(read_range_, rec, PrefixEnd(rec), at,
                 [&](const mvccpb::KeyValue& kv) -> absl::Status {
                   // rec/<k>/<gid>/<seq>
                   std::string_view key = kv.key();
                   key.remove_prefix(rec.size());
                   const size_t slash = key.find('/');
                   if (slash == std::string_view::npos) {
                     return absl::DataLossError(
                         absl::StrCat("etcd log: malformed key ", kv.key()));
                   }
                   auto t = txns.find(std::string(key.substr(0, slash)));
                   if (t == txns.end()) return absl::OkStatus();
                   return internal::DecodeRecordsTo(kv.value(), kv.key(),
                                                    t->second.records);
                 });
    if (etcd::IsCompacted(s)) continue;
    if (!s.ok()) return s;
    whole = true;
  }
  if (!whole) {
    // What the last round read is part of the shard, not all of it.
    return absl::UnavailableError(absl::StrCat(
        "shard ", shard, ": etcd compacted the revision of its scan ", kRounds,
        " times in a row; scan it again"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [gid, t] : txns) MergeHeldLocked(head_revisions[gid], t);
  }
  std::vector<TxnLog*> order;
  for (auto& [gid, t] : txns) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](TxnLog* a, TxnLog* b) {
    return std::make_pair(a->summary.registered_at_ms, a->summary.gid) <
           std::make_pair(b->summary.registered_at_ms, b->summary.gid);
  });
  for (TxnLog* t : order) {
    if (absl::Status s = visit(std::move(*t)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// --- Ownership ---

absl::StatusOr<uint64_t> EtcdLog::Impl::TakeOwnerEpoch(uint32_t shard) {
  if (shard >= cluster_.shards) {
    return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
  }
  const std::string owner = keys_.Owner(shard);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shards_[shard].owned = false;  // nothing is written meanwhile
    DropHeldLocked(shard);
  }
  // A shard this log (this lease) owns already: the fenced delete first, so
  // that the new campaign makes a higher epoch.
  {
    pb::RangeRequest read;
    read.set_key(owner);
    absl::StatusOr<pb::RangeResponse> r = ReadRange(read);
    if (!r.ok()) return r.status();
    if (absl::Status s = CheckHeader(cluster_, r->header()); !s.ok()) return s;
    if (r->kvs_size() > 0 && r->kvs(0).lease() == lease_id_.load()) {
      pb::TxnRequest del;
      pb::Compare* c = del.add_compare();
      c->set_key(owner);
      c->set_target(pb::Compare::CREATE);
      c->set_result(pb::Compare::EQUAL);
      c->set_create_revision(r->kvs(0).create_revision());
      del.add_success()->mutable_request_delete_range()->set_key(owner);
      absl::StatusOr<pb::TxnResponse> d = SendUntilAnswered(del);
      if (!d.ok()) return d.status();
    }
  }
  pb::TxnRequest campaign;
  pb::Compare* absent = campaign.add_compare();
  absent->set_key(owner);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = campaign.add_success()->mutable_request_put();
  put->set_key(owner);
  put->set_value(absl::StrCat(options_.node_id, "\n", options_.node_address));
  put->set_lease(lease_id_.load());
  AddRange(campaign, true, keys_.Horizon(shard));
  AddRange(campaign, false, owner);
  AddRange(campaign, false, keys_.Horizon(shard));
  int64_t waited_ms = 0;
  while (true) {
    absl::StatusOr<pb::TxnResponse> r = SendUntilAnswered(campaign);
    if (!r.ok()) return r.status();
    if (absl::Status s = CheckHeader(cluster_, r->header()); !s.ok()) return s;
    uint64_t epoch = 0;
    if (r->succeeded()) {
      epoch = static_cast<uint64_t>(r->header().revision());
    } else {
      const mvccpb::KeyValue* kv = FirstKv(r->responses(0));
      // A campaign whose answer was lost: the key's lease says whose it is.
      if (kv != nullptr && kv->lease() == lease_id_.load()) {
        epoch = static_cast<uint64_t>(kv->create_revision());
      } else if (waited_ms < options_.campaign_wait_ms && !Stopping()) {
        // Another node's: its lease may be expiring (a node that stopped).
        int64_t pause = 200;
        WaitBackoff(pause);
        waited_ms += 200;
        continue;
      } else {
        std::string who = kv == nullptr ? "?" : kv->value();
        std::replace(who.begin(), who.end(), '\n', ' ');
        return absl::UnavailableError(absl::StrCat(
            "shard ", shard, " is owned by another node (", who, ")"));
      }
    }
    const mvccpb::KeyValue* horizon = FirstKv(r->responses(1));
    if (horizon == nullptr) {
      return absl::DataLossError(
          absl::StrCat("etcd log: ", keys_.Horizon(shard),
                       " is missing (it exists from the cluster's creation)"));
    }
    absl::StatusOr<int64_t> h =
        internal::DecodeHorizon(horizon->value(), horizon->key());
    if (!h.ok()) return h.status();
    if (absl::Status s = archive_->RaiseMaxRevision(r->header().revision());
        !s.ok()) {
      return s;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ShardState& st = shards_[shard];
    st.owned = true;
    st.lost = false;
    st.epoch = epoch;
    st.horizon_ms = std::max(st.horizon_ms.load(), *h);
    return epoch;
  }
}

absl::Status EtcdLog::Impl::ReleaseShard(uint32_t shard, uint64_t epoch) {
  if (shard >= cluster_.shards) {
    return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shards_[shard].owned) {
      shards_[shard].owned = false;
      epoch = shards_[shard].epoch;  // the key it created
      DropHeldLocked(shard);
    }
  }
  // Not owned here, and no key named: nothing to delete. Not owned but a
  // key named (a release etcd refused before, a campaign whose answer was
  // lost): that key. A refused compare says it is gone already.
  if (epoch == 0) return absl::OkStatus();
  pb::TxnRequest del;
  pb::Compare* c = del.add_compare();
  c->set_key(keys_.Owner(shard));
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(static_cast<int64_t>(epoch));
  del.add_success()->mutable_request_delete_range()->set_key(
      keys_.Owner(shard));
  return SendUntilAnswered(del).status();
}

void EtcdLog::Impl::LoseShard(uint32_t shard, uint64_t epoch,
                              const absl::Status& why) {
  ShardLostFn fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shards_[shard].lost || shards_[shard].epoch != epoch) return;
    shards_[shard].lost = true;
    DropHeldLocked(shard);
    fn = lost_fn_;
  }
  if (fn) fn(shard, why);
}

void EtcdLog::Impl::WaitBackoff(int64_t& backoff_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms),
               [&] { return stop_; });
  backoff_ms = std::min<int64_t>(1000, backoff_ms * 2);
}

// --- Held buffered appends ---

bool EtcdLog::Impl::Hold(Item& item) {
  AppendRequest& request = item.append;
  if (options_.hold_buffered_ms <= 0 ||
      request.durability != Durability::kBuffered) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t k = item.shard;
  if (stop_ || !shards_[k].owned || shards_[k].lost ||
      unsent_.count(request.gid) > 0 || held_count_ >= options_.max_queued) {
    return false;
  }
  auto v = views_.find(request.gid);
  if (v == views_.end() || !v->second.head || v->second.stale) return false;
  auto h = held_.find(request.gid);
  if (h != held_.end() && h->second.appends.size() >= kMaxHeldPerGid) {
    return false;  // queued, with the held ones ahead of it
  }
  const TxnSummary& before =
      h != held_.end() ? h->second.summary : v->second.summary;
  absl::StatusOr<internal::AppendPlan> plan =
      internal::PlanAppend(request, &before, internal::NoApprovals());
  // One the rules refuse is queued: the committer answers it.
  if (!plan.ok() || !internal::MayHold(request, *plan, before)) return false;
  if (h == held_.end()) {
    h = held_.emplace(request.gid, Held{}).first;
    h->second.since_ms = NowMs();
    h->second.summary = before;
    held_order_.emplace_back(h->second.since_ms, request.gid);
  }
  if (plan->summary_set) h->second.summary = std::move(plan->summary);
  item.done = nullptr;
  h->second.appends.push_back(std::move(item));
  ++held_count_;
  appends_held_.fetch_add(1);
  return true;
}

void EtcdLog::Impl::ReleaseHeldLocked(const std::string& gid) {
  auto h = held_.find(gid);
  if (h == held_.end()) return;
  for (Item& item : h->second.appends) {
    item.done = [](absl::Status) {};  // answered when it was held
    queue_.push_back(std::move(item));
  }
  unsent_[gid] += h->second.appends.size();
  held_count_ -= h->second.appends.size();
  held_.erase(h);
}

int64_t EtcdLog::Impl::ReleaseDueHeldLocked(int64_t now_ms) {
  while (!held_order_.empty()) {
    const auto& [since, gid] = held_order_.front();
    auto h = held_.find(gid);
    if (h != held_.end() && h->second.since_ms == since) {
      if (since + options_.hold_buffered_ms > now_ms) {
        return since + options_.hold_buffered_ms;
      }
      ReleaseHeldLocked(gid);
    }
    held_order_.pop_front();  // released, or released and held anew since
  }
  return 0;
}

void EtcdLog::Impl::DropHeldLocked(int64_t shard) {
  for (auto h = held_.begin(); h != held_.end();) {
    if (shard < 0 || ShardOfGid(h->first, cluster_.shards) == shard) {
      held_count_ -= h->second.appends.size();
      h = held_.erase(h);
    } else {
      ++h;
    }
  }
}

// --- Group commit ---

void EtcdLog::Impl::CommitterLoop() {
  on_committer = true;
  while (true) {
    std::vector<Item> items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        const int64_t due = ReleaseDueHeldLocked(NowMs());
        if (!queue_.empty()) break;
        if (options_.hold_buffered_ms <= 0) {
          cv_.wait(lock);
        } else {
          // Hold wakes nobody (no futex wake per held append): an idle
          // committer looks again every hold_buffered_ms, so a held
          // append waits at most twice that.
          cv_.wait_for(
              lock, std::chrono::milliseconds(
                        due == 0 ? options_.hold_buffered_ms : due - NowMs()));
        }
      }
      if (stop_) return;
      while (!queue_.empty() && items.size() < 8192) {
        items.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    ProcessGroup(items);
    // What the group put off (no room, or a key it already has) goes first
    // next time, in order.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = items.rbegin(); it != items.rend(); ++it) {
      if (it->done) queue_.push_front(std::move(*it));
    }
  }
}

template <typename Send>
auto EtcdLog::Impl::Resend(const Send& send) -> decltype(send(int64_t{0})) {
  return internal::ResendTimeouts(
      options_.txn_attempt_timeout_ms, options_.txn_timeout_ms,
      [this] { return Stopping(); }, send);
}

absl::StatusOr<pb::TxnResponse> EtcdLog::Impl::ReadTxn(
    const pb::TxnRequest& txn) {
  return Resend([&](int64_t ms) { return options_.client->Txn(txn, ms); });
}

absl::StatusOr<pb::RangeResponse> EtcdLog::Impl::ReadRange(
    const pb::RangeRequest& request) {
  return Resend(
      [&](int64_t ms) { return options_.client->Range(request, ms); });
}

absl::StatusOr<pb::TxnResponse> EtcdLog::Impl::SendUntilAnswered(
    const pb::TxnRequest& txn) {
  internal::SendDeadlines deadline(options_.txn_attempt_timeout_ms,
                                   options_.txn_timeout_ms);
  int64_t backoff = options_.resend_backoff_ms;
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    absl::StatusOr<pb::TxnResponse> r =
        options_.client->Txn(txn, deadline.ms());
    if (r.ok() || !etcd::IsUnknownOutcome(r.status()) || Stopping()) return r;
    if (std::chrono::steady_clock::now() - start >=
        std::chrono::milliseconds(options_.txn_timeout_ms)) {
      return r;
    }
    deadline.After(r.status());
    WaitBackoff(backoff);  // the identical Txn again
  }
}

absl::Status EtcdLog::Impl::ReadKeys(
    const std::vector<std::string>& keys, std::vector<pb::TxnResponse>& pages,
    std::vector<const mvccpb::KeyValue*>& kvs) {
  const size_t per_txn = std::max<size_t>(1, options_.max_txn_ops - 1);
  pages.clear();
  pages.reserve((keys.size() + per_txn - 1) / per_txn);  // kvs point in
  kvs.assign(keys.size(), nullptr);
  for (size_t from = 0; from < keys.size(); from += per_txn) {
    const size_t to = std::min(keys.size(), from + per_txn);
    pb::TxnRequest txn;
    for (size_t i = from; i < to; ++i) AddRange(txn, true, keys[i]);
    absl::StatusOr<pb::TxnResponse> r = ReadTxn(txn);
    if (!r.ok()) return r.status();
    if (absl::Status s = CheckHeader(cluster_, r->header()); !s.ok()) return s;
    pages.push_back(*std::move(r));
    for (size_t i = from; i < to; ++i) {
      kvs[i] = FirstKv(pages.back().responses(static_cast<int>(i - from)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EtcdLog::Impl::View> EtcdLog::Impl::ViewOf(
    const std::string& gid, const mvccpb::KeyValue* head,
    const mvccpb::KeyValue* done) {
  View view;
  if (head != nullptr) {
    absl::StatusOr<HeadValue> h =
        internal::DecodeHead(head->value(), head->key());
    if (!h.ok()) return h.status();
    view.head = true;
    view.head_mod_revision = head->mod_revision();
    view.record_count = h->record_count;
    view.summary = std::move(h->summary);
    view.inline_records = std::move(h->inline_records);
    view.record_key_bytes = h->record_key_bytes;
  } else if (done != nullptr) {
    absl::StatusOr<CompactEntry> e =
        internal::DecodeCompact(done->value(), done->key());
    if (!e.ok()) return e.status();
    view.finished = true;
    view.summary = std::move(e->summary);
    absl::StatusOr<TxnLog> full = archive_->Get(gid);
    view.summary.compacted = !(full.ok() && full->summary.created_at_ms ==
                                                view.summary.created_at_ms);
  }
  return view;
}

absl::Status EtcdLog::Impl::Prefetch(
    const std::vector<std::string>& gids,
    const std::set<std::string>& approval_ids,
    std::map<std::string, internal::ApprovalState>& approvals) {
  std::vector<std::string> keys;  // per gid its head and done, then approvals
  for (const std::string& gid : gids) {
    const uint32_t k = ShardOfGid(gid, cluster_.shards);
    keys.push_back(keys_.Head(k, gid));
    keys.push_back(keys_.Done(k, gid));
  }
  for (const std::string& a : approval_ids) keys.push_back(keys_.Approval(a));
  std::vector<pb::TxnResponse> pages;
  std::vector<const mvccpb::KeyValue*> kvs;
  if (absl::Status s = ReadKeys(keys, pages, kvs); !s.ok()) return s;
  size_t at = 0;
  for (const std::string& gid : gids) {
    const mvccpb::KeyValue* head = kvs[at++];
    const mvccpb::KeyValue* done = kvs[at++];
    absl::StatusOr<View> view = ViewOf(gid, head, done);
    if (!view.ok()) return view.status();
    std::lock_guard<std::mutex> lock(mu_);
    views_.emplace(gid, *std::move(view));
  }
  for (const std::string& id : approval_ids) {
    internal::ApprovalState a;
    if (const mvccpb::KeyValue* kv = kvs[at++]) {
      absl::StatusOr<Approval> got = internal::DecodeApproval(kv->value());
      if (!got.ok()) return got.status();
      a.approval = *std::move(got);
      a.mod_revision = kv->mod_revision();
    }
    approvals[id] = std::move(a);
  }
  return absl::OkStatus();
}

}  // namespace tcc::wal

namespace tcc::wal {
namespace {

// The approval ids an append's records name.
void NamedApprovals(const AppendRequest& r, std::set<std::string>& out) {
  for (const Record& rec : r.records) {
    if (const auto* d = std::get_if<Decided>(&rec)) {
      if (d->approval_id.has_value()) out.insert(*d->approval_id);
    } else if (const auto* b = std::get_if<BranchResolved>(&rec)) {
      out.insert(b->approval_id);
    }
  }
}

}  // namespace

void EtcdLog::Impl::ProcessGroup(std::vector<Item>& items) {
  // 1. Which shards are ours, which views and approvals to read first. A
  // gid without a view whose first append here registers it, and which
  // ReadForCreate answered blind, is not read: it is taken as absent, and
  // the registration's compare (head and compact entry absent) refuses it,
  // ALREADY_EXISTS, if it exists after all (the caller then reads it:
  // Driver's Unblind). Most new gids are new. Any other gid is read.
  std::vector<std::string> missing;
  std::set<std::string> taken_as_absent;
  std::set<std::string> approval_ids;
  {
    std::set<std::string> seen;
    std::lock_guard<std::mutex> lock(mu_);
    for (Item& item : items) {
      if (item.approval) continue;
      const std::string& gid = item.append.gid;
      const uint32_t k = item.shard;
      if (!shards_[k].owned || shards_[k].lost) continue;  // answered below
      auto v = views_.find(gid);
      if (v == views_.end() && seen.insert(gid).second) {
        if (internal::Registers(item.append) && blind_.erase(gid) > 0) {
          taken_as_absent.insert(gid);
        } else {
          missing.push_back(gid);
        }
      }
      NamedApprovals(item.append, approval_ids);
    }
  }
  std::map<std::string, internal::ApprovalState> approvals;
  if (!missing.empty() || !approval_ids.empty()) {
    absl::Status s = NoteFatal(Prefetch(missing, approval_ids, approvals));
    if (!s.ok()) {
      if (absl::IsDataLoss(s)) {
        for (Item& item : items) Complete(item, s);
        return;
      }
      // etcd unreachable: the items wait (requeued), nothing is answered.
      int64_t backoff = options_.resend_backoff_ms * 4;
      WaitBackoff(backoff);
      if (Stopping()) {
        for (Item& item : items) Complete(item, s);
      }
      return;
    }
  }

  // 2. Check every append against its gid's view, merge by gid.
  internal::GroupTxn group(keys_, Limits());
  std::unordered_map<std::string, View>
      working;                          // views as the group leaves them
  std::set<std::string> deferred;       // gids whose later appends wait
  std::set<std::string> approval_keys;  // approvals the group writes
  std::map<std::string, std::string> approval_owner;  // id -> gid using it
  std::vector<uint64_t> epochs(cluster_.shards, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t k = 0; k < cluster_.shards; ++k) {
      epochs[k] = shards_[k].epoch;
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Item& item = items[i];
    if (!item.done) continue;
    if (item.approval) {
      const Approval& a = *item.new_approval;
      if (absl::Status s = internal::ValidateNewApproval(a); !s.ok()) {
        Complete(item, s);
        continue;
      }
      if (approval_keys.count(a.approval_id) > 0 || !group.FitsApproval(a)) {
        continue;  // next group
      }
      approval_keys.insert(a.approval_id);
      group.AddApproval(internal::NewApproval{a, i});
      continue;
    }
    const std::string& gid = item.append.gid;
    const uint32_t k = item.shard;
    absl::Status not_ours;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!shards_[k].owned || shards_[k].lost) {
        not_ours = absl::UnavailableError(
            absl::StrCat("shard ", k, " of gid ", gid,
                         shards_[k].lost ? " was lost to another node"
                                         : " is not this node's"));
      }
    }
    if (!not_ours.ok()) {
      Complete(item, not_ours);  // never under the lock: it may append
      continue;
    }
    if (deferred.count(gid) > 0) continue;
    auto w_it = working.find(gid);
    if (w_it == working.end()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto v = views_.find(gid);
      if (v != views_.end()) {
        w_it = working.emplace(gid, v->second).first;
      } else if (taken_as_absent.count(gid) > 0) {
        w_it = working.emplace(gid, View{}).first;
      } else {
        continue;  // read failed meanwhile: next group
      }
    }
    View& view = w_it->second;
    if (view.stale) {
      Complete(item, absl::AbortedError(absl::StrCat(
                         "gid ", gid,
                         ": another writer changed it since this node read "
                         "it; read it again")));
      continue;
    }
    internal::GidWrite* existing = group.Find(gid);
    if (existing != nullptr && existing->finishes) {
      deferred.insert(gid);  // finished in this group: after it, not in it
      continue;
    }
    if (view.finished) {
      // Compacted once the archive no longer has the full record.
      view.summary.compacted = !archive_->Get(gid).ok();
    }
    const TxnSummary* current =
        view.head || view.finished ? &view.summary : nullptr;
    std::vector<Approval> local_used;
    internal::ApprovalLookup lookup =
        [&](const std::string& id) -> absl::StatusOr<Approval> {
      auto a = approvals.find(id);
      if (a == approvals.end() || !a->second.approval.has_value()) {
        return absl::NotFoundError(absl::StrCat("approval ", id));
      }
      return *a->second.approval;
    };
    absl::StatusOr<internal::AppendPlan> plan =
        internal::PlanAppend(item.append, current, lookup);
    if (!plan.ok()) {
      Complete(item, plan.status());
      continue;
    }
    if (plan->registers) {
      const Registered& reg = std::get<Registered>(item.append.records[0]);
      if (reg.created_at_ms < shards_[k].horizon_ms.load()) {
        Complete(item, absl::FailedPreconditionError(absl::StrCat(
                           "gid ", gid, ": created_at ", reg.created_at_ms,
                           " is older than the deduplication horizon ",
                           shards_[k].horizon_ms.load())));
        continue;
      }
      if (window_exhausted_.load()) {
        Complete(item, absl::ResourceExhaustedError(
                           "the etcd log's size budget would cut the "
                           "deduplication window below "
                           "cluster.min_dedup_window_ms: no new "
                           "registrations until finished ones may go"));
        continue;
      }
    }
    bool approval_clash = false;
    for (const Approval& a : plan->consumed) {
      auto owner = approval_owner.find(a.approval_id);
      if (approval_keys.count(a.approval_id) > 0 ||
          (owner != approval_owner.end() && owner->second != gid)) {
        approval_clash = true;
      }
    }
    if (approval_clash) {
      deferred.insert(gid);
      continue;
    }
    const TxnSummary after = plan->summary_set ? plan->summary : view.summary;
    if (view.finished) {
      // History of a finished transaction: the archive's alone.
      absl::StatusOr<TxnLog> full = archive_->Get(gid);
      absl::Status s = full.status();
      if (full.ok()) {
        full->records.insert(full->records.end(), item.append.records.begin(),
                             item.append.records.end());
        full->summary = after;
        full->summary.compacted = false;
        s = archive_->Put(*full);
      }
      Complete(item, s);
      continue;
    }
    internal::GidWrite w;
    if (existing != nullptr) {
      w = *existing;
    } else {
      w.gid = gid;
      w.shard = k;
      w.registers = !view.head;
      w.head_mod_revision = view.head_mod_revision;
      w.first_seq = view.record_count;
      w.inline_before = view.inline_records;
      w.record_key_bytes = view.record_key_bytes;
      w.owner_epoch = epochs[k];
      w.append_id = next_append_id_.fetch_add(1);
      if (plan->registers) {
        w.created_at_ms =
            std::get<Registered>(item.append.records[0]).created_at_ms;
      }
    }
    const bool was_final = IsFinal(view.summary.state) && !w.registers;
    w.records.insert(w.records.end(), item.append.records.begin(),
                     item.append.records.end());
    w.encoded.insert(w.encoded.end(), item.encoded.begin(), item.encoded.end());
    w.summary = after;
    w.finishes = IsFinal(after.state) && !was_final;
    for (const Approval& a : plan->consumed) {
      w.consumed.emplace_back(a, approvals[a.approval_id].mod_revision);
    }
    if (w.finishes) {
      w.compact_value = internal::EncodeCompact(
          internal::CompactEntry{options_.node_id, after});
    }
    w.items.push_back(i);
    if (!group.Fits(w)) {
      if (existing == nullptr && !group.FitsAlone(w)) {
        Complete(item, absl::InvalidArgumentError(absl::StrCat(
                           "gid ", gid,
                           ": the append does not fit one etcd Txn (etcd's "
                           "--max-txn-ops ",
                           options_.max_txn_ops, ", --max-request-bytes ",
                           options_.max_request_bytes, ")")));
      } else {
        deferred.insert(gid);
      }
      continue;
    }
    for (const Approval& a : plan->consumed) {
      approvals[a.approval_id].approval = a;  // used, for later appends
      approval_owner[a.approval_id] = gid;
    }
    view.summary = after;
    view.head = true;
    view.record_count += item.append.records.size();
    group.Put(std::move(w));
  }
  // Only unfinished transactions' views are kept: an unknown gid's or a
  // finished one's is read again when needed (retention may forget it, and
  // the gid may then be registered anew).
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [gid, view] : working) {
      auto v = views_.find(gid);
      if (v != views_.end() && !v->second.head && group.Find(gid) == nullptr) {
        views_.erase(v);
      }
    }
    for (const std::string& gid : missing) {
      auto v = views_.find(gid);
      if (v != views_.end() && !v->second.head && group.Find(gid) == nullptr) {
        views_.erase(v);
      }
    }
  }
  if (group.empty()) return;

  // 3. Finishing ones registered in this group: their full record to the
  // archive now (etcd has none of it), unless the archive holds one of the
  // gid already (then the registration is most likely refused, and the
  // record is the gid's own: it goes after the commit if it commits). A
  // refused one's is erased again. The others' comes back from the
  // finishing Txn itself (its delete of their records returns them), below.
  std::set<std::string> archived_early;
  {
    std::vector<TxnLog> registered_and_finished;
    for (const auto& [gid, w] : group.writes()) {
      if (w.finishes && w.registers && !archive_->Get(gid).ok()) {
        registered_and_finished.push_back(TxnLog{w.summary, w.records});
        archived_early.insert(gid);
      }
    }
    // The archive may be lost with the node (see the header).
    (void)archive_->PutAll(registered_and_finished);
  }

  // Whether the gid's keys show that this write committed (an earlier copy
  // of the identical Txn did).
  auto ours = [&](const internal::GidWrite& w, const mvccpb::KeyValue* head,
                  const mvccpb::KeyValue* done, int64_t* mod) -> bool {
    if (head != nullptr) {
      absl::StatusOr<HeadValue> h =
          internal::DecodeHead(head->value(), head->key());
      if (h.ok() && h->owner_epoch == w.owner_epoch &&
          h->append_id == w.append_id) {
        *mod = head->mod_revision();
        return true;
      }
      return false;
    }
    if (w.finishes && done != nullptr) {
      absl::StatusOr<CompactEntry> e =
          internal::DecodeCompact(done->value(), done->key());
      return e.ok() && e->archive_node == options_.node_id &&
             e->summary.created_at_ms == w.summary.created_at_ms &&
             e->summary.content_hash == w.summary.content_hash;
    }
    return false;
  };
  // Whether the approval's key shows that this write created it.
  auto approval_ours = [](const internal::NewApproval& a,
                          const mvccpb::KeyValue* kv) {
    return kv != nullptr && kv->value() == internal::EncodeApproval(a.approval);
  };
  // 4. Send until etcd answers.
  internal::Fences fences{&epochs, keys_.QuotaProbe(options_.node_id)};
  pb::TxnRequest txn = group.Build(fences);
  int attempt = 0;
  int64_t backoff = options_.resend_backoff_ms;
  // A Txn etcd lost is sent again soon, one that is merely slow gets longer
  // each time.
  internal::SendDeadlines deadline(options_.txn_attempt_timeout_ms,
                                   options_.txn_timeout_ms);
  absl::StatusOr<pb::TxnResponse> r;
  const bool timed = options_.now_us && options_.on_sync;
  int64_t first_sent_us = timed ? options_.now_us() : 0;
  while (true) {
    txns_sent_.fetch_add(1);
    // `error`: not sent, taken as a send whose outcome is unknown (the
    // identical Txn again); `sleep`: a slow etcd.
    if (absl::Status f = failpoint::Eval("etcd_log.before_txn"); !f.ok()) {
      r = f;
    } else {
      r = options_.client->Txn(txn, deadline.ms());
    }
    NoteReachable(r.status());
    if (r.ok()) break;
    const absl::Status& e = r.status();
    // After a send whose outcome is unknown, any answer but etcd's to the
    // identical Txn leaves it unknown (that copy may still apply): sent
    // again until etcd answers it.
    if (etcd::IsUnknownOutcome(e) || attempt > 0) {
      deadline.After(e);
      if (Stopping()) {
        for (Item& item : items) {
          Complete(item, absl::UnavailableError(absl::StrCat(
                             "the etcd log closed with this append's "
                             "outcome unknown (",
                             e.message(), ")")));
        }
        return;
      }
      WaitBackoff(backoff);
      ++attempt;  // the identical Txn again
      continue;
    }
    // A definitive refusal: nothing of it was applied.
    std::vector<std::string> gids;
    for (const auto& [gid, w] : group.writes()) gids.push_back(gid);
    if (etcd::IsTooLarge(e)) txns_refused_too_large_.fetch_add(1);
    if (etcd::IsTooLarge(e) && gids.size() + group.approvals().size() > 1) {
      // Smaller, in order: the later half waits for the next group.
      for (size_t i = gids.size() / 2; i < gids.size(); ++i) {
        group.Remove(gids[i]);
      }
      if (gids.size() <= 1) {
        while (group.approvals().size() > 1) {
          group.RemoveApproval(group.approvals().size() - 1);
        }
      }
      txn = group.Build(fences);
      attempt = 0;
      if (timed) first_sent_us = options_.now_us();  // a Txn of its own
      continue;
    }
    if (etcd::IsNoSpace(e)) {
      // etcd applies the Txn whose apply crosses its quota, then answers it
      // "out of space" (others it refuses before proposing them). The
      // keys say which: applied, it is resolved as a lost answer is, by
      // the identical Txn once there is space.
      std::vector<std::string> keys;  // each write's head and done
      for (const auto& [gid, w] : group.writes()) {
        keys.push_back(keys_.Head(w.shard, gid));
        keys.push_back(keys_.Done(w.shard, gid));
      }
      for (const internal::NewApproval& a : group.approvals()) {
        keys.push_back(keys_.Approval(a.approval.approval_id));
      }
      std::vector<pb::TxnResponse> pages;
      std::vector<const mvccpb::KeyValue*> got;
      bool applied = true;  // unless the keys say otherwise
      if (ReadKeys(keys, pages, got).ok()) {
        applied = false;
        size_t i = 0;
        int64_t mod = 0;
        for (const auto& [gid, w] : group.writes()) {
          applied = applied || ours(w, got[i], got[i + 1], &mod);
          i += 2;
        }
        for (const internal::NewApproval& a : group.approvals()) {
          applied = applied || approval_ours(a, got[i]);
          ++i;
        }
      }
      if (applied) {
        ++attempt;
        WaitBackoff(backoff);
        continue;  // the identical Txn
      }
      // Registrations are refused; the rest wait for space.
      for (const std::string& gid : gids) {
        internal::GidWrite* w = group.Find(gid);
        if (!w->registers) continue;
        for (size_t item : w->items) {
          Complete(items[item],
                   absl::ResourceExhaustedError(absl::StrCat(
                       "etcd is out of space (its quota alarm is on): no new "
                       "transactions until it is freed (",
                       e.message(), ")")));
        }
        group.Remove(gid);
      }
      int64_t pause = 500;
      WaitBackoff(pause);
      return;
    }
    absl::Status fail = e;
    if (etcd::IsTooLarge(e)) {
      fail = absl::InvalidArgumentError(
          absl::StrCat("the append does not fit one etcd Txn: ", e.message()));
    }
    for (const auto& [gid, w] : group.writes()) {
      for (size_t item : w.items) Complete(items[item], fail);
    }
    for (const internal::NewApproval& a : group.approvals()) {
      Complete(items[a.item], fail);
    }
    return;
  }
  if (absl::Status s = NoteFatal(CheckHeader(cluster_, r->header())); !s.ok()) {
    for (Item& item : items) Complete(item, s);
    return;
  }
  if (timed) {
    uint64_t carried = group.approvals().size();
    for (const auto& [gid, w] : group.writes()) carried += w.items.size();
    options_.on_sync(options_.now_us() - first_sent_us, carried);
  }
  // The highest revision seen, for the restore check at the next open: a
  // synced local write, so not for every group.
  if (txns_committed_.fetch_add(1) % 256 == 0) {
    (void)archive_->RaiseMaxRevision(r->header().revision());
  }

  // 5. What each part says.
  const int64_t revision = r->header().revision();
  // A finishing gid's full record goes to the archive before its view goes
  // and its appends are answered (a Read then finds it there): one write
  // for the group's, after the answers are read. `finished_later` are the
  // finishing writes that wait for it, with their head's mod_revision.
  std::vector<TxnLog> to_archive;
  std::vector<std::pair<internal::GidWrite*, int64_t>> finished_later;
  auto apply = [&](internal::GidWrite& w, int64_t mod_revision) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (w.finishes) {
        views_.erase(w.gid);
      } else {
        View& v = views_[w.gid];
        v.head = true;
        v.finished = false;
        v.stale = false;
        v.head_mod_revision = mod_revision;
        v.record_count = w.first_seq + w.records.size();
        v.summary = w.summary;
        v.inline_records = internal::InlineAfter(w);
        v.record_key_bytes = group.RecordKeyBytesAfter(w);
      }
    }
    for (size_t item : w.items) {
      appends_committed_.fetch_add(1);
      if (items[item].append.durability == Durability::kDurable) {
        synced_appends_.fetch_add(1);
      } else {
        buffered_appends_.fetch_add(1);
      }
      Complete(items[item], absl::OkStatus());
    }
  };
  // `done`: the gid's own success answer (null when an earlier copy of the
  // Txn committed it): a finishing one's deleted records, for the archive.
  auto committed = [&](internal::GidWrite& w, int64_t mod_revision,
                       const pb::TxnResponse* done) {
    if (!w.finishes) {
      apply(w, mod_revision);
      return;
    }
    if (!w.registers) {
      // The full record: the head's inline records, what the finishing Txn
      // deleted of its record keys, then the group's. Without them (the
      // answer that carried them was lost) the archive keeps no full
      // record: Read shows the compact entry (etcd_log.h).
      TxnLog full;
      absl::Status s = DecodeInline(w.inline_before, full.records);
      if (s.ok() && internal::HasRecordKeys(w)) {
        const pb::ResponseOp* deleted =
            done == nullptr
                ? nullptr
                : &done->responses(static_cast<int>(w.consumed.size()) + 1);
        if (deleted == nullptr || !deleted->has_response_delete_range()) {
          s = absl::NotFoundError("no records");
        } else {
          for (const mvccpb::KeyValue& kv :
               deleted->response_delete_range().prev_kvs()) {
            if (s.ok()) {
              s = internal::DecodeRecordsTo(kv.value(), kv.key(), full.records);
            }
          }
        }
      }
      if (s.ok() && full.records.size() == w.first_seq) {
        full.records.insert(full.records.end(), w.records.begin(),
                            w.records.end());
        full.summary = w.summary;
        to_archive.push_back(std::move(full));
      }
    } else if (archived_early.count(w.gid) == 0) {
      to_archive.push_back(TxnLog{w.summary, w.records});
    }
    finished_later.emplace_back(&w, mod_revision);
  };
  // `head`, `done`, `horizon`: the keys as read after the refusal.
  auto refused = [&](internal::GidWrite& w, const mvccpb::KeyValue* head,
                     const mvccpb::KeyValue* done,
                     const mvccpb::KeyValue* horizon) {
    absl::Status why = absl::AbortedError(absl::StrCat(
        "gid ", w.gid,
        ": another writer changed it since this node read it; read it "
        "again"));
    if (w.registers && (head != nullptr || done != nullptr)) {
      // Registered by an earlier request or another node since this node
      // last looked (or never looked: a gid taken as absent).
      why = absl::AlreadyExistsError(
          absl::StrCat("gid ", w.gid, " is in the log already"));
    } else if (w.registers && horizon != nullptr) {
      absl::StatusOr<int64_t> h =
          internal::DecodeHorizon(horizon->value(), horizon->key());
      if (h.ok() && *h > w.created_at_ms && head == nullptr) {
        why = absl::FailedPreconditionError(
            absl::StrCat("gid ", w.gid, ": created_at ", w.created_at_ms,
                         " is older than the deduplication horizon ", *h));
        shards_[w.shard].horizon_ms =
            std::max(shards_[w.shard].horizon_ms.load(), *h);
      }
    }
    if (archived_early.count(w.gid) > 0) (void)archive_->Erase(w.gid);
    if (w.registers && taken_as_absent.count(w.gid) > 0) {
      // A blind registration (ReadForCreate): the gid's appends behind it
      // were its caller's, for the transaction it registered, which is not
      // the one in etcd. They are refused, nothing written (log.h).
      Complete(items[w.items[0]], why);
      const absl::Status behind = absl::AbortedError(absl::StrCat(
          "gid ", w.gid,
          ": planned on a registration etcd refused (the gid exists); "
          "nothing written, read it again"));
      {
        std::lock_guard<std::mutex> lock(mu_);
        views_[w.gid].stale = true;  // so are the ones queued behind
      }
      for (size_t i = 1; i < w.items.size(); ++i) {
        Complete(items[w.items[i]], behind);
      }
      return;
    }
    if (w.registers) {
      // Only the registration (the write's first append) is answered
      // `why`: the gid's appends merged behind it are judged again, next
      // group, against the keys just read, as the other logs judge them.
      Complete(items[w.items[0]], why);
      absl::StatusOr<View> view = ViewOf(w.gid, head, done);
      std::lock_guard<std::mutex> lock(mu_);
      if (!view.ok()) {
        views_[w.gid].stale = true;  // read again before any other append
      } else if (view->head || w.items.size() > 1) {
        views_[w.gid] = *std::move(view);  // for the appends judged again
      } else {
        views_.erase(w.gid);  // only unfinished gids' views are kept
      }
      return;
    }
    if (absl::IsAborted(why)) {
      std::lock_guard<std::mutex> lock(mu_);
      views_[w.gid].stale = true;
    }
    for (size_t item : w.items) Complete(items[item], why);
  };
  int op = 0;
  // Gids whose own compares failed. A gid's Txn has no failure ops (they
  // would be in every Txn, decoded and stored by every member, for a rare
  // refusal): their keys are read once the group's answer is in.
  std::vector<internal::GidWrite*> failed;
  for (const auto& [shard, gids] : group.shards()) {
    const pb::TxnResponse& st = r->responses(op++).response_txn();
    if (st.succeeded()) {
      for (int j = 0; j < static_cast<int>(gids.size()); ++j) {
        internal::GidWrite& w = *group.Find(gids[j]);
        if (st.responses(j).response_txn().succeeded()) {
          committed(w, revision, &st.responses(j).response_txn());
        } else {
          failed.push_back(&w);
        }
      }
      continue;
    }
    // The fence was refused: the shard is another node's now. An earlier
    // copy of this Txn may have committed before it was: read the keys.
    const mvccpb::KeyValue* owner = FirstKv(st.responses(0));
    std::string who = owner == nullptr ? "nobody" : owner->value();
    std::replace(who.begin(), who.end(), '\n', ' ');
    fenced_writes_refused_.fetch_add(1);
    const absl::Status lost = absl::UnavailableError(
        absl::StrCat("shard ", shard, " was lost (its owner is now ", who,
                     "): nothing more is written for it"));
    // Heard of before its appends are answered (etcd_log.h).
    LoseShard(shard, epochs[shard], lost);
    for (const std::string& gid : gids) {
      internal::GidWrite& w = *group.Find(gid);
      if (attempt > 0) {
        pb::TxnRequest read;
        AddRange(read, true, keys_.Head(w.shard, w.gid));
        AddRange(read, true, keys_.Done(w.shard, w.gid));
        absl::StatusOr<pb::TxnResponse> got = ReadTxn(read);
        int64_t mod = 0;
        if (got.ok() && ours(w, FirstKv(got->responses(0)),
                             FirstKv(got->responses(1)), &mod)) {
          committed(w, mod, nullptr);
          continue;
        }
        // The new owner may have written the gid since: whether an earlier
        // copy of ours committed is unknown here (the new owner read it at
        // its epoch if it did). UNAVAILABLE either way: the caller retries
        // at the new owner, which answers from what etcd holds.
        const absl::Status unknown = absl::UnavailableError(absl::StrCat(
            lost.message(),
            "; an earlier copy of this append may have committed before the "
            "shard moved (the new owner has it then)"));
        for (size_t item : w.items) Complete(items[item], unknown);
        continue;
      }
      for (size_t item : w.items) Complete(items[item], lost);
    }
  }
  if (!failed.empty()) {
    // Why each failed: its head, compact entry and horizon now. Only this
    // node writes its shards' gids (the fence), so they are as the refusal
    // left them, but for this node's retention, which may since have
    // forgotten a compact entry and raised the horizon past it (the
    // registration is then refused as too old instead of as a duplicate).
    // After a resend, the keys also say whether an earlier copy of the
    // Txn committed the gid (outcome unknown until then: read until etcd
    // answers).
    std::vector<std::string> keys;  // per gid its head, done and horizon
    for (const internal::GidWrite* w : failed) {
      keys.push_back(keys_.Head(w->shard, w->gid));
      keys.push_back(keys_.Done(w->shard, w->gid));
      keys.push_back(keys_.Horizon(w->shard));
    }
    std::vector<pb::TxnResponse> pages;
    std::vector<const mvccpb::KeyValue*> got;
    int64_t read_backoff = options_.resend_backoff_ms;
    absl::Status read;
    while (true) {
      read = NoteFatal(ReadKeys(keys, pages, got));
      if (read.ok() || absl::IsDataLoss(read) || Stopping()) break;
      WaitBackoff(read_backoff);
    }
    if (!read.ok()) {
      for (const internal::GidWrite* w : failed) {
        for (size_t item : w->items) {
          Complete(items[item],
                   absl::UnavailableError(absl::StrCat(
                       "the etcd log closed before it could read why etcd "
                       "refused this append (",
                       read.message(), ")")));
        }
      }
      failed.clear();
    }
    for (size_t i = 0; i < failed.size(); ++i) {
      internal::GidWrite& w = *failed[i];
      int64_t mod = 0;
      if (attempt > 0 && ours(w, got[i * 3], got[i * 3 + 1], &mod)) {
        committed(w, mod, nullptr);
      } else {
        refused(w, got[i * 3], got[i * 3 + 1], got[i * 3 + 2]);
      }
    }
  }
  if (!to_archive.empty()) {
    // A test stalls here to read a gid etcd has finished and the archive
    // has not yet got.
    (void)failpoint::Eval("etcd_log.before_archive");
  }
  (void)archive_->PutAll(to_archive);  // may be lost with the node
  for (auto& [w, mod] : finished_later) apply(*w, mod);
  for (const internal::NewApproval& a : group.approvals()) {
    const pb::TxnResponse& at = r->responses(op++).response_txn();
    if (at.succeeded()) {
      Complete(items[a.item], absl::OkStatus());
      continue;
    }
    const mvccpb::KeyValue* kv = FirstKv(at.responses(0));
    if (attempt > 0 && approval_ours(a, kv)) {
      Complete(items[a.item], absl::OkStatus());
      continue;
    }
    Complete(items[a.item],
             absl::AlreadyExistsError(absl::StrCat(
                 "approval ", a.approval.approval_id, " exists already")));
  }
}

// --- Retention ---

absl::Status EtcdLog::Impl::RunRetention(int64_t now_ms) {
  const RetentionPolicy& policy = options_.retention;
  struct Entry {
    std::string gid;
    TxnSummary summary;
    size_t bytes = 0;
  };
  // The archive's full records go when due (as DueStep says: at
  // full_record_ms, or when the compact entry goes), whatever shard they are
  // of: a node that lost a shard would otherwise keep its records for ever
  // (the walk of compact entries below is of the shards it owns). Local
  // only, so it runs while etcd does not answer too; the archive may be lost
  // with the node, so its failure holds up nothing below (it is returned
  // after them).
  absl::Status archive_status =
      archive_
          ->EraseFinishedBefore(
              now_ms -
              std::min(policy.full_record_ms, policy.compact_entry_ms) + 1)
          .status();
  bool exhausted = false;
  for (uint32_t k = 0; k < cluster_.shards; ++k) {
    uint64_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!shards_[k].owned || shards_[k].lost) continue;
      epoch = shards_[k].epoch;
    }
    std::vector<Entry> entries;
    size_t bytes = 0;
    absl::Status s = RangeAll(
        read_range_, keys_.DonePrefix(k), PrefixEnd(keys_.DonePrefix(k)), 0,
        [&](const mvccpb::KeyValue& kv) -> absl::Status {
          absl::StatusOr<CompactEntry> e =
              internal::DecodeCompact(kv.value(), kv.key());
          if (!e.ok()) return e.status();
          Entry entry{e->summary.gid, std::move(e->summary),
                      kv.key().size() + kv.value().size()};
          bytes += entry.bytes;
          entries.push_back(std::move(entry));
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    if (policy.max_bytes != 0) {
      s = RangeAll(read_range_, keys_.HeadPrefix(k),
                   PrefixEnd(keys_.HeadPrefix(k)), 0,
                   [&](const mvccpb::KeyValue& kv) {
                     bytes += kv.key().size() + kv.value().size();
                     return absl::OkStatus();
                   });
      if (!s.ok()) return s;
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) {
                return a.summary.finished_at_ms < b.summary.finished_at_ms;
              });
    std::vector<const Entry*> forget;
    for (const Entry& e : entries) {
      // A compaction that is due (the full record's time is up) was done by
      // EraseFinishedBefore above: nothing is looked up here.
      switch (internal::DueStep(e.summary, policy, now_ms)) {
        case internal::RetentionStep::kForget:
          forget.push_back(&e);
          bytes -= e.bytes;
          break;
        case internal::RetentionStep::kCompact:
        case internal::RetentionStep::kKeep:
          break;
      }
    }
    // The size budget: the oldest finished go first, never one younger than
    // the minimum window.
    if (policy.max_bytes != 0) {
      for (const Entry& e : entries) {
        if (bytes <= policy.max_bytes) break;
        if (std::find(forget.begin(), forget.end(), &e) != forget.end()) {
          continue;
        }
        if (now_ms - e.summary.finished_at_ms < options_.min_dedup_window_ms) {
          exhausted = true;
          break;
        }
        forget.push_back(&e);
        bytes -= e.bytes;
      }
    }
    // Forgotten: one fenced Txn per batch deletes the compact entries and
    // raises the horizon past their created_at.
    const size_t per_txn = std::max<size_t>(1, options_.max_txn_ops - 4);
    for (size_t from = 0; from < forget.size(); from += per_txn) {
      const size_t to = std::min(forget.size(), from + per_txn);
      int64_t horizon = shards_[k].horizon_ms.load();
      pb::TxnRequest txn;
      internal::AddShardFence(txn, keys_, k, epoch);
      for (size_t i = from; i < to; ++i) {
        const TxnSummary& sm = forget[i]->summary;
        horizon = std::max(horizon, sm.created_at_ms == INT64_MAX
                                        ? sm.created_at_ms
                                        : sm.created_at_ms + 1);
        txn.add_success()->mutable_request_delete_range()->set_key(
            keys_.Done(k, forget[i]->gid));
      }
      pb::PutRequest* put = txn.add_success()->mutable_request_put();
      put->set_key(keys_.Horizon(k));
      put->set_value(internal::EncodeHorizon(horizon));
      // Safe to send again as it is: deletes, and a horizon that only grows.
      absl::StatusOr<pb::TxnResponse> r = SendUntilAnswered(txn);
      if (!r.ok()) return r.status();
      if (!r->succeeded()) {
        fenced_writes_refused_.fetch_add(1);
        const absl::Status lost = absl::UnavailableError(
            absl::StrCat("shard ", k, " was lost (retention's fence)"));
        LoseShard(k, epoch, lost);
        break;
      }
      shards_[k].horizon_ms = std::max(shards_[k].horizon_ms.load(), horizon);
      for (size_t i = from; i < to; ++i) {
        (void)archive_->Erase(forget[i]->gid);
      }
    }
  }
  window_exhausted_ = exhausted;
  return archive_status;
}

LogStats EtcdLog::Impl::Stats() const {
  LogStats stats;
  stats.bytes_on_disk = archive_->BytesOnDisk();
  stats.syncs = txns_committed_.load();
  stats.synced_appends = synced_appends_.load();
  stats.buffered_appends = buffered_appends_.load();
  for (uint32_t k = 0; k < cluster_.shards; ++k) {
    stats.dedup_horizon_ms =
        std::max(stats.dedup_horizon_ms, shards_[k].horizon_ms.load());
  }
  // This node's unfinished transactions: the heads of the shards it owns
  // (tccd resets its in-flight count, limits.max_in_flight, from this; the
  // nodes' figures add up to the cluster's). One Txn of count-only ranges;
  // a gauge, so asked with the short deadline (a read lost with etcd's
  // leader would hold the caller, a pool thread, for the whole call
  // timeout), and the last count stands when etcd does not answer.
  std::vector<uint32_t> owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t k = 0; k < cluster_.shards; ++k) {
      if (shards_[k].owned && !shards_[k].lost) owned.push_back(k);
    }
  }
  uint64_t unfinished = 0;
  bool counted = true;
  const size_t per_txn = std::max<size_t>(1, options_.max_txn_ops - 1);
  for (size_t from = 0; from < owned.size() && counted; from += per_txn) {
    const size_t to = std::min(owned.size(), from + per_txn);
    pb::TxnRequest txn;
    for (size_t i = from; i < to; ++i) {
      pb::RangeRequest* r = txn.add_success()->mutable_request_range();
      r->set_key(keys_.HeadPrefix(owned[i]));
      r->set_range_end(PrefixEnd(keys_.HeadPrefix(owned[i])));
      r->set_count_only(true);
    }
    absl::StatusOr<pb::TxnResponse> r =
        options_.client->Txn(txn, options_.txn_attempt_timeout_ms);
    counted = r.ok();
    if (!counted) break;
    for (const pb::ResponseOp& op : r->responses()) {
      unfinished += static_cast<uint64_t>(op.response_range().count());
    }
  }
  if (counted) last_unfinished_.store(unfinished);
  stats.unfinished = last_unfinished_.load();
  return stats;
}

// --- EtcdLog ---

absl::StatusOr<std::unique_ptr<EtcdLog>> EtcdLog::Open(EtcdLogOptions options) {
  if (options.client == nullptr) {
    return absl::InvalidArgumentError("the etcd log needs a client");
  }
  if (options.key_prefix.empty() || options.key_prefix.back() != '/') {
    return absl::InvalidArgumentError("cluster.key_prefix must end with '/'");
  }
  if (options.node_id.empty()) {
    return absl::InvalidArgumentError("cluster.node_id is required");
  }
  if (options.max_txn_ops < 16) {
    return absl::InvalidArgumentError("max_txn_ops must be at least 16");
  }
  if (options.txn_timeout_ms <= 0 || options.txn_attempt_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        "txn_timeout_ms and txn_attempt_timeout_ms must be positive");
  }
  absl::StatusOr<ClusterInfo> cluster =
      ReadCluster(*options.client, options.key_prefix);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<Archive>> archive =
      Archive::Open(options.archive_dir, options.info_log);
  if (!archive.ok()) return archive.status();
  absl::StatusOr<int64_t> seen = (*archive)->MaxRevision();
  if (!seen.ok()) return seen.status();
  absl::StatusOr<pb::StatusResponse> status = options.client->Status();
  if (!status.ok()) return status.status();
  if (status->header().revision() < *seen) {
    return absl::DataLossError(absl::StrCat(
        "etcd's revision ", status->header().revision(),
        " is below the revision ", *seen,
        " this node saw: etcd was restored from a snapshot; tccd refuses it"));
  }
  auto impl =
      std::make_unique<Impl>(std::move(options), *cluster, *std::move(archive));
  impl->NoteReachable(absl::OkStatus());  // it answered the calls above
  impl->Start();
  return std::unique_ptr<EtcdLog>(new EtcdLog(std::move(impl)));
}

EtcdLog::EtcdLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdLog::~EtcdLog() = default;

void EtcdLog::Append(AppendRequest request, AppendDone done) {
  Impl::Item item;
  item.shard = ShardOfGid(request.gid, impl_->cluster().shards);
  item.encoded.reserve(request.records.size());
  for (const Record& r : request.records) {
    item.encoded.push_back(internal::EncodeRecord(r));
  }
  item.append = std::move(request);
  if (impl_->Hold(item)) {
    done(absl::OkStatus());
    return;
  }
  item.done = std::move(done);
  impl_->Enqueue(std::move(item));
}

void EtcdLog::PutApproval(Approval approval, AppendDone done) {
  Impl::Item item;
  item.approval = true;
  item.new_approval = std::make_unique<Approval>(std::move(approval));
  item.done = std::move(done);
  impl_->Enqueue(std::move(item));
}

absl::StatusOr<TxnLog> EtcdLog::ReadForCreate(std::string_view gid,
                                              bool* blind) {
  return impl_->ReadForCreate(gid, blind);
}
absl::StatusOr<TxnLog> EtcdLog::Read(std::string_view gid) {
  return impl_->Read(gid);
}
absl::StatusOr<Approval> EtcdLog::ReadApproval(std::string_view id) {
  return impl_->ReadApproval(id);
}
absl::StatusOr<ListPage> EtcdLog::List(const ListQuery& query) {
  return impl_->List(query);
}
uint32_t EtcdLog::shard_count() const { return impl_->cluster().shards; }
absl::Status EtcdLog::ScanUnfinished(
    uint32_t shard, const std::function<absl::Status(TxnLog)>& visit) {
  return impl_->ScanUnfinished(shard, visit);
}
absl::StatusOr<uint64_t> EtcdLog::TakeOwnerEpoch(uint32_t shard) {
  return impl_->TakeOwnerEpoch(shard);
}
void EtcdLog::SetShardLostHandler(ShardLostFn lost) {
  impl_->SetShardLostHandler(std::move(lost));
}
absl::Status EtcdLog::RunRetention(int64_t now_ms) {
  return impl_->RunRetention(now_ms);
}
int64_t EtcdLog::DedupHorizonMs(uint32_t shard) const {
  return impl_->Horizon(shard);
}
LogStats EtcdLog::Stats() const { return impl_->Stats(); }
void EtcdLog::SetLease(int64_t lease_id) { impl_->SetLease(lease_id); }

absl::Status EtcdLog::ReleaseShard(uint32_t shard, uint64_t epoch) {
  return impl_->ReleaseShard(shard, epoch);
}
bool EtcdLog::Owns(uint32_t shard) const { return impl_->Owns(shard); }
absl::Status EtcdLog::failure() const { return impl_->failure(); }
const ClusterInfo& EtcdLog::cluster() const { return impl_->cluster(); }
uint64_t EtcdLog::txns_sent() const { return impl_->txns_sent(); }
uint64_t EtcdLog::txns_refused_too_large() const {
  return impl_->txns_refused_too_large();
}
uint64_t EtcdLog::appends_committed() const {
  return impl_->appends_committed();
}
uint64_t EtcdLog::appends_held() const { return impl_->appends_held(); }
uint64_t EtcdLog::fenced_writes_refused() const {
  return impl_->fenced_writes_refused();
}
double EtcdLog::MeanAppendsPerTxn() const { return impl_->MeanAppendsPerTxn(); }

}  // namespace tcc::wal
