"""A run directory read back: what emit recorded, and what the simulator left there if it ran.

``emit`` writes ``DIR/manifest.json`` (manifest.py); ``simulate`` writes ``DIR/sim/`` with the
simulator's ``stdout.txt`` and ``stderr.txt``, the ``command.txt`` it ran and, only when it
accepted the run (exit 0, every NPU finished), ``result.json``. The standard output is the
record read here, with the parser simulate itself uses, so a run simulate refused is read the
same way (how many ranks finished) and ``result.json`` adds only the host time and exit code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import limits
from ..errors import LibraError
from .manifest import Manifest, load_manifest
from .parse import OutputParser, RankStats, line_chunks
from .rundir import MANIFEST
from .run import SIM_DIR

# How deep, and through how many directories, one that is not a run is searched for run
# directories to name in the refusal (a mistaken 'show /' must still answer at once).
_HINT_DEPTH = 3
_HINT_DIRS = 2000


@dataclass(frozen=True)
class SimRecord:
    """What ``simulate`` left in ``DIR/sim``. Times in ns (1 simulator cycle = 1 ns)."""

    sim_dir: str
    npus_count: int
    ranks: tuple[RankStats, ...]          # every rank that printed its ``finished`` line
    accepted: bool                        # simulate wrote result.json: exit 0 and every NPU finished
    output_error: str = ""                # no output, or one holding what no working simulator prints
    exit_code: int | None = None          # from result.json
    wall_seconds: float | None = None     # host time of the run, from result.json
    backend: str = "unaware"              # from result.json: the analytical backend the binary ran
    # from result.json, on the aware backend: predict --backend aware's time (emit's model has no contention)
    backend_predicted_ns: float | None = None

    @property
    def missing(self) -> tuple[int, ...]:
        """Ranks 0..npus_count-1 that never printed ``finished``."""
        done = {r.rank for r in self.ranks}
        return tuple(r for r in range(self.npus_count) if r not in done)

    @property
    def complete(self) -> bool:
        """Every NPU finished and the output reads as a simulator's."""
        return not self.output_error and bool(self.ranks) and not self.missing

    @property
    def simulated_time_ns(self) -> int | None:
        """Time of the slowest rank; None unless every NPU finished."""
        return max(r.finished_ns for r in self.ranks) if self.complete else None

    def to_dict(self) -> dict[str, Any]:
        return {"sim_dir": self.sim_dir, "accepted": self.accepted, "complete": self.complete,
                "simulated_time_ns": self.simulated_time_ns, "ranks_finished": len(self.ranks),
                "npus_count": self.npus_count, "missing_ranks": list(self.missing), "output_error": self.output_error,
                "exit_code": self.exit_code, "wall_seconds": self.wall_seconds, "backend": self.backend,
                "backend_predicted_ns": self.backend_predicted_ns, "ranks": [r.to_dict() for r in self.ranks]}


@dataclass(frozen=True)
class RunRecord:
    """An emitted directory: its manifest, and the simulation if one ran there."""

    run_dir: str
    manifest: Manifest
    sim: SimRecord | None

    @property
    def prediction_error(self) -> float | None:
        """(predicted - simulated) / simulated, as simulate reports it; None without both times."""
        aware = self.sim is not None and self.sim.backend == "aware"
        pred = self.sim.backend_predicted_ns if aware else self.manifest.predicted_time_ns
        sim = self.sim.simulated_time_ns if self.sim is not None else None
        if pred is None or not sim:
            return None
        return float(pred) / sim - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "manifest": self.manifest.to_dict(),
                "simulation": self.sim.to_dict() if self.sim is not None else None,
                "prediction_error": self.prediction_error}


def _run_dirs_below(d: Path) -> list[Path]:
    """Run directories under ``d`` (a few levels down, sorted), for the hint of a refusal."""
    found = []
    for seen, (root, dirs, files) in enumerate(os.walk(d)):
        if seen >= _HINT_DIRS:
            break
        depth = len(Path(root).relative_to(d).parts)
        if MANIFEST in files and depth > 0:
            found.append(Path(root))
            dirs[:] = []
        elif depth >= _HINT_DEPTH:
            dirs[:] = []
        dirs.sort()
    return sorted(found)


