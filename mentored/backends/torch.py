r"""Mentored verification in torch: the solve and the speculative step on any device.

The same mathematics as the C++ core (docs/theory.md §3–4), written with one sort per row, prefix
sums and a search over :math:`s` vectorised over rows, so that it runs where the logits live (CPU or
CUDA) without a host round trip. A divergence reaches torch through ``_torch_forms`` alone: a built-in's
registry entry (mentored/divergences/__init__.py: the accurate forms written once for numpy and torch;
recognised by identity, never by name), or forms compiled from a
:meth:`~mentored.Divergence.from_sympy` generator. It is checked against :func:`mentored.solve`
in the tests. torch is imported lazily by :func:`mentored.speculative_step`; :func:`mentored.solve`
hands tensors on devices other than the CPU to :class:`TorchBackend` here (:mod:`mentored.backends`).

On a row, with ratios :math:`r_i = q_i/p_i`,

.. math::

    t\,P_{r<t} - Q_{r<t} = \mathrm{TV}(p, q) - s \;\Rightarrow\; t_{lo}(s), \qquad
    Q_{r>t} - t\,P_{r>t} = D_{up} - s \;\Rightarrow\; t_{hi}(s),

both piecewise affine in :math:`t` with breakpoints at the sorted ratios, so each threshold is a
``searchsorted`` on the values at the breakpoints and one division. With suffix sums of
:math:`p_i \tilde f(r_i)` on each side, :math:`D_f(\pi(s)\|p)` costs :math:`O(\log V)` per row
and per :math:`s` (docs/theory.md §4); it is nondecreasing in :math:`s`, and the budget's :math:`s`
is found by a k-ary search (255 points per row per step and 9 steps on a GPU, 63 and 12 on a
CPU: a bracket :math:`2^{-72}` of the curve's length). One sort per row, everything else
:math:`O(V)` or less per row, and no host synchronisation: the whole solve is queued on the
device. Written for a GPU; on a CPU each row is sorted by its own 1-D sort (torch's fast path) and
the (R, V) tables live in a per-thread workspace (no page faults per call): 11.5× the compiled
core on 8 × 131072 float32 rows with both on one thread, 17× on two (benchmarks/torch_lossless.py
--solve-only). So :func:`mentored.solve` and :func:`mentored.verify.serving.rejection_sample` hand CPU
tensors to the core (docs/serving.md, "The device path"); ``_solve`` runs this algorithm on any
device, CPU tensors included, for the tests and benchmarks.
"""

from __future__ import annotations

import math
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple

import numpy as np
try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.backends.torch needs torch: pip install torch") from exc

from .. import _core
from ..check.inputs import check_step_inputs, check_zeros, per_row, step_budgets, sum_rtol
from ..divergences import divergence as _divergence
from ..divergences.symbolic import SERIES_RADIUS
from .protocol import Solved
from .shared import REST_DIRECT, LevelForms, given_uniforms, node_masses, onehot_bisection, tree_masses

__all__ = ["device_of", "TorchBackend", "CPU_VIEWS"]  # the entry points reach this module through mentored.backends.get_backend

_LN2 = math.log(2.0)
_INF = math.inf
_FAR = 1e100  # ratios above this: D terms from π and p (docs/reliability.md, denormal targets)


class _Forms(NamedTuple):
    """A divergence in torch: f̃(t) = f(t) − c(t − 1) ≥ 0, the perspective p·f̃(π/p) for p > 0, and f̃∞.

    ``log_ratio_term(q, p, log r)``, optional: p·f̃(r) given log r as well (kl: one log per token
    instead of the perspective's two)."""

    f_tilde: Callable[[torch.Tensor], torch.Tensor]
    perspective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    f_inf_tilde: float
    log_ratio_term: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None


def _kl_term(q, p, log_r):
    # A speed path of the built-in kl only (optional: a divergence without one uses its perspective):
    # q log r − q + p from log r, one log per token; log_r is overwritten. q log r is NaN only where
    # q = 0 (0·log 0, taken as 0) or p = q = 0 (a token of neither side, dropped by the caller).
    return log_r.mul_(q).nan_to_num_(nan=0.0, posinf=_INF, neginf=-_INF).sub_(q).add_(p)


def _builtin_forms(div) -> _Forms:
    """A built-in's torch forms: its registry entry (mentored/divergences/__init__.py) on the torch namespace."""
    spec, ops = div.builtin, _TorchOps()
    fast = _kl_term if div.compiled == _core.Generator.kl else None
    return _Forms(lambda t: spec.f_tilde(ops, t), lambda pi, p: spec.perspective(ops, pi, p), div.f_inf - div.tilt, fast)


_BUILTIN_FORMS: dict = {}
_CUSTOM_FORMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _torch_forms(div) -> _Forms:
    """The torch forms (f̃, p·f̃(π/p), f̃∞) of a divergence: the one place the torch path learns an f.

    A built-in, recognised by identity (a custom divergence may be called "kl" and be another f),
    gets its hand-written accurate forms; a :meth:`~mentored.Divergence.from_sympy` divergence gets
    forms compiled from its sympy analysis (cached per divergence).
    """
    div = _divergence(div)
    if div.builtin is not None:
        forms = _BUILTIN_FORMS.get(div.name)
        if forms is None:
            forms = _BUILTIN_FORMS[div.name] = _builtin_forms(div)
        return forms
    forms = _CUSTOM_FORMS.get(div)
    if forms is None:
        forms = _CUSTOM_FORMS[div] = _compile_custom(div)
    return forms


def _compile_custom(div) -> _Forms:
    """f̃ and its perspective in torch from the sympy generator of ``div`` (``div.symbolic``).

    The core's expression program (:mod:`mentored.divergences.program`: the numpy code sympy prints
    for f, translated opcode by opcode) run by torch, in doubles and, where the printed form
    overflows, in extended range (``_prog_forms``), so that f̃ and
    p·f̃(π/p) are the core's and numpy's wherever they are finite. A generator whose code does not
    translate (a function the program lacks, e.g. ``erf``) is printed by sympy for torch instead, and
    its non-finite values at points of (0, ∞) are evaluated on the host (numpy's f̃).
    """
    info = div.symbolic
    if info is None:
        raise ValueError(
            f"divergence {div.name!r} has no sympy generator, so the torch backend cannot compile it; "
            "build it with Divergence.from_sympy, or pass numpy arrays to mentored.solve"
        )
    c, f_inf_tilde = float(info.tilt), float(info.f_inf) - float(info.tilt)
    constants = dict(tilt=c, f0=float(info.f0), f_inf=float(info.f_inf), series=tuple(info.series), radius=SERIES_RADIUS)
    program = _program_ops(info)
    if program is not None:
        f_tilde, perspective = _prog_forms(*program, **constants)
    else:
        f_tilde, perspective = _printed_forms(div, **constants)
    return _Forms(f_tilde, perspective, f_inf_tilde)


def _program_ops(info):
    """(opcode names, values) of the core's program for a generator, or None where its code does not translate."""
    from ..divergences.program import compile_info, source, translate

    if compile_info(info) is None:
        return None
    ops, values = translate(*source(info))
    names = {int(v): k for k, v in _core.Op.__members__.items()}
    return [names[op] for op in ops], values


def _tilde_of(plain, x, *, tilt, f0, f_inf, series, radius):
    """f̃(x) = f(x) − c(x − 1) from ``plain``, a double evaluation of f on (0, ∞): the Taylor series at 1
    where |x − 1| < ``radius`` (f and c(x − 1) cancel there), f̃(0) = f(0) + c and f̃'s limit at ∞
    (0 or ∞ by the sign of f̃∞) at the ends. Returns (f̃, where the series was used)."""
    c = float(tilt)
    inside = (x > 0) & (x < _INF)
    xs = torch.where(inside, x, 1.0)
    h = xs - 1.0
    out = plain(xs) - c * h
    near = torch.zeros_like(inside)
    if series:
        acc = torch.zeros_like(h)
        for a in reversed(series):
            acc = (acc + a) * h
        near = h.abs() < radius
        out = torch.where(near, acc * h, out)
    at_inf = _INF if float(f_inf) - c > 0 else 0.0
    return torch.where(inside, out, torch.where(x == 0, out.new_tensor(float(f0) + c), at_inf)), near  # (two scalars would give float32)


def _printed_forms(div, *, tilt, f0, f_inf, series, radius):
    """(f̃, perspective) from sympy's torch printing of f, for a generator without a program: Max and
    Min as torch.maximum/minimum, and where f̃ or the term is not finite at x > 0, numpy's f̃ on the
    host (30-digit arithmetic where the printed form overflows; a read-back, on a device too)."""
    info = div.symbolic
    fn = _torch_lambdify(info.t, info.expr)
    c = tilt
    f_inf_tilde = f_inf - c

    def plain(xs):
        return torch.as_tensor(fn(xs), dtype=torch.float64, device=xs.device)

    def f_tilde(x: torch.Tensor) -> torch.Tensor:
        out, near = _tilde_of(plain, x, tilt=c, f0=f0, f_inf=f_inf, series=series, radius=radius)
        inside = (x > 0) & (x < _INF)
        bad = ~torch.isfinite(out) & inside & ~near
        if bool(bad.any()):
            idx = bad.nonzero(as_tuple=True)
            out = out.index_put(idx, torch.as_tensor(div.f_tilde(x[idx].cpu().numpy()), dtype=out.dtype, device=out.device))
        return out.clamp(min=0.0)  # f̃ ≥ 0 by convexity; rounding must not make it negative

    def perspective(pi: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        r = pi / p
        out = p * f_tilde(r)
        bad = (~torch.isfinite(out) | torch.isinf(r)) & (pi > 0) & (p > 0)
        if bool(bad.any()):  # y·f(x/y) − c(x − y) with y·f(x/y) in 30-digit arithmetic; the bound f̃∞·x where it fails
            from ..divergences.symbolic import exact_perspective

            idx = bad.nonzero(as_tuple=True)
            xb, yb = (torch.broadcast_to(a, bad.shape)[idx].cpu().numpy() for a in (pi, p))
            exact = exact_perspective(info, xb, yb) - c * (xb - yb)
            exact = np.where(np.isnan(exact), f_inf_tilde * xb if math.isfinite(f_inf_tilde) else _INF, exact)
            out = out.index_put(idx, torch.as_tensor(exact, dtype=out.dtype, device=out.device))
        return out.clamp(min=0.0)

    return f_tilde, perspective


def _folded(op):
    """op folded over its arguments (Max and Min take any number), Python numbers as float64 tensors."""

    def call(*args):
        ref = next((a for a in args if isinstance(a, torch.Tensor)), None)
        vals = [a if isinstance(a, torch.Tensor) else torch.as_tensor(float(a), dtype=torch.float64, device=getattr(ref, "device", None)) for a in args]
        out = vals[0]
        for v in vals[1:]:
            out = op(out, v)
        return out

    return call


def _torch_lambdify(symbol, expr):
    """A sympy expression of one symbol as a function of tensors: Max and Min as torch.maximum/minimum,
    Heaviside as its Piecewise (torch.heaviside takes no Python number), constants (log 2, √2) as
    floats (torch functions take tensors, not Python numbers)."""
    import sympy as sp

    reduce = {"mentored_torch_max": torch.maximum, "mentored_torch_min": torch.minimum}
    expr = sp.sympify(expr).replace(sp.Heaviside, lambda *args: sp.Heaviside(*args).rewrite(sp.Piecewise))
    expr = expr.replace(sp.Max, sp.Function("mentored_torch_max")).replace(sp.Min, sp.Function("mentored_torch_min"))
    expr = expr.replace(lambda e: e.is_number and not e.is_Number and not e.free_symbols, lambda e: sp.Float(e.evalf(20), 20))
    return sp.lambdify(symbol, expr, modules=[{k: _folded(op) for k, op in reduce.items()}, "torch"], printer=_torch_printer(reduce))


def _torch_printer(functions):
    """sympy's torch printer, printing the calls named in ``functions`` as plain calls (it refuses unknown functions)."""
    try:
        from sympy.printing.pytorch import TorchPrinter
    except ImportError:  # a sympy without a torch printer: lambdify's generic one prints these calls as they are
        return None

    class Printer(TorchPrinter):
        def _print_Function(self, expr):
            name = type(expr).__name__
            if name in functions:
                return f"{name}({', '.join(self._print(a) for a in expr.args)})"
            return super()._print_Function(expr)

    return Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                    "user_functions": {k: k for k in functions}})


# ---------------------------------------------------------------- a user generator's program in torch
#
# The core's expression program (mentored.divergences.program: the numpy code sympy prints for f(t),
# translated opcode by opcode; cpp/mentored/program.hpp runs it) run twice over, on tensors of any
# device: in doubles (_prog_plain), one torch operation per opcode, f(t) as numpy computes it; and in
# extended range (_prog_wide), every value a pair (m, e), v = m·2^e with 0.5 ≤ |m| < 1 and e an integer
# held in a double, so that nothing overflows or underflows on the way: the core's Wide evaluation,
# operation for operation (its elementary functions take their double versions wherever argument and
# result are doubles, and their asymptotic forms only beyond). _prog_forms builds f̃ and y·f̃(x/y) from
# them as SymbolicInfo.f_tilde does (limits at 0 and ∞, the Taylor series at 1), with the points where
# the doubles overflow (cosh(t − 1) past t ≈ 711 inside log(cosh(t − 1))) evaluated in extended range:
# f̃ is ∞ only where it passes DBL_MAX itself, and the term only where it does.

_NAN = math.nan
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split: k·ln2_hi is exact for |k| < 2²⁰
_LN2_LO = 1.90821492927058770002e-10
_LN10 = 2.30258509299404568402
_DBL_MIN = 2.2250738585072014e-308
_LOW27 = (1 << 27) - 1

