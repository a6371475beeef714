"""The barrier over the real stores (SQLite; PostgreSQL when the run has
one): the business write and the barrier record commit together or not at
all; a refusal keeps no business write; a handler that fails rolls both
back; a lock wait past its timeout is UNAVAILABLE and changes nothing;
retention removes only what the rules allow; a record that does not decode
is DATA_LOSS. (Every table row over the wire: tests/conformance/.)"""

import dataclasses
import threading
import time
import unittest

from common import Stores, call, counting_participant
from tcc_participant import BarrierOptions, BarrierState, Outcome
from tcc_participant.status import CallError, Code


class BarrierOverStores(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stores = Stores()

    @classmethod
    def tearDownClass(cls):
        cls.stores.close()

    def each_store(self):
        for name, make in self.stores.all():
            with self.subTest(store=name):
                yield name, make

    def test_business_write_and_record_commit_together(self):
        for _, make in self.each_store():
            p, effects = counting_participant(make())
            c = call()
            self.assertEqual(p.try_(c).outcome, Outcome.EXECUTED)
            self.assertEqual(effects(c.key), ["try"])
            self.assertTrue(p.try_(c).replayed)
            self.assertEqual(effects(c.key), ["try"])
            self.assertEqual(p.confirm(c).outcome, Outcome.EXECUTED)
            self.assertEqual(effects(c.key), ["confirm", "try"])
            self.assertEqual(p.query(c.key).state, BarrierState.CONFIRMED)
            self.assertTrue(p.query(c.key).authoritative)

    def test_refusal_keeps_no_business_write(self):
        for _, make in self.each_store():
            p, effects = counting_participant(make())
            c = call(b"refuse")
            a = p.try_(c)
            self.assertEqual((a.outcome, a.message), (Outcome.REJECTED, "no"))
            self.assertEqual(effects(c.key), [])
            self.assertEqual(p.query(c.key).state, BarrierState.TRY_REJECTED)

    def test_failing_handler_rolls_everything_back(self):
        for _, make in self.each_store():
            p, effects = counting_participant(make())
            c = call(b"fail")
            with self.assertRaises(CallError) as e:
                p.try_(c)
            self.assertEqual(e.exception.code, Code.UNAVAILABLE)
            self.assertEqual(effects(c.key), [])
            self.assertEqual(p.query(c.key).state, BarrierState.NOT_FOUND)

    def test_a_lock_wait_past_its_timeout_is_unavailable(self):
        for _, make in self.each_store():
            store = make(lock_timeout_ms=300)
            p, effects = counting_participant(store)
            c = call()
            held = threading.Event()
            release = threading.Event()

            def hold():
                with store.begin() as txn:
                    txn.lock_barrier(c.key)
                    held.set()
                    release.wait(5)

            t = threading.Thread(target=hold)
            t.start()
            held.wait(5)
            try:
                with self.assertRaises(CallError) as e:
                    p.try_(c)
                self.assertEqual(e.exception.code, Code.UNAVAILABLE)
            finally:
                release.set()
                t.join()
            self.assertEqual(effects(c.key), [])
            self.assertEqual(p.try_(c).outcome, Outcome.EXECUTED)  # free again

    def test_retention_removes_only_what_the_rules_allow(self):
        for _, make in self.each_store():
            now = [time.time_ns() // 1_000_000]
            options = BarrierOptions(clock_skew_ms=1000, retention_ms=10_000)
            p, _ = counting_participant(make(), options=options, now_ms=lambda: now[0])
            tried, done = call(deadline_ms=now[0] + 1000), call(deadline_ms=now[0] + 1000)
            marker = call(deadline_ms=now[0] + 50_000)
            p.try_(tried)
            p.try_(done)
            p.confirm(done)
            p.cancel(marker)
            self.assertEqual(p.barrier.collect_garbage(), 0)  # all too young
            now[0] += 20_000  # past retention; the marker's deadline not yet
            self.assertEqual(p.barrier.collect_garbage(), 1)
            self.assertEqual(p.query(done.key).state, BarrierState.NOT_FOUND)
            self.assertEqual(p.query(marker.key).state, BarrierState.CANCELLED_BEFORE_TRY)
            now[0] += 40_000  # past the marker's deadline + skew
            self.assertEqual(p.barrier.collect_garbage(), 1)
            # A Try with no phase 2 is never removed.
            now[0] += 10 ** 12
            self.assertEqual(p.barrier.collect_garbage(), 0)
            self.assertEqual(p.query(tried.key).state, BarrierState.TRIED)

    def test_cancel_raises_the_markers_expiry(self):
        for _, make in self.each_store():
            now = [time.time_ns() // 1_000_000]
            options = BarrierOptions(clock_skew_ms=0, retention_ms=0)
            p, _ = counting_participant(make(), options=options, now_ms=lambda: now[0])
            c = call(deadline_ms=now[0] + 1000)
            p.cancel(c)
            later = dataclasses.replace(c, try_deadline_ms=now[0] + 100_000)
            self.assertTrue(p.cancel(later).replayed)
            now[0] += 50_000  # past the first deadline, not the raised one
            self.assertEqual(p.barrier.collect_garbage(), 0)
            now[0] += 60_000
            self.assertEqual(p.barrier.collect_garbage(), 1)

    def test_a_record_that_does_not_decode_is_data_loss(self):
        for name, make in self.each_store():
            store = make()
            p, _ = counting_participant(store)
            c = call()
            p.try_(c)
            with store.begin() as txn:
                table = f"{store.schema}.tcc_barrier" if name == "postgres" else "tcc_barrier"
                q = "%s" if name == "postgres" else "?"
                txn.execute(f"UPDATE {table} SET try_state = 77 WHERE gid = {q}", (c.key.gid,))
                txn.commit()
            for op in (p.try_, p.confirm):
                with self.assertRaises(CallError) as e:
                    op(c)
                self.assertEqual(e.exception.code, Code.DATA_LOSS)
            with self.assertRaises(CallError) as e:
                p.query(c.key)
            self.assertEqual(e.exception.code, Code.DATA_LOSS)

    def test_bad_calls_are_invalid_argument_and_change_nothing(self):
        for _, make in self.each_store():
            p, effects = counting_participant(make())
            good = call()
            for bad in (dataclasses.replace(good, branch_hash=b"x" * 31),
                        dataclasses.replace(good, try_deadline_ms=0),
                        dataclasses.replace(good, action="nope"),
                        dataclasses.replace(good, key=dataclasses.replace(good.key, gid="a b")),
                        dataclasses.replace(good, key=dataclasses.replace(good.key,
                                                                          created_at_ms=0))):
                with self.assertRaises(CallError) as e:
                    p.try_(bad)
                self.assertEqual(e.exception.code, Code.INVALID_ARGUMENT)
            self.assertEqual(effects(), [])
            self.assertEqual(p.query(good.key).state, BarrierState.NOT_FOUND)

    def test_a_sqlite_store_stops_after_a_failed_commit(self):
        store = self.stores.sqlite()
        p, _ = counting_participant(store)
        store.failed = "commit failed (SQLITE_IOERR_FSYNC): disk I/O error"
        with self.assertRaises(CallError) as e:
            p.try_(call())
        self.assertEqual(e.exception.code, Code.UNAVAILABLE)
        self.assertIn("stopped", e.exception.message)

    def test_metrics_count_outcomes_and_replays(self):
        for _, make in self.each_store():
            p, _ = counting_participant(make())
            c = call()
            p.try_(c)
            p.try_(c)
            get = p.registry.get_sample_value
            self.assertEqual(get("tcc_participant_calls_total",
                                 {"operation": "try", "outcome": "executed",
                                  "replayed": "true"}), 1.0)
            self.assertEqual(get("tcc_participant_calls_total",
                                 {"operation": "try", "outcome": "executed",
                                  "replayed": "false"}), 1.0)


if __name__ == "__main__":
    unittest.main()
