"""The demand of a generator spec on a network, straight from the generator's programs.

``libra-astra generate`` followed by ``libra-astra demand`` gives the per-dimension demand of a
spec; the search needs it for thousands of candidates, so this module builds the same
:class:`Demand` from the generator's rank-independent programs (``build_plan``) without writing or
reading any ET file. It follows the trace reader's rules exactly (tests compare the two):

- every op is a DAG node in program order (the generator writes dependencies before their
  users, so file order is the topological order); COMP takes ``duration_micros`` x 1000 ns, a
  receive 0 ns; collectives and sends are communication nodes in that order;
- a collective on axis ``a`` spans, in each dimension, the size of the axis' part there (the
  groups of a placement are sub-grids, so it runs hierarchically); a send crosses the lowest
  dimension where the two NPUs differ, with that dimension's hop count;
- ranks are grouped into classes by program structure and per-rank send physics, then split
  until every rank of a class waits on the same classes (pipeline stages are timed apart);
- receives wait for the matching sends of the peer's class (``links``); a collective whose
  communicator holds ranks of other classes starts with theirs (``syncs``);
- group labels are the generator's communicator ids (``all`` for all ranks; several ids when
  the ranks of one class use different groups).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .upstream import (COLL, COMP, RECV, SEND, Collective, Dag, Demand, LibraError, Network, Plan, RankClass,
                       TraceSpec, assign_groups, build_plan, group_label, make_collective, p2p_collective)

RECV_NOTE = "receives are the other side of sends: each transfer is charged once, on the sender"


@dataclass(frozen=True)
class _ProgramInfo:
    """Rank-independent facts of one program."""

    struct: tuple            # graph shape + compute times (what the reader digests)
    nodes_kind: tuple        # "coll" | "comp" | "free" per op
    comp_ns: np.ndarray      # per op
    edges: tuple             # sorted unique (u, v)
    comm_ops: tuple          # op indices of collectives and sends, in order
    recv_prev: tuple         # op indices of receives from the previous stage (offset -1), in order
    recv_next: tuple         # ... from the next stage (+1)
    send_next: tuple         # op indices of sends to +1, in order
    send_prev: tuple         # op indices of sends to -1
    compute_ns: float


def _program_info(ops) -> _ProgramInfo:
    kinds, comp, edges, comm = [], [], set(), []
    rp, rn, sn, spv = [], [], [], []
    for i, op in enumerate(ops):
        is_comm = op.kind in (COLL, SEND)
        # receives take no resource slot in the replay, as in the demand read from traces
        kinds.append("coll" if is_comm else "free" if op.kind == RECV else "comp")
        comp.append(op.duration_micros * 1000.0 if op.kind == COMP else 0.0)
        for u in op.data_deps + op.ctrl_deps:
            edges.add((u, i))
        if is_comm:
            comm.append(i)
        if op.kind == RECV:
            (rp if op.peer_offset < 0 else rn).append(i)
        elif op.kind == SEND:
            (spv if op.peer_offset < 0 else sn).append(i)
    edges_t = tuple(sorted(edges, key=lambda e: (e[1], e[0])))
    comp_arr = np.asarray(comp, dtype=np.float64)
    struct = (tuple(kinds), tuple(0.0 if k == "coll" else c for k, c in zip(kinds, comp)), edges_t)
    return _ProgramInfo(struct, tuple(kinds), comp_arr, edges_t, tuple(comm), tuple(rp), tuple(rn), tuple(sn),
                        tuple(spv), float(comp_arr.sum()))


def axis_peers(spec: TraceSpec, coords: np.ndarray, name: str, offset: int) -> np.ndarray:
    """Per rank, the rank ``offset`` away along axis ``name``, cyclically (-1 on an axis of degree
    1); the vectorized form of ``Layout.peer``."""
    layout = spec.layout
    a = layout.axis(name)
    n = coords.shape[0]
    if not a.parts:
        return np.full(n, -1, dtype=np.int64)
    idx = np.zeros(n, dtype=np.int64)
    scale = 1
    for p in a.parts:
        idx += ((coords[:, p.dim] // p.stride) % p.size) * scale
        scale *= p.size
    target = (idx + offset) % a.degree
    ok = np.ones(n, dtype=bool)
    new = coords.copy()
    rest = np.where(ok, target, 0)
    for p in a.parts:
        digit = rest % p.size
        rest = rest // p.size
        c = new[:, p.dim]
        new[:, p.dim] = c - ((c // p.stride) % p.size) * p.stride + digit * p.stride
    out = layout.net.ids_array(new)
    out[~ok] = -1
    return out


def _p2p_dim_hops(net: Network, coords: np.ndarray, peer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lowest differing dimension and its hop count, per rank (-1, 0 without a peer)."""
    n = coords.shape[0]
    dim = np.full(n, -1, dtype=np.int64)
    hops = np.zeros(n, dtype=np.int64)
    has = peer >= 0
    pc = coords[np.where(has, peer, 0)]
    for d, dm in enumerate(net.dims):
        ca, cb = coords[:, d], pc[:, d]
        here = has & (dim < 0) & (ca != cb)
        if dm.topology == "Ring":
            diff = np.abs(ca - cb)
            h = np.minimum(diff, dm.npus - diff)
        elif dm.topology == "Switch":
            h = np.full(n, 2, dtype=np.int64)
        else:
            h = np.ones(n, dtype=np.int64)
        dim[here] = d
        hops[here] = h[here]
    return dim, hops


