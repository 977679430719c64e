"""A client of sandboxd for Python programs and agents, over D-Bus.

It speaks the wire contract of docs/dbus-api.md (org.sandboxd1 on the
system bus) with Debian's python3-dbus-next, and offers the verbs of the Go
client: ``Client().create("web")`` gives a ``Sandbox``, whose ``exec``,
``read_file``, ``write_file``, ``upload``, ``download``, ``edit_file``,
``diff``, ``checkpoint``, ``rollback``, ``promote``, ``file_versions``,
``merge``, ``open_session``, ``fork``, ``stop`` and ``start`` do what
sandboxctl's commands do.

The API is synchronous. dbus-next's connection is asyncio's; each Client
runs it on an event loop of its own, in a thread of its own (_bus.py), and
every call waits for its coroutine there.

Errors the daemon answers are SandboxdError, with the D-Bus error name and
message; the names callers branch on have subclasses (NoSuchSandbox,
AccessDenied, InvalidArgs, Conflict, ...).

The modules: errors (the error classes), records (what the daemon answers,
as dataclasses), client (Client), sandbox (Sandbox), files (its file API);
the rest is private.
"""

from dbus_next.signature import Variant

from ._bus import (BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH, PROPERTIES_INTERFACE, SANDBOX_INTERFACE,
                   SANDBOX_PATH_PREFIX)
from ._values import Env, Size, parse_size
from .client import Client
from .errors import (AccessDenied, Busy, Conflict, DaemonRestarted, DaemonUnavailable, Exists, Failed, InvalidArgs,
                     LimitReached, NoIdmap, NoProgram, NoSuchCheckpoint, NoSuchCommand, NoSuchFile, NoSuchProject,
                     NoSuchPromotion, NoSuchSandbox, NotExecutable, NothingToPromote, SandboxdError, Stopped,
                     WrongState)
from .files import MAX_FILE_CHUNK
from .records import (Change, Checkpoint, EvalResult, ExecResult, FileEntry, FileVersion, LogChunk, MergeHunk,
                      MergeResult, Process, Promotion, PromotionDiff, PromotionEntry, SandboxInfo, Stage, Status,
                      TryReport, TryResult)
from .sandbox import ForkResult, Sandbox
from .sessions import Session

__all__ = [
    "BUS_NAME", "MANAGER_PATH", "MANAGER_INTERFACE", "SANDBOX_INTERFACE", "SANDBOX_PATH_PREFIX",
    "PROPERTIES_INTERFACE", "MAX_FILE_CHUNK", "Size", "Env", "Variant", "parse_size",
    "Client", "Sandbox", "Session",
    "SandboxdError", "AccessDenied", "NoSuchSandbox", "NoSuchProject", "InvalidArgs", "Failed", "LimitReached",
    "WrongState", "Stopped", "NoSuchCheckpoint", "NoSuchCommand", "Exists", "Conflict", "Busy", "NoSuchPromotion",
    "NoIdmap",
    "NoSuchFile", "NoProgram", "NotExecutable", "NothingToPromote", "DaemonUnavailable", "DaemonRestarted",
    "SandboxInfo", "ExecResult", "FileEntry", "Change", "Checkpoint", "LogChunk", "Process", "Stage", "Promotion",
    "TryReport", "TryResult", "Status", "PromotionEntry", "PromotionDiff", "FileVersion", "MergeHunk", "MergeResult",
    "EvalResult", "ForkResult",
]
