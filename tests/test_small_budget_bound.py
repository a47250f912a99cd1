"""The two-sided small-budget bound of docs/theory.md §6 (proofs/SmallBudget.v : small_budget_bound).

With U = {q > p}, L = {q < p}, a = p(U), b = p(L), K = (1/a + 1/b)/2, and m ≤ f̃'' ≤ M on
[t0, t1] = [1 − s1/b, 1 + s1/a] (f̃'' = f'' for the tilted generator), where the window s1 > 0 stays
below the first breakpoint (s1 ≤ s0 = min(b(1 − max_L r), a(min_U r − 1))), the theorem gives, for
every 0 ≤ ε < m K s1²,

    c1 √ε ≤ A*(ε) − (1 − TV(p, q)) ≤ c2 √ε,     c1 = 1/√(M K),  c2 = 1/√(m K).

These tests compute c1, c2 from those formulas and check the solver's A*(ε) against them.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
from mentored.check.testing import instance, llm_like

# built-ins with f''(1) > 0 (tv has a kink at 1 and no f'')
DIVS = tuple(n for n in mentored.BUILTIN_NAMES if mentored.divergence(n).f2_at_1 > 0)
# fractions of the largest budget the theorem covers, eps_max = m K s1²
FRACTIONS = (0.999, 0.5, 0.1, 1e-2, 1e-4, 1e-6)
# tolerance on the bound: the solver's A* is exact up to its bisection and float64 rounding
RTOL = 1e-7


def constants(div: str, p: np.ndarray, q: np.ndarray):
    """The theorem's window s1, interval [t0, t1], m, M, c1, c2 and eps_max for (p, q), or None."""
    pos = p > 0
    up, lo = pos & (q > p), pos & (q < p)
    a, b = p[up].sum(), p[lo].sum()
    if a == 0 or b == 0:
        return None
    r = q[pos] / p[pos]
    r_lo_max = (q[lo] / p[lo]).max()  # the first breakpoint below 1 ...
    r_up_min = (q[up] / p[up]).min()  # ... and above 1
    s0 = min(b * (1 - r_lo_max), a * (r_up_min - 1))
    # keep [t0, t1] inside [1/2, 2], where every built-in's f'' is bounded
    s1 = min(s0, 0.5 * b, a)
    t0, t1 = 1 - s1 / b, 1 + s1 / a
    assert t0 >= 0.5 - 1e-15 and t1 <= 2 + 1e-15
    assert np.all((r <= t0 * (1 + 1e-12)) | (r >= t1 * (1 - 1e-12)) | (r == 1))
    fsecond = mentored.divergence(div).symbolic.fsecond
    grid = np.linspace(t0, t1, 2001)  # the endpoints included; f'' is monotone for every built-in
    f2 = np.asarray(fsecond(grid), dtype=float)
    m, M = float(f2.min()), float(f2.max())
    K = 0.5 * (1 / a + 1 / b)
    return dict(a=a, b=b, s1=s1, t0=t0, t1=t1, m=m, M=M, K=K, c1=1 / np.sqrt(M * K), c2=1 / np.sqrt(m * K), eps_max=m * K * s1**2)


def gain_over_lossless(div, p, q, eps):
    sol = mentored.solve(p, q, divergence=div, budget=eps)
    lossless = 1 - 0.5 * np.abs(p - q).sum()
    return sol.acceptance - lossless, sol


def rows(rng):
    """Random rows of several kinds and LLM-like rows (softmax of Gaussian logits)."""
    out = [instance(kind, rng, n=int(rng.integers(5, 60))) for kind in ("dense", "peaked", "top_k_target", "truncated_draft", "both_truncated") for _ in range(2)]
    out += [llm_like(rng, n) for n in (50, 200, 1000)]
    out += [llm_like(rng, 500, scale=2.0, shift=0.3)]
    return out


