"""``manifest.json`` of an emitted run directory: what was emitted, how to run it, what we predict.

Written by ``emit`` and read by ``simulate``; this module is the only one that knows its keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import limits
from ..errors import LibraError
from ..files import read_json
from ..model.numbers import check_int, check_number

FORMAT = "libra_astra.astra_run"
VERSION = 1
DEFAULT_BINARY = "AstraSim_Analytical_Congestion_Unaware"
BINARY_ENV = "ASTRA_SIM_BIN"


@dataclass(frozen=True)
class SimulatorCall:
    """How to run the simulator on the directory (``args`` relative to it)."""

    args: tuple[str, ...]
    logging_folder: str
    command_line: str
    binary: str = DEFAULT_BINARY
    binary_env: str = BINARY_ENV
    run_from: str = "."

    def to_dict(self) -> dict[str, Any]:
        return {"binary": self.binary, "binary_env": self.binary_env, "args": list(self.args),
                "logging_folder": self.logging_folder, "run_from": self.run_from, "command_line": self.command_line}


@dataclass(frozen=True)
class Manifest:
    libra_astra_version: str
    mlc_chakra_version: str | None
    design: Mapping[str, Any]           # the design file's content
    workload: Mapping[str, Any]         # name, source, path, comm_groups, prefix, flat_ring_groups
    network: Mapping[str, Any]          # the logical network (LogicalNetwork.to_dict)
    preferred_dataset_splits: int
    system: Mapping[str, Any]           # system.json
    simulator: SimulatorCall
    workload_stats: Mapping[str, Any]
    prediction: Mapping[str, Any]       # time_ns (None with "unavailable": why), class_times_ns, model
    notes: tuple[str, ...] = field(default=())

    @property
    def npus_count(self) -> int:
        return int(self.network["npus_count"])

    @property
    def predicted_time_ns(self) -> float | None:
        return self.prediction.get("time_ns")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "libra_astra_version": self.libra_astra_version,
            "mlc_chakra_version": self.mlc_chakra_version,
            "design": dict(self.design),
            "workload": dict(self.workload),
            "network": dict(self.network),
            "preferred_dataset_splits": self.preferred_dataset_splits,
            "system": dict(self.system),
            "simulator": self.simulator.to_dict(),
            "workload_stats": dict(self.workload_stats),
            "prediction": dict(self.prediction),
            "notes": list(self.notes),
        }


def write_manifest(run_dir: str | Path, m: Manifest) -> Path:
    """Write ``run_dir/manifest.json`` (the directory is a fresh temporary one, so no overwrite check)."""
    p = Path(run_dir) / "manifest.json"
    try:
        text = json.dumps(m.to_dict(), indent=1, allow_nan=False)
    except ValueError:
        raise LibraError(f"{run_dir}: the run's manifest would hold a non-finite number (NaN or infinity); check "
                         "the design's values") from None
    p.write_text(text + "\n")
    return p


def check_manifest(data: Mapping[str, Any], path: str | Path, run_dir: str | Path) -> None:
    """The fields simulate relies on must be there and well typed; an unfinished emit is refused."""
    where = str(path)
    fix = f"re-emit the directory (libra-astra emit DESIGN --out {run_dir} --force)"
    if data.get("state", "complete") != "complete":
        raise LibraError(f"{run_dir}: emit did not finish writing this directory (manifest state "
                         f"{str(data.get('state'))[:40]!r}); {fix}")
    sim = data.get("simulator")
    if not isinstance(sim, dict) or not isinstance(sim.get("args"), list) or not all(
            isinstance(a, str) for a in sim["args"]):
        raise LibraError(f"{where}: 'simulator.args' must be a list of strings; {fix}")
    for key in ("design", "workload", "system", "workload_stats"):
        if not isinstance(data.get(key, {}), dict):
            raise LibraError(f"{where}: '{key}' must be an object; {fix}")
    if not isinstance(data.get("notes", []), list):
        raise LibraError(f"{where}: 'notes' must be a list; {fix}")
    net = data.get("network")
    if not isinstance(net, dict) or "npus_count" not in net:
        raise LibraError(f"{where}: 'network.npus_count' is missing; {fix}")
    check_int(net["npus_count"], where, "network.npus_count", minimum=1, maximum=limits.value(limits.MAX_RANKS))
    if "preferred_dataset_splits" in data:
        check_int(data["preferred_dataset_splits"], where, "preferred_dataset_splits", minimum=1)
    pred = data.get("prediction")
    if pred is not None:
        if not isinstance(pred, dict):
            raise LibraError(f"{where}: 'prediction' must be an object; {fix}")
        if pred.get("time_ns") is not None:
            check_number(pred["time_ns"], where, "prediction.time_ns", minimum=0, finite=True)


def load_manifest(run_dir: str | Path) -> Manifest:
    """The manifest of an emitted directory; LibraError if it is not one."""
    p = Path(run_dir) / "manifest.json"
    if not p.is_file():
        raise LibraError(f"{run_dir}: not an emitted directory (no manifest.json); make one with 'libra-astra emit'")
    data = read_json(p, "manifest", "re-emit the directory")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LibraError(f"{p}: not a libra_astra run manifest; make the directory with 'libra-astra emit'")
    check_manifest(data, p, run_dir)
    try:
        sim = data["simulator"]
        return Manifest(
            data.get("libra_astra_version", ""), data.get("mlc_chakra_version"), data.get("design", {}),
            data.get("workload", {}), data["network"], int(data.get("preferred_dataset_splits", 1)),
            data.get("system", {}),
            SimulatorCall(tuple(sim["args"]), sim["logging_folder"], sim.get("command_line", ""),
                          sim.get("binary", DEFAULT_BINARY), sim.get("binary_env", BINARY_ENV), sim.get("run_from", ".")),
            data.get("workload_stats", {}), data.get("prediction") or {}, tuple(data.get("notes", ())))
    except (KeyError, TypeError, ValueError) as e:
        raise LibraError(f"{p}: manifest is missing or has a bad {e}; re-emit the directory") from None
