"""Custom collectives (system.json ``*-implementation-custom``): each rank's time of a collective
that ASTRA-sim 518bd51 runs as a Chakra ET program per rank instead of a native algorithm.

ASTRA-sim (``Sys::generate_collective``, ``CustomAlgorithm``) runs the whole collective as one
stream: no chunks (``preferred-dataset-splits`` is not used), no dimension queues, no
endpoint-delay and no memory bus; the workload's ``comm_size`` and ``involved_dim`` are ignored.
Rank r replays ``PREFIX.r.et``, issuing every node whose data and control dependencies are done:

- COMM_SEND of ``comm_size`` bytes to ``comm_dst``: done when it arrives, after
  ``int(hops * latency + bytes / bandwidth)`` on the lowest dimension where the two NPU ids differ;
- COMM_RECV from ``comm_src``: done when the matching send has arrived (at once if it already
  has). Messages match on (source, destination, tag, size), first sent to first received;
- COMP: ``duration_micros`` x 1000 ns (1 ns when 0), the reduction.

The collective ends on a rank when its program has no node left. Timed here on the
congestion-unaware backend, from a common start on every rank.
"""

from __future__ import annotations

import heapq
from collections import deque
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..demand.groups import p2p_dims
from ..errors import LibraError
from ..model.network import Network
from ..traces.chakra_io import node_attrs, read_et
from .astra_collective import Link, message_ns

_COMP, _SEND, _RECV = 4, 5, 6           # Chakra NodeType values ASTRA-sim's CustomAlgorithm issues
_NATIVE_TAGS = 500_000_000              # Sys::front_end_sim_send folds NATIVE tags into [0, 5e8)


class _Node(NamedTuple):
    kind: int
    deps: tuple[int, ...]
    peer: int           # send: destination; receive: source; compute: -1
    size_bytes: int
    tag: int
    time_ns: int        # compute only


def _load(path: Path, where: str, npus: int) -> dict[int, _Node]:
    if not path.is_file():
        raise LibraError(f"{where}: no file {path} (ASTRA-sim opens PREFIX.RANK.et from its working directory); "
                         "give the path the simulator is run with")
    _, nodes = read_et(path)
    out: dict[int, _Node] = {}
    for n in nodes:
        a = node_attrs(n)
        deps = tuple(dict.fromkeys((*n.data_deps, *n.ctrl_deps)))
        if n.type == _COMP:
            out[n.id] = _Node(_COMP, deps, -1, 0, 0, int(n.duration_micros) * 1000 or 1)
            continue
        if n.type not in (_SEND, _RECV):
            raise LibraError(f"{where}: {path}: node {n.id} ({n.name}) is of Chakra type {n.type}: ASTRA-sim's custom "
                             "collective issues only COMM_SEND, COMM_RECV and COMP nodes and never finishes; remove it")
        peer = a.get("comm_dst" if n.type == _SEND else "comm_src")
        if not isinstance(peer, int) or not 0 <= peer < npus:
            raise LibraError(f"{where}: {path}: node {n.id} ({n.name}) has {'comm_dst' if n.type == _SEND else 'comm_src'} "
                             f"{peer!r}; give an NPU id below {npus}")
        size = a.get("comm_size")
        if not isinstance(size, int) or size < 0:
            raise LibraError(f"{where}: {path}: node {n.id} ({n.name}) has comm_size {size!r}; give a byte count")
        out[n.id] = _Node(int(n.type), deps, peer, size, int(a.get("comm_tag", 0)) % _NATIVE_TAGS, 0)
    for i, n in out.items():
        bad = [p for p in n.deps if p not in out]
        if bad:
            raise LibraError(f"{where}: {path}: node {i} depends on node {bad[0]}, which the file does not have; "
                             "ASTRA-sim never finishes it")
    return out


