"""Divergences from sympy generators: validation, derived quantities against independent numerics,
and user generators solved by the compiled path against the built-ins, the reference and the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose
from scipy.optimize import minimize_scalar

import mentored
from mentored.check import reference
from mentored.divergences.symbolic import NumericCheckWarning, Y
from mentored.check.testing import KINDS, budgets_for, instance

T = sp.Symbol("t", positive=True)
ALPHA = sp.Rational(1, 3)
# Common families beyond the built-ins; all decidable by sympy.
CUSTOM = {
    "triangular": (T - 1) ** 2 / (T + 1),
    "jeffreys": (T - 1) * sp.log(T),
    "alpha_1/3": (T**ALPHA - 1 - ALPHA * (T - 1)) / (ALPHA * (ALPHA - 1)),
    "power_3": (T**3 - 1 - 3 * (T - 1)) / 6,
    "le_cam": (T - 1) ** 2 / (2 * (T + 1)),
}
GRID = np.concatenate([[1e-9, 1e-3, 0.1, 0.5], 1 + np.array([-1e-6, 0, 1e-6]), [1.5, 3.0, 1e2, 1e5]])


@pytest.fixture(scope="module")
def custom(custom_divergence):
    return {k: custom_divergence(e, T, name=k) for k, e in CUSTOM.items()}


def numeric_sup(f, y):
    """sup_{t ≥ 0} (y t − f(t)) by a dense log grid and a bounded refinement: independent of f*."""
    ts = np.concatenate([[0.0], np.logspace(-8, 8, 20001)])
    with np.errstate(all="ignore"):
        vals = y * ts - f(ts)
    k = int(np.nanargmax(vals))
    best = float(vals[k])
    lo, hi = ts[max(k - 1, 0)], ts[min(k + 1, ts.size - 1)]
    if hi > lo:
        res = minimize_scalar(lambda s: -(y * s - float(f(np.array(s)))), bounds=(lo, hi), method="bounded", options={"xatol": 1e-14})
        best = max(best, -res.fun)
    return best, ts[k]


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_builtin_symbolic_forms_equal_the_hand_written_ones(name):
    d = mentored.divergence(name)
    info = d.symbolic
    assert info.convexity_check == "symbolic"
    assert info.f0 == d.f0 and info.f_inf == d.f_inf
    assert_allclose(info.f(GRID), d.f(GRID), rtol=1e-9, atol=1e-15)
    away = GRID[np.abs(GRID - 1) > 1e-3]  # tv's kink: the subgradient selections may differ at 1
    assert_allclose(info.fprime(away), d.fprime(away), rtol=1e-9, atol=1e-14)
    assert info.tilt == d.tilt
    y = np.array([-50.0, -3.0, -0.6, -1e-3, 0.0, 1e-4, 0.2, 0.3, 0.49, 0.9, 2.0])
    hand, sym = d.conjugate(y), info.conjugate(y)
    assert np.array_equal(np.isfinite(hand), np.isfinite(sym))
    fin = np.isfinite(hand)
    assert_allclose(sym[fin], hand[fin], rtol=1e-9, atol=1e-12)
    t = sp.Symbol("t", positive=True)
    f = d.builtin.source(t)
    expected_f2 = np.nan if f.has(sp.Abs) else float(sp.diff(f, t, 2).subs(t, 1))  # tv: a kink at 1
    assert_allclose(info.f2_at_1, expected_f2, rtol=1e-12)


def _check_conjugate(d, ys):
    for y in ys:
        got = float(d.conjugate(np.array(y)))
        want, argmax = numeric_sup(d.f, y)
        if argmax >= 1e7:  # the sup runs off to t = ∞: y is outside dom f*
            assert y >= d.f_inf - 1e-12 and (np.isinf(got) or got >= want - 1e-6)
            continue
        assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_builtin_conjugates_are_the_numeric_sup(name):
    d = mentored.divergence(name)
    _check_conjugate(d, [-20.0, -2.5, -1.0, -0.3, 0.0, 0.2, 0.33, 0.6, 0.99, 1.5])


def test_the_conjugate_check_can_fail():
    # A conjugate off by 1e-5 is caught by the numeric sup.
    d = mentored.divergence("kl")
    want, _ = numeric_sup(d.f, 0.3)
    assert abs(float(d.conjugate(np.array(0.3))) + 1e-5 - want) > 1e-6


@pytest.mark.parametrize("name", list(CUSTOM))
def test_custom_conjugates_are_the_numeric_sup(custom, name):
    d = custom[name]
    assert d.convexity_check == "symbolic"
    _check_conjugate(d, [-10.0, -1.0, -0.2, 0.0, 0.3, 0.45, 0.8, 2.0])
    # Stationarity of the inverse derivative, where f' is invertible.
    y = np.array([-0.4, 0.0, 0.2, 0.45])
    y = y[(y > d.symbolic.fprime0) & (y < d.f_inf)]
    assert_allclose(d.fprime(d.fprime_inv(y)), y, rtol=1e-9, atol=1e-9)


def test_numeric_fallbacks_are_reported():
    f = (T - 1) ** 2 + sp.sin(T - 1) / 10  # convex (f'' ≥ 1.9), but sympy cannot decide it
    with pytest.warns(NumericCheckWarning, match="numerically"):
        d = mentored.Divergence.from_sympy(f, T, name="wiggle")
    assert d.convexity_check == "numeric"
    assert d.conjugate_method == "numeric" and d.conjugate_expr is None
    _check_conjugate(d, [-5.0, -1.0, 0.0, 0.5, 3.0])
    p, q = instance("dense", np.random.default_rng(3), n=12)
    sol = mentored.solve(p, q, divergence=d, budget=0.05)
    ref_pi, _ = reference.solve(p, q, d, 0.05)
    assert_allclose(sol.pi, ref_pi, rtol=0, atol=1e-8)


@pytest.mark.parametrize(
    "f, condition",
    [
        (sp.log(T), "not convex"),  # concave
        (-T * sp.log(T), "not convex"),
        (T**2, r"f\(1\) = 0"),
        (sp.sin(T - 1), "not convex"),  # f(1) = 0 but not convex
        ((T - 1) ** 3, "not convex"),
        (1 / (T - 2) - 1 / (1 - 2), "not convex|finite"),  # a pole at t = 2
    ],
)
def test_invalid_generators_are_refused(f, condition):
    with pytest.raises(ValueError, match=condition):
        mentored.Divergence.from_sympy(f, T)


def test_symbol_must_be_positive_and_alone():
    with pytest.raises(ValueError, match="positive"):
        mentored.Divergence.from_sympy(sp.Symbol("x") ** 2 - 1, sp.Symbol("x"))
    with pytest.raises(ValueError, match="free symbols"):
        mentored.Divergence.from_sympy(sp.Symbol("a") * (T - 1) ** 2, T)


def test_conjugate_expr_is_piecewise_with_domain():
    d = mentored.Divergence.from_sympy(CUSTOM["triangular"], T)
    assert d.conjugate_domain == (-np.inf, 1.0, True)
    assert d.conjugate_expr.subs(Y, -5) == -1  # −f(0) below f'(0+) = −3
    assert d.conjugate_expr.subs(Y, 2) == sp.oo


@pytest.mark.slow  # f evaluated by numpy, called back from the core
@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_a_builtin_rebuilt_from_sympy_solves_like_the_builtin(name, rng):
    # The same f through the Python-callable path of the core and through the compiled generator.
    d = mentored.divergence(name)
    custom = mentored.Divergence.from_sympy(d.expr, d.symbol, name=f"sympy_{name}")
    for kind in ("dense", "top_k_target", "truncated_draft", "ties", "extreme"):
        p, q = instance(kind, rng)
        for budget in budgets_for(name, p, q):
            a = mentored.solve(p, q, divergence=name, budget=budget)
            b = mentored.solve(p, q, divergence=custom, budget=budget)
            assert_allclose(b.acceptance, a.acceptance, rtol=0, atol=1e-9)
            assert_allclose(b.pi, a.pi, rtol=0, atol=1e-8)


@pytest.mark.slow  # 60 cases, f evaluated by numpy, called back from the core
@pytest.mark.parametrize("name", list(CUSTOM))
@pytest.mark.parametrize("kind", KINDS)
def test_custom_matches_reference(custom, name, kind, rng):
    d = custom[name]
    p, q = instance(kind, rng)
    budgets = budgets_for(d, p, q)
    ref_pis, _ = reference.solve(p, q, d, budgets)  # all budgets in one search
    for budget, ref_pi in zip(budgets, ref_pis):
        sol = mentored.solve(p, q, divergence=d, budget=budget)
        assert np.all(sol.pi >= 0)
        assert_allclose(sol.pi.sum(), 1.0, rtol=0, atol=1e-12)
        assert float(d(sol.pi, p)) <= budget * (1 + 1e-9) + 1e-12
        if budget == 0:
            # Lossless exactly; the reference's untilted f cancels near t = 1 and can step off p.
            assert_allclose(sol.pi, p, rtol=0, atol=1e-15)
            continue
        assert_allclose(sol.acceptance, np.minimum(ref_pi, q).sum(), rtol=0, atol=1e-9)


def test_custom_batches_paths_and_float32(custom, rng):
    d = custom["triangular"]
    rows = [instance(k, rng, n=15) for k in ("dense", "top_k_target", "ties", "disjoint")]
    P, Q = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    budgets = np.array([0.01, 0.1, 0.0, 0.3])
    batch = mentored.solve(P, Q, divergence=d, budget=budgets)
    for b, (p, q) in enumerate(rows):
        one = mentored.solve(p, q, divergence=d, budget=budgets[b])
        assert_allclose(batch.pi[b], one.pi, rtol=0, atol=0)
        path = mentored.MentoredPath(p, q)
        assert_allclose(path.frontier([budgets[b]], divergence=d)[0], one.acceptance, rtol=0, atol=1e-12)
        assert_allclose(path.divergence_at(one.s, d), one.divergence, rtol=1e-12, atol=1e-15)
        assert_allclose(path.solve(d, budgets[b]).pi, one.pi, rtol=0, atol=1e-15)
    f32 = mentored.solve(P.astype(np.float32), Q.astype(np.float32), divergence=d, budget=budgets)
    assert f32.pi.dtype == np.float32
    assert_allclose(f32.acceptance, batch.acceptance, rtol=0, atol=1e-5)
    acc = mentored.solve(P, Q, divergence=d, acceptance=batch.acceptance)
    assert_allclose(acc.divergence, batch.divergence, rtol=1e-6, atol=1e-12)


def test_swapped_generator_swaps_the_arguments(rng):
    p, x = rng.dirichlet(np.ones(9)), rng.dirichlet(np.ones(9))
    for name in ("kl", "chi2", "hellinger"):
        d = mentored.divergence(name)
        assert_allclose(d.swapped(x, p), d(p, x), rtol=1e-12)
    assert sp.simplify(mentored.divergence("kl").swapped.expr - (-sp.log(T))) == 0


def test_core_stub_lists_what_the_module_has():
    # mentored/_core.pyi is kept equal to the compiled module: same public names, same Path members.
    import ast
    from pathlib import Path

    import mentored._core as core

    tree = ast.parse((Path(mentored.__file__).parent / "_core.pyi").read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert top == {k for k in dir(core) if not k.startswith("_")}
    for cls in ("Path", "Table"):
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        stub = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
        assert stub == {k for k in dir(getattr(core, cls)) if not k.startswith("_")}


# ---------------------------------------------------------------- generators whose printed form overflows

LOGCOSH = sp.log(sp.cosh(T - 1))  # convex, f∞ = 1; numpy's cosh(t − 1) overflows past t ≈ 711
SLOW = 60.0  # s: sympy takes ~2 s on log cosh quietly; these tests check answers, not the time limit
TINY = (T - 1) ** 2 / 10**200  # (t − 1)² overflows past t ≈ 1.3e154, where f itself is ≤ 1e108
P3, Q3 = np.array([0.49995, 0.49995, 1e-4]), np.array([0.5, 0.0, 0.5])


def exact_optimum(f, p, q, eps):
    """A*(ε) along the optimal curve π(s) (reference.curve: bisection on the definitions of Down and
    Up), with D_f(π(s)‖p) summed in 40-digit arithmetic: nothing of f is evaluated in floating point."""
    import mpmath

    fn = sp.lambdify(T, f, modules="mpmath")
    tv = 0.5 * float(np.abs(p - q).sum())

    def D(s):
        pi, _, _ = reference.curve(p, q, s)
        with mpmath.workdps(40):
            return sum(mpmath.mpf(b) * fn(mpmath.mpf(a) / mpmath.mpf(b)) for a, b in zip(pi, p) if b > 0)

    lo, hi = 0.0, tv
    if D(hi) <= eps:
        return 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if D(mid) <= eps else (lo, mid)
    return 1.0 - tv + lo


def test_exact_optimum_of_an_overflowing_generator():
    # The optima the paths below must reach: at ε = 0.1 also cvxpy's, with log cosh u = logistic(2u) − u − log 2
    # (at ε = 0.5 the conic solver stops short: e^(2u) at u ≈ 3700).
    cp = pytest.importorskip("cvxpy")
    assert exact_optimum(LOGCOSH, P3, Q3, 0.5) == pytest.approx(0.872586518017585, abs=1e-12)
    assert exact_optimum(LOGCOSH, P3, Q3, 0.1) == pytest.approx(0.5917976676753381, abs=1e-12)
    u = cp.Variable(3, nonneg=True)
    cost = P3 @ (cp.logistic(2 * (u - 1)) - (u - 1) - np.log(2))
    problem = cp.Problem(cp.Maximize(cp.sum(cp.minimum(cp.multiply(P3, u), Q3))), [P3 @ u == 1, cost <= 0.1])
    problem.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert problem.status == "optimal" and problem.value == pytest.approx(0.5917976676753381, abs=1e-7)


def test_f_is_evaluated_where_its_printed_form_overflows(monkeypatch):
    from mentored.divergences import program as _program

    d, tiny = mentored.Divergence.from_sympy(LOGCOSH, T, timeout=SLOW), mentored.Divergence.from_sympy(TINY, T)
    x = np.array([720.0, 1e3, 1e10, 1e100, 1e300])
    want = x - 1.0 - np.log(2.0)  # log cosh u = u − log 2 + log1p(e^(−2u)), the last term below an ulp here
    assert_allclose(d.f(x), want, rtol=1e-15)
    assert_allclose(d.f_tilde(x), want, rtol=1e-15)
    with monkeypatch.context() as m:  # f̃ without a program (code that does not translate): 30-digit arithmetic
        m.setattr(_program, "compile_info", lambda info: None)
        assert_allclose(mentored.Divergence.from_sympy(LOGCOSH, T, timeout=SLOW).f_tilde(x), want, rtol=1e-15)
    assert_allclose(d.fprime(x), 1.0, rtol=0)
    assert_allclose(tiny.f_tilde(np.array([5e169, 1e250])), [2.5e139, 1e300], rtol=1e-15)
    assert np.isinf(tiny.f_tilde(np.array([1e300]))[0])  # 1e400: past DBL_MAX itself
    # a printed f' that overflows (e^u/(1 + e^u) is ∞/∞ past u ≈ 709)
    softplus = mentored.Divergence.from_sympy(sp.log(1 + sp.exp(T - 1)) - sp.log(2) - (T - 1) / 2, T, timeout=SLOW)
    assert_allclose(softplus.fprime(np.array([800.0, 1e5])), 0.5, rtol=1e-15)
    assert_allclose(softplus.f_tilde(np.array([800.0])), [799 / 2 - np.log(2)], rtol=1e-15)


@pytest.mark.parametrize("compiled", [True, False], ids=["program", "callbacks"])
def test_an_overflowing_generator_reaches_the_optimum_on_every_path(compiled, monkeypatch):
    from mentored.divergences import program as _program
    from mentored.verify.serving import onehot_acceptance, rejection_sample, tree_verifier

    if not compiled:
        monkeypatch.setattr(_program, "_ENABLED", False)
    d = mentored.Divergence.from_sympy(LOGCOSH, T, name="logcosh", timeout=SLOW)
    assert (d.program is not None) == compiled
    best = {0.5: 0.872586518017585, 0.1: 0.5917976676753381}  # test_exact_optimum_of_an_overflowing_generator
    for eps, a in best.items():
        sol = mentored.solve(P3, Q3, divergence=d, budget=eps)
        assert sol.acceptance == pytest.approx(a, abs=1e-9)
        assert float(d(sol.pi, P3)) == pytest.approx(eps, rel=1e-9)
        assert mentored.certify(P3, Q3, sol.pi, d, eps).ok
        assert mentored.MentoredPath(P3, Q3).solve(d, eps).acceptance == pytest.approx(a, abs=1e-9)
    assert_allclose(mentored.MentoredPath(P3, Q3).frontier([0.5, 0.1], divergence=d), list(best.values()), atol=1e-9)
    mentored.solve(P3, Q3, divergence=d, budget=0.5, check=True)  # the oracle states log cosh u as logistic(2u) − u − log 2
    by_acceptance = mentored.solve(P3, Q3, divergence=d, acceptance=best[0.5])
    assert by_acceptance.divergence == pytest.approx(0.5, rel=1e-7)
    # The drafter's token 2 is accepted with probability π_2/q_2 = (A* − 0.5)/0.5.
    ratio = (best[0.5] - 0.5) / 0.5
    for u0, accepted in ((ratio - 1e-3, True), (ratio + 1e-3, False)):
        out = mentored.speculative_step(np.array([[P3, P3]]), np.array([[0]]), np.array([[Q3]]), np.array([[2]]), divergence=d,
                                        budget=0.5, uniforms=np.array([[[u0, 0.5]]]))
        assert (out[0, 0] == 2) == accepted
        out = rejection_sample(np.array([2]), [1], Q3[None], P3[None], np.array([[0]]), divergence=d, budget=0.5,
                               uniforms=np.array([[u0, 0.5]]))
        assert (out[0, 0] == 2) == accepted
    # The set verifier of a token-only drafter at p_x = 1e-4: the largest a with
    # p_x f(a/p_x) + (1 − p_x) f((1 − a)/(1 − p_x)) = ε, in 40-digit arithmetic 0.41604231503861824658…
    a = 0.41604231503861825
    assert_allclose(onehot_acceptance(np.array([1e-4]), 0.5, divergence=d), [a], rtol=1e-12)
    for objective in ("acceptance", "length"):  # one child: the weighted verifier is the set verifier
        accept, value = tree_verifier([0, 2], [-1, 0], [2], np.array([P3, P3]), divergence=d, budget=0.5, objective=objective)
        assert_allclose(accept, [1.0, a], rtol=1e-9)


def test_a_tiny_generator_past_the_float_range_of_its_printed_form():
    # ε = 0.5 never binds: D_f(q‖p) = 1e-200·(0.5 + (0.5e170 − 1)²·1e-170) = 2.5e-31, so π = q and the
    # acceptance is 1; the ratio q_2/p_2 = 5e169 squares past DBL_MAX in f's printed form.
    from mentored.verify.serving import onehot_acceptance

    d = mentored.Divergence.from_sympy(TINY, T)
    p, q = np.array([0.5, 0.5 - 1e-170, 1e-170]), np.array([0.5, 0.0, 0.5])
    assert float(d(q, p)) == pytest.approx(2.5e-31, rel=1e-12)
    assert mentored.solve(p, q, divergence=d, budget=0.5).acceptance == 1.0
    assert mentored.MentoredPath(p, q).solve(d, 0.5).acceptance == 1.0
    assert_allclose(onehot_acceptance(np.array([1e-170]), 0.5, divergence=d), [1.0])
    out = mentored.speculative_step(np.array([[p, p]]), np.array([[0]]), np.array([[q]]), np.array([[2]]), divergence=d, budget=0.5,
                                    uniforms=np.array([[[0.999, 0.5]]]))
    assert out[0, 0] == 2


# ---------------------------------------------------------------- draft trees' weighted verifier (objective="length")

TREE_TOKENS, TREE_PARENTS = np.arange(7), np.array([-1, 0, 0, 1, 1, 2, 2])


def _tree_rows(seed=5, V=8):
    return np.random.default_rng(seed).dirichlet(np.full(V, 0.7), TREE_TOKENS.size)


def _each_node_is_the_oracles_optimum(d, p, eps):
    """tree_verifier(objective="length") at every node against the oracle on the whole vocabulary
    (max Σ w π, w = 1 + A(c) from the verifier's own values below), to 1e-7."""
    from mentored.check.oracle import oracle_weighted
    from mentored.verify.serving import tree_verifier

    accept, value = tree_verifier(TREE_TOKENS, TREE_PARENTS, [TREE_TOKENS.size], p, divergence=d, budget=eps, objective="length")
    for v in range(TREE_TOKENS.size):
        kids = np.flatnonzero(TREE_PARENTS == v)
        if not kids.size:
            continue
        W = np.zeros(p.shape[1])
        W[TREE_TOKENS[kids]] = 1.0 + value[kids]
        pi = p[v] * (1.0 - accept[kids].sum()) / (1.0 - p[v][TREE_TOKENS[kids]].sum())
        pi[TREE_TOKENS[kids]] = accept[kids]
        o = oracle_weighted(p[v], W, d, eps)
        assert o.usable(eps, 1e-9), o.status
        assert float(d(pi, p[v])) <= eps * (1 + 1e-9)
        assert W @ pi == pytest.approx(o.acceptance, abs=1e-7), (v, W @ pi, o.acceptance)
    return value


def test_the_length_objective_takes_a_strictly_convex_generator_of_infinite_curvature():
    # |t − 1|^(3/2): f'' = ∞ at 1 and f' = (3/2)·sign(t − 1)·|t − 1|^(1/2) strictly increasing, so (f')⁻¹ is a function.
    d = mentored.Divergence.from_sympy(sp.Abs(T - 1) ** sp.Rational(3, 2), T)
    for eps in (0.02, 0.3):
        _each_node_is_the_oracles_optimum(d, _tree_rows(), eps)
    assert d.symbolic.linear_on is None and isinstance(d.fprime_inv_expr, sp.Piecewise)
    y = np.array([-1.5, -0.3, 0.0, 0.3, 1.5])
    assert_allclose(d.fprime_inv(y), 1.0 + np.sign(y) * (2 * y / 3) ** 2, rtol=1e-15)


def test_the_length_objective_takes_a_generator_whose_curvature_underflows():
    # log cosh(t − 1): f'' = sech²(t − 1) is 0 in floating point past t ≈ 370, but f' = tanh(t − 1) is strictly increasing.
    from mentored.verify.serving import tree_verifier

    d = mentored.Divergence.from_sympy(LOGCOSH, T, timeout=SLOW)
    p = _tree_rows()
    accept, value = tree_verifier(TREE_TOKENS, TREE_PARENTS, [7], p, divergence=d, budget=0.3, objective="length")
    setwise, _ = tree_verifier(TREE_TOKENS, TREE_PARENTS, [7], p, divergence=d, budget=0.3, objective="acceptance")
    assert_allclose(accept[3:], setwise[3:], rtol=1e-9)  # the leaves' parents: equal weights, the set verifier
    assert value[0] >= (setwise[1:3] * (1 + value[1:3])).sum() - 1e-12  # the length objective's own optimum
    assert d.symbolic.linear_on is None


@pytest.mark.parametrize("f, where", [(sp.Max(T - 1, 0), r"\(0, 1\)"),
                                      (sp.Piecewise(((T - 1) ** 2, T < 1), (T - 1, True)) + sp.Min(0, T - 1) / 2, r"\(1, inf\)")])
def test_the_length_objective_refuses_a_generator_linear_on_an_interval_naming_it(f, where):
    from mentored.verify.serving import tree_verifier

    d = mentored.Divergence.from_sympy(f, T, name="kinked")
    with pytest.raises(ValueError, match=r"f' strictly increasing on \(0, inf\).*'kinked' is linear on " + where + ".*objective='acceptance'"):
        tree_verifier(TREE_TOKENS, TREE_PARENTS, [7], _tree_rows(), divergence=d, budget=0.1)


PIECEWISE = {
    "piecewise": sp.Piecewise(((T - 1) ** 2, T < 1), (2 * (T - 1) ** 2, True)),  # f'' jumps at 1
    "max": sp.Max((T - 1) ** 2, 4 * (T - 1) ** 2 - 3 * (T - 1)),  # f' jumps at 1 and 2
    "abs": (T - 1) ** 2 + sp.Abs(T - 1) / 2,  # f' jumps at 1
}


@pytest.mark.parametrize("name", list(PIECEWISE))
def test_a_piecewise_generators_length_objective_runs_no_bisection(name, monkeypatch):
    # (f')⁻¹ is solved on each smooth piece once, in the analysis: the weighted verifier evaluates it
    # in closed form rather than bisecting on f' (120 evaluations of f' per point) at every step.
    from mentored.divergences import symbolic
    from mentored.verify.serving import tree_verifier

    d = mentored.Divergence.from_sympy(PIECEWISE[name], T, name=name)
    assert isinstance(d.fprime_inv_expr, sp.Piecewise)
    y = np.linspace(-6.0, 6.0, 49)
    y = y[y > d.symbolic.fprime0]
    assert_allclose(d.fprime_inv(y), symbolic._bisect_fprime(d.fprime, y), rtol=1e-13)  # the inverse, kinks included
    calls = []
    bisect = symbolic._bisect_fprime
    monkeypatch.setattr(symbolic, "_bisect_fprime", lambda *a, **k: calls.append(1) or bisect(*a, **k))
    tree_verifier(TREE_TOKENS, TREE_PARENTS, [7], _tree_rows(), divergence=d, budget=0.3, objective="length")
    assert not calls


@pytest.mark.parametrize("name", ["max", "abs"])
def test_the_length_objective_where_the_top_class_rests_at_a_kink(name):
    # At ε = 0.3 node 0's best child sits at the kink t = 2 of the maximum (its level anywhere in
    # [f'(2⁻), f'(2⁺)] = [2, 5]); at ε = 0.02 the |t − 1| kink holds the top class at t = 1.
    d = mentored.Divergence.from_sympy(PIECEWISE[name], T, name=name)
    for eps in (0.3, 0.02):
        _each_node_is_the_oracles_optimum(d, _tree_rows(), eps)


# ---------------------------------------------------------------- past the float range: the set verifier, duality, the oracle


@pytest.mark.parametrize("compiled", [True, False], ids=["program", "callbacks"])
def test_the_host_set_verifier_where_the_ratio_or_f_passes_the_float_range(compiled, monkeypatch):
    # The token-only verifier's largest a with p_x f̃(a/p_x) + (1 − p_x) f̃((1 − a)/(1 − p_x)) ≤ ε, for a
    # tree node on the host and (without a program) onehot_acceptance's bisection: chi2 scaled by k
    # gives a = p_x + √(ε p_x (1 − p_x)/k) in closed form. At k = 1e-300, p_x = 1e-310 the ratio a/p_x
    # passes DBL_MAX (ε = 1e7) or f̃(a/p_x) does while the term is ≈ ε (ε = 0.5).
    from mentored.divergences import program as _program
    from mentored.verify.serving import onehot_acceptance, tree_verifier

    if not compiled:
        monkeypatch.setattr(_program, "_ENABLED", False)
    for k, px, eps in ((200, 1e-170, 0.5), (300, 1e-310, 0.5), (300, 1e-310, 1e7)):
        d = mentored.Divergence.from_sympy((T - 1) ** 2 / 10**k, T)
        want = min(1.0, px + np.sqrt(eps * 10.0**k * px * (1 - px)))
        p = np.array([0.5, 0.5 - px, px])
        for objective in ("acceptance", "length"):  # one child: the weighted verifier is the set verifier
            accept, _ = tree_verifier([0, 2], [-1, 0], [2], np.array([p, p]), divergence=d, budget=eps, objective=objective)
            assert_allclose(accept, [1.0, want], rtol=1e-9, err_msg=f"{k} {px} {eps} {objective}")
        assert_allclose(onehot_acceptance(np.array([px]), eps, divergence=d), [want], rtol=1e-9)


@pytest.mark.parametrize("k", [-200, 200])
def test_a_scaled_generator_is_certified_where_its_budget_binds(k):
    # 10^k·chi2 at ε = 10^k·e is chi2 at e: the same π, μ, and λ/10^k. solve(check=True) certifies
    # it at the solver's dual point, and the certificate's own search over λ (from the point λ = ∞)
    # reaches λ ≈ 10^−k·λ_chi2 however far that lies from 1.
    d = mentored.Divergence.from_sympy((T - 1) ** 2 * sp.Integer(10) ** k, T)
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.full(12, 0.5)), rng.dirichlet(np.full(12, 0.5))
    for pp, qq in ((P3, Q3), (p, q)):
        for e in (1e-6, 0.3, 100.0):
            eps = e * 10.0**k
            ref = mentored.solve(pp, qq, divergence="chi2", budget=e)
            assert ref.acceptance < 1.0  # the budget binds
            sol = mentored.solve(pp, qq, divergence=d, budget=eps, check=True)
            assert sol.acceptance == pytest.approx(ref.acceptance, abs=1e-12)
            assert sol.lam == pytest.approx(ref.lam / 10.0**k, rel=1e-9) and sol.mu == pytest.approx(ref.mu, rel=1e-9, abs=1e-12)
            cert = mentored.certify(pp, qq, sol.pi, d, eps, lam=np.inf, mu=np.nan)
            assert cert.ok, cert


