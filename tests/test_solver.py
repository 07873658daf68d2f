"""The convex solver on hand-built problems: closed-form optima, a sound certificate, its internals."""

import math

import numpy as np
import pytest

from libra_astra.optimize import solver
from libra_astra.errors import LibraError
from libra_astra.optimize.solver import ConvexProblem, solve, term_values, tight_point, unbounded_coordinates


def problem(A, c, *, g=None, owner=None, w=None, term_class=None, class_z=None, class_e=None, recip=None,
            G=None, h=None, E=None, f=None):
    """A problem on recip coordinates 0..R-1 plus epigraph coordinates after them."""
    A = np.asarray(A, dtype=float)
    M, n = A.shape
    owner = np.zeros(M, dtype=int) if owner is None else np.asarray(owner)
    K = int(owner.max()) + 1
    term_class = np.zeros(K, dtype=int) if term_class is None else np.asarray(term_class)
    Q = int(term_class.max()) + 1
    if recip is None:
        recip = A.max(axis=0) > 0
    G = np.zeros((0, n)) if G is None else np.asarray(G, dtype=float)
    E = np.zeros((0, n)) if E is None else np.asarray(E, dtype=float)
    return ConvexProblem(
        c=np.asarray(c, dtype=float), recip=np.asarray(recip, dtype=bool), A=A,
        g=np.zeros(M) if g is None else np.asarray(g, dtype=float), owner=owner,
        w=np.ones(K) if w is None else np.asarray(w, dtype=float), term_class=term_class,
        class_z=np.full(Q, n - 1) if class_z is None else np.asarray(class_z),
        class_e=np.zeros(Q) if class_e is None else np.asarray(class_e, dtype=float),
        G=G, h=np.zeros(G.shape[0]) if h is None else np.asarray(h, dtype=float),
        E=E, f=np.zeros(E.shape[0]) if f is None else np.asarray(f, dtype=float))


NONNEG2 = dict(G=[[-1, 0, 0], [0, -1, 0]], h=[0, 0])
SUM1 = dict(E=[[1, 1, 0]], f=[1])


def check_certificate(r, optimum=None):
    assert r.success and r.status == 0
    assert r.dual_bound <= r.fun
    assert r.gap == pytest.approx(r.fun - r.dual_bound)
    assert r.gap <= 1e-9 * abs(r.fun)
    if optimum is not None:
        assert r.dual_bound <= optimum * (1 + 1e-12)
        assert r.fun == pytest.approx(optimum, rel=1e-9)


def test_sum_of_reciprocals_closed_form():
    # min t, t >= 4/x0 + 1/x1, x0 + x1 = 1: x_j ~ sqrt(a_j), optimum (sqrt 4 + sqrt 1)^2 = 9.
    r = solve(problem([[4, 1, 0]], [0, 0, 1], **NONNEG2, **SUM1), [np.array([0.5, 0.5, 100.0])])
    check_certificate(r, 9.0)
    assert r.x[:2] == pytest.approx([2 / 3, 1 / 3], rel=1e-6)


def test_max_of_reciprocals_closed_form():
    # Rows of one term: t >= 4/x0 and t >= 1/x1: equal times at the optimum, x0 = 0.8, t = 5.
    r = solve(problem([[4, 0, 0], [0, 1, 0]], [0, 0, 1], owner=[0, 0], **NONNEG2, **SUM1), [np.array([0.5, 0.5, 9.0])])
    check_certificate(r, 5.0)
    assert r.x == pytest.approx([0.8, 0.2, 5.0], rel=1e-6)


def test_weights_and_constants_closed_form():
    # z >= 2 t0 + 3 t1 + 7, t0 >= 1/x0 + 0.5, t1 >= 2/x1: 2/x0 + 6/x1 + 8 -> (sqrt 2 + sqrt 6)^2 + 8.
    p = problem([[1, 0, 0], [0, 2, 0]], [0, 0, 1], g=[0.5, 0], owner=[0, 1], w=[2, 3], term_class=[0, 0],
                class_e=[7], **NONNEG2, **SUM1)
    r = solve(p, [np.array([0.5, 0.5, 100.0])])
    check_certificate(r, (math.sqrt(2) + math.sqrt(6)) ** 2 + 8)


