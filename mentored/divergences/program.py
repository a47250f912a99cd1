r"""A sympy generator compiled to an expression program that the core evaluates (cpp/mentored/program.hpp).

The program is a translation of the numpy code that sympy prints for :math:`f(t)`, the very code
behind :attr:`SymbolicInfo.f <mentored.divergences.symbolic.SymbolicInfo>`: it is parsed (``ast``) and each
operation becomes an opcode of a postfix program over doubles, in the order Python evaluates it;
subexpressions free of ``t`` are evaluated here, by Python, as they are at run time. numpy's shortcuts
for ``x**2``, ``x**0.5`` and ``x**-1`` (a square, a square root, a reciprocal) are kept. The core then
computes :math:`\tilde f` as :meth:`SymbolicInfo.f_tilde` does, with its limits at 0 and ∞ and its
Taylor series at 1, and solves a custom divergence on every thread with no call back into Python.
Where the printed form overflows on the way at a point of :math:`(0, \infty)` (``cosh(t - 1)`` past
:math:`t \approx 711` inside ``log(cosh(t - 1))``), the core evaluates that point again in extended
range (a double mantissa and an exponent that does not overflow), so that :math:`\tilde f` is ∞ only
where it passes DBL_MAX itself; the same evaluation gives the term :math:`p_i \tilde f(\pi_i/p_i)` of a
ratio past DBL_MAX (a subnormal :math:`p_i`).

What compiles: arithmetic, powers, ``exp``, ``log`` (and ``log1p``, ``expm1``, ``log2``, ``log10``),
``sqrt``, ``Abs``, ``sign``, ``Max``, ``Min``, trigonometric and hyperbolic functions and their
inverses, and ``Piecewise``/``Heaviside`` (sympy prints both as a ``select`` on comparisons, joined by
``And``/``Or``). Anything else (``LambertW``, ``gamma``, a depth beyond the core's stack) has no
program: :func:`program` returns None and the divergence is solved through Python callbacks, as
before, with the same answers, only slower.
"""

from __future__ import annotations

import ast
import inspect
import weakref

import numpy as np

from .. import _core

__all__ = ["program", "callable_forms", "compile_info", "translate", "source"]

_OPS = {name: int(op) for name, op in _core.Op.__members__.items()}
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_UNARY = {
    "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "abs", "sign", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
}
_COMPARE = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}
_REDUCE = {"mentored_max": "maximum", "mentored_min": "minimum", "logical_and": "logical_and", "logical_or": "logical_or"}

# Set to False to solve every custom divergence through the Python callbacks (tests compare the two).
_ENABLED = True
_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Untranslatable(Exception):
    """The printed code holds something the program has no opcode for."""


def source(info) -> tuple[str, str, dict]:
    """(code, variable, namespace): the Python expression sympy's numpy printer writes for ``info.expr``
    (what ``info.f`` runs), the name it gives t, and the names the code refers to."""
    import sympy as sp

    from ._printing import NP_FUNCS, NP_MAX, NP_MIN

    expr = sp.sympify(info.expr).replace(sp.Max, NP_MAX).replace(sp.Min, NP_MIN)
    fn = sp.lambdify(info.t, expr, modules=[NP_FUNCS, "numpy"])
    body = ast.parse(inspect.getsource(fn)).body[0]
    if not (isinstance(body, ast.FunctionDef) and len(body.body) == 1 and isinstance(body.body[0], ast.Return)):
        raise _Untranslatable("the printed code is not a single expression")
    return ast.unparse(body.body[0].value), body.args.args[0].arg, fn.__globals__


