"""The GPU-faithful step of a measured run at any design: what the optimizer minimizes when asked
to optimize the run as the GPU runs it.

The time of a design is the slowest rank's replayed step (faithful.py), each collective's
transfer being the time model's time of it on the design's bandwidths (the pipelined model with
the run's system settings: ASTRA-sim's time, to its nanosecond rounding; the measured transfer
where ASTRA-sim has no such collective). The optimizer sees the measured collectives as one rank
class of a demand, with the same rows, and bounds the time by each rank's critical path at the
designs it visits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..demand.types import Demand, make_collective, single_class
from ..errors import LibraError
from ..model.collectives import COLLECTIVE_TYPES
from ..model.network import Network
from ..timing.model import TimeModel, demand_rows
from .faithful import FaithfulGraph, faithful_graph
from .kineto import RankProfile
from .measurement import Measurement, collective_dims

NAME = "gpu-faithful"


@dataclass(frozen=True, eq=False)
class FaithfulTime:
    """The slowest rank's GPU-faithful step as a function of the bandwidths (module docstring)."""

    graph: FaithfulGraph
    demand: Demand                      # the modelled collectives, one rank class, in measured order
    item_of: tuple[int, ...]            # per measured collective: its index in the demand, or -1 (kept)
    measured_ns: tuple[int, ...]
    rows: tuple[np.ndarray, np.ndarray, np.ndarray]   # the demand's rows in the time model (A, g, starts)
    measurement: Measurement                            # the run, as measured on the network
    profiles: tuple[RankProfile, ...]
    name: str = NAME

    def transfers_ns(self, bw_gbps: Sequence[float]) -> list[float]:
        A, g, starts = self.rows
        t = np.maximum.reduceat(A @ (1.0 / np.asarray(bw_gbps, dtype=float)) + g, starts).tolist()
        return [t[i] if i >= 0 else float(m) for i, m in zip(self.item_of, self.measured_ns)]

    def rank_steps_ns(self, bw_gbps: Sequence[float]) -> list[float]:
        return self.graph.rank_steps_ns(self.transfers_ns(bw_gbps))

    def time_ns(self, bw_gbps: Sequence[float]) -> float:
        return max(self.rank_steps_ns(bw_gbps))

    @property
    def floor_ns(self) -> float:
        """The time with every modelled transfer taking no time: what no bandwidth can shorten."""
        return self.demand.rank_classes[0].compute_time_ns

    def critical_paths(self, bw_gbps: Sequence[float]) -> list[tuple[bytes, float, np.ndarray, np.ndarray]]:
        """Each rank's critical path at these bandwidths, as (key, constant ns, collectives of the
        demand, their counts): the rank's step is at least the constant plus those collectives'
        times at any design, and equal to it here."""
        g = self.graph
        val, arg = g.values(self.transfers_ns(bw_gbps))
        out = []
        for i, steps in enumerate(g.steps):
            k = len(steps)
            comp, items, seen = 0.0, [], [i]
            for end, after, start, before in steps:
                const, colls, nodes = g.path(val, arg, end)
                comp += const + after - ((val[start] if start >= 0 else 0.0) - before)
                for c in colls:
                    if self.item_of[c] >= 0:
                        items.append(self.item_of[c])
                    else:
                        comp += self.measured_ns[c]
                seen += nodes
            it = np.asarray(items, dtype=np.int64)
            out.append((np.asarray(seen, dtype=np.int64).tobytes(), comp / k, it, np.full(it.shape[0], 1.0 / k)))
        return out


def faithful_time(m: Measurement, profiles: Sequence[RankProfile], net: Network, model: TimeModel) -> FaithfulTime:
    """The run's GPU-faithful time model on ``net``, collectives timed by ``model``; refuses a run whose steps
    start at a time the network changes (the step would then not be convex in the bandwidths)."""
    graph = faithful_graph(profiles, m.collectives, m.world_size, m.clock_offsets_ns, m.source)
    if not graph.fixed_starts:
        raise LibraError(f"{m.source}: a profiled step starts after a collective of an earlier step, so its "
                         "length is not convex in the bandwidths; profile one step per rank (or give the first "
                         "step's traces) to optimize the GPU-faithful model")
    colls, item_of = [], []
    for c in m.collectives:
        dims = collective_dims(net, c.group, m.source)
        inv = tuple(d in dims for d in range(net.num_dims))
        if c.kind in COLLECTIVE_TYPES and dims:
            parts = tuple(d.npus if x else 1 for d, x in zip(net.dims, inv))
            item_of.append(len(colls))
            colls.append(make_collective(c.kind, c.size_bytes, parts, net=net, name=f"measured #{c.index}"))
        else:
            item_of.append(-1)
    if not colls:
        raise LibraError(f"{m.source}: no measured collective is one ASTRA-sim times on network {net.name!r}; "
                         "the network cannot change the GPU-faithful step")
    measured = tuple(int(c.transfer_ns) for c in m.collectives)
    # The no-overlap start times the class as its compute plus its collectives: the time with every
    # modelled transfer at 0 is a fair compute.
    floor = max(graph.rank_steps_ns([0.0 if i >= 0 else float(t) for i, t in zip(item_of, measured)]))
    demand = single_class(f"{NAME}:{m.source}", net.npus_per_dim, floor, colls, net.dim_names)
    A, g, starts = demand_rows(demand, net, model)
    return FaithfulTime(graph, demand, tuple(item_of), measured, (A, g, starts), m, tuple(profiles))
