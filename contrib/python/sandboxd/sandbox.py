"""Sandbox: one sandbox's verbs (its files' are in files.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

from dbus_next.signature import Variant

from ._bus import PROPERTIES_INTERFACE, SANDBOX_INTERFACE, SANDBOX_PATH_PREFIX
from ._exec import run_exec
from ._values import Env, Size, exec_options, parse_size, plain, variant
from .errors import invalid, nothing_to_promote
from .files import Files
from .records import (Change, Checkpoint, ExecResult, FileVersion, LogChunk, MergeHunk, MergeResult, Process,
                      Promotion, Status)
from .sessions import Session

if TYPE_CHECKING:
    from .client import Client


def command_argv(argv: Union[str, Sequence[str]]) -> list[str]:
    """A command's argv: a string is a shell line, ["sh", "-c", LINE] (a
    string taken as a sequence would run its first letter)."""
    if isinstance(argv, (bytes, bytearray)):
        raise TypeError("a command is a list of str, or a str (a shell line), not bytes")
    if isinstance(argv, str):
        if not argv.strip():
            raise ValueError("an empty shell line: give the command to run")
        return ["sh", "-c", argv]
    args = list(argv)
    if not all(isinstance(a, str) for a in args):
        raise TypeError(f"a command is a list of str, or a str (a shell line); got {argv!r}")
    if not args:
        raise ValueError("an empty command: give the program and its arguments")
    return args


class Sandbox(Files):
    """One sandbox: its id, its name ("" when none) and its object."""

    def __init__(self, client: Client, sid: str, object_path: str, name: str = "") -> None:
        self.client, self.id, self.object_path, self.name = client, sid, object_path, name

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r})"

    def exec(self, argv: Union[str, Sequence[str]], stdin: bytes = b"", env: Env = None, cwd: Optional[str] = None,
             root: bool = False, timeout: Optional[float] = None, output_limit: Optional[Size] = None) -> ExecResult:
        """Runs argv in the sandbox as the caller, with stdin, and returns
        what it wrote and how it ended. argv is a list of arguments
        (["python3", "t.py"]), or a string: a shell line, run as
        ``sh -c LINE`` ("python3 t.py > out 2>&1"). A program that is not
        there raises NoProgram, one that cannot be run NotExecutable (a
        shell's 127 and 126 are its own status). env: added to the command's; cwd:
        its directory in the sandbox (default: the project's); root: as
        root of the sandbox's user namespace; timeout: seconds (then how is
        timed-out); output_limit: bytes of stdout and stderr together (then
        output-limit): without it, all output is kept in memory."""
        opts = exec_options(env, cwd, root, timeout)
        if output_limit is not None:
            opts["OutputLimit"] = variant("OutputLimit", "t", parse_size(output_limit))
        bus = self.client._bus
        return bus.run(run_exec(bus, self.object_path, command_argv(argv), opts, stdin))

    def spawn(self, argv: Union[str, Sequence[str]], env: Env = None, cwd: Optional[str] = None, root: bool = False,
              timeout: Optional[float] = None, restart: bool = False) -> str:
        """Starts argv (a list, or a string: a shell line, as exec's) in the
        background (output to a log: read_log) and returns its process id.
        restart: it is declared in the sandbox's record and started again
        each time the sandbox starts (start, the host's reboot, a rollback)."""
        opts = exec_options(env, cwd, root, timeout)
        if restart:
            opts["Restart"] = variant("Restart", "b", True)
        return str(self._call("Spawn", "asa{sv}", command_argv(argv), opts)[0])

    def read_log(self, process: str, offset: int = 0, max: int = 1 << 16) -> LogChunk:
        data, nxt, ended = self._call("ReadLog", "stu", process, offset, max)
        return LogChunk(data, nxt, ended)

    def processes(self) -> list[Process]:
        return [Process(*p) for p in self._call("ListProcesses")[0]]

    def diff(self) -> list[Change]:
        """What the sandbox changed in its project since its base."""
        return [Change(*c) for c in self._call("Diff")[0]]

    def unified_diff(self, context: Optional[int] = None, max_bytes: Optional[int] = None) -> str:
        opts: dict[str, Variant] = {}
        if context is not None:
            opts["Context"] = variant("Context", "u", context)
        if max_bytes is not None:
            opts["MaxBytes"] = variant("MaxBytes", "t", max_bytes)
        return str(self._call("UnifiedDiff", "a{sv}", opts)[0])

    def project_changes(self) -> tuple[list[str], int]:
        """How far the project moved since the sandbox's base: the paths it
        changed, and when the base was taken (µs since the epoch)."""
        paths, base = self._call("ProjectChanges")
        return [str(p) for p in paths], int(base)

    def rebase(self) -> None:
        """Brings the sandbox onto its project as it is now, its own changes
        kept (its processes end). A path the project changed too is
        Conflict, and the sandbox stays as it was, unless the sandbox's
        version holds the project's change already (merge's)."""
        self._call("Rebase")

    def file_versions(self, path: str, max_bytes: Optional[int] = None) -> list[FileVersion]:
        """A conflicting path's three versions, base, project and sandbox, in
        that order. path is relative to the project's top, as a conflict
        names it; max_bytes bounds each (at most and by default 1 MiB).
        Only a regular file the caller could read has content; a symlink
        is named, never followed."""
        opts: dict[str, Variant] = {}
        if max_bytes is not None:
            opts["MaxBytes"] = variant("MaxBytes", "t", max_bytes)
        return [FileVersion(str(v[0]), str(v[1]), int(v[2]), bool(v[3]), bool(v[4]), bytes(v[5]), str(v[6]))
                for v in self._call("FileVersions", "sa{sv}", path, opts)[0]]

    def merge(self, path: str, markers: bool = False, dry_run: bool = False) -> MergeResult:
        """Merges the project's change to path since the sandbox's base into
        the sandbox's version (diff3, line by line). A clean merge is
        written into the sandbox as the caller; one that conflicts leaves
        the file as it is and lists its hunks, unless markers (then it is
        written with <<<<<<< sandbox, =======, >>>>>>> project). dry_run
        writes nothing. A version that is not a text file (deleted, a
        symlink, binary, over 1 MiB) is InvalidArgs, naming it."""
        opts: dict[str, Variant] = {}
        if markers:
            opts["Markers"] = variant("Markers", "b", True)
        if dry_run:
            opts["DryRun"] = variant("DryRun", "b", True)
        clean, written, hunks, merged = self._call("Merge", "sa{sv}", path, opts)
        return MergeResult(bool(clean), bool(written), [MergeHunk(*h) for h in hunks], bytes(merged))

    def open_session(self, language: str, env: Env = None, cwd: Optional[str] = None,
                     root: bool = False) -> Session:
        """Starts an interpreter kept between inputs: python3, node, sh, go
        (each input a snippet run against the project's module, the
        go.mod that holds cwd; its declarations kept) or sql (one psql
        connection, where env's PGDATABASE, PGUSER, PGHOST and PGPORT say;
        with root, psql runs as the role's user). A go or sql session that
        cannot work (no Go toolchain, a database psql cannot reach) is
        InvalidArgs, naming why; a sandbox has at most 8 (LimitReached)."""
        opts = exec_options(env, cwd, root, None)
        return Session(self, str(self._call("OpenSession", "sa{sv}", language, opts)[0]), language)

    def checkpoint(self, name: str) -> int:
        """Takes checkpoint name; returns when, µs since the epoch."""
        return int(self._call("Checkpoint", "s", name)[0])

    def checkpoints(self) -> list[Checkpoint]:
        return [Checkpoint(*c) for c in self._call("ListCheckpoints")[0]]

    def rollback(self, name: str) -> None:
        """Brings the sandbox back to checkpoint name (its processes end)."""
        self._call("Rollback", "s", name)

    def promote(self, force: bool = False, to: Optional[str] = None, allow_privileged: bool = False,
                allow_empty: bool = False) -> str:
        """Starts carrying the changes to the stages; returns the promotion's
        id (wait_promotion waits for it). Conflict names paths both changed
        (file_versions and merge resolve them); nothing to promote is
        WrongState, and with allow_empty NothingToPromote (a WrongState
        too, told apart from a sandbox in the wrong state)."""
        opts: dict[str, Variant] = {}
        if force:
            opts["Force"] = variant("Force", "b", True)
        if to is not None:
            opts["To"] = variant("To", "s", to)
        if allow_privileged:
            opts["AllowPrivileged"] = variant("AllowPrivileged", "b", True)
        if allow_empty:
            opts["AllowEmpty"] = variant("AllowEmpty", "b", True)
        promotion_id = str(self._call("Promote", "a{sv}", opts)[0])
        if not promotion_id:
            raise nothing_to_promote(self.name or self.id)
        return promotion_id

    def promotion(self, promotion_id: str) -> Promotion:
        return self.client.promotion(promotion_id)

    def wait_promotion(self, promotion_id: str, timeout: Optional[float] = None) -> Promotion:
        return self.client.wait_promotion(promotion_id, timeout)

    def status(self) -> Status:
        props = plain(self.client._call(self.object_path, PROPERTIES_INTERFACE, "GetAll", "s",
                                        [SANDBOX_INTERFACE])[0])
        g = props.get
        return Status(g("Id", self.id), g("Name", ""), g("Project", ""), g("State", ""), g("Owner", 0),
                      g("Created", 0), g("Expires", 0), g("Path", ""), g("Unit", ""), g("Network", ""),
                      g("Allow", []), g("ReadOnlyProject", False), g("Limits", {}), g("Usage", {}),
                      g("Staleness", ""), g("Boot", False), props)

    def system(self) -> tuple[str, list[str]]:
        """A booted sandbox's systemd (create's boot): its state as
        ``systemctl is-system-running`` says it (starting, or offline, while
        it boots; running; degraded when a unit failed; offline once it
        ended) and its failed units. WrongState for a sandbox not booted."""
        state, failed = self._call("SystemStatus")
        return str(state), [str(u) for u in failed]

    def fork(self, count: int = 1, names: Optional[Sequence[str]] = None,
             spawn: Optional[Sequence[Union[str, Sequence[str]]]] = None) -> ForkResult:
        """Makes count (1 to 16) new sandboxes whose files and system are
        this one's as they stand (it is frozen for the instant of the
        snapshots), with its settings, owner and base. names: one a fork,
        in order, at most count ("" for none). Background processes are
        not carried (the result's not_carried lists them); spawn's commands
        (lists, or strings: shell lines) start in each fork."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise invalid(f"fork count {count!r}: give 1 to 16 forks")
        if isinstance(names, str):
            raise TypeError("names is a list of str, one a fork, not a str")
        opts: dict[str, Variant] = {"Count": variant("Count", "u", count)}
        if names:
            opts["Names"] = variant("Names", "as", list(names))
        if isinstance(spawn, str):
            raise TypeError("spawn is a list of commands (each a list of str, or a shell line), not a str")
        if spawn:
            opts["Spawn"] = variant("Spawn", "aas", [command_argv(c) for c in spawn])
        ids, not_carried = self._call("Fork", "a{sv}", opts)
        wanted = list(names or [])
        forks = [Sandbox(self.client, str(i), SANDBOX_PATH_PREFIX + str(i), wanted[n] if n < len(wanted) else "")
                 for n, i in enumerate(ids)]
        return ForkResult(forks, [str(c) for c in not_carried])

    def stop(self) -> None:
        """Ends the sandbox's processes and keeps it (its files,
        checkpoints, ports, and the processes spawned with restart), state
        "stopped", across the daemon's restarts and the host's reboots.
        Calls that need it running raise Stopped until start. Stopping a
        stopped sandbox does nothing."""
        self._call("Stop")

    def start(self) -> None:
        """Runs a stopped sandbox again: a booted one boots, and the
        processes spawned with restart start again. Starting a running
        sandbox does nothing."""
        self._call("Start")

    def destroy(self) -> None:
        self._call("Destroy")


@dataclass
class ForkResult:
    """What Sandbox.fork made: the forks, in order, and the command lines
    of the background processes that ran in the sandbox and were not
    carried into them."""
    sandboxes: list[Sandbox]
    not_carried: list[str]
