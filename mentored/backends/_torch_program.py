r"""A user generator's expression program (:mod:`mentored.divergences.program`) evaluated by torch.

The program is the translation of the numpy code sympy prints for :math:`f(t)`, the code the core
runs (cpp/mentored/program.hpp). Here it is run twice over, on tensors of any device:

- in doubles (:func:`plain`), one torch operation per opcode: :math:`f(t)` as numpy computes it;
- in extended range (:func:`wide`), every value a pair :math:`(m, e)`, :math:`v = m \cdot 2^e` with
  :math:`0.5 \le |m| < 1` and the exponent :math:`e` an integer held in a double, so that nothing
  overflows or underflows on the way: the core's ``Wide`` evaluation, operation for operation
  (its elementary functions take their double versions wherever argument and result are doubles,
  and their asymptotic forms only beyond).

:func:`forms` builds :math:`\tilde f(t) = f(t) - c(t - 1)` and the perspective :math:`y \tilde f(x/y)`
from them as :meth:`SymbolicInfo.f_tilde <mentored.divergences.symbolic.SymbolicInfo>` does: the
limits at 0 and ∞, the Taylor series at 1, and, wherever the double evaluation gives a non-finite
value at a point of :math:`(0, \infty)` (``cosh(t − 1)`` past :math:`t \approx 711` inside
``log(cosh(t − 1))``), that point evaluated again in extended range, so that :math:`\tilde f` is ∞
only where it passes DBL_MAX itself, and :math:`y \tilde f(x/y)` only where the term does.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

__all__ = ["forms", "plain", "wide"]

_INF, _NAN = math.inf, math.nan
_LN2 = 0.69314718055994530942
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split: k·ln2_hi is exact for |k| < 2²⁰
_LN2_LO = 1.90821492927058770002e-10
_LN10 = 2.30258509299404568402
_HALF_PI = 1.57079632679489661923
_DBL_MIN = 2.2250738585072014e-308
_LOW27 = (1 << 27) - 1

_UNARY: dict[str, Callable] = {
    "neg": torch.neg, "square": lambda a: a * a, "sqrt": torch.sqrt, "abs": torch.abs,
    "sign": lambda a: torch.where(torch.isnan(a), a, torch.sign(a)),  # numpy's: NaN stays NaN
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p, "log2": torch.log2,
    "log10": torch.log10, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "arcsin": torch.asin,
    "arccos": torch.acos, "arctan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "arcsinh": torch.asinh, "arccosh": torch.acosh, "arctanh": torch.atanh,
}
_COMPARE = {
    "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b, "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b, "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
}


# ---------------------------------------------------------------- doubles


def _tensor(a, like: torch.Tensor) -> torch.Tensor:
    """A constant of the program (a Python float) as a float64 tensor of ``like``'s shape and device."""
    return a if isinstance(a, torch.Tensor) else torch.full_like(like, float(a))


def plain(ops: list[str], values: list[float], t: torch.Tensor) -> torch.Tensor:
    """f(t) as the printed numpy code computes it (float64 ``t``, any device): IEEE arithmetic and
    torch's elementary functions, within an ulp of numpy's."""
    stack: list = []
    for op, v in zip(ops, values):
        if op == "constant":
            stack.append(v)  # a Python float: the program folds every subexpression free of t
        elif op == "t":
            stack.append(t)
        elif op == "where":
            c, a, b = stack[-3:]
            del stack[-3:]
            if not isinstance(c, torch.Tensor):
                stack.append(a if c != 0 else b)
            else:
                stack.append(torch.where(c != 0, _tensor(a, t), b))
        elif op in _UNARY:
            stack.append(_UNARY[op](stack.pop()))
        else:
            b = stack.pop()
            a = stack.pop()
            stack.append(_binary(op, a, b, t))
    return _tensor(stack[0], t)


