"""Pipeline schedules: the order in which one stage runs its forward and backward passes.

Each item is ("F" | "B", chunk, micro-batch). M micro-batches, p stages, v model chunks per stage
(virtual stages; chunk c of stage s holds the (c p + s)-th slice of L / (p v) layers).

- gpipe: all M forwards, then all M backwards, in micro-batch order.
- 1f1b: stage s runs w = min(p - s - 1, M) warm-up forwards, then alternates one forward and one
  backward, then runs the w remaining backwards (Narayanan et al. 2021, PipeDream-Flush).
- interleaved: Megatron-LM's interleaved 1F1B. The k-th forward of a stage runs chunk
  (k // p) mod v of micro-batch (k // (p v)) p + k mod p; the k-th backward the same micro-batch of
  chunk v - 1 - (k // p) mod v; w = min(2 (p - s - 1) + (v - 1) p, M v) warm-up forwards, then
  1F1B, then the remaining backwards. Needs M to be a multiple of p.
"""

from __future__ import annotations


def _interleaved(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    c = (k // p) % v
    mb = (k // (p * v)) * p + k % p
    return (c if forward else v - 1 - c), mb


def stage_order(schedule: str, p: int, stage: int, mbs: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The passes of ``stage`` in the order it runs them (see the module docstring)."""
    if schedule == "gpipe":
        return [("F", 0, mb) for mb in range(mbs)] + [("B", 0, mb) for mb in range(mbs)]
    if schedule == "1f1b":
        fwd = [(0, mb) for mb in range(mbs)]
        bwd = list(fwd)
        warm = min(p - stage - 1, mbs)
    else:
        total = mbs * v
        fwd = [_interleaved(k, p, v, True) for k in range(total)]
        bwd = [_interleaved(k, p, v, False) for k in range(total)]
        warm = min(2 * (p - stage - 1) + (v - 1) * p, total)
    out = [("F", c, mb) for c, mb in fwd[:warm]]
    for i in range(len(fwd) - warm):
        out.append(("F",) + fwd[warm + i])
        out.append(("B",) + bwd[i])
    out += [("B",) + x for x in bwd[len(fwd) - warm:]]
    return out


def in_flight(schedule: str, p: int, mbs: int, v: int = 1) -> float:
    """Largest number of micro-batches whose activations a stage holds at once, in units of the
    stage's L / p layers (the first stage's count): M for gpipe; min(p, M) for 1f1b; for
    interleaved (p + (p - 1) / v) chunks' worth, i.e. Korthikanti et al.'s L (1 + (p - 1) / (p v))
    in units of L / p, capped at M."""
    if schedule == "gpipe":
        return float(mbs)
    if schedule == "1f1b":
        return float(min(p, mbs))
    warm = min(2 * (p - 1) + (v - 1) * p, mbs * v)
    return min(warm + 1, mbs * v) / v
