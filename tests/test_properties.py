"""Properties every answer must have, on rows that hypothesis chooses (docs/theory.md §3)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import mentored

DIVERGENCES = mentored.BUILTIN_NAMES

# Weights with exact zeros, ties and a wide dynamic range; each row normalised to sum 1.
weights = st.one_of(st.just(0.0), st.floats(1e-9, 1e3), st.sampled_from([1.0, 2.0, 0.5]))


@st.composite
def pairs(draw, max_n=24):
    n = draw(st.integers(1, max_n))
    p = draw(arrays(np.float64, n, elements=weights))
    q = draw(arrays(np.float64, n, elements=weights))
    p[draw(st.integers(0, n - 1))] += 1.0  # no all-zero row
    q[draw(st.integers(0, n - 1))] += 1.0
    return p / p.sum(), q / q.sum()


budget = st.one_of(st.just(0.0), st.floats(1e-9, 10.0), st.just(np.inf))


@settings(max_examples=150, deadline=None)
@given(pairs(), st.sampled_from(DIVERGENCES), budget)
def test_optimum_is_on_the_curve(pq, div, eps):
    p, q = pq
    sol = mentored.solve(p, q, divergence=div, budget=eps)
    tv = 0.5 * np.abs(p - q).sum()
    # Divergence independence: acceptance = 1 − TV(p, q) + s, s = TV(π, p).
    np.testing.assert_allclose(sol.acceptance, 1 - tv + sol.s, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sol.s, 0.5 * np.abs(sol.pi - p).sum(), rtol=0, atol=1e-12)
    # π lies coordinatewise between p and q.
    lo, hi = np.minimum(p, q), np.maximum(p, q)
    assert np.all(sol.pi >= lo - 1e-15) and np.all(sol.pi <= hi + 1e-15)
    np.testing.assert_allclose(sol.pi.sum(), 1.0, rtol=0, atol=1e-12)
    # Within budget, measured from the definition.
    d = float(mentored.divergence(div)(sol.pi, p))
    assert d <= eps * (1 + 1e-9) + 1e-12
    if eps == 0.0:
        np.testing.assert_allclose(sol.pi, p, rtol=0, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(pairs(), st.sampled_from(DIVERGENCES), st.lists(st.floats(0.0, 5.0), min_size=2, max_size=6))
def test_acceptance_is_nondecreasing_in_the_budget(pq, div, budgets):
    p, q = pq
    budgets = np.sort(np.array(budgets))
    acc = mentored.solve(np.tile(p, (len(budgets), 1)), np.tile(q, (len(budgets), 1)), divergence=div, budget=budgets).acceptance
    assert np.all(np.diff(acc) >= -1e-12)
    np.testing.assert_allclose(mentored.MentoredPath(p, q).frontier(budgets, div), acc, rtol=0, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs(), st.floats(0.0, 1.5))
def test_total_variation_acceptance(pq, eps):
    p, q = pq
    tv = 0.5 * np.abs(p - q).sum()
    sol = mentored.solve(p, q, divergence="tv", budget=eps)
    np.testing.assert_allclose(sol.acceptance, min(1.0, 1 - tv + eps), rtol=0, atol=1e-12)
