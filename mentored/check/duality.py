r"""Weak duality at a given dual point: the float dual function and the certificate it gives.

The mathematics and the public face are in :mod:`mentored.solver.certificate`; this module holds what
:func:`mentored.solve` (``check=True``) needs without the solver itself, which
:func:`mentored.certify` calls when no dual point is given. The exact mode is :mod:`mentored.check.exact`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..divergences import divergence as _divergence
from .exact import bound_text, certificate_fields, dual_upper_bound, refuse_nonfinite
from .inputs import sum_rtol

__all__ = ["Certificate", "as_float", "certify_at", "distributions", "dual_bound", "inputs", "normalised"]


@dataclass(frozen=True)
class Certificate:
    r"""A checked claim :math:`A(\pi) \ge A^* - \mathrm{gap}` for :math:`\mathrm{MD}(f, \varepsilon)`.

    Attributes
    ----------
    ok : bool
        Feasible within ``feas_tol`` and ``gap <= tol``; ``failed`` is then empty.
    acceptance : float
        :math:`A(\pi) = \sum_i \min(\pi_i, q_i)` (exact mode: of the point certified, see ``repair``).
    dual_bound : float
        :math:`g(\lambda, \mu) \ge A^*` (an upper bound on the optimum).
    gap : float
        ``dual_bound - acceptance``.
    lam, mu : float
        The dual point used, in the convention of :class:`~mentored.Solution` (untilted ``f``).
    simplex_residual : float
        :math:`\max(|\sum_i \pi_i - 1|, \max_i(-\pi_i))`.
    budget_residual : float
        :math:`D_f(\pi\|p) - \varepsilon` (:math:`\le 0` when feasible).
    divergence, budget, tol, feas_tol : float
    arithmetic : str
        ``"float"``; with ``exact=True``, ``"rational"`` (every quantity an exact Fraction) or
        ``"interval"`` (some enclosed by outward-rounded intervals). In the exact modes the fields
        describe the normalised point and are rounded in the safe direction (see :func:`certify`).
    failed : str
        Empty when ``ok``; else each check that failed, with its numbers, joined by ``"; "``:
        ``"not a distribution: ..."``, ``"infeasible: D_f(π‖p) − ε = ... > 0 ..."``,
        ``"suboptimal: gap ... > tol ..."``.
    repair : float
        Exact mode: the :math:`\delta` of the feasible point :math:`\pi' = (1-\delta)\hat\pi + \delta\hat p`
        that stands for a :math:`\hat\pi` infeasible by rounding (0 when :math:`\hat\pi` is feasible;
        see :func:`certify`). 0 in float mode.
    distance : float
        Exact mode: :math:`\|\pi' - \pi\|_1` from the float :math:`\pi` to the point certified,
        rounded up (:math:`\pi' = \hat\pi` when ``repair`` is 0). 0 in float mode.
    """

    ok: bool
    acceptance: float
    dual_bound: float
    gap: float
    lam: float
    mu: float
    simplex_residual: float
    budget_residual: float
    divergence: float
    budget: float
    tol: float
    feas_tol: float
    arithmetic: str
    failed: str
    repair: float
    distance: float


_DBL_MAX = float(np.finfo(np.float64).max)
_Y_FLOOR = -1e300  # conjugates are evaluated at max(y, _Y_FLOOR) (f̃* is nondecreasing: an upper bound)


def _bound(total: float) -> float:
    """The float g as a bound: NaN (∞ − ∞ from overflows) and −∞ (g ≥ A* ≥ 0 in exact arithmetic,
    so only overflow gets there) say nothing, and are reported as +∞, the bound that is always valid."""
    return total if total > -np.inf else np.inf


class _Dual:
    """g̃(λ, μ̃) for one row, with the per-token quantities that do not depend on (λ, μ̃) cached."""

    def __init__(self, div, p, q, budget):
        self.div = div
        self.eps = float(budget)
        pos = p > 0
        with np.errstate(over="ignore"):
            r = q[pos] / p[pos]
        # A subnormal p_i can make q_i/p_i overflow; such tokens are bounded in the mass scale (__call__).
        self.big = ~np.isfinite(r)
        self.qB = q[pos][self.big]
        self.pB = p[pos][self.big]
        self.pS = p[pos][~self.big]
        self.r = r[~self.big]
        self.qZ = float(q[~pos].sum())
        self.has_zero = bool((~pos).any())
        self.c = div.tilt
        self.finf = div.f_inf - self.c
        with np.errstate(all="ignore"):
            # f's own unit: the searches over λ are scaled by it (k·f has the dual point (λ/k, μ) of f at ε/k)
            self.unit = div.unit
            self.fr = div.f_tilde(self.r)
            # One-sided derivatives of f̃ at r: left decides the piece t ≤ r, right the piece t ≥ r.
            self.fp_left = div.fprime(np.nextafter(self.r, 0.0)) - self.c
            self.fp_right = div.fprime(np.nextafter(self.r, np.inf)) - self.c
            self.f0 = float(div.f_tilde(np.array([0.0]))[0])

    def __call__(self, lam, mu_t):
        eps, r = self.eps, self.r
        if lam == 0.0:
            if mu_t < 0:
                return np.inf
            k = max(0.0, 1.0 - mu_t)
            return _bound(mu_t + k * (float(np.dot(self.pS, r)) + float(self.qB.sum())) + k * self.qZ)
        with np.errstate(all="ignore"):
            # Far from the solver's points (1 − μ̃)/λ and −μ̃/λ may overflow to ±∞ (μ̃ ±∞ when the tilt
            # overflowed): the decisions below read them as they are, the conjugates at their clamp.
            a, b = (1.0 - mu_t) / lam, -mu_t / lam
            Fa, Fb = self._scaled_conjugate(lam, a), self._scaled_conjugate(lam, b)
            at_r = (1.0 - mu_t) * r - lam * self.fr  # both pieces' value at t = r
            A = np.where(self.fp_left <= a, at_r, Fa)
            B = np.where(self.fp_right >= b, at_r, r + Fb)
            # The sup lies between the value at r and the unclipped sup, whatever the rounding.
            A = np.minimum(np.maximum(A, at_r), Fa)
            B = np.minimum(np.maximum(B, at_r), r + Fb)
            h = np.maximum(A, B)
            zero = r == 0  # q_i = 0: the piece t ≤ 0 is t = 0 alone
            h = np.where(zero, np.maximum(-lam * self.f0, Fb), h)
            big = 0.0
            if self.qB.size:
                # q_i/p_i beyond DBL_MAX: p_i sup_t [min(t, r) − μ̃t − λf̃(t)] ≤ min(p_i λf̃*(a), q_i max(0, 1 − μ̃)),
                # the first as min(t, r) ≤ t, the second (μ̃ ≥ 0) as f̃ ≥ 0 and min(t, r) − μ̃t ≤ r max(0, 1 − μ̃).
                by_conj = self.pB * Fa if np.isfinite(Fa) else np.full(self.pB.shape, np.inf)
                by_mass = self.qB * max(0.0, 1.0 - mu_t) if mu_t >= 0 else np.full(self.qB.shape, np.inf)
                big = float(np.minimum(by_conj, by_mass).sum())
            k = lam * self.finf + mu_t
            if self.has_zero:  # sup_{x ≥ 0} [min(x, q_i) − k x] = +∞ when k < 0, even with q_i = 0
                if k < 0:
                    return np.inf
                outside = self.qZ * max(0.0, 1.0 - k)
            else:
                outside = 0.0
            total = lam * eps + mu_t + float(np.dot(self.pS, h)) + outside + big
        return _bound(total)

    def _scaled_conjugate(self, lam, y):
        """An upper bound of λ f̃*(y) (λ > 0; y possibly ±∞ from an overflow).

        f̃* is nondecreasing, so y is raised to _Y_FLOOR (where the built-in formulas are accurate:
        neyman_chi2's 2y/(1 + √(1 − y)) overflows for y < −DBL_MAX/2, hellinger's is NaN at −∞); y = +∞
        gives +∞ (f̃*(y) ≥ y·1 − f̃(1) = y). A product below −DBL_MAX rounds to −∞, and −DBL_MAX bounds
        it from above."""
        if y == np.inf:
            return np.inf
        v = lam * float(self.div.conjugate_tilde(np.array([max(y, _Y_FLOOR)]))[0])
        return max(v, -_DBL_MAX) if v == v else np.inf

    def inner(self, lam):
        """(μ̃, g): g minimised over μ̃ ∈ [0, 1] at this λ > 0."""
        from scipy.optimize import minimize_scalar

        # Brent's parabolic steps need finite values; ∞ only means "too small"
        with np.errstate(all="ignore"):
            res = minimize_scalar(lambda m: min(self(lam, m), 1e30), bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-13})
            return res.x, self(lam, res.x)

    def best(self):
        """(λ, μ̃, g) minimising g over λ (log scale, 1e-14 to 1e12 over f's unit) with μ̃ ∈ [0, 1]
        optimal for each λ."""
        from scipy.optimize import minimize_scalar

        best = (0.0, 0.0, self(0.0, 0.0))
        if np.isfinite(self.eps):
            with np.errstate(all="ignore"):
                shift = -math.log10(self.unit)
                outer = minimize_scalar(lambda x: min(self.inner(10.0**x)[1], 1e30), bounds=(-14.0 + shift, 12.0 + shift),
                                        method="bounded", options={"xatol": 1e-7})
                lam = 10.0**outer.x
                mu_t, g = self.inner(lam)
            if g < best[2]:
                best = (lam, mu_t, g)
        return best


def dual_bound(target, draft, divergence, budget, lam, mu, *, exact=False, normalize=False):
    r""":math:`g(\lambda, \mu)` of docs/theory.md §5: an upper bound on :math:`A^*`.

    ``target`` and ``draft`` are read as the distributions :math:`p/\sum p`, :math:`q/\sum q`; each must
    sum to 1 within :func:`mentored.solve`'s tolerance (relative 1e-6 in float64, 1e-3 in float32)
    unless ``normalize``. :math:`\lambda \ge 0` and :math:`\mu` must be finite (any such point gives a
    bound, possibly :math:`+\infty`).

    In floating point by default. With ``exact=True`` the result is a :class:`fractions.Fraction`
    (or ``math.inf``) that provably bounds :math:`g(\lambda, \mu)` from above, for the exact values
    of ``lam``, ``mu`` (floats, ints or Fractions) and ``budget``, and for the distributions
    :math:`p/\sum p`, :math:`q/\sum q` of the exact binary values of ``target`` and ``draft``
    (see :func:`mentored.certify`).
    """
    div = _divergence(divergence)
    p, q = distributions(target, draft, normalize)
    lam, mu = _dual_coordinate(lam, "lam", exact), _dual_coordinate(mu, "mu", exact)
    if not lam >= 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    if exact:
        return dual_upper_bound(div, p, q, budget, lam, mu)
    p, q = normalised(p), normalised(q)
    return _Dual(div, p, q, budget)(lam, mu + lam * div.tilt if lam > 0 else mu)


def _dual_coordinate(v, name, exact):
    """``lam`` or ``mu`` of :func:`dual_bound`: a finite float (exact mode: ints and Fractions as they are)."""
    if exact and isinstance(v, (int, Fraction)) and not isinstance(v, bool):
        return Fraction(v)
    f = as_float(v, name)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be a finite number{' >= 0' if name == 'lam' else ''}, got {f!r}")
    return Fraction(f) if exact else f


def as_float(v, name) -> float:
    """``v`` as a float; a ValueError naming ``name`` where it lies beyond the float range (an int of 10**400)."""
    try:
        return float(v)
    except OverflowError:
        text = repr(v)
        raise ValueError(
            f"{name} must be a float, got {text if len(text) <= 30 else text[:24] + '…'}, beyond the float range "
            f"(|{name}| <= {_DBL_MAX:g}); any finite dual point gives a bound"
        ) from None


def distributions(target, draft, normalize):
    """(p, q) as float64 arrays (n,), as given: finite, nonnegative, with a positive sum within
    :func:`mentored.solve`'s tolerance of 1 (relative 1e-6 in float64, 1e-3 in float32) unless ``normalize``."""
    out = []
    for x, name in ((target, "target"), (draft, "draft")):
        a = np.asarray(x)
        dtype = np.dtype(np.float32 if a.dtype == np.float32 else np.float64)
        v = np.asarray(a, dtype=np.float64)
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"{name} must be 1-D and not empty, got shape {v.shape}")
        refuse_nonfinite(v, name)
        i = int(np.argmin(v))
        if v[i] < 0:
            raise ValueError(f"{name} must be nonnegative, got {name}[{i}] = {v[i]!r}")
        total = float(v.sum())
        if not total > 0:
            raise ValueError(f"{name} has no positive entry")
        rtol = sum_rtol(dtype, False)
        if not normalize and not abs(total - 1.0) <= rtol:
            raise ValueError(
                f"{name} must sum to 1 (relative tolerance {rtol:g} for {dtype}); it sums to {total!r}. "
                "Pass normalize=True to renormalise."
            )
        out.append(v)
    if out[0].shape != out[1].shape:
        raise ValueError(f"target and draft must have one length, got {out[0].shape} and {out[1].shape}")
    return out[0], out[1]


