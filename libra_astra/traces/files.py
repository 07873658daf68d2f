"""Finding and reading the rank files of a trace set (``PREFIX.RANK.et``, plain or gzipped)."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from .. import limits
from ..errors import LibraError
from ..files import read_bytes

_TRACE_RE = r"^{}\.(\d+)\.et(\.gz)?$"


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
    if contiguous and top == 1 and num_ranks > 1:
        raise LibraError(
            f"{prefix}: found 1 rank file but {network_name} has {num_ranks} NPUs; a single-rank trace has no "
            "network traffic to size (every network dimension has at least 2 NPUs): record the job on as many "
            f"ranks as the network has NPUs ({num_ranks})"
        )
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
    try:
        # plain, unbuffered open(): on a set of small rank files, making Path objects (or a buffer
        # the whole file is read past) cost more than the reads
        with open(path, "rb", buffering=0) as f:
            raw = f.read()
    except OSError:
        raw = read_bytes(path, "trace")  # raises the one-line error naming the file
    if raw[:2] == b"\x1f\x8b":
        p = Path(path)
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


def default_groups_path(prefix: str | Path) -> str | None:
    """PREFIX.groups.json beside the traces (as the trace generator writes it), if present."""
    p = Path(f"{prefix}.groups.json")
    return str(p) if p.is_file() else None
