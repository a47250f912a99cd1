r"""Quality: when mentored decoding beats the target in log-loss (docs/theory.md §6, theorem 9).

On the curve, the mentored output is one round of multiplicative boosting of the target :math:`p`
by the drafter :math:`q`:

.. math::

    \pi(s) = p\, e^{h}, \qquad h_i = \log \mathrm{clip}(q_i / p_i,\ t_{lo}(s),\ t_{hi}(s)),
    \qquad \sum_i p_i e^{h_i} = 1,

so for every "true" next-token law :math:`d` the log-loss gain over the target is

.. math::

    \mathbb{E}_d[\log \pi] - \mathbb{E}_d[\log p] = \mathbb{E}_d[h]

(``proofs/`` theorem 9: ``Boosting.v``). Near :math:`s = 0` its sign is that of the **edge**
:math:`d(U) - p(U)`, :math:`U = \{q > p\}`, and every quantity has a closed-form small-budget
approximation through :math:`f''(1)` (:func:`small_budget`).

Public names: :func:`log_loss_gain`, :func:`edge`, :func:`clipped_log_ratio`, :func:`gain_on_path`,
:func:`small_budget` (:class:`SmallBudget`), :func:`quality_optimal_budget` (:class:`QualityOptimum`).

**Truth.** ``truth`` is either a distribution :math:`d` (float; shape ``(n,)``, broadcast over the
rows, or the shape of ``target``) or observed token ids (integer dtype; a scalar for a ``(n,)`` target,
shape ``(B,)`` for a ``(B, n)`` target), which stand for the one-hot :math:`d = e_y`.

**Zeros.** Log-losses are infinite where the truth has mass on a token with :math:`\pi_i = 0` or
:math:`p_i = 0`. The gain is then, term by term, :math:`\log \pi_i - \log p_i \in \{-\infty, +\infty,
\mathrm{NaN}\}`: :math:`-\infty` where :math:`p_i > 0 = \pi_i` (only possible where :math:`q_i = 0` and
:math:`t_{lo} = 0`: a token with :math:`p_i > 0` keeps :math:`\pi_i \ge t_{lo} p_i > 0` otherwise),
:math:`+\infty` where :math:`p_i = 0 < \pi_i` (the continuation of the curve past :math:`\mathrm{TV} - Q_0`
for :math:`f_\infty < \infty`), and NaN (:math:`\infty - \infty`) where both vanish. Terms where the
truth has no mass contribute 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..solver import MentoredPath, Solution, solve
from ..check.inputs import as_distribution, as_pair, check_sums
from ..divergences import divergence as _divergence

__all__ = [
    "log_loss_gain",
    "edge",
    "clipped_log_ratio",
    "gain_on_path",
    "small_budget",
    "SmallBudget",
    "quality_optimal_budget",
    "QualityOptimum",
]


# ---------------------------------------------------------------------------------------------
# Truth: a distribution or observed token ids, and E_truth[·] over the last axis.


class _Truth:
    """A validated truth: ``ids`` (shape = rows) or ``dist`` (shape (n,) or (B, n)), float64."""

    def __init__(self, truth, target_shape):
        n = target_shape[-1]
        rows = target_shape[:-1]
        a = np.asarray(truth)
        self.ids = self.dist = None
        if a.dtype.kind == "b":
            raise TypeError("truth has dtype bool; pass token ids as integers or a distribution as floats")
        if a.dtype.kind in "iu":
            if a.shape != rows:
                raise ValueError(
                    f"observed token ids must have shape {rows} (one per row of the target, shape {target_shape}), "
                    f"got {a.shape}; pass a float array for a distribution"
                )
            if np.any(a < 0) or np.any(a >= n):
                raise ValueError(f"token ids must lie in [0, {n}), got values from {a.min()} to {a.max()}")
            self.ids = a.astype(np.intp)
            return
        d = as_distribution(truth, "truth")
        if d.shape[-1] != n or not (d.ndim == 1 or d.shape == tuple(target_shape)):
            raise ValueError(f"truth must have shape ({n},) or {tuple(target_shape)} like the target, got {d.shape}")
        self.dist = check_sums(d, "truth", False).astype(np.float64)

    def expect(self, values: np.ndarray) -> np.ndarray:
        """:math:`\\sum_i d_i v_i` over the last axis, with :math:`0 \\cdot (\\pm\\infty, \\mathrm{NaN}) = 0`."""
        if self.ids is not None:
            v = np.atleast_2d(values)
            return v[np.arange(v.shape[0]), np.atleast_1d(self.ids)].reshape(self.ids.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            terms = np.where(self.dist > 0, self.dist * values, 0.0)
            return terms.sum(axis=-1)

    def mass(self, mask: np.ndarray) -> np.ndarray:
        """:math:`d(S)` for the token set ``mask`` (last axis)."""
        return self.expect(mask.astype(np.float64))


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def _solution(target, draft, divergence, budget, acceptance, solution) -> Solution:
    if solution is not None:
        if budget is not None or acceptance is not None:
            raise ValueError("give either solution= or one of budget=/acceptance=, not both")
        if not isinstance(solution, Solution):
            raise TypeError(f"solution must be a mentored.Solution, got {type(solution).__name__}")
        if np.shape(solution.pi) != np.shape(target):
            raise ValueError(f"solution.pi has shape {np.shape(solution.pi)}, the target {np.shape(target)}")
        return solution
    return solve(target, draft, divergence=divergence, budget=budget, acceptance=acceptance)


def _log_ratio(num, den):
    """:math:`\\log(\\text{num}/\\text{den})` in the extended reals: ±inf at zeros, NaN for 0/0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(num) - np.log(den)


