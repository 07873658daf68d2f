"""tools/predict_grid.py and what its grid found: ``predict`` against ASTRA-sim's congestion-unaware
binary over a covering design of system settings, collectives and networks.

tests/fixtures/predict_grid_recorded.json was recorded by ``tools/predict_grid.py --size triples
--seed 1 --only grid --record FILE`` from the binary (518bd51): small grid cases with every file inline (the ET
files as hex, written by chakra_io with mlc-chakra's schema) and the binary's ``finished`` lines,
or how it failed. Tests that run the binary are skipped without $ASTRA_SIM_BIN.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from libra_astra.astra.parse import parse_output
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs
from libra_astra.errors import LibraError
from libra_astra.timing.astra_predict import predict_astra
from libra_astra.traces import chakra_io as cio

from tool_module import tool_module

ROOT = Path(__file__).resolve().parents[1]
BIN = os.environ.get("ASTRA_SIM_BIN", "")
KEYS = ("all-reduce-implementation", "reduce-scatter-implementation", "all-gather-implementation",
        "all-to-all-implementation")
RING4 = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"


def write_case(d: Path, sysd: dict, nodes_of, npus: int = 4, net: str = RING4, groups: dict | None = None) -> SimInputs:
    for r in range(npus):
        cio.write_et(d / f"w.{r}.et", nodes_of(r), overwrite=True)
    (d / "network.yml").write_text(net)
    (d / "system.json").write_text(json.dumps(sysd))
    g = None
    if groups:
        (d / "groups.json").write_text(json.dumps(groups))
        g = str(d / "groups.json")
    return SimInputs(str(d / "w"), str(d / "network.yml"), str(d / "system.json"), g)


def system(impl: str = "ring", dims: int = 1, **kw) -> dict:
    s = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
         "preferred-dataset-splits": 1, "collective-optimization": "localBWAware", "local-mem-bw": 1600}
    s.update({k: [impl] * dims for k in KEYS})
    s.update({k.replace("_", "-"): v for k, v in kw.items()})
    return s


# --- endpoint-delay 0 ---------------------------------------------------------------------------

def test_endpoint_delay_zero_with_a_collective_at_time_zero_is_refused_naming_the_key(tmp_path):
    # ASTRA-sim aborts: the memory bus schedules an event at t = 0 (EventQueue::proceed's assertion)
    inp = write_case(tmp_path, system(endpoint_delay=0), lambda r: [cio.coll_node(0, "ar", "ALL_REDUCE", 1 << 16)])
    with pytest.raises(LibraError, match=r"system.json: endpoint-delay 0, and rank 0 issues ALL_REDUCE at time 0: ASTRA-sim aborts.*set endpoint-delay to 1") as e:
        predict_inputs(inp)
    assert "\n" not in str(e.value)


def test_endpoint_delay_zero_is_answered_when_nothing_starts_at_time_zero(tmp_path):
    # as the binary ran them (ed0 cases of tools/predict_grid.py's check, Ring 4 at 50 GiB/s, 500 ns):
    # compute first; a 0 us compute (ASTRA-sim runs it for 1 ns); a group's ring (its memory bus
    # pays a fixed 10 ns whatever endpoint-delay says)
    ar = lambda i, deps=(), pg=None: cio.coll_node(i, "ar", "ALL_REDUCE", 1 << 16, ctrl_deps=deps, pg_name=pg)  # noqa: E731
    for name, nodes_of, groups, finish in [
            ("after", lambda r: [cio.comp_node(0, "mm", 5), ar(1, [0])], None, 9920),
            ("behind0", lambda r: [cio.comp_node(0, "mm", 0), ar(1, [0])], None, 4921),
            ("group", lambda r: [ar(0, pg="1" if r < 2 else "2")], {"1": [0, 1], "2": [2, 3]}, 2310)]:
        (tmp_path / name).mkdir()
        inp = write_case(tmp_path / name, system(endpoint_delay=0), nodes_of, groups=groups)
        assert [r.finished_ns for r in predict_inputs(inp).prediction.ranks] == [finish] * 4, name


# --- recorded grid cases ------------------------------------------------------------------------

RECORDED = json.loads((ROOT / "tests" / "fixtures" / "predict_grid_recorded.json").read_text())


def unpack(case: dict, d: Path) -> SimInputs:
    """A recorded case's files, as the binary read them."""
    for name, data in case["et"].items():
        (d / name).write_bytes(bytes.fromhex(data))
    (d / "network.yml").write_text(case["network"])
    (d / "system.json").write_text(json.dumps(case["system"]))
    return SimInputs(str(d / "w"), str(d / "network.yml"), str(d / "system.json"), None, case["queues"])


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: f"{c['workload']}-{c['variant']}")
def test_predict_answers_as_the_recorded_binary_or_refuses_what_it_failed(tmp_path, case):
    inp = unpack(case, tmp_path)
    if case["astra_failed"]:
        with pytest.raises(LibraError) as e:
            predict_inputs(inp)
        assert "\n" not in str(e.value) and str(tmp_path / "system.json") in str(e.value)
        return
    want = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in parse_output("\n".join(case["finished"])).ranks}
    got = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in predict_inputs(inp).prediction.ranks}
    assert got == want


