"""Whole files through a pipe of the caller's: ReadFileTo and
WriteFileFrom. The daemon gets one end of a pipe (the write end, to read
a file; the read end, to write one) and copies the file through it while
its call runs; a thread here copies the other end meanwhile, since the
bus's thread must stay free to hear the reply. An ``ay`` crosses the bus
(godbus) at about 4 MB/s; a pipe at hundreds.

Who closes what: the passed end is closed once the reply came (Bus
.run_passing), which is what ends the reader's pipe (no writer left) or,
if the daemon gave up early, the writer's (no reader left: EPIPE); the
thread closes its own end when it is done, which ends the daemon's copy
if the thread gave up first."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterable, Optional, Union

from dbus_next.signature import Variant

from ._bus import Bus
from .errors import Failed, SandboxdError

Chunk = Union[bytes, bytearray, memoryview]
# How much one read or write of the pipe moves at most.
_PIPE_CHUNK = 1 << 20
# How long a copy the caller gave up (Ctrl-C) may take to end.
_WIND_DOWN = 6.0


class _Copier(threading.Thread):
    """One end of the pipe, copied in a thread while the call runs: the
    bytes it moved, or what it raised, are kept for the caller."""

    def __init__(self, copy: Callable[[threading.Event], int]) -> None:
        super().__init__(name="sandboxd-pipe", daemon=True)
        self.copy = copy
        self.stop = threading.Event()  # the caller gave up
        self.moved = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self.moved = self.copy(self.stop)
        except BaseException as e:
            self.error = e


def read_to(bus: Bus, object_path: str, path: str, sink: Callable[[bytes], Any], options: dict[str, Variant]) -> int:
    """ReadFileTo: the whole file path of the sandbox, chunk by chunk into
    sink (called in another thread); returns its size."""
    r, w = os.pipe()

    def read(stop: threading.Event) -> int:
        n = 0
        try:
            while not stop.is_set():
                chunk = os.read(r, _PIPE_CHUNK)
                if not chunk:
                    break
                sink(chunk)
                n += len(chunk)
        finally:
            os.close(r)  # a daemon still writing gets EPIPE
        return n

    return _run(bus, _Copier(read), w, object_path, "ReadFileTo", path, options)


def write_from(bus: Bus, object_path: str, path: str, chunks: Iterable[Chunk], options: dict[str, Variant]) -> int:
    """WriteFileFrom: chunks (taken in another thread) into the file path
    of the sandbox; returns how many bytes it wrote. What raises while
    taking them ends the file there: the daemon cannot tell an end from a
    failure, so the file is left short and the error raised."""
    r, w = os.pipe()

    def write(stop: threading.Event) -> int:
        n = 0
        try:
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                while view and not stop.is_set():
                    done = os.write(w, view[:_PIPE_CHUNK])
                    view, n = view[done:], n + done
                if stop.is_set():
                    break
        except BrokenPipeError:
            pass  # the daemon stopped reading: its reply says why
        finally:
            os.close(w)  # the file's end
        return n

    return _run(bus, _Copier(write), r, object_path, "WriteFileFrom", path, options)


def _run(bus: Bus, copier: _Copier, passed: int, object_path: str, member: str, path: str,
         options: dict[str, Variant]) -> int:
    """Calls member passing the pipe's end passed while copier copies the
    other; the daemon's error first, unless the copier's caused it."""
    copier.start()
    try:
        reply = bus.run_passing(passed, object_path, member, "sha{sv}", [path, 0, options])
    except SandboxdError as e:
        # The passed end is closed by now: the copier's pipe has ended.
        copier.join()
        if copier.error is not None:
            raise copier.error from e
        raise
    except BaseException:
        copier.stop.set()
        copier.join(_WIND_DOWN)
        raise
    copier.join()
    if copier.error is not None:
        raise copier.error
    n = int(reply.body[0])
    if n != copier.moved:
        raise Failed("", f"{member} {path}: the daemon copied {n} bytes, the pipe carried {copier.moved}")
    return n
