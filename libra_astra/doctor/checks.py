"""The checks run on a trace set: node dependencies, collectives, sends/receives and the set as a whole.

What each check means, what ASTRA-sim does and the fix are in :mod:`.catalog`.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

from ..traces.graph import cycle_error, file_first_order
from ..traces.schema import (COMM_COLL_NODE, COMM_NODE_TYPES, COMM_RECV_NODE, COMM_SEND_NODE, COMM_TYPE_NAMES,
                             COMP_NODE, INVALID_NODE, MEM_NODE_TYPES, METADATA_NODE, NODE_TYPE_NAMES,
                             comm_type_name, pb)
from .attrs import INT_KINDS, attr_kind, convertible_int, first_attrs, int_attr, is_cpu_op, stoi, value
from .catalog import CHECKS
from .findings import Collect, Finding
from .groups import GroupView, file_groups, metadata_group_table
from .load import GroupFile, RankFile, Target
from .system import SystemFile
from .system_checks import SystemChecks

_TAG_MOD = 500_000_000              # ASTRA-sim maps a p2p tag to tag % 500,000,000


def _dependency_checks(col: Collect, rf: RankFile, nodes: list) -> None:
    r = rf.rank
    ids = [n.id for n in nodes]
    deps = [(list(n.data_deps), list(n.ctrl_deps)) for n in nodes]   # one read each: field access is slow
    counts = Counter(ids)
    for d in (i for i, k in counts.items() if k > 1):
        col.add("duplicate-id", r, d, f"id {d} x {counts[d]}")
    pos = {nid: i for i, nid in enumerate(ids)}
    first_data = first_ctrl = None
    for nid, (data, ctrl) in zip(ids, deps):
        for kind, ds in (("data", data), ("ctrl", ctrl)):
            for d in ds:
                if d not in pos:
                    if kind == "data" and first_data is None:
                        first_data = d
                    if kind == "ctrl" and first_ctrl is None:
                        first_ctrl = d
                    col.add("dangling-dep", r, nid, f"node {nid} -> {d} ({kind})")
    key = ("dangling-dep", r)
    if key in col.by_code:  # the simulator checks data dependencies first
        arg = f"{first_data} in data_dep" if first_data is not None else f"{first_ctrl} in ctrl_dep"
        col.by_code[key][0] = col.by_code[key][0]._replace(arg=arg)
    # readiness as the simulator sees it: each id's position is its last record's
    parents: list[set[int]] = [set() for _ in nodes]
    self_dep = []
    for nid, (data, ctrl) in zip(ids, deps):
        i = pos[nid]
        for d in data + ctrl:
            if d in pos:
                parents[i].add(pos[d])
        if nid in data or nid in ctrl:
            self_dep.append(nid)
    live = sorted(set(pos.values()))
    edges = [(p, i) for i in live for p in parents[i] if p != i]
    order, indeg = file_first_order(len(nodes), edges)
    order_set = set(order)
    blocked_by_cycles = [i for i in live if i not in order_set]
    selfs = {pos[x] for x in self_dep}
    skipped = len(blocked_by_cycles)
    if selfs:  # with the self loops as well: everything a self dependency (or a cycle) keeps from running
        done = set(file_first_order(len(nodes), edges + [(i, i) for i in selfs])[0])
        skipped = sum(1 for i in live if i not in done)
    for x in dict.fromkeys(self_dep):
        col.add("self-dep", r, x, f"node {x}", skipped)
    if blocked_by_cycles:
        err = cycle_error("", [n.id for n in nodes], indeg, lambda u: sorted(parents[u] - {u}))
        text = str(err).split(": ", 1)[1].split(";")[0]
        col.add("cycle", r, int(re.findall(r"\d+", text)[0]), text, skipped)
    if live and all(parents[i] for i in live):
        col.add("no-ready-node", r)


def _collective_checks(col: Collect, rf: RankFile, n, a: dict[str, Any], target: Target | None,
                       view: GroupView, splits: int) -> tuple | None:
    """The checks of one collective; (comm_type, size, group id, members, involved_dim) as read,
    None when it cannot be placed (unknown group, unusable involved_dim)."""
    r = rf.rank
    ct = a.get("comm_type")
    v = None
    if ct is None:
        col.add("comm-type-missing", r, n.id, f"node {n.id}", n.id)
    else:
        v = int_attr(ct)
        if v is None:
            col.add("attr-type", r, n.id, f"node {n.id} comm_type {attr_kind(ct)}")
            v = convertible_int(ct)
        if v is not None:
            if v in (pb.REDUCE_SCATTER_BLOCK, pb.BARRIER):
                col.add("comm-type-convertible", r, n.id, f"node {n.id} {comm_type_name(v)}")
            elif v == pb.BROADCAST:
                col.add("broadcast-replayed", r, n.id, f"node {n.id}")
            elif v not in COMM_TYPE_NAMES:  # the kinds ASTRA-sim simulates are the ones the demand model knows
                col.add("comm-type-unsupported", r, n.id, f"node {n.id} {comm_type_name(v)}")
    cs = a.get("comm_size")
    size = None
    if cs is None:
        col.add("comm-size-missing", r, n.id, f"node {n.id}", n.id)
    else:
        size = int_attr(cs)
        if size is None:
            col.add("attr-type", r, n.id, f"node {n.id} comm_size {attr_kind(cs)}")
            size = convertible_int(cs)
    if size is not None and splits > 1 and size % splits:
        col.add("size-not-divisible", r, n.id, f"node {n.id}: {size} B", splits)
    # group
    gid = None
    pg = a.get("pg_name")
    if pg is not None:
        k = attr_kind(pg)
        text = None
        if k == "string_val":
            text = pg.string_val
        elif k is not None:
            col.add("pg-name-type", r, n.id, f"node {n.id} {k} {value(pg)!r}")
            if k in INT_KINDS:
                text = str(int_attr(pg))
        if text not in (None, "", "0"):
            gid, extra = stoi(text)
            if gid is None:
                col.add("pg-name-non-numeric", r, n.id, f"node {n.id} {text!r}")
            elif extra:
                col.add("pg-name-suffix", r, n.id, f"node {n.id} {text!r} read as {gid}")
            if gid == 0:
                gid = None
    inv = a.get("involved_dim")
    if gid is not None:
        members = view.members.get(gid)
        in_file = members is not None
        if not in_file:
            arg = f"{r} ET node {n.id}, communicator group {gid}"
            members = view.from_metadata.get(gid)
            col.add("unknown-group" if members is None else "group-in-metadata-only", r, n.id,
                    f"node {n.id} group {gid}", arg)
            if members is None:
                return None
        if r not in members:
            col.add("not-member", r, n.id, f"node {n.id} group {gid} {list(members)}")
            return None
        if len(members) == 1:
            col.add("group-of-one", r, n.id, f"node {n.id} group {gid}")
        # a group only the METADATA defines exits ASTRA-sim at start: nothing to plan under a system file
        return (v, size, gid, tuple(members), None) if in_file else None
    # all ranks: involved_dim decides
    if inv is not None and attr_kind(inv) != "bool_list":
        col.add("involved-dim-type", r, n.id, f"node {n.id} {attr_kind(inv)}")
        return None
    mask = None if inv is None else list(inv.bool_list.values)
    if target is not None:
        d = target.num_dims
        if mask is None:
            if d > 4:
                col.add("involved-dim-absent", r, n.id, f"node {n.id}", d)
            mask = [True] * min(d, 4)
        elif len(mask) < d:
            col.add("involved-dim-length", r, n.id, f"node {n.id} {len(mask)} entries", d)
            return None
        elif any(mask[d:]):
            col.add("involved-dim-extra", r, n.id, f"node {n.id} {len(mask)} entries", d)
        if not any(m and target.npus_per_dim[i] > 1 for i, m in enumerate(mask[:d])):
            col.add("no-involved-dim", r, n.id, f"node {n.id} involved_dim {mask}")
    elif mask is not None and not any(mask):
        col.add("no-involved-dim", r, n.id, f"node {n.id} involved_dim {mask}")
    return v, size, None, None, mask


_P2P_NEEDS = {COMM_SEND_NODE: ("comm_dst", "comm_tag", "comm_size"),
              COMM_RECV_NODE: ("comm_src", "comm_tag", "comm_size")}


def _p2p_checks(col: Collect, rf: RankFile, n, a: dict[str, Any], num_ranks: int,
                sends: dict, recvs: dict) -> None:
    r = rf.rank
    needs = _P2P_NEEDS[n.type]
    vals: dict[str, int | None] = {}
    for k in ("comm_src", "comm_dst", "comm_tag", "comm_size"):
        at = a.get(k)
        if at is None:
            vals[k] = None
            continue
        v = int_attr(at)
        if v is None:
            col.add("attr-type", r, n.id, f"node {n.id} {k} {attr_kind(at)}")
            v = convertible_int(at)
        vals[k] = v
    missing = [k for k in needs if a.get(k) is None]
    if missing:
        col.add("p2p-attr-missing", r, n.id, f"node {n.id} ({NODE_TYPE_NAMES[n.type]}) without {'/'.join(missing)}",
                missing[0])
        return
    own, peer = ("comm_src", "comm_dst") if n.type == COMM_SEND_NODE else ("comm_dst", "comm_src")
    if vals[own] is None:
        vals[own] = r
    if any(v is None for v in vals.values()):
        return
    msg = "Send node should be issued by the sender" if n.type == COMM_SEND_NODE else \
        "Recv node should be issued by the receiver"
    if vals[own] != r:
        col.add("p2p-wrong-rank", r, n.id, f"node {n.id} {own} {vals[own]}", msg)
        return
    if not 0 <= vals[peer] < num_ranks:
        col.add("p2p-wrong-rank", r, n.id, f"node {n.id} {peer} {vals[peer]}", msg)
        return
    if vals["comm_size"] == 0:
        col.add("p2p-size-zero", r, n.id, f"node {n.id}")
        return
    key = (vals["comm_tag"] % _TAG_MOD, vals["comm_src"], vals["comm_dst"], vals["comm_size"])
    (sends if n.type == COMM_SEND_NODE else recvs).setdefault(key, []).append((r, n.id))


def _group_key(a: dict[str, Any]) -> tuple:
    """Which ranks share a collective: its group id, else all ranks (whatever its involved_dim: a
    collective over some dimensions still has a partner on every rank)."""
    pg = a.get("pg_name")
    text = pg.string_val if attr_kind(pg) == "string_val" else (
        str(int_attr(pg)) if int_attr(pg) is not None else "") if pg is not None else ""
    gid = stoi(text)[0] if text not in ("", "0") else None
    if gid:
        return ("group", gid)
    return ("all",)


def _count_checks(col: Collect, counts: dict[tuple, Counter], view: GroupView, busy: list[int]) -> None:
    for key, per_rank in counts.items():
        if key[0] == "group":
            members = view.members.get(key[1]) or view.from_metadata.get(key[1])
            if members is None:
                continue
            what = f"group {key[1]}"
        else:
            members = busy
            what = "all ranks"
        got = {m: per_rank.get(m, 0) for m in members}
        if len(set(got.values())) > 1:
            shown = ", ".join(f"rank {m}: {k}" for m, k in list(got.items())[:4]) + (", ..." if len(got) > 4 else "")
            col.add("collective-count", None, None, f"{what}: {shown}")


def check_set(ranks: Sequence[RankFile], *, target: Target | None = None, groups: GroupFile | None = None,
              splits: int = 1, system: SystemFile | None = None) -> list[Finding]:
    """Every finding on a set, set-wide ones first, then by rank and check; ``system`` adds the
    checks of an ASTRA-sim system.json against the set (:mod:`.system_checks`)."""
    col = Collect()
    present = [rf.rank for rf in ranks]
    num_ranks = max(present) + 1 if present else 0
    missing = [r for r in range(num_ranks) if r not in set(present)]
    for r in missing:
        col.add("missing-rank", None, None, f"rank {r}")
    gz = [rf for rf in ranks if rf.gzipped]
    for rf in gz:
        col.add("gzipped", None, None, rf.path.name)
    if target is not None and target.npus_count != num_ranks:
        effect = ("aborts at start: it opens one file per NPU and ranks are missing" if target.npus_count > num_ranks
                  else "runs ranks 0.." + str(target.npus_count - 1) + " only and ignores the other files")
        col.add("rank-count", None, None,
                f"the set has {num_ranks} ranks but {target.source} has {target.npus_count} NPUs", effect)
    file_ignored = groups is not None and "empty" in groups.path
    if file_ignored:
        col.add("groups-path-empty", None, None, groups.path)
    loaded = file_groups(groups, num_ranks, col)
    meta = metadata_group_table(ranks, num_ranks)
    view = GroupView({} if file_ignored else loaded, meta, file_ignored)
    sysc = SystemChecks(col, system, target, num_ranks) if system is not None else None
    sends: dict = {}
    recvs: dict = {}
    coll_counts: dict[tuple, Counter] = {}
    for rf in ranks:
        r = rf.rank
        if rf.nodes is None:
            col.add("unreadable", r, None, rf.error)
            continue
        nodes = rf.nodes
        if not nodes:
            col.add("empty-rank", r)
            continue
        _dependency_checks(col, rf, nodes)
        cpu = 0
        for n in nodes:
            a = first_attrs(n)
            t = n.type
            if not 0 <= t < len(NODE_TYPE_NAMES):
                col.add("unknown-node-type", r, n.id, f"node {n.id} type {t}")
                continue
            if t == METADATA_NODE:
                col.add("metadata-node", r, n.id, f"node {n.id} {n.name!r}", n.id)
                continue
            if t == INVALID_NODE:
                col.add("invalid-node", r, n.id, f"node {n.id}")
                continue
            if t in MEM_NODE_TYPES:
                col.add("mem-node", r, n.id, f"node {n.id}")
                continue
            cpu_attr = a.get("is_cpu_op")
            on_cpu = is_cpu_op(cpu_attr)
            if on_cpu is None:
                k = attr_kind(cpu_attr)
                what = "std::invalid_argument (list attribute)" if k.endswith("_list") else "std::bad_cast"
                col.add("is-cpu-op-type", r, n.id, f"node {n.id} {k}", what)
                on_cpu = bool(value(cpu_attr))
            if t in COMM_NODE_TYPES and on_cpu:
                col.add("comm-on-cpu", r, n.id, f"node {n.id} {NODE_TYPE_NAMES[t]}")
            if t == COMP_NODE and on_cpu:
                cpu += 1
                if n.name.startswith("gloo:"):
                    col.add("gloo-cpu-collectives", r, n.id, f"node {n.id} {n.name!r}")
            elif t == COMP_NODE and sysc is not None:
                sysc.gpu_compute(r, n.id, a)
            if t in COMM_NODE_TYPES and sysc is not None:
                sysc.comm()
            if t == COMM_COLL_NODE:
                placed = _collective_checks(col, rf, n, a, target, view, splits)
                coll_counts.setdefault(_group_key(a), Counter())[r] += 1
                if placed is not None and sysc is not None:
                    sysc.collective(r, n.id, *placed, root=not n.data_deps and not n.ctrl_deps)
            elif t in (COMM_SEND_NODE, COMM_RECV_NODE):
                _p2p_checks(col, rf, n, a, num_ranks, sends, recvs)
        for _ in range(cpu):
            col.add("cpu-ops", r)
    _count_checks(col, coll_counts, view, [rf.rank for rf in ranks if rf.nodes])
    if sysc is not None:
        sysc.finish()
    # p2p matching: the n-th send of a key matches the n-th receive of it
    for key in sorted(set(sends) | set(recvs)):
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        what = f"tag {key[0]} {key[1]} -> {key[2]}, {key[3]} B"
        for r, nid in r_list[len(s_list):]:
            col.add("p2p-unmatched-recv", r, nid, f"node {nid}: {what}")
        for r, nid in s_list[len(r_list):]:
            col.add("p2p-unmatched-send", r, nid, f"node {nid}: {what}")
    return col.findings(list(CHECKS))
