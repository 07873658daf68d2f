"""Power file, energy of a step, the energy objectives and the power cap against brute force.

The reference energy is written here from the power figures themselves (not from PowerModel's
methods or energy.py): every NPU idle + rest of node for the whole step, compute above idle, each
dimension's links idle for the whole step at N x B_d GB/s, and each byte sent above idle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict
from libra_astra.model.power import load_power, power_from_dict
from libra_astra.model.power_presets import LINK_PRESETS, NPU_PRESETS
from libra_astra.optimize.energy import energy_rate, energy_report, peak_power, power_constraint
from libra_astra.optimize.optimizer import Constraints, evaluate, optimize
from libra_astra.optimize.tco import TcoSettings
from libra_astra.timing.model import LIBRA
from test_optimize_property import COST, EXAMPLES, Reference, brute_force, problems

FIGURES = {
    "A": {"link_pj_per_bit": 2.0, "link_idle_w_per_gbps": 0.01},
    "B": {"link_pj_per_bit": 10.0, "link_idle_w_per_gbps": 0.05, "switch_pj_per_bit": 12.0,
          "switch_idle_w_per_gbps": 0.08, "switch_w": 150.0, "port_w": 2.0},
    "C": {"link_pj_per_bit": 100.0, "link_idle_w_per_gbps": 0.6, "nic_pj_per_bit": 60.0, "nic_idle_w_per_gbps": 0.3,
          "switch_pj_per_bit": 10.0, "switch_idle_w_per_gbps": 0.07, "switch_w": 400.0},
}
NPU = {"active_w": 700.0, "idle_w": 70.0, "rest_of_node_w": 500.0}
POWER = power_from_dict({"name": "t", "npu": NPU, "classes": FIGURES}, "power.yml")


def reference_energy_j(workloads, net, B: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """Energy per step in J of points B (P, D) whose weighted times are t_ns (P,)."""
    N = net.npus_count
    base, idle, per_byte = N * (NPU["idle_w"] + NPU["rest_of_node_w"]), [], []
    for d in net.dims:
        f = FIGURES[d.cost_class]
        sw = d.topology == "Switch"
        idle_npu = f.get("link_idle_w_per_gbps", 0) + f.get("nic_idle_w_per_gbps", 0) + (
            f.get("switch_idle_w_per_gbps", 0) if sw else 0)
        pj = f.get("link_pj_per_bit", 0) + f.get("nic_pj_per_bit", 0) + (f.get("switch_pj_per_bit", 0) if sw else 0)
        idle.append(N * idle_npu)
        per_byte.append((pj * 8e-3 - idle_npu) * 1e-9)        # J per byte above idle
        if sw:
            base += f.get("switch_w", 0) * (N // d.npus) + f.get("port_w", 0) * N
    const = 0.0
    for w in workloads:
        for rc in w.demand.rank_classes:
            const += w.weight * rc.num_ranks * rc.compute_time_ns * (NPU["active_w"] - NPU["idle_w"]) * 1e-9
            for c in rc.collectives:
                const += w.weight * rc.num_ranks * c.count * sum(b * j for b, j in zip(c.traffic_bytes, per_byte))
    return (base + B @ np.array(idle)) * t_ns * 1e-9 + const


def reference_peak_w(net, B: np.ndarray, fabric_only: bool = False) -> np.ndarray:
    N = net.npus_count
    out = np.zeros(B.shape[0]) if fabric_only else np.full(B.shape[0], N * (NPU["active_w"] + NPU["rest_of_node_w"]))
    for j, d in enumerate(net.dims):
        f = FIGURES[d.cost_class]
        sw = d.topology == "Switch"
        pj = f.get("link_pj_per_bit", 0) + f.get("nic_pj_per_bit", 0) + (f.get("switch_pj_per_bit", 0) if sw else 0)
        out = out + N * pj * 8e-3 * B[:, j]
        if sw:
            out = out + f.get("switch_w", 0) * (N // d.npus) + f.get("port_w", 0) * N
    return out


# ------------------------------------------------------------------ the power file


def test_shipped_power_file_and_presets_load():
    from pathlib import Path
    p = load_power(Path(__file__).resolve().parent.parent / "network_configs" / "power.yml")
    assert p.npu.active_w == NPU_PRESETS["H100"]["active_w"] == 700.0
    assert set(p.classes) == {"InterChiplet", "InterPackage", "InterNode", "InterPod"}
    for name, figures in LINK_PRESETS.items():           # every preset is a valid class entry
        power_from_dict({"npu": {"preset": "A100"}, "classes": {"X": {"preset": name}}})
        assert figures["link_idle_w_per_gbps"] <= figures["link_pj_per_bit"] * 8e-3


def test_preset_figures_can_be_overridden_key_by_key():
    p = power_from_dict({"npu": {"preset": "B200", "idle_w": 100}, "classes": {"X": {"preset": "pcie5",
                                                                                    "switch_w": 30}}})
    assert (p.npu.active_w, p.npu.idle_w) == (1000.0, 100.0)
    assert p.classes["X"].link_pj_per_bit == LINK_PRESETS["pcie5"]["link_pj_per_bit"] and p.classes["X"].switch_w == 30


@pytest.mark.parametrize("data, message", [
    ({"npu": {**NPU, "idle_w": -1}, "classes": FIGURES}, r"^power\.yml: npu\.idle_w: must be a finite number >= 0"),
    ({"npu": {**NPU, "active_w": float("nan")}, "classes": FIGURES}, r"^power\.yml: npu\.active_w: must be"),
    ({"npu": {"active_w": 5}, "classes": FIGURES}, r"^power\.yml: npu\.idle_w: missing"),
    ({"npu": {**NPU, "active_w": 10}, "classes": FIGURES}, r"^power\.yml: npu\.active_w: 10 W is below idle_w 70 W"),
    ({"npu": NPU, "classes": {"A": {"link_pj_per_bit": 1}}}, r"^power\.yml: classes\.A\.link_idle_w_per_gbps: missing"),
    ({"npu": NPU, "classes": {"A": {"link_pj_per_bit": 1, "link_idle_w_per_gbps": 1}}},
     r"^power\.yml: classes\.A\.link_idle_w_per_gbps: 1 W per GB/s is above the 0\.008 W per GB/s"),
    ({"npu": NPU, "classes": {"A": {**FIGURES["A"], "switch_w": -3}}}, r"^power\.yml: classes\.A\.switch_w: must be"),
    ({"npu": NPU, "classes": {"A": {**FIGURES["A"], "volts": 3}}}, r"^power\.yml: classes\.A: unknown key\(s\) \['volts'\]"),
    ({"npu": NPU, "classes": {"A": {"preset": "nvlink9"}}}, r"^power\.yml: classes\.A\.preset: unknown preset 'nvlink9'"),
    ({"classes": FIGURES}, r"^power\.yml: npu: missing"),
])
def test_bad_power_figures_get_one_line_naming_file_and_key(data, message):
    with pytest.raises(LibraError, match=message) as e:
        power_from_dict(data, "power.yml")
    assert "\n" not in str(e.value)


def test_a_class_in_use_without_figures_is_named():
    net = network_from_dict({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4, "cost_class": "A"},
                                            {"name": "b", "topology": "Switch", "npus": 2, "cost_class": "Q"}]})
    with pytest.raises(LibraError, match=r"^power\.yml: classes\.Q: no power figures for the cost class of dimension 'b'"):
        POWER.check(net)


# ------------------------------------------------------------------ energy of a step


@settings(max_examples=5, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems("perf", "total"), st.lists(st.floats(1.0, 500.0), min_size=3, max_size=3))
def test_energy_report_matches_the_reference_and_its_parts_add_up(prob, raw_bw):
    net, w, model = prob["net"], prob["workloads"], prob["model"]
    bw = raw_bw[:net.num_dims]
    e = evaluate(w, net, COST, bw, model=model)
    rep = energy_report(w, net, POWER, bw, e.time_ns, samples_per_step=8, tokens_per_step=8192)
    ref = reference_energy_j(w, net, np.array([bw]), np.array([e.time_ns]))[0]
    assert rep.energy_j == pytest.approx(ref, rel=1e-12)
    assert sum(j for _, j in rep.parts_j) == pytest.approx(rep.energy_j, rel=1e-12)
    assert rep.average_power_w == pytest.approx(rep.energy_j / (e.time_ns * 1e-9), rel=1e-12)
    assert rep.j_per_sample == pytest.approx(rep.energy_j / 8) and rep.j_per_token == pytest.approx(rep.energy_j / 8192)
    assert rep.peak_cluster_power_w == pytest.approx(reference_peak_w(net, np.array([bw]))[0], rel=1e-12)
    assert rep.peak_fabric_power_w == pytest.approx(reference_peak_w(net, np.array([bw]), True)[0], rel=1e-12)
    # the energy of the bytes themselves does not depend on the bandwidth
    twice = energy_rate(w, net, POWER)
    assert twice.const_j == pytest.approx(ref - twice.rate_w.at(bw) * e.time_ns * 1e-9, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------ objectives against brute force

KINDS = ("total", "total_max", "bounds", "linear", "power_max", "infeasible")


# a run of 1e5 steps, capital over 3 years at 20,000 USD per NPU and 3 USD per provisioned W
TCO = TcoSettings(usd_per_kwh=0.12, lifetime_years=3.0, run_steps=1e5, usd_per_provisioned_w=3.0, npu_usd=2e4)


def reference_tco_usd(w, net, B: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    capital = B @ np.array(COST.price_usd_per_gbps(net)) + net.npus_count * TCO.npu_usd \
        + TCO.usd_per_provisioned_w * reference_peak_w(net, B)
    share = TCO.run_steps * t_ns * 1e-9 / (TCO.lifetime_years * 365.25 * 86400)
    return capital * share + TCO.run_steps * reference_energy_j(w, net, B, t_ns) * TCO.usd_per_kwh / 3.6e6


def _value(objective, w, net):
    if objective == "min-tco":
        return lambda B, t: reference_tco_usd(w, net, B, t)
    if objective == "min-energy":
        return lambda B, t: reference_energy_j(w, net, B, t)
    if objective == "perf-per-watt":
        return lambda B, t: t * reference_peak_w(net, B) * 1e-9
    return lambda B, t: t


def check(objective: str, kind: str, prob) -> None:
    net, w, model, cons = prob["net"], prob["workloads"], prob["model"], prob["cons"]
    total = prob["total"]
    linear, raw = prob["linear"], list(prob["raw_linear"])
    if kind == "power_max":
        # a cap between the NPUs' own peak and the peak at the equal split of the total
        peak = peak_power(net, POWER)
        cap = peak.offset + 0.6 * (peak.at([total / net.num_dims] * net.num_dims) - peak.offset)
        lc = power_constraint(net, POWER, cap)
        linear, raw = linear + (lc,), raw + [(lc.coeffs, lc.op, lc.rhs)]
        cons = dict(total_bw_gbps=None, total_bw_is_upper_bound=False, budget_usd=None)
    eq = None if cons["total_bw_is_upper_bound"] else cons["total_bw_gbps"]
    tmax = cons["total_bw_gbps"] if cons["total_bw_is_upper_bound"] else None
    ref = Reference(w, net, COST, model, raw, eq, tmax, None)
    constraints = Constraints(cons["total_bw_gbps"], cons["total_bw_is_upper_bound"], None, None, linear)
    if kind == "infeasible":
        cap = 0.5 * peak_power(net, POWER).offset          # below what the NPUs alone draw at peak
        lc = power_constraint(net, POWER, cap)
        with pytest.raises(LibraError) as e:
            optimize(w, net, COST, objective=objective, baselines=False, power=POWER, model=model,
                     constraints=Constraints(linear=(lc,)), tco=TCO)
        assert str(e.value).startswith("the constraints are infeasible: --power-max ") and "\n" not in str(e.value)
        return
    lo = np.array([max(d.bw_min_gbps, 1e-9 * total) for d in net.dims])
    hi = np.array([min(d.bw_max_gbps or math.inf, total) for d in net.dims])
    if kind == "power_max":                 # the cap bounds each bandwidth instead of the total
        hi = np.array([min(d.bw_max_gbps or math.inf, lc.rhs / c if c > 0 else 1e3 * total)
                       for d, c in zip(net.dims, lc.coeffs)])
    r = optimize(w, net, COST, objective=objective, constraints=constraints, model=model, baselines=False, power=POWER,
                 tco=TCO)
    assert r.success, r.message
    assert r.rel_gap <= 1e-8, r.message
    assert r.best.feasible
    bf, _ = brute_force(ref, objective, lo, hi, value=_value(objective, w, net))
    assert math.isfinite(bf)
    assert bf >= r.dual_bound * (1 - 1e-9)
    assert r.fun <= bf * (1 + 1e-6)
    assert r.fun == pytest.approx(_value(objective, w, net)(np.array([r.bw_gbps]), np.array([r.best.time_ns]))[0],
                                  rel=1e-9)


# perf without a power cap is test_optimize_property's
@pytest.mark.parametrize("objective, kind", [(o, k) for o in ("min-energy", "perf-per-watt", "min-tco") for k in KINDS]
                         + [("perf", "power_max"), ("perf", "infeasible")])
def test_against_brute_force(objective, kind):
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(problems("perf-per-cost", "total" if kind in ("power_max", "infeasible") else kind))
    def run(prob):
        check(objective, kind, prob)

    run()


@pytest.mark.parametrize("cap_kind", ["energy", "tco"])
@pytest.mark.parametrize("where", [0.02, 0.3, 0.8, 1.5, -0.01])
def test_fastest_under_an_energy_or_tco_cap_against_brute_force(cap_kind, where):
    """where: the cap between the least value (0) and the fastest design's (1); below 0: infeasible."""
    from dataclasses import replace

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(problems("perf-per-cost", "total_max"))
    def run(prob):
        net, w, model, cons = prob["net"], prob["workloads"], prob["model"], prob["cons"]
        base = Constraints(cons["total_bw_gbps"], cons["total_bw_is_upper_bound"], None, None, prob["linear"])
        least_obj = "min-energy" if cap_kind == "energy" else "min-tco"
        value = _value(least_obj, w, net)
        kw = dict(model=model, baselines=False, power=POWER, tco=TCO)
        least = optimize(w, net, COST, objective=least_obj, constraints=base, **kw)
        fast = optimize(w, net, COST, objective="perf", constraints=base, **kw)
        at_fast = value(np.array([fast.bw_gbps]), np.array([fast.best.time_ns]))[0]
        cap = least.fun + where * (at_fast - least.fun) if where >= 0 else least.dual_bound * (1 + where)
        capped = replace(base, **({"energy_max_j": cap} if cap_kind == "energy" else {"tco_max_usd": cap}))
        if where < 0:
            with pytest.raises(LibraError, match=r"^--(energy|tco)-max \S+ (J|USD) is infeasible: the least possible"):
                optimize(w, net, COST, objective="perf", constraints=capped, **kw)
            return
        r = optimize(w, net, COST, objective="perf", constraints=capped, **kw)
        assert r.success and r.rel_gap <= 1e-8, r.message
        assert value(np.array([r.bw_gbps]), np.array([r.best.time_ns]))[0] <= cap * (1 + 1e-9)
        eq = None if cons["total_bw_is_upper_bound"] else cons["total_bw_gbps"]
        tmax = cons["total_bw_gbps"] if cons["total_bw_is_upper_bound"] else None
        ref = Reference(w, net, COST, model, prob["raw_linear"], eq, tmax, None)
        lo = np.array([max(d.bw_min_gbps, 1e-9 * prob["total"]) for d in net.dims])
        hi = np.array([min(d.bw_max_gbps or math.inf, prob["total"]) for d in net.dims])
        bf, _ = brute_force(ref, "perf", lo, hi, extra=np.array(least.bw_gbps),
                            value=lambda B, t: np.where(value(B, t) <= cap, t, np.inf))
        if not math.isfinite(bf):
            # the cap is within round-off of the least value: the reference's own energy of the
            # least design lands on the other side of it, so there is nothing to compare
            assert cap - least.fun <= 1e-9 * cap
            return
        assert bf >= r.dual_bound * (1 - 1e-9)
        assert r.fun <= bf * (1 + 1e-6)

    run()


