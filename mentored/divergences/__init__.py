r"""f-divergences: one specification per built-in, and the :class:`Divergence` every backend takes.

.. math::

    D_f(\pi \| p) = \sum_{p_i > 0} p_i f(\pi_i / p_i) + f_\infty \sum_{p_i = 0} \pi_i,
    \qquad f \text{ convex on } (0, \infty),\ f(1) = 0,

with :math:`f(0) = \lim_{t \to 0^+} f(t)` and :math:`f_\infty = \lim_{t\to\infty} f(t)/t`
(either may be :math:`+\infty`); docs/theory.md §1.

Where a built-in is defined
---------------------------
Each built-in is one :class:`_Builtin` entry of ``_REGISTRY`` below, plus its C++ generator in
``cpp/mentored/generators.hpp``: one type (the core's f̃, f̃′, tilt and f∞, the perspective past
DBL_MAX and a vectorised f̃) and one entry of the list ``MENTORED_GENERATORS`` there, which generates
the enum the bindings export as ``_core.Generator`` (whose member the stub ``_core.pyi`` lists).
Everything else derives from these two:

- the sympy generator ``source`` gives the symbolic analysis (f′, f″, f(1) = 0, convexity, the
  conjugate; :mod:`mentored.divergences.symbolic`), the exact-arithmetic forms of the certificate, and the
  checks of ``tests/test_divergences.py``, which compare every field below and the core's constants
  with it;
- the accurate numerical forms (f̃, f̃′, the perspective y·f̃(x/y) and f̃*) are written once against an
  array namespace and serve numpy and torch alike;
- ``cvxpy`` is the convex program's cost (:mod:`mentored.check.oracle`).

The core works with the tilted generator :math:`\tilde f(t) = f(t) - c(t - 1) \ge 0`,
:math:`c = f'(1)` (a subgradient where f has a kink), which gives the same :math:`D_f` on the
simplex and sums without cancellation near :math:`\pi = p`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ._warnings import NumericCheckWarning

if TYPE_CHECKING:
    from .symbolic import SymbolicInfo

__all__ = ["Divergence", "divergence", "BUILTIN_NAMES", "NumericCheckWarning"]

_LN2 = math.log(2.0)


# ---------------------------------------------------------------- array namespaces


class _NumpyOps:
    """The array operations the numerical forms use, on numpy (warnings of limits silenced by callers)."""

    where = staticmethod(np.where)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    log1p = staticmethod(np.log1p)
    expm1 = staticmethod(np.expm1)
    sqrt = staticmethod(np.sqrt)
    abs = staticmethod(np.abs)
    sign = staticmethod(np.sign)
    isinf = staticmethod(np.isinf)
    ones_like = staticmethod(np.ones_like)

    @staticmethod
    def xlogy(x, y):
        """x·log y, 0 where x = 0 (torch.xlogy's convention)."""
        return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))

    @staticmethod
    def clamp(x, lo=None, hi=None):
        return np.clip(x, lo, hi)


_NP = _NumpyOps()


# ---------------------------------------------------------------- the built-ins


@dataclass(frozen=True)
class _Builtin:
    """One built-in divergence. ``ops`` is an array namespace (:class:`_NumpyOps`, or the torch backend's).

    source(t)            f(t) as a sympy expression, t positive: the definition.
    perspective(ops, x, y)  y·f̃(x/y) for y > 0, x ≥ 0 (the limit at x = 0): the term of D that the
                         solvers sum, accurate to a few ulps of |x − y| near x = y and without
                         forming x/y, which overflows for a denormal y. f̃(t) is perspective(t, 1).
    fprime_tilde(ops, t) f̃′(t) on [0, ∞) (f̃′(0⁺) the limit; a subgradient at a kink).
    fprime_inv_tilde(ops, y)  (f̃′)⁻¹(y): 0 from f̃′(0⁺) down, inf from f̃∞ up (tv: one point of each
                         flat piece's level set); the levels of a draft tree's weighted verifier.
    conjugate_tilde(ops, y)  f̃*(y) = f*(y + c) − c, ``inf`` outside its domain.
    cvxpy(cp, u, p, outside)  Σ p f(u) + f∞·outside as a DCP expression, equal to it wherever
                         Σ p u + outside = 1 (the oracle's constraint).
    conjugate            f* as a sympy expression in :data:`mentored.divergences.symbolic.Y` where sympy cannot
                         derive it itself (tv's sign), else None.
    """

    name: str
    source: Callable
    perspective: Callable
    fprime_tilde: Callable
    fprime_inv_tilde: Callable
    conjugate_tilde: Callable
    cvxpy: Callable
    conjugate: Callable | None = None

    def f_tilde(self, ops, t):
        """f̃(t) on [0, ∞)."""
        return self.perspective(ops, t, ops.ones_like(t))


