"""Budgets by price: solve(..., price=λ) maximises A(π) − λ·D_f(π‖p) (docs/theory.md §4, "Budgets by price")."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from numpy.testing import assert_allclose

import mentored
from mentored.check import reference
from mentored.check.testing import instance, llm_like

NAMES = mentored.BUILTIN_NAMES
PRICES = np.array([0.05, 0.7, 2.0, 20.0, 300.0])  # none at tv's price 1, where every s is optimal


def objective(pi, p, q, div, price):
    """A(π) − λ·D_f(π‖p), both from their definitions."""
    return float(np.minimum(pi, q).sum()) - price * float(mentored.divergence(div)(pi, p))


def rows(rng, kinds=("dense", "peaked", "top_k_target", "truncated_draft", "ties")):
    """Random rows with zeros and ties, and LLM-like rows (softmax of noisy logits)."""
    return [instance(kind, rng, 12) for kind in kinds] + [llm_like(rng, 60), llm_like(rng, 40, scale=6.0, shift=2.0)]


@pytest.mark.parametrize("name", NAMES)
def test_price_attains_the_best_of_a_scan_of_budgets(name, rng):
    # The reference is slow (bisection on the definitions): one random row with zeros and one LLM-like row.
    kind = ("top_k_target", "truncated_draft", "ties", "dense")[NAMES.index(name) % 4]
    for p, q in (instance(kind, rng, 12), llm_like(rng, 40)):
        batch = mentored.solve(np.tile(p, (PRICES.size, 1)), np.tile(q, (PRICES.size, 1)), divergence=name, price=PRICES)
        # The curve's end at finite divergence bounds the scan (reverse_kl, neyman_chi2 reach it only at D = ∞).
        d_end = float(mentored.solve(p, q, divergence=name, price=0.0).divergence)
        top = d_end if np.isfinite(d_end) and d_end > 0 else 20.0
        budgets = np.concatenate([[0.0], np.geomspace(1e-7 * top, top, 40)])
        ref_pis, _ = reference.solve(p, q, name, budgets)  # the frontier A*(ε), independently of the core
        scan = np.minimum(ref_pis, q).sum(axis=1)[:, None] - PRICES[None, :] * budgets[:, None]
        ref_price_pis, _ = reference.solve_price(p, q, name, PRICES)
        for j, price in enumerate(PRICES):
            got = objective(batch.pi[j], p, q, name, price)
            tol = 1e-9 * (1.0 + price * batch.divergence[j])
            assert got >= scan[:, j].max() - tol, (name, price)
            # and the reference's own search of A − λ·D over the curve finds the same value
            assert got == pytest.approx(objective(ref_price_pis[j], p, q, name, price), abs=tol)
            # the batch (per-row prices) is the single-row solve, and the sorted structure agrees
            single = mentored.solve(p, q, divergence=name, price=float(price))
            assert_allclose(single.pi, batch.pi[j], rtol=0, atol=1e-15)
            assert_allclose(mentored.MentoredPath(p, q).solve(name, price=price).pi, single.pi, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_the_price_optimum_is_the_budget_optimum_at_what_it_spends(name, rng):
    for p, q in rows(rng):
        for price in PRICES:
            sol = mentored.solve(p, q, divergence=name, price=price)
            spent = float(sol.divergence)
            assert spent == pytest.approx(float(mentored.divergence(name)(sol.pi, p)), rel=1e-9, abs=1e-15)
            again = mentored.solve(p, q, divergence=name, budget=spent)
            assert_allclose(again.pi, sol.pi, rtol=0, atol=1e-9)
            assert again.acceptance == pytest.approx(sol.acceptance, abs=1e-12)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "tv"])
def test_the_marginal_condition_holds_inside_the_curve(name, rng):
    # λ = 1/(f'(t_hi) − f'(t_lo)), the multiplier of the budget, is the price wherever the optimum is
    # strictly inside the curve (not at its end, nor where the continuation onto {p = 0} begins, where
    # D'(s) jumps from f'(t_hi) − f'(t_lo) to f∞ − f'(t_lo)).
    checked = 0
    for p, q in rows(rng):
        tv, q0 = 0.5 * np.abs(p - q).sum(), q[p == 0].sum()
        s_max = mentored.MentoredPath(p, q).s_max(name)
        for price in PRICES:
            sol = mentored.solve(p, q, divergence=name, price=price)
            if 1e-9 < sol.s < s_max * (1 - 1e-9) and abs(sol.s - (tv - q0)) > 1e-9:
                assert sol.lam == pytest.approx(price, rel=1e-6)
                checked += 1
    assert checked >= 10


@pytest.mark.parametrize("name", NAMES)
def test_an_infinite_price_is_lossless_and_large_prices_approach_it(name, rng):
    p, q = llm_like(rng, 50)
    sol = mentored.solve(p, q, divergence=name, price=np.inf)
    assert_allclose(sol.pi, p, rtol=0, atol=1e-15)
    assert sol.divergence == 0.0
    s = [mentored.solve(p, q, divergence=name, price=price).s for price in (1.0, 10.0, 1e3, 1e6, 1e9)]
    assert np.all(np.diff(s) <= 1e-15)  # a dearer divergence buys less of it
    assert s[-1] <= 1e-6
    # price 0: the most acceptance at the least divergence, as budget = inf gives it
    free, unlimited = mentored.solve(p, q, divergence=name, price=0.0), mentored.solve(p, q, divergence=name, budget=np.inf)
    assert_allclose(free.pi, unlimited.pi, rtol=0, atol=1e-15)


def test_total_variation_buys_all_or_nothing():
    # Under tv every unit of s costs one unit of divergence (f'(t_hi) − f'(t_lo) = ½ + ½): below price 1
    # the whole curve is worth it, above it nothing is.
    p, q = np.array([0.6, 0.4, 0.0]), np.array([0.2, 0.5, 0.3])
    assert mentored.solve(p, q, divergence="tv", price=0.99).s == pytest.approx(0.4)
    assert mentored.solve(p, q, divergence="tv", price=1.01).s == 0.0
    assert mentored.solve(p, q, divergence="kl", price=0.01).s == pytest.approx(0.1)  # f∞ = ∞: the curve stops at TV − Q0


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 24).flatmap(lambda n: st.tuples(*(arrays(np.float64, n, elements=st.one_of(
        st.just(0.0), st.floats(1e-9, 1e3), st.sampled_from([1.0, 2.0, 0.5]))) for _ in range(2)), st.integers(0, n - 1))),
    st.sampled_from(NAMES),
    st.one_of(st.just(0.0), st.floats(1e-3, 1e4), st.just(np.inf)),
)
def test_price_properties(rows_, name, price):
    p, q, i = rows_
    p, q = p.copy(), q.copy()
    p[i] += 1.0
    q[-1 - i] += 1.0
    p, q = p / p.sum(), q / q.sum()
    sol = mentored.solve(p, q, divergence=name, price=price)
    assert_allclose(mentored.MentoredPath(p, q).solve(name, price=price).pi, sol.pi, rtol=0, atol=1e-9)
    again = mentored.solve(p, q, divergence=name, budget=float(sol.divergence))
    assert_allclose(again.pi, sol.pi, rtol=0, atol=1e-9)
    if 0.0 < price < np.inf:
        # No budget buys more acceptance net of its price: the core's frontier at other budgets.
        spent = float(sol.divergence)
        others = np.array([0.0, 1e-6, 0.5 * spent, 0.9 * spent, 1.1 * spent, 2 * spent + 1e-3, 1.0])
        others = others[np.isfinite(others)]
        best = mentored.MentoredPath(p, q).frontier(others, name) - price * others
        assert np.minimum(sol.pi, q).sum() - price * spent >= best.max() - 1e-9 * (1 + price * max(spent, 1.0))


def test_a_user_divergence_is_priced_like_the_builtin(monkeypatch, rng):
    from mentored.divergences import program as _program

    t = sp.Symbol("t", positive=True)
    p, q = llm_like(rng, 80)
    want = mentored.solve(np.tile(p, (3, 1)), np.tile(q, (3, 1)), divergence="kl", price=[0.3, 3.0, 30.0])
    for compiled in (True, False):  # the core's program of f, and f called back in Python
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(_program, "_ENABLED", False)
            d = mentored.Divergence.from_sympy(t * sp.log(t), t, name="kl_by_hand")
            assert (d.program is not None) == compiled
            got = mentored.solve(np.tile(p, (3, 1)), np.tile(q, (3, 1)), divergence=d, price=[0.3, 3.0, 30.0])
            # f' by a difference quotient of f̃ (the core has no f' of a user generator): s to ~1e-8
            assert_allclose(got.s, want.s, rtol=1e-6)
            for j, price in enumerate([0.3, 3.0, 30.0]):
                assert objective(got.pi[j], p, q, "kl", price) == pytest.approx(objective(want.pi[j], p, q, "kl", price), abs=1e-12)
            assert_allclose(got.lam, want.lam, rtol=1e-6)  # the dual λ from d.fprime: the price
            path = mentored.MentoredPath(p, q).solve(d, price=3.0)
            assert_allclose(path.pi, want.pi[1], rtol=0, atol=1e-8)


def test_check_certifies_a_price_optimum_at_its_divergence(rng):
    p, q = llm_like(rng, 200)
    for name in NAMES:
        mentored.solve(p, q, divergence=name, price=5.0, check=True)


def test_errors_name_the_problem():
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    with pytest.raises(ValueError, match="price must be nonnegative"):
        mentored.solve(p, q, price=-1.0)
    with pytest.raises(ValueError, match="price is NaN"):
        mentored.solve(p, q, price=float("nan"))
    with pytest.raises(ValueError, match="exactly one of budget=, acceptance= and price= .got budget, price"):
        mentored.solve(p, q, price=1.0, budget=0.1)
    with pytest.raises(ValueError, match="got acceptance, price"):
        mentored.solve(p, q, price=1.0, acceptance=0.8)
    with pytest.raises(ValueError, match="got none"):
        mentored.solve(p, q)
    with pytest.raises(ValueError, match="one value per row"):
        mentored.solve([p, p], [q, q], price=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="at most one of budget= and price="):
        mentored.MentoredPath(p, q).solve("kl", 0.1, price=1.0)
    with pytest.raises(ValueError, match="price must be nonnegative"):
        mentored.MentoredPath(p, q).solve("kl", price=-2.0)
    with pytest.raises(ValueError, match=r"mode must be 0 \(budget\), 1 \(acceptance\) or 2 \(price\)"):
        mentored._core.solve(np.array([[0.5, 0.5]]), np.array([[0.5, 0.5]]), 1, 3, np.array([0.1]), 1)
