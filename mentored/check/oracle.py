r"""An independent check: MD(f, ε) written as a convex program and handed to cvxpy.

.. math::

    \max_{\pi \ge 0,\ \sum \pi = 1} \sum_i \min(\pi_i, q_i)
    \quad \text{s.t.} \quad D_f(\pi\|p) \le \varepsilon

and (:func:`oracle_weighted`) the node problem of a draft tree, a linear objective over the whole
vocabulary, :math:`\max \sum_i w_i \pi_i` under the same constraint (docs/serving.md, "Draft trees").

Each built-in divergence is stated in the form a conic solver handles best. The pitfalls:

- ``cp.kl_div(x, y) = x log(x/y) − x + y`` is not ``cp.rel_entr(x, y) = x log(x/y)``; they differ
  as soon as π puts mass where p = 0, so only ``rel_entr`` is used.
- Tokens with p = 0 follow f∞: excluded (π = 0) when f∞ = ∞, charged f∞ per unit otherwise.
- The variables are the ratios u = π/p on {p > 0}, so they are O(1) where p is tiny; with π as
  the variable, Neyman χ² (p²/π) came back "optimal" from Clarabel and SCS yet 4e-3 below the
  optimum. Hellinger is Σ p √u ≥ 1 − ε/2 and Neyman χ² is Σ p/u ≤ 1 + ε (both use Σ π = 1).

The solver's answer is not trusted either: :func:`oracle_solve` reports the solver status and
the point's own feasibility residuals, measured from the definition of D_f.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from ..divergences import divergence as _divergence

__all__ = [
    "OracleResult", "oracle_solve", "oracle_weighted", "OracleDisagreementWarning", "OracleSkippedWarning", "oracle_skip_reason",
    "convex_form_error",
]


class OracleDisagreementWarning(UserWarning):
    """``solve(check=True)``: the oracle's point accepts more than the solver's, by no more than the
    oracle's own tolerance (what its infeasibility can buy), or where a certificate proves the
    solver's point optimal. The oracle is not the judge there; the certificate is."""


class OracleSkippedWarning(UserWarning):
    """``solve(check=True)``: the oracle was not run on a row, for the reason stated (e.g. subnormal
    entries, which conic solvers cannot represent after scaling)."""


_SUBNORMAL = float(np.finfo(np.float64).tiny)  # 2.2e-308


def oracle_skip_reason(target, draft) -> str | None:
    """Why the convex program cannot be posed faithfully for this row, or None.

    Entries below the smallest normal float (p_i = 1e-310) make the program's data overflow in either
    scaling (π/p beyond DBL_MAX, or 1/p) or underflow in the solver's equilibration; cvxpy then
    refuses ("Problem data contains NaN or Inf")."""
    p = np.asarray(target, dtype=np.float64)
    q = np.asarray(draft, dtype=np.float64)
    for name, v in (("target", p), ("draft", q)):
        small = (v > 0) & (v < _SUBNORMAL)
        if small.any():
            i = int(np.flatnonzero(small)[0])
            return f"the {name} has a subnormal entry ({v[i]:.3g} at index {i}), which the conic solvers cannot represent"
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), 0.0)
    if not np.all(np.isfinite(ratio)):
        return "a ratio q_i/p_i overflows"
    return None


@dataclass(frozen=True)
class OracleResult:
    """What the convex program says, and how far its point is from feasible."""

    pi: np.ndarray
    acceptance: float  # the objective at the returned point: Σ min(π, q) (oracle_solve), Σ w π (oracle_weighted)
    value: float  # the solver's optimal objective
    status: str
    solver: str
    divergence: float  # D_f(π‖p) from the definition
    budget_excess: float  # max(0, D_f(π‖p) − ε)
    simplex_residual: float  # max(|Σπ − 1|, max(−π))
    unit: float = 1.0  # f's unit k (a power of ten; 1 for a built-in): budgets are judged relative to k + ε

    def usable(self, budget: float, tol: float = 1e-8) -> bool:
        """Solved, and its point feasible to ``tol`` (budget relative to k + ε, k f's unit, 1 for a
        built-in, so that 10⁻²⁰⁰·f is judged as f is; mass absolute)."""
        return self.status in _USABLE and self.budget_excess <= tol * (self.unit + budget) and self.simplex_residual <= tol

    def slack(self, lam: float, divergence) -> float:
        """How much acceptance this point's infeasibility can buy at a solution with dual λ.

        The optimum grows at rate λ in the budget (envelope theorem); extra mass δ is δ·|f'(1)| more
        budget (D_f = D_f̃ + f'(1)(Σπ − 1)) plus δ of acceptance.
        """
        c = abs(_divergence(divergence).tilt)
        return lam * (self.budget_excess + c * self.simplex_residual) + self.simplex_residual


