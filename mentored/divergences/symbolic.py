r"""Divergences from a sympy generator: validation, derived quantities, compiled numeric forms.

:meth:`Divergence.from_sympy <mentored.Divergence.from_sympy>` takes :math:`f` as a sympy expression in a positive symbol :math:`t` and returns a
:class:`~mentored.Divergence` that the solver, :class:`~mentored.MentoredPath`, :func:`~mentored.certify`
and the oracle accept wherever a built-in name is accepted. It checks the two conditions of docs/theory.md §1,

.. math::

    f(1) = 0, \qquad f \text{ convex on } (0, \infty),

and that :math:`f` is finite and real on :math:`(0, \infty)`. Non-smooth generators built from
``Abs``, ``Max``, ``Min``, ``Piecewise``, ``Heaviside`` and ``sign`` are split into smooth pieces on
intervals of :math:`(0, \infty)`; :math:`f` is proved convex when sympy decides :math:`f'' \ge 0` on
every piece, continuity at every kink and :math:`f'(b^-) \le f'(b^+)` there. Where sympy cannot decide,
a numeric check over the whole half-line takes over (``convexity_check == "numeric"`` and a
:class:`NumericCheckWarning`): a grid in :math:`\log t` over :math:`[10^{-300}, 10^{300}]`, a grid
uniform in :math:`u = t/(1+t) \in (0, 1)`, and the neighbourhood of every kink and singularity sympy
reports (zeros of the arguments of ``Abs``, ``Max``, ``Heaviside``, of ``Piecewise`` conditions, of
logarithms and denominators). A violation found in floating point is confirmed in high precision
before :math:`f` is refused, and the refusal names the property and the point.

It derives :math:`f', f''`, :math:`f(0^+)`, :math:`f_\infty = \lim f(t)/t`, :math:`f''(1)`, a
subgradient :math:`c \in \partial f(1)` (the tilt of the core, generators.hpp), the convex conjugate

.. math::

    f^*(y) = \sup_{t \ge 0} \bigl(y t - f(t)\bigr), \qquad
    \operatorname{dom} f^* = (-\infty, f_\infty) \text{ or } (-\infty, f_\infty],

symbolically where sympy solves the stationarity equation :math:`f'(t) = y` (else by bisection on
:math:`f'`), the inverse derivative :math:`(f')^{-1}` (for a generator with kinks, from the inverse on
each smooth piece), whether :math:`f` is linear on some interval (:math:`(f')^{-1}` then not a
function), and the swapped generator :math:`t f(1/t)` (:math:`D_{f^\diamond}(\pi\|p) = D_f(p\|\pi)`).
Each is compiled to a vectorised numpy callable; where :math:`f` is not differentiable, :math:`f'`
returns a subgradient. Where the printed form of :math:`f` or :math:`f'` overflows on the way at a
point of :math:`(0, \infty)` (``log(cosh(t - 1))`` forms :math:`\cosh 719` at :math:`t = 720`), that
point is evaluated again: :math:`\tilde f` by the compiled program in extended range
(:mod:`mentored.divergences.program`), the rest in 30-digit arithmetic, so that a finite :math:`f`
never reads as infinite.

Float literals are read as the decimals they print as (``0.5`` as 1/2, ``1e-12`` as 1/10¹²), so that
``0.5*Abs(t - 1)`` is decided exactly as ``Abs(t - 1)/2`` is; :attr:`SymbolicInfo.expr` holds that form.

Where a derivation gives up (sympy cannot decide convexity, cannot take a limit, cannot solve
:math:`f'(t) = y`), the numeric route takes over and a :class:`NumericCheckWarning` says what was
found numerically and why.

Time limit, and the same answer on any machine
----------------------------------------------
The analysis runs in a separate Python process (started on first use and kept for the next one, with
a fixed hash seed), and its result is handed back as sympy expressions and floats; the callables are
compiled here. :meth:`~mentored.Divergence.from_sympy` (through :func:`analyse`) returns or refuses
within ``timeout`` seconds (default :data:`DEFAULT_TIMEOUT`, 5 s; ``None`` for no limit), counted from
when the process is ready: past it the process is killed, and :class:`SymbolicTimeoutError` (a
``ValueError``) names the step it was in. Nothing in the analysis depends on the clock, so the limit
can only refuse: the same generator gives the same facts on an idle and on a busy machine, in any
thread, and no exception is ever raised asynchronously into the caller's code (there is no signal
handler, no profile hook, and the caller's threads only wait on a queue). Results are kept per
generator for the life of the caller's process.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sympy as sp

from ._printing import NP_FUNCS, NP_MAX, NP_MIN, SERIES_RADIUS
from ._warnings import NumericCheckWarning

__all__ = ["NumericCheckWarning", "SymbolicInfo", "SymbolicTimeoutError", "DEFAULT_TIMEOUT", "SERIES_RADIUS", "analyse", "exact_perspective"]

DEFAULT_TIMEOUT = 5.0  # seconds: Divergence.from_sympy returns or refuses within this (see the module docstring)


class SymbolicTimeoutError(ValueError):
    """:meth:`~mentored.Divergence.from_sympy` ran out of its time limit before it could decide a property of ``f``."""


Y = sp.Symbol("y", real=True)

_SERIES_ORDER = 8


@dataclass(frozen=True, eq=False)
class SymbolicInfo:
    r"""Everything derived from a sympy generator :math:`f(t)`.

    Sympy expressions are in ``t`` (the generator's symbol) or in :data:`Y` (``y``, for the
    conjugate); the callables are vectorised over numpy arrays and handle the endpoints ``0`` and
    ``inf`` by their limits.

    Attributes
    ----------
    expr, t : sympy
        :math:`f` and its symbol.
    fprime_expr, fsecond_expr : sympy
        :math:`f'`, :math:`f''` (for a kink, e.g. :math:`|t-1|`, sympy's ``sign``/``DiracDelta``).
    f0, f_inf, f_at_inf : float
        :math:`f(0^+)`, :math:`f_\infty = \lim f(t)/t`, :math:`\lim_{t\to\infty} f(t)`.
    fprime0 : float
        :math:`f'(0^+)` (``-inf`` when :math:`f(0) = \infty`).
    f2_at_1 : float
        :math:`f''(1)`; NaN where :math:`f` is not twice differentiable at 1.
    tilt : float
        :math:`c \in \partial f(1)`, the midpoint of the one-sided derivatives at 1. The core and the
        certificate work with :math:`\tilde f(t) = f(t) - c(t - 1) \ge 0`, :math:`\tilde f_\infty = f_\infty - c`,
        which define the same :math:`D_f` on the simplex and carry no cancellation near :math:`\pi = p`.
    convexity_check : {"symbolic", "numeric"}
        How convexity was established: proved by sympy, or checked numerically over the half-line.
    conjugate_expr : sympy or None
        :math:`f^*(y)` as a ``Piecewise`` in ``y`` (including ``-f(0)`` below :math:`f'(0^+)` and
        ``oo`` outside the domain), or None when sympy could not solve :math:`f'(t) = y`.
    conjugate_domain : (float, float, bool)
        ``(lo, hi, hi_included)``: :math:`\operatorname{dom} f^*`; ``lo`` is always ``-inf``.
    fprime_inv_expr : sympy or None
        :math:`(f')^{-1}(y)` on :math:`(f'(0^+), f_\infty)`, or None. For a generator with kinks, a
        ``Piecewise`` of the inverses on its smooth pieces, and the kink :math:`b` itself for
        :math:`y \in [f'(b^-), f'(b^+)]`.
    linear_on : (float, float) or None
        An interval on which :math:`f` is linear (:math:`f'` constant, :math:`(f')^{-1}` not a
        function), or None: :math:`f'` is strictly increasing on :math:`(0, \infty)`, which a draft
        tree's weighted verifier needs (``objective="length"``).
    kinks : tuple of float, or None
        The points where :math:`f'` jumps (:math:`f'(b^-) < f'(b^+)`); None where f could not be split
        into smooth pieces (there may be some).
    """

    expr: sp.Expr
    t: sp.Symbol
    fprime_expr: sp.Expr
    fsecond_expr: sp.Expr
    f0: float
    f_inf: float
    f_at_inf: float
    fprime0: float
    f2_at_1: float
    tilt: float
    convexity_check: str
    conjugate_expr: sp.Expr | None
    conjugate_domain: tuple
    conjugate_at_end: float  # f*(f∞), inf when f∞ is not in the domain
    fprime_inv_expr: sp.Expr | None
    linear_on: tuple | None
    kinks: tuple | None
    f: Callable = field(repr=False)
    fprime: Callable = field(repr=False)
    fsecond: Callable = field(repr=False)
    f_tilde: Callable = field(repr=False)
    conjugate_tilde: Callable = field(repr=False)  # f̃*(y) = f*(y + c) − c
    fprime_inv: Callable = field(repr=False)
    series: tuple = field(repr=False, default=())  # Taylor coefficients of f̃ at 1, from h²

    @property
    def conjugate_method(self) -> str:
        return "symbolic" if self.conjugate_expr is not None else "numeric"

    def conjugate(self, y) -> np.ndarray:
        r""":math:`f^*(y) = \tilde f^*(y - c) + c`."""
        y = np.asarray(y, dtype=np.float64)
        return self.conjugate_tilde(y - self.tilt) + self.tilt


# ---------------------------------------------------------------------------------------------
# Numeric helpers


_NP_MAX, _NP_MIN, _NP_FUNCS = NP_MAX, NP_MIN, NP_FUNCS


def _lambdify(expr, sym):
    """A vectorised float callable; warnings of intermediate NaNs are the callers' business."""
    # Max/Min as plain calls: sympy's code printer would rewrite them first (seconds, for nested ones).
    expr = sp.sympify(expr).replace(sp.Max, _NP_MAX).replace(sp.Min, _NP_MIN)
    fn = sp.lambdify(sym, expr, modules=[_NP_FUNCS, "numpy"])

    def call(x):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(x))
            if np.iscomplexobj(out):  # a branch of a root: real only where the imaginary part vanishes
                out = np.where(out.imag == 0, out.real, np.nan)
        return np.broadcast_to(np.asarray(out, dtype=np.float64), x.shape).copy()

    return call