def _positive(ops, t):
    """t where t > 0, else 1: a safe argument for forms whose limit at 0 is taken separately."""
    return ops.where(t > 0, t, 1.0)


def _log_ratio(ops, x, y):
    """log(x/y) for y > 0: log1p((x − y)/y) where |x − y| ≤ y/2 (x − y is then exact, and the logarithm
    small), log x − log y beyond (where x/y could overflow; −inf at x = 0)."""
    d = x - y
    near = ops.abs(d) <= 0.5 * y
    return ops.where(near, ops.log1p(ops.where(near, d, 0.0) / y), ops.log(x) - ops.log(y))


def _js_g(ops, u):
    """g(u) = (1+u)log(1+u) + (1−u)log(1−u) on [−1, 1], from its series Σ_k u^{2k}/(k(2k−1)) where |u| < 0.05
    (the two logarithms cancel there; seven terms reach 2⁻⁵⁶ relative)."""
    u2 = u * u
    series = 1.0 / (7 * 13)
    for k in range(6, 0, -1):
        series = series * u2 + 1.0 / (k * (2 * k - 1))
    return ops.where(ops.abs(u) < 0.05, series * u2, ops.xlogy(1.0 + u, 1.0 + u) + ops.xlogy(1.0 - u, 1.0 - u))


def _js_perspective(ops, x, y):
    # ½[x log(2x/(x+y)) + y log(2y/(x+y))] = (x + y)·g(u)/4 with u = (x − y)/(x + y) ∈ [−1, 1]: no ratio
    # x/y to overflow, and accurate near x = y through the series of g.
    m = x + y
    return 0.25 * m * _js_g(ops, (x - y) / m)


def _chi2_perspective(ops, x, y):
    # (x − y)²/y: (x − y)·((x − y)/y) unless the quotient alone overflows (x − y < 1, y denormal)
    d = x - y
    a = d * (d / y)
    return ops.where(ops.isinf(a), (d * d) / y, a)


def _below_one(ops, y):
    """y where y < 1, else 0: a safe argument for forms that are inf from 1 up."""
    return ops.where(y < 1.0, y, 0.0)


def _js_fprime_inv(ops, y):
    # 2t/(1 + t) = e^{2y}: t = e^{2y}/(1 − e), e = expm1(2y) < 1 (1 + e would lose a tiny e^{2y}, and
    # 2 − e^{2y} a bit near the top), inf from y = ½ log 2 up
    e = ops.expm1(2.0 * y)
    return ops.where(e < 1.0, ops.exp(2.0 * y) / (1.0 - ops.where(e < 1.0, e, 0.0)), _INF)


def _cvx_tv(cp, u, p, outside):
    return 0.5 * cp.sum(cp.multiply(p, cp.abs(u - 1))) + 0.5 * outside


def _cvx_js(cp, u, p, outside):
    m = 0.5 * (1.0 + u)
    return 0.5 * cp.sum(cp.multiply(p, cp.rel_entr(u, m) + cp.rel_entr(np.ones(p.size), m))) + 0.5 * _LN2 * outside


def _tv_conjugate():
    import sympy as sp

    from .symbolic import Y

    half = sp.Rational(1, 2)
    return sp.Piecewise((-half, Y <= -half), (Y, Y <= half), (sp.oo, True))


def _sym(text):
    """f(t) from its sympy text, sympy imported only when the analysis is asked for."""

    def source(t):
        import sympy as sp

        return sp.sympify(text, locals={"t": t})

    return source