def _scale(div):
    r"""The power of ten :math:`k` nearest f's own unit (:attr:`Divergence.unit`), as a sympy Integer or
    Rational: the program is posed for :math:`f/k` at budget :math:`\varepsilon/k`, the same
    constraint, with data of order 1 (a solver's tolerances are absolute: at
    :math:`f = 10^{-200}(t - 1)^2` every point meets the budget 0.5 to them)."""
    import sympy as sp

    return sp.Integer(10) ** int(round(np.log10(div.unit)))


def _sympy_cost(div, u, scale=1):
    r"""Elementwise :math:`f(u)/k` (``scale`` :math:`k`, a sympy number) as a DCP-convex cvxpy
    expression, from the sympy generator.

    Tries the sympy forms ``f``, ``expand(f)``, ``apart(f)`` (rational :math:`f`: polynomial plus
    :math:`c/(t+a)^k`, e.g. triangular discrimination :math:`t - 3 + 4/(t+1)`) and the expanded
    logarithms, translating each node to a cvxpy atom: ``t log(t/B) -> rel_entr(t, B)``,
    ``log B -> log`` (concave B) or ``-log(1/B)``, powers -> ``square``/``power``/``sqrt``/``inv_pos``,
    ``|B| -> abs``, ``exp``, ``log cosh B -> logistic(2B) - B - log 2`` (B affine:
    :math:`\log(1 + e^{2B}) - B - \log 2 = \log((e^{B} + e^{-B})/2)`). The first form that cvxpy
    accepts as convex and that equals :math:`f/k` numerically is used; otherwise ValueError.
    """
    import cvxpy as cp
    import sympy as sp

    info = div.symbolic
    if info is None:
        raise ValueError(f"the oracle has no convex form for divergence {div.name!r} (no sympy generator)")
    t, f = info.t, info.expr / scale

    def tr(e):
        if e == t:
            return u
        if e.is_number:
            return float(e)
        if isinstance(e, sp.Add):
            out = 0
            for a in e.args:
                out = out + tr(a)
            return out
        if isinstance(e, sp.Mul):
            c, rest = e.as_coeff_Mul()
            if c != 1:
                return float(c) * tr(rest)
            factors = list(rest.args)
            logs = [a for a in factors if isinstance(a, sp.log)]
            if len(factors) == 2 and t in factors and len(logs) == 1:  # t log R = rel_entr(t, t/R)
                other = sp.simplify(t / logs[0].args[0])
                return cp.rel_entr(u, tr(other) if other.free_symbols else float(other) * np.ones(u.shape))
            consts = [a for a in factors if not a.free_symbols]
            if consts:
                return float(sp.Mul(*consts)) * tr(sp.Mul(*[a for a in factors if a.free_symbols]))
            raise ValueError(f"no cvxpy atom for the product {e}")
        if isinstance(e, sp.Pow):
            base, k = e.args
            if not k.is_number:
                raise ValueError(f"no cvxpy atom for {e}")
            k = float(k)
            b = tr(base)
            if k == 2:
                return cp.square(b)
            if k == 0.5:
                return cp.sqrt(b)
            if k == -1:
                return cp.inv_pos(b)
            return cp.power(b, k)
        if isinstance(e, sp.log):
            arg = e.args[0]
            if isinstance(arg, sp.cosh):  # log cosh B = log(1 + e^{2B}) − B − log 2, convex for B affine
                b = tr(arg.args[0])
                if not isinstance(b, float) and b.is_affine():
                    return cp.logistic(2 * b) - b - float(np.log(2.0))
            inner = tr(arg)
            if not isinstance(inner, float) and inner.is_concave():
                return cp.log(inner)
            return -cp.log(tr(sp.simplify(1 / arg)))
        if isinstance(e, sp.exp):
            return cp.exp(tr(e.args[0]))
        if isinstance(e, sp.Abs):
            return cp.abs(tr(e.args[0]))
        if isinstance(e, sp.Max):  # the max of convex pieces
            return cp.maximum(*[tr(a) for a in e.args])
        raise ValueError(f"no cvxpy atom for {e}")

    forms = [f, sp.expand(f)]
    try:
        forms.append(sp.apart(sp.together(f), t))
    except Exception:  # not rational
        pass
    forms.append(sp.expand(sp.expand_log(f, force=True)))
    if f.has(sp.cosh, sp.sinh):  # cosh(a) = (e^a + e^{−a})/2
        forms.append(sp.expand(f.rewrite(sp.exp)))
    probe = np.array([0.05, 0.7, 1.0, 1.3, 4.0])
    errors = []
    for form in forms:
        try:
            expr = tr(form)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            errors.append(str(exc))
            continue
        if isinstance(expr, float) or not expr.is_convex():
            errors.append(f"{form} is not DCP-convex as written")
            continue
        u_save = u.value
        u.value = probe[np.arange(u.size) % probe.size] if u.size else None
        try:
            ok = u.size == 0 or np.allclose(expr.value, info.f(u.value) / float(scale), rtol=1e-9, atol=1e-12)
        finally:
            u.value = u_save
        if ok:
            return expr
        errors.append(f"{form} does not evaluate to f")
    raise ValueError(f"the oracle has no convex form for divergence {div.name!r} (f = {f}): " + "; ".join(errors))


