"""The C++ core against things that did not compute it: the bisection reference, the cvxpy
oracle, and the definitions (feasibility measured straight from D_f)."""

from __future__ import annotations

import numpy as np
import pytest
import mpmath
import sympy
from numpy.testing import assert_allclose, assert_array_equal

import mentored
from mentored.check import reference
from mentored.check.oracle import oracle_solve
from mentored.check.testing import KINDS, budgets_for, instance, llm_like

DIVERGENCES = mentored.BUILTIN_NAMES


def assert_feasible(pi, p, div, budget, *, rtol=1e-9, atol=1e-12):
    """π in the simplex and D_f(π‖p) ≤ budget, both measured from the definitions."""
    assert np.all(pi >= 0)
    assert_allclose(pi.sum(), 1.0, rtol=0, atol=1e-12)
    d = float(mentored.divergence(div)(pi, p))
    assert d <= budget * (1 + rtol) + atol, f"D_f(π‖p) = {d!r} exceeds the budget {budget!r}"


@pytest.mark.parametrize("div", DIVERGENCES)
@pytest.mark.parametrize("kind", KINDS)
def test_core_matches_reference(div, kind, rng):
    # 12 kinds × 2 rows × 6 budgets per divergence: the optimum and π agree with the bisection
    # reference, and π is feasible by the definition of D_f. (Kind "single" has one row, p = q = [1].)
    for _ in range(1 if kind == "single" else 2):
        p, q = instance(kind, rng)
        budgets = budgets_for(div, p, q)
        ref_pis, _ = reference.solve(p, q, div, budgets)  # all budgets in one search
        for budget, ref_pi in zip(budgets, ref_pis):
            sol = mentored.solve(p, q, divergence=div, budget=budget)
            assert_feasible(sol.pi, p, div, budget)
            assert_allclose(sol.acceptance, np.minimum(ref_pi, q).sum(), rtol=0, atol=1e-9)
            assert_allclose(sol.pi, ref_pi, rtol=0, atol=1e-8)
            assert_allclose(sol.acceptance, np.minimum(sol.pi, q).sum(), rtol=0, atol=1e-12)
            assert_allclose(sol.s, 0.5 * np.abs(sol.pi - p).sum(), rtol=0, atol=1e-12)
            assert_allclose(sol.divergence, mentored.divergence(div)(sol.pi, p), rtol=1e-7, atol=1e-12)


def test_reference_searches_budgets_and_points_at_once_as_one_at_a_time(rng):
    # reference.solve and reference.curve take arrays: one search lane per budget or s, with fewer
    # points per step than one lane alone gets. The same thresholds, bitwise, as one at a time; s
    # the same up to the rounding of D_f (not exactly monotone in s: the search may stop elsewhere).
    for kind in ("dense", "top_p_target", "ties", "extreme"):
        p, q = instance(kind, rng)
        s = np.linspace(0.0, 0.5 * np.abs(p - q).sum(), 5)
        pis, t_lo, t_hi = reference.curve(p, q, s)
        for i in range(s.size):
            pi, lo, hi = reference.curve(p, q, s[i])
            assert np.array_equal(pi, pis[i]) and (lo, hi) == (t_lo[i], t_hi[i])
        if kind not in ("dense", "extreme"):
            continue  # (one budget at a time is the slow way: two kinds suffice)
        for div in ("kl", "reverse_kl"):
            budgets = budgets_for(div, p, q)
            pis, ss = reference.solve(p, q, div, budgets)
            for b, pi, s_b in zip(budgets, pis, ss):
                one, s_one = reference.solve(p, q, div, b)
                assert_allclose(one, pi, rtol=0, atol=1e-15)
                assert_allclose(s_one, s_b, rtol=0, atol=1e-15)


