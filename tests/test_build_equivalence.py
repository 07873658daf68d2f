"""The vectorized model build gives the problem the collective-at-a-time build gave
(tests/reference_build.py): the same rows bit for bit, the same merged terms in the same order,
the same scaled problem to the last bit, on random demands, irregular groups and the shipped
traces."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import reference_build as ref
from libra_astra.demand import synthetic
from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.demand.types import Collective, Dag, Demand, RankClass
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.problem import Constraints, Workload, build_problem
from libra_astra.optimize.terms import _undominated, class_terms, node_path_terms, path_terms
from libra_astra.timing.model import TimeModel, class_rows, collective_rows
from libra_astra.timing import rows as rows_mod
from libra_astra.timing.rows import collective_rows_of
from libra_astra.optimize.optimizer import baseline_traffic
from libra_astra.timing.predict import critical_path_nodes, critical_paths

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
COST = load_cost(ROOT / "network_configs" / "cost.yml")

MODELS = [
    TimeModel(),
    TimeModel("pipelined", splits=1),
    TimeModel("pipelined", splits=4),
    TimeModel("pipelined", splits=3, local_mem_bw_gbps=1600.0, efficiency=(0.5, 0.75, 1.0)),
    TimeModel("pipelined", splits=7, latency=False, local_mem_bw_gbps=50.0),
    TimeModel("pipelined", splits=2, latency=False),     # neither hops nor sizes are read
]


def net3():
    return load_network(ROOT / "network_configs" / "paper_3d.yml")


def net8():
    topo = ("Ring", "FullyConnected", "Switch")
    return network_from_dict({"name": "eq-8d", "dimensions": [
        {"name": f"d{i}", "topology": topo[i % 3], "npus": n, "latency_ns": 100.0 * (i + 1), "cost_class": "InterNode"}
        for i, n in enumerate((4, 2, 4, 2, 2, 4, 2, 4))]})


def mixed_collectives(net, n: int, seed: int) -> list[Collective]:
    """Random hierarchical collectives, some re-labelled flat ring or P2P, repeats (which merge),
    one that uses no dimension and one that does not run (count 0)."""
    colls = list(synthetic.random_demand(net, n, seed=seed).rank_classes[0].collectives)
    rng = np.random.default_rng(seed)
    for i in rng.choice(n, n // 5, replace=False).tolist():
        colls[i] = replace(colls[i], algorithm=("flat_ring", "p2p")[i % 2])
    colls += [replace(c, count=2.5) for c in colls[: n // 4]]                     # same rows, other count
    colls += [replace(c, size_bytes=c.size_bytes * 3, traffic_bytes=tuple(3 * t for t in c.traffic_bytes))
              for c in colls[: n // 4]]                                          # rows 3x: merge under the LIBRA model
    colls.append(replace(colls[0], traffic_bytes=(0.0,) * net.num_dims))
    colls.append(replace(colls[1], count=0.0))
    return colls


def model_for(net, model: TimeModel) -> TimeModel:
    if model.efficiency is None:
        return model
    return replace(model, efficiency=tuple(np.linspace(0.5, 1.0, net.num_dims)))


@pytest.mark.parametrize("dedupe", [False, True], ids=["packed", "deduplicated"])
@pytest.mark.parametrize("block", [None, 37], ids=["one-block", "blocks-of-37"])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.kind}-{m.splits}")
@pytest.mark.parametrize("make_net", [net3, net8])
def test_rows_are_those_of_one_collective_at_a_time(make_net, model, block, dedupe, monkeypatch):
    if block is not None:     # blocks that end mid-way through flat and hierarchical runs
        monkeypatch.setattr(rows_mod, "_BLOCK", block)
    if dedupe:                # hops and participants read once per distinct tuple, as at many collectives
        monkeypatch.setattr(rows_mod, "_DEDUPE_FROM", 0)
    net = make_net()
    model = model_for(net, model)
    colls = mixed_collectives(net, 400, seed=3)
    A, g, starts = collective_rows_of(colls, net, model)
    ends = np.r_[starts[1:], A.shape[0]]
    for c, a, b in zip(colls, starts, ends):
        A_ref, g_ref = ref.collective_rows(c, net, model)
        assert np.array_equal(A[a:b], A_ref) and np.array_equal(g[a:b], g_ref), c
        A_one, g_one = collective_rows(c, net, model)
        assert np.array_equal(A_one, A_ref) and np.array_equal(g_one, g_ref)


def assert_same_terms(terms, ref_terms):
    """New Terms against the old [(An, g, weight)] list: same count, order, rows and weights."""
    assert terms.num_terms == len(ref_terms)
    ends = np.r_[terms.starts[1:], terms.A.shape[0]]
    for k, (An, g, w) in enumerate(ref_terms):
        a, b = terms.starts[k], ends[k]
        assert np.array_equal(terms.A[a:b], An) and np.array_equal(terms.g_ns[a:b], g)
        assert terms.weight[k] == w


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.kind}-{m.splits}")
@pytest.mark.parametrize("make_net", [net3, net8])
def test_merged_terms_are_the_old_ones(make_net, model):
    net = make_net()
    model = model_for(net, model)
    colls = mixed_collectives(net, 600, seed=5)
    dem = Demand("eq", net.npus_per_dim, (RankClass(1e6, tuple(colls)), RankClass(2e6, tuple(colls[::-3]))))
    got = class_terms(dem, net, model, {})
    for (comp, terms), rc in zip(got, dem.rank_classes):
        ref_terms = ref.merge_terms(((c, c.count) for c in rc.collectives), net, model, {})
        assert comp == rc.compute_time_ns
        assert_same_terms(terms, ref_terms)
    if model.kind == "libra":     # rows 3x as large merge: the test compares real merging
        assert got[0][1].num_terms < len(colls) // 2


def test_path_terms_mix_classes_and_whole_classes():
    net = net3()
    model = TimeModel("pipelined", splits=4)
    colls = mixed_collectives(net, 200, seed=7)
    nodes = tuple(("coll", i) for i in range(len(colls))) + (("comp", 5.0),)
    dag = Dag(nodes, ())
    dem = Demand("eq", net.npus_per_dim, (RankClass(0.0, tuple(colls), dag=dag), RankClass(3.0, tuple(colls[:50]))))
    path = [(0, 3), (0, len(colls)), (1, -1), (0, 3), (0, 10), (0, 250)]
    comp, terms = path_terms(dem, path, net, model, {})
    items = [(colls[3], 1.0)] + [(c, c.count) for c in colls[:50]] + [(colls[3], 1.0), (colls[10], 1.0),
                                                                      (colls[250], 1.0)]
    assert comp == 5.0 + 3.0
    assert_same_terms(terms, ref.merge_terms(items, net, model, {}))


def assert_same_path_terms(dem, path, net, model):
    """path_terms against the node-by-node gathering it replaced, merged by the old merge."""
    comp, terms = path_terms(dem, path, net, model, {})
    colls = [c for rc in dem.rank_classes for c in rc.collectives]
    comp_ref, items = ref.path_items(dem, path)
    assert comp == comp_ref    # summed in the same order: equal to the last bit
    assert_same_terms(terms, ref.merge_terms(((colls[i], n) for i, n in items), net, model, {}))


def test_path_terms_of_random_paths_are_the_old_ones():
    """Paths through two DAG classes, a class without a DAG, repeated nodes and empty paths."""
    net = net3()
    model = TimeModel("pipelined", splits=4)
    colls = mixed_collectives(net, 300, seed=9)
    rng = np.random.default_rng(9)
    nodes = [("coll", i) for i in range(len(colls))]
    nodes += [(("comp", "cpu", "free")[i % 3], float(rng.uniform(0, 1e4))) for i in range(200)]
    order = rng.permutation(len(nodes))
    dag = Dag(tuple(nodes[i] for i in order), ())
    dag2 = Dag(tuple(nodes[i] for i in order[::2]), ())
    dem = Demand("eq", net.npus_per_dim, (RankClass(0.0, tuple(colls), dag=dag), RankClass(7.5, tuple(colls[:40])),
                                           RankClass(0.0, tuple(colls), dag=dag2)))
    for trial in range(20):
        P = int(rng.integers(0, 400))
        path = [(c, int(rng.integers(0, len(dem.rank_classes[c].dag.nodes)))) for c in rng.choice([0, 2], P).tolist()]
        if trial % 3 == 0:
            for _ in range(2):
                path.insert(int(rng.integers(0, len(path) + 1)), (1, -1))
        assert_same_path_terms(dem, tuple(path), net, model)
    assert_same_path_terms(dem, (), net, model)


@pytest.mark.parametrize("prefix,network", [SH for SH in [
    (ROOT / "traces/gpt_tp2_pp2_dp4/gpt", "sample_4x4.yml"),
    (REAL / "pipeline4/pipeline4", REAL / "ring4.yml"),
    (REAL / "param_dlrm8/param_dlrm8", REAL / "ring8.yml")]], ids=lambda x: Path(x).name)
def test_critical_path_terms_and_baseline_traffic_on_traces(prefix, network):
    """The critical paths the overlap optimize adds, and the baselines' traffic, on traces."""
    net = load_network(ROOT / "network_configs" / network)
    model = TimeModel("pipelined", splits=4, overlap=True)
    groups = Path(str(prefix) + ".groups.json")
    dem, _ = demand_from_traces(prefix, net, comm_groups=groups if groups.exists() else None,
                                type_cpu_collectives=REAL in Path(prefix).parents)
    for bw in ([100.0] * net.num_dims, np.linspace(20.0, 200.0, net.num_dims).tolist()):
        pairs, nodes = critical_paths(dem, bw, net, model), critical_path_nodes(dem, bw, net, model)
        assert len(pairs) == len(nodes) == len(dem.rank_classes)
        for (t, path), (t_n, ids) in zip(pairs, nodes):
            assert t == t_n and len(path) == len(ids)
            assert_same_path_terms(dem, path, net, model)
            # the optimizer's route: global nodes straight from the replay
            comp, terms = node_path_terms(dem, np.array(ids, dtype=np.int64), net, model, {})
            comp_ref, ref_terms = path_terms(dem, path, net, model, {})
            assert comp == comp_ref
            assert np.array_equal(terms.A, ref_terms.A) and np.array_equal(terms.g_ns, ref_terms.g_ns)
            assert np.array_equal(terms.starts, ref_terms.starts) and np.array_equal(terms.weight, ref_terms.weight)
    workloads = [Workload(dem, weight=1.0), Workload(dem, weight=0.3)]
    got = baseline_traffic(workloads, net.num_dims)
    want = ref.baseline_traffic(workloads, net.num_dims)
    assert got.any() and np.array_equal(got, want)


