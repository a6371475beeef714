#include "tcc/barrier/postgres_store.h"

#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/result>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tcc::barrier {
namespace {

std::string Hex(std::string_view bytes) {
  return absl::BytesToHexString(absl::string_view(bytes.data(), bytes.size()));
}
std::string Unhex(const std::string& hex) {
  return absl::HexStringToBytes(hex);
}

bool IsSafeSchema(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z'))) return false;
  for (char c : s) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
      return false;
    }
  }
  return true;
}

// Runs `fn`, turning every libpqxx exception into a status: lock waits,
// deadlocks, serialization failures, lost connections and commits in doubt
// are UNAVAILABLE (transient, retry with the same key).
template <class Fn>
auto Guard(std::string_view what, Fn&& fn) -> decltype(fn()) {
  auto msg = [&](const char* e) {
    return absl::StrCat("postgres ", std::string(what), ": ", e);
  };
  try {
    return fn();
  } catch (const pqxx::in_doubt_error& e) {
    return absl::UnavailableError(msg(e.what()));
  } catch (const pqxx::transaction_rollback& e) {
    return absl::UnavailableError(msg(e.what()));
  } catch (const pqxx::broken_connection& e) {
    return absl::UnavailableError(msg(e.what()));
  } catch (const pqxx::sql_error& e) {
    const std::string& state = e.sqlstate();
    // 55P03 lock_not_available, 57014 query_canceled, 40xxx rollbacks,
    // 08xxx connection exceptions, 53xxx insufficient resources.
    if (state == "55P03" || state == "57014" || state.rfind("40", 0) == 0 ||
        state.rfind("08", 0) == 0 || state.rfind("53", 0) == 0) {
      return absl::UnavailableError(msg(e.what()));
    }
    return absl::InternalError(msg(e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(msg(e.what()));
  }
}

BarrierRecord RecordFromRow(const pqxx::row& row) {
  BarrierRecord rec;
  rec.try_state = static_cast<TryState>(row[0].as<int>());
  rec.branch_hash = Unhex(row[1].as<std::string>());
  rec.try_message = row[2].as<std::string>();
  rec.phase_two = static_cast<PhaseTwoState>(row[3].as<int>());
  rec.phase_two_outcome = static_cast<Outcome>(row[4].as<int>());
  rec.phase_two_message = row[5].as<std::string>();
  rec.try_deadline_ms = row[6].as<int64_t>();
  rec.phase_two_at_ms = row[7].as<int64_t>();
  return rec;
}

constexpr char kRecordColumns[] =
    "try_state, encode(branch_hash, 'hex'), try_message, phase_two_state, "
    "phase_two_outcome, phase_two_message, try_deadline_ms, phase_two_at_ms";

}  // namespace

class PostgresBarrierStore::Txn final : public PostgresTxn {
 public:
  Txn(PostgresBarrierStore& store, std::unique_ptr<pqxx::connection> conn)
      : store_(store), conn_(std::move(conn)) {}
  ~Txn() override {
    work_.reset();  // aborts when not committed
    store_.Release(std::move(conn_));
  }

  absl::Status Start() {
    return Guard("begin", [&]() -> absl::Status {
      work_ = std::make_unique<pqxx::work>(*conn_);
      // synchronous_commit per transaction, not only per connection:
      // libpqxx quietly reconnects a connection that broke while idle, and
      // the new session has the server's default (maybe off), not what
      // Acquire set. One round trip for both settings.
      work_->exec(absl::StrCat("SET LOCAL lock_timeout = '",
                               store_.options_.lock_timeout.count(),
                               "ms'; SET LOCAL synchronous_commit = on"));
      return absl::OkStatus();
    });
  }

  pqxx::work& work() override { return *work_; }
  const std::string& schema() const override { return store_.options_.schema; }

  absl::StatusOr<std::optional<BarrierRecord>> LockBarrier(
      const BranchKey& key) override {
    return Guard("lock barrier record",
                 [&]() -> absl::StatusOr<std::optional<BarrierRecord>> {
                   const std::string& s = schema();
                   // The row we conflicted with can be deleted (retention)
                   // while we wait for its lock: READ COMMITTED then skips
                   // it and we would hold no lock at all. Insert again: a
                   // placeholder of ours now, or whoever's row came since.
                   for (int attempt = 0; attempt < 8; ++attempt) {
                     pqxx::result inserted = work_->exec_params(
                         absl::StrCat("INSERT INTO ", s,
                                      ".tcc_barrier (gid, created_at_ms, "
                                      "branch_id, try_state, branch_hash) "
                                      "VALUES ($1, $2, $3, 0, '') "
                                      "ON CONFLICT DO NOTHING"),
                         key.gid, key.created_at_ms, key.branch_id);
                     if (inserted.affected_rows() > 0) {
                       placeholders_.insert(key);
                     }
                     pqxx::result r = work_->exec_params(
                         absl::StrCat("SELECT ", kRecordColumns, " FROM ", s,
                                      ".tcc_barrier WHERE gid = $1 AND "
                                      "created_at_ms = $2 AND branch_id = $3 "
                                      "FOR UPDATE"),
                         key.gid, key.created_at_ms, key.branch_id);
                     if (r.empty()) continue;  // deleted under us
                     if (r[0][0].as<int>() == 0) {
                       return std::optional<BarrierRecord>();
                     }
                     return std::optional<BarrierRecord>(RecordFromRow(r[0]));
                   }
                   return absl::UnavailableError(
                       "the barrier row kept being deleted while this call "
                       "waited for its lock");
                 });
  }

  absl::Status PutBarrier(const BranchKey& key,
                          const BarrierRecord& rec) override {
    return Guard("put barrier record", [&]() -> absl::Status {
      work_->exec_params(
          absl::StrCat(
              "INSERT INTO ", schema(),
              ".tcc_barrier (gid, created_at_ms, branch_id, try_state, "
              "branch_hash, try_message, phase_two_state, phase_two_outcome, "
              "phase_two_message, try_deadline_ms, phase_two_at_ms) VALUES "
              "($1, $2, $3, $4, decode($5, 'hex'), $6, $7, $8, $9, $10, $11) "
              "ON CONFLICT (gid, created_at_ms, branch_id) DO UPDATE SET "
              "try_state = EXCLUDED.try_state, "
              "branch_hash = EXCLUDED.branch_hash, "
              "try_message = EXCLUDED.try_message, "
              "phase_two_state = EXCLUDED.phase_two_state, "
              "phase_two_outcome = EXCLUDED.phase_two_outcome, "
              "phase_two_message = EXCLUDED.phase_two_message, "
              "try_deadline_ms = EXCLUDED.try_deadline_ms, "
              "phase_two_at_ms = EXCLUDED.phase_two_at_ms"),
          key.gid, key.created_at_ms, key.branch_id,
          static_cast<int>(rec.try_state), Hex(rec.branch_hash),
          rec.try_message, static_cast<int>(rec.phase_two),
          static_cast<int>(rec.phase_two_outcome), rec.phase_two_message,
          rec.try_deadline_ms, rec.phase_two_at_ms);
      placeholders_.erase(key);
      return absl::OkStatus();
    });
  }

  absl::Status DeleteBarrier(const BranchKey& key) override {
    return Guard("delete barrier record", [&]() -> absl::Status {
      DeleteRow(key);
      placeholders_.erase(key);
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::optional<std::string>> GetForUpdate(
      std::string_view key) override {
    return ReadKv(key, " FOR UPDATE");
  }
  absl::StatusOr<std::optional<std::string>> Get(
      std::string_view key) override {
    return ReadKv(key, "");
  }
  absl::Status Put(std::string_view key, std::string_view value) override {
    return Guard("put", [&]() -> absl::Status {
      work_->exec_params(
          absl::StrCat("INSERT INTO ", schema(),
                       ".tcc_kv (k, v) VALUES (decode($1, 'hex'), "
                       "decode($2, 'hex')) ON CONFLICT (k) DO UPDATE SET "
                       "v = EXCLUDED.v"),
          Hex(key), Hex(value));
      return absl::OkStatus();
    });
  }
  absl::Status Delete(std::string_view key) override {
    return Guard("delete", [&]() -> absl::Status {
      work_->exec_params(absl::StrCat("DELETE FROM ", schema(),
                                      ".tcc_kv WHERE k = decode($1, 'hex')"),
                         Hex(key));
      return absl::OkStatus();
    });
  }

  absl::Status SetSavePoint() override {
    return Guard("savepoint", [&]() -> absl::Status {
      work_->exec("SAVEPOINT tcc_handler");
      return absl::OkStatus();
    });
  }
  absl::Status RollbackToSavePoint() override {
    return Guard("rollback to savepoint", [&]() -> absl::Status {
      work_->exec("ROLLBACK TO SAVEPOINT tcc_handler");
      return absl::OkStatus();
    });
  }

  absl::Status Commit() override {
    return Guard("commit", [&]() -> absl::Status {
      for (const BranchKey& key : placeholders_) DeleteRow(key);
      placeholders_.clear();
      work_->commit();
      return absl::OkStatus();
    });
  }

 private:
  void DeleteRow(const BranchKey& key) {
    work_->exec_params(
        absl::StrCat("DELETE FROM ", schema(),
                     ".tcc_barrier WHERE gid = $1 AND created_at_ms = $2 AND "
                     "branch_id = $3"),
        key.gid, key.created_at_ms, key.branch_id);
  }

  absl::StatusOr<std::optional<std::string>> ReadKv(std::string_view key,
                                                    const char* suffix) {
    return Guard("get", [&]() -> absl::StatusOr<std::optional<std::string>> {
      pqxx::result r = work_->exec_params(
          absl::StrCat("SELECT encode(v, 'hex') FROM ", schema(),
                       ".tcc_kv WHERE k = decode($1, 'hex')", suffix),
          Hex(key));
      if (r.empty()) return std::optional<std::string>();
      return std::optional<std::string>(Unhex(r[0][0].as<std::string>()));
    });
  }

  PostgresBarrierStore& store_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<pqxx::work> work_;
  std::set<BranchKey> placeholders_;
};

absl::StatusOr<std::unique_ptr<PostgresBarrierStore>>
PostgresBarrierStore::Open(Options options) {
  if (!IsSafeSchema(options.schema)) {
    return absl::InvalidArgumentError(
        absl::StrCat("postgres schema '", options.schema,
                     "': expected [a-z_][a-z0-9_]*, at most 63 bytes"));
  }
  std::unique_ptr<PostgresBarrierStore> store(
      new PostgresBarrierStore(std::move(options)));
  absl::StatusOr<std::unique_ptr<pqxx::connection>> conn = store->Acquire();
  if (!conn.ok()) return conn.status();
  const std::string& s = store->options_.schema;
  absl::Status migrated = Guard("migrate", [&]() -> absl::Status {
    pqxx::work w(**conn);
    w.exec("SELECT pg_advisory_xact_lock(hashtext('tcc_barrier_migration'))");
    w.exec(absl::StrCat("CREATE SCHEMA IF NOT EXISTS ", s));
    w.exec(absl::StrCat("CREATE TABLE IF NOT EXISTS ", s,
                        ".tcc_barrier ("
                        "gid TEXT NOT NULL, "
                        "created_at_ms BIGINT NOT NULL, "
                        "branch_id TEXT NOT NULL, "
                        "try_state SMALLINT NOT NULL, "
                        "branch_hash BYTEA NOT NULL, "
                        "try_message TEXT NOT NULL DEFAULT '', "
                        "phase_two_state SMALLINT NOT NULL DEFAULT 0, "
                        "phase_two_outcome SMALLINT NOT NULL DEFAULT 0, "
                        "phase_two_message TEXT NOT NULL DEFAULT '', "
                        "try_deadline_ms BIGINT NOT NULL DEFAULT 0, "
                        "phase_two_at_ms BIGINT NOT NULL DEFAULT 0, "
                        "PRIMARY KEY (gid, created_at_ms, branch_id))"));
    w.exec(absl::StrCat("CREATE TABLE IF NOT EXISTS ", s,
                        ".tcc_kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL)"));
    w.commit();
    return absl::OkStatus();
  });
  if (!migrated.ok()) return migrated;
  store->Release(std::move(*conn));
  return store;
}

PostgresBarrierStore::~PostgresBarrierStore() = default;

absl::StatusOr<std::unique_ptr<pqxx::connection>>
PostgresBarrierStore::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<pqxx::connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
  }
  return Guard("connect",
               [&]() -> absl::StatusOr<std::unique_ptr<pqxx::connection>> {
                 auto conn = std::make_unique<pqxx::connection>(options_.url);
                 pqxx::nontransaction n(*conn);
                 n.exec("SET synchronous_commit = on");
                 return conn;
               });
}

void PostgresBarrierStore::Release(std::unique_ptr<pqxx::connection> conn) {
  if (conn == nullptr || !conn->is_open()) return;
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(conn));
}

absl::StatusOr<std::unique_ptr<LocalTxn>> PostgresBarrierStore::Begin() {
  absl::StatusOr<std::unique_ptr<pqxx::connection>> conn = Acquire();
  if (!conn.ok()) return conn.status();
  auto txn = std::make_unique<Txn>(*this, std::move(*conn));
  if (absl::Status s = txn->Start(); !s.ok()) return s;
  return std::unique_ptr<LocalTxn>(std::move(txn));
}

absl::StatusOr<std::optional<BarrierRecord>> PostgresBarrierStore::ReadBarrier(
    const BranchKey& key) {
  absl::StatusOr<std::unique_ptr<pqxx::connection>> conn = Acquire();
  if (!conn.ok()) return conn.status();
  auto result = Guard(
      "read barrier record",
      [&]() -> absl::StatusOr<std::optional<BarrierRecord>> {
        pqxx::nontransaction n(**conn);
        pqxx::result r = n.exec_params(
            absl::StrCat("SELECT ", kRecordColumns, " FROM ", options_.schema,
                         ".tcc_barrier WHERE gid = $1 AND "
                         "created_at_ms = $2 AND "
                         "branch_id = $3 AND try_state <> 0"),
            key.gid, key.created_at_ms, key.branch_id);
        if (r.empty()) return std::optional<BarrierRecord>();
        return std::optional<BarrierRecord>(RecordFromRow(r[0]));
      });
  Release(std::move(*conn));
  return result;
}

absl::Status PostgresBarrierStore::ScanBarrier(
    const std::function<void(const BranchKey&, const BarrierRecord&)>& visit) {
  absl::StatusOr<std::unique_ptr<pqxx::connection>> conn = Acquire();
  if (!conn.ok()) return conn.status();
  absl::Status result = Guard("scan barrier", [&]() -> absl::Status {
    pqxx::nontransaction n(**conn);
    pqxx::result r = n.exec(absl::StrCat(
        "SELECT ", kRecordColumns, ", gid, created_at_ms, branch_id FROM ",
        options_.schema, ".tcc_barrier WHERE try_state <> 0"));
    for (const pqxx::row& row : r) {
      BranchKey key{row[8].as<std::string>(), row[9].as<int64_t>(),
                    row[10].as<std::string>()};
      visit(key, RecordFromRow(row));
    }
    return absl::OkStatus();
  });
  Release(std::move(*conn));
  return result;
}

}  // namespace tcc::barrier