_PROG_UNARY: dict[str, Callable] = {
    "neg": torch.neg, "square": lambda a: a * a, "sqrt": torch.sqrt, "abs": torch.abs,
    "sign": lambda a: torch.where(torch.isnan(a), a, torch.sign(a)),  # numpy's: NaN stays NaN
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p, "log2": torch.log2,
    "log10": torch.log10, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "arcsin": torch.asin,
    "arccos": torch.acos, "arctan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "arcsinh": torch.asinh, "arccosh": torch.acosh, "arctanh": torch.atanh,
}
_PROG_COMPARE = {
    "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b, "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b, "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
}


# ---------------------------------------------------------------- doubles


def _prog_tensor(a, like: torch.Tensor) -> torch.Tensor:
    """A constant of the program (a Python float) as a float64 tensor of ``like``'s shape and device."""
    return a if isinstance(a, torch.Tensor) else torch.full_like(like, float(a))


def _prog_plain(ops: list[str], values: list[float], t: torch.Tensor) -> torch.Tensor:
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
                stack.append(torch.where(c != 0, _prog_tensor(a, t), b))
        elif op in _PROG_UNARY:
            stack.append(_PROG_UNARY[op](stack.pop()))
        else:
            b = stack.pop()
            a = stack.pop()
            stack.append(_prog_binary(op, a, b, t))
    return _prog_tensor(stack[0], t)


def _prog_binary(op: str, a, b, t):
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
        return torch.maximum(_prog_tensor(a, t), _prog_tensor(b, t))
    if op == "minimum":
        return torch.minimum(_prog_tensor(a, t), _prog_tensor(b, t))
    if op in _PROG_COMPARE:
        return _PROG_COMPARE[op](_prog_tensor(a, t), b).to(t.dtype)
    if op == "logical_and":
        return ((_prog_tensor(a, t) != 0) & (_prog_tensor(b, t) != 0)).to(t.dtype)
    if op == "logical_or":
        return ((_prog_tensor(a, t) != 0) | (_prog_tensor(b, t) != 0)).to(t.dtype)
    raise ValueError(f"unknown opcode {op!r}")


# ---------------------------------------------------------------- extended range: (m, e) pairs
#
# v = m·2^e, 0.5 ≤ |m| < 1, e an integer held in a double. The special values keep their m and carry
# the exponents −2⁴⁰ (0) and +2⁴⁰ (±∞), so that a sum aligns them as it aligns any other (0 vanishes
# beside anything, ∞ absorbs anything) and no operation needs a case of its own for them: few torch
# operations per opcode, all on every point. The results are the core's (program.hpp, Wide) to an
# ulp or so: e^x is e^r·2^k with x = k ln 2 + r wherever the extended range is asked for.

_W_BIG = 2.0**40


def _w_norm(m, e):
    """(m, e) normalised: m's own exponent moved into e; 0 and ±∞ given theirs."""
    r, k = torch.frexp(m)
    e = e + k.to(m.dtype)
    return r, e.masked_fill_(m == 0, -_W_BIG).masked_fill_(torch.isinf(m), _W_BIG)


def _w_of(v):
    """A float64 tensor in extended range."""
    r, k = torch.frexp(v)
    return r, k.to(v.dtype).masked_fill_(v == 0, -_W_BIG).masked_fill_(torch.isinf(v), _W_BIG)


def _w_const(v: float, like):
    m, k = math.frexp(v) if math.isfinite(v) else (v, 0)
    e = -_W_BIG if v == 0 else _W_BIG if math.isinf(v) else float(k)
    return torch.full_like(like, m), torch.full_like(like, e)


def _w_pick(c, a, b):
    return torch.where(c, a[0], b[0]), torch.where(c, a[1], b[1])


def _w_value(a) -> torch.Tensor:
    """(m, e) rounded to a double, in two exact scalings (2^e alone passes DBL_MAX at e = 1024, where
    m·2^e may not): ±∞ past DBL_MAX, ±0 below the subnormals."""
    e = a[1].clamp(-1200.0, 1100.0)
    h = torch.floor(e * 0.5)
    return torch.ldexp(torch.ldexp(a[0], h), e - h)


def _w_in_range(a):
    """Whether the value is a normal double, so that double functions see it exactly."""
    return (a[1] >= -1021) & (a[1] <= 1024)


def _w_neg(a):
    return -a[0], a[1]


def _w_add(a, b):
    e = torch.maximum(a[1], b[1])
    return _w_norm(torch.ldexp(a[0], a[1] - e) + torch.ldexp(b[0], b[1] - e), e)


def _w_sub(a, b):
    return _w_add(a, _w_neg(b))


def _w_mul(a, b):
    return _w_norm(a[0] * b[0], a[1] + b[1])


def _w_div(a, b):
    return _w_norm(a[0] / b[0], a[1] - b[1])


def _w_cmp(a, b):
    """−1, 0, 1 for a < b, a = b, a > b; 2 where either is NaN."""
    d = torch.sign(_w_sub(a, b)[0])
    both_inf = torch.isinf(a[0]) & torch.isinf(b[0])  # ∞ − ∞: compared by sign
    d = torch.where(both_inf, torch.sign(torch.sign(a[0]) - torch.sign(b[0])), d)
    return torch.where(torch.isnan(a[0]) | torch.isnan(b[0]), 2.0, d)


def _w_exp(a):
    """e^x as e^r·2^k, x = k ln 2 + r; past 2⁵² an ulp of x is more than ln 2 and only 2^k is known,
    and past DBL_MAX·ln 2 not even k: there e^x is ∞ (or 0), as the core's. (k·ln2_hi is exact below
    2²⁰·ln 2, and beyond, its rounding is below an ulp of x.)"""
    x = _w_value(a)
    k = torch.round(x / _LN2)
    r = torch.where(x.abs() < 2.0**52, (x - k * _LN2_HI) - k * _LN2_LO, torch.where(torch.isfinite(k), 0.0, x))
    return _w_norm(torch.exp(r), k)


def _w_log_of(a):
    """log a for a > 0, as a double: e ln 2 + log m (−∞ at 0, ∞ at ∞)."""
    return a[1] * _LN2_HI + (a[1] * _LN2_LO + torch.log(a[0]))


def _w_log(a):
    return _w_of(torch.where(_w_in_range(a), torch.log(_w_value(a)), _w_log_of(a)))


def _w_pow_abs(a, y):
    """|a|^y (y a double): |m|^y·2^(e·y), with e·y split exactly into an integer k and a fraction."""
    e = a[1]
    # y = y_hi + y_lo, y_hi of 26 bits: e·y_hi is exact (|e| < 2²⁷), and e·y_lo within an ulp of itself
    y_hi = (y.contiguous().view(torch.int64) & ~_LOW27).view(torch.float64)
    p1, p2 = e * y_hi, e * (y - y_hi)
    k1, k2 = torch.floor(p1), torch.floor(p2)
    k = k1 + k2
    frac = torch.exp2((p1 - k1) + (p2 - k2))  # in [1, 4): finite however large e·y
    am = a[0].abs()
    pm = torch.pow(am, y)
    lg = y * torch.log2(am)  # where m^y itself leaves the doubles (|y| in the thousands): 2^(y log₂ m)
    kl = torch.floor(lg)
    ok = pm >= _DBL_MIN  # (and finite: |m| < 1)
    out = _w_norm(torch.where(ok, pm, torch.exp2(lg - kl)) * frac, torch.where(ok, k, k + kl))
    far = ~((e * y).abs() < 1e300)  # e·y past any exponent: ∞ or 0, as the core's
    return _w_pick(far, _w_of(torch.where(e * y > 0, _INF, torch.zeros_like(y))), out)


def _w_pow(a, b):
    x, y = _w_value(a), _w_value(b)
    r = torch.pow(x, y)
    special = (a[0] == 0) | ~torch.isfinite(a[0])
    # the double pow wherever a is a double and a^b one too (or no number: a negative base)
    direct = (_w_in_range(a) & ((torch.isfinite(r) & (r.abs() >= _DBL_MIN)) | torch.isnan(r) | (y == 0))) | special
    direct = direct | (b[1] > 1024)  # an exponent past DBL_MAX: 0, 1 or ∞ as the doubles have it
    v = _w_pow_abs(a, y)
    negative = _w_pick(torch.fmod(y, 2.0) != 0, _w_neg(v), v)  # a negative base: real for an integer y only
    negative = _w_pick(y != torch.floor(y), _w_of(torch.full_like(y, _NAN)), negative)
    return _w_pick(direct, _w_of(r), _w_pick(a[0] < 0, negative, v))


def _w_sqrt(a):
    odd = torch.fmod(a[1], 2.0) != 0
    m = torch.where(odd, a[0] * 2.0, a[0])
    e = torch.where(odd, a[1] - 1.0, a[1])
    return _w_norm(torch.sqrt(m), e * 0.5)


# |x| below DBL_MIN: these are x to first order (the double evaluation of a subnormal would lose it)
_W_TINY_IDENTITY = {"sin", "tan", "arcsin", "arctan", "sinh", "tanh", "arcsinh", "arctanh", "expm1", "log1p"}


def _w_unary(op: str, a):
    """An elementary function in extended range: the double function where the argument is a double
    (past DBL_MAX it sees ±∞, below the normals ±0, which give the right limits for most), the
    asymptotic forms beyond: e^|x|/2 for cosh and sinh past 700, log |x| + log 2 for arcsinh and
    arccosh and log x for log1p past DBL_MAX, x itself below DBL_MIN where f(x) ≈ x."""
    if op == "neg":
        return _w_neg(a)
    if op == "square":
        return _w_mul(a, a)
    if op == "sqrt":
        return _w_sqrt(a)
    if op == "abs":
        return a[0].abs(), a[1]
    if op == "sign":
        return _w_of(_PROG_UNARY["sign"](a[0]))
    if op == "exp":
        return _w_exp(a)
    if op == "log":
        return _w_log(a)
    inside = _w_in_range(a)
    if op == "log2":
        return _w_of(torch.where(inside, torch.log2(_w_value(a)), a[1] + torch.log2(a[0])))
    if op == "log10":
        return _w_of(torch.where(inside, torch.log10(_w_value(a)), _w_log_of(a) / _LN10))
    x = _w_value(a)
    out = _w_of(_PROG_UNARY[op](x))
    big = x.abs() >= 700.0
    if op == "expm1":
        out = _w_pick(big & (x > 0), _w_exp(a), out)
    elif op in ("cosh", "sinh"):
        v = _w_exp((a[0].abs(), a[1]))
        v = (v[0] * 0.5, v[1])  # exact: m/2 stays a double, normalised again by any later operation
        out = _w_pick(big, _w_pick(a[0] < 0, _w_neg(v), v) if op == "sinh" else v, out)
    if op in _W_TINY_IDENTITY:
        out = _w_pick(a[1] < -1021, a, out)
    huge = a[1] > 1024
    if op in ("arcsinh", "arccosh", "log1p"):
        lg = _w_log_of((a[0].abs(), a[1])) + (0.0 if op == "log1p" else _LN2)
        if op == "arcsinh":
            lg = torch.where(a[0] < 0, -lg, lg)
        else:
            lg = torch.where(a[0] < 0, _NAN, lg)
        out = _w_pick(huge, _w_of(lg), out)
    return out


def _w_binary(op: str, a, b):
    if op == "add":
        return _w_add(a, b)
    if op == "sub":
        return _w_sub(a, b)
    if op == "mul":
        return _w_mul(a, b)
    if op == "div":
        return _w_div(a, b)
    if op == "pow":
        return _w_pow(a, b)
    if op == "logical_and":
        return _w_of(((a[0] != 0) & (b[0] != 0)).to(a[0].dtype))
    if op == "logical_or":
        return _w_of(((a[0] != 0) | (b[0] != 0)).to(a[0].dtype))
    c = _w_cmp(a, b)
    nan = c == 2
    if op == "maximum":
        return _w_pick(nan, _w_of(torch.full_like(c, _NAN)), _w_pick(c < 0, b, a))
    if op == "minimum":
        return _w_pick(nan, _w_of(torch.full_like(c, _NAN)), _w_pick(c > 0, b, a))
    hit = {"less": c == -1, "less_equal": (c == -1) | (c == 0), "greater": c == 1, "greater_equal": (c == 1) | (c == 0),
           "equal": c == 0, "not_equal": c != 0}[op]
    return _w_of(hit.to(c.dtype))


def _prog_wide(ops: list[str], values: list[float], t):
    """f at points given in extended range, ``t`` an (m, e) pair of float64 tensors (t may pass DBL_MAX)."""
    stack: list = []
    for op, v in zip(ops, values):
        if op == "constant":
            stack.append(_w_const(v, t[0]))
        elif op == "t":
            stack.append(t)
        elif op == "where":
            c, a, b = stack[-3:]
            del stack[-3:]
            stack.append(_w_pick(c[0] != 0, a, b))
        elif op in _PROG_UNARY:
            stack.append(_w_unary(op, stack.pop()))
        else:
            b = stack.pop()
            a = stack.pop()
            stack.append(_w_binary(op, a, b))
    return stack[0]


# ---------------------------------------------------------------- f̃ and its perspective


