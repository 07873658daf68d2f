"""Run ASTRA-sim on an emitted directory and collect its per-rank times.

The run happens in a fresh ``DIR/sim/`` (stdout.txt, stderr.txt, the logging folder ``log/`` and
result.json). The simulator is trusted only when it exits 0 AND every NPU printed its ``finished``
line: several failures (a dependency that never resolves, collectives that do not match across
ranks) exit 0 with ranks missing. A rank reported finished at cycle 0 although its rank file holds
work is refused too (zero_time.py): that binary did not run the nodes.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .. import limits, publish
from ..errors import LibraError
from .manifest import BINARY_ENV, DEFAULT_BINARY, load_manifest
from .parse import OutputParser, RankStats, line_chunks
from .zero_time import zero_time_failure

SIM_DIR = "sim"
# The simulator holds every node of every rank in memory from the start: peak RSS 1.60 GB for the
# 1.06 M nodes of a 4,096-rank GPT-3 set (astra-sim 518bd51, analytical backend), 1.51 KB a node.
# Rounded up, so a run refused here would surely not have fitted.
SIM_BYTES_PER_NODE = 1600


def simulator_memory_bytes(nodes: int) -> int:
    """Memory ASTRA-sim needs to hold ``nodes`` ET nodes (measured; see SIM_BYTES_PER_NODE)."""
    return nodes * SIM_BYTES_PER_NODE


def available_memory_bytes() -> int | None:
    """MemAvailable of this machine (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _check_memory(run: Path, nodes: Any) -> None:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes <= 0:
        return
    need, have = simulator_memory_bytes(nodes), available_memory_bytes()
    if have is not None and need > have:
        raise LibraError(f"{run}: ASTRA-sim would need about {need / 1e9:.1f} GB to hold the {nodes:,} nodes of this "
                         f"run ({SIM_BYTES_PER_NODE / 1e3:.1f} KB a node) and this machine has {have / 1e9:.1f} GB "
                         "available, so it would be killed for lack of memory; emit a shorter workload (fewer layers "
                         "or iterations), run it on a larger machine, or pass --no-memory-check to try anyway")
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
    predicted_time_ns: float | None = None   # from the manifest, when emit recorded one (aware: see prediction_by)
    backend: str = "unaware"                 # the analytical backend the binary runs (backend_of)
    prediction_by: str = "emit"              # what predicted_time_ns is; on the aware backend predict's

    @property
    def prediction_error(self) -> float | None:
        """(predicted - simulated) / simulated, or None without a prediction."""
        if self.predicted_time_ns is None or self.simulated_time_ns <= 0:
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
            "backend": self.backend, "prediction_by": self.prediction_by,
            "command": list(self.command),
            "ranks": [r.to_dict() for r in self.ranks],
        }


def _given_binary(binary: str | os.PathLike | None) -> str:
    """The simulator as the user named it: ``binary`` if given, else $ASTRA_SIM_BIN ('' if neither)."""
    return os.fspath(binary) if binary else os.environ.get(BINARY_ENV, "")


def resolve_binary(binary: str | os.PathLike | None = None) -> str:
    """Absolute path of the simulator: ``binary`` if given, else $ASTRA_SIM_BIN (a path or a name on PATH)."""
    b = _given_binary(binary)
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


def _last_output(sim: Path, stdout_tail: list[str] | None = None) -> str:
    out = stdout_tail[-3:] if stdout_tail is not None else _tail(sim / "stdout.txt", 3)
    lines = _tail(sim / "stderr.txt", 3) + out
    return "; last output: " + " | ".join(lines) if lines else "; it printed nothing"


def _exit_reason(code: int) -> str:
    if code in (134, -signal.SIGABRT):
        return "aborted (an assertion failed, or an unhandled error)"
    if code == 255:
        return "stopped with a configuration error"
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def backend_of(*names: str) -> str:
    """The analytical backend a binary runs, told by its name as given or behind its links:
    ``aware`` for AstraSim_Analytical_Congestion_Aware, else ``unaware``."""
    return "aware" if any("congestion_aware" in Path(n).name.lower() for n in names if n) else "unaware"


