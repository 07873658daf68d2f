"""The communication of one rank's profile: each NCCL kernel (or gloo operator) with its kind,
size and process group, read from what the trace records about it.

Where the facts come from, first found wins:

- kind: the ``Collective name`` argument, else the launching host operator's name
  (``nccl:all_to_all``, ``c10d::allreduce_``, ...), else the kernel's name
  (``ncclDevKernel_AllReduce_...``); a SendRecv kernel under an all-to-all operator is an all-to-all;
- size: ``In msg nelems`` x ``dtype``, else the launching operator's first ``Input Dims`` x its
  ``Input type`` (PyTorch before 2.1 records only these);
- group: ``Process Group Ranks`` (and ``Process Group Name``), else the whole world.

The launching operator is the innermost host operator, on the thread that called the launch
(matched by correlation id), whose name says communication.
"""

from __future__ import annotations

import ast
import bisect
import math
import re
from dataclasses import dataclass
from typing import Any

from ..model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, P2P, REDUCE_SCATTER
from .kineto import HostOp, RankProfile

# Bytes per element of the type names PyTorch writes ("Input type", "dtype").
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8, "half": 2, "c10::half": 2,
    "float16": 2, "bfloat16": 2, "c10::bfloat16": 2, "long int": 8, "long": 8, "int64": 8,
    "int": 4, "int32": 4, "short int": 2, "short": 2, "int16": 2, "signed char": 1, "int8": 1,
    "unsigned char": 1, "uint8": 1, "bool": 1, "byte": 1, "char": 1,
}
_KINDS = (("alltoall", ALL_TO_ALL), ("allreduce", ALL_REDUCE), ("reducescatter", REDUCE_SCATTER),
          ("allgather", ALL_GATHER), ("broadcast", "BROADCAST"), ("barrier", "BARRIER"),
          ("sendrecv", P2P), ("send", P2P), ("recv", P2P), ("reduce", "REDUCE"), ("gather", "GATHER"),
          ("scatter", "SCATTER"))


@dataclass(frozen=True)
class RankComm:
    """One communication activity of one rank (a NCCL kernel, or a gloo operator on the CPU)."""

    kind: str
    size_bytes: int
    group: tuple[int, ...] | None   # None: the whole world
    group_name: str
    start_ns: int
    end_ns: int
    launch_ns: int                  # when the host asked for it (the launch call, or its start)
    name: str
    on_gpu: bool
    thread: tuple | None = None     # a gloo operator's worker thread ("tid", tid), or ("op", tid, n) run in place
    candidates: tuple[tuple[int, ...], ...] = ()   # a gloo operator's possible groups
    caller: str = ""                # a gloo operator's c10d:: operator


def kind_of(name: str) -> str | None:
    """The collective kind a name says (``nccl:all_reduce``, ``ncclDevKernel_AllGather``), or None."""
    flat = re.sub(r"[^a-z]", "", name.lower().replace("nccldevkernel", "").replace("ncclkernel", ""))
    for key, kind in _KINDS:
        if key in flat:
            return kind
    return None


def is_comm_name(name: str) -> bool:
    low = name.lower()
    return low.startswith(("nccl:", "gloo:", "c10d::")) or low == "record_param_comms"


def dtype_bytes(name: Any) -> int | None:
    if not isinstance(name, str):
        return None
    return _DTYPE_BYTES.get(name.strip().lower())


def _ints(v: Any) -> list[int] | None:
    if isinstance(v, str):
        try:
            v = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            return None
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return None


def _size(args: dict) -> int | None:
    n = args.get("In msg nelems")
    b = dtype_bytes(args.get("dtype"))
    if isinstance(n, int) and not isinstance(n, bool) and b:
        return n * b
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(types, list) and types:
        shape = _ints(dims[0])
        b = dtype_bytes(types[0])
        if shape is not None and b:
            return math.prod(shape) * b
    return None


def _group(args: dict) -> tuple[tuple[int, ...] | None, str]:
    ranks = _ints(args.get("Process Group Ranks"))
    name = args.get("Process Group Name") or args.get("Process Group Description") or ""
    return (tuple(ranks) if ranks else None), str(name)


class _Launchers:
    """The communication operators of each host thread, for finding a launch's operator."""

    def __init__(self, host: tuple[HostOp, ...]) -> None:
        self.by_tid: dict[int, list[HostOp]] = {}
        for op in host:
            if is_comm_name(op.name):
                self.by_tid.setdefault(op.tid, []).append(op)
        self.starts = {t: [o.start_ns for o in ops] for t, ops in self.by_tid.items()}

    def around(self, tid: int, t: int) -> list[HostOp]:
        """The communication operators of thread ``tid`` running at ``t``, innermost first."""
        ops = self.by_tid.get(tid, [])
        i = bisect.bisect_right(self.starts.get(tid, []), t)
        return [o for o in reversed(ops[max(0, i - 64):i]) if o.end_ns >= t]


def _facts(sources: list[dict], names: list[str]) -> tuple[str | None, int | None, tuple | None, str]:
    kind = size = group = None
    gname = ""
    for args in sources:
        if kind is None and isinstance(args.get("Collective name"), str):
            kind = kind_of(args["Collective name"])
        if size is None:
            size = _size(args)
        if group is None:
            group, gname = _group(args)
    for n in names:
        k = kind_of(n)
        if k is not None and (kind is None or (kind == P2P and k != P2P)):
            kind = k
    return kind, size, group, gname


def rank_comms(prof: RankProfile) -> list[RankComm]:
    """Every NCCL kernel of a rank, in the order the host issued them (a CPU run's gloo
    collectives: gloo.py)."""
    launchers = _Launchers(prof.host)
    calls = {c.correlation: c for c in prof.runtime if c.correlation is not None}
    out: list[RankComm] = []
    for op in prof.device:
        if not op.name.lower().startswith("nccl"):
            continue
        call = calls.get(op.correlation)
        ops = launchers.around(call.tid, call.start_ns) if call is not None else []
        # the operator's own name says more than the kernel's (SendRecv under all_to_all)
        kind, size, group, gname = _facts([op.args] + [o.args for o in ops], [o.name for o in ops] + [op.name])
        out.append(RankComm(kind or "UNKNOWN", size or 0, group, gname, op.start_ns, op.end_ns,
                            call.start_ns if call is not None else op.start_ns, op.name, True))
    out.sort(key=lambda c: (c.launch_ns, c.start_ns))
    return out
