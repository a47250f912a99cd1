r"""A plain numpy reference for mentored decoding, written to be trusted by reading.

Everything is computed from the definitions of docs/theory.md §3 by bisection: no sorting, no prefix
sums, no piecewise formulas. It is slow (O(n) per evaluation, thousands of evaluations) and is
meant for tests, one row at a time, in float64.

- :func:`down`, :func:`up`: Down(t) = Σ (p − max(q, t p))₊ and Up(t) = Σ (min(q, t p) − p)₊ over p > 0.
- :func:`curve`: π(s) with Down(t_lo) = Up(t_hi) = s, continuing onto {p = 0} past Up(∞).
- :func:`solve`: the largest s whose π(s) has D_f(π(s)‖p) ≤ ε.
"""

from __future__ import annotations

import numpy as np

from .divergences import divergence as _divergence

__all__ = ["down", "up", "curve", "solve"]


def down(p, q, t):
    pos = p > 0
    return float(np.sum(np.maximum(p[pos] - np.maximum(q[pos], t * p[pos]), 0.0)))


def up(p, q, t):
    pos = p > 0
    return float(np.sum(np.maximum(np.minimum(q[pos], t * p[pos]) - p[pos], 0.0)))


def _bisect(g, lo, hi):
    """The point where the monotone ``g`` changes from False to True, between lo (False) and hi (True)."""
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if g(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def curve(p, q, s):
    """(π(s), t_lo, t_hi) by bisection on the definitions of Down and Up."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    pos = p > 0
    d_up = up(p, q, np.inf)
    # Down decreases from TV at t = 0 to 0 at t = 1: the largest t with Down(t) ≥ s.
    t_lo, _ = _bisect(lambda t: down(p, q, t) < s, 0.0, 1.0) if s > 0 else (1.0, 1.0)
    pi = np.zeros_like(p)
    q0 = float(q[~pos].sum())
    if s <= d_up or q0 == 0.0:
        s = min(s, d_up)
        # Up increases from 0 at t = 1 to Up(∞) at t = max ratio: the smallest t with Up(t) ≥ s.
        r_max = float(np.max(q[pos] / p[pos]))
        _, t_hi = _bisect(lambda t: up(p, q, t) >= s, 1.0, max(r_max, 1.0)) if s > 0 else (1.0, 1.0)
        t_hi = max(t_hi, 1.0)
    else:
        t_hi = np.inf
        pi[~pos] = q[~pos] * min((s - d_up) / q0, 1.0)
    pi[pos] = np.clip(q[pos], t_lo * p[pos], t_hi * p[pos])
    return pi, t_lo, t_hi


def solve(p, q, divergence, budget):
    """(π, s) for MD(f, budget) on one row: the largest s ≤ s_max with D_f(π(s)‖p) ≤ budget."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    div = _divergence(divergence)
    tv = 0.5 * float(np.abs(p - q).sum())
    q0 = float(q[p == 0].sum())
    s_max = tv if np.isfinite(div.f_inf) and q0 > 0 else min(tv, up(p, q, np.inf))

    c = float(div.fprime(np.array(1.0)))  # a (sub)gradient at 1

    def cost(s):
        # D_f with f(t) − c(t − 1) and f∞ − c: equal on the simplex, and free of cancellation,
        # so that budget 0 gives s = 0 rather than an s whose D rounds to 0.
        pi = curve(p, q, s)[0]
        pos = p > 0
        r = pi[pos] / p[pos]
        inside = float(np.sum(p[pos] * (div.f(r) - c * (r - 1.0))))
        outside = float(pi[~pos].sum())
        return inside + ((div.f_inf - c) * outside if outside > 0 else 0.0)

    if cost(s_max) <= budget:
        s = s_max
    else:
        s, _ = _bisect(lambda s: cost(s) > budget, 0.0, s_max)
    return curve(p, q, s)[0], s