def test_classes_sharing_an_epigraph_coordinate_take_the_max():
    # Two rank classes of one workload: z >= 4/x0 and z >= 1/x1.
    p = problem([[4, 0, 0], [0, 1, 0]], [0, 0, 1], owner=[0, 1], term_class=[0, 1], class_z=[2, 2], **NONNEG2, **SUM1)
    r = solve(p, [np.array([0.5, 0.5, 9.0])])
    check_certificate(r, 5.0)


def test_active_bound():
    # As the first problem with x0 <= 0.5: 4/0.5 + 1/0.5 = 10.
    p = problem([[4, 1, 0]], [0, 0, 1], G=[[-1, 0, 0], [0, -1, 0], [1, 0, 0]], h=[0, 0, 0.5], **SUM1)
    r = solve(p, [np.array([0.25, 0.75, 100.0])])
    check_certificate(r, 10.0)
    assert r.x[0] == pytest.approx(0.5, rel=1e-8)


def test_rescaled_weights_give_the_same_optimum():
    # Merged terms arrive with huge weights and tiny rows; the optimum must not notice.
    base = problem([[4, 0, 0], [0, 1, 0], [1, 1, 0]], [0, 0, 1], g=[0, 0, 0.5], owner=[0, 0, 1], term_class=[0, 0],
                   **NONNEG2, **SUM1)
    r0 = solve(base, [np.array([0.5, 0.5, 99.0])])
    big = np.array([1e9, 3e-4])
    p = ConvexProblem(base.c, base.recip, base.A / big[base.owner][:, None], base.g / big[base.owner], base.owner,
                      big, base.term_class, base.class_z, base.class_e, base.G, base.h, base.E, base.f)
    r1 = solve(p, [np.array([0.5, 0.5, 99.0])])
    check_certificate(r0)
    check_certificate(r1)
    assert r1.fun == pytest.approx(r0.fun, rel=1e-9)


def random_problem(seed, n_rec=3, K=6, inequality=False):
    """Terms with 1-3 rows on n_rec coordinates, total <= or == 1, a few bounds."""
    rng = np.random.default_rng(seed)
    n = n_rec + 1
    rows, owner = [], []
    for k in range(K):
        for _ in range(rng.integers(1, 4)):
            a = np.zeros(n)
            a[:n_rec] = rng.uniform(0, 1, n_rec) * (rng.random(n_rec) < 0.7)
            a[rng.integers(n_rec)] += 0.1
            rows.append(a)
            owner.append(k)
    G = [np.r_[-np.eye(n_rec)[j], 0] for j in range(n_rec)]
    h = [0.0] * n_rec
    G.append(np.r_[-np.eye(n_rec)[0], 0])       # x0 >= 0.05
    h.append(-0.05)
    kw = dict(G=G, h=h)
    if inequality:
        G.append(np.r_[np.ones(n_rec), 0])
        h.append(1.0)
    else:
        kw.update(E=[np.r_[np.ones(n_rec), 0]], f=[1.0])
    return problem(np.array(rows), np.r_[np.zeros(n_rec), 1], g=rng.uniform(0, 0.2, len(rows)), owner=owner,
                   w=rng.uniform(0.5, 2, K), term_class=np.zeros(K, dtype=int), **kw)


