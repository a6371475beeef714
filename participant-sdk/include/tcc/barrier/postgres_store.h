// PostgresBarrierStore: a BarrierStore in PostgreSQL (libpqxx 6.4), next to
// the business tables most participants already have.
//
// Schema (created by Open(), idempotently: CREATE ... IF NOT EXISTS under an
// advisory lock, so several processes may migrate at once), in the schema
// `options.schema`:
//
//   tcc_barrier (gid TEXT, created_at_ms BIGINT, branch_id TEXT,   -- the key
//                try_state SMALLINT,          -- TryState; 0 = placeholder row
//                branch_hash BYTEA, try_message TEXT,
//                phase_two_state SMALLINT,    -- PhaseTwoState
//                phase_two_outcome SMALLINT,  -- Outcome (stored answer)
//                phase_two_message TEXT,
//                try_deadline_ms BIGINT, phase_two_at_ms BIGINT,
//                PRIMARY KEY (gid, created_at_ms, branch_id))
//   tcc_kv      (k BYTEA PRIMARY KEY, v BYTEA)  -- LocalTxn's key-value data
//
// Locking: LockBarrier inserts a placeholder row (ON CONFLICT DO NOTHING)
// and then takes the row with SELECT ... FOR UPDATE, so a Cancel racing a
// slow Try waits for it (on the unique index or the row lock) instead of
// deadlocking or missing it. Placeholders never commit: a transaction that
// locked a key without writing a record deletes its placeholder at commit,
// and readers ignore placeholders. Every transaction sets `lock_timeout`; a
// lock wait that times out, a deadlock, a serialization failure or a broken
// connection is UNAVAILABLE, and the transaction is rolled back.
//
// Durability: every connection runs with synchronous_commit = on, so Commit()
// returns after the commit is flushed.
//
// Business code reaches the SQL transaction with
//   txn.As<PostgresTxn>()->work()
// and must not commit or abort it; pqxx exceptions it throws are caught by
// the barrier (the call answers UNAVAILABLE and everything rolls back).
//
// Thread-safe: connections come from an internal pool (one per concurrent
// transaction, opened on demand).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <pqxx/connection>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "tcc/barrier/barrier_store.h"

namespace tcc::barrier {

class PostgresTxn : public LocalTxn {
 public:
  virtual pqxx::work& work() = 0;
  // The schema the store's tables live in (already a safe identifier).
  virtual const std::string& schema() const = 0;
};

class PostgresBarrierStore final : public BarrierStore {
 public:
  struct Options {
    // libpq connection URL, e.g. postgresql://tcc@127.0.0.1:5432/tcc
    std::string url;
    // [a-z_][a-z0-9_]*, at most 63 bytes.
    std::string schema = "tcc";
    std::chrono::milliseconds lock_timeout{2000};
  };

  // Connects, checks the schema name, and migrates.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PostgresBarrierStore>>
  Open(Options options);
  ~PostgresBarrierStore() override;

  absl::StatusOr<std::unique_ptr<LocalTxn>> Begin() override;
  absl::StatusOr<std::optional<BarrierRecord>> ReadBarrier(
      const BranchKey& key) override;
  absl::Status ScanBarrier(
      const std::function<void(const BranchKey&, const BarrierRecord&)>& visit)
      override;

  const Options& options() const { return options_; }

 private:
  class Txn;
  explicit PostgresBarrierStore(Options options)
      : options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<pqxx::connection>> Acquire();
  void Release(std::unique_ptr<pqxx::connection> conn);

  Options options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
};

}  // namespace tcc::barrier
