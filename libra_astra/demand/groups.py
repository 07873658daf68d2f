"""Communicator groups of a trace, and how a group's collective uses each network dimension.

Where groups come from, in priority order:

1. a comm-group JSON in ASTRA-sim's format, ``{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}``
   (ids > 0 as strings, member NPU ids as integers);
2. PyTorch process-group info in METADATA nodes (``## process_group:init ##``);
3. otherwise a collective whose ``pg_name`` is ``""`` or ``"0"`` runs on all ranks, over the
   dimensions its ``involved_dim`` marks (absent = the first four dimensions, as ASTRA-sim does).

A group that is a sub-grid of the network (one coordinate set per dimension) is modelled with
the hierarchical algorithm; any other member set as ASTRA-sim runs it: one flat ring over the
sorted members, each hop charged on the lowest dimension where the two NPUs differ.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..model import collectives as coll
from .types import Collective, make_collective
from ..errors import LibraError
from ..files import read_json
from ..model.network import Network

ALL_RANKS = ""  # group key of the default (all-ranks) communicator


def normalize_key(pg_name: str | None) -> str:
    """Group key of a ``pg_name``: ``""`` and ``"0"`` (and no pg_name) mean all ranks."""
    if pg_name is None or pg_name == "0" or pg_name == "":
        return ALL_RANKS
    return pg_name


def group_label(key: str) -> str:
    return "all" if key == ALL_RANKS else key


# ---------------------------------------------------------------- sources


def comm_groups_from_dict(data: Any, source: str) -> dict[str, tuple[int, ...]]:
    """Validate an ASTRA-sim comm-group mapping; member ranges are checked by :func:`check_members`."""
    if not isinstance(data, Mapping):
        raise LibraError(f'{source}: expected a JSON object {{"1": [0, 1, ...], ...}} mapping group ids to NPU ids')
    out: dict[str, tuple[int, ...]] = {}
    for key, members in data.items():
        k = str(key)
        if not k.isdigit() or int(k) <= 0:
            raise LibraError(f"{source}: group id {k!r} must be a positive integer written as a string "
                             "(ASTRA-sim reserves 0 for all ranks)")
        if (not isinstance(members, list) or not members
                or not all(isinstance(m, int) and not isinstance(m, bool) for m in members)):
            raise LibraError(f"{source}: group {k} must be a non-empty list of NPU ids (integers), got {members!r}")
        if len(set(members)) != len(members):
            dup = sorted(m for m, c in Counter(members).items() if c > 1)   # linear: groups can be huge
            raise LibraError(f"{source}: group {k} lists NPU(s) {dup[:10]} more than once; list each member once")
        if str(int(k)) in out:
            raise LibraError(f"{source}: group id {k!r} is group {int(k)} again; give each group one id")
        out[str(int(k))] = tuple(sorted(members))
    return out


def load_comm_groups(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Read an ASTRA-sim comm-group JSON file."""
    p = Path(path)
    data = read_json(p, "comm-group")
    return comm_groups_from_dict(data, str(p))


def outside(members: Sequence[int], num_npus: int) -> list[int]:
    """Members that are not NPU ids of a network with ``num_npus`` NPUs."""
    return [m for m in members if not 0 <= m < num_npus]


def check_members(groups: Mapping[str, Sequence[int]], num_npus: int, source: str) -> None:
    for key, members in groups.items():
        bad = outside(members, num_npus)
        if bad:
            raise LibraError(
                f"{source}: group {key} has member(s) {bad[:5]} outside 0..{num_npus - 1} (the network has "
                f"{num_npus} NPUs); fix the group or use the matching network"
            )


# ---------------------------------------------------------------- shapes


@dataclass(frozen=True)
class GroupShape:
    """How one communicator group sits in the network.

    ``participants`` is the per-dimension participant count for a sub-grid (hierarchical
    algorithm), else None and the group runs as a flat ring crossing ``ring_dims``, whose
    slowest step takes ``ring_step_hops[d]`` hops in dimension d.
    """

    key: str
    members: tuple[int, ...]
    source: str
    participants: tuple[int, ...] | None
    box: tuple[int, ...]                 # distinct coordinates per dimension
    ring_dims: tuple[int, ...] = ()
    ring_step_hops: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def algorithm(self) -> str:
        return "hierarchical" if self.participants is not None else "flat_ring"


def _coordinate_sets(coords: np.ndarray) -> list[np.ndarray]:
    """The distinct coordinates of the members in each dimension, ascending."""
    return [np.unique(coords[:, d]) for d in range(coords.shape[1])]


def _member_strides(sets: Sequence[np.ndarray]) -> tuple[int, ...]:
    """Per dimension, the distance between consecutive member coordinates of a sub-grid group when
    they form an arithmetic progression (a strided piece of the dimension, emitted as a logical
    Ring piece whose hop costs ``stride`` hops), else 1."""
    out = []
    for vals in sets:
        s = 1
        if vals.size > 1:
            diff = np.diff(vals)
            if np.all(diff == diff[0]):
                s = int(diff[0])
        out.append(s)
    return tuple(out)