def assert_same_problem(workloads, net, model):
    """build_problem's perf problem against the old term-by-term assembly (one workload)."""
    (w,) = workloads
    cons = Constraints(100.0 * net.num_dims)
    b = build_problem(workloads, net, COST, cons, "perf", model)
    p = b.problem
    classes = [(rc.compute_time_ns, ref.merge_terms(((c, c.count) for c in rc.collectives), net, model, {}))
               for rc in w.demand.rank_classes]
    A, g, owner, wts, tclass, ce, t0 = ref.class_problem_rows(classes, net.num_dims, b.b0)
    # Equal to the last bit: a different round-off sends the interior-point method on another path.
    assert b.t0 == t0
    D = net.num_dims
    assert p.A.shape == (A.shape[0], D + 1) and not p.A[:, D:].any()
    assert np.array_equal(p.A[:, :D], A) and np.array_equal(p.g, g) and np.array_equal(p.class_e, ce)
    assert np.array_equal(p.owner, owner) and np.array_equal(p.w, wts) and np.array_equal(p.term_class, tclass)
    assert b.num_terms == wts.shape[0]


@pytest.mark.parametrize("model", MODELS[:3], ids=lambda m: f"{m.kind}-{m.splits}")
@pytest.mark.parametrize("make_net", [net3, net8])
def test_problem_on_random_demands(make_net, model):
    net = make_net()
    assert_same_problem([Workload(synthetic.random_demand(net, 2000, seed=11))], net, model)


