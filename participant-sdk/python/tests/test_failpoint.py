import subprocess
import sys
import time
import unittest

from tcc_participant import failpoint
from tcc_participant.status import CallError, Code


class Failpoints(unittest.TestCase):
    def tearDown(self):
        failpoint.configure("")

    def test_nothing_configured_does_nothing(self):
        failpoint.configure("")
        failpoint.evaluate("x")
        self.assertEqual(failpoint.hits("x"), 0)

    def test_error_on_the_nth_and_later(self):
        failpoint.configure("a=error@2;b=error@2+")
        failpoint.evaluate("a")
        with self.assertRaises(CallError) as e:
            failpoint.evaluate("a")
        self.assertEqual(e.exception.code, Code.UNAVAILABLE)
        failpoint.evaluate("a")  # only the 2nd
        failpoint.evaluate("b")
        for _ in range(3):
            with self.assertRaises(CallError):
                failpoint.evaluate("b")
        self.assertEqual(failpoint.hits("a"), 3)

    def test_sleep(self):
        failpoint.configure("s=sleep(120)")
        t = time.monotonic()
        failpoint.evaluate("s")
        self.assertGreaterEqual(time.monotonic() - t, 0.1)

    def test_malformed_changes_nothing(self):
        failpoint.configure("a=error")
        for bad in ("a", "a=boom", "a=error@0", "a=sleep(x)", "=error"):
            with self.assertRaises(ValueError):
                failpoint.configure(bad)
        with self.assertRaises(CallError):
            failpoint.evaluate("a")

    def test_crash_is_sigkill_and_malformed_env_stops_the_process(self):
        code = ("from tcc_participant import failpoint\n"
                "failpoint.evaluate('p')\nprint('survived')")
        r = subprocess.run([sys.executable, "-c", code], env=self._env("p=crash"),
                           capture_output=True)
        self.assertEqual(r.returncode, -9)
        self.assertNotIn(b"survived", r.stdout)
        r = subprocess.run([sys.executable, "-c", code], env=self._env("p=bad"),
                           capture_output=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"TCC_FAILPOINTS", r.stderr)

    @staticmethod
    def _env(spec):
        import os
        env = dict(os.environ)
        env["TCC_FAILPOINTS"] = spec
        return env


if __name__ == "__main__":
    unittest.main()
