r"""The host backend: numpy arrays and CPU tensors, computed by the compiled core on zero-copy views.

Every host computation of the package is here: :func:`mentored.solve` (``solve_arrays``), the
speculative step (``step_arrays``), the serving layout (``verify_arrays``) and draft trees
(``tree_arrays``), each one call of ``mentored._core`` after the checks of its arguments
(docs/serving.md). A CPU tensor is read in place
(its numpy view) and the answer comes back as a tensor, through the converters the torch backend
gives this backend (:class:`HostBackend`); nothing here imports torch.
"""

from __future__ import annotations

import numpy as np

from .. import _core
from ..check.inputs import (
    as_pair, check_step_inputs, check_sums, check_zeros, floats, pair_arrays, per_row, refuse_pair, row_error, row_stats, step_budgets,
    step_uniforms, sum_rtol, threads_arg, priced_values,
)
from ..divergences import Divergence, divergence as _divergence
from ..divergences.program import callable_forms, program
from .protocol import Solved
from .shared import REST_DIRECT, LevelForms, given_uniforms, node_masses, onehot_bisection, onehot_price_search, tree_masses

__all__ = ["HostBackend", "HOST", "perspective_terms", "solve_arrays", "step_arrays", "verify_arrays", "onehot_arrays", "solve_pi", "tree_arrays"]


class HostBackend:
    """The compiled core on host memory. ``views`` (the torch backend's, for CPU tensors) says how an
    input is seen as numpy (``to_host``), how an answer goes back to the input's kind (``like``), and
    how uniforms are drawn (torch's generators); None: numpy in, numpy out."""

    name = "host"
    xp = np

    def __init__(self, views=None):
        self.views = views

    def to_host(self, x, name="input"):
        return x if self.views is None or x is None else self.views.to_host(x, name)

    def like(self, out):
        return out if self.views is None else self.views.like(out)

    def solve(self, target, draft, *, out=None, **kw) -> Solved:
        solved = solve_arrays(self.to_host(target, "target"), self.to_host(draft, "draft"), out=self.to_host(out, "out"), **kw)
        if self.views is None:
            return solved
        return solved._replace(pi=out if out is not None else self.like(solved.pi))

    def step(self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, seed, uniforms, **kw):
        if self.views is not None:
            B, k = tuple(draft_token_ids.shape) if getattr(draft_token_ids, "ndim", 0) == 2 else (None, None)
            if uniforms is None and B is not None:
                uniforms = self.views.step_uniforms(seed, B, k, target_with_bonus_probs)
            elif uniforms is not None:
                uniforms = self.to_host(uniforms, "uniforms")
        args = (self.to_host(x, name) for x, name in ((target_with_bonus_probs, "target_with_bonus_probs"), (bonus_token_ids, "bonus_token_ids"),
                                                     (draft_probs, "draft_probs"), (draft_token_ids, "draft_token_ids")))
        return self.like(step_arrays(*args, seed=seed, uniforms=uniforms, **kw))

    def verify(self, plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, *, generators, uniforms, zeros, threads, validate,
               normalize, logits=False, notes=False):
        T = plan.T
        if uniforms is not None:
            u = given_uniforms(self.to_host(uniforms, "uniforms"), T)
        elif plan.greedy_or_none is not None and plan.greedy_or_none[plan.req].all():
            u = np.zeros((T, 2))  # greedy requests only: their test and token do not read u
        elif self.views is not None:
            u = self.views.uniforms(plan, generators)
        else:
            u = uniforms_arrays(plan, generators)
        if logits:  # the rows the core reads: softmax, in the logits' dtype
            target_probs = softmax_rows(self.to_host(target_probs, "target_probs"))
        args = (self.to_host(x, name) for x, name in ((draft_token_ids, "draft_token_ids"), (draft_probs, "draft_probs"),
                                                     (target_probs, "target_probs"), (bonus_token_ids, "bonus_token_ids")))
        out = verify_arrays(plan, *args, u, zeros, threads, normalize, lenient=not validate, notes=notes)
        return (self.like(out[0]), *out[1:]) if notes else self.like(out)

    def tree(self, plan, tokens, target_probs, *, generators, uniforms, zeros, threads, validate, normalize):
        if uniforms is not None:
            u = given_uniforms(self.to_host(uniforms, "uniforms"), plan.N)
        elif generators is None and plan.greedy.all():
            u = np.zeros((plan.N, 2))  # greedy requests only (or tree_verifier): no uniform is read
        elif self.views is not None:
            u = self.views.uniforms(plan, generators)
        else:
            u = uniforms_arrays(plan, generators)
        out = tree_arrays(plan, self.to_host(tokens, "tokens"), self.to_host(target_probs, "target_probs"), u, zeros, threads, normalize)
        return tuple(self.like(x) for x in out)

    def onehot(self, p_x, budget, divergence, zeros, price=False):
        px, eps = (np.asarray(self.to_host(x, name), dtype=np.float64) for x, name in ((p_x, "p_x"), (budget, "budget")))
        px, eps = np.broadcast_arrays(px, eps)
        out = onehot_arrays(np.ascontiguousarray(px.ravel()), np.ascontiguousarray(eps.ravel()), divergence, zeros, price).reshape(px.shape)
        return out if self.views is None else self.like(out)


