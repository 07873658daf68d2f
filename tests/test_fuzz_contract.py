"""The input contract, fuzzed: every run ends in success or one LibraError line — never another
exception, a hang or unbounded memory.

Bounded to a few seconds by default; set LIBRA_ASTRA_FUZZ=N to run N times as many cases
(e.g. LIBRA_ASTRA_FUZZ=100 for a long run) and LIBRA_ASTRA_FUZZ_SEED to pick the ET seed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libra_astra.optimize.constraints import parse_constraint
from libra_astra.model.cost import cost_from_dict
from libra_astra.demand.types import demand_from_dict, demand_to_dict
from libra_astra.optimize.design import design_from_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.strictload import loads_json, loads_yaml
from libra_astra.demand.synthetic import gpt3_demand
from libra_astra.model.cost import load_cost
from libra_astra.optimize.optimizer import Constraints, Workload, optimize
from libra_astra.timing.model import TimeModel
from libra_astra.timing.predict import predict
from libra_astra.tracegen.spec import spec_from_dict

ROOT = Path(__file__).resolve().parents[1]
SCALE = max(1, int(os.environ.get("LIBRA_ASTRA_FUZZ", "1")))
NET = load_network(ROOT / "network_configs" / "sample_4x4.yml")
COST = load_cost(ROOT / "network_configs" / "cost.yml")


def _settings(n: int):
    return settings(max_examples=n * SCALE, deadline=None, suppress_health_check=list(HealthCheck))


def holds(fn, *args) -> None:
    """The contract for one input."""
    try:
        fn(*args)
    except LibraError as e:
        assert "\n" not in str(e) and str(e)
        assert len(str(e)) < 4000, "an error message must not echo a whole input"


# ---------------------------------------------------------------- YAML configs as text

FRAGMENTS = ["name: n\n", "dimensions:\n", "  - {name: a, topology: Ring, npus: 4}\n", "  - name: b\n",
             "    topology: Switch\n", "    npus: 4\n", "    latency_ns: .nan\n", "    bw_max_gbps: .inf\n",
             "    npus: 1e400\n", "    npus: true\n", "    npus: 4.5\n", "    cost_class: [x]\n", "&a [1, 2]\n",
             "*a\n", "x: &x {a: 1}\n", "y: *x\n", "<<: *x\n", "dimensions: []\n", "name: n\n", "!!python/none ''\n",
             "? [a]\n: b\n", "\t", "- - - - - [\n", "\xff", "'", "\"\\u0000\"\n", "unit_prices_usd_per_gbps:\n",
             "  InterPackage: {link: 4, nic: .nan}\n", "  InterPod: {link: -1}\n", "  P: {link: 1e308}\n"]


@_settings(150)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12), st.sampled_from(["network", "cost", "trace spec"]))
def test_yaml_config_text(parts, kind):
    text = "".join(parts)

    def load():
        data = loads_yaml(text, "x.yml", kind)
        if kind == "network":
            network_from_dict(data, "x.yml")
        elif kind == "cost":
            cost_from_dict(data, "x.yml")
        else:
            spec_from_dict(data, "x.yml", ROOT)
    holds(load)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                      max_leaves=16)


@_settings(100)
@given(st.fixed_dictionaries({}, optional={
    "name": scalars, "model": st.one_of(values, st.fixed_dictionaries({"type": st.sampled_from(
        ["transformer", "dlrm", "resnet50", "x"])}, optional={"layers": scalars, "hidden_size": scalars,
                                                               "heads": scalars, "seq_length": scalars})),
    "parallel": st.one_of(values, st.dictionaries(st.sampled_from(["tp", "pp", "dp", "ep"]), scalars, max_size=3)),
    "placement": values, "network": values, "compute": values}))
def test_trace_specs(data):
    holds(spec_from_dict, data, "s.yml", ROOT)


# ---------------------------------------------------------------- constraint text


@_settings(300)
@given(st.lists(st.sampled_from(list("bw[]()01249ab+-*/=<>.eE_ ,#") + ["package", "pod", "nan", "inf", "1e999",
                                                                        "**", "__", "bw[pod]", "\n", "\x00"]),
                max_size=24))
def test_constraint_text(parts):
    holds(parse_constraint, "".join(parts), NET, "--constraint")


# ---------------------------------------------------------------- demand and design JSON as text

VALID_DEMAND = json.dumps(demand_to_dict(gpt3_demand(NET, layers=2)))


def _json_mutants():
    def mutate(args):
        pos, op, piece = args
        p = pos % (len(VALID_DEMAND) + 1)
        if op == 0:
            return VALID_DEMAND[:p] + piece + VALID_DEMAND[p:]
        if op == 1:
            return VALID_DEMAND[:p] + VALID_DEMAND[p + len(piece) + 1:]
        return VALID_DEMAND[:p] + piece + VALID_DEMAND[p + len(piece):]
    pieces = st.sampled_from(["NaN", "Infinity", "-1", "1e400", "9" * 30, "true", "null", '"x"', "[", "]", "{",
                              "}", ",", ':', '"count": 1e308', '"size_bytes": -1', '"participants": [4, 4, 4]',
                              '"npus_per_dim": [4, 4], "npus_per_dim": [2, 8]', "[" * 300, '"\\ud800"'])
    return st.tuples(st.integers(0, 10**6), st.integers(0, 2), pieces).map(mutate)


# what every accepted demand must survive: the pipelined model reads every field (hops included)
TIMED = TimeModel("pipelined", splits=2, latency=True, local_mem_bw_gbps=1000.0, overlap=True)


@_settings(200)
@given(_json_mutants())
def test_demand_json_text(text):
    def load():
        d = demand_from_dict(loads_json(text, "d.json", "demand"), "d.json")
        d.check_network(NET, "d.json")
        predict(d, [100.0] * NET.num_dims, NET, TIMED)
    holds(load)


# Two rank classes with every kind of node, a receive waiting on the other class's send and a
# collective shared between them: each example puts hostile values into one or two of its fields
# and runs what the file would go through (read, replay with overlap, optimize).
def _two_classes() -> dict:
    def rank_class(ranks, extra_nodes, dag_extra):
        return {"num_ranks": 8, "ranks": ranks, "compute_time_ns": 100.0, "collectives": [
            {"type": "ALL_REDUCE", "size_bytes": 1e6, "participants": [4, 1], "hops": [3, 0], "count": 2},
            {"type": "P2P", "size_bytes": 1e3, "participants": [2, 1], "algorithm": "p2p",
             "traffic_bytes": [1e3, 0.0], "hops": [1, 0]}],
            "dag": {"nodes": [["comp", 5.0], ["coll", 0], ["coll", 1]] + extra_nodes,
                    "deps": [[0, 1], [1, 2]] + ([[2, 3], [3, 4]] if extra_nodes else []), **dag_extra}}
    return {"format": "libra_astra.demand", "version": 1, "npus_per_dim": [4, 4], "rank_classes": [
        rank_class(list(range(8)), [["free", 0.0], ["cpu", 2.0]], {"links": [[3, 1, 2]], "syncs": [[1, 1, 1]]}),
        rank_class(list(range(8, 16)), [], {"syncs": [[1, 0, 1]]})]}


def _leaves(o, path=()):
    if isinstance(o, dict):
        return [p for k, v in o.items() for p in _leaves(v, path + (k,))]
    if isinstance(o, list):
        return [p for i, v in enumerate(o) for p in _leaves(v, path + (i,))]
    return [path]


LEAVES = [p for p in _leaves(_two_classes()) if p[0] not in ("format", "version")]
HOSTILE = st.sampled_from([0, 1, 2, 3, 4, 5, -1, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 30, True, 1.5, 1e300, -0.0, 1e-300,
                           "x", None, [], {}])


def _changed(changes, data=None) -> dict:
    """``data`` (default: _two_classes()) with each (path, value) of ``changes`` set."""
    data = _two_classes() if data is None else data
    for path, value in changes:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return data


@_settings(150)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), HOSTILE), min_size=1, max_size=2))
def test_demand_fields_through_the_optimizer(changes):
    data = _changed(changes)

    def run():
        d = demand_from_dict(json.loads(json.dumps(data)), "d.json")
        d.check_network(NET, "d.json")
        predict(d, [100.0, 50.0], NET, TIMED)
        optimize([Workload(d)], NET, COST, constraints=Constraints(200.0), model=TIMED, baselines=False)
    holds(run)


DESIGN = {"format": "libra_astra.design", "version": 1, "name": "fuzz", "network": NET.to_dict(),
          "bandwidth_gbps": [100.0, 50.0], "objective": "perf", "time_model": "pipelined",
          "time_model_settings": {"kind": "pipelined", "overlap": True, "splits": 2, "latency": True,
                                  "local_mem_bw_gbps": 1000.0},
          "predicted_time_ns": 1.0, "cost_usd": 1.0, "workloads": [{"name": "w", "weight": 1.0, "demand": "d.json"}]}
DESIGN_LEAVES = [p for p in _leaves(DESIGN) if p[0] not in ("format", "version") and p[-1] != "demand"]


@_settings(30)
@given(st.lists(st.tuples(st.sampled_from(DESIGN_LEAVES), HOSTILE), min_size=1, max_size=2))
def test_design_fields_through_emit(tmp_path_factory, changes):
    from libra_astra.astra.emit import emit

    data = _changed(changes, json.loads(json.dumps(DESIGN)))
    work = tmp_path_factory.mktemp("design")
    (work / "d.json").write_text(json.dumps(_two_classes()))
    data["workloads"][0]["demand"] = str(work / "d.json")
    (work / "x.json").write_text(json.dumps(data))
    holds(emit, str(work / "x.json"), work / "run")


@_settings(30)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), HOSTILE), min_size=1, max_size=2))
def test_demand_fields_through_emit(tmp_path_factory, changes):
    from libra_astra.astra.emit import emit
    from libra_astra.optimize.design import Design, WorkloadRef

    work = tmp_path_factory.mktemp("emit")
    (work / "d.json").write_text(json.dumps(_changed(changes)))
    design = Design("fuzz", NET, (100.0, 50.0), workloads=(WorkloadRef("w", demand=str(work / "d.json")),))
    holds(emit, design, work / "run")


@_settings(150)
@given(st.one_of(values, st.fixed_dictionaries({"format": st.just("libra_astra.design"), "version": st.just(1)},
                                               optional={"network": st.one_of(values, st.just(NET.to_dict())),
                                                         "bandwidth_gbps": st.one_of(values, st.lists(
                                                             scalars, min_size=2, max_size=2)),
                                                         "workloads": st.one_of(values, st.lists(st.dictionaries(
                                                             st.sampled_from(["name", "weight", "demand", "traces",
                                                                              "comm_groups"]), scalars), max_size=2)),
                                                         "cost_usd": scalars, "predicted_time_ns": scalars,
                                                         "result": values})))
def test_design_json(data):
    try:
        text = json.dumps(data)
    except ValueError:
        return
    holds(lambda: design_from_dict(loads_json(text, "x.json", "design"), "x.json"))


# ---------------------------------------------------------------- ET files, in a bounded child process


def _limit_memory():
    cap = 3 << 30   # a reader that tries to hold a bomb fails here instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_mutated_et_files():
    seed = int(os.environ.get("LIBRA_ASTRA_FUZZ_SEED", "20261201"))
    cases = 200 * SCALE
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_et.py"), "--seed", str(seed),
                           "--cases", str(cases)], capture_output=True, text=True, timeout=120 * SCALE,
                          preexec_fn=_limit_memory, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["cases"] == cases
    assert report["crashes"] == [], f"seed {seed}: {report['crashes'][:5]}"
    assert report["errors"] > 0 and report["accepted"] > 0   # the mutations hit both sides
