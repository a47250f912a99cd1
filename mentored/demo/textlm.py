r"""Small character-level language models trained on text shipped with Python, for the demo.

The drafter :math:`q` is a bigram model and the target :math:`p` a 6-gram model, both interpolated
Kneser–Ney with absolute discounting, trained on the documentation that CPython ships in
:mod:`pydoc_data.topics` plus the docstrings of a fixed list of standard-library modules. No
download, no new dependency, a few seconds on one core.

Stable API (reused by quality studies; keep it):

- :func:`demo_models` ``(seed=0) -> DemoModels`` with ``drafter``, ``target``, ``tokenizer``,
  ``train``, ``valid``, ``test`` (int64 token-id arrays) and ``*_text`` (the same as strings).
- :class:`NgramLM`: ``.probs(context) -> ndarray (V,)`` (float64, sums to 1, every entry > 0) for a
  sequence of token ids, ``.probs_batch(contexts) -> (N, V)``, and ``.probs_along(ids) -> (len, V)``
  whose row ``i`` is the law of ``ids[i]`` given ``ids[:i]``; ``.order``, ``.V``.
- :class:`CharTokenizer`: ``.encode(str) -> ndarray``, ``.decode(ids) -> str``, ``.vocab``, ``.V``;
  characters seen fewer than 5 times in training map to ``.unk``.

Kneser–Ney (Chen & Goodman 1998, interpolated form): for the highest order, with counts
:math:`c(hw)`, and for lower orders with continuation counts :math:`N_{1+}(\bullet h w)`,

.. math::

    P(w \mid h) = \frac{\max(c(hw) - D, 0)}{c(h\,\bullet)} + \frac{D\, N_{1+}(h\,\bullet)}{c(h\,\bullet)}\, P(w \mid h'),

with :math:`h'` the history without its oldest token, the uniform law at the bottom, and
:math:`D = n_1 / (n_1 + 2 n_2)` per order. An unseen history backs off to :math:`P(\cdot \mid h')`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..integrations.corpus import CharTokenizer, corpus, splits

__all__ = ["CharTokenizer", "NgramLM", "DemoModels", "demo_models", "corpus", "speculative_decode"]

class NgramLM:
    """Interpolated Kneser–Ney n-gram model over token ids ``0..V-1`` (see the module docstring)."""

    def __init__(self, ids: np.ndarray, V: int, order: int):
        if order < 1:
            raise ValueError("order must be at least 1")
        self.order, self.V = order, V
        ids = np.asarray(ids, dtype=np.int64)
        self._bits = int(np.ceil(np.log2(V + 1)))
        if self._bits * order > 62:
            raise ValueError("vocabulary too large for this order")
        # tables[m]: history code (m − 1 tokens) -> (next tokens, counts, discount·types/total, 1/total)
        self._tables: list[dict] = [dict() for _ in range(order + 1)]
        for m in range(1, order + 1):
            grams = self._codes(ids, m)
            if m == order:
                uniq, cnt = np.unique(grams, return_counts=True)
            else:  # continuation counts: distinct left neighbours of each m-gram
                longer = np.unique(self._codes(ids, m + 1))
                uniq, cnt = np.unique(longer & ((1 << (self._bits * m)) - 1), return_counts=True)
            n1, n2 = np.sum(cnt == 1), np.sum(cnt == 2)
            D = float(n1 / (n1 + 2 * n2)) if n1 + 2 * n2 > 0 else 0.5
            hist = uniq >> self._bits
            nxt = (uniq & ((1 << self._bits) - 1)).astype(np.int64)
            starts = np.flatnonzero(np.r_[True, hist[1:] != hist[:-1]])
            ends = np.r_[starts[1:], hist.size]
            table = self._tables[m]
            for a, b in zip(starts.tolist(), ends.tolist()):
                c = cnt[a:b].astype(np.float64)
                total = c.sum()
                table[int(hist[a])] = (nxt[a:b], np.maximum(c - D, 0.0) / total, D * (b - a) / total)

    def _codes(self, ids, m):
        """Codes of all m-grams of ``ids`` (oldest token in the high bits)."""
        n = ids.size - m + 1
        code = np.zeros(max(n, 0), dtype=np.int64)
        for i in range(m):
            code = (code << self._bits) | ids[i : i + n]
        return code

    def probs(self, context) -> np.ndarray:
        """Law of the next token given ``context`` (a sequence of token ids), shape (V,), float64."""
        ctx = [int(t) for t in context[-(self.order - 1) :]] if self.order > 1 else []
        p = np.full(self.V, 1.0 / self.V)
        for m in range(1, self.order + 1):
            if m - 1 > len(ctx):
                break
            code = 0
            for t in ctx[len(ctx) - (m - 1) :]:
                code = (code << self._bits) | t
            entry = self._tables[m].get(code)
            if entry is None:
                continue  # unseen history: keep the lower-order law
            nxt, mass, backoff = entry
            p = backoff * p
            p[nxt] += mass
        return p

    def probs_batch(self, contexts) -> np.ndarray:
        """:meth:`probs` for each context, shape (N, V)."""
        return np.stack([self.probs(c) for c in contexts]) if len(contexts) else np.zeros((0, self.V))

    def probs_along(self, ids) -> np.ndarray:
        """Row ``i``: the law of ``ids[i]`` given ``ids[:i]``, shape (len(ids), V)."""
        ids = np.asarray(ids, dtype=np.int64)
        return np.stack([self.probs(ids[max(0, i - self.order + 1) : i]) for i in range(ids.size)])

    def __repr__(self) -> str:
        return f"NgramLM(order={self.order}, V={self.V})"


@dataclass(frozen=True)
class DemoModels:
    """The demo's drafter q, target p, tokenizer and splits (token ids and text)."""

    drafter: NgramLM
    target: NgramLM
    tokenizer: CharTokenizer
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    train_text: str
    valid_text: str
    test_text: str


