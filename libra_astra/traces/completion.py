"""Completion marker of a trace set: ``PREFIX.set.json``, written first as "writing" and last as "complete".

A set of rank files is written one file at a time, so an interrupted ``generate --force`` (or
``emit --force``) would leave a set mixing ranks of two different runs, every file present and
each one valid. The writer therefore publishes the marker in state ``writing`` before it
touches any rank file, and rewrites it as ``complete`` — with every file's size and content
digest — after the last one. Readers refuse a set whose marker is not ``complete``, or whose
files do not match it. Sets without a marker (traces from other tools) are read as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import LibraError
from ..files import write_text_atomic

FORMAT = "libra_astra.trace_set"
# Version 2 records each file's SHA-256; version 1 (still read) recorded its blake2b-160. SHA-256
# because CPUs hash it in hardware (SHA-NI, ARMv8 crypto): 2.7x faster than blake2b here, and
# checking the digests was a tenth of predict's time on a 4,096-rank set.
VERSION = 2
DIGEST = "sha256"
_HASHERS = {"sha256": hashlib.sha256, "blake2b": lambda data: hashlib.blake2b(data, digest_size=20)}


def marker_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.set.json")


def digest(data: bytes, algorithm: str = DIGEST) -> str:
    """Digest of a rank file's (uncompressed) content, as readers compute it."""
    return _HASHERS[algorithm](data).hexdigest()


def hasher(algorithm: str):
    """The hash function of ``algorithm`` (a name :class:`Expected` gives)."""
    return _HASHERS[algorithm]


@dataclass(frozen=True)
class Expected:
    """What a set's marker says each rank file's content must hash to."""
    algorithm: str                    # "sha256" (version 2) or "blake2b" (blake2b-160, version 1)
    digests: Mapping[str, str]        # rank file path -> hex digest


def begin(prefix: str | Path, num_ranks: int, writer: str, overwrite: bool) -> Path:
    """Mark the set as being written (replacing a previous marker only with ``overwrite``)."""
    body = {"format": FORMAT, "version": VERSION, "state": "writing", "writer": writer, "num_ranks": num_ranks}
    return write_text_atomic(marker_path(prefix), json.dumps(body) + "\n", overwrite)


def record(path: str | Path, data: bytes | None = None) -> dict[str, Any]:
    """The marker's entry for one rank file: its name, size and content digest (``data`` or read back)."""
    if data is None:
        data = Path(path).read_bytes()
    return {"file": Path(path).name, "size_bytes": len(data), DIGEST: digest(data)}


def finish(prefix: str | Path, records: Sequence[Mapping[str, Any]], writer: str,
           extra: Mapping[str, Any] | None = None) -> Path:
    """Mark the set complete; ``records`` (from :func:`record`) are in rank order."""
    body = {"format": FORMAT, "version": VERSION, "state": "complete", "writer": writer, "num_ranks": len(records),
            **(dict(extra) if extra else {}), "files": [dict(r) for r in records]}
    return write_text_atomic(marker_path(prefix), json.dumps(body, indent=1) + "\n", overwrite=True)


def _fix(m: Path) -> str:
    return f"write the set again (libra-astra generate --force, or emit --force) or delete {m} if the files are right"


def check_complete(prefix: str | Path) -> dict[str, Any] | None:
    """The set's marker if it has one; LibraError if the marker says the set is incomplete."""
    m = marker_path(prefix)
    if not os.path.lexists(m):
        return None
    from ..strictload import load_json
    data = load_json(m, "trace-set marker")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LibraError(f"{m}: not a libra_astra trace-set marker; {_fix(m)}")
    if data.get("state") != "complete":
        raise LibraError(f"{prefix}: trace set is incomplete: {m.name} says it was still being written by "
                         f"{data.get('writer', 'a writer')!s:.40} (interrupted?); {_fix(m)}")
    return data


def expected_digests(prefix: str | Path, paths: Sequence[str | Path],
                     marker: dict[str, Any] | None) -> Expected | None:
    """Check the set's marker against ``paths`` (rank order); the content digest each file must have.

    None when the set has no marker. Raises LibraError when the marker says the set is
    incomplete or lists other files, sizes or a different rank count. ``marker``: what
    :func:`check_complete` returned for ``prefix`` (callers check it before listing the rank
    files), so the 4,096-entry marker of a large set is parsed once.
    """
    data = marker
    if data is None:
        return None
    m = marker_path(prefix)
    fix = _fix(m)
    files = data.get("files")
    if not isinstance(files, list) or len(files) != len(paths):
        n = len(files) if isinstance(files, list) else "?"
        raise LibraError(f"{prefix}: trace set has {len(paths)} rank files but {m.name} lists {n}; {fix}")
    out: dict[str, str] = {}
    algorithm = "blake2b" if data.get("version") == 1 else DIGEST
    # str and os calls rather than a Path per file: the marker of a large set lists thousands
    for r, (entry, path) in enumerate(zip(files, paths)):
        text = str(path) if isinstance(path, Path) else str(Path(path))
        p_name = os.path.basename(text)
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise LibraError(f"{m}: entry {r} is not a file record; {fix}")
        name = entry["file"]
        gz = p_name == name + ".gz"    # gzipped after writing: compare the content only
        if p_name != name and not gz:
            raise LibraError(f"{prefix}: rank {r} is {p_name} but {m.name} lists {name}; {fix}")
        if not gz:
            try:
                size = os.stat(text).st_size
            except OSError:
                size = -1
            if size != entry.get("size_bytes"):
                raise LibraError(f"{text}: {size} bytes but {m.name} recorded {entry.get('size_bytes')!r} "
                                 f"(the file was changed after the set was written); {fix}")
        if isinstance(entry.get(algorithm), str):
            out[text] = entry[algorithm]
    return Expected(algorithm, out)

