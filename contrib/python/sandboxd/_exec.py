"""Exec: the caller's pipes as the command's stdin, stdout and stderr,
fed and read on the bus's event loop until the command's end."""

from __future__ import annotations

import asyncio
import os

from dbus_next.signature import Variant

from ._bus import BUS_NAME, SANDBOX_INTERFACE, Bus
from .errors import SandboxdError
from .records import ExecResult

# How long output may still come once a command ended: what it left behind
# with Detach can hold its stdout open forever.
_DRAIN_AFTER_EXIT = 2.0


async def run_exec(bus: Bus, path: str, argv: list[str], opts: dict[str, Variant], stdin: bytes) -> ExecResult:
    """Exec with pipes of ours as the command's stdin, stdout and stderr
    (the daemon passes them on; nothing is copied through it), read here
    until the command's CommandExited and its output's end. A caller that
    gives up (Ctrl-C) kills the command, as sandboxctl does."""
    loop = asyncio.get_running_loop()
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    for fd in (in_w, out_r, err_r):
        os.set_blocking(fd, False)
    call = loop.create_task(bus.call(BUS_NAME, path, SANDBOX_INTERFACE, "Exec", "asa{sv}hhh", [argv, opts, 0, 1, 2],
                                     fds=[in_r, out_w, err_w]))
    # dbus-next sends the fds' numbers when it writes the message: ours stay
    # open until the reply (the command has its own copies by then).
    call.add_done_callback(lambda _: _close(in_r, out_w, err_w))
    try:
        reply = await asyncio.shield(call)
    except BaseException as e:
        _close(in_w, out_r, err_r)
        if isinstance(e, asyncio.CancelledError):
            call.add_done_callback(lambda f: f.cancelled() or f.exception() or
                                   loop.create_task(_kill(bus, path, f.result().body[0])))
        raise
    command = reply.body[0]
    out, err = bytearray(), bytearray()
    in_open = True

    async def feed() -> None:
        # Closed once written: the command then reads its input's end.
        nonlocal in_open
        try:
            await _write_all(loop, in_w, stdin)
        finally:
            os.close(in_w)
            in_open = False

    feeding = loop.create_task(feed())
    reading = [loop.create_task(_drain(loop, out_r, out)), loop.create_task(_drain(loop, err_r, err))]
    try:
        how, status, sig = await bus.wait_exit(reply.sender, command)
        await asyncio.wait(reading, timeout=_DRAIN_AFTER_EXIT)
    except asyncio.CancelledError:
        await _kill(bus, path, command)
        raise
    finally:
        for task in [feeding, *reading]:
            task.cancel()
        await asyncio.gather(feeding, *reading, return_exceptions=True)
        # A task cancelled before it started never ran its finally.
        _close(*([in_w] if in_open else []), out_r, err_r)
    return ExecResult(bytes(out), bytes(err), how, status, sig)


async def _kill(bus: Bus, path: str, command: str) -> None:
    """SIGKILL to command's process group; one that ended is no error."""
    try:
        await asyncio.wait_for(bus.call(BUS_NAME, path, SANDBOX_INTERFACE, "Signal", "si", [command, 9]), 5)
    except (SandboxdError, asyncio.TimeoutError):
        pass


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


async def _readable(loop: asyncio.AbstractEventLoop, fd: int, write: bool = False) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await fut
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def _drain(loop: asyncio.AbstractEventLoop, fd: int, into: bytearray) -> None:
    """Reads fd to its end into ``into`` (kept by the caller, so that what
    came is there even if this is cancelled)."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            await _readable(loop, fd)
            continue
        if not chunk:
            return
        into += chunk


async def _write_all(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
    """Writes data to fd; a command that stopped reading ends it."""
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await _readable(loop, fd, write=True)
    except BrokenPipeError:
        pass