def test_the_oracle_states_log_cosh_and_poses_a_tiny_generator_in_its_unit():
    # log cosh u = logistic(2u) − u − log 2; 10⁻²⁰⁰·(t − 1)² is posed as (t − 1)² at ε·10²⁰⁰ (solvers'
    # tolerances are absolute: in 10⁻²⁰⁰ units every point meets ε = 0.5), its point judged feasible
    # relative to that unit. The optima: test_exact_optimum_of_an_overflowing_generator, and chi2's at ε·10²⁰⁰.
    from mentored.check.oracle import convex_form_error, oracle_solve, oracle_weighted

    logcosh, tiny = mentored.Divergence.from_sympy(LOGCOSH, T, timeout=SLOW), mentored.Divergence.from_sympy(TINY, T)
    assert convex_form_error(logcosh) is None
    o = oracle_solve(P3, Q3, logcosh, 0.1)
    assert o.usable(0.1) and o.acceptance == pytest.approx(0.5917976676753381, abs=1e-7)
    o = oracle_solve(P3, Q3, tiny, 0.5)  # π = q: D = 2.5e-197
    assert o.usable(0.5) and o.acceptance == pytest.approx(1.0, abs=1e-5)
    for e in (0.3, 1.0):
        o = oracle_solve(P3, Q3, tiny, e * 1e-200)
        assert o.usable(e * 1e-200) and o.acceptance == pytest.approx(mentored.solve(P3, Q3, divergence="chi2", budget=e).acceptance, abs=1e-7)
    # a tree node's weighted problem, in the same unit: max Σ w π with weight 2 on token 2
    w = np.array([0.0, 0.0, 2.0])
    o = oracle_weighted(P3, w, tiny, 0.3e-200)
    want = oracle_weighted(P3, w, "chi2", 0.3)
    assert o.usable(0.3e-200) and want.usable(0.3) and o.acceptance == pytest.approx(want.acceptance, abs=1e-7)
