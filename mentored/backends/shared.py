"""What the host and the torch backend compute the same way, in the array namespace each passes
(numpy or torch): the token-only bisection, the verifiers of a draft tree's nodes, and the check of
given uniforms."""

from __future__ import annotations

import numpy as np

from typing import Callable, NamedTuple

from .. import _core
from ..divergences import Divergence

__all__ = ["onehot_bisection", "onehot_price_search", "given_uniforms", "LevelForms", "node_masses", "tree_masses", "REST_DIRECT"]

_BISECT = 80  # halvings of [p_x, 1] for the token-only verifier: absolute error 2^-80, as the core's


def onehot_bisection(xp, px, eps, div: Divergence, zeros: str, term):
    """The bisection of :func:`~mentored.verify.serving.onehot_acceptance` in an array namespace ``xp``
    (numpy or torch): ``term(x, y)`` is y·f̃(x/y) for y > 0 there (the divergence's perspective,
    finite however small y is)."""
    f_inf = div.f_inf - div.tilt  # f̃∞
    zero = px <= 0
    if div.compiled == _core.Generator.tv:
        a = xp.clip(px + eps, None, 1.0)
    elif div.compiled == _core.Generator.chi2:
        a = xp.clip(px + xp.sqrt(eps * px * (1.0 - px)), None, 1.0)
    else:
        rest = 1.0 - px
        some = rest > 0
        pos, rest1 = xp.where(zero, 1.0, px), xp.where(some, rest, 1.0)

        def D(a):
            # off the target's support a unit of mass costs f̃∞ (0·∞ = 0 where a = 0)
            t1 = xp.where(zero, xp.where(a > 0, a * f_inf, 0.0), term(a, pos))
            return t1 + xp.where(some, term(1.0 - a, rest1), 0.0)

        lo, hi = px + 0.0, xp.ones_like(px)
        top = D(hi) <= eps
        for _ in range(_BISECT):
            mid = 0.5 * (lo + hi)
            good = D(mid) <= eps
            lo = xp.where(good, mid, lo)
            hi = xp.where(good, hi, mid)
        a = xp.where(top, 1.0, lo)
    a = xp.where(eps <= 0, px, xp.where(a > px, a, px))
    if zeros == "keep" or not np.isfinite(f_inf):
        a = xp.where(zero, 0.0, a)
    return a


def onehot_price_search(xp, px, lam, div: Divergence, zeros: str, term):
    """π_x of the price verifier of a token-only drafter (docs/theory.md §4, §8; the core's
    onehot_pi_x_price) in an array namespace ``xp``, for a divergence the core cannot evaluate: the
    a ∈ [p_x, 1] maximising a − λ·D(a), D(a) = p_x f̃(a/p_x) + (1 − p_x) f̃((1 − a)/(1 − p_x)) (convex
    in a, so the objective is concave), by a golden-section search to 2⁻⁶⁰ of [p_x, 1] (the core
    bisects on the slope, which needs f̃'; this needs only f̃). The end a = 1 is kept where it is as
    good (the largest maximiser, as the core's). ``term(x, y)``: y·f̃(x/y) for y > 0."""
    f_inf = div.f_inf - div.tilt  # f̃∞
    zero = px <= 0
    rest = 1.0 - px
    some = rest > 0
    pos, rest1 = xp.where(zero, 1.0, px), xp.where(some, rest, 1.0)

    def gain(a):
        t1 = xp.where(zero, xp.where(a > 0, a * f_inf, 0.0), term(a, pos))
        D = t1 + xp.where(some, term(1.0 - a, rest1), 0.0)
        return a - xp.where(lam > 0, lam * D, 0.0)  # λ = 0: acceptance alone (0·∞ read as 0)

    r = (5 ** 0.5 - 1) / 2
    lo, hi = px + 0.0, xp.ones_like(px)
    for _ in range(_GOLDEN):
        c, d = hi - r * (hi - lo), lo + r * (hi - lo)
        right = gain(c) < gain(d)
        lo = xp.where(right, c, lo)
        hi = xp.where(right, hi, d)
    a = 0.5 * (lo + hi)
    one = xp.ones_like(px)
    a = xp.where(gain(one) >= gain(a), one, a)
    a = xp.where(lam < np.inf, xp.where(a > px, a, px), px)  # λ = ∞: budget 0
    if div.compiled == _core.Generator.tv:  # D = a − p_x: all below price 1, nothing above
        a = xp.where(lam <= 1.0, one, px + 0.0)
    if zeros == "keep" or not np.isfinite(f_inf):
        a = xp.where(zero, 0.0, a)
    return a