def softmax_rows(logits) -> np.ndarray:
    """Softmax of each row, in the logits' float dtype (−inf: probability 0; a row with a NaN, a +inf
    or no finite entry comes out NaN, which validation refuses and the lenient core decides)."""
    x = np.asarray(logits)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        top = x.max(-1, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(top), top, 0))
        return e / e.sum(-1, keepdims=True, dtype=np.float64).astype(x.dtype)


HOST = HostBackend()


# ---------------------------------------------------------------- solve

def _out_arg(out, p: np.ndarray, q: np.ndarray, dtype) -> np.ndarray:
    """``out=`` of :func:`solve`, checked: π is written there, so nothing may be converted."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if p.dtype != dtype or q.dtype != dtype or out.dtype != dtype:
        raise ValueError(f"out needs target, draft and out of one dtype; got {p.dtype}, {q.dtype} and {out.dtype}")
    if out.shape != p.shape:
        raise ValueError(f"out must have the target's shape {p.shape}, got {out.shape}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writeable C-contiguous array")
    for name, x in (("target", p), ("draft", q)):
        if np.shares_memory(out, x):
            raise ValueError(f"out shares memory with the {name}: π is written while the inputs are read; pass a separate array")
    return out


def solve_arrays(target, draft, *, divergence, budget, acceptance, threads, normalize, check, out, price=None) -> Solved:
    """:func:`mentored.solve` on numpy arrays: its checks, then one batched core call.

    ``price`` (a scalar or one λ per row) solves max A(π) − λ·D_f(π‖p) per row (the core's Mode.price):
    the batch entry for callers with per-row prices."""
    div = _divergence(divergence)
    given = [name for name, v in (("budget", budget), ("acceptance", acceptance), ("price", price)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of budget=, acceptance= and price= (got {', '.join(given) or 'none'})")
    nthreads = threads_arg(threads)
    # Types and shapes here; entries and sums in the core's own first pass over each row, which
    # refuses a row with a typed status and its sums, mapped to the errors by refuse_pair.
    p, q = pair_arrays(target, draft)
    squeeze = p.ndim == 1
    p2, q2 = np.atleast_2d(p), np.atleast_2d(q)
    dtype = np.float32 if p2.dtype == q2.dtype == np.float32 else np.float64
    # A float32 target with a float64 draft: the rows are solved in float64 (the target widened
    # exactly) and π comes back float32, rounded toward p by the core as float32 rows are.
    to_float32 = p2.dtype == np.float32 and dtype == np.float64
    p2 = np.ascontiguousarray(p2, dtype=dtype)
    q2 = np.ascontiguousarray(q2, dtype=dtype)
    rows = p2.shape[0]
    by_budget = budget is not None
    if by_budget:
        mode, values = _core.Mode.budget.value, per_row(budget, rows, "budget")
    elif price is not None:
        mode, values = _core.Mode.price.value, per_row(price, rows, "price")
    else:
        mode, values = _core.Mode.acceptance.value, per_row(acceptance, rows, "acceptance", upper=1.0)
    out2 = None if out is None else _out_arg(out, p, q, dtype).reshape(rows, -1)
    rtols = sum_rtol(p.dtype, normalize), sum_rtol(q.dtype, normalize)
    if div.compiled is not None:
        core = _core.solve_to_float32 if to_float32 else _core.solve
        pi, res, status, stats = core(p2, q2, div.compiled, mode, values, nthreads, *rtols, out2)
    elif (compiled := program(div)) is not None:  # a sympy generator, evaluated by the core
        core = _core.solve_custom_to_float32 if to_float32 else _core.solve_custom
        pi, res, status, stats = core(p2, q2, compiled, mode, values, nthreads, *rtols, out2)
    else:
        vec, scalar, f_inf = callable_forms(div)
        core = _core.solve_custom_to_float32 if to_float32 else _core.solve_custom
        pi, res, status, stats = core(p2, q2, vec, scalar, f_inf, mode, values, *rtols, out2)
    # A refused row raises its error here, from the core's numbers; normalised float64 rows whose sum
    # has no float64 reciprocal (or passes DBL_MAX) are rescaled, and the batch is solved again.
    if (status.any() or normalize and dtype == np.float64) and any(refuse_pair(stats, p.dtype, q.dtype, normalize, p.shape)):
        target, draft = as_pair(target, draft, True)
        return solve_arrays(target, draft, divergence=div, budget=budget, acceptance=acceptance, threads=threads, normalize=True,
                            check=check, out=out, price=price)
    bad = np.flatnonzero(status)
    if bad.size:
        r = int(bad[0])
        if status[r] == _core.Status.unreachable.value:  # the one status of a row whose entries and sums pass
            raise ValueError(
                f"acceptance {values[r]} is out of reach under {div.name!r} in row {r}: the most "
                f"reachable is {res[r, 3]}, since drafter mass where the target is zero costs f∞ = {div.f_inf}"
            )
        raise RuntimeError(f"row {r}: the core refused a row whose entries and sums pass (status {int(status[r])}); please report this")
    if acceptance is None:  # a budget, or the divergence a price spends: binding short of the curve's end
        binding = res[:, 0] < res[:, 5]
    else:
        binding = np.ones(rows, dtype=bool)
    # A price's answer is certified as the budget optimum at the divergence it spent (docs/theory.md §4).
    return Solved(div, pi.astype(p.dtype, copy=False), res, binding, squeeze,
                  (p2, q2, values if by_budget else res[:, 4], by_budget) if check else None)


# ---------------------------------------------------------------- the speculative step

def step_arrays(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence, budget, seed, uniforms, threads,
                zeros, normalize, block=False, notes=False, price=None, priced=None):
    """:func:`mentored.speculative_step` on numpy arrays: one core call (``verify``, extra = 1). ``notes``:
    ``(out, log π, log p, D)`` of each emitted token (the core's notes; the bonus column NaN, a
    divergence the core cannot evaluate NaN in D). ``price``: one for all, per sequence (B,) or per
    position (2-D, broadcast to (B, k)), NaN where a sequence uses its budget (docs/theory.md §4);
    ``priced`` (B,) bool: the budgets of those sequences are prices already (the rescaled retry)."""
    check_zeros(zeros)
    div = _divergence(divergence)
    code = core_divergence(div)
    # Rows are checked by the core as it reads them (one pass across the boundary); those of a
    # divergence it cannot evaluate here, before their π is solved row by row in Python.
    p, bonus, q, draft = check_step_inputs(
        target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, np.asarray, rows=code is None,
        normalize=normalize,
    )
    B, k, V = q.shape
    budgets = step_budgets(budget, B, k)
    if price is not None:  # prices in the priced sequences' budgets, and the core told which they are
        budgets, priced = step_prices(budgets, price, B, k)
    u = step_uniforms(uniforms, seed, B, k)
    dtypes = p.dtype, q.dtype
    dtype = np.float32 if p.dtype == q.dtype == np.float32 else np.float64
    p = np.ascontiguousarray(p, dtype=dtype)
    q = np.ascontiguousarray(q, dtype=dtype)
    draft = np.ascontiguousarray(draft, dtype=np.int64)
    bonus = np.ascontiguousarray(bonus.reshape(B), dtype=np.int64)
    pi = None
    if code is None and k:  # π in Python (its f is a Python callable), then the same decision call
        pi = np.empty((B * k, V), dtype=dtype)
        by_row = np.repeat(priced if priced is not None else np.zeros(B, dtype=bool), k)
        for by_price in (False, True):
            at = np.flatnonzero(by_row == by_price)
            if at.size:
                pi[at] = solve_pi(p[:, :k, :].reshape(B * k, V)[at], q.reshape(B * k, V)[at], div, budgets.ravel()[at], threads, zeros,
                                  normalize, price=by_price)
    elif code is None:
        pi = np.zeros((0, V), dtype=dtype)
    # One call: each position's π is solved in the core just before its acceptance test, and every
    # row is checked (entries, and sums within the tolerance of its dtype) as it is read.
    out, bad, status, pos, stats, *noted = _core.verify(
        p.reshape(B * (k + 1), V), q.reshape(B * k, V), draft.reshape(-1), np.full(B, k, dtype=np.int64), bonus,
        u.reshape(-1), budgets.reshape(-1), [code], None, None, pi, None, zeros == "keep", 1, False, threads_arg(threads), False,
        *(sum_rtol(d, normalize) for d in dtypes), block=block, notes=notes, priced=priced,
    )
    if bad >= 0 and normalize and status == _core.StepStatus.bad_value.value and row_error("", dtypes[0], stats[:3], "", True) is None \
            and row_error("", dtypes[1], stats[3:], "", True) is None:
        # Finite, nonnegative float64 rows whose sum has no float64 reciprocal (below 2⁻¹⁰²⁴, or
        # past DBL_MAX), which the core refuses: rescaled here, as solve does, and verified again.
        p, q = (check_sums(x.reshape(-1, V), name, True).reshape(x.shape) for x, name in ((p, "target"), (q, "draft")))
        return step_arrays(p, bonus.reshape(B, 1), q, draft, divergence=div, budget=budgets, seed=None, uniforms=u, threads=threads,
                           zeros=zeros, normalize=True, block=block, notes=notes, priced=priced)
    if bad >= 0:
        raise step_error(status, bad, pos, V, div, lambda b, j: f"row (b, j) = ({b}, {j})", stats, dtypes, normalize)
    return (out, *noted) if notes else out


def step_prices(budgets: np.ndarray, price, B: int, k: int):
    """speculative_step's budgets (B, k) with prices in place where given: (values (B, k), priced (B,)).
    ``price``: a scalar or (B,) per sequence (priced_values' rules), or 2-D, broadcast to (B, k), one per
    position (a sequence's prices all NaN, it uses its budget; all numbers, it is priced; inf is
    lossless, as budget 0)."""
    if np.ndim(price) < 2:
        lam, priced = priced_values(budgets.max(1) if k else np.zeros(B), price, B, unit="sequence")
        return np.ascontiguousarray(np.where(priced[:, None], lam[:, None], budgets)), priced
    try:
        lam = np.broadcast_to(np.asarray(price, dtype=np.float64), (B, k))
    except ValueError:
        raise ValueError(f"price must be a scalar, one per sequence (B,) = ({B},), or broadcast to (B, k) = ({B}, {k}), "
                         f"got shape {np.shape(price)}") from None
    nan = np.isnan(lam)
    mixed = nan.any(1) & ~nan.all(1)
    if mixed.any():
        raise ValueError(f"price: sequence {int(np.flatnonzero(mixed)[0])} mixes NaN (its budget) with prices; a sequence is "
                         "verified by budgets or by prices (inf: lossless)")
    priced = ~nan.all(1) if k else np.zeros(B, dtype=bool)
    per_seq = np.where(priced, np.nanmin(np.where(nan, np.inf, lam), 1) if k else 0.0, np.nan)
    priced_values(budgets.max(1) if k else np.zeros(B), per_seq, B, unit="sequence")  # the sign and both-given checks
    if np.any(lam[priced] < 0):
        raise ValueError(f"price must be nonnegative (inf allowed), got {lam[priced][lam[priced] < 0][0]}")
    return np.ascontiguousarray(np.where(priced[:, None], lam, budgets)), priced


def core_divergence(div):
    """What the core evaluates ``div`` with: a built-in's code, a user generator's program, or None
    (a generator from callables alone, or one whose code has no program: π is solved in Python)."""
    return int(div.compiled) if div.compiled is not None else div.program


_STEP_STATUS = {
    _core.StepStatus.bad_token: "draft_token_ids: an id outside [0, {V}) at {where}",
    _core.StepStatus.zero_row: "a row of the target or draft probabilities sums to zero at {where}",
    _core.StepStatus.bad_value: "the target or draft probabilities hold a NaN, infinite or negative entry at {where}",
    _core.StepStatus.unreachable: "with zeros='keep', the end of the finite {div} curve is out of reach at {where} (rounding)",
    _core.StepStatus.bad_bonus: "bonus_token_ids: an id outside [0, {V}) at {where}",
    _core.StepStatus.off_sum: "a row of the target or draft probabilities does not sum to 1 at {where}",
}
# The statuses of a refused row, whose stats give the message of the Python checks.
_ROW_STATUSES = (_core.StepStatus.zero_row, _core.StepStatus.bad_value, _core.StepStatus.off_sum)


def step_error(status: int, b: int, j: int, V: int, div, where, stats=None, dtypes=None, normalize=False,
                names=("target_with_bonus_probs", "draft_probs"), ids=None) -> ValueError:
    """The error of a failed ``_core.verify``: its typed status, at request ``b``, position ``j``
    (``where(b, j)`` names the place: "(b, j) = (1, 0)").

    With the failing rows' numbers (``stats``: Σ, min, max of the target row, then of the draft row)
    and the inputs' dtypes, a refused row gets the message of the Python checks, naming its side
    (``names``) and whether sums were checked (``normalize``: only that each is positive). ``ids``:
    the caller's own messages for some statuses (those of ids)."""
    member = _core.StepStatus(int(status))  # verify returns the int value
    if stats is not None and member in _ROW_STATUSES:
        for name, dtype, x in zip(names, dtypes, (stats[:3], stats[3:])):
            err = row_error(name, dtype, x, where(b, j), normalize)
            if err is not None:
                return err
    msg = (ids or {}).get(member) or _STEP_STATUS.get(member, "core failure (status {status}) at {where}")
    return ValueError(msg.format(V=V, where=where(b, j), div=repr(div.name), status=int(status), b=b))


def solve_pi(p2, q2, div, budgets, threads, zeros, normalize=False, price=False) -> np.ndarray:
    """π for rows (R, V) with per-row budgets (``price``: per-row prices λ, docs/theory.md §4);
    ``zeros="keep"`` adds π_i = 0 where p_i = 0.

    With f∞ = ∞ the optimum never puts mass there. With f∞ < ∞, a row whose optimum went past the
    end of the finite curve (``t_hi = inf``, s > TV − Q0) is solved again at that end, the least
    divergence reaching acceptance 1 − Q0: the optimum under the constraint, since D_f is
    nondecreasing along the curve and the finite part is within budget
    (proofs/Serving.v : keep_zeros_optimal). Rounding mass left on {p = 0} is set to 0. At a price
    the same: A − λD is concave along the curve, and its largest maximiser lies past the finite
    curve's end, so that end is the best point of the finite curve (speculative.hpp, solve_position).
    """
    kw = dict(divergence=div, threads=threads, normalize=normalize, check=False, out=None)
    sol = solve_arrays(p2, q2, budget=None if price else budgets, acceptance=None, price=budgets if price else None, **kw)
    pi = sol.pi
    if zeros == "keep" and np.isfinite(div.f_inf):
        redo = np.flatnonzero(np.isinf(sol.res[:, 2]))  # t_hi
        if redo.size:
            pr, qr = p2[redo], q2[redo]
            zero = pr == 0
            q0 = np.where(zero, qr, 0).sum(-1, dtype=np.float64) / qr.sum(-1, dtype=np.float64)
            again = solve_arrays(pr, qr, budget=None, acceptance=np.clip(1.0 - q0, 0.0, 1.0), **kw).pi
            again[zero] = 0
            pi = np.array(pi, copy=True) if not pi.flags.writeable else pi
            pi[redo] = again
    return pi

# ---------------------------------------------------------------- the serving layout

def onehot_arrays(px: np.ndarray, eps: np.ndarray, div: Divergence, zeros: str, price: bool = False) -> np.ndarray:
    """π_x of onehot_acceptance for float64 arrays of one length: in the core (speculative.hpp,
    onehot_pi_x, or onehot_pi_x_price where ``eps`` holds prices) wherever it can evaluate f̃, by the
    same rules in numpy otherwise."""
    code = core_divergence(div)
    if code is not None:
        return _core.onehot(px, eps, code, zeros == "keep", price)
    with np.errstate(all="ignore"):
        if price:
            return onehot_price_search(np, px, eps, div, zeros, perspective_terms(div))
        return onehot_bisection(np, px, eps, div, zeros, perspective_terms(div))


def perspective_terms(div):
    """y·f̃(x/y) (y > 0, x ≥ 0) of a user generator, in numpy: y·f̃(x/y) wherever x/y and the product
    are finite (``div.f_tilde`` is exact up to DBL_MAX, where the printed form of f overflows too);
    where x/y or f̃(x/y) passes DBL_MAX (a tiny y), the term y·f(x/y) − c(x − y) in 30-digit
    arithmetic, which is finite wherever the term is; where f cannot be evaluated there, the bound
    f̃∞·x (the term is at most f̃∞·(x − y) by convexity), ∞ when f̃∞ = ∞."""
    c, f_inf = div.tilt, div.f_inf - div.tilt
    exact = []  # f in 30-digit arithmetic, compiled on first use: most rows never need it

    def term(x, y):
        x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        with np.errstate(all="ignore"):
            r = x / y
            out = y * div.f_tilde(np.where(np.isinf(r), 1.0, r))  # (NaN stays NaN)
            # the perspective's limits: x·f̃∞ at y = 0 or x = ∞ (0 at x = 0, whatever f̃∞)
            edge = (y == 0) | np.isinf(x)
            out = np.where(edge, np.where(x == 0, 0.0, x * f_inf), out)
            far = (~np.isfinite(out) | ~np.isfinite(r)) & (x > 0) & (y > 0) & ~edge
        if far.any():
            if not exact:
                exact.append(_tilted_terms(div, c))
            fixed = exact[0](x[far], y[far])
            out = np.array(out, copy=True)
            out[far] = np.where(np.isnan(fixed), x[far] * f_inf if np.isfinite(f_inf) else np.inf, fixed)
        return out

    return term


def _tilted_terms(div, c):
    """(x, y) ↦ y·f(x/y) − c(x − y), elementwise in 30-digit arithmetic (mpmath: no exponent overflows),
    rounded to doubles; NaN where f cannot be evaluated there (or ``div`` has no sympy generator)."""
    import mpmath

    info = div.symbolic
    if info is None:
        return lambda x, y: np.full(np.shape(x), np.nan)
    import sympy as sp

    fn = sp.lambdify(info.t, info.expr, modules="mpmath")

    def call(x, y):
        out = np.empty(np.shape(x))
        with mpmath.workdps(30):
            cm = mpmath.mpf(c)
            for i, (a, b) in enumerate(zip(np.ravel(x), np.ravel(y))):
                try:
                    a, b = mpmath.mpf(float(a)), mpmath.mpf(float(b))
                    v = b * fn(a / b) - cm * (a - b)
                    out.flat[i] = float(v.real) if isinstance(v, mpmath.mpc) and v.imag == 0 else float(v)
                except (TypeError, ValueError, ArithmeticError):  # complex, or a function mpmath lacks
                    out.flat[i] = np.nan
        return out

    return call


_RNG = np.random.default_rng()  # unseeded requests on numpy input (CPU tensors: torch's global RNG)


def uniforms_arrays(plan, generators):
    """Uniforms (T, 2) from this module's generator, and from each seeded request's own (numpy or
    torch) generator for its positions: nothing drawn for a request that needs none."""
    u = _RNG.random((plan.T, 2))
    for b, gen in (generators or {}).items():  # checked: serving._check_generators
        b = int(b)
        n = int(plan.n[b])
        if n == 0 or plan.greedy[b]:
            continue  # no draw for a request that needs none: its stream stays its own
        s = int(plan.starts[b])
        if isinstance(gen, np.random.Generator):
            u[s : s + n] = gen.random((n, 2))
        else:  # a torch.Generator: the torch backend draws from it
            from .torch import generator_uniforms

            u[s : s + n] = generator_uniforms(gen, n).cpu().numpy()
    return u


def _host_ids(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {a.dtype}")
    return a


def _host_rows(x, name: str, plan) -> np.ndarray:
    """Rows (T, V) of host memory as the core takes them: CPU tensors as numpy views of their memory."""
    if type(x) is np.ndarray and x.dtype.char in "fd" and x.dtype.isnative and x.ndim == 2 and x.shape[0] == plan.T:
        return x  # the usual case, without floats' checks of names (a dtype's name costs microseconds)
    a = floats(x, name)
    if a.ndim != 2 or a.shape[0] != plan.T:
        raise ValueError(f"{name} must have shape (num_tokens, V) = ({plan.T}, V), got {a.shape}")
    return a


def verify_arrays(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, u, zeros, threads, normalize, lenient=False,
                  notes=False):
    """:func:`mentored.verify.serving.rejection_sample` on numpy arrays, uniforms ``u`` (T, 2) drawn: one call
    of the compiled core (``_core.verify``), which checks every row it is given as it reads it
    (``lenient``, validation off: a position whose rows fail is decided there, not refused). ``notes``:
    returns ``(out, log π, log p, D_f(π‖p))`` of each emitted token (float64 (B, K + 1), NaN where
    nothing is emitted; the bonus column NaN, the caller's)."""
    T = plan.T
    draft = _host_ids(draft_token_ids, "draft_token_ids")
    bonus = _host_ids(bonus_token_ids, "bonus_token_ids")
    if tuple(draft.shape) != (T,):
        raise ValueError(f"draft_token_ids must be flat, shape (num_tokens,) = ({T},), got {tuple(draft.shape)}")
    p = _host_rows(target_probs, "target_probs", plan)
    q = None if draft_probs is None else _host_rows(draft_probs, "draft_probs", plan)
    if q is not None and q.shape != p.shape:
        raise ValueError(f"draft_probs must have the shape of target_probs {p.shape}, got {q.shape}")
    dtypes = (p.dtype, p.dtype if q is None else q.dtype)
    if q is not None and q.dtype != p.dtype:
        p, q = p.astype(np.float64), q.astype(np.float64)
    p = np.ascontiguousarray(p)
    q = None if q is None else np.ascontiguousarray(q)
    divs = [core_divergence(d) for d in plan.divs]
    pi = pi_x = None
    if any(d is None for d in divs):
        pi, pi_x = _given_pi(plan, divs, p, q, draft, threads, zeros, normalize)
    out, bad, status, pos, stats, *noted = _core.verify(
        p, q, draft, plan.counts, bonus, u, plan.eps_rows, divs, plan.which, plan.greedy_or_none, pi, pi_x, zeros == "keep", 0,
        True, threads_arg(threads), True, sum_rtol(dtypes[0], normalize), sum_rtol(dtypes[1], normalize), lenient, plan.block, notes,
        plan.priced,
    )
    if bad >= 0:
        if normalize and rescalable(status, stats, dtypes):
            # Finite, nonnegative float64 rows whose sum has no float64 reciprocal (below 2⁻¹⁰²⁴ or
            # past DBL_MAX), which the core refuses: rescaled here, as solve does, and verified again.
            p, q = (x if x is None else check_sums(x, name, True) for x, name in ((p, "target_probs"), (q, "draft_probs")))
            return verify_arrays(plan, draft, q, p, bonus, u, zeros, threads, True, lenient, notes)
        raise refusal(status, bad, pos, stats, dtypes, p.shape[1], plan.divs[0 if plan.which is None else int(plan.which[bad])], plan.n,
                      normalize)
    if not notes:
        return out
    logpi, logp, spent = noted
    if pi is not None or pi_x is not None:
        _given_spent(plan, divs, p, draft, pi, pi_x, out, spent)
    return out, logpi, logp, spent


def _given_spent(plan, divs, p, draft, pi, pi_x, out, spent):
    """D_f(π‖p) at the emitted positions of requests whose π was given (the core cannot evaluate their f),
    in place: Σ_i p_i f̃(π_i/p_i) over the row (dense), or over x and the rest (token-only, greedy)."""
    req, pos = np.nonzero((out >= 0) & (np.arange(out.shape[1])[None, :] < plan.n[:, None]))
    t = plan.starts[req] + pos
    which = plan.which[req] if plan.which is not None else np.zeros(req.size, dtype=np.int64)
    for i, d in enumerate(divs):
        sel = np.flatnonzero((which == i) & (draft[t] >= 0))
        if d is not None or not sel.size:
            continue
        term, tt = perspective_terms(plan.divs[i]), t[sel]
        P = p[tt].astype(np.float64)
        P /= P.sum(1, keepdims=True)
        greedy = plan.greedy[req[sel]]
        if pi is not None and not greedy.all():
            D = term(pi[tt].astype(np.float64), P).sum(1)
        else:
            x = np.where(greedy, P.argmax(1), draft[tt])
            a = np.where(greedy, 1.0, pi_x[tt] if pi_x is not None else 0.0)
            px = P[np.arange(tt.size), x]
            D = term(a, px) + term(1.0 - a, 1.0 - px)
        if pi is not None and greedy.any():
            g = np.flatnonzero(greedy)
            pa = P[g].max(1)
            D[g] = term(1.0, pa) + term(0.0, 1.0 - pa)
        spent[req[sel], pos[sel]] = D


def rescalable(status, stats, dtypes) -> bool:
    """Whether a refusal of normalised rows is only that a float64 sum has no reciprocal (below 2⁻¹⁰²⁴
    or past DBL_MAX): such rows are rescaled, as solve does, and verified again."""
    return status == _core.StepStatus.bad_value.value and all(row_error("", d, x, "", True) is None for d, x in zip(dtypes, (stats[:3], stats[3:])))


def refusal(status, bad, pos, stats, dtypes, V, div, n, normalize) -> ValueError:
    """The error of a refused core call, naming the row of the flattened layout, its request and position."""
    starts = np.concatenate([[0], np.cumsum(np.asarray(n, dtype=np.int64))])
    return step_error(status, bad, pos, V, div, lambda b, j: f"row {int(starts[b]) + j} (request {b}, position {j})", stats, dtypes,
                      normalize, names=("target_probs", "draft_probs"), ids=_ID_MESSAGES)


# rejection_sample's words for ids the core refused (placeholders are allowed there)
_ID_MESSAGES = {
    _core.StepStatus.bad_token: "draft_token_ids: an id outside [0, {V}) that is not the placeholder -1, at {where}",
    _core.StepStatus.bad_bonus: "bonus_token_ids: an id outside [0, {V}) for request {b}",
}


def _given_pi(plan, divs, p, q, draft, threads, zeros, normalize):
    """π (dense drafts) or π_x (token-only) at the random, non-placeholder positions of requests whose
    divergence the core cannot evaluate, computed here; the core reads only those rows."""
    T = plan.T
    which = plan.which[plan.req] if plan.which is not None else np.zeros(T, dtype=np.int32)
    eps = plan.eps_rows if plan.eps_request is not None else np.full(T, plan.eps_rows[0])
    priced = plan.priced[plan.req] if plan.priced is not None else np.zeros(T, dtype=bool)  # eps holds prices there
    pi = np.zeros_like(p) if q is not None else None
    pi_x = np.zeros(T) if q is None else None
    for i, d in enumerate(divs):
        if d is not None:
            continue
        idx = np.flatnonzero((which == i) & ~plan.greedy[plan.req] & (draft >= 0))
        if not idx.size:
            continue
        for by_price in (False, True):
            at = idx[priced[idx] == by_price]
            if not at.size:
                continue
            if q is not None:
                pi[at] = solve_pi(p[at], q[at], plan.divs[i], eps[at], threads, zeros, normalize, price=by_price)
            else:
                rows = p[at]
                px = rows[np.arange(at.size), draft[at]].astype(np.float64) / row_stats(rows)[0]
                pi_x[at] = onehot_arrays(px, eps[at], plan.divs[i], zeros, price=by_price)
    return pi, pi_x




# ---------------------------------------------------------------- draft trees


def tree_arrays(plan, tokens, target_probs, u, zeros, threads, normalize):
    """:func:`mentored.verify.serving.tree_sample` on host memory, uniforms ``u`` (N, 2) drawn: one call
    of the compiled core (``_core.tree``), which checks every row as it reads it. Built-ins are solved
    there; a user generator's node verifiers are solved first, in numpy (``node_masses``, from its
    f̃′ and (f̃′)⁻¹), and handed to the core, which walks them. Returns (out, last, accept, value)."""
    p = floats(target_probs, "target_probs")
    if p.ndim != 2 or p.shape[0] != plan.N:
        raise ValueError(f"target_probs must have shape (num_nodes, V) = ({plan.N}, V), got {p.shape}")
    p = np.ascontiguousarray(p)
    tok = plan.check_tokens(tokens, p.shape[1])
    divs = [int(d.compiled) if d.compiled is not None else None for d in plan.divs]
    given = _given_tree(plan, tok, p, zeros) if None in divs else None
    rtol = sum_rtol(p.dtype, normalize)
    out, last, accept, value, bad, status, node, stats = _core.tree(
        p, tok, plan.parents, plan.counts, u, plan.eps, divs, plan.which, plan.greedy_or_none, given, zeros == "keep", plan.length,
        threads_arg(threads), rtol, plan.priced,
    )
    if bad >= 0:
        i = int(plan.starts[bad]) + int(node)
        member = _core.StepStatus(int(status))
        err = row_error("target_probs", p.dtype, stats, plan.where(i), normalize) if member in _ROW_STATUSES else None
        if err is not None:
            raise err
        raise RuntimeError(f"the core refused the tree of {plan.where(i)} ({member.name}) after its checks passed; please report this")
    return out, last, accept, value


def _given_tree(plan, tok, p, zeros):
    """π_parent(x_j) at every node of the requests whose divergence the core does not evaluate (user
    generators), by the rule of the core in numpy; 0 elsewhere (the core solves those)."""
    sums = _core.row_stats(p)[:, 0]
    child = plan.gp >= 0
    P_child = np.zeros(plan.N)
    P_child[child] = p[plan.gp[child], tok[child]] / sums[plan.gp[child]]
    P_rest = _rest_masses(plan, tok, p, P_child, sums)

    def solve(div, P, w, eps, weighted):
        if div.compiled is not None:
            return np.zeros_like(P)
        c = div.tilt
        forms = LevelForms(perspective_terms(div), lambda t: div.fprime(t) - c, lambda y: div.fprime_inv(y + c))
        with np.errstate(all="ignore"):
            return node_masses(np, P, w, eps, div, zeros, forms, weighted)

    with np.errstate(all="ignore"):
        accept, _ = tree_masses(np, plan, P_child, P_rest, plan.eps_node, None, solve, np.asarray)
    return np.ascontiguousarray(accept)


def _rest_masses(plan, tok, p, P_child, sums):
    """At each node with children, its target's mass off its children's tokens (p/Σp): 1 − Σ P_child
    from REST_DIRECT up, else summed over the complement (as the core); 0 at leaves."""
    child = np.flatnonzero(plan.gp >= 0)
    out = np.zeros(plan.N)
    np.add.at(out, plan.gp[child], P_child[child])
    out = np.where(plan.num_kids > 0, 1.0 - out, 0.0)
    small = np.flatnonzero((plan.num_kids > 0) & ~(out >= REST_DIRECT))
    if small.size:
        rows = np.full(plan.N, -1, dtype=np.int64)
        rows[small] = np.arange(small.size)
        rest = p[small].astype(np.float64)
        at = child[rows[plan.gp[child]] >= 0]
        rest[rows[plan.gp[at]], tok[at]] = 0.0
        out[small] = rest.sum(1) / sums[small]
    return out
