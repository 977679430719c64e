"""Tests of fork, stop and start (issue 31) against the real daemon, as
test_sandboxd.py's are (its SandboxdTest, its environment), in a file of
their own: tests/integration/python_test.go runs them through
test_sandboxd.py as ``test_fork.Class.test``.
"""

from __future__ import annotations

import time

import sandboxd
from sandboxd import Sandbox
from test_sandboxd import TAG, SandboxdTest


class Fork(SandboxdTest):
    def running(self, sb: Sandbox, argv: list[str]) -> list[sandboxd.Process]:
        return [p for p in sb.processes() if p.argv == argv and not p.ended]

    def wait_running(self, sb: Sandbox, argv: list[str]) -> None:
        deadline = time.monotonic() + 30  # a safety net: it returns once the process runs
        while not self.running(sb, argv):
            self.assertLess(time.monotonic(), deadline, f"{argv} does not run in {sb}: {sb.processes()}")
            time.sleep(0.1)

    def test_a_fork_has_the_files_and_changes_apart(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "echo built > made.txt")
        sb.spawn(["sleep", "300"])
        name = f"pyfork-{TAG}"
        r = sb.fork(count=2, names=[name], spawn=[["sleep", "301"]])
        for f in r.sandboxes:
            self.addCleanup(self.destroy, f)
        self.assertIsInstance(r, sandboxd.ForkResult)
        self.assertEqual(len(r.sandboxes), 2, r)
        self.assertEqual((r.sandboxes[0].name, self.client.sandbox(name).id), (name, r.sandboxes[0].id))
        self.assertIn("sleep 300", r.not_carried)
        a, b = r.sandboxes
        for f in (a, b):
            self.assertEqual(self.sh(f, "cat made.txt"), "built\n")
            self.assertEqual(self.running(f, ["sleep", "300"]), [], "a process of the source was carried")
            self.wait_running(f, ["sleep", "301"])
        self.sh(a, "echo only-a > a.txt; echo changed > made.txt")
        self.assertEqual(self.sh(b, "cat made.txt; test -e a.txt || echo no-a"), "built\nno-a\n")
        self.assertEqual(self.sh(sb, "cat made.txt; test -e a.txt || echo no-a"), "built\nno-a\n")

        with self.assertRaises(sandboxd.InvalidArgs):
            sb.fork(count=0)
        with self.assertRaises(sandboxd.InvalidArgs) as bad:
            sb.fork(count=17)
        self.assertIn("17", bad.exception.message)
        with self.assertRaises(sandboxd.Exists):
            sb.fork(names=[name])
        self.assertEqual(self.sh(sb, "cat made.txt"), "built\n")  # refused, it is intact

    def test_a_stopped_sandbox_keeps_its_files_and_starts_again(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "echo kept > kept.txt")
        sb.spawn(["sleep", "302"], restart=True)
        self.wait_running(sb, ["sleep", "302"])
        sb.stop()
        sb.stop()  # stopping a stopped sandbox does nothing
        self.assertEqual(sb.status().state, "stopped")
        with self.assertRaises(sandboxd.Stopped) as refused:
            sb.exec(["true"])
        self.assertEqual(refused.exception.name, "org.sandboxd1.Error.Stopped")
        self.assertIn("start", refused.exception.message)
        sb.start()
        sb.start()  # starting a running sandbox does nothing
        self.assertNotEqual(sb.status().state, "stopped")
        self.assertEqual(self.sh(sb, "cat kept.txt"), "kept\n")
        self.wait_running(sb, ["sleep", "302"])  # declared with restart: started again

    def test_try_from_a_sandbox_runs_in_its_forks(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "echo ready > setup.txt")
        report = self.client.try_("web", ["cat setup.txt > v.txt", "exit 1"], "grep -q ready v.txt", keep="none",
                                  from_=sb)
        self.assertEqual([r.passed for r in report.results], [True, False], report)
        self.assertEqual(report.winner, 0, report)
        self.assertEqual(self.sh(sb, "test -e v.txt || echo untouched"), "untouched\n")
