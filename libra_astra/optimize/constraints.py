"""Linear constraints on bandwidths, written as text: ``bw[0] >= bw[1]``, ``bw[2] + bw[3] == 200``.

Grammar (parsed by hand, never evaluated)::

    constraint := expr OP expr          OP: <=  >=  ==  =
    expr       := term (('+' | '-') term)*
    term       := [number '*'] bw[DIM] | number | number '*' number
    DIM        := a dimension index or name

Both sides may hold bandwidths and numbers; ``2*bw[pod] - bw[node] <= 10`` is fine. Bandwidths
are in GB/s per NPU. Strict ``<`` and ``>`` are refused: over a closed set the optimum exists and
lies where the non-strict constraint binds, so ``<`` would either change nothing or have no
minimizer; the message names the non-strict form to write instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import LibraError
from ..files import read_text
from ..model.network import Network

# Far beyond any relation between bandwidths, and leaves the optimizer's scaling (by the mean
# bandwidth and the time unit) finite: 1e308 passed as finite and became inf in the scaled rows.
_MAX_MAGNITUDE = 1e100

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|"
                    r"(?P<bw>bw\s*\[\s*(?P<dim>[A-Za-z_][\w-]*|\d+)\s*\])|(?P<op><=|>=|==|=|<|>)|(?P<sym>[-+*]))")


@dataclass(frozen=True)
class LinearConstraint:
    """sum_d coeffs[d] * B_d  (op)  rhs, with op one of '<=', '>=', '=='."""

    coeffs: tuple[float, ...]
    op: str
    rhs: float
    text: str = ""

    def satisfied(self, bw: Sequence[float], tol: float = 1e-6) -> bool:
        lhs = sum(c * b for c, b in zip(self.coeffs, bw))
        scale = max(1.0, abs(self.rhs), sum(abs(c * b) for c, b in zip(self.coeffs, bw)))
        if self.op == "<=":
            return lhs <= self.rhs + tol * scale
        if self.op == ">=":
            return lhs >= self.rhs - tol * scale
        return abs(lhs - self.rhs) <= tol * scale


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise LibraError(f"{where}: cannot read {text[pos:].strip()!r} in constraint {text!r}; "
                             "write e.g. 'bw[0] >= bw[1]' or 'bw[0] + bw[1] == 200'")
        if m.group("bw"):
            out.append(("bw", m.group("dim")))
        elif m.group("num"):
            out.append(("num", m.group("num")))
        elif m.group("op"):
            out.append(("op", m.group("op")))
        else:
            out.append(("sym", m.group("sym")))
        pos = m.end()
    return out


def _side(tokens: list[tuple[str, str]], net: Network, text: str, where: str) -> tuple[list[float], float]:
    coeffs = [0.0] * net.num_dims
    const = 0.0
    i, sign, expect_term = 0, 1.0, True
    if not tokens:
        raise LibraError(f"{where}: constraint {text!r} has an empty side")
    while i < len(tokens):
        kind, val = tokens[i]
        if expect_term:
            if kind == "sym" and val in "+-":
                sign = sign * (-1.0 if val == "-" else 1.0)
                i += 1
                continue
            factor = 1.0
            if kind == "num":
                factor = float(val)
                i += 1
                if i < len(tokens) and tokens[i] == ("sym", "*"):
                    i += 1
                    if i >= len(tokens):
                        break
                    kind, val = tokens[i]
                    if kind == "num":
                        const += sign * factor * float(val)
                        i += 1
                        sign, expect_term = 1.0, False
                        continue
                else:
                    const += sign * factor
                    sign, expect_term = 1.0, False
                    continue
            if kind != "bw":
                raise LibraError(f"{where}: expected a number or bw[...] in constraint {text!r}, found {val!r}")
            try:
                d = net.dim_index(val)
            except LibraError as e:
                raise LibraError(f"{where}: constraint {text!r}: {str(e).split(': ', 1)[1]}") from None
            i += 1
            if i < len(tokens) and tokens[i] == ("sym", "*"):
                if i + 1 < len(tokens) and tokens[i + 1][0] == "num":
                    factor *= float(tokens[i + 1][1])
                    i += 2
                else:
                    raise LibraError(f"{where}: constraint {text!r} is not linear (bw times bw); only numbers may multiply bw[...]")
            coeffs[d] += sign * factor
            sign, expect_term = 1.0, False
        else:
            if kind != "sym" or val not in "+-":
                raise LibraError(f"{where}: expected '+' or '-' before {val!r} in constraint {text!r}")
            sign = -1.0 if val == "-" else 1.0
            expect_term = True
            i += 1
    if expect_term:
        raise LibraError(f"{where}: constraint {text!r} ends in an operator; complete the expression")
    return coeffs, const


def parse_constraint(text: str, net: Network, where: str = "--constraint") -> LinearConstraint:
    """Parse one constraint; raises LibraError naming ``where`` and the text on any mistake."""
    toks = _tokens(text, where)
    ops = [i for i, (k, _) in enumerate(toks) if k == "op"]
    if len(ops) != 1:
        raise LibraError(f"{where}: constraint {text!r} needs exactly one of <=, >=, == (found {len(ops)})")
    k = ops[0]
    op = toks[k][1]
    if op in ("<", ">"):
        fixed = text.strip().replace(op, op + "=", 1)
        raise LibraError(f"{where}: constraint {text.strip()!r} is strict ({op!r}), which the optimizer cannot "
                         f"represent; write {fixed!r}")
    lc, lk = _side(toks[:k], net, text, where)
    rc, rk = _side(toks[k + 1:], net, text, where)
    coeffs = tuple(a - b for a, b in zip(lc, rc))
    rhs = rk - lk
    if not all(abs(x) <= _MAX_MAGNITUDE for x in coeffs + (rhs,)):     # NaN fails too
        raise LibraError(f"{where}: constraint {text!r} has a number too large to use; write values up to "
                         f"{_MAX_MAGNITUDE:g}")
    if all(c == 0 for c in coeffs):
        raise LibraError(f"{where}: constraint {text!r} names no bandwidth; write e.g. 'bw[0] <= 100'")
    op = {"=": "==", "==": "=="}.get(op, op)
    return LinearConstraint(coeffs, op, rhs, text.strip())


def parse_constraints(texts: Iterable[str], net: Network, where: str = "--constraint") -> tuple[LinearConstraint, ...]:
    return tuple(parse_constraint(t, net, where) for t in texts)


def load_constraints_file(path: str | Path, net: Network) -> tuple[LinearConstraint, ...]:
    """One constraint per line; blank lines and text after '#' are ignored."""
    p = Path(path)
    lines = read_text(p, "constraints").splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(parse_constraint(line, net, f"{p}:{n}"))
    return tuple(out)