def test_the_recording_holds_every_kind_refusals_and_settings_that_change_the_time():
    values = {(k, str(c["system"].get(k))) for c in RECORDED["cases"] for k in
              ("endpoint-delay", "active-chunks-per-dimension", "roofline-enabled", "collective-optimization")}
    assert {("endpoint-delay", "0"), ("active-chunks-per-dimension", "4"), ("roofline-enabled", "1"),
            ("collective-optimization", "baseline")} <= values
    assert {c["workload"].split()[0] for c in RECORDED["cases"]} == {"ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER",
                                                                     "ALL_TO_ALL", "SEND_RECV"}
    assert any(c["astra_failed"] for c in RECORDED["cases"]) and any(c["queues"] == 2 for c in RECORDED["cases"])


# --- the tool -----------------------------------------------------------------------------------

@pytest.mark.parametrize("strength", [2, 3])
def test_the_covering_design_holds_every_tuple_of_values(strength):
    grid = tool_module("predict_grid")
    factors = {"a": [1, 2, 3], "b": ["x", "y"], "c": [0, 1, 2, 3], "d": [True, False]}
    rows = grid.cover(factors, strength, random.Random(5))
    for names in itertools.combinations(factors, strength):
        seen = {tuple(r[n] for n in names) for r in rows}
        assert seen == set(itertools.product(*(factors[n] for n in names))), names
    assert len(rows) < 4 * 3 * 2 * 2       # a design, not the product


def test_a_grid_case_is_chakra_et_that_predict_reads(tmp_path):
    grid = tool_module("predict_grid")
    row = {**{k: v[0] for k, v in grid.SETTINGS.items()}, "implementation": "direct2", "mix": "per-dimension",
           "kind": "SEND_RECV", "dims": 2, "topology": "Switch", "size": "odd", "chain": 2, "lead": "compute",
           "endpoint-delay": 10}
    case = grid.grid_case(row, 0, 1, tmp_path)
    sysd = json.loads(Path(case["system"]).read_text())
    assert sysd["all-reduce-implementation"][0] == "direct2" and len(sysd["all-reduce-implementation"]) == 2
    _, nodes = cio.read_et(case["prefix"] + ".0.et")
    assert [n.type for n in nodes] == [cio.COMP, cio.COMM_SEND, cio.COMM_RECV, cio.COMM_COLL]
    p = predict_inputs(SimInputs(case["prefix"], case["network"], case["system"], None, case["queues"]))
    assert p.prediction.time_ns > 40_000        # 40 us of compute, a send and an all-reduce after it


def test_the_summary_counts_exact_close_and_refused_cases():
    grid = tool_module("predict_grid_report")
    case = {"set": "grid", "workload": "w", "variant": "v", "factors": {}}
    res = [{"case": case, "sim": {0: (100, 10)}, "pred": {0: (100, 10)}},
           {"case": case, "sim": {0: (1000, 10)}, "pred": {0: (1005, 10)}},
           {"case": case, "sim": "exit -6, 0 of 4 ranks finished", "pred": "/x/system.json: endpoint-delay 0"},
           {"case": case, "sim": {0: (100, 10)}, "pred": "/x/system.json: no"}]
    for r in res:
        r["verdict"], r["error"] = grid.verdict(r)
    rows = grid.summarize(res)
    assert rows[1] == ["all", "4", "1", "1", "2", "0.5000%", "0.5000%", "1", "1", "3"]   # no doctor: "runs"
    assert grid.refusals(res)[1] == ["1", "endpoint-delay 0", "exit -6, 0 of N ranks finished (abort)"]
    assert grid.wrong_count(res) == 1 and grid.wrong_count(res[:3]) == 0