def _prog_forms(ops: list[str], values: list[float], *, tilt: float, f0: float, f_inf: float, series: tuple, radius: float):
    """(f̃, perspective) of a program: f̃(t) on [0, ∞] and y·f̃(x/y) for y ≥ 0, x ≥ 0, on float64 tensors.

    ``tilt`` c, ``f0`` f(0⁺), ``f_inf`` f∞ (untilted, as :class:`~mentored.divergences.symbolic.SymbolicInfo`),
    ``series`` the Taylor coefficients of f̃ at 1 used where |t − 1| < ``radius``. Where the double
    evaluation is not finite at a point of (0, ∞) (for the perspective: at x > 0), the point is
    evaluated again in extended range. Both evaluations run on every point and the non-finite ones
    are selected, so that nothing is read back to the host (the solve and a draft tree's verifiers
    stay queued on a device; the extended range costs a few operations for each of the program's).
    Where extended range gives no finite number either and f̃∞ is finite, the bound f̃∞·x stands
    (``settled``); with f̃∞ = ∞ the value stays ∞ or NaN.
    """
    c = float(tilt)
    f_inf_tilde = float(f_inf) - c

    def tilde_plain(x: torch.Tensor) -> torch.Tensor:
        return _tilde_of(lambda xs: _prog_plain(ops, values, xs), x, tilt=c, f0=f0, f_inf=f_inf, series=series, radius=radius)[0]

    def tilde_wide(t):
        """f̃ in extended range at t = (m, e): f(t) − c(t − 1)."""
        f = _prog_wide(ops, values, t)
        return f if c == 0 else _w_sub(f, _w_mul(_w_const(c, t[0]), _w_sub(t, _w_const(1.0, t[0]))))

    def term_wide(x, y):
        """y·f̃(x/y) in extended range, x/y never rounded to a double; NaN where undefined there."""
        xw, yw = _w_of(x), _w_of(y)
        return _w_value(_w_mul(yw, tilde_wide(_w_div(xw, yw))))

    def settled(fixed, x):
        """A value of extended range where it is a number; else, with f̃∞ finite, its bound f̃∞·x: the
        term is then at most f̃∞·x, and within y·|g(x/y)| of it, g(t) = f̃(t) − f̃∞t = o(t), for a point
        whose exponent itself passes the doubles' (x/y or e^(x/y) beyond 2^(DBL_MAX))."""
        if not math.isfinite(f_inf_tilde):
            return fixed
        return torch.where(torch.isnan(fixed) | torch.isinf(fixed), x * f_inf_tilde, fixed)

    def f_tilde(x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float64)  # (the extended range splits float64 bits)
        out = tilde_plain(x)
        bad = ~torch.isfinite(out) & (x > 0) & (x < _INF)
        fixed = _w_value(tilde_wide(_w_of(torch.where(bad, x, 1.0))))
        return torch.where(bad, settled(fixed, x), out).clamp(min=0.0)  # f̃ ≥ 0 by convexity; rounding must not make it negative (NaN stays)

    def perspective(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.to(torch.float64), y.to(torch.float64)
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


_DOWN = 2.0**-128  # upper-side ratios are held scaled, r·2⁻¹²⁸, as in cpp/mentored/path.hpp
_UP = 2.0**128
_ONE = 0x3FF0000000000000  # the int64 bits of 1.0: sort keys from it up are tokens of neither side
# The budget search: (points per step, steps), the bracket shrinking by the first each step, to 2⁻⁷²
# of the curve's length (finer than the 64 halvings of [0, s_max] it replaces). On a GPU few wide
# steps (each is ~40 kernel launches); on a CPU narrow ones, whose small ops stay on the calling
# thread (torch runs searchsorted in parallel past 200 queries, and a busy machine stalls that).
_SEARCH = {"cpu": (64, 12)}
_SEARCH_DEVICE = (256, 9)


_ROW_SORT = True


class _Workspace:
    """Scratch and table buffers (R, V) float64 for one thread's solves on a CPU, kept between calls.

    A fresh buffer of a few MB costs its page faults on a CPU, about as much as a pass over it; a
    solve needs about a dozen. Buffers 7 and 8 are adjacent (``pair``: the (2, R, V) suffix table).
    Only for the solves whose ``_Rows`` does not outlive the call (``solve``, ``solve_rows``,
    ``solve_point``); kept per thread, for one shape at a time, up to ``_WORKSPACE_MAX`` entries.
    """

    N = 11

    def __init__(self, shape, device):
        self.shape, self.device = shape, device
        self.flat = torch.empty((self.N,) + shape, dtype=torch.float64, device=device)
        self._reverse = None

    def take(self, i: int) -> torch.Tensor:
        return self.flat[i]

    def pair(self, i: int) -> torch.Tensor:
        return self.flat[i : i + 2]

    def reverse(self) -> torch.Tensor:
        """(R, V) int64: V − 1, …, 0 on every row (a flip as a gather)."""
        if self._reverse is None:
            R, V = self.shape
            self._reverse = torch.arange(V - 1, -1, -1, device=self.device).expand(R, V).contiguous()
        return self._reverse


def _host_reads(x: torch.Tensor) -> bool:
    """Whether values of ``x`` may be read on the host: a CPU tensor, with no device to keep in step
    (the tests turn it off to run the device's code on a CPU and check that it reads nothing back)."""
    return x.device.type == "cpu"


_LOCAL = threading.local()
_WORKSPACE_MAX = 1 << 21  # entries per buffer (R·V) up to which a thread keeps its workspace (11 buffers: 176 MB at most)


def _workspace(p: torch.Tensor) -> "_Workspace | None":
    if p.device.type != "cpu" or p.ndim != 2 or p.numel() > _WORKSPACE_MAX:
        return None
    ws = getattr(_LOCAL, "ws", None)
    if ws is None or ws.shape != tuple(p.shape):
        ws = _LOCAL.ws = _Workspace(tuple(p.shape), p.device)
    return ws


def _sort_rows(key: torch.Tensor, values: torch.Tensor, order: torch.Tensor):
    """torch.sort of each row (stable), into ``values`` and ``order``: on a CPU one row at a time,
    several times faster than the batched sort there (a 1-D sort takes torch's fast path), rows
    spread over torch's threads (a 1-D sort keeps to about one); on a GPU one batched call."""
    if key.device.type != "cpu" or not _ROW_SORT:
        return torch.sort(key, dim=-1, stable=True, out=(values, order))
    R = key.shape[0]

    def sort(rows):
        for r in rows:
            torch.sort(key[r], stable=True, out=(values[r], order[r]))

    nt = min(R, torch.get_num_threads())
    if nt < 2:
        sort(range(R))
    else:  # torch releases the GIL in its ops: the rows sort side by side
        list(_sort_pool(nt).map(sort, [range(i, R, nt) for i in range(nt)]))
    return values, order


_POOL = {"pool": None, "size": 0}
_POOL_LOCK = threading.Lock()


def _sort_pool(nt: int) -> ThreadPoolExecutor:
    """Worker threads for the row sorts, kept between calls (as many as torch's threads, at most)."""
    with _POOL_LOCK:
        if _POOL["size"] < nt:  # torch's threads were raised: a larger pool (the old one, idle, is left
            # alone: a caller may hold it still)
            _POOL["pool"], _POOL["size"] = ThreadPoolExecutor(nt, thread_name_prefix="mentored-sort"), nt
        return _POOL["pool"]


class _Rows:
    """The sorted-ratio structure of a batch of rows (R, V), float64 (docs/theory.md §4).

    One sort per row, by a key that puts the target's favoured side first, by ratio descending, then
    the other side by ratio ascending, then ties and the target's zeros::

        [ r > 1, from the largest down | r < 1, from 0 up | r = 1 and p = 0 ]

    so that the prefix sums of p and q on each side accumulate from its extreme (the mass capped at
    t_hi, held at t_lo, however small, is a sum of its own tokens), and the suffix sums of p·f̃(r)
    accumulate from ratio 1 (the unclipped tokens). Down and Up are piecewise affine between sorted
    ratios; the thresholds at s are a ``searchsorted`` on their values at the breakpoints and one
    division, and D_f(π(s)‖p) is O(1) per row from the tables (``divergence``). The budget search
    evaluates D at many points per row per step (``_SEARCH``). Nothing is read back to the host.

    The sort is on int64 keys, the bit patterns of the nonnegative float64 ratios (order-preserving,
    and faster to sort than floats): r on the lower side, the complement of the bits of r·2⁻¹²⁸ on the
    upper side (negative, so first, and descending), the bits of r elsewhere (1, inf or NaN, all past
    the lower side's). Ratios of the upper
    side past DBL_MAX (p denormal next to q) are ordered by their scaled value r·2⁻¹²⁸; their terms
    p f̃(r) are taken in perspective form from (q, p), and the capped group's P_hi·f̃(t_hi) from
    (capped mass, P_hi), so that nothing overflows (docs/reliability.md).
    """

    def __init__(self, p: torch.Tensor, q: torch.Tensor, divergence, ws: "_Workspace | None" = None):
        self.forms = forms = divergence if isinstance(divergence, _Forms) else _torch_forms(divergence)
        self.p, self.q = p, q
        R, V = p.shape
        # Few passes, and dead (R, V) buffers reused rather than fresh ones (on a CPU a fresh buffer
        # costs its page faults, as much as a pass): A, B, C, D below, then the tables.
        pos = p > 0
        # On a CPU (no device to keep in step) whether any p_i = 0 is read once, and rows without
        # such tokens skip the work for them (here, q0 and π's select); on a device it is assumed.
        self.zeros = zeros = not _host_reads(p) or not bool(pos.all())
        # r: inf or NaN where p = 0, sorted after the lower side by its bits (abs: 0/0 is a NaN with
        # the sign bit set on x86, whose bits would sort first)
        buf = ws.take if ws is not None else (lambda i: None)
        A = torch.div(q, p, out=buf(0)).abs_()
        B = torch.mul(p, _UP, out=buf(1))
        torch.div(q, B, out=B)  # r·2⁻¹²⁸ as q/(p·2¹²⁸): the double r·2⁻¹²⁸ wherever r is finite, and finite past DBL_MAX
        # key = ~bits(r·2⁻¹²⁸) on the upper side, bits(r) elsewhere, as key ^ ((key ^ ~bits(u)) & M) with
        # M = −1 on the upper side: three integer passes cost less than a select on a random mask.
        key, kb = A.view(torch.int64), B.view(torch.int64).bitwise_not_()
        M = torch.empty_like(key) if ws is None else buf(3).view(torch.int64)
        if zeros:
            M.copy_((q > p) & pos).neg_()
        else:  # all p_i > 0: the upper side is q > p, read from the bits (nonnegative: ordered as the values)
            torch.sub(p.view(torch.int64), q.view(torch.int64), out=M).bitwise_right_shift_(63)
        key.bitwise_xor_(torch.bitwise_xor(key, kb, out=kb).bitwise_and_(M))
        del M, kb
        C = buf(2)
        skey, order = _sort_rows(key, B.view(torch.int64), torch.empty_like(key) if C is None else C.view(torch.int64))
        ps = torch.gather(p, -1, order, out=A)
        qs = torch.gather(q, -1, order, out=buf(3))
        C = order.view(torch.float64)  # scratch from here on
        del order, key
        bounds = torch.tensor([0, _ONE], dtype=torch.int64, device=p.device).expand(R, 2).contiguous()
        ends = torch.searchsorted(skey, bounds)
        self.n_hi, self.n_end = ends[:, 0], ends[:, 1]  # the upper side is [0, n_hi), the lower [n_hi, n_end)
        in_hi = skey < 0
        in_lo = (skey < _ONE) & ~in_hi
        # |key| as floats: r·2⁻¹²⁸ on the upper side (the complement undone), r on the lower, and
        # past it 1, inf (p = 0 < q) or NaN (p = q = 0), which every search below reads as +inf.
        skey.bitwise_xor_(torch.bitwise_right_shift(skey, 63, out=C.view(torch.int64)))
        self.key = kabs = skey.view(torch.float64)
        del skey
        # (pos nearly all true: a predictable branch)
        self.q0 = torch.where(pos, q.new_zeros(()), q, out=C).sum(-1) if zeros else q.new_zeros(R)
        del pos
        # Inclusive prefix sums (R, V) (``_at`` reads Σ_{i<j} at j − 1): the upper side starts at
        # index 0, so the plain sums are its own; the lower side's are of its tokens alone.
        self.Chp, self.Chq = torch.cumsum(ps, -1, out=buf(4)), torch.cumsum(qs, -1, out=buf(5))
        # p·f̃(r) per token, in perspective form from (q, p): finite however large r is (p denormal);
        # NaN or inf on tokens of neither side, which the masks below drop (a where, not 0·inf).
        # Its suffix sums on each side, from ratio 1 outward, are held reversed (2, R, V): the sum over
        # positions ≥ j at column V − 1 − j (``_suffix``).
        if forms.log_ratio_term is not None:  # from log r = log|key| (+128 log 2 on the upper side): one log
            log_r = torch.log(kabs, out=buf(6)).add_(C.copy_(in_hi), alpha=128 * _LN2)  # (a float mask: adding a bool one is slow)
            F = forms.log_ratio_term(qs, ps, log_r)
        else:
            F = forms.perspective(qs, ps)
        S = F.new_empty((2, R, V)) if ws is None else ws.pair(7)
        if ws is None:
            torch.ops.aten.flip.out(F, [-1], out=S[0])
        else:  # a gather by a kept index: twice as fast as a flip on a CPU
            torch.gather(F, -1, ws.reverse(), out=S[0])
        torch.where(in_lo.flip(-1), S[0], S.new_zeros(()), out=S[1])  # a select, not 0·inf
        S[0].masked_fill_(~in_hi.flip(-1), 0.0)
        self.S = S.cumsum_(-1)
        out_lo = ~in_lo
        self.Clp = ps.masked_fill_(out_lo, 0.0).cumsum_(-1)
        self.Clq = qs.masked_fill_(out_lo, 0.0).cumsum_(-1)
        del ps, qs, out_lo
        # TV = P_lo − Q_lo, the lower side's sums, as the core takes it (and g's value past the side);
        # D_up = Q_hi − P_hi from the upper side's own sums, as the core does: ≥ 0 however the sums
        # round (q_i > p_i token by token), where TV − Q0 may round below 0 and hand the target's zeros
        # a share z = (s − D_up)/Q0 > 0 of q at s = 0.
        self.tv = self.Clp[:, -1] - self.Clq[:, -1]
        last_hi = (self.n_hi - 1).clamp(min=0)[:, None]
        self.d_up = (self.Chq.gather(-1, last_hi) - self.Chp.gather(-1, last_hi))[:, 0].clamp_(min=0.0).masked_fill_(self.n_hi == 0, 0.0)
        # Breakpoints (token k itself adds r_k p_k − q_k = 0, so the inclusive sums serve).
        # Lower: g_k = r_k P_{<k} − Q_{<k}, nondecreasing on the lower side; t_lo solves
        # g(t) = TV − s. It is 0 on the upper side (no lower mass yet) and P_lo − Q_lo = TV, inf or NaN
        # past it, so one searchsorted on the row, clamped to [n_hi, n_end], finds the lower side's
        # breakpoint. Upper: h_m = Q_{<m} − r_m P_{<m} (nondecreasing along the descending side),
        # +inf past it; t_hi solves h(t) = D_up − s. A binary search returns a crossing of the level
        # however rounding perturbs the order, and the answer is clamped to the gap it finds.
        self.g = torch.mul(kabs, self.Clp, out=C).sub_(self.Clq)
        # r_m P_{<m} as u_m·(P·2¹²⁸) with u = |key| on the upper side: finite past DBL_MAX.
        P_up = torch.mul(self.Chp, _UP, out=F)
        self.h = torch.addcmul(self.Chq, kabs, P_up, value=-1.0, out=F).masked_fill_(~in_hi, _INF)

    def _suffix(self, side: int, j: torch.Tensor) -> torch.Tensor:
        """Σ_{i ≥ j} F_i on a side (0 upper, 1 lower), gathered at positions j ∈ [0, V] (R, K)."""
        V = self.key.shape[-1]
        return self.S[side].gather(-1, (V - 1 - j).clamp_(min=0)).masked_fill_(j >= V, 0.0)

    def s_max(self, zeros: str = "continue") -> torch.Tensor:
        """The end of the curve: D_up where mass on {p = 0} is refused (f∞ = ∞, or zeros="keep") or
        there is none (Q0 = 0), else TV; never past TV (TV and D_up + Q0 may differ by rounding)."""
        end = torch.minimum(self.tv, self.d_up)
        if zeros == "keep" or math.isinf(self.forms.f_inf_tilde):
            return end
        return torch.where(self.q0 > 0, self.tv, end)

    def _at(self, s: torch.Tensor):
        """Thresholds and table entries at s (R, K): the dict of what π(s) and D(s) need.

        Written with few small ops (the budget search calls it ~20 times): in-place fills rather
        than wheres, one shifted index per side for the exclusive sums and the ratio below."""
        n_hi, n_end = self.n_hi[:, None], self.n_end[:, None]
        V = self.key.shape[-1]
        flat = s <= 0
        c = (self.tv[:, None] - s).clamp_(min=0)
        k = torch.searchsorted(self.g, c).clamp_(min=n_hi, max=n_end)  # index in the row of the first unclipped lower token
        km1 = (k - 1).clamp_(min=0)
        # Σ_{i<k} from the inclusive sums: zero on the upper side already, so only k = 0 needs a fill
        k0 = k == 0
        PL = self.Clp.gather(-1, km1).masked_fill_(k0, 0.0)
        QL = self.Clq.gather(-1, km1).masked_fill_(k0, 0.0)
        t_lo = (c + QL).div_(PL).masked_fill_(PL <= 0, 0.0)  # PL = 0 only at s = TV
        # within the gap of sorted ratios found, and in [0, 1]
        r_below = self.key.gather(-1, km1).masked_fill_(k <= n_hi, 0.0)
        r_above = self.key.gather(-1, k.clamp(max=V - 1)).masked_fill_(k >= n_end, 1.0)
        t_lo = torch.minimum(torch.maximum(t_lo, r_below), r_above).clamp_(0.0, 1.0).masked_fill_(flat, 1.0)
        c2 = self.d_up[:, None] - s
        m = torch.searchsorted(self.h, c2, right=True)  # capped upper tokens
        mm1 = (m - 1).clamp_(min=0)
        m0 = m == 0
        PH = self.Chp.gather(-1, mm1).masked_fill_(m0, 0.0)
        QH = self.Chq.gather(-1, mm1).masked_fill_(m0, 0.0)
        open_end = (c2 <= 0) | (PH <= 0)
        m = m.masked_fill_(open_end, 0)  # nothing capped: every upper token is at q
        num = (QH - c2).masked_fill_(open_end, 1.0)
        den = PH.masked_fill_(open_end, 1.0)
        num = torch.maximum(num, den).masked_fill_(flat, 1.0)  # t_hi ≥ 1
        den = den.masked_fill_(flat, 1.0)
        open_end = open_end & ~flat
        t_hi = (num / den).masked_fill_(open_end, _INF)
        return dict(k=k, m=m, PL=PL, t_lo=t_lo, t_hi=t_hi, num=num, den=den, open_end=open_end, s=s)

    def divergence(self, s: torch.Tensor, at=None) -> torch.Tensor:
        """D_f(π(s)‖p) at s (R, K), O(log V) per point (docs/theory.md §4)."""
        a = at or self._at(s)
        f_tilde, perspective = self.forms.f_tilde, self.forms.perspective
        PL, t_lo = a["PL"], a["t_lo"]
        d = (PL * f_tilde(t_lo)).masked_fill_(PL <= 0, 0.0)  # not 0·f̃(0) = 0·inf
        d += self._suffix(1, a["k"])
        d += self._suffix(0, a["m"])
        num, den, t_hi, open_end = a["num"], a["den"], a["t_hi"], a["open_end"]
        near = t_hi <= _FAR
        capped = torch.where(near, den * f_tilde(torch.where(near, t_hi, 1.0)), perspective(num, den))
        d += capped.masked_fill_(open_end | (a["m"] == 0), 0.0)
        return d + self._tail(s)

    def _tail(self, s: torch.Tensor) -> torch.Tensor:
        extra = (s - self.d_up[:, None]).clamp(min=0)
        f_inf = self.forms.f_inf_tilde
        return torch.where(extra > 0, extra * f_inf, 0.0) if math.isinf(f_inf) else extra * f_inf

    def search(self, eps: torch.Tensor, zeros: str = "continue") -> torch.Tensor:
        """The largest s ≤ s_max with D_f(π(s)‖p) ≤ ε, per row (R,): a k-ary search, no host sync."""
        s_hi = self.s_max(zeros)
        e = eps[:, None]
        ok_end = (self.divergence(s_hi[:, None]) <= e)[:, 0]
        lo = torch.zeros_like(s_hi)
        hi = s_hi
        K, steps = _SEARCH.get(s_hi.device.type, _SEARCH_DEVICE)
        frac = torch.arange(1, K, dtype=s_hi.dtype, device=s_hi.device) / K
        for _ in range(steps):
            pts = lo[:, None] + (hi - lo)[:, None] * frac
            good = (self.divergence(pts) <= e).to(torch.int64).cumprod(-1)  # D is nondecreasing in s
            n = good.sum(-1, keepdim=True)
            lo = torch.where(n[:, 0] > 0, pts.gather(-1, (n - 1).clamp(min=0))[:, 0], lo)
            hi = torch.where(n[:, 0] < K - 1, pts.gather(-1, n.clamp(max=K - 2))[:, 0], hi)
        s = torch.where(ok_end, s_hi, torch.minimum(lo, s_hi))  # (lo + (hi − lo)·frac may round past hi)
        return torch.where(eps <= 0, torch.zeros_like(s), s)

    def point(self, s: torch.Tensor) -> "_Point":
        a = self._at(s[:, None])
        z = (s - self.d_up).clamp(min=0) / torch.where(self.q0 > 0, self.q0, 1.0)
        return _Point(a["t_lo"][:, 0], a["t_hi"][:, 0], a["num"][:, 0], a["den"][:, 0], a["open_end"][:, 0], z)

    def pi(self, s: torch.Tensor) -> torch.Tensor:
        return self.point(s).pi(self.p, self.q)


class _Point:
    """A point of the curve per row: thresholds (t_hi as num/den, see below) and the share z of q on {p = 0}.

    ``t_hi = num/den`` (``inf`` when nothing is capped); the pair is kept because the quotient may
    overflow when the capped target mass ``den`` is denormal, while the capped values
    ``p_i·t_hi = (p_i/den)·num`` do not. π is computed for any rows (``pi``) or tokens (``pi_at``)
    of the solved ones, so that a verifier forms only the rows it draws from.
    """

    def __init__(self, t_lo, t_hi, num, den, open_end, z):
        self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z = t_lo, t_hi, num, den, open_end, z

    @staticmethod
    def identity(n: int, like: torch.Tensor) -> "_Point":
        """s = 0 on n rows: t_lo = t_hi = 1, π = p."""
        f = lambda v: torch.full((n,), v, dtype=torch.float64, device=like.device)  # noqa: E731
        return _Point(f(1.0), f(1.0), f(1.0), f(1.0), torch.zeros(n, dtype=torch.bool, device=like.device), f(0.0))

    def put(self, rows: torch.Tensor, other: "_Point") -> None:
        for mine, theirs in zip(self._fields(), other._fields()):
            mine[rows] = theirs

    def _fields(self):
        return (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z)

    def take(self, rows: torch.Tensor) -> "_Point":
        return _Point(*(x[rows] for x in (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z)))

    def pi(self, p: torch.Tensor, q: torch.Tensor, dtype=None, ws: "_Workspace | None" = None, scratch: bool = False,
           zeros: bool = True) -> torch.Tensor:
        """π on rows (R, V) or tokens (R, …): max(t_lo p_i, min(q_i, t_hi p_i)), q_i·z where p_i = 0.

        ``dtype``: of the result (default p's), rounded once from the float64 values; ``ws``: scratch
        buffers of p's shape (the result is a fresh tensor, or with ``scratch`` the workspace's buffer
        4, for a caller that reads it before the next solve); ``zeros=False``: no p_i is 0 (``_Rows.zeros``)."""
        shape = (-1,) + (1,) * (p.ndim - 1)
        t_lo, t_hi, num, den, open_end, z = (x.reshape(shape) for x in (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z))
        # p_i·t_hi as (p_i/d)·m: d = 1, m = t_hi where t_hi is finite (the same product), else
        # (den, num), so that nothing overflows where t_hi does; m = inf when nothing is capped.
        finite = torch.isfinite(t_hi)
        d = torch.where(finite, 1.0, den)
        m = torch.where(open_end, _INF, torch.where(finite, t_hi, num))
        cap = torch.div(p, d, out=ws.take(0) if ws else None).mul_(m)
        # max(t_lo p, min(q, cap)) as one clamp, since t_lo p ≤ p ≤ cap; where p = 0 the cap is NaN.
        low = torch.mul(t_lo, p, out=ws.take(1) if ws else None)
        # A fresh result unless asked (the workspace is reused by the next solve), or converted after.
        same = dtype in (None, p.dtype)
        out = cap if ws is None or not same else ws.take(4) if scratch else torch.empty_like(cap)
        body = torch.clamp(q, min=low, max=cap, out=out)
        if zeros:
            torch.where(p > 0, body, torch.mul(q, z, out=low), out=body)
        return body if same else body.to(dtype)


def _solve(target: torch.Tensor, draft: torch.Tensor, *, divergence="kl", budget=0.0, zeros="continue") -> torch.Tensor:
    r""":math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` for each row of (R, V) tensors, by the torch
    algorithm on their device whatever it is: how the tests and benchmarks run the device's code on
    CPU tensors (:func:`mentored.solve` hands CPU tensors to the core, which is faster there).

    Rows must be distributions, to the same relative tolerance as :func:`mentored.solve` (1e-6 for
    float64, 1e-3 for float32). ``budget`` is a float or an (R,) tensor/array. ``divergence`` is a
    built-in or a :meth:`~mentored.Divergence.from_sympy` divergence (compiled to torch,
    ``_torch_forms``). ``zeros="keep"`` adds the constraint :math:`\pi_i = 0` where :math:`p_i = 0`
    (docs/theory.md §8: the curve stops at :math:`s = \mathrm{TV} - Q_0` for every divergence);
    ``"continue"`` is the problem as stated. Returns :math:`\pi` in the dtype and on the device of
    ``target`` (computed in float64).
    """
    forms = _torch_forms(divergence)
    if target.ndim != 2 or target.shape != draft.shape:
        raise ValueError(f"target and draft must be (R, V) tensors of one shape, got {tuple(target.shape)} and {tuple(draft.shape)}")
    check_rows(target, "target")
    check_rows(draft, "draft")
    ws = _workspace(target)
    p, q = _normalised(target, ws, 9), _normalised(draft, ws, 10)
    R = p.shape[0]
    b = np.asarray(budget.cpu() if isinstance(budget, torch.Tensor) else budget, dtype=np.float64)
    if b.ndim and b.shape != (R,):
        raise ValueError(f"budget must be a scalar or have one value per row ({R}), got shape {b.shape}")
    if np.any(np.isnan(b)) or np.any(b < 0):
        raise ValueError("budget must be nonnegative (inf allowed) and not NaN")
    eps = torch.as_tensor(np.broadcast_to(b, (R,)).copy(), device=p.device)
    rows = _Rows(p, q, forms, ws)
    point, p_zeros = rows.point(rows.search(eps, zeros)), rows.zeros
    del rows  # its tables are the workspace's: π's scratch reuses them
    # float32: π64 is rounded into a fresh tensor, so it may stay in the workspace
    pi = point.pi(p, q, ws=ws, scratch=target.dtype == torch.float32, zeros=p_zeros)
    return _as_output(pi, p, target.dtype, forms, ws)


def _normalised(x: torch.Tensor, ws, slot: int) -> torch.Tensor:
    """x / Σx per row, float64, with Σx as the core sums it (``_row_sums``), so that π = p at s = 0 is
    the core's p bit for bit: widened into workspace buffer ``slot``, then divided in place (a
    mixed-dtype division into ``out=`` is several times slower on a CPU); buffer 0 is scratch."""
    if ws is None:
        x64 = x.to(torch.float64)  # x itself if float64: divided out of place
        return torch.div(x64, _row_sums(x64)[:, None])
    x64 = ws.take(slot).copy_(x)
    return x64.div_(_row_sums(x64, ws.take(0))[:, None])


def _row_sums(x: torch.Tensor, a: "torch.Tensor | None" = None) -> torch.Tensor:
    """Σ_i x_i per row of finite, nonnegative float64 rows (R, V), correctly rounded but for near-ties,
    as the core's compensated sums are (a plain sum is off by an ulp or so, and so is every x_i/Σx).

    Each row is split exactly as x = h + l, h_i = (σ + x_i) − σ: with σ a power of two past V·max x_i,
    every h_i and partial sum of them is a multiple of ulp(σ)/2 below σ, so Σh is exact in any order,
    and |l_i| ≤ ulp(σ)/2, so that the plain Σl is off by about log₂V·V²u² of Σx (u = 2⁻⁵³: 1e-20 at
    V = 2¹⁷, against an ulp's 1.1e-16), and Σh + Σl rounds once. Six passes, no host sync; ``a``:
    scratch of x's shape. Rows whose σ overflows (entries near DBL_MAX) take the plain sum, and so do
    rows whose σ would be denormal (σ = 0: h = x).
    """
    # σ: the power of two at or below 2^(g+1)·max x_i (its exponent bits), so σ > 2^g·max x_i ≥ (V + 2)·max x_i
    g = math.ceil(math.log2(x.shape[-1] + 2))
    top = x.amax(-1, keepdim=True).mul_(2.0 ** (g + 1))
    sigma = top.view(torch.int64).bitwise_and_(_EXPONENT_BITS).view(torch.float64)
    h = torch.add(x, sigma, out=a).sub_(sigma)
    H = h.sum(-1)
    total = H + torch.sub(x, h, out=h).sum(-1)
    return torch.where(torch.isfinite(total), total, x.sum(-1))


_FLT_MIN = float(torch.finfo(torch.float32).tiny)


def _as_output(pi: torch.Tensor, p: torch.Tensor, dtype, forms: _Forms, ws: "_Workspace | None" = None) -> torch.Tensor:
    """π (float64) in the output dtype. float32: not to nearest but toward p_i, as the core rounds
    (kernels.hpp, round_toward; proofs: Rounding.v), so that rounding cannot push D_f(π‖p) past the
    budget the float64 π met: the float32 neighbour of π_i on p_i's side when it is not past p_i; else
    (π_i and p_i in one gap between float32 neighbours lo < hi) the one nearer p_i, or below FLT_MIN
    the one whose term p_i f̃(x/p_i) is smaller. ``ws``: a workspace whose buffers 0–3 are free."""
    if dtype != torch.float32:
        return pi.to(dtype)
    # π_i 0 or float32-normal (the usual case), in integer arithmetic on the doubles' bits
    # (nonnegative: ordered as the values), as kernels.hpp's round_toward_normal does: π's bits with
    # the low 29 of 52 mantissa bits cleared are the float32 at or below π_i, rounded up first the one
    # at or above. Whole-tensor integer passes, no boolean masks (each costs a pass of its own), and
    # scratch from the workspace (a fresh buffer costs its page faults).
    buf = (lambda i: ws.take(i).view(torch.int64)) if ws is not None else (lambda i: None)
    vb, pb = pi.view(torch.int64), p.view(torch.int64)
    d = torch.sub(vb, pb, out=buf(0))  # < 0 where π_i < p_i: round up, toward p_i
    cand = torch.bitwise_right_shift(d, 63, out=buf(1)).bitwise_and_(_LOW29).add_(vb).bitwise_and_(~_LOW29)
    # The rest by the general rule: where the candidate passed p_i (cand − p and π − p of opposite
    # signs; meeting p from above is allowed, rare, and given by the general rule too), or where π_i
    # lies in (0, FLT_MIN), off float32's grid of normals (the sign of (b − FLT_MIN bits) & −b). A
    # p_i below FLT_MIN needs nothing more: π_i = 0 or past FLT_MIN cannot share its gap.
    flag = torch.sub(cand, pb, out=buf(2)).bitwise_xor_(d)
    tiny = torch.sub(vb, _FLT_MIN_BITS, out=buf(3)).bitwise_and_(torch.neg(vb, out=d))
    special = flag.bitwise_or_(tiny) < 0
    out = cand.view(torch.float64).to(torch.float32)  # exact: a float32 value
    if _host_reads(pi):  # the few such tokens gathered
        if bool(special.any()):
            idx = special.nonzero(as_tuple=True)
            out[idx] = _toward_any(pi[idx], p[idx], forms)
        return out
    return torch.where(special, _toward_any(pi, p, forms), out)  # on a device: no read-back


_LOW29 = (1 << 29) - 1  # a double's mantissa bits that float32 does not keep
_EXPONENT_BITS = 0x7FF0000000000000  # a double's exponent bits: of a normal x > 0, the power of two at or below x
_FLT_MIN_BITS = 0x3810000000000000  # the bits of FLT_MIN as a double


def _toward_any(pi: torch.Tensor, p: torch.Tensor, forms: _Forms) -> torch.Tensor:
    """The rule of :func:`_as_output` for any π_i ≥ 0 and p_i ≥ 0, through float32 neighbours."""
    r = pi.to(torch.float32)
    rd = r.to(torch.float64)
    bits = r.view(torch.int32)  # π ≥ 0: the float32 neighbours are one step of the bits away
    lo = torch.where(rd > pi, bits - 1, bits).view(torch.float32)
    hi = torch.where(rd < pi, bits + 1, bits).view(torch.float32)
    down = pi >= p
    inner = torch.where(down, lo, hi)
    ind = inner.to(torch.float64)
    ok = torch.where(down, ind >= p, ind <= p)
    lod, hid = lo.to(torch.float64), hi.to(torch.float64)
    # π_i and p_i in one gap: the neighbour nearer p_i; below FLT_MIN the one with the smaller term
    # (the terms evaluated on 1 where they are not needed: finite there)
    tiny = (~ok) & (p < _FLT_MIN) & (p > 0)
    pt, a, b = torch.where(tiny, p, 1.0), torch.where(tiny, lod, 1.0), torch.where(tiny, hid, 1.0)
    at_lo = torch.where(tiny, forms.perspective(a, pt) <= forms.perspective(b, pt), p - lod <= hid - p)
    return torch.where(ok, inner, torch.where(at_lo, lo, hi))


def solve_rows(p: torch.Tensor, q: torch.Tensor, divergence, eps: torch.Tensor, zeros: str = "continue") -> torch.Tensor:
    """π in float64 for float64 rows (R, V) and budgets ``eps`` (R,) on their device: no checks, no host sync.

    ``divergence``: a name, a :class:`~mentored.Divergence` or its ``_Forms``.
    """
    ws = _workspace(p)
    p, q = _normalised(p, ws, 9), _normalised(q, ws, 10)
    rows = _Rows(p, q, divergence, ws)
    point, p_zeros = rows.point(rows.search(eps, zeros)), rows.zeros
    del rows
    return point.pi(p, q, ws=ws, zeros=p_zeros)


def solve_point(p: torch.Tensor, q: torch.Tensor, divergence, eps: torch.Tensor, zeros: str = "continue") -> "_Point":
    """The thresholds of the optimum per row, for rows (R, V) already normalised, float64.

    π of any row or token follows without forming the others (``_Point.pi``). No checks, no host
    synchronisation.
    """
    ws = _workspace(p)
    rows = _Rows(p, q, divergence, ws if ws is None or not _aliases(ws, p, q) else None)
    return rows.point(rows.search(eps, zeros))


def _aliases(ws: "_Workspace", *xs: torch.Tensor) -> bool:
    """Whether any of xs shares memory with the workspace (rows it normalised itself)."""
    lo, hi = ws.flat.data_ptr(), ws.flat.data_ptr() + ws.flat.numel() * ws.flat.element_size()
    return any(lo <= x.data_ptr() < hi for x in xs)


class _Chains(NamedTuple):
    """Drafts flattened over requests (vLLM's layout), as device tensors: request b owns the ``n[b]``
    positions from ``starts[b]``; position t is request ``req[t]``'s draft at depth ``pos[t]``, whose
    parent is position t − 1 (none at depth 0). ``K``: the longest chain."""

    n: torch.Tensor
    starts: torch.Tensor
    req: torch.Tensor
    pos: torch.Tensor
    K: int

    @staticmethod
    def of(n: np.ndarray, starts: np.ndarray, req: np.ndarray, pos: np.ndarray, device) -> "_Chains":
        def dev(a):
            return torch.as_tensor(a, dtype=torch.int64, device=device)

        return _Chains(dev(n), dev(starts), dev(req), dev(pos), int(n.max()) if n.size else 0)

    @staticmethod
    def uniform(B: int, k: int, device) -> "_Chains":
        """B chains of k drafts each."""
        n = np.full(B, k, dtype=np.int64)
        return _Chains.of(n, np.arange(B, dtype=np.int64) * k, np.repeat(np.arange(B, dtype=np.int64), k), np.tile(np.arange(k, dtype=np.int64), B), device)


def _verify(pi_x: torch.Tensor, q_x: torch.Tensor, u: torch.Tensor, draft: torch.Tensor, bonus: torch.Tensor, chains: _Chains,
            rows: Callable[[torch.Tensor], tuple], failed: tuple | None = None, block: torch.Tensor | None = None) -> torch.Tensor:
    r"""The accept / first-rejection / residual / bonus rule of ``cpp/mentored/speculative.hpp``, in
    torch: every device verification (:func:`speculative_step`, ``serving.rejection_sample``) is this.

    Position t (of T, laid out by ``chains``) with draft :math:`x_t` is accepted iff :math:`x_t \ge 0`
    and ``u[t, 0]·q_x[t] < pi_x[t]`` (:math:`q_x` of :math:`q/\sum q`, the row π answers; a
    placeholder −1 is always rejected). Request b emits its drafts before its first rejection
    :math:`j^*`, then at :math:`j^*` the token of :math:`t = \text{starts}_b + j^*` drawn at
    ``u[t, 1]`` from :math:`(\pi_t - q_t)_+` normalised (from :math:`\pi_t` where rounding leaves
    that no mass; from :math:`p_t` at a placeholder, which has no draft to lean toward), or, with all
    :math:`n_b` accepted, ``bonus[b]``. ``rows(t)`` gives the float64 rows :math:`(\pi, q, p)` at
    positions t (one per request), with :math:`(\pi - q)_+` the residual up to a factor. Greedy
    requests are the rule with :math:`\pi = p = \delta_{\arg\max p}`; token-only drafts with
    :math:`q = \delta_x` (π off x is proportional to p). int32 (B, K + 1), −1 where nothing is
    emitted; no host synchronisation. ``failed = (bad, token)`` (validation off): positions whose rows
    are not distributions reject their draft and emit ``token`` there, as the core's lenient mode.
    ``block`` (B,) bool: those requests (random, dense drafts) are verified as a block instead
    (:func:`_verify_block`, the core's ``verify_block``).
    """
    n, K, T = chains.n, chains.K, draft.shape[0]
    B, device = n.shape[0], bonus.device
    out = torch.full((B, K + 1), -1, dtype=torch.int32, device=device)
    if B == 0:
        return out
    if K:
        accept = (draft >= 0) & (u[:, 0] * q_x < pi_x)
        if failed is not None:
            accept &= ~failed[0]
        acc_pad = torch.ones((B, K), dtype=torch.bool, device=device)
        acc_pad[chains.req, chains.pos] = accept
        rej = ~acc_pad
        has_rej = rej.any(1)
        jstar = torch.where(has_rej, rej.to(torch.int8).argmax(1), n)  # first rejection, or n_b
        draft_pad = torch.full((B, K), -1, dtype=torch.int64, device=device)
        draft_pad[chains.req, chains.pos] = draft
        cols = torch.arange(K, device=device)
        out[:, :K] = torch.where(cols[None, :] < jstar[:, None], draft_pad, -1).to(torch.int32)
    else:
        has_rej = torch.zeros(B, dtype=torch.bool, device=device)
        jstar = n
    # the token at column j*: the bonus, or the residual token of starts + j* (computed for every
    # request, used where it rejected: no host synchronisation)
    token = bonus
    if T:
        ts = (chains.starts + torch.minimum(jstar, (n - 1).clamp(min=0))).clamp(max=T - 1)
        pi, q, p = rows(ts)
        w = torch.where((draft[ts] < 0)[:, None], p, (pi - q).clamp(min=0))
        drawn = _inverse_cdf(w, u[ts, 1], pi)
        if failed is not None:
            drawn = torch.where(failed[0][ts], failed[1][ts], drawn)
        token = torch.where(has_rej, drawn, bonus)
    out.scatter_(1, jstar[:, None], token[:, None].to(torch.int32))
    if block is not None and K and T:
        out = torch.where(block[:, None], _verify_block(pi_x, q_x, u, draft, bonus, chains, rows, failed), out)
    return out


def _verify_block(pi_x, q_x, u, draft, bonus, chains: _Chains, rows, failed) -> torch.Tensor:
    r"""Block verification of every request (``verify_block`` of ``cpp/mentored/speculative.hpp``, in
    torch; docs/theory.md §10): with :math:`w_0 = 1`, :math:`w_{i+1} = \min(w_i \pi_i(x_i)/q_i(x_i), 1)`,
    :math:`h_i = R_i/(R_i + 1 - w_i)` for :math:`0 < i < m` (:math:`R_i = \sum_y (w_i\pi_i(y) - q_i(y))_+`,
    1 when 0/0) and :math:`h_m = w_m`, τ is the largest i ≤ m with ``u[start + i − 1, 0] < h_i`` (0 if
    none); then the residual token of :math:`(w_\tau\pi_\tau - q_\tau)_+` at ``u[start + τ, 1]``, or at
    τ = m the token of the position ending the block (a placeholder's, drawn from p; a failed row's),
    or the bonus. m: the first placeholder or failed position, else n. int32 (B, K + 1)."""
    n, K, T = chains.n, chains.K, draft.shape[0]
    B, device = n.shape[0], bonus.device
    req, pos = chains.req, chains.pos
    ends = draft < 0
    if failed is not None:
        ends = ends | failed[0]
    pad = torch.ones((B, K), dtype=torch.bool, device=device)  # positions past n end the block too
    pad[req, pos] = ends
    cols = torch.arange(K + 1, device=device)
    m = torch.where(pad.any(1), pad.to(torch.int8).argmax(1), n)
    # the weights along each chain, one depth at a time (min(·, 1) does not factor)
    ratio = torch.zeros((B, K), dtype=torch.float64, device=device)
    ratio[req, pos] = torch.where(pi_x > 0, torch.where(q_x > 0, pi_x / q_x, torch.inf), 0.0)
    w = torch.ones((B, K + 1), dtype=torch.float64, device=device)
    for i in range(K):
        w[:, i + 1] = torch.where(w[:, i] > 0, torch.minimum(w[:, i] * ratio[:, i], torch.ones_like(w[:, i])), 0.0)
    pi, q, p = rows(torch.arange(T, device=device))
    w_t = w[req, pos]
    R = torch.zeros((B, K + 1), dtype=torch.float64, device=device)
    R[req, pos] = (w_t[:, None] * pi - q).clamp(min=0).sum(-1)
    den = R + (1 - w)
    h = torch.where(den > 0, R / den.where(den > 0, torch.ones_like(den)), 1.0)
    h = torch.where(cols[None, :] == m[:, None], w, h)
    u0 = torch.ones((B, K + 1), dtype=torch.float64, device=device)  # u0 of position i − 1 tests h_i
    u0[req, pos + 1] = u[:, 0]
    passes = (u0 < h) & (cols[None, :] >= 1) & (cols[None, :] <= m[:, None])
    tau = torch.where(passes.any(1), K - passes.flip(1).to(torch.int8).argmax(1), 0)
    draft_pad = torch.full((B, K), -1, dtype=torch.int64, device=device)
    draft_pad[req, pos] = draft
    out = torch.full((B, K + 1), -1, dtype=torch.int32, device=device)
    out[:, :K] = torch.where(cols[None, :K] < tau[:, None], draft_pad, -1).to(torch.int32)
    # the token at column τ: the residual's, or the token of the position ending the block, or the bonus
    t = (chains.starts + torch.minimum(tau, (n - 1).clamp(min=0))).clamp(max=T - 1)
    w_tau = w.gather(1, tau[:, None])
    drawn = _inverse_cdf((w_tau * pi[t] - q[t]).clamp(min=0), u[t, 1], pi[t])
    ended = _inverse_cdf(p[t], u[t, 1], p[t])
    if failed is not None:
        ended = torch.where(failed[0][t], failed[1][t], ended)
    token = torch.where(tau < m, drawn, torch.where(m < n, ended, bonus))
    out.scatter_(1, tau[:, None], token[:, None].to(torch.int32))
    return out


def _inverse_cdf(w: torch.Tensor, u: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Per row, the first i with Σ_{l≤i} w_l > u·Σw (w ≥ 0; ``fallback`` where Σw has no mass), as
    cpp/mentored/speculative.hpp: by a binary search of the cumulative sums, not masks over V.

    The cumulative sums are nondecreasing, so the first i with c_i > u·Σw has w_i > 0 (c_i > c_{i−1});
    past the end only by rounding: the last token with mass.
    """
    empty = ~(w.sum(-1, keepdim=True) > 0)
    w = torch.where(empty, fallback, w)
    c = w.cumsum(-1)
    first = torch.searchsorted(c, u[:, None] * c[:, -1:], right=True)[:, 0]
    V = w.shape[-1]
    last = torch.where(w > 0, torch.arange(V, device=w.device), -1).amax(-1)
    return torch.where(first < V, first, last)


def _step(
    target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence="kl", budget=0.0, seed=None, uniforms=None,
    zeros="continue", block=False,
) -> torch.Tensor:
    """:func:`mentored.speculative_step` for tensors on a device, by the torch algorithm there, on
    uniforms drawn on that device (:func:`step_uniforms`: a seed gives the same tokens on every device)."""
    check_zeros(zeros)
    p, bonus, q, draft = check_step_inputs(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, torch.as_tensor,
                                           rows=False, kind=_dtype_kind, itemsize=torch.Tensor.element_size)
    for x, name, per in ((p, "target_with_bonus_probs", p.shape[1]), (q, "draft_probs", q.shape[1])):
        if x.shape[-1] and per:
            check_rows(x, name, lambda r, per=per: f"row (b, j) = ({r // per}, {r % per})")
    device = p.device
    B, k, V = q.shape
    budgets = step_budgets(budget, B, k)
    if uniforms is None:
        u = step_uniforms(seed, B, k, p)
    else:
        u = torch.as_tensor(uniforms, dtype=torch.float64, device=device)
        if tuple(u.shape) != (B, k, 2):
            raise ValueError(f"uniforms must have shape (B, k, 2) = ({B}, {k}, 2), got {tuple(u.shape)}")
        if not bool(((u >= 0) & (u < 1)).all()):
            raise ValueError("uniforms must lie in [0, 1)")
    bonus = bonus.to(device=device, dtype=torch.int64)
    if k == 0:
        return bonus.clone()
    dtype = torch.float32 if p.dtype == q.dtype == torch.float32 else torch.float64
    q = q.to(dtype)
    T = B * k
    pi = _solve(p[:, :k, :].reshape(T, V).to(dtype), q.reshape(T, V), divergence=divergence, budget=budgets.ravel(), zeros=zeros)
    # π answers q/Σq (a row's sum is 1 only to a tolerance): the test and the residual read that q
    pi, q = pi.to(torch.float64), q.reshape(T, V).to(torch.float64)
    sq = _row_sums(q) if T else q.sum(-1)
    x = draft.reshape(T).to(device=device, dtype=torch.int64)
    pi_x, q_x = pi.gather(-1, x[:, None])[:, 0], q.gather(-1, x[:, None])[:, 0] / sq

    def rows(t):
        return pi[t], q[t] / sq[t, None], pi[t]

    every = torch.ones(B, dtype=torch.bool, device=device) if block else None
    return _verify(pi_x, q_x, u.reshape(T, 2), x, bonus[:, 0], _Chains.uniform(B, k, device), rows, block=every).to(torch.int64)




def _as_core_input(x, name: str):
    """A CPU tensor as the numpy array sharing its memory (anything else as it is); half precision refused."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.dtype.is_floating_point and x.dtype not in (torch.float32, torch.float64):
        half = str(x.dtype).rsplit(".", 1)[-1]
        raise TypeError(f"{name} has dtype {half}; cast it to float32 or float64 (half precision is not supported)")
    return x.detach().resolve_conj().resolve_neg().numpy()


def check_rows(x, name: str, index=None, normalize: bool = False):
    """Finite, nonnegative rows of a torch tensor summing to 1 (relative tolerance per dtype, as
    numpy's; ``normalize``: to a positive number); host sync. Returns the row sums, float64,
    flattened to (rows,).

    ``index(r)`` names row ``r`` of the flattened (…, V) tensor in the message (default: ``row r``).
    """
    flat = x.reshape(-1, x.shape[-1])
    rtol = sum_rtol(np.float32 if flat.dtype == torch.float32 else np.float64, False)
    sums = flat.sum(-1, dtype=torch.float64)
    # The usual case in two passes and one read-back: a NaN or ±inf entry makes its row's sum NaN or
    # ±inf (so neither within rtol of 1 nor a finite positive number), and the smallest entry shows
    # a negative one.
    fine = ((sums > 0) & (sums < float("inf"))) if normalize else ((sums - 1).abs() <= rtol)
    if bool(fine.all() & (flat.amin() >= 0)):
        return sums
    where = index or (lambda r: f"row {r}")
    bad = ~flat.isfinite().all(-1)
    if bool(bad.any()):
        raise ValueError(f"{name} contains NaN or infinite entries ({where(int(bad.nonzero()[0, 0]))})")
    neg = (flat < 0).any(-1)
    if bool(neg.any()):
        raise ValueError(f"{name} has negative entries ({where(int(neg.nonzero()[0, 0]))})")
    zero = ~(sums > 0)
    if normalize and bool(zero.any()):
        raise ValueError(f"{name} has an all-zero row ({where(int(zero.nonzero()[0, 0]))})")
    off = ~fine
    if bool(off.any()):
        r = int(off.nonzero()[0, 0])
        raise ValueError(
            f"{name} rows must sum to 1 (relative tolerance {rtol:g} for {flat.dtype}); {where(r)} sums to {float(sums[r])!r}. "
            "Pass normalize=True to renormalise."
        )
    return sums


def _dtype_kind(x) -> str:
    """numpy's dtype kind letter of a tensor ("f", "i", "c" for complex and bool)."""
    if x.dtype.is_floating_point:
        return "f"
    if x.dtype.is_complex or x.dtype == torch.bool:
        return "c"
    return "i"


class _TorchOps:
    """The array operations of the built-ins' accurate forms (mentored.divergences), on tensors of any device."""

    where, exp, log, log1p, expm1 = torch.where, torch.exp, torch.log, torch.log1p, torch.expm1
    sqrt, abs, sign, isinf, xlogy = torch.sqrt, torch.abs, torch.sign, torch.isinf, torch.xlogy
    ones_like = torch.ones_like

    @staticmethod
    def clamp(x, lo=None, hi=None):
        return x.clamp(min=lo, max=hi)


def _where(x) -> str:
    return f"{x.device}" if isinstance(x, torch.Tensor) else type(x).__name__


def _solve_on_device(target, draft, divergence, budget, acceptance, normalize, check) -> Solved:
    """:func:`mentored.solve` for tensors on a device: the torch algorithm (``_Rows``) there, the
    per-row columns read back as numpy."""
    div = _divergence(divergence)
    forms = _torch_forms(div)
    if (budget is None) == (acceptance is None):
        raise ValueError("give exactly one of budget= and acceptance=")
    for name, x in (("target", target), ("draft", draft)):
        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} has dtype {x.dtype}; cast it to float32 or float64")
        if x.ndim not in (1, 2) or x.shape[-1] == 0:
            raise ValueError(f"{name} must have shape (n,) or (B, n), got shape {tuple(x.shape)}")
    if target.shape != draft.shape:
        raise ValueError(f"target and draft must have the same shape, got {tuple(target.shape)} and {tuple(draft.shape)}")
    squeeze = target.ndim == 1
    t2, d2 = target.reshape(-1, target.shape[-1]), draft.reshape(-1, draft.shape[-1])
    check_sums = _check_normalizable if normalize else check_rows
    for x, name in ((t2, "target"), (d2, "draft")):
        check_sums(x, name)
    p, q = _normalised(t2, None, 0), _normalised(d2, None, 0)
    R = p.shape[0]
    rows = _Rows(p, q, forms)
    if budget is not None:
        values = per_row(budget, R, "budget")
        s = rows.search(torch.as_tensor(values, device=p.device), "continue")
    else:
        values = per_row(acceptance, R, "acceptance", upper=1.0)
        a = torch.as_tensor(values, device=p.device)
        s = (a - 1 + rows.tv).clamp(min=0)  # A(π(s)) = 1 − TV + s
        s_max = rows.s_max("continue")
        far = s > s_max * (1 + 1e-12) + 1e-15
        if bool(far.any()):  # validation: one read-back
            r = int(far.nonzero()[0, 0])
            raise ValueError(
                f"acceptance {values[r]} is out of reach under {div.name!r} in row {r}: the most reachable is "
                f"{float(1 - rows.tv[r] + s_max[r])}, since drafter mass where the target is zero costs f∞ = {div.f_inf}"
            )
        s = torch.minimum(s, s_max)
    point = rows.point(s)
    pi64 = point.pi(p, q)
    D = rows.divergence(s[:, None])[:, 0]
    acc = torch.minimum(pi64, q).sum(-1)
    res = torch.stack([s, point.t_lo, point.t_hi, acc, D], -1).cpu().numpy()  # the core's first five columns
    binding = res[:, 0] < rows.s_max("continue").cpu().numpy() if budget is not None else np.ones(R, dtype=bool)
    certify = (p.cpu().numpy(), q.cpu().numpy(), res[:, 4] if budget is None else values, budget is not None) if check else None
    return Solved(div, _as_output(pi64, p, target.dtype, forms), res, binding, squeeze, certify)


def _check_normalizable(x: torch.Tensor, name: str) -> torch.Tensor:
    """normalize=True on a device: finite, nonnegative rows with a positive sum; their float64 sums."""
    sums = x.sum(-1, dtype=torch.float64)
    if not bool(torch.isfinite(sums).all() & (x.amin() >= 0)):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains NaN or infinite entries")
        raise ValueError(f"{name} has negative entries")
    if bool((sums <= 0).any()):
        raise ValueError(f"{name} has all-zero rows: {int((sums <= 0).nonzero()[0, 0])}")
    return sums


# ---------------------------------------------------------------- the backends of tensors


def generator_uniforms(gen, n: int) -> torch.Tensor:
    """n pairs of uniforms from a torch.Generator, on its device."""
    return torch.rand((n, 2), generator=gen, dtype=torch.float64, device=gen.device)


def step_uniforms(seed, B: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """speculative_step's uniforms (B, k, 2) on ``like``'s device from ``seed`` (torch's own seed if
    None): the same seed gives the same uniforms, hence the same tokens, on every device."""
    gen = torch.Generator(device=like.device)
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed()) % (2**63))
    return torch.rand((B, k, 2), generator=gen, device=like.device, dtype=torch.float64)