def normalised(v):
    """v/Σv in float64 (v nonnegative with a positive sum; finite entries whose sum overflows are
    scaled by their maximum first). Exact mode divides the exact values instead."""
    total = v.sum()
    if not np.isfinite(total):
        v = v / v.max()
        total = v.sum()
    return v if total == 1.0 else v / total


def inputs(target, draft, pi, budget, normalize=False):
    """(p, q, π, ε) of a certificate, checked: p and q by :func:`distributions` (as given, not
    normalised), π float64 (n,) finite, ε a float ≥ 0."""
    p, q = distributions(target, draft, normalize)
    x = np.asarray(pi, dtype=np.float64)
    if x.shape != p.shape:
        raise ValueError(f"target, draft and pi must be 1-D of one length, got {p.shape}, {q.shape}, {x.shape}")
    refuse_nonfinite(x, "pi")
    budget = float(budget)
    if not budget >= 0:
        raise ValueError(f"budget must be nonnegative, got {budget}")
    return p, q, x, budget


def certify_at(target, draft, pi, div, budget, *, lam, mu, exact=False, tol=1e-7, feas_tol=1e-9, solver_point=False,
               normalize=False) -> Certificate:
    """:func:`mentored.certify` at a given dual point (``lam``, ``mu``), ``div`` a Divergence.

    Finite ``lam``, ``mu``: exactly that point. Not finite (the solver's λ = ∞, μ NaN at budget 0),
    or ``solver_point`` (the solver's own point, which a search may improve): the search of
    :func:`mentored.certify`. ``target`` and ``draft`` are checked by :func:`distributions` and read as
    p/Σp, q/Σq (in float here, exactly in exact mode).
    """
    p_given, q_given, x, budget = inputs(target, draft, pi, budget, normalize)
    p, q = normalised(p_given), normalised(q_given)
    lam_f, mu_f = as_float(lam, "lam"), as_float(mu, "mu")
    if not lam_f >= 0:
        raise ValueError(f"lam must be nonnegative, got {lam}")
    dual = _Dual(div, p, q, budget)
    acceptance = float(np.minimum(x, q).sum())
    given = not solver_point and math.isfinite(lam_f) and math.isfinite(mu_f)
    if given:
        lam_v, mu_v = lam_f, mu_f
        with np.errstate(over="ignore"):  # μ̃ = ±∞ past the float range: the bound is then +∞
            mu_t = mu_f + lam_v * dual.c if lam_v > 0 else mu_f
        g = dual(lam_v, mu_t)
    else:
        # The solver's point, improved by a search where it leaves a gap; at budget 0 the solver's
        # (λ, μ) = (∞, NaN): the dual optimum is not attained, and the search alone is used.
        lam_v, mu_t, g = _dual_point(dual, acceptance, tol, lam_f, mu_f)
        mu_v = mu_t - lam_v * dual.c if lam_v > 0 else mu_t
    if exact:
        lam_e = Fraction(lam_v)
        # The untilted μ exactly: as given, or μ̃ − λc for the float search's (λ, μ̃) (any dual point is valid).
        mu_e = Fraction(mu_v) if given else (Fraction(mu_t) - lam_e * Fraction(dual.c) if lam_v > 0 else Fraction(mu_t))
        return Certificate(**certificate_fields(div, p_given, q_given, x, budget, lam_e, mu_e, tol, feas_tol))
    d = float(div(np.maximum(x, 0.0), p))  # the definition; negative entries count in the residual
    simplex = float(max(abs(x.sum() - 1.0), max(0.0, -float(x.min()))))
    # ε = ∞ admits every point, D_f = ∞ included (∞ ≤ ∞): the residual is then 0, not ∞ − ∞.
    excess = d - budget if np.isfinite(budget) else (0.0 if np.isinf(d) else -np.inf)
    gap = g - acceptance
    # The budget is judged relative to its size (plus feas_tol·1e-3 for rounding in D itself), so
    # that a point 10× over a small budget is never called feasible.
    slack = feas_tol * (budget + 1e-3)
    failed = []
    if not simplex <= feas_tol:
        failed.append(f"not a distribution: max(|Σπ − 1|, max(−π)) = {simplex:.3g} > feas_tol = {feas_tol:g}")
    if not excess <= slack:
        failed.append(f"infeasible: D_f(π‖p) − ε = {excess:.3g} > feas_tol·(ε + 1e-3) = {slack:.3g}")
    if not gap <= tol:
        failed.append(f"suboptimal: gap {gap:.3g} > tol = {tol:g} ({bound_text(g, lam_v, mu_v)}, acceptance {acceptance:.9g})")
    return Certificate(
        ok=not failed, acceptance=acceptance, dual_bound=float(g), gap=float(gap), lam=lam_v, mu=float(mu_v),
        simplex_residual=simplex, budget_residual=float(excess), divergence=d, budget=budget, tol=tol,
        feas_tol=feas_tol, arithmetic="float", failed="; ".join(failed), repair=0.0, distance=0.0,
    )


