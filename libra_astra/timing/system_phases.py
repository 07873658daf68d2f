"""A user's ASTRA-sim system settings as the optimizer's time model: each chunk of a collective
as a sequence of *phases*, each phase's time affine in 1/B of its dimension.

docs/astra-sim-settings.md derives the rules from ASTRA-sim 518bd51 (astra_collective.py
replays them to the nanosecond). Here every phase is written as ``a / B_d + c`` (``a`` bytes,
``c`` ns) without ASTRA-sim's per-message truncation to whole nanoseconds (at most 1 ns a message):

- ring: ``ed + s (h1 lat + msg / B + ed) + r R(msg)`` with ``s`` messages one after the other
  (all-reduce 2 (n - 1), all-to-all n (n - 1) / 2, else n - 1) and ``r`` reductions;
- direct (a window of n - 1): the n - 1 messages of a step cost one (no congestion);
- halvingDoubling: log2(n) steps, partner and message size halving (doubling for all-gather);
- ``collective-optimization: baseline``: every dimension runs an all-reduce of the whole chunk.

A double binary tree phase is not one affine time (its ranks finish at different times): it is
a :class:`system_trees.TreePhase`, timed per position by system_trees.py. Where the time model
cannot follow a setting (the flattened one* variants; a direct window below n - 1, whose packets
pace each other) :func:`check_timing` refuses it in one line that points to ``libra-astra predict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import LibraError
from ..model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from ..model.network import Dimension
from . import astra_collective
from .astra_settings import IMPLEMENTATION_KEYS, KINDS, SystemSettings, parse_implementation
from .system_trees import TreePhase

# Implementations the optimizer times (the rest: libra-astra predict).
MODELED = ("ring", "direct", "halvingDoubling", "doubleBinaryTree")
# a bandwidth at which a message's bytes take no time (ASTRA-sim's truncation keeps whole ns)
_FREE_BW_GBPS = 1e30


@dataclass(frozen=True)
class SystemTiming:
    """The system.json settings beyond splits and local-mem-bw (TimeModel has those) that change
    a collective's time: one implementation name per dimension for each kind (KINDS order),
    ``active-chunks-per-dimension``, ``endpoint-delay`` and ``collective-optimization``."""

    implementations: tuple[tuple[str, ...], ...]
    active_chunks: int = 1
    endpoint_delay_ns: float = 1.0
    baseline: bool = False

    def __post_init__(self) -> None:
        if len(self.implementations) != len(KINDS):
            raise LibraError(f"system timing: give one implementation list per kind {list(KINDS)}")
        if self.active_chunks < 1 or not self.endpoint_delay_ns >= 0:
            raise LibraError("system timing: active chunks must be >= 1 and endpoint delay >= 0 ns")

    def implementation(self, kind: str, dim: int) -> str:
        names = self.implementations[KINDS.index(kind)]
        return names[dim] if dim < len(names) else ""

    @classmethod
    def from_settings(cls, s: SystemSettings) -> "SystemTiming":
        return cls(tuple(s.implementations(k) for k in KINDS), s.active_chunks, float(s.endpoint_delay_ns),
                   s.collective_optimization == "baseline")

    @classmethod
    def uniform(cls, num_dims: int, implementation: str = "ring", **kw) -> "SystemTiming":
        return cls(((implementation,) * num_dims,) * len(KINDS), **kw)

    def to_dict(self) -> dict:
        return {"implementations": {k: list(v) for k, v in zip(KINDS, self.implementations)},
                "active_chunks": self.active_chunks, "endpoint_delay_ns": self.endpoint_delay_ns,
                "collective_optimization": "baseline" if self.baseline else "localBWAware"}

    @classmethod
    def from_dict(cls, data: dict, source: str) -> "SystemTiming":
        try:
            impls = data["implementations"]
            return cls(tuple(tuple(str(n) for n in impls[k]) for k in KINDS), int(data["active_chunks"]),
                       float(data["endpoint_delay_ns"]), data["collective_optimization"] == "baseline")
        except (KeyError, TypeError, ValueError) as e:
            raise LibraError(f"{source}: bad time_model_settings.system {data!r} ({e}); write the design again "
                             "with optimize --system") from None


def timing_of(record: dict | None) -> SystemTiming | None:
    """The timing of a user's system.json as a design records it (``{"path", "settings"}``)."""
    if record is None:
        return None
    from .astra_settings import settings_from_json

    return SystemTiming.from_settings(settings_from_json(record["settings"], record.get("path", "system.json")))