def convex_form_error(divergence) -> str | None:
    """Why the oracle has no convex program for a user generator (no DCP form of f), or None."""
    import cvxpy as cp

    div = _divergence(divergence)
    if div.compiled is not None:
        return None
    if div not in _FORM_ERRORS:
        try:
            _sympy_cost(div, cp.Variable(3, nonneg=True), _scale(div))
            _FORM_ERRORS[div] = None
        except ValueError as exc:
            _FORM_ERRORS[div] = str(exc)
    return _FORM_ERRORS[div]


_FORM_ERRORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _program(div, p, q, eps, scaling):
    """The convex program in ratios u = π/p on {p > 0} and masses z on {p = 0}.

    ``scaling="ratio"`` makes u itself the variable (O(1) even where p is tiny); ``"mass"`` makes
    π the variable, u = π/p. Each conditions some instances better than the other.
    """
    import cvxpy as cp

    name = div.name if div.compiled is not None else None
    pos = p > 0
    pS, qS = p[pos], q[pos]
    v = cp.Variable(pS.size, nonneg=True)
    u = v if scaling == "ratio" else cp.multiply(1.0 / pS, v)
    # f∞ = ∞ excludes {p = 0}; otherwise each unit of mass there costs f∞ (built into the forms).
    z = cp.Variable(int((~pos).sum()), nonneg=True) if (~pos).any() and np.isfinite(div.f_inf) else None
    mass = cp.sum(cp.multiply(pS, u)) + (cp.sum(z) if z is not None else 0)
    outside = cp.sum(z) if z is not None else 0
    accept = cp.sum(cp.minimum(cp.multiply(pS, u), qS)) + (cp.sum(cp.minimum(z, q[~pos])) if z is not None else 0)
    if name is None:  # a user generator: its sympy form mapped to cvxpy atoms, f∞ per unit off p's support, in f's unit k
        k = _scale(div)
        if scaling == "ratio":
            fu = _sympy_cost(div, v, k)
        else:
            w = cp.Variable(pS.size, nonneg=True)  # the ratio, tied to the masses by an equality
            fu = _sympy_cost(div, w, k)
        cost = cp.sum(cp.multiply(pS, fu)) + (div.f_inf / float(k) * outside if z is not None else 0)
        eps = eps / float(k)
    else:  # a built-in: its registered cost (mentored/divergences/__init__.py)
        cost = div.builtin.cvxpy(cp, u, pS, outside)
    constraints = [mass == 1, cost <= eps]
    if name is None and scaling != "ratio":
        constraints.append(w == u)
    problem = cp.Problem(cp.Maximize(accept), constraints)

    def point():
        pi = np.zeros_like(p)
        if u.value is None:
            return np.full_like(p, np.nan)
        pi[pos] = pS * np.asarray(u.value).ravel()
        if z is not None:
            pi[~pos] = np.asarray(z.value)
        return pi

    return problem, point


_TIGHT = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10, "max_iter": 500}
# Both scalings at tight tolerance; the looser runs only if neither gives a usable point.
_ATTEMPTS = (
    (("ratio", "CLARABEL", _TIGHT), ("mass", "CLARABEL", _TIGHT)),
    (("ratio", "CLARABEL", {}), ("mass", "CLARABEL", {}), ("mass", "SCS", {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 20000, "time_limit_secs": 20.0})),
)
_USABLE = ("optimal", "optimal_inaccurate")