def _binary(op: str, a, b, t):
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "pow":
        return torch.pow(a, b)
    if op == "maximum":  # numpy's: NaN where either is (torch.maximum's too)
        return torch.maximum(_tensor(a, t), _tensor(b, t))
    if op == "minimum":
        return torch.minimum(_tensor(a, t), _tensor(b, t))
    if op in _COMPARE:
        return _COMPARE[op](_tensor(a, t), b).to(t.dtype)
    if op == "logical_and":
        return ((_tensor(a, t) != 0) & (_tensor(b, t) != 0)).to(t.dtype)
    if op == "logical_or":
        return ((_tensor(a, t) != 0) | (_tensor(b, t) != 0)).to(t.dtype)
    raise ValueError(f"unknown opcode {op!r}")


# ---------------------------------------------------------------- extended range: (m, e) pairs


def _of(v: torch.Tensor):
    """v as (m, e): 0.5 ≤ |m| < 1, or m one of 0, ±∞, NaN with e = 0."""
    m, k = torch.frexp(v)
    special = (v == 0) | ~torch.isfinite(v)
    return torch.where(special, v, m), torch.where(special, 0.0, k.to(v.dtype))


def _norm(m, e):
    r, k = torch.frexp(m)
    special = (m == 0) | ~torch.isfinite(m)
    return torch.where(special, m, r), torch.where(special, 0.0, e + k.to(m.dtype))


def _pick(c, a, b):
    return torch.where(c, a[0], b[0]), torch.where(c, a[1], b[1])


def _special(a):
    return (a[0] == 0) | ~torch.isfinite(a[0])


def _in_range(a):
    """Whether the value is a normal double (or 0, ±∞, NaN), so that double functions see it exactly."""
    return _special(a) | ((a[1] >= -1021) & (a[1] <= 1024))


def _ldexp(m, e):
    """m·2^e in two exact scalings (2^e alone passes DBL_MAX at e = 1024, where m·2^e may not)."""
    h = torch.floor(e * 0.5)
    return torch.ldexp(torch.ldexp(m, h), e - h)


def value(a) -> torch.Tensor:
    """(m, e) rounded to a double: ±∞ past DBL_MAX, ±0 below the subnormals."""
    m, e = a
    v = _ldexp(m, e.clamp(-1200.0, 1100.0))
    v = torch.where(e > 1100, m * _INF, v)
    return torch.where(_special(a), m, v)


def _const(v: float, like):
    return _of(torch.full_like(like, v))


def _neg(a):
    return -a[0], a[1]


def _add(a, b):
    swap = a[1] < b[1]
    hi, lo = _pick(swap, b, a), _pick(swap, a, b)
    d = (hi[1] - lo[1]).clamp(max=1100.0)  # past 1100 the smaller one is below an ulp: 2^−d·m is 0
    out = _norm(hi[0] + _ldexp(lo[0], -d), hi[1])
    out = _pick(torch.isfinite(a[0]) & torch.isfinite(b[0]), out, _of(a[0] + b[0]))
    out = _pick(b[0] == 0, a, out)
    return _pick(a[0] == 0, b, out)


def _sub(a, b):
    return _add(a, _neg(b))


def _mul(a, b):
    return _pick(_special(a) | _special(b), _of(a[0] * b[0]), _norm(a[0] * b[0], a[1] + b[1]))


def _div(a, b):
    return _pick(_special(a) | _special(b), _of(a[0] / b[0]), _norm(a[0] / b[0], a[1] - b[1]))


def _cmp(a, b):
    """−1, 0, 1 for a < b, a = b, a > b; 2 where either is NaN."""
    d = torch.sign(_sub(a, b)[0])
    both_inf = ~torch.isfinite(a[0]) & ~torch.isfinite(b[0])
    d = torch.where(both_inf, torch.where(a[0] == b[0], 0.0, torch.where(a[0] < b[0], -1.0, torch.ones_like(d))), d)
    return torch.where(torch.isnan(a[0]) | torch.isnan(b[0]), 2.0, d)