_INF = math.inf
_REGISTRY = (
    _Builtin(
        "tv", _sym("Abs(t - 1)/2"),
        fprime_tilde=lambda o, t: 0.5 * o.sign(t - 1.0),
        fprime_inv_tilde=lambda o, y: o.where(y < -0.5, 0.0, o.where(y > 0.5, _INF, o.ones_like(y))),
        perspective=lambda o, x, y: 0.5 * o.abs(x - y),
        conjugate_tilde=lambda o, y: o.where(y > 0.5, _INF, o.clamp(y, lo=-0.5)),
        cvxpy=_cvx_tv,
        conjugate=_tv_conjugate,
    ),
    _Builtin(
        "kl", _sym("t*log(t)"),
        fprime_tilde=lambda o, t: o.log(t),
        fprime_inv_tilde=lambda o, y: o.exp(y),
        perspective=lambda o, x, y: o.where(x > 0, x * _log_ratio(o, x, y), 0.0) - (x - y),
        conjugate_tilde=lambda o, y: o.expm1(y),
        cvxpy=lambda cp, u, p, outside: cp.sum(cp.multiply(p, cp.rel_entr(u, np.ones(p.size)))),
    ),
    _Builtin(
        "reverse_kl", _sym("-log(t)"),
        fprime_tilde=lambda o, t: (t - 1.0) / t,
        fprime_inv_tilde=lambda o, y: o.where(y < 1.0, 1.0 / (1.0 - _below_one(o, y)), _INF),
        perspective=lambda o, x, y: (x - y) - y * _log_ratio(o, x, y),
        conjugate_tilde=lambda o, y: o.where(y < 1.0, -o.log1p(-o.clamp(y, hi=1.0)), _INF),
        cvxpy=lambda cp, u, p, outside: cp.sum(cp.multiply(p, -cp.log(u))),  # f∞ = 0
    ),
    _Builtin(
        "chi2", _sym("(t - 1)**2"),
        fprime_tilde=lambda o, t: 2.0 * (t - 1.0),
        fprime_inv_tilde=lambda o, y: o.where(y > -2.0, 1.0 + 0.5 * y, 0.0),
        perspective=_chi2_perspective,
        conjugate_tilde=lambda o, y: o.where(y >= -2.0, y + 0.25 * y * y, -1.0),
        cvxpy=lambda cp, u, p, outside: cp.sum(cp.multiply(p, cp.square(u - 1))),
    ),
    _Builtin(
        "neyman_chi2", _sym("(t - 1)**2/t"),
        fprime_tilde=lambda o, t: ((t - 1.0) / t) * ((t + 1.0) / t),  # 1 − 1/t², accurate near 1
        fprime_inv_tilde=lambda o, y: o.where(y < 1.0, 1.0 / o.sqrt(1.0 - _below_one(o, y)), _INF),
        perspective=lambda o, x, y: o.where(x > 0, (x - y) * ((x - y) / _positive(o, x)), _INF),
        # 2 − 2√(1 − y) = 2y/(1 + √(1 − y)), y ≤ 1
        conjugate_tilde=lambda o, y: o.where(y <= 1.0, 2.0 * y / (1.0 + o.sqrt(o.clamp(1.0 - y, lo=0.0))), _INF),
        # Σ p (u − 2 + 1/u) + Σ z = Σ p/u − 1 on the simplex
        cvxpy=lambda cp, u, p, outside: cp.sum(cp.multiply(p, cp.inv_pos(u))) - 1.0,
    ),
    _Builtin(
        "hellinger", _sym("(sqrt(t) - 1)**2"),
        fprime_tilde=lambda o, t: (t - 1.0) / (t + o.sqrt(t)),  # 1 − 1/√t, accurate near 1
        fprime_inv_tilde=lambda o, y: o.where(y < 1.0, (1.0 / (1.0 - _below_one(o, y))) ** 2, _INF),
        perspective=lambda o, x, y: (o.sqrt(x) - o.sqrt(y)) ** 2,
        conjugate_tilde=lambda o, y: o.where(y < 1.0, y / o.where(y < 1.0, 1.0 - y, 1.0), _INF),
        # Σ p (√u − 1)² + Σ z = 2 − 2 Σ p √u on the simplex
        cvxpy=lambda cp, u, p, outside: 2.0 - 2.0 * cp.sum(cp.multiply(p, cp.sqrt(u))),
    ),
    _Builtin(
        "js", _sym("(t*log(2*t/(1 + t)) + log(2/(1 + t)))/2"),
        # ½ log(2t/(1+t)): log1p((t−1)/(t+1)) from ½ up (exact near 1 and for a large t), the logs below
        fprime_tilde=lambda o, t: 0.5 * o.where(
            t < 0.5, _LN2 + o.log(t) - o.log1p(t), o.log1p((t - 1.0) / (t + 1.0))
        ),
        fprime_inv_tilde=_js_fprime_inv,
        perspective=_js_perspective,
        # −½ log(2 − e^{2y}) = −½ log1p(−expm1(2y)), y < ½ log 2
        conjugate_tilde=lambda o, y: o.where(
            y < 0.5 * _LN2, -0.5 * o.log1p(-o.expm1(2.0 * o.where(y < 0.5 * _LN2, y, 0.0))), _INF
        ),
        cvxpy=_cvx_js,
    ),
)


