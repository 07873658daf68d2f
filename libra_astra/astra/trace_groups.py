"""The process groups a trace set's METADATA nodes define, without extracting its demand.

emit needs them for the simulator's communicator-group file. The demand extraction finds them
too, so emit took them from its summary; when the caller already has the demand, reading every
node again for them alone would cost more than the rewrite. Here a file is decoded only if its
bytes can hold a METADATA node at all (the type field, tag 0x18, holding 1), and only its
METADATA nodes are parsed. The merge is the demand reader's (:mod:`..demand.group_check`),
result as in its summary's ``metadata_groups``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Collection, Iterator

from ..demand.group_check import merge_process_groups
from ..traces import chakra_io as cio
from ..traces.files import rank_files, read_file_bytes
from ..traces.process_groups import metadata_groups
from ..traces.schema import pb
from . import node_bytes as nb

# Node.type = 1 as a serializer writes it (tag 0x18, then 1), or with 1 in a longer varint
# (0x81 0x80 .. 0x00); a tag itself in a longer varint than needed is not looked for.
_METADATA_TYPE = (b"\x18\x01", b"\x18\x81")


def _metadata_nodes(buf: bytes, where: str) -> list[pb.Node]:
    batch, inside, _ = nb.decode([buf], [where])
    if not inside:
        return [n for n in cio.parse_et(buf, where)[1] if n.type == pb.METADATA_NODE]
    idx = (batch.types == pb.METADATA_NODE).nonzero()[0].tolist()
    return [pb.Node.FromString(buf[int(batch.starts[i]):int(batch.ends[i])]) for i in idx]


def trace_metadata_groups(prefix: str | Path, npus: int, file_groups: Collection[str]) -> dict[str, tuple[int, ...]]:
    """``{group name: member ranks}`` of the METADATA process groups of ranks 0..npus-1 that
    ``file_groups`` (the comm-groups file's names) does not define; sorted by name as the demand
    summary's, a group of all ranks with every rank listed.

    Raises
    ------
    LibraError
        Whatever the demand extraction would refuse in them: a missing or damaged file,
        unreadable process-group info, ranks describing a group differently, ranks outside the
        network.
    """
    found: dict[str, tuple[int, ...]] = {}
    merge_process_groups(_files_groups(prefix, npus), npus, file_groups, found, {})
    return {key: found[key] or tuple(range(npus))
            for key in sorted(found, key=lambda k: (len(k), k)) if key not in file_groups}


def _files_groups(prefix: str | Path, npus: int) -> Iterator[tuple[str, Iterator[tuple[str, list[int]]]]]:
    """(file, the (name, ranks) pairs of its METADATA nodes) of each distinct rank file that has any."""
    seen: set[bytes] = set()
    for p in rank_files(prefix, npus, f"{npus} NPUs"):
        buf = read_file_bytes(p)
        if not any(t in buf for t in _METADATA_TYPE):
            continue
        digest = hashlib.blake2b(buf, digest_size=20).digest()
        if digest in seen:
            continue
        seen.add(digest)
        yield str(p), (pair for node in _metadata_nodes(buf, str(p))
                       for pair in metadata_groups(node, f"{p}: node {node.id} (METADATA)"))