def plan_uniforms(plan, generators, device) -> torch.Tensor:
    """Uniforms (T, 2) of serving's layout on ``device``: torch's global RNG, and each seeded request's
    own generator (numpy or torch) for its positions."""
    u = torch.rand((plan.T, 2), dtype=torch.float64, device=device)
    for b, gen in (generators or {}).items():
        b = int(b)
        n = int(plan.n[b])
        if n == 0 or plan.greedy[b]:
            continue
        s = int(plan.starts[b])
        if isinstance(gen, np.random.Generator):
            u[s : s + n] = torch.from_numpy(gen.random((n, 2))).to(device)
        else:
            u[s : s + n] = torch.rand((n, 2), generator=gen, dtype=torch.float64, device=gen.device).to(device)
    return u


class _CpuViews:
    """How the host backend sees CPU tensors: numpy views of their memory in, tensors out, and
    torch's generators for the uniforms (so that a torch seed gives the tokens it gives on a device)."""

    @staticmethod
    def to_host(x, name):
        if not isinstance(x, torch.Tensor):
            return x
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on {x.device}; the other arguments are CPU tensors or numpy arrays: put them on one device")
        return _as_core_input(x, name)

    @staticmethod
    def like(out):
        return torch.from_numpy(out)

    @staticmethod
    def uniforms(plan, generators):
        return plan_uniforms(plan, generators, "cpu").numpy()

    @staticmethod
    def step_uniforms(seed, B, k, like):
        return step_uniforms(seed, B, k, torch.as_tensor(like)).numpy()


