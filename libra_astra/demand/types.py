"""Communication demand of a training job per network dimension, and its JSON file format.

Demand JSON, version 1 (``"format": "libra_astra.demand"``)::

    {
      "format": "libra_astra.demand", "version": 1,
      "name": "gpt3-18l",
      "npus_per_dim": [16, 8, 32],        # the network shape the participation refers to
      "dim_names": ["package", "node", "pod"],  # optional: that network's dimension names
      "rank_classes": [                   # ranks whose demand is identical, computed once
        {
          "ranks": [0, 1, 2],             # optional; a count is kept in "num_ranks"
          "num_ranks": 3,
          "compute_time_ns": 1.2e9,       # total compute of one rank of this class
          "collectives": [
            {"type": "ALL_REDUCE",        # ALL_REDUCE | REDUCE_SCATTER | ALL_GATHER | ALL_TO_ALL | P2P
             "size_bytes": 1048576,       # for ALL_GATHER the per-NPU shard, as in Chakra
             "participants": [16, 8, 1],  # p_d per dimension (1 = dimension unused)
             "count": 1,                  # how many times it runs (a weight; may be fractional)
             "name": "layer0.wg", "phase": "wg", "group": "dp",
             "algorithm": "hierarchical", # or "flat_ring" (irregular group) or "p2p"
             "traffic_bytes": [..],       # per-NPU bytes per dim; derived if hierarchical
             "hops": [..]}                # hop latencies paid in sequence per dim (integers up to
                                          # 1e9); derived if omitted
          ],
          "dag": {...}                    # optional dependency graph (see below)
        }
      ]
    }

``dim_names`` labels the dimensions in ``show`` and ``plot`` and is checked against the network
a demand meets (same shape, other names: most likely the dimensions in another order). It is
optional, so a file without it (written before names were kept) reads as before, and readers
that predate it ignore it: the version stays 1. Placeholder names (``dim0``, ``dim1``, ... of a
network that names none) are not written and are taken as no names.

A file with a single class may put ``compute_time_ns`` and ``collectives`` at the top level
instead of ``rank_classes``. The job time is the time of the slowest rank class.

``dag`` (optional, kept for the overlap model): ``{"nodes": [[kind, value], ...], "deps":
[[u, v], ...]}`` with kind ``"comp"`` (GPU compute, value = time in ns), ``"cpu"`` (a CPU op, time
in ns), ``"free"`` (a node on no resource, such as a receive: time in ns, normally 0) or ``"coll"``
(value = index into ``collectives``); ``deps`` lists edges u -> v (v waits for u), node indices in topological order; optional
``links`` [[node, source class, source node], ...] make a receive wait for the matching send of
another rank class (pipeline parallelism); optional ``syncs`` [[node, class, node], ...] make a
collective start only when the same collective of another class is ready too; optional
``senders`` [[rank, ...], ...], one list per link, names the rank each of the class's ``ranks``
waits for there (read from the traces; without it a link says only which class sends). Every source
(class, node) must exist (a class without a ``dag`` is its one node 0) and a sync pairs two
``"coll"`` nodes: the reader refuses a file that breaks this, since the replay could not place
the wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..model import collectives as coll
from ..errors import LibraError
from ..files import read_json
from ..model.network import Network, placeholder_dim_names
from ..model.numbers import check_number

FORMAT = "libra_astra.demand"
VERSION = 1
ALGORITHMS = ("hierarchical", "flat_ring", "p2p")
DAG_KINDS = ("comp", "cpu", "free", "coll")


@dataclass(frozen=True)
class Collective:
    """One collective (or point-to-point transfer) of a rank, with its per-dimension traffic."""

    type: str
    size_bytes: float
    participants: tuple[int, ...]
    traffic_bytes: tuple[float, ...]
    hops: tuple[int, ...]
    count: float = 1.0
    name: str = ""
    phase: str = ""
    group: str = ""
    algorithm: str = "hierarchical"


@dataclass(frozen=True)
class Dag:
    """Per-rank dependency graph: nodes are ("comp" | "cpu" | "free", time_ns: float) or ("coll",
    collective index: int). Per rank one "comp" (GPU compute), one "cpu" and one "coll" node run at
    a time, as ASTRA-sim's per-rank resources allow; "free" nodes (receives) take no slot.

    ``links`` are the waits on other ranks: (node, source class, source node) means ``node`` (a
    receive) cannot finish before ``source node`` of a rank of ``source class`` (the matching
    send) has finished. ``syncs`` (node, class, node) pair a collective with the same collective
    issued by a rank of another class: it starts only when both are ready. ``senders`` (empty when
    not known) gives, per link, the rank whose send each rank of the class waits for (in the
    class's ``ranks`` order): ranks of a class that run alike can still wait on different ranks
    that do not (ASTRA-sim's double binary trees set ranks of one class apart).
    """

    nodes: tuple[tuple[str, float | int], ...]
    deps: tuple[tuple[int, int], ...]
    links: tuple[tuple[int, int, int], ...] = ()
    syncs: tuple[tuple[int, int, int], ...] = ()
    senders: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class RankClass:
    compute_time_ns: float
    collectives: tuple[Collective, ...]
    num_ranks: int = 1
    ranks: tuple[int, ...] = ()
    dag: Dag | None = None

    def __hash__(self) -> int:
        # Time rows are cached per class; hashing walks every collective and DAG node, so the
        # (immutable) class keeps its hash.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.compute_time_ns, self.collectives, self.num_ranks, self.ranks, self.dag))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        # string hashes differ between processes: a pickled class recomputes its hash
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class Demand:
    name: str
    npus_per_dim: tuple[int, ...]
    rank_classes: tuple[RankClass, ...]
    notes: tuple[str, ...] = field(default=())
    # Dimension names of the network the demand was made for; () when not known (an older file,
    # a network that names none). Placeholder names dim0, dim1, ... are kept as ().
    dim_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        names = tuple(self.dim_names)
        if names and len(names) != len(self.npus_per_dim):
            raise ValueError(f"demand {self.name!r}: {len(names)} dimension names for {len(self.npus_per_dim)} "
                             "dimensions")
        object.__setattr__(self, "dim_names", () if names == placeholder_dim_names(len(names)) else names)

    @property
    def num_dims(self) -> int:
        return len(self.npus_per_dim)

    @property
    def dim_labels(self) -> tuple[str, ...]:
        """The dimensions' names, or dim0, dim1, ... when the demand does not know them."""
        return self.dim_names or placeholder_dim_names(self.num_dims)

    def check_network(self, net: Network, source: str = "demand") -> None:
        """Refuse a network of another shape, or of other dimension names (when both have names)."""
        if tuple(self.npus_per_dim) != net.npus_per_dim:
            raise LibraError(
                f"{source}: demand was made for a network of shape {list(self.npus_per_dim)} but "
                f"network {net.name!r} has {list(net.npus_per_dim)}; rebuild the demand for this network"
            )
        theirs = net.dim_names
        if self.dim_names and theirs != placeholder_dim_names(net.num_dims) and self.dim_names != theirs:
            order = " (the same names in another order)" if sorted(self.dim_names) == sorted(theirs) else ""
            raise LibraError(
                f"{source}: \"dim_names\" {list(self.dim_names)} differ from the dimensions {list(theirs)} of "
                f"network {net.name!r}{order}; rebuild the demand for this network, or, if only the names changed, "
                "edit \"dim_names\" to match"
            )


def default_hops(kind: str, participants: Sequence[int], net: Network | None,
                 strides: Sequence[int] | None = None) -> tuple[int, ...]:
    """Hop latencies a hierarchical collective pays in sequence per dimension (ring neighbours).

    ``strides[d]`` is the distance between consecutive members in a Ring dimension d (a group
    that takes every s-th NPU of a ring): the emitted logical network charges such a piece
    ``s`` hops per ring step (astra/logical.py), so the model does too. Default 1.
    """
    out = []
    for d, p in enumerate(participants):
        steps = coll.ring_steps(kind, int(p))
        hop = net.dims[d].step_hops if net is not None else 1
        if strides is not None and net is not None and net.dims[d].topology == "Ring" and int(p) > 1:
            hop *= max(1, int(strides[d]))
        out.append(steps * hop)
    return tuple(out)


def make_collective(kind: str, size_bytes: float, participants: Sequence[int], *, count: float = 1.0,
                    name: str = "", phase: str = "", group: str = "", net: Network | None = None,
                    strides: Sequence[int] | None = None) -> Collective:
    """A hierarchical collective with its traffic derived from the table in model/collectives.py.
    ``strides``: per dimension, the distance between consecutive members (see default_hops)."""
    coll.check_type(kind)
    parts = tuple(int(p) for p in participants)
    traffic = coll.hierarchical_traffic_bytes(kind, size_bytes, parts)
    return Collective(kind, float(size_bytes), parts, traffic, default_hops(kind, parts, net, strides),
                      float(count), name, phase, group, "hierarchical")


def single_class(name: str, npus_per_dim: Sequence[int], compute_time_ns: float,
                 collectives: Sequence[Collective], dim_names: Sequence[str] = ()) -> Demand:
    return Demand(name, tuple(npus_per_dim), (RankClass(float(compute_time_ns), tuple(collectives)),),
                  dim_names=tuple(dim_names))


# ---------------------------------------------------------------- JSON


# Far above any real job (a zettabyte, ten million years) and far below float overflow: products
# of such numbers (count x size x ranks, summed over collectives) must stay finite.
MAX_VALUE = 1e21
# Far above any real collective's link hops per dimension, and inside numpy's 64-bit integers.
MAX_HOPS = 10 ** 9


def _num(v: Any, where: str, what: str, minimum: float = 0.0) -> float:
    return check_number(v, where, what, minimum=minimum, maximum=MAX_VALUE, finite=True)


def _collective_from_dict(raw: Any, where: str, shape: tuple[int, ...]) -> Collective:
    if not isinstance(raw, Mapping):
        raise LibraError(f"{where}: expected an object, got {raw!r}")
    kind = raw.get("type")
    coll.check_type(kind, where)
    size = _num(raw.get("size_bytes"), where, "size_bytes")
    parts = raw.get("participants")
    if (not isinstance(parts, list) or len(parts) != len(shape)
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts)):
        raise LibraError(f"{where}: participants must be a list of {len(shape)} integers (one per dimension), got {parts!r}")
    for d, (p, n) in enumerate(zip(parts, shape)):
        if not 1 <= p <= n:
            raise LibraError(f"{where}: participants[{d}] = {p} is outside 1..{n} (the dimension has {n} NPUs)")
    algorithm = raw.get("algorithm", "hierarchical")
    if algorithm not in ALGORITHMS:
        raise LibraError(f"{where}: algorithm must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    count = _num(raw.get("count", 1), where, "count")
    if count * size > MAX_VALUE:
        raise LibraError(f"{where}: count x size_bytes = {count * size:.3g} bytes is beyond {MAX_VALUE:g}; "
                         "fix the count or the size")
    traffic = raw.get("traffic_bytes")
    if traffic is None:
        if algorithm != "hierarchical":
            raise LibraError(f"{where}: a {algorithm} collective needs traffic_bytes (per-dimension bytes per NPU)")
        traffic_t = coll.hierarchical_traffic_bytes(kind, size, parts)
    else:
        if not isinstance(traffic, list) or len(traffic) != len(shape):
            raise LibraError(f"{where}: traffic_bytes must be a list of {len(shape)} numbers, got {traffic!r}")
        traffic_t = tuple(_num(t, where, f"traffic_bytes[{d}]") for d, t in enumerate(traffic))
    hops = raw.get("hops")
    if hops is None:
        hops_t = default_hops(kind, parts, None)
    else:
        if not isinstance(hops, list) or len(hops) != len(shape) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hops):
            raise LibraError(f"{where}: hops must be a list of {len(shape)} non-negative integers, got {hops!r}")
        for d, h in enumerate(hops):
            if h > MAX_HOPS:
                raise LibraError(f"{where}: hops[{d}] = {h} is beyond {MAX_HOPS:,}; fix the hops")
        hops_t = tuple(hops)
    return Collective(kind, size, tuple(parts), traffic_t, hops_t, count, str(raw.get("name", "")),
                      str(raw.get("phase", "")), str(raw.get("group", "")), algorithm)


def _dag_from_dict(raw: Any, where: str, num_coll: int) -> Dag:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("nodes"), list) or not isinstance(raw.get("deps", []), list):
        raise LibraError(f"{where}: dag must be an object with lists 'nodes' and 'deps'")
    nodes = []
    for i, n in enumerate(raw["nodes"]):
        if not (isinstance(n, list) and len(n) == 2 and n[0] in DAG_KINDS):
            raise LibraError(f"{where}: dag.nodes[{i}] must be [\"comp\"|\"cpu\"|\"free\", time_ns] or "
                             f"[\"coll\", index], got {n!r}")
        if n[0] == "coll" and not (isinstance(n[1], int) and 0 <= n[1] < num_coll):
            raise LibraError(f"{where}: dag.nodes[{i}] names collective {n[1]!r}, but there are {num_coll}")
        nodes.append(("coll", n[1]) if n[0] == "coll" else (n[0], _num(n[1], where, f"dag.nodes[{i}] value")))
    deps = []
    for e in raw.get("deps", []):
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) for x in e)
                and 0 <= e[0] < e[1] < len(nodes)):
            raise LibraError(f"{where}: dag edge {e!r} must be [u, v] with 0 <= u < v < {len(nodes)} (topological order)")
        deps.append((e[0], e[1]))
    waits = {}
    for field_name in ("links", "syncs"):
        out = []
        for e in raw.get(field_name, []):
            if not (isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                and x >= 0 for x in e) and e[0] < len(nodes)):
                raise LibraError(f"{where}: dag {field_name[:-1]} {e!r} must be [node, class, node] with "
                                 f"node < {len(nodes)}")
            out.append((e[0], e[1], e[2]))
        waits[field_name] = tuple(out)
    senders = raw.get("senders", [])
    if not (isinstance(senders, list) and (not senders or len(senders) == len(waits["links"]))
            and all(isinstance(e, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in e)
                    for e in senders)):
        raise LibraError(f"{where}: dag senders must be one list of ranks per link ({len(waits['links'])}); fix or "
                         "remove it")
    return Dag(tuple(nodes), tuple(deps), waits["links"], waits["syncs"], tuple(map(tuple, senders)))


