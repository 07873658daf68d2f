"""Finding and reading the rank files of a trace set (``PREFIX.RANK.et``, plain or gzipped)."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

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
    missing = [r for r in range(num_ranks) if r not in found]
    if missing:
        shown = ", ".join(f"{prefix}.{r}.et" for r in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise LibraError(
            f"{prefix}: {len(missing)} rank file(s) missing: {shown}; every rank 0..{num_ranks - 1} needs a file"
        )
    return [found[r] for r in range(num_ranks)]


def read_file_bytes(path: str | Path) -> bytes:
    """Whole file contents, gunzipped if it is gzip (by magic number, not by name)."""
    p = Path(path)
    raw = read_bytes(p, "trace")
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise LibraError(f"{p}: truncated or corrupt gzip data ({e}); re-create or re-copy the file") from None
    return raw


def default_groups_path(prefix: str | Path) -> str | None:
    """PREFIX.groups.json beside the traces (as the trace generator writes it), if present."""
    p = Path(f"{prefix}.groups.json")
    return str(p) if p.is_file() else None
