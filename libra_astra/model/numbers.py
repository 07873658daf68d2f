"""The one check for numbers read from user files, with the one wording of its error."""

from __future__ import annotations

import math
from typing import Any

from ..errors import LibraError


def check_number(value: Any, where: str, what: str = "", *, integer: bool = False, minimum: float | None = None,
                 strict: bool = False, finite: bool = False, note: str = "") -> float:
    """``value`` as a float (an int if ``integer``), or a LibraError "WHERE: WHAT must be ...".

    Booleans, non-finite values and values below ``minimum`` (or equal to it when ``strict``) are
    refused. ``finite`` only changes the wording ("a finite number"); ``note`` follows the bound.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer and not float(value).is_integer():
        ok = False
    if ok and not math.isfinite(value):
        ok = False
    if ok and minimum is not None and (value < minimum or (strict and value == minimum)):
        ok = False
    if not ok:
        kind = "an integer" if integer else ("a finite number" if finite else "a number")
        bound = "" if minimum is None else (f" > {minimum:g}" if strict else f" >= {minimum:g}")
        head = f"{where}: {what}" if what else f"{where}:"
        raise LibraError(f"{head} must be {kind}{bound}{note}, got {value!r}")
    return int(value) if integer else float(value)
