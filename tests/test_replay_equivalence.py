"""The joint replay (one event-driven simulation over all rank classes) gives exactly the times,
causes and critical paths of the replay it replaced (per-class replays in sweeps until nothing
changes, kept in tests/replay_reference.py), on real and generated traces and random DAGs."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.demand.types import Collective, Dag, Demand, RankClass, make_collective
from libra_astra.model.network import Dimension, Network, load_network
from libra_astra.timing import predict as joint
from libra_astra.timing.plan import plan_of
from libra_astra.timing.model import TimeModel, simulator_model

import replay_reference as reference

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"
REAL_SETS = {"ddp4": "ring4", "tpdp4": "ring2x2", "tpdp8": "ring2x4", "pipeline4": "ring4", "param_dlrm8": "ring8"}
SAMPLES = {"gpt3_tp8_dp8/gpt3": "sample_8x8", "dlrm_16/dlrm": "sample_4x4", "resnet50_dp16/resnet50": "sample_4x4",
           "gpt_tp2_pp2_dp4/gpt": "sample_4x4"}
MODELS = (TimeModel("libra", overlap=True), TimeModel("pipelined", splits=4, overlap=True), simulator_model(1, 1e9))


def bandwidths(net: Network, seed: int, count: int = 3) -> list[tuple[float, ...]]:
    rng = random.Random(seed)
    out = [tuple(100.0 for _ in net.dims)]
    out += [tuple(rng.choice((1.0, 7.5, 40.0, 250.0, 3000.0)) for _ in net.dims) for _ in range(count - 1)]
    return out


def assert_same(d: Demand, net: Network, model: TimeModel, bw: tuple[float, ...]) -> bool:
    """True if compared: ranks that wait on each other in a cycle have no times to agree on."""
    old = reference.replay(d, bw, net, model)
    new = joint._replay(d, bw, net, model)
    if new.cycles or not old.converged:
        return False
    k = len(d.rank_classes)
    assert tuple(new.class_finish(ci) for ci in range(k)) == old.finish
    job_of = plan_of(d).job_of
    causes = tuple([None if g < 0 else job_of[g]
                    for g in new.cause[new.offsets[ci]:new.offsets[ci + 1]]] for ci in range(k))
    assert causes == old.cause
    assert new.busy_comp == old.busy_comp
    assert joint.critical_paths(d, bw, net, model) == reference.critical_paths(d, bw, net, model)
    assert joint.predict(d, bw, net, model) == reference_prediction(d, bw, net, model)
    return True


def assert_all_same(d: Demand, net: Network, seed: int, count: int = 3) -> None:
    for model in MODELS:
        for bw in bandwidths(net, seed, count):
            assert assert_same(d, net, model, bw)


def real_demand(name: str, typed: bool) -> tuple[Demand, Network]:
    """The demand of a real PyTorch trace set of tests/fixtures/real, and its network."""
    net = load_network(REAL / f"{REAL_SETS[name]}.yml")
    return demand_from_traces(REAL / name / name, net, type_cpu_collectives=typed)[0], net


def shipped_demand(sample: str) -> tuple[Demand, Network]:
    """The demand of a shipped sample trace set (with its groups file, if it has one), and its network."""
    net = load_network(ROOT / "network_configs" / f"{SAMPLES[sample]}.yml")
    prefix = ROOT / "traces" / sample
    groups = prefix.parent / (prefix.name + ".groups.json")
    return demand_from_traces(str(prefix), net, comm_groups=str(groups) if groups.exists() else None)[0], net


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("name", sorted(REAL_SETS))
def test_real_traces(name, typed):
    d, net = real_demand(name, typed)
    assert_all_same(d, net, len(name), count=2)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_shipped_traces(sample):
    d, net = shipped_demand(sample)
    assert_all_same(d, net, 7)


@pytest.mark.parametrize("tp,pp,dp,micro,placement", [
    (1, 4, 4, 4, {"pp": [0], "dp": [1]}),
    (2, 4, 2, 8, {"tp": [0], "pp": [0, 1], "dp": [1]}),
    (1, 16, 1, 4, {"pp": [0, 1]}),
    (4, 2, 2, 2, {"tp": [0], "pp": [1], "dp": [1]}),
])
def test_generated_pipelines(tmp_path, tp, pp, dp, micro, placement):
    import yaml
    from libra_astra.tracegen import generate

    spec = yaml.safe_load((ROOT / "traces/gpt_tp2_pp2_dp4/spec.yml").read_text())
    spec["model"]["layers"] = 16
    spec["model"]["global_batch"] = micro * dp
    spec["parallel"] = {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": tp > 1}
    spec["placement"] = placement
    res = generate(spec, tmp_path / "pp")
    net = load_network(ROOT / "network_configs/sample_4x4.yml")
    d, _ = demand_from_traces(str(res.prefix), net,
                              comm_groups=str(res.groups_path) if res.groups_path else None)
    assert any(rc.dag.links for rc in d.rank_classes)
    assert_all_same(d, net, tp * 100 + pp * 10 + dp)


def random_demand(seed: int) -> Demand:
    """Classes with random DAGs (every node kind, zero durations included), receives that wait
    on sends of other classes and collectives shared across classes, matched in issue order so
    that no ranks wait on each other in a cycle."""
    rng = random.Random(seed)
    k = rng.randint(1, 5)
    p2p = Collective("P2P", 2.0**20, (1, 2), (0.0, 2.0**20), (0, 1), algorithm="p2p")
    zero = Collective("P2P", 0.0, (1, 1), (0.0, 0.0), (0, 0), algorithm="p2p")
    shared = [make_collective(rng.choice(("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL")),
                              rng.choice((0.0, 2.0**16, 2.0**24)), (rng.choice((1, 2, 4)), rng.choice((1, 2))))
              for _ in range(rng.randint(0, 4))]
    colls = tuple(shared) + (p2p, zero)
    classes = []
    sends: list[list[int]] = []
    plans: list[tuple[list, list]] = []
    for ci in range(k):
        n = rng.randint(1, 40)
        nodes = []
        for _ in range(n):
            kind = rng.choice(("comp", "comp", "cpu", "free", "coll", "coll"))
            if kind == "coll":
                nodes.append(("coll", rng.randrange(len(colls))))
            else:
                nodes.append((kind, rng.choice((0.0, 1.0, 1e3, 5e4, 2e5))))
        deps = sorted({(u, v) for v in range(1, n) for u in rng.sample(range(v), min(v, rng.randint(0, 3)))})
        plans.append((nodes, deps))
        sends.append([v for v, (kind, c) in enumerate(nodes) if kind == "coll" and c >= len(shared)])
    no_dag = rng.randrange(k) if k > 1 and rng.random() < 0.3 else -1
    if no_dag >= 0:
        plans[no_dag], sends[no_dag] = ([], []), []
    for ci, (nodes, deps) in enumerate(plans):
        if ci == no_dag:
            classes.append(RankClass(3e5, colls[:1], 2))   # replayed as its no-overlap time
            continue
        # a receive waits on a send of an earlier class only: waits cannot form a cycle
        links = []
        if ci > 0:
            for v, (kind, _) in enumerate(nodes):
                src = rng.randrange(ci)
                if kind in ("free", "comp") and sends[src] and rng.random() < 0.3:
                    links.append((v, src, rng.choice(sends[src])))
        # the i-th shared collective of a class meets the i-th of every other class (issue order)
        syncs = []
        mine = [v for v, (kind, c) in enumerate(nodes) if kind == "coll" and c < len(shared)]
        for cj in range(k):
            if cj != ci:
                theirs = [v for v, (kind, c) in enumerate(plans[cj][0]) if kind == "coll" and c < len(shared)]
                syncs += [(a, cj, b) for a, b in zip(mine, theirs)]
        classes.append(RankClass(sum(x for kind, x in nodes if kind == "comp"), colls, rng.randint(1, 4),
                                 dag=Dag(tuple(nodes), tuple(deps), tuple(links), tuple(syncs))))
    return Demand(f"random{seed}", (4, 2), tuple(classes))


def test_random_dags():
    net = Network("r", (Dimension("a", "Ring", 4, 500.0), Dimension("b", "Switch", 2, 700.0)))
    compared = total = 0
    for seed in range(200):
        d = random_demand(seed)
        for model in MODELS:
            for bw in bandwidths(net, seed):
                compared += assert_same(d, net, model, bw)
                total += 1
    # a random receive or shared collective can make ranks wait on each other in a cycle
    assert compared >= 0.7 * total


def test_the_joint_replay_is_reused_only_at_the_same_design():
    net = Network("r", (Dimension("a", "Ring", 4, 500.0), Dimension("b", "Switch", 2, 700.0)))
    d = random_demand(3)
    model = MODELS[1]
    a = joint.predict(d, (100.0, 10.0), net, model)
    b = joint.predict(d, (10.0, 100.0), net, model)
    assert joint.predict(d, (100.0, 10.0), net, model) == a
    assert joint.predict(d, (10.0, 100.0), net, model) == b
    assert joint.predict(d, (10.0, 100.0), net, MODELS[0]) == reference_prediction(d, (10.0, 100.0), net, MODELS[0])


def reference_prediction(d, bw, net, model):
    r = reference.replay(d, bw, net, model)
    times = [max(f, default=0.0) for f in r.finish]
    i = max(range(len(times)), key=times.__getitem__)
    return joint.Prediction(times[i], tuple(times), times[i] - r.busy_comp[i],
                            any(rc.dag is not None for rc in d.rank_classes))


def test_classes_with_equal_dags():
    """Consecutive classes with equal DAGs (the same object, equal tuples, or equal but for -0.0
    durations where the first has 0.0) share the plan's reading of their kinds and dependencies,
    not their node values: the replay is the reference replay's, and each class's durations keep
    their own sign bits."""
    net = Network("r", (Dimension("a", "Ring", 4, 500.0), Dimension("b", "Switch", 2, 700.0)))
    signed = 0
    for seed in range(40):
        d = random_demand(seed)
        rc = next(rc for rc in d.rank_classes if rc.dag is not None)
        dag = Dag(rc.dag.nodes, rc.dag.deps)
        twin = Dag(tuple((kind, x) for kind, x in dag.nodes), tuple((u, v) for u, v in dag.deps))
        minus = Dag(tuple((kind, -0.0 if kind != "coll" and x == 0.0 else x) for kind, x in dag.nodes), dag.deps)
        assert twin == dag == minus
        dags = (dag, dag, twin, minus, dag)
        e = Demand(f"equal{seed}", (4, 2), tuple(RankClass(rc.compute_time_ns, rc.collectives, 1, dag=x) for x in dags))
        for model in MODELS:
            for bw in bandwidths(net, seed, 2):
                assert assert_same(e, net, model, bw)
        plan = plan_of(e)
        for ci, x in enumerate(dags):
            mine = plan.base_ns[plan.offsets[ci]:plan.offsets[ci + 1]]
            want = [math.copysign(1.0, v) < 0 if kind != "coll" else False for kind, v in x.nodes]
            assert np.signbit(mine).tolist() == want
            signed += any(want)
    assert signed > 0


def test_a_wait_in_a_cycle_goes_on_without_it_once():
    """A receive whose send waits for it through a shared collective: the replay breaks the
    cycle by letting the receive go on, and must not settle it again when the send ends."""
    net = Network("r", (Dimension("a", "Ring", 4, 500.0), Dimension("b", "Switch", 2, 700.0)))
    ar = make_collective("ALL_REDUCE", 2.0 ** 20, (4, 1))
    nodes = (("comp", 5.0), ("coll", 0))
    waits_on_1 = RankClass(5.0, (ar,), 1, dag=Dag(nodes, ((0, 1),), links=((0, 1, 1),), syncs=((1, 1, 1),)))
    shares_with_0 = RankClass(5.0, (ar,), 1, dag=Dag(nodes, ((0, 1),), syncs=((1, 0, 1),)))
    d = Demand("cycle", (4, 2), (waits_on_1, shares_with_0))
    alone = Demand("alone", (4, 2), (RankClass(0.0, (ar,)),))
    for model in MODELS:
        bw = (100.0, 100.0)
        r = joint._replay(d, bw, net, model)
        assert r.cycles == 1
        # the receive ends with its compute, then both classes run the collective together
        end = 5.0 + joint.predict(alone, bw, net, model).time_ns
        assert joint.predict(d, bw, net, model).class_times_ns == (end, end)
