"""A sandbox's files, as its commands see them: read, written, listed,
edited, and copied to and from the host.

Whole files go through a pipe (ReadFileTo, WriteFileFrom: any size, at
the pipe's speed); a part of one (an offset, a bound) through ReadFile and
WriteFile, in chunks of at most MAX_FILE_CHUNK."""

from __future__ import annotations

import os
import posixpath
import stat
import tempfile
from typing import TYPE_CHECKING, Any, Optional

from dbus_next.signature import Variant

from ._bus import SANDBOX_INTERFACE
from ._stream import read_to, write_from
from ._values import variant
from .errors import invalid
from .records import FileEntry

if TYPE_CHECKING:
    from .client import Client

# MAX_FILE_CHUNK bounds one ReadFile or WriteFile (sandboxd1.MaxFileChunk).
MAX_FILE_CHUNK = 4 << 20
# How much of a host file upload reads at once.
_UPLOAD_CHUNK = 1 << 20


class Files:
    """What Sandbox does with its files (its base class). A relative path
    is from the project's directory; ``..`` and symlinks resolve inside
    the sandbox; only regular files are read or written (a fifo, a device
    or a directory is InvalidArgs); root: as root of the sandbox's user
    namespace rather than as the caller."""

    client: Client
    object_path: str

    def _call(self, member: str, signature: str = "", *body: Any) -> list[Any]:
        return self.client._call(self.object_path, SANDBOX_INTERFACE, member, signature, body)

    def read_file(self, path: str, offset: int = 0, max: Optional[int] = None) -> bytes:
        """The file's bytes from offset (all of them, or at most max)."""
        if offset == 0 and max is None:
            out = bytearray()
            read_to(self.client._bus, self.object_path, path, out.extend, {})
            return bytes(out)
        out = bytearray()
        while max is None or len(out) < max:
            want = MAX_FILE_CHUNK if max is None else min(MAX_FILE_CHUNK, max - len(out))
            data = self._call("ReadFile", "stt", path, offset + len(out), want)[0]
            out += data
            if len(data) < want:
                break
        return bytes(out)

    def write_file(self, path: str, data: bytes, mode: Optional[int] = None, append: bool = False,
                   create: bool = True, offset: Optional[int] = None, root: bool = False) -> None:
        """Writes data to the file (emptied first, unless append, or offset:
        written there), making it (with mode, default 0o644) if missing and
        create."""
        opts = _write_options(mode, create, root)
        if offset is None:
            if append:
                opts["Append"] = variant("Append", "b", True)
            write_from(self.client._bus, self.object_path, path, [data], opts)
            return
        for i in range(0, max(len(data), 1), MAX_FILE_CHUNK):
            opts["Offset"] = variant("Offset", "t", offset + i)
            self._call("WriteFile", "saya{sv}", path, bytes(data[i:i + MAX_FILE_CHUNK]), opts)

    def download(self, path: str, local_path: str, root: bool = False) -> int:
        """Copies the file path to local_path on the host (a directory: the
        file's name in it), with the file's permission bits; returns its
        size. It is written beside and renamed: a copy that fails leaves
        no part of the file."""
        entries = self.list_files(path, root=root)
        mode = entries[0].mode & 0o777 if len(entries) == 1 and entries[0].kind == "file" else 0o644
        if os.path.isdir(local_path):
            local_path = os.path.join(local_path, posixpath.basename(path.rstrip("/")))
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(local_path)}.", suffix=".sandboxd",
                                   dir=os.path.dirname(os.path.abspath(local_path)))
        try:
            with os.fdopen(fd, "wb") as f:
                n = read_to(self.client._bus, self.object_path, path, f.write, _root(root))
                os.fchmod(f.fileno(), mode)
            os.replace(tmp, local_path)
        except BaseException:
            os.unlink(tmp)
            raise
        return n

    def upload(self, local_path: str, path: str, mode: Optional[int] = None, root: bool = False) -> int:
        """Copies the host's regular file local_path to path in the sandbox
        (emptied first, or made with mode: by default local_path's permission
        bits); returns its size. A read of local_path that fails leaves the
        sandbox's file short, and raises."""
        # Non-blocking: opening a fifo would wait for a writer.
        with open(os.open(local_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise invalid(f"uploading {local_path}: not a regular file")
            opts = _write_options(stat.S_IMODE(st.st_mode) if mode is None else mode, True, root)
            chunks = iter(lambda: f.read(_UPLOAD_CHUNK), b"")
            return write_from(self.client._bus, self.object_path, path, chunks, opts)

    def list_files(self, path: str = ".", recursive: bool = False, max_entries: Optional[int] = None,
                   root: bool = False) -> list[FileEntry]:
        """A directory's entries (recursive: all below it, symlinks not
        followed; at most max_entries, 10,000), or a file's own entry."""
        opts = {"Recursive": variant("Recursive", "b", recursive)}
        if max_entries is not None:
            opts["MaxEntries"] = variant("MaxEntries", "u", max_entries)
        opts.update(_root(root))
        return [FileEntry(*e) for e in self._call("ListFiles", "sa{sv}", path, opts)[0]]

    def edit_file(self, path: str, old: str, new: str) -> int:
        """Replaces every occurrence of old by new; returns how many (none is InvalidArgs)."""
        return int(self._call("EditFile", "sss", path, old, new)[0])


def _write_options(mode: Optional[int], create: bool, root: bool) -> dict[str, Variant]:
    opts = {"Create": variant("Create", "b", create)}
    if mode is not None:
        opts["Mode"] = variant("Mode", "u", mode)
    opts.update(_root(root))
    return opts


def _root(root: bool) -> dict[str, Variant]:
    return {"Root": variant("Root", "b", True)} if root else {}
