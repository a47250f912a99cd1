"""Every field of every built-in divergence against its sympy generator, evaluated in 40 digits.

A built-in is one entry of the registry (mentored/divergences/__init__.py) plus its C++ generator; these tests
check each derived form, numpy, torch, the core's and the convex program's, against the definition
f(t) alone, so that a wrong entry, a lost digit or a mirror that drifted fails here.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy as sp

import mentored
from mentored import _core
from mentored.divergences import _NP, _REGISTRY

NAMES = mentored.BUILTIN_NAMES
mpmath.mp.dps = 40

# Ratios across the whole range, and close to 1 where the tilted forms must keep their digits.
T = np.concatenate([np.logspace(-300, 300, 61), np.logspace(-6, 6, 61), 1 + np.array([-1e-4, -1e-9, 1e-12, 1e-9, 1e-4])])


def _hp(expr, sym):
    """``expr`` as a function of one float, evaluated in 40 digits (mpmath), returned as mpf."""
    fn = sp.lambdify(sym, expr, modules="mpmath")
    return lambda x: mpmath.mpf(fn(mpmath.mpf(float(x))))


_MAX = mpmath.mpf(np.finfo(np.float64).max)


def _close(got, want, rel, what, near_one=0.0):
    """got[i] ≈ want[i] to ``rel`` relative, plus ``near_one``·|t − 1| absolute (forms whose value near
    1 is second order in t − 1 keep the digits of t − 1, not more); beyond DBL_MAX, ±inf."""
    for x, g, w in zip(T, got, want):
        if mpmath.isinf(w) or abs(w) > _MAX:
            assert g == (math.inf if w > 0 else -math.inf), f"{what} at {x!r}: {g!r}, expected {mpmath.nstr(w, 17)}"
        else:
            tol = rel * abs(w) + near_one * abs(mpmath.mpf(float(x)) - 1) + mpmath.mpf(1e-300)
            assert abs(mpmath.mpf(float(g)) - w) <= tol, f"{what} at {x!r}: {g!r}, expected {mpmath.nstr(w, 17)}"


def test_names_and_codes_come_from_the_core():
    members = _core.Generator.__members__
    assert NAMES == tuple(sorted(members, key=lambda n: int(members[n])))
    assert sorted(spec.name for spec in _REGISTRY) == sorted(NAMES)
    for name in NAMES:
        assert mentored.divergence(name).compiled == members[name]


@pytest.mark.parametrize("name", NAMES)
def test_constants_equal_the_sympy_limits(name):
    div = mentored.divergence(name)
    t = sp.Symbol("t", positive=True)
    f = div.builtin.source(t)
    assert f.subs(t, 1) == 0
    f0, f_inf = sp.limit(f, t, 0, "+"), sp.limit(f / t, t, sp.oo)
    assert div.f0 == float(f0) and div.f_inf == float(f_inf)
    left, right = sp.limit(sp.diff(f, t), t, 1, "-"), sp.limit(sp.diff(f, t), t, 1, "+")
    assert div.tilt == float((left + right) / 2)  # f'(1), or the midpoint of ∂f(1) at a kink (tv)
    assert div.f(np.array(0.0)) == float(f0)
    assert div.f(np.array(np.inf)) == float(sp.limit(f, t, sp.oo))
    assert div.fprime(np.array(np.inf)) == float(f_inf)
    assert div.fprime(np.array(0.0)) == float(sp.limit(sp.diff(f, t), t, 0, "+"))
    # the same limits from the symbolic analysis the custom divergences get
    info = div.symbolic
    assert (info.f0, info.f_inf, info.tilt) == (div.f0, div.f_inf, div.tilt)


@pytest.mark.parametrize("name", NAMES)
def test_generator_and_derivative_to_rounding(name):
    div = mentored.divergence(name)
    t = sp.Symbol("t", positive=True)
    f = div.builtin.source(t)
    c = div.tilt
    f_tilde = _hp(f - c * (t - 1), t)
    want = [f_tilde(x) for x in T]
    _close(div.f_tilde(T), want, 1e-13, "numpy f̃", near_one=1e-15)
    _close(_core.generator_f_array(int(div.compiled), T), want, 1e-13, "core f̃", near_one=1e-15)
    _close(div.f(T), [_hp(f, t)(x) for x in T], 1e-13, "f", near_one=1e-15)
    off_kink = T[np.abs(T - 1) > 1e-3] if name == "tv" else T
    fp = _hp(sp.diff(f, t), t)
    got = div.fprime(off_kink)
    for x, g in zip(off_kink, got):  # f' = f̃' + c: absolute accuracy, relative to max(|f'|, |c|)
        w = fp(x)
        if abs(w) > _MAX:
            assert g == (math.inf if w > 0 else -math.inf), f"f' at {x!r}"
        else:
            assert abs(mpmath.mpf(float(g)) - w) <= 1e-14 * max(abs(w), abs(c), 1e-300), f"f' at {x!r}: {g!r}"


@pytest.mark.parametrize("name", NAMES)
def test_derivative_inverse_to_rounding(name):
    """(f̃′)⁻¹ (the draft trees' levels) in numpy, torch and the core, against t itself at y = f̃′(t)
    (40 digits, then rounded): to a few ulps of t where that is well conditioned, and to the ulp of
    y carried through 1/f″ elsewhere; 0 from f̃′(0⁺) down and inf from f̃∞ up. tv's level sets are
    intervals: its documented selection (0, 1, inf)."""
    div = mentored.divergence(name)
    spec, code = div.builtin, int(div.compiled)
    t = sp.Symbol("t", positive=True)
    f = div.builtin.source(t)
    f_inf = div.f_inf - div.tilt
    ends = np.array([-np.inf, f_inf, f_inf + 1.0, np.inf])
    want_ends = np.array([0.0, np.inf, np.inf, np.inf])
    if name == "tv":
        y = np.array([-2.0, -0.5000001, -0.4, 0.0, 0.4, 0.5000001, 3.0])
        want = np.array([0.0, 0.0, 1.0, 1.0, 1.0, np.inf, np.inf])
        assert np.array_equal(_np_form(spec.fprime_inv_tilde, y), want)
        assert np.array_equal(_core.generator_dfinv_array(code, y), want)
        return
    dfp, d2 = _hp(sp.diff(f, t) - div.tilt, t), _hp(sp.diff(f, t, 2), t)
    grid = T[(T > 1e-200) & (T < 1e200)]
    y = np.array([float(dfp(x)) for x in grid])
    keep = np.isfinite(y) & (y < f_inf)
    for got in (_np_form(spec.fprime_inv_tilde, y[keep]), _core.generator_dfinv_array(code, y[keep])):
        for x, yy, g in zip(grid[keep], y[keep], got):
            cond = abs(yy) / (mpmath.mpf(float(x)) * d2(x)) * 2.0**-52  # y's rounding, through dt/dy = 1/f″
            assert abs(mpmath.mpf(float(g)) - mpmath.mpf(float(x))) <= 4e-16 * x + 4 * cond * x + 1e-300, (name, x, yy, g)
    if name == "chi2":
        ends, want_ends = np.append(ends, -2.5), np.append(want_ends, 0.0)  # f̃′(0⁺) = −2: a level of 0 below it
    assert np.array_equal(_np_form(spec.fprime_inv_tilde, ends), want_ends)
    assert np.array_equal(_core.generator_dfinv_array(code, ends), want_ends)


# The core's f̃ at many ratios (BuiltinF::many, one vectorised loop per generator, which
# _core.generator_f_array runs) against its scalar generator_f, one call per ratio
# (_core_testing.generator_f_loop). They may differ by rounding only: by at most _MANY_ULPS ulps of
# S(t) = max(|f̃(t)|, |t − 1|, t|log t|), the size of the terms every built-in's formula adds, which is
# a few ulps of f̃ itself wherever f̃ is not small against them. Measured on this grid: 0 (the same
# bits) for tv, chi2, neyman_chi2 and hellinger, 2 for kl and reverse_kl, 6 for js (whose scalar form
# loses up to 2000 ulps of f̃ for a large t, where the loop keeps them; its series near 1 is kept).
_MANY_ULPS = 8
_D = np.finfo(np.float64)


def _dense_ratios() -> np.ndarray:
    rng = np.random.default_rng(20)
    edges = [
        0.0, 5e-324, 1e-320, _D.tiny, np.nextafter(_D.tiny, 0), 1e-300, 1e-20, 0.5, 1.0, 2.0, 1e10, 2.0**53,
        1e100, 1.3e154, 1e200, 1e300, 2.5e305, np.nextafter(_D.max, 0), _D.max, np.inf,
    ]
    return np.concatenate([
        edges,
        1.0 + np.arange(-300, 301) * _D.eps,  # 1 ± tiny
        1.0 + np.logspace(-16, -0.3, 4000), 1.0 - np.logspace(-16, -0.3, 4000),
        *(c * (1.0 + np.linspace(-1e-3, 1e-3, 2001)) for c in (9 / 11, 11 / 9, 1 / 3, 3.0)),  # branch edges
        np.logspace(-323.3, 308.25, 200_001),  # denormals to DBL_MAX
        np.exp(rng.uniform(-745.0, 709.78, 200_000)),
        rng.uniform(0.0, 4.0, 200_000),
    ])


@pytest.mark.parametrize("name", list(_core.Generator.__members__))
def test_vectorised_f_agrees_with_the_scalar_f(name):
    from mentored import _core_testing

    code = int(_core.Generator.__members__[name])
    t = _dense_ratios()
    scalar, many = _core_testing.generator_f_loop(code, t), _core.generator_f_array(code, t)
    few = t[:: len(t) // 997]
    assert np.array_equal(scalar[:: len(t) // 997], [_core.generator_f(code, float(x)) for x in few])  # the loop is generator_f
    assert not np.isnan(scalar).any(), f"{name}: scalar NaN at {t[np.isnan(scalar)][:5]}"
    assert not np.isnan(many).any(), f"{name}: vectorised NaN at {t[np.isnan(many)][:5]}"
    assert np.array_equal(np.isinf(many), np.isinf(scalar)), f"{name}: ∞ at {t[np.isinf(many) != np.isinf(scalar)][:5]}"
    assert np.array_equal(many[np.isinf(many)], scalar[np.isinf(scalar)])
    nan = np.array([np.nan])
    assert np.array_equal(_core.generator_f_array(code, nan), _core_testing.generator_f_loop(code, nan), equal_nan=True)
    finite = np.isfinite(scalar)
    t, scalar, many = t[finite], scalar[finite], many[finite]
    # ulps of S as exponents, since S itself passes DBL_MAX near it (t log t)
    positive = t > 0
    with np.errstate(divide="ignore"):
        log_t = np.abs(np.log(np.where(positive, t, 1.0)))
        exponents = np.maximum.reduce([
            np.log2(np.abs(scalar)), np.log2(np.abs(t - 1.0)),
            np.where(positive & (log_t > 0), np.log2(np.where(positive, t, 1.0)) + np.log2(np.where(log_t > 0, log_t, 1.0)), -np.inf),
        ])
    ulp_exponent = np.maximum(np.floor(exponents), -1022.0).astype(np.int64) - 52  # ulp(S) = 2^ulp_exponent
    ulps = np.ldexp(np.abs(many - scalar), -ulp_exponent)
    worst = int(np.argmax(ulps))
    assert ulps[worst] <= _MANY_ULPS, f"{name} at t = {t[worst]!r}: many {many[worst]!r}, scalar {scalar[worst]!r} ({ulps[worst]:.1f} ulps)"


def test_js_vectorised_keeps_its_relative_accuracy_near_1():
    # f̃ is second order at t = 1; the series both forms take there (|u| < 0.1, u = (t − 1)/(t + 1))
    # keeps it to rounding relative to itself, and the loop agrees with it to a few ulps of f̃.
    from mentored import _core_testing

    code = int(_core.Generator.js)
    t = np.concatenate([1 + np.logspace(-15.6, np.log10(0.2), 600), 1 - np.logspace(-15.6, np.log10(0.18), 600), 1 + np.arange(-64, 65) * 2.0**-52])
    t = t[np.abs((t - 1) / (t + 1)) < 0.1]
    many, scalar = _core.generator_f_array(code, t), _core_testing.generator_f_loop(code, t)
    nonzero = scalar != 0
    assert np.array_equal(many == 0, ~nonzero)  # at t = 1 only
    assert np.max(np.abs(many - scalar)[nonzero] / np.spacing(scalar[nonzero])) <= 4
    with mpmath.workdps(100):  # f̃ ≈ (t − 1)²/8 out of terms of size t − 1: 40 digits are too few
        for x, g in zip(t[nonzero][::7], many[nonzero][::7]):
            m = mpmath.mpf(float(x))
            want = (m * mpmath.log(2 * m / (1 + m)) + mpmath.log(2 / (1 + m))) / 2
            assert abs(mpmath.mpf(float(g)) - want) <= 4 * mpmath.mpf(float(np.spacing(float(want)))), (x, g)


def test_vectorisable_logs_against_numpy():
    # log_positive and log1p_positive (generators.hpp), which the vectorised loops are built from
    from mentored import _core_testing

    rng = np.random.default_rng(21)
    x = np.concatenate([
        [5e-324, _D.tiny, 0.5, 1.0, 2.0, _D.max], np.exp(rng.uniform(-745.0, 709.78, 100_000)), rng.uniform(0.0, 4.0, 100_000),
        1 + np.logspace(-16, -0.3, 2000), 1 - np.logspace(-16, -0.3, 2000),
    ])
    for fn, ref, arg in ((_core_testing.log_positive, np.log, x), (_core_testing.log1p_positive, np.log1p, np.concatenate([x, -rng.uniform(0, 1, 100_000), -np.logspace(-320, -1e-4, 2000)]))):
        got, want = fn(arg), ref(arg)
        assert np.array_equal(got == 0, want == 0)
        nz = want != 0
        assert np.max(np.abs(got[nz] - want[nz]) / np.spacing(np.abs(want[nz]))) <= 1.0, fn.__name__


@pytest.mark.parametrize("name", NAMES)
def test_perspective_without_overflow(name):
    # y·f̃(x/y) for y down to denormals, where x/y overflows, and next to x = y: the terms the solvers sum.
    div = mentored.divergence(name)
    t = sp.Symbol("t", positive=True)
    f_tilde = sp.lambdify(t, div.builtin.source(t) - div.tilt * (t - 1), "mpmath")
    ys = np.array([1.0, 0.3, 1e-8, 1e-300, 5e-320, 3.5e-323])
    xs = np.array([0.0, 1e-12, 0.3, 0.3 * (1 + 1e-9), 0.3 * (1 - 1e-6), 0.5, 1.0])  # and next to y = 0.3
    X, Y = (a.ravel() for a in np.meshgrid(xs, ys))
    got = _np_form(div.builtin.perspective, X, Y)
    for x, y, g in zip(X, Y, got):
        xm, ym = mpmath.mpf(float(x)), mpmath.mpf(float(y))
        w = ym * mpmath.mpf(div.f0 - div.tilt * -1) if x == 0 else ym * f_tilde(xm / ym)
        if mpmath.isinf(w) or w > _MAX:
            assert g == math.inf, (x, y, g)
        else:  # absolute: a few ulps of |x − y|, as the tilted sums need
            assert abs(mpmath.mpf(float(g)) - w) <= 1e-13 * abs(w) + 1e-15 * abs(xm - ym) + mpmath.mpf(1e-320), (x, y, g, w)


@pytest.mark.parametrize("name", NAMES)
def test_conjugate_against_the_supremum(name):
    # f̃*(y) = sup_t (y t − f̃(t)), from its closed form, against a dense supremum (a lower bound
    # that approaches it) and against the domain: inf past f̃∞.
    div = mentored.divergence(name)
    ts = np.concatenate([[0.0], np.logspace(-8, 8, 200_001)])
    ft = div.f_tilde(ts)
    f_inf_tilde = div.f_inf - div.tilt
    ys = np.linspace(-3, min(f_inf_tilde, 3.0), 41)[:-1] if math.isfinite(f_inf_tilde) else np.linspace(-3, 3, 41)
    closed = div.conjugate_tilde(ys)
    sup = np.array([np.max(y * ts - ft) for y in ys])
    assert np.all(closed >= sup - 1e-9 * (1 + np.abs(sup))), name
    assert np.all(closed <= sup + 1e-4 * (1 + np.abs(sup))), name
    if math.isfinite(f_inf_tilde):
        assert np.isinf(div.conjugate_tilde(np.array([f_inf_tilde + 1e-6, f_inf_tilde + 1.0]))).all()
    # and the symbolic conjugate of the analysis, where it found one
    if div.symbolic.conjugate_expr is not None:
        sym = div.symbolic.conjugate(ys + div.tilt) - div.tilt
        np.testing.assert_allclose(closed, sym, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_convex_program_cost_equals_the_divergence(name):
    import cvxpy as cp

    div = mentored.divergence(name)
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6))
    u = rng.uniform(0.2, 2.0, 6)
    outside = 0.0 if math.isinf(div.f_inf) else 0.1
    u *= (1 - outside) / (p @ u)  # Σ p u + outside = 1, the oracle's constraint
    cost = div.builtin.cvxpy(cp, cp.Constant(u), p, outside)
    assert cost.is_convex()
    pi = np.concatenate([p * u, [outside]])
    assert math.isclose(float(cost.value), float(div(pi, np.concatenate([p, [0.0]]))), rel_tol=1e-12, abs_tol=1e-14)


@pytest.mark.parametrize("name", NAMES)
def test_torch_forms_are_the_numpy_forms(name):
    torch = pytest.importorskip("torch", reason="the torch forms need torch (pip install torch)")
    from mentored.backends.torch import _TorchOps

    spec, ops = mentored.divergence(name).builtin, _TorchOps()
    x = torch.tensor(T)
    for form in (spec.f_tilde, spec.fprime_tilde):
        np.testing.assert_allclose(form(ops, x).numpy(), _np_form(form, T), rtol=1e-15, atol=0)
    levels = np.linspace(-3, 0.9, 14)
    np.testing.assert_allclose(spec.fprime_inv_tilde(ops, torch.tensor(levels)).numpy(), _np_form(spec.fprime_inv_tilde, levels), rtol=1e-15)
    y = np.linspace(-3, 0.3, 12)
    np.testing.assert_allclose(spec.conjugate_tilde(ops, torch.tensor(y)).numpy(), _np_form(spec.conjugate_tilde, y), rtol=1e-15)
    xs, ys = np.array([0.0, 0.2, 1e-300, 0.7]), np.array([0.5, 3.5e-323, 1.0, 1e-310])
    np.testing.assert_allclose(
        spec.perspective(ops, torch.tensor(xs), torch.tensor(ys)).numpy(), _np_form(spec.perspective, xs, ys), rtol=1e-15,
    )


def _np_form(form, *args):
    with np.errstate(all="ignore"):
        return form(_NP, *args)


def test_a_custom_divergence_named_like_a_builtin_is_not_one():
    t = sp.Symbol("t", positive=True)
    with pytest.warns(mentored.NumericCheckWarning, match="bisection"):  # sympy does not solve f'(t) = y here
        fake = mentored.Divergence.from_sympy(t * sp.log(t) + (t - 1) ** 2, t, name="kl")
    assert fake.compiled is None and fake.builtin is None
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    a = mentored.solve(p, q, divergence=fake, budget=0.05).pi
    b = mentored.solve(p, q, divergence="kl", budget=0.05).pi
    assert np.abs(a - b).max() > 1e-3
