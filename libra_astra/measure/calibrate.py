"""The network calibrated from a run's measured collectives.

Two fits per network dimension, on the collectives that cross only that dimension over all of
its NPUs (each collective's transfer: its shortest instance across the ranks):

- **alpha-beta per collective kind** (what the hardware did): ``t = alpha + traffic / B``, with
  ``traffic`` the bytes each NPU sends in a ring of the group (model/collectives.py), ``alpha``
  the latency and ``B`` the effective bandwidth per NPU;
- **the dimension as ASTRA-sim times it** (what the simulator needs): for each collective ASTRA-sim's
  own time is ``n * latency + c / bandwidth + e * endpoint-delay`` (n hops of messages, c bytes
  on the critical path, e messages), with n, c and e read from timing/astra_collective.py for
  the dimension's implementation of that kind. The latency per hop and bandwidth of the
  dimension are fitted on these, for every choice of implementation per kind (``ring``,
  ``direct``, ...), and the choice whose exact ASTRA-sim times are closest to the measurement is
  kept: those are the calibrated network and system settings.

Both fits are non-negative and robust by default, or least squares on the times (``fit="total"``:
the calibrated times then add up to about the measured ones, slow instances included; fit.py),
and each point is also predicted by a fit made without it (held out).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import LibraError
from ..model.collectives import COLLECTIVE_TYPES, P2P, ring_traffic_bytes
from ..model.network import Network
from ..timing.astra_collective import Link, collective_time_ns, message_ns
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS, SystemSettings
from ..timing.settings import DEFAULT_LOCAL_MEM_BW_GBPS
from .fit import FITS, FitQuality, fit_nnls, quality
from .measurement import Measurement, collective_dims

ENDPOINT_DELAY_NS = 1
# ASTRA-sim's implementations that can run each kind (halvingDoubling has no all-to-all).
CANDIDATES = {"ALL_REDUCE": ("ring", "direct", "halvingDoubling", "doubleBinaryTree"),
              "REDUCE_SCATTER": ("ring", "direct", "halvingDoubling"),
              "ALL_GATHER": ("ring", "direct", "halvingDoubling"),
              "ALL_TO_ALL": ("ring", "direct")}
_BIG_BW = 1e12
_PROBE_LATENCY = 1e6


@dataclass(frozen=True)
class KindFit:
    """alpha-beta of one collective kind on one dimension."""

    dim: str
    kind: str
    alpha_ns: float
    bw_gbps: float | None        # None: the sizes do not show a bandwidth (time independent of size)
    quality: FitQuality


@dataclass(frozen=True)
class CheckRow:
    """One measured collective against ASTRA-sim's time under the calibrated network."""

    index: int
    kind: str
    size_bytes: int
    dim: str
    measured_ns: int
    astra_ns: int


@dataclass(frozen=True)
class DimCalibration:
    dim: str
    latency_ns: float            # per hop
    bw_gbps: float
    implementations: tuple[tuple[str, str], ...]    # (kind, implementation) of the kinds measured
    quality: FitQuality          # of the linear fit (held-out errors from it)


@dataclass(frozen=True)
class Calibration:
    source: str
    network: Network             # the input network with each calibrated dimension's latency
    bw_gbps: tuple[float | None, ...]
    settings: SystemSettings
    kinds: tuple[KindFit, ...]
    dims: tuple[DimCalibration, ...]
    checks: tuple[CheckRow, ...]
    notes: tuple[str, ...]
    fit: str = "robust"


def _points(m: Measurement, net: Network, notes: list[str]) -> dict[int, list]:
    per_dim: dict[int, list] = {}
    skipped = 0
    for c in m.collectives:
        dims = collective_dims(net, c.group, m.source)
        whole = c.kind == P2P or (c.kind in COLLECTIVE_TYPES and len(dims) == 1
                                  and len(c.group) == net.dims[dims[0]].npus)
        if not whole or c.size_bytes <= 0 or len(dims) != 1 or c.transfer_ns <= 0:
            skipped += 1
            continue
        per_dim.setdefault(dims[0], []).append(c)
    if skipped:
        notes.append(f"{skipped} collective(s) not used: not over all NPUs of exactly one dimension (a send: "
                     "not within one), of a kind ASTRA-sim does not run, or without a size")
    return per_dim


def _kind_fit(dim: str, kind: str, colls: list, p: int, loss: str) -> KindFit:
    # a send moves its bytes once; a collective each NPU's ring traffic
    x = np.array([[1.0, c.size_bytes if kind == P2P else ring_traffic_bytes(kind, c.size_bytes, p)] for c in colls])
    y = np.array([float(c.transfer_ns) for c in colls])
    coef = fit_nnls(x, y, loss)
    return KindFit(dim, kind, float(coef[0]), 1.0 / float(coef[1]) if coef[1] > 0 else None,
                   quality(x, y, coef, loss=loss))