@pytest.mark.parametrize("seed, inequality", [(0, False), (1, False), (2, True), (3, True), (4, False)])
def test_certificate_is_a_lower_bound_on_every_feasible_point(seed, inequality):
    p = random_problem(seed, inequality=inequality)
    r = solve(p, [np.r_[np.full(3, 0.99 / 3), 1e3]])
    check_certificate(r)
    # Objective at random feasible points (epigraph coordinate set tight): never below the bound,
    # and the solver's point is at least as good as all of them.
    rng = np.random.default_rng(100 + seed)
    pts = rng.dirichlet(np.ones(3), 4000) * (rng.uniform(0.9, 1, (4000, 1)) if inequality else 1)
    pts = pts[pts[:, 0] >= 0.05]
    vals = np.array([tight_point(p, np.r_[x, 0.0])[3] for x in pts])
    assert vals.min() >= r.dual_bound
    assert vals.min() >= r.fun - 1e-12


def test_not_converged_still_reports_a_sound_bound():
    p = random_problem(0)
    r = solve(p, [np.r_[np.full(3, 1 / 3), 1e3]], max_newton=2)
    assert not r.success and r.status == 1 and r.newton_steps == 2
    assert r.dual_bound <= r.fun
    full = solve(p, [np.r_[np.full(3, 1 / 3), 1e3]])
    assert r.fun >= full.fun - 1e-12 and r.dual_bound <= full.fun


def test_barrier_fallback_certifies_the_same_optimum():
    p = solver._unit_weights(random_problem(1))
    lay = solver._Layout(p)
    run = solver._barrier(p, lay, solver._starting_point(p, [np.r_[np.full(3, 1 / 3), 1e3]]), 1e-9, 400)
    r = solve(p, [np.r_[np.full(3, 1 / 3), 1e3]])
    assert run.status == 0 and run.dual <= run.primal
    assert run.primal == pytest.approx(r.fun, rel=1e-8)


NEWTONS = [pytest.param(solver._Newton, id="numpy"),
           pytest.param(lambda p, lay, *it: solver._kernel.System(lay.kernel, *it), id="compiled",
                        marks=pytest.mark.skipif(solver._kernel is None,
                                                 reason="the compiled Newton kernel is not built here"))]


@pytest.mark.parametrize("newton", NEWTONS)
def test_newton_step_matches_a_dense_kkt_solve(newton):
    p = solver._unit_weights(random_problem(2, inequality=False))
    lay = solver._Layout(p)
    x, v, t = solver._v_start(p, lay, solver._starting_point(p, [np.r_[np.full(3, 1 / 3), 1e3]]))
    y = solver._slacks(p, lay, x, v, t)
    rng = np.random.default_rng(7)
    u = rng.uniform(0.5, 2, y.shape[0]) / y
    yc = rng.uniform(0.5, 2, y.shape[0]) / y
    n, nv, K = lay.n, lay.nv, lay.K
    N = n + nv
    V = np.concatenate([x, v, t])
    # Jacobian of the slacks by central differences (they are at most quadratic: exact up to round-off).
    jac = np.zeros((y.shape[0], V.shape[0]))
    for i in range(V.shape[0]):
        e = np.zeros(V.shape[0])
        e[i] = 1e-6 * max(1.0, abs(V[i]))
        jac[:, i] = (solver._slacks(p, lay, *np.split(V + e, [n, N]))
                     - solver._slacks(p, lay, *np.split(V - e, [n, N]))) / (2 * e[i])
    H = jac.T @ ((u / y)[:, None] * jac)
    kappa = u[lay.o_phi:]
    for k, j in enumerate(lay.J):              # - kappa * Hessian of (x_j v_j - 1)
        H[j, n + k] -= kappa[k]
        H[n + k, j] -= kappa[k]
    grad = np.concatenate([p.c, np.zeros(nv + K)]) - jac.T @ yc
    EV = np.hstack([p.E, np.zeros((p.E.shape[0], nv + K))])
    r = EV.shape[0]
    kkt = np.block([[H, EV.T], [EV, np.zeros((r, r))]])
    ref = np.linalg.solve(kkt, np.concatenate([-grad, np.zeros(r)]))[:V.shape[0]]
    dx, dv, dt, dy = newton(p, lay, x, v, u, y).direction(yc)
    step = np.concatenate([dx, dv, dt])
    assert np.abs(step - ref).max() <= 1e-7 * np.abs(ref).max()
    assert np.abs(dy - jac @ step).max() <= 1e-7 * np.abs(dy).max()