SHIPPED = [
    (ROOT / "traces/gpt3_tp8_dp8/gpt3", "sample_8x8.yml"),
    (ROOT / "traces/gpt_tp2_pp2_dp4/gpt", "sample_4x4.yml"),
    (ROOT / "traces/dlrm_16/dlrm", "sample_4x4.yml"),
    (ROOT / "traces/resnet50_dp16/resnet50", "sample_4x4.yml"),
    (REAL / "param_dlrm8/param_dlrm8", REAL / "ring8.yml"),
    (REAL / "pipeline4/pipeline4", REAL / "ring4.yml"),
    (REAL / "tpdp8/tpdp8", REAL / "ring2x4.yml"),
]


@pytest.mark.parametrize("model", [MODELS[0], MODELS[2], TimeModel("pipelined", splits=4, local_mem_bw_gbps=1600.0)],
                         ids=["libra", "pipelined", "pipelined-mem"])
@pytest.mark.parametrize("prefix,network", SHIPPED, ids=lambda x: Path(x).name)
def test_problem_on_shipped_traces(prefix, network, model):
    net = load_network(ROOT / "network_configs" / network)
    groups = Path(str(prefix) + ".groups.json")
    # gloo's collectives are CPU ops unless typed (tests/fixtures/real/README.md)
    dem, _ = demand_from_traces(prefix, net, comm_groups=groups if groups.exists() else None,
                                type_cpu_collectives=REAL in Path(prefix).parents)
    assert any(rc.collectives for rc in dem.rank_classes)
    assert_same_problem([Workload(dem)], net, model)
    for rc in dem.rank_classes:
        A, g, starts = class_rows(rc, net, model)
        for c, a in zip(rc.collectives, starts):
            A_ref, g_ref = ref.collective_rows(c, net, model)
            assert np.array_equal(A[a:a + A_ref.shape[0]], A_ref) and np.array_equal(g[a:a + g_ref.shape[0]], g_ref)