# ---------------------------------------------------------------------------------------------
# Public functions.


def edge(target, draft, truth):
    r"""The weak-learning edge :math:`d(U) - p(U)` of the drafter, :math:`U = \{i : q_i > p_i\}`.

    Positive when the truth :math:`d` puts more mass than the target :math:`p` on the tokens the
    drafter :math:`q` favours. Near budget 0 (and when :math:`p(U) + p(L) = 1`, i.e. no token has
    :math:`q_i = p_i`, and the truth has no mass where :math:`p = 0`) the log-loss gain of mentored
    decoding has the sign of the edge: :math:`\text{gain} \approx s\,(d(U)/p(U) - d(L)/p(L))` with
    :math:`L = \{q < p\}` (docs/theory.md §6).

    Parameters
    ----------
    target, draft : array_like, shape (n,) or (B, n)
    truth : array_like
        A distribution (float, ``(n,)`` or the target's shape) or observed token ids (integer,
        one per row: a scalar for a 1-D target, ``(B,)`` for a 2-D one).

    Returns
    -------
    float or ndarray (B,)

    Examples
    --------
    >>> from mentored.analysis.quality import edge
    >>> edge([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4])  # U = {2}: 0.4 − 0.2
    0.2
    """
    p, q = as_pair(target, draft, False)
    t = _Truth(truth, p.shape)
    up = q > p
    return _out(t.mass(up) - np.where(up, p, 0.0).sum(axis=-1, dtype=np.float64))


