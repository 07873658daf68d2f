"""What ``doctor`` looks at, read as ASTRA-sim reads it: every rank file message by message with
the schema's own classes (attribute types untouched), the communicator-group file, the network.

The demand reader (:mod:`..traces.reader`) normalizes attributes and stops at the first problem;
the doctor needs the raw values and every problem, so it parses each node with ``pb.Node``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import LibraError
from ..files import load_yaml, read_json
from ..model.network import network_from_dict
from ..traces.files import find_rank_files, read_file_bytes
from ..traces.schema import need_chakra, pb
from ..traces.wire import _frames, _varint_more


@dataclass
class RankFile:
    """One rank's file as parsed: nodes in file order, or why it could not be read."""

    rank: int
    path: Path
    gzipped: bool
    meta: Any = None                 # pb.GlobalMetadata
    nodes: list | None = None        # list[pb.Node]; None if unreadable
    error: str = ""                  # why it could not be read (a LibraError's line)


@dataclass(frozen=True)
class Target:
    """The network the set will run on (from a network file), when given."""

    source: str
    npus_per_dim: tuple[int, ...]

    @property
    def npus_count(self) -> int:
        return math.prod(self.npus_per_dim)

    @property
    def num_dims(self) -> int:
        return len(self.npus_per_dim)


@dataclass(frozen=True)
class GroupFile:
    """The communicator-group file as ASTRA-sim would read it: raw keys and member lists."""

    path: str
    groups: dict[str, Any]           # key as written -> value as written


def parse_rank_bytes(data: bytes, where: str) -> tuple[Any, list]:
    """GlobalMetadata and nodes of one rank file's (gunzipped) bytes; LibraError if damaged."""
    need_chakra()
    if not data:
        raise LibraError(f"{where}: empty file; a trace file starts with a GlobalMetadata message")
    try:
        size, pos = data[0], 1
        if size >= 0x80:
            size, pos = _varint_more(data, pos, size)
        meta = pb.GlobalMetadata.FromString(data[pos:pos + size])
    except Exception:
        raise LibraError(f"{where}: corrupt GlobalMetadata message at byte offset 0; not a Chakra ET file") from None
    pos += size
    starts, ends, heads = _frames(data, pos, where)
    nodes = []
    for s, e, h in zip(starts.tolist(), ends.tolist(), heads.tolist()):
        try:
            nodes.append(pb.Node.FromString(data[s:e]))
        except Exception:
            raise LibraError(f"{where}: corrupt node message at byte offset {h} (protobuf cannot decode it); "
                             "ASTRA-sim would read it as a partial node") from None
    return meta, nodes


def read_set(prefix: str | Path, on_progress: Callable[[int, int], None] | None = None) -> list[RankFile]:
    """Every rank file of a set, in rank order (gaps allowed; the checks report them);
    ``on_progress(files read, files)`` after each file."""
    found = find_rank_files(prefix)
    if not found:
        raise LibraError(f"{prefix}: no trace files {prefix}.0.et (or .et.gz); give the prefix without "
                         "the '.RANK.et' suffix")
    out = []
    for rank in sorted(found):
        path = found[rank]
        rf = RankFile(rank, path, gzipped=not path.name.endswith(".et"))
        try:
            rf.meta, rf.nodes = parse_rank_bytes(read_file_bytes(path), str(path))
        except LibraError as e:
            rf.error = str(e)
        out.append(rf)
        if on_progress is not None:
            on_progress(len(out), len(found))
    return out


def load_target(path: str | Path) -> Target:
    """Dimension sizes from a libra_astra network file or an ASTRA-sim network YAML (npus_count)."""
    data = load_yaml(path, "network")
    if isinstance(data, dict) and "npus_count" in data:
        sizes = data["npus_count"]
        if not isinstance(sizes, list) or not sizes or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
            raise LibraError(f"{path}: npus_count must be a list of integers >= 1, got {sizes!r}; fix the network file")
        return Target(str(path), tuple(sizes))
    net = network_from_dict(data, str(path))
    return Target(str(path), net.npus_per_dim)


def load_groups(path: str | Path) -> GroupFile:
    """The communicator-group JSON, raw; only its outer shape is required here."""
    data = read_json(path, "communicator-group")
    if not isinstance(data, dict):
        raise LibraError(f"{path}: a communicator-group file is a JSON object {{\"1\": [0, 1], ...}}, "
                         f"got {type(data).__name__}; fix the file")
    return GroupFile(str(path), dict(data))
