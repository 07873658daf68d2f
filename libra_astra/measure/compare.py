"""A prediction set against what the cluster measured, rank by rank.

Two predictions of each rank's step:

- **GPU-faithful** (replay.py): the measured step replayed as the GPU runs it, each collective's
  transfer given by ASTRA-sim's own time of it on the prediction's network and system.json; on a
  CPU-only (gloo) run its counterpart, **host-faithful** (cpu_replay.py);
- **ASTRA-sim's semantics**: the simulator's finish time of the rank for the converted trace.

What the GPU-faithful residual is made of: the replay's rules (the replay with the measured
transfers against the measurement) and the network (the modelled transfers against the
measured ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..model.collectives import COLLECTIVE_TYPES, P2P
from ..model.network import Network
from ..timing.astra_collective import Link, collective_time_ns, message_ns
from ..timing.astra_settings import SystemSettings
from ..traces.cpu_groups import GroupMap
from .cpu_replay import MODEL_NAME as CPU_MODEL_NAME
from .cpu_replay import cpu_replay
from .kineto import RankProfile
from .linked import require_runtime
from .measurement import Measurement, collective_dims, step_noise_note
from .replay import MODEL_NAME, ReplayedRank, replay


@dataclass(frozen=True)
class RankComparison:
    rank: int
    measured_ns: float
    gpu_faithful_ns: float
    replay_measured_transfers_ns: float
    astra_ns: float | None


@dataclass(frozen=True)
class Comparison:
    source: str
    model: str
    ranks: tuple[RankComparison, ...]
    transfer_measured_ns: int           # sum over the collectives
    transfer_modelled_ns: int
    notes: tuple[str, ...]
    label: str = "GPU-faithful"        # host-faithful on a CPU-only run (cpu_replay.py)

    def mean(self, field: str) -> float | None:
        vals = [getattr(r, field) for r in self.ranks]
        return None if any(v is None for v in vals) else sum(vals) / len(vals)

    def max(self, field: str) -> float | None:
        vals = [getattr(r, field) for r in self.ranks]
        return None if any(v is None for v in vals) else max(vals)


def modelled_transfers(m: Measurement, net: Network, links: Sequence[Link], settings: SystemSettings,
                       notes: list[str]) -> list[int]:
    """ASTRA-sim's time of each measured collective (or send, within one dimension) on these links;
    the measured transfer where ASTRA-sim has no such collective."""
    from ..demand.groups import p2p_dims

    out = []
    kept = 0
    for c in m.collectives:
        dims = collective_dims(net, c.group, m.source)
        if c.kind in COLLECTIVE_TYPES and dims:
            involved = tuple(d in dims for d in range(net.num_dims))
            out.append(collective_time_ns(c.kind, c.size_bytes, involved, links, settings))
        elif c.kind == P2P and len(dims) == 1:
            _, hops = p2p_dims(net, np.array([c.group[0]]), np.array([c.group[-1]]))
            out.append(message_ns(links[dims[0]], int(hops[0]), int(c.size_bytes)))
        else:
            kept += 1
            out.append(c.transfer_ns)
    if kept:
        notes.append(f"{kept} collective(s) ASTRA-sim does not time keep their measured transfer")
    return out


def compare(m: Measurement, profiles: Sequence[RankProfile], net: Network, links: Sequence[Link],
            settings: SystemSettings, astra_finish_ns: Sequence[float] | None = None) -> Comparison:
    """``astra_finish_ns``: another prediction of every rank's step, by rank (ASTRA-sim's)."""
    require_runtime(profiles, "the replay against the measurement")
    notes: list[str] = list(m.assumptions)
    modelled = modelled_transfers(m, net, links, settings, notes)
    by_index = {c.index: t for c, t in zip(m.collectives, modelled)}
    if m.host_only:
        def run(f):
            return cpu_replay(profiles, m.collectives, f, m.world_size, m.clock_offsets_ns, m.group_map)
        model, label = CPU_MODEL_NAME, "host-faithful"
    else:
        def run(f):
            return replay(profiles, m.collectives, f, m.world_size, m.clock_offsets_ns)
        model, label = MODEL_NAME, "GPU-faithful"
    predicted = run(lambda c: by_index[c.index])
    baseline = run(lambda c: c.transfer_ns)
    if not m.host_only:
        notes += _host_bound_note(m, baseline)
    noise = step_noise_note(m)
    if noise:
        notes.append(noise)
    rows = []
    for s, p, b in zip(m.ranks, predicted, baseline):
        astra = float(astra_finish_ns[s.rank]) if astra_finish_ns is not None else None
        rows.append(RankComparison(s.rank, s.step_ns, float(p.step_ns), float(b.step_ns), astra))
    return Comparison(m.source, model, tuple(rows), sum(c.transfer_ns for c in m.collectives), sum(modelled),
                      tuple(notes), label)


def _host_bound_note(m: Measurement, replayed: Sequence[ReplayedRank]) -> list[str]:
    """Ranks whose (single) step ends before their last collective does: their host never waits
    for it, and the replay lets that work overrun the step by as much as it did."""
    late = [(max(p.comm_ends_ns) - p.step_ns, p.rank) for s, p in zip(m.ranks, replayed)
            if s.steps == 1 and p.comm_ends_ns and max(p.comm_ends_ns) > p.step_ns]
    if not late:
        return []
    gap_ns, rank = max(late)
    return [f"{len(late)} of {len(replayed)} ranks end their step before their last collective ends (rank {rank} "
            f"{gap_ns / 1e6:.3f} ms before): the step's thread does not wait for the GPU there; the GPU-faithful "
            "step lets that work overrun the step by as much as recorded, and ends later only when it runs longer"]


def compare_design(inputs: Sequence[str], net: Network, bw_gbps: Sequence[float], settings: SystemSettings,
                   other_ns: Sequence[float] | None = None, group_map: GroupMap | None = None,
                   loaded: tuple[Measurement, Sequence[RankProfile]] | None = None) -> Comparison:
    """The measured run (Kineto ``inputs``) against a design: the GPU-faithful replay with ASTRA-sim's
    transfers on the design's bandwidths, beside ``other_ns`` per rank (another model's times).
    ``loaded``: the run's measurement and profiles on ``net``, if read already."""
    from .kineto import read_profiles
    from .measurement import measure_profiles

    if loaded is not None:
        m, profiles = loaded
    else:
        profiles, notes = read_profiles(inputs)
        m = measure_profiles(profiles, notes, net, str(inputs[0]), group_map)
    links = [Link(d.topology, d.npus, float(b), d.latency_ns) for d, b in zip(net.dims, bw_gbps)]
    return compare(m, profiles, net, links, settings, other_ns)