@functools.lru_cache(maxsize=4)
def demo_models(seed: int = 0, *, drafter_order: int = 2, target_order: int = 6) -> DemoModels:
    """Train the demo's models; documents are shuffled with ``seed`` and split 80/10/10.

    The result is cached (and shared): treat it as read-only.
    """
    s = splits(seed)
    return DemoModels(NgramLM(s.train, s.tokenizer.V, drafter_order), NgramLM(s.train, s.tokenizer.V, target_order), **s._asdict())


def speculative_decode(drafter, target, prompts, *, new_tokens=64, k=4, divergence="kl", budget=0.0, seed=0, progress=None):
    """Generate ``new_tokens`` after each prompt with mentored speculative decoding, sequences batched.

    ``drafter`` and ``target`` are any models with ``.probs(context) -> (V,)``. Each step drafts
    ``k`` tokens per sequence from the drafter, scores the ``k + 1`` positions with the target, and
    calls :func:`mentored.speculative_step`; ``budget=0`` is lossless speculative sampling.
    ``progress`` (optional) is called with the number of tokens generated in the step.
    """
    from ..verify.decoding import DecodeStats, Tally
    from ..verify.speculative import speculative_step

    rng = np.random.default_rng(seed)
    ctx = [list(map(int, pr)) for pr in prompts]
    start = [len(c) for c in ctx]
    V = target.V
    tally = Tally(k)

    def sample(w):
        return min(int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right")), V - 1)

    active = list(range(len(ctx)))
    while active:
        B = len(active)
        P = np.empty((B, k + 1, V))
        Q = np.empty((B, k, V))
        drafts = np.empty((B, k), dtype=np.int64)
        bonus = np.empty((B, 1), dtype=np.int64)
        for r, b in enumerate(active):
            seq = ctx[b]
            for j in range(k):
                Q[r, j] = drafter.probs(seq + drafts[r, :j].tolist())
                drafts[r, j] = sample(Q[r, j])
            for j in range(k + 1):
                P[r, j] = target.probs(seq + drafts[r, :j].tolist())
            bonus[r, 0] = sample(P[r, k])
        out = speculative_step(P, bonus, Q, drafts, divergence=divergence, budget=budget, uniforms=rng.random((B, k, 2)))
        made = 0
        for r, b in enumerate(active):
            row = out[r][out[r] >= 0]
            tally.step(row.size - 1, row.size)  # accepted drafts, then one residual or bonus token
            ctx[b].extend(row.tolist())
            made += row.size
        if progress is not None:
            progress(made)
        active = [b for b in active if len(ctx[b]) - start[b] < new_tokens]
    tokens = [np.array(c[s : s + new_tokens], dtype=np.int64) for c, s in zip(ctx, start)]
    return DecodeStats(**tally.fields(tokens))
