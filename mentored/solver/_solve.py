r"""The Python face of the solver: :func:`solve` for batches, :class:`MentoredPath` for one row."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _core
from ..check.duality import certify_at
from ..backends import get_backend
from ..divergences.program import callable_forms, program
from ..check.inputs import as_pair, per_row
from ..divergences import Divergence, divergence as _divergence

__all__ = ["Solution", "solve", "MentoredPath"]


@dataclass(frozen=True)
class Solution:
    r"""An optimal output distribution and everything known about it.

    For 1-D input the per-row fields are floats; for (B, n) input they are (B,) arrays.

    Attributes
    ----------
    pi : ndarray or torch.Tensor
        :math:`\pi`, same shape and dtype as ``target``; a tensor on the target's device when the
        inputs are torch tensors (the other fields stay floats or numpy arrays).
    acceptance : float or ndarray
        :math:`A(\pi) = \sum_i \min(\pi_i, q_i) = 1 - \mathrm{TV}(p, q) + s`, summed (compensated)
        over :math:`\pi` rather than taken from the difference, which cancels when it is small; for
        a float32 :math:`\pi`, over the float64 :math:`\pi` it rounds (docs/reliability.md).
    divergence : float or ndarray
        :math:`D_f(\pi\|p)`; solved by ``price``, the budget the price amounts to (the divergence spent).
    s : float or ndarray
        :math:`\mathrm{TV}(\pi, p)`, the position on the curve.
    t_lo, t_hi : float or ndarray
        Thresholds of :math:`\pi_i = p_i\,\mathrm{clip}(q_i/p_i, t_{lo}, t_{hi})`; ``t_hi = inf`` once
        the curve continues onto tokens with :math:`p_i = 0`, and where :math:`t_{hi}` passes DBL_MAX
        (a denormal :math:`p_i` with :math:`q_i/p_i` beyond it, clipped all the same).
    lam, mu : float or ndarray
        Dual parameters :math:`\lambda = 1/(f'(t_{hi}) - f'(t_{lo}))`, :math:`\mu = -\lambda f'(t_{lo})`
        (docs/theory.md §4); ``lam = 0`` where the budget is not binding, ``lam = inf`` (``mu`` NaN) at
        budget 0 for a divergence differentiable at 1, where the dual optimum is not attained.
    name : str
        The divergence used.
    """

    pi: np.ndarray
    acceptance: float | np.ndarray
    divergence: float | np.ndarray
    s: float | np.ndarray
    t_lo: float | np.ndarray
    t_hi: float | np.ndarray
    lam: float | np.ndarray
    mu: float | np.ndarray
    name: str


def _dual(div: Divergence, t_lo, t_hi, binding):
    """λ, μ of docs/theory.md §4 from the thresholds, with one-sided derivatives at a kink at 1.

    A built-in's come from the core (its f' lives with f̃ there); a user divergence's from its ``fprime``:
    λ = 1/(f'(t_hi) − f'(t_lo)), and λ = ∞ (the certificate then searches) where that difference is
    within 1e-8 of f's own unit f̃(2) + f̃(1/2), a threshold that scales with f, so that k·f has the
    dual point (λ/k, μ) of f at ε/k for any k > 0.
    """
    t_lo, t_hi, binding = map(np.atleast_1d, (t_lo, t_hi, binding))
    if div.compiled is not None:
        return _core.dual(div.compiled, *(np.ascontiguousarray(x, dtype=np.float64) for x in (t_lo, t_hi)),
                          np.ascontiguousarray(binding, dtype=bool))
    up = np.where(t_hi == 1.0, np.nextafter(1.0, 2.0), t_hi)
    down = np.where(t_lo == 1.0, np.nextafter(1.0, 0.0), t_lo)
    d_hi, d_lo = div.fprime(up), div.fprime(down)
    gap = d_hi - d_lo
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(gap > 1e-8 * div.unit, 1.0 / gap, np.inf)
        mu = np.where(np.isfinite(lam), -lam * d_lo, np.nan)
    lam = np.where(binding, lam, 0.0)
    mu = np.where(binding, mu, 0.0)
    return lam, mu


def finish(div, pi, res, binding, squeeze):
    s, t_lo, t_hi, acc, dval = (res[:, j] for j in range(5))
    if div.compiled is not None and res.shape[1] >= 8:
        lam, mu = res[:, 6], res[:, 7]  # the core's, per row
    else:
        lam, mu = _dual(div, t_lo, t_hi, binding)
    fields = dict(acceptance=acc, divergence=dval, s=s, t_lo=t_lo, t_hi=t_hi, lam=lam, mu=mu)
    if squeeze:
        fields = {k: float(v[0]) for k, v in fields.items()}
        pi = pi[0]
    return Solution(pi=pi, name=div.name, **fields)


def solve(
    target,
    draft,
    *,
    divergence="kl",
    budget=None,
    acceptance=None,
    price=None,
    threads=None,
    normalize=False,
    check=False,
    out=None,
) -> Solution:
    r"""Optimal verification distributions for speculative decoding, row by row.

    .. math::

        \max_{\pi \in \Delta_n} \sum_i \min(\pi_i, q_i)
        \quad \text{s.t.} \quad D_f(\pi \| p) \le \varepsilon

    with ``target`` :math:`p` and ``draft`` :math:`q`. Given ``acceptance`` :math:`a` instead of
    a ``budget`` :math:`\varepsilon`, returns the :math:`\pi` of least :math:`D_f(\pi\|p)` with
    :math:`A(\pi) = a` (or :math:`\pi = p` when :math:`a \le 1 - \mathrm{TV}(p, q)`). Given a
    ``price`` :math:`\lambda`, returns the :math:`\pi` maximising
    :math:`\sum_i \min(\pi_i, q_i) - \lambda D_f(\pi\|p)`: the budget optimum at the divergence it
    spends (``Solution.divergence``), the point of the curve where the acceptance bought per unit of
    divergence falls to :math:`\lambda` (``Solution.lam`` is then :math:`\lambda`; docs/theory.md §4,
    "Budgets by price").

    Parameters
    ----------
    target, draft : array_like, shape (n,) or (B, n)
        Distributions over the vocabulary (float32 or float64; exact zeros are fine). numpy arrays
        or torch tensors: CPU tensors are read in place by the compiled core, tensors on another
        device are solved there by :mod:`mentored.backends.torch`; ``Solution.pi`` is then a tensor
        of the target's dtype on its device.
    divergence : str or Divergence
        One of ``tv, kl, reverse_kl, chi2, neyman_chi2, hellinger, js``, or any :class:`Divergence`
        (e.g. from :meth:`Divergence.from_sympy`; such rows are solved one after the other).
    budget : float or array_like (B,), optional
        :math:`\varepsilon \ge 0` (``inf`` allowed).
    acceptance : float or array_like (B,), optional
        Target acceptance in [0, 1].
    price : float or array_like (B,), optional
        :math:`\lambda \ge 0`, the acceptance one unit of divergence must buy to be spent: ``inf`` gives
        :math:`\pi = p` (budget 0), ``0`` the most acceptance at the least divergence (budget ``inf``).
        Exactly one of ``budget``, ``acceptance`` and ``price`` is given. Host arrays only (numpy or
        CPU tensors).
    threads : int, optional
        OpenMP threads over rows, for the input checks and the solve (default: all cores, or the
        calling thread alone for a batch of at most 65,536 entries, where waking a team costs more
        than the work). Results do not depend on it.
    normalize : bool
        Renormalise rows instead of refusing rows that do not sum to 1.
    check : bool
        Certify every row (:func:`mentored.certify`, duality gap and feasibility) and, for rows of
        at most 2000 tokens with a budget, compare with the convex-program oracle; raise
        ``RuntimeError`` when a certificate fails. Oracle disagreements within the oracle's own
        tolerance, or where an exact certificate proves optimality, are
        :class:`~mentored.check.oracle.OracleDisagreementWarning`\ s.
    out : numpy.ndarray, optional
        Where to write :math:`\pi`: a writeable C-contiguous array of the target's shape and dtype
        (both inputs of that dtype). A decoding loop that passes the same buffer every step saves
        an allocation per call; ``Solution.pi`` is then a view of ``out``. When the call raises (a
        row refused by the checks), ``out`` may hold the rows solved before it did.

    Returns
    -------
    Solution

    Examples
    --------
    >>> import mentored
    >>> sol = mentored.solve([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], divergence="tv", budget=0.1)
    >>> round(sol.acceptance, 12)  # 1 − TV(p, q) + ε
    0.8
    """
    backend = get_backend(target, draft)
    solved = backend.solve(
        target, draft, divergence=divergence, budget=budget, acceptance=acceptance, threads=threads, normalize=normalize, check=check,
        out=out, price=price,
    )
    div, res, binding = solved.divergence, solved.res, solved.binding
    if solved.check is not None:  # on the host: a certificate per row, the oracle on small rows
        p2, q2, values, by_budget = solved.check
        pi = np.asarray(backend.to_host(solved.pi)).reshape(len(res), -1)
        check_solution(finish(div, pi, res, binding, False), p2, q2, div, values, by_budget)
    return finish(div, solved.pi, res, binding, solved.squeeze)


_ORACLE_MAX_N = 2000


def check_solution(sol, p2, q2, div, budgets, budget_mode):
    """solve(check=True): a certificate per row at the solver's own (λ, μ), and the oracle on small rows.

    A row whose certificate fails raises RuntimeError. The oracle (rows of at most 2000 tokens, finite
    budget) is a second opinion with its own tolerance: its point is feasible only to its solver's
    accuracy, and at its own divergence D_f(π_o‖p) ≥ ε the optimum is higher. Where it accepts more
    than π by at most what that extra budget buys (or where a certificate proves π optimal), the
    disagreement is an :class:`~mentored.check.oracle.OracleDisagreementWarning`; RuntimeError only where
    it exceeds that and no exact certificate proves π optimal. At ε = 0 with f̃ > 0 off t = 1, π = p is
    the only feasible point (docs/theory.md §1), so the oracle is not consulted. Rows the oracle
    cannot represent (subnormal entries) are skipped with an :class:`~mentored.check.oracle.OracleSkippedWarning`.
    """
    import warnings

    from ..check.oracle import OracleDisagreementWarning, OracleSkippedWarning, oracle_skip_reason, oracle_solve

    pi2 = np.atleast_2d(sol.pi).astype(np.float64)
    dvals = np.atleast_1d(sol.divergence)
    lams, mus = np.atleast_1d(sol.lam), np.atleast_1d(sol.mu)
    # float32 rows carry float32 rounding in π itself (Σπ − 1 ~ 1e-7).
    loose = p2.dtype == np.float32
    tols = dict(tol=1e-5 if loose else 1e-7, feas_tol=1e-5 if loose else 1e-9)
    for r in range(p2.shape[0]):
        p, q = p2[r].astype(np.float64), q2[r].astype(np.float64)
        p, q = p / p.sum(), q / q.sum()
        budget = float(budgets[r])
        lam, mu = float(lams[r]), float(mus[r])
        if np.isinf(budget) and np.isfinite(dvals[r]):
            # ε = ∞ with D_f(π‖p) < ∞ (f∞ = ∞ keeps π off p's zeros): certified at its own divergence,
            # where the solver's convention (D_f = ∞ is refused) and the dual's agree; the solver's
            # λ = 0 belongs to ε = ∞, so the dual point is searched for. With D_f = ∞ (f(0) = ∞,
            # f∞ < ∞: the limit of the optima as ε → ∞), π is certified at ε = ∞ itself.
            budget, lam, mu = float(dvals[r]), math.inf, math.nan
        cert = certify_at(p, q, pi2[r], div, budget, lam=lam, mu=mu, **tols)
        if not cert.ok and cert.gap > cert.tol and math.isfinite(lam):  # the solver's point leaves a gap: search
            cert = certify_at(p, q, pi2[r], div, budget, lam=math.inf, mu=math.nan, **tols)
        lossless = budget == 0.0 and _lossless_is_unique(div)
        if lossless and np.max(np.abs(pi2[r] - p)) <= tols["feas_tol"]:
            continue  # π = p, the only point with D_f = 0: optimal, whatever the dual search reaches
        if not cert.ok:
            raise RuntimeError(f"row {r}: the certificate rejects the solution: {cert}")
        if not (budget_mode and p.size <= _ORACLE_MAX_N and np.isfinite(budget)):
            continue
        skip = oracle_skip_reason(p, q) or _oracle_form_missing(div)
        if skip is not None:
            warnings.warn(f"row {r}: the oracle was not run: {skip}", OracleSkippedWarning, stacklevel=3)
            continue
        o = oracle_solve(p, q, div, budget)
        excess = o.acceptance - cert.acceptance
        if not (o.usable(budget) and excess > 1e-6):
            continue
        # What the oracle's own infeasibility buys: the optimum at its point's divergence, plus its mass error.
        slack = max(0.0, solve(p, q, divergence=div, budget=max(budget, o.divergence)).acceptance - cert.acceptance)
        slack += o.simplex_residual
        if excess <= slack + 1e-6:
            why = (
                f"within the oracle's own tolerance: its point has D_f = {o.divergence:.6g} (budget {budget:.6g}) "
                f"and mass error {o.simplex_residual:.3g}, which buy up to {slack:.3g} of acceptance"
            )
        else:
            exact = _exact_proof(p, q, pi2[r], div, budget, lam, mu)
            if exact is None:
                raise RuntimeError(
                    f"row {r}: the oracle finds acceptance {o.acceptance} > {cert.acceptance} from the solver, "
                    f"by {excess:.3g}, beyond what its infeasibility buys ({slack:.3g}), and no exact certificate "
                    "proves the solver's point optimal"
                )
            why = f"beyond the oracle's tolerance ({slack:.3g}), but an exact certificate proves the solver's point optimal: {exact}"
        warnings.warn(
            f"row {r}: the oracle's point accepts {o.acceptance!r} > {cert.acceptance!r} from the solver ({o.solver}, "
            f"{o.status}), {why}",
            OracleDisagreementWarning,
            stacklevel=3,
        )


def _lossless_is_unique(div) -> bool:
    """f̃ > 0 off t = 1, so D_f(π‖p) = 0 only at π = p: f''(1) > 0, or a kink at 1."""
    if div.compiled is not None:
        return True  # every built-in is strictly convex at 1 or has its kink there (tv)
    info = div.symbolic
    if info is None:
        return False
    if np.isfinite(info.f2_at_1) and info.f2_at_1 > 0:
        return True
    # A kink at 1, or a higher-order minimum ((t − 1)⁴): f̃ > 0 on both sides; convex f̃ ≥ 0 then stays
    # positive beyond. A flat stretch around 1 (|t − 2| + t − 2) gives exact zeros.
    return bool(np.all(div.f_tilde(np.array([1.0 - 1e-6, 1.0 + 1e-6])) > 0))


def _oracle_form_missing(div) -> str | None:
    """Why the oracle cannot state this divergence as a convex program, or None."""
    if div.compiled is not None:
        return None
    from ..check.oracle import convex_form_error

    return convex_form_error(div)


def _exact_proof(p, q, pi, div, budget, lam, mu):
    """A rigorous certificate of π (certify(exact=True)) if one goes through, else None."""
    try:
        cert = certify_at(p, q, pi, div, budget, lam=lam, mu=mu, exact=True)
    except (NotImplementedError, ValueError):
        return None
    return cert if cert.ok else None


class MentoredPath:
    r"""The sorted-ratio structure of one row: every optimum of every :math:`\mathrm{MD}(f, \varepsilon)`.

    Built once in :math:`O(n \log n)`; then the thresholds :math:`t_{lo}(s), t_{hi}(s)` cost
    :math:`O(\log n)`, :math:`\pi(s)` costs :math:`O(n)`, and a solve for a given divergence and
    budget costs :math:`O(\log n)` after an :math:`O(n)` table per divergence (cached).

    Examples
    --------
    >>> path = MentoredPath([0.5, 0.3, 0.2], [0.2, 0.3, 0.5])
    >>> t_lo, t_hi = path.thresholds(0.1)
    >>> round(t_lo, 12), round(t_hi, 12)
    (0.8, 1.5)
    """

    def __init__(self, target, draft, *, normalize=False):
        p, q = as_pair(target, draft, normalize)
        if p.ndim != 1:
            raise ValueError(f"MentoredPath takes one row, shape (n,), got {p.shape}")
        self._n = p.shape[0]
        self._tables = {}  # Divergence -> (table, scalar f̃) for user generators
        self._core = _core.Path(np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64))

    @property
    def tv(self) -> float:
        r""":math:`\mathrm{TV}(p, q)`: lossless speculative sampling accepts :math:`1 - \mathrm{TV}`."""
        return self._core.tv

    @property
    def q0(self) -> float:
        r""":math:`Q_0 = \sum_{p_i = 0} q_i`, drafter mass on tokens the target excludes."""
        return self._core.q0

    def s_max(self, divergence="kl") -> float:
        r"""The end of the curve at finite :math:`D_f`: :math:`\mathrm{TV}(p,q)`, or :math:`\mathrm{TV} - Q_0` if :math:`f_\infty = \infty`."""
        return self._core.s_max_for(_divergence(divergence).f_inf)

    def _table(self, div):
        """(table, f̃) of a user generator: its program (no Python in the loop), or the callables."""
        if div not in self._tables:
            compiled = program(div)
            if compiled is not None:
                self._tables[div] = (self._core.table_custom(compiled), compiled)
            else:
                vec, scalar, f_inf = callable_forms(div)
                self._tables[div] = (self._core.table_custom(vec, f_inf), scalar)
        return self._tables[div]

    def _frontier(self, div, budgets, price=False):
        """(k, 5): s, t_lo, t_hi, D and the acceptance Σ min(π, q) per budget (per price λ with ``price``)."""
        if div.compiled is not None:
            return self._core.frontier(div.compiled, budgets, True, price)
        table, f_tilde = self._table(div)
        return self._core.frontier_custom(table, f_tilde, budgets, True, price)

    def thresholds(self, s: float) -> tuple[float, float]:
        r""":math:`(t_{lo}(s), t_{hi}(s))` with :math:`\mathrm{Down}(t_{lo}) = \mathrm{Up}(t_{hi}) = s`."""
        _, t_lo, t_hi = self._core.at(_s_arg(s, self._core.s_end))
        return t_lo, t_hi

    def pi(self, s: float) -> np.ndarray:
        r""":math:`\pi(s)`, float64, in the original token order."""
        return self._core.pi(_s_arg(s, self._core.s_end))[0]

    def acceptance(self, s: float) -> float:
        r""":math:`A(\pi(s)) = \sum_i \min(\pi_i(s), q_i) = 1 - \mathrm{TV}(p, q) + s`, summed from nonnegative parts (accurate however small)."""
        return self._core.acceptance_at(_s_arg(s, self._core.s_end))

    def divergence_at(self, s: float, divergence="kl") -> float:
        r""":math:`D_f(\pi(s)\|p)` in :math:`O(\log n)` (``inf`` past :meth:`s_max`)."""
        s = _s_arg(s, self._core.s_end)
        div = _divergence(divergence)
        s_max = self.s_max(div)
        if s > s_max * (1 + 1e-12) + 1e-15:  # past the end, not by rounding of TV
            return float("inf")
        if div.compiled is not None:
            return self._core.divergence_at(div.compiled, min(s, s_max))
        table, f_tilde = self._table(div)
        return self._core.divergence_custom(table, f_tilde, min(s, s_max))

    def solve(self, divergence="kl", budget=None, *, price=None) -> Solution:
        r"""The optimum of MD(f, budget) on this row (budget 0 when neither is given), or with ``price``
        :math:`\lambda` the maximiser of :math:`A(\pi) - \lambda D_f(\pi\|p)`, as :func:`solve` would
        return them: :math:`O(\log n)` after the table."""
        div = _divergence(divergence)
        if budget is not None and price is not None:
            raise ValueError("give at most one of budget= and price=")
        by_price = price is not None
        (value,) = per_row(price, 1, "price") if by_price else per_row(0.0 if budget is None else budget, 1, "budget")
        s, t_lo, t_hi, dval, _ = self._frontier(div, np.array([value]), by_price)[0]
        pi, acc = self._core.pi(s)
        res = np.array([[s, t_lo, t_hi, acc, dval]])
        return finish(div, pi[None, :], res, np.array([s < self.s_max(div)]), True)

    def frontier(self, budgets, divergence="kl") -> np.ndarray:
        r"""Optimal acceptance :math:`A^*(\varepsilon)` for each budget, :math:`O(\log n)` each."""
        b = np.asarray(budgets, dtype=np.float64)
        flat = per_row(b.ravel(), b.size, "budget")
        out = self._frontier(_divergence(divergence), flat)
        return out[:, 4].reshape(b.shape)

    def __repr__(self) -> str:
        return f"MentoredPath(n={self._n}, tv={self.tv:.6g}, q0={self.q0:.6g})"


def _s_arg(s, s_end: float) -> float:
    s = float(s)
    if not (0.0 <= s <= s_end * (1 + 1e-12) + 1e-15):
        raise ValueError(f"s must lie in [0, TV(p, q)] = [0, {s_end}], got {s}")
    return min(s, s_end)
