r"""Mentored speculative decoding with Hugging Face causal language models.

:func:`generate` drafts ``k`` tokens with a small ``AutoModelForCausalLM`` (the drafter :math:`q`),
scores them with a large one (the target :math:`p`) in one forward pass, and accepts or resamples
with :func:`mentored.speculative_step`, whose verifier at each position is the optimal
:math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` for that position's :math:`(p, q)`. Any pair of
models sharing a tokenizer (the same vocabulary) works; nothing is downloaded.

KV caches (``use_cache=True``, the default): each model keeps a ``transformers.DynamicCache``
holding keys and values for a prefix of the sequence, and is fed only the tokens its cache lacks.
After a round with ``n`` of ``k`` drafts accepted and the sequence ``ids`` (length ``L`` before the
round) extended by ``x_1 .. x_n`` and one target-sampled token:

* the target was fed ``ids[-1], x_1 .. x_k`` (the whole prompt plus drafts in the first round), so
  its cache held ``L + k`` positions; ``crop`` removes the ``k - n`` rejected drafts, leaving
  ``ids + x_1 .. x_n``. The next round feeds the new last token and the next ``k`` drafts: exactly
  one target forward pass of ``k + 1`` tokens per round;
* the drafter was fed ``x_1 .. x_{k-1}`` (``x_k`` is sampled from the last logits but never fed),
  so its cache held ``L + k - 1`` positions; ``crop`` removes ``k - 1 - min(n, k - 1)`` of them. The
  next round feeds whatever its cache lacks (one token, or ``x_k`` and the bonus when all ``k``
  were accepted).

No rejected token stays in either cache. ``use_cache=False`` recomputes the prefix every pass (the
drafter once per drafted token, the target once per round over prefix and drafts); given the same
seed both paths make the same draws and the same decisions. Counts reported are target forward
passes, the quantity speculation saves.
"""

from __future__ import annotations

import inspect

try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.hf needs torch and transformers: pip install 'mentored[hf]'") from exc

from .speculative import speculative_step
from .textlm import DecodeStats

__all__ = ["generate"]


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.to(torch.float64) / temperature, dim=-1)


class _Cached:
    """A causal LM with its ``DynamicCache``: ``ids`` holds the tokens whose keys and values it caches."""

    def __init__(self, model, name: str):
        from transformers import DynamicCache

        self.model = model
        try:
            self.cache = DynamicCache(config=model.config)  # per-layer kinds (e.g. sliding window) from the config
        except TypeError:  # older transformers: no config argument
            self.cache = DynamicCache()
        if hasattr(self.cache, "activate_past_recording"):
            self.cache.activate_past_recording()  # sliding-window layers keep what a crop must restore
        if not getattr(self.cache, "is_croppable", True):
            raise ValueError(f"the {name} model's KV cache cannot be rolled back after a rejection; pass use_cache=False")
        self.length = 0  # cached positions
        # The forward keyword for the cache: ``cache`` in recent transformers (``past_key_values`` is
        # deprecated there and warns), ``past_key_values`` before.
        params = inspect.signature(model.forward).parameters
        self.keyword = "cache" if "cache" in params else "past_key_values"

    def __call__(self, seq: torch.Tensor) -> torch.Tensor:
        """Logits at the positions of ``seq`` not yet cached (at least one is fed); caches them."""
        if self.length >= seq.shape[1]:
            raise RuntimeError(f"internal error: cache holds {self.length} positions, sequence has {seq.shape[1]}")
        fed = seq[:, self.length :]
        out = self.model(input_ids=fed, use_cache=True, **{self.keyword: self.cache})  # updates self.cache in place
        self.length += fed.shape[1]
        if self.cache.get_seq_length() != self.length:
            raise RuntimeError(f"internal error: cache holds {self.cache.get_seq_length()} positions, expected {self.length}")
        return out.logits

    def keep(self, n: int) -> None:
        """Discard every cached position from ``n`` on (the rejected drafts)."""
        drop = self.length - n
        if drop < 0:
            raise RuntimeError(f"internal error: cannot keep {n} of {self.length} cached positions")
        if drop:  # crop(-0) would be crop(0), which empties the cache in some transformers versions
            self.cache.crop(-drop)  # negative: remove that many (transformers 4.x and 5.x agree)
            self.length = n


