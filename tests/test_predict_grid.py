"""tools/predict_grid.py and what its grid found: ``predict`` against ASTRA-sim's congestion-unaware
binary over a covering design of system settings, collectives and networks.

tests/fixtures/predict_grid_recorded.json was recorded by ``tools/predict_grid.py --size triples
--seed 1 --record ...`` from the binary (518bd51): small grid cases with every file inline (the ET
files as hex, written by chakra_io with mlc-chakra's schema) and the binary's ``finished`` lines,
or how it failed. Tests that run the binary are skipped without $ASTRA_SIM_BIN.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from pathlib import Path

import pytest

from libra_astra.astra.parse import parse_output
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs
from libra_astra.errors import LibraError
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
