"""Print what a converted Chakra trace set holds: nodes by type, collectives, sizes.

    python tools/record_traces/summarize.py tests/fixtures/real/ddp4/ddp4 [...]

Reads ``PREFIX.RANK.et.gz`` (or ``.et``) with mlc-chakra's protolib; used to
fill in the fixture README's tables.
"""

from __future__ import annotations

import gzip
import io
import sys
from collections import Counter
from pathlib import Path

from chakra.schema.protobuf.et_def_pb2 import CollectiveCommType, GlobalMetadata, Node, NodeType
from chakra.src.third_party.utils.protolib import decodeMessage


def _nodes(path: Path):
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    f = io.BytesIO(data)
    meta = GlobalMetadata()
    decodeMessage(f, meta)
    while True:
        n = Node()
        if not decodeMessage(f, n):
            return
        yield n


def _attr(n: Node, name: str):
    for a in n.attr:
        if a.name == name:
            return getattr(a, a.WhichOneof("value"))
    return None


def summarize(prefix: str) -> None:
    p = Path(prefix)
    files = sorted(p.parent.glob(p.name + ".*.et*"), key=lambda f: int(f.name[len(p.name) + 1:].split(".")[0]))
    print(f"{prefix}: {len(files)} ranks")
    for f in files:
        types: Counter[str] = Counter()
        comms: Counter[str] = Counter()
        gloo: Counter[str] = Counter()
        cpu_us = gpu_us = 0
        for n in _nodes(f):
            types[NodeType.Name(n.type)] += 1
            is_cpu = _attr(n, "is_cpu_op")
            if is_cpu:
                cpu_us += n.duration_micros
            else:
                gpu_us += n.duration_micros
            if n.type == NodeType.COMM_COLL_NODE:
                kind = CollectiveCommType.Name(_attr(n, "comm_type"))
                comms[f"{kind} {_attr(n, 'comm_size')}B pg={_attr(n, 'pg_name')!r}"] += 1
            elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                comms[f"{NodeType.Name(n.type)} {_attr(n, 'comm_size')}B"] += 1
            if n.name.startswith(("c10d::", "gloo:", "nccl:")):
                gloo[n.name] += 1
        print(f"  {f.name}: {f.stat().st_size} B, {dict(types)}, cpu {cpu_us} us, gpu {gpu_us} us")
        if comms:
            print(f"    COMM: {dict(comms)}")
        if gloo:
            print(f"    c10d/gloo/nccl CPU ops: {dict(gloo)}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        summarize(arg)
