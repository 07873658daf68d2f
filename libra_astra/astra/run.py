"""Run ASTRA-sim on an emitted directory and collect its per-rank times.

The run happens in a fresh ``DIR/sim/`` (stdout.txt, stderr.txt, the logging folder ``log/`` and
result.json). The simulator is trusted only when it exits 0 AND every NPU printed its ``finished``
line: several failures (a dependency that never resolves, collectives that do not match across
ranks) exit 0 with ranks missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LibraError
from .manifest import BINARY_ENV, DEFAULT_BINARY, load_manifest
from .parse import RankStats, parse_output

SIM_DIR = "sim"
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:.]+\] ")


@dataclass(frozen=True)
class SimResult:
    """Outcome of one successful simulation. Times in ns (1 simulator cycle = 1 ns)."""

    run_dir: str
    sim_dir: str
    binary: str
    exit_code: int
    wall_seconds: float
    npus_count: int
    splits: int
    ranks: tuple[RankStats, ...]
    command: tuple[str, ...]
    predicted_time_ns: float | None = None   # from the manifest, when emit recorded one

    @property
    def prediction_error(self) -> float | None:
        """(predicted - simulated) / simulated, or None without a prediction."""
        if self.predicted_time_ns is None:
            return None
        return self.predicted_time_ns / self.simulated_time_ns - 1.0

    @property
    def simulated_time_ns(self) -> int:
        """Time of the slowest rank."""
        return max(r.finished_ns for r in self.ranks)

    @property
    def finished_ns(self) -> tuple[int, ...]:
        return tuple(r.finished_ns for r in self.ranks)

    @property
    def exposed_comm_ns(self) -> tuple[int, ...]:
        return tuple(r.exposed_comm_ns for r in self.ranks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir, "sim_dir": self.sim_dir, "binary": self.binary,
            "exit_code": self.exit_code, "wall_seconds": self.wall_seconds,
            "npus_count": self.npus_count, "preferred_dataset_splits": self.splits,
            "simulated_time_ns": self.simulated_time_ns,
            "predicted_time_ns": self.predicted_time_ns, "prediction_error": self.prediction_error,
            "command": list(self.command),
            "ranks": [r.to_dict() for r in self.ranks],
        }


def resolve_binary(binary: str | os.PathLike | None = None) -> str:
    """Absolute path of the simulator: ``binary`` if given, else $ASTRA_SIM_BIN (a path or a name on PATH)."""
    b = os.fspath(binary) if binary else os.environ.get(BINARY_ENV, "")
    if not b:
        raise LibraError(f"no ASTRA-sim binary given: set {BINARY_ENV} to the path of {DEFAULT_BINARY} "
                         f"or pass --astra-sim BIN")
    found = shutil.which(b) if os.sep not in b else (b if os.path.isfile(b) and os.access(b, os.X_OK) else None)
    if not found:
        raise LibraError(f"ASTRA-sim binary {b!r} not found or not executable; set {BINARY_ENV} to the path of "
                         f"{DEFAULT_BINARY} or pass --astra-sim BIN")
    return str(Path(found).resolve())


def _tail(path: Path, n: int) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    lines = [_PREFIX.sub("", ln).strip() for ln in text.splitlines()]
    return [ln[:300] for ln in lines if ln][-n:]


def _last_output(sim: Path) -> str:
    lines = _tail(sim / "stderr.txt", 3) + _tail(sim / "stdout.txt", 3)
    return "; last output: " + " | ".join(lines) if lines else "; it printed nothing"


def _exit_reason(code: int) -> str:
    if code in (134, -signal.SIGABRT):
        return "aborted (an assertion failed, or an unhandled error)"
    if code == 255:
        return "stopped with a configuration error"
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def simulate(run_dir: str | os.PathLike, binary: str | os.PathLike | None = None, *, timeout_s: float = 3600.0,
             overwrite: bool = False) -> SimResult:
    """Run ASTRA-sim on the directory written by :func:`emit` and parse every rank's result.

    Parameters
    ----------
    run_dir
        Directory made by ``emit`` (it has manifest.json).
    binary
        Simulator path or name; default $ASTRA_SIM_BIN.
    timeout_s
        Wall-clock limit; the simulator is killed after it.
    overwrite
        Replace an existing ``sim/`` subdirectory (an earlier run).

    Raises
    ------
    LibraError
        No binary, not an emitted directory, an existing ``sim/``, a timeout, a non-zero exit, or a
        rank without its ``finished`` line. The message ends with the simulator's last lines.
    """
    run = Path(run_dir)
    manifest = load_manifest(run)
    exe = resolve_binary(binary)
    if not timeout_s > 0:
        raise LibraError(f"timeout must be > 0 seconds, got {timeout_s!r}")
    npus = manifest.npus_count
    sim = run / SIM_DIR
    if sim.exists():
        if not overwrite:
            raise LibraError(f"{sim}: already exists (an earlier run); pass --force to replace it")
        shutil.rmtree(sim)
    (sim / "log").mkdir(parents=True)
    argv = [exe] + list(manifest.simulator.args) + [f"--logging-folder={SIM_DIR}/log"]
    (sim / "command.txt").write_text(shlex.join(argv) + "\n")
    start = time.monotonic()
    with (sim / "stdout.txt").open("wb") as out, (sim / "stderr.txt").open("wb") as err:
        # A session of its own, so a timeout can end the simulator and anything it started.
        proc = subprocess.Popen(argv, cwd=run, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise LibraError(f"{run}: ASTRA-sim did not finish within {timeout_s:g} s and was stopped; "
                             f"raise --timeout or simulate a smaller workload{_last_output(sim)}") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.monotonic() - start
    if code != 0:
        raise LibraError(f"{run}: ASTRA-sim {_exit_reason(code)} (exit code {code}); see {sim}/stderr.txt"
                         f"{_last_output(sim)}")
    parsed = parse_output((sim / "stdout.txt").read_text(errors="replace"))
    missing = parsed.missing(npus)
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise LibraError(f"{run}: ASTRA-sim exited 0 but {len(missing)} of {npus} ranks never finished "
                         f"(ranks {shown}); a dependency never resolved or collectives do not match across ranks"
                         f"{_last_output(sim)}")
    extra = [r.rank for r in parsed.ranks if r.rank >= npus]
    if extra:
        raise LibraError(f"{run}: ASTRA-sim reported rank {extra[0]} but the network has {npus} NPUs; re-emit the directory")
    predicted = manifest.predicted_time_ns
    result = SimResult(str(run), str(sim), exe, code, wall, npus, manifest.preferred_dataset_splits,
                       parsed.ranks, tuple(argv), float(predicted) if predicted is not None else None)
    (sim / "result.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    return result
