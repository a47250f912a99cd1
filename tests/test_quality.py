"""mentored.analysis.quality: the boosting identities (theorem 9), the small-budget rates, the quality optimum."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
import mentored.analysis.quality as Q
from mentored.check.testing import KINDS, budgets_for, instance

ALL = mentored.BUILTIN_NAMES
SMOOTH = tuple(n for n in ALL if mentored.divergence(n).f2_at_1 > 0)  # tv: a kink at 1, no f''(1)


def _truth_on(p, rng):
    """A random distribution on the support of the target."""
    d = rng.dirichlet(np.full(p.size, 0.5)) * (p > 0)
    return d / d.sum()


# --- theorem 9: π = p e^h, Σ p e^h = 1, gain = E_d[h], E_p[h] ≤ 0 -----------------------------


@pytest.mark.parametrize("div", ALL)
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "single"])
def test_boosting_identities(div, kind, rng):
    for _ in range(3):
        p, q = instance(kind, rng)
        d = _truth_on(p, rng)
        for eps in budgets_for(div, p, q):
            sol = mentored.solve(p, q, divergence=div, budget=eps)
            h = Q.clipped_log_ratio(p, q, solution=sol)
            pos = p > 0
            with np.errstate(over="ignore"):
                boosted = p[pos] * np.exp(h[pos])
            # π = p e^h on the support of p; Σ p e^h = 1 − (mass of the continuation on {p = 0}).
            assert_allclose(boosted, sol.pi[pos], rtol=1e-12, atol=1e-15)
            assert_allclose(boosted.sum(), 1.0 - sol.pi[~pos].sum(), rtol=0, atol=1e-12)
            gain = Q.log_loss_gain(p, q, d, solution=sol)  # from log π − log p
            with np.errstate(invalid="ignore"):
                e_h = np.sum(np.where(d > 0, d * h, 0.0))
            assert_allclose(gain, e_h, rtol=1e-10, atol=1e-12)
            finite = np.isfinite(h) & pos
            if finite.all() or not np.any(p[~finite & pos]):
                assert np.sum(p[pos] * h[pos]) <= 1e-12  # Jensen: E_p[h] ≤ 0


def test_gain_matches_direct_log_loss(rng):
    p, q = instance("dense", rng, n=50)
    d = rng.dirichlet(np.ones(50))
    for div in ALL:
        sol = mentored.solve(p, q, divergence=div, budget=0.02)
        want = np.sum(d * np.log(sol.pi)) - np.sum(d * np.log(p))
        assert_allclose(Q.log_loss_gain(p, q, d, divergence=div, budget=0.02), want, rtol=1e-10, atol=1e-13)


def test_batched_and_float32(rng):
    P = rng.dirichlet(np.ones(20), size=5)
    Qd = rng.dirichlet(np.ones(20), size=5)
    D = rng.dirichlet(np.ones(20), size=5)
    budgets = np.linspace(0.0, 0.2, 5)
    g = Q.log_loss_gain(P, Qd, D, divergence="hellinger", budget=budgets)
    assert g.shape == (5,)
    for b in range(5):
        assert_allclose(g[b], Q.log_loss_gain(P[b], Qd[b], D[b], divergence="hellinger", budget=budgets[b]), rtol=1e-12, atol=1e-15)
    assert abs(g[0]) < 1e-14  # budget 0: π = p (up to rounding in the core)
    # one truth for every row
    g1 = Q.log_loss_gain(P, Qd, D[0], divergence="hellinger", budget=budgets)
    assert_allclose(g1[3], Q.log_loss_gain(P[3], Qd[3], D[0], divergence="hellinger", budget=budgets[3]), rtol=1e-12)
    g32 = Q.log_loss_gain(P.astype(np.float32), Qd.astype(np.float32), D, divergence="hellinger", budget=budgets)
    assert_allclose(g32, g, rtol=0, atol=1e-5)
    assert Q.edge(P, Qd, D).shape == (5,)


# --- observed token ids ----------------------------------------------------------------------


def test_observed_token_ids(rng):
    P = rng.dirichlet(np.ones(12), size=6)
    Qd = rng.dirichlet(np.ones(12), size=6)
    y = rng.integers(0, 12, size=6)
    sol = mentored.solve(P, Qd, divergence="kl", budget=0.05)
    g = Q.log_loss_gain(P, Qd, y, solution=sol)
    rows = np.arange(6)
    assert_allclose(g, np.log(sol.pi[rows, y]) - np.log(P[rows, y]), rtol=1e-12, atol=1e-15)
    onehot = np.eye(12)[y]
    assert_allclose(g, Q.log_loss_gain(P, Qd, onehot, solution=sol), rtol=1e-12, atol=1e-15)
    assert_allclose(Q.edge(P, Qd, y), Q.edge(P, Qd, onehot), rtol=0, atol=1e-15)
    # one row: a scalar id
    gs = Q.log_loss_gain(P[0], Qd[0], int(y[0]), divergence="kl", budget=0.05)
    assert isinstance(gs, float)
    assert_allclose(gs, g[0], rtol=1e-12)
    assert Q.edge(P[0], Qd[0], np.int64(y[0])) == pytest.approx(float(Qd[0, y[0]] > P[0, y[0]]) - P[0][Qd[0] > P[0]].sum())


# --- edge sign conventions -------------------------------------------------------------------


def test_edge_conventions(rng):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    assert Q.edge(p, q, [0.2, 0.3, 0.5]) == pytest.approx(0.3)  # truth = q: the edge is TV(p, q)
    assert Q.edge(p, q, p) == 0.0  # truth = target: no edge
    assert Q.edge(p, q, [0.6, 0.3, 0.1]) == pytest.approx(-0.1)  # truth against the drafter
    for _ in range(20):
        p, q = instance("dense", rng)
        assert_allclose(Q.edge(p, q, q), 0.5 * np.abs(p - q).sum(), rtol=1e-12, atol=1e-15)
        assert_allclose(Q.edge(p, q, p), 0.0, atol=1e-15)
        assert_allclose(Q.edge(q, p, p), Q.edge(p, q, q), atol=1e-14)  # symmetric: both are TV


@pytest.mark.parametrize("div", SMOOTH)
def test_edge_predicts_sign_at_small_budget(div, rng):
    agree = 0
    for _ in range(30):
        p, q = instance("dense", rng, n=8)  # no ties: p(U) + p(L) = 1
        d = rng.dirichlet(np.ones(8))
        e = Q.edge(p, q, d)
        if abs(e) < 1e-3:
            continue
        g = Q.log_loss_gain(p, q, d, divergence=div, budget=1e-10)
        assert np.sign(g) == np.sign(e)
        agree += 1
    assert agree >= 20


# --- small-budget approximations: rates ----------------------------------------------------


def _first_breakpoint(p, q):
    r = q / p
    return min((r[r > 1].min() - 1) * p[r > 1].sum(), (1 - r[r < 1].max()) * p[r < 1].sum())


def _rel(x, y):
    return abs(x - y) / abs(y)


@pytest.mark.parametrize("div", SMOOTH)
def test_small_budget_rates(div, rng):
    f2 = mentored.divergence(div).f2_at_1
    checked = 0
    while checked < 4:
        p, q = instance("dense", rng, n=10)
        d = rng.dirichlet(np.ones(10))
        a, b = p[q > p].sum(), p[q < p].sum()
        if abs(1 / a**2 - 1 / b**2) < 0.5 or abs(Q.edge(p, q, d)) < 0.05:
            continue  # keep the leading error terms away from cancellation
        s1 = _first_breakpoint(p, q)
        eps = 0.5 * f2 * (1 / a + 1 / b) * (s1 / 20) ** 2  # s ≈ s1/20: below the first breakpoint
        lo, hi = Q.small_budget(p, q, eps / 100, divergence=div, truth=d), Q.small_budget(p, q, eps, divergence=div, truth=d)
        for sb in (lo, hi):  # below the first breakpoint the thresholds are exact functions of s
            assert_allclose(sb.t_hi_exact, 1 + sb.s_exact / a, rtol=1e-12)
            assert_allclose(sb.t_lo_exact, 1 - sb.s_exact / b, rtol=1e-12)
        lossless = 1 - 0.5 * np.abs(p - q).sum()
        errs = {}
        for name, sb in (("lo", lo), ("hi", hi)):
            errs[name] = (
                _rel(sb.acceptance - lossless, sb.acceptance_exact - lossless),  # = relative error of s
                _rel(sb.divergence, sb.divergence_exact),
                _rel(sb.gain, sb.gain_exact),
            )
        for k, what in enumerate(("A − (1 − TV)", "D_f", "gain")):
            e_lo, e_hi = errs["lo"][k], errs["hi"][k]
            if div == "chi2" and k < 2:  # f''' = 0: exact below the first breakpoint
                assert e_lo < 1e-9 and e_hi < 1e-9, what
                continue
            # O(√ε): dividing ε by 100 divides the relative error by 10
            assert 7 < e_hi / e_lo < 13, (what, e_hi, e_lo)
            assert e_hi < 0.2
        checked += 1


def test_small_budget_tv_and_degenerate(rng):
    p, q = instance("dense", rng)
    with pytest.raises(ValueError, match="tv has no f''"):
        Q.small_budget(p, q, 0.01, divergence="tv")
    sb = Q.small_budget(p, p, 0.01, divergence="kl", truth=p)  # p = q: the curve is one point
    assert sb.s == 0.0 and sb.s_exact == 0.0 and sb.gain == 0.0 and sb.t_hi == 1.0
    sb = Q.small_budget(np.stack([p, q]), np.stack([q, p]), [1e-4, 1e-3], divergence="js")
    assert np.shape(sb.s) == (2,) and np.all(np.isnan(sb.gain))


# --- zeros -----------------------------------------------------------------------------------


def test_infinite_and_undefined_gains():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.0, 0.5, 0.5, 0.0])
    # kl at budget ∞ ends the curve at π = q with t_lo = 0: π_0 = 0 < p_0.
    sol = mentored.solve(p, q, divergence="kl", budget=np.inf)
    assert sol.t_lo == 0.0 and sol.pi[0] == 0.0
    assert Q.log_loss_gain(p, q, 0, solution=sol) == -np.inf
    assert np.isnan(Q.log_loss_gain(p, q, 3, solution=sol))  # p_3 = π_3 = 0: ∞ − ∞
    assert np.isfinite(Q.log_loss_gain(p, q, 1, solution=sol))
    h = Q.clipped_log_ratio(p, q, solution=sol)
    assert h[0] == -np.inf and np.isnan(h[3])
    # hellinger (f∞ = 1) continues onto {p = 0}: π_3 > 0 = p_3
    q = np.array([0.0, 0.3, 0.3, 0.4])
    sol = mentored.solve(p, q, divergence="hellinger", budget=0.5)
    assert sol.pi[3] > 0 and sol.pi[0] > 0
    assert Q.log_loss_gain(p, q, 3, solution=sol) == np.inf
    assert np.isfinite(Q.log_loss_gain(p, q, 0, solution=sol))
    sol = mentored.solve(p, q, divergence="hellinger", budget=np.inf)  # π = q
    assert np.isnan(Q.log_loss_gain(p, q, np.array([0.5, 0.0, 0.0, 0.5]), solution=sol))  # −∞ + ∞
    h = Q.clipped_log_ratio(p, q, solution=sol)
    assert h[0] == -np.inf and h[3] == np.inf


# --- the quality-optimal budget --------------------------------------------------------------


def test_gain_is_not_concave_but_piecewise():
    # U = {1: r = 1.5, 2: r = 10}; the truth sits on token 2. The slope of the gain jumps up when
    # token 1 (d/p = 0) leaves the clipped set at t_hi = 1.5.
    p = np.array([0.6, 0.3, 0.1])
    q = np.array([0.05, 0.45, 0.5])
    d = np.array([0.5, 0.0, 0.5])
    s = np.linspace(0.0, 0.55, 2201)
    g = Q.gain_on_path(p, q, d, s)
    second = np.diff(g, 2)
    assert second.max() > 1e-6  # not concave
    opt = Q.quality_optimal_budget(p, q, d, divergence="kl")
    assert opt.gain >= g.max() - 1e-12
    assert opt.gain <= g.max() + 1e-4


@pytest.mark.parametrize("kind", ["dense", "peaked", "top_k_target", "truncated_draft", "ties", "extreme"])
def test_quality_optimum_against_grid(kind, rng):
    for _ in range(4):
        p, q = instance(kind, rng, n=int(rng.integers(3, 30)))
        d = _truth_on(p, rng) if rng.random() < 0.5 else _truth_on(0.5 * (p + q) * (p > 0) + 0, rng)
        path = mentored.MentoredPath(p, q)
        s_end = max(path.tv - path.q0, 0.0)
        s = np.linspace(0.0, s_end, 4001)
        g = Q.gain_on_path(p, q, d, s)
        g = np.where(np.isnan(g), -np.inf, g)
        for div in ("kl", "tv", "hellinger"):
            opt = Q.quality_optimal_budget(p, q, d, divergence=div)
            assert 0.0 <= opt.s <= s_end + 1e-12
            assert opt.gain >= g.max() - 1e-12  # never worse than a fine grid
            assert opt.gain >= 0.0  # s = 0 is a candidate
            assert_allclose(opt.acceptance, 1 - path.tv + opt.s, rtol=1e-12)
            if np.isfinite(opt.gain) and opt.s > 0:
                # the budget reproduces the point through solve(), and its gain
                sol = mentored.solve(p, q, divergence=div, budget=opt.budget)
                if div != "tv":  # tv: solve returns the largest s of budget ε* = s*, the same point
                    assert_allclose(sol.s, opt.s, rtol=1e-7, atol=1e-12)
                assert_allclose(Q.log_loss_gain(p, q, d, solution=sol), opt.gain, rtol=1e-7, atol=1e-10)


def test_gain_on_path_matches_log_loss_gain(rng):
    p, q = instance("dense", rng, n=30)
    d = rng.dirichlet(np.ones(30))
    path = mentored.MentoredPath(p, q)
    for s in np.linspace(0, path.tv, 9):
        want = np.sum(d * (np.log(path.pi(s)) - np.log(p)))
        assert_allclose(Q.gain_on_path(p, q, d, s), want, rtol=1e-9, atol=1e-13)


def test_quality_optimum_when_nothing_helps(rng):
    p, q = instance("dense", rng, n=10)
    opt = Q.quality_optimal_budget(p, q, p, divergence="kl")  # truth = target: E_p[h] ≤ 0
    assert opt.s == 0.0 and opt.gain == 0.0 and opt.budget == 0.0
    assert_allclose(opt.pi, p, rtol=1e-12)
    opt = Q.quality_optimal_budget(p, q, q, divergence="kl")  # truth = drafter: go all the way
    assert_allclose(opt.s, 0.5 * np.abs(p - q).sum(), rtol=1e-9)


# --- bad input -------------------------------------------------------------------------------


def test_bad_input():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    P, Qd = np.stack([p, q]), np.stack([q, p])
    with pytest.raises(TypeError, match="bool"):
        Q.edge(p, q, np.array([True, False, False]))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 3\)"):
        Q.log_loss_gain(p, q, 3, divergence="kl", budget=0.1)
    with pytest.raises(ValueError, match="token ids must lie"):
        Q.edge(P, Qd, np.array([0, -1]))
    with pytest.raises(ValueError, match="must have shape"):
        Q.edge(p, q, np.array([0, 1, 0]))  # an integer one-hot is read as ids, and refused
    with pytest.raises(ValueError, match="must have shape"):
        Q.edge(P, Qd, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="truth must have shape"):
        Q.edge(P, Qd, np.ones((3, 3)) / 3)
    with pytest.raises(ValueError, match="truth must have shape"):
        Q.edge(p, q, np.ones(4) / 4)
    with pytest.raises(ValueError, match="truth rows must sum to 1"):
        Q.edge(p, q, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="truth has negative"):
        Q.edge(p, q, [1.5, -0.5, 0.0])
    with pytest.raises(ValueError, match="truth contains NaN"):
        Q.edge(p, q, [np.nan, 0.5, 0.5])
    with pytest.raises(ValueError, match="target and draft must have the same shape"):
        Q.edge(p, q[:2], p)
    sol = mentored.solve(p, q, divergence="kl", budget=0.1)
    with pytest.raises(ValueError, match="not both"):
        Q.log_loss_gain(p, q, p, budget=0.1, solution=sol)
    with pytest.raises(TypeError, match="mentored.Solution"):
        Q.clipped_log_ratio(p, q, solution=(1, 2))
    with pytest.raises(ValueError, match="solution.pi has shape"):
        Q.log_loss_gain(P, Qd, np.array([0, 1]), solution=sol)
    with pytest.raises(ValueError, match="exactly one of budget"):
        Q.log_loss_gain(p, q, p)
    with pytest.raises(ValueError, match="one row"):
        Q.quality_optimal_budget(P, Qd, p)
    with pytest.raises(ValueError, match="mass on tokens where the target is 0"):
        Q.quality_optimal_budget([0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="f''"):
        Q.small_budget(p, q, 0.1, divergence=mentored.divergence("tv"))
