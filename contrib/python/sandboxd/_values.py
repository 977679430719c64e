"""Values the caller gives, as the bus takes them: sizes, durations,
environments, and the options of CreateSandbox and Exec."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence, Union

from dbus_next.signature import Variant

from .errors import invalid

Size = Union[int, str]
Env = Union[Mapping[str, str], Sequence[str], None]

_UNITS = {"": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30,
          "T": 1 << 40, "TiB": 1 << 40}
_SIZE = re.compile(r"(\d+) ?([A-Za-z]*)")


def parse_size(size: Size) -> int:
    """Bytes of 512M, "20GiB" or 1048576, as sandboxctl's flags take them (K = 1024)."""
    if isinstance(size, int):
        return size
    m = _SIZE.fullmatch(size)
    if not m or m.group(2) not in _UNITS:
        raise invalid(f"{size!r} is not a size: want bytes, or a number and K, M, G or T, like \"512M\"")
    return int(m.group(1)) * _UNITS[m.group(2)]


def variant(option: str, signature: str, value: Any) -> Variant:
    """Option's value as a Variant; one that type cannot hold is InvalidArgs."""
    try:
        return Variant(signature, value)
    except (ValueError, TypeError) as e:
        raise invalid(f"option {option}: {value!r} is not D-Bus type {signature}: {e}") from e


def usec(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def plain(v: Any) -> Any:
    """A value of the bus without its Variants."""
    if isinstance(v, Variant):
        return plain(v.value)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def env_list(env: Env) -> list[str]:
    if env is None:
        return []
    if isinstance(env, Mapping):
        return [f"{k}={v}" for k, v in env.items()]
    return list(env)


def exec_options(env: Env, cwd: Optional[str], root: bool, timeout: Optional[float]) -> dict[str, Variant]:
    opts: dict[str, Variant] = {}
    if env:
        opts["Environment"] = variant("Environment", "as", env_list(env))
    if cwd is not None:
        opts["WorkingDirectory"] = variant("WorkingDirectory", "s", cwd)
    if root:
        opts["Root"] = variant("Root", "b", True)
    if timeout is not None:
        opts["TimeoutUSec"] = variant("TimeoutUSec", "t", usec(timeout))
    return opts


def create_options(name: Optional[str] = None, network: Optional[str] = None, memory_max: Optional[Size] = None,
                   allow: Optional[Sequence[str]] = None, profile: Optional[str] = None,
                   ttl: Optional[float] = None, disk_quota: Optional[Size] = None, tasks_max: Optional[int] = None,
                   cpu_quota: Optional[int] = None, read_only_project: Optional[bool] = None,
                   boot: Optional[bool] = None,
                   options: Optional[Mapping[str, Variant]] = None) -> dict[str, Variant]:
    opts: dict[str, Variant] = {}
    for key, sig, value in (("Name", "s", name), ("Network", "s", network), ("Profile", "s", profile),
                            ("TasksMax", "t", tasks_max), ("ReadOnlyProject", "b", read_only_project),
                            ("Boot", "b", boot)):
        if value is not None:
            opts[key] = variant(key, sig, value)
    if memory_max is not None:
        opts["MemoryMax"] = variant("MemoryMax", "t", parse_size(memory_max))
    if disk_quota is not None:
        opts["DiskQuota"] = variant("DiskQuota", "t", parse_size(disk_quota))
    if allow is not None:
        opts["Allow"] = variant("Allow", "as", list(allow))
    if ttl is not None:
        opts["TTLUSec"] = variant("TTLUSec", "t", usec(ttl))
    if cpu_quota is not None:  # percent of one CPU, as systemd's CPUQuota=
        opts["CPUQuotaPerSecUSec"] = variant("CPUQuotaPerSecUSec", "t", cpu_quota * 10_000)
    opts.update(options or {})
    return opts
