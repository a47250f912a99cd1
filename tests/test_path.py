"""MentoredPath, the structure for many questions on one row, against the definitions."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
from mentored.check import reference
from mentored.check.testing import KINDS, instance, llm_like

DIVERGENCES = mentored.BUILTIN_NAMES


@pytest.mark.parametrize("kind", KINDS)
def test_thresholds_invert_down_and_up(kind, rng):
    p, q = instance(kind, rng)
    path = mentored.MentoredPath(p, q)
    d_up = reference.up(p, q, np.inf)
    for s in np.linspace(0.0, path.tv, 9):
        t_lo, t_hi = path.thresholds(s)
        assert 0.0 <= t_lo <= 1.0 <= t_hi
        assert_allclose(reference.down(p, q, t_lo), s, rtol=0, atol=1e-12)
        if s <= d_up - 1e-12:
            assert_allclose(reference.up(p, q, t_hi), s, rtol=0, atol=1e-12)
        pi = path.pi(s)
        ref_pi, _, _ = reference.curve(p, q, s)
        assert_allclose(pi, ref_pi, rtol=0, atol=1e-10)
        assert_allclose(path.acceptance(s), np.minimum(pi, q).sum(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("div", DIVERGENCES)
def test_divergence_along_the_curve(div, rng):
    d = mentored.divergence(div)
    for kind in ("dense", "top_k_target", "truncated_draft", "ties", "extreme"):
        p, q = instance(kind, rng)
        path = mentored.MentoredPath(p, q)
        values = []
        for s in np.linspace(0.0, path.tv, 13):
            if s > path.s_max(div) + 1e-12:
                assert path.divergence_at(s, div) == np.inf
                continue
            value = path.divergence_at(s, div)
            exact = float(d(path.pi(s), p))
            assert_allclose(value, exact, rtol=1e-9, atol=1e-13)
            values.append(value)
        assert np.all(np.diff(values) >= -1e-13)  # nondecreasing in s (proofs: D_monotone)


@pytest.mark.parametrize("div", DIVERGENCES)
def test_path_solve_and_frontier_equal_solve(div, rng):
    p, q = instance("top_p_target", rng, n=30)
    path = mentored.MentoredPath(p, q)
    budgets = np.array([0.0, 1e-3, 0.05, 0.3, 2.0])
    frontier = path.frontier(budgets, div)
    for b, a in zip(budgets, frontier):
        one = mentored.solve(p, q, divergence=div, budget=b)
        again = path.solve(div, b)
        assert_allclose(a, one.acceptance, rtol=0, atol=1e-12)
        assert_allclose(again.pi, one.pi, rtol=0, atol=1e-15)
        assert again.lam == pytest.approx(one.lam, rel=1e-9, abs=0)


def test_curve_end_where_the_target_is_zero():
    # Q0 = 0.3 of drafter mass sits where p = 0: kl stops at TV − Q0, tv continues to TV.
    p = np.array([0.6, 0.4, 0.0])
    q = np.array([0.2, 0.5, 0.3])
    path = mentored.MentoredPath(p, q)
    assert_allclose(path.tv, 0.4)
    assert_allclose(path.q0, 0.3)
    assert_allclose(path.s_max("kl"), 0.1)
    assert_allclose(path.s_max("tv"), 0.4)
    assert path.thresholds(0.2)[1] == np.inf
    assert_allclose(path.pi(0.25), [0.35, 0.5, 0.15])  # half of the excluded token's q
    assert_allclose(path.frontier([np.inf], "kl"), [0.7])
    assert_allclose(path.frontier([np.inf], "hellinger"), [1.0])


@pytest.mark.parametrize("div", DIVERGENCES)
def test_one_shot_equals_the_sorted_structure(div, rng):
    # solve() buckets ratios and sorts only the buckets it needs (oneshot.hpp); MentoredPath sorts
    # everything (path.hpp). Two algorithms, one answer, on every kind of row and on long rows
    # whose thresholds fall inside crowded buckets.
    rows = [instance(kind, rng) for kind in KINDS] + [llm_like(rng, 20000), llm_like(rng, 3000, scale=8.0, shift=4.0)]
    for p, q in rows:
        path = mentored.MentoredPath(p, q)
        for budget in (1e-6, 0.01, 0.2, 3.0):
            one = mentored.solve(p, q, divergence=div, budget=budget)
            ref = path.solve(div, budget)
            assert_allclose(one.acceptance, ref.acceptance, rtol=0, atol=1e-12)
            assert_allclose(one.pi, ref.pi, rtol=0, atol=1e-12)
            # (t_lo itself is ill-conditioned when little mass is clipped: (TV − s + Q)/P, P small.)
            assert_allclose(one.divergence, ref.divergence, rtol=1e-9, atol=1e-13)
        for a in np.linspace(1 - path.tv, 1 - path.tv + path.s_max(div), 4)[1:-1]:
            one = mentored.solve(p, q, divergence=div, acceptance=max(a, 0.0))
            assert_allclose(one.pi, path.pi(one.s), rtol=0, atol=1e-12)