def _class_from_dict(raw: Mapping, where: str, shape: tuple[int, ...]) -> RankClass:
    compute = _num(raw.get("compute_time_ns", 0.0), where, "compute_time_ns")
    colls_raw = raw.get("collectives", [])
    if not isinstance(colls_raw, list):
        raise LibraError(f"{where}: collectives must be a list")
    colls = tuple(_collective_from_dict(c, f"{where}: collectives[{i}]", shape) for i, c in enumerate(colls_raw))
    ranks = raw.get("ranks", [])
    if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
        raise LibraError(f"{where}: ranks must be a list of integers")
    num = raw.get("num_ranks", len(ranks) or 1)
    if not isinstance(num, int) or num < 1:
        raise LibraError(f"{where}: num_ranks must be a positive integer, got {num!r}")
    dag = _dag_from_dict(raw["dag"], where, len(colls)) if raw.get("dag") is not None else None
    npus = 1
    for n in shape:
        npus *= n
    if dag is not None and any(len(e) != len(ranks) or max(e, default=0) >= npus for e in dag.senders):
        raise LibraError(f"{where}: dag senders must list one rank below {npus} per rank of the class "
                         f"({len(ranks)}); fix or remove it")
    return RankClass(compute, colls, num, tuple(ranks), dag)


def _check_waits(classes: tuple[RankClass, ...], source: str, listed: bool) -> None:
    """Every link and sync names a node of a class that exists (the replay would pass over one
    that does not, and time the job without that wait), and a sync pairs two collectives.
    ``listed``: the classes are the file's rank_classes (else its one class is the file itself)."""
    # a class without a DAG is its one node in the replay's joint graph
    sizes = [len(rc.dag.nodes) if rc.dag is not None else 1 for rc in classes]
    for i, rc in enumerate(classes):
        if rc.dag is None:
            continue
        where = f"{source}: rank_classes[{i}]" if listed else source
        for kind, waits in (("link", rc.dag.links), ("sync", rc.dag.syncs)):
            for v, c, u in waits:
                if c >= len(classes) or u >= sizes[c]:
                    n = len(classes)
                    target = (f"class {c}, but there {'is 1 class' if n == 1 else f'are {n} classes'}" if c >= n
                              else f"node {u} of class {c}, which has {sizes[c]} nodes")
                    raise LibraError(f"{where}: dag {kind} {[v, c, u]} names {target}; fix or remove it")
                if kind == "sync":
                    theirs = classes[c].dag.nodes[u][0] if classes[c].dag is not None else "class"
                    for side, node_kind in (("sits on", rc.dag.nodes[v][0]), ("names", theirs)):
                        if node_kind != "coll":
                            raise LibraError(f"{where}: dag sync {[v, c, u]} {side} a {node_kind!r} node; "
                                             "a sync pairs collectives, fix or remove it")


