"""Emitted inputs run by the real ASTRA-sim binary ($ASTRA_SIM_BIN); skipped without it."""

from __future__ import annotations

import json
import os

import pytest

from libra_astra.traces import chakra_io as cio
from libra_astra.astra import emit, simulate
from libra_astra.demand.types import Collective, Dag, Demand, RankClass, demand_to_dict, make_collective, single_class
from libra_astra.optimize.design import Design, WorkloadRef
from libra_astra.model.network import network_from_dict

BIN = os.environ.get("ASTRA_SIM_BIN", "")
pytestmark = [
    pytest.mark.astra,
    pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                       reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these"),
]
GB_PER_GIB = 2**30 / 1e9


def net_of(*dims):
    return network_from_dict({"name": "n", "dimensions": [
        {"name": f"d{i}", "topology": t, "npus": n, "latency_ns": lat} for i, (t, n, lat) in enumerate(dims)]})


def demand_design(tmp_path, net, bw_gbps, demand):
    p = tmp_path / "demand.json"
    p.write_text(json.dumps(demand_to_dict(demand)))
    return Design("d", net, tuple(bw_gbps), workloads=(WorkloadRef("w", demand=str(p)),))


# Reference values measured on Ring 4 x Switch 4, one 1 GiB all-reduce over both dimensions;
# bandwidths as ASTRA-sim reads them (GiB/s). Ideal: latency 0, endpoint-delay 1, local-mem-bw 1e9.
# Realistic: latency 500 / 700 ns, endpoint-delay 10, local-mem-bw 1600.
@pytest.mark.parametrize("gibps, realistic, k, expected_ms", [
    ((200, 50), False, 1, 15.000),
    ((200, 50), False, 4, 9.375),
    ((100, 100), False, 1, 18.750),
    ((100, 100), False, 4, 15.000),
    ((300, 25), False, 16, 15.313),
    ((200, 50), True, 1, 16.899),
    ((200, 50), True, 4, 10.167),
])
def test_reference_all_reduce_times(tmp_path, gibps, realistic, k, expected_ms):
    lat = (500.0, 700.0) if realistic else (0.0, 0.0)
    net = net_of(("Ring", 4, lat[0]), ("Switch", 4, lat[1]))
    demand = single_class("ar", [4, 4], 0.0, [make_collective("ALL_REDUCE", 2**30, [4, 4])])
    design = demand_design(tmp_path, net, [g * GB_PER_GIB for g in gibps], demand)
    emit(design, tmp_path / "run", splits=k, endpoint_delay_ns=10 if realistic else 1,
         local_mem_bw_gbps=1600.0 if realistic else 1e9)
    res = simulate(tmp_path / "run", BIN, timeout_s=120)
    assert len(res.ranks) == 16
    assert res.simulated_time_ns / 1e6 == pytest.approx(expected_ms, abs=0.0006)


def test_partial_dimension_group_is_simulated_on_its_own_logical_dimension(tmp_path):
    """TP groups of 4 on a ring of 8 at 100 GB/s: all-reduce of S bytes takes 2 S (3/4) / B."""
    size = 1 << 26
    groups = {1: list(range(4)), 2: list(range(4, 8))}
    gpath = tmp_path / "g.json"
    cio.write_comm_groups(gpath, groups)
    prefix = tmp_path / "job"
    for r in range(8):
        cio.write_et(f"{prefix}.{r}.et", [cio.coll_node(0, "tp", "ALL_REDUCE", size, pg_name="1" if r < 4 else "2"),
                                          cio.comp_node(1, "c", 10, data_deps=[0])])
    design = Design("d", net_of(("Ring", 8, 0.0)), (100.0,),
                    workloads=(WorkloadRef("job", traces=str(prefix), comm_groups=str(gpath)),))
    emit(design, tmp_path / "run")
    res = simulate(tmp_path / "run", BIN, timeout_s=120)
    expected_ns = 2 * size * 3 / 4 / 100.0 + 10_000
    assert res.simulated_time_ns == pytest.approx(expected_ns, abs=50)


def test_synthesized_dag_with_point_to_point_finishes_on_every_rank(tmp_path):
    net = net_of(("Ring", 4, 500.0), ("Switch", 2, 1000.0))
    ar = make_collective("ALL_REDUCE", 1 << 20, [4, 2], count=2)
    rs = make_collective("REDUCE_SCATTER", 1 << 20, [2, 1])
    p2p = Collective("P2P", 1 << 16, (1, 2), (0.0, float(1 << 16)), (0, 2), algorithm="p2p")
    dag = Dag((("comp", 5000.0), ("coll", 0), ("coll", 1), ("comp", 1000.0), ("coll", 2)),
              ((0, 1), (0, 2), (1, 3), (2, 3), (3, 4)))
    demand = Demand("x", (4, 2), (RankClass(6000.0, (ar, rs, p2p), dag=dag),))
    emit(demand_design(tmp_path, net, [100.0, 25.0], demand), tmp_path / "run", splits=2)
    res = simulate(tmp_path / "run", BIN, timeout_s=120)
    assert len(res.ranks) == 8 and min(res.finished_ns) > 6_000
    assert {r.gpu_time_ns for r in res.ranks} == {6_000}  # 5 us + 1 us of compute
