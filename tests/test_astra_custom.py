"""predict on custom collectives (system.json ``*-implementation-custom``), against real ASTRA-sim.

tests/fixtures/astra_custom_recorded.json was recorded by tools/validate_custom.py --record from
astra-sim 518bd51's AstraSim_Analytical_Congestion_Unaware: every rank's ``finished`` line for
the programs and workloads that tool writes. The tests that run the binary are skipped without
$ASTRA_SIM_BIN (ASTRA-sim's own example also needs $ASTRA_SIM_EXAMPLES).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from libra_astra.astra.predict_inputs import SimInputs, predict_inputs
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict
from libra_astra.timing.astra_collective import Link, astra_bw_gbps
from libra_astra.timing.astra_custom import custom_rank_times
from libra_astra.traces import chakra_io as cio

from tool_module import tool_module

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "fixtures" / "astra_custom_recorded.json").read_text())["cases"]
TOOL = tool_module("validate_custom")
CASES = {c[0]: c for c in TOOL.CASES}
BIN = os.environ.get("ASTRA_SIM_BIN", "")
NO_BIN = "set ASTRA_SIM_BIN to ASTRA-sim's AstraSim_Analytical_Congestion_Unaware to run it"


def _predict(tmp_path: Path, case, **system_keys) -> dict[int, tuple[int, int]]:
    workload, network, system = TOOL.write_case(tmp_path, case)
    if system_keys:
        data = {**json.loads(Path(system).read_text()), **system_keys}
        Path(system).write_text(json.dumps(data))
    return TOOL.predicted(workload, network, system, str(tmp_path))


@pytest.mark.parametrize("rec", RECORDED, ids=[r["case"] for r in RECORDED])
def test_recorded_finish_lines(tmp_path, rec):
    got = _predict(tmp_path, CASES[rec["case"]])
    assert sorted([r, *v] for r, v in got.items()) == rec["finished"]


def test_ring_program_by_hand(tmp_path):
    # 7 steps of send, receive and a 7 us reduction, then 7 of send and receive: each message
    # int(500 + 131072 / (50 GiB/s in bytes per ns)) = 2941 ns on the 8-NPU ring
    prefix = TOOL.write_program(tmp_path / "p", "ring")
    net = network_from_dict({"topology": ["Ring"], "npus_count": [8], "latency": [500.0]}, "net")
    times = custom_rank_times(prefix, "sys: key", net, (Link("Ring", 8, astra_bw_gbps(50.0), 500.0),))
    assert times == (7 * (2941 + 7000) + 7 * 2941,) * 8


def test_a_program_rewritten_in_place_is_read_again(tmp_path):
    net = network_from_dict({"topology": ["Switch"], "npus_count": [2], "latency": [100.0]}, "net")
    link = (Link("Switch", 2, 1.0, 100.0),)
    times = []
    for us in (1, 3):
        for r in range(2):
            cio.write_et(tmp_path / f"p.{r}.et", [cio.comp_node(0, "reduce", us)], overwrite=True)
        times.append(custom_rank_times(str(tmp_path / "p"), "sys: key", net, link))
    assert times == [(1000, 1000), (3000, 3000)]


def test_receive_waits_for_the_matching_size(tmp_path):
    net = network_from_dict({"topology": ["Switch"], "npus_count": [2], "latency": [100.0]}, "net")
    link = (Link("Switch", 2, 1.0, 100.0),)
    cio.write_et(tmp_path / "p.0.et", [cio.send_node(0, "s", 1000, 0, 1, 0)])
    cio.write_et(tmp_path / "p.1.et", [cio.recv_node(0, "r", 999, 0, 1, 0)])
    with pytest.raises(LibraError, match=r"^sys: key: rank 1's program .*p\.1\.et never finishes: a receive"):
        custom_rank_times(str(tmp_path / "p"), "sys: key", net, link)
    cio.write_et(tmp_path / "q.0.et", [cio.send_node(0, "s", 1000, 0, 1, 0)])
    cio.write_et(tmp_path / "q.1.et", [cio.comp_node(0, "late", 2), cio.recv_node(1, "r", 1000, 0, 1, 0,
                                                                                 data_deps=[0])])
    # the send arrives at 2 * 100 + 1000 = 1200 ns; the receive, posted at 2000, completes at once
    assert custom_rank_times(str(tmp_path / "q"), "sys: key", net, link) == (1200, 2000)


@pytest.mark.parametrize("keys, message", [
    ({"preferred-dataset-splits": 4}, "preferred-dataset-splits is 4: ASTRA-sim waits for that many streams"),
    ({"per-node-custom-implementation": "nodes.yml"}, "'per-node-custom-implementation': custom programs per "
                                                      "workload node are not modeled"),
])
def test_refused_settings_name_file_and_key(tmp_path, keys, message):
    with pytest.raises(LibraError) as e:
        _predict(tmp_path, CASES["ring program, Ring 8"], **keys)
    assert str(e.value).startswith(str(tmp_path / "system.json")) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_uneven_program_and_missing_files_refused(tmp_path):
    workload, network, system = TOOL.write_case(tmp_path, CASES["ring program, Ring 8"])
    data = json.loads(Path(system).read_text())
    for r in range(8):      # rank 0 sends to each rank in turn: ranks finish at different times
        nodes = ([cio.send_node(i, f"s{i}", 4096, 0, i + 1, 0, data_deps=[i - 1] if i else []) for i in range(7)]
                 if r == 0 else [cio.recv_node(0, "r", 4096, 0, r, 0)])
        cio.write_et(tmp_path / f"uneven.{r}.et", nodes)
    for prefix, message in ((str(tmp_path / "uneven"), "ranks that differ are not modeled"),
                            (str(tmp_path / "absent"), "no file")):
        Path(system).write_text(json.dumps({**data, "all-reduce-implementation-custom": [prefix]}))
        with pytest.raises(LibraError, match=f"^{system}: all-reduce-implementation-custom: .*{message}"):
            TOOL.predicted(workload, network, system, str(tmp_path))


def test_aware_backend_refused(tmp_path):
    workload, network, system = TOOL.write_case(tmp_path, CASES["ring program, Switch 8"])
    with pytest.raises(LibraError, match="congestion-unaware backend only"):
        predict_inputs(SimInputs(workload, network, system, backend="aware"))


@pytest.mark.skipif(not BIN, reason=NO_BIN)
@pytest.mark.parametrize("name", list(CASES))
def test_binary_equals_prediction(tmp_path, name):
    args = TOOL.write_case(tmp_path, CASES[name])
    sim = TOOL.run_binary(BIN, *args, str(tmp_path))
    assert len(sim) == 8 and TOOL.predicted(*args, str(tmp_path)) == sim


@pytest.mark.skipif(not (BIN and os.environ.get("ASTRA_SIM_EXAMPLES")),
                    reason=NO_BIN + ", and ASTRA_SIM_EXAMPLES to an ASTRA-sim checkout")
def test_astra_sim_example(tmp_path):
    ex = os.environ["ASTRA_SIM_EXAMPLES"]
    system = tmp_path / "custom_collective.json"
    system.write_text(json.dumps(TOOL.EXAMPLE_SYSTEM))
    args = (TOOL.EXAMPLE_WORKLOAD, TOOL.EXAMPLE_NETWORK, str(system))
    sim = TOOL.run_binary(BIN, *args, ex)
    assert set(sim.values()) == {(90174, 90174)} and TOOL.predicted(*args, ex) == sim
