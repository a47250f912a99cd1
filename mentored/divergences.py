r"""f-divergences: the generator ``f`` and what the solver needs to know about it.

.. math::

    D_f(\pi \| p) = \sum_{p_i > 0} p_i f(\pi_i / p_i) + f_\infty \sum_{p_i = 0} \pi_i,
    \qquad f \text{ convex on } (0, \infty),\ f(1) = 0,

with :math:`f(0) = \lim_{t \to 0^+} f(t)` and :math:`f_\infty = \lim_{t\to\infty} f(t)/t`
(either may be :math:`+\infty`). The seven built-ins of docs/theory.md §1 are computed by the C++ core;
their formulas here are the numpy forms the reference and the tests use, written to avoid
cancellation. Each built-in also carries its sympy definition, analysed (lazily) exactly like a
user generator passed to :meth:`Divergence.from_sympy` (see :mod:`mentored.symbolic`); the tests
check that the two forms agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from .symbolic import SymbolicInfo

__all__ = ["Divergence", "divergence", "BUILTIN_NAMES", "NumericCheckWarning"]


class NumericCheckWarning(UserWarning):
    """A property of a user generator was checked numerically, on a grid, not proved symbolically."""

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

    Derived quantities (from the sympy generator; built-ins analyse theirs on first use):
    ``expr``, ``symbol``, ``fsecond``, ``f2_at_1``, ``tilt``, ``convexity_check``, ``conjugate``
    (a vectorised callable :math:`y \mapsto f^*(y)`), ``conjugate_expr`` (the sympy ``Piecewise`` or
    None), ``conjugate_domain``, ``conjugate_method``, ``fprime_inv``, ``fprime_inv_expr``, ``swapped``.
    A Divergence built by hand from callables alone has none of these (``symbolic`` is None); it
    still works with :func:`~mentored.solve` and :class:`~mentored.MentoredPath`, but not with
    ``certify`` or the oracle.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    fprime: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    f_inf: float
    f0: float
    _code: int | None = field(default=None, repr=False)
    _info: Any = field(default=None, repr=False)  # SymbolicInfo of a user generator
    _builtin: Any = field(default=None, repr=False)  # (sympy source, tilt, f̃*) of a built-in

    @classmethod
    def from_sympy(cls, f_expr, t, name=None, *, timeout=5.0) -> "Divergence":
        """A divergence from a sympy generator; see :func:`mentored.symbolic.from_sympy`.

        ``timeout``: seconds within which it returns or refuses (``None``: no limit)."""
        from .symbolic import from_sympy

        return from_sympy(f_expr, t, name, timeout=timeout)

    @cached_property
    def symbolic(self) -> "SymbolicInfo | None":
        """The analysis of the sympy generator (:class:`mentored.symbolic.SymbolicInfo`), or None."""
        if self._info is not None:
            return self._info
        if self._builtin is None:
            return None
        from .symbolic import analyse

        f, t, conj = self._builtin[0]()
        return analyse(f, t, conjugate_expr=conj)

    def _need(self) -> "SymbolicInfo":
        if self.symbolic is None:
            raise ValueError(f"divergence {self.name!r} has no sympy generator; build it with Divergence.from_sympy")
        return self.symbolic

    @property
    def expr(self):
        """:math:`f` as a sympy expression in :attr:`symbol`."""
        return self._need().expr

    @property
    def symbol(self):
        return self._need().t

    @property
    def fsecond(self) -> Callable[[np.ndarray], np.ndarray]:
        r""":math:`f''` on :math:`(0, \infty)`, vectorised."""
        return self._need().fsecond

    @property
    def f2_at_1(self) -> float:
        """:math:`f''(1)` (NaN where f has a kink at 1)."""
        return self._need().f2_at_1

    @property
    def convexity_check(self) -> str:
        """``"symbolic"`` (proved by sympy) or ``"numeric"`` (checked on a grid)."""
        return self._need().convexity_check

    @property
    def tilt(self) -> float:
        r"""The subgradient :math:`c \in \partial f(1)` of the tilted generator :math:`f(t) - c(t-1)`."""
        if self._builtin is not None:
            return self._builtin[1]
        if self._info is not None:
            return self._info.tilt
        return float(self.fprime(np.array(1.0)))

    def f_tilde(self, t) -> np.ndarray:
        r""":math:`\tilde f(t) = f(t) - c(t - 1) \ge 0`, accurate near 1 (same :math:`D_f` on the simplex)."""
        if self._code is not None:
            from . import _core

            return _core.generator_f_array(self._code, np.ascontiguousarray(t, dtype=np.float64))
        if self._info is not None:
            return self._info.f_tilde(t)
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(all="ignore"):
            return np.maximum(self.f(t) - self.tilt * (t - 1.0), 0.0)

    def conjugate_tilde(self, y) -> np.ndarray:
        r""":math:`\tilde f^*(y) = f^*(y + c) - c`, the conjugate of the tilted generator."""
        if self._builtin is not None:
            return self._builtin[2](np.asarray(y, dtype=np.float64))
        return self._need().conjugate_tilde(y)

    def conjugate(self, y) -> np.ndarray:
        r""":math:`f^*(y) = \sup_{t \ge 0}(yt - f(t))`, vectorised (``inf`` outside the domain)."""
        y = np.asarray(y, dtype=np.float64)
        c = self.tilt
        with np.errstate(all="ignore"):
            return self.conjugate_tilde(y - c) + c

    @property
    def conjugate_expr(self):
        """:math:`f^*` as a sympy ``Piecewise`` in ``y``, or None where it was not found symbolically."""
        return self._need().conjugate_expr

    @property
    def conjugate_method(self) -> str:
        return self._need().conjugate_method

    @property
    def conjugate_domain(self) -> tuple:
        r"""``(lo, hi, hi_included)`` of :math:`\operatorname{dom} f^*` (``lo = -inf``, ``hi = f_inf``)."""
        return self._need().conjugate_domain

    @property
    def fprime_inv(self) -> Callable[[np.ndarray], np.ndarray]:
        r""":math:`(f')^{-1}(y)`: the maximiser of :math:`yt - f(t)` (0 below :math:`f'(0^+)`, inf from :math:`f_\infty`)."""
        return self._need().fprime_inv

    @property
    def fprime_inv_expr(self):
        return self._need().fprime_inv_expr

    @cached_property
    def swapped(self) -> "Divergence":
        r"""The generator :math:`t f(1/t)`: :math:`D_{f^\diamond}(\pi\|p) = D_f(p\|\pi)`."""
        import sympy as sp

        from .symbolic import from_sympy

        info = self._need()
        t = info.t
        return from_sympy(sp.simplify(t * info.expr.subs(t, 1 / t)), t, name=f"swapped({self.name})")

    def __call__(self, pi, target) -> np.ndarray:
        r""":math:`D_f(\pi\|p)` over the last axis, straight from the definition (float64)."""
        pi = np.asarray(pi, dtype=np.float64)
        p = np.asarray(target, dtype=np.float64)
        pos = p > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.where(pos, pi / np.where(pos, p, 1.0), 1.0)
            term = p * self.f(ratio)
            if np.isfinite(self.f_inf):
                # π/p beyond DBL_MAX (a denormal p_i): the term is f∞·π up to O(p_i), the limit the
                # definition takes at p_i = 0, instead of 0·∞ or ∞.
                term = np.where(np.isinf(ratio) & (pi > 0), self.f_inf * pi, term)
            elif self.name in _HUGE_TERMS and _BUILTINS.get(self.name) is self:
                # f∞ = ∞ and π/p beyond DBL_MAX: p f(π/p) is still finite; take it without forming π/p.
                huge = np.isinf(ratio) & (pi > 0)
                if huge.any():
                    term = np.where(huge, _HUGE_TERMS[self.name](pi, np.where(pos, p, 1.0)), term)
            inner = np.where(pos, term, 0.0)
        outside = np.where(pos, 0.0, pi).sum(axis=-1)
        extra = np.multiply(self.f_inf, outside, out=np.zeros_like(outside), where=outside > 0)  # 0·∞ = 0
        return inner.sum(axis=-1) + extra


# p f(π/p) for the built-ins with f∞ = ∞, from π and p (no ratio), where π/p overflows.
_HUGE_TERMS = {
    "kl": lambda x, y: x * (np.log(x) - np.log(y)),
    "chi2": lambda x, y: ((x - y) * (x - y)) / y,
}


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


def _analysis_args(name):
    """The sympy definition of a built-in (docs/theory.md §1) as a thunk: (f, t, conjugate or None).

    tv's conjugate is given, as sympy cannot invert sign(t − 1); that form is checked in
    proofs/divergences_check.py and against the numeric sup in tests/test_symbolic.py."""

    def source():
        import sympy as sp

        from .symbolic import Y

        t = sp.Symbol("t", positive=True)
        half = sp.Rational(1, 2)
        exprs = {
            "tv": half * sp.Abs(t - 1),
            "kl": t * sp.log(t),
            "reverse_kl": -sp.log(t),
            "chi2": (t - 1) ** 2,
            "neyman_chi2": (t - 1) ** 2 / t,
            "hellinger": (sp.sqrt(t) - 1) ** 2,
            "js": half * (t * sp.log(2 * t / (1 + t)) + sp.log(2 / (1 + t))),
        }
        conj = sp.Piecewise((-half, Y <= -half), (Y, Y <= half), (sp.oo, True)) if name == "tv" else None
        return exprs[name], t, conj

    return source


# Conjugates of the tilted generators f̃ = f − c(t − 1), f̃*(y) = f*(y + c) − c, cancellation-free
# near y = 0 (proofs/README.md, per-divergence table).
def _conj_tv(y):
    return np.where(y > 0.5, np.inf, np.maximum(y, -0.5))


def _conj_kl(y):  # c = 1: e^{y} − 1
    with np.errstate(over="ignore"):
        return np.expm1(y)


def _conj_reverse_kl(y):  # c = −1: −log(1 − y), y < 1
    with np.errstate(all="ignore"):
        return np.where(y < 1.0, -np.log1p(-np.minimum(y, 1.0)), np.inf)


def _conj_chi2(y):
    return np.where(y >= -2.0, y + 0.25 * y * y, -1.0)


def _conj_neyman(y):  # 2 − 2√(1 − y) = 2y/(1 + √(1 − y)), y ≤ 1
    with np.errstate(all="ignore"):
        return np.where(y <= 1.0, 2.0 * y / (1.0 + np.sqrt(np.maximum(1.0 - y, 0.0))), np.inf)


def _conj_hellinger(y):  # y/(1 − y), y < 1
    with np.errstate(all="ignore"):
        return np.where(y < 1.0, y / np.where(y < 1.0, 1.0 - y, 1.0), np.inf)


def _conj_js(y):  # −½ log(2 − e^{2y}) = −½ log1p(−expm1(2y)), y < ½ log 2
    with np.errstate(all="ignore"):
        inside = y < 0.5 * _LN2
        return np.where(inside, -0.5 * np.log1p(-np.expm1(2.0 * np.where(inside, y, 0.0))), np.inf)


_TILTS = {"tv": 0.0, "kl": 1.0, "reverse_kl": -1.0, "chi2": 0.0, "neyman_chi2": 0.0, "hellinger": 0.0, "js": 0.0}
_CONJ = {
    "tv": _conj_tv, "kl": _conj_kl, "reverse_kl": _conj_reverse_kl, "chi2": _conj_chi2,
    "neyman_chi2": _conj_neyman, "hellinger": _conj_hellinger, "js": _conj_js,
}


def _builtins() -> dict[str, Divergence]:
    inf = np.inf
    table = [
        ("tv", lambda t: 0.5 * np.abs(np.asarray(t, float) - 1.0), _at_inf(lambda t: 0.5 * np.sign(t - 1.0), 0.5), 0.5, 0.5),
        ("kl", _xlogx, _inv_or_inf(lambda t: np.log(t) + 1.0), inf, 0.0),
        ("reverse_kl", _inv_or_inf(lambda t: -np.log(t)), _at_inf(_inv_or_inf(lambda t: -1.0 / t), 0.0), 0.0, inf),
        ("chi2", lambda t: (np.asarray(t, float) - 1.0) ** 2, lambda t: 2.0 * (np.asarray(t, float) - 1.0), inf, 1.0),
        ("neyman_chi2", _at_inf(_inv_or_inf(lambda t: (t - 1.0) * ((t - 1.0) / t)), inf), _at_inf(_inv_or_inf(lambda t: 1.0 - 1.0 / t**2), 1.0), 1.0, inf),
        ("hellinger", lambda t: (np.sqrt(np.asarray(t, float)) - 1.0) ** 2, _at_inf(_inv_or_inf(lambda t: 1.0 - 1.0 / np.sqrt(t)), 1.0), 1.0, 1.0),
        ("js", _f_js, _at_inf(_inv_or_inf(lambda t: 0.5 * (_LN2 + np.log(t) - np.log1p(t))), 0.5 * _LN2), 0.5 * _LN2, 0.5 * _LN2),
    ]
    return {
        name: Divergence(
            name=name, f=f, fprime=fp, f_inf=float(fi), f0=float(f0), _code=_CODES[name],
            _builtin=(_analysis_args(name), _TILTS[name], _CONJ[name]),
        )
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