def _shown(up: Path, d: Path) -> str:
    """``up`` (an ancestor of ``d``) written as the user wrote ``d``: relative if ``d`` was."""
    if d.is_absolute():
        return str(up)
    rel = os.path.relpath(up)
    return rel if not rel.startswith("..") else str(up)


def _not_a_run(d: Path) -> LibraError:
    """The one-line refusal of a directory without a manifest, pointing at what it holds instead."""
    head = f"{d}: not a run directory (no {MANIFEST})"
    for up in list(d.absolute().parents)[:_HINT_DEPTH]:
        if (up / MANIFEST).is_file():
            what = "the simulator's output" if d.name == SIM_DIR and up == d.absolute().parent else "a part"
            return LibraError(f"{head}: it is {what} of run directory {_shown(up, d)}; show that directory")
    inside = _run_dirs_below(d)
    if (d / "loop.json").is_file():
        runs = f", or one of its {len(inside)} run directories such as {inside[0]}" if inside else ""
        return LibraError(f"{head}: it is a loop's output; show {d / 'loop.json'}{runs}")
    if inside:
        more = f" (and {len(inside) - 1} more)" if len(inside) > 1 else ""
        return LibraError(f"{head}; it holds run directories such as {inside[0]}{more}: show one of those")
    return LibraError(f"{head}; give a directory made by 'libra-astra emit', or a demand, design, frontier or "
                      "loop file")


def _read_output(path: Path) -> tuple[tuple[RankStats, ...], str]:
    """Ranks parsed from the simulator's standard output, line by line (it can be gigabytes), and
    the parser's complaint if the output is not a working simulator's."""
    parser = OutputParser()
    max_line = limits.value(limits.MAX_SIM_LINE_BYTES)
    try:
        with path.open("rb") as f:
            for chunk, starts in line_chunks(f, max_line):
                if starts:
                    parser.feed(chunk.decode(errors="replace"))
    except LibraError as e:
        return parser.result().ranks, str(e)
    except OSError as e:
        return (), f"{path}: cannot be read ({e.strerror})"
    return parser.result().ranks, ""


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _result_json(path: Path) -> tuple[bool, int | None, float | None, str, float | None]:
    """(accepted, exit code, host seconds, backend, the aware backend's predicted time) from
    result.json; details of the wrong type are left out."""
    if not path.is_file():
        return False, None, None, "unaware", None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return True, None, None, "unaware", None
    code = data.get("exit_code")
    aware = data.get("backend") == "aware"
    return (True, code if isinstance(code, int) and not isinstance(code, bool) else None,
            _number(data.get("wall_seconds")), "aware" if aware else "unaware",
            _number(data.get("predicted_time_ns")) if aware else None)


def read_sim(run_dir: str | Path, npus_count: int) -> SimRecord | None:
    """What ``simulate`` left in ``run_dir/sim``; None if it has not run there."""
    sim = Path(run_dir) / SIM_DIR
    if not os.path.lexists(sim):
        return None
    out = sim / "stdout.txt"
    if not sim.is_dir() or not out.is_file():
        ranks, error = (), f"{sim} has no stdout.txt, so it is not what 'libra-astra simulate' leaves"
    else:
        ranks, error = _read_output(out)
    accepted, code, wall, backend, predicted = _result_json(sim / "result.json")
    return SimRecord(str(sim), npus_count, ranks, accepted, error, code, wall, backend, predicted)


def read_run(run_dir: str | Path) -> RunRecord:
    """The manifest of an emitted directory and its simulation, if any.

    Raises
    ------
    LibraError
        ``run_dir`` is not a directory emit made (the message names what it holds instead: a
        loop's output, run directories further down, a run's ``sim/``) or its manifest is not
        usable. A ``sim/`` that cannot be read is reported in :attr:`SimRecord.output_error`.
    """
    d = Path(run_dir)
    if not d.is_dir():
        raise LibraError(f"{d}: not a directory; give a directory made by 'libra-astra emit'")
    if not (d / MANIFEST).is_file():
        raise _not_a_run(d)
    manifest = load_manifest(d)
    return RunRecord(str(d), manifest, read_sim(d, manifest.npus_count))
