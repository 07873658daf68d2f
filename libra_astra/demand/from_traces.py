"""Chakra ET traces + network (+ communicator groups) -> per-dimension communication demand.

Each rank file is read into a compact program (:mod:`libra_astra.traces.reader`); every distinct
program is analysed once (topological order, compute times, its collectives in issue order);
each rank then only resolves what depends on the rank itself (the dimension its sends cross).
Ranks whose demand comes out identical -- same dependency graph, same collectives with the same
per-dimension traffic -- form one rank class, computed and written once. The job time is the
slowest class's; the optimizer takes the max over classes.

Modelling choices (they follow ASTRA-sim's workload layer and analytical network backend):

- COMP: ``duration_micros`` x 1000 ns; with ``peak_tflops`` and ``mem_bw_gbps`` the roofline
  time ``num_ops / min(peak, mem_bw * num_ops / tensor_size)``; a node without num_ops or
  tensor_size then takes 0 ns, as in ASTRA-sim. A zero ``duration_micros`` costs 1 ns, as ASTRA-sim
  charges it. CPU ops (``is_cpu_op``) are timed the same way on the rank's CPU-op slot (DAG kind
  ``cpu``): they count in the dependency-aware (overlap) model, not in ``compute_time_ns``.
- COMM_COLL on a group: hierarchical traffic on a sub-grid, one flat ring on any other member
  set; on all ranks, over the dimensions ``involved_dim`` marks.
- COMM_SEND: a P2P transfer charged on the lowest dimension where source and destination
  differ. COMM_RECV is the other side of a send: kept in the graph with 0 ns on no resource
  (ASTRA-sim gives receives no slot), not charged.
- METADATA, MEM_LOAD, MEM_STORE and INVALID nodes carry no demand: counted, reported, kept in
  the graph (0 ns, no resource) so dependencies through them hold.
- A dependency on a node that is not in the file is satisfied (PyTorch's converter removes its
  root node 0 but keeps the dependencies on it) and reported.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from . import groups as grp
from ..errors import LibraError
from ..interning import Interner
from ..model.network import Network
from ..traces import chakra_io as cio
from ..traces import cpu_collectives as cpu
from ..traces.wire import row_groups
from ..traces import completion
from ..traces.cpu_groups import GroupMap, GroupTally, load_group_map
from ..traces.files import rank_files, read_file_bytes
from ..traces.schema import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE
from ..traces.reader import RankProgram, TraceReader
from .context import Context
from .group_check import check_group_sequences, merge_metadata
from .links import split_by_peers, with_links
from .program import KIND_NAMES, Program, send_pids_many
from .program_batch import analyze_many
from .summary import ClassSummary, TraceSummary, summarize, summary_to_dict
from .types import Collective, Dag, Demand, RankClass

__all__ = ["demand_from_traces", "summary_to_dict", "TraceSummary"]


def _labels(ctx: Context, infos: Sequence[Program], names: Interner[str]) -> np.ndarray:
    """Group label id (into ``names``) per comm position of a class: the group id, or the ids when
    the class's ranks use different groups at that position (e.g. one tensor-parallel group each)."""
    keys = np.stack([i.coll_key for i in infos]) if len(infos) > 1 else infos[0].coll_key[None, :]
    label_id = names.index

    table = np.asarray([label_id(grp.group_label(k)) for k in ctx.keys] + [label_id("")], dtype=np.int64)
    out = table[keys[0]]  # key -1 (a send) picks the last entry, ""
    mixed = np.nonzero(~np.all(keys == keys[0], axis=0))[0]
    if mixed.size:
        combos, inverse = _unique_rows(np.ascontiguousarray(keys[:, mixed].T))
        ids = []
        for combo in combos.tolist():
            names_k = sorted({ctx.keys[k] for k in combo}, key=lambda s: (len(s), s))
            text = (",".join(grp.group_label(x) for x in names_k) if len(names_k) <= 4 else
                    f"{grp.group_label(names_k[0])}..{grp.group_label(names_k[-1])} ({len(names_k)} groups)")
            ids.append(label_id(text))
        out[mixed] = np.asarray(ids, dtype=np.int64)[inverse.reshape(-1)]
    return out


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True)`` for a C-contiguous 2-D int64 array.

    Rows are compared as raw bytes first (one memcmp sort, where axis=0 sorts field by field:
    with one column per rank of a 512-rank class that took most of the labelling), then the few
    distinct rows are put in np.unique's order, lexicographic by value."""
    if a.shape[0] == 0 or a.shape[1] == 0:
        return np.unique(a, axis=0, return_inverse=True)
    first, inv = row_groups(a)
    distinct = a[first]
    order = np.lexsort(distinct.T[::-1])
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[inv]


