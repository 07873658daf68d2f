"""The logical network emitted for ASTRA-sim: physical dimensions split so every group is whole.

ASTRA-sim runs a collective hierarchically only when it spans whole dimensions (``involved_dim``
on an all-rank collective); a collective on a communicator group that is not the whole system
runs as one flat ring over the sorted members. A group that covers part of a dimension (tensor
parallelism over 4 of the 8 NPUs of a ring) is therefore represented by splitting that dimension
in the emitted network: the ring of 8 becomes two logical dimensions of 4 (stride 1) and 2
(stride 4), and the group becomes logical dimension 0.

Splitting keeps NPU ids: a physical coordinate ``a`` in a dimension split into pieces of sizes
``f0, f1, ...`` has digits ``a = b0 + f0 * (b1 + f1 * ...)``, and ids stay mixed-radix with dimension
0 fastest. A piece with stride ``s`` holds the coordinates ``{base + s * j}``.

Every piece keeps the bandwidth of its physical dimension (the analytical backend lets messages on
different dimensions proceed independently) and its topology. Ring pieces get the latency of
``stride`` hops, the distance between consecutive members in the physical ring; this is exact for
the outermost piece, and the closing hop of an inner piece (from its last member back to its
first) is charged as one step instead of ``size - 1`` hops.

A set of coordinates in one dimension can become whole pieces when it is an arithmetic progression
``{o + s * j : j < p}`` with ``s * p`` dividing the dimension size and ``o`` aligned
(``(o // s) % p == 0``); the split points ``s`` and ``s * p`` of all groups must form a divisibility
chain. Groups that do not fit (irregular members, or split points that conflict with a group seen
earlier) stay communicator groups and run as flat rings, as ASTRA-sim does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..demand.types import Demand
from ..model import collectives as coll
from ..model.grid import Grid
from ..model.network import Network

GIB_PER_GB = 1e9 / 2**30


@dataclass(frozen=True)
class LogicalDim:
    """One dimension of the emitted network; a piece of physical dimension ``physical_dim``."""

    name: str
    physical_dim: int
    topology: str
    npus: int
    stride: int
    bw_gbps: float
    latency_ns: float

    @property
    def bw_config_gibps(self) -> float:
        """The value written to ASTRA-sim's ``bandwidth`` list (it reads GiB/s)."""
        return self.bw_gbps * GIB_PER_GB


@dataclass(frozen=True)
class LogicalNetwork(Grid):
    physical: Network
    dims: tuple[LogicalDim, ...]

    @property
    def is_split(self) -> bool:
        return self.num_dims != self.physical.num_dims

    def pieces(self, physical_dim: int) -> tuple[int, ...]:
        """Logical dimensions (ascending) that physical dimension ``physical_dim`` was split into."""
        return tuple(i for i, d in enumerate(self.dims) if d.physical_dim == physical_dim)

    def npu_id(self, coords: Sequence[int]) -> int:
        """Id of a coordinate tuple; coordinates wrap around (ring neighbours of the ends)."""
        return super().npu_id([a % n for a, n in zip(coords, self.npus_per_dim)])

    def from_physical_mask(self, mask: Sequence[bool]) -> tuple[bool, ...]:
        """involved_dim over logical dimensions for a mask over physical dimensions."""
        return tuple(bool(mask[d.physical_dim]) for d in self.dims)

    def slice_mask(self, members: Iterable[int]) -> tuple[bool, ...] | None:
        """Involved logical dimensions if ``members`` is one slice of whole logical dimensions.

        A slice varies some logical dimensions over all their NPUs and fixes the others, which is
        exactly the set of NPUs an all-rank collective with that ``involved_dim`` reaches from one
        of them. Returns None for any other set.
        """
        uniq = sorted(set(members))
        coords = [self.coords(m) for m in uniq]
        mask = []
        size = 1
        for i, n in enumerate(self.npus_per_dim):
            k = len({c[i] for c in coords})
            if k not in (1, n):
                return None
            mask.append(k == n and n > 1)
            size *= k
        if size != len(uniq):
            return None
        return tuple(mask)

    def run_for(self, physical_dim: int, participants: int) -> tuple[int, ...] | None:
        """Logical dimensions for ``participants`` contiguous-in-the-split NPUs of a physical dim.

        Used where only a participant count is known (a demand file): the lowest run of pieces whose
        product is ``participants`` is preferred, then the highest, then any; None if none exists.
        """
        pieces = self.pieces(physical_dim)
        if participants <= 1:
            return ()
        runs = []
        for a in range(len(pieces)):
            prod = 1
            for b in range(a, len(pieces)):
                prod *= self.dims[pieces[b]].npus
                if prod == participants:
                    runs.append(tuple(pieces[a:b + 1]))
                if prod >= participants:
                    break
        if not runs:
            return None
        low = [r for r in runs if r[0] == pieces[0]]
        high = [r for r in runs if r[-1] == pieces[-1]]
        return (low or high or runs)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "npus_count": self.npus_count,
            "split": self.is_split,
            "dimensions": [
                {"name": d.name, "physical_dim": d.physical_dim,
                 "physical_name": self.physical.dims[d.physical_dim].name, "topology": d.topology,
                 "npus": d.npus, "stride": d.stride, "bandwidth_gbps": d.bw_gbps,
                 "bandwidth_config_gibps": d.bw_config_gibps, "latency_ns": d.latency_ns}
                for d in self.dims
            ],
        }


