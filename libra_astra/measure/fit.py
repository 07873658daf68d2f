"""Non-negative linear fits of measured times, their quality and held-out errors.

Two losses. ``robust`` (the default): times of collectives span orders of magnitude (a few
microseconds to milliseconds), so the fit minimizes *relative* residuals, and one outlier (a
transfer still holding some wait) must not move it, so the weights are Huber's, iterated (IRLS)
with the residuals' median absolute deviation as the scale: the network's typical speed.
``total``: least squares on the times themselves, so the fitted times add up to about what the
measured ones did, slow instances included (a network whose speed varies from one collective to
the next, as gloo on a loaded CPU). Coefficients are latencies and inverse bandwidths: never
negative (NNLS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

HUBER_K = 1.345
ITERATIONS = 30
FITS = ("robust", "total")


def fit_nnls(x: np.ndarray, y: np.ndarray, loss: str = "robust") -> np.ndarray:
    """Coefficients >= 0 of ``y ~ x @ c`` under ``loss`` (module docstring)."""
    if loss == "total":
        return nnls(np.asarray(x, dtype=float), np.asarray(y, dtype=float))[0]
    return robust_nnls(x, y)


def robust_nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimizing Huber's loss of the relative residuals (y - x @ c) / y."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = 1.0 / y
    coef = np.zeros(x.shape[1])
    for _ in range(ITERATIONS):
        coef, _ = nnls(x * w[:, None], y * w)
        rel = (y - x @ coef) / y
        scale = 1.4826 * float(np.median(np.abs(rel - np.median(rel))))
        if scale <= 1e-12:
            break
        k = HUBER_K * scale
        w = np.minimum(1.0, k / np.maximum(np.abs(rel), 1e-300)) / y
    return coef


@dataclass(frozen=True)
class FitQuality:
    """How well a fit reproduces its points and points it did not see."""

    points: int
    relative_residuals: tuple[float, ...]      # (fit - measured) / measured, per point
    r2: float
    held_out: tuple[float, ...]                # the same, each point predicted by a fit without it

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.relative_residuals))) if self.points else 0.0

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.relative_residuals))) if self.points else 0.0

    @property
    def held_out_median_abs_error(self) -> float | None:
        return float(np.median(np.abs(self.held_out))) if self.held_out else None


def quality(x: np.ndarray, y: np.ndarray, coef: np.ndarray, held_out: bool = True, loss: str = "robust") -> FitQuality:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    pred = x @ coef
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    loo = []
    # a held-out point needs at least as many other points as coefficients
    if held_out and len(y) > x.shape[1]:
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            c = fit_nnls(x[keep], y[keep], loss)
            loo.append(float((x[i] @ c - y[i]) / y[i]))
    return FitQuality(len(y), tuple(float(v) for v in (pred - y) / y), r2, tuple(loo))
