r"""Rigorous evaluation of certificates: :math:`D_f` and the dual bound :math:`g(\lambda, \mu)` proved.

The engine of :func:`mentored.certify` and :func:`mentored.solver.certificate.dual_bound` with
``exact=True`` (the guarantees are stated there). A number is a Fraction (exact) or an mpmath
interval (``ivmpf``, outward rounded, 128 bits); sympy expressions of :math:`f`, a subgradient of
:math:`f` and :math:`f^*` are compiled into closures that stay in Fractions while the operations are
rational (+, −, ×, ÷, integer powers, |·|, exact square roots) and switch to intervals at the
first transcendental or irrational step (log, exp, √ of a non-square, fractional powers, π, e).
Upper and lower ends of intervals are read back as exact dyadic Fractions, so that every bound is
rounded in the safe direction.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


__all__ = ["bound_text", "certificate_fields", "dual_upper_bound", "refuse_nonfinite"]

_PREC = 128
_IV = None


def _iv():
    global _IV
    if _IV is None:
        from mpmath.ctx_iv import MPIntervalContext

        _IV = MPIntervalContext()  # a private context: the global mpmath.iv precision is left alone
        _IV.prec = _PREC
    return _IV


class _Unbounded(Exception):
    """The value is +∞ (a conjugate outside its domain) or not bounded above by the enclosure."""


class _Undecided(Exception):
    """An evaluation the interval enclosure cannot carry out or decide (no valid bound results)."""


_FAILURES = (_Unbounded, _Undecided, ZeroDivisionError, ValueError, ArithmeticError, TypeError)


def _to_iv(x):
    if isinstance(x, Fraction):
        iv = _iv()
        return iv.mpf(x.numerator) / x.denominator if x.denominator != 1 else iv.mpf(x.numerator)
    return x


_CAP = 4096  # |exponents| beyond which an end is replaced by a cruder bound in the safe direction


def _mpf_to_frac(t, upper):
    """The mpf tuple t as an exact Fraction, or a bound of it on the safe side (``upper``: ≥ t)."""
    from mpmath import libmp

    sign, man, exp, bc = t
    if not man:
        if t == libmp.fzero:
            return Fraction(0)
        if t == libmp.finf:
            return math.inf
        if t == libmp.fninf:
            return -math.inf
        raise _Undecided("NaN in an interval")
    mag = exp + bc  # 2^(mag−1) ≤ |t| < 2^mag
    if mag > _CAP:  # huge: ±∞ on the open side, ±2^_CAP on the other
        if sign:
            return -Fraction(2) ** _CAP if upper else -math.inf
        return math.inf if upper else Fraction(2) ** _CAP
    if mag < -_CAP:  # tiny: 0 or ±2^−_CAP
        if sign:
            return Fraction(0) if upper else -Fraction(1, 2**_CAP)
        return Fraction(1, 2**_CAP) if upper else Fraction(0)
    v = Fraction(man << exp) if exp >= 0 else Fraction(man, 1 << -exp)
    return -v if sign else v


def _hi(x):
    """An exact upper bound (Fraction or math.inf) of a Fraction or an interval."""
    return x if isinstance(x, Fraction) else _mpf_to_frac(x._mpi_[1], True)


def _lo(x):
    return x if isinstance(x, Fraction) else _mpf_to_frac(x._mpi_[0], False)


def _le(u, v):
    """u ≤ v: True, False, or None where the enclosures overlap."""
    if isinstance(u, Fraction) and isinstance(v, Fraction):
        return u <= v
    if _hi(u) <= _lo(v):
        return True
    if _lo(u) > _hi(v):
        return False
    return None


def _lt(u, v):
    if isinstance(u, Fraction) and isinstance(v, Fraction):
        return u < v
    if _hi(u) < _lo(v):
        return True
    if _lo(u) >= _hi(v):
        return False
    return None


def _eq(u, v):
    if isinstance(u, Fraction) and isinstance(v, Fraction):
        return u == v
    if _hi(u) < _lo(v) or _hi(v) < _lo(u):
        return False
    return None


def _hull(vals):
    if all(isinstance(v, Fraction) for v in vals) and len(set(vals)) == 1:
        return vals[0]
    lo, hi = min(_lo(v) for v in vals), max(_hi(v) for v in vals)
    if hi == math.inf:
        raise _Unbounded
    iv = _iv()
    return iv.mpf([_to_iv(lo).a if lo != -math.inf else "-inf", _to_iv(hi).b])


def _frac_sqrt(x):
    """√x as a Fraction when x is the square of a rational, else None."""
    if x < 0:
        raise _Undecided("square root of a negative number")
    n, d = x.numerator, x.denominator
    rn, rd = math.isqrt(n), math.isqrt(d)
    return Fraction(rn, rd) if rn * rn == n and rd * rd == d else None


def _add(u, v):
    return u + v if isinstance(u, Fraction) and isinstance(v, Fraction) else _to_iv(u) + _to_iv(v)


def _mul(u, v):
    return u * v if isinstance(u, Fraction) and isinstance(v, Fraction) else _to_iv(u) * _to_iv(v)


def _pow(b, e):
    """b**e for a number b and a sympy Rational e."""
    k, m = int(e.p), int(e.q)
    if m == 1:
        return b**k if isinstance(b, Fraction) else _to_iv(b) ** k
    if _lo(b) < 0:
        raise _Undecided("fractional power of a number that may be negative")
    if m == 2 and isinstance(b, Fraction):
        s = _frac_sqrt(b)
        if s is not None:
            return s**k
    iv = _iv()
    bi = _to_iv(b)
    if m == 2:
        return iv.sqrt(bi) ** k
    if _lo(bi) == 0:
        if k < 0:
            raise _Undecided("negative power of an interval touching 0")
        hi = _hi(bi)
        return _hull([Fraction(0), Fraction(0) if hi == 0 else iv.exp(iv.log(_to_iv(hi)) * k / m)])
    return iv.exp(iv.log(bi) * k / m)


def _compile(expr, sym):
    """A closure evaluating the sympy ``expr`` at a Fraction value of ``sym`` (Fraction or interval).

    Raises NotImplementedError (at compile time) for functions the rigorous mode does not enclose."""
    import sympy as sp

    iv = _iv()

    def c(e):
        if e == sym:
            return lambda x: x
        if e is sp.oo:

            def unbounded(x):
                raise _Unbounded

            return unbounded
        if e.is_Rational:
            v = Fraction(int(e.p), int(e.q))
            return lambda x: v
        if e.is_Float:
            r = sp.Rational(e)  # the Float's exact binary value
            v = Fraction(int(r.p), int(r.q))
            return lambda x: v
        if e is sp.pi:
            return lambda x: iv.pi
        if e is sp.E:
            return lambda x: iv.e
        if e in (sp.true, sp.false):
            v = bool(e)
            return lambda x: v
        args = [c(a) for a in e.args] if not isinstance(e, sp.Piecewise) else None
        if isinstance(e, sp.Add):

            def add(x):
                vals = [g(x) for g in args]
                if all(isinstance(v, Fraction) for v in vals):
                    return sum(vals, Fraction(0))
                out = _to_iv(vals[0])
                for v in vals[1:]:
                    out = out + _to_iv(v)
                return out

            return add
        if isinstance(e, sp.Mul):

            def mul(x):
                vals = [g(x) for g in args]
                if all(isinstance(v, Fraction) for v in vals):
                    out = Fraction(1)
                    for v in vals:
                        out *= v
                    return out
                out = _to_iv(vals[0])
                for v in vals[1:]:
                    out = out * _to_iv(v)
                return out

            return mul
        if isinstance(e, sp.Pow):
            base, ex = args
            if e.args[1].is_Rational:
                q = e.args[1]
                return lambda x: _pow(base(x), q)
            return lambda x: iv.exp(_to_iv(ex(x)) * iv.log(_to_iv(base(x))))
        if isinstance(e, sp.exp):
            (a,) = args
            return lambda x: (lambda v: Fraction(1) if v == 0 else iv.exp(_to_iv(v)))(a(x))
        if isinstance(e, sp.log) and len(e.args) == 1:
            (a,) = args

            def log(x):
                v = a(x)
                if _le(v, Fraction(0)) is not False:
                    raise _Undecided("logarithm of a number that may be nonpositive")
                return Fraction(0) if v == 1 else iv.log(_to_iv(v))

            return log
        if isinstance(e, sp.Abs):
            (a,) = args
            return lambda x: (lambda v: abs(v))(a(x))
        if isinstance(e, sp.sign):
            (a,) = args

            def sign(x):
                v = a(x)
                if isinstance(v, Fraction):
                    return Fraction((v > 0) - (v < 0))
                if _lo(v) > 0:
                    return Fraction(1)
                if _hi(v) < 0:
                    return Fraction(-1)
                return iv.mpf([-1, 1])

            return sign
        if isinstance(e, (sp.Max, sp.Min)):
            big = isinstance(e, sp.Max)

            def maxmin(x):
                vals = [g(x) for g in args]
                if all(isinstance(v, Fraction) for v in vals):
                    return max(vals) if big else min(vals)
                pick = max if big else min
                lo, hi = pick(_lo(v) for v in vals), pick(_hi(v) for v in vals)
                return _hull([lo, hi])

            return maxmin
        if isinstance(e, sp.Piecewise):
            branches = [(c(v), c(cond)) for v, cond in e.args]

            def piecewise(x):
                cands = []
                for val, cond in branches:
                    d = cond(x)
                    if d is False:
                        continue
                    cands.append(val)
                    if d is True:
                        break
                if not cands:
                    raise _Undecided("no branch of a Piecewise applies")
                return cands[0](x) if len(cands) == 1 else _hull([g(x) for g in cands])

            return piecewise
        rel = {sp.LessThan: _le, sp.StrictLessThan: _lt, sp.Equality: _eq}
        if type(e) in rel:
            cmp, (u, v) = rel[type(e)], args
            return lambda x: cmp(u(x), v(x))
        if isinstance(e, (sp.GreaterThan, sp.StrictGreaterThan)):
            cmp, (u, v) = (_le if isinstance(e, sp.GreaterThan) else _lt), args
            return lambda x: cmp(v(x), u(x))
        if isinstance(e, sp.Unequality):
            u, v = args
            return lambda x: (lambda d: None if d is None else not d)(_eq(u(x), v(x)))
        if isinstance(e, (sp.And, sp.Or)):
            conj = isinstance(e, sp.And)

            def logic(x):
                ds = [g(x) for g in args]
                if conj:
                    return False if False in ds else (True if all(d is True for d in ds) else None)
                return True if True in ds else (False if all(d is False for d in ds) else None)

            return logic
        raise NotImplementedError(f"exact mode cannot enclose {type(e).__name__} (in {expr})")

    return c(sp.sympify(expr))


@dataclass(frozen=True)
class _Exact:
    """Rigorous forms of one divergence: closures for f, a subgradient of f, f*, and exact f(0), f∞."""

    f: object
    fsub: object
    conj: object
    f0: object  # Fraction, interval or math.inf
    finf: object


def _sympy_exact(div):
    """(t, f, f′, f*, f(0), f∞) as exact sympy expressions, from the divergence's symbolic analysis
    (built-ins and user generators alike: a built-in's analysis starts from its registry source)."""
    import sympy as sp

    from ..divergences.symbolic import Y

    info = div.symbolic
    if info is None:
        raise ValueError(f"exact mode needs a sympy generator; divergence {div.name!r} has none")
    if info.conjugate_expr is None:
        raise NotImplementedError(
            f"exact mode needs f* in closed form, but the conjugate of {div.name!r} was only found numerically "
            "(sympy could not solve f'(t) = y); a numeric conjugate cannot give a rigorous upper bound"
        )
    t, f = info.t, info.expr
    f0 = sp.limit(f, t, 0, "+")
    finf = sp.limit(f / t, t, sp.oo)
    fp0 = sp.limit(info.fprime_expr, t, 0, "+")
    # Rebuild the conjugate's Piecewise with exact limits (symbolic.py stores float ones): −f(0) up to
    # f'(0+), the stationary branch on (f'(0+), f∞), its limit at f∞, +∞ beyond.
    branches = info.conjugate_expr.args if isinstance(info.conjugate_expr, sp.Piecewise) else ((info.conjugate_expr, True),)
    interior = next((e for e, _ in branches if e.free_symbols), None)
    if interior is None or not all(v.is_extended_real for v in (f0, finf, fp0)):
        raise NotImplementedError(f"exact mode could not state f* of {div.name!r} exactly")
    pieces = []
    if fp0.is_finite:
        pieces.append((-f0, Y <= fp0))
    if finf.is_finite:
        end = sp.limit(interior, Y, finf, "-")
        pieces.append((interior, Y < finf))
        if end.is_finite:
            pieces.append((end, sp.Eq(Y, finf)))
        pieces.append((sp.oo, True))
    else:
        pieces.append((interior, True))
    return t, f, info.fprime_expr, sp.Piecewise(*pieces), f0, finf


_EXACT_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _exact_forms(div) -> _Exact:
    try:
        return _EXACT_CACHE[div]
    except KeyError:
        pass
    import sympy as sp

    from ..divergences.symbolic import Y

    t, f, fp, conj, f0, finf = _sympy_exact(div)

    def const(v):
        return math.inf if v is sp.oo else _compile(v, t)(Fraction(0))

    forms = _Exact(f=_compile(f, t), fsub=_compile(fp, t), conj=_compile(conj, Y), f0=const(f0), finf=const(finf))
    _EXACT_CACHE[div] = forms
    return forms


_DBL_MAX = Fraction(float(np.finfo(np.float64).max))


def _round_up(x) -> float:
    """The smallest float ≥ the Fraction x (inf for inf, and past DBL_MAX, where float(x) overflows)."""
    if x == math.inf or x == -math.inf:
        return float(x)
    if x > _DBL_MAX:
        return math.inf
    if x < -_DBL_MAX:
        return -float(_DBL_MAX)
    v = float(x)
    if Fraction(v) < x:
        v = float(np.nextafter(v, np.inf))
    return v


def _round_down(x) -> float:
    return -_round_up(-x)


def _nearest(x) -> float:
    """The float nearest the Fraction x, ±inf past the float range."""
    if abs(x) > _DBL_MAX:
        return math.inf if x > 0 else -math.inf
    return float(x)


def bound_text(g: float, lam: float, mu: float) -> str:
    """The dual bound as a failed certificate states it (a float; +∞ says at which dual point)."""
    if g == math.inf:
        return f"dual bound inf at λ = {lam:.3g}, μ = {mu:.3g}: +∞ or beyond the float range, no finite bound"
    return f"dual bound {g:.9g}"


class _Track:
    """Records whether any interval entered a result (the certificate's ``arithmetic``)."""

    def __init__(self):
        self.interval = False

    def __call__(self, v):
        if not isinstance(v, Fraction):
            self.interval = True
        return v


def _upper(fn, track, *args):
    """An exact upper bound of fn(*args) (math.inf where it is unbounded or cannot be enclosed)."""
    try:
        return _hi(track(fn(*args)))
    except _FAILURES:
        return math.inf


def _exact_divergence(forms, pS, xS, xZ, track):
    """An upper bound (Fraction or inf) of D_f(x‖p): pS, xS over p_i > 0, xZ = Σ_{p_i=0} x_i (exact)."""
    total = Fraction(0)
    if xZ > 0:
        if forms.finf == math.inf:
            return math.inf
        total += xZ * _hi(track(forms.finf))
    for pi_, xi in zip(pS, xS):
        if xi == 0:
            if forms.f0 == math.inf:
                return math.inf
            total += pi_ * _hi(track(forms.f0))
            continue
        up = _upper(forms.f, track, xi / pi_)
        if up == math.inf:
            return math.inf
        total += pi_ * up
    return total


def _exact_dual(forms, pS, qS, qZ, has_zero, eps, lam, mu, track):
    """An upper bound (Fraction or inf) of g(λ, μ), each per-token sup rounded upward."""
    if lam == 0:
        if mu < 0:
            return math.inf
        return mu + max(Fraction(0), 1 - mu) * (sum(qS, Fraction(0)) + qZ)
    if eps is None:  # ε = ∞: λε = ∞ for every λ > 0
        return math.inf
    total = lam * eps + mu
    if has_zero:  # p_i = 0: q_i·max(0, 1 − k) with k = λf∞ + μ ≥ 0, else +∞ (proofs/README, theorem 8)
        if forms.finf != math.inf:
            k = track(_add(_mul(forms.finf, lam), mu))
            if _lo(k) < 0:
                return math.inf
            total += qZ * max(Fraction(0), 1 - _lo(k))
    a, b = (1 - mu) / lam, -mu / lam
    Fa = _upper(forms.conj, track, a)  # f*(a) ≥ sup_t [a t − f(t)]
    Fb = _upper(forms.conj, track, b)
    Fa = lam * Fa if Fa != math.inf else Fa
    Fb = lam * Fb if Fb != math.inf else Fb
    for pi_, qi in zip(pS, qS):
        r = qi / pi_
        # sup_{t ≥ 0} [min(t, r) − μt − λf(t)] ≤ min(λf*(a), r + λf*(b)) always (correction 4); the
        # pieces t ≤ r and t ≥ r are the value at r when a subgradient at r proves the maximiser of
        # the piece lies beyond r (g ≤ a for t ≤ r, g ≥ b for t ≥ r; ∂f(r) brackets both one-sided slopes).
        both = min(Fa, r + Fb)
        if r == 0:
            h = Fb  # only the piece t ≥ 0 = r remains
        else:
            up_A = up_B = both
            try:
                phi = _hi(track(_add((1 - mu) * r, _mul(-lam, forms.f(r)))))
                g = track(forms.fsub(r))
                if _le(g, a) is True:
                    up_A = min(up_A, phi)
                if _le(b, g) is True:
                    up_B = min(up_B, phi)
            except _FAILURES:
                pass
            h = max(up_A, up_B)
        if h == math.inf:
            return math.inf
        total += pi_ * h
    return total


def _exact_budget(budget):
    """ε as a Fraction, or None for ε = ∞ (every point feasible; only λ = 0 bounds the dual)."""
    budget = float(budget)
    return None if budget == math.inf else Fraction(budget)


def _exact_residual(d_up, eps) -> float:
    """D_f − ε rounded up; 0 for ∞ ≤ ∞, −∞ for a finite D_f under ε = ∞."""
    if eps is None:
        return 0.0 if d_up == math.inf else -math.inf
    return _round_up(d_up - eps) if d_up != math.inf else math.inf


def refuse_nonfinite(v, name):
    """ValueError naming the first NaN or ±inf entry of the array ``v`` (no rational stands for it)."""
    bad = ~np.isfinite(v)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), v.shape)
        at = ", ".join(str(int(k)) for k in i)
        raise ValueError(f"{name} holds a NaN or infinite entry: {name}[{at}] = {v[i]}")


