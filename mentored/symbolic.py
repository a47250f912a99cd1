r"""Divergences from a sympy generator: validation, derived quantities, compiled numeric forms.

:func:`from_sympy` takes :math:`f` as a sympy expression in a positive symbol :math:`t` and returns a
:class:`~mentored.Divergence` that the solver, :class:`~mentored.MentoredPath`, :func:`~mentored.certify`
and the oracle accept wherever a built-in name is accepted. It checks the two conditions of docs/theory.md §1,

.. math::

    f(1) = 0, \qquad f \text{ convex on } (0, \infty),

symbolically where sympy decides :math:`f'' \ge 0` (or :math:`f` is a positive combination of
:math:`|a t + b|` and a part with :math:`f'' \ge 0`), and otherwise by a dense numeric check on a
log-spaced grid, which is then reported (``convexity_check == "numeric"`` and a
:class:`NumericCheckWarning`). It derives :math:`f', f''`, :math:`f(0^+)`,
:math:`f_\infty = \lim f(t)/t`, :math:`f''(1)`, a subgradient :math:`c \in \partial f(1)` (the tilt of
the core, generators.hpp), the convex conjugate

.. math::

    f^*(y) = \sup_{t \ge 0} \bigl(y t - f(t)\bigr), \qquad
    \operatorname{dom} f^* = (-\infty, f_\infty) \text{ or } (-\infty, f_\infty],

symbolically where sympy solves the stationarity equation :math:`f'(t) = y` (else by bisection on
:math:`f'`), the inverse derivative :math:`(f')^{-1}`, and the swapped generator :math:`t f(1/t)`
(:math:`D_{f^\diamond}(\pi\|p) = D_f(p\|\pi)`). Each is compiled to a vectorised numpy callable.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sympy as sp

from .divergences import NumericCheckWarning

__all__ = ["NumericCheckWarning", "SymbolicInfo", "from_sympy", "analyse"]


Y = sp.Symbol("y", real=True)

# Where numeric checks look: 12 decades each side of 1, denser near 1 where f is second order.
_GRID = np.unique(np.concatenate([np.logspace(-6, 6, 6001), 1.0 + np.linspace(-0.5, 0.5, 2001)]))
_SERIES_RADIUS = 1e-3  # |t − 1| below which the tilted f is summed from its Taylor series
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
    conjugate_expr : sympy or None
        :math:`f^*(y)` as a ``Piecewise`` in ``y`` (including ``-f(0)`` below :math:`f'(0^+)` and
        ``oo`` outside the domain), or None when sympy could not solve :math:`f'(t) = y`.
    conjugate_domain : (float, float, bool)
        ``(lo, hi, hi_included)``: :math:`\operatorname{dom} f^*`; ``lo`` is always ``-inf``.
    fprime_inv_expr : sympy or None
        :math:`(f')^{-1}(y)` on :math:`(f'(0^+), f_\infty)`, or None.
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


def _lambdify(expr, sym):
    """A vectorised float callable; warnings of intermediate NaNs are the callers' business."""
    fn = sp.lambdify(sym, expr, modules="numpy")

    def call(x):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            out = fn(x)
        return np.broadcast_to(np.asarray(out, dtype=np.float64), x.shape).copy()

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


def _numeric_convexity(f_num) -> str | None:
    """None if f is convex on the grid to rounding, else a description of the violation."""
    t = _GRID
    v = f_num(t)
    if not np.all(np.isfinite(v)):
        bad = t[~np.isfinite(v)][0]
        return f"f is not finite at t = {bad:.6g}"
    slopes = np.diff(v) / np.diff(t)
    drop = slopes[:-1] - slopes[1:]  # > 0 where the slope decreases
    scale = 1e-9 * (np.abs(slopes[:-1]) + np.abs(slopes[1:]) + 1e-300) + 1e-12 * (np.abs(v[1:-1]) + 1) / np.diff(t)[1:]
    worst = int(np.argmax(drop - scale))
    if drop[worst] > scale[worst]:
        return f"the slope of f decreases near t = {t[worst + 1]:.6g} (from {slopes[worst]:.6g} to {slopes[worst + 1]:.6g})"
    return None