# --- the binary ---------------------------------------------------------------------------------

@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_live_a_slice_of_the_grid_agrees_with_the_binary(tmp_path):
    grid = tool_module("predict_grid")
    results = grid.run_grid("smoke", 2, 2, BIN, None, tmp_path, {"grid"})
    assert len(results) == 12
    report = tool_module("predict_grid_report")
    assert all(r["verdict"] in ("exact", "close", "refused") for r in results), report.failures(results)
    assert all(r["verdict"] in ("exact", "refused") for r in results), report.failures(results)


def test_tree_collectives_of_one_stage_only_are_timed_per_place(tmp_path):
    # two pipeline stages (dimension 1) run different tree collectives on dimension 0: each stage's
    # ranks are whole groups of their own collectives, which ASTRA-sim runs (finish, exposed) as below
    net = "topology: [ Ring, Ring ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ 50.0, 25.0 ]\nlatency: [ 500.0, 100.0 ]\n"

    def nodes(r):
        out = [cio.comp_node(0, "mm", 3 + 4 * (r // 2))]
        if r < 2:
            return out + [cio.coll_node(1, "tp", "ALL_REDUCE", 1 << 16, involved_dim=[True, False], ctrl_deps=[0])]
        return out + [cio.coll_node(1, "tp", "ALL_GATHER", 1 << 12, involved_dim=[True, False], ctrl_deps=[0]),
                      cio.coll_node(2, "tp2", "ALL_REDUCE", 1 << 14, involved_dim=[True, False], ctrl_deps=[1])]
    p = predict_inputs(write_case(tmp_path, system("doubleBinaryTree", 2), nodes, net=net)).prediction
    assert [(r.finished_ns, r.exposed_comm_ns) for r in p.ranks] == [(6590, 3590), (4860, 1860), (9858, 2858),
                                                                    (9043, 2043)]


def tree_system(dims: int, then: str = "doubleBinaryTree") -> dict:
    """doubleBinaryTree for all-to-all, ``then`` for the other kinds, on every dimension."""
    s = system(then, dims)
    s["all-to-all-implementation"] = ["doubleBinaryTree"] * dims
    return s


@pytest.mark.parametrize("then, net, finish", [
    # as ASTRA-sim 518bd51 (congestion-unaware) ran them: an all-to-all on double binary trees
    # (ranks leave it apart, leaves last), then a ring, halving-doubling or direct all-reduce that
    # each rank starts when it gets there; the early ranks' messages wait for the late ones'
    ("ring", "topology: [ FullyConnected ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n",
     [10834, 10258, 10834, 10258]),
    ("halvingDoubling", "topology: [ Ring, Switch ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ 50.0, 25.0 ]\n"
     "latency: [ 500.0, 100.0 ]\n", [11100, 10448, 10748, 10096]),
    ("direct", "topology: [ Ring, FullyConnected ]\nnpus_count: [ 2, 4 ]\nbandwidth: [ 50.0, 25.0 ]\n"
     "latency: [ 500.0, 100.0 ]\n", [15908, 15256] * 4)], ids=["ring", "halvingDoubling", "direct"])
def test_ranks_leaving_a_tree_apart_start_the_next_collective_apart(tmp_path, then, net, finish):
    def nodes(r):
        return [cio.coll_node(1, "a2a", "ALL_TO_ALL", 1 << 16),
                cio.coll_node(2, "ar", "ALL_REDUCE", 1 << 14, ctrl_deps=[1])]
    n = len(finish)
    p = predict_inputs(write_case(tmp_path, tree_system(net.count(",", 0, net.index("\n")) + 1, then), nodes, n,
                                  net)).prediction
    assert [(r.finished_ns, r.exposed_comm_ns) for r in p.ranks] == [(t, t) for t in finish]


def test_sends_across_a_tree_dimension_wait_on_the_rank_they_name(tmp_path):
    # as ASTRA-sim 518bd51 ran them (finish, exposed): after a tree all-reduce over Ring 2 x Switch 4
    # (every rank at its own place) each rank sends to its neighbour on the tree's dimension 0
    # and waits for the neighbour's send before an all-gather
    net = "topology: [ Ring, Switch ]\nnpus_count: [ 2, 4 ]\nbandwidth: [ 50.0, 25.0 ]\nlatency: [ 500.0, 100.0 ]\n"

    def ring(r):
        peer = r ^ 1
        return [cio.coll_node(0, "ar", "ALL_REDUCE", 1 << 16),
                cio.send_node(1, "send", 1 << 18, r, peer, 7, ctrl_deps=[0]),
                cio.recv_node(2, "recv", 1 << 18, peer, r, 7, ctrl_deps=[0]),
                cio.coll_node(3, "ag", "ALL_GATHER", 1 << 14, ctrl_deps=[1, 2])]
    (tmp_path / "ring").mkdir()
    p = predict_inputs(write_case(tmp_path / "ring", system("doubleBinaryTree", 2), ring, 8, net)).prediction
    assert [r.finished_ns for r in p.ranks] == [26856, 26041, 26036, 25221, 26856, 26041, 25186, 24371]

    # two pipeline stages on dimension 0 (even, odd ranks), a tree all-reduce over dimension 1 in
    # each; the second stage sends back after its tree, each rank when its tree ends
    def pipe(r):
        tp = lambda i, deps: cio.coll_node(i, "tp", "ALL_REDUCE", 1 << 16, involved_dim=[False, True],  # noqa: E731
                                           ctrl_deps=deps)
        if r % 2 == 0:
            return [cio.comp_node(0, "mm", 3), tp(1, [0]), cio.send_node(2, "send", 1 << 20, r, r + 1, 5, ctrl_deps=[1]),
                    cio.recv_node(3, "recv", 1 << 20, r + 1, r, 6, ctrl_deps=[2]), tp(4, [3])]
        return [cio.recv_node(0, "recv", 1 << 20, r - 1, r, 5), cio.comp_node(1, "mm", 2), tp(2, [1]),
                cio.send_node(3, "send", 1 << 20, r, r - 1, 6, ctrl_deps=[2])]
    (tmp_path / "pipe").mkdir()
    p = predict_inputs(write_case(tmp_path / "pipe", system("doubleBinaryTree", 2), pipe, 8, net)).prediction
    assert [(r.finished_ns, r.exposed_comm_ns) for r in p.ranks] == [
        (36906, 33906), (34005, 32005), (42328, 39328), (31354, 29354), (39677, 36677), (34005, 32005),
        (42328, 39328), (28583, 26583)]


def test_without_the_senders_a_send_across_a_tree_dimension_is_refused(tmp_path):
    # a demand that names only the sending class (a demand file without "senders")
    net = "topology: [ Ring, Switch ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ 50.0, 25.0 ]\nlatency: [ 500.0, 100.0 ]\n"

    def ring(r):
        return [cio.coll_node(0, "ar", "ALL_REDUCE", 1 << 16),
                cio.send_node(1, "send", 1 << 18, r, r ^ 1, 7, ctrl_deps=[0]),
                cio.recv_node(2, "recv", 1 << 18, r ^ 1, r, 7, ctrl_deps=[0])]
    inp = write_case(tmp_path, system("doubleBinaryTree", 2), ring, 4, net)
    pr = predict_inputs(inp)
    assert all(rc.dag.senders for rc in pr.demand.rank_classes if rc.dag.links)
    bare = replace(pr.demand, rank_classes=tuple(replace(rc, dag=replace(rc.dag, senders=()))
                                                 for rc in pr.demand.rank_classes))
    with pytest.raises(LibraError, match=r"doubleBinaryTree: ranks at different places in the trees send to each "
                                         r"other across a tree dimension, and the demand does not say which rank"):
        predict_astra(bare, pr.system)


def test_the_markdown_tables_replace_only_their_part_of_a_page(tmp_path):
    grid = tool_module("predict_grid_report")
    page = tmp_path / "validation.md"
    page.write_text(f"# Title\n\nprose\n\n{grid.BEGIN}\nold table\n{grid.END}\n\nmore prose\n")
    grid.write_markdown(page, grid.markdown([("Summary", [["a", "b"], ["1", "x|y"]])], "cmd"))
    text = page.read_text()
    assert text.startswith("# Title\n\nprose\n\n") and text.endswith("\n\nmore prose\n")
    assert "old table" not in text and "| 1 | x\\|y |" in text
