"""A calibration written out: the network files, the system.json, and a trace set of the measured
collectives with which ASTRA-sim itself can be checked against the measurement.

    DIR/network.yml          the input network with each calibrated dimension's latency (libra_astra format)
    DIR/astra-network.yml    ASTRA-sim's analytical network: calibrated latency and bandwidth (GiB/s)
    DIR/system.json          the implementations and settings the fit chose
    DIR/memory.json          {"memory-type": "NO_MEMORY_EXPANSION"}
    DIR/check/collectives.RANK.et   the collectives the fit used, in issue order, one after the other (not the sends)
    DIR/calibration.json     fits, residuals, held-out errors, the check's expected times

ASTRA-sim run on ``check/collectives`` with these files finishes each rank at the time
``calibration.json`` names under ``check_trace`` (ASTRA-sim's own timing of the chain), to be
set against the sum of the measured transfers beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import LibraError
from ..files import write_json_atomic, write_text_atomic
from ..model.network import dump_network
from ..timing.astra_collective import Coll, Link, rank_finish_ns
from ..model.collectives import P2P
from ..traces import chakra_io as cio
from .calibrate import Calibration, astra_network_yaml, calibration_to_dict, system_json

CHECK_PREFIX = "check/collectives"


def chained(c: Calibration) -> list:
    """The check rows the check trace set chains: the collectives (a send is fitted, not chained)."""
    return [r for r in c.checks if r.kind != P2P]


def check_chain(c: Calibration) -> tuple[list[Coll], tuple[int, ...]]:
    """The checked collectives as ASTRA-sim nodes, and ASTRA-sim's finish time of each rank."""
    names = c.network.dim_names
    colls = [Coll(r.kind, r.size_bytes, tuple(n == r.dim for n in names)) for r in chained(c)]
    links = [Link(d.topology, d.npus, bw, d.latency_ns) for d, bw in zip(c.network.dims, c.bw_gbps)]
    return colls, rank_finish_ns(colls, links, c.settings)


def write_calibration(c: Calibration, out_dir: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """Write DIR (module docstring); returns calibration.json's content."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise LibraError(f"{out}: exists and is not a directory; name a directory for the calibration")
    if (out / "calibration.json").exists() and not overwrite:
        raise LibraError(f"{out}: holds a calibration already; give --force to replace it or name another directory")
    astra_net = astra_network_yaml(c)
    content = calibration_to_dict(c)
    (out / "check").mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "network.yml", dump_network(c.network), overwrite)
    write_json_atomic(out / "system.json", system_json(c), overwrite)
    write_json_atomic(out / "memory.json", {"memory-type": "NO_MEMORY_EXPANSION"}, overwrite)
    if astra_net is not None:
        write_text_atomic(out / "astra-network.yml", astra_net, overwrite)
        colls, finish = check_chain(c)
        for r in range(c.network.npus_count):
            nodes = [cio.coll_node(i, f"measured_{row.index}_{row.kind.lower()}", row.kind, row.size_bytes,
                                   involved_dim=list(coll.involved), ctrl_deps=[i - 1] if i else [])
                     for i, (row, coll) in enumerate(zip(chained(c), colls))]
            cio.write_et(out / f"{CHECK_PREFIX}.{r}.et", nodes, overwrite=True)
        content["check_trace"] = {"prefix": CHECK_PREFIX, "astra_finish_ns": list(finish),
                                  "measured_transfer_sum_ns": sum(r.measured_ns for r in chained(c))}
    write_text_atomic(out / "calibration.json", json.dumps(content, indent=1) + "\n", overwrite)
    return content