def test_tco_parts_add_up_to_the_objective():
    from libra_astra.optimize.tco import tco_parts, tco_rate
    net = network_from_dict({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4, "cost_class": "A"},
                                            {"name": "b", "topology": "Switch", "npus": 4, "cost_class": "C"}]})
    from libra_astra.demand.types import Demand, RankClass, make_collective
    from libra_astra.optimize.optimizer import Workload
    w = [Workload(Demand("d", (4, 4), (RankClass(1e6, (make_collective("ALL_REDUCE", 2 ** 24, [4, 4], net=net),), 16),)))]
    bw, t = [120.0, 30.0], 3.5e6
    parts = tco_parts(w, net, COST, POWER, TCO, bw, t)
    assert parts["tco_usd"] == pytest.approx(sum(parts["parts_usd"].values()), rel=1e-12)
    assert parts["tco_usd"] == pytest.approx(tco_rate(w, net, COST, POWER, TCO).tco_usd(bw, t), rel=1e-12)
    assert parts["tco_usd"] == pytest.approx(reference_tco_usd(w, net, np.array([bw]), np.array([t]))[0], rel=1e-12)


def test_min_tco_needs_prices_and_a_lifetime():
    net = network_from_dict({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4, "cost_class": "A"}]})
    from libra_astra.demand.types import Demand, RankClass, make_collective
    from libra_astra.optimize.optimizer import Workload
    w = [Workload(Demand("d", (4,), (RankClass(1e5, (make_collective("ALL_REDUCE", 2 ** 20, [4], net=net),), 4),)))]
    with pytest.raises(LibraError, match=r"^--objective min-tco needs the electricity price and the cluster's lifetime"):
        optimize(w, net, COST, objective="min-tco", constraints=Constraints(total_bw_gbps=100), power=POWER)
    with pytest.raises(LibraError, match=r"^--lifetime-years must be > 0, got 0$"):
        optimize(w, net, COST, objective="min-tco", constraints=Constraints(total_bw_gbps=100), power=POWER,
                 tco=TcoSettings(0.1, 0.0))


