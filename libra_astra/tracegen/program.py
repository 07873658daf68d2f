"""A rank-independent program: the ops one class of ranks runs, with symbolic groups and peers.

A program names the parallel axis of each collective (its group is resolved per rank when the ET
file is written) and the axis and offset of each point-to-point peer. Dependencies:

- compute ops form one chain (an NPU runs one kernel at a time), plus what they consume;
- collectives form one chain in issue order (ctrl_deps), because ASTRA-sim matches collectives
  across ranks by issue order and runs one per rank at a time anyway;
- a receive waits for the compute before it, so receives are posted when they are about to be
  needed rather than all at time zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

COMP, COLL, SEND, RECV = "comp", "coll", "send", "recv"

# P2P tags start here so they can never equal the small stream ids ASTRA-sim uses as tags for the
# messages of collectives.
P2P_TAG_BASE = 1 << 20


@dataclass(frozen=True)
class Op:
    kind: str
    name: str
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    duration_micros: int = 0
    num_ops: int = 0
    tensor_bytes: int = 0
    coll: str = ""          # collective type name (ALL_REDUCE...)
    size_bytes: int = 0     # comm_size
    axis: str = ""          # group axis of a collective, peer axis of a send/recv
    peer_offset: int = 0    # +1: next along the axis, -1: previous
    tag: int = 0


def micros(seconds: float) -> int:
    """Whole microseconds for duration_micros: nearest, at least 1 for any positive work."""
    if seconds <= 0:
        return 0
    return max(1, int(seconds * 1e6 + 0.5))


def _uniq(deps: Iterable[int | None]) -> tuple[int, ...]:
    out: list[int] = []
    for d in deps:
        if d is not None and d not in out:
            out.append(d)
    return tuple(out)


@dataclass
class ProgramBuilder:
    """Appends ops with the dependency rules above; ``prefix`` starts every op name."""

    tflops: float
    prefix: str = ""
    ops: list[Op] = field(default_factory=list)
    last_comp: int | None = None
    last_coll: int | None = None
    gate: int | None = None  # extra dependency of the next compute op (e.g. previous step's gradients)

    def _add(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def comp(self, name: str, flops: float, tensor_bytes: float = 0, after: Iterable[int | None] = ()) -> int:
        """Compute of ``flops`` at the sustained rate; waits for the previous compute and ``after``."""
        return self.timed_comp(name, flops / (self.tflops * 1e12), flops, tensor_bytes, after)

    def timed_comp(self, name: str, seconds: float, num_ops: float, tensor_bytes: float = 0,
                   after: Iterable[int | None] = ()) -> int:
        i = self._add(Op(COMP, self.prefix + name, data_deps=_uniq([self.last_comp, self.gate, *after]),
                         duration_micros=micros(seconds), num_ops=int(round(num_ops)),
                         tensor_bytes=int(round(tensor_bytes))))
        self.last_comp, self.gate = i, None
        return i

    def coll(self, name: str, kind: str, size_bytes: int, axis: str, after: Iterable[int | None] = ()) -> int:
        """Collective on the group of ``axis``; issued after the previous collective finished."""
        i = self._add(Op(COLL, self.prefix + name, data_deps=_uniq(after), ctrl_deps=_uniq([self.last_coll]),
                         coll=kind, size_bytes=int(size_bytes), axis=axis))
        self.last_coll = i
        return i

    def send(self, name: str, size_bytes: int, axis: str, offset: int, tag: int,
             after: Iterable[int | None] = ()) -> int:
        return self._add(Op(SEND, self.prefix + name, data_deps=_uniq(after), size_bytes=int(size_bytes),
                            axis=axis, peer_offset=offset, tag=P2P_TAG_BASE + tag))

    def recv(self, name: str, size_bytes: int, axis: str, offset: int, tag: int) -> int:
        return self._add(Op(RECV, self.prefix + name, data_deps=_uniq([self.last_comp]),
                            size_bytes=int(size_bytes), axis=axis, peer_offset=offset, tag=P2P_TAG_BASE + tag))


class GradBuckets:
    """Weight-gradient all-reduces over ``axis``: one per layer, or merged into buckets.

    Layers are added in backward order; a bucket is all-reduced once it holds at least
    ``bucket_bytes`` (0: every layer on its own), and :meth:`flush` sends the rest.
    """

    def __init__(self, b: ProgramBuilder, axis: str, bucket_bytes: int, enabled: bool = True):
        self.b, self.axis, self.bucket_bytes, self.enabled = b, axis, bucket_bytes, enabled
        self.names: list[str] = []
        self.size = 0
        self.ready: int | None = None

    def add(self, layer: str, grad_bytes: int, ready: int | None) -> None:
        if not self.enabled or grad_bytes <= 0:
            return
        self.names.append(layer)
        self.size += grad_bytes
        self.ready = ready
        if self.size >= self.bucket_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.names:
            return
        label = self.names[0] if len(self.names) == 1 else f"{self.names[0]}-{self.names[-1]}"
        self.b.coll(f"{label}.dp_ar", "ALL_REDUCE", self.size, self.axis, after=[self.ready])
        self.names, self.size, self.ready = [], 0, None


@dataclass(frozen=True)
class Plan:
    """Programs by key, and which program each rank runs."""

    programs: dict[int, tuple[Op, ...]]
    rank_program: tuple[int, ...]
