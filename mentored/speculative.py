r"""Speculative sampling with the mentored verifier, in vLLM's rejection-sampler layout.

:func:`speculative_step` verifies ``k`` drafted tokens per sequence: position ``j`` uses the optimal
verifier :math:`\pi_j` of :math:`\mathrm{MD}(f, \varepsilon)` for that position's target
:math:`p_j` and drafter :math:`q_j` (docs/theory.md §2), so every emitted token has law exactly
:math:`\pi_j` and each draft is accepted with probability :math:`\sum_i \min(\pi_{j,i}, q_{j,i})`.
numpy input runs in the C++ core (``cpp/mentored/speculative.hpp``); torch tensors (CPU or CUDA)
run in torch (:mod:`mentored.torch_backend`), on the tensors' device.
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._solve import solve
from ._validate import _check_step_inputs, _check_zeros, _row_error, _step_budgets, _step_uniforms, check_sums, sum_rtol, threads_arg
from .divergences import divergence as _divergence

__all__ = ["speculative_step"]


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def speculative_step(
    target_with_bonus_probs,
    bonus_token_ids,
    draft_probs,
    draft_token_ids,
    *,
    divergence="kl",
    budget=0.0,
    seed=None,
    uniforms=None,
    threads=None,
    zeros="continue",
    normalize=False,
):
    r"""One verification step of mentored speculative decoding for a batch of sequences.

    For each sequence ``b`` and position ``j < k``, with :math:`p = ` ``target_with_bonus_probs[b, j]``,
    :math:`q = ` ``draft_probs[b, j]`` and the drafted token :math:`x = ` ``draft_token_ids[b, j]``
    (drawn from :math:`q`), the verifier is

    .. math::

        \pi = \arg\max_{\pi' \in \Delta_V} \sum_i \min(\pi'_i, q_i)
        \quad \text{s.t.} \quad D_f(\pi' \| p) \le \varepsilon,

    the draft is accepted iff ``uniforms[b, j, 0]`` :math:`\cdot\, q_x < \pi_x` (probability
    :math:`\min(1, \pi_x/q_x)`), and at the first rejection a token is drawn from
    :math:`(\pi - q)_+ / \sum (\pi - q)_+` by inverse CDF at ``uniforms[b, j, 1]`` (the first
    :math:`i` whose running sum of :math:`(\pi - q)_+` exceeds that fraction of the total).
    With ``budget=0``, :math:`\pi = p`: lossless speculative sampling, decision for decision.

    Parameters
    ----------
    target_with_bonus_probs : array (B, k + 1, V)
        Target probabilities at the k draft positions and the bonus position (float32/float64
        numpy arrays, or torch tensors).
    bonus_token_ids : array (B, 1), integer
        A token drawn from ``target_with_bonus_probs[:, k]``, emitted when all k drafts are accepted.
    draft_probs : array (B, k, V)
        Drafter probabilities :math:`q` at each draft position.
    draft_token_ids : array (B, k), integer
        The drafted tokens.
    divergence : str or Divergence
        ``f`` of the budget (built-in names, or any :class:`~mentored.Divergence` for numpy input).
    budget : float or array_like broadcastable to (B, k)
        :math:`\varepsilon \ge 0` per position.
    seed : int, optional
        Seeds the uniforms when ``uniforms`` is not given.
    uniforms : array (B, k, 2) in [0, 1), optional
        Column 0 decides acceptance, column 1 samples the residual. Given the same uniforms, the
        numpy and torch paths make the same decisions.
    threads : int, optional
        OpenMP threads over rows (numpy input).
    zeros : {"continue", "keep"}
        ``"continue"`` (the default here): :math:`\pi` solves :math:`\mathrm{MD}(f, \varepsilon)` as
        stated, and for divergences with :math:`f_\infty < \infty` (``tv``, ``reverse_kl``,
        ``neyman_chi2``, ``hellinger``, ``js``) may put mass on tokens where the target is 0.
        ``"keep"``: the target's zeros are hard constraints (top-k/top-p, bad words, grammars):
        :math:`\pi_i = 0` wherever :math:`p_i = 0`, the optimum under that constraint
        (docs/theory.md §8; :func:`mentored.serving.rejection_sample` defaults to it).
    normalize : bool
        Take rows with any positive sum as :math:`p/\sum p`, :math:`q/\sum q` (solve, accept test and
        residual alike), as :func:`mentored.solve` does; otherwise every row must sum to 1 within
        the tolerance of its dtype (relative 1e-6 in float64, 1e-3 in float32), and is read
        normalised within it. A float32 softmax widened to float64 sums to 1 only to float32's
        rounding (1 ± 1.5e-5 at V = 152,064): pass ``normalize=True`` for such rows.

    Returns
    -------
    ndarray or Tensor (B, k + 1), int64
        Accepted drafts, then the residual token at the first rejection, then ``-1``; the last
        column is the bonus token only when all k drafts were accepted.

    Examples
    --------
    >>> import numpy as np, mentored
    >>> p = np.array([[[0.6, 0.4], [0.5, 0.5]]])      # B = 1, k = 1, V = 2
    >>> q = np.array([[[0.2, 0.8]]])
    >>> mentored.speculative_step(p, np.array([[0]]), q, np.array([[1]]), divergence="tv",
    ...                           budget=0.4, uniforms=np.array([[[0.9, 0.5]]]))
    array([[1, 0]])
    """
    if _is_torch(target_with_bonus_probs):
        from .torch_backend import speculative_step as torch_step

        if normalize:
            target_with_bonus_probs, draft_probs = (_normalized_tensor(x, name) for x, name in (
                (target_with_bonus_probs, "target_with_bonus_probs"), (draft_probs, "draft_probs")))
        return torch_step(
            target_with_bonus_probs,
            bonus_token_ids,
            draft_probs,
            draft_token_ids,
            divergence=divergence,
            budget=budget,
            seed=seed,
            uniforms=uniforms,
            zeros=zeros,
            numpy_step=speculative_step,
        )
    _check_zeros(zeros)
    div = _divergence(divergence)
    code = _core_divergence(div)
    # Rows are checked by the core as it reads them (one pass across the boundary); those of a
    # divergence it cannot evaluate here, before their π is solved row by row in Python.
    p, bonus, q, draft = _check_step_inputs(
        target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, np.asarray, rows=code is None,
        normalize=normalize,
    )
    B, k, V = q.shape
    budgets = _step_budgets(budget, B, k)
    u = _step_uniforms(uniforms, seed, B, k)
    dtypes = p.dtype, q.dtype
    dtype = np.float32 if p.dtype == q.dtype == np.float32 else np.float64
    p = np.ascontiguousarray(p, dtype=dtype)
    q = np.ascontiguousarray(q, dtype=dtype)
    draft = np.ascontiguousarray(draft, dtype=np.int64)
    bonus = np.ascontiguousarray(bonus.reshape(B), dtype=np.int64)
    pi = None
    if code is None and k:  # π in Python (its f is a Python callable), then the same decision call
        pi = solve_pi(p[:, :k, :].reshape(B * k, V), q.reshape(B * k, V), div, budgets.ravel(), threads, zeros, normalize)
        pi = np.ascontiguousarray(pi, dtype=dtype)
    elif code is None:
        pi = np.zeros((0, V), dtype=dtype)
    # One call: each position's π is solved in the core just before its acceptance test, and every
    # row is checked (entries, and sums within the tolerance of its dtype) as it is read.
    out, bad, status, pos, stats = _core.verify(
        p.reshape(B * (k + 1), V), q.reshape(B * k, V), draft.reshape(-1), np.full(B, k, dtype=np.int64), bonus,
        u.reshape(-1), budgets.reshape(-1), [code], None, None, pi, None, zeros == "keep", 1, False, threads_arg(threads), False,
        *(sum_rtol(d, normalize) for d in dtypes),
    )
    if bad >= 0 and normalize and status == _core.StepStatus.bad_value.value and _row_error("", dtypes[0], stats[:3], "", True) is None \
            and _row_error("", dtypes[1], stats[3:], "", True) is None:
        # Finite, nonnegative float64 rows whose sum has no float64 reciprocal (below 2⁻¹⁰²⁴, or
        # past DBL_MAX), which the core refuses: rescaled here, as solve does, and verified again.
        p, q = (check_sums(x.reshape(-1, V), name, True).reshape(x.shape) for x, name in ((p, "target"), (q, "draft")))
        return speculative_step(p, bonus.reshape(B, 1), q, draft, divergence=div, budget=budgets, uniforms=u,
                                threads=threads, zeros=zeros, normalize=True)
    if bad >= 0:
        raise _step_error(status, bad, pos, V, div, lambda b, j: f"(b, j) = ({b}, {j})", stats, dtypes, normalize)
    return out


def _core_divergence(div):
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


def _step_error(status: int, b: int, j: int, V: int, div, where, stats=None, dtypes=None, normalize=False,
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
            err = _row_error(name, dtype, x, f"row {where(b, j)}", normalize)
            if err is not None:
                return err
    msg = (ids or {}).get(member) or _STEP_STATUS.get(member, "core failure (status {status}) at {where}")
    return ValueError(msg.format(V=V, where=where(b, j), div=repr(div.name), status=int(status), b=b))


def solve_pi(p2, q2, div, budgets, threads, zeros, normalize=False) -> np.ndarray:
    """π for rows (R, V) with per-row budgets; ``zeros="keep"`` adds π_i = 0 where p_i = 0.

    With f∞ = ∞ the optimum never puts mass there. With f∞ < ∞, a row whose optimum went past the
    end of the finite curve (``t_hi = inf``, s > TV − Q0) is solved again at that end, the least
    divergence reaching acceptance 1 − Q0: the optimum under the constraint, since D_f is
    nondecreasing along the curve and the finite part is within budget
    (proofs/Serving.v : keep_zeros_optimal). Rounding mass left on {p = 0} is set to 0.
    """
    sol = solve(p2, q2, divergence=div, budget=budgets, threads=threads, normalize=normalize)
    pi = sol.pi
    if zeros == "keep" and np.isfinite(div.f_inf):
        redo = np.flatnonzero(np.isinf(np.atleast_1d(sol.t_hi)))
        if redo.size:
            pr, qr = p2[redo], q2[redo]
            zero = pr == 0
            q0 = np.where(zero, qr, 0).sum(-1, dtype=np.float64) / qr.sum(-1, dtype=np.float64)
            again = solve(pr, qr, divergence=div, acceptance=np.clip(1.0 - q0, 0.0, 1.0), threads=threads, normalize=normalize).pi
            again[zero] = 0
            pi = np.array(pi, copy=True) if not pi.flags.writeable else pi
            pi[redo] = again
    return pi


def _normalized_tensor(x, name: str):
    """Rows of a tensor divided by their float64 sums, in its own dtype; rows summing to 0 refused."""
    from ._validate import _check_tensor_rows

    sums = _check_tensor_rows(x, name, normalize=True).reshape(x.shape[:-1] + (1,))
    return x / sums.to(x.dtype)
