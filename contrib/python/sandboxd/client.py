"""Client: the connection to sandboxd and the manager's verbs."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping, Optional, Sequence, Union

from dbus_next.signature import Variant

from ._bus import BUS_NAME, MANAGER_INTERFACE, MANAGER_PATH, Bus
from ._values import Env, Size, create_options, exec_options, usec, variant
from .errors import invalid
from .records import Promotion, PromotionDiff, PromotionEntry, SandboxInfo, TryReport, TryResult
from .sandbox import Sandbox


class Client:
    """A connection to sandboxd on the system bus (``address`` overrides it,
    as DBUS_SYSTEM_BUS_ADDRESS does). Close it, or use it in a ``with``."""

    def __init__(self, address: Optional[str] = None) -> None:
        self._bus = Bus(address)

    def close(self) -> None:
        self._bus.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, path: str, iface: str, member: str, signature: str = "", body: Sequence[Any] = ()) -> list[Any]:
        return self._bus.run(self._bus.call(BUS_NAME, path, iface, member, signature, body)).body

    def _manager(self, member: str, signature: str = "", *body: Any) -> list[Any]:
        return self._call(MANAGER_PATH, MANAGER_INTERFACE, member, signature, body)

    def create(self, project: str, name: Optional[str] = None, network: Optional[str] = None,
               memory_max: Optional[Size] = None, *, allow: Optional[Sequence[str]] = None,
               profile: Optional[str] = None, ttl: Optional[float] = None, disk_quota: Optional[Size] = None,
               tasks_max: Optional[int] = None, cpu_quota: Optional[int] = None,
               read_only_project: Optional[bool] = None, boot: Optional[bool] = None,
               options: Optional[Mapping[str, Variant]] = None) -> Sandbox:
        """Makes a sandbox of project. network: none, allowlist (with allow:
        "host:port" entries) or host; memory_max and disk_quota: bytes or
        "512M"; ttl: seconds; cpu_quota: percent of one CPU; boot: it runs
        a systemd of its own, on which ``exec(["systemctl", "start",
        "nginx"], root=True)`` starts the host's service on the sandbox's
        copies of its files (Sandbox.system says when it is up; not with
        network host); options: more of CreateSandbox's, as Variants."""
        opts = create_options(name, network, memory_max, allow, profile, ttl, disk_quota, tasks_max, cpu_quota,
                              read_only_project, boot, options)
        sid, path = self._manager("CreateSandbox", "sa{sv}", project, opts)
        return Sandbox(self, sid, path, name or "")

    def sandbox(self, id_or_name: str) -> Sandbox:
        """The sandbox of that id, name, or start of an id that no other
        sandbox's id has, as sandboxctl finds them; NoSuchSandbox if the
        caller has none, InvalidArgs if several ids start so."""
        if not id_or_name:
            raise invalid("a sandbox id or name is empty")
        # The daemon resolves it (FindSandbox): one call, where a listing
        # of every sandbox grew with their number.
        e = SandboxInfo(*self._manager("FindSandbox", "s", id_or_name)[0])
        return Sandbox(self, e.id, e.object_path, e.name)

    def projects(self) -> list[tuple[str, str, str]]:
        """The projects the caller may use: (name, location, origin)."""
        return [(p[0], p[1], p[2]) for p in self._manager("ListProjects")[0]]

    def try_(self, project: str, variants: Sequence[str], check: str, keep: str = "winner", *,
             name: Optional[str] = None, inputs: Optional[Sequence[str]] = None, parallel: Optional[int] = None,
             timeout: Optional[float] = None, env: Env = None, cwd: Optional[str] = None, root: bool = False,
             network: Optional[str] = None, memory_max: Optional[Size] = None,
             options: Optional[Mapping[str, Variant]] = None,
             from_: Optional[Union[str, Sandbox]] = None) -> TryReport:
        """Runs each variant (a shell line) and then check in a sandbox of
        its own; keep is winner, all or none. timeout: seconds of each step
        (0: none; default 10 minutes). It lasts as long as the slowest.
        from_: a sandbox (a Sandbox, its id or its name) whose forks the
        variants run in, rather than new sandboxes of project (then the
        sandbox's project): what it set up is there in each."""
        opts = create_options(name=name, network=network, memory_max=memory_max, options=options)
        opts.update(exec_options(env, cwd, root, None))
        if timeout is not None:
            opts["TimeoutUSec"] = variant("TimeoutUSec", "t", usec(timeout))
        if inputs is not None:
            opts["Inputs"] = variant("Inputs", "as", list(inputs))
        if parallel is not None:
            opts["Parallel"] = variant("Parallel", "u", parallel)
        if from_ is not None:
            source = from_.id if isinstance(from_, Sandbox) else from_
            if not source:
                raise invalid("from_ is empty: give the sandbox whose forks the variants run in")
            opts["From"] = variant("From", "s", source)
        report = json.loads(self._manager("Try", "sasssa{sv}", project, list(variants), check, keep, opts)[0])
        return TryReport([TryResult.from_json(r) for r in report.get("results") or []], report.get("winner", -1),
                         report.get("left") or [])

    def promotion(self, promotion_id: str) -> Promotion:
        return Promotion.from_json(self._manager("GetPromotion", "s", promotion_id)[0])

    def wait_promotion(self, promotion_id: str, timeout: Optional[float] = None, poll: float = 0.1) -> Promotion:
        """Waits while the promotion runs and returns its record: state done,
        waiting (for an admin's approval), failed or rejected."""
        async def wait() -> Promotion:
            while True:
                reply = await self._bus.call(BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "GetPromotion", "s",
                                             [promotion_id])
                p = Promotion.from_json(reply.body[0])
                if p.state != "running":
                    return p
                await asyncio.sleep(poll)
        try:
            return self._bus.run(asyncio.wait_for(wait(), timeout))
        except asyncio.TimeoutError:
            raise TimeoutError(f"promotion {promotion_id} still runs after {timeout}s") from None

    def promotions(self) -> list[PromotionEntry]:
        """The promotions the caller may see (its own; every one for an
        admin), oldest first."""
        return [PromotionEntry(*e) for e in self._manager("ListPromotions")[0]]

    def promotion_diff(self, promotion_id: str, context: Optional[int] = None,
                       max_bytes: Optional[int] = None) -> PromotionDiff:
        """What the promotion carries, as a unified diff read from its frozen
        source (as Sandbox.unified_diff shows a sandbox's), and the digest
        of that change, for approve_promotion. The promotion's owner and
        admins may read it until it is finished (WrongState then)."""
        opts: dict[str, Variant] = {}
        if context is not None:
            opts["Context"] = variant("Context", "u", context)
        if max_bytes is not None:
            opts["MaxBytes"] = variant("MaxBytes", "t", max_bytes)
        text, digest = self._manager("PromotionDiff", "sa{sv}", promotion_id, opts)
        return PromotionDiff(str(text), str(digest))

    def approve_promotion(self, promotion_id: str, digest: Optional[str] = None) -> None:
        """Lets a promotion that waits for an admin go on to its stage.
        Admins only (AccessDenied); one that does not wait is WrongState.
        digest: that of the change the admin saw (promotion_diff's); when
        the promotion's change is another, the approval is refused
        (WrongState) and nothing changes."""
        if digest is None:
            self._manager("ApprovePromotion", "s", promotion_id)
            return
        if not digest:
            raise invalid("an empty digest: give promotion_diff's, the digest of the change you saw")
        self._manager("ApprovePromotionWithOptions", "sa{sv}", promotion_id,
                      {"Digest": variant("Digest", "s", digest)})

    def reject_promotion(self, promotion_id: str, reason: str) -> None:
        """Ends a promotion that waits for an admin, as rejected with reason.
        Admins only."""
        self._manager("RejectPromotion", "ss", promotion_id, reason)

    # list is last: in the class body after it, "list" names this method.
    def list(self) -> list[SandboxInfo]:
        """The sandboxes the caller may see, oldest first."""
        return [SandboxInfo(*e) for e in self._manager("ListSandboxes")[0]]