@pytest.mark.parametrize("div", DIVS)
def test_acceptance_gain_lies_between_the_constants(div, rng):
    checked = 0
    for p, q in rows(rng):
        c = constants(div, p, q)
        if c is None or c["s1"] < 1e-6:  # no window worth testing (one side empty, or a ratio at 1)
            continue
        for frac in FRACTIONS:
            eps = frac * c["eps_max"]
            g, sol = gain_over_lossless(div, p, q, eps)
            lo, hi = c["c1"] * np.sqrt(eps), c["c2"] * np.sqrt(eps)
            assert lo * (1 - RTOL) - 1e-15 <= g <= hi * (1 + RTOL) + 1e-15, (div, frac, lo, g, hi)
            # below the first breakpoint the thresholds are t_lo = 1 − s/b, t_hi = 1 + s/a (sb_thresholds)
            assert_allclose(sol.t_lo, 1 - sol.s / c["b"], rtol=1e-9)
            assert_allclose(sol.t_hi, 1 + sol.s / c["a"], rtol=1e-9)
            # and D_f(π(s)‖p) = b f̃(t_lo) + a f̃(t_hi) (sb_Df), which the solver spends in full
            ft = mentored.divergence(div).f_tilde
            D = c["b"] * ft(sol.t_lo) + c["a"] * ft(sol.t_hi)
            assert_allclose(D, eps, rtol=1e-6)
            checked += 1
    assert checked >= 6 * len(FRACTIONS)


def test_chi2_bound_is_exact(rng):
    """chi2: f'' = 2 everywhere, m = M, and the two sides coincide: A* − (1 − TV) = √(2εab/(2(a+b)))."""
    checked = 0
    for p, q in rows(rng):
        c = constants("chi2", p, q)
        if c is None or c["s1"] < 1e-6:
            continue
        assert c["m"] == c["M"] == 2.0 and c["c1"] == c["c2"]
        for frac in FRACTIONS:
            eps = frac * c["eps_max"]
            g, _ = gain_over_lossless("chi2", p, q, eps)
            exact = np.sqrt(eps * c["a"] * c["b"] / (c["a"] + c["b"]))
            assert_allclose(c["c1"] * np.sqrt(eps), exact, rtol=1e-12)
            assert_allclose(g, exact, rtol=1e-7)
            # a constant 1 % too small or too large is caught
            assert not (1.01 * c["c1"] * np.sqrt(eps) <= g) and not (g <= 0.99 * c["c2"] * np.sqrt(eps))
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("div", DIVS)
def test_bound_is_tight_on_a_narrow_window(div):
    """The bound is not trivially loose: on a narrow window around 1, c2/c1 = √(M/m) is close to 1,
    and the gain sits within that factor of both constants."""
    p = np.array([0.3, 0.2, 0.25, 0.25])
    q = np.array([0.29, 0.19, 0.26, 0.26])  # ratios 0.967, 0.95, 1.04, 1.04
    c = constants(div, p, q)
    assert_allclose([c["t0"], c["t1"]], [1 - 1 / 30, 1 + 1 / 30], rtol=1e-12)  # s1 = b(1 − 0.967)
    ratio = c["c2"] / c["c1"]
    # √(M/m) on [29/30, 31/30]: (t1/t0)^(k/2) with f'' ∝ t^(−k): chi2 1, kl 1.034, hellinger 1.051,
    # js 1.051, reverse_kl 1.069, neyman_chi2 1.105
    assert 1 <= ratio < 1.11
    for frac in (0.5, 1e-3):
        eps = frac * c["eps_max"]
        g, _ = gain_over_lossless(div, p, q, eps)
        assert c["c1"] * np.sqrt(eps) * (1 - RTOL) <= g <= c["c2"] * np.sqrt(eps) * (1 + RTOL)
        assert g / (c["c1"] * np.sqrt(eps)) < ratio * (1 + RTOL)


def test_wrong_constants_would_fail(rng):
    """Sanity check of the test itself: swapping m and M (c1 ↔ c2) breaks the bound for kl."""
    p, q = llm_like(rng, 200)
    c = constants("kl", p, q)
    assert c is not None and c["m"] < c["M"]
    eps = 0.5 * c["eps_max"]
    g, _ = gain_over_lossless("kl", p, q, eps)
    assert c["c1"] * np.sqrt(eps) <= g <= c["c2"] * np.sqrt(eps)
    assert not (c["c2"] * np.sqrt(eps) <= g <= c["c1"] * np.sqrt(eps))