_GOLDEN = 90  # 0.618⁹⁰ < 2⁻⁶⁰


def given_uniforms(uniforms, T: int) -> np.ndarray:
    u = np.ascontiguousarray(uniforms, dtype=np.float64)
    if u.shape != (T, 2):
        raise ValueError(f"uniforms must have shape (num_tokens, 2) = ({T}, 2), got {u.shape}")
    if not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError("uniforms must lie in [0, 1)")
    return u


# ---------------------------------------------------------------- draft trees (cpp/mentored/tree.hpp)

# k-ary searches: 2^b points a step narrow a bracket 2^b-fold. A device takes 16 (few steps, each
# launched once); numpy, on the host, 4 (fewer points a step, less memory). 64 bits of the top
# class's mass in [P_T, 1], 56 of log₂ θ in [−1100, 1100] (the core's range; 2200·2⁻⁵⁶ = 3e-14).
_LEVEL_BITS, _THETA_BITS = 64, 56
_LOG2_THETA = 1100.0
# A node's complement mass is 1 − Σ P_child from this up; below, it is summed over the complement
# (1 − Σ has lost its digits, and rounds a complement below an ulp of 1 to 0): the core's kRestDirect.
REST_DIRECT = 2.0**-10


class LevelForms(NamedTuple):
    """A divergence as the weighted verifier reads it: ``term(x, y)`` = y·f̃(x/y) for y > 0, f̃′ and
    (f̃′)⁻¹ (0 from f̃′(0⁺) down, inf from f̃∞ up), on arrays of the namespace."""

    term: Callable
    df: Callable
    dfinv: Callable


def node_masses(xp, P, w, eps, div: Divergence, zeros: str, forms: LevelForms, weighted: bool = True):
    r"""The class masses :math:`m` of tree nodes' verifiers, row by row: the rule of
    ``cpp/mentored/tree.hpp`` (``node_masses``) in the namespace ``xp``, vectorised over rows.

    ``P`` (R, n): class 0 the complement of the node's children, 1.. its children, padding with
    ``w = -inf`` (and P = 0); ``w`` the weights (``w[:, 0] = 0``); ``eps`` (R,). Solves
    :math:`\max \sum_j w_j m_j` s.t. :math:`\sum_j m_j = 1`,
    :math:`\sum_{P_j>0} P_j \tilde f(m_j/P_j) + \tilde f_\infty \sum_{P_j=0} m_j \le \varepsilon`
    (``keep``: no mass where :math:`P_j = 0`). Children of equal weights: the set verifier
    (:func:`onehot_bisection` at :math:`P(S)`); tv: its linear program; otherwise the stationarity
    :math:`\tilde f'(m_j/P_j) = \sigma - \theta(w_{top} - w_j)` with a bisection on the top class's
    mass inside one on :math:`\log_2\theta` (fixed counts: no host synchronisation on a device).
    ``weighted=False``: the caller knows every row's children have equal weights (the general
    solve is skipped)."""
    keep = zeros == "keep"
    real = w > -np.inf
    pos = P > 0
    kids = real[:, 1:]
    equal = ((w[:, 1:] == w[:, 1:2]) | ~kids).all(-1)
    # the set verifier
    PS = xp.clip(xp.where(kids, P[:, 1:], 0.0).sum(-1), None, 1.0)
    a = onehot_bisection(xp, PS, eps, div, zeros, forms.term)
    some = PS > 0
    share = xp.where(some[:, None], P[:, 1:] / xp.where(some, PS, 1.0)[:, None], 0.0)
    first = _first_of(xp, kids)
    m_set = xp.concatenate([(1.0 - a)[:, None], a[:, None] * xp.where(some[:, None], share, first * 1.0)], -1)
    m = xp.where(equal[:, None], m_set, P)
    if weighted:
        general = _tv_masses(xp, P, w, eps, keep, real, pos) if div.compiled == _core.Generator.tv else \
            _kkt_masses(xp, P, w, eps, keep, div, forms, real, pos)
        m = xp.where(equal[:, None], m, general)
    m = xp.where((eps > 0)[:, None], m, P)
    return _keep_complement(xp, P, m, kids, eps > 0) if np.isinf(div.f0) else m


