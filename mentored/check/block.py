r"""Block verification of a mentored chain, and the chain that block verification serves best.

Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025,
arXiv:2403.10444) checks ``k`` drafts :math:`X^k` drawn from the drafter chain :math:`q(\cdot|x^j)`
jointly against a verifier chain :math:`\pi(\cdot|x^j)`; its emitted sequence follows the chain
:math:`\pi`. With :math:`w_0 = 1`, :math:`w_i = \min(w_{i-1}\,\pi(X_i|X^{i-1})/q(X_i|X^{i-1}), 1)`, the
expected number of accepted drafts is

.. math::

    E[\tau] = \sum_{i=1}^{k} \sum_{x^i} A_i(x^i), \qquad A_0 = 1, \quad
    A_i(x^i) = \min\bigl(q(x^i),\ A_{i-1}(x^{i-1})\,\pi(x_i|x^{i-1})\bigr)

(:math:`q(x^i)` the drafter's path probability; :math:`A_i = q(x^i)\,w_i(x^i)`). Token-by-token
verification accepts :math:`\sum_i \sum_{x^i} \prod_{l \le i} \min(q, \pi)(x_l|x^{l-1})`.

A **tree** of conditionals for ``k`` drafts over ``V`` tokens is a list ``P`` of ``k`` arrays,
``P[j]`` of shape ``(V,) * (j + 1)``, with ``P[j][x_1, …, x_j, y]`` :math:`= p(y|x^j)`; the target
``P``, the drafter ``Q`` and a verifier chain ``PI`` share this layout. The position after the last
draft (the bonus) is drawn from the target itself and plays no part in :math:`E[\tau]`.

- :func:`block_length`, :func:`token_length`: the two expected lengths, exactly.
- :func:`composed_chain`: the mentored verifier :math:`\mathrm{MD}(f, \varepsilon)` of
  :math:`(p(\cdot|x^j), q(\cdot|x^j))` at every prefix (:func:`mentored.solve`, passed in: this layer
  does not import the solver it checks).
- :func:`block_optimum`: the chain of largest block :math:`E[\tau]` under
  :math:`D_f(\pi(\cdot|x^j)\|p(\cdot|x^j)) \le \varepsilon` at every prefix, a convex program in the
  accepted masses and the joint masses :math:`\mu(x^j, y) = a_j(x^j)\,\pi(y|x^j)` (docs/block.md).
- :func:`weighted_greedy_chain`: a local rule, the verifier at each prefix that maximises the next
  position's block acceptance :math:`\sum_y \min(q_y, w_j \pi_y)` given the running weight :math:`w_j`.
- :func:`shared_root_optimum`: the best total over several trees forced to share one root verifier.
- :func:`random_tree`, :func:`iid_tree`: instances.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..divergences import BUILTIN_NAMES
from ..divergences import divergence as _divergence

__all__ = [
    "check_tree", "random_tree", "iid_tree", "path_probabilities", "block_length", "token_length",
    "composed_chain", "block_optimum", "BlockOptimum", "weighted_greedy_chain", "chain_divergences",
    "shared_root_optimum",
]

_SUM_TOL = 1e-9


# ---------------------------------------------------------------- trees


def check_tree(tree, name="tree", *, k=None, V=None):
    """The tree as a list of float64 arrays, after checking its layout: ``tree[j]`` of shape
    ``(V,) * (j + 1)``, finite, nonnegative, each conditional summing to 1 within 1e-9.
    Returns ``(arrays, k, V)``; ``k``, ``V`` given are required to match."""
    if isinstance(tree, np.ndarray) or not hasattr(tree, "__len__"):
        raise TypeError(f"{name} must be a list of k arrays ({name}[j] of shape (V,)*(j+1)), got {type(tree).__name__}")
    arrays = [np.asarray(t, dtype=np.float64) for t in tree]
    if not arrays:
        raise ValueError(f"{name} is empty: a tree for k ≥ 1 drafts has k conditional arrays")
    if k is not None and len(arrays) != k:
        raise ValueError(f"{name} has {len(arrays)} levels, expected k = {k}")
    V = arrays[0].shape[-1] if V is None and arrays[0].ndim >= 1 else V
    if V is None or V < 1:
        raise ValueError(f"{name}[0] must be a vector over the V tokens, got shape {arrays[0].shape}")
    for j, a in enumerate(arrays):
        if a.shape != (V,) * (j + 1):
            raise ValueError(f"{name}[{j}] has shape {a.shape}, expected {(V,) * (j + 1)} (prefixes of length {j}, then the token)")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}[{j}] has non-finite entries")
        if (a < 0).any():
            raise ValueError(f"{name}[{j}] has negative entries (min {a.min():.3g})")
        sums = a.sum(axis=-1)
        bad = np.abs(sums - 1.0) > _SUM_TOL
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}[{j}] at prefix {idx} sums to {sums[idx]!r}, not 1: every conditional must be a distribution")
    return arrays, len(arrays), V


def _pair(P, Q):
    P, k, V = check_tree(P, "P")
    Q, _, _ = check_tree(Q, "Q", k=k, V=V)
    return P, Q, k, V


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def random_tree(V, k, seed, kind="llm"):
    """A seeded random pair of trees ``(P, Q)`` for ``k`` drafts over ``V`` tokens.

    ``kind="llm"``: at every prefix the target is a softmax of Gaussian logits of a random scale in
    [1, 3] (peaked, as a language model's next-token law), and the drafter a softmax of the same logits
    shrunk by a factor in [0.6, 1] plus Gaussian noise of scale in [0.3, 1] (a weaker model that
    mostly agrees). ``kind="uniform"``: target and drafter independent, uniform on the simplex
    (Dirichlet(1)). ``kind="iid"``: one uniform pair (p, q) used at every prefix."""
    if int(V) != V or V < 2 or int(k) != k or k < 1:
        raise ValueError(f"random_tree needs integers V ≥ 2 and k ≥ 1, got V={V!r}, k={k!r}")
    V, k = int(V), int(k)
    rng = np.random.default_rng(seed)
    if kind == "iid":
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        return iid_tree(p, q, k)
    P, Q = [], []
    for j in range(k):
        shape = (V,) * j
        if kind == "llm":
            scale = rng.uniform(1.0, 3.0, size=shape + (1,))
            z = rng.standard_normal(shape + (V,)) * scale
            shrink = rng.uniform(0.6, 1.0, size=shape + (1,))
            noise = rng.uniform(0.3, 1.0, size=shape + (1,))
            P.append(_softmax(z))
            Q.append(_softmax(shrink * z + noise * rng.standard_normal(shape + (V,))))
        elif kind == "uniform":
            P.append(rng.dirichlet(np.ones(V), size=shape) if j else rng.dirichlet(np.ones(V)))
            Q.append(rng.dirichlet(np.ones(V), size=shape) if j else rng.dirichlet(np.ones(V)))
        else:
            raise ValueError(f"unknown kind {kind!r}: use 'llm', 'uniform' or 'iid'")
    return P, Q


def iid_tree(p, q, k):
    """The trees of a chain that draws every position from the same target ``p`` and drafter ``q``."""
    p, q = (np.asarray(x, dtype=np.float64) for x in (p, q))
    if p.ndim != 1 or p.shape != q.shape:
        raise ValueError(f"iid_tree needs two vectors of one length, got shapes {p.shape} and {q.shape}")
    V = p.size
    P = [np.broadcast_to(p, (V,) * (j + 1)).copy() for j in range(k)]
    Q = [np.broadcast_to(q, (V,) * (j + 1)).copy() for j in range(k)]
    check_tree(P, "p"), check_tree(Q, "q")
    return P, Q


def path_probabilities(Q):
    """``[q(x^0) = 1, q(x^1), …, q(x^k)]``, entry ``i`` of shape ``(V,) * i``."""
    Q, k, _ = check_tree(Q, "Q")
    out = [np.ones(())]
    for j in range(k):
        out.append(out[-1][..., None] * Q[j])
    return out


# ---------------------------------------------------------------- expected lengths


def block_length(Q, PI):
    r"""Expected number of drafts block verification accepts: :math:`\sum_{i \ge 1}\sum_{x^i} A_i(x^i)`,
    :math:`A_i = \min(q(x^i), A_{i-1}\,\pi(x_i|x^{i-1}))` (the module's docstring)."""
    Q, k, V = check_tree(Q, "Q")
    PI, _, _ = check_tree(PI, "PI", k=k, V=V)
    qpath = path_probabilities(Q)
    A, total = np.ones(()), 0.0
    for i in range(1, k + 1):
        A = np.minimum(qpath[i], A[..., None] * PI[i - 1])
        total += float(A.sum())
    return total


def token_length(Q, PI):
    r"""Expected number of drafts token-by-token verification accepts:
    :math:`\sum_i \sum_{x^i} \prod_{l \le i} \min(q, \pi)(x_l|x^{l-1})`."""
    Q, k, V = check_tree(Q, "Q")
    PI, _, _ = check_tree(PI, "PI", k=k, V=V)
    T, total = np.ones(()), 0.0
    for i in range(1, k + 1):
        T = T[..., None] * np.minimum(Q[i - 1], PI[i - 1])
        total += float(T.sum())
    return total


def chain_divergences(P, PI, divergence):
    """``D_f(π(·|x^j)‖p(·|x^j))`` at every prefix, one array per level (the package's evaluation)."""
    P, k, V = check_tree(P, "P")
    PI, _, _ = check_tree(PI, "PI", k=k, V=V)
    div = _divergence(divergence)
    return [np.asarray(div(PI[j], P[j])) for j in range(k)]


# ---------------------------------------------------------------- the composed chain


def _budget(budget):
    b = float(budget)
    if not b >= 0.0:
        raise ValueError(f"budget must be ≥ 0, got {budget!r}")
    return b


def composed_chain(P, Q, divergence, budget, solve):
    r"""The mentored verifier at every prefix: :math:`\pi(\cdot|x^j) = \arg\max \sum_y \min(\pi_y, q_y)`
    s.t. :math:`D_f(\pi\|p(\cdot|x^j)) \le \varepsilon`, one batch per level.

    ``solve`` is :func:`mentored.solve` (passed in: the check layer does not import the solver it checks)."""
    if not callable(solve):
        raise TypeError(f"solve must be the package's solver (mentored.solve), got {type(solve).__name__}")
    P, Q, k, V = _pair(P, Q)
    budget = _budget(budget)
    out = []
    for j in range(k):
        sol = solve(P[j].reshape(-1, V), Q[j].reshape(-1, V), divergence=divergence, budget=budget)
        out.append(np.asarray(sol.pi, dtype=np.float64).reshape(P[j].shape))
    return out


# ---------------------------------------------------------------- convex pieces


def _perspective_terms(cp, name, mu, B):
    r"""Elementwise :math:`B\,f(\mu/B)` (the perspective of the built-in ``name``, jointly convex in
    :math:`(\mu, B)`, with its limits :math:`f_\infty \mu` at :math:`B = 0` and :math:`B f(0)` at
    :math:`\mu = 0`), as ``(expression, constraints)``; ``mu``, ``B`` are (N, V) expressions.
    :math:`\chi^2` and Neyman :math:`\chi^2` bound :math:`x^2/y` by a second-order cone, Hellinger bounds
    :math:`\sqrt{\mu B}` from below by one."""

    def over(num, den):  # t ≥ num²/den, den ≥ 0: ‖(2 num, t − den)‖ ≤ t + den
        t = cp.Variable(mu.shape, nonneg=True)
        cone = cp.SOC(cp.vec(t + den, order="C"), cp.vstack([cp.vec(2 * num, order="C"), cp.vec(t - den, order="C")]), axis=0)
        return t, [cone]

    if name == "tv":
        return 0.5 * cp.abs(mu - B), []
    if name == "kl":
        return cp.rel_entr(mu, B), []
    if name == "reverse_kl":
        return cp.rel_entr(B, mu), []
    if name == "chi2":
        return over(mu - B, B)
    if name == "neyman_chi2":
        return over(mu - B, mu)
    if name == "hellinger":  # (√μ − √B)² = μ + B − 2√(μB)
        s = cp.Variable(mu.shape, nonneg=True)
        cone = cp.SOC(cp.vec(mu + B, order="C"), cp.vstack([cp.vec(2 * s, order="C"), cp.vec(mu - B, order="C")]), axis=0)
        return mu + B - 2 * s, [cone]
    if name == "js":  # ½[μ log(2μ/(μ+B)) + B log(2B/(μ+B))]
        m = 0.5 * (mu + B)
        return 0.5 * (cp.rel_entr(mu, m) + cp.rel_entr(B, m)), []
    raise ValueError(f"no convex program for divergence {name!r}: block_optimum supports the built-ins {', '.join(BUILTIN_NAMES)}")


def _builtin_name(divergence):
    div = _divergence(divergence)
    if div.compiled is None or div.name not in BUILTIN_NAMES:
        raise ValueError(
            f"block_optimum supports the built-in divergences {', '.join(BUILTIN_NAMES)}, not {div.name!r}"
        )
    return div


_PROGRAMS: dict = {}  # compiled programs, by divergence and shape (DPP: re-solved with new data)


def _block_program(name, V, k, scaling="mass"):
    r"""The block program for ``k`` drafts over ``V`` tokens, with the data as cvxpy parameters (DPP:
    compiled once per divergence, shape and scaling). Per prefix :math:`x^j` the variables are scaled
    by the drafter's path probability, :math:`\hat a_j = a_j/q(x^j) \in [0, 1]` and
    :math:`\hat\mu(x^j, y) = \mu(x^j, y)/q(x^j)`, so that every constraint is of order 1:

    - :math:`\hat a_0 = 1`, :math:`\sum_y \hat\mu(x^j, y) = \hat a_j(x^j)`, :math:`\hat\mu \ge 0`;
    - :math:`q(y|x^j)\,\hat a_{j+1}(x^j y) \le \hat\mu(x^j, y)` (accepted mass is at most the joint mass);
    - :math:`\sum_y B f(\hat\mu/B) \le \varepsilon\,\hat a_j`, :math:`B = \hat a_j\,p(y|x^j)`;
    - :math:`\hat\mu = 0` where :math:`p(y|x^j) = 0` and :math:`f_\infty = \infty`.

    The objective is :math:`\sum_{i \ge 1}\sum_{x^i} q(x^i)\,\hat a_i(x^i)`. ``scaling="mass"`` makes
    :math:`\hat\mu` the variable; ``"ratio"`` makes :math:`u = \hat\mu/p` the variable (of order 1
    where :math:`p(y|x^j)` is tiny, as the oracle's ratio scaling), :math:`\hat\mu = p\,u`, the budget
    :math:`\sum_y p\,\hat a f(u/\hat a)`; it cannot put mass on zeros of the target."""
    key = (name, V, k, scaling)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _build_block_program(name, V, k, scaling)
    return _PROGRAMS[key]


def _build_block_program(name, V, k, scaling="mass"):
    """A fresh copy of :func:`_block_program`'s program (not cached)."""
    import cvxpy as cp

    f_inf_infinite = not np.isfinite(_divergence(name).f_inf)
    eps = cp.Parameter(nonneg=True)
    a = [cp.Variable(V ** j) for j in range(k + 1)]
    p = [cp.Parameter((V ** j, V), nonneg=True) for j in range(k)]
    q = [cp.Parameter((V ** j, V), nonneg=True) for j in range(k)]
    zero = [cp.Parameter((V ** j, V), nonneg=True) for j in range(k)] if f_inf_infinite and scaling == "mass" else None
    weight = [cp.Parameter(V ** i, nonneg=True) for i in range(1, k + 1)]
    cons = [a[0] == 1]
    for i in range(1, k + 1):
        cons += [a[i] >= 0, a[i] <= 1]
    ones = np.ones((1, V))
    mu = []
    for j in range(k):
        n = V ** j
        col = cp.reshape(a[j], (n, 1), order="C") @ ones  # â_j(x^j) on every token of the row
        if scaling == "mass":
            m = cp.Variable((n, V), nonneg=True)
            terms, extra = _perspective_terms(cp, name, m, cp.multiply(p[j], col))
        elif scaling == "ratio":
            u = cp.Variable((n, V), nonneg=True)
            m = cp.multiply(p[j], u)
            inner, extra = _perspective_terms(cp, name, u, col)
            terms = cp.multiply(p[j], inner)
        else:
            raise ValueError(f"scaling must be 'mass' or 'ratio', got {scaling!r}")
        mu.append(m)
        cons += extra
        cons += [cp.sum(m, axis=1) == a[j], cp.sum(terms, axis=1) <= eps * a[j]]
        cons += [cp.multiply(q[j], cp.reshape(a[j + 1], (n, V), order="C")) <= m]
        if zero is not None:
            cons += [cp.multiply(zero[j], m) == 0]
    objective = cp.Maximize(sum(weight[i - 1] @ a[i] for i in range(1, k + 1)))
    return cp.Problem(objective, cons), dict(eps=eps, a=a, mu=mu, p=p, q=q, zero=zero, weight=weight)


# Every solve passes warm_start=False: cvxpy's default reuses a cached Clarabel solver with its earlier
# settings, and the answers then depended on which instances were solved before (seen: "optimal" on a
# fresh program, a failure after ten other solves of the same program).
_TIGHT = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10, "max_iter": 500}
_ATTEMPTS = (
    ("CLARABEL", _TIGHT),
    ("CLARABEL", {}),
    ("SCS", {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 50000, "time_limit_secs": 10.0}),
)
# block_optimum: both scalings at tight tolerance first, the looser runs only if neither is consistent
_GROUPS = (
    (("ratio", "CLARABEL", _TIGHT), ("mass", "CLARABEL", _TIGHT)),
    (("ratio", "CLARABEL", {}), ("mass", "CLARABEL", {}), ("mass", "SCS", _ATTEMPTS[2][1])),
)
_USABLE = ("optimal", "optimal_inaccurate")


@dataclass(frozen=True)
class BlockOptimum:
    """The chain of largest block E[τ] within budget at every prefix, as :func:`block_optimum` found it.

    ``chain``: the verifier tree (the layout of P); ``value``: its block E[τ] from :func:`block_length`;
    ``objective``: the program's optimal value as the solver reports it (equal to ``value`` up to the
    solver's tolerance: docs/block.md); ``status``, ``solver``: the solver's report; ``budget_excess``:
    the largest ``D_f − ε`` over prefixes of the chain read from the solver's point, before repair;
    ``repaired``: how many prefixes were mixed toward the target to restore the budget exactly."""

    chain: list
    value: float
    objective: float
    status: str
    solver: str
    budget_excess: float
    repaired: int


def _repair(div, pi, p, budget):
    """Rows of ``pi`` clipped at 0, renormalised, and mixed toward ``p`` where D_f exceeds the budget:
    D_f is convex and 0 at p, so (1 − θ)π + θp with θ = 1 − ε/D has D ≤ ε (tightened by a
    bisection where convexity's bound is not met to rounding). Returns (rows, excess before, count)."""
    pi = np.maximum(pi, 0.0)
    pi = pi / pi.sum(axis=-1, keepdims=True)
    d = np.asarray(div(pi, p))
    excess = float(np.max(d - budget)) if d.size else 0.0
    bad = np.flatnonzero(d > budget)
    for r in bad:
        lo, hi = 0.0, 1.0  # mixing weight on p: hi feasible
        theta = 1.0 - budget / d[r] if np.isfinite(d[r]) else 1.0
        if float(div((1 - theta) * pi[r] + theta * p[r], p[r])) <= budget:
            hi = theta
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if float(div((1 - mid) * pi[r] + mid * p[r], p[r])) <= budget:
                hi = mid
            else:
                lo = mid
        pi[r] = (1 - hi) * pi[r] + hi * p[r]
    return pi, excess, int(bad.size)


def block_optimum(P, Q, divergence, budget, *, baseline=None) -> BlockOptimum:
    r"""Maximise block verification's :math:`E[\tau]` over verifier chains with
    :math:`D_f(\pi(\cdot|x^j)\|p(\cdot|x^j)) \le \varepsilon` at every prefix :math:`x^j`, ``j < k``.

    The convex program (docs/block.md) in the accepted masses :math:`a_i(x^i)` and the joint masses
    :math:`\mu(x^j, y) = a_j(x^j)\pi(y|x^j)`, with the budget in perspective form, is solved with
    cvxpy (Clarabel at tight tolerances, then at its defaults, then SCS). Its status is checked (a
    RuntimeError if no run is solved); the chain :math:`\pi = \mu/a` (the target where
    :math:`a_j \le 10^{-12}`: such a prefix carries no accepted mass) is measured with the package's own
    :math:`D_f`, and any prefix over budget by rounding is mixed toward the target until within it, so the
    returned chain is feasible to rounding. ``value`` is its exact block :math:`E[\tau]`. Two scalings
    of the program (ratios to the target, then masses) are tried at tight tolerances, then looser ones,
    and the first run solved to optimality whose chain's ``value`` reaches its reported optimum (to 1e-6)
    and the ``baseline`` chain's length (a feasible chain, e.g. the composed one; default the target
    chain) is returned; failing that, the longest usable chain of all runs (its ``status`` then says how far to
    trust ``objective``; the mass scaling alone failed on a V = 6, k = 3 LLM-like tree under kl). Every returned chain is feasible, so ``value``
    is a lower bound on the optimum whatever the solver did. Built-in
    divergences only; zeros of the target follow :math:`f_\infty` (excluded where it is infinite, charged
    per unit otherwise), as :func:`mentored.solve` does."""
    div = _builtin_name(divergence)
    P, Q, k, V = _pair(P, Q)
    budget = _budget(budget)
    if not np.isfinite(budget):
        raise ValueError("block_optimum needs a finite budget (with ε = ∞ the drafter's own chain is optimal)")
    if budget == 0.0:
        # D_f(π‖p) = 0 forces π = p for every built-in (f̃ > 0 off t = 1, docs/theory.md §1): the target
        # chain is the only feasible one. The conic program has no strictly feasible point there and
        # its solvers come back "optimal_inaccurate", up to 3e-3 off.
        chain = [p.copy() for p in P]
        value = block_length(Q, chain)
        return BlockOptimum(chain, value, value, "budget 0: the target chain is the only feasible one", "none", 0.0, 0)
    import cvxpy as cp

    if baseline is None:
        floor = block_length(Q, P)  # the target chain: feasible at every budget
    else:
        baseline, _, _ = check_tree(baseline, "baseline", k=k, V=V)
        over = max(float(np.max(d)) for d in chain_divergences(P, baseline, div))
        if over > budget * (1 + 1e-9) + 1e-12:
            raise ValueError(f"baseline is not within budget: D_f = {over!r} > {budget!r} at some prefix")
        floor = block_length(Q, baseline)
    ratio_ok = np.isinf(div.f_inf) or all((p > 0).all() for p in P)  # ratio scaling puts no mass on p = 0
    runs, statuses = [], []
    for group in _GROUPS:
        for scaling, solver, options in group:
            if scaling == "ratio" and not ratio_ok:
                continue
            problem, par = _block_program(div.name, V, k, scaling)
            _set_data(par, P, Q, V, k, budget)
            label = f"{solver}/{scaling}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "solution may be inaccurate" is reported as the status
                    problem.solve(solver=solver, warm_start=False, **options)
            except (cp.error.SolverError, ValueError) as exc:
                statuses.append(f"{label}: error {exc}")
                continue
            statuses.append(f"{label}: {problem.status}")
            if problem.status not in _USABLE or par["a"][0].value is None:
                continue
            chain, worst, repaired = _chain_from(par, div, P, V, k, budget)
            run = BlockOptimum(chain, block_length(Q, chain), float(problem.value), str(problem.status), label, worst, repaired)
            runs.append(run)
            # consistent: solved to optimality, its chain's exact length its reported optimum, and no shorter
            # than the baseline, a feasible point (Clarabel has reported "optimal" 2e-5 below the composed chain)
            if run.status == "optimal" and run.value >= max(run.objective - 1e-6, floor - 1e-9):
                return run
    if not runs:
        raise RuntimeError(f"block_optimum: no solver run succeeded ({'; '.join(statuses)})")
    return max(runs, key=lambda r: r.value)


def _chain_from(par, div, P, V, k, budget):
    """The verifier chain π = μ/a of the program's point: the target where a_j ≤ 1e-12 (no accepted
    mass reaches the prefix), the solver's residual mass on zeros of the target dropped where f∞ = ∞
    (the program fixes it to 0), then :func:`_repair`. Returns (chain, largest excess, repaired rows)."""
    chain, worst, repaired = [], -np.inf, 0
    for j in range(k):
        a = np.asarray(par["a"][j].value, dtype=np.float64).reshape(-1)
        mu = np.maximum(np.asarray(par["mu"][j].value, dtype=np.float64), 0.0)
        p = P[j].reshape(-1, V)
        if not np.isfinite(div.f_inf):
            mu[p == 0] = 0.0
        live = (a > 1e-12) & (mu.sum(axis=1) > 0)
        pi = p.copy()
        pi[live] = mu[live] / mu[live].sum(axis=1, keepdims=True)
        pi, excess, count = _repair(div, pi, p, budget)
        worst, repaired = max(worst, excess), repaired + count
        chain.append(pi.reshape(P[j].shape))
    return chain, worst, repaired


def _set_data(par, P, Q, V, k, budget):
    qpath = path_probabilities(Q)
    par["eps"].value = budget
    for j in range(k):
        par["p"][j].value = P[j].reshape(-1, V)
        par["q"][j].value = Q[j].reshape(-1, V)
        if par["zero"] is not None:
            par["zero"][j].value = (P[j].reshape(-1, V) == 0).astype(np.float64)
    for i in range(1, k + 1):
        par["weight"][i - 1].value = qpath[i].reshape(-1)


def _solve(problem, probe, who):
    """Solve with each of :data:`_ATTEMPTS` in turn until one reports "optimal"; failing that, the first
    usable one ("optimal_inaccurate"), solved again so that the variables hold its point. A
    RuntimeError naming every status if none is usable. Returns (solver, status, value)."""
    import cvxpy as cp

    def run(solver, options):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "solution may be inaccurate" is reported as the status
            problem.solve(solver=solver, warm_start=False, **options)

    first, statuses = None, []
    for n, (solver, options) in enumerate(_ATTEMPTS):
        try:
            run(solver, options)
        except (cp.error.SolverError, ValueError) as exc:
            statuses.append(f"{solver}: error {exc}")
            continue
        statuses.append(f"{solver}: {problem.status}")
        if problem.status in _USABLE and probe.value is not None:
            if problem.status == "optimal":
                return solver, "optimal", float(problem.value)
            first = n if first is None else first
    if first is None:
        raise RuntimeError(f"{who}: no solver run succeeded ({'; '.join(statuses)})")
    run(*_ATTEMPTS[first])
    return _ATTEMPTS[first][0], str(problem.status), float(problem.value)


def shared_root_optimum(pairs, divergence, budget):
    r"""The largest total block :math:`E[\tau]` over several trees that share their root conditionals
    (the same :math:`p(\cdot|x^0)`, :math:`q(\cdot|x^0)`) when their verifier chains must share the root
    verifier too: :math:`\max \sum_m E_m[\tau]` with :math:`\pi_m(\cdot|x^0)` equal for all m. If it is below
    the sum of the separate optima, no rule that chooses the root verifier from the root's own
    conditionals is optimal for all of them (docs/block.md). Returns (value, per-tree values of the
    shared chains, the shared root verifier)."""
    import cvxpy as cp

    div = _builtin_name(divergence)
    budget = _budget(budget)
    trees = [_pair(P, Q) for P, Q in pairs]
    if len(trees) < 2:
        raise ValueError("shared_root_optimum needs at least two trees")
    P0, Q0, _, V0 = trees[0]
    for P, Q, _, V in trees[1:]:
        if V != V0 or not (np.array_equal(P[0], P0[0]) and np.array_equal(Q[0], Q0[0])):
            raise ValueError("shared_root_optimum: the trees must have the same root target and drafter")
    objective, cons, pars = 0, [], []
    for P, Q, k, V in trees:
        problem, par = _build_block_program(div.name, V, k)
        _set_data(par, P, Q, V, k, budget)
        objective = objective + problem.objective.args[0]
        cons += problem.constraints
        pars.append(par)
    cons += [pars[0]["mu"][0] == par["mu"][0] for par in pars[1:]]
    joint = cp.Problem(cp.Maximize(objective), cons)
    _solve(joint, pars[0]["a"][0], "shared_root_optimum")
    values, root = [], None
    for (P, Q, k, V), par in zip(trees, pars):
        chain = _chain_from(par, div, P, V, k, budget)[0]
        if root is None:
            root = chain[0]
        chain[0] = root  # one root verifier for every tree (equal to rounding in the program)
        values.append(block_length(Q, chain))
    return float(sum(values)), values, root


# ---------------------------------------------------------------- a local rule


def _weighted_program(name, n, V):
    r"""Rows independent: :math:`\max \sum_r \sum_y \min(q_{ry}, c_r \pi_{ry})` s.t. each row of
    :math:`\pi` a distribution with :math:`D_f(\pi_r\|p_r) \le \varepsilon` (DPP, per divergence and shape)."""
    import cvxpy as cp

    key = ("weighted", name, n, V)
    if key in _PROGRAMS:
        return _PROGRAMS[key]
    pi = cp.Variable((n, V), nonneg=True)
    p = cp.Parameter((n, V), nonneg=True)
    q = cp.Parameter((n, V), nonneg=True)
    c = cp.Parameter((n, V), nonneg=True)
    eps = cp.Parameter(nonneg=True)
    terms, cons = _perspective_terms(cp, name, pi, p)
    cons = cons + [cp.sum(pi, axis=1) == 1, cp.sum(terms, axis=1) <= eps]
    if not np.isfinite(_divergence(name).f_inf):
        zero = cp.Parameter((n, V), nonneg=True)
        cons.append(cp.multiply(zero, pi) == 0)
    else:
        zero = None
    problem = cp.Problem(cp.Maximize(cp.sum(cp.minimum(q, cp.multiply(c, pi)))), cons)
    _PROGRAMS[key] = (problem, dict(pi=pi, p=p, q=q, c=c, eps=eps, zero=zero))
    return _PROGRAMS[key]


def weighted_greedy_chain(P, Q, divergence, budget, base, *, levels="all"):
    r"""A local rule: at prefix :math:`x^j`, with the running weight
    :math:`w_j(x^j) = A_j(x^j)/q(x^j)` of block verification under the chain chosen above it, the
    verifier maximising :math:`\sum_y \min(q(y|x^j), w_j\,\pi_y)` (the next position's accepted mass)
    s.t. :math:`D_f(\pi\|p(\cdot|x^j)) \le \varepsilon`. At :math:`w_j = 1` this is the mentored verifier;
    at the last level it is the optimal conditional given the chain above (docs/block.md). It reads only
    the prefix's own conditionals and the weight the verifier computes anyway.

    ``base`` is the chain used where the rule does not apply: rows with :math:`w_j = 1` (where the rule is
    the mentored verifier) and, with ``levels="last"``, every level above the last; pass the composed
    chain. ``levels="last"`` is then never shorter than the composed chain, as the last level's choice is
    optimal given the same chain above. ``levels="all"`` applies the rule at every level, which is myopic
    and can be shorter. The rows with :math:`w_j < 1` are solved by a cvxpy program (built-in divergences),
    checked and repaired like :func:`block_optimum`'s chain."""
    if levels not in ("all", "last"):
        raise ValueError(f"levels must be 'all' or 'last', got {levels!r}")
    div = _builtin_name(divergence)
    P, Q, k, V = _pair(P, Q)
    base, _, _ = check_tree(base, "base", k=k, V=V)
    budget = _budget(budget)
    qpath = path_probabilities(Q)
    A = np.ones(())
    chain = []
    for j in range(k):
        p, q = P[j].reshape(-1, V), Q[j].reshape(-1, V)
        qj = qpath[j].reshape(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(qj > 0, A.reshape(-1) / np.where(qj > 0, qj, 1.0), 1.0)
        w = np.clip(w, 0.0, 1.0)
        pi = base[j].reshape(-1, V).copy()
        scaled = np.flatnonzero(w < 1.0 - 1e-12) if levels == "all" or j == k - 1 else np.zeros(0, dtype=np.int64)
        if scaled.size and budget > 0:
            problem, par = _weighted_program(div.name, scaled.size, V)
            par["p"].value, par["q"].value = p[scaled], q[scaled]
            par["c"].value = np.repeat(w[scaled, None], V, axis=1)
            par["eps"].value = budget
            if par["zero"] is not None:
                par["zero"].value = (p[scaled] == 0).astype(np.float64)
            _solve(problem, par["pi"], f"weighted_greedy_chain (level {j})")
            rows = np.maximum(np.asarray(par["pi"].value, dtype=np.float64), 0.0)
            if not np.isfinite(div.f_inf):
                rows[p[scaled] == 0] = 0.0
            rows, _, _ = _repair(div, rows, p[scaled], budget)
            pi[scaled] = rows
        chain.append(pi.reshape(P[j].shape))
        A = np.minimum(qpath[j + 1], A[..., None] * chain[-1])
    return chain
