"""Tests of the sandboxd package against the real daemon, as root on its host.

tests/integration/python_test.go runs them in the testbed, one at a time
(`PYTHONPATH=contrib/python python3 -B contrib/python/test_sandboxd.py -v
Class.test`), with:
  SANDBOXD_TEST_TAG          a word unique to the run, for names
  SANDBOXD_TEST_PROJECT_DIR  where project "web" is on the host
  SANDBOXD_TEST_SECRET       a root-only host file under /var/log, which
                             sandboxes do not see
  SANDBOXD_TEST_SQL_SANDBOX  (the sql test) a booted sandbox running PostgreSQL
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Optional

import sandboxd
from sandboxd import Client, Sandbox

TAG = os.environ.get("SANDBOXD_TEST_TAG", "manual")
PROJECT_DIR = os.environ.get("SANDBOXD_TEST_PROJECT_DIR", "")
SECRET = os.environ.get("SANDBOXD_TEST_SECRET", "")
SQL_SANDBOX = os.environ.get("SANDBOXD_TEST_SQL_SANDBOX", "")

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = """import sys
import calc_{tag} as calc
got = calc.add(2, 3)
print("add(2, 3) =", got)
sys.exit(0 if got == 5 else 1)
"""


class SandboxdTest(unittest.TestCase):
    client: Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = Client()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    def sandbox(self, **kw: object) -> Sandbox:
        """A sandbox of "web", destroyed at the test's end."""
        sb = self.client.create("web", **kw)  # type: ignore[arg-type]
        self.addCleanup(self.destroy, sb)
        return sb

    @staticmethod
    def destroy(sb: Sandbox) -> None:
        try:
            sb.destroy()
        except sandboxd.NoSuchSandbox:
            pass

    def host_file(self, name: str, text: Optional[str] = None) -> str:
        """Name in the project on the host, with text if given; gone at the test's end."""
        path = os.path.join(PROJECT_DIR, name)
        if text is not None:
            with open(path, "w") as f:
                f.write(text)
        self.addCleanup(lambda: os.remove(path) if os.path.lexists(path) else None)
        return path

    def sh(self, sb: Sandbox, script: str) -> str:
        r = sb.exec(["sh", "-c", script])
        self.assertTrue(r.ok, f"{script}: {r}")
        return r.stdout.decode()


