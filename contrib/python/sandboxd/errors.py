"""The errors of sandboxd and of the bus, by their D-Bus names."""

from __future__ import annotations

from dbus_next.message import Message


class SandboxdError(Exception):
    """An error of sandboxd or of the bus: ``name`` is the D-Bus error name
    ("" for what the client itself found), ``message`` the daemon's words."""

    names: tuple[str, ...] = ()

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{message} [{name}]" if name else message)
        self.name = name
        self.message = message


class AccessDenied(SandboxdError):
    """The daemon (or the bus policy) refuses the caller."""
    names = ("org.sandboxd1.Error.AccessDenied", "org.freedesktop.DBus.Error.AccessDenied")


class NoSuchSandbox(SandboxdError):
    """No sandbox of that id or name that the caller may see."""
    names = ("org.sandboxd1.Error.NoSuchSandbox",)


class NoSuchProject(SandboxdError):
    names = ("org.sandboxd1.Error.NoSuchProject",)


class InvalidArgs(SandboxdError, ValueError):
    """Bad input: an unknown option, a wrong type, an impossible value, a
    path out of bounds; the message names what is wrong. Also what the
    client cannot send (a negative size), under the same name."""
    names = ("org.freedesktop.DBus.Error.InvalidArgs",)


class Failed(SandboxdError):
    names = ("org.sandboxd1.Error.Failed",)


class LimitReached(SandboxdError):
    names = ("org.sandboxd1.Error.LimitReached",)


class WrongState(SandboxdError):
    names = ("org.sandboxd1.Error.WrongState",)


class Stopped(SandboxdError):
    """The sandbox is stopped (Sandbox.stop): start it first (Sandbox.start)."""
    names = ("org.sandboxd1.Error.Stopped",)


class NothingToPromote(WrongState):
    """The sandbox changed nothing since its base (promote's
    ``allow_empty``); nothing was recorded. A WrongState too, as the
    daemon's answer without ``allow_empty`` is."""


class NoSuchCheckpoint(SandboxdError):
    names = ("org.sandboxd1.Error.NoSuchCheckpoint",)


class NoSuchCommand(SandboxdError):
    names = ("org.sandboxd1.Error.NoSuchCommand",)


class Exists(SandboxdError):
    names = ("org.sandboxd1.Error.Exists",)


class Conflict(SandboxdError):
    """The project changed paths the sandbox changed too; the message names them."""
    names = ("org.sandboxd1.Error.Conflict",)


class Busy(SandboxdError):
    names = ("org.sandboxd1.Error.Busy",)


class NoSuchPromotion(SandboxdError):
    names = ("org.sandboxd1.Error.NoSuchPromotion",)


class NoIdmap(SandboxdError):
    names = ("org.sandboxd1.Error.NoIdmap",)


class NoSuchFile(SandboxdError):
    """The file API's path names nothing in the sandbox."""
    names = ("org.sandboxd1.Error.NoSuchFile",)


class NoProgram(SandboxdError):
    """exec's or spawn's program is not in the sandbox (a shell's 127)."""
    names = ("org.sandboxd1.Error.NoProgram",)


class NotExecutable(SandboxdError):
    """The program is there but cannot be run (a shell's 126)."""
    names = ("org.sandboxd1.Error.NotExecutable",)


class DaemonUnavailable(SandboxdError):
    """sandboxd is not on the bus, or went away during the call."""
    names = ("org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
             "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Disconnected")


class DaemonRestarted(DaemonUnavailable):
    """sandboxd stopped or restarted while a command ran: its end is not
    known (the command may still run)."""


_ERRORS: dict[str, type[SandboxdError]] = {
    name: cls
    for cls in (AccessDenied, NoSuchSandbox, NoSuchProject, InvalidArgs, Failed, LimitReached, WrongState, Stopped,
                NoSuchCheckpoint, NoSuchCommand, Exists, Conflict, Busy, NoSuchPromotion, NoIdmap, NoSuchFile,
                NoProgram, NotExecutable, DaemonUnavailable)
    for name in cls.names
}


def error_of(reply: Message) -> SandboxdError:
    """The SandboxdError of an error reply, of the class of its name."""
    name = reply.error_name or ""
    text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else name
    return _ERRORS.get(name, SandboxdError)(name, text)


def invalid(message: str) -> InvalidArgs:
    """What the client itself refuses to send, under the daemon's name for it."""
    return InvalidArgs(InvalidArgs.names[0], message)


def nothing_to_promote(sandbox: str) -> NothingToPromote:
    return NothingToPromote(WrongState.names[0], f"promoting sandbox {sandbox}: nothing to promote: "
                                                 "it has no changes since its base")


def restarted() -> DaemonRestarted:
    return DaemonRestarted("", "sandboxd stopped or restarted while the command ran: its status is lost "
                               "(the command may still run)")
