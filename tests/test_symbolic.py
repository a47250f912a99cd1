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