def _settings(num_dims: int, impls: dict[int, dict[str, str]]) -> SystemSettings:
    names = {k: tuple(impls.get(d, {}).get(k, "ring") for d in range(num_dims)) for k in KINDS}
    return SystemSettings(*(names[k] for k in KINDS), splits=1, endpoint_delay_ns=ENDPOINT_DELAY_NS,
                          local_mem_bw_gbps=DEFAULT_LOCAL_MEM_BW_GBPS)


def _links(net: Network, d: int, bw: float, lat: float) -> list[Link]:
    return [Link(x.topology, x.npus, bw if i == d else 1.0, lat if i == d else x.latency_ns)
            for i, x in enumerate(net.dims)]


def _send_hops(net: Network, c) -> int:
    from ..demand.groups import p2p_dims

    _, hops = p2p_dims(net, np.array([c.group[0]]), np.array([c.group[-1]]))
    return int(hops[0])


def _astra_ns(net: Network, d: int, c, links: list[Link], settings: SystemSettings) -> int:
    """ASTRA-sim's time of one measured collective or send on dimension d alone."""
    if c.kind == P2P:
        return message_ns(links[d], _send_hops(net, c), int(c.size_bytes))
    return collective_time_ns(c.kind, c.size_bytes, tuple(i == d for i in range(net.num_dims)), links, settings)


def _coefficients(net: Network, d: int, colls: list, settings: SystemSettings) -> np.ndarray:
    """Per collective: (n hops of latency, c bytes over bandwidth, e messages' endpoint delay); a
    send's are its hops and bytes (its one message has no endpoint delay)."""
    involved = tuple(i == d for i in range(net.num_dims))
    quiet = replace(settings, endpoint_delay_ns=0)
    rows = []
    for c in colls:
        if c.kind == P2P:
            rows.append((_send_hops(net, c), float(c.size_bytes), 0.0))
            continue
        n = collective_time_ns(c.kind, c.size_bytes, involved, _links(net, d, _BIG_BW, _PROBE_LATENCY), quiet)
        b = collective_time_ns(c.kind, c.size_bytes, involved, _links(net, d, 1.0, 0.0), quiet)
        e = collective_time_ns(c.kind, c.size_bytes, involved, _links(net, d, _BIG_BW, 0.0), settings)
        rows.append((round(n / _PROBE_LATENCY), float(b), float(e)))
    return np.array(rows).reshape(len(rows), 3)


def _fit_dim(net: Network, d: int, colls: list, impls: dict[int, dict[str, str]], loss: str):
    """The best implementation choice for dimension d: (error, DimCalibration, astra times);
    robust: the least median relative error; total: the least squared error of the times."""
    kinds = sorted({c.kind for c in colls if c.kind != P2P})    # a send has no implementation to choose
    y = np.array([float(c.transfer_ns) for c in colls])
    best = None
    for choice in itertools.product(*(CANDIDATES[k] for k in kinds)):
        trial = {**impls, d: dict(zip(kinds, choice))}
        settings = _settings(net.num_dims, trial)
        try:
            co = _coefficients(net, d, colls, settings)
        except LibraError:
            continue
        x = co[:, :2]
        coef = fit_nnls(x, y - co[:, 2], loss)
        lat = float(coef[0])
        bw = 1.0 / float(coef[1]) if coef[1] > 0 else _BIG_BW
        astra = [_astra_ns(net, d, c, _links(net, d, bw, lat), settings) for c in colls]
        rel = np.abs(np.array(astra) - y) / y
        err = ((float(np.median(rel)), float(rel.max())) if loss == "robust" else
               (float(((np.array(astra) - y) ** 2).sum()), float(rel.max())))
        if best is None or err < best[0]:
            q = quality(x, y - co[:, 2], coef, loss=loss)
            best = (err, DimCalibration(net.dims[d].name, lat, bw, tuple(zip(kinds, choice)), q), astra, trial)
    if best is None:
        raise LibraError(f"dimension {net.dims[d].name!r}: no ASTRA-sim implementation runs its measured collectives")
    return best


