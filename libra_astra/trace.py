"""Read Chakra execution traces (one ``PREFIX.RANK.et`` file per rank) into compact programs.

A rank file is a stream of varint32-length-prefixed protobuf messages (mlc-chakra's
``et_def.proto``): one ``GlobalMetadata``, then one ``Node`` per message; plain or gzipped.

Why the reader does not call ``Node.ParseFromString`` per node and read its fields: with the upb
backend the parse itself is cheap (~0.4 us per node), but every repeated field or attribute
touched from Python costs 150-300 ns, which makes such a reader 3-4x slower than a bare parse.
Instead:

- one Python loop finds where each message starts (the length prefixes chain);
- the top-level fields of all messages (id, type, duration, dependencies) are read in lockstep
  with numpy, in the schema's field order, with tags taken from the schema's descriptors;
- the attribute block of each node is looked up by its bytes, and decoded with the schema's own
  ``AttributeProto`` class only the first time a block (or a single attribute) is seen: every
  all-reduce of one size on one group carries the same bytes;
- anything unusual (METADATA nodes, repeated, unknown or out-of-order fields) falls back to a
  full ``Node`` parse of that message, so the fast path never changes the result.

The output is one :class:`RankProgram` per distinct file: numpy arrays indexed by node position
(file order), not a Python object per node. Attribute values live in a table shared by all files
of a read (:class:`AttrTable`), so programs of different ranks can be compared array by array.
"""

from __future__ import annotations

import ast
import hashlib
import heapq
import json
import re
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from . import limits
from .errors import LibraError

try:  # mlc-chakra is installed with --no-deps; give a usable message if it is missing
    from chakra.schema.protobuf import et_def_pb2 as pb
except ImportError as _e:  # pragma: no cover - depends on the environment
    pb = None
    _IMPORT_ERROR = _e
else:
    _IMPORT_ERROR = None

# Node types (et_def.proto NodeType).
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE = 0, 1, 2, 3
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
NODE_TYPE_NAMES = ("INVALID", "METADATA", "MEM_LOAD", "MEM_STORE", "COMP", "COMM_SEND", "COMM_RECV", "COMM_COLL")

