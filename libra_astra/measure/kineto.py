"""Reading per-rank Kineto traces (torch.profiler's Chrome-trace JSON, plain or gzipped).

A profile is named by a ``PREFIX`` (its files ``PREFIX.RANK.json`` or ``PREFIX.RANK.json.gz``), a
directory (every ``*.json[.gz]`` in it) or the files themselves. A file's rank is the trace's own
``distributedInfo.rank``, else the ``.RANK.json`` of its name, else its place in the list (the
last two are stated as assumptions). Times are kept in integer ns from the trace's microseconds.

Only what the measurement uses is kept: host operators (``cpu_op``, ``user_annotation``), CUDA
runtime calls (launches and synchronizations, by correlation id), device activities (kernels,
memory copies and sets, with their stream) and the ``ProfilerStep#N`` annotations.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import LibraError
from ..strictload import loads_json
from ..traces.files import read_file_bytes
from .linked import LINKED_NOTE, is_linked, parse_linked
from .profile import (DEVICE_CATS, HOST_CATS, RUNTIME_CATS, STEP_NAME, DeviceOp, HostOp, RankProfile, RuntimeCall,
                      Step, event_span, int_or_none, pg_groups)

_RANK_NAME = re.compile(r"\.(\d+)\.json(\.gz)?$")
_WORKER_NAME = re.compile(r"(?:^|[^0-9a-z])(?:worker|rank)[_-]?(\d+)", re.I)


def parse_profile(data: Any, source: str, rank: int | None) -> RankProfile:
    """A parsed Kineto JSON -> RankProfile; a file that is not a Kineto trace is a one-line error."""
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise LibraError(f"{source}: not a Kineto trace (no 'traceEvents' list); give the JSON that "
                         "torch.profiler's export_chrome_trace writes")
    info = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    own_rank = int_or_none(info.get("rank"))
    host, runtime, device, steps = [], [], [], []
    first, last = None, None
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        span = event_span(e, source)
        if span is None:
            continue
        cat, name = e.get("cat"), str(e.get("name", ""))
        cat = cat if isinstance(cat, str) else None
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        tid = int_or_none(e.get("tid"))
        tid = tid if tid is not None else hash(str(e.get("tid")))
        first = span[0] if first is None else min(first, span[0])
        last = span[1] if last is None else max(last, span[1])
        if cat in HOST_CATS:
            m = STEP_NAME.match(name)
            if m:
                steps.append(Step(int(m.group(1)), tid, *span))
            else:
                host.append(HostOp(name, tid, span[0], span[1], args, cat == "user_annotation"))
        elif cat in RUNTIME_CATS:
            runtime.append(RuntimeCall(name, tid, span[0], span[1], int_or_none(args.get("correlation"))))
        elif cat in DEVICE_CATS:
            stream = int_or_none(args.get("stream"))
            device.append(DeviceOp(name, DEVICE_CATS[cat], stream if stream is not None else tid, span[0], span[1],
                                   int_or_none(args.get("correlation")), args))
    if first is None:
        raise LibraError(f"{source}: the Kineto trace holds no timed event; profile at least one step")
    world = int_or_none(info.get("world_size"))
    backend = info.get("backend") if isinstance(info.get("backend"), str) else None
    host.sort(key=lambda o: (o.start_ns, -o.end_ns))
    device.sort(key=lambda o: (o.start_ns, o.end_ns))
    steps.sort(key=lambda s: s.start_ns)
    return RankProfile(own_rank if own_rank is not None else (rank if rank is not None else 0), source, world,
                       backend, tuple(steps), tuple(host), tuple(runtime), tuple(device), first, last,
                       pg_groups(info))


def read_profile(path: str | Path, rank: int | None = None) -> RankProfile:
    """One Kineto file (plain or gzipped) -> RankProfile."""
    raw = read_file_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LibraError(f"{path}: not UTF-8 text; give the Kineto JSON (plain or gzipped)") from None
    data = loads_json(text, str(path), "Kineto trace")
    if is_linked(data):
        return parse_linked(data, str(path), rank)
    return parse_profile(data, str(path), rank)


def _name_rank(path: Path) -> int | None:
    m = _RANK_NAME.search(path.name) or _WORKER_NAME.search(path.name)
    return int(m.group(1)) if m else None


def profile_files(inputs: Sequence[str | Path]) -> list[Path]:
    """The files named by PREFIXes, directories or files, in the order given."""
    if not inputs:
        raise LibraError("no Kineto trace given; name a PREFIX (PREFIX.RANK.json[.gz]), a directory or the files")
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_file():
            out.append(p)
            continue
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and re.search(r"\.json(\.gz)?$", q.name))
            what = f"{p}: no *.json or *.json.gz file in the directory"
        else:
            parent = p.parent if str(p.parent) else Path(".")
            pat = re.compile(rf"^{re.escape(p.name)}\.(\d+)\.json(\.gz)?$")
            found = sorted((q for q in parent.iterdir() if pat.match(q.name)),
                           key=lambda q: int(pat.match(q.name).group(1))) if parent.is_dir() else []
            what = f"{p}: no Kineto file {p}.0.json (or .json.gz); give a PREFIX, a directory or the files"
        if not found:
            raise LibraError(what)
        out.extend(found)
    return out


def read_profiles(inputs: Sequence[str | Path]) -> tuple[list[RankProfile], list[str]]:
    """Every rank's profile, in rank order, and the assumptions made reading them."""
    files = profile_files(inputs)
    notes: list[str] = []
    profiles = []
    for i, f in enumerate(files):
        by_name = _name_rank(f)
        prof = read_profile(f, by_name if by_name is not None else i)
        profiles.append(prof)
    by_rank: dict[int, RankProfile] = {}
    for prof in profiles:
        if prof.rank in by_rank:
            raise LibraError(f"{prof.source}: rank {prof.rank} again (also {by_rank[prof.rank].source}); "
                             "give one profile per rank")
        by_rank[prof.rank] = prof
    if any(p.linked for p in profiles):
        notes.append(LINKED_NOTE)
    if any(p.world_size is None for p in profiles):
        notes.append("rank taken from the file name or the order given where the trace has no distributedInfo.rank")
    worlds = {p.world_size for p in profiles if p.world_size is not None}
    if len(worlds) > 1:
        raise LibraError(f"{files[0]}: the profiles disagree on the world size ({sorted(worlds)}); "
                         "give the profiles of one job")
    world = worlds.pop() if worlds else max(by_rank) + 1
    outside = [r for r in by_rank if r >= world]
    if outside:
        raise LibraError(f"{by_rank[outside[0]].source}: rank {outside[0]} is outside the world of {world} ranks; "
                         "give the profiles of one job")
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        notes.append(f"ranks {shown} of {world} missing: their collectives are measured on the ranks present "
                     "(a transfer time is then an upper bound)")
    return [by_rank[r] for r in sorted(by_rank)], notes