def check_timing(t: SystemTiming, dims: tuple[Dimension, ...], source: str) -> None:
    """Refuse, in one line naming ``source`` and the key, what the time model does not follow."""
    for kind, names in zip(KINDS, t.implementations):
        key = IMPLEMENTATION_KEYS[kind]
        if len(names) != len(dims):
            raise LibraError(f"{source}: {key} has {len(names)} entries for a network of {len(dims)} dimensions; "
                             "give one per dimension")
        for d, (name, dim) in enumerate(zip(names, dims)):
            alg, flat, window = parse_implementation(name, f"{source}: {key}[{d}]")
            if flat or alg not in MODELED:
                raise LibraError(f"{source}: {key}[{d}] {name!r}: the optimizer does not model it (it flattens every "
                                 "dimension into one ring); 'libra-astra predict' times it exactly; use ring, direct, "
                                 "halvingDoubling or doubleBinaryTree")
            if alg == "direct" and 0 <= window < dim.npus - 1:
                raise LibraError(f"{source}: {key}[{d}] {name!r}: a direct window below the dimension's "
                                 f"{dim.npus - 1} peers is not modeled (its packets pace each other); use direct "
                                 "or ring, or 'libra-astra predict'")
            # (halvingDoubling all-to-all exits only when an all-to-all runs: chunk_phases refuses it)
            if alg in ("halvingDoubling", "doubleBinaryTree") and dim.npus & (dim.npus - 1):
                raise LibraError(f"{source}: {key}[{d}] {alg} needs a power of two NPUs, not {dim.npus} "
                                 f"(ASTRA-sim {'hangs' if alg == 'halvingDoubling' else 'crashes'}); use ring or "
                                 "direct there")


class Phase(NamedTuple):
    """One phase of a chunk: on dimension ``dim``, ``a_bytes / B_dim + c_ns``."""

    dim: int
    a_bytes: float
    c_ns: float


def _reduce_ns(b: float, mem: float | None) -> float:
    # Two reads and a write of the received bytes (PacketBundle): 3 b / local-mem-bw.
    return 0.0 if mem is None else 3.0 * b / mem