def _exact_distribution(v, name):
    """The exact p/Σp of a float64 row, from the exact rationals of its entries (the sum's tolerance is
    checked by the callers, mentored.check.duality.distributions)."""
    refuse_nonfinite(v, name)
    vals = [Fraction(u) for u in v.tolist()]
    if any(u < 0 for u in vals):
        raise ValueError(f"{name} must be nonnegative")
    total = sum(vals, Fraction(0))
    if total <= 0:
        raise ValueError(f"{name} has no positive entry")
    return vals if total == 1 else [u / total for u in vals]


def dual_upper_bound(div, target, draft, budget, lam, mu):
    r"""An upper bound (Fraction or ``math.inf``) of :math:`g(\lambda, \mu)`, each per-token sup rounded
    upward, for the exact values of ``lam``, ``mu`` (floats or Fractions) and ``budget``, and the
    distributions :math:`p/\sum p`, :math:`q/\sum q` of the exact values of ``target`` and ``draft``."""
    p, q = (np.asarray(x, dtype=np.float64) for x in (target, draft))
    P, Q = (_exact_distribution(v, n) for v, n in ((p, "target"), (q, "draft")))
    pos = [i for i, v in enumerate(P) if v > 0]
    zero = [i for i, v in enumerate(P) if v == 0]
    return _exact_dual(
        _exact_forms(div), [P[i] for i in pos], [Q[i] for i in pos], sum((Q[i] for i in zero), Fraction(0)),
        bool(zero), _exact_budget(budget), Fraction(lam), Fraction(mu), _Track(),
    )


