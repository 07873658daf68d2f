#!/usr/bin/env python3
"""Benchmark: the measured-run replays (GPU-faithful and host-faithful) with the collectives
released in one event-driven pass, against the whole-rank iteration they replace, in one run.

Per real run of tests/fixtures/real (8-GPU DLRM and Megatron, the 100-step gloo runs): the
profiles are read and measured once, then each replay runs with the measured transfers and with
them tripled (CPU time of this process, best of --repeat runs). The times of both must agree to
the nanosecond; the ratio iteration / one pass is printed per run.

    python tools/bench_replay.py
    python tools/bench_replay.py --repeat 3 --sets ddp4k pipeline4k
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libra_astra.measure import cpu_replay as cpu_mod  # noqa: E402
from libra_astra.measure import replay as gpu_mod  # noqa: E402
from libra_astra.measure.kineto import read_profiles  # noqa: E402
from libra_astra.measure.measurement import measure_profiles  # noqa: E402
from libra_astra.traces.cpu_groups import load_group_map  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "real"
SETS = {
    "param_dlrm8": (REAL / "param_dlrm8" / "param_dlrm8", None),
    "astra_megatron8": (REAL / "astra_megatron8" / "astra_megatron8", None),
    "ddp4k": (REAL / "measured" / "ddp4k" / "ddp4k", None),
    "tpdp4k": (REAL / "measured" / "tpdp4k" / "tpdp4k", REAL / "measured" / "tpdp4k" / "tpdp4k.groups.yml"),
    "pipeline4k": (REAL / "measured" / "pipeline4k" / "pipeline4k",
                   REAL / "measured" / "pipeline4k" / "pipeline4k.groups.yml"),
}


def _timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    one_pass = cpu_mod.settle_events
    print(f"{'run':<16} {'collectives':>11} {'transfers':>9} {'one pass s':>10} {'iteration s':>11} {'ratio':>7}")
    agree = True
    for name in args.sets:
        prefix, groups = SETS[name]
        gm = load_group_map(groups) if groups else None
        profiles, notes = read_profiles([str(prefix)])
        m = measure_profiles(profiles, notes, None, str(prefix), gm)
        for label, scale in (("measured", 1), ("x3", 3)):
            def run(scale=scale):
                f = (lambda c: scale * c.transfer_ns)
                if m.host_only:
                    return cpu_mod.cpu_replay(profiles, m.collectives, f, m.world_size, m.clock_offsets_ns, gm)
                return gpu_mod.replay(profiles, m.collectives, f, m.world_size, m.clock_offsets_ns)

            t_fast, fast = _timed(run, args.repeat)
            cpu_mod.settle_events = gpu_mod.settle_events = lambda *a: None
            try:
                t_slow, slow = _timed(run, args.repeat)
            finally:
                cpu_mod.settle_events = gpu_mod.settle_events = one_pass
            agree &= fast == slow
            print(f"{name:<16} {len(m.collectives):>11} {label:>9} {t_fast:>10.3f} {t_slow:>11.3f} "
                  f"{t_slow / t_fast:>6.1f}x{'' if fast == slow else '  DIFFERENT'}")
    print("times agree on every run" if agree else "TIMES DIFFER")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
