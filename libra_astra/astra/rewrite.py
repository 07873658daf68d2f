"""Per-rank Chakra ET for ASTRA-sim from the user's traces (the user's files are only read).

Rewriting a user's trace (the user's files are only read):

- METADATA and INVALID nodes are removed (ASTRA-sim aborts or stops silently on them); a node that
  depended on one inherits its dependencies. Dependencies on ids absent from the file are dropped
  (ASTRA-sim would wait for them forever) and counted.
- Every collective gets ``involved_dim`` over the emitted (logical) dimensions and
  ``is_cpu_op = false``. An all-rank collective keeps the physical dimensions it named (all of them
  when it named none) as all their logical pieces. A collective on a communicator group that is a
  slice of whole logical dimensions becomes an all-rank collective over those dimensions
  (``pg_name`` removed); other groups keep ``pg_name`` (as a string) and run as flat rings.
  A collective that reaches no other NPU becomes a zero-duration compute node (ASTRA-sim never
  finishes a collective with no involved dimension).
- REDUCE_SCATTER_BLOCK becomes REDUCE_SCATTER and BARRIER a zero-byte ALL_REDUCE (ASTRA-sim aborts
  on both); REDUCE, GATHER and SCATTER have no faithful substitute and are refused.
- Collectives are chained in issue order, a control dependency from each to the one before:
  ASTRA-sim matches collectives across ranks by issue order and runs one at a time per rank
  anyway, and many ready collectives make it slow. Issue order is a topological order of the
  dependencies that follows file order where it can. Nodes are written in that order.

Each rank file is rewritten on its bytes (:mod:`.rewrite_bytes`) where that gives the same output,
else node by node with the schema (:mod:`.rewrite_schema`); both apply the per-node pieces of
:mod:`.rewrite_rules`. This module reads the files, chooses the path and writes the output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..errors import LibraError
from ..traces.cpu_groups import GroupMap
from ..traces.files import find_rank_files, read_file_bytes
from .logical import LogicalNetwork
from .rewrite_bytes import Rewriter
from .rewrite_schema import rewrite_rank_file
from .stats import WorkloadStats

# Files are rewritten on their bytes in batches of about this size: numpy's per-call cost is paid per batch.
_BATCH_BYTES = 8 << 20


def rewrite_traces(prefix: str | Path, out_prefix: Path, lnet: LogicalNetwork,
                   groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                   splits: int = 1, on_progress: Callable[[int, int], None] | None = None,
                   type_cpu_collectives: bool = False, byte_level: bool = True, cpu_groups: GroupMap | None = None,
                   file_groups: Mapping[str, Sequence[int]] | None = None) -> WorkloadStats:
    """Rewrite ``PREFIX.r.et`` for every rank r of the network into ``out_prefix.r.et``
    (``on_progress(ranks_done, ranks)`` after each); with ``type_cpu_collectives`` the gloo
    collectives are typed first (traces/cpu_collectives.py), on the process groups ``cpu_groups``
    gives (traces/cpu_groups.py; ``file_groups``: the comm-groups file's, as the demand read them).

    Files are rewritten on their bytes (:mod:`.rewrite_bytes`) where that gives the same output,
    else node by node with the schema (:mod:`.rewrite_schema`); ``byte_level=False`` takes the
    schema path for every file (the reference the byte-level path is tested against)."""
    type_cpu_collectives = type_cpu_collectives or cpu_groups is not None
    stats = WorkloadStats()
    n = lnet.npus_count
    found = find_rank_files(prefix)
    fast = Rewriter(lnet, groups, group_masks, splits, type_cpu_collectives) if byte_level else None
    batch: list[tuple[int, Path, bytes]] = []

    def flush() -> None:
        got = (fast.rewrite([b for _, _, b in batch], [r for r, _, _ in batch], [str(p) for _, p, _ in batch])
               if fast is not None else [None] * len(batch))
        for (r, src, buf), done in zip(batch, got):
            if done is None:
                data = rewrite_rank_file(buf, src, r, n, lnet, groups, group_masks, stats, splits,
                                         type_cpu_collectives, cpu_groups, file_groups)
            else:
                data = done[0]
                stats.add(done[1])
            Path(f"{out_prefix}.{r}.et").write_bytes(data)
            if on_progress is not None:
                on_progress(r + 1, n)
        batch.clear()

    size = 0
    for r in range(n):
        try:
            src = found.get(r)
            if src is None:
                raise LibraError(f"{prefix}.{r}.et: trace file for rank {r} not found; the network has {n} NPUs "
                                 f"and ASTRA-sim needs one file per NPU")
            if not Path(src).is_file():
                raise LibraError(f"{src}: ET file not found")
            buf = read_file_bytes(src)
        except LibraError:
            flush()     # the ranks before this one are rewritten (and may fail) first, as one by one
            raise
        batch.append((r, src, buf))
        size += len(buf)
        if size >= _BATCH_BYTES or fast is None:
            flush()
            size = 0
    flush()
    extra = sorted(r for r in found if r >= n)
    if extra:
        raise LibraError(f"{found[extra[0]]}: the trace has more ranks than the network's {n} NPUs; "
                         f"use a network of the trace's size")
    return stats