def certificate_fields(div, p, q, x, budget, lam, mu, tol, feas_tol) -> dict:
    r"""The fields of :func:`mentored.certify`'s rigorous certificate (``exact=True``, documented there).

    ``p``, ``q``, ``x`` are float64 arrays (n,) read as the exact rationals of their values (``p`` and
    ``q`` checked by the caller, and normalised here exactly); the dual point is the exact
    :math:`(\lambda, \mu)` = (``lam``, ``mu``), Fractions, of the untilted generator.
    """
    forms = _exact_forms(div)
    track = _Track()
    # p and q are the distributions their float entries represent, normalised exactly.
    P, Q = (_exact_distribution(v, name) for v, name in ((p, "target"), (q, "draft")))
    refuse_nonfinite(x, "pi")
    X = [Fraction(v) for v in x.tolist()]
    eps = _exact_budget(budget)
    # π̂ = π₊ / Σπ₊ (exactly on the simplex); the residual measures how far π is from it.
    total = sum(X, Fraction(0))
    neg = max([Fraction(0)] + [-v for v in X])
    simplex = max(abs(total - 1), neg)
    Xp = [max(v, Fraction(0)) for v in X]
    S = sum(Xp, Fraction(0))
    if S <= 0:
        raise ValueError("pi has no positive entry: there is no point of the simplex to certify")
    Xh = [v / S for v in Xp]
    pos = [i for i, v in enumerate(P) if v > 0]
    zero = [i for i, v in enumerate(P) if v == 0]
    pS = [P[i] for i in pos]
    d_up = _exact_divergence(forms, pS, [Xh[i] for i in pos], sum((Xh[i] for i in zero), Fraction(0)), track)
    # Infeasible by rounding: π' = (1 − δ)π̂ + δp̂ has D_f(π'‖p̂) ≤ (1 − δ)D_f(π̂‖p̂) ≤ ε for
    # δ ≥ (D_f − ε)/D_f (D_f(·‖p̂) is convex and D_f(p̂‖p̂) = f(1) = 0), and δ = 1 is p̂ itself. δ is
    # rounded up to a float to keep π' a short rational; π' is certified when it lies within
    # feas_tol of π in ℓ1, else the given point π̂ is judged (and is infeasible).
    delta = Fraction(0)
    if eps is not None and not (d_up != math.inf and d_up <= eps):
        delta = Fraction(1) if d_up == math.inf else min(Fraction(_round_up((d_up - eps) / d_up)), Fraction(1))
    Xr = Xh if delta == 0 else (P if delta == 1 else [(1 - delta) * v + delta * w for v, w in zip(Xh, P)])
    distance = sum((abs(v - w) for v, w in zip(Xr, X)), Fraction(0))
    repaired = delta > 0 and _round_up(distance) <= feas_tol
    point = Xr if repaired else Xh
    acc = sum((min(v, w) for v, w in zip(point, Q)), Fraction(0))
    qZ = sum((Q[i] for i in zero), Fraction(0))
    g_up = _exact_dual(forms, pS, [Q[i] for i in pos], qZ, bool(zero), eps, lam, mu, track)
    gap = g_up - acc if g_up != math.inf else math.inf
    gap_f, simplex_f, residual = _round_up(gap), _round_up(simplex), _exact_residual(d_up, eps)
    failed = []
    if simplex_f > feas_tol:
        failed.append(f"not a distribution: max(|Σπ − 1|, max(−π)) = {simplex_f:.3g} > feas_tol = {feas_tol:g}")
    if delta > 0 and not repaired:
        excess = f"D_f(π‖p) = inf > ε = {budget:g}" if d_up == math.inf else f"D_f(π‖p) − ε = {residual:.3g} > 0"
        failed.append(
            f"infeasible: {excess}, beyond rounding: the feasible (1 − δ)π + δp with δ = {float(delta):.3g} "
            f"is {_round_up(distance):.3g} from π in ℓ1 > feas_tol = {feas_tol:g}"
        )
    if not gap_f <= tol:
        bound = bound_text(_round_up(g_up), _nearest(lam), _nearest(mu))
        failed.append(f"suboptimal: gap {gap_f:.3g} > tol = {tol:g} ({bound}, acceptance {_round_down(acc):.9g})")
    return dict(
        ok=not failed, acceptance=_round_down(acc), dual_bound=_round_up(g_up), gap=gap_f, lam=_nearest(lam), mu=_nearest(mu),
        simplex_residual=simplex_f, budget_residual=residual, divergence=_round_up(d_up), budget=budget, tol=tol,
        feas_tol=feas_tol, arithmetic="interval" if track.interval else "rational", failed="; ".join(failed),
        repair=float(delta), distance=_round_up(distance),
    )