def test_hyperbolic_step_is_the_first_exit_from_x_v_ge_1():
    rng = np.random.default_rng(3)
    for _ in range(200):
        x, v = rng.uniform(0.2, 3, 2)
        v = max(v, 1.0 / x * rng.uniform(1.0001, 2))
        dx, dv = rng.normal(0, 2, 2)
        a = solver._hyp_step(np.array([x]), np.array([v]), np.array([dx]), np.array([dv]))
        grid = np.linspace(0, min(a, 50.0), 2001)[1:-1]
        xs, vs = x + grid * dx, v + grid * dv
        assert np.all((xs * vs > 1) & (xs > 0) & (vs > 0))           # feasible before a
        if math.isfinite(a):
            xe, ve = x + a * dx, v + a * dv
            assert min(xe * ve - 1, xe, ve) == pytest.approx(0, abs=1e-9)


def test_infeasible_and_interior_free_constraints():
    p = problem([[4, 1, 0]], [0, 0, 1], G=[[-1, 0, 0], [0, -1, 0], [-1, 0, 0]], h=[0, 0, -2], **SUM1)
    with pytest.raises(LibraError) as e:
        solve(p)
    assert str(e.value) == "the constraints are infeasible: no bandwidth split satisfies all of them; relax one"
    p = problem([[4, 1, 0]], [0, 0, 1], G=[[-1, 0, 0], [0, -1, 0], [1, 0, 0], [-1, 0, 0]], h=[0, 0, 0.5, -0.5], **SUM1)
    with pytest.raises(LibraError) as e:
        solve(p)
    assert str(e.value) == ("the constraints leave no strictly feasible point (an inequality always holds with "
                            "equality, or a bandwidth is forced to 0); write such pairs as one equality")
    # A used coordinate forced to 0 by the equalities has no interior either.
    p = problem([[4, 1, 0]], [0, 0, 1], **NONNEG2, E=[[1, 1, 0], [0, 1, 0]], f=[1, 0])
    with pytest.raises(LibraError, match="no strictly feasible point"):
        solve(p)


def test_unused_coordinate_pinned_at_zero():
    # x2 is in no row and the equalities fix it at 0 (as the optimizer writes a bound that always
    # holds with equality): still solvable, times stay finite.
    p = problem([[4, 1, 0, 0]], [0, 0, 0, 1], recip=[True, True, True, False],
                G=[[-1, 0, 0, 0], [0, -1, 0, 0]], h=[0, 0], E=[[1, 1, 1, 0], [0, 0, 1, 0]], f=[1, 0])
    r = solve(p)
    check_certificate(r, 9.0)
    assert abs(r.x[2]) <= 1e-12
    assert term_values(p, np.array([0.5, 0.5, 0.0, 0.0])) == pytest.approx([10.0])


def test_unbounded_coordinates():
    p = problem([[4, 1, 0]], [0, 0, 1], **NONNEG2)
    assert unbounded_coordinates(p, np.array([0, 1])) == [0, 1]
    p = problem([[4, 1, 0]], [0, 0, 1], **NONNEG2, E=[[1, -1, 0]], f=[0])       # x0 = x1, both free
    assert unbounded_coordinates(p, np.array([0, 1])) == [0, 1]
    p = problem([[4, 1, 0]], [0, 0, 1], G=[[-1, 0, 0], [0, -1, 0], [1, 0, 0]], h=[0, 0, 5])
    assert unbounded_coordinates(p, np.array([0, 1])) == [1]
    assert unbounded_coordinates(problem([[4, 1, 0]], [0, 0, 1], **NONNEG2, **SUM1), np.array([0, 1])) == []