def check_against_oracle(p, q, div, budget, *, atol=1e-7):
    """The core's π is feasible and accepts at least as much as the oracle's point.

    A feasible π that beats the oracle's proves the oracle short of the optimum; the reverse would
    prove the core suboptimal. Returns core − oracle, or None when the oracle gave no usable point
    (a failed or infeasible solve is the oracle's failure, counted by the callers).
    """
    sol = mentored.solve(p, q, divergence=div, budget=budget)
    assert_feasible(sol.pi, p, div, budget)
    o = oracle_solve(p, q, div, budget)
    # The oracle's own point is checked before it is believed.
    if not o.usable(budget):
        return None
    # A slightly infeasible oracle point may accept slightly more (OracleResult.slack).
    slack = 2.0 * o.slack(sol.lam, div)
    assert sol.acceptance >= o.acceptance - atol - slack, (sol.acceptance, o)
    return sol.acceptance - o.acceptance


# Rows on which the conic solvers are well conditioned: there the oracle must also agree closely.
# Elsewhere (probabilities down to 1e-30, ratios to 1e12) it often stops short of the optimum, which
# the one-sided check above still uses; the reference covers those rows two-sided.
WELL_CONDITIONED = ("dense", "top_k_target", "truncated_draft", "disjoint", "equal", "single", "ties", "one_hot_draft")


@pytest.mark.slow  # 84 cases × 5 conic solves
@pytest.mark.parametrize("div", DIVERGENCES)
@pytest.mark.parametrize("kind", KINDS)
def test_core_matches_oracle(div, kind, rng):
    p, q = instance(kind, rng)  # one row of each kind per divergence (the reference covers many more)
    # Budget 0 leaves a single feasible point, where interior-point solvers stall; it is checked
    # exactly in test_budget_zero_is_lossless instead.
    diffs = [check_against_oracle(p, q, div, budget) for budget in budgets_for(div, p, q)[1:]]
    usable = [d for d in diffs if d is not None]
    assert len(usable) >= len(diffs) // 2, f"the oracle failed on {len(diffs) - len(usable)} of {len(diffs)}"
    if kind in WELL_CONDITIONED:
        assert np.median(np.abs(usable)) <= 1e-6


@pytest.mark.slow  # n = 4096, and a conic solve of that size
@pytest.mark.parametrize("div", DIVERGENCES)
def test_llm_like_rows(div, rng):
    # Softmax of Gaussian logits, n = 4096, against the reference and the oracle.
    p, q = llm_like(rng, 4096)
    budgets = (1e-4, 0.05, 0.5)
    for budget, ref_pi in zip(budgets, reference.solve(p, q, div, budgets)[0]):
        sol = mentored.solve(p, q, divergence=div, budget=budget)
        assert_allclose(sol.acceptance, np.minimum(ref_pi, q).sum(), rtol=0, atol=1e-9)
        assert_feasible(sol.pi, p, div, budget)
    diff = check_against_oracle(p, q, div, 0.05)
    assert diff is not None and abs(diff) <= 1e-6


def test_a_wrong_answer_is_caught(rng):
    # The oracle check fails on a feasible but suboptimal π (here: a point halfway to the optimum).
    p, q = instance("dense", rng, n=20)
    sol = mentored.solve(p, q, divergence="kl", budget=0.1)
    worse = 0.5 * (p + sol.pi)
    o = oracle_solve(p, q, "kl", 0.1)
    assert np.minimum(worse, q).sum() < o.acceptance - 1e-4