class Workflow(SandboxdTest):
    """The issue's done-when: what an agent does to fix a failing test."""

    def test_an_agent_fixes_a_failing_test_and_promotes_it(self) -> None:
        name = f"py-{TAG}"
        sb = self.sandbox(name=name, memory_max="256M")
        self.assertEqual(self.client.sandbox(name).id, sb.id)
        self.assertEqual(self.client.sandbox(sb.id[:8]).id, sb.id)  # a start of its id, as sandboxctl takes
        self.assertIn(sb.id, [s.id for s in self.client.list()])
        self.assertEqual(sb.status().state, "ready")

        calc, test = f"calc_{TAG}.py", f"test_calc_{TAG}.py"
        sb.write_file(calc, BUGGY.encode())
        sb.write_file(test, TEST.format(tag=TAG).encode(), mode=0o600)
        entries = {e.path: e for e in sb.list_files(".")}
        self.assertEqual((entries[calc].kind, entries[calc].size), ("file", len(BUGGY)))
        self.assertEqual(entries[test].mode & 0o777, 0o600)

        failed = sb.exec(["python3", "-B", test])
        self.assertEqual((failed.how, failed.status, failed.stdout), ("exited", 1, b"add(2, 3) = -1\n"), failed)

        self.assertEqual(sb.edit_file(calc, "a - b", "a + b"), 1)
        self.assertEqual(sb.read_file(calc), FIXED.encode())
        passed = sb.exec(["python3", "-B", test])
        self.assertEqual((passed.how, passed.status, passed.stdout), ("exited", 0, b"add(2, 3) = 5\n"), passed)

        self.assertEqual(sorted((c.kind, c.path) for c in sb.diff()), [("added", calc), ("added", test)])
        text = sb.unified_diff()
        self.assertIn(f"+++ b/{calc}", text)
        self.assertIn("+    return a + b", text)

        promotion = sb.promote()
        done = sb.wait_promotion(promotion, timeout=120)
        self.assertEqual((done.state, done.changes), ("done", 2), done)
        with open(os.path.join(PROJECT_DIR, calc)) as f:
            self.assertEqual(f.read(), FIXED)

        sb.destroy()
        with self.assertRaises(sandboxd.NoSuchSandbox):
            self.client.sandbox(name)
        with self.assertRaises(sandboxd.NoSuchSandbox):
            sb.status()

    def test_files_are_read_and_written_in_chunks_and_appended(self) -> None:
        sb = self.sandbox()
        big = bytes(range(256)) * (70 << 10)  # 17.5 MiB: two chunks of WriteFile and ReadFile each way
        sb.write_file("big.bin", big, offset=0)  # at offsets: WriteFile's chunks
        self.assertEqual(self.sh(sb, "wc -c < big.bin").strip(), str(len(big)))
        self.assertEqual(sb.read_file("big.bin", offset=1), big[1:])  # from an offset: ReadFile's chunks
        self.assertEqual(sb.read_file("big.bin"), big)  # whole: through a pipe
        self.assertEqual(sb.read_file("big.bin", offset=100, max=10), big[100:110])
        sb.write_file("notes.txt", b"one\n")
        sb.write_file("notes.txt", b"two\n", append=True)
        self.assertEqual(self.sh(sb, "cat notes.txt"), "one\ntwo\n")
        self.sh(sb, "mkdir -p sub/dir")
        sb.write_file("sub/dir/deep.txt", b"deep")
        paths = {e.path for e in sb.list_files("sub", recursive=True)}
        self.assertEqual(paths, {"dir", "dir/deep.txt"})
        with self.assertRaises(sandboxd.InvalidArgs):
            sb.edit_file("notes.txt", "absent text", "x")
        with self.assertRaises(sandboxd.NoSuchFile):
            sb.read_file("no-such-file")
        sb.write_file("notes.txt", b"TWO", offset=4)
        self.assertEqual(sb.read_file("notes.txt"), b"one\nTWO\n")


