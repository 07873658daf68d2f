"""What one rank's measured profile holds, whichever file it was read from (a Kineto trace:
kineto.py; a linked trace: linked.py), and the conversion of the files' microseconds to ns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import LibraError

HOST_CATS = frozenset({"cpu_op", "user_annotation"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class HostOp:
    """A host operator or annotation on one thread: its name, span (ns) and arguments."""

    name: str
    tid: int
    start_ns: int
    end_ns: int
    args: Any
    annotation: bool = False     # a user annotation (a named range), not an operator


@dataclass(frozen=True)
class RuntimeCall:
    """A CUDA runtime/driver call (a launch, a copy, a synchronization) on one host thread."""

    name: str
    tid: int
    start_ns: int
    end_ns: int
    correlation: int | None


@dataclass(frozen=True)
class DeviceOp:
    """A kernel, memory copy or memory set on one stream of the device."""

    name: str
    kind: str          # kernel | memcpy | memset
    stream: int
    start_ns: int
    end_ns: int
    correlation: int | None
    args: Any


@dataclass(frozen=True)
class Step:
    """One ``ProfilerStep#N`` annotation (the host thread that ran the training step)."""

    number: int
    tid: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RankProfile:
    """One rank's Kineto trace, reduced to what the measurement reads."""

    rank: int
    source: str
    world_size: int | None
    backend: str | None
    steps: tuple[Step, ...]
    host: tuple[HostOp, ...]
    runtime: tuple[RuntimeCall, ...]
    device: tuple[DeviceOp, ...]
    first_ns: int
    last_ns: int
    # the rank's process groups as ``distributedInfo.pg_config`` lists them (ranks, ascending)
    groups: tuple[tuple[int, ...], ...] = ()
    linked: bool = False     # read from chakra_trace_link's output (linked.py): no runtime calls


def pg_groups(info: dict) -> tuple[tuple[int, ...], ...]:
    out = []
    for pg in info.get("pg_config") or ():
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if isinstance(ranks, list) and ranks and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            out.append(tuple(sorted(ranks)))
    return tuple(out)


# Times are microseconds; start + duration, in ns, must stay an int64 (2^63 ns is 9.2e15 us).
_LIMIT_US = 4e15


def _ns(value: Any) -> int:
    # Microseconds since the epoch exceed a double's exact integers once multiplied by 1000.
    whole = int(value)
    return whole * 1000 + int(round((value - whole) * 1000))


def event_span(e: dict, where: str) -> tuple[int, int] | None:
    ts, dur = e.get("ts"), e.get("dur", 0)
    if isinstance(ts, bool) or isinstance(dur, bool) or not isinstance(ts, (int, float)) \
            or not isinstance(dur, (int, float)):
        return None
    if dur < 0:
        raise LibraError(f"{where}: event {str(e.get('name'))[:60]!r} has a negative duration {dur}; "
                         "the trace is corrupt, export it again")
    for key, v in (("ts", ts), ("dur", dur)):
        if not abs(v) < _LIMIT_US:   # NaN fails this too
            raise LibraError(f"{where}: event {str(e.get('name'))[:60]!r} has {key} {v:g} us, outside what a "
                             f"Kineto time can be (within +-{_LIMIT_US:g} us); the trace is corrupt, export it again")
    start = _ns(ts)
    return start, start + _ns(dur)


def int_or_none(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None
