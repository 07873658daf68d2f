"""How numbers look on the terminal: times, bytes, money, rank ranges and tables."""

from __future__ import annotations

from ..spans import rank_spans


def fmt_time(ns: float, digits: int = 4) -> str:
    """ns in the largest unit below it (s, ms, us) with ``digits`` decimals; plain ns keep ``digits - 3``."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.{digits}f} {unit}"
    return f"{ns:.{max(digits - 3, 0)}f} ns"


def fmt_ms(ns: float) -> str:
    """ns as milliseconds with six decimals (simulated times compared by eye)."""
    return f"{ns / 1e6:.6f} ms"


def fmt_usd(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"


def fmt_bytes(x: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {unit}"
    return f"{x:.0f} B"


fmt_ranges = rank_spans     # 0,1,2,3,8 -> '0-3,8'


def table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """Rows padded to aligned columns; columns in ``right`` are right-aligned below the header."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        cells = [r[c].rjust(widths[c]) if c in right and k else r[c].ljust(widths[c]) for c in range(len(r))]
        out.append("  " + "  ".join(cells).rstrip())
    return out