def test_merging_survives_hash_collisions(monkeypatch):
    """With every hash equal, the rows are compared whole: the terms do not change."""
    import libra_astra.optimize.terms as terms_mod
    net = net3()
    model = TimeModel()
    colls = mixed_collectives(net, 300, seed=13)
    dem = Demand("eq", net.npus_per_dim, (RankClass(0.0, tuple(colls)),))
    expected = ref.merge_terms(((c, c.count) for c in colls), net, model, {})
    monkeypatch.setattr(terms_mod, "_multipliers", lambda count: np.zeros(count, dtype=np.uint64))
    ((_, got),) = class_terms(dem, net, model, {})
    assert_same_terms(got, expected)


@pytest.mark.parametrize("model", [MODELS[0], MODELS[2], MODELS[4]], ids=["libra", "pipelined", "no-latency"])
@pytest.mark.parametrize("collide", [False, True], ids=["hashed", "colliding"])
def test_merging_in_slices_is_merging_whole(monkeypatch, model, collide):
    """Keys hashed and compared a few rows at a time (slices that split collectives), with and
    without hash collisions: the terms are the old ones."""
    import libra_astra.optimize.terms as terms_mod
    net = net8()
    model = model_for(net, model)
    colls = mixed_collectives(net, 300, seed=17)
    dem = Demand("eq", net.npus_per_dim, (RankClass(0.0, tuple(colls)), RankClass(1.0, tuple(colls[::-2]))))
    monkeypatch.setattr(terms_mod, "_SLICE_ROWS", 37)
    if collide:
        monkeypatch.setattr(terms_mod, "_multipliers", lambda count: np.zeros(count, dtype=np.uint64))
    for (_, got), rc in zip(class_terms(dem, net, model, {}), dem.rank_classes):
        assert_same_terms(got, ref.merge_terms(((c, c.count) for c in rc.collectives), net, model, {}))


@pytest.mark.parametrize("model", [MODELS[0], MODELS[2]], ids=["libra", "pipelined"])
def test_rows_compared_in_slices_find_a_difference_in_the_last_slice(monkeypatch, model):
    """60 equal pairs of collectives, then one pair with as many rows but other rows: compared a
    few rows at a time, the difference past the first slices is found."""
    import libra_astra.optimize.terms as terms_mod
    net = net8()
    colls = mixed_collectives(net, 200, seed=19)
    s = terms_mod._scaled(*collective_rows_of(colls[:60] + colls[:60] + colls[60:], net, model))
    last = 120
    other = next(j for j in range(60) if s.nrows[j] == s.nrows[last]
                 and not np.array_equal(s.A[s.starts[j]:s.starts[j] + s.nrows[j]],
                                        s.A[s.starts[last]:s.starts[last] + s.nrows[last]]))
    monkeypatch.setattr(terms_mod, "_SLICE_ROWS", 37)
    same, firsts = np.arange(60, 120), np.arange(60)
    assert s.nrows[:60].sum() > 3 * 37      # several slices before the differing pair
    assert terms_mod._same_rows(s, same, firsts)
    assert not terms_mod._same_rows(s, np.r_[same, last], np.r_[firsts, other])


