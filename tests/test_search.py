"""The co-design search: space, bounds, brute-force optimum, Dask, interruption, files, CLI."""

import csv
import itertools
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.model.cost import load_cost
from libra_astra.errors import LibraError
from libra_astra.model.network import Dimension, Network
from libra_astra.optimize.problem import Constraints
from libra_astra.search.catalog import catalog_from_dict, load_catalog
from libra_astra.search.dask_engine import Runner, cluster
from libra_astra.search.engine import Settings, enumerate_space, run_search
from libra_astra.search.space import JobOptions
from libra_astra.search.evaluate import Candidate, Problem, evaluate, evaluate_chunk
from libra_astra.search.memory import transformer_memory
from libra_astra.search.results import pareto_front, write_results
from libra_astra.search.space import factorizations, parallelizations, placements
from libra_astra.timing.model import simulator_model
from libra_astra.tracegen import load_spec
from libra_astra.tracegen.placement import place_axes
from libra_astra.tracegen.spec import Parallel

FIX = Path(__file__).parent / "fixtures" / "search"
SPEC = FIX / "tiny_spec.yml"
CATALOG = FIX / "tiny_catalog.yml"
COST = Path("network_configs/cost.yml")


def test_factorizations_are_the_compositions():
    # ordered factorizations of 2^k into j factors >= 2 are the compositions of k into j parts
    got = factorizations(64, 4)
    assert len(got) == sum(math.comb(5, j - 1) for j in range(1, 5))
    assert all(math.prod(s) == 64 and all(n >= 2 for n in s) for s in got)
    assert len(set(got)) == len(got)


@pytest.mark.parametrize("shape", [(8,), (2, 4), (4, 2), (2, 2, 2), (4, 4)])
def test_placements_are_every_layout_the_generator_accepts(shape):
    """Brute force: every axis order and every set of dimensions per axis, through place_axes."""
    net = Network("n", tuple(Dimension(f"d{i}", "Ring", n) for i, n in enumerate(shape)))
    N = math.prod(shape)
    spec = load_spec(SPEC)
    for par in parallelizations(spec, N, sp="off").valid:
        axes = [(a, g) for a, g in par.degrees().items() if g > 1]
        want = set()
        subsets = [c for r in range(1, len(shape) + 1) for c in itertools.combinations(range(len(shape)), r)]
        for order in itertools.permutations(axes):
            for dims in itertools.product(subsets, repeat=len(order)):
                try:
                    lay = place_axes(net, par.degrees(), {a: list(d) for (a, _), d in zip(order, dims)}, "t")
                except LibraError:
                    continue
                want.add(frozenset((a.name, a.parts) for a in lay.axes))
        got = set()
        for pl in placements(shape, par):
            lay = place_axes(net, par.degrees(), pl, "t")
            got.add(frozenset((a.name, a.parts) for a in lay.axes))
        assert got == want, par
        assert len(placements(shape, par)) == len(got)


