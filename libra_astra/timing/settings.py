"""The time-model settings every command shares, and the words that name them in every result.

One default for every command: the ``pipelined`` model with the settings ``emit`` writes for
ASTRA-sim (ring algorithm, ``DEFAULT_SPLITS`` chunks per collective, per-hop latency from the
network file, ``DEFAULT_LOCAL_MEM_BW_GBPS``) and dependency-aware overlap, i.e. the time the
simulator computes and the loop checks. ``libra`` is the LIBRA paper's model (max over dimensions
of traffic / bandwidth, no latency), timed without overlap unless asked.

Options that do not apply to a model are refused, not ignored, so a result always means what its
header says. This module imports nothing heavy: the command line reads its defaults before any
numerical library is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..errors import LibraError

if TYPE_CHECKING:  # pragma: no cover
    from .model import TimeModel

MODELS = ("pipelined", "libra")
OBJECTIVES = ("perf", "perf-per-cost", "min-cost", "min-energy", "perf-per-watt", "min-tco")     # problem.OBJECTIVES, without importing numpy
DEFAULT_MODEL = "pipelined"
DEFAULT_SPLITS = 1
# What emit writes as ASTRA-sim's local-mem-bw: large, so that local reductions cost ~nothing,
# and the same number in the model, so predicted and simulated times use one setting.
DEFAULT_LOCAL_MEM_BW_GBPS = 1e9


def default_overlap(kind: str) -> bool:
    """The simulator overlaps compute and communication; the paper's model sums them."""
    return kind == "pipelined"


def resolve_model(kind: str | None = None, splits: int | None = None, local_mem_bw_gbps: float | None = None,
                  overlap: bool | None = None, system: Any = None) -> "TimeModel":
    """The time model for the options a user gave (None: not given), refusing options the model ignores."""
    from .model import TimeModel

    kind = kind or DEFAULT_MODEL
    if kind not in MODELS:
        raise LibraError(f"unknown time model {kind!r}; use one of {list(MODELS)}")
    if kind == "libra":
        given = [name for name, v in (("--splits", splits), ("--local-mem-bw", local_mem_bw_gbps)) if v is not None]
        if given:
            names = " and ".join(given)
            raise LibraError(f"{names} {'applies' if len(given) == 1 else 'apply'} to --model pipelined only (the "
                             f"LIBRA model has no chunks, latency or local reduction cost); drop {names} or use "
                             "--model pipelined")
        return TimeModel("libra", overlap=default_overlap(kind) if overlap is None else overlap)
    return TimeModel("pipelined", splits=DEFAULT_SPLITS if splits is None else splits, latency=True,
                     local_mem_bw_gbps=DEFAULT_LOCAL_MEM_BW_GBPS if local_mem_bw_gbps is None else local_mem_bw_gbps,
                     overlap=default_overlap(kind) if overlap is None else overlap, system=system)


def model_settings(model: "TimeModel") -> dict[str, Any]:
    """The settings of a model as stored in design, frontier and loop files."""
    out: dict[str, Any] = {"kind": model.kind, "overlap": model.overlap}
    if model.kind == "pipelined":
        out.update(splits=model.splits, latency=model.latency, local_mem_bw_gbps=model.local_mem_bw_gbps)
    if model.efficiency is not None:
        out["efficiency"] = list(model.efficiency)
    if model.system is not None:
        out["system"] = model.system.to_dict()
    return out


def model_from_settings(settings: Mapping[str, Any], source: str) -> "TimeModel":
    from .model import TimeModel

    if not isinstance(settings, Mapping):
        raise LibraError(f"{source}: time_model_settings must be an object, got {settings!r}")
    kind = settings.get("kind")
    if kind not in MODELS:
        raise LibraError(f"{source}: time_model_settings.kind must be one of {list(MODELS)}, got {kind!r}")
    system = None
    if settings.get("system") is not None:
        from .system_phases import SystemTiming

        system = SystemTiming.from_dict(settings["system"], source)
    try:
        if kind == "libra":
            return TimeModel("libra", overlap=bool(settings.get("overlap", False)))
        eff = settings.get("efficiency")
        mem = settings.get("local_mem_bw_gbps")
        return TimeModel("pipelined", splits=int(settings.get("splits", DEFAULT_SPLITS)),
                         latency=bool(settings.get("latency", True)),
                         local_mem_bw_gbps=None if mem is None else float(mem),
                         efficiency=None if eff is None else tuple(float(e) for e in eff),
                         overlap=bool(settings.get("overlap", False)), system=system)
    except (TypeError, ValueError, LibraError) as e:   # the model's own checks name no file
        raise LibraError(f"{source}: bad time_model_settings {dict(settings)!r}: {e}") from None


