r"""f-divergences: the generator ``f`` and what the solver needs to know about it.

.. math::

    D_f(\pi \| p) = \sum_{p_i > 0} p_i f(\pi_i / p_i) + f_\infty \sum_{p_i = 0} \pi_i,
    \qquad f \text{ convex on } (0, \infty),\ f(1) = 0,

with :math:`f(0) = \lim_{t \to 0^+} f(t)` and :math:`f_\infty = \lim_{t\to\infty} f(t)/t`
(either may be :math:`+\infty`). The seven built-ins of MATH.md §1 are computed by the C++ core;
their formulas here are the numpy forms the reference and the tests use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Divergence", "divergence", "BUILTIN_NAMES"]

_LN2 = float(np.log(2.0))

# Codes of the C++ generators (cpp/mentored/generators.hpp); keep them equal.
_CODES = {"tv": 0, "kl": 1, "reverse_kl": 2, "chi2": 3, "neyman_chi2": 4, "hellinger": 5, "js": 6}
BUILTIN_NAMES = tuple(_CODES)


@dataclass(frozen=True, eq=False)
class Divergence:
    r"""A generator :math:`f` with its limits and derivative, evaluated elementwise on arrays.

    Attributes
    ----------
    name : str
    f, fprime : callable
        :math:`f(t)` on :math:`[0, \infty]` (``f(0)`` and ``f(inf)`` are the limits) and
        :math:`f'(t)` on :math:`(0, \infty)`, with ``fprime(inf) = f_inf``. Where ``f`` has a kink
        (``tv`` at 1) ``fprime`` returns a subgradient.
    f_inf, f0 : float
        :math:`f_\infty` and :math:`f(0^+)`, possibly ``inf``.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    fprime: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    f_inf: float
    f0: float
    _code: int | None = field(default=None, repr=False)

    def __call__(self, pi, target) -> np.ndarray:
        r""":math:`D_f(\pi\|p)` over the last axis, straight from the definition (float64)."""
        pi = np.asarray(pi, dtype=np.float64)
        p = np.asarray(target, dtype=np.float64)
        pos = p > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.where(pos, pi / np.where(pos, p, 1.0), 1.0)
            inner = np.where(pos, p * self.f(ratio), 0.0)
        outside = np.where(pos, 0.0, pi).sum(axis=-1)
        extra = np.multiply(self.f_inf, outside, out=np.zeros_like(outside), where=outside > 0)  # 0·∞ = 0
        return inner.sum(axis=-1) + extra


def _xlogx(t):
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0)


def _f_js(t):
    # Near t = 1 the two logarithms cancel; there f = g(u)/(2(1−u)) with u = (t−1)/(t+1) and
    # g(u) = (1+u)log(1+u) + (1−u)log(1−u) = Σ_k u^{2k}/(k(2k−1)) (as in generators.hpp).
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        safe = np.where((t > 0) & np.isfinite(t), t, 1.0)
        main = 0.5 * (safe * (_LN2 + np.log(safe) - np.log1p(safe)) + _LN2 - np.log1p(safe))
        u = (safe - 1.0) / (safe + 1.0)
        series = sum(u ** (2 * k) / (k * (2 * k - 1)) for k in range(1, 10)) / (2.0 * (1.0 - u))
        main = np.where(np.abs(u) < 0.1, series, main)
        return np.where(t > 0, np.where(np.isinf(t), np.inf, main), 0.5 * _LN2)


def _inv_or_inf(g):
    """Wrap g so that g(0) = +inf (generators with f(0) = ∞ such as -log t)."""

    def wrapped(t):
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(t > 0, g(np.where(t > 0, t, 1.0)), np.inf)

    return wrapped


def _at_inf(g, value):
    """Wrap g so that g(inf) = value (used for f'(∞) = f∞)."""

    def wrapped(t):
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(np.isinf(t), value, g(np.where(np.isinf(t), 1.0, t)))

    return wrapped


def _builtins() -> dict[str, Divergence]:
    inf = np.inf
    table = [
        ("tv", lambda t: 0.5 * np.abs(np.asarray(t, float) - 1.0), _at_inf(lambda t: 0.5 * np.sign(t - 1.0), 0.5), 0.5, 0.5),
        ("kl", _xlogx, _inv_or_inf(lambda t: np.log(t) + 1.0), inf, 0.0),
        ("reverse_kl", _inv_or_inf(lambda t: -np.log(t)), _at_inf(_inv_or_inf(lambda t: -1.0 / t), 0.0), 0.0, inf),
        ("chi2", lambda t: (np.asarray(t, float) - 1.0) ** 2, lambda t: 2.0 * (np.asarray(t, float) - 1.0), inf, 1.0),
        ("neyman_chi2", _at_inf(_inv_or_inf(lambda t: (t - 1.0) ** 2 / t), inf), _at_inf(_inv_or_inf(lambda t: 1.0 - 1.0 / t**2), 1.0), 1.0, inf),
        ("hellinger", lambda t: (np.sqrt(np.asarray(t, float)) - 1.0) ** 2, _at_inf(_inv_or_inf(lambda t: 1.0 - 1.0 / np.sqrt(t)), 1.0), 1.0, 1.0),
        ("js", _f_js, _at_inf(_inv_or_inf(lambda t: 0.5 * (_LN2 + np.log(t) - np.log1p(t))), 0.5 * _LN2), 0.5 * _LN2, 0.5 * _LN2),
    ]
    return {
        name: Divergence(name=name, f=f, fprime=fp, f_inf=float(fi), f0=float(f0), _code=_CODES[name])
        for name, f, fp, fi, f0 in table
    }


_BUILTINS = _builtins()


def divergence(name: str | Divergence) -> Divergence:
    """The built-in divergence called ``name`` (one of ``BUILTIN_NAMES``); a Divergence passes through.

    >>> divergence("kl").f_inf
    inf
    """
    if isinstance(name, Divergence):
        return name
    if not isinstance(name, str):
        raise TypeError(f"divergence must be a name or a Divergence, got {type(name).__name__}")
    try:
        return _BUILTINS[name]
    except KeyError:
        raise ValueError(f"unknown divergence {name!r}; the built-ins are {', '.join(BUILTIN_NAMES)}") from None
