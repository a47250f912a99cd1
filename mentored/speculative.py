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
from ._validate import threads_arg
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

        return torch_step(
            target_with_bonus_probs,
            bonus_token_ids,
            draft_probs,
            draft_token_ids,
            divergence=divergence,
            budget=budget,
            seed=seed,
            uniforms=uniforms,
        )
    p, bonus, q, draft = check_step_inputs(
        target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, np.asarray
    )
    B, k, V = q.shape
    budgets = step_budgets(budget, B, k)
    u = step_uniforms(uniforms, seed, B, k)
    dtype = np.float32 if p.dtype == q.dtype == np.float32 else np.float64
    p = p.astype(dtype, copy=False)
    q = np.ascontiguousarray(q, dtype=dtype)
    if k == 0:
        return np.ascontiguousarray(bonus, dtype=np.int64).reshape(B, 1).copy()
    sol = solve(
        p[:, :k, :].reshape(B * k, V), q.reshape(B * k, V), divergence=_divergence(divergence), budget=budgets.ravel(), threads=threads
    )
    pi = np.ascontiguousarray(sol.pi.reshape(B, k, V), dtype=dtype)
    out, status = _core.speculative_step(
        pi,
        q,
        np.ascontiguousarray(draft, dtype=np.int64),
        np.ascontiguousarray(bonus.reshape(B), dtype=np.int64),
        u,
        threads_arg(threads),
    )
    if np.any(status):  # ids were checked above; the core checks again
        raise ValueError(f"draft_token_ids: an id outside [0, {V}) in row {int(np.flatnonzero(status)[0])}")
    return out


def check_step_inputs(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, asarray):
    """Shapes, dtypes and id ranges, the same for numpy and torch (``asarray`` keeps the kind)."""
    p, bonus, q, draft = (asarray(x) for x in (target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids))
    for name, x in (("target_with_bonus_probs", p), ("draft_probs", q)):
        kind = _dtype_kind(x)
        if kind != "f":
            raise TypeError(f"{name} must hold floats (float32 or float64), got dtype {x.dtype}")
        if _itemsize(x) < 4:
            raise TypeError(f"{name} has dtype {x.dtype}; cast it to float32 or float64 (half precision is not supported)")
    for name, x in (("bonus_token_ids", bonus), ("draft_token_ids", draft)):
        if _dtype_kind(x) not in "iu":
            raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if q.ndim != 3:
        raise ValueError(f"draft_probs must have shape (B, k, V), got {tuple(q.shape)}")
    B, k, V = q.shape
    if tuple(p.shape) != (B, k + 1, V):
        raise ValueError(
            f"target_with_bonus_probs must have shape (B, k + 1, V) = ({B}, {k + 1}, {V}) to match draft_probs "
            f"{tuple(q.shape)}, got {tuple(p.shape)}"
        )
    if tuple(draft.shape) != (B, k):
        raise ValueError(f"draft_token_ids must have shape (B, k) = ({B}, {k}), got {tuple(draft.shape)}")
    if tuple(bonus.shape) != (B, 1):
        raise ValueError(f"bonus_token_ids must have shape (B, 1) = ({B}, 1), got {tuple(bonus.shape)}")
    if V == 0 or B == 0:
        raise ValueError(f"empty input: B = {B}, V = {V}")
    for name, x in (("draft_token_ids", draft), ("bonus_token_ids", bonus)):
        if x.numel() if hasattr(x, "numel") else x.size:
            lo, hi = int(x.min()), int(x.max())
            if lo < 0 or hi >= V:
                raise ValueError(f"{name} must lie in [0, V) = [0, {V}), got ids from {lo} to {hi}")
    return p, bonus, q, draft


def _dtype_kind(x) -> str:
    if isinstance(x, np.ndarray):
        return x.dtype.kind
    if x.dtype.is_floating_point:
        return "f"
    if x.dtype.is_complex or str(x.dtype) == "torch.bool":
        return "c"
    return "i"


def _itemsize(x) -> int:
    return x.dtype.itemsize if isinstance(x, np.ndarray) else x.element_size()


def step_budgets(budget, B: int, k: int) -> np.ndarray:
    """The budget broadcast to (B, k), float64, checked."""
    try:
        b = np.asarray(budget, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"budget must be a number or an array of numbers, got {type(budget).__name__}") from None
    try:
        b = np.broadcast_to(b, (B, k))
    except ValueError:
        raise ValueError(f"budget must broadcast to (B, k) = ({B}, {k}), got shape {b.shape}") from None
    if np.any(np.isnan(b)) or np.any(b < 0):
        raise ValueError("budget must be nonnegative (inf allowed), not NaN")
    return np.ascontiguousarray(b)


def step_uniforms(uniforms, seed, B: int, k: int) -> np.ndarray:
    """Uniforms (B, k, 2) in [0, 1), given or drawn from ``seed``."""
    if uniforms is None:
        return np.random.default_rng(seed).random((B, k, 2))
    u = np.ascontiguousarray(np.asarray(uniforms, dtype=np.float64))
    if u.shape != (B, k, 2):
        raise ValueError(f"uniforms must have shape (B, k, 2) = ({B}, {k}, 2), got {u.shape}")
    if not np.all((u >= 0) & (u < 1)):
        raise ValueError("uniforms must lie in [0, 1)")
    return u