def _run(div, p, q, budget, scaling, solver, options) -> OracleResult:
    import cvxpy as cp

    problem, point = _program(div, p, q, budget, scaling)
    label = f"{solver}/{scaling}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "solution may be inaccurate": reported as status
            problem.solve(solver=solver, **options)
    except (cp.error.SolverError, ValueError) as exc:  # ValueError: "Problem data contains NaN or Inf"
        return OracleResult(np.full_like(p, np.nan), np.nan, np.nan, f"solver_error: {exc}", label, np.nan, np.inf, np.inf)
    pi = point()
    return _measured(div, p, pi, float(np.minimum(pi, q).sum()), problem, label, budget)


def _measured(div, p, pi, objective: float, problem, label: str, budget: float) -> OracleResult:
    """A run's point with its feasibility measured at the point itself, clipped at 0 (solvers return
    −1e-12 for zeros), from the definition of D_f."""
    dval = float(div(np.maximum(pi, 0.0), p))
    return OracleResult(
        pi=pi,
        acceptance=objective,
        value=float(problem.value) if problem.value is not None else np.nan,
        status=str(problem.status),
        solver=label,
        divergence=dval,
        budget_excess=max(0.0, dval - budget),
        simplex_residual=float(max(abs(pi.sum() - 1.0), max(0.0, -pi.min()))),
        unit=1.0 if div.compiled is not None else float(_scale(div)),
    )


def _skipped(p, q) -> OracleResult | None:
    """The result of a row the program cannot represent (:func:`oracle_skip_reason`), or None."""
    skip = oracle_skip_reason(p, q)
    if skip is None:
        return None
    nan = np.full_like(p, np.nan)
    return OracleResult(nan, np.nan, np.nan, f"skipped: {skip}", "none", np.nan, np.inf, np.inf)


def oracle_solve(target, draft, divergence, budget, *, solver=None, scaling="ratio", **solver_options) -> OracleResult:
    """Solve MD(f, budget) for one row with cvxpy.

    Without ``solver``: both scalings with tight Clarabel, keeping the usable run (status optimal or
    optimal_inaccurate, point feasible to 1e-9) of highest acceptance. Any feasible point's
    acceptance is a lower bound on the optimum, so the best of several is one too. If no run is
    usable, Clarabel at its defaults and SCS are tried. Solver status "optimal" alone is not
    trusted: on ill-conditioned rows Clarabel has reported it for points 2e-2 below the optimum.
    A row the program cannot represent (:func:`oracle_skip_reason`) is not solved: its status is
    ``"skipped: <reason>"``.
    """
    p, q = (np.asarray(x, dtype=np.float64) for x in (target, draft))
    div, budget = _divergence(divergence), float(budget)
    skipped = _skipped(p, q)
    if skipped is not None:
        return skipped
    if solver is not None:
        return _run(div, p, q, budget, scaling, solver, solver_options)
    result = None
    for group in _ATTEMPTS:
        runs = [_run(div, p, q, budget, *attempt) for attempt in group]
        usable = [r for r in runs if r.usable(budget, tol=1e-9)]
        if usable:
            return max(usable, key=lambda r: r.acceptance)
        result = next((r for r in runs if r.status in _USABLE), runs[-1]) if result is None else result
    return result


# ---------------------------------------------------------------- the node problem of a draft tree

_WEIGHTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # divergence -> {(n_pos, n_zero, scaling): program}


