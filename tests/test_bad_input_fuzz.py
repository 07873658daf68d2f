"""Any malformed input file ends in LibraError (a one-line message), never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libra_astra.optimize.constraints import parse_constraint
from libra_astra.model.cost import cost_from_dict
from libra_astra.demand.types import demand_from_dict
from libra_astra.optimize.design import design_from_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70), st.integers(2 ** 62, 2 ** 80), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["Ring", "Switch", "ALL_REDUCE", "P2P", "flat_ring"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=12)
NET = network_from_dict({"name": "n", "dimensions": [{"name": "a", "topology": "Ring", "npus": 4},
                                                     {"name": "b", "topology": "Switch", "npus": 2}]})


def _dims():
    return st.lists(st.fixed_dictionaries({}, optional={
        "name": st.one_of(st.text(max_size=6), st.integers()), "topology": scalars, "npus": scalars,
        "latency_ns": scalars, "cost_class": scalars, "bw_min_gbps": scalars, "bw_max_gbps": scalars}), max_size=3)


def _only_libra_errors(fn, data):
    try:
        fn(data)
    except LibraError as e:
        assert "\n" not in str(e)


@settings(max_examples=300, deadline=None)
@given(st.one_of(values, st.fixed_dictionaries({"dimensions": _dims()}, optional={"name": scalars})))
def test_network_files(data):
    _only_libra_errors(lambda d: network_from_dict(d, "n.yml"), data)


@settings(max_examples=300, deadline=None)
@given(st.one_of(values, st.fixed_dictionaries({"unit_prices_usd_per_gbps": st.dictionaries(
    st.text(max_size=5), st.one_of(scalars, st.dictionaries(st.sampled_from(["link", "nic", "x"]), scalars)),
    max_size=3)})))
def test_cost_files(data):
    _only_libra_errors(lambda d: cost_from_dict(d, "c.yml"), data)


collective = st.fixed_dictionaries({}, optional={
    "type": scalars, "size_bytes": scalars, "participants": st.one_of(scalars, st.lists(scalars, max_size=3)),
    "count": scalars, "algorithm": scalars, "traffic_bytes": st.one_of(scalars, st.lists(scalars, max_size=3)),
    "hops": st.one_of(scalars, st.lists(scalars, max_size=3))})


@settings(max_examples=400, deadline=None)
@given(st.one_of(values, st.fixed_dictionaries(
    {"format": st.just("libra_astra.demand"), "version": st.just(1)},
    optional={"npus_per_dim": st.one_of(scalars, st.lists(scalars, max_size=3)),
              "compute_time_ns": scalars, "collectives": st.one_of(scalars, st.lists(collective, max_size=3)),
              "rank_classes": st.one_of(scalars, st.lists(st.fixed_dictionaries({}, optional={
                  "collectives": st.lists(collective, max_size=2), "ranks": values, "num_ranks": scalars,
                  "dag": values}), max_size=2))})))
def test_demand_files(data):
    _only_libra_errors(lambda d: demand_from_dict(d, "d.json"), data)


@settings(max_examples=200, deadline=None)
@given(st.one_of(values, st.fixed_dictionaries(
    {"format": st.just("libra_astra.design"), "version": st.just(1)},
    optional={"network": values, "bandwidth_gbps": values, "workloads": values})))
def test_design_files(data):
    _only_libra_errors(lambda d: design_from_dict(d, "x.json"), data)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="bw[]01ab+-*=<>.e 2", max_size=24))
def test_constraint_text(text):
    _only_libra_errors(lambda t: parse_constraint(t, NET), text)


@pytest.mark.parametrize("text", ["bw[0] >= 1e999", "1e400 * bw[0] >= 1", "bw[0] - 1e308 * bw[1] >= 1e308 * 10",
                                  "1e308 <= 1e308 * bw[0]", "bw[0] >= 2e100"])
def test_constraint_numbers_must_be_usable(text):
    # 1e308 is finite but became inf once the optimizer scaled the row, and linprog raised
    with pytest.raises(LibraError) as e:
        parse_constraint(text, NET)
    assert str(e.value) == f"--constraint: constraint {text!r} has a number too large to use; write values up to 1e+100"
    assert parse_constraint("bw[0] >= 1e100 * bw[1]", NET).coeffs == (1.0, -1e100)


def test_error_messages_stay_on_one_line():
    with pytest.raises(LibraError) as e:
        cost_from_dict({"unit_prices_usd_per_gbps": {"a\nb": 3}}, "c.yml")
    assert str(e.value) == "c.yml: unit_prices_usd_per_gbps.a\\nb: expected a mapping with link, switch, nic"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_corrupted_trace_files(tmp_path_factory, data):
    import shutil
    from pathlib import Path

    from libra_astra.model.network import load_network
    from libra_astra.demand.from_traces import demand_from_traces

    root = Path(__file__).resolve().parents[1]
    src = root / "traces/dlrm_16"
    work = tmp_path_factory.mktemp("bad")
    for r in range(16):
        shutil.copy(src / f"dlrm.{r}.et", work / f"dlrm.{r}.et")
    raw = bytearray((src / "dlrm.0.et").read_bytes())
    cut = data.draw(st.integers(0, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=4))
    for pos, val in flips:
        raw[pos] = val
    (work / "dlrm.0.et").write_bytes(bytes(raw[:cut]))
    net = load_network(root / "network_configs/sample_4x4.yml")
    _only_libra_errors(lambda p: demand_from_traces(p, net), str(work / "dlrm"))


def _demand(collective=None, dag=None, classes=1):
    rc = {"compute_time_ns": 1.0, "collectives": [collective or {"type": "ALL_REDUCE", "size_bytes": 1e6,
                                                                  "participants": [4, 2]}]}
    if dag is not None:
        rc["dag"] = dag
    return {"format": "libra_astra.demand", "version": 1, "npus_per_dim": [4, 2], "rank_classes": [rc] * classes}


def test_hops_beyond_any_network_are_refused():
    # 10**30 passed the integer check and then failed deep in the row builder, not in one line
    data = _demand({"type": "ALL_REDUCE", "size_bytes": 1e6, "participants": [4, 2], "hops": [3, 10 ** 30]})
    with pytest.raises(LibraError) as e:
        demand_from_dict(data, "d.json")
    assert str(e.value) == ("d.json: rank_classes[0]: collectives[0]: hops[1] = " + str(10 ** 30)
                            + " is beyond 1,000,000,000; fix the hops")


DAG = {"nodes": [["comp", 5.0], ["coll", 0], ["free", 0.0]], "deps": [[0, 1], [1, 2]]}


@pytest.mark.parametrize("field, wait, classes, message", [
    ("links", [2, 1, 0], 1, "dag link [2, 1, 0] names class 1, but there is 1 class; fix or remove it"),
    ("links", [2, 1, 3], 2, "dag link [2, 1, 3] names node 3 of class 1, which has 3 nodes; fix or remove it"),
    ("syncs", [1, 4, 1], 2, "dag sync [1, 4, 1] names class 4, but there are 2 classes; fix or remove it"),
    ("syncs", [0, 1, 1], 2, "dag sync [0, 1, 1] sits on a 'comp' node; a sync pairs collectives, fix or remove it"),
    ("syncs", [1, 1, 2], 2, "dag sync [1, 1, 2] names a 'free' node; a sync pairs collectives, fix or remove it"),
])
def test_waits_must_name_nodes_that_exist(field, wait, classes, message):
    # the replay passes over a wait it cannot place: the job would be timed without it
    data = _demand(dag={**DAG, field: [wait]}, classes=classes)
    with pytest.raises(LibraError) as e:
        demand_from_dict(data, "d.json")
    assert str(e.value) == f"d.json: rank_classes[0]: {message}"
    ok = _demand(dag={**DAG, "links": [[2, classes - 1, 1]], "syncs": [[1, classes - 1, 1]]}, classes=classes)
    assert demand_from_dict(ok, "d.json").rank_classes[0].dag.links == ((2, classes - 1, 1),)


@pytest.mark.parametrize("key, value, reason", [
    ("splits", "x", "invalid literal for int() with base 10: 'x'"),
    ("splits", [], "int() argument must be a string, a bytes-like object or a real number, not 'list'"),
    ("local_mem_bw_gbps", "Ring", "could not convert string to float: 'Ring'"),
    ("local_mem_bw_gbps", 1e-300, "local_mem_bw_gbps must be >= 1e-06 GB/s (a kilobyte per second), got 1e-300"),
])
def test_design_time_model_settings_must_make_a_model(key, value, reason):
    # emit read these back with int()/float() and stopped with a ValueError or TypeError traceback
    settings = {"kind": "pipelined", "overlap": True, "splits": 1, "latency": True, "local_mem_bw_gbps": 1e9}
    data = {"format": "libra_astra.design", "version": 1, "network": NET.to_dict(), "bandwidth_gbps": [1.0, 1.0],
            "time_model": "pipelined", "time_model_settings": {**settings, key: value}, "workloads": []}
    with pytest.raises(LibraError) as e:
        design_from_dict(data, "d.json")
    assert str(e.value).startswith("d.json: ") and str(e.value).endswith(reason)
    assert design_from_dict({**data, "time_model_settings": settings}, "d.json").time_model_settings == settings
