"""The one check for numbers read from user files, with the one wording of its error."""

from __future__ import annotations

import math
from typing import Any

from ..errors import LibraError

INT64_MAX = (1 << 63) - 1


def check_number(value: Any, where: str, what: str = "", *, integer: bool = False, minimum: float | None = None,
                 strict: bool = False, finite: bool = False, note: str = "", maximum: float | None = None) -> float:
    """``value`` as a float (an int if ``integer``), or a LibraError "WHERE: WHAT must be ...".

    Booleans, non-finite values (also integers beyond float range), values below ``minimum``
    (or equal to it when ``strict``) and above ``maximum`` are refused. ``finite`` only changes
    the wording ("a finite number"); ``note`` follows the bound.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        try:
            f = float(value)
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(f)
    if ok and integer and not float(value).is_integer():
        ok = False
    if ok and minimum is not None and (value < minimum or (strict and value == minimum)):
        ok = False
    if ok and maximum is not None and value > maximum:
        ok = False
    if not ok:
        kind = "an integer" if integer else ("a finite number" if finite else "a number")
        bound = "" if minimum is None else (f" > {minimum:g}" if strict else f" >= {minimum:g}")
        if maximum is not None:
            bound += f"{' and' if bound else ''} <= {maximum:g}"
        head = f"{where}: {what}" if what else f"{where}:"
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise LibraError(f"{head} must be {kind}{bound}{note}, got {shown}")
    return int(value) if integer else float(value)


def check_int(value: Any, where: str, what: str, *, minimum: int | None = None, maximum: int | None = INT64_MAX) -> int:
    return int(check_number(value, where, what, integer=True, minimum=minimum, maximum=maximum))


def check_str(value: Any, where: str, what: str, *, optional: bool = False) -> str | None:
    """A string (or None when ``optional``), else a LibraError naming the item."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise LibraError(f"{where}: {what} must be a string, got {type(value).__name__}")
    return value