def _label(keys: set) -> str:
    names = sorted(keys, key=lambda s: (len(s), s))
    if len(names) == 1:
        return group_label(names[0])
    if len(names) <= 4:
        return ",".join(group_label(x) for x in names)
    return f"{group_label(names[0])}..{group_label(names[-1])} ({len(names)} groups)"


@dataclass(frozen=True)
class Programs:
    """A spec's programs and their rank-independent analysis; they depend on the model and the
    parallel degrees only (not on the network or the placement), so a search makes them once per
    parallelization."""

    programs: dict
    infos: dict
    struct_sig: np.ndarray   # per program key: id of (structure, communication signature)


def prepare(spec: TraceSpec, plan: Plan | None = None) -> Programs:
    """Programs of ``spec`` (``build_plan`` without op names, or ``plan``) with their analysis."""
    plan = plan if plan is not None else build_plan(spec, names=False)
    by_id: dict = {}   # stages sharing one program object (build_plan's names=False) are analysed once
    infos = {k: by_id.get(id(ops)) or by_id.setdefault(id(ops), _program_info(ops))
             for k, ops in plan.programs.items()}
    ids: dict = {}
    sig_of: dict = {}
    sig = np.zeros(max(plan.programs) + 1, dtype=np.int64)
    for k, ops in plan.programs.items():
        if id(ops) not in sig_of:
            comm = []
            for i in infos[k].comm_ops:
                op = ops[i]
                comm.append((op.coll, op.size_bytes, op.axis) if op.kind == COLL
                            else ("P2P", op.size_bytes, op.peer_offset))
            sig_of[id(ops)] = ids.setdefault((infos[k].struct, tuple(comm)), len(ids))
        sig[k] = sig_of[id(ops)]
    return Programs(plan.programs, infos, sig)


def _axis_parts(spec: TraceSpec) -> tuple[dict, dict]:
    """Per axis, its part size in each dimension and the distance between consecutive members
    there (the part's stride); 1 where the axis does not reach."""
    sizes, strides = {}, {}
    for a in spec.layout.axes:
        p, s = [1] * spec.net.num_dims, [1] * spec.net.num_dims
        for part in a.parts:
            p[part.dim], s[part.dim] = part.size, part.stride
        sizes[a.name], strides[a.name] = tuple(p), tuple(s)
    return sizes, strides