def _exp(a):
    """e^x, beyond ±700 as eʳ·2ᵏ with x = k ln 2 + r."""
    x = value(a)
    k = torch.round(x / _LN2)
    # Past 2⁵² an ulp of x is more than ln 2: only 2ᵏ is known. Below 2²⁰·ln 2, k·ln2_hi is exact.
    r = torch.where(x.abs() < 2.0**52, (x - k * _LN2_HI) - k * _LN2_LO, 0.0)
    big = _norm(torch.exp(r), k)
    inside = _pick((x.abs() < 700.0) | ~torch.isfinite(x), _of(torch.exp(x)), big)
    outside = _of(torch.where(a[1] < 0, 1.0, torch.where(a[0] > 0, torch.full_like(x, _INF), 0.0)))  # |x| below DBL_MIN, or past DBL_MAX
    return _pick(_in_range(a), inside, outside)


def _log_of(a):
    """log a for a > 0 outside the double range, as a double."""
    return a[1] * _LN2_HI + (a[1] * _LN2_LO + torch.log(a[0]))


def _log(a):
    negative = a[0] < 0
    direct = _of(torch.log(torch.where(negative, _NAN, value(a))))
    return _pick(_in_range(a) | negative, direct, _of(_log_of(a)))


def _pow_abs(a, y):
    """|a|^y (y a double): |m|^y·2^(e·y), with e·y split exactly into an integer k and a fraction."""
    e = a[1]
    ey = e * y
    # y = y_hi + y_lo, y_hi of 26 bits: e·y_hi is exact (|e| < 2²⁷), and e·y_lo within an ulp of itself
    y_hi = (y.view(torch.int64) & ~_LOW27).view(torch.float64)
    p1, p2 = e * y_hi, e * (y - y_hi)
    k = torch.floor(p1)
    frac = torch.exp2((p1 - k) + p2)
    am = a[0].abs()
    pm = torch.pow(am, y)
    ok = torch.isfinite(pm) & (pm.abs() >= _DBL_MIN)
    direct = _mul(_norm(pm, k), _of(frac))
    # |y| so large that m^y leaves the doubles: 2^(y·log2 m) in the same way
    lg = y * torch.log2(am)
    k2 = torch.floor(lg)
    split = _mul(_norm(torch.exp2(lg - k2) * frac, k), _norm(torch.ones_like(lg), k2))
    out = _pick(ok, direct, split)
    return _pick(ey.abs() < 1e300, out, _of(torch.where(ey > 0, torch.full_like(ey, _INF), 0.0)))


def _pow(a, b):
    y = value(b)
    # an exponent past DBL_MAX, or a denormal one (a^b ≈ 1)
    far = _of(torch.where((b[0] == 0) | ~(b[1] > 0), 1.0, torch.pow(value(a), y)))
    r = torch.pow(value(a), y)
    direct = _in_range(a) & ((torch.isfinite(r) & (r.abs() >= _DBL_MIN)) | _special(a) | torch.isnan(r) | (y == 0))
    v = _pow_abs(a, y)
    odd = torch.fmod(y, 2.0) != 0
    negative = _pick(y != torch.floor(y), _of(torch.full_like(y, _NAN)), _pick(odd, _neg(v), v))  # real for integer y only
    out = _pick(a[0] < 0, negative, v)
    out = _pick(_special(a), _of(torch.pow(a[0], y)), out)
    out = _pick(direct, _of(r), out)
    return _pick(_in_range(b), out, far)


def _sqrt(a):
    odd = torch.fmod(a[1], 2.0) != 0
    m = torch.where(odd, a[0] * 2.0, a[0])
    e = torch.where(odd, a[1] - 1.0, a[1])
    return _pick(_special(a) | (a[0] < 0), _of(torch.sqrt(a[0])), _norm(torch.sqrt(m), e * 0.5))


_TINY_IDENTITY = {"sin", "tan", "arcsin", "arctan", "sinh", "tanh", "arcsinh", "arctanh", "expm1", "log1p"}


