"""``search --algorithms auto``: every candidate's collective implementations chosen with its
bandwidths (optimize/algorithms.py), and the least time a collective can take whatever the
implementations, for the proven bounds.

The choice is made within the system settings ``emit`` writes (ring everywhere, one active chunk
per dimension, endpoint delay 1 ns, localBWAware), so a chosen design is simulated with exactly
those settings but for the implementation lists.

Least time of a collective (docs/search.md, "Bounds with --algorithms auto"): a chunk's phases
(timing/system_phases.py) are the same steps (dimension, phase type, members, bytes in) whatever
the implementations; only each step's byte term ``a`` and constant ``c`` change. So with
``a_j`` and ``c_j`` the least of step j over the implementations allowed on its dimension, a
collective of K chunks in queues of capacity ``cap`` takes at least

- one chunk's chain: ``sum_j (a_j / B_dj + c_j)``;
- each queue's work over its capacity: ``(K / cap) sum_{j on d} a_j / B_d`` (constants >= 0).

``a`` is least for direct (its n - 1 messages of a step cost one); constants are computed on the
dimension as a group of members one NPU apart sees it (a wider stride only adds hops), and are
>= 0 with an endpoint delay of 1 ns (each message's truncation to whole ns loses less than the
delay it pays); a collective with a negative one would count for nothing (never seen).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Sequence

from .upstream import (IMPLEMENTATION_KEYS, KINDS, LibraError, Network, SystemTiming, TimeModel, choose_algorithms,
                       chunk_count, chunk_steps, implementation_candidates, phase, system_config)

ALGORITHMS = ("ring", "auto")
ENDPOINT_DELAY_NS = 1


def auto_model(model: TimeModel, num_dims: int) -> TimeModel:
    """The model the choice is made in: emit's system settings, ring everywhere to start from."""
    if model.kind != "pipelined":
        raise LibraError("search --algorithms auto applies to --model pipelined only (the LIBRA model has no "
                         "algorithms); drop --model libra")
    return replace(model, system=SystemTiming.uniform(num_dims, "ring", active_chunks=1,
                                                      endpoint_delay_ns=float(ENDPOINT_DELAY_NS)))


def system_record(num_dims: int, model: TimeModel, implementations: Sequence[Sequence[str]]) -> dict:
    """The design's system.json record (``{"path", "settings"}``) with the chosen lists."""
    settings = system_config(num_dims, splits=model.splits, endpoint_delay_ns=ENDPOINT_DELAY_NS,
                             local_mem_bw_gbps=float(model.local_mem_bw_gbps), peak_perf_tflops=1000.0,
                             scheduling_policy="LIFO")
    for kind, names in zip(KINDS, implementations):
        settings[IMPLEMENTATION_KEYS[kind]] = list(names)
    return {"path": "system.json written by emit, implementations chosen by search --algorithms auto",
            "settings": settings}


def choose(workloads, net: Network, cost, objective: str, constraints, model: TimeModel, power, tco):
    """optimize/algorithms.choose_algorithms within ``auto_model`` (exact: every combination left
    after its pruning is solved)."""
    return choose_algorithms(workloads, net, cost, objective=objective, constraints=constraints,
                             model=auto_model(model, net.num_dims), power=power, tco=tco)


def _piece(dim, p: int):
    # as system_rows._pieces lays out a group of p members one NPU apart on a Ring
    return replace(dim, npus=p) if dim.topology == "Ring" and p < dim.npus else dim


@lru_cache(maxsize=1 << 16)
def _least_step(ptype: str, n: int, m: float, dim, allowed: tuple[str, ...], mem_gbps: float | None
                ) -> tuple[float, float]:
    """(least byte term, least constant) of one step over the implementations ``allowed``."""
    got = [phase(alg, ptype, n, m, dim, float(ENDPOINT_DELAY_NS), mem_gbps, 0) for alg in allowed]
    return min(p.a_bytes for p in got), min(p.c_ns for p in got)


@lru_cache(maxsize=1 << 16)
def least_collective(kind: str, size: float, participants: tuple[int, ...], dims: tuple, splits: int,
                     mem_gbps: float | None) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """(per dimension (K / cap) sum a_j, per dimension one chunk's sum a_j, sum c_j) of a
    hierarchical collective, each step at its least over the allowed implementations (see above)."""
    D = len(dims)
    zero = ((0.0,) * D, (0.0,) * D, 0.0)
    if kind not in KINDS or all(p <= 1 for p in participants):
        return zero
    total = math.prod(d.npus for d in dims)
    K, chunk = chunk_count(kind, size, splits, total)
    if K == 0:
        return zero
    chain, lat = [0.0] * D, 0.0
    for d, ptype, n, m in chunk_steps(kind, chunk, participants):
        a, c = _least_step(ptype, n, m, _piece(dims[d], participants[d]),
                           tuple(implementation_candidates(kind, dims[d])), mem_gbps)
        if c < 0:
            return zero
        chain[d] += a
        lat += c
    return tuple(K * a for a in chain), tuple(chain), lat
