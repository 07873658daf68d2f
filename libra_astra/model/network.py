"""Multi-dimensional networks: dimensions, NPU id <-> coordinates, and the network YAML file.

Network file (our own format, YAML)::

    name: paper-3d
    dimensions:
      - name: package            # unique; used in constraints (bw[package])
        topology: Ring           # Ring | FullyConnected | Switch (ASTRA-sim's names)
        npus: 16
        latency_ns: 500          # per hop
        cost_class: InterPackage # key into the cost model's unit prices
        bw_min_gbps: 10          # optional bounds on the per-NPU bandwidth of this dimension
        bw_max_gbps: 400

ASTRA-sim's own analytical network YAML (``topology``, ``npus_count``, ``latency``, ``bandwidth``
lists, one entry per dimension) is read too: dimensions ``dim0``, ``dim1``, ..., no bounds, and the
cost classes of ``DEFAULT_COST_CLASSES`` by level (``with_cost_classes`` sets others); its
``bandwidth`` is what is being optimized, so it is ignored.

NPU ids and coordinates: see grid.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from ..errors import LibraError
from ..files import load_yaml
from .grid import Grid
from .numbers import check_number

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_DIM_KEYS = {"name", "topology", "npus", "latency_ns", "cost_class", "bw_min_gbps", "bw_max_gbps"}
# Far above any machine's dimension; keeps ring steps, hops and participants in 64-bit integers.
MAX_DIM_NPUS = 1 << 20
# An exabyte per second per NPU: far beyond any link, and keeps designs' costs and times finite.
MAX_BW_GBPS = 1e9
# A kilobyte per second per NPU: far below any link; the largest demand (1e21 bytes) still takes
# a finite time over it.
MIN_TOTAL_BW_GBPS = 1e-6
# A thousand seconds per hop: far beyond any network, and times stay finite over a billion hops.
MAX_LATENCY_NS = 1e12


@dataclass(frozen=True)
class Dimension:
    """One network dimension. Bandwidths are GB/s per NPU (1 GB/s = 1 byte/ns)."""

    name: str
    topology: str
    npus: int
    latency_ns: float = 0.0
    cost_class: str = ""
    bw_min_gbps: float = 0.0
    bw_max_gbps: float | None = None

    @property
    def step_hops(self) -> int:
        """Hops between ring neighbours: one link, except through a switch (up and down)."""
        return 2 if self.topology == "Switch" else 1

    def hops(self, a: int, b: int) -> int:
        """Hops between coordinates a and b in this dimension, as ASTRA-sim charges them."""
        if a == b:
            return 0
        if self.topology == "Ring":
            d = abs(a - b)
            return min(d, self.npus - d)
        return self.step_hops

    def hops_array(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """:meth:`hops` of many coordinate pairs at once."""
        if self.topology == "Ring":
            d = np.abs(a - b)
            return np.minimum(d, self.npus - d)
        return np.where(a != b, self.step_hops, 0)


def placeholder_dim_names(num_dims: int) -> tuple[str, ...]:
    """``dim0``, ``dim1``, ...: what a dimension is called when its file gives it no name (an
    ASTRA-sim network file, a dimension without ``name``). Such names say no more than the index."""
    return tuple(f"dim{i}" for i in range(num_dims))


@dataclass(frozen=True)
class Network(Grid):
    name: str
    dims: tuple[Dimension, ...]

    def _where(self) -> str:
        return f"network {self.name!r}: "

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def dim_index(self, name_or_index: str | int) -> int:
        """Index of a dimension given by name or index; raises LibraError if unknown."""
        if isinstance(name_or_index, int) or str(name_or_index).isdigit():
            i = int(name_or_index)
            if 0 <= i < self.num_dims:
                return i
        else:
            for i, d in enumerate(self.dims):
                if d.name == name_or_index:
                    return i
        raise LibraError(
            f"network {self.name!r}: no dimension {name_or_index!r}; "
            f"use an index 0..{self.num_dims - 1} or one of {list(self.dim_names)}"
        )

    def to_dict(self) -> dict[str, Any]:
        dims = []
        for d in self.dims:
            item: dict[str, Any] = {
                "name": d.name,
                "topology": d.topology,
                "npus": d.npus,
                "latency_ns": d.latency_ns,
                "cost_class": d.cost_class,
            }
            if d.bw_min_gbps:
                item["bw_min_gbps"] = d.bw_min_gbps
            if d.bw_max_gbps is not None:
                item["bw_max_gbps"] = d.bw_max_gbps
            dims.append(item)
        return {"name": self.name, "dimensions": dims}


_ASTRA_KEYS = ("topology", "npus_count", "latency", "bandwidth")
# The cost class of each dimension of an ASTRA-sim network file, which names none: the
# outermost dimension is a pod's, the one inside it a node's, then package and chiplet (the
# levels of network_configs/cost.yml and of the LIBRA paper's networks).
DEFAULT_COST_CLASSES = ("InterChiplet", "InterPackage", "InterNode", "InterPod")


def default_cost_classes(num_dims: int) -> tuple[str, ...]:
    """Innermost first: 1 dimension: InterNode; 2: InterNode, InterPod; 3: InterPackage, ...;
    beyond 4 the innermost ones repeat InterChiplet."""
    if num_dims == 1:
        return ("InterNode",)
    levels = DEFAULT_COST_CLASSES[-num_dims:] if num_dims <= 4 else DEFAULT_COST_CLASSES
    return ("InterChiplet",) * (num_dims - len(levels)) + tuple(levels)


def with_cost_classes(net: "Network", classes: Sequence[str], source: str = "--cost-classes") -> "Network":
    """``net`` with one cost class per dimension, innermost first."""
    if len(classes) != net.num_dims or not all(isinstance(c, str) and c for c in classes):
        raise LibraError(f"{source}: give one cost class per dimension of network {net.name!r} ({net.num_dims}), "
                         f"innermost first, e.g. {','.join(default_cost_classes(net.num_dims))}; got {list(classes)}")
    return Network(net.name, tuple(replace(d, cost_class=c) for d, c in zip(net.dims, classes)))


def _from_astra_sim(data: Mapping, source: str) -> Network:
    """An ASTRA-sim analytical network file, as its simulator reads it (see the module docstring)."""
    where = f"{source} (ASTRA-sim network)"
    unknown = set(data) - set(_ASTRA_KEYS)
    if unknown:
        raise LibraError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {list(_ASTRA_KEYS)}")
    lists = {}
    for key in _ASTRA_KEYS:
        v = data.get(key, [])
        if not isinstance(v, list) or (not v and key != "bandwidth"):
            raise LibraError(f"{where}: '{key}' must be a non-empty list with one entry per dimension, got {v!r}")
        lists[key] = v
    n = len(lists["npus_count"])
    for key, v in lists.items():
        if v and len(v) != n:
            raise LibraError(f"{where}: '{key}' has {len(v)} entries but 'npus_count' has {n}; give one per dimension")
    return network_from_dict({"name": Path(source).stem, "dimensions": [
        {"name": name, "topology": t, "npus": c, "latency_ns": lat, "cost_class": cls} for name, t, c, lat, cls in
        zip(placeholder_dim_names(n), lists["topology"], lists["npus_count"], lists["latency"],
            default_cost_classes(n))]}, where)


def network_from_dict(data: Any, source: str = "<network>") -> Network:
    """Build and validate a Network from parsed YAML; every error names ``source`` and the item."""
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a mapping with 'name' and 'dimensions', got {type(data).__name__}")
    if "npus_count" in data and "dimensions" not in data:
        return _from_astra_sim(data, source)
    unknown = set(data) - {"name", "dimensions", "description"}
    if unknown:
        raise LibraError(f"{source}: unknown key(s) {sorted(unknown)}; allowed: name, description, dimensions")
    dims_raw = data.get("dimensions")
    if not isinstance(dims_raw, list) or not dims_raw:
        raise LibraError(f"{source}: 'dimensions' must be a non-empty list of dimensions")
    dims = []
    unnamed = placeholder_dim_names(len(dims_raw))
    for i, raw in enumerate(dims_raw):
        where = f"{source}: dimensions[{i}]"
        if not isinstance(raw, Mapping):
            raise LibraError(f"{where}: expected a mapping, got {raw!r}")
        bad = set(raw) - _DIM_KEYS
        if bad:
            raise LibraError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {sorted(_DIM_KEYS)}")
        name = str(raw.get("name", unnamed[i]))
        if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c in "_-" for c in name):
            raise LibraError(f"{where}: name {name!r} must start with a letter and use letters, digits, '_' or '-'")
        topo = raw.get("topology")
        if topo not in TOPOLOGIES:
            raise LibraError(f"{where}: topology must be one of {list(TOPOLOGIES)} (case-sensitive), got {topo!r}")
        if "npus" not in raw:
            raise LibraError(f"{where}: missing 'npus' (NPU count of this dimension, >= 2)")
        npus = check_number(raw["npus"], where, "npus", integer=True, minimum=2)
        if npus > MAX_DIM_NPUS:
            raise LibraError(f"{where}: npus = {int(npus):,} is beyond {MAX_DIM_NPUS:,} NPUs in one dimension; "
                             "fix the network")
        latency = check_number(raw.get("latency_ns", 0.0), where, "latency_ns", minimum=0, maximum=MAX_LATENCY_NS)
        lo = check_number(raw.get("bw_min_gbps", 0.0), where, "bw_min_gbps", minimum=0, maximum=MAX_BW_GBPS)
        hi = raw.get("bw_max_gbps")
        if hi is not None:
            hi = check_number(hi, where, "bw_max_gbps", minimum=0, strict=True, maximum=MAX_BW_GBPS)
            if hi < lo:
                raise LibraError(f"{where}: bw_max_gbps {hi:g} is below bw_min_gbps {lo:g}")
        cost_class = raw.get("cost_class", "")
        if not isinstance(cost_class, str):
            raise LibraError(f"{where}: cost_class must be a string, got {cost_class!r}")
        dims.append(Dimension(name, topo, int(npus), latency, cost_class, lo, hi))
    names = [d.name for d in dims]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise LibraError(f"{source}: dimension names must be unique; repeated: {dup}")
    return Network(str(data.get("name", Path(source).stem)), tuple(dims))


def load_network(path: str | Path) -> Network:
    """Read and validate a network YAML file."""
    return network_from_dict(load_yaml(path, "network"), str(path))


def dump_network(net: Network) -> str:
    return yaml.safe_dump(net.to_dict(), sort_keys=False)