# ---------------------------------------------------------------- the Divergence


@dataclass(frozen=True, eq=False)
class Divergence:
    r"""A generator :math:`f` with its limits and derivative, evaluated elementwise on arrays.

    Attributes
    ----------
    name : str
    f, fprime : callable
        :math:`f(t)` on :math:`[0, \infty]` (``f(0)`` and ``f(inf)`` are the limits) and
        :math:`f'(t)` on :math:`[0, \infty]` (``fprime(0)`` is :math:`f'(0^+)`, ``fprime(inf) = f_inf``).
        Where ``f`` has a kink (``tv`` at 1) ``fprime`` returns a subgradient.
    f_inf, f0 : float
        :math:`f_\infty` and :math:`f(0^+)`, possibly ``inf``.
    compiled : mentored._core.Generator or None
        The C++ generator that computes a built-in; None for a user generator, which the core
        evaluates through its :attr:`program` (or, without one, by calling back into its numpy forms).
    builtin : _Builtin or None
        The registry entry of a built-in: its sympy source, numerical forms (numpy and torch) and
        convex-program cost; None for a user generator.

    Derived quantities (from the sympy generator; built-ins analyse theirs on first use):
    ``expr``, ``symbol``, ``f2_at_1``, ``tilt``, ``convexity_check``, ``conjugate`` (a vectorised
    callable :math:`y \mapsto f^*(y)`), ``conjugate_expr`` (the sympy ``Piecewise`` or None),
    ``conjugate_domain``, ``conjugate_method``, ``fprime_inv``, ``fprime_inv_expr``, ``swapped``.
    A Divergence built by hand from callables alone has none of these (``symbolic`` is None); it
    still works with :func:`~mentored.solve` and :class:`~mentored.MentoredPath`, but not with
    ``certify`` or the oracle.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    fprime: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    f_inf: float
    f0: float
    compiled: Any = field(default=None, repr=False)
    _info: Any = field(default=None, repr=False)  # SymbolicInfo of a user generator
    builtin: Any = field(default=None, repr=False)
    _tilt: float = field(default=math.nan, repr=False)  # a built-in's c, from the core

    @classmethod
    def from_sympy(cls, f_expr, t, name=None, *, timeout=5.0) -> "Divergence":
        r"""A divergence from a sympy generator :math:`f(t)`, validated and compiled.

        Compiled twice: to numpy callables (:attr:`f`, :meth:`f_tilde`, …), and, on the first solve, to
        an expression program that the C++ core evaluates on every thread with no Python in the loop
        (:attr:`program`, :mod:`mentored.divergences.program`): arithmetic, powers, exp/log, sqrt, Abs, sign, Max,
        Min, Piecewise, Heaviside and the trigonometric and hyperbolic functions. A generator using
        anything else keeps the numpy callables, which the core calls back (same answers, slower).

        Parameters
        ----------
        f_expr : sympy expression
            :math:`f(t)`, convex on :math:`(0, \infty)` with :math:`f(1) = 0`. Non-smooth generators
            (``Abs``, ``Max``, ``Min``, ``Piecewise``, ``Heaviside``, ``sign``) are accepted when convex.
        t : sympy.Symbol
            Declared positive.
        name : str, optional
            Defaults to ``str(f_expr)``. A user generator is never taken for a built-in of the same
            name: backends tell them apart by :attr:`compiled`.
        timeout : float or None
            Seconds within which the call returns or refuses (5 s); ``None`` waits as long as sympy
            takes. The limit can only refuse: the analysis runs in a process of its own and does not
            depend on the clock, so a generator that is accepted gives the same divergence on any
            machine, idle or busy (:mod:`mentored.divergences.symbolic`).

        Raises
        ------
        ValueError
            Naming the condition that failed and where: ``f(1) = 0``, convexity, finiteness on
            :math:`(0, \infty)`, or limits that neither sympy nor the numeric fallback can determine.
        mentored.divergences.symbolic.SymbolicTimeoutError
            (a ``ValueError``) when the time limit ran out, naming the step it was in.

        Warns
        -----
        NumericCheckWarning
            When a property was checked numerically, not proved symbolically.

        Examples
        --------
        >>> import sympy as sp, mentored
        >>> t = sp.Symbol("t", positive=True)
        >>> tri = mentored.Divergence.from_sympy((t - 1)**2 / (t + 1), t, name="triangular")
        >>> tri.f_inf, tri.convexity_check
        (1.0, 'symbolic')
        >>> hinge = mentored.Divergence.from_sympy(sp.Max(t - 1, 0), t)  # f'(1) is a subgradient
        >>> hinge.f_inf, hinge.tilt, hinge.convexity_check
        (1.0, 0.5, 'symbolic')
        """
        from .symbolic import analyse

        info = analyse(f_expr, t, timeout=timeout)
        return cls(
            name=str(f_expr) if name is None else str(name), f=info.f, fprime=info.fprime, f_inf=info.f_inf,
            f0=info.f0, _info=info,
        )

    @cached_property
    def symbolic(self) -> "SymbolicInfo | None":
        """The analysis of the sympy generator (:class:`mentored.divergences.symbolic.SymbolicInfo`), or None."""
        if self._info is not None:
            return self._info
        if self.builtin is None:
            return None
        import sympy as sp

        from .symbolic import analyse

        t = sp.Symbol("t", positive=True)
        conj = self.builtin.conjugate() if self.builtin.conjugate is not None else None
        return analyse(self.builtin.source(t), t, conjugate_expr=conj)

    @property
    def program(self):
        """The expression program (``mentored._core.Program``) the core evaluates :math:`\tilde f` with, for a
        generator from :meth:`from_sympy` whose code translates (:mod:`mentored.divergences.program`); None for a built-in
        (compiled in C++), for one built from callables, and where the code does not translate (the core
        then calls back into :meth:`f_tilde`)."""
        from .program import program

        return program(self)

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
        if self.builtin is not None:
            return self._tilt
        if self._info is not None:
            return self._info.tilt
        return float(self.fprime(np.array(1.0)))

    def f_tilde(self, t) -> np.ndarray:
        r""":math:`\tilde f(t) = f(t) - c(t - 1) \ge 0`, accurate near 1 (same :math:`D_f` on the simplex)."""
        if self.builtin is not None:
            return _numpy(self.builtin.f_tilde, t, at_inf=np.inf)
        if self._info is not None:
            return self._info.f_tilde(t)
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(all="ignore"):
            return np.maximum(self.f(t) - self.tilt * (t - 1.0), 0.0)

    @cached_property
    def unit(self) -> float:
        r"""f's own scale, :math:`\tilde f(1/2) + \tilde f(2)` (1 where that is not a positive finite
        number): :math:`k f` has the unit :math:`k\cdot` ``unit``, so thresholds and searches measured in
        it treat :math:`\mathrm{MD}(kf, \varepsilon)` as :math:`\mathrm{MD}(f, \varepsilon/k)`."""
        with np.errstate(all="ignore"):
            u = float(np.sum(self.f_tilde(np.array([0.5, 2.0]))))
        return u if 0.0 < u < np.inf else 1.0

    def conjugate_tilde(self, y) -> np.ndarray:
        r""":math:`\tilde f^*(y) = f^*(y + c) - c`, the conjugate of the tilted generator."""
        if self.builtin is not None:
            return _numpy(self.builtin.conjugate_tilde, y)
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

        info = self._need()
        t = info.t
        return Divergence.from_sympy(sp.simplify(t * info.expr.subs(t, 1 / t)), t, name=f"swapped({self.name})")

    def __call__(self, pi, target) -> np.ndarray:
        r""":math:`D_f(\pi\|p)` over the last axis, straight from the definition (float64)."""
        pi = np.asarray(pi, dtype=np.float64)
        p = np.asarray(target, dtype=np.float64)
        pos = p > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.where(pos, pi / np.where(pos, p, 1.0), 1.0)
            term = p * self.f(ratio)
            huge = np.isinf(ratio) & (pi > 0)
            if huge.any():
                # π/p beyond DBL_MAX (a denormal p_i): a built-in's perspective p f̃(π/p) + c(π − p) and a
                # sympy generator's p f(π/p) are finite and exact; otherwise the term is f∞·π up to O(p_i),
                # the definition's limit at p_i = 0.
                if self.builtin is not None:
                    ps = np.where(pos, p, 1.0)
                    exact = _numpy(self.builtin.perspective, pi, ps) + self.tilt * (pi - ps)
                    term = np.where(huge, exact, term)
                elif self._info is not None:  # a sympy generator: the term itself, in 30-digit arithmetic
                    from .symbolic import exact_perspective

                    x = np.broadcast_to(pi, huge.shape)[huge]
                    exact = exact_perspective(self._info, x, np.broadcast_to(p, huge.shape)[huge])
                    term[huge] = np.where(np.isnan(exact), self.f_inf * x, exact)
                elif np.isfinite(self.f_inf):
                    term = np.where(huge, self.f_inf * pi, term)
            inner = np.where(pos, term, 0.0)
        outside = np.where(pos, 0.0, pi).sum(axis=-1)
        extra = np.multiply(self.f_inf, outside, out=np.zeros_like(outside), where=outside > 0)  # 0·∞ = 0
        return inner.sum(axis=-1) + extra


def _numpy(form, *args, at_inf=None):
    """A form of ``_Builtin`` evaluated on float64 numpy arrays; ``at_inf``: its value where the first argument is inf."""
    args = [np.asarray(a, dtype=np.float64) for a in args]
    with np.errstate(all="ignore"):
        out = np.asarray(form(_NP, *args), dtype=np.float64)
        if at_inf is not None:
            out = np.where(np.isinf(args[0]), at_inf, out)
    return np.broadcast_to(out, np.broadcast_shapes(*(a.shape for a in args))).copy()


def _make(spec: _Builtin, generator) -> Divergence:
    from .. import _core

    c, f0, f_inf = _core.generator_constants(generator)
    f_inf_tilde = f_inf - c

    # lim f(t) at ∞: +∞ where f∞ > 0; reverse_kl, the one built-in with f∞ = 0, decreases without bound
    # (tests/test_divergences.py checks this against sympy).
    f_at_inf = np.inf if f_inf > 0 else -np.inf

    def f(t):
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(all="ignore"):
            return np.where(np.isinf(t), f_at_inf, _numpy(spec.f_tilde, t, at_inf=np.inf) + c * (t - 1.0))

    def fprime(t):
        return _numpy(spec.fprime_tilde, t, at_inf=f_inf_tilde) + c

    return Divergence(name=spec.name, f=f, fprime=fprime, f_inf=float(f_inf), f0=float(f0), compiled=generator, builtin=spec, _tilt=float(c))


def _builtins() -> dict[str, Divergence]:
    from .. import _core

    members = _core.Generator.__members__
    specs = {spec.name: spec for spec in _REGISTRY}
    if set(specs) != set(members):
        raise ImportError(
            f"mentored's divergence registry {sorted(specs)} and its compiled generators {sorted(members)} differ: "
            "rebuild the core (pip install .)"
        )
    return {name: _make(specs[name], members[name]) for name in sorted(members, key=lambda n: int(members[n]))}


_BUILTINS = _builtins()
BUILTIN_NAMES = tuple(_BUILTINS)


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
