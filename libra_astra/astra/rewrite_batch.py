"""One batch of decoded rank files through the byte rewrite (:mod:`.rewrite_bytes`).

First the checks that hand a file back to the schema path (names, inputs/outputs, attribute
blocks, sends and receives without a peer, METADATA groups, duplicate ids, dependency cycles,
collectives that do not rewrite); then, for the files that pass, the steps of
:mod:`.rewrite_deps` and :mod:`.rewrite_output` in order.
"""

from __future__ import annotations

import numpy as np

from ..errors import LibraError
from ..ranges import concat_ranges
from ..traces import chakra_io as cio
from ..traces.cpu_collectives import rank_groups
from ..traces.schema import pb
from . import node_bytes as nb
from .rewrite_blocks import BlockMeanings, CollRewrite, HandBack
from .rewrite_deps import KEY_SHIFT, chain, edges, field_keys, issue_order, node_keys, relink_keys
from .rewrite_output import SchemaBuilt, assemble, outputs
from .stats import WorkloadStats


class BatchRewrite:
    """One batch of files through the rewrite; ``bad`` marks the files handed back."""

    def __init__(self, meanings: BlockMeanings, b: nb.Batch, ranks: list[int], wheres: list[str]) -> None:
        self.meanings, self.b, self.ranks, self.wheres = meanings, b, ranks, wheres
        self.arr = np.frombuffer(b.buf, dtype=np.uint8)
        self.nf = len(ranks)
        self.bad = np.zeros(self.nf, bool)

    def mark(self, messages: np.ndarray) -> None:
        if messages.size:
            self.bad[np.unique(self.b.files[messages])] = True

    def slice(self, i: int) -> bytes:
        return self.b.buf[int(self.b.starts[i]):int(self.b.ends[i])]

    def result(self) -> list[tuple[bytes, WorkloadStats] | None]:
        b = self.b
        self._read_metas()
        self._check_names()
        self._check_io()
        group, reps = nb.distinct_spans(b.buf, b.attr_start, b.ends)
        peers: list[tuple[bool, bool] | None] = []
        for j in reps:
            try:
                peers.append(self.meanings.block(b.buf[int(b.attr_start[j]):int(b.ends[j])]))
            except HandBack:
                peers.append(None)
        failed = np.asarray([x is None for x in peers] + [False])
        self.mark(np.nonzero(failed[group])[0])
        # what infer_peers would change (a send or receive without its peer) needs the schema path;
        # group -1 (no attribute block) picks the last entry
        no_src = np.asarray([x is not None and not x[0] for x in peers] + [True])
        no_dst = np.asarray([x is not None and not x[1] for x in peers] + [True])
        self.mark(np.nonzero(((b.types == pb.COMM_SEND_NODE) & no_dst[group])
                             | ((b.types == pb.COMM_RECV_NODE) & no_src[group]))[0])
        self._metadata()

        keys = node_keys(b.ids, b.files, self.nf)
        if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):
            order_by_key, sorted_keys = np.arange(keys.size, dtype=np.int64), keys   # the usual case
        else:
            order_by_key = np.argsort(keys, kind="stable")
            sorted_keys = keys[order_by_key]
        dup = np.nonzero(sorted_keys[1:] == sorted_keys[:-1])[0]
        # duplicate ids: the schema path's dicts decide which node counts
        self.mark(order_by_key[dup])
        dropped = (b.types == pb.INVALID_NODE) | (b.types == pb.METADATA_NODE)
        kept = ~dropped
        ctrl_keys, data_keys = field_keys(b.ctrl, b.files, self.nf), field_keys(b.data, b.files, self.nf)
        changed, dangling = relink_keys(keys, sorted_keys, order_by_key, dropped, ctrl_keys, data_keys, b.files,
                                        self.nf)

        coll = kept & (b.types == pb.COMM_COLL_NODE)
        self.mark(np.nonzero(coll & (group < 0))[0])    # no attributes at all: the schema path reports it
        colls = self._collectives(group, reps, coll)
        to_comp_group = np.asarray([c is not None and c.to_comp for c in colls] + [False])
        to_comp = coll & to_comp_group[group]
        coll &= ~to_comp

        owner, dep_keys = edges(kept, changed, ctrl_keys, data_keys)
        order = issue_order(sorted_keys, order_by_key, kept, owner, dep_keys, b.files, self.nf, self.bad)
        order = order[~self.bad[b.files[order]]]
        chained, prev = chain(order, coll, owner, dep_keys, keys, b.files, b.ids)
        prev_of = np.zeros(keys.size, np.uint64)
        prev_of[chained] = prev
        is_chained = np.zeros(keys.size, bool)
        is_chained[chained] = True
        built = self._schema_built(order, coll, to_comp, changed, prev_of, is_chained)
        body, per_file = assemble(b, self.arr, self.nf, order, coll, group, colls, prev_of, is_chained, built)
        return outputs(body, per_file, b.files, self.nf, self.bad, self.metas, order, dropped, dangling, chained,
                       coll | to_comp, group, colls)

    # ------------------------------------------------------------------ checks

    def _check_names(self) -> None:
        """Names must be UTF-8, as the schema's parse requires."""
        at, ln = self.b.names
        named = np.nonzero(ln > 0)[0]
        if named.size == 0:
            return
        at, ln = at[named], ln[named]
        first = np.zeros(ln.size, np.int64)
        np.cumsum(ln[:-1], out=first[1:])
        byte = self.arr[concat_ranges(at, ln)]
        if int(byte.max()) < 0x80:
            return
        for k in np.nonzero(np.add.reduceat((byte >= 0x80).astype(np.int64), first))[0].tolist():
            try:
                self.b.buf[int(at[k]):int(at[k] + ln[k])].decode("utf-8")
            except UnicodeDecodeError:
                self.mark(named[k:k + 1])

    def _check_io(self) -> None:
        at, end = self.b.io
        if not bool((end > at).any()):
            return
        group, reps = nb.distinct_spans(self.b.buf, at, end)
        for g, j in enumerate(reps):
            try:
                self.meanings.check_io(self.b.buf[int(at[j]):int(end[j])])
            except HandBack:
                self.mark(np.nonzero(group == g)[0])

    def _read_metas(self) -> None:
        self.metas: list[bytes] = []
        for f, (m0, m1) in enumerate(self.b.metas):
            try:
                meta = pb.GlobalMetadata.FromString(self.b.buf[m0:m1])
            except Exception:   # protobuf raises assorted errors on bad bytes
                self.bad[f] = True
                meta = pb.GlobalMetadata()
            self.metas.append(nb.framed((meta if meta.version else cio.global_metadata()).SerializeToString()))

    def _metadata(self) -> None:
        """rank_groups only for its errors: the schema path reads each file's METADATA groups first."""
        idx = np.nonzero(self.b.types == pb.METADATA_NODE)[0]
        if idx.size == 0:
            return
        by_file: dict[int, list[pb.Node]] = {}
        for i in idx.tolist():
            f = int(self.b.files[i])
            try:
                by_file.setdefault(f, []).append(pb.Node.FromString(self.slice(i)))
            except Exception:   # its attribute block is damaged: the file is already marked
                self.bad[f] = True
        for f, nodes in by_file.items():
            try:
                rank_groups(nodes, self.wheres[f])
            except LibraError:
                self.bad[f] = True

    # ------------------------------------------------------------------ collectives, nodes built with the schema

    def _collectives(self, group, reps, coll) -> list[CollRewrite | None]:
        """The rewrite of each distinct attribute block that collectives carry (None: not one)."""
        b = self.b
        colls: list[CollRewrite | None] = [None] * len(reps)
        idx = np.nonzero(coll & (group >= 0) & ~self.bad[b.files])[0]
        if idx.size == 0:
            return colls
        pairs = np.unique(group[idx] * self.nf + b.files[idx])
        for g, f in zip((pairs // self.nf).tolist(), (pairs % self.nf).tolist()):
            if self.bad[f]:
                continue
            j = reps[g]
            try:
                colls[g] = self.meanings.collective(b.buf[int(b.attr_start[j]):int(b.ends[j])], self.ranks[f],
                                                    self.wheres[f])
            except HandBack:
                self.bad[f] = True
        return colls

    def _schema_built(self, order, coll, to_comp, changed, prev_of, is_chained) -> SchemaBuilt:
        """The nodes in ``order`` that are built with the schema (relinked, or collectives that
        became zero-time compute), framed, as the schema path builds them."""
        b = self.b
        n = b.ids.size
        one_by_one = to_comp.copy()
        if changed:
            one_by_one[list(changed)] = True
        mask = (1 << KEY_SHIFT) - 1 if self.nf > 1 else (1 << 64) - 1
        extra_parts = []
        extra_at = np.zeros(n, np.int64)
        extra_len = np.zeros(n, np.int64)
        used = 0
        for i in order[one_by_one[order]].tolist():
            f = int(b.files[i])
            deps = changed.get(i)
            if deps is not None:
                deps = ([k & mask for k in deps[0]], [k & mask for k in deps[1]])
            node = pb.Node.FromString(self.slice(i))
            part = self.meanings.one(node, bool(coll[i] or to_comp[i]), deps,
                                     int(prev_of[i]) if is_chained[i] else None, self.ranks[f], self.wheres[f])
            extra_parts.append(part)
            extra_at[i], extra_len[i] = used, len(part)
            used += len(part)
        extra = np.frombuffer(b"".join(extra_parts), dtype=np.uint8)
        return SchemaBuilt(one_by_one, extra, extra_at, extra_len)