def demand_from_dict(data: Any, source: str = "<demand>") -> Demand:
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise LibraError(f"{source}: not a demand file (\"format\" must be {FORMAT!r}); make one with 'libra-astra demand'")
    if data.get("version") != VERSION:
        raise LibraError(f"{source}: demand version {data.get('version')!r} is not supported; this libra_astra reads version {VERSION}")
    shape = data.get("npus_per_dim")
    if not isinstance(shape, list) or not shape or not all(isinstance(n, int) and n >= 1 for n in shape):
        raise LibraError(f"{source}: npus_per_dim must be a non-empty list of positive integers, got {shape!r}")
    shape_t = tuple(shape)
    names = data.get("dim_names", [])
    if (not isinstance(names, list) or (names and len(names) != len(shape_t))
            or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names)):
        raise LibraError(f"{source}: dim_names must be a list of {len(shape_t)} distinct non-empty names (one per "
                         f"dimension, as in npus_per_dim), got {names!r}; fix it or remove the key")
    if "rank_classes" in data:
        if not isinstance(data["rank_classes"], list) or not data["rank_classes"]:
            raise LibraError(f"{source}: rank_classes must be a non-empty list")
        classes = tuple(_class_from_dict(c, f"{source}: rank_classes[{i}]", shape_t)
                        for i, c in enumerate(data["rank_classes"]))
    else:
        classes = (_class_from_dict(data, source, shape_t),)
    _check_waits(classes, source, "rank_classes" in data)
    notes = data.get("notes", [])
    return Demand(str(data.get("name", Path(source).stem)), shape_t, classes, tuple(str(n) for n in notes),
                  tuple(names))