def _repaired(fn, exact):
    """``fn`` with its non-finite values at points of (0, ∞) replaced by ``exact`` there: where the
    printed form of a function that is finite on (0, ∞) overflows on the way (cosh(t − 1) inside
    log(cosh(t − 1)) past t = 711)."""

    def call(x):
        x = np.asarray(x, dtype=np.float64)
        out = fn(x)
        bad = ~np.isfinite(out) & (x > 0) & np.isfinite(x)
        if np.any(bad):
            out[bad] = exact(x[bad])
        return out

    return call


def _exact(expr, sym):
    """``expr`` at a few points in 30-digit arithmetic (mpmath, whose exponents do not overflow),
    rounded to doubles: ±inf past DBL_MAX, NaN where it is not a real number."""
    import mpmath

    compiled = []  # printed on first use: most generators never overflow

    def one(x):
        if not compiled:
            try:
                compiled.append(sp.lambdify(sym, expr, modules="mpmath"))
            except Exception:  # nothing mpmath prints: sympy's own evaluation, slower
                compiled.append(None)
        fn = compiled[0]
        if fn is not None:
            try:
                v = fn(mpmath.mpf(float(x)))
                if isinstance(v, mpmath.mpc):
                    if abs(v.imag) > 1e-25 * (1 + abs(v.real)):
                        return np.nan
                    v = v.real
                return float(v)
            except Exception:  # e.g. a function mpmath lacks: sympy's evaluation below
                pass
        try:
            v = sp.N(expr.subs(sym, sp.Rational(float(x))), 30)
            if v.has(sp.zoo, sp.nan) or not v.is_number:
                return np.nan
            re, im = v.as_real_imag()
            return float(re) if im == 0 or abs(im) <= 1e-25 * (1 + abs(re)) else np.nan
        except (TypeError, ValueError, ArithmeticError):
            return np.nan

    def call(xs):
        with mpmath.workdps(30):
            return np.array([one(x) for x in np.ravel(xs)], dtype=np.float64).reshape(np.shape(xs))

    return call


def exact_perspective(info, x, y) -> np.ndarray:
    """y·f(x/y) for y > 0 in 30-digit arithmetic, elementwise: the term of D_f where x/y passes
    DBL_MAX (a subnormal p_i), finite whenever the term is."""
    import mpmath

    fn = sp.lambdify(info.t, info.expr, modules="mpmath")
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    out = np.empty(x.shape)
    with mpmath.workdps(30):
        for i in np.ndindex(x.shape):
            try:
                v = mpmath.mpf(float(y[i])) * fn(mpmath.mpf(float(x[i])) / mpmath.mpf(float(y[i])))
                out[i] = float(v.real if isinstance(v, mpmath.mpc) else v)
            except Exception:  # a form mpmath cannot evaluate: the caller's bound stands
                out[i] = np.nan
    return out


def _exact_tilde(facts):
    """f̃(t) = f(t) − c(t − 1) at points of (0, ∞) where the printed form overflows: the compiled
    program's evaluation in extended range (cpp/mentored/program.hpp), and 30-digit arithmetic where
    there is no program or it gives no number."""
    f, t, tilt = facts["expr"], facts["t"], facts["tilt"]
    slow = _exact(f - sp.Rational(tilt) * (t - 1), t)
    program = []

    def call(x):
        if not program:
            from types import SimpleNamespace

            from .program import compile_info

            program.append(compile_info(SimpleNamespace(**{k: facts[k] for k in ("expr", "t", "f0", "f_at_inf", "tilt", "f_inf", "series")})))
        out = program[0].f_tilde(np.ascontiguousarray(x)) if program[0] is not None else np.full(np.shape(x), np.nan)
        left = np.isnan(out)
        if np.any(left):
            out[left] = slow(x[left])
        return out

    return call


def _float(v) -> float:
    """A sympy limit as a float (±inf allowed); ValueError when it is not a real number."""
    v = sp.simplify(v)
    if v in (sp.oo, -sp.oo):
        return float(v)
    if v.is_real is False or v.has(sp.zoo, sp.nan, sp.AccumBounds) or isinstance(v, sp.Limit) or v.free_symbols:
        raise ValueError(v)
    return float(v)


