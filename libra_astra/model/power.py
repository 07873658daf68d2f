"""Power of the NPUs and of each network dimension, linear in the bandwidths like the cost.

Power file (our own format, YAML; docs/energy.md)::

    name: h100-style
    npu: {preset: H100}                  # or active_w, idle_w, rest_of_node_w (W per NPU)
    classes:                             # per cost class of the network file
      InterNode: {preset: nvlink4-nvswitch3}
      InterPod:                          # explicit figures (any key missing is 0)
        link_pj_per_bit: 100             # energy per bit sent through the class, while transferring
        link_idle_w_per_gbps: 0.64       # W per GB/s of provisioned per-NPU bandwidth, drawn when idle
        nic_pj_per_bit: 60
        nic_idle_w_per_gbps: 0.48
        switch_pj_per_bit: 10            # switch parts count in Switch dimensions only
        switch_idle_w_per_gbps: 0.064
        switch_w: 0                      # W per switch, constant (chassis, fans, management)
        port_w: 0                        # W per switch port, constant

A preset's figures (power_presets.py) can be overridden key by key. Each part of a class draws
``pj_per_bit x 0.008`` W per GB/s while its dimension transfers and ``idle_w_per_gbps`` W per GB/s
otherwise; every NPU has B_d GB/s in dimension d, so a dimension's links add up to N x B_d GB/s
(as in cost.py) and the fabric's idle power is N x sum_d idle_d x B_d: linear in B. A Switch
dimension of n NPUs per block has N / n switches of n ports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from ..errors import LibraError
from ..files import load_yaml
from .network import Network
from .numbers import check_number
from .power_presets import LINK_PRESETS, NPU_PRESETS, W_PER_GBPS_PER_PJ_PER_BIT

# Far beyond any part: keeps energies of long runs finite.
MAX_W = 1e9
MAX_PJ_PER_BIT = 1e6


@dataclass(frozen=True)
class NpuPower:
    """W per NPU: while computing, otherwise, and the rest of its node all the time."""

    active_w: float = 0.0
    idle_w: float = 0.0
    rest_of_node_w: float = 0.0


@dataclass(frozen=True)
class ClassPower:
    """Power figures of one cost class (units in the names; see the module docstring)."""

    link_pj_per_bit: float = 0.0
    link_idle_w_per_gbps: float = 0.0
    nic_pj_per_bit: float = 0.0
    nic_idle_w_per_gbps: float = 0.0
    switch_pj_per_bit: float = 0.0
    switch_idle_w_per_gbps: float = 0.0
    switch_w: float = 0.0
    port_w: float = 0.0


CLASS_KEYS = tuple(f.name for f in fields(ClassPower))
NPU_KEYS = tuple(f.name for f in fields(NpuPower))


@dataclass(frozen=True)
class PowerModel:
    name: str
    npu: NpuPower
    classes: Mapping[str, ClassPower]
    source: str = "<power>"

    def _class(self, net: Network, j: int) -> tuple[ClassPower, bool]:
        d = net.dims[j]
        if d.cost_class not in self.classes:
            raise LibraError(f"{self.source}: classes.{d.cost_class or '(none)'}: no power figures for the cost class of "
                             f"dimension {d.name!r}; add it under classes (known: {sorted(self.classes)})")
        return self.classes[d.cost_class], d.topology == "Switch"

    def idle_w_per_gbps(self, net: Network) -> tuple[float, ...]:
        """d (fabric power when idle) / d B_d, W per GB/s of per-NPU bandwidth, whole network."""
        out = []
        for j in range(net.num_dims):
            p, switch = self._class(net, j)
            per_npu = p.link_idle_w_per_gbps + p.nic_idle_w_per_gbps + (p.switch_idle_w_per_gbps if switch else 0.0)
            out.append(net.npus_count * per_npu)
        return tuple(out)

    def active_w_per_gbps(self, net: Network) -> tuple[float, ...]:
        """d (fabric power while every dimension transfers) / d B_d, W per GB/s, whole network."""
        out = []
        for j in range(net.num_dims):
            p, switch = self._class(net, j)
            pj = p.link_pj_per_bit + p.nic_pj_per_bit + (p.switch_pj_per_bit if switch else 0.0)
            out.append(net.npus_count * pj * W_PER_GBPS_PER_PJ_PER_BIT)
        return tuple(out)

    def transfer_j_per_byte(self, net: Network) -> tuple[float, ...]:
        """Energy of a byte sent by an NPU in each dimension above what the idle links draw
        meanwhile, J per byte: (active - idle) W per GB/s per NPU, times 1e-9 GB per byte."""
        active, idle, n = self.active_w_per_gbps(net), self.idle_w_per_gbps(net), net.npus_count
        return tuple((a - i) / n * 1e-9 for a, i in zip(active, idle))

    def switch_constant_w(self, net: Network) -> float:
        """W of the switches that does not scale with bandwidth: per switch and per port."""
        total = 0.0
        for j, d in enumerate(net.dims):
            p, switch = self._class(net, j)
            if switch:
                total += p.switch_w * (net.npus_count // d.npus) + p.port_w * net.npus_count
        return total

    def check(self, net: Network) -> None:
        """Every cost class of the network has figures (the first missing one is named)."""
        for j in range(net.num_dims):
            self._class(net, j)


def _numbers(raw: Mapping, keys: tuple[str, ...], where: str) -> dict[str, float]:
    out = {}
    for key in keys:
        if key in raw:
            top = MAX_PJ_PER_BIT if key.endswith("pj_per_bit") else MAX_W
            out[key] = check_number(raw[key], f"{where}.{key}", minimum=0, finite=True, maximum=top,
                                    note=" (" + ("pJ per bit" if key.endswith("pj_per_bit") else
                                                 "W per GB/s" if key.endswith("per_gbps") else "W") + ")")
    return out


def _preset(raw: Mapping, table: Mapping[str, Mapping[str, float]], where: str) -> dict[str, float]:
    if "preset" not in raw:
        return {}
    name = raw["preset"]
    if not isinstance(name, str) or name not in table:
        raise LibraError(f"{where}.preset: unknown preset {name!r}; known: {sorted(table)}")
    return dict(table[name])


def _entry(raw: Any, keys: tuple[str, ...], table: Mapping, where: str, required: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise LibraError(f"{where}: expected a mapping with preset or {', '.join(keys)}")
    bad = set(raw) - set(keys) - {"preset"}
    if bad:
        raise LibraError(f"{where}: unknown key(s) {sorted(bad)}; allowed: preset, {', '.join(keys)}")
    vals = {**_preset(raw, table, where), **_numbers(raw, keys, where)}
    for key in required:
        if key not in vals:
            raise LibraError(f"{where}.{key}: missing; give it (or a preset: {sorted(table)})")
    return vals


def power_from_dict(data: Any, source: str = "<power>") -> PowerModel:
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a mapping with 'npu' and 'classes'")
    unknown = set(data) - {"name", "description", "npu", "classes"}
    if unknown:
        raise LibraError(f"{source}: unknown key(s) {sorted(unknown)}; allowed: name, description, npu, classes")
    if "npu" not in data:
        raise LibraError(f"{source}: npu: missing; give active_w, idle_w (W per NPU) or a preset {sorted(NPU_PRESETS)}")
    npu = NpuPower(**_entry(data["npu"], NPU_KEYS, NPU_PRESETS, f"{source}: npu", ("active_w", "idle_w")))
    if npu.active_w < npu.idle_w:
        raise LibraError(f"{source}: npu.active_w: {npu.active_w:g} W is below idle_w {npu.idle_w:g} W; an NPU "
                         "cannot draw less while it computes")
    raw = data.get("classes")
    if not isinstance(raw, Mapping) or not raw:
        raise LibraError(f"{source}: classes: must map cost classes to power figures (a preset or "
                         f"link_pj_per_bit, link_idle_w_per_gbps, ...)")
    classes = {}
    for cls, entry in raw.items():
        where = f"{source}: classes.{cls}"
        p = ClassPower(**_entry(entry, CLASS_KEYS, LINK_PRESETS, where, ("link_pj_per_bit", "link_idle_w_per_gbps")))
        for part in ("link", "nic", "switch"):
            active = getattr(p, f"{part}_pj_per_bit") * W_PER_GBPS_PER_PJ_PER_BIT
            idle = getattr(p, f"{part}_idle_w_per_gbps")
            if idle > active * (1 + 1e-12):
                raise LibraError(f"{where}.{part}_idle_w_per_gbps: {idle:g} W per GB/s is above the "
                                 f"{active:g} W per GB/s that {part}_pj_per_bit gives while transferring; a link "
                                 "cannot draw less while it transfers")
        classes[str(cls)] = p
    return PowerModel(str(data.get("name", Path(source).stem)), npu, classes, source)


def load_power(path: str | Path) -> PowerModel:
    return power_from_dict(load_yaml(path, "power"), str(path))