def _unary_wide(op: str, a):
    if op == "neg":
        return _neg(a)
    if op == "square":
        return _mul(a, a)
    if op == "sqrt":
        return _sqrt(a)
    if op == "abs":
        return a[0].abs(), a[1]
    if op == "sign":
        return _of(_UNARY["sign"](a[0]))
    if op == "exp":
        return _exp(a)
    if op == "log":
        return _log(a)
    x = value(a)
    fn = _UNARY[op]
    inside = _of(fn(x))
    big = (x.abs() >= 700.0) & torch.isfinite(x)
    if op in ("log2", "log10"):
        far = _of(a[1] + torch.log2(a[0]) if op == "log2" else _log_of(a) / _LN10)
        return _pick(~_in_range(a) & (a[0] > 0), far, inside)
    if op == "expm1":
        inside = _pick(big & (x > 0), _exp(a), inside)
    elif op in ("cosh", "sinh"):
        v = _mul(_exp((a[0].abs(), a[1])), _const(0.5, x))
        inside = _pick(big, _pick(a[0] < 0, _neg(v), v) if op == "sinh" else v, inside)
    # outside the double range: |a| below DBL_MIN (f ≈ its first-order term), or past DBL_MAX
    s = torch.where(a[0] < 0, -1.0, torch.ones_like(x))
    if op in _TINY_IDENTITY:
        tiny = a
    elif op in ("cos", "cosh"):
        tiny = _const(1.0, x)
    elif op == "arccos":
        tiny = _const(_HALF_PI, x)
    else:
        tiny = _const(_NAN, x)  # arccosh of a number near 0: outside its domain
    lg = _log_of((a[0].abs(), a[1]))
    huge = {
        "arctan": s * _HALF_PI, "tanh": s, "sinh": s * _INF, "cosh": torch.full_like(x, _INF),
        "expm1": torch.where(s > 0, _INF, -torch.ones_like(x)), "arcsinh": s * (lg + _LN2),
        "arccosh": torch.where(s > 0, lg + _LN2, _NAN), "log1p": torch.where(s > 0, lg, _NAN),
    }.get(op)
    huge = _of(huge) if huge is not None else _const(_NAN, x)  # sin, cos, tan past DBL_MAX; domain errors
    return _pick(_in_range(a), inside, _pick(a[1] < 0, tiny, huge))


def _binary_wide(op: str, a, b):
    if op == "add":
        return _add(a, b)
    if op == "sub":
        return _sub(a, b)
    if op == "mul":
        return _mul(a, b)
    if op == "div":
        return _div(a, b)
    if op == "pow":
        return _pow(a, b)
    if op == "logical_and":
        return _of(((a[0] != 0) & (b[0] != 0)).to(a[0].dtype))
    if op == "logical_or":
        return _of(((a[0] != 0) | (b[0] != 0)).to(a[0].dtype))
    c = _cmp(a, b)
    nan = c == 2
    if op == "maximum":
        return _pick(nan, _of(torch.full_like(c, _NAN)), _pick(c < 0, b, a))
    if op == "minimum":
        return _pick(nan, _of(torch.full_like(c, _NAN)), _pick(c > 0, b, a))
    hit = {"less": c == -1, "less_equal": (c == -1) | (c == 0), "greater": c == 1, "greater_equal": (c == 1) | (c == 0),
           "equal": c == 0, "not_equal": c != 0}[op]
    return _of(hit.to(c.dtype))


def wide(ops: list[str], values: list[float], t):
    """f at points given in extended range, ``t`` an (m, e) pair of float64 tensors (t may pass DBL_MAX)."""
    stack: list = []
    for op, v in zip(ops, values):
        if op == "constant":
            stack.append(_const(v, t[0]))
        elif op == "t":
            stack.append(t)
        elif op == "where":
            c, a, b = stack[-3:]
            del stack[-3:]
            stack.append(_pick(c[0] != 0, a, b))
        elif op in _UNARY:
            stack.append(_unary_wide(op, stack.pop()))
        else:
            b = stack.pop()
            a = stack.pop()
            stack.append(_binary_wide(op, a, b))
    return stack[0]


# ---------------------------------------------------------------- f̃ and its perspective


