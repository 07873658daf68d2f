"""Candidates of one parallelization with their proven lower bounds (``bounds``), and the cheaper
bound of a parallelization whose programs are not built yet (its busiest stage's compute).

The engine enumerates; this module turns a parallelization's bound paths (``engine.par_info``)
and its placements and block choices into candidates, sharing traffic, path, price and bound
caches across all of them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import bounds as bnd
from .evaluate import Candidate, Problem
from .space import AXES, Parallelization, spec_parallel
from .upstream import (TransformerModel, chain_bytes, hierarchical_traffic_bytes, path_bytes, ring_steps,
                       stage_compute_ns, stage_pass_ns)

STAGE_BOUND = "stage compute"


def pipeline_compute_ns(spec, total_bw_gbps: float | None = None) -> float:
    """The longest of these paths through the pipeline: for each stage s, the first micro-batch's
    forwards on stages 0..s-1, all of stage s's compute (one chain), then the last micro-batch's
    backwards on stages s-1..0 (with gpipe and 1f1b a stage's first pass is the first micro-batch's
    forward and its last the last one's backward; each waits for its neighbour's send). The
    interleaved schedule takes the busiest stage alone. With a total bandwidth W (GB/s per NPU),
    stage s's chain also holds the collectives of ``path_bytes``, which
    take at least their bytes / W (section "bytes path" of ``bounds``); and each stage's chain of
    collectives takes at least the bytes of those in ``chain_bytes`` / W."""
    p = spec.parallel
    mbs = spec.model.global_batch // (spec.model.micro_batch * p.dp * p.ep)
    best = edge = 0.0
    for s in range(p.pp):
        comm = path_bytes(spec, s) * mbs * spec.iterations / total_bw_gbps if total_bw_gbps else 0.0
        best = max(best, edge + stage_compute_ns(spec, s) + comm)
        if total_bw_gbps:
            # the stage's collectives run one at a time: some of them already take this long
            per_mb, per_step = chain_bytes(spec, s)
            best = max(best, (per_mb * mbs + per_step) * spec.iterations / total_bw_gbps)
        if p.schedule != "interleaved" and spec.iterations == 1:
            edge += sum(stage_pass_ns(spec, s))
    return best

_AXIS = {a: i for i, a in enumerate(AXES)}


def _path_sums(info, participants: tuple, with_lat: bool, cache: dict) -> tuple:
    """The bound paths of a parallelization under one placement: names, compute, per-dimension
    traffic (one list per path) and ring steps (paths x dimensions; None without latency).

    Traffic and steps are linear in the collectives' counts: (paths x keys) @ (keys x dimensions),
    the keys being the distinct (kind, size, axis) of all the paths."""
    keys, counts = info.path_keys
    D = len(participants[0])
    T = np.empty((len(keys), D))
    R = np.empty((len(keys), D)) if with_lat else None
    for j, (kind, size, axis) in enumerate(keys):
        part = participants[_AXIS[axis]]
        ck = (kind, size, part)
        t = cache.get(ck)
        if t is None:
            t = cache[ck] = hierarchical_traffic_bytes(kind, float(size), part)
        T[j] = t
        if with_lat:
            R[j] = [ring_steps(kind, n) for n in part]
    S = (counts @ T).tolist() if keys else [[0.0] * D for _ in info.paths]
    steps = (counts @ R if keys else np.zeros((len(info.paths), D))) if with_lat else None
    return [ps.name for ps in info.paths], [ps.compute_ns for ps in info.paths], S, steps


def _auto_path_sums(info, participants: tuple, net, model) -> list:
    """``bounds.bound``'s paths for ``--algorithms auto``: per path, each collective at its least
    over the implementations (``algorithms.least_collective``): queue bytes, chain bytes, constants."""
    from .algorithms import least_collective

    keys, counts = info.path_keys
    D = net.num_dims
    Q, Cb, L = np.zeros((len(keys), D)), np.zeros((len(keys), D)), np.zeros(len(keys))
    for j, (kind, size, axis) in enumerate(keys):
        Q[j], Cb[j], L[j] = least_collective(kind, float(size), participants[_AXIS[axis]], net.dims, model.splits,
                                             model.local_mem_bw_gbps)
    if not keys:
        counts = np.zeros((len(info.paths), 0))
    return [(ps.name, ps.compute_ns, q, float(lat), c) for ps, q, c, lat in
            zip(info.paths, (counts @ Q).tolist(), (counts @ Cb).tolist(), (counts @ L).tolist())]


class Context:
    """What the bounds of many candidates share: caches of traffic, paths, prices and bounds."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.prices_cache: dict = {}
        self.traffic_cache: dict = {}
        self.path_cache: dict = {}      # (parallelization, participants) -> the paths' traffic and ring steps
        self.bound_cache: dict = {}
        self.priced = bnd.needs_prices(problem.objective, problem.constraints)
        self.with_lat = bool(problem.model.kind == "pipelined" and problem.model.latency
                             and problem.model.efficiency is None)
        # the bound depends on the blocks only through prices and hop latencies
        self.per_blocks = self.priced or self.with_lat
        # --algorithms auto: bounds over every implementation (their constants depend on the blocks)
        self.auto = problem.algorithms == "auto"
        self.per_blocks = self.per_blocks or self.auto
        # the energy objectives' floor of their multiplier of T (bounds.time_multiplier_floor); set by
        # the engine, which knows the NPU count
        self.floor: float | None = None

    def _c_min(self, price) -> float:
        if self.floor is not None:
            return self.floor
        return bnd.min_cost_usd(price, self.problem.constraints) if self.priced else 0.0

    def prices(self, shape, blocks, levels) -> tuple:
        nkey = (shape, blocks)
        got = self.prices_cache.get(nkey)
        if got is None:
            net = self.problem.catalog.network(shape, blocks, levels)
            got = self.prices_cache[nkey] = (
                self.problem.cost.price_usd_per_gbps(net) if self.priced else (),
                [(2.0 if dm.topology == "Switch" else 1.0) * dm.latency_ns for dm in net.dims])
        return got

    def candidates(self, info, entries) -> list[Candidate]:
        """Candidates of ``info.par`` (an ``engine.ParInfo``) over ``entries`` (shape, levels, placement,
        block choices), each with its bound."""
        problem, p = self.problem, info.par
        out = []
        for shape, levels, pi, combos in entries:
            pkey = (p, pi.participants)
            path_s = self.path_cache.get(pkey)
            if path_s is None:
                path_s = self.path_cache[pkey] = _path_sums(info, pi.participants, self.with_lat, self.traffic_cache)
            for blocks in combos:
                bkey = (pkey, shape, blocks) if self.per_blocks else pkey
                got = self.bound_cache.get(bkey)
                if got is None and self.auto:
                    price = self.prices(shape, blocks, levels)[0]
                    net = self.problem.catalog.network(shape, blocks, levels)
                    got = self.bound_cache[bkey] = bnd.bound(
                        problem.objective, _auto_path_sums(info, pi.participants, net, problem.model), price,
                        problem.constraints, problem.model.splits, self._c_min(price))
                if got is None:
                    price, hop_ns = self.prices(shape, blocks, levels)
                    names, comps, S, steps = path_s
                    lat = (steps @ np.asarray(hop_ns)).tolist() if self.with_lat else [0.0] * len(names)
                    got = self.bound_cache[bkey] = bnd.bound(
                        problem.objective, list(zip(names, comps, S, lat)), price, problem.constraints,
                        problem.model.splits, self._c_min(price))
                out.append(Candidate(shape, blocks, levels, p, pi.order, got[0], got[1]))
        return out

    def stage_bound(self, p: Parallelization, entries) -> float:
        """A proven lower bound on every candidate of ``p`` without its programs: the compute of
        ``pipeline_compute_ns``, its traffic taken as zero, and for a priced objective the cheapest
        network among ``entries``."""
        problem = self.problem
        spec = problem.spec
        if isinstance(spec.model, TransformerModel):
            sp = replace(spec, model=replace(spec.model, micro_batch=p.micro_batch), parallel=spec_parallel(p, spec))
            # (--algorithms auto: compute only; its bytes terms hold for ring, not for direct)
            perf_w = (problem.constraints.total_bw_gbps if problem.objective == "perf" and not self.auto
                      else None)
            comp = pipeline_compute_ns(sp, perf_w)
        else:
            comp = 0.0
        c_min = 0.0 if self.floor is None else self.floor
        if self.priced and self.floor is None:
            c_min = min(bnd.min_cost_usd(self.prices(shape, blocks, levels)[0], problem.constraints)
                        for shape, levels, _, combos in entries for blocks in combos)
        return bnd.bound(problem.objective, [(STAGE_BOUND, comp, [0.0], 0.0)], [0.0], problem.constraints,
                         problem.model.splits, c_min)[0]
