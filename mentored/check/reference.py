r"""A plain numpy reference for mentored decoding, written to be trusted by reading.

Everything is computed from the definitions of docs/theory.md §3 by bisection: no sorting, no prefix
sums, no piecewise formulas, nothing from the C++ core. Meant for tests, one row at a time, in float64.

- :func:`down`, :func:`up`: Down(t) = Σ (p − max(q, t p))₊ and Up(t) = Σ (min(q, t p) − p)₊ over p > 0.
- :func:`curve`: π(s) with Down(t_lo) = Up(t_hi) = s, continuing onto {p = 0} past Up(∞).
- :func:`solve`: the largest s whose π(s) has D_f(π(s)‖p) ≤ ε.
- :func:`solve_price`: the s maximising A(π(s)) − λ·D_f(π(s)‖p), by a search on that objective itself
  (no derivative of f, no marginal condition).

How it is fast enough for the tests without being clever. Every search is a bisection on the bit
patterns of nonnegative doubles, whose order is the order of the doubles: at most 64 halvings of
an integer gap end at two adjacent doubles, from 0 to ∞ alike (:func:`_bisect`). The searches run
in lanes, many at once: one lane per budget (``solve`` takes an array of budgets), and each step
tries a few points per lane rather than one (a (lanes, points, n) array per evaluation; the number
of points is chosen so that an evaluation touches a few thousand numbers). The budget search is a
bisection over s whose every step inverts Down and Up, by bisection over t, at all its points.
"""

from __future__ import annotations

import numpy as np

from ..divergences import divergence as _divergence

__all__ = ["down", "up", "curve", "solve", "solve_price"]

# About this many numbers per evaluation of Down, Up or D_f: numpy's overhead per call then
# matters little, and the arrays stay in cache.
_WORK = 4096


def _down(p, q, t):
    """Down at every t of an array (any shape), over tokens p > 0 given as p, q."""
    t = np.asarray(t, dtype=np.float64)[..., None]
    return np.maximum(p - np.maximum(q, t * p), 0.0).sum(axis=-1)


def _up(p, q, t):
    """Up at every t of an array (any shape), over tokens p > 0 given as p, q (t = ∞ allowed)."""
    t = np.asarray(t, dtype=np.float64)[..., None]
    return np.maximum(np.minimum(q, t * p) - p, 0.0).sum(axis=-1)


def _positive(p, q):
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    pos = p > 0
    return p[pos], q[pos]


def down(p, q, t):
    """Down(t) (a float; an array for an array of t)."""
    d = _down(*_positive(p, q), t)
    return float(d) if d.ndim == 0 else d


def up(p, q, t):
    """Up(t), t = ∞ allowed (a float; an array for an array of t)."""
    d = _up(*_positive(p, q), t)
    return float(d) if d.ndim == 0 else d


def _points(numbers, nested=1):
    """Points per lane and step, for searches over ``numbers`` (lanes × tokens) each: about _WORK
    numbers per evaluation; ``nested`` searches (one inside another's steps) share that factor."""
    return max(1, int((_WORK / max(numbers, 1)) ** (1.0 / nested)))