def _err(p: float | None, m: float) -> float | None:
    return None if p is None else (p - m) / m


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
    out: dict[str, Any] = {"source": c.source, "gpu_faithful_model": c.model, "gpu_faithful_label": c.label, "ranks": [], "notes": list(c.notes),
                           "transfer_measured_ns": c.transfer_measured_ns,
                           "transfer_modelled_ns": c.transfer_modelled_ns}
    for r in c.ranks:
        out["ranks"].append({"rank": r.rank, "measured_ns": r.measured_ns, "gpu_faithful_ns": r.gpu_faithful_ns,
                             "gpu_faithful_error": _err(r.gpu_faithful_ns, r.measured_ns),
                             "replay_measured_transfers_ns": r.replay_measured_transfers_ns,
                             "astra_ns": r.astra_ns, "astra_error": _err(r.astra_ns, r.measured_ns)})
    for agg in ("mean", "max"):
        meas = getattr(c, agg)("measured_ns")
        out[agg] = {"measured_ns": meas}
        for f in ("gpu_faithful_ns", "astra_ns", "replay_measured_transfers_ns"):
            v = getattr(c, agg)(f)
            out[agg][f] = v
            out[agg][f.replace("_ns", "_error")] = _err(v, meas)
    return out


def host_thread_ns(prefix: str, rank: int) -> dict[int, int]:
    """The ET's CPU operators of one rank, summed per host thread (``tid``), ns: ASTRA-sim runs
    them all on one CPU, one at a time, while the run had a thread each."""
    from ..traces import chakra_io as cio
    from ..traces.files import find_rank_files

    files = find_rank_files(prefix)
    if rank not in files:
        return {}
    _, nodes = cio.read_et(files[rank])
    out: dict[int, int] = {}
    for n in nodes:
        attrs = cio.node_attrs(n)
        if attrs.get("is_cpu_op") and n.duration_micros:
            tid = int(attrs.get("tid", 0))
            out[tid] = out.get(tid, 0) + int(n.duration_micros) * 1000
    return out


def untyped_gloo_note(prefix: str) -> str | None:
    """A note when a CPU run's trace set still has its gloo collectives as CPU operators (rank 0's
    file): ASTRA-sim then times them as recorded, not by the network."""
    from ..traces import chakra_io as cio
    from ..traces.cpu_collectives import has_typed_comm
    from ..traces.files import find_rank_files

    files = find_rank_files(prefix)
    if 0 not in files:
        return None
    _, nodes = cio.read_et(files[0])
    if has_typed_comm(nodes) or not any(n.name.startswith(("c10d::", "gloo:")) for n in nodes):
        return None
    return (f"{prefix}: its gloo collectives are CPU operators, so ASTRA-sim's semantics time them as recorded, "
            "not by this network; for the network's times type them (optimize or loop with "
            "--type-cpu-collectives, then predict or simulate the emitted run)")