def demand_from_spec(spec: TraceSpec, net: Network | None = None, *, programs: Programs | None = None,
                     labels: bool = True, name: str | None = None) -> Demand:
    """The demand ``generate`` + ``demand_from_traces`` would give for ``spec`` on ``net``.

    Parameters
    ----------
    spec : a validated generator spec; its layout fixes groups and pipeline peers.
    net : the network (topologies and latencies); by default the spec's own. Same shape as the spec's.
    programs : :func:`prepare` of a spec with the same model and parallel degrees (any placement);
        made here if not given.
    labels : fill in the communicator labels (the search does not need them).
    name : demand name (default: the spec's name).
    """
    net = net or spec.net
    if tuple(net.npus_per_dim) != tuple(spec.net.npus_per_dim):
        raise LibraError(f"{spec.source}: network {net.name!r} has shape {list(net.npus_per_dim)} but the spec's "
                         f"placement is on {list(spec.net.npus_per_dim)}; use a network of the spec's shape")
    prep = programs if programs is not None else prepare(spec)
    plan = Plan(prep.programs, tuple(spec.layout.axis_index.get("pp", (0,) * spec.layout.num_ranks)))
    layout = spec.layout
    N = net.npus_count
    infos = prep.infos
    rank_prog = np.asarray(plan.rank_program, dtype=np.int64)
    coords = net.coords_array(np.arange(net.npus_count))

    # collectives per axis (participants = the axis' part sizes)
    used_axes = [a.name for a in layout.axes if any(op.kind == COLL and op.axis == a.name
                                                    for ops in plan.programs.values() for op in ops)]
    parts, strides = _axis_parts(spec)
    gids = assign_groups(layout, used_axes) if labels or used_axes else {}
    # per axis, group key of each rank ("" = all ranks)
    gkey = {a: np.asarray([-1 if g is None else g for g in gids[a]], dtype=np.int64) for a in used_axes}

    phys: dict = {}
    labelled: dict = {}

    def coll_obj(kind: str, size: int, axis: str) -> Collective:
        k = (kind, size, parts[axis], strides[axis])
        c = phys.get(k)
        if c is None:
            c = phys[k] = make_collective(kind, float(size), parts[axis], net=net, strides=strides[axis])
        return c

    def p2p_obj(size: int, dim: int, hops: int) -> Collective:
        k = ("P2P", size, dim, hops)
        c = phys.get(k)
        if c is None:
            c = phys[k] = p2p_collective(net, float(size), dim, hops)
        return c

    has_pp = any(op.kind in (SEND, RECV) for ops in plan.programs.values() for op in ops)
    if has_pp:
        nxt = axis_peers(spec, coords, "pp", +1)
        prv = axis_peers(spec, coords, "pp", -1)
        dn, hn = _p2p_dim_hops(net, coords, nxt)
        dp_, hp = _p2p_dim_hops(net, coords, prv)
    else:
        nxt = prv = np.full(N, -1, dtype=np.int64)
        dn = hn = dp_ = hp = np.zeros(N, dtype=np.int64)

    # 1. initial classes: program structure + the physics of every communication node
    uses_next = np.asarray([bool(infos[int(k)].send_next) for k in range(max(infos) + 1)] if infos else [False])
    uses_prev = np.asarray([bool(infos[int(k)].send_prev) for k in range(max(infos) + 1)] if infos else [False])
    un, up = uses_next[rank_prog], uses_prev[rank_prog]
    key_rows = np.stack([prep.struct_sig[rank_prog], np.where(un, dn, -9), np.where(un, hn, -9),
                         np.where(up, dp_, -9), np.where(up, hp, -9)], axis=1)
    _, cls = np.unique(key_rows, axis=0, return_inverse=True)
    cls = cls.reshape(-1)

    # 2. split until the ranks of a class wait on (and feed) the same classes
    if has_pp:
        peer_next = {k: bool(infos[k].send_next or infos[k].recv_next) for k in infos}
        peer_prev = {k: bool(infos[k].send_prev or infos[k].recv_prev) for k in infos}
        use_n = np.asarray([peer_next[int(k)] for k in rank_prog]) & (nxt >= 0)
        use_p = np.asarray([peer_prev[int(k)] for k in rank_prog]) & (prv >= 0)
        count = int(cls.max()) + 1
        while True:
            cn = np.where(use_n, cls[np.maximum(nxt, 0)], -1)
            cp = np.where(use_p, cls[np.maximum(prv, 0)], -1)
            sig3 = np.stack([cls, cn, cp], axis=1)
            _, new = np.unique(sig3, axis=0, return_inverse=True)
            new = new.reshape(-1)
            cls = new
            n_new = int(new.max()) + 1
            if n_new == count:
                break
            count = n_new

    # classes ordered by their first rank
    members: dict[int, list[int]] = {}
    for r, c in enumerate(cls.tolist()):
        members.setdefault(c, []).append(r)
    groups = sorted(members.values(), key=lambda rs: rs[0])
    class_of = np.empty(N, dtype=np.int64)
    for ci, rs in enumerate(groups):
        class_of[rs] = ci

    # 3. rank classes
    out: list[RankClass] = []
    for ci, rs in enumerate(groups):
        r0 = rs[0]
        k = int(rank_prog[r0])
        info = infos[k]
        ops = plan.programs[k]
        rs_arr = np.asarray(rs, dtype=np.int64)
        colls = []
        label_of: dict = {}
        for i in info.comm_ops:
            op = ops[i]
            if op.kind == COLL:
                c = coll_obj(op.coll, op.size_bytes, op.axis)
                if labels:
                    lab = label_of.get(op.axis)
                    if lab is None:
                        ids = set(gkey[op.axis][rs_arr].tolist())
                        lab = label_of[op.axis] = _label({"" if g < 0 else str(g) for g in ids})
                    c = labelled.get((id(c), lab)) or labelled.setdefault((id(c), lab), replace(c, group=lab))
            else:
                d, h = (dn[r0], hn[r0]) if op.peer_offset > 0 else (dp_[r0], hp[r0])
                c = p2p_obj(op.size_bytes, int(d), int(h))
            colls.append(c)
        coll_index = {op_i: j for j, op_i in enumerate(info.comm_ops)}
        nodes = tuple((kind, float(coll_index[i]) if kind == "coll" else float(info.comp_ns[i]))
                      for i, kind in enumerate(info.nodes_kind))
        links = []
        for recvs, peer, theirs in ((info.recv_prev, prv, "send_next"), (info.recv_next, nxt, "send_prev")):
            if not recvs:
                continue
            src = int(peer[r0])
            if src < 0 or src == r0:
                continue
            sends = getattr(infos[int(rank_prog[src])], theirs)
            # each rank's own sender there (demand.links._senders: what the traces name)
            who = tuple(int(peer[r]) for r in rs)
            links.extend(((int(a), int(class_of[src]), int(b)), who) for a, b in zip(recvs, sends))
        links.sort(key=lambda e: e[0][0])
        senders = tuple(w for _, w in links)
        if any(x < 0 or x >= N or x == r for w in senders for x, r in zip(w, rs)):
            senders = ()
        syncs = _syncs(ci, r0, info, ops, groups, class_of, rank_prog, plan, infos, gkey, used_axes, N)
        dag = Dag(nodes, info.edges, tuple(e for e, _ in links), tuple(sorted(syncs)), senders)
        out.append(RankClass(info.compute_ns, tuple(colls), len(rs), tuple(rs), dag))
    notes = (RECV_NOTE,) if any(op.kind == RECV for ops in plan.programs.values() for op in ops) else ()
    return Demand(name or spec.name, tuple(net.npus_per_dim), tuple(out), notes, net.dim_names)


def _syncs(ci, r0, info, ops, groups, class_of, rank_prog, plan, infos, gkey, used_axes, N) -> list:
    """Collectives of class ``ci`` paired with the same collectives of other classes sharing the
    communicator of its first rank (the representative of the other class must be in it too)."""
    out = []
    for axis in used_axes:
        mine = [i for i in info.comm_ops if ops[i].kind == COLL and ops[i].axis == axis]
        if not mine:
            continue
        g = int(gkey[axis][r0])
        comm = np.flatnonzero(gkey[axis] == g) if g >= 0 else np.arange(N)
        for cj in sorted(set(class_of[comm].tolist()) - {ci}):
            rj = groups[cj][0]
            if int(gkey[axis][rj]) != g:
                continue
            kj = int(rank_prog[rj])
            theirs = [i for i in infos[kj].comm_ops if plan.programs[kj][i].kind == COLL
                      and plan.programs[kj][i].axis == axis]
            out.extend((int(a), cj, int(b)) for a, b in zip(mine, theirs))
    return out
