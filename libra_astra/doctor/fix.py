"""``doctor --fix``: a copy of a trace set that ASTRA-sim runs, written beside a new prefix.

The input is only read. What the copy changes uses the same rules as the trace rewrite for
``emit`` (:mod:`..astra.rewrite`: removed nodes pass their dependencies on, dangling and self
dependencies are dropped, collectives that reach no other NPU become zero-time compute, sizes are
rounded to the chunk count); nothing else is touched: no chaining, no reordering, no new
``involved_dim`` where the trace had a valid one. Rank files are written plain (ASTRA-sim cannot
read gzip), each atomically; nothing is written unless every rank could be fixed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from ..astra.rewrite_rules import relink, set_attrs, to_zero_comp
from ..astra.stats import WorkloadStats, split_size
from ..errors import LibraError
from ..files import write_json_atomic, write_text_atomic
from ..traces import chakra_io as cio
from ..traces.files import find_rank_files
from ..traces.schema import COMM_NODE_TYPES, INVALID_NODE, MEM_NODE_TYPES, METADATA_NODE, pb
from .gpu_order import add_gpu_order
from .attrs import attr_kind, convertible_int, first_attrs, int_attr, is_cpu_op, stoi
from .groups import file_groups, metadata_group_table
from .load import GroupFile, RankFile, Target

_REMOVED_TYPES = (INVALID_NODE, METADATA_NODE) + MEM_NODE_TYPES
_INT_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag")


class _Actions(Counter):
    def note(self, what: str, n: int = 1) -> None:
        if n:
            self[what] += n


def _fix_node(n, rank: int, target: Target | None, groups: dict[int, tuple[int, ...]], splits: int,
              act: _Actions) -> None:
    a = first_attrs(n)
    cpu = a.get("is_cpu_op")
    if n.type in COMM_NODE_TYPES and (is_cpu_op(cpu) is not False):
        act.note("is_cpu_op set false on communication nodes")
        set_attrs(n, ["is_cpu_op"], [cio.make_attr("is_cpu_op", "bool_val", False)])
    elif is_cpu_op(cpu) is None:
        act.note("is_cpu_op rewritten as a bool")
        v = getattr(cpu, attr_kind(cpu))
        v = bool(list(v.values)) if attr_kind(cpu).endswith("_list") else bool(v)
        set_attrs(n, ["is_cpu_op"], [cio.make_attr("is_cpu_op", "bool_val", v)])
    for k in _INT_ATTRS:
        at = a.get(k)
        if at is not None and int_attr(at) is None and convertible_int(at) is not None:
            act.note("integer attributes rewritten as int64_val")
            set_attrs(n, [k], [cio.make_attr(k, "int64_val", convertible_int(at))])
    if n.type != pb.COMM_COLL_NODE:
        return
    a = first_attrs(n)
    ct = int_attr(a["comm_type"]) if "comm_type" in a else None
    if ct == pb.REDUCE_SCATTER_BLOCK:
        act.note("REDUCE_SCATTER_BLOCK collectives written as REDUCE_SCATTER")
        set_attrs(n, ["comm_type"], [cio.make_attr("comm_type", "int64_val", pb.REDUCE_SCATTER)])
    elif ct == pb.BARRIER:
        act.note("BARRIER collectives written as zero-byte ALL_REDUCE")
        set_attrs(n, ["comm_type", "comm_size"], [cio.make_attr("comm_type", "int64_val", pb.ALL_REDUCE),
                                                  cio.make_attr("comm_size", "int64_val", 0)])
    a = first_attrs(n)
    size = int_attr(a["comm_size"]) if "comm_size" in a else None
    if size is not None and splits > 1:
        stats = WorkloadStats()
        new = split_size(size, splits, stats)
        if new != size:
            act.note(f"collective sizes rounded to a multiple of {splits} bytes")
            set_attrs(n, ["comm_size"], [cio.make_attr("comm_size", "int64_val", new)])
    pg = a.get("pg_name")
    gid = None
    if pg is not None and attr_kind(pg) != "string_val" and int_attr(pg) is not None:
        act.note("pg_name rewritten as a string")
        set_attrs(n, ["pg_name"], [cio.make_attr("pg_name", "string_val", str(int_attr(pg)))])
        pg = first_attrs(n)["pg_name"]
    if pg is not None and attr_kind(pg) == "string_val" and pg.string_val not in ("", "0"):
        gid = stoi(pg.string_val)[0]
    inv = a.get("involved_dim")
    if gid:
        members = groups.get(gid)
        if members is not None and len(members) == 1 and rank in members:
            act.note("collectives reaching no other NPU replaced by zero-duration compute")
            to_zero_comp(n)
        return
    if inv is not None and attr_kind(inv) != "bool_list":
        return
    mask = None if inv is None else list(inv.bool_list.values)
    if target is not None and mask is None and target.num_dims > 4:
        act.note(f"involved_dim set on all {target.num_dims} dimensions where it was absent")
        set_attrs(n, ["involved_dim"], [cio.make_attr("involved_dim", "bool_list", [True] * target.num_dims)])
        return
    if mask is None:
        mask = [True] * 4
    if target is not None:
        if len(mask) < target.num_dims:
            return
        reach = any(m and target.npus_per_dim[i] > 1 for i, m in enumerate(mask[:target.num_dims]))
    else:
        reach = any(mask)
    if not reach:
        act.note("collectives reaching no other NPU replaced by zero-duration compute")
        to_zero_comp(n)


def fixed_rank(rf: RankFile, target: Target | None, groups: dict[int, tuple[int, ...]], splits: int,
               act: _Actions, gpu_order: bool = False) -> bytes:
    """Bytes of the fixed copy of one rank file (rf.nodes are changed in place)."""
    nodes = rf.nodes
    stats = WorkloadStats()
    selfs = sum(1 for n in nodes if n.id in n.data_deps or n.id in n.ctrl_deps)
    kinds = Counter(n.type for n in nodes if n.type in _REMOVED_TYPES)
    kept = relink(nodes, stats, _REMOVED_TYPES)
    act.note("dependencies on nodes absent from the file dropped", stats.dangling_deps_dropped)
    act.note("self dependencies dropped", selfs)
    for t, k in sorted(kinds.items()):
        name = pb.NodeType.Name(t).removesuffix("_NODE")
        act.note(f"{name} nodes removed (their dependents inherit their dependencies)", k)
    for n in kept:
        _fix_node(n, rf.rank, target, groups, splits, act)
    if gpu_order:
        added: Counter = Counter()
        add_gpu_order(kept, added)
        for what, k in added.items():
            act.note(what, k)
    if not kept:
        act.note("empty ranks given one zero-duration compute node")
        kept = [cio.comp_node(0, "empty", 0)]
    meta = rf.meta if rf.meta is not None and rf.meta.version else cio.global_metadata()
    return cio.encode_et(kept, meta)


def _outputs(out_prefix: Path, num_ranks: int) -> tuple[list[Path], list[Path]]:
    """The files to write, and other rank files of the prefix a --force run removes."""
    files = [Path(f"{out_prefix}.{r}.et") for r in range(num_ranks)]
    stale = [p for r, p in find_rank_files(out_prefix).items() if r >= num_ranks]
    stale += [Path(f"{out_prefix}.{r}.et.gz") for r in range(num_ranks) if Path(f"{out_prefix}.{r}.et.gz").exists()]
    return files, stale


def fix_set(prefix: str | Path, ranks: Sequence[RankFile], out_prefix: str | Path, *, target: Target | None = None,
            groups: GroupFile | None = None, splits: int = 1, overwrite: bool = False,
            gpu_order: bool = False) -> tuple[list[Path], Path | None, list[tuple[str, int]]]:
    """Write the fixed copy of ``ranks`` (read from ``prefix``) at ``out_prefix``; returns the rank
    files, the groups file (or None) and the actions."""
    out = Path(out_prefix)
    src = Path(prefix)
    if out.resolve() == src.resolve():
        raise LibraError(f"{out}: is the input prefix; the doctor never modifies its input, give --out another prefix")
    if not out.parent.is_dir():
        raise LibraError(f"{out}: directory {out.parent} does not exist; create it first")
    bad = [rf for rf in ranks if rf.nodes is None]
    if bad:
        raise LibraError(f"{bad[0].path}: cannot be read, so it cannot be fixed ({bad[0].error})")
    num_ranks = max(rf.rank for rf in ranks) + 1
    if len(ranks) != num_ranks:
        have = {rf.rank for rf in ranks}
        r = min(set(range(num_ranks)) - have)
        raise LibraError(f"{prefix}.{r}.et: rank file missing; --fix cannot invent a rank, add the file")
    # groups the copy needs: valid ones of the given file (even if ASTRA-sim would ignore its path), else METADATA's
    loaded = file_groups(groups, num_ranks)
    meta = metadata_group_table(ranks, num_ranks)
    table = dict(meta)
    table.update(loaded)
    act = _Actions()
    if any(rf.gzipped for rf in ranks):
        act.note("rank files written plain (ASTRA-sim cannot read gzip)", sum(rf.gzipped for rf in ranks))
    data = [fixed_rank(rf, target, table, splits, act, gpu_order) for rf in ranks]
    used = _used_groups(ranks)
    # the copy carries every valid group of the given file, and the METADATA groups its collectives use
    out_groups = dict(loaded)
    out_groups.update({g: meta[g] for g in used if g in meta and g not in loaded})
    groups_path = None
    files, stale = _outputs(out, num_ranks)
    if out_groups:
        groups_path = Path(f"{out}.groups.json")
        if "empty" in str(groups_path):
            raise LibraError(f"{groups_path}: ASTRA-sim ignores a communicator-group file whose path contains "
                             "\"empty\"; choose an --out prefix without it")
        act.note(f"communicator groups written to {groups_path.name}", len(out_groups))
        act.note("of them taken from the trace's METADATA process groups", len(set(out_groups) - set(loaded)))
    if groups is not None:
        act.note("groups of the communicator-group file dropped (id not a positive integer)",
                 sum(1 for k in groups.groups if (stoi(k)[0] or 0) <= 0 or stoi(k)[1]))
    if groups_path is None and Path(f"{out}.groups.json").exists():
        stale.append(Path(f"{out}.groups.json"))   # a copy without groups must not pick up an old file
    existing = [p for p in files + ([groups_path] if groups_path else []) if p.exists()] + stale
    if existing and not overwrite:
        raise LibraError(f"{existing[0]}: already exists; choose another --out prefix or pass --force to replace it")
    for p in stale:
        p.unlink()
    for p, d in zip(files, data):
        write_text_atomic(p, d, overwrite)
    if groups_path is not None:
        write_json_atomic(groups_path, {str(g): list(out_groups[g]) for g in sorted(out_groups)}, overwrite)
    return files, groups_path, sorted(act.items(), key=lambda kv: _ORDER.get(kv[0].split(" ")[0], 99))


_ORDER = {"rank": 0, "dependencies": 1, "self": 2, "METADATA": 3, "INVALID": 4, "MEM_LOAD": 5, "MEM_STORE": 6,
          "empty": 7, "is_cpu_op": 8, "integer": 9}


def _used_groups(ranks: Sequence[RankFile]) -> set[int]:
    """Group ids (> 0) named by the collectives of the fixed copy."""
    used: set[int] = set()
    for rf in ranks:
        for n in rf.nodes or ():
            if n.type != pb.COMM_COLL_NODE:
                continue
            pg = first_attrs(n).get("pg_name")
            if pg is not None and attr_kind(pg) == "string_val":
                gid, _ = stoi(pg.string_val)
                if gid:
                    used.add(gid)
    return used

