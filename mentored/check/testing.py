"""Instances for tests, benchmarks and fuzzing: every kind of row pair the solver must handle.

``instance(kind, rng)`` returns one float64 (target, draft) pair summing to 1; ``KINDS`` lists the
kinds; ``llm_like`` makes softmax-of-Gaussian-logits rows, ``llm_like_tree`` a draft tree of them;
``budgets_for`` picks budgets from 0 to beyond D_f(q‖p).
"""

from __future__ import annotations

import numpy as np

from ..divergences import divergence as _divergence

__all__ = ["KINDS", "instance", "llm_like", "llm_like_tree", "budgets_for"]

KINDS = (
    "dense",  # Dirichlet rows, no zeros
    "peaked",  # Dirichlet(0.1): most mass on few tokens
    "top_k_target",  # target truncated to its top k (exact zeros)
    "top_p_target",  # target truncated to its nucleus
    "truncated_draft",  # drafter truncated to its top k
    "both_truncated",
    "disjoint",  # supports do not meet
    "equal",  # p = q
    "single",  # n = 1
    "ties",  # many equal ratios q/p
    "extreme",  # ratios down to 1e-12 and up to 1e12
    "one_hot_draft",
)


def _top_k(x, k):
    y = np.zeros_like(x)
    idx = np.argsort(x)[-k:]
    y[idx] = x[idx]
    return y / y.sum()


def _top_p(x, mass):
    order = np.argsort(x)[::-1]
    keep = order[: int(np.searchsorted(np.cumsum(x[order]), mass)) + 1]
    y = np.zeros_like(x)
    y[keep] = x[keep]
    return y / y.sum()


def instance(kind: str, rng: np.random.Generator, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One (target, draft) pair of the given kind, float64, rows summing to 1."""
    n = int(rng.integers(2, 40)) if n is None else n
    dense = lambda a=0.7: rng.dirichlet(np.full(n, a))  # noqa: E731
    if kind == "dense":
        return dense(), dense()
    if kind == "peaked":
        return dense(0.1), dense(0.1)
    if kind == "top_k_target":
        return _top_k(dense(), max(1, n // 3)), dense()
    if kind == "top_p_target":
        return _top_p(dense(0.3), 0.8), dense()
    if kind == "truncated_draft":
        return dense(), _top_k(dense(), max(1, n // 4))
    if kind == "both_truncated":
        return _top_k(dense(0.3), max(1, n // 2)), _top_p(dense(0.3), 0.7)
    if kind == "disjoint":
        n = max(n, 2)
        cut = int(rng.integers(1, n))
        p, q = np.zeros(n), np.zeros(n)
        p[:cut] = rng.dirichlet(np.ones(cut))
        q[cut:] = rng.dirichlet(np.ones(n - cut))
        return p, q
    if kind == "equal":
        p = dense()
        return p, p.copy()
    if kind == "single":
        return np.ones(1), np.ones(1)
    if kind == "ties":
        p = dense()
        factors = rng.choice([0.5, 1.0, 2.0], size=n)
        q = p * factors
        return p, q / q.sum()
    if kind == "extreme":
        p = dense()
        q = p * np.exp(rng.uniform(np.log(1e-12), np.log(1e12), size=n))
        q = q / q.sum()
        return p, q
    if kind == "one_hot_draft":
        q = np.zeros(n)
        q[int(rng.integers(n))] = 1.0
        return dense(), q
    raise ValueError(kind)


def llm_like(rng: np.random.Generator, n: int, scale: float = 3.0, shift: float = 1.0):
    """Softmax of Gaussian logits: a target and a drafter whose logits are a noisy copy."""
    logits = rng.normal(0.0, scale, size=n)
    draft_logits = logits + rng.normal(0.0, shift, size=n)
    p = np.exp(logits - logits.max())
    q = np.exp(draft_logits - draft_logits.max())
    return p / p.sum(), q / q.sum()


def llm_like_tree(rng: np.random.Generator, parents, n: int, scale=(3.0, 7.0), shift: float = 0.7):
    """A draft tree on LLM-like rows, in :func:`mentored.serving.tree_sample`'s layout (one request):
    node ``v`` gets a target row ``P[v]`` and a drafter row ``Q[v]`` from :func:`llm_like` with a
    logit scale drawn uniformly from ``scale`` (peaked and flat rows mixed), and the children of
    ``v``, in node order, carry the drafter's top tokens at ``v`` (the first child its first
    choice), as a drafter expanding its top tokens builds a tree. Returns ``(tokens, P, Q)``:
    (N,) ints, the root's token 0; (N, n) and (N, n) float64.

    >>> rng = np.random.default_rng(0)
    >>> tokens, P, Q = llm_like_tree(rng, [-1, 0, 0, 1], 50)
    >>> tokens[1:3].tolist() == np.argsort(-Q[0])[:2].tolist() and int(tokens[3]) == int(np.argmax(Q[1]))
    True
    """
    parents = np.asarray(parents, dtype=np.int64)
    rows = [llm_like(rng, n, float(rng.uniform(*scale)), shift) for _ in parents]
    P, Q = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    tokens = np.zeros(parents.size, dtype=np.int64)
    for v in range(parents.size):
        children = np.flatnonzero(parents == v)
        tokens[children] = np.argsort(-Q[v], kind="stable")[: children.size]
    return tokens, P, Q


def budgets_for(div: str, p, q) -> list[float]:
    """0, tiny, middle, just below D_f(q‖p), and above it."""
    full = float(_divergence(div)(q, p))
    out = [0.0, 1e-7, 0.05]
    if np.isfinite(full) and full > 0:
        out += [0.5 * full, 0.999 * full, 2.0 * full]
    else:
        out += [1.0, 50.0]
    return out