CPU_VIEWS = _CpuViews()


class TorchBackend:
    """Tensors on a device, computed there by torch (:mod:`mentored.backends`)."""

    name = "torch"
    xp = torch

    def __init__(self, device):
        self.device = device

    @staticmethod
    def to_host(x, name="input"):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x

    def like(self, out):
        return torch.as_tensor(out, device=self.device)

    def solve(self, target, draft, *, divergence, budget, acceptance, threads, normalize, check, out, price=None):
        tensors = [x for x in (target, draft) if isinstance(x, torch.Tensor)]
        if len({x.device for x in tensors}) > 1 or len(tensors) == 1:
            raise ValueError(f"target and draft must be on one device, got {_where(target)} and {_where(draft)}")
        if out is not None:
            raise ValueError("out= is for CPU tensors and numpy arrays; on another device take Solution.pi")
        if price is not None:  # the torch algorithm searches budgets only
            raise NotImplementedError("price= is solved on the host: pass numpy arrays or CPU tensors, or solve by budget= on the device")
        return _solve_on_device(target, draft, divergence, budget, acceptance, normalize, check)

    def step(self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence, budget, seed, uniforms, threads,
             zeros, normalize, block=False, price=None):
        if price is not None:
            raise NotImplementedError(_NO_PRICE)
        if normalize:
            target_with_bonus_probs, draft_probs = (_normalized_tensor(x, name) for x, name in (
                (target_with_bonus_probs, "target_with_bonus_probs"), (draft_probs, "draft_probs")))
        return _step(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, divergence=divergence, budget=budget, seed=seed,
                     uniforms=uniforms, zeros=zeros, block=block)

    def verify(self, plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, *, generators, uniforms, zeros, threads, validate,
               normalize, logits=False, notes=False):
        if plan.priced is not None and plan.priced.any():
            raise NotImplementedError(_NO_PRICE)
        if notes:
            raise ValueError("return_logprobs needs host memory (numpy arrays or CPU tensors): the device algorithm does not "
                             "report the law of what it emits; move the rows to the CPU for such steps")
        return _rejection_sample(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators, uniforms, zeros, validate,
                                 normalize, logits)

    def tree(self, plan, tokens, target_probs, *, generators, uniforms, zeros, threads, validate, normalize):
        if plan.priced is not None and plan.priced.any():
            raise NotImplementedError(_NO_PRICE)
        return _tree_sample(plan, tokens, target_probs, generators, uniforms, zeros, validate, normalize)

    def onehot(self, p_x, budget, divergence, zeros, price=False):
        if price:
            raise NotImplementedError(_NO_PRICE)
        px = torch.as_tensor(p_x, device=self.device).to(torch.float64)
        eps = torch.as_tensor(budget, dtype=torch.float64, device=self.device)
        px, eps = torch.broadcast_tensors(px, eps)
        return _onehot(px.contiguous(), eps.contiguous(), divergence, zeros)