@pytest.mark.parametrize("shape", [(8,), (2, 4), (4, 2), (2, 2, 2), (4, 4), (2, 8, 4), (16, 2, 8)])
def test_placement_infos_agree_with_the_placement_rules(shape):
    """What the enumeration reads off a layout's parts equals what the rules compute from its
    dims: participants per axis (axis_participants) and far pipeline sends (p2p_far_dims); the
    count by degree multiset equals the layouts' number."""
    from libra_astra.search.engine import axis_participants
    from libra_astra.search.space import AXES, Parallelization, p2p_far_dims, placement_count, placement_infos
    N = math.prod(shape)
    for tp, pp in itertools.product([d for d in range(1, N + 1) if N % d == 0], repeat=2):
        if N % (tp * pp):
            continue
        par = Parallelization(tp, pp, N // (tp * pp))
        infos = placement_infos(shape, par.degree_tuple())
        pls = placements(shape, par)
        assert [dict((a, list(d)) for a, d in i.order) for i in infos] == pls
        assert placement_count(shape, par.degree_tuple()) == len(pls)
        for info, pl in zip(infos, pls):
            parts = axis_participants(shape, info.order, par.degrees())
            assert info.participants == tuple(parts.get(a, (1,) * len(shape)) for a in AXES)
            assert list(info.p2p_far) == p2p_far_dims(shape, pl, par)


def test_catalog_levels_and_errors():
    cat = load_catalog("network_configs/catalog.yml")
    assert [cat.levels[i].name for i in cat.levels_of((16, 8, 32))] == ["package", "node", "pod"]
    assert [cat.levels[i].name for i in cat.levels_of((4, 8, 4, 32))] == ["chiplet", "package", "node", "pod"]
    assert cat.levels_of((2 ** 17,)) is None
    assert not cat.allows(1, "FullyConnected", 16) and cat.allows(1, "Ring", 16)
    with pytest.raises(LibraError, match=r"c.yml: levels\[1\]: npus_max 4 must exceed the inner level's 8"):
        catalog_from_dict({"levels": [{"name": "a", "cost_class": "X", "npus_max": 8, "blocks": {"Ring": 8}},
                                      {"name": "b", "cost_class": "Y", "npus_max": 4, "blocks": {"Ring": 8}}]},
                          "c.yml")
    with pytest.raises(LibraError, match="unknown building block 'Torus'"):
        catalog_from_dict({"levels": [{"name": "a", "cost_class": "X", "npus_max": 8, "blocks": {"Torus": 8}}]})


def test_memory_closed_form():
    spec = load_spec("traces/large/gpt3_175b_4096.yml")
    m = spec.model
    mu = transformer_memory(m, Parallel(tp=16, pp=8, dp=32, sequence_parallel=True))
    h, V = 12288, 51200
    layer = math.ceil((12 * h * h + 7 * h) / 16) + 6 * h      # (4h^2 + 2hf + 3h + f) / tp + 6h, f = 4h
    params = 12 * layer + (3200 * h + 2048 * h)       # first stage: embeddings are larger than the output layer
    assert mu.params == params
    assert mu.weights_bytes == 2 * params and mu.optimizer_bytes == 12 * params
    act = 2048 * h * (34 + 5 * 96 * 2048 / h) / 16 * 12 * 16
    assert mu.activations_bytes == pytest.approx(act)
    assert V == m.vocab_size


def _problem(objective="perf", cons=Constraints(total_bw_gbps=200, total_bw_is_upper_bound=True)):
    return Problem(load_spec(SPEC), load_catalog(CATALOG), load_cost(COST), objective, cons,
                   simulator_model(1, 1e9, overlap=True))


def _all_candidates(problem, st):
    """Every candidate of the space, dominated blocks included (no pruning at all)."""
    spec, cat = problem.spec, problem.catalog
    out = []
    for shape in factorizations(st.npus, st.max_dims):
        levels = cat.levels_of(shape)
        opts = [[b for b in st.blocks if cat.allows(lv, b, n)] for n, lv in zip(shape, levels)]
        for par in parallelizations(spec, st.npus, sp=st.sp).valid:
            for pl in placements(shape, par):
                for blocks in itertools.product(*opts):
                    out.append(Candidate(shape, blocks, levels, par, tuple((a, tuple(d)) for a, d in pl.items())))
    return out


def _local(problem, items):
    return [f(problem, i) for f, i in items]


class _Done:
    """A finished task: what a future gives once it is done."""

    def __init__(self, value):
        self.value = value


def _serial_runner(problem):
    submit = lambda chunk, thr: _Done(evaluate_chunk(problem, chunk, thr))  # noqa: E731
    return submit, (lambda futs: (futs, [f.value for f in futs]))


@pytest.mark.parametrize("objective,cons", [
    ("perf", Constraints(total_bw_gbps=200, total_bw_is_upper_bound=True)),
    ("perf-per-cost", Constraints(total_bw_gbps=200)),
    ("perf", Constraints(budget_usd=2.0e4)),
])
def test_search_returns_the_brute_force_optimum(objective, cons):
    problem = _problem(objective, cons)
    st = Settings(npus=4, max_dims=2, top=3, sp="both")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    submit, wait_any = _serial_runner(problem)
    res = run_search(problem, space, st, submit, wait_any)
    brute = [evaluate(problem, c) for c in _all_candidates(problem, st)]
    ok = sorted(o.objective_value for o in brute if o.status == "ok")
    ranked = res.ranked()
    assert ranked[0].objective_value == pytest.approx(ok[0], rel=1e-9)
    # nothing the search skipped beats its best; nothing pruned by a bound beats its K-th best
    # (a block dominated by another block of the same design may: it never beats that one)
    kth = ranked[2].objective_value
    key = lambda c: (c.shape, c.blocks, c.par, c.placement)  # noqa: E731
    seen = {key(o.candidate) for o in res.outcomes}
    in_space = {key(c) for c in space.candidates}
    for o in brute:
        k = key(o.candidate)
        if k not in seen and o.status == "ok":
            assert o.objective_value >= ranked[0].objective_value * (1 - 1e-9)
            if k in in_space:
                assert o.objective_value >= kth * (1 - 1e-9)
    assert res.counts.evaluated < len(brute)
    # every bound is a proven lower bound: no candidate beats its own bound
    bounds = {(c.shape, c.blocks, c.par, c.placement): c.bound for c in space.candidates}
    for o in brute:
        c = o.candidate
        b = bounds.get((c.shape, c.blocks, c.par, c.placement))
        if b is not None and o.status == "ok":
            assert o.objective_value >= b * (1 - 1e-9), (c, b, o.objective_value)
    # counts add up: everything in the space is accounted for
    n = res.counts
    assert n.evaluated + sum(n.pruned_bound.values()) + n.not_reached == len(space.candidates)
    assert len(space.candidates) + n.pruned_dominated + n.pruned_block_limit + n.pruned_memory == n.candidates_total


def test_pruning_never_drops_a_better_candidate():
    problem = _problem()
    st = Settings(npus=8, max_dims=2, top=1, sp="off")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    submit, wait_any = _serial_runner(problem)
    res = run_search(problem, space, st, submit, wait_any)
    best = res.ranked()[0].objective_value
    evaluated = {(o.candidate.shape, o.candidate.blocks, o.candidate.par, o.candidate.placement)
                 for o in res.outcomes}
    skipped = [c for c in space.candidates if (c.shape, c.blocks, c.par, c.placement) not in evaluated]
    assert skipped
    for c in skipped:
        o = evaluate(problem, c)
        assert o.status != "ok" or o.objective_value >= best * (1 - 1e-9)


def test_memory_prunes_parallelizations():
    problem = _problem()
    tiny = Settings(npus=8, max_dims=1, top=1, hbm_bytes=1e6)
    space = enumerate_space(problem, tiny, lambda fn, items: [fn(problem, i) for i in items])
    assert not space.candidates and space.counts.pruned_memory == space.counts.candidates_total - \
        space.counts.pruned_block_limit


def test_dask_cluster_runs_the_search(tmp_path):
    problem = _problem()
    st = Settings(npus=8, max_dims=2, top=2, sp="off")
    with cluster(threads=True, workers=2) as client:
        r = Runner(client, problem)
        space = enumerate_space(problem, st, r.map)
        res = run_search(problem, space, st, lambda ch, thr: r.submit(evaluate_chunk, ch, thr), r.wait_any)
    serial = run_search(problem, space, st, *_serial_runner(problem))
    assert [o.objective_value for o in res.ranked()[:2]] == pytest.approx(
        [o.objective_value for o in serial.ranked()[:2]], rel=1e-9)


def test_interruption_keeps_finished_results(tmp_path):
    problem = _problem()
    st = Settings(npus=8, max_dims=2, top=50, chunk=1, in_flight=1, sp="off")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    calls = []

    def wait_any(futs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return futs, [f.value for f in futs]

    res = run_search(problem, space, st, lambda ch, thr: _Done(evaluate_chunk(problem, ch, thr)), wait_any)
    assert res.stop_reason.startswith("interrupted")
    assert len(res.ranked()) == 3 and res.counts.not_reached == len(space.candidates) - 3
    assert 0 <= res.proven_gap < 1
    files = write_results(tmp_path, res.ranked(), "perf", ["board", "rack"], {"stop_reason": res.stop_reason},
                          plots=False)
    rows = list(csv.DictReader(open(tmp_path / "ranked.csv")))
    assert len(rows) == 3 and rows[0]["rank"] == "1" and str(tmp_path / "search.json") in files["files"]


def test_limits_report_a_proven_gap():
    problem = _problem()
    st = Settings(npus=8, max_dims=2, top=1, max_evaluations=1, chunk=1, in_flight=1, sp="off")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    res = run_search(problem, space, st, *_serial_runner(problem))
    assert res.counts.evaluated == 1 and res.stop_reason.startswith("candidate limit")
    full = run_search(problem, space, Settings(npus=8, max_dims=2, top=1, sp="off"), *_serial_runner(problem))
    best, opt = res.ranked()[0].objective_value, full.ranked()[0].objective_value
    # the proven gap bounds the true distance to the optimum
    assert (best - opt) / best <= res.proven_gap + 1e-12


def test_pareto_front_is_not_dominated():
    problem = _problem()
    st = Settings(npus=8, max_dims=2, top=100, sp="off")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    res = run_search(problem, space, st, *_serial_runner(problem))
    ranked = res.ranked()
    front = pareto_front(ranked)
    for f in front:
        assert not any(o.time_ns < f.time_ns and o.cost_usd < f.cost_usd for o in ranked)
    for o in ranked:
        if o not in front:
            assert any(f.time_ns <= o.time_ns and f.cost_usd <= o.cost_usd for f in front)


def test_cli_search_writes_ranked_csv(tmp_path):
    out = tmp_path / "s"
    args = ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog", str(CATALOG),
            "--total-bw-max", "200", "--top", "3", "--max-dims", "2", "--in-process", "-q", "-o", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(out / "ranked.csv")))
    assert rows and rows[0]["rank"] == "1"
    assert float(rows[0]["time_ns"]) <= float(rows[-1]["time_ns"])
    data = json.loads((out / "search.json").read_text())
    assert data["format"] == "libra_astra.search" and data["counts"]["evaluated"] == len(rows)
    assert "evaluated" in r.output and "pruned" in r.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code != 0 and "holds an earlier search" in again.output


