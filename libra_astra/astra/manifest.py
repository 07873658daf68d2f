"""``manifest.json`` of an emitted run directory: what was emitted, how to run it, what we predict.

Written by ``emit`` and read by ``simulate``; this module is the only one that knows its keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import LibraError
from ..files import read_json

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
    p.write_text(json.dumps(m.to_dict(), indent=1) + "\n")
    return p


def load_manifest(run_dir: str | Path) -> Manifest:
    """The manifest of an emitted directory; LibraError if it is not one."""
    p = Path(run_dir) / "manifest.json"
    if not p.is_file():
        raise LibraError(f"{run_dir}: not an emitted directory (no manifest.json); make one with 'libra-astra emit'")
    data = read_json(p, "manifest", "re-emit the directory")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LibraError(f"{p}: not a libra_astra run manifest; make the directory with 'libra-astra emit'")
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
