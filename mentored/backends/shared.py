"""What the host and the torch backend compute the same way: the token-only bisection, in the array
namespace each passes (numpy or torch), and the check of given uniforms."""

from __future__ import annotations

import numpy as np

from .. import _core
from ..divergences import Divergence

__all__ = ["onehot_bisection", "given_uniforms"]

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


def given_uniforms(uniforms, T: int) -> np.ndarray:
    u = np.ascontiguousarray(uniforms, dtype=np.float64)
    if u.shape != (T, 2):
        raise ValueError(f"uniforms must have shape (num_tokens, 2) = ({T}, 2), got {u.shape}")
    if not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError("uniforms must lie in [0, 1)")
    return u
