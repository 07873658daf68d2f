"""The byte rewrite's dependency work for a batch of files, on integer node keys: relinking as
:func:`.rewrite_rules.relink` does, the issue order of :func:`.rewrite_schema.rewrite_rank`
and the chain of collectives, each for all files at once.

A node's key is its id in a batch of one file, else ``file << KEY_SHIFT | id``, so the files'
ids never meet. Dependencies are (owner node, key) pairs with the CSR pointer of their field.
"""

from __future__ import annotations

import numpy as np

from ..traces.graph import file_first_order, through_removed

# Files of one batch are told apart by the high bits of a node's key (file << KEY_SHIFT | id).
KEY_SHIFT = 40


def node_keys(ids: np.ndarray, files: np.ndarray, nf: int) -> np.ndarray:
    """Every node's key: its id in a batch of one file, else ``file << KEY_SHIFT | id``."""
    if nf == 1:
        return ids
    return (files.astype(np.uint64) << np.uint64(KEY_SHIFT)) | ids


def field_keys(csr: tuple[np.ndarray, np.ndarray], files: np.ndarray, nf: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner, key) of each dependency of a field, and its CSR pointer."""
    ptr, vals = csr
    owner = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
    if nf == 1:
        return owner, vals, ptr
    # a value too large for a key names no node of the file: it must stay absent
    big = vals >> np.uint64(KEY_SHIFT) != 0
    k = (files[owner].astype(np.uint64) << np.uint64(KEY_SHIFT)) | vals
    k[big] = np.uint64(2**64 - 1)
    return owner, k, ptr


def relink_keys(keys, sorted_keys, order_by_key, dropped, ctrl_keys, data_keys, files: np.ndarray, nf: int):
    """``{node: (ctrl, data)}`` keys of the kept nodes whose dependencies :func:`.rewrite_rules.relink`
    changes, computed as it does (the others keep theirs), and dangling dependencies per file."""
    n = keys.size
    need = np.zeros(n, bool)
    dangling = np.zeros(nf, np.int64)
    for owner, k, ptr_ in (ctrl_keys, data_keys):
        if k.size == 0:
            continue
        pos = np.minimum(np.searchsorted(sorted_keys, k), max(n - 1, 0))
        present = sorted_keys[pos] == k
        dangling += np.bincount(files[owner[~present & ~dropped[owner]]], minlength=nf)
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


def edges(kept, changed, ctrl_keys, data_keys) -> tuple[np.ndarray, np.ndarray]:
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


def issue_order(sorted_keys, order_by_key, kept, owner, dep_keys, files: np.ndarray, nf: int, bad: np.ndarray
                ) -> np.ndarray:
    """Kept nodes in :func:`.rewrite_schema._issue_order`'s order (file order where dependencies
    allow), file after file; a file whose dependencies have a cycle is marked in ``bad``."""
    kept_idx = np.nonzero(kept)[0]
    if dep_keys.size == 0:
        return kept_idx
    parent = order_by_key[np.minimum(np.searchsorted(sorted_keys, dep_keys), sorted_keys.size - 1)]
    late = parent >= owner
    if not late.any():
        return kept_idx
    pieces = np.split(kept_idx, np.searchsorted(files[kept_idx], np.arange(1, nf)))
    for f in np.unique(files[owner[late]]).tolist():
        if bad[f]:
            continue
        mine = kept_idx[files[kept_idx] == f]
        at = np.full(kept.size, -1, np.int64)
        at[mine] = np.arange(mine.size)
        sel = files[owner] == f
        pairs = np.unique(np.stack([at[parent[sel]], at[owner[sel]]], axis=1), axis=0)
        order, _ = file_first_order(mine.size, pairs.tolist())
        if len(order) != mine.size:
            bad[f] = True      # a cycle: the schema path names it
            continue
        pieces[f] = mine[np.asarray(order, dtype=np.int64)]
    return np.concatenate(pieces)


def chain(order, coll, owner, dep_keys, keys, files: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collectives that need a control dependency on the collective before them in their
    file, and that one's id (``keys``: every node's, as :func:`node_keys` gives them)."""
    seq = order[coll[order]]
    if seq.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
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
    return todo, ids[before[has[cur]]]


def _field(csr: tuple[np.ndarray, np.ndarray, np.ndarray], i: int) -> list[int]:
    _, k, ptr = csr
    return k[int(ptr[i]):int(ptr[i + 1])].tolist()
