"""A better design than the bound's minimizer, where the time model's rows only bound the time.

Under a user's system settings, a localBWAware all-reduce over shared queues has rows that bound
its time from below (timing/system_flow.py): the solver's optimum of the bound is a proven lower
bound on the best objective, and its minimizer a good design whose replayed time is above it.
From there a direct search (Nelder-Mead over the directions the equality constraints leave free,
every point checked against every constraint) looks for a design with a lower replayed objective.
It proves nothing itself: the lower bound stays the certificate, and the result says how far the
design found can be from the optimum.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from scipy.linalg import null_space
from scipy.optimize import minimize

MAX_EVALUATIONS = 240


def refine(evaluate: Callable[[Sequence[float]], object], value: Callable[[object], float], bw0: Sequence[float],
           equalities: np.ndarray, max_evaluations: int = MAX_EVALUATIONS):
    """(best evaluation, its objective value) from ``bw0``: ``evaluate(bw)`` gives an Evaluation,
    ``value(evaluation)`` its objective (inf where it breaks a constraint); ``equalities`` (rows E
    of E B = f) fix the directions that must not move."""
    bw0 = np.asarray(bw0, dtype=float)
    first = evaluate(bw0)
    best = [first, value(first)]
    basis = null_space(equalities) if equalities.size else np.eye(bw0.shape[0])
    if not basis.shape[1] or not math.isfinite(best[1]):
        return best[0], best[1]
    step = 0.05 * float(np.mean(bw0))

    def f(z: np.ndarray) -> float:
        bw = bw0 + step * (basis @ z)
        if np.any(bw <= 0):
            return math.inf
        ev = evaluate(bw)
        v = value(ev)
        if v < best[1]:
            best[0], best[1] = ev, v
        return v

    minimize(f, np.zeros(basis.shape[1]), method="Nelder-Mead",
             options={"maxfev": max_evaluations, "xatol": 1e-7, "fatol": 1e-12 * best[1]})
    return best[0], best[1]


def bounded_message(rel: float) -> str:
    """The result's message where the rows only bound the time and the design comes from refine."""
    what = ("a localBWAware all-reduce over shared queues, or of double binary trees with several active "
            "chunks and more chunks than that,")
    if math.isfinite(rel):
        return (f"not certified: proven within {rel:.3%} of the optimum (the time of {what} is bounded from below "
                "by the model's rows; this design is the best a search on ASTRA-sim's queue replay found from the "
                "bound's optimum)")
    return ("not certified: no design found both meets the constraints and ends under ASTRA-sim's queue replay "
            f"(the model's rows bound the time of {what} from below)")
