"""Numbers from every source (command line, YAML, JSON, traces): finite, in range, of the right type.

One set of checks so that NaN, infinity, booleans, strings and out-of-range values are refused
the same way everywhere, with a one-line message naming the item.
"""

from __future__ import annotations

import math
from typing import Any

import click

from .errors import LibraError

INT64_MAX = (1 << 63) - 1


def _bound_text(minimum: float | None, maximum: float | None, strict_min: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"> {minimum:g}" if strict_min else f">= {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


def check_number(value: Any, where: str, what: str, *, minimum: float | None = None,
                 maximum: float | None = None, strict_min: bool = False, integer: bool = False) -> float | int:
    """``value`` as a float (or int with ``integer``) if it is a finite number in range; else LibraError.

    Booleans are refused (JSON ``true`` is not 1); integral floats are accepted as integers.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok and integer and isinstance(value, float) and not value.is_integer():
        ok = False
    if ok:
        try:
            f = float(value)
        except OverflowError:   # an int beyond float range
            ok = False
        else:
            if not math.isfinite(f):
                ok = False
            elif minimum is not None and (value < minimum or (strict_min and value == minimum)):
                ok = False
            elif maximum is not None and value > maximum:
                ok = False
    if not ok:
        kind = "a whole number" if integer else "a finite number"
        bound = _bound_text(minimum, maximum, strict_min)
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise LibraError(f"{where}: {what} must be {kind}{' ' + bound if bound else ''}, got {shown}")
    return int(value) if integer else float(value)


def check_int(value: Any, where: str, what: str, *, minimum: int | None = None, maximum: int | None = INT64_MAX) -> int:
    return int(check_number(value, where, what, minimum=minimum, maximum=maximum, integer=True))


def check_str(value: Any, where: str, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise LibraError(f"{where}: {what} must be a string, got {type(value).__name__}")
    return value


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