def test_guess_on_a_bound_is_not_taken_as_interior():
    # An equal split that spends exactly the budget (x0 + x1 <= 1 at [0.5, 0.5]) up to round-off.
    p = problem([[4, 1, 0]], [0, 0, 1], G=[[-1, 0, 0], [0, -1, 0], [0.1, 0.2, 0]], h=[0, 0, 0.1 * 0.5 + 0.2 * 0.5])
    r = solve(p, [np.array([0.5, 0.5, 100.0])])
    # min 4/x0 + 1/x1 on 0.1 x0 + 0.2 x1 <= 0.15: x_j ~ sqrt(a_j / price_j), optimum
    # (sqrt(4 * 0.1) + sqrt(1 * 0.2))^2 / 0.15.
    check_certificate(r, (math.sqrt(0.4) + math.sqrt(0.2)) ** 2 / 0.15)


def many_terms_problem(dims: int, splits: int):
    """3,000 random collectives under the pipelined model on ``dims`` rings of 4 (latency 300 ns
    per dimension index), 100 GB/s per dimension in total: thousands of distinct terms."""
    from libra_astra.demand import synthetic
    from libra_astra.model.cost import cost_from_dict
    from libra_astra.model.network import network_from_dict
    from libra_astra.optimize.problem import Constraints, Workload, build_problem
    from libra_astra.timing.model import TimeModel

    net = network_from_dict({"name": "s", "dimensions": [
        {"name": f"d{i}", "topology": "Ring", "npus": 4, "latency_ns": 300.0 * (i + 1), "cost_class": "x"}
        for i in range(dims)]})
    cost = cost_from_dict({"unit_prices_usd_per_gbps": {"x": {"link": 1.0}}})
    return build_problem([Workload(synthetic.random_demand(net, 3000, seed=3))], net, cost,
                         Constraints(100.0 * dims), "perf", TimeModel("pipelined", splits=splits))


def test_surrogate_start_is_a_relaxation_and_changes_nothing(monkeypatch):
    # Thousands of distinct terms not certified after a few steps restart from a merged
    # surrogate's optimum: the surrogate is a relaxation (its optimum is below the problem's),
    # and the certified optimum is the same with or without it.
    b = many_terms_problem(dims=4, splits=4)
    pu = solver._unit_weights(b.problem)
    sur = solver._surrogate(pu)
    assert sur is not None and sur.w.shape[0] * 4 <= pu.w.shape[0]
    rs = solve(sur, b.guesses)
    check_certificate(rs)
    monkeypatch.setattr(solver, "_SURROGATE", 10 ** 9)           # never
    without = solve(b.problem, b.guesses)
    check_certificate(without)
    assert rs.fun <= without.fun * (1 + 1e-9)
    monkeypatch.setattr(solver, "_SURROGATE", 1000)
    monkeypatch.setattr(solver, "_COLD", 1)                      # always, after one step
    with_sur = solve(b.problem, b.guesses)
    check_certificate(with_sur)
    assert with_sur.fun == pytest.approx(without.fun, rel=2e-9)


def test_first_start_judged_by_progress_not_a_step_budget(monkeypatch):
    # With thousands of terms the first start hands over to the surrogate once it stalls or runs
    # past _COLD steps; a run still closing in (mu falling tenfold within a few steps) goes on.
    b = many_terms_problem(dims=3, splits=2)
    calls = []
    real = solver._surrogate
    monkeypatch.setattr(solver, "_surrogate", lambda p: calls.append(1) or real(p))
    monkeypatch.setattr(solver, "_SURROGATE", 10 ** 9)           # never: the plain method's steps
    plain = solve(b.problem, b.guesses)
    check_certificate(plain)
    assert plain.newton_steps > 3 and not calls
    monkeypatch.setattr(solver, "_SURROGATE", 1000)
    monkeypatch.setattr(solver, "_COLD", 3)                      # a budget the plain run exceeds
    monkeypatch.setattr(solver, "_STALL_MIN", 10 ** 9)           # (the stall rule off)
    monkeypatch.setattr(solver, "_FAST", 1.0)                    # any fall in mu counts as closing in
    r = solve(b.problem, b.guesses)
    assert not calls and r.newton_steps == plain.newton_steps and r.fun == plain.fun
    monkeypatch.setattr(solver, "_FAST", 0.0)                    # none does: cut at the budget
    r = solve(b.problem, b.guesses)
    check_certificate(r)
    assert calls == [1] and r.fun == pytest.approx(plain.fun, rel=2e-9)
    monkeypatch.setattr(solver, "_FAST", 1.0)
    monkeypatch.setattr(solver, "_STALL_MIN", 3)
    monkeypatch.setattr(solver, "_STALL_DROP", 0.0)              # every run reads as stalled
    r = solve(b.problem, b.guesses)
    check_certificate(r)
    assert calls == [1, 1] and r.fun == pytest.approx(plain.fun, rel=2e-9)