def _bisect(g, lo, hi, k=1):
    """Where the monotone ``g`` turns from False (at lo) to True (at hi), lane by lane.

    lo, hi: arrays (or scalars, broadcast) of nonnegative doubles, lo ≤ hi. Nonnegative doubles
    are ordered like their bit patterns read as integers, so the search runs on those integers,
    down to adjacent doubles (at most 64 halvings of the gap, wherever the answer lies in [0, ∞]).
    Each step tries k points per lane, evenly spaced between lo and hi: ``g`` gets an array of
    shape lo.shape + (k,) and answers booleans of that shape, nondecreasing along the last axis
    (k = 1: plain bisection). Returns the final (lo, hi), adjacent doubles (or lo = hi), with g False
    at lo and True at hi wherever it was so at the start.
    """
    a, b = np.broadcast_arrays(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))
    a, b = a.view(np.int64), b.view(np.int64)
    j = np.arange(1, k + 1)
    while (b - a > 1).any():
        # k points a < a + step·j ≤ b, j = 1…k, step = gap/(k + 1) (1 once the gap is that small).
        step = np.maximum((b - a) // (k + 1), 1)
        m = np.minimum(a[..., None] + step[..., None] * j, b[..., None])
        # The number of points before the first where g holds: the new bracket is either side of it.
        first = k - np.logical_or.accumulate(g(m.view(np.float64)), axis=-1).sum(axis=-1)
        a, b = a + step * first, np.where(first < k, np.minimum(a + step * (first + 1), b), b)
    return a.view(np.float64), b.view(np.float64)


class _Row:
    """One row's curve: π(s) and the thresholds at many s at once."""

    def __init__(self, p, q):
        self.p = np.asarray(p, dtype=np.float64)
        self.q = np.asarray(q, dtype=np.float64)
        self.pos = self.p > 0
        self.pp, self.qp = self.p[self.pos], self.q[self.pos]
        self.tv = 0.5 * float(np.abs(self.p - self.q).sum())
        self.q0 = float(self.q[~self.pos].sum())  # drafter mass where p = 0
        self.d_up = float(_up(self.pp, self.qp, np.inf))

    def thresholds(self, s, k):
        """(t_lo, t_hi, z) at each s of an array: z is the share of q given to {p = 0}."""
        s = np.asarray(s, dtype=np.float64)
        p, q = self.pp, self.qp
        # Down decreases from TV at t = 0 to 0 at t = 1: t_lo is the largest t with Down(t) ≥ s.
        t_lo, _ = _bisect(lambda t: _down(p, q, t) < s[..., None], np.zeros_like(s), 1.0, k)
        # Up increases from 0 at t = 1 to Up(∞) = D_up: t_hi is the smallest t with Up(t) ≥ s.
        # Past D_up, with mass where p = 0, t_hi = ∞ and π continues onto {p = 0}; without such
        # mass the curve stops at D_up.
        s_up = np.minimum(s, self.d_up)
        _, t_hi = _bisect(lambda t: _up(p, q, t) >= s_up[..., None], np.ones_like(s), np.inf, k)
        t_lo = np.where(s > 0, t_lo, 1.0)
        t_hi = np.where(s_up > 0, t_hi, 1.0)
        beyond = (s > self.d_up) & (self.q0 > 0)
        z = np.minimum((s - self.d_up) / self.q0, 1.0) if self.q0 > 0 else np.zeros_like(s)
        return t_lo, np.where(beyond, np.inf, t_hi), np.where(beyond, z, 0.0)

    def pi(self, t_lo, t_hi, z):
        """π at thresholds given as arrays (one π per entry, on the last axis)."""
        t_lo, t_hi, z = (np.asarray(x, dtype=np.float64)[..., None] for x in (t_lo, t_hi, z))
        pi = np.zeros(t_lo.shape[:-1] + self.p.shape)
        pi[..., self.pos] = np.clip(self.qp, t_lo * self.pp, t_hi * self.pp)  # p·clip(q/p, t_lo, t_hi)
        pi[..., ~self.pos] = self.q[~self.pos] * z
        return pi


def curve(p, q, s):
    """(π(s), t_lo, t_hi) by bisection on the definitions of Down and Up (arrays for an array of s)."""
    row = _Row(p, q)
    s = np.asarray(s, dtype=np.float64)
    t_lo, t_hi, z = row.thresholds(s, _points(s.size * row.pp.size))
    pi = row.pi(t_lo, t_hi, z)
    if s.ndim == 0:
        return pi, float(t_lo), float(t_hi)
    return pi, t_lo, t_hi


def _cost(row, div, k):
    """s ↦ D_f(π(s)‖p) at every s of an array, thresholds found with k points per step."""
    c = div.tilt  # a (sub)gradient at 1
    with np.errstate(divide="ignore", over="ignore"):
        ratio = row.qp / row.pp

    def cost(s):
        # D_f(π(s)‖p) with f̃(t) = f(t) − c(t − 1) and f∞ − c: equal on the simplex, and free of cancellation,
        # so that budget 0 gives s = 0 rather than an s whose D rounds to 0. π_i/p_i = clip(q_i/p_i,
        # t_lo, t_hi) where p_i > 0; the continuation puts z·Q0 where p = 0.
        t_lo, t_hi, z = row.thresholds(s, k)
        r = np.clip(ratio, t_lo[..., None], t_hi[..., None])
        with np.errstate(invalid="ignore", over="ignore"):
            inside = (row.pp * div.f_tilde(r)).sum(axis=-1)
        outside = z * row.q0
        with np.errstate(invalid="ignore"):  # (f∞ − c)·0 where nothing lies outside
            return inside + np.where(outside > 0, (div.f_inf - c) * outside, 0.0)

    return cost


def _s_max(row, div):
    return row.tv if np.isfinite(div.f_inf) and row.q0 > 0 else min(row.tv, row.d_up)


def solve(p, q, divergence, budget):
    """(π, s) for MD(f, budget) on one row: the largest s ≤ s_max with D_f(π(s)‖p) ≤ budget.

    ``budget`` may be an array: then π has one row per budget and s is an array, all found at once.
    """
    row = _Row(p, q)
    div = _divergence(divergence)
    budget = np.asarray(budget, dtype=np.float64)
    lanes = budget.reshape(-1)
    s_max = _s_max(row, div)
    k = _points(lanes.size * row.pp.size, nested=2)  # the budget search, and inside it Down and Up
    cost = _cost(row, div, k)

    with np.errstate(invalid="ignore"):  # (f∞ − c)·0 where nothing lies outside
        fits = cost(np.full(lanes.shape, s_max)) <= lanes
        s, _ = _bisect(lambda s: cost(s) > lanes[:, None], np.zeros(lanes.shape), s_max, k)
    s = np.where(fits, s_max, s)
    pi = row.pi(*row.thresholds(s, _points(s.size * row.pp.size)))
    if budget.ndim == 0:
        return pi[0], float(s[0])
    return pi.reshape(budget.shape + pi.shape[-1:]), s.reshape(budget.shape)


def solve_price(p, q, divergence, price):
    """(π, s) maximising A(π(s)) − price·D_f(π(s)‖p) over the curve s ∈ [0, s_max], on one row.

    The objective is 1 − TV + s − λ·D(s), concave in s (docs/theory.md §4, "Budgets by price"), and is
    searched for as it is, by refining a grid: each step evaluates it at evenly spaced points of the
    bracket and keeps the two intervals around the last best point, which hold the largest maximiser of
    a concave function. No derivative of f and no marginal condition enter. ``price`` may be an array
    (one lane each, as in :func:`solve`); ``inf`` is budget 0 and 0 is budget ∞ (the curve's end).
    """
    row = _Row(p, q)
    div = _divergence(divergence)
    price = np.asarray(price, dtype=np.float64)
    lam = price.reshape(-1)
    if np.any(np.isnan(lam) | (lam < 0)):
        raise ValueError("price must be nonnegative and not NaN")
    s_max = _s_max(row, div)
    k = 15  # points per step, ends included: the bracket shrinks by (k − 1)/2 = 7 per step
    cost = _cost(row, div, _points(lam.size * k * row.pp.size, nested=2))
    a, b = np.zeros(lam.shape), np.full(lam.shape, s_max)
    j = np.arange(k) / (k - 1)
    for _ in range(200):
        # Adjacent doubles, or (toward s = 0) a bracket below 1e-16·s_max: h is flat to rounding there.
        if not np.any(b - a > 4 * np.spacing(np.maximum(b, 1e-6 * s_max))):
            break
        s = a[:, None] + (b - a)[:, None] * j
        with np.errstate(invalid="ignore", over="ignore"):
            h = s - lam[:, None] * cost(s)
        h = np.where(np.isnan(h), -np.inf, h)  # 0·∞ only at λ = 0, settled below
        best = k - 1 - np.argmax(h[:, ::-1], axis=1)  # the last maximum: the largest maximiser
        lanes = np.arange(lam.size)
        a, b = s[lanes, np.maximum(best - 1, 0)], s[lanes, np.minimum(best + 1, k - 1)]
    lanes = np.arange(lam.size)
    with np.errstate(invalid="ignore", over="ignore"):
        h = np.stack([a, b], 1) - lam[:, None] * cost(np.stack([a, b], 1))
    s = np.where(np.nan_to_num(h[:, 1], nan=-np.inf) >= np.nan_to_num(h[:, 0], nan=-np.inf), b, a)
    s = np.where(lam == 0, s_max, np.where(np.isinf(lam), 0.0, s))
    pi = row.pi(*row.thresholds(s, _points(s.size * row.pp.size)))
    if price.ndim == 0:
        return pi[0], float(s[0])
    return pi.reshape(price.shape + pi.shape[-1:]), s.reshape(price.shape)
