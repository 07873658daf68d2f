"""The byte rewrite's output for a batch of files: every node as its original bytes, as pieces of
them around a new ctrl_deps field and attribute block, or as built with the schema, all gathered
in one numpy pass; and each file's counts, as the schema path would have made them.
"""

from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple, Sequence

import numpy as np

from ..traces import chakra_io as cio
from ..traces.schema import pb
from . import node_bytes as nb
from .rewrite_blocks import CollRewrite
from .stats import WorkloadStats

_CTRL_TAG = (pb.Node.DESCRIPTOR.fields_by_name["ctrl_deps"].number << 3) | 2
_COUNTS = tuple(f.name for f in fields(WorkloadStats) if f.name != "converted_types")


class SchemaBuilt(NamedTuple):
    """The nodes built with the schema rather than copied (relinked, or become zero-time compute)."""

    which: np.ndarray       # bool per message
    data: np.ndarray        # uint8: their framed bytes, one after another
    at: np.ndarray          # int64 per message: where its bytes start in ``data``
    length: np.ndarray      # int64 per message: their length (0 for the others)


def assemble(b: nb.Batch, arr: np.ndarray, nf: int, order: np.ndarray, coll: np.ndarray, group: np.ndarray,
             colls: Sequence[CollRewrite | None], prev_of: np.ndarray, is_chained: np.ndarray, built: SchemaBuilt
             ) -> tuple[bytes, np.ndarray]:
    """The framed nodes in ``order``: each as its original bytes, as pieces of them around a
    new ctrl_deps field and attribute block, or as ``built`` with the schema. ``arr`` is the
    batch's bytes as uint8; ``prev_of`` the id a chained collective gets a control dependency
    on. Returns the bytes and where each file's nodes end in them."""
    table = [c.block if c is not None else b"" for c in colls]
    new_len = np.asarray([len(t) for t in table] + [0], np.int64)
    new_at = np.zeros(new_len.size, np.int64)
    np.cumsum(new_len[:-1], out=new_at[1:])
    one_by_one, extra, extra_at, extra_len = built
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
    base_tab = arr.size
    base_extra = base_tab + tab.size
    base_tag = base_extra + extra.size
    base_prev = base_tag + 1
    base_clen = base_prev + v_prev.size
    base_body = base_clen + v_clen.size
    pool = np.concatenate([arr, tab, extra, np.asarray([_CTRL_TAG], np.uint8), v_prev.ravel(),
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
    per_file = ends[np.searchsorted(b.files[o], np.arange(nf + 1), side="left")]
    return pool[idx].tobytes(), per_file


def outputs(body: bytes, per_file: np.ndarray, files: np.ndarray, nf: int, bad: np.ndarray, metas: Sequence[bytes],
            order, dropped, dangling, chained, colls_mask, group, colls: Sequence[CollRewrite | None]
            ) -> list[tuple[bytes, WorkloadStats] | None]:
    """Each file's ET bytes (its framed metadata from ``metas``, then its nodes) and the counts
    the schema path would have made, or None for a file marked ``bad``."""
    counts = {"nodes_removed": np.bincount(files[dropped], minlength=nf),
              "dangling_deps_dropped": dangling,
              "chained_deps_added": np.bincount(files[chained], minlength=nf)}
    written = np.bincount(files[order], minlength=nf)
    # the collectives' counts per file: what each distinct block's rewrite counts, times its uses
    idx = np.nonzero(colls_mask & (group >= 0))[0]
    g_idx, f_idx = group[idx], files[idx]
    for name in _COUNTS:
        per = np.asarray([getattr(c.stats, name) if c is not None else 0 for c in colls] + [0])
        if per.any():
            got = np.bincount(f_idx, weights=per[g_idx].astype(np.float64), minlength=nf)
            counts[name] = counts[name] + got if name in counts else got
    # converted types are a dict: in order of first use in the file, as the schema path meets them
    converted: dict[int, list[tuple[int, int]]] = {}
    conv = np.asarray([c is not None and bool(c.stats.converted_types) for c in colls] + [False])
    for i in idx[conv[g_idx]].tolist():
        converted.setdefault(int(files[i]), []).append(int(group[i]))
    out: list[tuple[bytes, WorkloadStats] | None] = []
    for f in range(nf):
        if bad[f]:
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
        out.append((metas[f] + nodes, s))
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