@torch.no_grad()
def generate(
    target_model,
    draft_model,
    input_ids,
    *,
    max_new_tokens: int = 32,
    k: int = 4,
    divergence="kl",
    budget: float = 0.0,
    temperature: float = 1.0,
    eos_token_id: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
):
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` with mentored speculative decoding.

    Parameters
    ----------
    target_model, draft_model : transformers ``PreTrainedModel`` (causal LM)
        Called as ``model(input_ids=...)``, returning ``.logits``; same vocabulary size.
    input_ids : LongTensor (L,) or (1, L)
        The prompt (one sequence; loop over prompts for several).
    k : int
        Drafts per target forward pass.
    divergence, budget :
        The verifier's :math:`f` and :math:`\\varepsilon`; ``budget=0`` is lossless speculative sampling.
    temperature : float
        Both models sample from ``softmax(logits / temperature)``.
    eos_token_id : int, optional
        Stop after emitting it.
    seed : int, optional
        Seeds drafting, bonus sampling and the verification uniforms.
    use_cache : bool
        Keep a KV cache per model, cropped after each rejection (see the module docstring); the
        target then runs once per round on the ``k + 1`` new tokens only. ``False`` recomputes the
        prefix every pass; both give the same tokens and statistics for the same seed.

    Returns
    -------
    sequences : LongTensor (1, L + n)
        Prompt and generated tokens.
    stats : :class:`mentored.textlm.DecodeStats`
        ``acceptance``, ``per_position`` (acceptance at each draft position), ``mean_accepted``
        (accepted drafts per target pass) and ``passes_per_token`` (target passes per generated token).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    device = next(target_model.parameters()).device
    ids = torch.as_tensor(input_ids, device=device)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must be one non-empty sequence, shape (L,) or (1, L); got {tuple(ids.shape)}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must hold integer token ids, got {ids.dtype}")
    ids = ids.to(torch.int64)
    V = target_model.config.vocab_size
    if draft_model.config.vocab_size != V:
        raise ValueError(f"the models must share a vocabulary: target has {V} tokens, drafter {draft_model.config.vocab_size}")
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed()) % (2**63))

    start = ids.shape[1]
    steps = drafted = accepted = emitted = verified = 0
    reached = torch.zeros(k, dtype=torch.float64)
    kept = torch.zeros(k, dtype=torch.float64)
    if use_cache:
        target_lm, draft_lm = _Cached(target_model, "target"), _Cached(draft_model, "draft")
    else:
        target_lm = lambda seq: target_model(input_ids=seq, use_cache=False).logits  # noqa: E731
        draft_lm = lambda seq: draft_model(input_ids=seq, use_cache=False).logits  # noqa: E731
    while ids.shape[1] - start < max_new_tokens:
        # Draft k tokens: x_j from the drafter's last logits over ids + x_1 .. x_{j-1}.
        q_rows, drafts = [], []
        seq = ids
        for _ in range(k):
            q = _probs(draft_lm(seq)[:, -1, :V], temperature)
            x = torch.multinomial(q, 1, generator=gen)
            q_rows.append(q)
            drafts.append(x)
            seq = torch.cat([seq, x], dim=1)
        draft_ids = torch.cat(drafts, dim=1)  # (1, k)
        # One target pass scores the k drafts and the bonus position; its last k + 1 logits are the ones
        # at ids[-1], x_1 .. x_k (logits at i predict i + 1), whatever the cache made it skip.
        t_logits = target_lm(seq)
        p = _probs(t_logits[:, -(k + 1) :, :V], temperature)  # (1, k + 1, V)
        bonus = torch.multinomial(p[:, k], 1, generator=gen)
        u = torch.rand((1, k, 2), generator=gen, device=device, dtype=torch.float64)
        row = speculative_step(p, bonus, torch.stack(q_rows, dim=1), draft_ids, divergence=divergence, budget=budget, uniforms=u)[0]
        new = row[row >= 0]
        n_acc = new.numel() - 1
        if use_cache:  # keep ids + x_1 .. x_n_acc, drop the rejected drafts
            target_lm.keep(ids.shape[1] + n_acc)
            draft_lm.keep(ids.shape[1] + min(n_acc, k - 1))
        steps += 1
        drafted += k
        accepted += n_acc
        verified += min(n_acc + 1, k)
        reached[: min(n_acc + 1, k)] += 1
        kept[:n_acc] += 1
        if eos_token_id is not None and bool((new == eos_token_id).any()):
            new = new[: int((new == eos_token_id).nonzero()[0, 0]) + 1]
            emitted += new.numel()
            ids = torch.cat([ids, new[None]], dim=1)
            break
        emitted += new.numel()
        ids = torch.cat([ids, new[None]], dim=1)
    ids = ids[:, : start + max_new_tokens]
    per_position = torch.where(reached > 0, kept / reached.clamp(min=1), torch.nan).numpy()
    stats = DecodeStats(
        tokens=[ids[0, start:].cpu().numpy()], steps=steps, drafted=drafted, accepted=accepted, per_position=per_position,
        emitted=emitted, verified=verified,
    )
    return ids, stats
