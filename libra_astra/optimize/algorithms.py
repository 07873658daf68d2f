"""The collective algorithm as a design variable (``optimize --algorithms auto``): per dimension
and collective kind, the implementation ASTRA-sim runs, chosen jointly with the bandwidths.

For fixed implementations the problem is the convex one the optimizer solves exactly; the
choices are discrete, so they are enumerated. Before that, an implementation is dropped on a
dimension when another one takes no longer in every phase it would run there: each of those
phases has a byte term (the coefficient of 1 / B) and a constant no larger, so every row of
every collective is no larger at every bandwidth, and the dropped choice cannot give a better
optimum. Every remaining combination is solved; the best objective wins (ties: the earlier
combination, ring first). A combination with no feasible bandwidths (a time target out of its
reach, a power cap below its least) is skipped; when ring everywhere is one of them, the gain over
it is not defined (``ring`` None). What each choice gains is reported against ring everywhere.

Candidates per dimension (what ASTRA-sim runs there, system_phases.check_timing): ring; direct;
halvingDoubling on a power-of-two dimension, not for all-to-all; with ``trees`` (``--algorithms
auto-tree``) also doubleBinaryTree on a power-of-two dimension (algorithm_trees.py: where it is
refused, how it is pruned, what the choice then certifies).

A tree keeps the chunk whole, so the phases on the dimensions after it see larger messages: with
tree candidates, a non-tree choice is dropped only when it is never faster with every other
tree-candidate dimension of its kind running a tree or not.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Sequence

from ..errors import InfeasibleError, LibraError
from ..model.collectives import ALL_TO_ALL
from ..model.cost import CostModel
from ..model.network import Dimension, Network
from ..timing.astra_settings import KINDS
from ..timing.model import TimeModel
from ..timing.system_phases import SystemTiming, chunk_count, chunk_phases
from .algorithm_trees import TREE, tree_dominated, tree_refusals
from .optimizer import Constraints, OptimizeResult, Workload, optimize

MAX_COMBINATIONS = 4096


@dataclass(frozen=True)
class Pruned:
    kind: str
    dim: int
    implementation: str
    by: str                  # the implementation that is never slower there


@dataclass(frozen=True)
class AlgorithmChoice:
    result: OptimizeResult
    timing: SystemTiming                    # the chosen implementations
    ring: OptimizeResult | None             # the same problem with ring everywhere (None: infeasible)
    combinations: int                       # solved
    pruned: tuple[Pruned, ...]
    free: tuple[tuple[str, int], ...]       # the (kind, dimension) pairs chosen (kinds in the demand)
    # combinations whose proven lower bound is below the chosen objective (their own optimum is
    # only bounded: system_flow.py), so that one of them may be better
    open_combinations: int = 0
    trees: bool = False                     # doubleBinaryTree was a candidate (auto-tree)
    refused: tuple[tuple[str, int, str], ...] = ()  # (kind, dimension, why) where a tree is no candidate
    tree_free: OptimizeResult | None = None  # the best combination without a tree (auto-tree)
    tree_best: OptimizeResult | None = None  # the best combination with one (None: all pruned or infeasible)

    @property
    def tree_chosen(self) -> bool:
        return any(TREE in self.timing.implementation(k, d) for k, d in self.free)

    def to_dict(self) -> dict:
        out = {"implementations": {k: list(v) for k, v in zip(KINDS, self.timing.implementations)},
                "combinations_solved": self.combinations,
                "pruned": [{"kind": p.kind, "dimension": p.dim, "implementation": p.implementation,
                            "never_faster_than": p.by} for p in self.pruned],
                "ring_everywhere": None if self.ring is None else {
                    "objective_value": self.ring.fun, "time_ns": self.ring.best.time_ns,
                    "bandwidth_gbps": list(self.ring.bw_gbps)},
                "gain_over_ring": (self.ring.fun / self.result.fun) if self.ring and self.result.fun > 0 else None,
                "combinations_possibly_better": self.open_combinations}
        if self.trees:      # auto keeps its record as it was
            out["trees"] = {
                "chosen": self.tree_chosen,
                "not_candidates": [{"kind": k, "dimension": d, "why": why} for k, d, why in self.refused],
                "best_without_trees": None if self.tree_free is None else {
                    "objective_value": self.tree_free.fun, "time_ns": self.tree_free.best.time_ns,
                    "bandwidth_gbps": list(self.tree_free.bw_gbps)},
                "best_with_trees": None if self.tree_best is None else {
                    "objective_value": self.tree_best.fun, "time_ns": self.tree_best.best.time_ns,
                    "bandwidth_gbps": list(self.tree_best.bw_gbps)},
                "time_is": ("the slowest rank of each tree collective, summed along a chain: an upper bound on "
                            "ASTRA-sim's time (libra-astra predict times every rank)") if self.tree_chosen else
                           "as with auto (no tree chosen)"}
        return out


def candidates(kind: str, dim: Dimension, trees: bool = False) -> list[str]:
    out = ["ring", "direct"]
    if kind != ALL_TO_ALL and dim.npus & (dim.npus - 1) == 0:
        out.append("halvingDoubling")
    if trees and dim.npus & (dim.npus - 1) == 0:
        out.append(TREE)
    return out


def _phases_on(workloads: Sequence[Workload], net: Network, model: TimeModel, kind: str, d: int, impl: str,
               base: SystemTiming | None = None) -> list:
    """Every phase on dimension ``d`` of the hierarchical collectives of ``kind``, with ``impl`` there
    (the other dimensions as ``base`` has them, else the model's settings)."""
    base = base or model.system
    names = list(base.implementations[KINDS.index(kind)])
    names[d] = impl
    t = replace(base, implementations=tuple(tuple(names) if k == kind else v
                                            for k, v in zip(KINDS, base.implementations)))
    total = math.prod(x.npus for x in net.dims)
    seen, out = set(), []
    for w in workloads:
        for rc in w.demand.rank_classes:
            for c in rc.collectives:
                key = (c.type, c.size_bytes, c.participants)
                if c.type != kind or c.algorithm != "hierarchical" or key in seen:
                    continue
                seen.add(key)
                _, chunk = chunk_count(c.type, c.size_bytes, model.splits, total)
                out += [p for _, p in chunk_phases(c.type, chunk, c.participants, net.dims, t, model.local_mem_bw_gbps)
                        if p.dim == d]
    return out


def _with(t: SystemTiming, kind: str, names: dict[int, str]) -> SystemTiming:
    """``t`` with ``kind`` running ``names[d]`` on each dimension ``d`` of ``names``."""
    lists = [list(v) for v in t.implementations]
    for d, name in names.items():
        lists[KINDS.index(kind)][d] = name
    return replace(t, implementations=tuple(tuple(v) for v in lists))


def _never_slower(x: list, y: list) -> bool:
    return all(px.a_bytes <= py.a_bytes * (1 + 1e-12) and px.c_ns <= py.c_ns + 1e-9 for px, py in zip(x, y))


def _kinds_used(workloads: Sequence[Workload], net: Network) -> list[tuple[str, int]]:
    used = set()
    for w in workloads:
        for rc in w.demand.rank_classes:
            for c in rc.collectives:
                if c.algorithm == "hierarchical" and c.type in KINDS:
                    used.update((c.type, d) for d, p in enumerate(c.participants) if p > 1)
    return sorted(used, key=lambda kd: (KINDS.index(kd[0]), kd[1]))


def choose_algorithms(workloads: Sequence[Workload], net: Network, cost: CostModel, *, objective: str = "perf",
                      constraints: Constraints = Constraints(), model: TimeModel, rel_gap: float = 1e-9,
                      prune: bool = True, on_progress=None, trees: bool = False,
                      **optimize_options) -> AlgorithmChoice:
    """The best implementations and bandwidths together (``model.system``: the settings the
    implementations replace; LibraError if the model has none or there are too many choices).
    ``prune`` False solves every combination (the brute force the pruning is checked against).
    ``trees``: doubleBinaryTree is a candidate too where ASTRA-sim runs it (auto-tree).
    ``optimize_options`` (power, tco) go to every solve."""
    if model.system is None:
        raise LibraError("--algorithms auto needs the system settings it chooses within (the pipelined model)")
    free = _kinds_used(workloads, net)
    refused = tree_refusals(workloads, net, free) if trees else {}
    cands_of = {(k, d): [c for c in candidates(k, net.dims[d], trees) if not (c == TREE and (k, d) in refused)]
                for k, d in free}
    options: list[list[str]] = []
    pruned: list[Pruned] = []
    for kind, d in free:
        cands = cands_of[(kind, d)]
        # the other dimensions of this kind that may run a tree (it changes the bytes that reach d)
        tree_dims = [e for k, e in free if k == kind and e != d and TREE in cands_of[(k, e)]]
        contexts = [model.system] if not tree_dims else [
            _with(model.system, kind, dict(zip(tree_dims, v))) for v in itertools.product(("ring", TREE),
                                                                                       repeat=len(tree_dims))]
        phases = {impl: [p for b in contexts for p in _phases_on(workloads, net, model, kind, d, impl, b)]
                  for impl in cands if impl != TREE}
        keep = []
        for impl in cands:
            if impl == TREE:
                rest = {e: cands_of[(k, e)] for k, e in free if k == kind and e != d}
                by = tree_dominated(workloads, net, model, kind, d, [o for o in cands if o != TREE], rest)
            else:
                by = next((o for o in cands if o not in (impl, TREE) and _never_slower(phases[o], phases[impl])
                           and not (_never_slower(phases[impl], phases[o])
                                    and cands.index(impl) < cands.index(o))), None)
            if by is None or not prune:
                keep.append(impl)
            else:
                pruned.append(Pruned(kind, d, impl, by))
        options.append(keep)
    total = math.prod(len(o) for o in options)
    if total > MAX_COMBINATIONS:
        value = "auto-tree" if trees else "auto"
        raise LibraError(f"--algorithms {value}: {total:,} combinations of implementations remain after pruning (at "
                         f"most {MAX_COMBINATIONS:,}); fix some in --system and choose fewer")
    base = model.system

    def with_choice(choice: Sequence[str]) -> TimeModel:
        lists = [list(v) for v in base.implementations]
        for (kind, d), impl in zip(free, choice):
            lists[KINDS.index(kind)][d] = impl
        return replace(model, system=replace(base, implementations=tuple(tuple(v) for v in lists)))

    best = best_model = first_error = tree_free = tree_best = None
    bounds = []
    for i, choice in enumerate(itertools.product(*options)):
        if on_progress:
            on_progress(i, total)
        m = with_choice(choice)
        try:
            r = optimize(workloads, net, cost, objective=objective, constraints=constraints, model=m, rel_gap=rel_gap,
                         baselines=False, **optimize_options)
        except InfeasibleError as e:
            first_error = first_error or e
            continue
        bounds.append(r.dual_bound)
        if best is None or r.fun < best.fun * (1 - 1e-12):
            best, best_model = r, m
        if trees and TREE not in choice and (tree_free is None or r.fun < tree_free.fun * (1 - 1e-12)):
            tree_free = r
        if TREE in choice and (tree_best is None or r.fun < tree_best.fun * (1 - 1e-12)):
            tree_best = r
    if best_model is None:
        assert first_error is not None
        raise first_error
    result = optimize(workloads, net, cost, objective=objective, constraints=constraints, model=best_model,
                      rel_gap=rel_gap, **optimize_options)
    ring_model = with_choice(["ring"] * len(free))
    try:
        ring = result if ring_model == best_model else optimize(workloads, net, cost, objective=objective,
                                                                constraints=constraints, model=ring_model,
                                                                rel_gap=rel_gap, baselines=False, **optimize_options)
    except InfeasibleError:
        ring = None
    open_ = sum(1 for lb in bounds if lb < best.fun * (1 - 10 * rel_gap)) - (0 if best.success else 1)
    return AlgorithmChoice(result, best_model.system, ring, total, tuple(pruned), tuple(free), max(open_, 0), trees,
                           tuple((k, d, why) for (k, d), why in refused.items()), tree_free, tree_best)