class Streams(SandboxdTest):
    """Whole files through a pipe (ReadFileTo, WriteFileFrom)."""

    def test_a_large_file_round_trips_through_upload_and_download(self) -> None:
        sb = self.sandbox()
        fds = open_fds()
        data = os.urandom(40 << 20)
        digest = hashlib.sha256(data).hexdigest()
        with tempfile.TemporaryDirectory() as host:
            src, back = os.path.join(host, "random.bin"), os.path.join(host, "back")
            with open(src, "wb") as f:
                f.write(data)
            os.chmod(src, 0o640)
            os.mkdir(back)
            self.assertEqual(sb.upload(src, "random.bin"), len(data))
            # What the sandbox's commands see: the same bytes, the same permission bits.
            self.assertEqual(self.sh(sb, "sha256sum random.bin; stat -c %a random.bin").split(),
                             [digest, "random.bin", "640"])
            self.assertEqual(sb.download("random.bin", back), len(data))  # a directory: the file's name in it
            with open(os.path.join(back, "random.bin"), "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
            self.assertEqual(os.stat(os.path.join(back, "random.bin")).st_mode & 0o777, 0o640)
            self.assertEqual(os.listdir(back), ["random.bin"])  # nothing left beside it
        self.assertEqual(open_fds(), fds)

    def test_a_download_the_host_cannot_hold_fails_and_leaves_nothing(self) -> None:
        sb = self.sandbox()
        sb.write_file("big.bin", b"y" * (8 << 20))
        fds = open_fds()
        # Files of at most 1 MiB for this process, as a full disk would stop it.
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)
        xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        self.addCleanup(signal.signal, signal.SIGXFSZ, xfsz)
        with tempfile.TemporaryDirectory() as host:
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limit[1]))
            try:
                with self.assertRaises(OSError) as e:
                    sb.download("big.bin", os.path.join(host, "big.bin"))
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, limit)
            self.assertEqual(e.exception.errno, errno.EFBIG, e.exception)
            self.assertEqual(os.listdir(host), [])
        self.assertEqual(open_fds(), fds)
        self.assertEqual(len(sb.read_file("big.bin")), 8 << 20)  # the sandbox's file is whole

    def test_a_fifo_is_refused_by_name_not_waited_on(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "mkfifo queue")
        fds, threads = open_fds(), threading.active_count()
        started = time.monotonic()
        with self.assertRaises(sandboxd.InvalidArgs) as e:
            sb.read_file("queue")
        self.assertIn("queue", e.exception.message)
        self.assertIn("not a regular file", e.exception.message)
        # More than the pipe holds: the writer waits on it until the daemon's
        # refusal ends it.
        with self.assertRaises(sandboxd.InvalidArgs) as failed:
            sb.write_file("queue", b"x" * (4 << 20))
        self.assertIn("queue", failed.exception.message)
        self.assertIn("not a regular file", failed.exception.message)
        with tempfile.TemporaryDirectory() as host:
            with self.assertRaises(sandboxd.InvalidArgs):
                sb.download("queue", host)
            self.assertEqual(os.listdir(host), [])  # no part of a file
            os.mkfifo(os.path.join(host, "fifo"))
            with self.assertRaises(sandboxd.InvalidArgs) as e:
                sb.upload(os.path.join(host, "fifo"), "from-fifo")
            self.assertIn("not a regular file", e.exception.message)
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual((open_fds(), threading.active_count()), (fds, threads))
        self.assertNotIn("from-fifo", self.sh(sb, "ls").split())