# The device algorithm searches budgets only (docs/theory.md §4, "Budgets by price").
_NO_PRICE = ("price= is verified on the host: pass numpy arrays or CPU tensors (the core solves each position's price optimum), "
             "or give budget= on the device")


def device_of(tensors):
    """The one device of a call's tensors: None for CPU tensors (the host's), else the first other."""
    devices = {x.device for x in tensors if isinstance(x, torch.Tensor)}
    return None if devices <= {torch.device("cpu")} else next(iter(devices - {torch.device("cpu")}))


def _onehot(px, eps, div, zeros: str):
    """serving.onehot_acceptance's bisection on tensors (:func:`mentored.backends.shared.onehot_bisection`)."""
    return onehot_bisection(torch, px, eps, div, zeros, _torch_forms(div).perspective)




def _rejection_sample(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators, uniforms, zeros, validate, normalize,
                      logits=False):
    r""":func:`mentored.verify.serving.rejection_sample` for tensors on a device (or CPU tensors with
    ``CPU_SOLVER = "torch"``): each position's acceptance test and its rows at a rejection, then
    :func:`_verify`.

    ``logits``: ``target_probs`` holds logits. With token-only drafts no row is normalised: the test
    reads :math:`p_x = e^{\ell_x - \mathrm{logsumexp}\,\ell}` and only the rows of the positions
    that rejected are formed (one per request); dense drafts need whole rows, softmaxed first."""
    B, T = plan.B, plan.T
    p = torch.as_tensor(target_probs)
    device = p.device
    lse = None
    if logits:
        if validate:
            _check_logit_rows(p, plan.where)
        if draft_probs is None:
            lse = _log_softmax_terms(p)
        else:
            p = torch.softmax(p.to(torch.float64), -1).to(p.dtype)
    draft = torch.as_tensor(draft_token_ids, device=device)
    bonus = torch.as_tensor(bonus_token_ids, device=device).reshape(-1)
    q = None if draft_probs is None else torch.as_tensor(draft_probs, device=device)
    if p.ndim != 2 or p.shape[0] != T:
        raise ValueError(f"target_probs must have shape (num_tokens, V) = ({T}, V), got {tuple(p.shape)}")
    if q is not None and q.shape != p.shape:
        raise ValueError(f"draft_probs must have the shape of target_probs {tuple(p.shape)}, got {tuple(q.shape)}")
    V = p.shape[1]
    for name, x in (("draft_token_ids", draft), ("bonus_token_ids", bonus)):  # dtypes: no synchronisation
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if validate:
        for name, x in (("target_probs", None if lse is not None else p), ("draft_probs", q)):
            if x is None:
                continue
            if not x.dtype.is_floating_point or x.element_size() < 4:
                raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
            if T:
                check_rows(x, name, plan.where, normalize)
        check_ids(draft, bonus, V, B, T)
    draft = draft.to(torch.int64)
    bonus = bonus.to(torch.int64)

    def dev(a):
        return torch.as_tensor(a, device=device)

    if isinstance(uniforms, torch.Tensor) and not validate:  # uniforms made on the device stay there: only their shape is checked
        if tuple(uniforms.shape) != (T, 2):
            raise ValueError(f"uniforms must have shape (num_tokens, 2) = ({T}, 2), got {tuple(uniforms.shape)}")
        u = uniforms.to(device, torch.float64)
    elif uniforms is not None:
        u = torch.as_tensor(given_uniforms(uniforms.cpu().numpy() if isinstance(uniforms, torch.Tensor) else uniforms, T), device=device)
    else:
        u = plan_uniforms(plan, generators, device) if plan.rnd.size else None

    # Each position's acceptance test, u0·q_x < π_x, and its rows at a rejection (backends.torch._verify):
    # greedy positions have π = δ_argmax and q_x = 1, token-only drafts q = δ_x.
    pi_x = torch.zeros(T, dtype=torch.float64, device=device)
    q_x = torch.ones(T, dtype=torch.float64, device=device)
    argmax = torch.full((T,), -1, dtype=torch.int64, device=device)
    grd, rnd = plan.grd, plan.rnd
    if grd.size:
        gi = dev(grd)
        argmax[gi] = (p if grd.size == T else p[gi]).argmax(-1)
        pi_x[gi] = (draft[gi] == argmax[gi]).to(torch.float64)
    point = sp = sq = None
    rows_of_rnd = None
    if rnd.size:
        ri = dev(rnd)
        xs = draft[ri].clamp(min=0)[:, None]
        P = p if rnd.size == T else p[ri]
        if q is None and lse is not None:  # logits: p_x from the logit and the log-sum-exp, no row formed
            top, lse_top = lse if rnd.size == T else (lse[0][ri], lse[1][ri])
            px = ((P.gather(-1, xs)[:, 0].to(torch.float64) - top) - lse_top).exp()
        if q is None:
            if lse is None:
                px = P.gather(-1, xs)[:, 0].to(torch.float64) / _row_sums(P.to(torch.float64))  # p_x of p/Σp
            a = torch.empty_like(px)
            for div, idx in plan.groups:
                sel = slice(None) if idx is None else dev(idx)
                a[sel] = _onehot(px[sel], dev(plan.eps_rnd if idx is None else plan.eps_rnd[idx]), div, zeros)
            pi_x[ri] = a
        else:
            Q = q if rnd.size == T else q[ri]
            # Only the thresholds of each row are kept (six numbers): π_x for the acceptance test
            # here, whole rows of π only where a request rejected (rows, below). Rows are normalised
            # in float64 (as the core does) where they are solved; elsewhere only their sums are
            # needed, summed as the core sums them (_row_sums: a plain sum is an ulp off, and so is p/Σp).
            sp = _row_sums(P.to(torch.float64))
            sq = _row_sums(Q.to(torch.float64))
            # Rows at budget 0 need no solve (π = p); the budgets are on the host, so this costs no sync.
            point = _Point.identity(rnd.size, P)
            for div, idx in plan.groups:
                sel = np.arange(rnd.size) if idx is None else idx
                sel = sel[plan.eps_rnd[sel] > 0]
                if sel.size == rnd.size:
                    Pn = P.to(torch.float64) / sp[:, None]
                    Qn = Q.to(torch.float64) / sq[:, None]
                    point = solve_point(Pn, Qn, div, dev(plan.eps_rnd), zeros)
                elif sel.size:
                    ii = dev(sel)
                    Pn = P[ii].to(torch.float64) / sp[ii, None]
                    Qn = Q[ii].to(torch.float64) / sq[ii, None]
                    point.put(ii, solve_point(Pn, Qn, div, dev(plan.eps_rnd[sel]), zeros))
                Pn = Qn = None
            # π answers q/Σq: the test and the residual read that q
            q_x[ri] = Q.gather(-1, xs)[:, 0].to(torch.float64) / sq
            pi_x[ri] = point.pi(P.gather(-1, xs)[:, 0].to(torch.float64) / sp, q_x[ri])
        rows_of_rnd = torch.full((T,), 0, dtype=torch.int64, device=device)
        rows_of_rnd[ri] = torch.arange(rnd.size, device=device)
    greedy = dev(plan.greedy[plan.req])

    def rows(ts):
        """(π, q, p) at positions ts, float64, whose residual (π − q)₊ the rule draws from."""
        p_t = p[ts].to(torch.float64) if lse is None else ((p[ts].to(torch.float64) - lse[0][ts, None]) - lse[1][ts, None]).exp()
        if not rnd.size:
            pi_t, q_t = p_t, torch.zeros_like(p_t)
        elif q is None:  # π off x is ∝ p: the residual is p without x, (p − p_x·δ_x)₊
            x = draft[ts].clamp(min=0)[:, None]
            pi_t, q_t = p_t, torch.zeros_like(p_t).scatter_(-1, x, p_t.gather(-1, x))
        else:
            j = rows_of_rnd[ts]
            pi_t = point.take(j).pi(P[j].to(torch.float64) / sp[j, None], Q[j].to(torch.float64) / sq[j, None])
            q_t = q[ts].to(torch.float64) / sq[j, None]
        if grd.size:
            g = greedy[ts][:, None]
            hot = torch.zeros_like(p_t).scatter_(-1, argmax[ts].clamp(min=0)[:, None], 1.0)
            pi_t, q_t, p_t = torch.where(g, hot, pi_t), torch.where(g, 0.0, q_t), torch.where(g, hot, p_t)
        return pi_t, q_t, p_t

    if u is None:  # greedy requests only: their test and token do not read u
        u = torch.zeros((T, 2), dtype=torch.float64, device=device)
    chains = _Chains.of(plan.n, plan.starts, plan.req, plan.pos, device)
    if validate or not T:
        failed = None
    elif lse is not None:  # a row of logits without a law (a NaN, a +inf, no finite entry): its softmax is NaN, token 0
        failed = (~(lse[0].isfinite() & lse[1].isfinite()) | p.isnan().any(-1), torch.zeros(T, dtype=torch.int64, device=device))
    else:
        failed = _failed_rows(p, q, normalize)
    block = dev(~plan.greedy) if plan.block and q is not None else None
    return _verify(pi_x, q_x, u, draft, bonus, chains, rows, failed, block)