def _dual_point(dual, acceptance, tol, lam_f, mu_f):
    """(λ, μ̃, g): the solver's dual point, else (non-finite, or leaving a gap) a search."""
    cands = []
    if np.isfinite(lam_f) and np.isfinite(mu_f):
        mu_t = mu_f + lam_f * dual.c if lam_f > 0 else mu_f
        cands.append((lam_f, mu_t, dual(lam_f, mu_t)))

    def closed():
        return min(c[2] for c in cands) - acceptance <= 0.01 * tol

    if not cands or not closed():
        # Non-binding budgets with f∞ = ∞ and drafter mass off p's support: g → A* as λ → 0+.
        cands += [(lam_t, 0.0, dual(lam_t, 0.0)) for lam_t in 10.0 ** -np.arange(6.0, 15.0, 2.0) / dual.unit]
    if not closed() and dual.eps == 0.0:
        # Budget 0 (the solver's λ = ∞): g − A* falls like 1/λ for a smooth f, so a few large λ
        # usually close the gap before the full search (a few hundred evaluations, not a thousand).
        for lam_t in 10.0 ** np.arange(8.0, 13.0, 2.0) / dual.unit:
            cands.append((lam_t, *dual.inner(lam_t)))
            if closed():
                break
    if not closed():
        cands.append(dual.best())
    return min(cands, key=lambda c: c[2])