def calibrate(m: Measurement, net: Network, fit: str = "robust") -> Calibration:
    """Fit the network's dimensions to the measured collectives (module docstring)."""
    if fit not in FITS:
        raise LibraError(f"unknown fit {fit!r}; use one of {list(FITS)}")
    notes: list[str] = []
    per_dim = _points(m, net, notes)
    if not per_dim:
        raise LibraError(f"{m.source}: no measured collective over all NPUs of one dimension of network "
                         f"{net.name!r}; nothing to calibrate")
    kinds, dims, checks = [], [], []
    impls: dict[int, dict[str, str]] = {}
    bws: list[float | None] = [None] * net.num_dims
    new_dims = list(net.dims)
    for d in sorted(per_dim):
        colls = per_dim[d]
        for kind in sorted({c.kind for c in colls}):
            kinds.append(_kind_fit(net.dims[d].name, kind, [c for c in colls if c.kind == kind], net.dims[d].npus,
                                   fit))
        _, cal, astra, impls = _fit_dim(net, d, colls, impls, fit)
        dims.append(cal)
        bws[d] = cal.bw_gbps
        new_dims[d] = replace(net.dims[d], latency_ns=cal.latency_ns)
        checks += [CheckRow(c.index, c.kind, c.size_bytes, cal.dim, c.transfer_ns, t) for c, t in zip(colls, astra)]
        if len(colls) < 3:
            notes.append(f"dimension {cal.dim!r}: {len(colls)} collective(s) only; latency and bandwidth are not "
                         "both determined")
    missing = [net.dims[d].name for d in range(net.num_dims) if d not in per_dim]
    if missing:
        notes.append(f"dimension(s) {missing} carried no measured collective: latency kept, no bandwidth")
    checks.sort(key=lambda r: r.index)
    return Calibration(m.source, replace(net, dims=tuple(new_dims), name=f"{net.name}-calibrated"), tuple(bws),
                       _settings(net.num_dims, impls), tuple(kinds), tuple(dims), tuple(checks), tuple(notes), fit)


def system_json(c: Calibration) -> dict[str, Any]:
    """The system.json under which ASTRA-sim reproduces the calibration's times."""
    s = c.settings
    out: dict[str, Any] = {"scheduling-policy": "LIFO", "endpoint-delay": s.endpoint_delay_ns,
                           "active-chunks-per-dimension": 1, "preferred-dataset-splits": s.splits}
    for k in KINDS:
        out[IMPLEMENTATION_KEYS[k]] = list(s.implementations(k))
    out.update({"collective-optimization": "localBWAware", "local-mem-bw": s.local_mem_bw_gbps,
                "roofline-enabled": 0, "peak-perf": 1000})
    return out


def astra_network_yaml(c: Calibration) -> str | None:
    """ASTRA-sim's analytical network file (bandwidth in GiB/s, as it reads it); None when a
    dimension has no calibrated bandwidth."""
    if any(b is None for b in c.bw_gbps):
        return None
    dims = c.network.dims
    gib = [b * 1e9 / (1 << 30) for b in c.bw_gbps]
    return "\n".join([
        f"# calibrated from {c.source} by libra_astra calibrate; bandwidth in GiB/s "
        f"(GB/s: {', '.join(f'{b:.6g}' for b in c.bw_gbps)})",
        "topology: [ " + ", ".join(d.topology for d in dims) + " ]",
        "npus_count: [ " + ", ".join(str(d.npus) for d in dims) + " ]",
        "bandwidth: [ " + ", ".join(repr(float(g)) for g in gib) + " ]",
        "latency: [ " + ", ".join(repr(float(d.latency_ns)) for d in dims) + " ]",
    ]) + "\n"


def _q(q: FitQuality) -> dict[str, Any]:
    return {"points": q.points, "r2": q.r2, "relative_residuals": list(q.relative_residuals),
            "held_out_relative_errors": list(q.held_out)}


def calibration_to_dict(c: Calibration) -> dict[str, Any]:
    return {
        "format": "libra_astra.calibration", "version": 1, "source": c.source, "fit": c.fit,
        "network": c.network.to_dict(), "bw_gbps": list(c.bw_gbps), "system": system_json(c),
        "alpha_beta": [{"dim": k.dim, "kind": k.kind, "alpha_ns": k.alpha_ns, "bw_gbps": k.bw_gbps, **_q(k.quality)}
                       for k in c.kinds],
        "dimensions": [{"dim": d.dim, "latency_ns": d.latency_ns, "bw_gbps": d.bw_gbps,
                        "implementations": dict(d.implementations), **_q(d.quality)} for d in c.dims],
        "astra_sim_check": [{"index": r.index, "kind": r.kind, "size_bytes": r.size_bytes, "dim": r.dim,
                             "measured_ns": r.measured_ns, "astra_ns": r.astra_ns} for r in c.checks],
        "notes": list(c.notes),
    }