class Exec(SandboxdTest):
    def test_exec_passes_stdin_output_status_env_and_cwd(self) -> None:
        sb = self.sandbox()
        r = sb.exec(["sh", "-c", "cat; echo to-stderr >&2; exit 3"], stdin=b"hello\n")
        self.assertEqual((r.stdout, r.stderr, r.how, r.status, r.signal), (b"hello\n", b"to-stderr\n", "exited", 3, 0))
        self.assertFalse(r.ok)
        # More than a pipe holds, each way: read and written while it runs.
        r = sb.exec(["sh", "-c", "head -c 3000000 /dev/zero; wc -c >&2"], stdin=b"x" * 1_000_000)
        self.assertEqual((len(r.stdout), r.stderr.strip(), r.how), (3_000_000, b"1000000", "exited"))
        r = sb.exec(["sh", "-c", 'echo "$GREETING"; pwd'], env={"GREETING": "hi there"}, cwd="/tmp")
        self.assertEqual(r.stdout, b"hi there\n/tmp\n")
        r = sb.exec(["sh", "-c", "kill -TERM $$"])
        self.assertEqual((r.how, r.status, r.signal), ("signaled", 143, 15))
        started = time.monotonic()
        r = sb.exec(["sleep", "30"], timeout=0.5)
        self.assertEqual(r.how, "timed-out")
        self.assertLess(time.monotonic() - started, 10)
        with self.assertRaises(sandboxd.NoProgram) as refused:
            sb.exec(["no-such-program-" + TAG])
        self.assertIn("no-such-program-" + TAG, refused.exception.message)
        with self.assertRaises(sandboxd.NotExecutable):
            sb.exec(["/etc"])

    def test_a_string_is_a_shell_line(self) -> None:
        sb = self.sandbox()
        sb.write_file("t.py", b"import sys; print('ran', sys.argv[1:])\n")
        r = sb.exec("python3 t.py a 'b c' > out.txt && cat out.txt")
        self.assertEqual((r.stdout, r.how, r.status), (b"ran ['a', 'b c']\n", "exited", 0), r)
        # The shell's own 127 for what it cannot find: a status, not an error.
        r = sb.exec("no-such-program-" + TAG)
        self.assertEqual((r.how, r.status), ("exited", 127), r)
        p = sb.spawn("echo spawned-as-a-line")
        self.assertIn(p, [x.id for x in sb.processes()])
        for bad in ("", b"true", [], ["sh", 1]):
            with self.assertRaises((TypeError, ValueError)):
                sb.exec(bad)  # type: ignore[arg-type]

    def test_checkpoint_rollback_and_background_processes(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "echo v1 > notes.txt")
        sb.checkpoint("good")
        self.sh(sb, "echo broken > notes.txt")
        self.assertEqual([c.name for c in sb.checkpoints()], ["good"])
        sb.rollback("good")
        self.assertEqual(self.sh(sb, "cat notes.txt"), "v1\n")
        with self.assertRaises(sandboxd.NoSuchCheckpoint):
            sb.rollback("nope")

        process = sb.spawn(["sh", "-c", "echo started; sleep 0.3; echo done; exit 4"])
        log, offset, deadline = b"", 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            chunk = sb.read_log(process, offset)
            log, offset = log + chunk.data, chunk.next
            if chunk.ended:
                break
            time.sleep(0.1)
        self.assertEqual(log, b"started\ndone\n")
        ended = [p for p in sb.processes() if p.id == process]
        self.assertEqual([(p.how, p.status) for p in ended], [("exited", 4)])

    def test_an_interrupted_exec_kills_its_command(self) -> None:
        sb = self.sandbox()
        here = os.path.dirname(os.path.dirname(os.path.abspath(sandboxd.__file__)))  # where the package is
        agent = subprocess.Popen(
            [sys.executable, "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import sandboxd; "
             "sandboxd.Client().sandbox(sys.argv[2]).exec(['sh', '-c', 'touch started; exec sleep 60'])",
             here, sb.id], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not sb.exec(["test", "-e", "started"]).ok:
            self.assertLess(time.monotonic(), deadline, "the command did not start")
            time.sleep(0.1)
        agent.send_signal(signal.SIGINT)
        _, said = agent.communicate(timeout=20)
        self.assertIn(b"KeyboardInterrupt", said)
        running = self.sh(sb, "cat /proc/[0-9]*/comm 2>/dev/null; true")
        self.assertNotIn("sleep", running.split())

    def test_a_daemon_restart_ends_a_waiting_exec(self) -> None:
        sb = self.sandbox()

        def restart_daemon() -> None:
            time.sleep(1)
            subprocess.run(["systemctl", "restart", "sandboxd.service"], check=True)

        restart = threading.Thread(target=restart_daemon)
        restart.start()
        started = time.monotonic()
        try:
            with self.assertRaises(sandboxd.DaemonRestarted):
                sb.exec(["sleep", "60"])
        finally:
            restart.join()
        self.assertLess(time.monotonic() - started, 20)
        # The same client goes on with the new daemon.
        self.assertEqual(self.sh(sb, "echo after"), "after\n")


class Boot(SandboxdTest):
    """Sandboxes with a systemd of their own (create's boot)."""

    def wait_system(self, sb: Sandbox) -> tuple[str, list[str]]:
        """The system's state and failed units once it is up."""
        deadline = time.monotonic() + 30
        while True:
            state, failed = sb.system()
            if state in ("running", "degraded"):
                return state, failed
            self.assertLess(time.monotonic(), deadline, f"the booted sandbox's system is still {state!r} after 30 s")
            time.sleep(0.1)

    def test_a_booted_sandbox_runs_the_hosts_nginx(self) -> None:
        sb = self.sandbox(boot=True)
        self.assertTrue(sb.status().boot)
        self.assertEqual(self.wait_system(sb), ("running", []))
        curl = ["curl", "-s", "http://127.0.0.1/"]
        self.assertFalse(sb.exec(curl, root=True).ok, "a server answered before nginx was started")  # the control
        started = sb.exec(["systemctl", "start", "nginx"], root=True)
        self.assertTrue(started.ok, started)
        page = sb.exec(curl, root=True)
        self.assertTrue(page.ok, page)
        self.assertIn(b"nginx", page.stdout)
        unit = f"py-boot-fails-{TAG}"
        sb.exec(["systemd-run", f"--unit={unit}", "--wait", "/bin/false"], root=True)
        state, failed = sb.system()
        self.assertEqual(state, "degraded")
        self.assertIn(f"{unit}.service", failed)

    def test_the_system_of_a_sandbox_not_booted_is_wrong_state(self) -> None:
        sb = self.sandbox()
        self.assertFalse(sb.status().boot)
        with self.assertRaises(sandboxd.WrongState) as e:
            sb.system()
        self.assertIn("not created with boot", e.exception.message)


class Try(SandboxdTest):
    def test_try_runs_variants_and_keeps_the_winner(self) -> None:
        prefix = f"pytry-{TAG}"
        report = self.client.try_("web", ["echo a > v.txt", "exit 1"], "test -f v.txt", keep="winner", name=prefix)
        self.assertEqual(report.winner, 0, report)
        self.assertTrue(all(isinstance(r, sandboxd.TryResult) for r in report.results), report)
        self.assertEqual([r.passed for r in report.results], [True, False])
        self.assertEqual([(r.winner, r.kept) for r in report.results], [(True, True), (False, False)])
        self.assertEqual((report.results[1].failed_in, report.results[1].how, report.results[1].status),
                         ("command", "exited", 1))
        self.assertEqual(report.results[0].record["name"], report.results[0].name)
        winner = self.client.sandbox(report.results[0].name)
        self.addCleanup(self.destroy, winner)
        self.assertEqual(self.sh(winner, "cat v.txt"), "a\n")
        with self.assertRaises(sandboxd.NoSuchSandbox):
            self.client.sandbox(report.results[1].name)


class Conflicts(SandboxdTest):
    """A conflict resolved as an agent would: three versions, a merge, a rebase, the promotion."""

    def test_a_conflict_is_seen_in_three_versions_merged_and_promoted(self) -> None:
        lines, both = f"merge-{TAG}.txt", f"both-{TAG}.txt"
        on_host = self.host_file(lines, "one\ntwo\nthree\nfour\nfive\n")
        self.host_file(both, "colour = red\n")
        sb = self.sandbox()
        sb.write_file(lines, b"ONE\ntwo\nthree\nfour\nfive\n")
        sb.write_file(both, b"colour = green\n")
        self.host_file(lines, "one\ntwo\nthree\nfour\nFIVE\n")  # the project moves on under the sandbox
        self.host_file(both, "colour = blue\n")
        self.assertEqual(sorted(sb.project_changes()[0]), sorted([lines, both]))
        with self.assertRaises(sandboxd.Conflict) as e:
            sb.promote()
        self.assertIn(lines, e.exception.message)

        versions = sb.file_versions(lines)
        self.assertEqual([(v.which, v.kind, v.binary, v.truncated) for v in versions],
                         [(w, "file", False, False) for w in ("base", "project", "sandbox")])
        self.assertEqual([v.data.split(b"\n")[::4] for v in versions],
                         [[b"one", b"five"], [b"one", b"FIVE"], [b"ONE", b"five"]])
        self.assertEqual(sb.file_versions(lines, max_bytes=3)[0], sandboxd.FileVersion(
            "base", "file", 24, False, True, b"one", ""))
        with self.assertRaises(sandboxd.InvalidArgs) as bad:
            sb.file_versions("/" + lines)
        self.assertIn("relative", bad.exception.message)

        # Both changed one line: the hunk, and the file left as it was.
        r = sb.merge(both)
        self.assertEqual((r.clean, r.written, len(r.hunks)), (False, False, 1), r)
        h = r.hunks[0]
        self.assertEqual((h.sandbox_start, h.sandbox_lines, h.sandbox, h.base, h.project),
                         (1, 1, "colour = green\n", "colour = red\n", "colour = blue\n"))
        self.assertIn(b"<<<<<<< sandbox", r.merged)
        self.assertEqual(sb.read_file(both), b"colour = green\n")
        # Apart: merged, and written only without a dry run.
        self.assertEqual(sb.merge(lines, dry_run=True), sandboxd.MergeResult(
            True, False, [], b"ONE\ntwo\nthree\nfour\nFIVE\n"))
        self.assertEqual(sb.read_file(lines), b"ONE\ntwo\nthree\nfour\nfive\n")
        self.assertTrue(sb.merge(lines).written)
        self.assertEqual(sb.read_file(lines), b"ONE\ntwo\nthree\nfour\nFIVE\n")

        sb.write_file(both, sb.file_versions(both)[1].data)  # the agent takes the project's
        sb.rebase()
        self.assertEqual(sb.project_changes()[0], [])
        self.assertEqual(sb.wait_promotion(sb.promote(), timeout=120).state, "done")
        with open(on_host) as f:
            self.assertEqual(f.read(), "ONE\ntwo\nthree\nfour\nFIVE\n")


class Promotions(SandboxdTest):
    def test_nothing_to_promote_is_told_apart_and_recorded_nowhere(self) -> None:
        sb = self.sandbox()
        before = self.client.promotions()
        with self.assertRaises(sandboxd.NothingToPromote) as e:
            sb.promote(allow_empty=True)
        self.assertIsInstance(e.exception, sandboxd.WrongState)
        with self.assertRaises(sandboxd.WrongState) as wrong:
            sb.promote()
        self.assertNotIsInstance(wrong.exception, sandboxd.NothingToPromote)
        self.assertEqual(self.client.promotions(), before)

    def test_an_admin_approves_the_change_he_saw(self) -> None:  # with a project stage of approval admin
        name = f"approve-{TAG}.txt"
        on_host = self.host_file(name)
        sb = self.sandbox()
        sb.write_file(name, f"approved {TAG}\n".encode())
        pid = sb.promote()
        waiting = sb.wait_promotion(pid, timeout=120)
        self.assertEqual(waiting.state, "waiting", waiting)
        entry = [p for p in self.client.promotions() if p.id == pid]
        self.assertEqual([(p.sandbox, p.project, p.state, p.changes) for p in entry],
                         [(sb.id, "web", "waiting", 1)], entry)

        seen = self.client.promotion_diff(pid)
        self.assertIn(f"+++ b/{name}", seen.text)
        self.assertIn(f"+approved {TAG}", seen.text)
        self.assertEqual(seen.digest, waiting.record["digest"])
        with self.assertRaises(sandboxd.WrongState) as e:
            self.client.approve_promotion(pid, digest="0" * len(seen.digest))
        self.assertIn("differs from what you saw", e.exception.message)
        self.assertEqual(self.client.promotion(pid).state, "waiting")
        self.assertFalse(os.path.exists(on_host))

        self.client.approve_promotion(pid, digest=seen.digest)
        self.assertEqual(self.client.wait_promotion(pid, timeout=120).state, "done")
        with open(on_host) as f:
            self.assertEqual(f.read(), f"approved {TAG}\n")
        with self.assertRaises(sandboxd.WrongState):
            self.client.promotion_diff(pid)  # finished: its source is gone

        sb.write_file(name, b"rejected\n")
        second = sb.promote()
        self.assertEqual(sb.wait_promotion(second, timeout=120).state, "waiting")
        self.client.reject_promotion(second, "not on a Friday")
        self.assertEqual(self.client.promotion(second).state, "rejected")
        with open(on_host) as f:
            self.assertEqual(f.read(), f"approved {TAG}\n")


class Sessions(SandboxdTest):
    def test_sessions_keep_their_scope_and_take_the_environment(self) -> None:
        sb = self.sandbox()
        with sb.open_session("python3") as py:
            self.assertEqual(py.eval("x = 6 * 7"), sandboxd.EvalResult("", 0))
            self.assertEqual(py.eval("x").output, "42\n")
            failed = py.eval("1 / 0")
            self.assertEqual((failed.status, "ZeroDivisionError" in failed.output), (1, True), failed)
            with self.assertRaises(sandboxd.Failed):  # its interpreter ends: the with's close has nothing to close
                py.eval("import os; os._exit(0)")
        with self.assertRaises(sandboxd.NoSuchCommand):
            py.eval("x")
        with sb.open_session("sh", env={"GREETING": f"hello {TAG}"}, cwd="/tmp") as sh:
            self.assertEqual(sh.eval('echo "$GREETING from $PWD"').output, f"hello {TAG} from /tmp\n")
        with self.assertRaises(sandboxd.InvalidArgs):
            sb.open_session("cobol")

    def test_a_go_session_keeps_declarations_and_imports_the_module(self) -> None:
        sb = self.sandbox()
        self.sh(sb, "mkdir -p shapes/area && printf 'module example.com/shapes\\n\\ngo 1.22\\n' > shapes/go.mod")
        sb.write_file("shapes/area/area.go", b"package area\n\nfunc Square(s int) int { return s * s }\n")
        with sb.open_session("go", cwd=os.path.join(PROJECT_DIR, "shapes")) as go:  # the project is there too
            r = go.eval('import "fmt"\nimport "example.com/shapes/area"\nfunc twice(n int) int { return 2 * n }')
            self.assertTrue(r.ok, r)
            self.assertEqual(go.eval("fmt.Println(twice(area.Square(3)))"), sandboxd.EvalResult("18\n", 0))
            bad = go.eval("fmt.Println(nosuch)")
            self.assertEqual((bad.status, "undefined: nosuch" in bad.output), (2, True), bad)
            self.assertEqual(go.eval("fmt.Println(twice(1))").output, "2\n")
        self.assertEqual([c.path for c in sb.diff() if not c.path.startswith("shapes")], [])

    def test_a_sql_session_reaches_the_database_its_environment_names(self) -> None:
        """Run with SANDBOXD_TEST_SQL_SANDBOX (its table items has 100 rows)."""
        sb = self.client.sandbox(SQL_SANDBOX)
        with sb.open_session("sql", env={"PGDATABASE": "postgres", "PGUSER": "postgres"}, root=True) as sql:
            self.assertEqual(sql.eval("create temp table kept (n integer); insert into kept values (1), (2);"),
                             sandboxd.EvalResult("CREATE TABLE\nINSERT 0 2\n", 0))
            self.assertIn(" sum \n-----\n   3\n(1 row)\n", sql.eval("select sum(n) from kept;").output)
            self.assertIn("  100\n", sql.eval("select count(*) from items;").output)
            failed = sql.eval("select nosuch;")
            self.assertEqual((failed.status, 'column "nosuch" does not exist' in failed.output), (1, True), failed)
        with self.assertRaises(sandboxd.InvalidArgs) as e:
            sb.open_session("sql", env={"PGDATABASE": f"nosuch_{TAG}"}, root=True)
        self.assertIn(f'database "nosuch_{TAG}" does not exist', e.exception.message)


class Errors(SandboxdTest):
    def test_errors_have_their_dbus_names(self) -> None:
        with self.assertRaises(sandboxd.NoSuchSandbox) as e:
            self.client.sandbox("no-such-sandbox")
        self.assertEqual(e.exception.name, "org.sandboxd1.Error.NoSuchSandbox")
        # The daemon's own answer, for an id that names nothing.
        with self.assertRaises(sandboxd.NoSuchSandbox) as e:
            Sandbox(self.client, "000000000000", sandboxd.SANDBOX_PATH_PREFIX + "000000000000").status()
        self.assertIn("000000000000", e.exception.message)
        with self.assertRaises(sandboxd.InvalidArgs) as bad:
            self.client.create("web", memory_max=1)
        self.assertIn("MemoryMax", bad.exception.message)
        self.assertIsInstance(bad.exception, sandboxd.SandboxdError)
        # What the bus cannot carry is refused by the client, under the same name.
        with self.assertRaises(sandboxd.InvalidArgs) as bad:
            self.client.create("web", memory_max=-1)
        self.assertIn("MemoryMax", bad.exception.message)
        with self.assertRaises(sandboxd.NoSuchProject):
            self.client.create("no-such-project")
        name = f"pytaken-{TAG}"
        self.sandbox(name=name)
        with self.assertRaises(sandboxd.Exists):
            self.client.create("web", name=name)
        with self.assertRaises(sandboxd.NoSuchPromotion):
            self.client.promotion("000000000000")

    def test_paths_outside_the_sandbox_reach_no_host_file(self) -> None:
        with open(SECRET) as f:
            secret = f.read()
        sb = self.sandbox()
        # Written on the host after the sandbox's base: not the sandbox's.
        host_only = os.path.join(PROJECT_DIR, f"host-only-{TAG}.txt")
        with open(host_only, "w") as f:
            f.write("host only " + TAG)
        self.addCleanup(os.remove, host_only)
        self.assertEqual(sb.read_file("index.html"), b"<h1>web</h1>\n")  # the control
        self.sh(sb, f"ln -s {SECRET} leak-secret && ln -s {host_only} leak-host && ln -s /var/log leak-dir")
        where = sb.status().path  # the sandbox's files on the host
        up = "../" * 12
        paths = ["leak-secret", "leak-host", SECRET, up + SECRET.lstrip("/"), up + host_only.lstrip("/"),
                 os.path.relpath(SECRET, where), os.path.relpath(host_only, where),
                 "leak-dir/" + os.path.basename(SECRET)]
        for path in paths:
            try:
                data = sb.read_file(path)
            except sandboxd.SandboxdError:
                continue
            self.assertNotIn(secret.encode(), data, path)
            self.assertNotIn(b"host only", data, path)
        for path in ["leak-dir", "/var/log", up + "var/log", os.path.relpath("/var/log", where)]:
            try:
                names = [e.path for e in sb.list_files(path)]
            except sandboxd.SandboxdError:
                continue
            self.assertNotIn(os.path.basename(SECRET), names, path)
        for path in ["leak-secret", up + SECRET.lstrip("/")]:
            with self.assertRaises(sandboxd.SandboxdError, msg=path):
                sb.edit_file(path, secret, "overwritten")
        pwned = f"pwned-{TAG}"
        for path in ["leak-dir/" + pwned, up + "var/log/" + pwned, up + "tmp/" + pwned,
                     os.path.relpath("/tmp/" + pwned, where)]:
            try:
                sb.write_file(path, b"pwned")
            except sandboxd.SandboxdError:
                pass
        for host in ["/var/log/" + pwned, "/tmp/" + pwned]:
            self.assertFalse(os.path.lexists(host), f"{host} was written on the host")
        with open(SECRET) as f:
            self.assertEqual(f.read(), secret)


def open_fds() -> list[str]:
    """This process's open descriptors: a call that leaks one changes them."""
    return sorted(os.listdir("/proc/self/fd"))


if __name__ == "__main__":
    # The tests in files of their own, run as test_fork.Class.test: a
    # dotted name is looked up in this module.
    import test_fork  # noqa: F401
    unittest.main()