def clipped_log_ratio(target, draft, *, divergence="kl", budget=None, acceptance=None, solution=None) -> np.ndarray:
    r"""The boosting exponent :math:`h_i = \log \mathrm{clip}(q_i/p_i, t_{lo}, t_{hi})` of the optimum.

    :math:`\pi = p\, e^{h}` and :math:`\sum_i p_i e^{h_i} = 1` on the finite curve (theorem 9). Give
    a ``budget`` (or ``acceptance``) and ``divergence`` as for :func:`mentored.solve`, or an already
    computed ``solution`` of that call.

    Returns
    -------
    ndarray, float64, the target's shape
        On :math:`p_i > 0`: :math:`\log \mathrm{clip}(r_i, t_{lo}, t_{hi})` (:math:`-\infty` where
        :math:`q_i = 0` and :math:`t_{lo} = 0`). On :math:`p_i = 0`, where the form :math:`\pi = p e^h`
        does not reach: :math:`\log(\pi_i / p_i)` in the extended sense, :math:`+\infty` where
        :math:`\pi_i > 0` (the continuation past :math:`\mathrm{TV} - Q_0`) and NaN where :math:`\pi_i = 0`.

    Examples
    --------
    >>> import numpy as np
    >>> from mentored.analysis.quality import clipped_log_ratio
    >>> h = clipped_log_ratio([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], divergence="tv", budget=0.1)
    >>> np.round(np.exp(h), 12)  # clip(r, 0.8, 1.5)
    array([0.8, 1. , 1.5])
    """
    p, q = as_pair(target, draft, False)
    sol = _solution(p, q, divergence, budget, acceptance, solution)
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    t_lo = np.asarray(sol.t_lo, dtype=np.float64)[..., None]
    t_hi = np.asarray(sol.t_hi, dtype=np.float64)[..., None]
    pos = p64 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(pos, q64 / np.where(pos, p64, 1.0), 1.0)
        clipped = np.minimum(np.maximum(r, t_lo), t_hi)
        h = np.log(clipped)
    off = np.where(np.asarray(sol.pi, dtype=np.float64) > 0, np.inf, np.nan)
    return np.where(pos, h, off)


def log_loss_gain(target, draft, truth, *, divergence="kl", budget=None, acceptance=None, solution=None):
    r"""Log-loss gain of mentored decoding over the target, :math:`\mathbb{E}_d[\log \pi - \log p]`, per row.

    .. math::

        \mathrm{gain} = \sum_i d_i \,(\log \pi_i - \log p_i) = \mathbb{E}_d[h]
        \qquad \text{(theorem 9)},

    with :math:`\pi` the optimum of :math:`\mathrm{MD}(f, \varepsilon)` (:func:`mentored.solve`).
    Positive means :math:`\pi` predicts the truth better than :math:`p`. For observed token ids
    :math:`y` it is :math:`\log \pi_y - \log p_y`.

    Parameters
    ----------
    target, draft : array_like, shape (n,) or (B, n)
    truth : array_like
        A distribution (float) or observed token ids (integer); see the module docstring.
    divergence, budget, acceptance
        As for :func:`mentored.solve` (exactly one of ``budget``, ``acceptance``, ``solution``).
    solution : Solution, optional
        A result of ``mentored.solve(target, draft, ...)`` to reuse.

    Returns
    -------
    float or ndarray (B,)
        :math:`-\infty`, :math:`+\infty` or NaN where the truth has mass on tokens with
        :math:`\pi_i = 0` or :math:`p_i = 0` (module docstring, "Zeros"): the gain is computed from
        :math:`\pi` itself, so these follow the extended arithmetic of :math:`\log \pi_i - \log p_i`.

    Examples
    --------
    >>> from mentored.analysis.quality import log_loss_gain
    >>> g = log_loss_gain([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4], divergence="tv", budget=0.1)
    >>> round(g, 12)  # 0.3 log 0.8 + 0.4 log 1.5
    0.095242977849
    """
    p, q = as_pair(target, draft, False)
    t = _Truth(truth, p.shape)
    sol = _solution(p, q, divergence, budget, acceptance, solution)
    diff = _log_ratio(np.asarray(sol.pi, dtype=np.float64), p.astype(np.float64))
    return _out(t.expect(diff))


# ---------------------------------------------------------------------------------------------
# Small budgets (docs/theory.md §6).


