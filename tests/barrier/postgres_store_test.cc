// What only the PostgreSQL store has: business SQL in the barrier's own
// transaction (PostgresTxn::work()), placeholder rows that never commit, and
// an idempotent migration.
#include <future>
#include <thread>

#include "barrier_harness.h"

namespace tcc::testing {
namespace {

using barrier::BarrierState;
using barrier::Outcome;

int64_t CountRows(PostgresEnv& env, const std::string& sql) {
  pqxx::connection conn(env.url());
  pqxx::work w(conn);
  return w.exec1(sql)[0].as<int64_t>();
}

TEST_CASE("postgres: a handler's SQL commits with the barrier or not at all",
          "[postgres]") {
  BarrierHarness<PostgresEnv> h;
  const std::string table = h.env.schema() + ".orders";
  {
    pqxx::connection conn(h.env.url());
    pqxx::work w(conn);
    w.exec("CREATE TABLE " + table + " (id TEXT PRIMARY KEY)");
    w.commit();
  }
  auto handler = [&](bool refuse, bool fail) {
    return [&, refuse, fail](const barrier::HandlerContext& c)
               -> absl::StatusOr<barrier::TryVerdict> {
      barrier::PostgresTxn* pg = c.txn.As<barrier::PostgresTxn>();
      REQUIRE(pg != nullptr);
      pg->work().exec_params("INSERT INTO " + table + " VALUES ($1)",
                             c.IdempotencyKey());
      if (fail) throw std::runtime_error("handler bug");
      if (refuse) return barrier::TryVerdict::Refuse("no");
      return barrier::TryVerdict::Reserve();
    };
  };
  auto count = [&] {
    return CountRows(h.env, "SELECT count(*) FROM " + table);
  };

  auto failed = h.barrier.Try(MakeCall("pg.fail", H()), handler(false, true));
  CHECK(failed.status().code() == absl::StatusCode::kUnavailable);
  CHECK(count() == 0);
  CHECK(h.State(MakeCall("pg.fail", H()).key) == BarrierState::kNotFound);

  auto refused =
      h.barrier.Try(MakeCall("pg.refuse", H()), handler(true, false));
  REQUIRE(refused.ok());
  CHECK(refused->outcome == Outcome::kRejected);
  CHECK(count() == 0);

  auto ok = h.barrier.Try(MakeCall("pg.ok", H()), handler(false, false));
  REQUIRE(ok.ok());
  CHECK(ok->outcome == Outcome::kExecuted);
  CHECK(count() == 1);
  // The duplicate does not run the handler (which would hit the primary key).
  auto dup = h.barrier.Try(MakeCall("pg.ok", H()), handler(false, false));
  REQUIRE(dup.ok());
  CHECK(dup->replayed);
  CHECK(count() == 1);
}

TEST_CASE("postgres: answers that write nothing leave no row behind",
          "[postgres]") {
  BarrierHarness<PostgresEnv> h;
  h.clock.Set(kDeadlineMs + kSkewMs + 1);
  CHECK(h.Try(MakeCall("pg.late", H()))->outcome == Outcome::kHangingRefused);
  CHECK(h.Confirm(MakeCall("pg.none", H())).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(CountRows(h.env, "SELECT count(*) FROM " + h.env.schema() +
                             ".tcc_barrier") == 0);
}

TEST_CASE(
    "postgres: every transaction commits with synchronous_commit on, also on "
    "a connection libpqxx quietly reconnected",
    "[postgres]") {
  PostgresEnv env;
  // Sessions of this store start with synchronous_commit off, as on a
  // server configured so.
  const std::string url =
      env.url() + (env.url().find('?') == std::string::npos ? "?" : "&") +
      "application_name=tcc_sync_test&options=-c%20synchronous_commit%3Doff";
  auto store =
      barrier::PostgresBarrierStore::Open({.url = url, .schema = env.schema()});
  REQUIRE(store.ok());
  auto setting = [&]() -> absl::StatusOr<std::string> {
    auto txn = (*store)->Begin();
    if (!txn.ok()) return txn.status();
    auto* pg = dynamic_cast<barrier::PostgresTxn*>(txn->get());
    REQUIRE(pg != nullptr);
    return pg->work().exec1("SHOW synchronous_commit")[0].as<std::string>();
  };
  auto first = setting();
  REQUIRE(first.ok());
  CHECK(*first == "on");
  // The pooled connection's backend goes away. libpqxx 6.4 here fails the
  // next use of that connection (the pool then drops it, and a new one gets
  // the SET of Acquire); a libpqxx that reconnects it quietly would give a
  // session without that SET, which the SET LOCAL of every transaction
  // covers. Either way each transaction must see "on".
  {
    pqxx::connection admin(env.url());
    pqxx::work w(admin);
    w.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
        "application_name = 'tcc_sync_test'");
    w.commit();
  }
  int reconnected = 0;
  for (int attempt = 0; attempt < 3 && reconnected == 0; ++attempt) {
    auto again = setting();  // a broken connection may fail once first
    if (!again.ok()) continue;
    ++reconnected;
    CHECK(*again == "on");
  }
  CHECK(reconnected == 1);
}

TEST_CASE(
    "postgres: a row deleted while a call waits for its lock still leaves the "
    "call holding the key",
    "[postgres]") {
  BarrierHarness<PostgresEnv> h;
  const barrier::BranchCall call = MakeCall("pg.vanish", H());
  REQUIRE(h.Try(call).ok());  // a committed row to conflict with
  const std::string table = h.env.schema() + ".tcc_barrier";
  const std::string where = "WHERE gid = 'pg.vanish'";
  // Retention's transaction holds the row...
  pqxx::connection gc(h.env.url());
  pqxx::work gc_work(gc);
  REQUIRE(gc_work.exec("SELECT 1 FROM " + table + " " + where + " FOR UPDATE")
              .size() == 1);
  // ...while a call locks the key (its INSERT conflicts, its SELECT waits).
  std::promise<absl::StatusOr<std::optional<barrier::BarrierRecord>>> locked;
  auto locked_f = locked.get_future();
  auto txn = h.store().Begin();
  REQUIRE(txn.ok());
  std::thread caller([&] { locked.set_value((*txn)->LockBarrier(call.key)); });
  // Until the call waits for the lock (bounded).
  bool waiting = false;
  for (int i = 0; i < 200 && !waiting; ++i) {
    pqxx::connection probe(h.env.url());
    pqxx::work w(probe);
    waiting = w.exec1(
                   "SELECT count(*) FROM pg_stat_activity WHERE "
                   "wait_event_type = 'Lock' AND query LIKE '%" +
                   table + " %FOR UPDATE%'")[0]
                  .as<int>() > 0;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(waiting);
  // Retention deletes the row and commits.
  gc_work.exec("DELETE FROM " + table + " " + where);
  gc_work.commit();
  REQUIRE(locked_f.wait_for(std::chrono::seconds(20)) ==
          std::future_status::ready);
  caller.join();
  auto got = locked_f.get();
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());  // nothing there any more
  // And the call holds the key: another transaction cannot lock it.
  {
    pqxx::connection other(h.env.url());
    pqxx::work w(other);
    w.exec("SET LOCAL lock_timeout = '200ms'");
    bool blocked = false;
    try {
      w.exec("INSERT INTO " + table +
             " (gid, created_at_ms, branch_id, try_state, branch_hash) "
             "VALUES ('pg.vanish', " +
             std::to_string(call.key.created_at_ms) +
             ", 'b1', 0, '') ON CONFLICT DO NOTHING");
      w.exec("SELECT 1 FROM " + table + " " + where + " FOR UPDATE");
    } catch (const pqxx::sql_error& e) {
      blocked =
          std::string(e.what()).find("lock timeout") != std::string::npos ||
          std::string(e.what()).find("canceling statement") !=
              std::string::npos;
    }
    CHECK(blocked);
  }
  txn->reset();  // rolls back: the placeholder goes
}

TEST_CASE("postgres: the migration is idempotent", "[postgres]") {
  PostgresEnv env;
  auto again = barrier::PostgresBarrierStore::Open(
      {.url = env.url(), .schema = env.schema()});
  REQUIRE(again.ok());
  auto bad = barrier::PostgresBarrierStore::Open(
      {.url = env.url(), .schema = "x; DROP TABLE y"});
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("postgres: an unreachable server is UNAVAILABLE", "[postgres]") {
  auto store = barrier::PostgresBarrierStore::Open(
      {.url = "postgresql://tcc@127.0.0.1:1/tcc?connect_timeout=2"});
  CHECK(store.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tcc::testing
