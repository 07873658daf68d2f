"""Building blocks per level of the physical hierarchy, and the network a shape + blocks make.

Catalog file (YAML; ``network_configs/catalog.yml`` documents the shipped one)::

    name: my-blocks
    levels:                         # innermost first
      - name: package
        cost_class: InterPackage    # key into the cost file's unit prices
        npus_max: 16                # NPUs this level holds (its dimensions and all below)
        latency_ns: 100             # per hop
        blocks: {Ring: 16, FullyConnected: 8}   # largest dimension per block; unlisted = not offered
        bw_max_gbps: 1000           # optional upper bound on a dimension's bandwidth here

A dimension sits at the innermost level (at or outside the previous dimension's) whose
``npus_max`` holds the product of its size and every size below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .upstream import TOPOLOGIES, Dimension, LibraError, Network, load_yaml

SHORT = {"Ring": "R", "FullyConnected": "F", "Switch": "S"}


@dataclass(frozen=True)
class Level:
    name: str
    cost_class: str
    npus_max: int
    latency_ns: float
    blocks: Mapping[str, int]          # block -> largest dimension size
    bw_max_gbps: float | None = None


@dataclass(frozen=True)
class Catalog:
    name: str
    levels: tuple[Level, ...]

    def levels_of(self, shape: Sequence[int]) -> tuple[int, ...] | None:
        """Level index of each dimension, or None if the shape does not fit the hierarchy."""
        out, lvl, below = [], 0, 1
        for n in shape:
            below *= n
            while lvl < len(self.levels) and self.levels[lvl].npus_max < below:
                lvl += 1
            if lvl == len(self.levels):
                return None
            out.append(lvl)
        return tuple(out)

    def allows(self, level: int, block: str, size: int) -> bool:
        return size <= self.levels[level].blocks.get(block, 0)

    def network(self, shape: Sequence[int], blocks: Sequence[str], levels: Sequence[int] | None = None) -> Network:
        """The network of ``shape`` built from ``blocks`` (one per dimension)."""
        levels = levels if levels is not None else self.levels_of(shape)
        if levels is None:
            raise LibraError(f"catalog {self.name!r}: shape {list(shape)} ({math.prod(shape)} NPUs) exceeds the "
                             f"outermost level's npus_max {self.levels[-1].npus_max}")
        dims = []
        for i, (n, b, li) in enumerate(zip(shape, blocks, levels)):
            lv = self.levels[li]
            dims.append(Dimension(f"{lv.name}{i}", b, int(n), lv.latency_ns, lv.cost_class, 0.0, lv.bw_max_gbps))
        return Network(network_name(shape, blocks), tuple(dims))


def network_name(shape: Sequence[int], blocks: Sequence[str]) -> str:
    return "x".join(f"{SHORT[b]}{n}" for n, b in zip(shape, blocks))


def catalog_from_dict(data: Any, source: str = "<catalog>") -> Catalog:
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a mapping with 'levels' (see network_configs/catalog.yml)")
    bad = set(data) - {"name", "description", "levels"}
    if bad:
        raise LibraError(f"{source}: unknown key(s) {sorted(bad)}; allowed: name, description, levels")
    raw = data.get("levels")
    if not isinstance(raw, list) or not raw:
        raise LibraError(f"{source}: 'levels' must be a non-empty list, innermost level first")
    levels = []
    for i, lv in enumerate(raw):
        where = f"{source}: levels[{i}]"
        if not isinstance(lv, Mapping):
            raise LibraError(f"{where}: expected a mapping with name, cost_class, npus_max, latency_ns, blocks")
        bad = set(lv) - {"name", "cost_class", "npus_max", "latency_ns", "blocks", "bw_max_gbps"}
        if bad:
            raise LibraError(f"{where}: unknown key(s) {sorted(bad)}; allowed: name, cost_class, npus_max, "
                             f"latency_ns, blocks, bw_max_gbps")
        name = lv.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise LibraError(f"{where}: name must be a word of letters, digits or '_', got {name!r}")
        cc = lv.get("cost_class")
        if not isinstance(cc, str) or not cc:
            raise LibraError(f"{where}: cost_class must name a class of the cost file, got {cc!r}")
        nmax = lv.get("npus_max")
        if isinstance(nmax, bool) or not isinstance(nmax, int) or nmax < 2:
            raise LibraError(f"{where}: npus_max must be an integer >= 2, got {nmax!r}")
        if levels and nmax <= levels[-1].npus_max:
            raise LibraError(f"{where}: npus_max {nmax} must exceed the inner level's {levels[-1].npus_max} "
                             f"(levels go innermost first)")
        lat = lv.get("latency_ns", 0.0)
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat < 0:
            raise LibraError(f"{where}: latency_ns must be a number >= 0, got {lat!r}")
        blocks = lv.get("blocks")
        if not isinstance(blocks, Mapping) or not blocks:
            raise LibraError(f"{where}: blocks must map building blocks ({', '.join(TOPOLOGIES)}) to their largest "
                             f"size, e.g. blocks: {{Ring: 16}}")
        for b, size in blocks.items():
            if b not in TOPOLOGIES:
                raise LibraError(f"{where}: blocks: unknown building block {b!r}; use {', '.join(TOPOLOGIES)}")
            if isinstance(size, bool) or not isinstance(size, int) or size < 2:
                raise LibraError(f"{where}: blocks: {b} must give the largest size, an integer >= 2, got {size!r}")
        bw = lv.get("bw_max_gbps")
        if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float)) or not bw > 0):
            raise LibraError(f"{where}: bw_max_gbps must be a number > 0, got {bw!r}")
        levels.append(Level(name, cc, nmax, float(lat), dict(blocks), None if bw is None else float(bw)))
    return Catalog(str(data.get("name", Path(source).stem)), tuple(levels))


def load_catalog(path: str | Path) -> Catalog:
    return catalog_from_dict(load_yaml(path, "catalog"), str(path))