@pytest.mark.parametrize("collide", [False, True], ids=["hashed", "colliding"])
def test_paths_of_one_optimization_share_the_groups_of_all_collectives(monkeypatch, collide):
    """The paths of one optimization (one cache) group their collectives by the groups found once
    over all collectives: with and without hash collisions, each path's terms are the old ones."""
    import libra_astra.optimize.terms as terms_mod
    if collide:
        monkeypatch.setattr(terms_mod, "_multipliers", lambda count: np.zeros(count, dtype=np.uint64))
    net = net3()
    model = TimeModel("pipelined", splits=4)
    colls = mixed_collectives(net, 300, seed=23)
    rng = np.random.default_rng(23)
    nodes = [("coll", i) for i in range(len(colls))] + [("comp", float(rng.uniform(0, 1e4))) for _ in range(50)]
    dag = Dag(tuple(nodes[i] for i in rng.permutation(len(nodes))), ())
    dem = Demand("eq", net.npus_per_dim, (RankClass(0.0, tuple(colls), dag=dag), RankClass(7.5, tuple(colls[::-4])),
                                           RankClass(0.0, tuple(colls[::-1]), dag=dag)))
    cache: dict = {}
    every = [c for rc in dem.rank_classes for c in rc.collectives]
    for trial in range(15):
        path = [(c, int(rng.integers(0, len(nodes)))) for c in rng.choice([0, 2], int(rng.integers(0, 300))).tolist()]
        if trial % 4 == 0:
            path.insert(int(rng.integers(0, len(path) + 1)), (1, -1))
        comp, terms = path_terms(dem, tuple(path), net, model, cache)
        comp_ref, items = ref.path_items(dem, tuple(path))
        assert comp == comp_ref
        assert_same_terms(terms, ref.merge_terms(((every[i], n) for i, n in items), net, model, {}))


def test_hash_multipliers_drawn_once_and_read_only():
    # Kept between builds: the same numbers as a fresh draw, and nobody may change them.
    from libra_astra.optimize import terms as terms_mod
    m = terms_mod._multipliers(10)
    fresh = np.random.default_rng(0x5EED).integers(1, 2 ** 62, size=10, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    assert np.array_equal(m, fresh)
    assert terms_mod._multipliers(10) is m
    assert not m.flags.writeable


@pytest.mark.parametrize("model", [TimeModel("pipelined", splits=1),
                                   TimeModel("pipelined", splits=1, local_mem_bw_gbps=1600.0, efficiency=(0.5, 0.75, 1.0)),
                                   TimeModel("pipelined", splits=1, latency=False)],
                         ids=["latency", "memory-efficiency", "no-latency"])
@pytest.mark.parametrize("make_net", [net3, net8])
def test_one_chunk_keeps_the_rows_that_can_be_a_collectives_time(make_net, model):
    # With one chunk a hierarchical collective's stages add up: its last stage's row bounds every
    # other row, so one row is left; a flat collective's rows are one per dimension and all stay.
    # Whatever is dropped, the largest row at any bandwidth is the same value, bit for bit.
    net = make_net()
    model = model_for(net, model)
    colls = mixed_collectives(net, 300, seed=9)
    A, g, starts = collective_rows_of(colls, net, model)
    A2, g2, starts2 = _undominated(A, g, starts)
    ends, ends2 = np.r_[starts[1:], A.shape[0]], np.r_[starts2[1:], A2.shape[0]]
    kept = ends2 - starts2
    flat = np.array([c.algorithm != "hierarchical" for c in colls])
    assert np.all(kept[~flat] == 1)
    assert np.array_equal(kept[flat], (ends - starts)[flat])
    assert A2.shape[0] < 0.6 * A.shape[0]
    rng = np.random.default_rng(2)
    for _ in range(200):
        inv = 1.0 / rng.uniform(0.5, 500.0, net.num_dims)
        assert np.array_equal(np.maximum.reduceat(A @ inv + g, starts), np.maximum.reduceat(A2 @ inv + g2, starts2))


def test_rows_with_a_negative_entry_are_all_kept():
    # The bound above holds only for coefficients and constants >= 0.
    A = np.array([[2.0, 1.0], [1.0, 1.0], [3.0, -1.0]])
    g = np.array([1.0, 0.0, 0.0])
    starts = np.array([0, 2])
    A2, g2, s2 = _undominated(A, g, starts)
    assert A2 is A and g2 is g and s2 is starts
    A2, g2, s2 = _undominated(A[:2], g[:2], starts[:1])
    assert np.array_equal(A2, [[2.0, 1.0]]) and np.array_equal(g2, [1.0]) and np.array_equal(s2, [0])