def _endpoints(fn, at0, atinf):
    """Wrap a callable on (0, ∞) so that 0 and inf give the limits at0, atinf."""

    def call(x):
        x = np.asarray(x, dtype=np.float64)
        inside = (x > 0) & np.isfinite(x)
        out = fn(np.where(inside, x, 1.0))
        return np.where(inside, out, np.where(x == 0, at0, atinf))

    return call


def _bisect_fprime(fprime, y, lo=-745.0, hi=709.0, iterations=120):
    """t with f'(t) = y by bisection on log t (f' nondecreasing); vectorised over y."""
    y = np.asarray(y, dtype=np.float64)
    a = np.full(y.shape, lo)
    b = np.full(y.shape, hi)
    for _ in range(iterations):
        m = 0.5 * (a + b)
        below = fprime(np.exp(m)) < y
        a = np.where(below, m, a)
        b = np.where(below, b, m)
    return np.exp(0.5 * (a + b))


def numeric_conjugate(f, fprime, fprime0, f0, f_inf):
    r""":math:`y \mapsto \sup_{t\ge0}(yt - f(t))` by bisection on the monotone :math:`f'` (vectorised).

    A non-optimal :math:`t` would give a *lower* value, so the result is exact to second order in the
    bisection error; outside :math:`(f'(0^+), f_\infty)` the sup is :math:`-f(0)` or ``inf``.
    """

    def conj(y):
        y = np.asarray(y, dtype=np.float64)
        ts = _bisect_fprime(fprime, y)
        with np.errstate(all="ignore"):
            val = y * ts - f(ts)
            val = np.maximum(val, -f0)  # t = 0 is a candidate too
            val = np.where(np.isnan(val), np.inf, val)  # ∞ − ∞ at an overflowing t*: bound it by ∞
        val = np.where(y <= fprime0, -f0, val)
        val = np.where(y > f_inf, np.inf, val)
        return np.where(np.isnan(y), np.nan, val)

    return conj


class _Progress:
    """One analysis's progress: the stage it is in (sent to the caller) and what was checked numerically."""

    def __init__(self, report=None):
        self._report = report
        self._stage = "starting"
        self.notes = []  # what was checked numerically, for the NumericCheckWarning

    @property
    def stage(self):
        return self._stage

    @stage.setter
    def stage(self, text):
        self._stage = text
        if self._report is not None:
            self._report(text)


def _try(fn, *args):
    """``fn(*args)``, or None where sympy failed: undecided (NotImplementedError, TypeError, ...
    from its internals decide nothing), and the numerics decide instead."""
    try:
        return fn(*args)
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# High-precision evaluation (to confirm what floating point suggests)

_NONSMOOTH = (sp.Abs, sp.Max, sp.Min, sp.Piecewise, sp.Heaviside, sp.sign)


def _hp(expr, t, x, digits=30):
    """expr at the exact binary value of x, to ``digits`` digits: a float-like sympy number, or None
    where it is not a finite real number."""
    try:
        v = expr.subs(t, sp.Rational(float(x)) if not isinstance(x, sp.Basic) else x)
        v = sp.N(v, digits)
        if v.has(sp.zoo, sp.nan, sp.oo, -sp.oo) or not v.is_number:
            return None
        re, im = v.as_real_imag()
        if im != 0 and abs(im) > 1e-25 * (1 + abs(re)):
            return None
        return sp.Float(re, digits)
    except (TypeError, ValueError, ArithmeticError):  # not a number sympy can evaluate
        return None


def _confirmed_negative(expr, t, x) -> bool:
    """expr(x) < 0 at two precisions that agree: a sign that is not a rounding artefact."""
    a, b = _hp(expr, t, x, 30), _hp(expr, t, x, 60)
    return a is not None and b is not None and a < 0 and b < 0 and abs(a - b) <= 0.1 * abs(b)


# ---------------------------------------------------------------------------------------------
# The numeric checks, over the whole half-line


def _special_points(f, t, progress) -> list[float]:
    """Kinks and singularities sympy reports: zeros in (0, ∞) of the arguments of Abs, sign,
    Heaviside, of Max/Min differences, Piecewise conditions, logarithms and denominators."""
    cands = []
    for a in f.atoms(sp.Abs, sp.sign, sp.Heaviside, sp.log):
        cands.append(a.args[0])
    for a in f.atoms(sp.Max, sp.Min):
        cands += [x - y for i, x in enumerate(a.args) for y in a.args[i + 1:]]
    for a in f.atoms(sp.Piecewise):
        for _, cond in a.args:
            for rel in cond.atoms(sp.Rel):
                cands.append(rel.lhs - rel.rhs)
    for a in f.atoms(sp.Pow):
        if a.exp.is_negative or (a.exp.is_Rational and not a.exp.is_integer):
            cands.append(a.base)
    points = set()
    for c in cands[:24]:
        if t not in c.free_symbols:
            continue
        roots = _try(sp.solve, c, t)
        for r in roots or ():
            try:
                v = complex(sp.N(r))
            except (TypeError, ValueError):
                continue
            if v.imag == 0 and 0 < v.real < 1e300:
                points.add(float(v.real))
    return sorted(points)[:64]


def _grid(points) -> np.ndarray:
    """(0, ∞) through t = u/(1 − u) and log t: both tails to 1e∓300, dense near 1 and every point."""
    u = np.linspace(0.0, 1.0, 2002)[1:-1]
    near = 10.0 ** -np.linspace(1.0, 12.0, 56)
    parts = [
        np.logspace(-300, -6, 1471), np.logspace(-6, 6, 6001), np.logspace(6, 300, 1471),
        1.0 + np.linspace(-0.5, 0.5, 2001), u / (1.0 - u), 1.0 + np.concatenate([near, -near]),
    ]
    for b in points:
        parts.append(np.array([b]))
        parts.append(b * (1.0 + np.concatenate([near, -near])))
    g = np.unique(np.concatenate(parts))
    return g[(g > 0) & np.isfinite(g)]


_GRID = _grid([])


