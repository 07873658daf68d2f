"""The co-design space: network shapes, building blocks, parallelizations and placements.

- Shapes: every ordered factorization of N into 1..max_dims sizes >= 2.
- Blocks: one building block per dimension, allowed by the catalog at the dimension's level.
- Parallelizations (transformer): TP, PP, DP degrees with tp x pp x dp = N that the generator
  accepts (tp divides heads and the FFN size, pp the layers, micro_batch x dp the global batch),
  sequence parallelism on or off (tp > 1, tp dividing the sequence), and micro-batch sizes.
  DLRM and ResNet-50 run data parallel over all NPUs: one parallelization.
- Placements: every layout the generator's ``placement`` can express: axes nested in some order
  (the first innermost inside a shared dimension); an axis takes whole (remaining) dimensions and
  a factor of its last one. Layouts that give the same groups are counted once.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, replace
from typing import NamedTuple, Sequence

from .upstream import Parallel, TraceSpec, TransformerModel, transformer_problem


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def factorizations(n: int, max_dims: int, min_size: int = 2) -> list[tuple[int, ...]]:
    """Ordered factorizations of ``n`` into 1..max_dims factors, each >= min_size."""
    out: list[tuple[int, ...]] = []

    def rec(left: int, prefix: tuple[int, ...]) -> None:
        if left == 1:
            if prefix:
                out.append(prefix)
            return
        if len(prefix) == max_dims:
            return
        for d in divisors(left):
            if d >= min_size:
                rec(left // d, prefix + (d,))

    rec(n, ())
    return sorted(out, key=lambda s: (len(s), s))


AXES = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class Parallelization:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    sp: bool = False
    micro_batch: int = 1
    micro_batches: int = 1     # per replica per step
    cp: int = 1
    ep: int = 1
    schedule: str = "gpipe"
    virtual_stages: int = 1
    zero: int = 0
    recompute: str = "none"

    @property
    def label(self) -> str:
        extra = "".join(f"-{a}{getattr(self, a)}" for a in ("cp", "ep") if getattr(self, a) > 1)
        job = ""
        if self.schedule != "gpipe":
            job += f"-{self.schedule}" + (f"{self.virtual_stages}" if self.virtual_stages > 1 else "")
        if self.zero:
            job += f"-z{self.zero}"
        if self.recompute != "none":
            job += f"-rc{self.recompute[0]}"
        return f"tp{self.tp}-pp{self.pp}-dp{self.dp}{extra}{'-sp' if self.sp else ''}-mb{self.micro_batch}{job}"

    def degrees(self) -> dict[str, int]:
        return {a: getattr(self, a) for a in AXES}

    def degree_tuple(self) -> tuple[int, ...]:
        return tuple(getattr(self, a) for a in AXES)


@dataclass(frozen=True)
class ParallelCount:
    """Parallelizations considered, and why the others were rejected (by the generator's rules)."""

    valid: tuple[Parallelization, ...]
    rejected: dict


@dataclass(frozen=True)
class JobOptions:
    """The training-job axes to try; None: the spec's own setting."""

    schedules: tuple[str, ...] | None = None
    virtual_stages: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    cp: tuple[int, ...] | None = None      # () = every divisor
    ep: tuple[int, ...] | None = None


def _reason(text: str) -> str:
    """A rejection reason without its numbers, so that reasons count together."""
    return re.sub(r"\d+", "N", text)


def parallelizations(spec: TraceSpec, n: int, *, sp: str = "both",
                     micro_batches: Sequence[int] | None = None, job: JobOptions = JobOptions()) -> ParallelCount:
    """Every parallelization of ``spec``'s model over ``n`` NPUs (see the module docstring).

    ``sp``: "both", "on", "off" or "spec" (keep the spec's setting). ``micro_batches``: the
    micro-batch sizes to try (default: the spec's). ``job``: schedules, virtual stages, ZeRO stages,
    recomputation, CP and EP degrees to try (default: the spec's).
    """
    m = spec.model
    if not isinstance(m, TransformerModel):
        return ParallelCount((Parallelization(dp=n, micro_batch=0, micro_batches=1),), {})
    rejected: dict = {}
    base = spec.parallel

    def reject(why: str) -> None:
        rejected[why] = rejected.get(why, 0) + 1

    def opts(given, spec_value, every):
        if given is None:
            return (spec_value,)
        return tuple(given) if given else tuple(every)

    mbs = tuple(micro_batches) if micro_batches else (m.micro_batch,)
    schedules = opts(job.schedules, base.schedule, ())
    zeros = opts(job.zero, base.zero, ())
    recomputes = opts(job.recompute, base.recompute, ())
    out = []
    for tp in divisors(n):
        for cp in (c for c in opts(job.cp, base.cp, divisors(n // tp)) if (n // tp) % c == 0):
            eps = opts(job.ep, base.ep, [d for d in divisors(n // (tp * cp)) if m.experts and m.experts % d == 0]
                       if m.experts else (1,))
            for ep in (e for e in eps if (n // (tp * cp)) % e == 0):
                for pp in divisors(n // (tp * cp * ep)):
                    dp = n // (tp * cp * ep * pp)
                    for par in _job_variants(spec, m, tp, cp, ep, pp, dp, sp, mbs, schedules, zeros, recomputes,
                                             job, reject):
                        out.append(par)
    return ParallelCount(tuple(out), rejected)


def _job_variants(spec, m, tp, cp, ep, pp, dp, sp, mbs, schedules, zeros, recomputes, job, reject):
    base = spec.parallel
    if sp == "spec":
        sps = [base.sequence_parallel and tp > 1]
    elif sp == "on":
        sps = [tp > 1]
    elif sp == "off":
        sps = [False]
    else:
        sps = [False, True] if tp > 1 else [False]
    for sched in schedules:
        if sched == "interleaved":
            vss = tuple(job.virtual_stages) if job.virtual_stages else (max(base.virtual_stages, 2),)
        else:
            vss = (1,)
        for vs in vss:
            for b in mbs:
                for s in sps:
                    for z in zeros:
                        for rc in recomputes:
                            p = Parallel(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sequence_parallel=s, schedule=sched,
                                         virtual_stages=vs, zero=z, recompute=rc)
                            why = transformer_problem(replace(m, micro_batch=b), p)
                            if why:
                                reject(_reason(why))
                                continue
                            yield Parallelization(tp, pp, dp, s, b, m.global_batch // (b * dp * ep), cp, ep, sched,
                                                  vs, z, rc)


@functools.lru_cache(maxsize=1 << 16)
def _takes(left: int, cap: tuple[int, ...], stride: tuple[int, ...], d0: int) -> tuple:
    """Ways one axis of ``left`` NPUs takes dimensions from ``d0`` on: the whole remainder of each
    but the last, a factor of the last. Each: (dims, parts (dim, size, stride), cap after, stride after)."""
    out = []
    for d in range(d0, len(cap)):
        c = cap[d]
        if c == 1:
            continue
        if left % c == 0 and left > c:
            cap2, st2 = cap[:d] + (1,) + cap[d + 1:], stride[:d] + (stride[d] * c,) + stride[d + 1:]
            part = (d, c, stride[d])
            for dims, parts, cap3, st3 in _takes(left // c, cap2, st2, d + 1):
                out.append(((d,) + dims, (part,) + parts, cap3, st3))
        if c % left == 0:
            out.append(((d,), ((d, left, stride[d]),), cap[:d] + (c // left,) + cap[d + 1:],
                        stride[:d] + (stride[d] * left,) + stride[d + 1:]))
    return tuple(out)


class PlacementInfo(NamedTuple):
    """One layout with what the bounds and block dominance need, read off its parts."""

    order: tuple[tuple[str, tuple[int, ...]], ...]   # (axis, dims), innermost axis first
    participants: tuple[tuple[int, ...], ...]        # per axis of AXES: its size in each dimension
    p2p_far: tuple[bool, ...]                        # see p2p_far_dims


@functools.lru_cache(maxsize=4096)
def _distinct_layouts(shape: tuple[int, ...], degrees: tuple[int, ...]) -> tuple:
    """Distinct layouts of the axes on ``shape``, each as ((name, dims, parts), ...) in the order of
    the first axis order that gives it (orders in itertools.permutations order).

    Axis orders giving one layout are the orders in which every two axes sharing a dimension come
    inner (smaller stride) first; the first of them in permutation order is the greedy one. So an
    order is kept for a layout only if, whenever an axis x comes after a later-listed axis y, x
    shares a dimension with y or with an axis between them (otherwise x could have gone first):
    each layout comes out once, without comparing layouts."""
    axes = tuple((a, g) for a, g in zip(AXES, degrees) if g > 1)
    if not axes:
        return ((),)
    n = len(axes)
    out: list = []
    for perm in itertools.permutations(range(n)):
        def rec(j: int, cap: tuple, stride: tuple, chosen: tuple, dimsets: tuple) -> None:
            if j == n:
                if all(c == 1 for c in cap):
                    out.append(chosen)
                return
            x = perm[j]
            name, g = axes[x]
            for dims, parts, cap2, st2 in _takes(g, cap, stride, 0):
                ds = set(dims)
                union: set = set()
                ok = True
                for i in range(j - 1, -1, -1):
                    union |= dimsets[i]
                    if perm[i] > x and not ds & union:
                        ok = False
                        break
                if ok:
                    rec(j + 1, cap2, st2, chosen + ((name, dims, parts),), dimsets + (ds,))
        rec(0, shape, (1,) * len(shape), (), ())
    return tuple(out)


def placement_count(shape: tuple[int, ...], degrees: tuple[int, ...]) -> int:
    """How many distinct layouts; the rules never look at the axes' names, so the count depends
    only on the multiset of degrees (one enumeration serves tp4-pp8 and tp8-pp4)."""
    return len(_distinct_layouts(shape, tuple(sorted(degrees))))


@functools.lru_cache(maxsize=1 << 16)
def _axis_sizes(shape: tuple[int, ...], name: str, parts: tuple) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """An axis' size in each dimension and the dimensions where a Ring would take over 2 hops a
    step for it: for pp a send, for the other axes a step of the group's own ring (p2p_far_dims)."""
    p = [1] * len(shape)
    far = [False] * len(shape)
    for d, size, stride in parts:
        p[d] = size
        if name == "pp":
            # a send moves the coordinate by the stride, or wraps by stride x (size - 1)
            n = shape[d]
            far[d] = min(stride, n - stride) > 2 or min(stride * (size - 1), n - stride * (size - 1)) > 2
        else:
            far[d] = size > 1 and stride > 2
    return tuple(p), tuple(far)


@functools.lru_cache(maxsize=1024)
def placement_infos(shape: tuple[int, ...], degrees: tuple[int, ...]) -> tuple[PlacementInfo, ...]:
    """Distinct layouts of the axes (degrees in AXES order) on ``shape`` (see :func:`placements`),
    in the same order."""
    D = len(shape)
    ones, near = (1,) * D, (False,) * D
    out = []
    for chosen in _distinct_layouts(shape, degrees):
        sizes = dict.fromkeys(AXES, ones)
        far = near
        for name, _, parts in chosen:
            sizes[name], f = _axis_sizes(shape, name, parts)
            far = tuple(a or b for a, b in zip(far, f))
        out.append(PlacementInfo(tuple((name, dims) for name, dims, _ in chosen),
                                 tuple(sizes[a] for a in AXES), far))
    return tuple(out)


def placements(shape: Sequence[int], par: Parallelization) -> list[dict[str, list[int]]]:
    """Distinct layouts of ``par``'s axes on ``shape`` as generator ``placement`` mappings."""
    return [{a: list(dims) for a, dims in pi.order} for pi in placement_infos(tuple(shape), par.degree_tuple())]


def blocks_for(shape: Sequence[int], levels: Sequence[int], catalog, allowed: Sequence[str]) -> list[list[str]]:
    """Per dimension, the building blocks the catalog allows at its level and size."""
    return [[b for b in allowed if catalog.allows(lv, b, n)] for n, lv in zip(shape, levels)]


def undominated_blocks(options: Sequence[Sequence[str]], p2p_far: Sequence[bool],
                       ring_over_switch: bool = True) -> list[list[str]]:
    """Drop blocks another allowed block of the same dimension provably beats or ties.

    In the time and cost models a block acts only through hop counts and the switch price: a
    collective's ring step takes 1 hop on Ring and FullyConnected and 2 on a Switch; a send takes
    the ring distance on a Ring, 1 hop on FullyConnected and 2 on a Switch; only a Switch pays switch
    ports (and, in the power model, only a Switch draws switch power). Time is non-decreasing in hops,
    and cost, energy and TCO in price, power and time, so FullyConnected is never worse than
    Ring or Switch, and Ring never worse than Switch unless a send or a group's ring step crosses
    the dimension over more than 2 ring hops (``p2p_far``). With ``--algorithms auto`` (``ring_over_switch`` False) only the
    first rule holds: direct and halvingDoubling send to peers more than 2 hops away on a Ring."""
    out = []
    for opts, far in zip(options, p2p_far):
        keep = list(opts)
        if "FullyConnected" in keep:
            keep = ["FullyConnected"]
        elif "Ring" in keep and "Switch" in keep and not far and ring_over_switch:
            keep = ["Ring"]
        out.append(keep)
    return out


def p2p_far_dims(shape: Sequence[int], placement: dict, par: Parallelization) -> list[bool]:
    """Dimensions where a Ring may take more than 2 hops per step: a pipeline send crossing more
    than 2 hops of the ring, or a collective group whose members lie more than 2 NPUs apart on it
    (emit lays such a group out as its own ring, each step as many hops as the stride)."""
    far = [False] * len(shape)
    # an axis' part in a dimension moves a coordinate by its stride (a send also wraps by stride*(size-1))
    cap = list(shape)
    stride = [1] * len(shape)
    order = list(placement)
    for name in order:
        left = par.degrees()[name]
        for d in sorted(placement[name]):
            take = cap[d] if left % cap[d] == 0 else left
            if name == "pp":
                n = shape[d]
                for step in (stride[d], stride[d] * (take - 1)):
                    if min(step, n - step) > 2:
                        far[d] = True
            elif take > 1 and stride[d] > 2:
                far[d] = True
            stride[d] *= take
            cap[d] //= take
            left //= take
    return far


def spec_parallel(par: Parallelization, spec: TraceSpec) -> Parallel:
    return Parallel(tp=par.tp, pp=par.pp, dp=par.dp, sequence_parallel=par.sp,
                    grad_bucket_bytes=spec.parallel.grad_bucket_bytes, cp=par.cp, ep=par.ep, schedule=par.schedule,
                    virtual_stages=par.virtual_stages, zero=par.zero, recompute=par.recompute)
