"""Parallel axes (tp, pp, dp...) laid out on network dimensions, and the groups they form.

Each axis takes whole dimensions or a factor of a dimension. Dimensions shared by several axes are
split into contiguous blocks: the axis listed first in the placement takes the innermost (fastest
varying) factor. An axis spanning several dimensions numbers its members with the lower dimension
fastest, like NPU ids (``Network.coords``: dimension 0 fastest).

Example: dimensions [8, 8], placement ``{tp: [0], dp: [0, 1]}`` with tp = 4: tp takes coordinate
bits ``c0 % 4``; dp takes ``c0 // 4`` (2 values) and all of dimension 1 (8 values), dp index =
``c0 // 4 + 2 * c1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..errors import LibraError
from ..model.network import Network


@dataclass(frozen=True)
class AxisPart:
    """The share of one dimension an axis takes: coordinate digit ``(c[dim] // stride) % size``."""

    dim: int
    size: int
    stride: int


@dataclass(frozen=True)
class Axis:
    name: str
    degree: int
    parts: tuple[AxisPart, ...]

    def index(self, coords: Sequence[int] | np.ndarray) -> int | np.ndarray:
        """This axis' index of an NPU with the given network coordinates (or of many NPUs at
        once, their coordinates as a (dimensions, NPUs) array)."""
        idx, scale = 0, 1
        for p in self.parts:
            idx += ((coords[p.dim] // p.stride) % p.size) * scale
            scale *= p.size
        return idx


@dataclass(frozen=True)
class Layout:
    """Axes placed on a network; ``axis_index[a][rank]`` is rank's index along axis ``a``."""

    net: Network
    axes: tuple[Axis, ...]
    axis_index: Mapping[str, tuple[int, ...]]

    @property
    def num_ranks(self) -> int:
        return self.net.npus_count

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        return Axis(name, 1, ())

    def whole_dims(self, name: str) -> tuple[bool, ...] | None:
        """``involved_dim`` of the axis if it takes only whole dimensions, else None."""
        a = self.axis(name)
        if any(p.size != self.net.dims[p.dim].npus for p in a.parts):
            return None
        used = {p.dim for p in a.parts}
        return tuple(d in used for d in range(self.net.num_dims))

    def groups(self, name: str) -> list[tuple[int, ...]]:
        """Groups of axis ``name`` (ranks equal on every other axis), ordered by smallest member."""
        key = np.zeros(self.num_ranks, dtype=np.int64)
        for a in self.axes:
            if a.name != name:
                key = key * a.degree + np.asarray(self.axis_index[a.name], dtype=np.int64)
        order = np.argsort(key, kind="stable")     # by group, ranks ascending within each
        cuts = np.flatnonzero(np.diff(key[order])) + 1
        groups = [tuple(g) for g in np.split(order, cuts)] if self.num_ranks else []
        return sorted((tuple(int(r) for r in g) for g in groups), key=lambda g: g[0])

    def peer(self, rank: int, name: str, offset: int) -> int | None:
        """Rank whose index along ``name`` is ``offset`` away (cyclically: the interleaved pipeline
        schedule sends from the last stage to the first) and equal on every other axis; None on an
        axis of degree 1."""
        if self.axis(name).degree == 1:
            return None
        target = ((self.axis_index[name][rank] if name in self.axis_index else 0) + offset) % self.axis(name).degree
        coords = list(self.net.coords(rank))
        a = self.axis(name)
        rest = target
        for p in a.parts:
            digit = rest % p.size
            rest //= p.size
            c = coords[p.dim]
            coords[p.dim] = c - ((c // p.stride) % p.size) * p.stride + digit * p.stride
        return self.net.npu_id(coords)


def place_axes(net: Network, degrees: Mapping[str, int | None], placement: Mapping[str, Sequence[int | str]],
               where: str) -> Layout:
    """Lay axes on the network.

    Parameters
    ----------
    degrees : axis name -> degree, or None to take what is left of the axis' dimensions.
    placement : axis name -> dimensions (index or name), in innermost-first axis order.
    where : prefix for error messages (spec file name).
    """
    cap = [d.npus for d in net.dims]
    stride = [1] * net.num_dims
    axes = []
    for name, dims_raw in placement.items():
        if name not in degrees:
            raise LibraError(f"{where}: placement: unknown axis {name!r}; use one of {sorted(degrees)}")
        if not isinstance(dims_raw, (list, tuple)) or not dims_raw:
            raise LibraError(f"{where}: placement: {name}: expected a non-empty list of dimensions, "
                             f"e.g. {name}: [0], got {dims_raw!r}")
        dims = []
        for raw in dims_raw:
            try:
                dims.append(net.dim_index(raw))
            except LibraError:
                raise LibraError(f"{where}: placement: {name}: no network dimension {raw!r}; use an index "
                                 f"0..{net.num_dims - 1} or one of {list(net.dim_names)}") from None
        if len(set(dims)) != len(dims):
            raise LibraError(f"{where}: placement: {name}: dimension listed twice in {list(dims_raw)}")
        want = degrees[name]
        left = want
        parts = []
        for d in sorted(dims):
            if cap[d] == 1:
                raise LibraError(f"{where}: placement: {name}: dimension {d} has no NPUs left (axes listed "
                                 f"before {name} use all {net.dims[d].npus}); remove it from {name} or "
                                 f"shrink the other axes")
            if left is None:
                take = cap[d]
            elif left == 1:
                raise LibraError(f"{where}: placement: {name}: degree {want} is already met before dimension "
                                 f"{d}; remove dimension {d} from {name}")
            elif left % cap[d] == 0:
                take = cap[d]
            elif cap[d] % left == 0:
                take = left
            else:
                raise LibraError(f"{where}: placement: {name}: degree {want} does not fit dimension {d} "
                                 f"({cap[d]} NPUs left); pick a degree that divides or is a multiple of it")
            parts.append(AxisPart(d, take, stride[d]))
            stride[d] *= take
            cap[d] //= take
            if left is not None:
                left //= take
        if left not in (None, 1):
            raise LibraError(f"{where}: placement: {name}: degree {want} needs {left}x more NPUs than "
                             f"dimensions {sorted(dims)} have left; add a dimension to {name} or lower its degree")
        axes.append(Axis(name, math.prod(p.size for p in parts), tuple(parts)))
    for name, deg in degrees.items():
        if name not in placement and deg not in (None, 1):
            raise LibraError(f"{where}: placement: {name} has degree {deg} but no dimensions; "
                             f"add e.g. {name}: [0] under placement")
    spare = [d for d in range(net.num_dims) if cap[d] > 1]
    if spare:
        raise LibraError(f"{where}: placement: dimension(s) {spare} keep {[cap[d] for d in spare]} NPUs unused "
                         f"by any axis; list them under an axis (e.g. dp) or raise its degree")
    index = {}
    coords = net.coords_array(np.arange(net.npus_count))
    for a in axes:
        index[a.name] = tuple(np.broadcast_to(a.index(coords.T), (net.npus_count,)).tolist())
    return Layout(net, tuple(axes), index)


def all_ranks_layout(net: Network, name: str = "dp") -> Layout:
    """One axis over every dimension (pure data parallelism)."""
    return place_axes(net, {name: None}, {name: list(range(net.num_dims))}, f"network {net.name!r}")
