"""Start-up time of the command line: ``libra-astra --help`` (and a subcommand's --help) against
``python -c pass``, measured in the same run, printed as ratios.

The target is ``libra-astra --help`` under 0.3 s on the development machine: the commands import
numpy, scipy and the Chakra schema only when they run, so --help and shell completion (which
runs the program on every TAB) pay for click alone.

    python tools/bench_cli_start.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def _time(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> float:
    subprocess.run(cmd, check=True, capture_output=True, env=env)      # warm the file cache
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("libra-astra")
    cli = [exe] if exe else [sys.executable, "-m", "libra_astra.cli"]
    base = _time([sys.executable, "-c", "pass"], args.repeat)
    rows = [("python -c pass", base), ("python -c 'import click'", _time([sys.executable, "-c", "import click"],
                                                                          args.repeat))]
    for label, extra in (("libra-astra --help", ["--help"]), ("libra-astra optimize --help", ["optimize", "--help"])):
        rows.append((label, _time(cli + extra, args.repeat)))
    env = {**os.environ, "_LIBRA_ASTRA_COMPLETE": "bash_complete", "COMP_WORDS": "libra-astra op", "COMP_CWORD": "1"}
    rows.append(("shell completion (one TAB)", _time(cli, args.repeat, env)))
    print(f"median of {args.repeat} runs each")
    print(f"{'command':<30} {'time':>9} {'ratio to python -c pass':>24}")
    for label, t in rows:
        print(f"{label:<30} {t * 1e3:>7.1f} ms {t / base:>23.2f}x")
    help_t = rows[2][1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"libra-astra --help: {help_t * 1e3:.0f} ms ({'under' if help_t < 0.3 else 'over'} the 0.3 s target); "
          f"{help_t / rows[1][1]:.2f}x the time of importing click alone; load average {load:.1f} "
          f"(the target is for an idle machine, where python -c pass takes ~20 ms)")


if __name__ == "__main__":
    main()
