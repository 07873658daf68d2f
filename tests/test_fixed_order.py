"""The replay in a fixed order (timing/fixed_order.py) gives exactly the event-driven replay's ends,
busy compute and causes (where no tie leaves them to the order of events), and the same critical
paths and predictions, on real, shipped, generated and random DAGs; it is taken where it applies."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.demand.types import Demand
from libra_astra.model.network import Dimension, Network, load_network
from libra_astra.timing import causes as causes_mod
from libra_astra.timing import events
from libra_astra.timing import fixed_order as fixed
from libra_astra.timing import predict as joint
from libra_astra.timing import slot_order
from libra_astra.timing.plan import plan_of

from test_replay_equivalence import (MODELS, REAL_SETS, ROOT, SAMPLES, bandwidths, random_demand, real_demand,
                                     shipped_demand)

NET = Network("r", (Dimension("a", "Ring", 4, 500.0), Dimension("b", "Switch", 2, 700.0)))


def as_lists(paths: list) -> list:
    """Paths (arrays, or (time, array) pairs) as lists, to compare with ==."""
    return [(p[0], p[1].tolist()) if isinstance(p, tuple) else p.tolist() for p in paths]


def compare(d: Demand, net: Network, seed: int, seen: Counter, count: int = 3) -> None:
    """Each model and design on a fresh copy of the demand (no replay cached), against events.simulate."""
    for model in MODELS:
        for bw in bandwidths(net, seed, count):
            d = replace(d)
            t = joint._times(d, bw, net, model)
            plan = plan_of(d)
            exact = events.simulate(plan, joint._duration_array(d, plan, bw, net, model).tolist(), d)
            assert t.finish == exact.finish
            assert t.busy_comp == exact.busy_comp
            ends = [plan.offsets[ci] + f.index(max(f)) for ci in range(len(d.rank_classes))
                    if (f := exact.class_finish(ci))]
            if isinstance(t, joint.Times):
                seen["fixed"] += 1
                cause = causes_mod.causes(plan.fixed, t.ends_ns, t.dur).tolist()
                seen["ties"] += cause.count(-2)
                assert [c for c in cause if c != -2] == [e for c, e in zip(cause, exact.cause) if c != -2]
                paths = t.path_nodes(ends)
                if paths is None:
                    seen["tie on a path"] += 1
                else:
                    assert as_lists(paths) == as_lists(exact.path_nodes(ends))
                    if paths:
                        with pytest.raises(ValueError):
                            paths[0][0] = -1    # a cached answer cannot be changed by a caller
            else:
                seen["events"] += 1
            got = joint.critical_path_nodes(d, bw, net, model)
            assert all(p.dtype == np.int64 and not p.flags.writeable for _, p in got)
            assert [p for _, p in as_lists(got) if p] == as_lists(exact.path_nodes(ends))
            assert [t for t, _ in got] == [max(exact.class_finish(ci), default=0.0) for ci in range(len(got))]
            p = joint.predict(d, bw, net, model)
            times = [max(exact.class_finish(ci), default=0.0) for ci in range(len(d.rank_classes))]
            assert p.class_times_ns == tuple(times)
            i = max(range(len(times)), key=times.__getitem__)
            assert p.exposed_comm_ns == times[i] - exact.busy_comp[i]


def with_dags(d: Demand, change) -> Demand:
    """``d`` with ``change(dag)`` as the DAG of each rank class that has one."""
    return replace(d, rank_classes=tuple(rc if rc.dag is None else replace(rc, dag=change(rc.dag))
                                         for rc in d.rank_classes))


def chained(d: Demand, seed: int) -> Demand:
    """``d`` with each GPU and CPU node depending on the one before it of its kind (a fixed slot
    order) and, in most demands, receives taking no time."""
    timed = random.Random(seed).random() < 0.2

    def change(dag):
        deps = set(dag.deps)
        for kind in ("comp", "cpu"):
            mine = [v for v, (k, _) in enumerate(dag.nodes) if k == kind]
            deps |= set(zip(mine, mine[1:]))
        waiting = {v for v, _, _ in dag.links}
        nodes = tuple((k, 0.0) if v in waiting and k != "coll" and not timed else (k, x)
                      for v, (k, x) in enumerate(dag.nodes))
        return replace(dag, nodes=nodes, deps=tuple(sorted(deps)))
    return with_dags(d, change)


def test_random_dags_with_a_fixed_slot_order():
    seen: Counter = Counter()
    for seed in range(200):
        compare(chained(random_demand(seed), seed), NET, seed, seen)
    # the fixed order covers most of them, ties included; the rest (cycles, receives that take
    # time) replay with events
    assert seen["fixed"] >= 0.6 * (seen["fixed"] + seen["events"])
    assert seen["ties"] > 0 and seen["tie on a path"] > 0 and seen["events"] > 0


def test_random_dags():
    seen: Counter = Counter()
    for seed in range(200):
        compare(random_demand(seed), NET, seed, seen)
    assert seen["fixed"] > 0 and seen["events"] > seen["fixed"]


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("name", sorted(REAL_SETS))
def test_real_traces(name, typed):
    d, net = real_demand(name, typed)
    compare(d, net, len(name), Counter(), count=2)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_shipped_traces(sample):
    d, net = shipped_demand(sample)
    seen: Counter = Counter()
    compare(d, net, 7, seen)
    assert seen["fixed"] == len(MODELS) * 3     # generated traces run each slot along dependencies


def test_generated_pipeline(tmp_path):
    import yaml
    from libra_astra.tracegen import generate

    spec = yaml.safe_load((ROOT / "traces/gpt_tp2_pp2_dp4/spec.yml").read_text())
    spec["model"]["layers"] = 16
    spec["model"]["global_batch"] = 8
    spec["parallel"] = {"tp": 2, "pp": 4, "dp": 2, "sequence_parallel": True}
    spec["placement"] = {"tp": [0], "pp": [0, 1], "dp": [1]}
    res = generate(spec, tmp_path / "pp")
    net = load_network(ROOT / "network_configs/sample_4x4.yml")
    d, _ = demand_from_traces(str(res.prefix), net, comm_groups=str(res.groups_path) if res.groups_path else None)
    assert any(rc.dag.links for rc in d.rank_classes)
    seen: Counter = Counter()
    compare(d, net, 3, seen)
    assert seen["fixed"] == len(MODELS) * 3


def competing(seed: int) -> Demand:
    """Classes whose GPU and CPU slots hold nodes that do not depend on the slot's node before
    them (some do), so ready nodes compete for a slot: durations with ties and zeros, receives
    on nodes without a slot (in most demands taking no time) and collectives shared across
    classes (random_demand's), no cycles."""
    rng = random.Random(seed)

    def change(dag):
        waiting = {v for v, _, _ in dag.links} if rng.random() < 0.8 else set()   # receives taking no time
        nodes = tuple((k, x) if k == "coll" else (k, 0.0) if v in waiting else (k, rng.choice((0.0, 1.0, 1.0, 1e3, 5e4)))
                      for v, (k, x) in enumerate(dag.nodes))
        deps = set(dag.deps)
        chain_p = rng.choice((0.0, 0.5, 0.9))
        for kind in ("comp", "cpu"):
            mine = [v for v, (k, _) in enumerate(nodes) if k == kind]
            deps |= {(a, b) for a, b in zip(mine, mine[1:]) if rng.random() < chain_p}
        links = tuple(link for link in dag.links if nodes[link[0]][0] == "free")
        return replace(dag, nodes=nodes, deps=tuple(sorted(deps)), links=links)
    return with_dags(random_demand(seed), change)


def unchecked_pass(d: Demand, bw, model):
    """A fresh copy of ``d`` replayed at ``bw``: (the copy, the replay's times, its plan, its fixed
    order, the fixed order's ends without the slot check), or None where there is no fixed order
    or no slot whose nodes compete."""
    d = replace(d)
    t = joint._times(d, bw, NET, model)
    plan = plan_of(d)
    fo = plan.fixed
    if not isinstance(fo, fixed.FixedOrder) or not fo.loose_next.size:
        return None
    dur = joint._duration_array(d, plan, bw, NET, model)
    F = fixed.finish_times(replace(fo, checks=slot_order.SlotChecks.none()), dur)
    return None if F is None else (d, t, plan, fo, F.tolist())


def test_random_dags_with_competing_slot_nodes():
    """Slots taken in node order without dependencies forcing it: the fixed order is taken where
    each replay's check confirms that order, and gives the event-driven replay's numbers; where the
    check refutes it, the event-driven replay runs (and the fixed order would have been wrong in
    some of those cases, so the check is needed)."""
    seen: Counter = Counter()
    for seed in range(300):
        d = competing(seed)
        compare(d, NET, seed, seen)
        for model in MODELS:
            for bw in bandwidths(NET, seed, 3):
                got = unchecked_pass(d, bw, model)
                if got is None:
                    continue
                d, t, plan, _, unchecked = got
                if isinstance(t, joint.Times):
                    seen["order confirmed"] += 1
                    assert unchecked == t.finish
                else:
                    seen["order refuted"] += 1
                    exact = events.simulate(plan, joint._duration_array(d, plan, bw, NET, model).tolist(), d)
                    seen["order wrong"] += unchecked != exact.finish
    assert seen["order confirmed"] > 0 and seen["order refuted"] > 0 and seen["order wrong"] > 0
    assert seen["fixed"] > 0 and seen["events"] > 0


@pytest.mark.skipif(fixed._kernel is None, reason="the compiled pass is not built here")
def test_compiled_pass_gives_the_python_loops_ends(monkeypatch):
    """The compiled pass (_fixed_pass.pyx) and the Python loop give the same ends to the last bit,
    the signs of zeros included, on random DAGs (ties, zero durations, nodes with many inputs,
    competing slot nodes) and the real traces; -0.0 durations too. The compiled walk along the
    causes gives the Python walk's paths, or None at the same ties."""
    demands = ([(chained(random_demand(seed), seed), NET, seed) for seed in range(60)]
               + [(competing(seed), NET, seed) for seed in range(60)]
               + [(*real_demand(name, typed), 5) for name in sorted(REAL_SETS) for typed in (False, True)])
    checked = wide = ties = 0
    for d, net, seed in demands:
        for model in MODELS:
            for bw in bandwidths(net, seed, 2):
                d = replace(d)
                joint._times(d, bw, net, model)
                plan = plan_of(d)
                fo = plan.fixed
                if not isinstance(fo, fixed.FixedOrder):
                    continue
                wide += fo.extra > 0
                dur = joint._duration_array(d, plan, bw, net, model)
                for durs in (dur, np.where(dur == 0.0, -0.0, dur)):
                    got = fixed.finish_times(fo, durs)
                    with monkeypatch.context() as m:
                        m.setattr(fixed, "_kernel", None)
                        want = fixed.finish_times(fo, durs)
                    assert (got is None) == (want is None)
                    if got is not None:
                        assert got.tobytes() == want.tobytes()
                        checked += 1
                        # the walk along the paths from each class's last node, and (on small
                        # graphs) from every node, last first
                        cause = causes_mod.causes(fo, got, durs)
                        ends = [int(np.argmax(got[lo:hi])) + lo for lo, hi in zip(plan.offsets, plan.offsets[1:])
                                if hi > lo]
                        for e in (ends, list(range(fo.size))[::-1]) if fo.size < 300 else (ends,):
                            paths = fixed._kernel.walk_causes(cause, e)
                            ref = causes_mod.walk_causes(cause.tolist(), e)
                            assert (paths is None) == (ref is None)
                            ties += paths is None
                            if paths is not None:
                                assert as_lists(paths) == as_lists(ref)
                                assert all(p.dtype == np.int64 and not p.flags.writeable for p in paths)
    assert checked > 500 and wide > 0 and ties > 0


def holds_by_hand(c, F: list[float]) -> bool:
    """slot_order_holds node by node, as its docstring states the rule."""
    deps = [c.dep_idx[a:a + k].tolist() for a, k in zip(c.dep_start.tolist(), c.dep_count.tolist())]
    ready = [max(F[u] for u in ds) for ds in deps]
    only = [next(u for u in ds if F[u] == r) if un and [F[u] for u in ds].count(r) == 1 else None
            for ds, un, r in zip(deps, c.unready.tolist(), ready)]
    for lo, hi in c.segments:
        for i in range(lo, hi):
            before = F[c.prev[i]]
            if ready[i] < before or not c.unready[i] or (c.after[i] and ready[i] == before and only[i] is not None):
                continue
            rest = range(c.run_end[i] + 1, hi)
            if any(ready[m] < ready[i] for m in rest):
                return False
            if any(ready[m] == ready[i] and (only[i] is None or only[m] != only[i]) for m in rest):
                return False
    return True


def test_slot_check_follows_its_rule():
    seen: Counter = Counter()
    for seed in range(300):
        d = competing(seed)
        for bw in bandwidths(NET, seed, 3):
            got = unchecked_pass(d, bw, MODELS[seed % len(MODELS)])
            if got is None:
                continue
            _, _, _, fo, F = got
            F += [0.0] * (1 + fo.extra)
            got = slot_order.slot_order_holds(fo.checks, F)
            assert got == holds_by_hand(fo.checks, F)
            seen[got] += 1
    assert seen[True] > 0 and seen[False] > 0


def test_latest_dependency_by_columns_and_by_runs():
    """causes() finds each node's latest dependency with whole columns where no node has more
    than a few, by runs otherwise: both give the same readiness (0 without dependencies) and the
    same cause (-1 for none, -2 for a tie), on random graphs whose ends take few values (ties,
    zeros, an infinite end)."""
    rng = random.Random(5)
    seen: Counter = Counter()
    for _ in range(400):
        n = rng.randint(1, 30)
        width = rng.randint(0, fixed._MAX_COLUMNS)
        deps, ptr = [], [0]
        for _ in range(n):
            deps += sorted(rng.sample(range(n), rng.randint(0, min(width, n))))
            ptr.append(len(deps))
        deps_a, ptr_a = np.array(deps, dtype=np.int64), np.array(ptr, dtype=np.int64)
        F = np.array([rng.choice((0.0, 1.0, 2.5, 3.0, math.inf)) for _ in range(n)])
        cols = fixed._dep_columns(deps_a, ptr_a, n)
        assert cols is not None and len(cols) == max(np.diff(ptr_a).max(), 0)
        ready, cause = causes_mod._latest_by_columns(cols, F, n)
        want_ready, want_cause = causes_mod._latest_by_runs(deps_a, ptr_a, F, n)
        assert ready.tobytes() == want_ready.tobytes() and cause.tolist() == want_cause.tolist()
        seen.update(("tie" if c == -2 else "none" if c == -1 else "one") for c in cause.tolist())
    assert seen["tie"] and seen["none"] and seen["one"]
    wide = np.arange(fixed._MAX_COLUMNS + 1, dtype=np.int64)
    assert fixed._dep_columns(wide, np.array([0, wide.size]), wide.size) is None


def test_nodes_with_many_inputs_read_partial_maxima():
    """A node with more than two inputs reads partial maxima of extra nodes placed just before it:
    one pass over the steps gives each node its duration plus the latest of all its inputs, for
    nodes with one to nine inputs (repeated ones and the zero node included)."""
    rng = random.Random(11)
    seen: Counter = Counter()
    for _ in range(200):
        n = rng.randint(1, 25)
        inputs = [[rng.randrange(g) for _ in range(rng.randint(1, 9))] if g and rng.random() < 0.8 else [n]
                  for g in range(n)]
        iu = np.array([u for us in inputs for u in us], dtype=np.int64)
        deg = np.array([len(us) for us in inputs], dtype=np.int64)
        start = np.cumsum(deg) - deg
        order = np.arange(n, dtype=np.int64)
        a, b = iu[start], iu[start + np.minimum(deg, 2) - 1]
        wide = np.flatnonzero(deg > 2)
        extra = 0
        if wide.size:
            order, a, b, extra = fixed._two_at_a_time(order, a, b, wide, deg[wide], start[wide], iu, n)
        assert extra == int(np.maximum(deg - 2, 0).sum())
        dur = [rng.choice((0.0, 1.0, 2.5, 4.0)) for _ in range(n)]
        F = dur + [0.0] * (1 + extra)
        for g, x, y in zip(order.tolist(), a.tolist(), b.tolist()):
            F[g] += max(F[x], F[y])
        want = dur + [0.0]
        for g in range(n):
            want[g] += max(want[u] for u in inputs[g])
        assert F[:n + 1] == want
        seen[int(deg.max())] += 1
    assert all(seen[k] for k in range(1, 10))


def merge_by_hand(offsets, waits, syncs):
    """Kahn's algorithm over the joint graph the merge of the classes orders: each node after the
    one before it in its class, a receive after its send, a shared collective after its partners'
    nodes before them. True if every node can be placed."""
    n = offsets[-1]
    after: dict[int, list[int]] = {}
    for ci in range(len(offsets) - 1):
        for g in range(offsets[ci] + 1, offsets[ci + 1]):
            after.setdefault(g, []).append(g - 1)
    for g, src in waits.items():
        after.setdefault(g, []).append(src)
    for g, partners in syncs.items():
        for p in partners:
            first = max(c for c in offsets if c <= p)
            after.setdefault(g, []).extend(range(first, p))
    placed = [False] * n
    moved = True
    while moved:
        moved = False
        for g in range(n):
            if not placed[g] and all(placed[u] for u in after.get(g, ())):
                placed[g] = moved = True
    return all(placed)


def test_merge_of_the_classes_is_a_topological_order():
    """On random joint graphs (receives waiting on sends of any class, cycles included): the merge
    places every node once, each after everything it waits for, and gives up exactly where the
    waits form a cycle."""
    seen: Counter = Counter()
    for seed in range(300):
        d = random_demand(seed)
        rng = random.Random(seed)
        plan = plan_of(d)
        waits = dict(plan.waits)
        if rng.random() < 0.5:      # receives waiting on any node of any class, their own included
            for g in rng.sample(range(plan.offsets[-1]), min(3, plan.offsets[-1])):
                waits[g] = rng.randrange(plan.offsets[-1])
        order = fixed._merge_classes(plan.offsets, *plan.edges[:2], waits, plan.syncs)
        possible = merge_by_hand(plan.offsets, waits, plan.syncs)
        assert (order is not None) == possible
        seen[possible] += 1
        if order is None:
            continue
        pos = np.empty(plan.offsets[-1], dtype=np.int64)
        pos[order] = np.arange(order.size)
        assert sorted(order.tolist()) == list(range(plan.offsets[-1]))
        for ci in range(len(plan.offsets) - 1):
            assert np.all(np.diff(pos[plan.offsets[ci]:plan.offsets[ci + 1]]) > 0)
        assert all(pos[src] < pos[g] for g, src in waits.items())
        for g, partners in plan.syncs.items():
            for p in partners:
                first = max(c for c in plan.offsets if c <= p)
                assert all(pos[u] < pos[g] for u in range(first, p))
    assert seen[True] and seen[False]
