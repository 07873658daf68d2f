"""Energy of a training step, average and peak power, for any design (docs/energy.md).

During a step of T ns every NPU draws its idle power and its node's rest all the time, and its
active power above idle while it computes; every dimension's links draw their idle power all the
time and their transferring power above idle while they move bytes. A dimension moving b bytes
per NPU at B GB/s is busy b / B ns, and draws (active - idle) x B W above idle meanwhile, so the
energy above idle is (active - idle) x b: the bandwidth cancels, and *when* a dimension transfers
(overlap, order: what the dependency replay decides) does not change the energy. So::

    E(B) = (base + idle . B) x T(B) + K        (W x ns = nJ; reported in J)

base (W): NPUs idle + rest of node + constant switch power; idle (W per GB/s): the fabric's idle
draw per dimension; K (J): compute above idle + bytes x (active - idle) per byte. Over weighted
workloads T is the weighted time and K the weighted sum, as for the time objective.

Peak power assumes everything draws its active power at once (every NPU computing, every
dimension transferring): the envelope a site must provision, linear in B as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Sequence

import numpy as np

from ..demand.workload import Workload
from ..errors import LibraError
from ..model.network import Network
from ..model.power import PowerModel
from ..timing.rows import column

J_PER_NJ = 1e-9
POWER_SCOPES = ("cluster", "fabric", "cluster-per-npu", "fabric-per-npu")


@dataclass(frozen=True)
class Affine:
    """offset + per_gbps . B, in the unit the caller names (W here)."""

    offset: float
    per_gbps: tuple[float, ...]

    def at(self, bw_gbps: Sequence[float]) -> float:
        return float(self.offset + sum(p * b for p, b in zip(self.per_gbps, bw_gbps)))


@dataclass(frozen=True)
class EnergyRate:
    """E(B) = rate(B) x T(B) x 1e-9 + const_j, J per step (T in ns, rate in W)."""

    rate_w: Affine
    const_j: float
    compute_above_idle_j: float
    transfer_above_idle_j: tuple[float, ...]    # per dimension

    def energy_j(self, bw_gbps: Sequence[float], time_ns: float) -> float:
        return self.rate_w.at(bw_gbps) * time_ns * J_PER_NJ + self.const_j


def bytes_per_dim(workloads: Sequence[Workload], num_dims: int) -> np.ndarray:
    """Bytes sent in each dimension by all NPUs in one step, weighted over workloads."""
    out = np.zeros(num_dims)
    for w in workloads:
        for rc in w.demand.rank_classes:
            n = len(rc.collectives)
            if n:
                counts = np.fromiter(map(attrgetter("count"), rc.collectives), float, count=n)
                out += w.weight * rc.num_ranks * (counts @ column(rc.collectives, "traffic_bytes", float, num_dims))
    return out


def energy_rate(workloads: Sequence[Workload], net: Network, power: PowerModel) -> EnergyRate:
    N = net.npus_count
    npu = power.npu
    base = N * (npu.idle_w + npu.rest_of_node_w) + power.switch_constant_w(net)
    compute_ns = sum(w.weight * rc.num_ranks * rc.compute_time_ns for w in workloads for rc in w.demand.rank_classes)
    compute_j = (npu.active_w - npu.idle_w) * compute_ns * J_PER_NJ
    transfer = tuple(float(j) for j in bytes_per_dim(workloads, net.num_dims) * np.array(power.transfer_j_per_byte(net)))
    return EnergyRate(Affine(base, power.idle_w_per_gbps(net)), compute_j + sum(transfer), compute_j, transfer)


def peak_power(net: Network, power: PowerModel, scope: str = "cluster") -> Affine:
    """Peak power in W (everything active at once) of the cluster or the fabric, in total or per NPU."""
    if scope not in POWER_SCOPES:
        raise LibraError(f"unknown power scope {scope!r}; use one of {list(POWER_SCOPES)}")
    offset = power.switch_constant_w(net)
    if scope.startswith("cluster"):
        offset += net.npus_count * (power.npu.active_w + power.npu.rest_of_node_w)
    per = power.active_w_per_gbps(net)
    if scope.endswith("per-npu"):
        n = net.npus_count
        return Affine(offset / n, tuple(p / n for p in per))
    return Affine(offset, per)


@dataclass(frozen=True)
class EnergyReport:
    """Where the energy of one step goes (J), average and peak power (W), per sample and token."""

    time_ns: float
    energy_j: float
    parts_j: tuple[tuple[str, float], ...]      # (name, J): NPUs, rest of node, switches, each dimension
    average_power_w: float
    peak_fabric_power_w: float
    peak_cluster_power_w: float
    j_per_sample: float | None = None
    j_per_token: float | None = None

    def to_dict(self) -> dict:
        return {"time_ns": self.time_ns, "energy_j": self.energy_j, "parts_j": dict(self.parts_j),
                "average_power_w": self.average_power_w, "peak_fabric_power_w": self.peak_fabric_power_w,
                "peak_cluster_power_w": self.peak_cluster_power_w, "j_per_sample": self.j_per_sample,
                "j_per_token": self.j_per_token}


def energy_report(workloads: Sequence[Workload], net: Network, power: PowerModel, bw_gbps: Sequence[float],
                  time_ns: float, samples_per_step: float | None = None,
                  tokens_per_step: float | None = None) -> EnergyReport:
    """The energy of a step of ``time_ns`` (the weighted time of an Evaluation) at ``bw_gbps``."""
    rate = energy_rate(workloads, net, power)
    N, npu, s = net.npus_count, power.npu, time_ns * J_PER_NJ
    idle = power.idle_w_per_gbps(net)
    parts = [("NPU compute above idle", rate.compute_above_idle_j), ("NPU idle", N * npu.idle_w * s),
             ("rest of node", N * npu.rest_of_node_w * s), ("switches (constant)", power.switch_constant_w(net) * s)]
    for d, i, b, t in zip(net.dims, idle, bw_gbps, rate.transfer_above_idle_j):
        parts.append((f"{d.name} idle links", i * b * s))
        parts.append((f"{d.name} transfers above idle", t))
    energy = rate.energy_j(bw_gbps, time_ns)
    avg = energy / s if s > 0 else 0.0
    per = (lambda n: energy / n if n else None)
    return EnergyReport(time_ns, energy, tuple(parts), avg, peak_power(net, power, "fabric").at(bw_gbps),
                        peak_power(net, power, "cluster").at(bw_gbps), per(samples_per_step), per(tokens_per_step))


def power_constraint(net: Network, power: PowerModel, max_w: float, scope: str = "cluster"):
    """--power-max as a linear constraint on B: peak power of ``scope`` <= max_w (W)."""
    from .constraints import LinearConstraint

    peak = peak_power(net, power, scope)
    unit = "W per NPU" if scope.endswith("per-npu") else "W"
    return LinearConstraint(peak.per_gbps, "<=", max_w - peak.offset, f"--power-max {max_w:g} {unit} ({scope})")