def _finite_mask(f, t, grid, vals, progress) -> np.ndarray:
    """Where f is finite in floating point. A run of non-finite values is a float overflow when f is
    finite and real there in high precision (kept out of the float checks), else f is refused."""
    bad = ~np.isfinite(vals)
    if not bad.any():
        return ~bad
    idx = np.flatnonzero(bad)
    runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
    probes = []
    for r in runs[:8]:
        probes += sorted({int(r[0]), int(r[len(r) // 2]), int(r[-1])})
    for i in probes:
        x = float(grid[i])
        progress.stage = f"checking that f is finite and real at t = {x:.6g}"
        v = _try(_hp, f, t, x)
        if v is None:
            raise ValueError(f"f must be finite and real on (0, ∞); it is not at t = {x:.6g}")
    if len(runs) > 8:
        raise ValueError(f"f must be finite and real on (0, ∞); it is not at t = {float(grid[runs[8][0]]):.6g}")
    return ~bad  # float overflow of a finite f: not a property of f, and not reported


def _refute_convexity(f, t, f2, grid, vals, ok, progress) -> str | None:
    """A confirmed point where f is not convex, described, or None. Two witnesses: secant slopes that
    decrease on the grid, and f'' < 0 at a grid point; each confirmed in high precision."""
    x, v = grid[ok], vals[ok]
    if x.size >= 3:
        with np.errstate(all="ignore"):
            slopes = np.diff(v) / np.diff(x)
            drop = slopes[:-1] - slopes[1:]
            scale = 1e-9 * (np.abs(slopes[:-1]) + np.abs(slopes[1:]) + 1e-300) + 1e-12 * (np.abs(v[1:-1]) + 1) / np.diff(x)[1:]
            excess = np.where(np.isfinite(drop - scale), drop - scale, -np.inf)
        for k in np.argsort(-excess)[:6]:
            if not excess[k] > 0:
                break
            a, b, c = (float(x[k + j]) for j in range(3))
            progress.stage = f"confirming a decreasing slope of f near t = {b:.6g}"
            fa, fb, fc = (_try(_hp, f, t, s, 40) for s in (a, b, c))
            if None in (fa, fb, fc):
                continue
            s1 = (fb - fa) / (sp.Rational(b) - sp.Rational(a))
            s2 = (fc - fb) / (sp.Rational(c) - sp.Rational(b))
            if s1 - s2 > sp.Float(1e-25, 40) * (abs(s1) + abs(s2)):
                return f"the slope of f decreases near t = {b:.6g} (from {float(s1):.6g} to {float(s2):.6g})"
    if f2 is not None:
        try:
            f2n = _lambdify(f2, t)
            with np.errstate(all="ignore"):
                d2 = f2n(grid)
        except Exception:
            d2 = None
        if d2 is not None:
            neg = np.flatnonzero(np.isfinite(d2) & (d2 < 0))
            for k in neg[np.argsort(d2[neg])][:6]:
                b = float(grid[k])
                progress.stage = f"confirming f'' < 0 at t = {b:.6g}"
                if _try(_confirmed_negative, f2, t, b):
                    return f"f''({b:.6g}) = {float(_hp(f2, t, b)):.6g} < 0"
    return None


def _series_limit(expr, t, at_inf, progress):
    """lim expr at 0+ or ∞ from high-precision values at t = 2^(∓2^j), j = 3..11; None if undecided.

    Used only for monotone quantities of a convex f (f near 0 and ∞, f(t)/t, f'), whose values
    settle geometrically to a finite limit or keep growing."""
    vals = []
    for j in range(3, 12):
        x = sp.Integer(2) ** (2**j) if at_inf else sp.Rational(1, 2 ** (2**j))
        v = _try(_hp_signed_inf, expr, t, x)
        if v is None:
            return None
        vals.append(v)
    if all(math.isinf(v) for v in vals[-2:]) and vals[-1] == vals[-2]:
        return vals[-1]
    if any(math.isinf(v) for v in vals):
        return None
    d = np.diff(vals)
    if np.all(d[-4:] > 0) and np.all(d[-3:] >= 0.9 * d[-4:-1]):
        return math.inf
    if np.all(d[-4:] < 0) and np.all(d[-3:] <= 0.9 * d[-4:-1]):
        return -math.inf
    if abs(d[-1]) <= 1e-13 * (1 + abs(vals[-1])) and abs(d[-1]) <= 0.6 * abs(d[-2]) + 1e-300:
        return float(vals[-1])
    return None


def _hp_signed_inf(expr, t, x):
    v = sp.N(expr.subs(t, x), 30)
    if v in (sp.oo, -sp.oo):
        return float(v)
    if v.has(sp.zoo, sp.nan) or not v.is_number:
        return None
    re, im = v.as_real_imag()
    if im != 0:
        return None
    try:
        return float(re)  # ±inf beyond the float range
    except (OverflowError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Symbolic steps


def _off_kinks(e):
    """e with DiracDelta terms dropped: the derivative away from the kinks, where a continuous f's
    derivatives carry them (e.g. (t − 1)·δ(t − 1) in the derivative of (t − 1)·H(t − 1))."""
    return e.replace(lambda x: isinstance(x, sp.DiracDelta), lambda x: sp.S.Zero)


def _pieces(f, t):
    """``[(expr, lo, hi)]``: smooth pieces of f on consecutive open intervals covering (0, ∞) but for
    finitely many points, from f rewritten as a Piecewise; None where the split is not decidable."""
    if not f.has(*_NONSMOOTH):
        return [(f, sp.Integer(0), sp.oo)]
    g = sp.piecewise_fold(f.rewrite(sp.Piecewise))
    if not isinstance(g, sp.Piecewise):
        return None if g.has(*_NONSMOOTH) else [(g, sp.Integer(0), sp.oo)]
    out = []
    for expr, s in g.as_expr_set_pairs(sp.Interval.open(0, sp.oo)):
        if expr.has(*_NONSMOOTH):
            return None
        for part in s.args if isinstance(s, sp.Union) else (s,):
            if isinstance(part, sp.FiniteSet) or part is sp.S.EmptySet:
                continue
            if not isinstance(part, sp.Interval) or part.measure == 0:
                return None
            out.append((expr, part.start, part.end))
    out.sort(key=lambda p: float(p[1]))
    merged = []
    for e, lo, hi in out:
        if merged and merged[-1][2] == lo and sp.simplify(merged[-1][0] - e) == 0:
            merged[-1] = (merged[-1][0], merged[-1][1], hi)
        else:
            merged.append((e, lo, hi))
    if not merged or merged[0][1] != 0 or merged[-1][2] != sp.oo:
        return None
    if any(a[2] != b[1] for a, b in zip(merged, merged[1:])):
        return None
    return merged


def _nonnegative(e, t) -> bool | None:
    """Whether e ≥ 0 for all t > 0, as far as sympy can decide (None: undecided)."""
    if e == 0:
        return True
    for form in (e, sp.simplify(e), sp.factor(sp.together(e))):
        r = form.is_nonnegative
        if r is not None:
            return r
    u = sp.Symbol("u", positive=True)  # √t = u turns half-integer powers into polynomials
    e2 = sp.factor(sp.simplify(e.subs(t, u**2)))
    return e2.is_nonnegative


def _nonnegative_on(e, t, lo, hi) -> bool | None:
    """Whether e ≥ 0 on the open interval (lo, hi) ⊂ (0, ∞), through a substitution onto s > 0."""
    s = sp.Symbol("s", positive=True)
    if lo == 0 and hi == sp.oo:
        return _nonnegative(e, t)
    if hi == sp.oo:
        return _nonnegative(e.subs(t, lo + s), s)
    return _nonnegative(e.subs(t, lo + (hi - lo) / (1 + s)), s)


def _side(e, t, b, side):
    """The one-sided value of the smooth piece e at b: e(b), or its limit where e(b) is not finite."""
    v = e.subs(t, b)
    if v.has(sp.zoo, sp.nan, sp.oo, -sp.oo) or not v.is_finite:
        v = sp.limit(e, t, b, side)
    return v


def _prove_convex(f, t, pieces):
    """True (proved), None (undecided) or a description of the failure (proved not convex)."""
    verdict = True
    for e, lo, hi in pieces:
        d2 = sp.diff(e, t, 2)
        r = _nonnegative_on(d2, t, lo, hi)
        if r is False:
            where = "(0, ∞)" if (lo == 0 and hi == sp.oo) else f"({lo}, {hi})"
            return f"f''(t) = {sp.simplify(d2)} is negative on {where}"
        if r is None:
            verdict = None
    for (e1, _, b), (e2, _, _) in zip(pieces, pieces[1:]):
        v1, v2, vb = _side(e1, t, b, "-"), _side(e2, t, b, "+"), f.subs(t, b)
        for a, c, what in ((v1, v2, f"f(t) jumps at t = {b} from {v1} to {v2}"), (vb, v1, f"f({b}) = {vb} is not the limit {v1}")):
            z = sp.simplify(a - c).is_zero
            if z is False:
                return what
            if z is None:
                verdict = None
        d1, d2 = _side(sp.diff(e1, t), t, b, "-"), _side(sp.diff(e2, t), t, b, "+")
        r = sp.simplify(d2 - d1).is_nonnegative
        if r is False:
            return f"the slope of f drops at t = {b}: f'({b}−) = {d1} > f'({b}+) = {d2}"
        if r is None:
            verdict = None
    return verdict


def _at_one(pieces, t):
    """(left piece, right piece, whether 1 is interior to a piece with no kink within 1e-3)."""
    for k, (e, lo, hi) in enumerate(pieces):
        if lo < 1 < hi:
            return e, e, bool(lo <= sp.Rational(999, 1000) and hi >= sp.Rational(1001, 1000))
        if hi == 1:
            return e, pieces[k + 1][0], False
    return None, None, False


def _one_sided(f, t, side):
    """f'(1−) or f'(1+) from high-precision difference quotients (fallback where sympy gave none)."""
    h = sp.Rational(1, 10**25) * (1 if side == "+" else -1)
    a, b = _hp(f, t, 1 + h, 60), _hp(f, t, sp.Integer(1), 60)
    return float("nan") if a is None or b is None else float((a - b) / h)


def _conjugate(f, fp, t, f0, fprime0, f_inf):
    """(conjugate Piecewise in y, value at f∞, inverse derivative) or (None, ·, None)."""
    fd = _lambdify(fp, t)
    samples = [s for s in (0.25, 1.0, 3.0) if np.isfinite(fd(np.array(s)))]
    try:
        # simplify=False, check=False: sympy's own simplification and check of every root can run for
        # minutes (Lambert W roots); each root is checked numerically below, and the one that inverts
        # f' is simplified, once.
        sols = sp.solve(sp.Eq(fp, Y), t, simplify=False, check=False)
    except Exception:
        return None, None, None
    inverse = None
    for s in sols:
        if s.is_real is False:
            continue
        try:
            inv = _lambdify(s, Y)
            ok = all(abs(float(inv(fd(np.array(x)))) - x) <= 1e-9 * (1 + x) for x in samples)
        except Exception:
            ok = False
        if ok and samples:
            inverse = sp.simplify(s)
            break
    if inverse is None:
        return None, None, None
    interior = sp.simplify(Y * inverse - f.subs(t, inverse))
    pieces = []
    if np.isfinite(fprime0):
        pieces.append((sp.Float(-f0) if not float(f0).is_integer() else sp.Integer(-int(f0)), Y <= sp.nsimplify(fprime0)))
    if np.isfinite(f_inf):
        end_v = sp.limit(interior, Y, sp.nsimplify(f_inf), "-")
        try:
            end = _float(end_v)
        except ValueError:
            end = float("inf")
        pieces.append((interior, Y < sp.nsimplify(f_inf)))
        if np.isfinite(end):
            pieces.append((end_v, sp.Eq(Y, sp.nsimplify(f_inf))))
        pieces.append((sp.oo, True))
    else:
        end = float("inf")
        pieces.append((interior, True))
    return sp.Piecewise(*pieces), end, inverse


def _check_at_one(f, t, progress):
    """f(1) = 0 exactly: decided by sympy, else to 60 digits (reported)."""
    try:
        at1 = f.subs(t, 1)
    except (ValueError, TypeError, ArithmeticError) as exc:  # e.g. Max of a non-comparable zoo
        raise ValueError(f"f(1) = 0 fails: f(1) is not defined ({exc})") from None
    z = at1.is_zero
    if z is None:
        simp = _try(sp.simplify, at1)
        z = None if simp is None else simp.is_zero
    if z is False:
        raise ValueError(f"f(1) = 0 fails: f(1) = {at1}")
    if z is None:
        v = _try(_hp, at1, t, sp.Integer(1), 60)
        if v is None or abs(v) > 1e-50:
            raise ValueError(f"f(1) = 0 fails: f(1) = {at1} ≈ {v}")
        progress.notes.append("f(1) = 0 was checked to 60 digits (sympy could not decide it)")


def _limit(progress, name, expr, t, point, side):
    """A limit as a float: sympy's, else the numeric one (reported), else ValueError naming it."""
    progress.stage = f"taking the limit {name}"

    def symbolic():
        return _float(sp.limit(expr, t, point, side))

    # sympy's limit of a kinked expression (Max, Heaviside, …: f was not split into smooth pieces)
    # can run for minutes; the values at t = 2^(∓2^j) decide it instead, as for any undecided limit.
    v = None if expr.has(*_NONSMOOTH, sp.DiracDelta) else _try(symbolic)
    if v is None:
        v = _series_limit(expr, t, point == sp.oo, progress)
        if v is None:
            raise ValueError(f"could not determine the limit {name} of f (sympy could not, and the values do not settle)")
        progress.notes.append(f"{name} = {v:.6g} was found numerically")
    return v


def analyse(f_expr, t, *, conjugate_expr=None, timeout=None) -> SymbolicInfo:
    """Validate ``f_expr`` as a generator and derive everything :class:`SymbolicInfo` lists.

    ``conjugate_expr`` (a ``Piecewise`` in :data:`Y`) overrides the derivation, for generators whose
    conjugate sympy cannot solve but which is known and checked elsewhere (``tv``: proofs/).
    ``timeout`` (seconds, None for none) bounds the whole analysis (see the module docstring):
    :class:`SymbolicTimeoutError` when it runs out. The answer does not depend on it, nor on the
    machine's speed or load: it is the answer or a refusal.
    """
    if not isinstance(t, sp.Symbol) or t.is_positive is not True:
        raise ValueError("t must be a sympy Symbol declared positive, e.g. sympy.Symbol('t', positive=True)")
    try:
        f = sp.sympify(f_expr)
    except (sp.SympifyError, TypeError, ValueError) as exc:
        raise ValueError(f"f must be a sympy expression in t, got {f_expr!r}: {exc}") from None
    if not isinstance(f, sp.Expr):
        raise ValueError(f"f must be a sympy expression in t, got {type(f).__name__} {f}")
    extra = f.free_symbols - {t}
    if extra:
        raise ValueError(f"f has free symbols other than t: {sorted(map(str, extra))}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        timeout = float(timeout)
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds or None, got {timeout}")
    # Float literals are read as the decimals they print as (0.5 → 1/2, 1e-12 → 1/10**12): sympy then
    # decides signs exactly where it would round the float at 15 digits.
    f = _rational(f)
    conjugate_expr = None if conjugate_expr is None else _rational(sp.sympify(conjugate_expr))
    key = (sp.srepr(f), sp.srepr(t), None if conjugate_expr is None else sp.srepr(conjugate_expr))
    with _FACTS_LOCK:
        facts = _FACTS.get(key)
    if facts is None:
        facts = _in_analysis_process((f, t, conjugate_expr), timeout)
        with _FACTS_LOCK:
            _FACTS[key] = facts
    if facts["notes"]:
        warnings.warn(f"for f = {f}: " + "; ".join(facts["notes"]), NumericCheckWarning, stacklevel=3)
    return _compile(facts)


def _rational(e):
    """``e`` with each Float replaced by the decimal it prints as, the rest of it untouched."""
    return e.xreplace({x: sp.nsimplify(x, rational=True) for x in e.atoms(sp.Float)})


def _derive(f, t, conjugate_expr, report=None) -> dict:
    """The analysis proper, as plain data (sympy expressions and floats); run by :func:`_serve`."""
    progress = _Progress(report)
    try:
        facts = _analyse(f, t, conjugate_expr, progress)
    except ValueError:
        raise
    except Exception as exc:  # sympy's internal errors outside the steps that fall back
        raise ValueError(f"could not analyse f = {f} (while {progress.stage}): {type(exc).__name__}: {exc}") from exc
    facts["notes"] = tuple(progress.notes)
    return facts


def _analyse(f, t, conjugate_expr, progress) -> dict:
    progress.stage = "checking f(1) = 0"
    _check_at_one(f, t, progress)
    progress.stage = "splitting f into smooth pieces"
    pieces = _try(_pieces, f, t)
    progress.stage = "locating kinks and singularities"
    if pieces is not None:
        points = sorted({float(p[1]) for p in pieces[1:]})
        if not f.has(*_NONSMOOTH):
            points = sorted(set(points) | set(_special_points(f, t, progress)))
    else:
        points = _special_points(f, t, progress)
    try:
        f_raw = _lambdify(f, t)
    except Exception as exc:
        raise ValueError(f"f = {f} cannot be evaluated numerically: {exc}") from None
    progress.stage = "checking that f is finite and real on (0, ∞)"
    grid = _grid(points)
    with np.errstate(all="ignore"):
        vals = f_raw(grid)
    ok = _finite_mask(f, t, grid, vals, progress)

    progress.stage = "differentiating f"
    fp = sp.diff(f, t)
    f2_raw = sp.diff(fp, t)
    f2_ae = _off_kinks(f2_raw)
    progress.stage = "looking for a point where f is not convex"
    problem = _refute_convexity(f, t, f2_ae, grid, vals, ok, progress)
    if problem is not None:
        raise ValueError(f"f is not convex on (0, ∞): {problem}")
    progress.stage = "proving convexity (f'' ≥ 0 on every smooth piece, slopes increasing at every kink)"
    verdict = None if pieces is None else _try(_prove_convex, f, t, pieces)
    if isinstance(verdict, str):
        raise ValueError(f"f is not convex on (0, ∞): {verdict}")
    check = "symbolic" if verdict is True else "numeric"
    if check == "numeric":
        progress.notes.append(
            "convexity was checked numerically over (0, ∞) on a grid from 1e-300 to 1e300 and around every "
            "kink and singularity (sympy could not decide f'' ≥ 0)"
        )

    first = pieces[0][0] if pieces else f
    last = pieces[-1][0] if pieces else f
    f0 = _limit(progress, "f(0+)", first, t, 0, "+")
    f_inf = _limit(progress, "f∞ = lim f(t)/t", last / t, t, sp.oo, "-")
    f_at_inf = _limit(progress, "lim f(t) at ∞", last, t, sp.oo, "-")
    fprime0 = _limit(progress, "f'(0+)", sp.diff(first, t), t, 0, "+")

    progress.stage = "taking the one-sided derivatives at 1"
    e_left, e_right, interior = _at_one(pieces, t) if pieces else (None, None, False)

    def derivative_at_1(e):
        return _float(_side(sp.diff(e, t), t, sp.Integer(1), "+"))

    left = _try(derivative_at_1, e_left) if e_left is not None else None
    right = _try(derivative_at_1, e_right) if e_right is not None else None
    left = _one_sided(f, t, "-") if left is None else left
    right = _one_sided(f, t, "+") if right is None else right
    tilt = 0.5 * (left + right)
    if not np.isfinite(tilt):
        raise ValueError(f"f'(1) is not finite for f = {f}")
    # Convex f with f(1) = 0: (f(t) − f(1))/(t − 1) is nondecreasing, so f'(1−) ≤ f'(1+) ≤ f∞,
    # f(0) ≥ −f'(1−) and f'(0+) ≤ f'(1−); in particular f∞ > −∞.
    slack = 1e-9 * (1 + abs(left) + abs(right))
    for bad, what in (
        (left > right + slack, f"f'(1−) = {left:.6g} > f'(1+) = {right:.6g}"),
        (f_inf < right - slack, f"f∞ = lim f(t)/t = {f_inf:.6g} < f'(1+) = {right:.6g}, while (f(t) − f(1))/(t − 1) is nondecreasing for convex f"),
        (f0 < -left - slack, f"f(0+) = {f0:.6g} < −f'(1−) = {-left:.6g}"),
        (fprime0 > left + slack, f"f'(0+) = {fprime0:.6g} > f'(1−) = {left:.6g}"),
    ):
        if bad:
            raise ValueError(f"f is not convex on (0, ∞): {what}")
    smooth_at_1 = abs(left - right) <= 1e-12 * (1 + abs(left))

    progress.stage = "computing f''(1) and the Taylor series at 1"
    f2_at_1, series = float("nan"), ()
    if smooth_at_1 and e_left is not None and e_left is e_right:
        d2 = _try(lambda: _float(_side(sp.diff(e_left, t, 2), t, sp.Integer(1), "+")))
        f2_at_1 = float("nan") if d2 is None else d2
        if interior:

            def taylor():
                coeffs, d = [], sp.diff(e_left, t, 2)
                for k in range(2, _SERIES_ORDER + 1):
                    coeffs.append(_float(d.subs(t, 1)) / float(sp.factorial(k)))
                    d = sp.diff(d, t)
                return tuple(coeffs) if all(np.isfinite(coeffs)) else ()

            series = _try(taylor) or ()
    elif smooth_at_1 and e_left is not None:  # a kink of f'' at 1 at most: f''(1) where both sides agree
        sides = [_try(lambda e=e: _float(_side(sp.diff(e, t, 2), t, sp.Integer(1), "+"))) for e in (e_left, e_right)]
        if None not in sides and sides[0] == sides[1]:
            f2_at_1 = sides[0]
    elif smooth_at_1:
        v = _try(_hp, _off_kinks(f2_raw), t, sp.Integer(1))
        f2_at_1 = float("nan") if v is None else float(v)

    progress.stage = "simplifying f''"
    f2 = _try(sp.simplify, f2_raw)
    f2 = f2_raw if f2 is None else f2

    progress.stage = "solving f'(t) = y for the conjugate"
    if conjugate_expr is not None:
        conj_expr, inverse = conjugate_expr, None
        end = _float(conjugate_expr.subs(Y, sp.nsimplify(f_inf))) if np.isfinite(f_inf) else float("inf")
    else:
        found = None
        if pieces is not None and len(pieces) == 1:
            found = _try(_conjugate, f, fp, t, f0, fprime0, f_inf)
        conj_expr, end, inverse = found if found is not None else (None, None, None)
        end = float("inf") if end is None else end
        if conj_expr is None and pieces is not None and len(pieces) == 1:
            # (A generator with kinks has no closed-form attempt: conjugate_method says "numeric".)
            progress.notes.append("f* and (f')^-1 are computed by bisection on f' (sympy did not solve f'(t) = y)")
    progress.stage = "looking for kinks where f' jumps"
    kinks = None if pieces is None else _try(_jumps, pieces, t)
    progress.stage = "looking for a piece on which f is linear"
    linear_on = _linear_piece(pieces, t) if pieces is not None else _try(_linear_run, f2_ae, t, grid, _off_kinks(fp), progress)
    if inverse is None and conjugate_expr is None and pieces is not None and len(pieces) > 1 and linear_on is None:
        progress.stage = "solving f'(t) = y on each smooth piece"
        inverse = _try(_piecewise_inverse, pieces, t)
    progress.stage = "compiling"
    return dict(
        expr=f, t=t, fprime_expr=fp, fsecond_expr=f2, f0=f0, f_inf=f_inf, f_at_inf=f_at_inf, fprime0=fprime0,
        f2_at_1=f2_at_1, tilt=tilt, convexity_check=check, conjugate_expr=conj_expr, conjugate_at_end=end,
        fprime_inv_expr=inverse, series=series, linear_on=linear_on, kinks=kinks,
    )


def _jumps(pieces, t):
    """The points b between pieces where f'(b⁻) < f'(b⁺)."""
    out = []
    for (e1, _, b), (e2, _, _) in zip(pieces, pieces[1:]):
        d1, d2 = _side(sp.diff(e1, t), t, b, "-"), _side(sp.diff(e2, t), t, b, "+")
        if sp.simplify(d2 - d1) != 0:
            out.append(float(b))
    return tuple(out)


def _linear_piece(pieces, t):
    """(lo, hi) of the first smooth piece on which f'' ≡ 0 (f' constant there), or None: f' is then
    strictly increasing on (0, ∞), since f'' of an analytic piece vanishes only at isolated points."""
    for e, lo, hi in pieces:
        d2 = sp.diff(e, t, 2)
        if d2 == 0 or _try(lambda: sp.simplify(d2) == 0):
            return float(lo), float(hi)
    return None


def _linear_run(f2, t, grid, fp, progress):
    """As :func:`_linear_piece` where f was not split into pieces: a run of grid points over which f'
    does not change in floating point and f'' is 0 in 30-digit arithmetic at its middle (f' of
    tanh(t − 1) stops changing in floating point past t ≈ 20, but f'' > 0 there)."""
    with np.errstate(all="ignore"):
        d = _lambdify(fp, t)(grid)
    same = np.flatnonzero(np.isfinite(d[:-1]) & (d[1:] == d[:-1]))
    if not same.size:
        return None
    runs = np.split(same, np.flatnonzero(np.diff(same) > 1) + 1)
    for r in sorted(runs, key=len, reverse=True)[:8]:
        lo, hi = float(grid[r[0]]), float(grid[r[-1] + 1])
        mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
        progress.stage = f"checking whether f is linear near t = {mid:.6g}"
        v = _try(_hp, f2, t, mid)
        if v is not None and v == 0:
            return lo, hi
    return None


def _piecewise_inverse(pieces, t):
    r"""(f')⁻¹ of a generator with kinks, as a Piecewise in :data:`Y` on :math:`(f'(0^+), f_\infty)`: on each
    smooth piece (b, b') the root of e'(t) = y that inverts e' at points of the piece, for y in
    (e'(b⁺), e'(b'⁻)); at a kink b, b itself for y in [f'(b⁻), f'(b⁺)]. None where a piece has no such root."""
    branches = []
    for k, (e, lo, hi) in enumerate(pieces):
        de = sp.diff(e, t)
        inv = _piece_inverse(de, t, lo, hi)
        if inv is None:
            return None
        if k == len(pieces) - 1:
            branches.append((inv, True))
            break
        branches.append((inv, Y < _side(de, t, hi, "-")))
        branches.append((hi, Y <= _side(sp.diff(pieces[k + 1][0], t), t, hi, "+")))
    return sp.Piecewise(*branches)


def _piece_inverse(de, t, lo, hi):
    """The root s(y) of e'(t) = y that gives back t at three points of (lo, hi), or None."""
    a = float(lo)
    xs = [a + 0.5, a + 2.0, a + 10.0] if hi == sp.oo else [a + (float(hi) - a) * w for w in (0.2, 0.5, 0.8)]
    fd = _lambdify(de, t)
    ys = [float(fd(np.array(x))) for x in xs]
    if not all(np.isfinite(ys)) or len(set(ys)) < 3:
        return None
    sols = sp.solve(sp.Eq(de, Y), t, simplify=False, check=False)
    for s in sols:
        try:
            inv = _lambdify(s, Y)
            if all(abs(float(inv(np.array(y))) - x) <= 1e-9 * (1 + x) for x, y in zip(xs, ys)):
                return s
        except Exception:  # a root numpy cannot evaluate: the next one
            continue
    return None


def _compile(facts) -> SymbolicInfo:
    """:class:`SymbolicInfo` from the derived facts: the numeric callables, built in the caller."""
    f, t, fp, f2 = facts["expr"], facts["t"], facts["fprime_expr"], facts["fsecond_expr"]
    f0, f_inf, f_at_inf, fprime0 = facts["f0"], facts["f_inf"], facts["f_at_inf"], facts["fprime0"]
    tilt, series, end = facts["tilt"], facts["series"], facts["conjugate_at_end"]
    conj_expr, inverse = facts["conjugate_expr"], facts["fprime_inv_expr"]
    try:
        f_raw = _lambdify(f, t)
        fp_ae = _off_kinks(fp)
        fprime_num = _endpoints(_repaired(_lambdify(fp_ae, t), _exact(fp_ae, t)), fprime0, f_inf)
        fsecond_num = _lambdify(_off_kinks(f2), t)
    except Exception as exc:
        raise ValueError(f"f = {f} or its derivatives cannot be evaluated numerically: {exc}") from None
    f_plain = _endpoints(f_raw, f0, f_at_inf)
    f_num = _endpoints(_repaired(f_raw, _exact(f, t)), f0, f_at_inf)
    tilde_exact = _exact_tilde(facts)

    def f_tilde(x, _f=f_plain, _c=tilt, _series=series, _finf=f_inf):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            out = _f(x) - _c * (x - 1.0)
            out = np.where(np.isinf(x), np.inf if _finf - _c > 0 else _f(x), out)
            near = np.zeros(x.shape, dtype=bool)
            if _series:
                h = x - 1.0
                near = np.abs(h) < SERIES_RADIUS
                if np.any(near):
                    acc = np.zeros_like(h)
                    for a in reversed(_series):
                        acc = (acc + a) * h
                    out = np.where(near, acc * h, out)
            # Where the printed form overflows on the way (f is finite on (0, ∞)): evaluated again.
            bad = ~np.isfinite(out) & (x > 0) & np.isfinite(x) & ~near
            if np.any(bad):
                out[bad] = tilde_exact(x[bad])
        return np.maximum(out, 0.0)  # f̃ ≥ 0 by convexity; rounding must not make it negative

    def fprime_tilde(x):
        return fprime_num(x) - tilt

    domain = (-np.inf, f_inf, bool(np.isfinite(end)))
    numeric_tilde = numeric_conjugate(f_tilde, fprime_tilde, fprime0 - tilt, f0 + tilt, f_inf - tilt)
    if conj_expr is not None:
        conj_fn = _piecewise_callable(conj_expr, fprime0, f0, f_inf, end)

        def conjugate_tilde(y):
            return conj_fn(np.asarray(y, dtype=np.float64) + tilt) - tilt

    else:
        conjugate_tilde = numeric_tilde
    if inverse is not None:
        inv_num = _lambdify(inverse, Y)

        def fprime_inv(y):
            y = np.asarray(y, dtype=np.float64)
            inside = (y > fprime0) & (y < f_inf)
            # Outside (f'(0+), f∞) the sup of yt − f(t) sits at t = 0 or runs off to ∞.
            return np.where(inside, inv_num(np.where(inside, y, tilt)), np.where(y <= fprime0, 0.0, np.inf))

    else:

        def fprime_inv(y):
            y = np.asarray(y, dtype=np.float64)
            ts = _bisect_fprime(fprime_num, y)
            return np.where(y <= fprime0, 0.0, np.where(y >= f_inf, np.inf, ts))

    return SymbolicInfo(
        expr=f, t=t, fprime_expr=fp, fsecond_expr=f2, f0=f0, f_inf=f_inf, f_at_inf=f_at_inf, fprime0=fprime0,
        f2_at_1=facts["f2_at_1"], tilt=tilt, convexity_check=facts["convexity_check"], conjugate_expr=conj_expr,
        conjugate_domain=domain, conjugate_at_end=end, fprime_inv_expr=inverse, linear_on=facts["linear_on"], kinks=facts["kinks"], f=f_num, fprime=fprime_num,
        fsecond=fsecond_num, f_tilde=f_tilde, conjugate_tilde=conjugate_tilde, fprime_inv=fprime_inv, series=series,
    )


def _piecewise_callable(conj_expr, fprime0, f0, f_inf, end):
    """The conjugate's Piecewise as a vectorised callable, each branch evaluated only where it holds."""
    branches = conj_expr.args if isinstance(conj_expr, sp.Piecewise) else ((conj_expr, True),)
    # The branch on (f'(0+), f∞) is the one in y; the others are the constants handled below.
    interior = _lambdify(next((e for e, _ in branches if e.free_symbols), branches[0][0]), Y)

    def call(y):
        y = np.asarray(y, dtype=np.float64)
        inside = (y > fprime0) & (y < f_inf)
        out = interior(np.where(inside, y, 0.5 if not np.isfinite(f_inf) else f_inf - 1.0))
        out = np.where(inside, out, np.nan)
        out = np.where(y <= fprime0, -f0, out)
        out = np.where(y == f_inf, end, out)
        out = np.where(y > f_inf, np.inf, out)
        return out

    return call


# ---------------------------------------------------------------------------------------------
# The analysis process (see the module docstring)
#
# Protocol on a pair of pipes, each message a length-prefixed pickle. Caller → process: (f, t,
# conjugate_expr). Process → caller: ("stage", text) as the analysis goes, then ("ok", facts) or
# ("error", message). The process serves one analysis at a time and is reused; a caller that runs
# out of time kills it, and the next analysis starts a fresh one.

_FACTS: dict = {}  # derived facts by generator: the analysis is deterministic, so they can be kept
_FACTS_LOCK = threading.Lock()
_IDLE: list = []  # analysis processes waiting for work
_IDLE_LOCK = threading.Lock()
_START_LIMIT = 120.0  # seconds for a new process to import sympy and say it is ready (not the analysis's)


def _send(stream, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class _Process:
    """One analysis process, with a thread that reads its messages into a queue."""

    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above mentored/
        code = "import sys; sys.path[:0] = sys.argv[1:]; from mentored.divergences.symbolic import _serve; _serve()"
        # A fixed hash seed: sympy's sets iterate in the same order in every process, so that the
        # same generator takes the same path (and the same step budgets) every time.
        env = dict(os.environ, PYTHONHASHSEED="0")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, root, *[p for p in sys.path if p]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True,
        )
        self.messages = queue.Queue()
        threading.Thread(target=self._read, name="mentored-symbolic-reader", daemon=True).start()
        try:
            kind, _ = self._next(time.monotonic() + _START_LIMIT, "starting")
        except _OutOfTime:
            raise RuntimeError(f"the sympy analysis process did not start within {_START_LIMIT:g} s") from None
        if kind != "ready":
            raise RuntimeError(f"the sympy analysis process did not start (it said {kind!r})")

    def _read(self):
        try:
            while True:
                self.messages.put(_receive(self.proc.stdout))
        except Exception:  # EOF or a broken pipe: the process is gone
            self.proc.stdout.close()
            self.messages.put(("gone", None))

    def _next(self, deadline, stage):
        """The next message, or the process killed and _OutOfTime once ``deadline`` (may be ∞) passes."""
        left = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        try:
            return self.messages.get(timeout=left)
        except queue.Empty:
            self.kill()
            raise _OutOfTime(stage) from None

    def analyse(self, request, timeout):
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        _send(self.proc.stdin, request)
        stage = "starting"
        while True:
            kind, value = self._next(deadline, stage)
            if kind == "stage":
                stage = value
            elif kind == "ok":
                return value
            elif kind == "error":
                raise ValueError(value)
            else:
                code = self.proc.wait()
                raise RuntimeError(f"the sympy analysis process ended (exit status {code}) while {stage}")

    def kill(self):
        try:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
        except OSError:
            pass


class _OutOfTime(Exception):
    def __init__(self, stage):
        super().__init__(stage)
        self.stage = stage


def _acquire() -> _Process:
    with _IDLE_LOCK:
        if _IDLE:
            return _IDLE.pop()
    return _Process()


def _release(worker: _Process):
    with _IDLE_LOCK:
        _IDLE.append(worker)


def _in_analysis_process(request, timeout) -> dict:
    """The facts of ``request`` from an analysis process, killed if ``timeout`` passes first."""
    worker = _acquire()
    try:
        facts = worker.analyse(request, timeout)
    except _OutOfTime as exc:
        raise SymbolicTimeoutError(
            f"f = {request[0]} was neither accepted nor refused within the time limit of {timeout:g} s "
            f"(it was {exc.stage}); pass a larger timeout= to wait longer"
        ) from None
    except ValueError:
        _release(worker)
        raise
    _release(worker)
    return facts


@atexit.register
def _stop_idle():
    with _IDLE_LOCK:
        while _IDLE:
            _IDLE.pop().kill()


def _serve():
    """The analysis process's loop: one request at a time from stdin, messages to stdout."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    # Whatever sympy or numpy might print must not land in the protocol's stream.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    warnings.simplefilter("ignore")
    # Sympy imports much of itself on first use: a first analysis, before the caller's clock starts.
    t = sp.Symbol("t", positive=True)
    _derive((t - 1) ** 2 / t, t, None)
    _send(replies, ("ready", None))
    while True:
        try:
            f, t, conjugate_expr = _receive(requests)
        except EOFError:
            return
        try:
            reply = ("ok", _derive(f, t, conjugate_expr, report=lambda s: _send(replies, ("stage", s))))
        except ValueError as exc:
            reply = ("error", str(exc))
        except Exception as exc:
            reply = ("error", f"could not analyse f = {f}: {type(exc).__name__}: {exc}")
        try:
            _send(replies, reply)
        except Exception as exc:  # facts that do not pickle: say so rather than die
            _send(replies, ("error", f"could not analyse f = {f}: its result could not be returned ({exc})"))