@dataclass(frozen=True)
class SmallBudget:
    r"""Small-budget approximations (docs/theory.md §6) next to their exact values on the curve.

    With :math:`U = \{q > p\}`, :math:`L = \{q < p\}`, :math:`a = p(U)`, :math:`b = p(L)`,
    :math:`c = f''(1)`:

    .. math::

        s \approx \sqrt{\frac{2\varepsilon}{c\,(1/a + 1/b)}}, \quad
        t_{hi} \approx 1 + \frac{s}{a}, \quad t_{lo} \approx 1 - \frac{s}{b}, \quad
        D_f(\pi(s)\|p) \approx \frac{c}{2} s^2 \Big(\frac1a + \frac1b\Big), \quad
        A \approx 1 - \mathrm{TV}(p, q) + s, \quad
        \mathrm{gain} \approx s \Big(\frac{d(U)}{a} - \frac{d(L)}{b}\Big).

    Each ``x`` has its exact counterpart ``x_exact`` from :func:`mentored.solve` at the same budget.
    ``divergence`` is the approximation evaluated at the *exact* ``s_exact`` (the other fields use the
    approximate ``s``); ``divergence_exact`` is :math:`D_f(\pi(s_{exact})\|p)`.

    Orders of the errors, as :math:`\varepsilon \to 0` (once :math:`s` is below the first ratio
    breakpoint, where :math:`t_{hi} = 1 + s/a` and :math:`t_{lo} = 1 - s/b` hold *exactly*):
    :math:`D_f` is exact up to :math:`\frac{f'''(1)}{6}s^3(1/a^2 - 1/b^2) = O(s^3)`, so the relative
    errors of ``divergence`` and of ``s`` (hence of :math:`A - (1 - \mathrm{TV})`) are
    :math:`O(s) = O(\sqrt{\varepsilon})`; the gain has relative error :math:`O(\sqrt\varepsilon)` too
    (its next term is :math:`-\frac{s^2}{2}(d(U)/a^2 + d(L)/b^2)`). For ``chi2`` (:math:`f''' = 0`)
    the first three are exact below the first breakpoint. Not capped at the end of the curve.

    Attributes are floats for 1-D input, ``(B,)`` arrays for 2-D input; the ``gain`` fields are NaN
    when no truth was given.
    """

    budget: float | np.ndarray
    f2_at_1: float
    p_up: float | np.ndarray
    p_down: float | np.ndarray
    s: float | np.ndarray
    s_exact: float | np.ndarray
    t_lo: float | np.ndarray
    t_lo_exact: float | np.ndarray
    t_hi: float | np.ndarray
    t_hi_exact: float | np.ndarray
    divergence: float | np.ndarray
    divergence_exact: float | np.ndarray
    acceptance: float | np.ndarray
    acceptance_exact: float | np.ndarray
    gain: float | np.ndarray
    gain_exact: float | np.ndarray


