"""Network cost as a linear function of the per-dimension bandwidth.

Cost file (our own format, YAML)::

    name: paper-2021
    currency: USD
    unit_prices_usd_per_gbps:        # USD per GB/s of bandwidth, per cost class
      InterPackage: {link: 4.0, switch: 0.0, nic: 0.0}
      InterPod:     {link: 12.0, switch: 24.0, nic: 48.0}

Every NPU has B_d GB/s in dimension d. Ring(n) uses 2n links of B/2 per ring, FullyConnected(n)
n(n-1) links of B/(n-1) per block, a Switch one link of B per NPU: in all three the link
bandwidth adds up to N * B_d. A Switch dimension also pays switch ports and, where its class
has one, the NIC; Ring and FullyConnected pay the NIC of their class too (zero inside a package).
So cost(B) = N * sum_d B_d * price_d, linear in B.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import LibraError
from ..files import load_yaml
from .network import Network
from .numbers import check_number

PARTS = ("link", "switch", "nic")


@dataclass(frozen=True)
class UnitPrices:
    link_usd_per_gbps: float = 0.0
    switch_usd_per_gbps: float = 0.0
    nic_usd_per_gbps: float = 0.0


@dataclass(frozen=True)
class CostModel:
    name: str
    classes: Mapping[str, UnitPrices]
    currency: str = "USD"

    def price_usd_per_gbps(self, net: Network) -> tuple[float, ...]:
        """Cost of one GB/s per NPU in each dimension, times the NPU count: d cost / d B_d."""
        out = []
        npus = net.npus_count       # a product over the dimensions: once, not once per dimension
        for d in net.dims:
            if d.cost_class not in self.classes:
                raise LibraError(
                    f"cost model {self.name!r}: no unit prices for cost class {d.cost_class!r} of dimension "
                    f"{d.name!r}; add it under unit_prices_usd_per_gbps (known: {sorted(self.classes)})"
                )
            p = self.classes[d.cost_class]
            per_npu = p.link_usd_per_gbps + p.nic_usd_per_gbps
            if d.topology == "Switch":
                per_npu += p.switch_usd_per_gbps
            out.append(npus * per_npu)
        return tuple(out)

    def check_priced(self, net: Network, objective: str) -> None:
        """Cost-driven objectives need some price above 0; with none, every design costs 0."""
        if objective in ("perf-per-cost", "min-cost") and not any(p > 0 for p in self.price_usd_per_gbps(net)):
            raise LibraError(f"cost model {self.name!r}: every unit price of the network's cost classes is 0, so every "
                             f"design costs $0 and {objective} has no meaning; give prices, or use --objective perf")

    def network_cost_usd(self, net: Network, bw_gbps: Sequence[float]) -> float:
        return float(sum(p * b for p, b in zip(self.price_usd_per_gbps(net), bw_gbps)))


def unpriced(net: Network) -> CostModel:
    """No prices at all: every design costs $0 (for the time-only objective, when no cost file is given)."""
    return CostModel("unpriced", {d.cost_class: UnitPrices() for d in net.dims})


# A billion dollars per GB/s: far beyond any part, and keeps a design's cost and time x cost finite.
MAX_PRICE_USD_PER_GBPS = 1e9


def cost_from_dict(data: Any, source: str = "<cost>") -> CostModel:
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a mapping with 'unit_prices_usd_per_gbps'")
    unknown = set(data) - {"name", "currency", "description", "unit_prices_usd_per_gbps"}
    if unknown:
        raise LibraError(f"{source}: unknown key(s) {sorted(unknown)}; allowed: name, currency, description, unit_prices_usd_per_gbps")
    raw = data.get("unit_prices_usd_per_gbps")
    if not isinstance(raw, Mapping) or not raw:
        raise LibraError(f"{source}: 'unit_prices_usd_per_gbps' must map cost classes to {{link, switch, nic}} prices")
    classes = {}
    for cls, prices in raw.items():
        where = f"{source}: unit_prices_usd_per_gbps.{cls}"
        if not isinstance(prices, Mapping):
            raise LibraError(f"{where}: expected a mapping with link, switch, nic")
        bad = set(prices) - set(PARTS)
        if bad:
            raise LibraError(f"{where}: unknown part(s) {sorted(bad)}; allowed: {list(PARTS)}")
        vals = []
        for part in PARTS:
            vals.append(check_number(prices.get(part, 0.0), f"{where}.{part}", minimum=0, finite=True,
                                     maximum=MAX_PRICE_USD_PER_GBPS, note=" (USD per GB/s)"))
        classes[str(cls)] = UnitPrices(*vals)
    return CostModel(str(data.get("name", Path(source).stem)), classes, str(data.get("currency", "USD")))


def load_cost(path: str | Path) -> CostModel:
    return cost_from_dict(load_yaml(path, "cost"), str(path))