def _keep_complement(xp, P, m, kids, solved):
    r"""The complement's mass as a reader of the children's masses sees it (1 − their sum), for
    :math:`\tilde f(0) = \infty`: the rule of ``cpp/mentored/tree.hpp`` (``keep_complement``),
    vectorised. Where :math:`P_0 > 0` and the children's sum could leave less than
    :math:`T = \max(m_0, 2^{-53})` (``solved``: ε > 0, two children or more) or nothing in some order of summation,
    mass moves to the complement: from the children above their target in proportion to their excess
    where that holds it and the complement stays within :math:`P_0` (D does not increase), else by
    scaling the children; :math:`m_0 = 1 - \sum_c m_c`."""
    u = 2.0**-53
    k = kids.sum(-1) * 1.0
    solved = solved & (k > 1)  # one child: 1 − m_1 is read with one rounding, of a complement ≥ 1/2 or none
    T = xp.where(solved, xp.clip(m[:, 0], u, None), u)
    mk, Pk = m[:, 1:], P[:, 1:]
    bound = 1.0 - T - xp.where(solved, 2.0 * (k - 1.0) * u * mk.sum(-1), 0.0)  # twice the sum's rounding, any order
    for _ in range(3):
        S = mk.sum(-1)
        low = (P[:, 0] > 0) & (S > 0) & (S > bound)
        delta = S - (bound - 2.0 * u)
        excess = xp.where(kids, xp.clip(mk - Pk, 0.0, None), 0.0)
        E = excess.sum(-1)
        take = (E >= delta) & (1.0 - S + delta <= P[:, 0])
        moved = xp.where(take[:, None], mk - (delta / xp.where(take, E, 1.0))[:, None] * excess,
                         mk * ((S - delta) / xp.where(S > 0, S, 1.0))[:, None])
        mk = xp.where(low[:, None], moved, mk)
    return xp.concatenate([(1.0 - mk.sum(-1))[:, None], mk], -1)


def _leading(xp, ok):
    """How many candidates of each row pass before the first that fails, as floats: the k-ary searches
    move their low end to the last of these, so it stays a point that passes (D ≤ ε, Σ m ≤ 1) even
    where rounding makes the test not monotone (a user generator's (f̃′)⁻¹ from sympy can lose its
    digits to cancellation far below f̃′(1)). Where the test is monotone: the count of passes."""
    fail = ~ok
    return xp.where(fail.any(-1), xp.argmax(fail * 1.0, -1), ok.shape[-1]) * 1.0  # argmax: the first failure


def _first_of(xp, mask):
    """The first True of each row (all False where none), column by column (a few columns)."""
    first, seen = xp.zeros_like(mask), xp.zeros_like(mask[:, 0])
    for j in range(mask.shape[-1]):
        first[:, j] = mask[:, j] & ~seen
        seen = seen | mask[:, j]
    return first


def _tv_masses(xp, P, w, eps, keep, real, pos):
    """tv's linear program, vectorised: min(ε, the mass off the top weight) moves from the lowest
    weights (in proportion to P within a weight) to the top weight (in proportion to P there, all to
    its first class where P = 0 on it)."""
    eligible = real & (pos | (not keep))
    w_max = xp.amax(xp.where(eligible, w, -np.inf), -1)
    top = eligible & (w == w_max[:, None])
    PT = xp.where(top, P, 0.0).sum(-1)
    donor = pos & ~top
    delta = xp.minimum(eps, xp.where(donor, P, 0.0).sum(-1))
    wd = xp.where(donor, w, np.inf)
    Pd = xp.where(donor, P, 0.0)
    below = (Pd[:, None, :] * (wd[:, None, :] < wd[:, :, None])).sum(-1)  # mass of lower weights, per class
    at = (Pd[:, None, :] * (wd[:, None, :] == wd[:, :, None])).sum(-1)
    take = xp.minimum(xp.clip(delta[:, None] - below, 0.0, None), at)
    drained = xp.where(take < at, P - take * (P / xp.where(at > 0, at, 1.0)), 0.0)
    some = PT > 0
    gain = xp.where(some[:, None], P + delta[:, None] * (P / xp.where(some, PT, 1.0)[:, None]),
                    xp.where(_first_of(xp, top), delta[:, None], 0.0))
    return xp.where(top, gain, xp.where(donor, drained, P))


