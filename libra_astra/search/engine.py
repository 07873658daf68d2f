"""Branch and bound over the co-design space, with candidate evaluation as Dask tasks.

1. Enumerate networks (shapes x blocks within the catalog's limits), parallelizations (the
   generator's rules, then the memory model) and placements; drop blocks another block of the
   same dimension provably beats or ties (``space.undominated_blocks``).
2. Per parallelization (one task each): the generator's programs and the long paths the lower
   bounds use (``bounds``); then a proven lower bound for every candidate.
3. Evaluate candidates exactly (``evaluate``: demand from the spec, optimize()) in increasing
   order of their bound, a chunk per task, a few chunks in flight. A candidate whose bound is at
   least the current K-th best objective cannot enter the top K and is skipped (pruned by
   bound). The search ends when every candidate is evaluated or pruned, when the candidate or
   time limit is reached (then the proven optimality gap over the whole space is reported), or on
   interruption (finished results are kept).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from . import bounds as bnd
from .evaluate import Candidate, Outcome, Problem, plan_for
from .memory import transformer_memory
from .space import (AXES, JobOptions, Parallelization, PlacementInfo, blocks_for, factorizations, parallelizations,
                    placement_count, placement_infos, spec_parallel, undominated_blocks)
from .candidates import STAGE_BOUND, Context
from .upstream import LibraError, TransformerModel


@dataclass(frozen=True)
class Settings:
    npus: int
    max_dims: int = 4
    blocks: tuple[str, ...] = ("Ring", "FullyConnected", "Switch")
    sp: str = "both"
    micro_batches: tuple[int, ...] = ()
    top: int = 10
    hbm_bytes: float = 80e9
    hbm_reserve: float = 0.1
    optimizer_bytes_per_param: float = 12.0
    max_evaluations: int | None = None
    time_limit_s: float | None = None
    chunk: int = 4
    in_flight: int = 4
    shapes: tuple[tuple[int, ...], ...] | None = None   # restrict the shapes (tests, sweeps)
    job: JobOptions = JobOptions()                       # schedules, ZeRO, recomputation, CP, EP to try
    lazy: bool = False       # build a parallelization's programs only when its stage bound is below the K-th best


@dataclass
class Counts:
    networks_total: int = 0               # shapes x blocks before the catalog's limits
    networks_valid: int = 0
    shapes_too_large: int = 0
    parallelizations_total: int = 0
    parallelizations_valid: int = 0
    rejected_rules: dict = field(default_factory=dict)
    memory_pruned_parallelizations: int = 0
    candidates_total: int = 0             # networks x parallelizations x placements, within block limits
    pruned_block_limit: int = 0           # candidates on networks whose blocks exceed the catalog's sizes
    pruned_memory: int = 0
    pruned_dominated: int = 0
    pruned_bound: Counter = field(default_factory=Counter)
    evaluated: int = 0
    infeasible: int = 0
    not_reached: int = 0                  # left when a limit or an interruption stopped the search
    expanded_parallelizations: int = 0    # lazy search: parallelizations whose programs were built

    def to_dict(self) -> dict:
        return {"networks_total": self.networks_total, "networks_within_block_limits": self.networks_valid,
                "shapes_beyond_catalog": self.shapes_too_large,
                "parallelizations_total": self.parallelizations_total,
                "parallelizations_valid": self.parallelizations_valid,
                "rejected_by_generator_rules": dict(self.rejected_rules),
                "parallelizations_over_memory": self.memory_pruned_parallelizations,
                "candidates_total": self.candidates_total, "pruned_block_limit": self.pruned_block_limit,
                "pruned_memory": self.pruned_memory, "pruned_dominated_block": self.pruned_dominated,
                "pruned_by_bound": dict(self.pruned_bound), "evaluated": self.evaluated,
                "infeasible": self.infeasible, "not_reached": self.not_reached,
                "expanded_parallelizations": self.expanded_parallelizations}


@dataclass(frozen=True)
class Space:
    candidates: tuple[Candidate, ...]      # sorted by bound
    counts: Counts
    memory: dict                           # parallelization label -> bytes per NPU
    # lazy: parallelizations not expanded yet, (stage bound, order, parallelization, candidates), by bound
    deferred: tuple = ()
    expand: Callable | None = None         # parallelizations -> their candidates (programs built then)

    @property
    def size(self) -> int:
        return len(self.candidates) + sum(d[3] for d in self.deferred)


@dataclass
class SearchResult:
    outcomes: list[Outcome]
    counts: Counts
    space_size: int
    stop_reason: str
    lower_bound_rest: float               # smallest bound among candidates neither evaluated nor pruned
    elapsed_s: float
    memory: dict

    def ranked(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.status == "ok"), key=lambda o: o.objective_value)

    @property
    def proven_gap(self) -> float:
        """(best - lower bound of everything not evaluated) / best; 0 when the space was closed."""
        r = self.ranked()
        if not r or not math.isfinite(self.lower_bound_rest):
            return 0.0
        return max(0.0, (r[0].objective_value - self.lower_bound_rest) / r[0].objective_value)


def axis_participants(shape: Sequence[int], placement: Sequence[tuple[str, Sequence[int]]],
                      degrees: dict) -> dict[str, tuple[int, ...]]:
    """Per axis, its size in each dimension (the generator's placement rules)."""
    cap = list(shape)
    out = {}
    for name, dims in placement:
        left = degrees[name]
        p = [1] * len(shape)
        for d in sorted(dims):
            take = cap[d] if left % cap[d] == 0 else left
            p[d] = take
            cap[d] //= take
            left //= take
        out[name] = tuple(p)
    return out


def _collective_bytes(kind: str, size: int, degree: int) -> float:
    """Least bytes per NPU, summed over dimensions, of a hierarchical collective over ``degree`` NPUs."""
    if degree <= 1:
        return 0.0
    if kind == "ALL_REDUCE":
        return 2.0 * size * (degree - 1) / degree
    if kind in ("REDUCE_SCATTER", "ALL_TO_ALL"):
        return size * (degree - 1) / degree
    if kind == "ALL_GATHER":
        return float(size) * (degree - 1)
    return float(size)


@dataclass(frozen=True)
class ParInfo:
    par: Parallelization
    paths: tuple                       # PathSummary: compute path, bytes path, chains

    @functools.cached_property
    def path_keys(self) -> tuple:
        """The distinct (kind, size, axis) of the paths' collectives, and each path's count of each."""
        keys = sorted({k for ps in self.paths for k, _ in ps.colls})
        at = {k: j for j, k in enumerate(keys)}
        counts = np.zeros((len(self.paths), len(keys)))
        for i, ps in enumerate(self.paths):
            for k, n in ps.colls:
                counts[i, at[k]] += n
        return keys, counts


def par_info(problem: Problem, par: Parallelization) -> ParInfo:
    """The long paths of a parallelization (a task: it builds the generator's programs)."""
    programs = plan_for(problem.spec, par).programs
    deg = par.degrees()
    total = problem.constraints.total_bw_gbps
    paths = bnd.longest_paths(programs, lambda k, s, a: _collective_bytes(k, s, deg.get(a, 1)), total)
    return ParInfo(par, tuple(paths) + tuple(bnd.collective_chains(programs)))


def enumerate_space(problem: Problem, st: Settings, mapper: Callable) -> Space:
    """All candidates with their bounds, and the counts of what was pruned before evaluation.

    ``mapper(fn, items)`` runs ``fn(problem, item)`` for each item (on the cluster)."""
    spec, cat = problem.spec, problem.catalog
    counts = Counts()
    shapes = list(st.shapes) if st.shapes else factorizations(st.npus, st.max_dims)
    pc = parallelizations(spec, st.npus, sp=st.sp, micro_batches=st.micro_batches or None, job=st.job)
    counts.parallelizations_valid = len(pc.valid)
    counts.rejected_rules = dict(pc.rejected)
    counts.parallelizations_total = len(pc.valid) + sum(pc.rejected.values())
    memory, fits = {}, []
    for p in pc.valid:
        if isinstance(spec.model, TransformerModel):
            m = transformer_memory(replace(spec.model, micro_batch=p.micro_batch), spec_parallel(p, spec),
                                   st.optimizer_bytes_per_param)
            memory[p.label] = m.total_bytes
            if m.total_bytes > st.hbm_bytes * (1 - st.hbm_reserve):
                counts.memory_pruned_parallelizations += 1
                continue
        fits.append(p)
    ctx = Context(problem)
    transformer = isinstance(spec.model, TransformerModel)
    ctx.floor = (bnd.time_multiplier_floor(problem.objective, st.npus, problem.power, problem.tco)
                 if problem.objective in bnd.ENERGY_OBJECTIVES else None)
    fit_set = set(fits)
    work: dict = {p: [] for p in fits}    # parallelization -> (shape, levels, placement info, block combos)
    keep_cache: dict = {}      # (shape, p2p_far) -> block choices left after dominance
    for shape in shapes:
        D = len(shape)
        nb_all = len(st.blocks) ** D
        counts.networks_total += nb_all
        levels = cat.levels_of(shape)
        if levels is None:
            counts.shapes_too_large += 1
            opts = [[] for _ in shape]
        else:
            opts = blocks_for(shape, levels, cat, st.blocks)
        nb = math.prod(len(o) for o in opts)
        counts.networks_valid += nb
        for p in pc.valid:
            fits_p = p in fit_set
            if not transformer:
                pls = (PlacementInfo((("dp", tuple(range(D))),), ((1,) * D,) * (len(AXES) - 1) + (tuple(shape),),
                                     (False,) * D),)
                n_pl = 1
            elif fits_p and nb:
                pls = placement_infos(shape, p.degree_tuple())
                n_pl = len(pls)
            else:
                n_pl = placement_count(shape, p.degree_tuple())
            counts.candidates_total += nb_all * n_pl
            counts.pruned_block_limit += (nb_all - nb) * n_pl
            if nb == 0:
                continue
            if not fits_p:
                counts.pruned_memory += nb * n_pl
                continue
            for pi in pls:
                combos = keep_cache.get((shape, pi.p2p_far))
                if combos is None:
                    combos = keep_cache[(shape, pi.p2p_far)] = list(_product(undominated_blocks(
                        opts, pi.p2p_far, ring_over_switch=problem.algorithms != "auto")))
                counts.pruned_dominated += nb - len(combos)
                work[p].append((shape, levels, pi, combos))
    if not st.lazy:
        infos = {i.par: i for i in mapper(par_info, fits)} if fits else {}
        cands = [c for p in fits for c in ctx.candidates(infos[p], work[p])]
        cands.sort(key=lambda c: c.bound)
        return Space(tuple(cands), counts, memory)
    deferred = sorted(((ctx.stage_bound(p, work[p]), i, p, sum(len(w[3]) for w in work[p]))
                       for i, p in enumerate(fits) if work[p]), key=lambda d: (d[0], d[1]))

    def expand(pars: Sequence[Parallelization]) -> list[Candidate]:
        return [c for i in mapper(par_info, list(pars)) for c in ctx.candidates(i, work[i.par])]

    return Space((), counts, memory, tuple(deferred), expand)


def _product(options: Sequence[Sequence[str]]):
    yield from itertools.product(*options)


def run_search(problem: Problem, space: Space, st: Settings, submit: Callable, wait_any: Callable,
               on_progress: Callable[[int, int, float], None] = lambda *_: None,
               on_outcome: Callable[[Outcome], None] = lambda _o: None) -> SearchResult:
    """Evaluate ``space`` in bound order; see the module docstring.

    ``submit(chunk, threshold)`` starts a task and returns a future; ``wait_any(futures)`` returns
    (done futures, results of each). KeyboardInterrupt ends the search with what has finished.
    """
    t0 = time.perf_counter()
    counts = space.counts
    # candidates by bound (a sorted list is a heap); parallelizations not expanded yet join it once
    # their stage bound is below the next candidate's bound and the current K-th best
    heap = [(c.bound, j, c) for j, c in enumerate(space.candidates)]
    seq = len(heap)
    deferred = list(space.deferred)
    di = 0
    size = space.size
    top: list[float] = []          # max-heap (negated) of the K best objective values
    outcomes: list[Outcome] = []
    pending: dict = {}
    stop = "every candidate evaluated or pruned by a proven bound"
    budget_hit = False

    def threshold() -> float:
        return -top[0] if len(top) >= st.top else math.inf

    def record(res: Sequence[Outcome]) -> None:
        for o in res:
            if o.status == "pruned":
                counts.pruned_bound[o.reason] += 1
                continue
            outcomes.append(o)
            if o.status == "ok":
                counts.evaluated += 1
                if len(top) < st.top:
                    heapq.heappush(top, -o.objective_value)
                elif o.objective_value < -top[0]:
                    heapq.heapreplace(top, -o.objective_value)
            else:
                counts.infeasible += 1
                counts.evaluated += 1
            on_outcome(o)

    def expand(limit: float, every: bool) -> None:
        """Expand the next parallelizations whose stage bound is below ``limit``: one batch (the
        stage bound is loose, so candidates of the most promising parallelizations are evaluated
        early and set the threshold), or ``every`` one of them (before pruning the rest)."""
        nonlocal di, seq
        while di < len(deferred) and deferred[di][0] < limit:
            batch = [d for d in deferred[di:di + max(1, st.in_flight // 2)] if d[0] < limit]
            di += len(batch)
            counts.expanded_parallelizations += len(batch)
            for c in space.expand([d[2] for d in batch]):
                heapq.heappush(heap, (c.bound, seq, c))
                seq += 1
            if not every or over_time():
                break

    def over_time() -> bool:
        return st.time_limit_s is not None and time.perf_counter() - t0 > st.time_limit_s

    def open_count() -> int:
        return len(heap) + sum(d[3] for d in deferred[di:])

    def lowest() -> float:
        vals = ([heap[0][0]] if heap else []) + ([deferred[di][0]] if di < len(deferred) else [])
        return min(vals, default=math.inf)

    lowest_open = math.inf
    try:
        while heap or di < len(deferred) or pending:
            while len(pending) < st.in_flight and not budget_hit:
                thr = threshold()
                expand(thr, False)
                if not heap or heap[0][0] >= thr:
                    expand(thr, True)
                    if di < len(deferred) and deferred[di][0] < thr:    # stopped by the time limit
                        budget_hit, stop = True, f"time limit reached ({st.time_limit_s:g} s)"
                        break
                if not heap or heap[0][0] >= thr:
                    # by bound order every remaining candidate (and parallelization) is pruned too
                    for _, _, c in heap:
                        counts.pruned_bound[c.bound_name] += 1
                    for d in deferred[di:]:
                        counts.pruned_bound[STAGE_BOUND] += d[3]
                    heap, di = [], len(deferred)
                    break
                if st.max_evaluations is not None and counts.evaluated + _in_flight(pending) >= st.max_evaluations:
                    budget_hit, stop = True, f"candidate limit reached ({st.max_evaluations} evaluations)"
                    break
                if over_time():
                    budget_hit, stop = True, f"time limit reached ({st.time_limit_s:g} s)"
                    break
                chunk = [heapq.heappop(heap)[2] for _ in range(min(st.chunk, len(heap)))]
                pending[submit(chunk, thr)] = (len(chunk), chunk[0].bound)
            if not pending:
                break
            done, results = wait_any(list(pending))
            for f, res in zip(done, results):
                pending.pop(f, None)
                record(res)
            on_progress(counts.evaluated + sum(counts.pruned_bound.values()), size, threshold())
        if budget_hit and open_count():
            counts.not_reached = open_count()
            lowest_open = lowest()
    except KeyboardInterrupt:
        stop = "interrupted; results of finished evaluations kept"
        counts.not_reached = open_count() + _in_flight(pending)
        open_bounds = [lowest()] + [b for _, b in pending.values()]
        lowest_open = min(open_bounds)
        for f in pending:
            try:
                f.cancel()
            except Exception:  # noqa: BLE001 - a future that already finished cannot be cancelled
                pass
    return SearchResult(outcomes, counts, size, stop, lowest_open, time.perf_counter() - t0, space.memory)


def _in_flight(pending: dict) -> int:
    return sum(n for n, _ in pending.values())


def check_problem(problem: Problem) -> None:
    c = problem.constraints
    if problem.objective == "perf" and not (c.total_bw_gbps or c.budget_usd):
        raise LibraError("search --objective perf needs --total-bw, --total-bw-max or --budget (otherwise more "
                         "bandwidth is always faster)")
    if problem.objective == "min-cost" and not c.time_target_ns:
        raise LibraError("search --objective min-cost needs --time-target NS")
    if problem.objective in ("min-energy", "perf-per-watt", "min-tco") and problem.power is None:
        raise LibraError(f"search --objective {problem.objective} needs power figures: give --power FILE")
    if problem.objective == "min-tco" and problem.tco is None:
        raise LibraError("search --objective min-tco needs --electricity-usd-per-kwh and --lifetime-years")