def custom_rank_times(prefix: str, where: str, network: Network, links: tuple[Link, ...]) -> tuple[int, ...]:
    """Each rank's time (ns) of the custom collective ``PREFIX.RANK.et``, all ranks starting at 0.

    Raises
    ------
    LibraError
        A rank file missing or malformed, a send to itself, or a program that never finishes
        (a receive no send matches, a dependency cycle), naming ``where`` (file: key).
    """
    # the files' inodes, sizes and times in the key: a program rewritten in place is read again
    stamps = tuple((s.st_ino, s.st_size, s.st_mtime_ns) if (s := _stat(Path(f"{prefix}.{r}.et"))) else None
                   for r in range(network.npus_count))
    return _rank_times(prefix, stamps, where, network, links)


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


@lru_cache(maxsize=64)
def _rank_times(prefix: str, _stamps: tuple, where: str, network: Network, links: tuple[Link, ...]) -> tuple[int, ...]:
    npus = network.npus_count
    progs = [_load(Path(f"{prefix}.{r}.et"), where, npus) for r in range(npus)]
    pairs = sorted({(r, n.peer) for r, p in enumerate(progs) for n in p.values() if n.kind == _SEND})
    if any(s == d for s, d in pairs):
        s = next(s for s, d in pairs if s == d)
        raise LibraError(f"{where}: rank {s}'s program sends to itself; ASTRA-sim's network has no route for it")
    route: dict[tuple[int, int], tuple[int, int]] = {}
    if pairs:
        src, dst = (np.asarray(x, dtype=np.int64) for x in zip(*pairs))
        dims, hops = p2p_dims(network, src, dst)
        route = {pr: (int(d), int(h)) for pr, d, h in zip(pairs, dims.tolist(), hops.tolist())}
    left = [{i: len(n.deps) for i, n in p.items()} for p in progs]
    children: list[dict[int, list[int]]] = [{} for _ in progs]
    for r, p in enumerate(progs):
        for i, n in p.items():
            for dep in n.deps:
                children[r].setdefault(dep, []).append(i)
    arrived: dict[tuple, deque] = {}        # (src, dst, tag, size) -> arrival times not yet received
    waiting: dict[tuple, deque] = {}        # (src, dst, tag, size) -> receives (rank, node) posted first
    events: list[tuple[int, int, int, int]] = []     # (time, order, rank, node done)
    seq = 0
    finish = [0] * npus

    def done(t: int, r: int, i: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, r, i))
        seq += 1

    def issue(t: int, r: int, i: int) -> None:
        n = progs[r][i]
        if n.kind == _COMP:
            done(t + n.time_ns, r, i)
        elif n.kind == _SEND:
            dim, h = route[(r, n.peer)]
            at = t + message_ns(links[dim], h, n.size_bytes)
            done(at, r, i)
            key = (r, n.peer, n.tag, n.size_bytes)
            if waiting.get(key):
                rr, ri = waiting[key].popleft()
                done(at, rr, ri)
            else:
                arrived.setdefault(key, deque()).append(at)
        else:
            key = (n.peer, r, n.tag, n.size_bytes)
            if arrived.get(key):
                done(max(t, arrived[key].popleft()), r, i)
            else:
                waiting.setdefault(key, deque()).append((r, i))

    for r, p in enumerate(progs):
        for i in sorted(i for i, k in left[r].items() if k == 0):
            issue(0, r, i)
    finished = [0] * npus
    while events:
        t, _, r, i = heapq.heappop(events)
        finish[r] = max(finish[r], t)
        finished[r] += 1
        for c in children[r].get(i, ()):
            left[r][c] -= 1
            if left[r][c] == 0:
                issue(t, r, c)
    stuck = [r for r in range(npus) if finished[r] != len(progs[r])]
    if stuck:
        r = stuck[0]
        why = ("a receive no send matches (messages match on source, destination, comm_tag and comm_size)"
               if any(waiting.values()) else "nodes that depend on each other in a cycle")
        raise LibraError(f"{where}: rank {r}'s program {prefix}.{r}.et never finishes: {why}; ASTRA-sim hangs")
    return tuple(finish)