def _kkt_masses(xp, P, w, eps, keep, div, forms, real, pos):
    """The weighted verifier of a strictly convex divergence (cpp/mentored/tree.hpp, kkt_masses): the
    same stationarity, its two roots found by k-ary searches of fixed length instead of the core's
    regula falsi, so that a device runs a few hundred steps, none of which reads a value back. Where
    f̃′ jumps (a user generator's kinks), a third search finds the top class's level inside the jump."""
    df, dfinv, term = forms.df, forms.dfinv, forms.term
    f_inf = div.f_inf - div.tilt
    # f̃′ jumps somewhere (a user generator with kinks, or one not split into smooth pieces)
    kinked = div.builtin is None and (div.symbolic is None or div.symbolic.kinks is None or len(div.symbolic.kinks) > 0)
    w_top = xp.amax(xp.where(pos, w, -np.inf), -1)
    d = xp.where(pos, w_top[:, None] - w, -1.0)
    top = pos & (d == 0)
    others = d > 0
    gap = xp.where(others, d, 0.0)
    PT = xp.where(top, P, 0.0).sum(-1)
    PT1 = xp.where(PT > 0, PT, 1.0)
    Ppos = xp.where(pos, P, 1.0)
    has_z = None
    if not keep and np.isfinite(f_inf):
        zc = real & ~pos & (w > w_top[:, None])
        wz = xp.amax(xp.where(zc, w, -np.inf), -1)
        z = _first_of(xp, zc & (w == wz[:, None]))
        has_z = zc.any(-1)
        z_gap = xp.where(has_z, wz - w_top, 0.0)
    bits = 2 if xp is np else 4
    kary = 2**bits
    frac = xp.arange(1, kary, dtype=P.dtype, device=P.device) / kary

    def rows(x, extra):  # a per-row array, broadcast against extra leading axes of θ
        return x.reshape(x.shape[:1] + (1,) * extra + x.shape[1:])

    def masses(theta):
        """(masses [..., n], D [...]) at θ of shape (R,) + extra axes."""
        e = theta.ndim - 1
        PT_, PT1_ = rows(PT, e), rows(PT1, e)
        Pc, gapc, othc = rows(P, e + 1), rows(gap, e + 1), rows(others, e + 1)  # against the candidates' axis too
        lo, hi = PT_ + 0.0 * theta, 1.0 + 0.0 * theta
        for _ in range(_LEVEL_BITS // bits):  # Σ m = 1 in the top class's mass
            x = lo[..., None] + (hi - lo)[..., None] * frac
            s = df(x / PT1_[..., None])
            lv = dfinv(s[..., None] - theta[..., None, None] * gapc)
            total = x + xp.where(othc, Pc * lv, 0.0).sum(-1)
            k = _leading(xp, total <= 1.0)
            lo, hi = lo + (hi - lo) * (k / kary), xp.minimum(lo + (hi - lo) * ((k + 1) / kary), hi)
        mT = lo
        if kinked:
            # The top class's ratio may come to rest at a kink b of f̃, where its level s takes any value
            # in [f̃′(b⁻), f̃′(b⁺)] and the total jumps across 1 in mT: s from its own search, mT held.
            a = df(xp.nextafter(lo / PT1_, xp.zeros_like(lo)))
            b = xp.maximum(df(xp.nextafter(hi / PT1_, xp.full_like(hi, np.inf))), a)
            for _ in range(_LEVEL_BITS // bits):
                s = a[..., None] + (b - a)[..., None] * frac
                lv = dfinv(s[..., None] - theta[..., None, None] * gapc)
                total = mT[..., None] + xp.where(othc, Pc * lv, 0.0).sum(-1)
                k = (total <= 1.0).sum(-1) * 1.0
                a, b = a + (b - a) * (k / kary), xp.minimum(a + (b - a) * ((k + 1) / kary), b)
            level = a
        if has_z is not None:
            held = mT
            mT = xp.where(rows(has_z, e), xp.minimum(mT, PT_ * dfinv(f_inf - theta * rows(z_gap, e))), mT)
        s = df(mT / PT1_)
        if kinked:
            s = level if has_z is None else xp.where(mT == held, level, s)
        P_ = rows(P, e)
        mm = xp.where(rows(top, e), P_ * (mT / PT1_)[..., None],
                      xp.where(rows(others, e), P_ * dfinv(s[..., None] - theta[..., None] * rows(gap, e)), 0.0))
        D = xp.where(rows(pos, e), term(mm, rows(Ppos, e)), 0.0).sum(-1)
        if has_z is not None:
            mz = xp.where(rows(has_z, e), xp.clip(1.0 - mm.sum(-1), 0.0, None), 0.0)
            mm = xp.where(rows(z, e), mz[..., None], mm)
            D = D + f_inf * mz
        return mm, D

    m_all, D_all = masses(xp.full_like(PT, np.inf))
    lo, hi = xp.full_like(PT, -_LOG2_THETA), xp.full_like(PT, _LOG2_THETA)
    for _ in range(_THETA_BITS // bits):  # D = ε in log₂ θ
        u = lo[:, None] + (hi - lo)[:, None] * frac
        k = _leading(xp, masses(2.0 ** u)[1] <= eps[:, None])
        lo, hi = lo + (hi - lo) * (k / kary), xp.minimum(lo + (hi - lo) * ((k + 1) / kary), hi)
    m = xp.where((D_all <= eps)[:, None], m_all, masses(2.0 ** lo)[0])
    m = m / m.sum(-1)[:, None]
    trivial = ~others.any(-1) if has_z is None else ~others.any(-1) & ~has_z
    return xp.where(trivial[:, None], P, m)


def tree_masses(xp, plan, P_child, P_rest, eps_node, greedy_match, solve, to):
    r"""Every node's :math:`\pi_{parent}(x_j)` and :math:`A(j)`, bottom-up by height (the rule of
    ``cpp/mentored/tree.hpp``; docs/serving.md, "Draft trees"), vectorised over the nodes of a height.

    ``plan``: the host layout (``height_kids(h)``: the global indices of the nodes of height h and
    their children padded with −1; ``length``: the objective; ``greedy_node``; ``groups_of``: the
    nodes' divergences). ``P_child`` (N,): each node's token's mass under its parent's target (p/Σp);
    ``P_rest`` (N,): at each node with children, the mass of its target off its children's tokens
    (p/Σp summed there: 1 − Σ P_child would round a small one to 0); ``eps_node`` (N,): each node's
    budget; ``greedy_match`` (N,): whether a node's token is its parent's argmax (greedy requests'
    nodes; None without greedy requests). ``solve(div, P, w, eps, weighted)`` returns the class
    masses of the rows (:func:`node_masses`); ``to`` puts a host array where the computation runs.
    Returns (accept, value)."""
    accept = xp.zeros_like(P_child)
    value = xp.zeros_like(P_child)
    for h in range(1, plan.num_heights + 1):
        nodes, kids = plan.height_kids(h)
        valid = kids >= 0
        k = np.where(valid, kids, 0)
        Pk = xp.where(to(valid), P_child[to(k)], 0.0)
        wk = xp.where(to(valid), 1.0 + value[to(k)], -np.inf) if plan.length else xp.where(to(valid), 1.0, -np.inf)
        P = xp.concatenate([P_rest[to(nodes)][:, None], Pk], -1)
        w = xp.concatenate([xp.zeros_like(Pk[:, :1]), wk], -1)
        m = xp.zeros_like(P)
        for div, rows in plan.groups_of(nodes):
            r = to(rows)
            m[r] = solve(div, P[r], w[r], eps_node[to(nodes[rows])], plan.length and h > 1 and kids.shape[1] > 1)
        if greedy_match is not None:
            g = to(plan.greedy_node[nodes])
            hit = to(valid) & greedy_match[to(k)]
            m[:, 1:] = xp.where(g[:, None], hit * 1.0, m[:, 1:])
        mk = m[:, 1:]
        accept[to(k[valid])] = mk[to(valid)]
        value[to(nodes)] = xp.where(to(valid), mk * (1.0 + value[to(k)]), 0.0).sum(-1)
    return accept, value