def test_energy_objectives_need_power_figures():
    net = network_from_dict({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4, "cost_class": "A"}]})
    from libra_astra.demand.types import Demand, RankClass, make_collective
    from libra_astra.optimize.optimizer import Workload
    w = [Workload(Demand("d", (4,), (RankClass(1e5, (make_collective("ALL_REDUCE", 2 ** 20, [4], net=net),), 4),)))]
    with pytest.raises(LibraError, match=r"^--objective min-energy needs power figures: give --power FILE"):
        optimize(w, net, COST, objective="min-energy", constraints=Constraints(total_bw_gbps=100), model=LIBRA)


# ------------------------------------------------------------------ the commands


@pytest.fixture(scope="module")
def gpt3_demand_file(tmp_path_factory):
    import json
    from pathlib import Path

    from libra_astra.demand import synthetic
    from libra_astra.demand.types import demand_to_dict
    from libra_astra.model.network import load_network
    configs = Path(__file__).resolve().parent.parent / "network_configs"
    p = tmp_path_factory.mktemp("energy") / "gpt3.json"
    p.write_text(json.dumps(demand_to_dict(synthetic.gpt3_demand(load_network(configs / "sample_8x8.yml")))))
    return str(p), str(configs)


def test_optimize_json_carries_energy_and_tco_in_named_units(gpt3_demand_file):
    import json
    from cli_run import run
    demand, configs = gpt3_demand_file
    r = run("optimize", "--demand", demand, "-n", f"{configs}/sample_8x8.yml", "--cost", f"{configs}/cost.yml",
            "--power", f"{configs}/power.yml", "--objective", "min-tco", "--total-bw-max", 1000, "--samples-per-step", 64,
            "--electricity-usd-per-kwh", 0.1, "--lifetime-years", 4, "--run-steps", 1e5, "--npu-usd", 3e4, "--json")
    data = json.loads(r.output)
    e, t = data["energy"], data["tco"]
    assert e["energy_j"] == pytest.approx(sum(e["parts_j"].values()), rel=1e-12)
    assert e["j_per_sample"] == pytest.approx(e["energy_j"] / 64) and e["j_per_token"] is None
    assert e["peak_cluster_power_w"] > e["average_power_w"] > 0 and e["peak_fabric_power_w"] > 0
    assert data["objective_value"] == pytest.approx(t["tco_usd"], rel=1e-9)
    assert data["dual_bound"] <= t["tco_usd"] and data["relative_gap"] <= 1e-8
    assert all(v >= t["tco_usd"] * (1 - 1e-9) for v in t["baselines_tco_usd"].values())   # the optimum is cheapest


