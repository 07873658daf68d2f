"""The fastest design whose energy (or TCO) stays under a cap: --energy-max, --tco-max and the
time-versus-energy and time-versus-TCO frontiers (docs/energy.md); and the affine multiplier of
T(B) (with its constant) that each energy objective has, which the cap shares.

Both have the form P(B) = M(B) x T(B) + const with M affine and positive. The constraint
P(B) <= cap is not convex in B, but its feasible set is (the image of a convex set of the
Charnes-Cooper variables under the perspective map), and the problem reduces to a scalar one.
Let tau(p) = min { T(B) : M(B) <= p } (the time objective with one more linear constraint: exact
and certified), and e = cap - const. A fastest feasible design B* has T(B*) = tau(M(B*)); the
powers p with p x tau(p) <= e form an interval [p_lo, p_hi] (it contains M(B) of every feasible
B, and any p past p_hi with p tau(p) <= e has tau(p) = tau(p_hi)), so T* = tau(p_hi). Bisection
on p between the least-product design's M and the fastest design's M keeps

- p_in: a design with M(B) <= p_in and p_in x T(B) <= e, hence feasible: T* <= T(B);
- p_out: where p_out x (certified lower bound of tau(p_out)) > e, so p_out > p_hi and
  T* >= tau(p_out) >= that lower bound.

A level where neither holds lies within the solve's gap of p_hi; the bisection then narrows
both sides of that band, below it for p_in and above it for p_out.

The answer is the design at p_in, its certificate the lower bound at p_out (or the fastest
design's, before any p_out is proven): a proven gap, like the other objectives'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import InfeasibleError, LibraError
from .constraints import LinearConstraint
from .energy import J_PER_NJ, Affine, energy_rate, peak_power
from .tco import tco_rate

MAX_BISECTIONS = 160


@dataclass(frozen=True)
class CapSolve:
    """What the bisection needs of one solve: the design, its time (ns), a proven lower bound on
    the optimum's time (ns) and whether the solver certified it."""

    bw_gbps: tuple[float, ...]
    time_ns: float
    time_lower_bound_ns: float
    success: bool
    result: object


def fastest_within(cap: float, const: float, scale: float, mult: Affine, what: str,
                   fastest: Callable[[tuple[LinearConstraint, ...]], CapSolve],
                   least: Callable[[], tuple[CapSolve, float, float]], rel_gap: float = 1e-9
                   ) -> tuple[CapSolve, float, str]:
    """(the fastest design under ``M(B) x T(B) x scale + const <= cap``, a proven lower bound on
    its time in ns, a message). ``fastest(extra)`` solves the time objective with extra linear
    constraints; ``least()`` gives the least-product design with its value and proven lower bound
    (in the cap's unit). ``what`` names the cap in messages (e.g. "--energy-max 3e5 J").

    Raises InfeasibleError when the cap is below the proven least value."""
    least_sol, least_val, least_lb = least()
    if least_lb > cap * (1 + 1e-12):
        raise InfeasibleError(f"{what} is infeasible: the least possible under these constraints is {least_lb:.9g}; "
                              f"raise it or relax constraints")
    e = (cap - const) / scale
    top = fastest(())
    if mult.at(top.bw_gbps) * top.time_ns <= e:
        return top, top.time_lower_bound_ns, f"the cap does not bind: {top.result.message}"
    if least_val > cap:
        raise InfeasibleError(f"{what} is within the certificate's tolerance of the least possible value "
                              f"({least_val:.9g} found, {least_lb:.9g} proven); raise it a little")
    p_in, best = mult.at(least_sol.bw_gbps), least_sol
    p_out, lower = mult.at(top.bw_gbps), top.time_lower_bound_ns
    band = None                  # (lowest, highest) level found undecided, between p_in and p_out
    for _ in range(MAX_BISECTIONS):
        if best.time_ns - lower <= rel_gap * best.time_ns:
            break
        sides = [(p_in, p_out)] if band is None else [(p_in, band[0]), (band[1], p_out)]
        lo, hi = max(sides, key=lambda s: s[1] / s[0] if s[0] > 0 else math.inf)
        if hi - lo <= 1e-15 * hi:
            break
        p = math.sqrt(lo * hi) if lo > 0 else 0.5 * (lo + hi)
        row = LinearConstraint(mult.per_gbps, "<=", p - mult.offset, f"{what} (power level {p:.9g})")
        s = fastest((row,))
        if p * s.time_ns <= e:
            p_in = p
            if s.time_ns < best.time_ns:
                best = s
        elif p * s.time_lower_bound_ns > e:
            p_out = p
            lower = max(lower, s.time_lower_bound_ns)
        else:
            # Within the solve's own gap of p_hi, neither side is proven at p: close in on that
            # band from below (a faster feasible design) and from above (a level proven past
            # p_hi), or the certificate would stay at the last level proven before it.
            band = (p, p) if band is None else (min(band[0], p), max(band[1], p))
        if band is not None and not p_in < band[0] <= band[1] < p_out:
            band = None      # a probe beside the band proved a level past it: the band is behind
    gap = (best.time_ns - lower) / best.time_ns if best.time_ns > 0 else 0.0
    done = "certified" if gap <= 10 * rel_gap else "not certified: the bisection stopped"
    return best, lower, f"{what}: {done}, relative gap {gap:.1e}"


