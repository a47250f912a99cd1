r"""Certificates of optimality by weak duality (docs/theory.md §5, proofs/README.md theorem 8).

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
otherwise, rounding every bound upward, so that the certificate is a proof (see :func:`certify`).
"""

from __future__ import annotations

from ..check.duality import Certificate, certify_at, dual_bound, inputs
from ._solve import solve
from ..divergences import divergence as _divergence

__all__ = ["Certificate", "certify", "dual_bound"]


def certify(
    target, draft, pi, divergence, budget, *, lam=None, mu=None, exact=False, tol=1e-7, feas_tol=1e-9, normalize=False
) -> Certificate:
    r"""Check :math:`\pi` against :math:`\mathrm{MD}(f, \varepsilon)`: feasibility and a duality gap.

    .. math::

        A(\pi) \;\ge\; g(\lambda, \mu) - \mathrm{gap} \;\ge\; A^* - \mathrm{gap}

    Parameters
    ----------
    target, draft, pi : array_like (n,)
        :math:`p`, :math:`q`, :math:`\pi`. ``target`` and ``draft`` are finite and nonnegative and sum
        to 1 within :func:`solve`'s tolerance (relative 1e-6 in float64, 1e-3 in float32), and are read
        as the distributions :math:`p/\sum p`, :math:`q/\sum q` (in float64; exactly in rigorous mode);
        a sum further from 1 is refused (ValueError naming the argument and its sum) unless
        ``normalize``. :math:`\pi` is judged as given: a :math:`\pi` off the simplex by more than
        ``feas_tol`` is never ``ok`` (``failed``: ``not a distribution``), ``normalize`` or not.
    divergence : str or Divergence
        A built-in name or a :class:`~mentored.Divergence` with a sympy generator.
    budget : float
        :math:`\varepsilon \ge 0`; ``inf`` admits every point, :math:`D_f = \infty` included.
    lam, mu : float, optional
        The dual point; by default the solver's :math:`(\lambda, \mu)`, improved by a 1-D search over
        :math:`\lambda` (with :math:`\mu` optimal) when they are not finite or leave a gap (budget 0,
        non-binding budgets with :math:`f_\infty = \infty` and drafter mass off the target's support).
        Given and finite, exactly that point is used (:func:`solve` with ``check=True`` hands its own);
        given but not finite (the solver's :math:`\lambda = \infty`, :math:`\mu` NaN at budget 0), the
        search is used, without solving again. Every finite point bounds :math:`A^*` (weak duality;
        float mode evaluates the bound in float64, exact mode proves it): far from the optimum's (say
        :math:`\lambda = 10^{308}`, :math:`\mu = -10^{308}`) the bound is huge or ``inf`` (past the
        float range), and ``failed`` says ``suboptimal`` with the bound and the point.
    exact : bool
        Rigorous mode (below): a proof in exact rational and interval arithmetic instead of a float check.
    tol, feas_tol : float
        Largest accepted gap; largest accepted simplex residual; in float mode the budget excess
        accepted is ``feas_tol`` relative to the budget, :math:`\mathrm{feas\_tol}\,(\varepsilon + 10^{-3})`,
        and in exact mode the largest :math:`\ell_1` distance from :math:`\pi` to the repaired point.
    normalize : bool
        Accept ``target`` and ``draft`` with any positive sum, read as :math:`p/\sum p`, :math:`q/\sum q`
        (as :func:`solve` with ``normalize=True``), in both modes alike.

    Rigorous mode (``exact=True``)
    ------------------------------
    The inputs are read as the exact rationals of their float values; ``target`` and ``draft`` (their
    sums checked as above) are normalised exactly (:math:`\hat p = p/\sum p`, :math:`\hat q = q/\sum q`:
    the distributions the floats stand for), and so is the point: :math:`\hat\pi = \pi_+ / \sum \pi_+` lies exactly on the
    simplex. A float optimum on an active budget has :math:`D_f(\hat\pi\|\hat p) = \varepsilon` up to
    rounding, so about half the time it is truly infeasible by ~1e-17. Such a point is replaced by

    .. math::

        \pi' = (1 - \delta)\hat\pi + \delta\hat p, \qquad
        \delta \ge \frac{D_f(\hat\pi\|\hat p) - \varepsilon}{D_f(\hat\pi\|\hat p)}

    (:math:`\delta = 1` where :math:`D_f = \infty`), which is feasible: :math:`D_f(\cdot\|\hat p)` is
    convex and :math:`D_f(\hat p\|\hat p) = f(1) = 0`, so
    :math:`D_f(\pi'\|\hat p) \le (1-\delta) D_f(\hat\pi\|\hat p) \le \varepsilon`. The rule for
    "infeasible only by rounding": :math:`\|\pi' - \pi\|_1 \le` ``feas_tol`` (``distance``; δ rounded
    up to a float is ``repair``). Beyond that :math:`\pi` is infeasible and the certificate fails.
    The certified point is :math:`\pi'` when repaired, else :math:`\hat\pi`, and ``ok`` means it is
    **proved** that

    * it satisfies the budget exactly (no tolerance: ``budget_residual`` is an upper bound of
      :math:`D_f(\hat\pi\|\hat p) - \varepsilon`, rounded up; it is ``<= 0``, or the point was repaired);
    * its acceptance is :math:`\ge A^* - \mathrm{gap}` with :math:`A^*` the optimum of
      :math:`\mathrm{MD}(f, \varepsilon)` for :math:`(\hat p, \hat q)`, and ``gap <= tol``;

    and, besides, ``simplex_residual`` (:math:`\max(|\sum\pi - 1|, \max_i(-\pi_i))` of the float
    vector, exact and rounded up) is ``<= feas_tol``: the float :math:`\pi` is close to the certified
    point. ``acceptance`` (rounded down), ``dual_bound`` and ``gap`` (rounded up) are those of the
    certified point; ``divergence`` is an upper bound of :math:`D_f(\hat\pi\|\hat p)`; ``lam`` is the
    exact :math:`\lambda` used and ``mu`` the nearest float to the exact :math:`\mu` used (any dual
    point gives a valid bound, so the float search's point is simply read as a rational). ``failed``
    names each check that failed.

    Arithmetic: :math:`A(\hat\pi)` is an exact Fraction; each term of :math:`D_f` and each
    per-token sup of the dual (proofs/README.md theorem 8, correction 4) is evaluated from sympy
    forms of :math:`f`, a subgradient of :math:`f`, and :math:`f^*` (built-ins: the table of
    proofs/README.md; user generators: the symbolic analysis, with exact limits), in Fractions while
    the operations are rational and in outward-rounded interval arithmetic (``mpmath``, 128 bits)
    from the first log, exp or irrational root on; upper ends are read back exactly. ``tv`` and
    ``chi2`` are entirely rational (``arithmetic == "rational"``); ``kl``, ``reverse_kl``, ``js``
    (log/exp), ``hellinger`` (:math:`\sqrt t` in :math:`f`) and ``neyman_chi2``
    (:math:`\sqrt{1-y}` in :math:`f^*`) use intervals (``"interval"``). A per-token sup is the value at
    :math:`t = r_i` only where an enclosed subgradient at :math:`r_i` proves the piece's maximiser lies
    beyond :math:`r_i`; otherwise the always-valid :math:`\min(\lambda f^*(a), r_i + \lambda f^*(b))`
    is used. A user generator whose conjugate is only numeric (``conjugate_expr is None``) or uses
    functions without an interval enclosure raises NotImplementedError; one without a sympy form,
    ValueError.

    Cost: Python Fractions and intervals, a few ms per hundred tokens (meant for moderate
    :math:`n \lesssim 10^4`, not for serving).

    NaN or infinite entries in ``target``, ``draft`` or ``pi``, negative entries in ``target`` or
    ``draft``, and their sums off 1 without ``normalize`` raise ValueError (in both modes).

    Examples
    --------
    >>> import mentored
    >>> p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    >>> sol = mentored.solve(p, q, divergence="kl", budget=0.05)
    >>> mentored.certify(p, q, sol.pi, "kl", 0.05).ok
    True
    >>> mentored.certify(p, q, p, "kl", 0.05).ok  # feasible but short of the optimum
    False
    >>> mentored.certify(p, q, p, "kl", 0.05).failed[:11]
    'suboptimal:'
    >>> mentored.certify([5, 3, 2], q, sol.pi, "kl", 0.05)
    Traceback (most recent call last):
    ...
    ValueError: target must sum to 1 (relative tolerance 1e-06 for float64); it sums to 10.0. Pass normalize=True to renormalise.
    >>> mentored.certify([5, 3, 2], q, sol.pi, "kl", 0.05, normalize=True).ok
    True
    >>> sol = mentored.solve(p, q, divergence="chi2", budget=0.05)
    >>> cert = mentored.certify(p, q, sol.pi, "chi2", 0.05, exact=True)
    >>> cert.ok, cert.arithmetic, cert.gap < 1e-9, cert.distance < 1e-15
    (True, 'rational', True, True)
    """
    div = _divergence(divergence)
    if (lam is None) != (mu is None):
        raise ValueError("give both lam and mu, or neither")
    kw = dict(exact=exact, tol=tol, feas_tol=feas_tol, normalize=normalize)
    if lam is not None:
        return certify_at(target, draft, pi, div, budget, lam=lam, mu=mu, **kw)
    p, q, _, eps = inputs(target, draft, pi, budget, normalize)
    sol = solve(p, q, divergence=div, budget=eps, normalize=True)  # p/Σp and q/Σq, as certify_at reads them
    # The inputs as given: certify_at checks their sums at the tolerance of their dtype.
    return certify_at(target, draft, pi, div, budget, lam=sol.lam, mu=sol.mu, solver_point=True, **kw)