def _weighted_program(div, n_pos: int, n_zero: int, scaling: str):
    """max Σ w π s.t. Σ π = 1, D_f(π‖p) ≤ ε, with p, w and ε as cvxpy parameters (DPP: compiled once
    per divergence, support size and scaling, then solved again with new values). Ratios u = π/p
    on {p > 0} (``"ratio"``: u the variable; ``"mass"``: π the variable), masses z on the zeros of p
    that may take mass (f∞ charged per unit)."""
    import cvxpy as cp

    cache = _WEIGHTED.setdefault(div, {})
    key = (n_pos, n_zero, scaling)
    if key in cache:
        return cache[key]
    p = cp.Parameter(n_pos, nonneg=True)
    eps = cp.Parameter(nonneg=True)
    gain = cp.Parameter(n_pos)  # w·p (ratio scaling) or w (mass scaling) on the support
    v = cp.Variable(n_pos, nonneg=True)
    constraints = []
    if scaling == "ratio":
        u, mass_pos = v, p @ v
    else:
        inv_p = cp.Parameter(n_pos, nonneg=True)
        u, mass_pos = cp.Variable(n_pos, nonneg=True), cp.sum(v)
        constraints.append(u == cp.multiply(inv_p, v))
    z = cp.Variable(n_zero, nonneg=True) if n_zero else None
    w_zero = cp.Parameter(n_zero) if n_zero else None
    outside = cp.sum(z) if z is not None else 0
    if div.compiled is None:  # in f's unit k: the budget parameter holds ε/k (_weighted_run)
        k = _scale(div)
        cost = cp.sum(cp.multiply(p, _sympy_cost(div, u, k))) + (div.f_inf / float(k) * outside if z is not None else 0)
    else:
        cost = div.builtin.cvxpy(cp, u, p, outside)
    objective = gain @ v + (w_zero @ z if z is not None else 0)
    constraints += [mass_pos + outside == 1, cost <= eps]
    problem = cp.Problem(cp.Maximize(objective), constraints)
    params = {"p": p, "eps": eps, "gain": gain, "w_zero": w_zero, "inv_p": inv_p if scaling == "mass" else None}
    cache[key] = (problem, params, v, z)
    return cache[key]


def oracle_weighted(target, weights, divergence, budget, *, zeros="keep") -> OracleResult:
    r"""Solve :math:`\max \sum_i w_i \pi_i` s.t. :math:`\sum \pi = 1`, :math:`D_f(\pi\|p) \le
    \varepsilon` over the whole vocabulary with cvxpy (a draft tree's node: :math:`w_i = 1 + A(c)` at
    each child's token, 0 elsewhere; docs/serving.md, "Draft trees").

    ``zeros="keep"``: :math:`\pi_i = 0` where :math:`p_i = 0`; ``"continue"``: mass there costs
    :math:`f_\infty` per unit (excluded where :math:`f_\infty = \infty`). Nothing of the level form
    (one ratio per child and one for the rest) is assumed: each token has its own variable. As
    :func:`oracle_solve`: both scalings at tight tolerances, the usable run (solved, its point
    feasible to 1e-9 from the definition of :math:`D_f`) of highest objective, and Clarabel's
    defaults and SCS when neither is usable; ``acceptance`` is :math:`\sum_i w_i \pi_i` at the point.
    """
    p, w = (np.asarray(x, dtype=np.float64) for x in (target, weights))
    div, budget = _divergence(divergence), float(budget)
    skipped = _skipped(p, p)
    if skipped is not None:
        return skipped
    pos = p > 0
    zero = ~pos if zeros == "continue" and np.isfinite(div.f_inf) else np.zeros_like(pos)
    result = None
    for group in _ATTEMPTS:
        runs = [_weighted_run(div, p, w, budget, pos, zero, *attempt) for attempt in group]
        usable = [r for r in runs if r.usable(budget, tol=1e-9)]
        if usable:
            return max(usable, key=lambda r: r.acceptance)
        result = next((r for r in runs if r.status in _USABLE), runs[-1]) if result is None else result
    return result


def _weighted_run(div, p, w, budget, pos, zero, scaling, solver, options) -> OracleResult:
    import cvxpy as cp

    problem, params, v, z = _weighted_program(div, int(pos.sum()), int(zero.sum()), scaling)
    params["p"].value = p[pos]
    params["eps"].value = budget if div.compiled is not None else budget / float(_scale(div))
    params["gain"].value = w[pos] * p[pos] if scaling == "ratio" else w[pos]
    if params["w_zero"] is not None:
        params["w_zero"].value = w[zero]
    if params["inv_p"] is not None:
        params["inv_p"].value = 1.0 / p[pos]
    label = f"{solver}/{scaling}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=solver, **options)
    except (cp.error.SolverError, ValueError) as exc:
        return OracleResult(np.full_like(p, np.nan), np.nan, np.nan, f"solver_error: {exc}", label, np.nan, np.inf, np.inf)
    if v.value is None:
        return OracleResult(np.full_like(p, np.nan), np.nan, np.nan, str(problem.status), label, np.nan, np.inf, np.inf)
    pi = np.zeros_like(p)
    vals = np.asarray(v.value).ravel()
    pi[pos] = p[pos] * vals if scaling == "ratio" else vals
    if z is not None:
        pi[zero] = np.asarray(z.value).ravel()
    return _measured(div, p, pi, float(w @ np.maximum(pi, 0.0)), problem, label, budget)