def phase(alg: str, ptype: str, n: int, m: float, dim: Dimension, ed: float, mem: float | None, d: int) -> Phase:
    """The phase of ``alg`` running ``ptype`` over ``n`` members with ``m`` bytes in."""
    lat = dim.latency_ns

    def hops(offset: int) -> int:
        return dim.hops(0, offset % dim.npus) if dim.topology == "Ring" else dim.step_hops

    if alg == "ring":
        msg = m if ptype == ALL_GATHER else m / n
        sends = {ALL_REDUCE: 2 * (n - 1), ALL_TO_ALL: n * (n - 1) // 2}.get(ptype, n - 1)
        reduces = n - 1 if ptype in (ALL_REDUCE, REDUCE_SCATTER) else 0
        return Phase(d, sends * msg, ed + sends * (hops(1) * lat + ed) + reduces * _reduce_ns(msg, mem))
    if alg == "direct":
        # The n - 1 messages of a step leave together, so the packet machine's events move by
        # msg / B per step: the time is steps x msg / B plus a constant, taken from the machine
        # itself with messages long against every hop, delay and reduction. (On a Ring the
        # reductions of the near peers' messages overlap the wait for the farthest one; with short
        # messages they overlap up to one hop latency more, so the constant is then that much long.)
        msg = m if ptype == ALL_GATHER else m / n
        steps = 2 if ptype == ALL_REDUCE else 1
        mem_free = _FREE_BW_GBPS if mem is None else mem
        long_ns = 1e3 * (n * (lat * max(1, n // 2) + ed) + 3 * m / mem_free) + 1e6
        bw = max(msg, 1.0) / long_ns
        link = astra_collective.Link(dim.topology, n, bw, lat)
        t = astra_collective._phase_ns("direct", ptype, astra_collective._Dim(n, (link,), False), int(round(m)), -1,
                                       ed, mem_free)
        return Phase(d, steps * msg, float(t) - steps * (int(round(m)) // n if ptype != ALL_GATHER else
                                                         int(round(m))) / bw)
    # halvingDoubling: steps of partners 1, 2, ..., n/2 places along with m/2, m/4, ..., m/n
    steps = int(math.log2(n))
    up = [(2 ** s, m / 2 ** (s + 1)) for s in range(steps)]
    if ptype == ALL_GATHER:
        sent = [(n // 2 ** (s + 1), m * 2 ** s) for s in range(steps)]
    else:
        sent = up + (up[::-1] if ptype == ALL_REDUCE else [])
    # the reduction after a step is charged on the next packet's size, and the last
    # reduce-scatter step's packet is not reduced: L - 1 reductions
    reduce = sum(_reduce_ns(b, mem) for _, b in up[1:]) if ptype != ALL_GATHER else 0.0
    return Phase(d, sum(b for _, b in sent), ed + sum(hops(o) * lat + ed for o, _ in sent) + reduce)


def chunk_count(kind: str, size_bytes: float, splits: int, total_npus: int) -> tuple[int, float]:
    """(chunks, bytes per chunk) ASTRA-sim makes of a collective (Sys::determine_chunk_size):
    ``size // splits``, at least the NPU count but for all-gather, each chunk of full size."""
    size = int(size_bytes)
    chunk = size // splits
    if kind != ALL_GATHER and total_npus > chunk:
        chunk, size = total_npus, splits * total_npus
    if chunk == 0:
        return 0, 0.0
    return -(-size // chunk), float(chunk)


def chunk_steps(kind: str, chunk: float, participants: tuple[int, ...], baseline: bool = False
                ) -> list[tuple[int, str, int, float]]:
    """(dimension, phase type, members, bytes in) of each phase of one chunk, in order, with ring,
    direct or halving-doubling on every dimension: the same whatever those implementations (they
    only time each step). A double binary tree keeps the chunk whole (chunk_phases)."""
    D = len(participants)
    order = range(D - 1, -1, -1) if kind == ALL_GATHER else range(D)
    active = [d for d in order if participants[d] > 1]
    if not active:
        return []
    if kind == ALL_REDUCE and not baseline:
        steps = ([(d, REDUCE_SCATTER) for d in active[:-1]] + [(active[-1], ALL_REDUCE)]
                 + [(d, ALL_GATHER) for d in active[-2::-1]])
    else:
        steps = [(d, kind) for d in active]
    out, m = [], chunk
    for d, ptype in steps:
        n = participants[d]
        out.append((d, ptype, n, m))
        m = {ALL_GATHER: m * n, REDUCE_SCATTER: m / n}.get(ptype, m)
    return out


def chunk_phases(kind: str, chunk: float, participants: tuple[int, ...], dims: tuple[Dimension, ...],
                 t: SystemTiming, mem: float | None) -> list[tuple[int, Phase | TreePhase]]:
    """(queue, phase) of one chunk, in order (a double binary tree's: system_trees.TreePhase). Queues
    are dimensions (one queue per dimension, as ASTRA-sim runs by default); a localBWAware
    all-reduce's reduce-scatter and all-gather on a dimension share its queue."""
    out, m = [], chunk
    for d, ptype, n, _ in chunk_steps(kind, chunk, participants, t.baseline):
        alg = parse_implementation(t.implementation(kind, d))[0]
        if alg == "halvingDoubling" and kind == ALL_TO_ALL:
            raise LibraError(f"all-to-all-implementation[{d}] halvingDoubling: the workload has all-to-alls, which "
                             "ASTRA-sim does not implement with it (it exits on the first one); use ring or direct")
        if alg == "doubleBinaryTree":       # an all-reduce of the whole chunk, whatever the kind
            out.append((d, TreePhase(d, n, m, t.endpoint_delay_ns, _reduce_ns(m, mem), dims[d].topology,
                                     dims[d].latency_ns)))
            continue
        out.append((d, phase(alg, ptype, n, m, dims[d], t.endpoint_delay_ns, mem, d)))
        m = {ALL_GATHER: m * n, REDUCE_SCATTER: m / n}.get(ptype, m)
    return out
