"""The trace rewrite of :mod:`.rewrite` on rank files' bytes: the same output for a fraction of the work.

Most nodes leave the rewrite unchanged; a collective gets a new attribute block (a function of its
old one) and a dependency on the collective before it; a few nodes lose dependencies. So a node
is written as its original bytes, or as original pieces around a re-encoded ``ctrl_deps`` field
and the new attribute block, which is computed once per distinct block by the schema path's own
:func:`.rewrite.rewrite_collective`. Relinking, the issue order and the chain work on integer
arrays, for several files at once (numpy's per-call cost would dominate small files).

A file this path cannot rewrite exactly as the schema path does -- a send without a peer, gloo
CPU collectives to type, a damaged or non-canonical message, a rewrite error, a dependency
cycle -- is handed back (None), and the caller rewrites it with the schema path, which also
raises the errors users see. Rare nodes (relinked dependencies, collectives that become
compute) are built with the schema here, as the schema path builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping, Sequence

import numpy as np

from ..errors import LibraError
from ..ranges import concat_ranges
from ..traces import chakra_io as cio
from ..traces.cpu_collectives import rank_groups
from ..traces.graph import file_first_order, through_removed
from ..traces.schema import pb
from . import node_bytes as nb
from .logical import LogicalNetwork
from .rewrite import rewrite_collective
from .stats import WorkloadStats

# Bound on each cache of distinct byte strings: PyTorch traces carry per-node attributes
# (rf_id, seq_id) that never repeat, and keeping those would only cost memory.
_CACHE_LIMIT = 1 << 18
_CTRL_TAG = (pb.Node.DESCRIPTOR.fields_by_name["ctrl_deps"].number << 3) | 2
# Files of one batch are told apart by the high bits of a node's key (file << _SHIFT | id).
_SHIFT = 40
_COUNTS = tuple(f.name for f in fields(WorkloadStats) if f.name != "converted_types")


class _Bad(Exception):
    """This distinct block, span or file needs the schema path."""


@dataclass(frozen=True, eq=False)
class _Coll:
    """A collective's rewrite, a function of its attribute block (and, for membership, the rank)."""

    block: bytes                 # new attribute block (b"" when it became a zero-time compute node)
    to_comp: bool
    gid: str | None
    stats: WorkloadStats


