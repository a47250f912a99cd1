r"""Certificates of optimality by weak duality (MATH.md §5, proofs/README.md theorem 8).

For :math:`\lambda \ge 0` and any :math:`\mu`, the dual function

.. math::

    g(\lambda, \mu) = \lambda\varepsilon + \mu
        + \sum_{p_i > 0} p_i \sup_{t \ge 0}\bigl[\min(t, r_i) - \mu t - \lambda f(t)\bigr]
        + \sum_{p_i = 0} \sup_{\pi \ge 0}\bigl[\min(\pi, q_i) - (\lambda f_\infty + \mu)\pi\bigr],
    \qquad r_i = q_i / p_i,

bounds the optimum :math:`A^* = \max\{A(\pi') : \pi' \in \Delta_n,\ D_f(\pi'\|p) \le \varepsilon\}` from
above. A feasible :math:`\pi` with :math:`g(\lambda, \mu) - A(\pi) \le \tau` is therefore within
:math:`\tau` of the optimum. Each per-token sup is closed form in the conjugate :math:`f^*`: split at
:math:`t = r_i`; on :math:`[0, r_i]` the concave :math:`(1-\mu)t - \lambda f(t)` has sup
:math:`\lambda f^*((1-\mu)/\lambda)` if its maximiser lies in the piece, else its value at
:math:`r_i`; on :math:`[r_i, \infty)`, :math:`r_i - \mu t - \lambda f(t)` has sup
:math:`r_i + \lambda f^*(-\mu/\lambda)` or again the value at :math:`r_i`. For :math:`p_i = 0` the sup is
:math:`q_i \max(0, 1 - (\lambda f_\infty + \mu))` when :math:`\lambda f_\infty + \mu \ge 0`, else
:math:`+\infty`.

Numerics: everything is evaluated with the tilted generator :math:`\tilde f(t) = f(t) - c(t-1)`,
:math:`c \in \partial f(1)`; on the simplex :math:`D_{\tilde f} = D_f - c(\sum\pi - 1)`, so
:math:`g_f(\lambda, \mu) = g_{\tilde f}(\lambda, \mu + \lambda c)`, and the large cancelling terms
:math:`\mu \approx -\lambda c` of small budgets disappear. ``exact=True`` evaluates :math:`g` in exact
rationals where :math:`f` and :math:`f^*` are algebraic, and in interval arithmetic (``mpmath.iv``)
otherwise, rounding every bound upward, so that the certificate is a proof (not implemented yet).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .divergences import divergence as _divergence

__all__ = ["Certificate", "certify", "dual_bound"]


@dataclass(frozen=True)
class Certificate:
    r"""A checked claim :math:`A(\pi) \ge A^* - \mathrm{gap}` for :math:`\mathrm{MD}(f, \varepsilon)`.

    Attributes
    ----------
    ok : bool
        Feasible within ``feas_tol`` and ``gap <= tol``.
    acceptance : float
        :math:`A(\pi) = \sum_i \min(\pi_i, q_i)`.
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
        ``"float"`` (the rigorous modes are to come).
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


class _Dual:
    """g̃(λ, μ̃) for one row, with the per-token quantities that do not depend on (λ, μ̃) cached."""

    def __init__(self, div, p, q, budget):
        self.div = div
        self.eps = float(budget)
        pos = p > 0
        self.pS = p[pos]
        self.r = q[pos] / p[pos]
        self.qZ = float(q[~pos].sum())
        self.c = div.tilt
        self.finf = div.f_inf - self.c
        with np.errstate(all="ignore"):
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
            return mu_t + k * float(np.dot(self.pS, r)) + k * self.qZ
        a, b = (1.0 - mu_t) / lam, -mu_t / lam
        Fa = lam * float(self.div.conjugate_tilde(np.array([a]))[0])
        Fb = lam * float(self.div.conjugate_tilde(np.array([b]))[0])
        with np.errstate(all="ignore"):
            at_r = (1.0 - mu_t) * r - lam * self.fr  # both pieces' value at t = r
            A = np.where(self.fp_left <= a, at_r, Fa)
            B = np.where(self.fp_right >= b, at_r, r + Fb)
            # The sup lies between the value at r and the unclipped sup, whatever the rounding.
            A = np.minimum(np.maximum(A, at_r), Fa)
            B = np.minimum(np.maximum(B, at_r), r + Fb)
            h = np.maximum(A, B)
            zero = r == 0  # q_i = 0: the piece t ≤ 0 is t = 0 alone
            h = np.where(zero, np.maximum(-lam * self.f0, Fb), h)
        k = lam * self.finf + mu_t
        if self.qZ > 0:
            if k < 0:
                return np.inf
            outside = self.qZ * max(0.0, 1.0 - k)
        else:
            outside = 0.0
        total = lam * eps + mu_t + float(np.dot(self.pS, h)) + outside
        return np.inf if np.isnan(total) else total

    def best(self):
        """(λ, μ̃, g) minimising g over λ (log scale) with μ̃ ∈ [0, 1] optimal for each λ."""
        from scipy.optimize import minimize_scalar

        def capped(lam, m):  # Brent's parabolic steps need finite values; ∞ only means "too small"
            return min(self(lam, m), 1e30)

        def inner(lam):
            res = minimize_scalar(lambda m: capped(lam, m), bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-13})
            return res.x, self(lam, res.x)

        best = (0.0, 0.0, self(0.0, 0.0))
        if np.isfinite(self.eps):
            with np.errstate(all="ignore"):
                outer = minimize_scalar(lambda x: min(inner(10.0**x)[1], 1e30), bounds=(-14.0, 12.0), method="bounded", options={"xatol": 1e-7})
                lam = 10.0**outer.x
                mu_t, g = inner(lam)
            if g < best[2]:
                best = (lam, mu_t, g)
        return best


