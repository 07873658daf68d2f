"""Command-line number options: finite floats, optionally bounded (NaN and infinity are refused)."""

from __future__ import annotations

import math
from typing import Any

import click


def _bound_text(minimum: float | None, maximum: float | None, strict_min: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"> {minimum:g}" if strict_min else f">= {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


class FiniteFloat(click.ParamType):
    """A click option type for a finite float, optionally bounded; NaN and infinity are refused."""

    name = "float"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, strict_min: bool = False):
        self.minimum, self.maximum, self.strict_min = minimum, maximum, strict_min

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value):
            f = value
        else:
            try:
                f = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(f):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.minimum is not None and (f < self.minimum or (self.strict_min and f == self.minimum)):
            self.fail(f"{value!r} is not {_bound_text(self.minimum, None, self.strict_min)}", param, ctx)
        if self.maximum is not None and f > self.maximum:
            self.fail(f"{value!r} is not <= {self.maximum:g}", param, ctx)
        return f

    def __repr__(self) -> str:
        return "FiniteFloat"