@dataclass
class Rewriter:
    """Rewrites rank files of one workload; caches what distinct byte strings mean across files."""

    lnet: LogicalNetwork
    groups: Mapping[int, Sequence[int]]
    group_masks: Mapping[int, tuple[bool, ...] | None]
    splits: int = 1
    type_cpu_collectives: bool = False
    _blocks: dict[bytes, tuple[bool, bool]] = field(default_factory=dict)   # verified block -> peers named
    _colls: dict[bytes, _Coll] = field(default_factory=dict)
    _io: set[bytes] = field(default_factory=set)
    _members: dict[str, frozenset[int]] = field(default_factory=dict)

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
        if len(files) > 1 and (int(batch.ids.max(initial=0)) >> _SHIFT or len(files) >= 1 << (63 - _SHIFT)):
            for i in files:    # ids too large to share keys with other files: one file at a time
                out[i] = self.rewrite([bufs[i]], [ranks[i]], [wheres[i]])[0]
            return out
        got = _Run(self, batch, [ranks[i] for i in files], [wheres[i] for i in files]).result()
        for i, g in zip(files, got):
            out[i] = g
        return out

    # ------------------------------------------------------------------ what distinct bytes mean

    def block(self, blk: bytes) -> tuple[bool, bool]:
        """(has comm_src, has comm_dst) of an attribute block, once it is known to be what the
        schema writes (all the rewrite needs to know of blocks that are not collectives')."""
        got = self._blocks.get(blk)
        if got is None:
            try:
                node = pb.Node.FromString(blk)
            except Exception:   # protobuf raises assorted errors on bad bytes
                raise _Bad from None
            if node.SerializeToString() != blk:
                raise _Bad
            if b"comm_s" in blk or b"comm_d" in blk:
                names = {a.name for a in node.attr}
                got = ("comm_src" in names, "comm_dst" in names)
            else:
                got = (False, False)
            if len(self._blocks) < _CACHE_LIMIT:
                self._blocks[blk] = got
        return got

    def check_io(self, span: bytes) -> None:
        """inputs/outputs fields must parse and be what the schema writes."""
        if span in self._io:
            return
        try:
            ok = pb.Node.FromString(span).SerializeToString() == span
        except Exception:
            ok = False
        if not ok:
            raise _Bad
        if len(self._io) < _CACHE_LIMIT:
            self._io.add(span)

    def collective(self, blk: bytes, rank: int, where: str) -> _Coll:
        c = self._colls.get(blk)
        if c is None:
            node = pb.Node.FromString(blk)
            node.type = pb.COMM_COLL_NODE
            s = WorkloadStats()
            try:
                gid = rewrite_collective(node, rank, self.lnet, self.groups, self.group_masks, where, s,
                                         self.splits)
            except LibraError:
                raise _Bad from None   # the schema path names the node in its error
            to_comp = node.type != pb.COMM_COLL_NODE
            node.ClearField("type")
            c = _Coll(b"" if to_comp else node.SerializeToString(), to_comp, gid, s)
            if len(self._colls) < _CACHE_LIMIT:
                self._colls[blk] = c
        elif c.gid is not None:
            members = self._members.get(c.gid)
            if members is None:
                members = self._members[c.gid] = frozenset(self.groups[int(c.gid)])
            if rank not in members:
                raise _Bad
        return c

    def one(self, node: pb.Node, coll: bool, deps: tuple[list[int], list[int]] | None, prev: int | None,
            rank: int, where: str) -> bytes:
        """One framed node built with the schema, as the schema path builds it (rare nodes only)."""
        if deps is not None:
            del node.ctrl_deps[:]
            node.ctrl_deps.extend(deps[0])
            del node.data_deps[:]
            node.data_deps.extend(deps[1])
        if coll:
            rewrite_collective(node, rank, self.lnet, self.groups, self.group_masks, where, WorkloadStats(),
                               self.splits)
        if prev is not None:
            node.ctrl_deps.append(prev)
        return nb.framed(node.SerializeToString())