def _aware_prediction(run: Path) -> tuple[float | None, str]:
    """(time, what it is) of the congestion-aware backend's exact model (``predict --backend
    aware``): emit's prediction follows the optimizer's time model, which has no link contention."""
    from dataclasses import replace

    from .predict_inputs import inputs_from_run_dir, predict_inputs
    try:
        p = predict_inputs(replace(inputs_from_run_dir(run), backend="aware"))
    except LibraError as e:
        return None, f"none: predict --backend aware refused this run ({e})"
    return float(p.prediction.time_ns), "predict --backend aware"


def _check_backend(run: Path, names: tuple[str, str], network: Any) -> None:
    """The congestion-aware analytical backend of ASTRA-sim 518bd51 takes one-dimensional networks
    only ("only support 1-dim topology"): refuse a run of more before starting it."""
    exe = next((n for n in names if backend_of(n) == "aware"), None)
    if exe is None:
        return
    dims = network.get("dimensions") if isinstance(network, Mapping) else None
    if isinstance(dims, list) and len(dims) > 1:
        names = " x ".join(f"{d.get('topology')} {d.get('npus')}" for d in dims if isinstance(d, dict))
        raise LibraError(f"{run}: {Path(exe).name} (the congestion-aware backend) simulates one-dimensional networks "
                         f"only, and this run's network has {len(dims)} dimensions ({names}); use "
                         f"AstraSim_Analytical_Congestion_Unaware, or a one-dimensional network")