def over_cap(workloads, net, cost, cons, power, tco, bw_gbps, time_ns: float) -> bool:
    """Whether a design of ``time_ns`` at ``bw_gbps`` breaks --energy-max or --tco-max."""
    energy = cons.energy_max_j is not None
    mult, const = objective_multiplier(workloads, net, power, "min-energy" if energy else "min-tco", cost, tco)
    scale = J_PER_NJ * (1.0 if energy else tco.run_steps)
    value = (mult[0] + sum(p * b for p, b in zip(mult[1], bw_gbps))) * time_ns * scale + const
    return value > (cons.energy_max_j if energy else cons.tco_max_usd) * (1 + 1e-9)


def capped_base(cons):
    """The constraints without the energy and TCO caps."""
    return replace(cons, energy_max_j=None, tco_max_usd=None)


def objective_multiplier(workloads, net, power, objective: str, cost=None, tco=None
                ) -> tuple[tuple[float, tuple[float, ...]] | None, float]:
    """(offset, per GB/s) the energy objectives multiply the time by (W; USD/s for min-tco), and
    the constant they add (J; USD per run for min-tco); (None, 0) for the others."""
    if objective not in ("min-energy", "perf-per-watt", "min-tco"):
        return None, 0.0
    if power is None:
        raise LibraError(f"--objective {objective} needs power figures: give --power FILE (e.g. network_configs/power.yml)")
    if objective == "min-tco":
        if tco is None:
            raise LibraError("--objective min-tco needs the electricity price and the cluster's lifetime: give "
                             "--electricity-usd-per-kwh and --lifetime-years")
        rate = tco_rate(workloads, net, cost, power, tco)
        return (rate.rate_usd_per_s.offset, rate.rate_usd_per_s.per_gbps), rate.const_usd * rate.run_steps
    if objective == "min-energy":
        rate = energy_rate(workloads, net, power)
        return (rate.rate_w.offset, rate.rate_w.per_gbps), rate.const_j
    peak = peak_power(net, power, "cluster")
    return (peak.offset, peak.per_gbps), 0.0


def capped(optimize: Callable, workloads, net, cost, objective: str, cons, *, model, rel_gap: float,
           max_path_rounds: int, power, tco):
    """--energy-max / --tco-max: the fastest design under the cap (energy_cap.py), or the least-energy
    (least-TCO) design checked against it."""
    if cons.energy_max_j is not None and cons.tco_max_usd is not None:
        raise LibraError("give --energy-max or --tco-max, not both")
    energy = cons.energy_max_j is not None
    cap, least_obj = (cons.energy_max_j, "min-energy") if energy else (cons.tco_max_usd, "min-tco")
    what = f"--energy-max {cap:g} J" if energy else f"--tco-max {cap:g} USD"
    if cap <= 0:
        raise LibraError(f"{what}: must be > 0")
    if objective not in ("perf", least_obj):
        raise LibraError(f"{what.split()[0]} applies to --objective perf and {least_obj}, not {objective}")
    base = capped_base(cons)
    kw = dict(model=model, rel_gap=rel_gap, max_path_rounds=max_path_rounds, power=power, tco=tco)
    if objective == least_obj:
        r = optimize(workloads, net, cost, objective=objective, constraints=base, baselines=False, **kw)
        if r.dual_bound > cap or r.fun > cap:
            raise InfeasibleError(f"{what} is infeasible: the least possible under these constraints is "
                                  f"{r.dual_bound:.9g}; raise it or relax constraints")
        return r
    mult, const = objective_multiplier(workloads, net, power, least_obj, cost, tco)
    scale = J_PER_NJ * (tco.run_steps if not energy else 1.0)

    def fastest(extra):
        # certified 10x tighter than asked, so the bisection's own gap can reach rel_gap
        r = optimize(workloads, net, cost, objective="perf", baselines=False,
                     constraints=replace(base, linear=base.linear + extra), **{**kw, "rel_gap": 0.1 * rel_gap})
        return CapSolve(r.bw_gbps, r.best.time_ns, r.dual_bound, r.success, r)

    def least():
        r = optimize(workloads, net, cost, objective=least_obj, constraints=base, baselines=False, **kw)
        return CapSolve(r.bw_gbps, r.best.time_ns, r.dual_bound, r.success, r), r.fun, r.dual_bound

    best, lower, msg = fastest_within(cap, const, scale, Affine(mult[0], mult[1]), what, fastest, least, rel_gap)
    gap = (best.time_ns - lower) / best.time_ns if best.time_ns > 0 else 0.0
    return replace(best.result, objective="perf", fun=best.time_ns, dual_bound=lower, rel_gap=gap,
                   success=gap <= 10 * rel_gap and best.success, message=msg)