def _programs_with(progs: Sequence[RankProgram], kinds: Sequence[tuple[int, np.ndarray | None]]) -> np.ndarray:
    """Per program, whether it has a node of one of ``kinds``: (node type, and a flag per attribute
    row the node's row must have, or None). One pass over all programs' nodes together: per program,
    the numpy calls cost more than the work."""
    if not progs:
        return np.zeros(0, dtype=bool)
    # ranks with byte-identical files share one program object: look at each once
    slot: dict[int, int] = {}
    which = np.asarray([slot.setdefault(id(p), len(slot)) for p in progs], dtype=np.int64)
    distinct = list({id(p): p for p in progs}.values())
    types = np.concatenate([p.types for p in distinct])
    attr = np.concatenate([p.attr for p in distinct]) if any(f is not None for _, f in kinds) else None
    hit = np.zeros(types.shape, dtype=bool)
    for t, flag in kinds:
        at = np.flatnonzero(types == t)
        hit[at if flag is None else at[flag[attr[at]]]] = True
    ends = np.cumsum([p.num_nodes for p in distinct])
    out = np.zeros(len(distinct), dtype=bool)
    out[np.searchsorted(ends, np.flatnonzero(hit), side="right")] = True
    return out[which]


def _with_inferred_peers(reader: TraceReader, read: list[RankProgram], paths: Sequence[Path], n_npus: int,
                         counts: list[int]) -> list[RankProgram]:
    """Programs with sends without comm_dst or receives without comm_src re-read with the peers
    the trace shows (traces/cpu_collectives.infer_peers); ``counts`` gets (inferred, unknown)."""
    cols = reader.attrs.columns()
    out = list(read)
    lacks = _programs_with(read, ((COMM_SEND_NODE, cols["comm_dst"] < 0), (COMM_RECV_NODE, cols["comm_src"] < 0)))
    for r in np.flatnonzero(lacks).tolist():
        meta, nodes = cio.read_et(paths[r])
        done, left = cpu.infer_peers(nodes, r, cpu.rank_groups(nodes, str(paths[r])))
        counts[0] += done
        counts[1] += left
        if done:
            out[r] = reader.parse(cio.encode_et(nodes, meta), str(paths[r]))
    return out


def _group_sources(tally: GroupTally, group_map: GroupMap | None) -> str:
    """How the typed collectives' process groups were settled, for the report."""
    c = tally.counts
    parts = [f"{c['given']} from {group_map.path}" if group_map is not None else "",
             f"{c['named']} named by the op's pg_name" if c["named"] else "",
             f"{c['fixed']} fixed by the trace (METADATA groups, tensor sizes)" if c["fixed"] else "",
             f"{c['guessed']} guessed" if c["guessed"] else ""]
    return "of the collectives: " + (", ".join(p for p in parts if p) or "none")