def describe_settings(s: Mapping[str, Any]) -> str:
    """``model pipelined, 1 chunk per collective, ...`` from stored settings (model_settings)."""
    overlap = ("overlap on (dependency graph)" if s.get("overlap") else "overlap off (compute + communication)")
    if s.get("kind") == "libra":
        return f"model libra (paper: max over dimensions of traffic/B) | chunks n/a | no latency | {overlap}"
    k = s.get("splits", DEFAULT_SPLITS)
    mem = s.get("local_mem_bw_gbps")
    parts = ["model pipelined (ASTRA-sim ring)", f"{k} chunk{'s' if k != 1 else ''} per collective",
             "per-hop latency" if s.get("latency", True) else "no latency", overlap,
             "local-mem-bw unlimited" if mem is None else f"local-mem-bw {_num(mem)} GB/s"]
    if s.get("efficiency") is not None:
        parts.append("dimension efficiency " + ", ".join(f"{e:.4g}" for e in s["efficiency"]))
    if s.get("system") is not None:
        parts[0] = "model pipelined (ASTRA-sim, your system.json)"
        parts.append(describe_system(s["system"]))
    return " | ".join(parts)


def describe_system(sy: Mapping[str, Any]) -> str:
    """``all-reduce ring,direct; ...; 2 active chunks; endpoint-delay 10 ns; localBWAware``."""
    impls = sy.get("implementations", {})
    names = "; ".join(f"{k.lower().replace('_', '-')} {','.join(v)}" for k, v in impls.items())
    k = sy.get("active_chunks", 1)
    return (f"{names} | {k} active chunk{'s' if k != 1 else ''} per dimension | endpoint-delay "
            f"{_num(sy.get('endpoint_delay_ns', 0))} ns | {sy.get('collective_optimization')}")


def _num(x: float) -> str:
    return f"{x:.4g}".replace("e+0", "e").replace("e+", "e")


def describe_model(model: "TimeModel") -> str:
    return describe_settings(model_settings(model))


def header(objective: str, settings: Mapping[str, Any]) -> str:
    """The line every result starts with: objective and time-model settings."""
    return f"objective {objective} | {describe_settings(settings)}"


def emit_settings(design_name: str, settings: Mapping[str, Any], splits: int | None,
                  local_mem_bw_gbps: float | None) -> tuple[int, float, list[str]]:
    """(splits, local-mem-bw, notes) to emit a design with: the design's own settings, or the
    user's where the design has none; a conflicting override is refused with the reason."""
    notes: list[str] = []
    if settings.get("kind") == "pipelined":
        ds = int(settings.get("splits", DEFAULT_SPLITS))
        dm = settings.get("local_mem_bw_gbps")
        if splits is not None and splits != ds:
            raise LibraError(f"design {design_name!r} was optimized for {ds} chunk{'s' if ds != 1 else ''} per "
                             f"collective (pipelined model); emitting it with --splits {splits} would simulate "
                             f"another time model than the one optimized; drop --splits, or optimize again with "
                             f"--splits {splits}")
        if local_mem_bw_gbps is not None and dm is not None and local_mem_bw_gbps != dm:
            raise LibraError(f"design {design_name!r} was optimized with local-mem-bw {_num(dm)} GB/s; emitting "
                             f"it with --local-mem-bw {_num(local_mem_bw_gbps)} would simulate another time model "
                             f"than the one optimized; drop --local-mem-bw, or optimize again with --local-mem-bw "
                             f"{_num(local_mem_bw_gbps)}")
        mem = dm if dm is not None else (DEFAULT_LOCAL_MEM_BW_GBPS if local_mem_bw_gbps is None else local_mem_bw_gbps)
        return ds, float(mem), notes
    k = DEFAULT_SPLITS if splits is None else splits
    mem = DEFAULT_LOCAL_MEM_BW_GBPS if local_mem_bw_gbps is None else local_mem_bw_gbps
    notes.append(f"design optimized with the {settings.get('kind', 'libra')} model, which the simulator does not "
                 f"compute; emitted with {k} chunk{'s' if k != 1 else ''} per collective, and predicted with the "
                 "pipelined model for these settings")
    return k, float(mem), notes