def test_cli_search_takes_hbm_from_the_spec(tmp_path):
    """compute: hbm_gb of the spec is the memory limit; --hbm-gb overrides it."""
    import yaml
    raw = yaml.safe_load(SPEC.read_text())
    raw["compute"]["hbm_gb"] = 0.001      # 1 MB: no parallelization of the tiny model fits
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(raw))
    base = ["search", "--model-spec", str(spec), "--cost", str(COST), "--catalog", str(CATALOG),
            "--total-bw-max", "200", "--top", "1", "--max-dims", "1", "--in-process", "-q"]
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    a = json.loads((tmp_path / "a" / "search.json").read_text())
    assert a["memory"]["hbm_bytes"] == 1e6 and a["counts"]["evaluated"] == 0
    assert a["counts"]["parallelizations_over_memory"] == a["counts"]["parallelizations_valid"]
    r = CliRunner().invoke(main, base + ["--hbm-gb", "80", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    b = json.loads((tmp_path / "b" / "search.json").read_text())
    assert b["memory"]["hbm_bytes"] == 80e9 and b["counts"]["evaluated"] > 0


def test_cli_search_one_line_errors(tmp_path):
    r = CliRunner().invoke(main, ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog",
                                  str(CATALOG), "--in-process", "-o", str(tmp_path / "x")])
    assert r.exit_code != 0 and "needs --total-bw, --total-bw-max or --budget" in r.output
    r = CliRunner().invoke(main, ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog",
                                  str(CATALOG), "--total-bw", "10", "--blocks", "Torus", "--in-process",
                                  "-o", str(tmp_path / "y")])
    assert r.exit_code != 0 and "unknown building block 'Torus'" in r.output