def simulate(run_dir: str | os.PathLike, binary: str | os.PathLike | None = None, *, timeout_s: float = 3600.0,
             overwrite: bool = False, check_memory: bool = True) -> SimResult:
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
    check_memory
        Refuse to start when the simulator would need more memory than the machine has available
        (estimated from the emitted node count; see :func:`simulator_memory_bytes`).

    Raises
    ------
    LibraError
        No binary, not an emitted directory, an existing ``sim/``, not enough memory, a timeout, a
        non-zero exit, a rank without its ``finished`` line, or a rank finished at 0 cycles although
        its rank file holds compute or communication (every rank at 0 while a positive time was
        predicted, likewise). The message ends with the simulator's last lines.
    """
    run = Path(run_dir)
    manifest = load_manifest(run)
    exe = resolve_binary(binary)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise LibraError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    npus = manifest.npus_count
    _check_backend(run, (_given_binary(binary), exe), manifest.network)
    sim = run / SIM_DIR
    if os.path.lexists(sim) and not overwrite:
        raise LibraError(f"{sim}: already exists (an earlier run); pass --force to replace it")
    if check_memory:
        _check_memory(run, manifest.workload_stats.get("nodes_written"))
    # The run writes into a fresh hidden directory, published as sim/ when the simulator is done:
    # an earlier sim/ stays intact until then, and an interrupted run leaves nothing half-written.
    tmp = publish.temp_dir(sim)
    with publish.building(tmp, sim):
        argv = [exe] + list(manifest.simulator.args) + [f"--logging-folder={tmp.name}/log"]
        shown = [exe] + list(manifest.simulator.args) + [f"--logging-folder={SIM_DIR}/log"]
        (tmp / "log").mkdir()
        (tmp / "command.txt").write_text(shlex.join(shown) + "\n")
        start = time.monotonic()
        code, timed_out, parsed, tail = _run(argv, run, tmp, timeout_s)
        wall = time.monotonic() - start
    failure = None
    if timed_out:
        failure = (f"{run}: ASTRA-sim did not finish within {timeout_s:g} s and was stopped; "
                   f"raise --timeout or simulate a smaller workload{_last_output(tmp, tail)}")
    elif code != 0:
        failure = (f"{run}: ASTRA-sim {_exit_reason(code)} (exit code {code}); see {sim}/stderr.txt"
                   f"{_last_output(tmp, tail)}")
    elif isinstance(parsed, LibraError):
        failure = f"{run}: {parsed}; see {sim}/stdout.txt"
    else:
        missing = parsed.missing(npus) if len(parsed.ranks) < npus else ()
        extra = [r.rank for r in parsed.ranks if r.rank >= npus]
        if extra:
            failure = f"{run}: ASTRA-sim reported rank {extra[0]} but the network has {npus} NPUs; re-emit the directory"
        elif missing:
            shown_m = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            failure = (f"{run}: ASTRA-sim exited 0 but {len(missing)} of {npus} ranks never finished "
                       f"(ranks {shown_m}); a dependency never resolved or collectives do not match across ranks"
                       f"{_last_output(tmp, tail)}")
        else:
            zero = zero_time_failure(run, manifest, parsed.ranks, exe)
            if zero is not None:
                failure = f"{run}: {zero}; see {sim}/stdout.txt"
    if failure is not None:
        # keep the failed run's output for inspection where the message points
        _publish_sim(tmp, sim, overwrite)
        raise LibraError(failure)
    predicted, by = manifest.predicted_time_ns, "emit"
    backend = backend_of(_given_binary(binary), exe)
    if backend == "aware":
        predicted, by = _aware_prediction(run)
    result = SimResult(str(run), str(sim), exe, code, wall, npus, manifest.preferred_dataset_splits,
                       parsed.ranks, tuple(shown), float(predicted) if predicted is not None else None, backend, by)
    with publish.building(tmp, tmp / "result.json"):
        (tmp / "result.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    _publish_sim(tmp, sim, overwrite)
    return result


def _publish_sim(tmp: Path, sim: Path, overwrite: bool) -> None:
    """Put the finished run directory at sim/; an earlier sim/ is replaced only with ``overwrite``."""
    trash = None
    try:
        if os.path.lexists(sim) and overwrite:
            trash = publish.temp_dir(sim)
            os.rename(sim, trash / SIM_DIR)
        publish.publish(tmp, sim, appeared=f"{sim}: appeared while the simulator ran (another simulate?); it is "
                        "kept; pass --force to replace it")
    except OSError as e:
        publish.discard(tmp)
        raise publish.write_error(sim, e) from None
    finally:
        if trash is not None:
            publish.discard(trash)
    publish._unregister(str(tmp))


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, however it dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _run(argv: list[str], cwd: Path, tmp: Path, timeout_s: float):
    """Run the simulator, streaming stdout to stdout.txt and to the parser line by line.

    Returns (exit code, timed out?, ParsedOutput or the LibraError the parser raised, last lines).
    Memory stays bounded: one line (at most MAX_SIM_LINE_BYTES are parsed) and a tail of lines.
    """
    tail: deque[str] = deque(maxlen=limits.value(limits.SIM_OUTPUT_TAIL_LINES))
    max_line = limits.value(limits.MAX_SIM_LINE_BYTES)
    parser = OutputParser()
    parse_error: LibraError | None = None
    timed_out = threading.Event()
    with (tmp / "stdout.txt").open("wb") as out, (tmp / "stderr.txt").open("wb") as err:
        # A session of its own, so a timeout or an interruption can end the simulator and anything it started.
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)

        def stop() -> None:
            timed_out.set()
            _kill(proc)
        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        try:    # from here on an interruption ends the simulator: it may already be running
            timer.start()
            assert proc.stdout is not None
            for chunk, starts in line_chunks(proc.stdout, max_line):
                out.write(chunk)
                if starts:
                    line = chunk.decode(errors="replace")
                    tail.append(_PREFIX.sub("", line).strip()[:300])
                    if parse_error is None:
                        try:
                            parser.feed(line)
                        except LibraError as e:
                            parse_error = e
            code = proc.wait()
        except BaseException:
            _kill(proc)
            raise
        finally:
            timer.cancel()
    result = parse_error if parse_error is not None else parser.result()
    return code, timed_out.is_set(), result, [t for t in tail if t]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