class _Run:
    """One batch of files through the rewrite; ``bad`` marks the files handed back."""

    def __init__(self, rw: Rewriter, b: nb.Batch, ranks: list[int], wheres: list[str]) -> None:
        self.rw, self.b, self.ranks, self.wheres = rw, b, ranks, wheres
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
                peers.append(self.rw.block(b.buf[int(b.attr_start[j]):int(b.ends[j])]))
            except _Bad:
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

        keys = self._keys(b.ids)
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
        ctrl_keys, data_keys = self._dep_keys(b.ctrl), self._dep_keys(b.data)
        changed, dangling = self._relink(keys, sorted_keys, order_by_key, dropped, ctrl_keys, data_keys)

        coll = kept & (b.types == pb.COMM_COLL_NODE)
        self.mark(np.nonzero(coll & (group < 0))[0])    # no attributes at all: the schema path reports it
        colls = self._collectives(group, reps, coll)
        to_comp_group = np.asarray([c is not None and c.to_comp for c in colls] + [False])
        to_comp = coll & to_comp_group[group]
        coll &= ~to_comp

        owner, dep_keys = self._edges(kept, changed, ctrl_keys, data_keys)
        order = self._issue_order(sorted_keys, order_by_key, kept, owner, dep_keys)
        order = order[~self.bad[b.files[order]]]
        chained, prev = self._chain(order, coll, owner, dep_keys, keys)
        body, per_file = self._assemble(order, coll, to_comp, changed, chained, prev, group, colls)
        return self._outputs(body, per_file, order, dropped, dangling, chained, coll | to_comp, group, colls)

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
                self.rw.check_io(self.b.buf[int(at[j]):int(end[j])])
            except _Bad:
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

    # ------------------------------------------------------------------ dependencies

    def _keys(self, ids: np.ndarray) -> np.ndarray:
        if self.nf == 1:
            return ids
        return (self.b.files.astype(np.uint64) << np.uint64(_SHIFT)) | ids

    def _dep_keys(self, csr: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(owner, key) of each dependency of a field, and its CSR pointer."""
        ptr, vals = csr
        owner = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
        if self.nf == 1:
            return owner, vals, ptr
        # a value too large for a key names no node of the file: it must stay absent
        big = vals >> np.uint64(_SHIFT) != 0
        k = (self.b.files[owner].astype(np.uint64) << np.uint64(_SHIFT)) | vals
        k[big] = np.uint64(2**64 - 1)
        return owner, k, ptr

    def _relink(self, keys, sorted_keys, order_by_key, dropped, ctrl_keys, data_keys):
        """``{node: (ctrl, data)}`` keys of the kept nodes whose dependencies :func:`.rewrite.relink`
        changes, computed as it does (the others keep theirs), and dangling dependencies per file."""
        n = keys.size
        need = np.zeros(n, bool)
        dangling = np.zeros(self.nf, np.int64)
        for owner, k, ptr_ in (ctrl_keys, data_keys):
            if k.size == 0:
                continue
            pos = np.minimum(np.searchsorted(sorted_keys, k), max(n - 1, 0))
            present = sorted_keys[pos] == k
            dangling += np.bincount(self.b.files[owner[~present & ~dropped[owner]]], minlength=self.nf)
            target_dropped = np.zeros(k.size, bool)
            target_dropped[present] = dropped[order_by_key[pos[present]]]
            need[owner[~present | target_dropped | (k == keys[owner])]] = True
            # a dependency named twice in one field: only fields of several dependencies can
            ptr = np.diff(ptr_)
            many = np.nonzero(ptr[owner] > 1)[0]
            if many.size:
                o, kk = owner[many], k[many]
                s = np.lexsort((kk, o))
                dup = (o[s[1:]] == o[s[:-1]]) & (kk[s[1:]] == kk[s[:-1]])
                need[o[s[1:]][dup]] = True
        need &= ~dropped
        changed: dict[int, tuple[list[int], list[int]]] = {}
        if not need.any():
            return changed, dangling
        key_list = keys.tolist()
        present_keys = set(key_list)
        drop_keys = {key_list[i] for i in np.nonzero(dropped)[0].tolist()}
        pos_of = {x: i for i, x in enumerate(key_list)}
        memo: dict[int, list[int]] = {}

        def deps_of(i: int) -> list[int]:
            return _field(data_keys, i) + _field(ctrl_keys, i)

        def through(x0: int) -> list[int]:
            return through_removed(x0, lambda x: deps_of(pos_of[x]), present_keys, drop_keys, memo)

        for i in np.nonzero(need)[0].tolist():
            me = key_list[i]
            pair = []
            moved = False
            for csr in (ctrl_keys, data_keys):
                old = _field(csr, i)
                new: list[int] = []
                for d in old:
                    if d not in present_keys:
                        continue
                    if d in drop_keys:
                        new.extend(through(d))
                    else:
                        new.append(d)
                new = [d for d in dict.fromkeys(new) if d != me]
                moved |= new != old
                pair.append(new)
            if moved:
                changed[i] = (pair[0], pair[1])
        return changed, dangling

    def _edges(self, kept, changed, ctrl_keys, data_keys) -> tuple[np.ndarray, np.ndarray]:
        """(node, dependency key) of every kept node after relinking, both fields together."""
        moved = np.zeros(kept.size, bool)
        if changed:
            moved[list(changed)] = True
        owners, vals = [], []
        for owner, k, _ in (ctrl_keys, data_keys):
            keep = kept[owner] & ~moved[owner]
            owners.append(owner[keep])
            vals.append(k[keep])
        for i, (c, d) in changed.items():
            owners.append(np.full(len(c) + len(d), i, dtype=np.int64))
            vals.append(np.asarray(c + d, dtype=np.uint64))
        return np.concatenate(owners), np.concatenate(vals)

    def _issue_order(self, sorted_keys, order_by_key, kept, owner, dep_keys) -> np.ndarray:
        """Kept nodes in :func:`.rewrite._issue_order`'s order (file order where dependencies
        allow), file after file."""
        kept_idx = np.nonzero(kept)[0]
        if dep_keys.size == 0:
            return kept_idx
        parent = order_by_key[np.minimum(np.searchsorted(sorted_keys, dep_keys), sorted_keys.size - 1)]
        late = parent >= owner
        if not late.any():
            return kept_idx
        files = self.b.files
        pieces = np.split(kept_idx, np.searchsorted(files[kept_idx], np.arange(1, self.nf)))
        for f in np.unique(files[owner[late]]).tolist():
            if self.bad[f]:
                continue
            mine = kept_idx[files[kept_idx] == f]
            at = np.full(kept.size, -1, np.int64)
            at[mine] = np.arange(mine.size)
            sel = files[owner] == f
            pairs = np.unique(np.stack([at[parent[sel]], at[owner[sel]]], axis=1), axis=0)
            order, _ = file_first_order(mine.size, pairs.tolist())
            if len(order) != mine.size:
                self.bad[f] = True      # a cycle: the schema path names it
                continue
            pieces[f] = mine[np.asarray(order, dtype=np.int64)]
        return np.concatenate(pieces)

    def _chain(self, order, coll, owner, dep_keys, keys) -> tuple[np.ndarray, np.ndarray]:
        """Collectives that need a control dependency on the collective before them in their
        file, and that one's id (``keys``: every node's, as ``_keys`` gives them)."""
        seq = order[coll[order]]
        if seq.size < 2:
            return np.zeros(0, np.int64), np.zeros(0, np.uint64)
        files = self.b.files
        n = coll.size
        prev = np.zeros(n, np.uint64)
        has = np.zeros(n, bool)
        follows = files[seq[1:]] == files[seq[:-1]]
        cur, before = seq[1:][follows], seq[:-1][follows]
        prev[cur] = keys[before]
        has[cur] = True
        hit = has[owner] & (dep_keys == prev[owner])
        has[owner[hit]] = False
        todo = cur[has[cur]]
        return todo, self.b.ids[before[has[cur]]]

    # ------------------------------------------------------------------ collectives and output

    def _collectives(self, group, reps, coll) -> list[_Coll | None]:
        """The rewrite of each distinct attribute block that collectives carry (None: not one)."""
        b = self.b
        colls: list[_Coll | None] = [None] * len(reps)
        idx = np.nonzero(coll & (group >= 0) & ~self.bad[b.files])[0]
        if idx.size == 0:
            return colls
        pairs = np.unique(group[idx] * self.nf + b.files[idx])
        for g, f in zip((pairs // self.nf).tolist(), (pairs % self.nf).tolist()):
            if self.bad[f]:
                continue
            j = reps[g]
            try:
                colls[g] = self.rw.collective(b.buf[int(b.attr_start[j]):int(b.ends[j])], self.ranks[f],
                                              self.wheres[f])
            except _Bad:
                self.bad[f] = True
        return colls

    def _assemble(self, order, coll, to_comp, changed, chained, prev, group, colls):
        """The framed nodes in ``order``: each as its original bytes, as pieces of them around a
        new ctrl_deps field and attribute block, or (relinked, zero-time) rebuilt with the schema.
        Returns the bytes and where each file's nodes end in them."""
        b = self.b
        n = b.ids.size
        table = [c.block if c is not None else b"" for c in colls]
        new_len = np.asarray([len(t) for t in table] + [0], np.int64)
        new_at = np.zeros(new_len.size, np.int64)
        np.cumsum(new_len[:-1], out=new_at[1:])
        prev_of = np.zeros(n, np.uint64)
        prev_of[chained] = prev
        is_chained = np.zeros(n, bool)
        is_chained[chained] = True
        one_by_one = to_comp.copy()
        if changed:
            one_by_one[list(changed)] = True
        mask = (1 << _SHIFT) - 1 if self.nf > 1 else (1 << 64) - 1
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
            part = self.rw.one(node, bool(coll[i] or to_comp[i]), deps, int(prev_of[i]) if is_chained[i] else None,
                               self.ranks[f], self.wheres[f])
            extra_parts.append(part)
            extra_at[i], extra_len[i] = used, len(part)
            used += len(part)
        extra = np.frombuffer(b"".join(extra_parts), dtype=np.uint8)
        tab = np.frombuffer(b"".join(table), dtype=np.uint8)

        o = order
        rebuilt = coll[o] & ~one_by_one[o]
        r = o[rebuilt]
        is_c = is_chained[r]
        c = r[is_c]
        ctrl_at, ctrl_len = b.ctrl_values
        v_prev, l_prev = nb.varints(prev_of[c])
        v_clen, l_clen = nb.varints((ctrl_len[c] + l_prev).astype(np.uint64))
        a_len = b.deps_at[r] - b.starts[r]
        m_len = b.attr_start[r] - b.deps_end[r]
        blk_len = new_len[group[r]]
        deps_part = b.deps_end[r] - b.deps_at[r]
        # chained: tag, length, the old ctrl values and prev, then the data field replace the old deps fields
        deps_part[is_c] = 1 + l_clen + ctrl_len[c] + l_prev + (b.deps_end[c] - b.data_at[c])
        v_body, l_body = nb.varints((a_len + deps_part + m_len + blk_len).astype(np.uint64))
        base_tab = self.arr.size
        base_extra = base_tab + tab.size
        base_tag = base_extra + extra.size
        base_prev = base_tag + 1
        base_clen = base_prev + v_prev.size
        base_body = base_clen + v_clen.size
        pool = np.concatenate([self.arr, tab, extra, np.asarray([_CTRL_TAG], np.uint8), v_prev.ravel(),
                               v_clen.ravel(), v_body.ravel()])

        # nine pieces per node: frame length, head (id, name, type), ctrl tag, ctrl length, old
        # ctrl values, prev, data field (or the old deps fields), middle, attribute block
        k = o.size
        st = np.zeros((k, 9), np.int64)
        ln = np.zeros((k, 9), np.int64)
        ob = one_by_one[o]
        raw = ~rebuilt & ~ob
        st[raw, 0] = b.heads[o[raw]]
        ln[raw, 0] = b.ends[o[raw]] - b.heads[o[raw]]
        st[ob, 0] = base_extra + extra_at[o[ob]]
        ln[ob, 0] = extra_len[o[ob]]
        rows = np.nonzero(rebuilt)[0]
        st[rows, 0], ln[rows, 0] = base_body + np.arange(r.size, dtype=np.int64) * 10, l_body
        st[rows, 1], ln[rows, 1] = b.starts[r], a_len
        st[rows, 7], ln[rows, 7] = b.deps_end[r], m_len
        st[rows, 8], ln[rows, 8] = base_tab + new_at[group[r]], blk_len
        plain, crow = rows[~is_c], rows[is_c]
        st[plain, 6] = b.deps_at[o[plain]]
        ln[plain, 6] = b.deps_end[o[plain]] - b.deps_at[o[plain]]
        st[crow, 2], ln[crow, 2] = base_tag, 1
        st[crow, 3], ln[crow, 3] = base_clen + np.arange(c.size, dtype=np.int64) * 10, l_clen
        st[crow, 4], ln[crow, 4] = ctrl_at[c], ctrl_len[c]
        st[crow, 5], ln[crow, 5] = base_prev + np.arange(c.size, dtype=np.int64) * 10, l_prev
        st[crow, 6], ln[crow, 6] = b.data_at[c], b.deps_end[c] - b.data_at[c]
        node_len = ln.sum(axis=1)
        st, ln = st.ravel(), ln.ravel()
        nz = ln > 0
        st, ln = st[nz], ln[nz]
        idx = _gather_index(st, ln)
        # where each file's nodes end in the output (order runs file after file)
        ends = np.zeros(k + 1, np.int64)
        np.cumsum(node_len, out=ends[1:])
        per_file = ends[np.searchsorted(b.files[o], np.arange(self.nf + 1), side="left")]
        return pool[idx].tobytes(), per_file

    def _outputs(self, body, per_file, order, dropped, dangling, chained, colls_mask, group, colls):
        b = self.b
        nf = self.nf
        counts = {"nodes_removed": np.bincount(b.files[dropped], minlength=nf),
                  "dangling_deps_dropped": dangling,
                  "chained_deps_added": np.bincount(b.files[chained], minlength=nf)}
        written = np.bincount(b.files[order], minlength=nf)
        # the collectives' counts per file: what each distinct block's rewrite counts, times its uses
        idx = np.nonzero(colls_mask & (group >= 0))[0]
        g_idx, f_idx = group[idx], b.files[idx]
        for name in _COUNTS:
            per = np.asarray([getattr(c.stats, name) if c is not None else 0 for c in colls] + [0])
            if per.any():
                got = np.bincount(f_idx, weights=per[g_idx].astype(np.float64), minlength=nf)
                counts[name] = counts[name] + got if name in counts else got
        # converted types are a dict: in order of first use in the file, as the schema path meets them
        converted: dict[int, list[tuple[int, int]]] = {}
        conv = np.asarray([c is not None and bool(c.stats.converted_types) for c in colls] + [False])
        for i in idx[conv[g_idx]].tolist():
            converted.setdefault(int(b.files[i]), []).append(int(group[i]))
        out: list[tuple[bytes, WorkloadStats] | None] = []
        for f in range(nf):
            if self.bad[f]:
                out.append(None)
                continue
            s = WorkloadStats(ranks=1)
            for name, per_f in counts.items():
                v = per_f[f]
                if v:
                    setattr(s, name, type(getattr(s, name))(v))
            for g in converted.get(f, ()):
                for k, c in colls[g].stats.converted_types.items():
                    s.converted_types[k] = s.converted_types.get(k, 0) + c
            nodes = body[int(per_file[f]):int(per_file[f + 1])]
            if written[f] == 0:
                s.empty_ranks = 1
                nodes = nb.framed(cio.comp_node(0, "empty", 0).SerializeToString())
            s.nodes_written = max(int(written[f]), 1)
            out.append((self.metas[f] + nodes, s))
        return out


def _gather_index(st: np.ndarray, ln: np.ndarray) -> np.ndarray:
    """Indices of the bytes of segments [st, st + ln) one after another (all ln > 0): a running
    sum of ones with a jump at each segment's start, cheaper than repeat + arange."""
    total = int(ln.sum())
    step = np.ones(total, np.int64)
    if total == 0:
        return step
    first = np.zeros(ln.size, np.int64)
    np.cumsum(ln[:-1], out=first[1:])
    step[first[1:]] = st[1:] - (st[:-1] + ln[:-1] - 1)
    step[0] = st[0]
    return np.cumsum(step, out=step)


def _field(csr: tuple[np.ndarray, np.ndarray, np.ndarray], i: int) -> list[int]:
    _, k, ptr = csr
    return k[int(ptr[i]):int(ptr[i + 1])].tolist()
