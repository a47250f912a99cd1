"""Certificates by weak duality (docs/theory.md §5): closed-form dual against brute force, acceptance of
optimal points, rejection of perturbed, sub-optimal and infeasible ones; the oracle for sympy
generators; solve(check=True)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose

import mentored
from mentored.solver.certificate import dual_bound
from mentored.check.oracle import oracle_solve
from mentored.check.testing import KINDS, budgets_for, instance

T = sp.Symbol("t", positive=True)
CUSTOM = {
    "triangular": (T - 1) ** 2 / (T + 1),
    "jeffreys": (T - 1) * sp.log(T),
    "alpha_1/3": (T ** sp.Rational(1, 3) - 1 - sp.Rational(1, 3) * (T - 1)) / (sp.Rational(1, 3) * sp.Rational(-2, 3)),
    "power_3": (T**3 - 1 - 3 * (T - 1)) / 6,
}


@pytest.fixture(scope="module")
def custom(custom_divergence):
    return {k: custom_divergence(e, T, name=k) for k, e in CUSTOM.items()}


def brute_dual(div, p, q, budget, lam, mu):
    """g(λ, μ) with each per-token sup taken over a dense grid of t (a lower estimate of g)."""
    # The kinks of min(t, r_i) and of tv's f lie on the grid: the sup can sit exactly there.
    pos = p > 0
    ts = np.sort(np.concatenate([[0.0, 1.0], q[pos] / p[pos], np.logspace(-7, 5, 200001)]))
    with np.errstate(all="ignore"):
        ft = div.f(ts)
    total = lam * budget + mu
    for pi_, qi in zip(p, q):
        if pi_ > 0:
            with np.errstate(all="ignore"):
                vals = np.minimum(ts, qi / pi_) - mu * ts - lam * ft
            total += pi_ * np.nanmax(vals)
        else:
            k = lam * div.f_inf + mu
            total += qi * max(0.0, 1.0 - k) if k >= 0 else np.inf
    return total


@pytest.mark.slow  # grids of 200k points per token
@pytest.mark.parametrize("name", list(mentored.BUILTIN_NAMES) + list(CUSTOM))
def test_closed_form_dual_equals_brute_force(name, custom, rng):
    div = custom.get(name) or mentored.divergence(name)
    for kind in ("dense", "top_k_target", "one_hot_draft"):
        p, q = instance(kind, rng, n=8)
        for lam, mu in ((0.7, 0.2), (2.0, -0.5), (0.3, 0.9), (5.0, 1.4)):
            closed = dual_bound(p, q, div, 0.1, lam, mu)
            brute = brute_dual(div, p, q, 0.1, lam, mu)
            if brute > 1e3:  # the sup grows with the grid's end: unbounded, g = ∞
                assert np.isinf(closed)
                continue
            # The grid can only miss the sup from below, by its resolution.
            assert closed >= brute - 1e-9
            assert_allclose(closed, brute, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_optimal_points_are_certified(name, rng):
    for kind in KINDS:
        p, q = instance(kind, rng)
        for budget in budgets_for(name, p, q)[:-1]:
            sol = mentored.solve(p, q, divergence=name, budget=budget)
            cert = mentored.certify(p, q, sol.pi, name, budget)
            assert cert.ok, (kind, budget, cert)
            assert -1e-12 <= cert.gap <= 1e-7


@pytest.mark.parametrize("name", list(mentored.BUILTIN_NAMES) + list(CUSTOM))
def test_perturbed_suboptimal_and_infeasible_points_are_rejected(name, custom, rng):
    div = custom.get(name) or mentored.divergence(name)
    p, q = instance("dense", rng, n=25)
    budget = 0.05
    sol = mentored.solve(p, q, divergence=div, budget=budget)
    assert mentored.certify(p, q, sol.pi, div, budget).ok
    # Feasible (a convex combination with p) but 1e-3 of the way back to p: rejected by the gap.
    sub = 0.999 * sol.pi + 0.001 * p
    cert = mentored.certify(p, q, sub, div, budget)
    assert not cert.ok and cert.gap > cert.tol and cert.budget_residual <= 0
    # The optimum of a larger budget accepts more but is infeasible: rejected by the residual.
    over = mentored.solve(p, q, divergence=div, budget=1.01 * budget).pi
    cert = mentored.certify(p, q, over, div, budget)
    assert not cert.ok and cert.budget_residual > cert.feas_tol
    # Off the simplex.
    cert = mentored.certify(p, q, sol.pi * (1 + 1e-6), div, budget)
    assert not cert.ok and cert.simplex_residual > cert.feas_tol
    # A wrong dual point gives a valid but loose bound.
    cert = mentored.certify(p, q, sol.pi, div, budget, lam=2 * sol.lam, mu=sol.mu)
    assert not cert.ok and cert.gap > 1e-6


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_budget_zero_and_non_binding_budgets(name, rng):
    # λ = ∞ at ε = 0 and λ = 0 when the budget does not bind: the dual point is searched for.
    for kind in ("dense", "top_k_target", "truncated_draft", "disjoint"):
        p, q = instance(kind, rng)
        assert mentored.certify(p, q, p, name, 0.0).ok
        end = mentored.solve(p, q, divergence=name, budget=1e6)
        assert mentored.certify(p, q, end.pi, name, 1e6).ok


def test_certify_never_accepts_points_far_below_the_optimum(rng):
    # Random feasible points: whenever certify accepts, acceptance is within tol of the optimum.
    for name in ("kl", "hellinger", "tv"):
        p, q = instance("dense", rng, n=10)
        budget = 0.05
        best = mentored.solve(p, q, divergence=name, budget=budget).acceptance
        for w in np.linspace(0.0, 1.0, 11):
            x = w * mentored.solve(p, q, divergence=name, budget=budget).pi + (1 - w) * p
            cert = mentored.certify(p, q, x, name, budget)
            assert cert.ok == (cert.acceptance >= best - cert.tol)


@pytest.mark.parametrize("name", list(CUSTOM))
def test_custom_divergence_matches_the_oracle(name, custom, rng):
    div = custom[name]
    for kind in ("dense", "top_k_target", "truncated_draft", "ties"):
        p, q = instance(kind, rng, n=20)
        for budget in (1e-3, 0.05, 0.3):
            sol = mentored.solve(p, q, divergence=div, budget=budget)
            o = oracle_solve(p, q, div, budget)
            assert o.status in ("optimal", "optimal_inaccurate") and o.budget_excess <= 1e-8
            assert_allclose(sol.acceptance, o.acceptance, rtol=0, atol=1e-7)
            assert mentored.certify(p, q, sol.pi, div, budget).ok


def test_oracle_refuses_a_generator_it_cannot_state():
    with pytest.warns(mentored.NumericCheckWarning):
        wiggle = mentored.Divergence.from_sympy((T - 1) ** 2 + sp.sin(T - 1) / 10, T, name="wiggle")
    p, q = instance("dense", np.random.default_rng(0), n=5)
    with pytest.raises(ValueError, match="no convex form"):
        oracle_solve(p, q, wiggle, 0.1)


def test_solve_check_runs_certificate_and_oracle(custom, rng, monkeypatch):
    p, q = instance("dense", rng, n=30)
    for div in ("kl", custom["triangular"]):
        sol = mentored.solve(np.stack([p, q]), np.stack([q, p]), divergence=div, budget=[0.02, 0.1], check=True)
        assert sol.pi.shape == (2, 30)
    # A solver that returns a sub-optimal point is caught.
    from mentored.solver import _solve

    real = _solve.finish

    def worse(div, pi, res, binding, squeeze):
        sol = real(div, pi, res, binding, squeeze)
        import dataclasses

        return dataclasses.replace(sol, pi=0.99 * sol.pi + 0.01 * p)

    monkeypatch.setattr(_solve, "finish", worse)  # the solver finishes every backend's solve
    with pytest.raises(RuntimeError, match="certificate"):
        mentored.solve(p, q, divergence="kl", budget=0.05, check=True)


# ---------------------------------------------------------------------------------------------
# Rigorous mode: certify(..., exact=True)

RATIONAL = {"tv", "chi2"}  # f and f* rational: no interval anywhere


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_exact_certificates_for_builtins(name, rng):
    for kind in ("dense", "top_k_target", "truncated_draft"):
        p, q = instance(kind, rng, n=30)
        for budget in (1e-3, 0.05, 0.3):
            # An active budget lands on ε up to rounding; a hair below it is provably feasible.
            sol = mentored.solve(p, q, divergence=name, budget=budget * (1 - 1e-9))
            cert = mentored.certify(p, q, sol.pi, name, budget, exact=True)
            assert cert.ok, (kind, budget, cert)
            assert 0 <= cert.gap <= 1e-8 and cert.budget_residual <= 0
            assert cert.arithmetic == ("rational" if name in RATIONAL else "interval")
            # Same dual point in floats: the two gaps agree (the exact one is the proof).
            flt = mentored.certify(p, q, sol.pi, name, budget, lam=cert.lam, mu=cert.mu)
            assert abs(cert.gap - flt.gap) <= 1e-9 and cert.dual_bound >= flt.dual_bound - 1e-12
        # Budget 0: π = p itself (normalised exactly) is feasible and optimal.
        assert mentored.certify(p, q, p, name, 0.0, exact=True).ok


@pytest.mark.parametrize("name", ["kl", "chi2", "hellinger", "js"])
def test_exact_rejects_suboptimal_infeasible_and_off_simplex_points(name, rng):
    p, q = instance("dense", rng, n=25)
    budget = 0.05
    sol = mentored.solve(p, q, divergence=name, budget=budget * (1 - 1e-9))
    assert mentored.certify(p, q, sol.pi, name, budget, exact=True).ok
    sub = 0.999 * sol.pi + 0.001 * p
    cert = mentored.certify(p, q, sub, name, budget, exact=True)
    assert not cert.ok and cert.gap > cert.tol and cert.budget_residual <= 0
    # Budget exceeded by 1e-9 relative: within feas_tol of a feasible point, which is certified.
    over = mentored.solve(p, q, divergence=name, budget=budget * (1 + 1e-9)).pi
    assert mentored.certify(p, q, over, name, budget).ok
    cert = mentored.certify(p, q, over, name, budget, exact=True)
    assert cert.ok and cert.budget_residual > 0 and 0 < cert.repair < 1e-8 and cert.distance <= cert.feas_tol
    assert cert.budget_residual == pytest.approx(budget * 1e-9, rel=1e-3)
    # Exceeded by 1e-6 relative: the repaired point is too far from π, and the proof fails.
    over = mentored.solve(p, q, divergence=name, budget=budget * (1 + 1e-6)).pi
    cert = mentored.certify(p, q, over, name, budget, exact=True)
    assert not cert.ok and cert.budget_residual > 0 and cert.distance > cert.feas_tol
    assert cert.failed.startswith("infeasible: D_f(π‖p) − ε = ") and "beyond rounding" in cert.failed
    # Off the simplex: π̂ = π/Σπ is fine, but π is too far from it.
    cert = mentored.certify(p, q, sol.pi * (1 + 1e-6), name, budget, exact=True)
    assert not cert.ok and cert.simplex_residual > cert.feas_tol
    # A wrong dual point gives a valid but loose bound.
    cert = mentored.certify(p, q, sol.pi, name, budget, lam=2 * sol.lam, mu=sol.mu, exact=True)
    assert not cert.ok and cert.gap > 1e-6


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_exact_certifies_the_solvers_own_output(name, rng):
    # The solver's π on its budget, unchanged: infeasible by ~1e-17 in exact arithmetic about half
    # the time, when the point (1 − δ)π̂ + δp̂ within rounding of it is what is certified.
    repaired = 0
    for kind in ("dense", "peaked", "top_k_target", "truncated_draft", "extreme"):
        p, q = instance(kind, rng, n=30)
        for budget in (0.0, 1e-3, 0.05, 0.3):
            pi = mentored.solve(p, q, divergence=name, budget=budget).pi
            cert = mentored.certify(p, q, pi, name, budget, exact=True)
            assert cert.ok and cert.failed == "", (kind, budget, cert)
            assert 0 <= cert.repair <= 1 and cert.distance <= 1e-15 and cert.gap <= 1e-8
            repaired += cert.repair > 0
    assert repaired > 0  # the rounding the repair is for does occur on these rows


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_a_failed_certificate_says_which_check_failed(name, rng):
    p, q = instance("dense", rng, n=20)
    budget = 0.05
    pi = mentored.solve(p, q, divergence=name, budget=budget).pi
    far = mentored.solve(p, q, divergence=name, budget=2 * budget).pi  # twice the budget: infeasible
    for exact in (False, True):
        cert = mentored.certify(p, q, far, name, budget, exact=exact)
        assert not cert.ok and cert.failed.startswith("infeasible: D_f(π‖p) − ε = "), (exact, cert.failed)
        cert = mentored.certify(p, q, 0.99 * pi + 0.01 * p, name, budget, exact=exact)
        assert not cert.ok and cert.failed.startswith("suboptimal: gap "), (exact, cert.failed)
        cert = mentored.certify(p, q, pi * (1 + 1e-6), name, budget, exact=exact)
        assert not cert.ok and cert.failed.startswith("not a distribution: "), (exact, cert.failed)
        assert mentored.certify(p, q, pi, name, budget, exact=exact).failed == ""


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_by_name(exact, bad):
    p, q, pi = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.3, 0.3])
    for name in ("target", "draft", "pi"):
        args = {"target": p.copy(), "draft": q.copy(), "pi": pi.copy()}
        args[name][2] = bad
        with pytest.raises(ValueError, match=rf"^{name} holds a NaN or infinite entry: {name}\[2\] = "):
            mentored.certify(args["target"], args["draft"], args["pi"], "kl", 0.05, exact=exact)
    with pytest.raises(ValueError, match=r"^draft holds a NaN or infinite entry: draft\[0\]"):
        dual_bound(p, np.r_[bad, 0.5, 0.5], "kl", 0.05, 1.0, 0.0, exact=exact)


def test_exact_mode_for_custom_generators(custom, rng):
    p, q = instance("truncated_draft", rng, n=20)
    for key in ("triangular", "alpha_1/3", "power_3"):  # conjugates solved symbolically
        div = custom[key]
        assert div.conjugate_expr is not None
        for budget in (1e-3, 0.2):
            sol = mentored.solve(p, q, divergence=div, budget=budget * (1 - 1e-9))
            cert = mentored.certify(p, q, sol.pi, div, budget, exact=True)
            assert cert.ok and cert.arithmetic == "interval", (key, budget, cert)
            bad = mentored.certify(p, q, 0.99 * sol.pi + 0.01 * p, div, budget, exact=True)
            assert not bad.ok and bad.gap > bad.tol
    # jeffreys' conjugate needs Lambert W, which sympy does not return: only numeric, so refused.
    div = custom["jeffreys"]
    assert div.conjugate_expr is None
    sol = mentored.solve(p, q, divergence=div, budget=0.05)
    assert mentored.certify(p, q, sol.pi, div, 0.05).ok
    with pytest.raises(NotImplementedError, match="only found numerically"):
        mentored.certify(p, q, sol.pi, div, 0.05, exact=True)


def _g_mp(name, p, q, eps, lam, mu):
    """g(λ, μ) at 60 digits from the exact clipped sups (kl, js: closed-form maximisers)."""
    import mpmath

    with mpmath.workdps(60):
        F = lambda x: mpmath.mpf(x.numerator) / x.denominator  # noqa: E731
        lam_, mu_ = F(lam), F(mu)
        a, b = (1 - mu_) / lam_, -mu_ / lam_
        if name == "kl":
            f = lambda t: t * mpmath.log(t) if t > 0 else mpmath.mpf(0)  # noqa: E731
            tstar = lambda y: mpmath.exp(y - 1)  # noqa: E731
            conj = lambda y: mpmath.exp(y - 1)  # noqa: E731
        else:  # js: f'(t) = ½ log(2t/(1+t)) = y ⟺ t = e^{2y}/(2 − e^{2y})
            f = lambda t: (t * mpmath.log(2 * t / (1 + t)) + mpmath.log(2 / (1 + t))) / 2  # noqa: E731
            tstar = lambda y: mpmath.exp(2 * y) / (2 - mpmath.exp(2 * y)) if 2 * y < mpmath.log(2) else mpmath.inf  # noqa: E731
            conj = lambda y: -mpmath.log(2 - mpmath.exp(2 * y)) / 2  # noqa: E731
        total = lam_ * F(eps) + mu_
        for pi_, qi in zip(p, q):
            r = F(qi) / F(pi_)
            at_r = (1 - mu_) * r - lam_ * f(r)
            A = lam_ * conj(a) if tstar(a) <= r else at_r
            B = r + lam_ * conj(b) if tstar(b) >= r else at_r
            total += F(pi_) * max(A, B)
        return total


@pytest.mark.parametrize("name", ["kl", "js"])
def test_interval_dual_bound_is_an_upper_bound(name, rng):
    from fractions import Fraction

    import mpmath

    p, q = instance("dense", rng, n=12)
    sol = mentored.solve(p, q, divergence=name, budget=0.05)
    # Exact binary p, q normalised as the rigorous mode does; several dual points, optimal and not.
    P = [Fraction(v) for v in p.tolist()]
    Q = [Fraction(v) for v in q.tolist()]
    P, Q = [v / sum(P) for v in P], [v / sum(Q) for v in Q]
    for lam, mu in ((sol.lam, sol.mu), (0.5 * sol.lam, sol.mu), (sol.lam, sol.mu + 0.01)):
        lam, mu = Fraction(lam), Fraction(mu)
        upper = mentored.solver.certificate.dual_bound(p, q, name, 0.05, lam, mu, exact=True)
        with mpmath.workdps(60):
            ref = _g_mp(name, P, Q, Fraction(0.05), lam, mu)
            up = mpmath.mpf(upper.numerator) / upper.denominator
            # An upper bound (to the 60-digit reference's own accuracy), and a tight one (128-bit intervals).
            assert up >= ref - mpmath.mpf(10) ** -55
            assert up - ref <= mpmath.mpf(10) ** -30
        assert float(upper) == pytest.approx(dual_bound(p, q, name, 0.05, float(lam), float(mu)), abs=1e-12)


@pytest.mark.parametrize("div", ["kl", "chi2", "hellinger"])
def test_float_mode_judges_the_budget_relative_to_its_size(div):
    # π optimal at budget 1e-9 is ten times over a budget of 1e-10: refused, as exact mode does.
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    pi = mentored.solve(p, q, divergence=div, budget=1e-9).pi
    assert not mentored.certify(p, q, pi, div, 1e-10).ok
    assert mentored.certify(p, q, pi, div, 1e-9).ok


# p and q must be distributions: refused off the simplex, normalised under normalize=True, alike in both modes.


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("scale", [3.0, 1 / 3])
def test_a_target_or_draft_that_is_not_a_distribution_is_refused_by_name(exact, scale):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    pi = mentored.solve(p, q, divergence="kl", budget=0.05).pi
    for name, args in (("target", (scale * p, q)), ("draft", (p, scale * q))):
        total = float(args[0 if name == "target" else 1].sum())
        match = rf"^{name} must sum to 1 \(relative tolerance 1e-06 for float64\); it sums to {re.escape(repr(total))}\. Pass normalize=True"
        with pytest.raises(ValueError, match=match):
            mentored.certify(*args, pi, "kl", 0.05, exact=exact)
        with pytest.raises(ValueError, match=match):
            mentored.certify(*args, pi, "kl", 0.05, lam=1.0, mu=0.0, exact=exact)
        with pytest.raises(ValueError, match=match):
            dual_bound(*args, "kl", 0.05, 1.0, 0.0, exact=exact)
    # Within solve's tolerance (1e-6 relative in float64, 1e-3 in float32) the rows are read as p/Σp, q/Σq.
    near = mentored.certify(p * (1 + 5e-7), q * (1 - 5e-7), pi, "kl", 0.05, exact=exact)
    assert near.ok, near
    p32, q32 = (p * (1 + 5e-4)).astype(np.float32), q.astype(np.float32)
    assert mentored.certify(p32, q32, pi, "kl", 0.05, exact=exact, tol=1e-5, feas_tol=1e-5).ok


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
@pytest.mark.parametrize("scale", [3.0, 1 / 3])
def test_normalize_reads_p_and_q_as_distributions_in_both_modes(name, scale):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    sol = mentored.solve(p, q, divergence=name, budget=0.05)
    plain = mentored.certify(p, q, sol.pi, name, 0.05)
    for exact in (False, True):
        cert = mentored.certify(scale * p, scale * q, sol.pi, name, 0.05, exact=exact, normalize=True)
        assert cert.ok, (exact, cert)
        # A valid bound on the optimum of the normalised problem, the same as for (p, q) themselves.
        assert cert.dual_bound >= sol.acceptance - 1e-12
        assert cert.acceptance == pytest.approx(plain.acceptance, abs=1e-15)
        assert cert.dual_bound == pytest.approx(plain.dual_bound, abs=1e-9)
        lam, mu = sol.lam, sol.mu
        g = dual_bound(scale * p, scale * q, name, 0.05, lam, mu, exact=exact, normalize=True)
        assert float(g) == pytest.approx(dual_bound(p, q, name, 0.05, lam, mu), abs=1e-9)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_a_pi_that_is_not_a_distribution_is_never_ok(exact, normalize):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    pi = mentored.solve(p, q, divergence="kl", budget=0.05).pi
    for scale in (3.0, 1 / 3, 1 + 1e-6):
        cert = mentored.certify(p, q, scale * pi, "kl", 0.05, exact=exact, normalize=normalize)
        assert not cert.ok and cert.failed.startswith("not a distribution: max(|Σπ − 1|, max(−π)) = "), cert


# Extreme but finite dual points: a valid bound (here a useless one) and a failed certificate, never a raw error.

_EXTREME = [(lam, mu) for lam in (0.0, 1e-300, 1.0, 1e308) for mu in (1e308, -1e308)]


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_extreme_dual_points_give_valid_bounds_and_failed_certificates(name, exact):
    rows = [
        ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]),
        ([0.5, 0.3, 0.2, 0.0], [0.0, 0.3, 0.6, 0.1]),  # p_i = 0 and q_i = 0
        ([0.6, 0.4, 5e-324], [0.2, 0.3, 0.5]),  # q_i/p_i past DBL_MAX
    ]
    for p, q in rows:
        sol = mentored.solve(p, q, divergence=name, budget=0.05)
        for lam, mu in _EXTREME:
            cert = mentored.certify(p, q, sol.pi, name, 0.05, lam=lam, mu=mu, exact=exact)
            assert (cert.lam, cert.mu) == (lam, mu)
            # Any dual point bounds the optimum from above; these bound it by 5e306 or more.
            assert cert.dual_bound >= sol.acceptance and cert.dual_bound > 1e300, (p, lam, mu, cert)
            assert not cert.ok and "suboptimal: gap " in cert.failed, (p, lam, mu, cert)
            if cert.dual_bound == np.inf:
                assert f"dual bound inf at λ = {lam:.3g}, μ = {mu:.3g}: +∞ or beyond the float range" in cert.failed
            g = dual_bound(p, q, name, 0.05, lam, mu, exact=exact)
            assert g >= sol.acceptance and g > 1e300, (p, lam, mu, g)


@pytest.mark.parametrize("exact", [False, True])
def test_a_dual_point_that_is_not_a_finite_float_is_refused_by_dual_bound(exact):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    for lam, mu, what in ((np.inf, 0.0, "lam"), (np.nan, 0.0, "lam"), (-1.0, 0.0, "lam"), (1.0, np.inf, "mu"), (1.0, np.nan, "mu")):
        with pytest.raises(ValueError, match=rf"^{what} must be "):
            dual_bound(p, q, "kl", 0.05, lam, mu, exact=exact)
    with pytest.raises(ValueError, match=r"^lam must be a float"):
        mentored.certify(p, q, p, "kl", 0.05, lam=10**400, mu=0.0, exact=exact)
