"""A sympy generator compiled to the core's expression program (mentored/divergences/program.py, cpp/mentored/program.hpp):
the same f̃ as SymbolicInfo.f_tilde, the same optimum as the Python callbacks, and the callbacks where the
code does not translate."""

import numpy as np
import pytest
import sympy as sp
from sympy.codegen.cfunctions import hypot

import mentored
from mentored import _core
from mentored.divergences import program as _program
from mentored.check.testing import llm_like

from test_symbolic import CUSTOM, T

NONSMOOTH = {
    "hinge": sp.Max(T - 1, 0),
    "tv_abs": sp.Abs(T - 1) / 2,
    "piecewise": sp.Piecewise(((T - 1) ** 2, T < 1), (T - 1, True)) + sp.Min(0, T - 1) / 2,
    "heaviside": (T - 1) * sp.Heaviside(T - 1) + (T - 1) ** 2,
}
# No cancellation in f̃ = f − c(t − 1) beyond one rounding: the program's numbers are numpy's to 1e-12.
WELL_CONDITIONED = {"triangular", "jeffreys", "le_cam", *NONSMOOTH}
GRID = np.concatenate([
    [0.0, 5e-324, np.inf], np.logspace(-300, 300, 121), 1 + np.linspace(-0.02, 0.02, 81),
    1 + np.logspace(-16, -1, 31), 1 - np.logspace(-16, -1, 31), 1 + np.array([-1e-3, 1e-3]) * (1 + 1e-12),
])


@pytest.fixture(scope="module")
def divs(custom_divergence):
    return {k: custom_divergence(e, T, name=k) for k, e in {**CUSTOM, **NONSMOOTH}.items()}


def exact_f_tilde(info, x):
    """f̃(x) = f(x) − c(x − 1) at 40 digits, c the float tilt the core uses."""
    c = sp.Rational(info.tilt)
    return np.array([float(sp.N(info.expr.subs(info.t, sp.Rational(v)) - c * (sp.Rational(v) - 1), 40)) for v in x])


@pytest.mark.parametrize("name", [*CUSTOM, *NONSMOOTH])
def test_program_f_tilde_is_symbolic_info_f_tilde(divs, name):
    d = divs[name]
    prog = d.program
    assert isinstance(prog, _core.Program) and prog.f_inf == d.f_inf - d.tilt
    got, want = prog.f_tilde(GRID), d.f_tilde(GRID)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    near = np.abs(GRID - 1) < 1e-3  # the Taylor series of f̃ at 1: the same operations, the same bits
    np.testing.assert_array_equal(got[near], want[near])
    if name in WELL_CONDITIONED:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        return
    # f̃ with cancellation (t^(1/3), t³ against linear terms near 1): an ulp of pow apart from numpy's
    # becomes more after cancellation; the program must be as accurate as numpy, measured at 40 digits.
    x = GRID[np.isfinite(GRID) & (GRID > 0) & (GRID < 1e100)]  # t³ overflows past 1e102
    ref = exact_f_tilde(d.symbolic, x)
    assert np.all(np.isfinite(ref))
    err = lambda v: np.max(np.abs(v - ref) / np.maximum(np.abs(ref), 1e-300))  # noqa: E731
    assert err(prog.f_tilde(x)) <= max(1e-12, 4 * err(d.f_tilde(x)))


def test_a_wrong_program_is_caught(divs):
    # The comparison above fails a program with one opcode changed (a − b read as a + b).
    info = divs["triangular"].symbolic
    ops, values = _program.translate(*_program.source(info))
    ops = [int(_core.Op.add) if op == int(_core.Op.sub) else op for op in ops]
    bad = _core.Program(ops, values, info.f0, info.f_at_inf, info.tilt, info.f_inf, list(info.series), 1e-3)
    far = GRID[np.abs(GRID - 1) > 1e-2]
    assert not np.allclose(bad.f_tilde(far), info.f_tilde(far), rtol=1e-12, atol=0)


def test_a_malformed_program_is_refused():
    with pytest.raises(ValueError, match="too few values"):
        _core.Program([int(_core.Op.add)], [0.0], 0.0, 0.0, 0.0, 1.0, [], 1e-3)
    with pytest.raises(ValueError, match="leaves 2 values"):
        _core.Program([int(_core.Op.t)] * 2, [0.0] * 2, 0.0, 0.0, 0.0, 1.0, [], 1e-3)
    with pytest.raises(ValueError, match="unknown opcode"):
        _core.Program([999], [0.0], 0.0, 0.0, 0.0, 1.0, [], 1e-3)
    with pytest.raises(ValueError, match="stack slots"):
        _core.Program([int(_core.Op.t)] * 40 + [int(_core.Op.add)] * 39, [0.0] * 79, 0.0, 0.0, 0.0, 1.0, [], 1e-3)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(7)
    P, Q = (np.stack(x) for x in zip(*[llm_like(rng, 3000) for _ in range(4)]))
    P[0, :50] = 0.0  # drafter mass where the target is zero (f∞ enters)
    P[0] /= P[0].sum()
    return P, Q