# ---------------------------------------------------------------------------------------------
# Symbolic steps


def _kink_split(f, t):
    """f = Σ c_k |a_k t + b_k| (c_k > 0) + smooth rest, or None if f has other non-smooth parts."""
    kinks, rest = [], sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(f)):
        coeff, factors = term.as_coeff_mul()
        absf = [x for x in factors if isinstance(x, sp.Abs)]
        if not absf:
            rest += term
            continue
        others = sp.Mul(*[x for x in factors if not isinstance(x, sp.Abs)])
        inner = absf[0].args[0]
        if len(absf) != 1 or others.free_symbols or not (coeff * others).is_positive:
            return None
        if sp.degree(inner, t) != 1 or not inner.is_polynomial(t):
            return None
        kinks.append((coeff * others, inner))
    if rest.has(sp.Abs, sp.Max, sp.Min, sp.Piecewise, sp.sign, sp.Heaviside):
        return None
    return kinks, rest


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


def _convexity(f, t, f_num) -> str:
    """'symbolic' or 'numeric'; ValueError when f is not convex."""
    split = _kink_split(f, t)
    if split is not None:
        _, smooth = split
        verdict = _nonnegative(sp.diff(smooth, t, 2), t)
        if verdict is True:
            return "symbolic"
        if verdict is False:
            raise ValueError(f"f is not convex on (0, ∞): f''(t) = {sp.simplify(sp.diff(smooth, t, 2))} is negative")
    problem = _numeric_convexity(f_num)
    if problem is not None:
        raise ValueError(f"f is not convex on (0, ∞): {problem}")
    return "numeric"


def _one_sided(fp, t, side):
    try:
        return _float(sp.limit(fp, t, 1, side))
    except Exception:
        return float("nan")


def _conjugate(f, fp, t, f0, fprime0, f_inf):
    """(conjugate Piecewise in y, value at f∞, inverse derivative) or (None, ·, None)."""
    fd = _lambdify(fp, t)
    samples = [s for s in (0.25, 1.0, 3.0) if np.isfinite(fd(np.array(s)))]
    try:
        sols = sp.solve(sp.Eq(fp, Y), t)
    except Exception:
        return None, None, None
    inverse = None
    for s in sols:
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