def translate(code: str, name: str, namespace: dict) -> tuple[list[int], list[float]]:
    """(opcodes, values) of the postfix program for the expression ``code`` in the variable ``name``."""
    ops: list[int] = []
    values: list[float] = []

    def emit(op, value=0.0):
        ops.append(_OPS[op])
        values.append(float(value))

    def uses_t(node):
        return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))

    def visit(node):
        if not uses_t(node):  # evaluated by Python, as at run time
            value = eval(compile(ast.Expression(node), "<generator>", "eval"), dict(namespace))
            if isinstance(value, (complex, np.complexfloating)) or np.ndim(value) != 0:
                raise _Untranslatable(f"{ast.unparse(node)} is not a real number")
            return emit("constant", float(value))
        if isinstance(node, ast.Name):
            return emit("t")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            visit(node.operand)
            return emit("neg") if isinstance(node.op, ast.USub) else None
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            visit(node.left)
            visit(node.right)
            return emit(_BINARY[type(node.op)])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return power(node.left, node.right)
        if isinstance(node, ast.Call) and (not node.keywords or _is_select(node)):
            return call(node)
        raise _Untranslatable(ast.unparse(node))

    def power(base, exponent):
        # numpy's scalar-exponent shortcuts (array ** 2 is np.square, ** 0.5 np.sqrt, ** -1 a reciprocal)
        if not uses_t(exponent):
            e = eval(compile(ast.Expression(exponent), "<generator>", "eval"), dict(namespace))
            if e in (2, 0.5, -1) and not isinstance(e, complex):
                if e == -1:
                    emit("constant", 1.0)
                visit(base)
                return emit({2: "square", 0.5: "sqrt", -1: "div"}[e])
        visit(base)
        visit(exponent)
        emit("pow")

    def call(node):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "reduce" and isinstance(func.value, ast.Name):
            # logical_and.reduce((a, b, …)): And/Or of relations
            fname, args = func.value.id, node.args[0].elts if node.args and isinstance(node.args[0], ast.Tuple) else None
            if fname not in ("logical_and", "logical_or") or args is None or len(node.args) != 1:
                raise _Untranslatable(ast.unparse(node))
            return fold(_REDUCE[fname], args)
        if not isinstance(func, ast.Name):
            raise _Untranslatable(ast.unparse(node))
        fname, args = func.id, node.args
        if fname in _UNARY and len(args) == 1:
            visit(args[0])
            return emit(fname)
        if fname in _COMPARE and len(args) == 2:
            visit(args[0])
            visit(args[1])
            return emit(fname)
        if fname in _REDUCE and args:
            return fold(_REDUCE[fname], args)
        if fname == "logical_not" and len(args) == 1:
            visit(args[0])
            emit("constant", 0.0)
            return emit("equal")
        if _is_select(node):
            return select(node)
        raise _Untranslatable(ast.unparse(node))

    def fold(op, args):  # numpy's reduce: ((a ∘ b) ∘ c) ∘ …
        visit(args[0])
        for a in args[1:]:
            visit(a)
            emit(op)

    def select(node):
        # select([c1, c2, …], [v1, v2, …], default=d): the first true condition's value, every branch
        # evaluated (as numpy does); nested wheres, the last one innermost.
        conds, vals = node.args
        for c, v in zip(conds.elts, vals.elts):
            visit(c)
            visit(v)
        if node.keywords:
            visit(node.keywords[0].value)
        else:
            emit("constant", np.nan)
        for _ in conds.elts:
            emit("where")

    visit(ast.parse(code, mode="eval").body)
    return ops, values


def _is_select(node) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "select"
        and len(node.args) == 2 and all(isinstance(a, ast.List) for a in node.args)
        and len(node.args[0].elts) == len(node.args[1].elts)
        and all(k.arg == "default" for k in node.keywords) and len(node.keywords) <= 1
    )


def compile_info(info):
    """The core's program for a :class:`~mentored.divergences.symbolic.SymbolicInfo`, or None if its code does not translate."""
    from ._printing import SERIES_RADIUS

    try:
        code, name, namespace = source(info)
        ops, values = translate(code, name, namespace)
        return _core.Program(ops, values, info.f0, info.f_at_inf, info.tilt, info.f_inf, list(info.series), SERIES_RADIUS)
    except (_Untranslatable, SyntaxError, ValueError, TypeError, OverflowError, NameError, ZeroDivisionError, OSError):
        return None


def program(div):
    """The compiled program of a user divergence (:meth:`Divergence.from_sympy`), or None: a built-in
    (the core has its own), a divergence built from callables, or code without a translation."""
    if not _ENABLED or div.compiled is not None or div.builtin is not None or div.symbolic is None:
        return None
    try:
        return _PROGRAMS[div]
    except KeyError:
        pass
    prog = _PROGRAMS[div] = compile_info(div.symbolic)
    return prog



def callable_forms(div):
    """(vectorised f̃, scalar f̃, f̃∞) of a generator the core cannot run as a program, for the core's
    callback path (docs/theory.md §1, tilted): Python in the loop, the slow way."""
    c = div.tilt
    f_inf = div.f_inf - c

    def vec(t):
        return np.ascontiguousarray(div.f_tilde(t), dtype=np.float64)

    def scalar(t):
        return float(div.f_tilde(np.array([t]))[0])

    return vec, scalar, f_inf
