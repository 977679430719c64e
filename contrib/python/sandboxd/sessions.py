"""Session: an interpreter kept between inputs (OpenSession, Eval,
CloseSession): python3, node, sh, go or sql."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import NoSuchCommand
from .records import EvalResult

if TYPE_CHECKING:
    from .sandbox import Sandbox


class Session:
    """A session of a sandbox (Sandbox.open_session): ``eval`` runs an
    input in the scope the earlier ones left. Close it, or use it in a
    ``with``; it also ends with its interpreter, the sandbox or the daemon
    (then NoSuchCommand)."""

    def __init__(self, sandbox: Sandbox, session_id: str, language: str) -> None:
        self.sandbox, self.id, self.language = sandbox, session_id, language

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, language={self.language!r}, sandbox={self.sandbox.id!r})"

    def eval(self, code: str) -> EvalResult:
        """Runs code and returns what it wrote and its status. One input at
        a time: while one runs, at most 2 more wait (Busy past that); one
        that runs past 5 minutes ends the session."""
        if not isinstance(code, str):
            raise TypeError(f"a session's input is a str, not {type(code).__name__}")
        output, status = self.sandbox._call("Eval", "ss", self.id, code)
        return EvalResult(str(output), int(status))

    def close(self) -> None:
        """Ends the session and its interpreter."""
        self.sandbox._call("CloseSession", "s", self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except NoSuchCommand:
            pass  # it ended already (its interpreter's end, or an input past 5 minutes)