def dual_bound(target, draft, divergence, budget, lam, mu) -> float:
    r""":math:`g(\lambda, \mu)` of MATH.md §5 in floating point (an upper bound on :math:`A^*`)."""
    p, q = (np.asarray(x, dtype=np.float64) for x in (target, draft))
    div = _divergence(divergence)
    lam = float(lam)
    return _Dual(div, p, q, budget)(lam, float(mu) + lam * div.tilt if lam > 0 else float(mu))


def certify(
    target, draft, pi, divergence, budget, *, lam=None, mu=None, exact=False, tol=1e-7, feas_tol=1e-9
) -> Certificate:
    r"""Check :math:`\pi` against :math:`\mathrm{MD}(f, \varepsilon)`: feasibility and a duality gap.

    .. math::

        A(\pi) \;\ge\; g(\lambda, \mu) - \mathrm{gap} \;\ge\; A^* - \mathrm{gap}

    Parameters
    ----------
    target, draft, pi : array_like (n,)
        :math:`p`, :math:`q`, :math:`\pi` (float64; ``target`` and ``draft`` sum to 1).
    divergence : str or Divergence
        A built-in name or a :class:`~mentored.Divergence` with a sympy generator.
    budget : float
        :math:`\varepsilon \ge 0`.
    lam, mu : float, optional
        The dual point; by default the solver's :math:`(\lambda, \mu)`, improved by a 1-D search over
        :math:`\lambda` (with :math:`\mu` optimal) when they are not finite or leave a gap (budget 0,
        non-binding budgets with :math:`f_\infty = \infty` and drafter mass off the target's support).
    exact : bool
        Reserved for the rigorous mode (exact rationals / interval arithmetic, bounds rounded upward);
        not implemented yet: ``True`` raises NotImplementedError.
    tol, feas_tol : float
        Largest accepted gap, and largest accepted simplex residual and budget excess
        (relative to :math:`1 + \varepsilon`).

    Examples
    --------
    >>> import mentored
    >>> p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    >>> sol = mentored.solve(p, q, divergence="kl", budget=0.05)
    >>> mentored.certify(p, q, sol.pi, "kl", 0.05).ok
    True
    >>> mentored.certify(p, q, p, "kl", 0.05).ok  # feasible but short of the optimum
    False
    """
    div = _divergence(divergence)
    p = np.asarray(target, dtype=np.float64)
    q = np.asarray(draft, dtype=np.float64)
    x = np.asarray(pi, dtype=np.float64)
    if p.ndim != 1 or p.shape != q.shape or p.shape != x.shape:
        raise ValueError(f"target, draft and pi must be 1-D of one length, got {p.shape}, {q.shape}, {x.shape}")
    budget = float(budget)
    if not budget >= 0:
        raise ValueError(f"budget must be nonnegative, got {budget!r}")
    if (lam is None) != (mu is None):
        raise ValueError("give both lam and mu, or neither")
    if lam is not None and not float(lam) >= 0:
        raise ValueError(f"lam must be nonnegative, got {lam!r}")
    dual = _Dual(div, p, q, budget)
    acceptance = float(np.minimum(x, q).sum())
    if lam is None:
        from ._solve import solve

        sol = solve(p, q, divergence=div, budget=budget, normalize=True)
        lam_f, mu_f = float(sol.lam), float(sol.mu)
        cands = []
        if np.isfinite(lam_f) and np.isfinite(mu_f):
            mu_t = mu_f + lam_f * dual.c if lam_f > 0 else mu_f
            cands.append((lam_f, mu_t, dual(lam_f, mu_t)))
        if not cands or not (min(c[2] for c in cands) - acceptance <= 0.01 * tol):
            # Non-binding budgets with f∞ = ∞ and drafter mass off p's support: g → A* as λ → 0+.
            cands += [(lam_t, 0.0, dual(lam_t, 0.0)) for lam_t in 10.0 ** -np.arange(6.0, 15.0, 2.0)]
        if not (min(c[2] for c in cands) - acceptance <= 0.01 * tol):
            cands.append(dual.best())
        lam_v, mu_t, g = min(cands, key=lambda c: c[2])
    else:
        lam_v = float(lam)
        mu_t = float(mu) + lam_v * dual.c if lam_v > 0 else float(mu)
        g = dual(lam_v, mu_t)
    mu_v = mu_t - lam_v * dual.c if lam_v > 0 else mu_t
    if exact:
        raise NotImplementedError("certify(exact=True) is not implemented yet: rational/interval evaluation is to come")
    d = float(div(np.maximum(x, 0.0), p))  # the definition; negative entries count in the residual
    simplex = float(max(abs(x.sum() - 1.0), max(0.0, -float(x.min()))))
    excess = d - budget
    gap = g - acceptance
    ok = bool(simplex <= feas_tol and excess <= feas_tol * (1.0 + budget) and gap <= tol)
    return Certificate(
        ok=ok, acceptance=acceptance, dual_bound=float(g), gap=float(gap), lam=lam_v, mu=float(mu_v),
        simplex_residual=simplex, budget_residual=float(excess), divergence=d, budget=budget, tol=tol,
        feas_tol=feas_tol, arithmetic="float",
    )