def small_budget(target, draft, budget, *, divergence="kl", truth=None) -> SmallBudget:
    r"""The small-budget approximations of docs/theory.md §6 and their exact values (:class:`SmallBudget`).

    Needs :math:`f''(1)`: not available for ``tv``, which has a kink at 1. There no approximation is
    needed: the curve is exactly linear, :math:`A^*(\varepsilon) = \min(1, 1 - \mathrm{TV}(p,q) + \varepsilon)`
    (theorem 6), so ``tv`` raises ``ValueError``.

    Examples
    --------
    >>> from mentored.analysis.quality import small_budget
    >>> sb = small_budget([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 1e-4, divergence="chi2")
    >>> round(sb.acceptance, 12) == round(sb.acceptance_exact, 12)  # chi2: exact before the first breakpoint
    True
    """
    div = _divergence(divergence)
    c = float(div.f2_at_1)
    if not (np.isfinite(c) and c > 0):
        if div.name == "tv":
            raise ValueError(
                "tv has no f''(1) (kink at 1): the small-budget approximation does not apply, and none is "
                "needed: A*(ε) = min(1, 1 − TV(p, q) + ε) exactly"
            )
        raise ValueError(f"divergence {div.name!r} has f''(1) = {c}; the small-budget approximation needs 0 < f''(1) < ∞")
    p, q = as_pair(target, draft, False)
    sol = solve(p, q, divergence=div, budget=budget)
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    up, down = q64 > p64, q64 < p64
    a = np.where(up, p64, 0.0).sum(axis=-1)
    b = np.where(down, p64, 0.0).sum(axis=-1)
    tv = 0.5 * np.abs(p64 - q64).sum(axis=-1)
    eps = np.asarray(sol.s, dtype=np.float64) * 0 + np.asarray(budget, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = 1.0 / a + 1.0 / b  # inf when p = q on the support of p: the curve is the point s = 0
        s = np.sqrt(2.0 * eps / (c * k))
        s = np.where(np.isfinite(k), s, 0.0)
        t_hi = np.where(s > 0, 1.0 + s / a, 1.0)
        t_lo = np.where(s > 0, 1.0 - s / b, 1.0)
        s_ex = np.asarray(sol.s, dtype=np.float64)
        d_approx = np.where(np.isfinite(k), 0.5 * c * s_ex**2 * k, 0.0)
    if truth is not None:
        t = _Truth(truth, p.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = t.mass(up & (p64 > 0)) / a - t.mass(down) / b
            gain = np.where(s > 0, s * slope, 0.0)
        gain_ex = log_loss_gain(p, q, truth, solution=sol)
    else:
        gain = gain_ex = np.full(np.shape(s), np.nan)
    return SmallBudget(
        budget=_out(eps), f2_at_1=c, p_up=_out(a), p_down=_out(b),
        s=_out(s), s_exact=_out(s_ex),
        t_lo=_out(t_lo), t_lo_exact=_out(sol.t_lo), t_hi=_out(t_hi), t_hi_exact=_out(sol.t_hi),
        divergence=_out(d_approx), divergence_exact=_out(sol.divergence),
        acceptance=_out(1.0 - tv + s), acceptance_exact=_out(sol.acceptance),
        gain=_out(gain), gain_exact=_out(gain_ex),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The gain along the curve, one row: exact maximisation.


class _GainProfile:
    r"""The gain :math:`G(s) = \sum_i d_i \log \mathrm{clip}(r_i, t_{lo}(s), t_{hi}(s))` of one row.

    Tokens with :math:`r > 1` sorted ascending (clipped at :math:`t_{hi}` from above), tokens with
    :math:`r < 1` sorted ascending (clipped at :math:`t_{lo}` from below), prefix sums of
    :math:`p`, :math:`d` and :math:`d \log r`: :math:`G` costs :math:`O(\log n)` once the thresholds
    are known (from :class:`MentoredPath`).
    """

    def __init__(self, p, q, d):
        self.path = MentoredPath(p, q)
        pos = p > 0
        if np.any(d[~pos] > 0):
            raise ValueError(
                "the truth has mass on tokens where the target is 0: the target's log-loss is infinite and "
                "the gain is not a finite function of the budget"
            )
        r = q[pos] / p[pos]
        pp, dd = p[pos], d[pos]
        # Tokens with q = 0 (r = 0) sit at the bottom of L: clipped to t_lo > 0, or h = −∞ at t_lo = 0;
        # their d log r is kept out of the prefix sums (−∞ − (−∞)) and added back in gain_at_thresholds.
        self.d_zero = float(dd[r == 0].sum())
        dlogr = np.where((dd > 0) & (r > 0), dd * np.log(np.where((dd > 0) & (r > 0), r, 1.0)), 0.0)
        u, l_ = r > 1, r < 1
        ou = np.argsort(r[u], kind="stable")
        ol = np.argsort(r[l_], kind="stable")
        self.rU, self.pU, self.dU, self.dlU = r[u][ou], pp[u][ou], dd[u][ou], dlogr[u][ou]
        self.rL, self.pL, self.dL, self.dlL = r[l_][ol], pp[l_][ol], dd[l_][ol], dlogr[l_][ol]
        cat = lambda x: np.concatenate([[0.0], np.cumsum(x)])  # noqa: E731
        self.cpU, self.cdU, self.cdlU = cat(self.pU), cat(self.dU), cat(self.dlU)
        self.cpL, self.cdL, self.cdlL = cat(self.pL), cat(self.dL), cat(self.dlL)
        self.s_end = max(self.path.tv - self.path.q0, 0.0)

    def _active(self, t_lo, t_hi):
        """Index splits: U tokens ``≥ kU`` have r > t_hi; L tokens ``< kL`` have r < t_lo."""
        kU = np.searchsorted(self.rU, t_hi, side="right")
        kL = np.searchsorted(self.rL, t_lo, side="left")
        return kU, kL

    def gain_at_thresholds(self, t_lo, t_hi):
        t_lo, t_hi = np.asarray(t_lo, dtype=np.float64), np.asarray(t_hi, dtype=np.float64)
        kU, kL = self._active(t_lo, t_hi)
        dU_clip = self.cdU[-1] - self.cdU[kU]
        dL_clip = self.cdL[kL]
        with np.errstate(divide="ignore", invalid="ignore"):
            g_hi = np.where(dU_clip > 0, dU_clip * np.log(t_hi), 0.0)
            g_lo = np.where(dL_clip > 0, dL_clip * np.log(t_lo), 0.0)
        g = self.cdlU[kU] + g_hi + g_lo + (self.cdlL[-1] - self.cdlL[kL])
        return np.where((t_lo == 0) & (self.d_zero > 0), -np.inf, g)

    def thresholds(self, s):
        s = np.atleast_1d(np.asarray(s, dtype=np.float64))
        th = np.array([self.path.thresholds(x) for x in s.ravel()]).reshape(s.shape + (2,))
        return th[..., 0], th[..., 1]

    def gain(self, s):
        return self.gain_at_thresholds(*self.thresholds(s))

    def breakpoints(self):
        """Values of s where a ratio leaves the clipped set: G is smooth and concave in between."""
        rU, pU, rL, pL = self.rU, self.pU, self.rL, self.pL
        # Up(r_k) = Σ_{j<k} p_j (r_j − 1) + (r_k − 1) Σ_{j≥k} p_j   (U ascending)
        up = np.cumsum(np.concatenate([[0.0], pU * (rU - 1)]))[:-1] + (rU - 1) * (self.cpU[-1] - self.cpU[:-1])
        # Down(r_k) = (1 − r_k) Σ_{j≤k} p_j + Σ_{j>k} p_j (1 − r_j)   (L ascending)
        tail = np.concatenate([np.cumsum((pL * (1 - rL))[::-1])[::-1], [0.0]])
        down = (1 - rL) * self.cpL[1:] + tail[1:]
        pts = np.concatenate([[0.0, self.s_end], up, down])
        return np.unique(np.clip(pts, 0.0, self.s_end))

    def maximise(self):
        """(s*, G(s*)): the largest gain on [0, TV − Q0], the smallest such s."""
        bp = self.breakpoints()
        cand = [bp]
        if bp.size > 1:
            a, b = bp[:-1], bp[1:]
            mid = 0.5 * (a + b)
            tl, th = self.thresholds(mid)
            kU, kL = self._active(tl, th)
            pu, du = self.cpU[-1] - self.cpU[kU], self.cdU[-1] - self.cdU[kU]
            pl, dl = self.cpL[kL], self.cdL[kL]
            # On a piece t_hi = th + x/pu, t_lo = tl − x/pl (x = s − mid) and
            # G'(s) = du/(pu t_hi) − dl/(pl t_lo) decreases: its root solves du·pl·t_lo = dl·pu·t_hi.
            with np.errstate(divide="ignore", invalid="ignore"):
                x = (du * pl * tl - dl * pu * th) / (du + dl)
            s_star = mid + x
            ok = np.isfinite(s_star) & (s_star > a) & (s_star < b) & (pu > 0) & (pl > 0)
            cand.append(s_star[ok])
        s = np.unique(np.concatenate(cand))
        g = self.gain(s)
        g = np.where(np.isnan(g), -np.inf, g)
        k = int(np.argmax(g))
        return float(s[k]), float(g[k])


def _row_truth(truth, n):
    t = _Truth(truth, (n,))
    if t.ids is not None:
        d = np.zeros(n)
        d[int(t.ids)] = 1.0
        return d
    return t.dist


def _one_row(target, draft):
    p, q = as_pair(target, draft, False)
    if p.ndim != 1:
        raise ValueError(f"this function takes one row, shape (n,), got {p.shape}")
    return p.astype(np.float64), q.astype(np.float64)


def gain_on_path(target, draft, truth, s) -> np.ndarray:
    r"""The log-loss gain :math:`G(s) = \mathbb{E}_d[h(s)]` at positions ``s`` on the curve of one row.

    Divergence-free: every divergence's optimum is some :math:`\pi(s)`, and the budget only sets
    :math:`s` (docs/theory.md §3); map ``s`` to a budget with :meth:`MentoredPath.divergence_at`. ``s`` lies in
    :math:`[0, \mathrm{TV}(p, q)]`; past :math:`\mathrm{TV} - Q_0` (the continuation for
    :math:`f_\infty < \infty`) the gain is nonincreasing, since only :math:`t_{lo}` still moves. The
    truth must put no mass where the target is 0 (``ValueError``).

    Returns
    -------
    ndarray, the shape of ``s``
    """
    p, q = _one_row(target, draft)
    prof = _GainProfile(p, q, _row_truth(truth, p.size))
    s = np.asarray(s, dtype=np.float64)
    return prof.gain(s).reshape(s.shape)


@dataclass(frozen=True)
class QualityOptimum:
    r"""The point of the curve with the largest log-loss gain (:func:`quality_optimal_budget`).

    Attributes
    ----------
    s : float
        Position on the curve, :math:`\mathrm{TV}(\pi, p)`.
    budget : float
        :math:`D_f(\pi(s)\|p)`, the budget at which :func:`mentored.solve` returns this point.
    acceptance : float
        :math:`1 - \mathrm{TV}(p, q) + s`.
    gain : float
        :math:`\mathbb{E}_d[\log \pi - \log p] \ge 0` (0 when no budget helps: then ``s = 0``).
    t_lo, t_hi : float
    pi : ndarray
    name : str
        The divergence.
    """

    s: float
    budget: float
    acceptance: float
    gain: float
    t_lo: float
    t_hi: float
    pi: np.ndarray
    name: str


def quality_optimal_budget(target, draft, truth, *, divergence="kl") -> QualityOptimum:
    r"""The budget whose mentored optimum has the best log-loss against a known truth :math:`d`.

    .. math::

        s^\star = \arg\max_{s \in [0,\, s_{max}]} \mathbb{E}_d\big[\log \mathrm{clip}(q/p, t_{lo}(s), t_{hi}(s))\big],
        \qquad \varepsilon^\star = D_f(\pi(s^\star)\|p).

    The gain is **not** concave in :math:`s` in general (its slope
    :math:`d(U_s)/(p(U_s)\,t_{hi}) - d(L_s)/(p(L_s)\,t_{lo})`, with :math:`U_s, L_s` the clipped
    tokens, jumps *up* when a token of low :math:`d/p` leaves :math:`U_s`), but it is concave between
    consecutive breakpoints (values of :math:`s` where a ratio :math:`q_i/p_i` meets a threshold), where
    :math:`t_{lo}, t_{hi}` are affine in :math:`s` and the slope decreases. So the maximum is exact:
    over the :math:`O(n)` breakpoints and the closed-form stationary point of each piece, in
    :math:`O(n \log n)`. The search covers the finite curve :math:`[0, \mathrm{TV} - Q_0]`; for
    :math:`f_\infty < \infty` the continuation beyond can only lose (only :math:`t_{lo}` moves), the
    truth having no mass where :math:`p = 0`.

    Parameters
    ----------
    target, draft : array_like, shape (n,)
    truth : array_like (n,) or int
        A distribution with no mass where the target is 0, or one observed token id.
    divergence : str or Divergence
        Only maps :math:`s^\star` to its budget; :math:`s^\star` itself is the same for every divergence.

    Examples
    --------
    >>> from mentored.analysis.quality import quality_optimal_budget
    >>> opt = quality_optimal_budget([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4], divergence="tv")
    >>> round(opt.s, 12), round(opt.gain, 6)  # 0.4/(0.2 t_hi) = 0.3/(0.5 t_lo) on the one piece: π = d
    (0.2, 0.124011)
    """
    p, q = _one_row(target, draft)
    div = _divergence(divergence)
    prof = _GainProfile(p, q, _row_truth(truth, p.size))
    s, g = prof.maximise()
    path = prof.path
    t_lo, t_hi = path.thresholds(s)
    return QualityOptimum(
        s=s, budget=float(path.divergence_at(s, div)), acceptance=float(path.acceptance(s)), gain=g,
        t_lo=float(t_lo), t_hi=float(t_hi), pi=path.pi(s), name=div.name,
    )  # fmt: skip
