"""Total cost of ownership of a training run: capital amortized over the cluster's lifetime plus
electricity (docs/energy.md).

A run of S steps occupies the cluster for S x T(B) seconds. Its share of the capital is that
time over the cluster's lifetime L (s) times the capital: the network (cost model, linear in B),
the NPUs with their nodes (``npu_usd`` each) and the provisioned power (``usd_per_provisioned_w``
times the peak cluster power, linear in B). Its electricity is S x E(B) at ``usd_per_kwh``.
With E(B) = (base + idle . B) T(B) + K (energy.py)::

    TCO(B) = S x [ T(B) x M(B) + price_J x K ]
    M(B)   = (capital(B)) / L + price_J x (base + idle . B)        USD per second, affine in B

so TCO has the form T(B) x (offset + per . B) + constant, solved exactly like perf-per-cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..demand.workload import Workload
from ..errors import LibraError
from ..model.cost import CostModel
from ..model.network import Network
from ..model.power import PowerModel
from .energy import Affine, energy_rate, peak_power

J_PER_KWH = 3.6e6
S_PER_YEAR = 365.25 * 24 * 3600.0
S_PER_NS = 1e-9


@dataclass(frozen=True)
class TcoSettings:
    usd_per_kwh: float
    lifetime_years: float
    run_steps: float = 1.0
    usd_per_provisioned_w: float = 0.0
    npu_usd: float = 0.0

    def check(self) -> None:
        for name, v, strict in (("--electricity-usd-per-kwh", self.usd_per_kwh, False),
                                ("--lifetime-years", self.lifetime_years, True), ("--run-steps", self.run_steps, True),
                                ("--usd-per-provisioned-w", self.usd_per_provisioned_w, False),
                                ("--npu-usd", self.npu_usd, False)):
            if not (v > 0 if strict else v >= 0):
                raise LibraError(f"{name} must be {'>' if strict else '>='} 0, got {v:g}")


@dataclass(frozen=True)
class TcoRate:
    """TCO of the run (USD) = run_steps x (rate(B) [USD/s] x T(B) [s] + const_usd)."""

    rate_usd_per_s: Affine
    const_usd: float          # per step: electricity of the energy that does not depend on B
    run_steps: float

    def tco_usd(self, bw_gbps: Sequence[float], time_ns: float) -> float:
        return self.run_steps * (self.rate_usd_per_s.at(bw_gbps) * time_ns * S_PER_NS + self.const_usd)


def tco_rate(workloads: Sequence[Workload], net: Network, cost: CostModel, power: PowerModel,
             settings: TcoSettings) -> TcoRate:
    settings.check()
    L = settings.lifetime_years * S_PER_YEAR
    usd_per_j = settings.usd_per_kwh / J_PER_KWH
    e = energy_rate(workloads, net, power)
    peak = peak_power(net, power, "cluster")
    prices = cost.price_usd_per_gbps(net)
    offset = (net.npus_count * settings.npu_usd + settings.usd_per_provisioned_w * peak.offset) / L \
        + usd_per_j * e.rate_w.offset
    per = tuple((p + settings.usd_per_provisioned_w * q) / L + usd_per_j * i
                for p, q, i in zip(prices, peak.per_gbps, e.rate_w.per_gbps))
    return TcoRate(Affine(offset, per), usd_per_j * e.const_j, settings.run_steps)


def tco_parts(workloads: Sequence[Workload], net: Network, cost: CostModel, power: PowerModel,
              settings: TcoSettings, bw_gbps: Sequence[float], time_ns: float) -> dict:
    """The run's TCO (USD) split into its capital shares and electricity, with the run's time (s)."""
    L = settings.lifetime_years * S_PER_YEAR
    run_s = settings.run_steps * time_ns * S_PER_NS
    share = run_s / L
    energy_j = energy_rate(workloads, net, power).energy_j(bw_gbps, time_ns) * settings.run_steps
    parts = {"network capital share": cost.network_cost_usd(net, bw_gbps) * share,
             "NPU capital share": net.npus_count * settings.npu_usd * share,
             "provisioned power share": settings.usd_per_provisioned_w * peak_power(net, power).at(bw_gbps) * share,
             "electricity": energy_j * settings.usd_per_kwh / J_PER_KWH}
    return {"tco_usd": sum(parts.values()), "parts_usd": parts, "run_s": run_s, "run_steps": settings.run_steps,
            "run_energy_kwh": energy_j / J_PER_KWH, "lifetime_years": settings.lifetime_years,
            "usd_per_kwh": settings.usd_per_kwh}