def forms(ops: list[str], values: list[float], *, tilt: float, f0: float, f_inf: float, series: tuple, radius: float):
    """(f̃, perspective) of a program: f̃(t) on [0, ∞] and y·f̃(x/y) for y ≥ 0, x ≥ 0, on float64 tensors.

    ``tilt`` c, ``f0`` f(0⁺), ``f_inf`` f∞ (untilted, as :class:`~mentored.divergences.symbolic.SymbolicInfo`),
    ``series`` the Taylor coefficients of f̃ at 1 used where |t − 1| < ``radius``. Where the double
    evaluation is not finite at a point of (0, ∞) (for the perspective: at x > 0), the point is
    evaluated again in extended range. Both evaluations run on every point and the non-finite ones
    are selected, so that nothing is read back to the host (the solve and a draft tree's verifiers
    stay queued on a device; the extended range costs about ten operations for each of the program's).
    Where extended range gives no finite number either and f̃∞ is finite, the bound f̃∞·x stands
    (``settled``); with f̃∞ = ∞ the value stays ∞ or NaN.
    """
    c = float(tilt)
    f_inf_tilde = float(f_inf) - c
    at0 = float(f0) + c  # f̃(0) = f(0) + c
    at_inf = _INF if f_inf_tilde > 0 else 0.0

    def tilde_plain(x: torch.Tensor) -> torch.Tensor:
        inside = (x > 0) & (x < _INF)
        xs = torch.where(inside, x, 1.0)
        h = xs - 1.0
        out = plain(ops, values, xs) - c * h
        if series:  # near t = 1 from the Taylor series: f(t) − c(t − 1) cancels there
            acc = torch.zeros_like(h)
            for a in reversed(series):
                acc = (acc + a) * h
            out = torch.where(h.abs() < radius, acc * h, out)
        return torch.where(inside, out, torch.where(x == 0, out.new_tensor(at0), at_inf))  # (two scalars would give float32)

    def tilde_wide(t):
        """f̃ in extended range at t = (m, e): f(t) − c(t − 1)."""
        return _sub(wide(ops, values, t), _mul(_const(c, t[0]), _sub(t, _const(1.0, t[0]))))

    def term_wide(x, y):
        """y·f̃(x/y) in extended range, x/y never rounded to a double; NaN where undefined there."""
        xw, yw = _of(x), _of(y)
        return value(_mul(yw, tilde_wide(_div(xw, yw))))

    def settled(fixed, x):
        """A value of extended range where it is a number; else, with f̃∞ finite, its bound f̃∞·x: the
        term is then at most f̃∞·x, and within y·|g(x/y)| of it, g(t) = f̃(t) − f̃∞t = o(t), for a point
        whose exponent itself passes the doubles' (x/y or e^(x/y) beyond 2^(DBL_MAX))."""
        if not math.isfinite(f_inf_tilde):
            return fixed
        return torch.where(torch.isnan(fixed) | torch.isinf(fixed), x * f_inf_tilde, fixed)

    def f_tilde(x: torch.Tensor) -> torch.Tensor:
        out = tilde_plain(x)
        bad = ~torch.isfinite(out) & (x > 0) & (x < _INF)
        fixed = value(tilde_wide(_of(torch.where(bad, x, 1.0))))
        return torch.where(bad, settled(fixed, x), out).clamp(min=0.0)  # f̃ ≥ 0 by convexity; rounding must not make it negative (NaN stays)

    def perspective(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        r = x / y
        out = y * tilde_plain(r)
        # the perspective's limits: x·f̃∞ at y = 0 or x = ∞ (0 at x = 0, whatever f̃∞)
        edge = (y == 0) | torch.isinf(x)
        out = torch.where(edge, torch.where(x == 0, 0.0, x * f_inf_tilde), out)
        # x/y past DBL_MAX (y denormal), or f̃(x/y) or the product past it: the term in extended range
        bad = (~torch.isfinite(out) | torch.isinf(r)) & (x > 0) & (y > 0) & ~edge
        fixed = term_wide(torch.where(bad, x, 1.0), torch.where(bad, y, 1.0))
        return torch.where(bad, settled(fixed, x), out).clamp(min=0.0)

    return f_tilde, perspective