@pytest.mark.parametrize("name", [*CUSTOM, *NONSMOOTH])
def test_the_program_solves_as_the_callbacks(divs, rows, monkeypatch, name):
    d = divs[name]
    P, Q = rows
    assert d.program is not None
    for kw in (dict(budget=1e-6), dict(budget=0.05), dict(acceptance=0.9)):
        if "acceptance" in kw and not np.isfinite(d.f_inf):
            kw = dict(acceptance=0.85)
        fast = mentored.solve(P, Q, divergence=d, **kw)
        fast32 = mentored.solve(P.astype(np.float32), Q.astype(np.float32), divergence=d, **kw)
        path = mentored.MentoredPath(P[1], Q[1]).frontier([1e-4, 0.1], divergence=d)
        with monkeypatch.context() as m:
            m.setattr(_program, "_ENABLED", False)
            assert d.program is None
            slow = mentored.solve(P, Q, divergence=d, **kw)
            slow32 = mentored.solve(P.astype(np.float32), Q.astype(np.float32), divergence=d, **kw)
            path_slow = mentored.MentoredPath(P[1], Q[1]).frontier([1e-4, 0.1], divergence=d)
        np.testing.assert_allclose(fast.pi, slow.pi, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(fast32.pi, slow32.pi, rtol=2e-7, atol=1e-30)  # float32 π: an ulp at most
        np.testing.assert_allclose(fast.acceptance, slow.acceptance, rtol=1e-12)
        np.testing.assert_allclose(fast.lam, slow.lam, rtol=1e-9)
        np.testing.assert_allclose(path, path_slow, rtol=1e-12)


def test_untranslatable_code_keeps_the_callbacks(rows):
    # numpy's hypot has no opcode: no program, and the solve goes through the Python callbacks.
    with pytest.warns(mentored.NumericCheckWarning, match="numerically"):
        d = mentored.Divergence.from_sympy(hypot(T - 1, 1) - 1, T, name="hyperbola", timeout=60)
    assert d.program is None
    P, Q = rows
    sol = mentored.solve(P, Q, divergence=d, budget=0.05)
    np.testing.assert_allclose(d(sol.pi, P), 0.05, rtol=1e-9)
    assert mentored.divergence("kl").program is None  # a built-in: the core's own generator


# Generators whose printed form passes DBL_MAX on the way at t where f̃ itself is a double. Sympy takes
# 1-3 s on some of them on a quiet machine: the test checks the program, not the analysis's speed (the
# time limit has its own tests in test_adversarial.py), so it waits longer than the default 5 s.
SLOW = 60.0
OVERFLOWING = {
    "logcosh": sp.log(sp.cosh(T - 1)),  # cosh(t − 1) overflows past t ≈ 711
    "softplus": sp.log(1 + sp.exp(T - 1)) - sp.log(2) - (T - 1) / 2,
    "tiny": (T - 1) ** 2 / 10**200,  # (t − 1)² past t ≈ 1.3e154
    "logsumexp": sp.log((sp.exp(T) + sp.exp(2 - T)) / 2) - 1,  # e^t past t ≈ 709
    "cubic": (T**3 - 1 - 3 * (T - 1)) / 10**300,  # t³ past t ≈ 5.6e102, f̃ a double up to t ≈ 1e202
    "hyperbola": sp.sqrt(1 + (T - 1) ** 2) - 1,  # (t − 1)² past t ≈ 1.3e154
}


@pytest.mark.parametrize("name", list(OVERFLOWING))
def test_the_program_evaluates_f_where_its_printed_form_overflows(name):
    d = mentored.Divergence.from_sympy(OVERFLOWING[name], T, name=name, timeout=SLOW)
    prog = d.program
    assert prog is not None
    x = np.array([0.5, 3.0, 705.0, 720.0, 1e3, 1e5, 1e10, 1e100, 1e154, 5e169, 1e250, 1e300, 1e307])
    with np.errstate(over="ignore"):
        ref = exact_f_tilde(d.symbolic, x)  # 40 digits, rounded: ∞ only where f̃ passes DBL_MAX
    got = prog.f_tilde(x)
    assert np.array_equal(np.isinf(got), np.isinf(ref)), (x[np.isinf(got) != np.isinf(ref)])
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=4e-15, atol=0)
    np.testing.assert_allclose(d.f_tilde(x)[fin], ref[fin], rtol=4e-15, atol=0)  # numpy's, through the same program


def test_a_ratio_past_dbl_max_costs_its_exact_term_under_a_user_generator():
    # q_2/p_2 = 5e309 passes DBL_MAX: the core holds it scaled and asks the generator for the term
    # p_2 f̃(q_2/p_2) = 1e-310·1e-300·(5e309)² = 2.5e9 (the program in extended range; ∞ for want of it).
    d = mentored.Divergence.from_sympy((T - 1) ** 2 / 10**300, T)
    p, q = np.array([0.5, 0.5, 1e-310]), np.array([0.5, 0.0, 0.5])
    assert float(d(q, p)) == pytest.approx(2.5e9, rel=1e-12)
    # π = (0.5, 0.5 − x, x): D = 1e10·x² (+ 0.5e-300(1 − x/0.5)²), so ε = 1e9 gives x = √0.1
    want = [1.0, 0.5 + np.sqrt(0.1)]
    got = [mentored.solve(p, q, divergence=d, budget=b).acceptance for b in (1e10, 1e9)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(mentored.MentoredPath(p, q).frontier([1e10, 1e9], divergence=d), want, rtol=1e-12)