@pytest.mark.parametrize("div", DIVERGENCES)
def test_budget_zero_is_lossless(div, rng):
    for kind in KINDS:
        p, q = instance(kind, rng)
        sol = mentored.solve(p, q, divergence=div, budget=0.0)
        assert_allclose(sol.pi, p, rtol=0, atol=1e-15)
        assert_allclose(sol.acceptance, 1 - 0.5 * np.abs(p - q).sum(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("div", DIVERGENCES)
def test_large_budget_reaches_the_end_of_the_curve(div, rng):
    for kind in KINDS:
        p, q = instance(kind, rng)
        sol = mentored.solve(p, q, divergence=div, budget=np.inf)
        q0 = q[p == 0].sum()
        d = mentored.divergence(div)
        full = float(d(q, p))
        if np.isfinite(full):  # π = q is feasible: everything is accepted
            assert_allclose(sol.pi, q, rtol=0, atol=1e-12)
            assert_allclose(sol.acceptance, 1.0, rtol=0, atol=1e-12)
            assert sol.lam == 0.0
        elif np.isinf(d.f_inf):  # mass where p = 0 is forbidden (docs/theory.md §3): acceptance 1 − Q0
            assert_allclose(sol.acceptance, 1.0 - q0, rtol=0, atol=1e-12)
            assert np.all(sol.pi[p == 0] == 0)
        else:  # f(0) = ∞ and a token with q = 0 < p: D(q‖p) = ∞ is still ≤ budget = ∞
            assert_allclose(sol.pi, q, rtol=0, atol=1e-12)
        # A large finite budget stays within budget even where π → q costs D → ∞.
        big = mentored.solve(p, q, divergence=div, budget=1e3)
        assert_feasible(big.pi, p, div, 1e3)


def test_total_variation_is_geometric(rng):
    # A* = min(1, 1 − TV(p, q) + ε), and π lies on a TV geodesic between p and q.
    for kind in KINDS:
        p, q = instance(kind, rng)
        tv = 0.5 * np.abs(p - q).sum()
        for eps in (0.0, 0.01, 0.1, 0.3, 1.0):
            sol = mentored.solve(p, q, divergence="tv", budget=eps)
            assert_allclose(sol.acceptance, min(1.0, 1 - tv + eps), rtol=0, atol=1e-12)
            assert_allclose(0.5 * np.abs(sol.pi - p).sum() + 0.5 * np.abs(sol.pi - q).sum(), tv, rtol=0, atol=1e-12)


@pytest.mark.parametrize("div", DIVERGENCES)
def test_acceptance_mode_is_the_inverse_of_budget_mode(div, rng):
    for kind in ("dense", "top_k_target", "extreme"):
        p, q = instance(kind, rng)
        path = mentored.MentoredPath(p, q)
        top = 1 - path.tv + path.s_max(div)
        for a in np.linspace(1 - path.tv, top, 5)[1:-1]:
            sol = mentored.solve(p, q, divergence=div, acceptance=a)
            assert_allclose(sol.acceptance, a, rtol=0, atol=1e-12)
            again = mentored.solve(p, q, divergence=div, budget=sol.divergence)
            assert_allclose(again.acceptance, a, rtol=0, atol=1e-8)
        below = mentored.solve(p, q, divergence=div, acceptance=max(0.0, 1 - path.tv - 0.1))
        assert_allclose(below.pi, p, rtol=0, atol=1e-15)


def test_unreachable_acceptance_is_refused():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.4, 0.4, 0.2])
    with pytest.raises(ValueError, match="out of reach"):
        mentored.solve(p, q, divergence="kl", acceptance=0.9)
    assert_allclose(mentored.solve(p, q, divergence="kl", acceptance=0.8).acceptance, 0.8)
    # Under tv the excluded token can be reached: f∞ = ½ < ∞.
    assert_allclose(mentored.solve(p, q, divergence="tv", acceptance=0.9).acceptance, 0.9)


@pytest.mark.parametrize("div", DIVERGENCES)
def test_batch_equals_rows_and_threads_do_not_matter(div, rng):
    rows = [instance(k, rng, n=17) for k in KINDS if k != "single"]
    P = np.stack([r[0] for r in rows])
    Q = np.stack([r[1] for r in rows])
    budgets = rng.uniform(0, 0.5, size=len(rows))
    one = mentored.solve(P, Q, divergence=div, budget=budgets, threads=1)
    two = mentored.solve(P, Q, divergence=div, budget=budgets, threads=2)
    for field in ("pi", "acceptance", "divergence", "s", "t_lo", "t_hi"):
        assert_array_equal(getattr(one, field), getattr(two, field))
    for b, (p, q) in enumerate(rows):
        sol = mentored.solve(p, q, divergence=div, budget=budgets[b])
        assert_array_equal(one.pi[b], sol.pi)
        assert one.acceptance[b] == sol.acceptance