def demand_from_traces(prefix: str | Path, network: Network,
                       comm_groups: str | Path | Mapping[str, Sequence[int]] | None = None,
                       peak_tflops: float | None = None, mem_bw_gbps: float | None = None,
                       on_progress: Callable[[int, int], None] | None = None,
                       type_cpu_collectives: bool = False,
                       cpu_collective_groups: str | Path | GroupMap | None = None) -> tuple[Demand, TraceSummary]:
    """Per-dimension communication demand of a Chakra ET trace set on ``network``.

    Parameters
    ----------
    prefix
        Trace set prefix: rank r is ``PREFIX.r.et`` (or ``.et.gz``); one file per NPU.
    network
        The network the demand is computed for (its NPU count must match the trace set).
    comm_groups
        ASTRA-sim comm-group JSON file (or the mapping it holds); overrides process groups
        found in METADATA nodes.
    peak_tflops, mem_bw_gbps
        Both given: COMP nodes are timed with ASTRA-sim's roofline from num_ops/tensor_size
        instead of duration_micros.
    on_progress
        Called as ``on_progress(ranks_read, ranks)`` while the rank files are read.
    type_cpu_collectives
        Type the gloo collectives, sends and receives that PyTorch's converter leaves as CPU
        ops (``c10d::*`` / ``gloo:*``; see :mod:`libra_astra.traces.cpu_collectives`).
    cpu_collective_groups
        The process group of typed collectives, as a mapping file (or its loaded form; see
        :mod:`libra_astra.traces.cpu_groups`), for those the trace does not settle; implies
        ``type_cpu_collectives``.

    Returns
    -------
    (Demand, TraceSummary)

    Raises
    ------
    LibraError
        Any problem with the input, naming the file, node or byte offset and the fix.
    """
    if (peak_tflops is None) != (mem_bw_gbps is None):
        raise LibraError("roofline timing needs both peak_tflops and mem_bw_gbps (or neither, to use duration_micros)")
    for what, v in (("peak_tflops", peak_tflops), ("mem_bw_gbps", mem_bw_gbps)):
        if v is not None and not v > 0:
            raise LibraError(f"{what} must be > 0, got {v!r}")
    n_npus = network.npus_count
    group_map = (load_group_map(cpu_collective_groups) if isinstance(cpu_collective_groups, (str, Path))
                 else cpu_collective_groups)
    if group_map is not None:
        group_map.check_npus(n_npus)
        type_cpu_collectives = True
    marker = completion.check_complete(prefix)   # before the rank files: an interrupted write explains missing ones
    paths = rank_files(prefix, n_npus, f"network {network.name!r}")
    expect = completion.expected_digests(prefix, paths, marker)

    if comm_groups is None:
        file_groups: dict[str, tuple[int, ...]] = {}
        source = "comm-groups file"
    elif isinstance(comm_groups, Mapping):
        file_groups = grp.comm_groups_from_dict(comm_groups, "comm groups")
        source = "comm groups"
    else:
        file_groups = grp.load_comm_groups(comm_groups)
        source = "comm-groups file"
    grp.check_members(file_groups, n_npus, str(comm_groups) if comm_groups is not None else "comm groups")

    reader = TraceReader()
    ctx = Context(network, file_groups, source, peak_tflops, mem_bw_gbps, reader)

    # 1. read: one compact program per distinct file content
    progs: list[RankProgram] = []
    ranks_of: list[list[int]] = []
    by_digest: dict[bytes, int] = {}
    rank_prog = np.zeros(n_npus, dtype=np.int64)
    tally = GroupTally()
    if type_cpu_collectives:
        bufs, typed = [], 0
        for r, p in enumerate(paths):
            meta, nodes = cio.read_et(p)
            typed += cpu.typed_rank(nodes, r, n_npus, str(p), group_map, tally, file_groups)
            bufs.append(cio.encode_et(nodes, meta))
        tally.check_used(group_map)
        read = reader.parse_many(bufs, [str(p) for p in paths])
        reader.files_decoded += len(paths)
    else:
        read = reader.read_many(paths, expect)
    read = _with_inferred_peers(reader, read, paths, n_npus, inferred := [0, 0])
    untyped = (0, 0)
    has_comm = (None if type_cpu_collectives else
                _programs_with(read, ((COMM_COLL_NODE, None), (COMM_SEND_NODE, None), (COMM_RECV_NODE, None))))
    for r, prog in enumerate(read):
        pi = by_digest.get(prog.digest)
        if pi is None:
            pi = by_digest[prog.digest] = len(progs)
            progs.append(prog)
            ranks_of.append([])
        ranks_of[pi].append(r)
        rank_prog[r] = pi
        if not type_cpu_collectives and not has_comm[r]:
            got = cpu.count_in_bytes(read_file_bytes(paths[r]))
            untyped = (untyped[0] + got[0], untyped[1] + got[1])
        if on_progress is not None:
            on_progress(r + 1, n_npus)

    # 2. groups from METADATA, then analyse each distinct program once
    merge_metadata(ctx, progs)
    programs = analyze_many(ctx, progs, ranks_of)
    check_group_sequences(ctx, programs, rank_prog)

    # 3. per rank: sends -> classes of identical demand
    classes: dict[tuple[bytes, bytes], list[int]] = {}
    class_pids: dict[tuple[bytes, bytes], np.ndarray] = {}
    sends = iter(send_pids_many(ctx, [(info, r) for info in programs if info.has_sends for r in info.ranks]))
    for info in programs:
        has_send = info.has_sends
        base = info.coll_pid
        for r in info.ranks:
            if has_send:
                pids = base.copy()
                pids[info.comm_is_send] = next(sends)
            else:
                pids = base
            key = (info.struct, pids.tobytes())
            lst = classes.get(key)
            if lst is None:
                classes[key] = lst = []
                class_pids[key] = pids
            lst.append(r)

    # 3b. pipeline stages: ranks of one class that wait on different classes are timed apart
    groups = split_by_peers(ctx, programs, list(classes.items()))

    # 4. build rank classes
    phys_traffic = np.asarray([c.traffic_bytes for c in ctx.physics], dtype=np.float64).reshape(-1, network.num_dims)
    label_names: Interner[str] = Interner()
    coll_obj: dict[tuple[int, int], Collective] = {}
    rank_classes: list[RankClass] = []
    class_summaries: list[ClassSummary] = []
    for key, ranks in groups:
        pids = class_pids[key]
        infos = [programs[p] for p in sorted({int(rank_prog[r]) for r in ranks})]
        rep = infos[0]
        labels = _labels(ctx, infos, label_names)
        # one Collective object per distinct (physics, label); positions index into them
        combo = pids * (len(label_names) + 1) + labels
        uniq, inverse = np.unique(combo, return_inverse=True)
        objs = np.empty(uniq.size, dtype=object)
        for j, c in enumerate(uniq.tolist()):
            pid, lab = divmod(c, len(label_names) + 1)
            obj = coll_obj.get((pid, lab))
            if obj is None:
                obj = coll_obj[(pid, lab)] = replace(ctx.physics[pid], group=label_names[lab])
            objs[j] = obj
        colls = tuple(objs[inverse.reshape(-1)].tolist())
        kinds = np.asarray(KIND_NAMES, dtype=object)[rep.kinds].tolist()
        values = rep.comp_ns.tolist()
        for i, pos in enumerate(rep.comm_pos.tolist()):  # a collective node holds its index (an int)
            values[pos] = i
        dag = Dag(tuple(zip(kinds, values)), tuple(zip(rep.edges_u.tolist(), rep.edges_v.tolist())))
        rank_classes.append(RankClass(rep.compute_ns, colls, len(ranks), tuple(ranks), dag))
        up, cnt = np.unique(pids, return_counts=True)
        traffic = (phys_traffic[up] * cnt[:, None]).sum(axis=0) if up.size else np.zeros(network.num_dims)
        class_summaries.append(ClassSummary(len(ranks), tuple(ranks), rep.compute_ns, len(colls),
                                            tuple(traffic.tolist())))
    order = sorted(range(len(rank_classes)), key=lambda i: rank_classes[i].ranks[0])
    rank_classes = [rank_classes[i] for i in order]
    class_summaries = [class_summaries[i] for i in order]
    rank_classes = with_links(ctx, programs, rank_prog, rank_classes)

    summary, notes = summarize(ctx, str(prefix), programs, rank_classes, class_summaries, reader)
    if inferred[0]:
        notes.append(f"{inferred[0]} send/receive peer(s) the trace does not name (PyTorch's converter writes NCCL "
                     "sends and receives without comm_src/comm_dst) taken from the c10d::send/recv_ op that "
                     "launched them or from a two-rank process group")
    if type_cpu_collectives and typed:
        notes.append(f"{typed} gloo collective(s), send(s) and receive(s) typed from their c10d:: CPU ops "
                     "(--type-cpu-collectives): kind and size from the op, its gloo: op left out; process group "
                     + _group_sources(tally, group_map))
        guess = tally.guess_note()
        if guess:
            notes.append(guess)
    elif untyped[0]:
        notes.append(f"{untyped[0]} c10d:: and {untyped[1]} gloo: CPU op(s) are collectives, sends and receives "
                     "that PyTorch's Chakra converter leaves untyped (gloo runs): they are timed as CPU ops and "
                     "carry no network demand; pass --type-cpu-collectives to count them as communication")
    summary = replace(summary, notes=tuple(notes), untyped_cpu_collectives=untyped[0],
                      cpu_groups=tally.counts if type_cpu_collectives else {}, cpu_groups_guessed=tally.guessed(),
                      gzipped_files=sum(p.name.endswith(".gz") for p in paths))
    name = Path(str(prefix)).name
    demand = Demand(name, network.npus_per_dim, tuple(rank_classes), tuple(notes), network.dim_names)
    return demand, summary