def _is_chain(points: Iterable[int]) -> bool:
    pts = sorted(points)
    return all(b % a == 0 for a, b in zip(pts, pts[1:]))


def progression_split_points(coords: Sequence[int], n: int) -> tuple[int, int] | None:
    """Split points (s, s * p) making coordinate set ``coords`` whole pieces of a dimension of n.

    Returns None unless the set is an aligned arithmetic progression (see the module docstring).
    A single coordinate or the full dimension needs no split and gives (1, 1).
    """
    c = sorted(set(coords))
    p = len(c)
    if p == 1 or p == n:
        return (1, 1) if p == 1 or c == list(range(n)) else None
    s = c[1] - c[0]
    if any(b - a != s for a, b in zip(c, c[1:])):
        return None
    if n % (s * p) != 0 or (c[0] // s) % p != 0:
        return None
    return (s, s * p)


class Splitter:
    """Collects split points per physical dimension; a group is accepted only if it fits them all."""

    def __init__(self, net: Network):
        self.net = net
        self.points: list[set[int]] = [{1, d.npus} for d in net.dims]

    def try_add(self, per_dim: Sequence[Iterable[int]]) -> bool:
        """Add split points for every dimension at once, or none of them."""
        cand = [self.points[d] | set(pts) for d, pts in enumerate(per_dim)]
        if not all(_is_chain(c) for c in cand):
            return False
        self.points = cand
        return True

    def add_members(self, members: Sequence[int]) -> bool:
        """Try to make a communicator group a slice of whole logical dimensions."""
        uniq = sorted(set(members))
        coords = [self.net.coords(m) for m in uniq]
        per_dim = []
        size = 1
        for d, dim in enumerate(self.net.dims):
            values = sorted({c[d] for c in coords})
            size *= len(values)
            pts = progression_split_points(values, dim.npus)
            if pts is None:
                return False
            per_dim.append(pts)
        if size != len(uniq):
            return False
        return self.try_add(per_dim)

    def add_participants(self, participants: Sequence[int]) -> bool:
        """Make room for a group known only by its participant count per dimension.

        ``p`` of ``n`` NPUs needs no new split point if a run of existing pieces holds p NPUs;
        otherwise it is taken as a contiguous aligned block (split point p) if that keeps a chain,
        else as the strided set spanning the dimension (split point n / p).
        """
        per_dim: list[set[int]] = []
        for d, (p, dim) in enumerate(zip(participants, self.net.dims)):
            if p <= 1 or p == dim.npus:
                per_dim.append(set())
                continue
            if dim.npus % p != 0:
                return False
            pts = sorted(self.points[d])
            if any(b == a * p for a in pts for b in pts):
                per_dim.append(set())  # a run of existing pieces already holds p NPUs
                continue
            for point in (p, dim.npus // p):
                if _is_chain(self.points[d] | {point}):
                    per_dim.append({point})
                    break
            else:
                return False
        return self.try_add(per_dim)

    def network(self, bw_gbps: Sequence[float]) -> LogicalNetwork:
        dims = []
        for d, phys in enumerate(self.net.dims):
            pts = sorted(self.points[d])
            pieces = list(zip(pts, pts[1:]))
            for i, (lo, hi) in enumerate(pieces):
                name = phys.name if len(pieces) == 1 else f"{phys.name}_{i}"
                latency = phys.latency_ns * lo if phys.topology == "Ring" else phys.latency_ns
                dims.append(LogicalDim(name, d, phys.topology, hi // lo, lo, float(bw_gbps[d]), latency))
        return LogicalNetwork(self.net, tuple(dims))


# ------------------------------------------------------------------ planning


def plan_for_groups(net: Network, bw_gbps: Sequence[float],
                    groups: Mapping[int, Sequence[int]]) -> tuple[LogicalNetwork, dict[int, tuple[bool, ...] | None]]:
    """Logical network for communicator groups, and each group's involved_dim (None = flat ring)."""
    sp = Splitter(net)
    for gid in sorted(groups):
        sp.add_members(groups[gid])
    lnet = sp.network(bw_gbps)
    return lnet, {gid: lnet.slice_mask(m) for gid, m in groups.items()}


def plan_for_demand(net: Network, bw_gbps: Sequence[float], demand: Demand) -> LogicalNetwork:
    """Logical network with pieces for the partial participations of hierarchical collectives."""
    parts = {c.participants for rc in demand.rank_classes for c in rc.collectives
             if c.algorithm == "hierarchical" and c.type != coll.P2P}
    sp = Splitter(net)
    # Larger groups first take the contiguous (innermost) block; complements become strided.
    for p in sorted(parts, key=lambda t: tuple(-x for x in t)):
        sp.add_participants(p)
    return sp.network(bw_gbps)