@pytest.mark.parametrize("div", DIVERGENCES)
def test_float32_in_float32_out(div, rng):
    p, q = llm_like(rng, 4096)
    P = np.stack([p, q]).astype(np.float32)
    Q = np.stack([q, p]).astype(np.float32)
    sol32 = mentored.solve(P, Q, divergence=div, budget=0.1)
    assert sol32.pi.dtype == np.float32 and sol32.pi.shape == P.shape
    sol64 = mentored.solve(P.astype(np.float64), Q.astype(np.float64), divergence=div, budget=0.1)
    assert_allclose(sol32.acceptance, sol64.acceptance, rtol=0, atol=2e-5)
    assert_allclose(sol32.pi.sum(axis=1), 1.0, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_receives_pi(dtype, rng):
    P = rng.dirichlet(np.full(500, 0.3), size=3).astype(dtype)
    Q = rng.dirichlet(np.full(500, 0.3), size=3).astype(dtype)
    t = sympy.Symbol("t", positive=True)
    for div in ("kl", mentored.Divergence.from_sympy((t - 1) ** 2, t, name="chi2_sym")):
        fresh = mentored.solve(P, Q, divergence=div, budget=0.1, normalize=True)
        out = np.full_like(P, np.nan)
        sol = mentored.solve(P, Q, divergence=div, budget=0.1, normalize=True, out=out)
        assert np.shares_memory(sol.pi, out) and np.array_equal(out, fresh.pi)
        row = np.full_like(P[0], np.nan)
        one = mentored.solve(P[0], Q[0], divergence=div, budget=0.1, normalize=True, out=row)
        assert np.shares_memory(one.pi, row) and np.array_equal(row, fresh.pi[0])


def test_scalar_fields_for_one_row_and_arrays_for_batches(rng):
    p, q = instance("dense", rng, n=8)
    one = mentored.solve(p, q, budget=0.1)
    assert isinstance(one.acceptance, float) and one.pi.shape == (8,)
    many = mentored.solve(np.stack([p, p]), np.stack([q, q]), budget=[0.1, 0.2])
    assert many.acceptance.shape == (2,) and many.pi.shape == (2, 8)
    assert many.acceptance[1] >= many.acceptance[0]


def test_integer_and_list_input():
    sol = mentored.solve([1, 0], [0, 1], divergence="tv", budget=0.25)
    assert sol.pi.dtype == np.float64
    assert_allclose(sol.pi, [0.75, 0.25])


@pytest.mark.parametrize("div", DIVERGENCES)
def test_dual_parameters_satisfy_stationarity(div, rng):
    # λ f'(t_hi) = 1 − μ and λ f'(t_lo) = −μ: the KKT conditions of docs/theory.md §3 at clipped tokens.
    d = mentored.divergence(div)
    p, q = instance("dense", rng, n=30)
    sol = mentored.solve(p, q, divergence=div, budget=0.02)
    assert sol.lam > 0 and np.isfinite(sol.t_hi)
    assert_allclose(sol.lam * d.fprime(np.array(sol.t_hi)), 1 - sol.mu, rtol=1e-9, atol=1e-9)
    assert_allclose(sol.lam * d.fprime(np.array(sol.t_lo)), -sol.mu, rtol=1e-9, atol=1e-9)
    if div == "tv":
        assert (sol.lam, sol.mu) == (1.0, 0.5)


def test_generators_exported_by_the_core():
    # The codes come from the core's enum, not from a table kept equal by hand; the untilted
    # constants (tilt c = f'(1), f(0), f∞) agree with the Python definitions.
    G = mentored._core.Generator
    assert list(G.__members__) == list(DIVERGENCES)
    for name, g in G.__members__.items():
        d = mentored.divergence(name)
        tilt, f0, f_inf = mentored._core.generator_constants(g)
        assert mentored._core.generator_constants(int(g)) == (tilt, f0, f_inf)
        assert (f0, f_inf) == (d.f0, d.f_inf), name
        assert tilt == (0.0 if name == "tv" else float(d.fprime(np.array(1.0)))), name
        assert mentored._core.generator_f(g, 2.0) == mentored._core.generator_f(int(g), 2.0)
    with pytest.raises(ValueError, match="unknown divergence code"):
        mentored._core.generator_constants(len(G.__members__))


@pytest.mark.parametrize("name", [n for n in DIVERGENCES if n != "tv"])
def test_compiled_derivative_is_accurate(name):
    # f̃' near 1 is small and is differenced for λ: relative accuracy there, and the limits at 0 and ∞.
    t = np.concatenate([1 + np.array([-1e-12, -1e-9, -1e-5, 1e-12, 1e-9, 1e-5, 0.1, -0.1]), np.logspace(-300, 300, 61)])
    core = mentored._core.generator_df_array(getattr(mentored._core.Generator, name), t)
    d = mentored.divergence(name)
    tt = sympy.Symbol("t", positive=True)
    df = sympy.lambdify(tt, sympy.diff(d.builtin.source(tt), tt) - d.tilt, "mpmath")  # f̃' = f' − f'(1)
    with mpmath.workdps(50):
        exact = np.array([float(df(mpmath.mpf(float(x)))) for x in t])
    assert_allclose(core, exact, rtol=4e-16 * 8, atol=0)
    ends = mentored._core.generator_df_array(int(getattr(mentored._core.Generator, name)), np.array([0.0, np.inf]))
    assert ends[0] == -np.inf or ends[0] == d.fprime(np.array(1e-300)) - d.tilt
    assert ends[1] == d.f_inf - d.tilt


def test_tv_one_sided_derivative_at_its_kink():
    df = mentored._core.generator_df_array
    assert list(df(0, np.array([0.0, 0.5, 1.0, 2.0, np.inf]), 1)) == [-0.5, -0.5, 0.5, 0.5, 0.5]
    assert list(df(0, np.array([1.0]), -1)) == [-0.5]


def _numpy_dual(d, t_lo, t_hi, binding):
    """λ, μ from numpy's f′, as Python computed them before the core did."""
    up = np.where(t_hi == 1.0, np.nextafter(1.0, 2.0), t_hi)
    down = np.where(t_lo == 1.0, np.nextafter(1.0, 0.0), t_lo)
    d_hi, d_lo = d.fprime(up), d.fprime(down)
    gap = d_hi - d_lo
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(gap > 1e-8, 1.0 / gap, np.inf)
        mu = np.where(np.isfinite(lam), -lam * d_lo, np.nan)
    return np.where(binding, lam, 0.0), np.where(binding, mu, 0.0)


@pytest.mark.parametrize("name", DIVERGENCES)
def test_core_dual_parameters_equal_the_numpy_formula(name, rng):
    # The core returns λ, μ per row (columns 6, 7 of its results); they equal 1/(f'(t_hi) − f'(t_lo))
    # and −λ f'(t_lo) from numpy's f' wherever the gap is well conditioned, in both modes.
    d = mentored.divergence(name)
    P, Q = map(np.array, zip(*(llm_like(rng, 200) for _ in range(24))))
    P[16:][rng.random((8, 200)) < 0.2] = 0.0  # exact zeros on either side: t_lo = 0, t_hi = ∞
    Q[20:][rng.random((4, 200)) < 0.2] = 0.0
    P, Q = P / P.sum(1, keepdims=True), Q / Q.sum(1, keepdims=True)
    B = len(P)
    for mode, values in ((0, np.exp(rng.uniform(np.log(1e-3), np.log(3.0), B))), (1, rng.uniform(0.3, 1.0, B))):
        try:
            pi, res, status, _ = mentored._core.solve(P, Q, int(getattr(mentored._core.Generator, name)), mode, values, 1)
        except ValueError:
            continue
        ok = status == 0
        assert res.shape == (B, 8)
        binding = (res[:, 0] < res[:, 5]) if mode == 0 else np.ones(B, bool)
        lam, mu = _numpy_dual(d, res[:, 1], res[:, 2], binding)
        assert_allclose(res[ok, 6], lam[ok], rtol=1e-12, atol=0)
        assert_allclose(res[ok, 7], mu[ok], rtol=1e-12, atol=1e-300)
        sol = mentored.solve(P[ok], Q[ok], divergence=name, **({"budget": values[ok]} if mode == 0 else {"acceptance": values[ok]}))
        assert_array_equal(sol.lam, res[ok, 6])
        assert_array_equal(sol.mu, res[ok, 7])
        core_lam, core_mu = mentored._core.dual(int(getattr(mentored._core.Generator, name)), res[:, 1].copy(), res[:, 2].copy(), binding)
        assert_array_equal(core_lam[ok], res[ok, 6])
        assert_array_equal(core_mu[ok], res[ok, 7])
