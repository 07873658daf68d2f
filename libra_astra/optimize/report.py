"""What a result is made of: per-workload times and compute / exposed communication per dimension.

The optimizer reports one number, the weighted sum over workloads of each workload's slowest
rank class. These helpers take it apart for the tables, ``show`` and the pictures:

- :func:`workload_times`: each workload's own time at a bandwidth split (weight 1), so a result
  for several workloads says what each of them takes;
- :func:`time_breakdown`: compute and exposed communication of the slowest rank class, the
  communication attributed to the dimensions. A collective's time is shared among the dimensions
  it crosses in proportion to their transfer times traffic_d / B_d (the pipelined model's stages
  overlap, so the split is an attribution, not a measurement); with overlap only the exposed part
  (time minus compute) is shared out.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..demand.workload import Workload
from ..model.network import Network
from ..timing.model import TimeModel, collective_times_ns, demand_time
from ..timing.predict import predict


def workload_times(workloads: Sequence[Workload], net: Network, bw_gbps: Sequence[float],
                   model: TimeModel) -> list[dict[str, Any]]:
    """Per workload: name, weight, time_ns, compute_ns, communication_ns (unweighted)."""
    out = []
    for w in workloads:
        total, ci = _slowest(w, net, bw_gbps, model)
        comp = w.demand.rank_classes[ci].compute_time_ns
        out.append({"name": w.name, "weight": w.weight, "time_ns": total, "compute_ns": comp,
                    "communication_ns": total - comp})
    return out


def _slowest(w: Workload, net: Network, bw_gbps: Sequence[float], model: TimeModel) -> tuple[float, int]:
    if model.overlap:
        p = predict(w.demand, bw_gbps, net, model)
        ci = max(range(len(p.class_times_ns)), key=p.class_times_ns.__getitem__)
        return p.time_ns, ci
    br = demand_time(w.demand, bw_gbps, net, model)
    return br.total_ns, br.slowest_class


def time_breakdown(workloads: Sequence[Workload], net: Network, bw_gbps: Sequence[float],
                   model: TimeModel) -> dict[str, Any]:
    """Weighted over workloads: compute_ns, exposed_communication_ns per dimension and cpu_and_idle_ns
    (time exposed beyond the collectives, e.g. CPU ops); they sum to the time."""
    bw = np.asarray(bw_gbps, dtype=float)
    eff = np.ones(net.num_dims) if model.efficiency is None else np.asarray(model.efficiency, dtype=float)
    with np.errstate(divide="ignore"):
        inv = np.where(bw > 0, 1.0 / (bw * eff), 0.0)
    compute = other = 0.0
    by_dim = np.zeros(net.num_dims)
    for w in workloads:
        total, ci = _slowest(w, net, bw_gbps, model)
        rc = w.demand.rank_classes[ci]
        compute += w.weight * rc.compute_time_ns
        exposed = total - rc.compute_time_ns
        share = np.zeros(net.num_dims)
        if rc.collectives:
            times = collective_times_ns(rc, bw_gbps, net, model)
            for c, t in zip(rc.collectives, times):
                stage = np.asarray(c.traffic_bytes, dtype=float) * inv
                if stage.sum() > 0 and np.isfinite(t):
                    share += c.count * t * stage / stage.sum()
        # What is exposed beyond the collectives' own time is CPU-op time or waiting (the real
        # PyTorch traces' CPU ops): not the network's, so not shared out to the dimensions.
        comm = min(exposed, float(share.sum())) if exposed > 0 else 0.0
        if share.sum() > 0 and comm > 0:
            by_dim += w.weight * comm * share / share.sum()
        other += w.weight * max(exposed - comm, 0.0)
    return {"compute_ns": compute, "exposed_communication_ns": [float(x) for x in by_dim],
            "cpu_and_idle_ns": other, "time_ns": compute + float(by_dim.sum()) + other}


def traffic_by_type(demand) -> dict[str, list[float]]:
    """Bytes each NPU sends per dimension, by collective type (mean over ranks), from a demand."""
    out: dict[str, np.ndarray] = {}
    ranks = sum(rc.num_ranks for rc in demand.rank_classes) or 1
    for rc in demand.rank_classes:
        for c in rc.collectives:
            acc = out.setdefault(c.type, np.zeros(len(demand.npus_per_dim)))
            acc += rc.num_ranks * c.count * np.asarray(c.traffic_bytes, dtype=float) / ranks
    return {k: [float(x) for x in v] for k, v in sorted(out.items())}