def test_cli_sweep(tmp_path):
    sw = tmp_path / "sweep.yml"
    root = Path.cwd()
    sw.write_text(f"""
cost: {root / 'network_configs/cost.yml'}
workloads: [{root / 'traces/gpt3_tp8_dp8/spec.yml'}, {root / 'traces/dlrm_16/spec.yml'}]
networks: [{root / 'network_configs/sample_8x8.yml'}]
total_bw_gbps: [200, 400]
objectives: [perf, perf-per-cost]
""")
    r = CliRunner().invoke(main, ["sweep", str(sw), "--in-process", "-q", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(tmp_path / "o" / "sweep.csv")))
    assert len(rows) == 8
    ok = [x for x in rows if x["status"] == "ok"]
    assert len(ok) == 4 and all("skipped" == x["status"] for x in rows if "dlrm" in x["workload"])
    perf = {float(x["total_bw_gbps"]): float(x["time_ns"]) for x in ok if x["objective"] == "perf"}
    assert perf[400] < perf[200]


@pytest.mark.astra
def test_search_simulates_its_best_design(tmp_path):
    import os
    if not os.environ.get("ASTRA_SIM_BIN"):
        pytest.skip("ASTRA_SIM_BIN not set")
    out = tmp_path / "s"
    r = CliRunner().invoke(main, ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog",
                                  str(CATALOG), "--total-bw-max", "200", "--top", "2", "--max-dims", "2",
                                  "--simulate", "1", "--in-process", "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads((out / "search.json").read_text())
    sim = data["simulated"][0]
    assert abs(sim["error"]) < 0.01


def test_cli_search_shape_restricts_the_space_to_that_shape(tmp_path):
    base = ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog", str(CATALOG),
            "--total-bw-max", "200", "--max-dims", "2", "--in-process", "-q"]
    whole = CliRunner().invoke(main, base + ["--top", "1000", "-o", str(tmp_path / "all")])
    assert whole.exit_code == 0, whole.output
    every = list(csv.DictReader(open(tmp_path / "all" / "ranked.csv")))
    shapes = sorted({r["shape"] for r in every if "x" in r["shape"]})
    assert shapes, "the tiny space has two-dimensional designs"
    shape = shapes[0]
    r = CliRunner().invoke(main, base + ["--top", "3", "--shape", shape, "-o", str(tmp_path / "one")])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(tmp_path / "one" / "ranked.csv")))
    assert rows and {x["shape"] for x in rows} == {shape}
    best_of_shape = min(float(x["time_ns"]) for x in every if x["shape"] == shape)
    assert float(rows[0]["time_ns"]) == pytest.approx(best_of_shape, rel=1e-9)


