"""What crosses the bus: the daemon's answers as typed records."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class SandboxInfo:
    """One sandbox as ListSandboxes gives it; times are µs since the epoch."""
    id: str
    name: str
    project: str
    state: str
    owner: int
    created: int
    object_path: str


@dataclass(frozen=True)
class ExecResult:
    """How a command ended (CommandExited) and what it wrote. ``how`` is
    exited, signaled, oom-killed, timed-out, output-limit or lost; for all
    but exited, ``status`` is 128 + the signal, as a shell gives it."""
    stdout: bytes
    stderr: bytes
    how: str
    status: int
    signal: int

    @property
    def ok(self) -> bool:
        return self.how == "exited" and self.status == 0


@dataclass(frozen=True)
class FileEntry:
    """One of ListFiles' entries; ``path`` is from the listed directory."""
    path: str
    kind: str  # file, dir, symlink, fifo, socket, device
    mode: int
    uid: int
    size: int
    modified: int  # µs since the epoch
    target: str  # a symlink's; "" otherwise


@dataclass(frozen=True)
class Change:
    """One of Diff's entries."""
    kind: str  # added, modified, deleted, renamed, metadata
    type: str  # file, dir, symlink, ...
    path: str
    new_path: str  # of a rename


@dataclass(frozen=True)
class Checkpoint:
    name: str
    created: int  # µs since the epoch
    layer: bool  # the system layer is in it too


@dataclass(frozen=True)
class LogChunk:
    """Output of a background process: ``next`` is where to read on,
    ``ended`` is true once it ended and ``next`` is the log's end."""
    data: bytes
    next: int
    ended: bool


@dataclass(frozen=True)
class Process:
    """A background process Spawn started (ListProcesses)."""
    id: str
    argv: list[str]
    pid: int
    started: int
    ended: int  # 0 while it runs
    how: str  # "" while it runs
    status: int
    signal: int


@dataclass(frozen=True)
class Stage:
    """One stage of a promotion (its record's ``stages``)."""
    name: str
    target: str
    state: str  # pending, waiting, applying, checking, passed, failed, rejected, skipped
    approval: str
    error: str
    checks: list[dict[str, Any]]


@dataclass(frozen=True)
class Promotion:
    """GetPromotion's record; ``record`` is the whole JSON of it."""
    id: str
    sandbox: str
    project: str
    state: str  # running, waiting, done, failed, rejected
    changes: int
    conflicts: list[str]
    stages: list[Stage]
    error: str
    record: dict[str, Any] = field(repr=False)

    @staticmethod
    def from_json(text: str) -> Promotion:
        r = json.loads(text)
        stages = [Stage(s.get("name", ""), s.get("target", ""), s.get("state", ""), s.get("approval", ""),
                        s.get("error", ""), s.get("checks") or []) for s in r.get("stages") or []]
        return Promotion(r["id"], r.get("sandbox", ""), r.get("project", ""), r.get("state", ""),
                         r.get("changes", 0), r.get("conflicts") or [], stages, r.get("error", ""), r)


@dataclass(frozen=True)
class PromotionEntry:
    """One of ListPromotions' entries; ``stage`` is the one it is at, or
    ended at; ``created`` µs since the epoch."""
    id: str
    sandbox: str
    sandbox_name: str
    project: str
    state: str  # running, waiting, done, failed, rejected
    stage: str
    changes: int
    created: int


@dataclass(frozen=True)
class PromotionDiff:
    """What a promotion carries (PromotionDiff): its unified diff, the
    sandbox's text (escape it before a terminal shows it), and the digest
    of that change, which approve_promotion's ``digest`` names."""
    text: str
    digest: str


@dataclass(frozen=True)
class FileVersion:
    """One of a conflicting path's versions (FileVersions). ``data`` is at
    most the bound asked for (``truncated`` then); ``note`` says why there
    is none (a symlink's target, a file the caller could not read...)."""
    which: str  # base, project, sandbox
    kind: str  # file, absent, symlink, directory, other, unreadable
    size: int
    binary: bool  # its bytes hold a NUL
    truncated: bool
    data: bytes
    note: str


@dataclass(frozen=True)
class MergeHunk:
    """A hunk of a merge that conflicts: each version's start line (the
    first is 1) and line count (0: a place after the start line) and its
    text there."""
    sandbox_start: int
    sandbox_lines: int
    base_start: int
    base_lines: int
    project_start: int
    project_lines: int
    sandbox: str
    base: str
    project: str


@dataclass(frozen=True)
class MergeResult:
    """How a three-way merge went: ``clean`` (no hunk conflicts),
    ``written`` (the sandbox's file now holds ``merged``), the hunks that
    conflict, and the merged text (with markers where it conflicts)."""
    clean: bool
    written: bool
    hunks: list[MergeHunk]
    merged: bytes


@dataclass(frozen=True)
class EvalResult:
    """What a session's input wrote (stdout and stderr together, at most 1
    MiB) and its status: 0 when it ran without error (Python: 1 for an
    exception; go: 2 when it does not compile; sql: 1 when psql said
    ERROR)."""
    output: str
    status: int

    @property
    def ok(self) -> bool:
        return self.status == 0


@dataclass(frozen=True)
class TryResult:
    """How one sandbox of a Try did (sandboxd1.TryResult). ``result`` is
    pass, or fail and what failed how ("fail (check: exit 1)");
    ``failed_in`` is command or check, and ``how``, ``status`` and
    ``signal`` that step's end; ``changed``, ``disk_used`` and
    ``memory_peak`` are None where the host cannot tell; the outputs are
    the last 64 KiB of each step's, None where it did not run. ``record``
    is the whole JSON of it."""
    name: str
    id: str
    command: str
    input: Optional[str]
    passed: bool
    result: str
    failed_in: str
    how: str
    status: int
    signal: int
    seconds: float
    command_seconds: float
    check_seconds: float
    changed: Optional[int]
    ignored: int
    disk_used: Optional[int]
    memory_peak: Optional[int]
    winner: bool
    kept: bool
    command_output: Optional[str]
    check_output: Optional[str]
    record: dict[str, Any] = field(repr=False)

    @staticmethod
    def from_json(r: dict[str, Any]) -> TryResult:
        g = r.get
        return TryResult(g("name", ""), g("id", ""), g("command", ""), g("input"), bool(g("passed", False)),
                         g("result", ""), g("failed_in", ""), g("how", ""), g("status", 0), g("signal", 0),
                         g("seconds", 0.0), g("command_seconds", 0.0), g("check_seconds", 0.0), g("changed"),
                         g("ignored", 0), g("disk_used"), g("memory_peak"), bool(g("winner", False)),
                         bool(g("kept", False)), g("command_output"), g("check_output"), r)


@dataclass(frozen=True)
class TryReport:
    """Try's report: each sandbox's result in the order of the variants
    (or inputs), the winner's index (-1: none passed), and the sandboxes
    it could not destroy."""
    results: list[TryResult]
    winner: int
    left: list[str]


@dataclass(frozen=True)
class Status:
    """A sandbox's properties (docs/dbus-api.md); times in µs since the epoch."""
    id: str
    name: str
    project: str
    state: str
    owner: int
    created: int
    expires: int
    path: str
    unit: str
    network: str
    allow: list[str]
    read_only_project: bool
    limits: dict[str, Any]
    usage: dict[str, Any]
    staleness: str
    boot: bool  # it runs a systemd of its own (Sandbox.system)
    properties: dict[str, Any] = field(repr=False)
