"""Ranks that ASTRA-sim reports finished at cycle 0 although their rank files hold work.

With roofline off (emit's system.json), ASTRA-sim replays a compute node for
``max(1, duration_micros * 1000)`` cycles, so a rank holding one cannot finish at cycle 0; a
collective, send or receive of a positive size pays link latency or endpoint delay (emit refuses
both at 0) and its bytes over a finite bandwidth. Such a report is not a fast run: the binary did
not run those nodes (a stand-in or broken build, or one whose Chakra schema decodes them as
INVALID nodes, which it skips at no cost). Empty ranks (a stage with nothing to do) do finish at 0
and are accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import LibraError
from ..traces.reader import TraceReader
from ..traces.schema import COMM_NODE_TYPES, COMP_NODE
from .manifest import Manifest
from .parse import RankStats

_WORKLOAD_ARG = "--workload-configuration="


class RankWork(NamedTuple):
    """Nodes of one rank file that take at least one simulator cycle."""

    compute: int
    communication: int

    @property
    def any(self) -> bool:
        return self.compute + self.communication > 0


def rank_work(run: Path, manifest: Manifest, ranks: Sequence[int]) -> dict[int, RankWork]:
    """Timed nodes in the rank files the simulator was given (``--workload-configuration``) for
    ``ranks``; a rank whose file cannot be read is left out (it proves nothing either way)."""
    prefix = next((a[len(_WORKLOAD_ARG):] for a in manifest.simulator.args if a.startswith(_WORKLOAD_ARG)), None)
    if prefix is None or not ranks:
        return {}
    reader = TraceReader()
    out: dict[int, RankWork] = {}
    for r in ranks:
        try:
            prog = reader.read(run / f"{prefix}.{r}.et")
        except (LibraError, OSError):
            continue
        comm = np.isin(prog.types, COMM_NODE_TYPES)
        sizes = reader.attrs.columns()["comm_size"][prog.attr]
        out[r] = RankWork(int(np.count_nonzero(prog.types == COMP_NODE)), int(np.count_nonzero(comm & (sizes > 0))))
    return out


def zero_time_failure(run: Path, manifest: Manifest, ranks: Sequence[RankStats], binary: str) -> str | None:
    """Why a run whose ranks finished at cycle 0 cannot be trusted, or None when it can.

    Refused: some rank at 0 cycles whose rank file holds a compute node or a communication of a
    positive size; or every rank at 0 cycles while emit predicted a positive time.
    """
    zero = [r.rank for r in ranks if r.finished_ns == 0]
    if not zero:
        return None
    work = rank_work(run, manifest, zero)
    busy = [r for r in zero if r in work and work[r].any]
    predicted = manifest.predicted_time_ns
    everyone = len(zero) == len(ranks)
    if not busy and not (everyone and predicted is not None and predicted > 0):
        return None
    compute = sum(work[r].compute for r in busy)
    comm = sum(work[r].communication for r in busy)
    holds = f"{compute:,} compute and {comm:,} communication nodes"
    pred = f"{predicted:,.0f} ns predicted" if predicted else "no prediction"
    if everyone:
        seen = (f"every rank ({len(ranks)}) finished at 0 cycles while the workload has "
                + (f"{holds} ({pred})" if busy else f"{pred} of work"))
    else:
        shown = ", ".join(map(str, busy[:8])) + (", ..." if len(busy) > 8 else "")
        seen = (f"{len(busy)} of {len(ranks)} ranks finished at 0 cycles (ranks {shown}) while their rank files "
                f"hold {holds}")
    return (f"ASTRA-sim reported {seen}, which no working simulator does (a compute node takes at least 1 cycle, a transfer of bytes longer): "
            f"{binary} did not run these nodes (a stand-in or broken build, or one whose Chakra schema reads them "
            "as INVALID nodes); check it on ASTRA-sim's own examples, point --astra-sim or ASTRA_SIM_BIN at a "
            "working AstraSim_Analytical_Congestion_Unaware and simulate again with --force")