def test_unique_rows_matches_numpys_unique_over_rows():
    # The surrogate groups terms with these; np.unique(axis=0) is the oracle: same rows, same order.
    rng = np.random.default_rng(5)
    for rows, cols in ((1, 1), (7, 3), (500, 9), (2000, 13)):
        base = np.round(rng.random((max(rows // 4, 1), cols)), 2)        # few distinct rows, many repeats
        a = base[rng.integers(0, base.shape[0], rows)]
        a[:, 0] = rng.integers(0, 3, rows)                             # a class column as the first key
        uniq, inv = solver._unique_rows(a)
        want, want_inv = np.unique(a, axis=0, return_inverse=True)
        assert np.array_equal(uniq, want) and np.array_equal(inv, want_inv.ravel())
        assert np.array_equal(uniq[inv], a)


def test_index_runs_become_slices():
    # The solver indexes the v coordinates at every step; a run indexes as a view.
    assert solver._as_slice(np.array([0, 1, 2])) == slice(0, 3)
    assert solver._as_slice(np.array([2, 3])) == slice(2, 4)
    assert isinstance(solver._as_slice(np.array([0, 2])), np.ndarray)
    assert isinstance(solver._as_slice(np.zeros(0, dtype=np.int64)), np.ndarray)


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2), (0, 2, 1)])
def test_reciprocal_coordinates_anywhere(order):
    # Sum of reciprocals (optimum 9) with the epigraph coordinate moved among the bandwidths: the
    # reciprocal coordinates are a run from 0, a run after it, or no run (gathered, not sliced).
    perm = list(order)
    A = np.array([[4.0, 1.0, 0.0]])[:, perm]
    c = np.array([0.0, 0.0, 1.0])[perm]
    z = perm.index(2)
    G = np.array([[-1.0, 0, 0], [0, -1.0, 0]])[:, perm]
    E = np.array([[1.0, 1.0, 0]])[:, perm]
    p = problem(A, c, class_z=[z], G=G, h=[0, 0], E=E, f=[1])
    x0 = np.array([0.5, 0.5, 100.0])[perm]
    r = solve(p, [x0])
    check_certificate(r, 9.0)
    assert r.x[[perm.index(0), perm.index(1)]] == pytest.approx([2 / 3, 1 / 3], rel=1e-6)


def test_layout_term_values_are_the_same_numbers():
    # _certify passes the layout to spare finding the used columns: the values must not move.
    rng = np.random.default_rng(3)
    A = rng.random((7, 4)) * (rng.random((7, 4)) > 0.3)
    A[:, 3] = 0.0
    A[:, 0] += 0.1
    p = problem(A, [0, 0, 0, 1], owner=[0, 0, 1, 1, 1, 2, 3], g=rng.random(7))
    lay = solver._Layout(p)
    for _ in range(5):
        x = np.r_[rng.random(3) + 0.1, 50.0]
        assert np.array_equal(term_values(p, x, lay), term_values(p, x))
        assert np.array_equal(tight_point(p, x, lay), tight_point(p, x))


def test_equality_factors_kept_per_matrix():
    # Solves sharing E share its decompositions: the same numbers as fresh ones, read-only, and
    # a different E (even equal up to a copy's layout) never gets another's.
    E = np.array([[1.0, 1.0, 0.0]])
    eq = solver._equality_factors(E)
    assert solver._equality_factors(np.asfortranarray(E.copy())) is eq
    assert solver._equality_factors(np.array([[1.0, 2.0, 0.0]])) is not eq
    _, sv, vt = np.linalg.svd(E)
    assert np.array_equal(eq.null_basis, vt[1:].T)
    assert np.array_equal(eq.pinv, np.linalg.pinv(E))
    assert np.array_equal(eq.pinv_T(), np.linalg.pinv(E.T))
    assert not eq.pinv.flags.writeable and not eq.null_basis.flags.writeable
    p = problem([[4, 1, 0]], [0, 0, 1], **NONNEG2, **SUM1)
    a, b = solve(p, [np.array([0.5, 0.5, 100.0])]), solve(p, [np.array([0.5, 0.5, 100.0])])
    assert np.array_equal(a.x, b.x) and a.fun == b.fun and a.dual_bound == b.dual_bound


@pytest.mark.parametrize("upper", [0.5, 0.6])
def test_coordinates_no_row_binds_under_an_equality_are_certified(upper):
    # x0 is capped and the total must be spent: x1 and x2 take the rest, and their rows go slack,
    # so at the optimum their stationarity reads alpha = b / x^2 ~ 0. Least-squares equality
    # multipliers left alpha slightly negative there and the bound loose by ~1e-7, which no
    # Newton step tightened: 115 and 500 steps, not certified. Optimum: 1 / upper.
    A = [[1, 0, 0, 0], [0, 1e-3, 0, 0], [0, 0, 1e-3, 0]]
    G = [[1, 0, 0, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 0]]
    p = problem(A, [0, 0, 0, 1], owner=[0, 0, 0], G=G, h=[upper, -0.01, -0.01, -0.01], E=[[1, 1, 1, 0]], f=[1])
    r = solve(p, [np.array([1 / 3, 1 / 3, 1 / 3, 100.0])])
    check_certificate(r, optimum=1 / upper)
    assert r.newton_steps <= 20
    assert r.x[0] == pytest.approx(upper, rel=1e-8) and r.x[1] + r.x[2] == pytest.approx(1 - upper, rel=1e-8)


@pytest.mark.parametrize("seed", range(6))
def test_sharpened_equality_multipliers_give_a_sound_and_never_looser_bound(seed):
    # Any multipliers give a lower bound: choosing nu for the best one must stay below every
    # feasible objective (sampled) and never fall below the least-squares one.
    p = solver._unit_weights(random_problem(seed))
    lay = solver._Layout(p)
    rng = np.random.default_rng(50 + seed)
    pts = rng.dirichlet(np.ones(3), 4000)
    pts = pts[pts[:, 0] >= 0.05]
    best_feasible = min(tight_point(p, np.r_[x, 0.0])[3] for x in pts)
    r = solve(p, [np.r_[np.full(3, 1 / 3), 1e3]])
    M, Q = lay.M, lay.Q
    sharper = 0
    for trial in range(20):
        x = np.r_[rng.dirichlet(np.ones(3)) * 0.9 + 0.1 / 3, 10.0]
        spread = 10.0 ** rng.uniform(-6, 0)        # multipliers from nearly optimal to arbitrary
        lam = rng.uniform(0.01, 1, M) * spread + 1e-9
        pi = np.full(Q, 1.0) * rng.uniform(0.5, 2)
        mu = rng.uniform(0, 1, lay.P) * spread
        plain = solver._dual_bound(p, lay, x, lam, pi, mu)
        sharp = solver._dual_bound(p, lay, x, lam, pi, mu, sharpen=True)
        assert sharp >= plain
        assert sharp <= best_feasible + 1e-12 and sharp <= r.fun + 1e-12
        sharper += sharp > plain + 1e-9 * abs(r.fun)
    assert sharper > 0