def _log_softmax_terms(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""(m, s) per row, float64: the row's largest logit :math:`m` and :math:`s = \log \sum_i
    e^{\ell_i - m}`, so that :math:`p_i = e^{(\ell_i - m) - s}`, the softmax the core reads.

    Kept apart: near float32's largest logits (3e38) :math:`m + s` rounds to :math:`m` (an ulp
    of 3e38 is 6.6e22 in float64), and :math:`e^{\ell_x - (m + s)}` would be 1 where the softmax is
    1/V. :math:`\ell_i - m` is exact or far below −745 (its exponential 0 either way), and
    :math:`s \in [0, \log V]`. A row with a NaN, a +inf or no finite entry gives a NaN ``m`` or
    ``s`` (the caller's failed rows)."""
    x = logits.to(torch.float64)
    if not x.shape[0]:
        return x.new_zeros(0), x.new_zeros(0)
    m = x.amax(-1)
    s = (x - m[:, None]).exp_().sum(-1).log_()
    return m, s


def _check_logit_rows(x: torch.Tensor, where) -> None:
    """Logits rows with a law: no NaN, no +inf, a finite entry in each (host synchronisation)."""
    if not x.dtype.is_floating_point:
        raise TypeError(f"target logits must be floats, got {x.dtype}")
    flat = x.reshape(-1, x.shape[-1])
    bad = flat.isnan().any(-1) | (flat == torch.inf).any(-1) | ~flat.isfinite().any(-1)
    if bool(bad.any()):
        raise ValueError(f"target logits have a NaN, a +inf or no finite entry ({where(int(bad.nonzero()[0, 0]))})")


def _failed_rows(p: torch.Tensor, q: torch.Tensor | None, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(bad [T], token [T]) without validation: positions whose target or draft row is not a
    distribution (within the sum tolerance of its dtype unless ``normalize``), and the first largest
    entry of each target row, NaN read as the lowest (0 for a row without a number): the core's
    lenient rule (cpp/mentored/speculative.hpp, StepCheck), on the device, no synchronisation."""
    bad = torch.zeros(p.shape[0], dtype=torch.bool, device=p.device)
    for x in (p, q):
        if x is None:
            continue
        # Two reductions, no (T, V) temporary: a NaN makes the minimum NaN, an infinity the sum.
        s, lo = x.sum(-1, dtype=torch.float64), x.amin(-1)
        rtol = sum_rtol(np.float32 if x.dtype == torch.float32 else np.float64, normalize)
        ok = (lo >= 0) & s.isfinite() & (s > 0) & ((s - 1).abs() <= rtol)
        bad |= ~ok
    return bad, p.masked_fill(p.isnan(), -torch.inf).argmax(-1)


def _normalized_tensor(x, name: str):
    """Rows of a tensor divided by their float64 sums, in its own dtype; rows summing to 0 refused."""
    sums = check_rows(x, name, normalize=True).reshape(x.shape[:-1] + (1,))
    return x / sums.to(x.dtype)


def check_ids(draft, bonus, V: int, B: int, T: int):
    if tuple(draft.shape) != (T,):
        raise ValueError(f"draft_token_ids must be flat, shape (num_tokens,) = ({T},), got {tuple(draft.shape)}")
    if draft.shape[0]:
        lo, hi = int(draft.min()), int(draft.max())
        if lo < -1 or hi >= V:
            raise ValueError(f"draft_token_ids must lie in [0, V) = [0, {V}) or be the placeholder -1, got ids from {lo} to {hi}")
    if B:
        lo, hi = int(bonus.min()), int(bonus.max())
        if lo < 0 or hi >= V:
            raise ValueError(f"bonus_token_ids must lie in [0, V) = [0, {V}), got ids from {lo} to {hi}")


# ---------------------------------------------------------------- draft trees


_LEVEL_FORMS: dict = {}
_CUSTOM_LEVELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _level_forms(div) -> LevelForms:
    """f̃, f̃′ and (f̃′)⁻¹ in torch: a built-in's registry forms; a user generator's f̃′ and (f̃′)⁻¹
    compiled from its sympy analysis (ValueError where sympy found no (f′)⁻¹)."""
    forms = _torch_forms(div)
    if div.builtin is not None:
        if div.name not in _LEVEL_FORMS:
            spec, ops = div.builtin, _TorchOps()
            _LEVEL_FORMS[div.name] = LevelForms(forms.perspective, lambda t: spec.fprime_tilde(ops, t), lambda y: spec.fprime_inv_tilde(ops, y))
        return _LEVEL_FORMS[div.name]
    if div not in _CUSTOM_LEVELS:
        import sympy as sp

        info = div.symbolic
        if info.fprime_inv_expr is None:
            raise ValueError(f"objective='length' on a device needs (f')^-1 in closed form, and sympy found none for {div.name!r}: "
                             "pass numpy arrays (the host solves it numerically), or use objective='acceptance'")
        c, y = float(info.tilt), sp.Symbol("y")
        inv = info.fprime_inv_expr
        fprime = _torch_lambdify(info.t, info.fprime_expr)
        inverse = _torch_lambdify((list(inv.free_symbols)[:1] or [y])[0], inv)
        lo, hi = float(info.fprime0) - c, float(info.f_inf) - c

        def df(t):
            return torch.as_tensor(fprime(t), dtype=torch.float64, device=t.device) - c

        def dfinv(v):
            inside = (v > lo) & (v < hi)
            got = torch.as_tensor(inverse(torch.where(inside, v, 0.0) + c), dtype=torch.float64, device=v.device)
            return torch.where(inside, got, torch.where(v <= lo, 0.0, _INF))

        _CUSTOM_LEVELS[div] = LevelForms(forms.perspective, df, dfinv)
    return _CUSTOM_LEVELS[div]


def _rest_masses(plan, p64, tok, P_child, sums, to):
    """At each node with children, its target's mass off its children's tokens (p/Σp): 1 − Σ P_child
    from REST_DIRECT up, else summed over the complement (the core's rule). Which nodes need the sum
    is not read back: it is formed for every inner node, a bounded block of rows at a time."""
    N, device = plan.N, p64.device
    child = np.flatnonzero(plan.gp >= 0)
    PS = torch.zeros(N, dtype=torch.float64, device=device).index_add_(0, to(plan.gp[child]), P_child[to(child)])
    inner = np.flatnonzero(plan.num_kids > 0)
    direct = torch.zeros(N, dtype=torch.float64, device=device)
    step = max(1, (1 << 22) // max(p64.shape[1], 1))  # 32 MB of float64 rows a block
    for s in range(0, inner.size, step):
        block = inner[s : s + step]
        rows = np.full(N, -1, dtype=np.int64)
        rows[block] = np.arange(block.size)
        at = child[rows[plan.gp[child]] >= 0]
        rest = p64[to(block)]  # a copy (advanced indexing)
        rest[to(rows[plan.gp[at]]), tok[to(at)]] = 0.0
        direct[to(block)] = rest.sum(-1) / sums[to(block)]
    one_minus = 1.0 - PS
    return torch.where(to(plan.num_kids > 0), torch.where(one_minus >= REST_DIRECT, one_minus, direct), 0.0)


def _tree_sample(plan, tokens, target_probs, generators, uniforms, zeros, validate, normalize):
    r""":func:`mentored.verify.serving.tree_sample` for tensors on a device (or CPU tensors with
    ``CPU_SOLVER = "torch"``): every node's verifier bottom-up by height (:func:`tree_masses`,
    :func:`node_masses` in torch), then the walk down all trees at once, a depth at a time, and each
    request's last node's token by :func:`_inverse_cdf`. The layout is the host's (``plan``); with
    ``validate=False`` nothing is read back from the device. Returns (out, last, accept, value)."""
    p = torch.as_tensor(target_probs)
    device = p.device
    tok = torch.as_tensor(tokens, device=device)
    N, B = plan.N, plan.B
    if p.ndim != 2 or p.shape[0] != N:
        raise ValueError(f"target_probs must have shape (num_nodes, V) = ({N}, V), got {tuple(p.shape)}")
    if tuple(tok.shape) != (N,):
        raise ValueError(f"tokens must be flat, one id per node, shape ({N},), got {tuple(tok.shape)}")
    if tok.dtype.is_floating_point or tok.dtype.is_complex or tok.dtype == torch.bool:
        raise TypeError(f"tokens must hold integer token ids, got dtype {tok.dtype}")
    V = p.shape[1]
    if validate:
        if not p.dtype.is_floating_point or p.element_size() < 4:
            raise TypeError(f"target_probs must be float32 or float64, got {p.dtype}")
        if N:
            check_rows(p, "target_probs", plan.where, normalize)
        plan.check_tokens(tok.cpu().numpy(), V)
    tok = tok.to(torch.int64)

    def to(a):
        return torch.as_tensor(a, device=device)

    if isinstance(uniforms, torch.Tensor) and not validate:  # made on the device: only the shape is checked
        if tuple(uniforms.shape) != (N, 2):
            raise ValueError(f"uniforms must have shape (num_nodes, 2) = ({N}, 2), got {tuple(uniforms.shape)}")
        u = uniforms.to(device, torch.float64)
    elif uniforms is not None:
        u = to(given_uniforms(uniforms.cpu().numpy() if isinstance(uniforms, torch.Tensor) else uniforms, N))
    elif generators is None and plan.greedy.all():
        u = torch.zeros((N, 2), dtype=torch.float64, device=device)
    else:
        u = plan_uniforms(plan, generators, device)
    p64 = p.to(torch.float64)
    sums = _row_sums(p64) if N else p64.sum(-1)
    child = np.flatnonzero(plan.gp >= 0)
    gp, ci = to(plan.gp[child]), to(child)
    P_child = torch.zeros(N, dtype=torch.float64, device=device)
    P_child[ci] = p64[gp, tok[ci]] / sums[gp]
    P_rest = _rest_masses(plan, p64, tok, P_child, sums, to)
    top = p.argmax(-1)
    match = None
    if plan.greedy_or_none is not None:
        match = torch.zeros(N, dtype=torch.bool, device=device)
        match[ci] = tok[ci] == top[gp]

    def solve(div, P, w, eps, weighted):
        return node_masses(torch, P, w, eps, div, zeros, _level_forms(div) if weighted else LevelForms(_torch_forms(div).perspective, None, None),
                           weighted)

    accept, value = tree_masses(torch, plan, P_child, P_rest, to(plan.eps_node), match, solve, to)
    accept[to(np.flatnonzero(plan.gp < 0))] = 1.0
    # the walk: every request a depth at a time, from its root
    out = torch.full((B, plan.width), -1, dtype=torch.int32, device=device)
    cur = to(plan.starts)
    K = plan.K
    first, num_kids, children = to(plan.first), to(plan.num_kids), to(plan.children)
    col = torch.arange(K, device=device)

    def kids(v):  # the children of nodes v, in node order, padded with −1: [len(v), K]
        at = (first[v][:, None] + col).clamp(max=max(children.numel() - 1, 0))
        return torch.where(col < num_kids[v][:, None], children[at], -1)

    active = torch.ones(B, dtype=torch.bool, device=device)
    for d in range(plan.width - 1 if K else 0):
        ks = kids(cur)
        valid = ks >= 0
        mass = torch.where(valid, accept[ks.clamp(min=0)], 0.0)
        u0 = u[cur, 0]
        acc = torch.zeros_like(u0)
        chosen = torch.full_like(cur, K)
        for c in range(K):  # the first child whose running mass passes u0 (speculative.hpp, land)
            acc = acc + mass[:, c]
            chosen = torch.where((chosen == K) & (u0 < acc), c, chosen)
        moved = active & (chosen < K)
        nxt = ks.gather(1, chosen.clamp(max=K - 1)[:, None])[:, 0]
        out[:, d] = torch.where(moved, tok[nxt.clamp(min=0)], -1).to(torch.int32)
        cur = torch.where(moved, nxt, cur)
        active = moved
    if B:
        w = p64[cur]
        if K:  # without the children's tokens (counted by a scatter-add of exact 0s and 1s: any order)
            ks = kids(cur)
            hit = torch.zeros_like(w).scatter_add_(1, tok[ks.clamp(min=0)], (ks >= 0).to(w.dtype))
            w = torch.where(hit > 0, 0.0, w)
        drawn = _inverse_cdf(w, u[cur, 1], p64[cur])
        greedy = to(plan.greedy)
        emitted = torch.where(greedy, top[cur], drawn)
        out.scatter_(1, to(plan.depth)[cur][:, None], emitted[:, None].to(torch.int32))
    last = cur - to(plan.starts)
    return out, last, accept, value
