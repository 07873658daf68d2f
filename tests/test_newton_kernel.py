"""The compiled Newton system against the numpy one it replaces, on every row structure the
kernel treats apart: LIBRA's rows (one nonzero each, distinct columns per term), terms with two
rows on one column, dense rows, several classes, with and without equalities."""

import numpy as np
import pytest

from libra_astra.optimize import solver

from test_solver import problem

pytestmark = pytest.mark.skipif(solver._kernel is None, reason="the compiled Newton kernel is not built here")


def structured_problem(seed: int, rows: str, classes: int = 1, equality: bool = True):
    """Terms on 4 bandwidth coordinates plus one epigraph coordinate per class."""
    rng = np.random.default_rng(seed)
    R, K = 4, 9
    n = R + classes
    A, owner = [], []
    for k in range(K):
        if rows == "libra":                  # one row per used dimension
            dims = rng.choice(R, size=rng.integers(1, R + 1), replace=False)
            for j in sorted(dims):
                a = np.zeros(n)
                a[j] = rng.uniform(0.1, 2)
                A.append(a)
                owner.append(k)
        elif rows == "shared":               # one nonzero per row, two rows on one dimension
            j = rng.integers(R)
            for jj in (j, j, (j + 1) % R):
                a = np.zeros(n)
                a[jj] = rng.uniform(0.1, 2)
                A.append(a)
                owner.append(k)
        else:                                # dense rows
            for _ in range(rng.integers(1, 4)):
                a = np.zeros(n)
                a[:R] = rng.uniform(0.05, 1, R)
                A.append(a)
                owner.append(k)
    term_class = np.sort(rng.integers(classes, size=K))
    term_class[:classes] = np.arange(classes)          # every class has a term
    term_class.sort()
    G = [np.r_[-np.eye(R)[j], np.zeros(classes)] for j in range(R)]
    kw = dict(G=G, h=[-0.02] * R)
    if equality:
        kw.update(E=[np.r_[np.ones(R), np.zeros(classes)]], f=[1.0])
    else:
        kw["G"] = G + [np.r_[np.ones(R), np.zeros(classes)]]
        kw["h"] = [-0.02] * R + [1.0]
    return problem(np.array(A), np.r_[np.zeros(R), np.ones(classes)], g=rng.uniform(0, 0.3, len(A)),
                   owner=owner, term_class=term_class, class_z=R + np.arange(classes),
                   recip=np.r_[np.ones(R, bool), np.zeros(classes, bool)], **kw)


CASES = [(rows, classes, eq) for rows in ("libra", "shared", "dense") for classes in (1, 3) for eq in (True, False)]


@pytest.mark.parametrize("rows,classes,equality", CASES)
def test_compiled_system_gives_the_numpy_steps(rows, classes, equality):
    for seed in range(3):
        p = solver._unit_weights(structured_problem(seed, rows, classes, equality))
        lay = solver._Layout(p)
        x0 = solver._starting_point(p, [np.r_[np.full(4, 0.25), np.full(classes, 1e3)]])
        x, v, t = solver._v_start(p, lay, x0)
        y = solver._slacks(p, lay, x, v, t)
        rng = np.random.default_rng(seed)
        # a spread of multipliers, some rows nearly tight (d = u / y large): where cancellation bites
        u = rng.uniform(0.5, 2, y.shape[0]) / y * np.where(rng.random(y.shape[0]) < 0.2, 1e6, 1.0)
        ref, got = solver._Newton(p, lay, x, v, u, y), solver._kernel.System(lay.kernel, x, v, u, y)
        assert np.array_equal(ref.d, got.d) and np.array_equal(ref.xJ, got.xJ)
        for yc in (None, rng.normal(0, 1, y.shape[0]) / y):
            for with_dt in (True, False):
                a, b = ref.direction(yc, with_dt), got.direction(yc, with_dt)
                for part_a, part_b in zip(a, b):
                    if part_a is None:
                        assert part_b is None
                        continue
                    assert part_b.shape == part_a.shape
                    assert np.abs(part_b - part_a).max() <= 1e-8 * max(np.abs(part_a).max(), 1e-300)


@pytest.mark.parametrize("rows", ["libra", "shared", "dense"])
def test_compiled_and_numpy_solves_certify_the_same_optimum(rows, monkeypatch):
    for seed in range(4):
        p = structured_problem(seed, rows, classes=2)
        guess = [np.r_[np.full(4, 0.25), np.full(2, 1e3)]]
        fast = solver.solve(p, guess)
        monkeypatch.setattr(solver, "_kernel", None)
        slow = solver.solve(p, guess)
        monkeypatch.undo()
        assert fast.success and slow.success
        assert fast.fun == pytest.approx(slow.fun, rel=2e-9)
        assert max(fast.dual_bound, slow.dual_bound) <= min(fast.fun, slow.fun) * (1 + 1e-12)


def test_a_problem_without_bandwidth_rows_solves():
    # every row constant (a compute-only trace): no coordinate is used, the kernel has no columns
    p = problem(np.zeros((2, 3)), [0, 0, 1], g=[1.0, 2.0], owner=[0, 1], recip=[True, True, False],
                G=[[-1, 0, 0], [0, -1, 0]], h=[-0.1, -0.1], E=[[1, 1, 0]], f=[1.0])
    r = solver.solve(p, [np.array([0.5, 0.5, 10.0])])
    assert r.success and r.fun == pytest.approx(3.0, rel=1e-9)


def test_a_singular_system_falls_back_to_the_pseudo_inverse_like_numpy():
    # No weight on the linear rows and the hyperbolic constraints: nothing of the system touches
    # the bandwidth coordinates, its LU meets a zero pivot, and both systems take the pseudo-inverse.
    p = solver._unit_weights(structured_problem(0, "libra"))
    lay = solver._Layout(p)
    x, v, t = solver._v_start(p, lay, solver._starting_point(p, [np.r_[np.full(4, 0.25), 1e3]]))
    y = solver._slacks(p, lay, x, v, t)
    u = 1.0 / y
    u[lay.M + lay.Q:] = 0.0
    ref, got = solver._Newton(p, lay, x, v, u, y), solver._kernel.System(lay.kernel, x, v, u, y)
    yc = np.random.default_rng(5).normal(0, 1, y.shape[0]) / y
    for part_a, part_b in zip(ref.direction(yc), got.direction(yc)):
        assert np.isfinite(part_b).all()
        assert np.abs(part_b - part_a).max() <= 1e-8 * np.abs(part_a).max()