def group_shape(net: Network, key: str, members: Sequence[int], source: str) -> GroupShape:
    """Shape of a member set: sub-grid participation, or the dims a flat ring over it crosses."""
    uniq = tuple(sorted(set(int(m) for m in members)))
    if not uniq or uniq[0] < 0 or uniq[-1] >= net.npus_count:
        return group_shape_one_by_one(net, key, members, source)  # raises the error it gives
    # One coordinate array for all members: a trace set can hold hundreds of groups (one per
    # tensor-parallel slice), and coordinates one NPU at a time dominated the analysis.
    sets = _coordinate_sets(net.coords_array(np.asarray(uniq, dtype=np.int64)))
    box = tuple(int(v.size) for v in sets)
    # a sub-grid is the product of its per-dimension coordinate sets (coll.group_participation)
    parts = box if math.prod(box) == len(uniq) else None
    if parts is not None:
        return GroupShape(key, uniq, source, parts, box, ring_step_hops=_member_strides(sets))
    step = coll.flat_ring_step_hops(net, uniq)
    dims = tuple(d for d in range(net.num_dims) if step[d] > 0)
    return GroupShape(key, uniq, source, None, box, dims, step)


def group_shape_one_by_one(net: Network, key: str, members: Sequence[int], source: str) -> GroupShape:
    """:func:`group_shape` one member at a time (the reference it is tested against; it also
    raises the errors of an empty group or an NPU id outside the network)."""
    uniq = tuple(sorted(set(int(m) for m in members)))
    sets = _coordinate_sets(np.asarray([net.coords(m) for m in uniq], dtype=np.int64).reshape(len(uniq), net.num_dims))
    box = tuple(int(v.size) for v in sets)
    parts = coll.group_participation(net, uniq)
    if parts is not None:
        return GroupShape(key, uniq, source, parts, box, ring_step_hops=_member_strides(sets))
    step = coll.flat_ring_step_hops(net, uniq)
    dims = tuple(d for d in range(net.num_dims) if step[d] > 0)
    return GroupShape(key, uniq, source, None, box, dims, step)


def all_ranks_participants(net: Network, involved: Sequence[bool] | None) -> tuple[int, ...]:
    """Participants per dimension of an all-ranks collective with this ``involved_dim``.

    Absent ``involved_dim`` means the first four dimensions (ASTRA-sim's default); entries past
    the network's dimensions are ignored and missing ones count as not involved.
    """
    if involved is None:
        involved = [True] * 4
    return tuple(n if d < len(involved) and involved[d] else 1 for d, n in enumerate(net.npus_per_dim))


def all_ranks_shape(net: Network, involved: Sequence[bool] | None) -> GroupShape:
    parts = all_ranks_participants(net, involved)
    return GroupShape(ALL_RANKS, (), "all ranks", parts, parts)


# ---------------------------------------------------------------- collectives


def group_collective(net: Network, kind: str, size_bytes: float, shape: GroupShape) -> Collective:
    """One collective of ``kind`` on a group: hierarchical on a sub-grid, else one flat ring."""
    if shape.participants is not None:
        return make_collective(kind, size_bytes, shape.participants, net=net,
                               strides=shape.ring_step_hops or None)
    p = shape.size
    traffic = coll.ring_traffic_bytes(kind, size_bytes, p)
    traffic_t = tuple(traffic if d in shape.ring_dims else 0.0 for d in range(net.num_dims))
    # ring steps run in lockstep, so each step waits for its slowest hop: charge all step
    # latency to the dimension whose hop is slowest
    steps = coll.ring_steps(kind, p)
    hops = [0] * net.num_dims
    if shape.ring_dims and steps:
        slow = max(shape.ring_dims, key=lambda d: (shape.ring_step_hops[d] * net.dims[d].latency_ns,
                                                   shape.ring_step_hops[d], -d))
        hops[slow] = steps * shape.ring_step_hops[slow]
    return Collective(kind, float(size_bytes), shape.box, traffic_t, tuple(hops), 1.0, "", "", "", "flat_ring")


def p2p_collective(net: Network, size_bytes: float, dim: int, hops: int) -> Collective:
    """A send of ``size_bytes`` crossing dimension ``dim`` (its lowest differing coordinate)."""
    parts = tuple(2 if d == dim else 1 for d in range(net.num_dims))
    traffic = tuple(float(size_bytes) if d == dim else 0.0 for d in range(net.num_dims))
    hop_t = tuple(int(hops) if d == dim else 0 for d in range(net.num_dims))
    return Collective(coll.P2P, float(size_bytes), parts, traffic, hop_t, 1.0, "", "", "", "p2p")


def p2p_dims(net: Network, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Crossed dimension (lowest differing coordinate) and hop count of each src -> dst transfer.

    ``src == dst`` gives dimension -1 and 0 hops.
    """
    ca, cb = net.coords_array(src), net.coords_array(dst)
    dim = np.full(ca.shape[:-1], -1, dtype=np.int64)
    hops = np.zeros(ca.shape[:-1], dtype=np.int64)
    for d, dm in enumerate(net.dims):
        here = (dim < 0) & (ca[..., d] != cb[..., d])
        dim[here] = d
        hops[here] = dm.hops_array(ca[..., d], cb[..., d])[here]
    return dim, hops
