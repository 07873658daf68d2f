"""Bytes each NPU sends per network dimension for one collective.

Hierarchical (multi-dimensional) algorithm, as ASTRA-sim's localBWAware runs it. With m the
size carried into a dimension (m starts at the collective size S) and p_d the participants in
dimension d:

=============== ============ ========================= ===========================
collective      dim order    traffic in dim d          size carried to next dim
=============== ============ ========================= ===========================
ALL_REDUCE      ascending    2 m (p_d - 1) / p_d       m / p_d
REDUCE_SCATTER  ascending    m (p_d - 1) / p_d         m / p_d
ALL_GATHER      descending   m (p_d - 1)  (S = shard)  m p_d
ALL_TO_ALL      ascending    m (p_d - 1) / p_d         m
=============== ============ ========================= ===========================

A group that is not a sub-grid of the network is run by ASTRA-sim as one flat ring over its
sorted members, each hop charged on the lowest dimension where the two NPUs differ; its traffic
is the single-ring traffic, charged on every dimension some hop crosses.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import LibraError
from .network import Network

ALL_REDUCE = "ALL_REDUCE"
REDUCE_SCATTER = "REDUCE_SCATTER"
ALL_GATHER = "ALL_GATHER"
ALL_TO_ALL = "ALL_TO_ALL"
P2P = "P2P"
COLLECTIVE_TYPES = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)
TYPES = COLLECTIVE_TYPES + (P2P,)


def check_type(kind: str, where: str = "collective") -> str:
    if kind not in TYPES:
        raise LibraError(f"{where}: unsupported collective type {kind!r}; use one of {list(TYPES)}")
    return kind


def dim_order(kind: str, num_dims: int) -> tuple[int, ...]:
    """Order in which the hierarchical algorithm visits the dimensions."""
    dims = tuple(range(num_dims))
    return dims[::-1] if kind == ALL_GATHER else dims


def ring_traffic_bytes(kind: str, size_bytes: float, p: int) -> float:
    """Bytes each of p ring members sends for one single-ring collective of size_bytes."""
    if p <= 1:
        return 0.0
    if kind == ALL_REDUCE:
        return 2.0 * size_bytes * (p - 1) / p
    if kind in (REDUCE_SCATTER, ALL_TO_ALL):
        return size_bytes * (p - 1) / p
    if kind == ALL_GATHER:
        return size_bytes * (p - 1)
    if kind == P2P:
        return float(size_bytes)
    raise LibraError(f"unsupported collective type {kind!r}")


def hierarchical_traffic_bytes(kind: str, size_bytes: float, participants: Sequence[int]) -> tuple[float, ...]:
    """Per-dimension bytes sent per NPU by the hierarchical algorithm (table above)."""
    out = [0.0] * len(participants)
    m = float(size_bytes)
    for d in dim_order(kind, len(participants)):
        p = int(participants[d])
        if p <= 1:
            continue
        out[d] = ring_traffic_bytes(kind, m, p)
        if kind in (ALL_REDUCE, REDUCE_SCATTER):
            m /= p
        elif kind == ALL_GATHER:
            m *= p
    return tuple(out)


def ring_steps(kind: str, p: int) -> int:
    """Ring steps one dimension (or one flat ring) of p members takes."""
    if p <= 1:
        return 0
    if kind == ALL_REDUCE:
        return 2 * (p - 1)
    if kind == P2P:
        return 1
    return p - 1


def flat_ring_step_hops(net: Network, members: Sequence[int]) -> tuple[int, ...]:
    """Per dimension, the most hops one step of the flat ring over the sorted members takes there
    (0 where the ring does not cross): each step goes to the next member, across the lowest
    dimension where the two differ, as ASTRA-sim routes it."""
    ring = sorted(set(members))
    step = [0] * net.num_dims
    for i, a in enumerate(ring):
        b = ring[(i + 1) % len(ring)]
        if a == b:
            continue
        d = net.lowest_differing_dim(a, b)
        step[d] = max(step[d], net.dims[d].hops(net.coords(a)[d], net.coords(b)[d]))
    return tuple(step)


def flat_ring_dims(net: Network, members: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """Dimensions crossed by the flat ring over sorted members, and the most hops of one ring step."""
    step = flat_ring_step_hops(net, members)
    return tuple(d for d, h in enumerate(step) if h > 0), max(step, default=0)


def flat_ring_traffic_bytes(net: Network, kind: str, size_bytes: float, members: Sequence[int]) -> tuple[float, ...]:
    """Per-dimension bytes of a collective run as one flat ring over ``members``."""
    dims, _ = flat_ring_dims(net, members)
    per_npu = ring_traffic_bytes(kind, size_bytes, len(set(members)))
    return tuple(per_npu if d in dims else 0.0 for d in range(net.num_dims))


def group_participation(net: Network, members: Sequence[int]) -> tuple[int, ...] | None:
    """Participants per dimension if ``members`` is a sub-grid of the network, else None.

    A sub-grid is the Cartesian product of one coordinate set per dimension; its collectives
    run hierarchically. Anything else runs as a flat ring (see :func:`flat_ring_traffic_bytes`).
    """
    uniq = sorted(set(members))
    if not uniq:
        raise LibraError("empty communicator group")
    coords = [net.coords(m) for m in uniq]
    per_dim = [sorted({c[d] for c in coords}) for d in range(net.num_dims)]
    size = 1
    for s in per_dim:
        size *= len(s)
    if size != len(uniq):
        return None
    return tuple(len(s) for s in per_dim)