@pytest.mark.parametrize("shape, message", [
    ("2x3", "--shape 2x3: holds 6 NPUs, not the 8 of"),
    ("2xfour", "give NPUs per dimension as integers >= 2 joined by 'x'"),
    ("1x8", "give NPUs per dimension as integers >= 2 joined by 'x'"),
])
def test_cli_search_shape_errors(tmp_path, shape, message):
    r = CliRunner().invoke(main, ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog",
                                  str(CATALOG), "--total-bw", "10", "--shape", shape, "--in-process",
                                  "-o", str(tmp_path / "x")])
    assert r.exit_code != 0 and message in r.output


def test_cli_search_reports_a_failed_simulation_in_one_line_and_keeps_the_results(tmp_path):
    fake = tmp_path / "astra_sim"
    fake.write_text("#!/bin/sh\necho 'simulator says no' >&2\nexit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "s"
    r = CliRunner().invoke(main, ["search", "--model-spec", str(SPEC), "--cost", str(COST), "--catalog",
                                  str(CATALOG), "--total-bw-max", "200", "--top", "2", "--max-dims", "1",
                                  "--simulate", "1", "--astra-sim", str(fake), "--in-process", "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    line = [x for x in r.output.splitlines() if x.startswith("simulation of design 1 failed:")]
    assert len(line) == 1 and "exit code 3" in line[0] and "simulator says no" in line[0]
    assert list(csv.DictReader(open(out / "ranked.csv")))[0]["simulated_ns"] == ""


@pytest.mark.parametrize("objective", ["min-energy", "perf-per-watt", "min-tco"])
def test_search_ranks_by_the_energy_objectives_as_brute_force_does(objective):
    """The energy objectives: the search's best is the best of every candidate, dominated blocks
    included (block dominance holds for power too: only a Switch draws switch power), and no
    candidate beats its own bound (the NPUs' and nodes' share over the path's compute)."""
    from dataclasses import replace
    from libra_astra.model.power import load_power
    from libra_astra.optimize.tco import TcoSettings
    problem = replace(_problem(objective, Constraints(total_bw_gbps=200, total_bw_is_upper_bound=True)),
                      power=load_power("network_configs/power.yml"),
                      tco=TcoSettings(0.1, 4.0, 1e5, 2.0, 2e4))
    st = Settings(npus=4, max_dims=2, top=3, sp="both")
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    submit, wait_any = _serial_runner(problem)
    ranked = run_search(problem, space, st, submit, wait_any).ranked()
    outcomes = [evaluate(problem, c) for c in _all_candidates(problem, st)]
    brute = sorted(o.objective_value for o in outcomes if o.status == "ok")
    assert ranked[0].objective_value == pytest.approx(brute[0], rel=1e-9)
    bounds = {(c.shape, c.blocks, c.par, c.placement): c.bound for c in space.candidates}
    assert max(bounds.values()) > 0
    for o in outcomes:
        c = o.candidate
        b = bounds.get((c.shape, c.blocks, c.par, c.placement))
        if b is not None and o.status == "ok":
            assert o.objective_value >= b * (1 - 1e-9), (c, b, o.objective_value)
    values = [o.objective_value for o in ranked]
    assert values == sorted(values) and all(o.rel_gap <= 1e-8 for o in ranked)


def test_cli_sweep_ranks_by_the_energy_objectives(tmp_path):
    """Each energy objective's point is the best of the grid in its own column."""
    sw = tmp_path / "sweep.yml"
    root = Path.cwd()
    sw.write_text(f"""
cost: {root / 'network_configs/cost.yml'}
power: {root / 'network_configs/power.yml'}
tco: {{usd_per_kwh: 0.1, lifetime_years: 4, run_steps: 100000, npu_usd: 30000}}
workloads: [{root / 'traces/gpt3_tp8_dp8/spec.yml'}]
networks: [{root / 'network_configs/sample_8x8.yml'}]
total_bw_max_gbps: [1000]
objectives: [perf, min-energy, perf-per-watt, min-tco]
""")
    r = CliRunner().invoke(main, ["sweep", str(sw), "--in-process", "-q", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    rows = {x["objective"]: x for x in csv.DictReader(open(tmp_path / "o" / "sweep.csv"))}
    col = lambda o, k: float(rows[o][k])  # noqa: E731
    assert min(rows, key=lambda o: col(o, "time_ns")) == "perf"
    assert min(rows, key=lambda o: col(o, "energy_j")) == "min-energy"
    assert min(rows, key=lambda o: col(o, "tco_usd")) == "min-tco"
    assert col("min-energy", "objective_value") == pytest.approx(col("min-energy", "energy_j"), rel=1e-9)
    assert col("min-tco", "objective_value") == pytest.approx(col("min-tco", "tco_usd"), rel=1e-9)


def test_sweep_file_errors_name_the_key(tmp_path):
    from libra_astra.errors import LibraError
    from libra_astra.search.sweep import load_sweep
    root = Path.cwd()
    base = (f"cost: {root / 'network_configs/cost.yml'}\nworkloads: [{root / 'traces/gpt3_tp8_dp8/spec.yml'}]\n"
            f"networks: [{root / 'network_configs/sample_8x8.yml'}]\n")
    for extra, message in [("objectives: [min-energy]\n", r"the energy objectives need power"),
                           (f"power: {root / 'network_configs/power.yml'}\nobjectives: [min-tco]\n",
                            r"objective min-tco needs tco"),
                           ("tco: {usd_per_kwh: -1, lifetime_years: 4}\n", r"tco\.usd_per_kwh: must be a number >= 0")]:
        (tmp_path / "s.yml").write_text(base + extra)
        with pytest.raises(LibraError, match=message):
            load_sweep(tmp_path / "s.yml")


def test_job_axes_search_returns_the_brute_force_optimum():
    """Schedules, ZeRO stages, recomputation, EP and CP as search axes on a small MoE: the best
    design equals brute force over every candidate, and every bound holds."""
    from dataclasses import replace as _replace
    from libra_astra.search.space import JobOptions
    from libra_astra.tracegen import spec_from_dict
    raw = {"name": "moe", "model": {"type": "transformer", "layers": 2, "hidden_size": 256, "heads": 8,
                                    "seq_length": 128, "vocab_size": 1000, "micro_batch": 1, "global_batch": 8,
                                    "bytes_per_element": 2, "experts": 4, "top_k": 2, "kv_heads": 4,
                                    "gated_mlp": True},
           "parallel": {"tp": 1, "dp": 8}, "placement": {"dp": [0]}, "network": {"npus_per_dim": [8]},
           "compute": {"tflops": 100}}
    problem = _replace(_problem(), spec=spec_from_dict(raw, "moe.yml"))
    job = JobOptions(schedules=("gpipe", "1f1b"), zero=(0, 3), recompute=("none", "full"), cp=(1, 2), ep=())
    st = Settings(npus=8, max_dims=2, top=2, sp="on", job=job, shapes=((2, 4),))
    space = enumerate_space(problem, st, lambda fn, items: [fn(problem, i) for i in items])
    pars = {c.par for c in space.candidates}
    assert {p.ep for p in pars} == {1, 2, 4} and {p.cp for p in pars} == {1, 2}
    assert {p.zero for p in pars} == {0, 3} and {p.recompute for p in pars} == {"none", "full"}
    assert {p.schedule for p in pars} == {"gpipe", "1f1b"}
    submit, wait_any = _serial_runner(problem)
    res = run_search(problem, space, st, submit, wait_any)
    brute = [evaluate(problem, c) for c in space.candidates]
    ok = sorted(o.objective_value for o in brute if o.status == "ok")
    assert res.ranked()[0].objective_value == pytest.approx(ok[0], rel=1e-9)
    for c, o in zip(space.candidates, brute):
        if o.status == "ok":
            assert o.objective_value >= c.bound * (1 - 1e-9)
    assert res.counts.evaluated < len(brute)


@pytest.mark.parametrize("objective,cons", [
    ("perf", Constraints(total_bw_gbps=200, total_bw_is_upper_bound=True)),
    ("perf-per-cost", Constraints(total_bw_gbps=200)),
])
def test_lazy_search_equals_the_eager_one(objective, cons):
    """Building a parallelization's programs only when its stage-compute bound is below the K-th
    best gives the same top K; the stage bound is a proven lower bound of its candidates."""
    problem = _problem(objective, cons)
    job = JobOptions(schedules=("gpipe", "1f1b"), recompute=("none", "full"))
    eager = Settings(npus=8, max_dims=2, top=2, sp="both", job=job)
    lazy = Settings(npus=8, max_dims=2, top=2, sp="both", job=job, lazy=True)
    mapper = lambda fn, items: [fn(problem, i) for i in items]  # noqa: E731
    submit, wait_any = _serial_runner(problem)
    space_e = enumerate_space(problem, eager, mapper)
    space_l = enumerate_space(problem, lazy, mapper)
    assert not space_l.candidates and space_l.size == len(space_e.candidates)
    res_e = run_search(problem, space_e, eager, submit, wait_any)
    res_l = run_search(problem, space_l, lazy, submit, wait_any)
    assert [o.objective_value for o in res_l.ranked()[:2]] == pytest.approx(
        [o.objective_value for o in res_e.ranked()[:2]], rel=1e-12)
    n = res_l.counts
    assert n.evaluated + sum(n.pruned_bound.values()) + n.not_reached == space_l.size
    stage = {d[2]: d[0] for d in space_l.deferred}
    for c in space_e.candidates:
        assert stage[c.par] <= c.bound * (1 + 1e-12)
    assert n.expanded_parallelizations <= len(stage)