def test_pareto_versus_energy_meets_every_budget_and_gets_faster(gpt3_demand_file, tmp_path):
    import json
    from cli_run import run
    demand, configs = gpt3_demand_file
    out = tmp_path / "f.json"
    common = ("--demand", demand, "-n", f"{configs}/sample_8x8.yml", "--power", f"{configs}/power.yml",
              "--total-bw-max", 1000)
    least = json.loads(run("optimize", *common, "--objective", "min-energy", "--json").output)["objective_value"]
    run("pareto", *common, "--versus", "energy", "--min-budget", least * 1.002, "--max-budget", least * 1.1,
        "--points", 4, "-o", out)
    pts = json.loads(out.read_text())["points"]
    assert all(p["energy_j"] <= p["budget_j"] * (1 + 1e-9) and p["relative_gap"] <= 1e-8 for p in pts)
    times = [p["time_ns"] for p in pts]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_power_options_need_a_power_file(gpt3_demand_file):
    from cli_run import one_line_error, run
    demand, configs = gpt3_demand_file
    r = run("optimize", "--demand", demand, "-n", f"{configs}/sample_8x8.yml", "--total-bw", 400, "--power-max", 1e5,
            ok=False)
    one_line_error(r, "--power-max needs power figures: give --power FILE (e.g. network_configs/power.yml)", 1)