def collective_to_dict(c: Collective) -> dict[str, Any]:
    out: dict[str, Any] = {"type": c.type, "size_bytes": c.size_bytes, "participants": list(c.participants),
                           "count": c.count}
    for key in ("name", "phase", "group"):
        if getattr(c, key):
            out[key] = getattr(c, key)
    out["algorithm"] = c.algorithm
    out["traffic_bytes"] = list(c.traffic_bytes)
    out["hops"] = list(c.hops)
    return out


def demand_to_dict(d: Demand) -> dict[str, Any]:
    classes = []
    for rc in d.rank_classes:
        item: dict[str, Any] = {"num_ranks": rc.num_ranks}
        if rc.ranks:
            item["ranks"] = list(rc.ranks)
        item["compute_time_ns"] = rc.compute_time_ns
        item["collectives"] = [collective_to_dict(c) for c in rc.collectives]
        if rc.dag is not None:
            item["dag"] = {"nodes": [[k, v if k == "comp" else int(v)] for k, v in rc.dag.nodes],
                           "deps": [list(e) for e in rc.dag.deps]}
            if rc.dag.links:
                item["dag"]["links"] = [list(e) for e in rc.dag.links]
            if rc.dag.syncs:
                item["dag"]["syncs"] = [list(e) for e in rc.dag.syncs]
            if rc.dag.senders:
                item["dag"]["senders"] = [list(e) for e in rc.dag.senders]
        classes.append(item)
    out: dict[str, Any] = {"format": FORMAT, "version": VERSION, "name": d.name, "npus_per_dim": list(d.npus_per_dim)}
    if d.dim_names:
        out["dim_names"] = list(d.dim_names)
    if d.notes:
        out["notes"] = list(d.notes)
    out["rank_classes"] = classes
    return out


def load_demand(path: str | Path) -> Demand:
    return demand_from_dict(read_json(path, "demand"), str(path))


def scaled(d: Demand, factor: float) -> Demand:
    """The same demand with every size and traffic multiplied by ``factor`` (compute unchanged)."""
    classes = tuple(replace(rc, collectives=tuple(
        replace(c, size_bytes=c.size_bytes * factor, traffic_bytes=tuple(t * factor for t in c.traffic_bytes))
        for c in rc.collectives)) for rc in d.rank_classes)
    return replace(d, rank_classes=classes)
