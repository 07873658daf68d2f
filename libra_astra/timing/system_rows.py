"""Rows of many collectives under a user's system settings (``TimeModel.system``), and their
times where the rows only bound them (system_flow.py).

Hierarchical collectives take their rows from their phases and chunk flow; communicator-group
rings and point-to-point transfers keep the pipelined model's rows (rows.py), as ASTRA-sim runs
them the same whatever the implementation lists say. Collectives with equal fields share one
build (a trace repeats a few hundred kinds of collectives many times).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..demand.types import Collective
from ..errors import LibraError
from ..model.collectives import ring_steps
from ..model.network import Dimension, Network
from .rows import Rows, collective_rows_of
from .system_flow import Flow, flow_rows, replay_ns
from .astra_settings import IMPLEMENTATION_KEYS, KINDS, SystemSettings
from .system_phases import chunk_count, chunk_phases
from .system_trees import TreeFlow, TreePhase, tree_rows


def _pieces(c: Collective, net: Network) -> tuple[Dimension, ...]:
    """The dimensions as emit lays a collective's members out (astra/logical.py): on a Ring, a
    group of ``p`` members ``s`` NPUs apart is a ring of ``p`` whose steps take ``s`` hops (its
    hops say ``s``: demand.types.default_hops); elsewhere every step takes the dimension's hops."""
    out = []
    for d, (dim, p) in enumerate(zip(net.dims, c.participants)):
        p = int(p)
        steps = ring_steps(c.type, p)
        if dim.topology == "Ring" and 1 < p and steps and (p < dim.npus or c.hops[d] != steps):
            stride = c.hops[d] // steps if c.hops[d] % steps == 0 and c.hops[d] >= steps else 1
            dim = replace(dim, npus=p, latency_ns=dim.latency_ns * stride)
        out.append(dim)
    return tuple(out)


def _flow(c: Collective, net: Network, model) -> Flow:
    total = math.prod(d.npus for d in net.dims)
    chunks, chunk = chunk_count(c.type, c.size_bytes, model.splits, total)
    if chunks == 0:
        raise LibraError(f"collective {c.name or c.type} of {c.size_bytes:g} bytes: ASTRA-sim makes 0-byte chunks of an "
                         f"all-gather smaller than its {model.splits} splits and never ends; use fewer splits")
    dims = _pieces(c, net)
    phases = chunk_phases(c.type, chunk, c.participants, dims, model.system, model.local_mem_bw_gbps)
    if any(isinstance(p, TreePhase) for _, p in phases):
        return TreeFlow(tuple(phases), chunks, model.system.active_chunks, c.type, int(c.size_bytes),
                        tuple(n > 1 for n in c.participants),
                        tuple((d.topology, d.npus, d.latency_ns) for d in dims), _settings(model))
    return Flow(tuple(phases), chunks, model.system.active_chunks)


def _settings(model) -> SystemSettings:
    """ASTRA-sim's settings of the model (its replay times trees where the rows only bound them)."""
    t = model.system
    mem = model.local_mem_bw_gbps or 1e300          # absent: reductions take 0 ns, as ASTRA-sim's do
    return SystemSettings(*t.implementations, splits=model.splits, active_chunks=t.active_chunks,
                          endpoint_delay_ns=int(t.endpoint_delay_ns), local_mem_bw_gbps=mem,
                          collective_optimization="baseline" if t.baseline else "localBWAware")


@lru_cache(maxsize=1 << 14)
def _built(key: tuple, net: Network, model) -> tuple[np.ndarray, np.ndarray, Flow | TreeFlow | None]:
    c = Collective(*key)
    if c.algorithm == "flat_ring" and model.system.implementations[KINDS.index(c.type)] == ("doubleBinaryTree",):
        raise LibraError(f"{IMPLEMENTATION_KEYS[c.type]} ['doubleBinaryTree'] with a sub-group {c.type} of "
                         f"{c.participants[0]} NPUs: ASTRA-sim uses the group's ring as a tree and crashes; use ring "
                         "for that kind")
    if c.algorithm != "hierarchical":
        A, const, _ = collective_rows_of((c,), net, replace(model, system=None, efficiency=None))
        return A, const, None
    f = _flow(c, net, model)
    A, const = tree_rows(f, net.num_dims) if isinstance(f, TreeFlow) else flow_rows(f, net.num_dims)
    return A, const, (None if f.exact else f)


def _key(c: Collective) -> tuple:
    # every field but count, name, phase and group (the rows do not depend on them)
    return (c.type, c.size_bytes, c.participants, c.traffic_bytes, c.hops, 1.0, "", "", "", c.algorithm)


def system_rows_of(colls: Sequence[Collective], net: Network, model):
    """``rows.Rows`` of ``colls`` under ``model.system``."""
    D = net.num_dims
    if not colls:
        return Rows(np.zeros((0, D)), np.zeros(0), np.zeros(0, dtype=np.int64))
    built = [_built(_key(c), net, model) for c in colls]
    A = np.vstack([b[0] for b in built])
    const = np.concatenate([b[1] for b in built])
    starts = np.zeros(len(built), dtype=np.int64)
    np.cumsum([b[0].shape[0] for b in built[:-1]], out=starts[1:])
    if model.efficiency is not None:
        A = A / np.asarray(model.efficiency, dtype=float)
    return Rows(np.ascontiguousarray(A), const, starts)


def bounded_flows(colls: Sequence[Collective], net: Network, model) -> list[tuple[int, Flow | TreeFlow]]:
    """(index, flow) of the collectives whose rows only bound their time."""
    out = []
    for i, c in enumerate(colls):
        f = _built(_key(c), net, model)[2]
        if f is not None:
            out.append((i, f))
    return out


def exact_times_ns(colls: Sequence[Collective], times_ns: np.ndarray, bw_gbps: Sequence[float], net: Network,
                   model) -> np.ndarray:
    """``times_ns`` (from the rows) with the queue replay's time for every bounded collective."""
    flows = bounded_flows(colls, net, model)
    if not flows:
        return times_ns
    eff = np.ones(net.num_dims) if model.efficiency is None else np.asarray(model.efficiency, dtype=float)
    with np.errstate(divide="ignore"):
        inv = tuple((1.0 / (np.asarray(bw_gbps, dtype=float) * eff)).tolist())
    out = np.array(times_ns, dtype=float)
    for i, f in flows:
        out[i] = _replayed(f, inv)
    return out


@lru_cache(maxsize=1 << 14)
def _replayed(f: Flow | TreeFlow, inv: tuple[float, ...]) -> float:
    return f.time_ns(inv) if isinstance(f, TreeFlow) else replay_ns(f, inv)