# Collective types (et_def.proto CollectiveCommType) that ASTRA-sim simulates, by our names.
COMM_TYPE_NAMES = {0: "ALL_REDUCE", 2: "ALL_GATHER", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER"}
SUPPORTED_COMM_TYPES = tuple(COMM_TYPE_NAMES.values())

_TRACE_RE = r"^{}\.(\d+)\.et(\.gz)?$"


def _need_chakra() -> None:
    if pb is None:
        raise LibraError(
            f"cannot import mlc-chakra ({_IMPORT_ERROR}); install it with "
            "'pip install --no-deps mlc-chakra \"protobuf>=6.31.1\"'"
        )


def comm_type_name(value: int) -> str:
    """Schema name of a CollectiveCommType value (``"REDUCE"``, ``"BARRIER"``, ...)."""
    try:
        return pb.CollectiveCommType.Name(int(value))
    except (ValueError, AttributeError):
        return f"comm_type {value}"


# ---------------------------------------------------------------- files


def find_rank_files(prefix: str | Path) -> dict[int, Path]:
    """Rank -> file for every ``PREFIX.RANK.et`` or ``PREFIX.RANK.et.gz`` next to ``prefix``."""
    p = Path(prefix)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return {}
    pattern = re.compile(_TRACE_RE.format(re.escape(p.name)))
    found: dict[int, Path] = {}
    for entry in parent.iterdir():
        m = pattern.match(entry.name)
        if m is None:
            continue
        rank = int(m.group(1))
        # a plain file wins over a gzipped one of the same rank (ASTRA-sim opens PREFIX.RANK.et)
        if rank not in found or not m.group(2):
            found[rank] = entry
    return found


def is_trace_prefix(path: str | Path) -> bool:
    """True if ``PATH.0.et`` or ``PATH.0.et.gz`` exists, i.e. ``path`` names a trace set."""
    p = Path(path)
    return Path(f"{p}.0.et").is_file() or Path(f"{p}.0.et.gz").is_file()


def rank_files(prefix: str | Path, num_ranks: int, network_name: str = "network") -> list[Path]:
    """The ``num_ranks`` rank files of a trace set, in rank order; LibraError if any is missing."""
    if num_ranks > limits.value(limits.MAX_RANKS):
        raise limits.exceeded(limits.MAX_RANKS, str(prefix), f"{network_name} has {num_ranks:,} NPUs")
    found = find_rank_files(prefix)
    if not found:
        raise LibraError(
            f"{prefix}: no trace files {prefix}.0.et .. {prefix}.{num_ranks - 1}.et (or .et.gz); "
            "give the prefix without the '.RANK.et' suffix"
        )
    top = max(found) + 1
    contiguous = len(found) == top
    if top > num_ranks or (contiguous and top != num_ranks):
        raise LibraError(
            f"{prefix}: found {len(found)} rank files (ranks up to {top - 1}) but {network_name} has "
            f"{num_ranks} NPUs; use a network with {top} NPUs or traces for {num_ranks} ranks"
        )
    n_missing = num_ranks - len(found)
    if n_missing:
        # never list every rank: a network can have 2^64 of them
        first = [r for r in range(min(num_ranks, top + 3)) if r not in found][:3]
        shown = ", ".join(f"{prefix}.{r}.et" for r in first) + (" ..." if n_missing > 3 else "")
        raise LibraError(
            f"{prefix}: {n_missing} rank file(s) missing: {shown}; every rank 0..{num_ranks - 1} needs a file"
        )
    return [found[r] for r in range(num_ranks)]


def read_file_bytes(path: str | Path) -> bytes:
    """Whole file contents, gunzipped if it is gzip (by magic number, not by name)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise LibraError(f"{p}: trace file not found") from None
    except OSError as e:
        raise LibraError(f"{p}: cannot read trace file: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return _gunzip(raw, limits.value(limits.MAX_DECOMPRESSED_BYTES), str(p))
        except (EOFError, OSError, zlib.error) as e:
            raise LibraError(f"{p}: truncated or corrupt gzip data ({e}); re-create or re-copy the file") from None
    return raw


def _gunzip(raw: bytes, cap: int, where: str) -> bytes:
    """Gunzip every member of ``raw``, refusing output beyond ``cap`` bytes before it is held."""
    out = bytearray()
    data = raw
    while True:
        d = zlib.decompressobj(31)
        while True:
            chunk = d.decompress(data, cap + 1 - len(out))
            out += chunk
            if len(out) > cap:
                raise limits.exceeded(limits.MAX_DECOMPRESSED_BYTES, where,
                                      f"gzip data inflates to more than {cap:,} bytes")
            data = d.unconsumed_tail
            if d.eof or (not data and not chunk):
                break
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        data = d.unused_data
        if not data.strip(b"\x00"):
            return bytes(out)


# ---------------------------------------------------------------- attributes


class NodeAttrs(NamedTuple):
    """The attributes of one node that matter for demand (absent = -1 / None)."""

    is_cpu_op: bool = False
    num_ops: int = -1
    tensor_size: int = -1
    comm_type: int = -1
    comm_size: int = -1
    involved_dim: tuple[bool, ...] | None = None
    pg_name: str | None = None
    comm_src: int = -1
    comm_dst: int = -1


_EMPTY_ATTRS = NodeAttrs()
_WANTED = frozenset(NodeAttrs._fields)
_WANTED_BYTES = frozenset(f.encode() for f in NodeAttrs._fields)
_INT64_MAX = (1 << 63) - 1
_INT_FIELDS = ("num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst")
# Bound on the per-read cache of distinct attribute blocks: PyTorch traces carry per-node
# attributes (rf_id, seq_id) that never repeat, and caching those would only cost memory.
_BLOCK_CACHE_LIMIT = 1 << 18
# Files are decoded together until this many bytes: enough to amortize the array walk's fixed cost
_BATCH_BYTES = 8 << 20


class AttrTable:
    """Distinct :class:`NodeAttrs` of a read, shared by all rank files, plus column arrays."""

    def __init__(self) -> None:
        self.rows: list[NodeAttrs] = [_EMPTY_ATTRS]
        self._index: dict[NodeAttrs, int] = {_EMPTY_ATTRS: 0}
        self.blocks: dict[bytes, int] = {}     # serialized attribute block -> row
        self.single: dict[bytes, tuple] = {}   # serialized attribute -> (field, value) or ()
        self._columns: dict[str, np.ndarray] | None = None
        self.pg_names: list[str | None] = [None]
        self._pg_index: dict[str | None, int] = {None: 0}
        self.involved: list[tuple[bool, ...] | None] = [None]
        self._inv_index: dict[tuple[bool, ...] | None, int] = {None: 0}

    def intern(self, attrs: NodeAttrs) -> int:
        i = self._index.get(attrs)
        if i is None:
            i = len(self.rows)
            self.rows.append(attrs)
            self._index[attrs] = i
            self._columns = None
        return i

    def columns(self) -> dict[str, np.ndarray]:
        """Column arrays indexed by attribute row (pg_name and involved_dim as small ints)."""
        if self._columns is None or len(self._columns["comm_type"]) != len(self.rows):
            cols: dict[str, Any] = {f: [] for f in _INT_FIELDS}
            cpu, pg, inv = [], [], []
            for r in self.rows:
                for f in _INT_FIELDS:
                    cols[f].append(getattr(r, f))
                cpu.append(r.is_cpu_op)
                j = self._pg_index.get(r.pg_name)
                if j is None:
                    j = self._pg_index[r.pg_name] = len(self.pg_names)
                    self.pg_names.append(r.pg_name)
                pg.append(j)
                k = self._inv_index.get(r.involved_dim)
                if k is None:
                    k = self._inv_index[r.involved_dim] = len(self.involved)
                    self.involved.append(r.involved_dim)
                inv.append(k)
            out = {f: np.asarray(v, dtype=np.int64) for f, v in cols.items()}
            out["is_cpu_op"] = np.asarray(cpu, dtype=bool)
            out["pg"] = np.asarray(pg, dtype=np.int32)
            out["involved"] = np.asarray(inv, dtype=np.int32)
            self._columns = out
        return self._columns


def _attr_value(a: Any) -> Any:
    kind = a.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(a, kind)
    if kind.endswith("_list"):
        return tuple(v.values)
    return v


def _normalize(name: str, v: Any, where: str | Callable[[], str]) -> Any:
    """Checked value of one wanted attribute (None: leave the field at its default).

    ``where`` (or a function giving it, called only on error) names the node in messages.
    """
    if v is None:
        return None
    if name in _INT_FIELDS:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute {name} must be an integer, got {v!r}; fix the trace generator")
        if not 0 <= v <= _INT64_MAX:
            # -1 means "absent" inside the reader: a negative size or type must not read as missing
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute {name} = {int(v)} is outside 0..2^63-1; fix the trace generator")
        return int(v)
    if name == "is_cpu_op":
        return bool(v)
    if name == "involved_dim":
        if not isinstance(v, tuple) or not all(isinstance(b, bool) for b in v):
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute involved_dim must be a bool_list, got {v!r}; fix the trace generator")
        return v
    # pg_name: ASTRA-sim needs a string; an integer-typed pg_name still names a group unambiguously
    return v if isinstance(v, str) else str(v)


def _attrs_from_protos(attrs: Any, where: str) -> NodeAttrs:
    """NodeAttrs from parsed AttributeProto messages (the schema's classes)."""
    vals: dict[str, Any] = {}
    for a in attrs:
        name = a.name
        if name in _WANTED:
            v = _normalize(name, _attr_value(a), where)
            if v is not None:
                vals[name] = v
    return NodeAttrs(**vals) if vals else _EMPTY_ATTRS


# ---------------------------------------------------------------- program


@dataclass(frozen=True, eq=False)
class RankProgram:
    """Compact form of one rank file. Arrays are indexed by node position (file order).

    ``attr`` indexes the :class:`AttrTable` of the read; ``dep_ptr``/``dep_index`` are the
    dependencies (data and control) as CSR, with node positions instead of ids.
    """

    path: str
    node_ids: np.ndarray        # uint64
    types: np.ndarray           # int8, NodeType
    duration_micros: np.ndarray  # uint64
    attr: np.ndarray            # int32 row of the AttrTable
    dep_ptr: np.ndarray         # int64, len n + 1
    dep_index: np.ndarray       # int64 node positions
    pg_info: tuple[tuple[str, tuple[int, ...]], ...] = ()  # METADATA process groups; () ranks = all
    digest: bytes = b""        # identifies the compact program (equal digest = same program)
    version: str = ""

    @property
    def num_nodes(self) -> int:
        return int(self.types.shape[0])

    def type_counts(self) -> np.ndarray:
        return np.bincount(self.types.astype(np.int64), minlength=8)


def _varint_more(buf: bytes, pos: int, first: int) -> tuple[int, int]:
    """Finish a varint whose first byte (``first`` >= 0x80) was at pos - 1."""
    result = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _field_tag(name: str, wire: int) -> int:
    return (pb.Node.DESCRIPTOR.fields_by_name[name].number << 3) | wire


class _Tags:
    """Wire tags of the Node fields read on the fast path (from the schema's descriptor)."""

    def __init__(self) -> None:
        self.id = _field_tag("id", 0)
        self.type = _field_tag("type", 0)
        self.duration = _field_tag("duration_micros", 0)
        self.ctrl = _field_tag("ctrl_deps", 0)
        self.ctrl_packed = _field_tag("ctrl_deps", 2)
        self.data = _field_tag("data_deps", 0)
        self.data_packed = _field_tag("data_deps", 2)
        self.attr = _field_tag("attr", 2)
        # top-level fields in field-number order, with how to read them
        self.steps = (
            (self.id, "id"), (_field_tag("name", 2), "len"), (self.type, "type"),
            (self.ctrl_packed, "deps"), (self.data_packed, "deps"), (_field_tag("start_time_micros", 0), "skip"),
            (self.duration, "duration"), (_field_tag("inputs", 2), "len"), (_field_tag("outputs", 2), "len"),
        )
        assert max(tag for tag, _ in self.steps) < 0x80 and self.attr < 0x80, "the walk assumes one-byte tags"


_TAGS: _Tags | None = None


def parse_pg_metadata(values: str, where: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Process groups from a PyTorch ``## process_group:init ##`` METADATA node.

    PyTorch records ``json.dumps(pg_config_info)`` as the node's only input; Chakra's PyTorch
    converter stores ``str(inputs["values"])``, i.e. a Python list literal holding that JSON
    string. Each group is ``{"pg_name": "3", "ranks": [...], ...}``; ``ranks`` is empty when the
    group has every rank, and older PyTorch wrote ``pg_id`` and a {global: local} ``ranks`` map.
    Returns ``(pg_name, ranks)`` pairs, ranks ``()`` meaning all ranks.
    """
    def decode(text: str) -> Any:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None

    groups: list[tuple[str, tuple[int, ...]]] = []

    def walk(obj: Any, depth: int = 0) -> None:
        if depth > 8:
            return
        if isinstance(obj, str):
            inner = decode(obj)
            if inner is not None and not isinstance(inner, str):
                walk(inner, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x, depth + 1)
        elif isinstance(obj, dict) and ("pg_name" in obj or "pg_id" in obj) and "ranks" in obj:
            name = obj.get("pg_name", obj.get("pg_id"))
            ranks = obj["ranks"]
            if isinstance(ranks, dict):
                ranks = list(ranks.keys())
            try:
                members = tuple(sorted(int(r) for r in ranks))
            except (TypeError, ValueError):
                raise LibraError(
                    f"{where}: process group {name!r} has non-integer ranks {ranks!r}; fix the trace"
                ) from None
            groups.append((str(name), members))

    if values.strip():
        top = decode(values)
        if top is None:
            raise LibraError(
                f"{where}: cannot read process-group info from inputs.values (not JSON or a Python literal); "
                "fix the trace or give the groups with --comm-groups"
            )
        walk(top)
    return tuple(groups)


def _metadata_groups(node: Any, where: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Process groups of a METADATA node; other metadata (no group info) gives ()."""
    values = node.inputs.values
    if "process_group:init" in node.name:
        return parse_pg_metadata(values, where)
    # ASTRA-sim reads any METADATA node as process-group info; accept it when it parses
    try:
        return parse_pg_metadata(values, where)
    except LibraError:
        return ()


def _generic_node(frame: bytes, where: str) -> tuple[int, int, int, list[int], NodeAttrs, Any]:
    """Full schema parse of one Node message (the slow path)."""
    try:
        node = pb.Node.FromString(frame)
    except Exception:  # protobuf raises DecodeError (and friends) on bad bytes
        return None  # type: ignore[return-value]
    deps = list(node.data_deps) + list(node.ctrl_deps)
    attrs = _attrs_from_protos(node.attr, f"{where} node {node.id}")
    return node.id, node.type, node.duration_micros, deps, attrs, node


class TraceReader:
    """Reads rank files into :class:`RankProgram` s sharing one :class:`AttrTable`.

    Identical files (same bytes after gunzip) are decoded once.
    """

    def __init__(self) -> None:
        _need_chakra()
        global _TAGS
        if _TAGS is None:
            _TAGS = _Tags()
        self.attrs = AttrTable()
        self._by_bytes: dict[bytes, RankProgram] = {}
        self.files_decoded = 0

    def read(self, path: str | Path) -> RankProgram:
        return self.read_many([path])[0]

    def read_many(self, paths: Sequence[str | Path], expect: Mapping[str, str] | None = None) -> list[RankProgram]:
        """Programs of ``paths`` in order. Files with identical bytes are decoded once, and small
        files are decoded in batches: the per-call overhead of the array walk is paid per batch.

        ``expect`` maps a path to the hex blake2b-160 digest its content must have (the trace
        set's completion marker)."""
        out: list[RankProgram | bytes] = []
        batch: dict[bytes, tuple[bytes, str]] = {}
        size = 0
        for p in paths:
            data = read_file_bytes(p)
            key = hashlib.blake2b(data, digest_size=20).digest()
            if expect is not None and expect.get(str(p), key.hex()) != key.hex():
                raise LibraError(f"{p}: content differs from the digest in the trace set's completion marker (the "
                                 "file was changed after the set was written); write the set again, or delete the "
                                 "marker PREFIX.set.json if the files are right")
            out.append(key)
            if key not in self._by_bytes and key not in batch:
                batch[key] = (data, str(p))
                size += len(data)
                if size >= _BATCH_BYTES:
                    self._decode_batch(batch)
                    batch, size = {}, 0
        if batch:
            self._decode_batch(batch)
        return [self._by_bytes[k] for k in out]

    def _decode_batch(self, batch: dict[bytes, tuple[bytes, str]]) -> None:
        keys = list(batch)
        progs = self.parse_many([batch[k][0] for k in keys], [batch[k][1] for k in keys])
        for k, prog in zip(keys, progs):
            self._by_bytes[k] = prog
        self.files_decoded += len(keys)

    def parse(self, buf: bytes, where: str) -> RankProgram:
        """Decode one rank file's bytes (already gunzipped); ``where`` names it in errors."""
        return self.parse_many([buf], [where])[0]

    def parse_many(self, bufs: Sequence[bytes], wheres: Sequence[str]) -> list[RankProgram]:
        """Decode several rank files at once (their messages are walked together)."""
        versions, starts_l, ends_l, heads_l = [], [], [], []
        base = 0
        for buf, where in zip(bufs, wheres):
            if len(buf) == 0:
                raise LibraError(f"{where}: empty file; a trace file starts with a GlobalMetadata message")
            version, pos = self._global_metadata(buf, where)
            s, e, h = _frames(buf, pos, where)
            versions.append(version)
            starts_l.append(s + base)
            ends_l.append(e + base)
            heads_l.append(h)
            base += len(buf)
        buf = bufs[0] if len(bufs) == 1 else b"".join(bufs)
        starts, ends = np.concatenate(starts_l), np.concatenate(ends_l)
        counts = np.asarray([x.size for x in starts_l], dtype=np.int64)
        first = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        n = starts.size
        arr = np.frombuffer(buf, dtype=np.uint8)
        w = _walk(arr, starts, ends, _TAGS)
        slow = w.slow | (w.types == METADATA_NODE)

        def where_of(i: int) -> tuple[int, str]:
            f = int(np.searchsorted(first, i, side="right")) - 1
            return f, wheres[f]

        # attribute blocks: one dict lookup per node, schema decode once per distinct block
        aid = np.zeros(n, dtype=np.int64)
        idx = np.nonzero(w.has_attr & ~slow)[0]
        if idx.size:
            blocks = self.attrs.blocks
            bget = blocks.get
            bs, be = w.attr_start[idx].tolist(), ends[idx].tolist()
            got = np.asarray([bget(buf[s:e], -1) for s, e in zip(bs, be)], dtype=np.int64)
            for j in np.nonzero(got < 0)[0].tolist():  # first sight of a block: decode it
                blk = buf[bs[j]:be[j]]
                a = bget(blk)
                if a is None:
                    i = int(idx[j])
                    a = self._block(blk, lambda i=i: f"{where_of(i)[1]}: node {int(w.ids[i])}")
                    if a >= 0 and len(blocks) < _BLOCK_CACHE_LIMIT:
                        blocks[blk] = a
                got[j] = a
            aid[idx] = got
            slow[idx[got < 0]] = True

        dep_frame, dep_vals = w.dep_frame, w.dep_vals
        pg_info: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in bufs]
        slow_idx = np.nonzero(slow)[0]
        if slow_idx.size:
            keep = ~slow[dep_frame]
            frames_l, vals_l = [dep_frame[keep]], [dep_vals[keep]]
            for i in slow_idx.tolist():
                f, where = where_of(i)
                got = _generic_node(buf[int(starts[i]):int(ends[i])], where)
                if got is None:
                    raise LibraError(
                        f"{where}: corrupt node message at byte offset {int(heads_l[f][i - first[f]])} "
                        "(protobuf cannot decode it); the file is damaged or not a Chakra ET file"
                    )
                nid, typ, dur, extra, attrs, node = got
                w.ids[i], w.types[i], w.durs[i] = nid, typ, dur
                aid[i] = self.attrs.intern(attrs)
                if extra:
                    frames_l.append(np.full(len(extra), i, dtype=np.int64))
                    vals_l.append(np.asarray(extra, dtype=np.uint64))
                if typ == METADATA_NODE:
                    pg_info[f].extend(_metadata_groups(node, f"{where}: node {nid} (METADATA)"))
            dep_frame = np.concatenate(frames_l)
            dep_vals = np.concatenate(vals_l)
        if dep_frame.size > 1 and not bool(np.all(dep_frame[1:] >= dep_frame[:-1])):
            order = np.argsort(dep_frame, kind="stable")
            dep_frame, dep_vals = dep_frame[order], dep_vals[order]
        dep_count = np.bincount(dep_frame, minlength=n)
        dep_first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(dep_count, out=dep_first[1:])
        progs = []
        for f, where in enumerate(wheres):
            lo, hi = int(first[f]), int(first[f + 1])
            d_lo = int(dep_first[lo])
            dep_ptr = dep_first[lo:hi + 1] - d_lo
            progs.append(self._finish(where, versions[f], w.ids[lo:hi], w.durs[lo:hi], w.types[lo:hi], aid[lo:hi],
                                      dep_vals[d_lo:int(dep_first[hi])], dep_ptr, tuple(pg_info[f])))
        return progs

    def _global_metadata(self, buf: bytes, where: str) -> tuple[str, int]:
        try:
            size = buf[0]
            pos = 1
            if size >= 0x80:
                size, pos = _varint_more(buf, pos, size)
        except (IndexError, ValueError):
            raise LibraError(f"{where}: truncated at byte offset 0 (no complete GlobalMetadata message)") from None
        if pos + size > len(buf):
            raise LibraError(
                f"{where}: truncated: the GlobalMetadata message at byte offset 0 needs {size} bytes but only "
                f"{len(buf) - pos} remain; re-create or re-copy the file"
            )
        try:
            meta = pb.GlobalMetadata.FromString(buf[pos:pos + size])
        except Exception:
            raise LibraError(
                f"{where}: corrupt GlobalMetadata message at byte offset 0; not a Chakra ET file"
            ) from None
        return meta.version, pos + size

    def _block(self, blk: bytes, where: Callable[[], str]) -> int:
        """Decode an attribute block (consecutive ``attr`` fields) with the schema; -1 if not one.

        Blocks of different nodes often differ in one attribute only (pg_name, comm_dst), so
        single attributes are cached too.
        """
        vals: dict[str, Any] = {}
        pos = 0
        n = len(blk)
        t_attr = _TAGS.attr
        cache = self.attrs.single
        while pos < n:
            if blk[pos] != t_attr or pos + 1 >= n:   # a bare tag at the end: let the schema judge it
                return -1
            ln = blk[pos + 1]
            pos += 2
            if ln >= 0x80:
                try:
                    ln, pos = _varint_more(blk, pos, ln)
                except (IndexError, ValueError):
                    return -1
            end = pos + ln
            if end > n:
                return -1
            ab = blk[pos:end]
            hit = cache.get(ab)
            if hit is None:
                hit = self._single(ab, where)
                if hit is None:
                    return -1
                if len(cache) < _BLOCK_CACHE_LIMIT:
                    cache[ab] = hit
            if hit:
                vals[hit[0]] = hit[1]
            pos = end
        return self.attrs.intern(NodeAttrs(**vals)) if vals else 0

    @staticmethod
    def _single(ab: bytes, where: str | Callable[[], str]) -> tuple | None:
        """(field, value) of one serialized AttributeProto; () if not wanted; None if undecodable."""
        # the name is field 1, written first: skip attributes we do not need without parsing them
        if len(ab) >= 2 and ab[0] == 0x0A and ab[1] < 0x80 and ab[2:2 + ab[1]] not in _WANTED_BYTES:
            return ()
        try:
            a = pb.AttributeProto.FromString(ab)
        except Exception:
            return None
        if a.name not in _WANTED:
            return ()
        v = _normalize(a.name, _attr_value(a), where)
        return () if v is None else (a.name, v)

    def _finish(self, where: str, version: str, node_ids: np.ndarray, durations: np.ndarray, types: np.ndarray,
                aid: np.ndarray, dep_ids: np.ndarray, dep_ptr: np.ndarray, pg_info: tuple) -> RankProgram:
        bad = (types < 0) | (types > 7)
        if bad.any():
            i = int(np.argmax(bad))
            raise LibraError(
                f"{where}: node {int(node_ids[i])} has unknown node type {int(types[i])}; the schema defines 0..7"
            )
        dep_index = resolve_deps(node_ids, dep_ids, dep_ptr, where)
        prog_types = types.astype(np.int8)
        attr = aid.astype(np.int32)
        h = hashlib.blake2b(digest_size=20)
        for a in (prog_types, durations, attr, dep_ptr, dep_index):
            h.update(np.ascontiguousarray(a).tobytes())
            h.update(b"|")
        h.update(repr(pg_info).encode())
        return RankProgram(where, node_ids, prog_types, durations, attr, dep_ptr, dep_index, pg_info, h.digest(),
                           version)


def _frames(buf: bytes, pos: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Body start, body end and header offset of every length-prefixed message from ``pos`` on.

    The only per-message Python loop of the reader: the length prefixes chain, so they
    cannot be found in bulk.
    """
    n = len(buf)
    heads = array("q")
    ha = heads.append
    try:
        while pos < n:
            ha(pos)
            size = buf[pos]
            if size < 0x80:
                pos += 1 + size
            else:
                size, pos = _varint_more(buf, pos + 1, size)
                pos += size
    except (IndexError, ValueError):
        raise LibraError(
            f"{where}: truncated or corrupt length prefix at byte offset {heads[-1]}; the file was cut short or "
            "damaged, re-create or re-copy it"
        ) from None
    # the loop above only finds where each message starts; decode the length prefixes in bulk
    h = np.frombuffer(heads, dtype=np.int64) if len(heads) else np.zeros(0, np.int64)
    arr = np.frombuffer(buf, dtype=np.uint8)
    size, s, _ = _varints(arr, h, np.full(h.shape, n, dtype=np.int64))
    e = s + size.astype(np.int64)
    if e.size and e[-1] > n:
        raise LibraError(
            f"{where}: truncated: the message at byte offset {int(h[-1])} needs "
            f"{int(e[-1] - s[-1])} bytes but only {n - int(s[-1])} remain; the file was cut short, re-create or "
            "re-copy it"
        )
    empty = np.nonzero(e == s)[0]
    if empty.size:
        raise LibraError(
            f"{where}: zero-length message at byte offset {int(h[empty[0]])}; readers (and "
            "ASTRA-sim) stop there, so the rest of the file would be lost; never write a node with all fields "
            "at their defaults"
        )
    return s, e, h


def _varints(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode one varint at each position (all at once); also the position after it and an ok flag."""
    val = np.zeros(pos.size, dtype=np.uint64)
    ok = np.ones(pos.size, dtype=bool)
    pos = pos.copy()
    active = np.arange(pos.size)
    for k in range(10):
        q = pos[active]
        inside = q < limit[active]
        if not inside.all():
            ok[active[~inside]] = False
            active, q = active[inside], q[inside]
        if active.size == 0:
            break
        b = arr[q]
        val[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        pos[active] = q + 1
        active = active[b >= 0x80]
        if active.size == 0:
            break
    else:
        ok[active] = False
    return val, pos, ok


def _packed(arr: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed varint ranges [off, off + length); returns (values, count per range).

    Every range must end on a varint's last byte (checked by the caller).
    """
    total = int(length.sum())
    if total == 0:
        return np.zeros(0, np.uint64), np.zeros(off.size, np.int64)
    first = np.zeros(off.size, dtype=np.int64)
    np.cumsum(length[:-1], out=first[1:])
    byte_idx = np.repeat(off - first, length) + np.arange(total, dtype=np.int64)
    b = arr[byte_idx]
    term = b < 0x80
    # varint v covers bytes (end of varint v - 1, end of varint v]
    ends = np.nonzero(term)[0]
    vstart = np.empty(ends.size, dtype=np.int64)
    vstart[0] = 0
    vstart[1:] = ends[:-1] + 1
    k = np.arange(total, dtype=np.int64) - np.repeat(vstart, ends - vstart + 1)
    contrib = (b & 0x7F).astype(np.uint64) << (7 * k).astype(np.uint64)
    values = np.bitwise_or.reduceat(contrib, vstart)
    cum = np.concatenate(([0], np.cumsum(term, dtype=np.int64)))
    counts = cum[first + length] - cum[first]
    return values, counts


class _Walk(NamedTuple):
    ids: np.ndarray
    types: np.ndarray
    durs: np.ndarray
    has_attr: np.ndarray
    attr_start: np.ndarray
    dep_frame: np.ndarray
    dep_vals: np.ndarray
    slow: np.ndarray


def _walk(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, t: "_Tags") -> _Walk:
    """Read the top-level fields of all messages in lockstep, in the schema's field order.

    Serializers write fields in field-number order, so one pass over the fields in that order
    reads every canonical message. A message that still has bytes left before its attribute
    block (repeated or unknown fields, other order) is flagged ``slow`` and re-read by the schema.
    """
    n = starts.size
    last = max(arr.size - 1, 0)
    cur = starts.copy()
    ids = np.zeros(n, np.uint64)
    types = np.zeros(n, np.int64)
    durs = np.zeros(n, np.uint64)
    bad = np.zeros(n, bool)
    dep_frames: list[np.ndarray] = []
    dep_vals: list[np.ndarray] = []

    def peek() -> np.ndarray:
        tag = arr[np.minimum(cur, last)].astype(np.int64)
        tag[cur >= ends] = -1
        return tag

    for tag, kind in t.steps:
        idx = np.nonzero(peek() == tag)[0]
        if idx.size == 0:
            continue
        lim = ends[idx]
        v, p, ok = _varints(arr, cur[idx] + 1, lim)
        if kind == "len" or kind == "deps":
            p = p + v.astype(np.int64)
            ok &= p <= lim
        if not ok.all():
            bad[idx[~ok]] = True
            idx, v, p = idx[ok], v[ok], p[ok]
        cur[idx] = p
        if kind == "deps":
            length = v.astype(np.int64)
            off = p - length
            nz = length > 0
            idx, off, length = idx[nz], off[nz], length[nz]
            if idx.size:
                torn = arr[off + length - 1] >= 0x80
                if torn.any():
                    bad[idx[torn]] = True
                    idx, off, length = idx[~torn], off[~torn], length[~torn]
                vals, counts = _packed(arr, off, length)
                dep_frames.append(np.repeat(idx, counts))
                dep_vals.append(vals)
        elif kind == "id":
            ids[idx] = v
        elif kind == "type":
            types[idx] = v.astype(np.int64)
        elif kind == "duration":
            durs[idx] = v
    tag = peek()
    has_attr = tag == t.attr
    slow = bad | ((tag != -1) & ~has_attr)
    df = np.concatenate(dep_frames) if dep_frames else np.zeros(0, np.int64)
    dv = np.concatenate(dep_vals) if dep_vals else np.zeros(0, np.uint64)
    return _Walk(ids, types, durs, has_attr, cur, df.astype(np.int64), dv, slow)


def resolve_deps(node_ids: np.ndarray, dep_ids: np.ndarray, dep_ptr: np.ndarray, where: str) -> np.ndarray:
    """Dependency ids -> node positions; LibraError for duplicate ids or dangling dependencies."""
    n = node_ids.shape[0]
    if n > 1 and bool(np.all(node_ids[1:] > node_ids[:-1])):
        order = None
        sorted_ids = node_ids
    else:
        order = np.argsort(node_ids, kind="stable")
        sorted_ids = node_ids[order]
        dup = np.nonzero(sorted_ids[1:] == sorted_ids[:-1])[0]
        if dup.size:
            raise LibraError(
                f"{where}: node id {int(sorted_ids[dup[0]])} appears twice; node ids must be unique within a file"
            )
    if dep_ids.size == 0:
        return np.zeros(0, np.int64)
    if n == 0:
        pos = np.zeros(dep_ids.shape, np.int64)
        found = np.zeros(dep_ids.shape, bool)
    else:
        pos = np.searchsorted(sorted_ids, dep_ids)
        pos_c = np.minimum(pos, n - 1)
        found = (pos < n) & (sorted_ids[pos_c] == dep_ids)
        pos = pos_c
    if not bool(found.all()):
        k = int(np.argmin(found))
        owner = int(np.searchsorted(dep_ptr, k, side="right")) - 1
        raise LibraError(
            f"{where}: node {int(node_ids[owner])} depends on node {int(dep_ids[k])}, which is not in the file; "
            "remove the dependency or add the node"
        )
    pos = pos.astype(np.int64)
    return pos if order is None else order[pos].astype(np.int64)


def file_first_order(n: int, edges) -> tuple[list[int], list[int]]:
    """Kahn's algorithm over edges (u, v) = "v waits for u", always taking the ready node that
    comes first in the file, so the issue order stays as close to the file order as the
    dependencies allow. Returns the order and the remaining in-degrees (non-zero on a cycle)."""
    children: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for u, v in edges:
        children[u].append(v)
        indeg[v] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    out: list[int] = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return out, indeg


def topological_order(prog: RankProgram) -> np.ndarray | None:
    """Node positions in an order where every dependency comes first; None if file order is one.

    Raises LibraError naming the nodes of a dependency cycle.
    """
    n = prog.num_nodes
    ptr, dep = prog.dep_ptr, prog.dep_index
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    if bool(np.all(dep < owner)):
        return None
    out, indeg_l = file_first_order(n, zip(dep.tolist(), owner.tolist()))
    if len(out) < n:
        left = {i for i in range(n) if indeg_l[i] > 0}
        # walk parents inside the unfinished set until a node repeats: that is a cycle
        start = min(left)
        seen: dict[int, int] = {}
        path: list[int] = []
        u = start
        while u not in seen:
            seen[u] = len(path)
            path.append(u)
            parents = [int(p) for p in dep[ptr[u]:ptr[u + 1]] if int(p) in left]
            u = parents[0]
        cyc = path[seen[u]:][::-1]
        k = cyc.index(min(cyc))  # start at the first node of the file, for a stable message
        cyc = cyc[k:] + cyc[:k]
        ids = " -> ".join(str(int(prog.node_ids[i])) for i in cyc + [cyc[0]])
        raise LibraError(f"{prog.path}: dependency cycle through nodes {ids}; remove one of these dependencies")
    return np.asarray(out, dtype=np.int64)
