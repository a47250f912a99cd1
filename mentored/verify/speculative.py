r"""Speculative sampling with the mentored verifier, in vLLM's rejection-sampler layout.

:func:`speculative_step` verifies ``k`` drafted tokens per sequence: position ``j`` uses the optimal
verifier :math:`\pi_j` of :math:`\mathrm{MD}(f, \varepsilon)` for that position's target
:math:`p_j` and drafter :math:`q_j` (docs/theory.md §2), so every emitted token has law exactly
:math:`\pi_j` and each draft is accepted with probability :math:`\sum_i \min(\pi_{j,i}, q_{j,i})`.
numpy arrays and CPU tensors run in the C++ core (``cpp/mentored/speculative.hpp``, one call), tensors
on another device in torch (:mod:`mentored.backends.torch`), there (:mod:`mentored.backends`).
"""

from __future__ import annotations

import numpy as np

from ..backends import get_backend
from ..check.inputs import block_method

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
    method="token",
    return_logprobs=False,
    price=None,
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
    price : float, array_like (B,), or 2-D broadcastable to (B, k), optional
        Instead of a budget, what a unit of divergence is worth, :math:`\lambda \ge 0` (``inf``
        allowed: lossless), for all sequences, one per sequence (NaN: that sequence uses its budget)
        or one per position (a sequence's all NaN, or none): each
        position's :math:`\pi` maximises :math:`\sum_i \min(\pi_i, q_i) - \lambda D_f(\pi\|p)`
        (docs/theory.md §4, "Budgets by price"; :func:`mentored.solve` with ``price=``). A sequence
        with both a budget other than 0 and a price is refused. Host memory only (numpy, CPU tensors).
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
        (docs/theory.md §8; :func:`mentored.verify.serving.rejection_sample` defaults to it).
    normalize : bool
        Take rows with any positive sum as :math:`p/\sum p`, :math:`q/\sum q` (solve, accept test and
        residual alike), as :func:`mentored.solve` does; otherwise every row must sum to 1 within
        the tolerance of its dtype (relative 1e-6 in float64, 1e-3 in float32), and is read
        normalised within it. A float32 softmax widened to float64 sums to 1 only to float32's
        rounding (1 ± 1.5e-5 at V = 152,064): pass ``normalize=True`` for such rows.
    method : {"token", "block"}
        ``"block"``: the k drafts of each sequence verified jointly (block verification run on the
        chain of verifiers π; :func:`mentored.verify.serving.rejection_sample`, docs/theory.md §10).
    return_logprobs : bool
        Return a :class:`mentored.verify.serving.Emitted` ``(tokens, logprobs)`` with ``target_logprobs``
        and ``spent`` beside them (docs/theory.md §11): :math:`\log \pi`, :math:`\log p` and
        :math:`D_f(\pi\|p)` of each emitted token; the bonus, drawn from the target at position k,
        has :math:`\log p` there and costs nothing. Host memory only (numpy, CPU tensors).

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
    backend = get_backend(target_with_bonus_probs, draft_probs, draft_token_ids, bonus_token_ids)
    block = block_method(method)
    if not return_logprobs:
        kw = {} if price is None else {"price": price}  # the device backend takes no price, and says so
        return backend.step(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, divergence=divergence, budget=budget,
                            seed=seed, uniforms=uniforms, threads=threads, zeros=zeros, normalize=normalize, block=block, **kw)
    from ..backends.host import HOST, step_arrays
    from .serving import Emitted

    if backend.name != HOST.name and getattr(backend, "views", None) is None:
        raise ValueError("return_logprobs needs host memory (numpy arrays or CPU tensors): the device algorithm does not report the "
                         "law of what it emits")
    p, bonus, q, draft = (backend.to_host(x, name) for x, name in ((target_with_bonus_probs, "target_with_bonus_probs"),
                                                                   (bonus_token_ids, "bonus_token_ids"), (draft_probs, "draft_probs"),
                                                                   (draft_token_ids, "draft_token_ids")))
    if uniforms is not None:
        uniforms = backend.to_host(uniforms, "uniforms")
    out, *notes = step_arrays(p, bonus, q, draft, divergence=divergence, budget=budget, seed=seed, uniforms=uniforms, threads=threads,
                              zeros=zeros, normalize=normalize, block=block, notes=True, price=price)
    P = np.asarray(p, dtype=np.float64)[:, -1]
    b = np.asarray(bonus).reshape(-1).astype(np.int64)
    lb = np.log(P[np.arange(b.size), b] / P.sum(-1))  # the bonus's law: the target's at position k
    e = Emitted.of((out, *notes), np.full(out.shape[0], out.shape[1] - 1), lb)
    return Emitted(backend.like(e.tokens), e.logprobs, e.target_logprobs, e.spent)


def _core_divergence(div):
    """What the core evaluates ``div`` with: a built-in's code, a user generator's program, or None
    (a generator from callables alone, or one whose code has no program: π is solved in Python)."""
    return int(div.compiled) if div.compiled is not None else div.program


