"""The trace rewrite of :mod:`.rewrite` on rank files' bytes: the same output for a fraction of the work.

Most nodes leave the rewrite unchanged; a collective gets a new attribute block (a function of its
old one) and a dependency on the collective before it; a few nodes lose dependencies. So a node
is written as its original bytes, or as original pieces around a re-encoded ``ctrl_deps`` field
and the new attribute block, which is computed once per distinct block by the schema path's own
:func:`.rewrite_rules.rewrite_collective`. Relinking, the issue order and the chain work on integer
arrays, for several files at once (numpy's per-call cost would dominate small files).

A file this path cannot rewrite exactly as the schema path does -- a send without a peer, gloo
CPU collectives to type, a damaged or non-canonical message, a rewrite error, a dependency
cycle -- is handed back (None), and the caller rewrites it with the schema path, which also
raises the errors users see. Rare nodes (relinked dependencies, collectives that become
compute) are built with the schema, as the schema path builds them.

Here a batch of files is decoded and handed to :mod:`.rewrite_batch`; what distinct byte strings
mean (:mod:`.rewrite_blocks`) is kept across the batches of a workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from . import node_bytes as nb
from .logical import LogicalNetwork
from .rewrite_batch import BatchRewrite
from .rewrite_blocks import BlockMeanings
from .rewrite_deps import KEY_SHIFT
from .stats import WorkloadStats


@dataclass
class Rewriter:
    """Rewrites rank files of one workload; caches what distinct byte strings mean across files."""

    lnet: LogicalNetwork
    groups: Mapping[int, Sequence[int]]
    group_masks: Mapping[int, tuple[bool, ...] | None]
    splits: int = 1
    type_cpu_collectives: bool = False
    _meanings: BlockMeanings = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._meanings = BlockMeanings(self.lnet, self.groups, self.group_masks, self.splits)

    def rewrite(self, bufs: Sequence[bytes], ranks: Sequence[int], wheres: Sequence[str]
                ) -> list[tuple[bytes, WorkloadStats] | None]:
        """ET bytes and stats of each rewritten rank file (contents already gunzipped), or None
        for a file the schema path must rewrite."""
        out: list[tuple[bytes, WorkloadStats] | None] = [None] * len(bufs)
        todo = list(range(len(bufs)))
        if self.type_cpu_collectives:
            # typing them edits nodes in ways only the schema path knows
            todo = [i for i in todo if b"c10d::" not in bufs[i] and b"gloo:" not in bufs[i]]
        batch, inside, _ = nb.decode([bufs[i] for i in todo], [wheres[i] for i in todo])
        if batch is None:
            return out
        files = [todo[i] for i in inside]
        if len(files) > 1 and (int(batch.ids.max(initial=0)) >> KEY_SHIFT or len(files) >= 1 << (63 - KEY_SHIFT)):
            for i in files:    # ids too large to share keys with other files: one file at a time
                out[i] = self.rewrite([bufs[i]], [ranks[i]], [wheres[i]])[0]
            return out
        got = BatchRewrite(self._meanings, batch, [ranks[i] for i in files], [wheres[i] for i in files]).result()
        for i, g in zip(files, got):
            out[i] = g
        return out