def analyse(f_expr, t, *, conjugate_expr=None) -> SymbolicInfo:
    """Validate ``f_expr`` as a generator and derive everything :class:`SymbolicInfo` lists.

    ``conjugate_expr`` (a ``Piecewise`` in :data:`Y`) overrides the derivation, for generators whose
    conjugate sympy cannot solve but which is known and checked elsewhere (``tv``: proofs/).
    """
    if not isinstance(t, sp.Symbol) or t.is_positive is not True:
        raise ValueError("t must be a sympy Symbol declared positive, e.g. sympy.Symbol('t', positive=True)")
    f = sp.sympify(f_expr)
    extra = f.free_symbols - {t}
    if extra:
        raise ValueError(f"f has free symbols other than t: {sorted(map(str, extra))}")
    at1 = sp.simplify(f.subs(t, 1))
    if at1 != 0:
        try:
            near = abs(complex(at1.evalf())) < 1e-300
        except TypeError:
            near = False
        if not near:
            raise ValueError(f"f(1) = 0 fails: f(1) = {at1}")
    f_raw = _lambdify(f, t)
    # Finite and real on (0, ∞): checked on the grid (a symbolic domain check is rarely decidable).
    with np.errstate(all="ignore"):
        vals = f_raw(_GRID)
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"f must be finite and real on (0, ∞); it is not at t = {_GRID[~np.isfinite(vals)][0]:.6g}")
    check = _convexity(f, t, f_raw)
    if check == "numeric":
        warnings.warn(
            f"convexity of f = {f} was checked numerically on a grid over [1e-6, 1e6] (sympy could not decide f'' ≥ 0)",
            NumericCheckWarning,
            stacklevel=3,
        )
    fp = sp.diff(f, t)
    f2 = sp.simplify(sp.diff(f, t, 2))
    try:
        f0 = _float(sp.limit(f, t, 0, "+"))
        f_inf = _float(sp.limit(f / t, t, sp.oo))
        f_at_inf = _float(sp.limit(f, t, sp.oo))
        fprime0 = _float(sp.limit(fp, t, 0, "+"))
    except (ValueError, NotImplementedError) as exc:
        raise ValueError(f"could not determine the limits f(0+), f∞ = lim f(t)/t of f = {f}: {exc}") from None
    left, right = _one_sided(fp, t, "-"), _one_sided(fp, t, "+")
    tilt = 0.5 * (left + right)
    if not np.isfinite(tilt):
        raise ValueError(f"f'(1) is not finite for f = {f}")
    smooth_at_1 = left == right
    f2_at_1 = _one_sided(f2, t, "+") if smooth_at_1 else float("nan")

    fprime_num = _endpoints(_lambdify(fp, t), fprime0, f_inf)
    f_num = _endpoints(f_raw, f0, f_at_inf)
    fsecond_num = _lambdify(f2, t)
    series = ()
    if smooth_at_1:
        try:
            coeffs = []
            d = sp.diff(f, t, 2)
            for k in range(2, _SERIES_ORDER + 1):
                coeffs.append(_float(d.subs(t, 1)) / float(sp.factorial(k)))
                d = sp.diff(d, t)
            if all(np.isfinite(coeffs)):
                series = tuple(coeffs)
        except (ValueError, TypeError):
            series = ()

    def f_tilde(x, _f=f_num, _c=tilt, _series=series, _finf=f_inf):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            out = _f(x) - _c * (x - 1.0)
            out = np.where(np.isinf(x), np.inf if _finf - _c > 0 else _f(x), out)
            if _series:
                h = x - 1.0
                near = np.abs(h) < _SERIES_RADIUS
                if np.any(near):
                    acc = np.zeros_like(h)
                    for a in reversed(_series):
                        acc = (acc + a) * h
                    out = np.where(near, acc * h, out)
        return np.maximum(out, 0.0)  # f̃ ≥ 0 by convexity; rounding must not make it negative

    def fprime_tilde(x):
        return fprime_num(x) - tilt

    if conjugate_expr is not None:
        conj_expr, inverse = conjugate_expr, None
        end = _float(conjugate_expr.subs(Y, sp.nsimplify(f_inf))) if np.isfinite(f_inf) else float("inf")
    else:
        conj_expr, end, inverse = _conjugate(f, fp, t, f0, fprime0, f_inf)
        end = float("inf") if end is None else end
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
        f2_at_1=f2_at_1, tilt=tilt, convexity_check=check, conjugate_expr=conj_expr, conjugate_domain=domain,
        conjugate_at_end=end, fprime_inv_expr=inverse, f=f_num, fprime=fprime_num, fsecond=fsecond_num,
        f_tilde=f_tilde, conjugate_tilde=conjugate_tilde, fprime_inv=fprime_inv, series=series,
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


def from_sympy(f_expr, t, name=None, *, _conjugate_expr=None):
    r"""A :class:`~mentored.Divergence` from a sympy generator :math:`f(t)`, validated and compiled.

    Parameters
    ----------
    f_expr : sympy expression
        :math:`f(t)`, convex on :math:`(0, \infty)` with :math:`f(1) = 0`.
    t : sympy.Symbol
        Declared positive.
    name : str, optional
        Defaults to ``str(f_expr)``.

    Raises
    ------
    ValueError
        Naming the condition that failed: ``f(1) = 0``, convexity, finiteness on :math:`(0, \infty)`,
        or limits sympy cannot determine.

    Examples
    --------
    >>> import sympy as sp, mentored
    >>> t = sp.Symbol("t", positive=True)
    >>> tri = mentored.Divergence.from_sympy((t - 1)**2 / (t + 1), t, name="triangular")
    >>> tri.f_inf, tri.convexity_check
    (1.0, 'symbolic')
    """
    from .divergences import Divergence

    info = analyse(f_expr, t, conjugate_expr=_conjugate_expr)
    return Divergence(
        name=str(f_expr) if name is None else str(name),
        f=info.f,
        fprime=info.fprime,
        f_inf=info.f_inf,
        f0=info.f0,
        _info=info,
    )
