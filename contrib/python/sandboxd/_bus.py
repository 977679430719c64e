"""The connection to the bus: dbus-next's asyncio connection on an event
loop in a thread of its own, calls run there for the caller's thread, and
the signals an exec waits for (CommandExited, the daemon's
NameOwnerChanged) heard there while the caller does something else.

A private thread rather than ``run_until_complete`` on the caller's
thread: the client then works where the caller's thread already runs an
event loop (agent frameworks are mostly asyncio)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Coroutine, Optional, Sequence, TypeVar

from dbus_next.aio.message_bus import MessageBus
from dbus_next.constants import BusType, MessageType
from dbus_next.message import Message

from .errors import DaemonUnavailable, error_of, invalid, restarted

BUS_NAME = "org.sandboxd1"
MANAGER_PATH = "/org/sandboxd1"
MANAGER_INTERFACE = "org.sandboxd1.Manager"
SANDBOX_INTERFACE = "org.sandboxd1.Sandbox"
SANDBOX_PATH_PREFIX = "/org/sandboxd1/sandbox/"
PROPERTIES_INTERFACE = "org.freedesktop.DBus.Properties"
# How often a waiting exec asks whether the daemon that runs it is still
# the bus name's owner, besides hearing NameOwnerChanged.
_OWNER_CHECK = 2.0
# How many CommandExited signals are kept for an exec yet to wait for them.
_KEPT_EXITS = 1024

T = TypeVar("T")


class Bus:
    """The D-Bus connection, on an event loop that runs in a thread of its
    own; run() hands it a coroutine and waits for its result."""

    def __init__(self, address: Optional[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sandboxd-bus", daemon=True)
        self.thread.start()
        self.bus: Optional[MessageBus] = None
        # CommandExited by (daemon, command) that came before their exec
        # waited (one can come before Exec's reply), and the waiters.
        self.exits: dict[tuple[str, str], tuple[str, int, int]] = {}
        self.waiting: dict[tuple[str, str], asyncio.Future[tuple[str, int, int]]] = {}
        self.gone: set[str] = set()  # daemons' unique names that left the bus
        try:
            self.run(self._connect(address))
        except BaseException:
            self.close()
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        ended = threading.Event()

        async def tracked() -> T:
            try:
                return await coro
            finally:
                ended.set()

        fut = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            return fut.result()
        except KeyboardInterrupt:
            # The coroutine cleans up as it is cancelled (an exec kills its
            # command): a moment for that before the caller goes on.
            fut.cancel()
            ended.wait(6)
            raise

    async def _connect(self, address: Optional[str]) -> None:
        try:
            bus = MessageBus(bus_type=BusType.SYSTEM, negotiate_unix_fd=True) if address is None else \
                MessageBus(bus_address=address, negotiate_unix_fd=True)
            self.bus = await bus.connect()
        except Exception as e:
            raise DaemonUnavailable("", f"cannot reach the system bus: {e}") from e
        self.bus.add_message_handler(self._on_message)
        for rule in ("type='signal',interface='org.sandboxd1.Sandbox',member='CommandExited'",
                     "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                     f"member='NameOwnerChanged',arg0='{BUS_NAME}'"):
            await self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", "s",
                            [rule])

    def _on_message(self, msg: Message) -> bool:
        if msg.message_type != MessageType.SIGNAL:
            return False
        if msg.interface == SANDBOX_INTERFACE and msg.member == "CommandExited" and msg.signature == "ssii":
            key = (msg.sender, msg.body[0])
            end = (msg.body[1], msg.body[2], msg.body[3])
            fut = self.waiting.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(end)
            else:
                self.exits[key] = end
                if len(self.exits) > _KEPT_EXITS:  # of commands no one waits for any more
                    del self.exits[next(iter(self.exits))]
        elif (msg.member == "NameOwnerChanged" and msg.sender == "org.freedesktop.DBus" and msg.signature == "sss"
              and msg.body[0] == BUS_NAME):
            old = msg.body[1]
            if old:
                self.gone.add(old)
                for key, fut in list(self.waiting.items()):
                    if key[0] == old and not fut.done():
                        fut.set_exception(restarted())
        return False

    async def call(self, dest: str, path: str, iface: str, member: str, signature: str = "",
                   body: Sequence[Any] = (), fds: Sequence[int] = ()) -> Message:
        """Calls member and returns the reply; an error reply raises its SandboxdError."""
        assert self.bus is not None
        msg = Message(destination=dest, path=path, interface=iface, member=member, signature=signature,
                      body=list(body), unix_fds=list(fds))
        try:
            reply = await self.bus.call(msg)
        except (ValueError, TypeError) as e:  # what the arguments' types cannot hold
            raise invalid(f"calling {member}: {e}") from e
        except Exception as e:
            raise DaemonUnavailable("org.freedesktop.DBus.Error.Disconnected",
                                    f"calling {member}: the bus connection failed: {e}") from e
        assert reply is not None
        if reply.message_type == MessageType.ERROR:
            raise error_of(reply)
        return reply

    def run_passing(self, fd: int, path: str, member: str, signature: str, body: Sequence[Any]) -> Message:
        """Calls member of a sandboxd object passing fd, which it closes in
        every case: once the reply came, even if the caller gave up before
        (dbus-next sends the descriptor when it writes the message, which
        may be after that; the daemon has a copy of its own by the reply),
        or here if the call never started."""
        first = threading.Lock()  # who has the fd: the call, or the caller giving up before it

        async def call() -> Message:
            if not first.acquire(blocking=False):
                raise asyncio.CancelledError
            task = self.loop.create_task(self.call(BUS_NAME, path, SANDBOX_INTERFACE, member, signature, body,
                                                   fds=[fd]))
            task.add_done_callback(lambda _: os.close(fd))
            return await asyncio.shield(task)

        try:
            return self.run(call())
        except BaseException:
            if first.acquire(blocking=False):
                os.close(fd)
            raise

    async def wait_exit(self, daemon: str, command: str) -> tuple[str, int, int]:
        """Waits for command's CommandExited from daemon (a unique name); a
        daemon that leaves the bus meanwhile raises DaemonRestarted."""
        key = (daemon, command)
        if key in self.exits:
            return self.exits.pop(key)
        if daemon in self.gone:
            raise restarted()
        fut: asyncio.Future[tuple[str, int, int]] = self.loop.create_future()
        self.waiting[key] = fut
        try:
            while True:
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), _OWNER_CHECK)
                except asyncio.TimeoutError:
                    pass
                # A restart whose NameOwnerChanged came before the match.
                try:
                    reply = await self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                            "GetNameOwner", "s", [BUS_NAME])
                    owner = reply.body[0]
                except DaemonUnavailable:
                    owner = ""
                if owner != daemon and not fut.done():
                    raise restarted()
        finally:
            self.waiting.pop(key, None)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self.bus is not None and self.loop.is_running():
            try:
                self.run(self._disconnect())
            except Exception:
                pass  # it is going anyway
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()

    async def _disconnect(self) -> None:
        assert self.bus is not None
        self.bus.disconnect()  # type: ignore[no-untyped-call]
        await asyncio.wait_for(self.bus.wait_for_disconnect(), 1.0)  # type: ignore[no-untyped-call]
        # dbus-next never closes its socket itself: dropping the bus does.
        self.bus = None
