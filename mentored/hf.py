r"""Mentored speculative decoding with Hugging Face causal language models.

:func:`generate` drafts ``k`` tokens with a small ``AutoModelForCausalLM`` (the drafter :math:`q`),
scores them with a large one (the target :math:`p`) in one forward pass, and accepts or resamples
with :func:`mentored.speculative_step`, whose verifier at each position is the optimal
:math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` for that position's :math:`(p, q)`. Any pair of
models sharing a tokenizer (the same vocabulary) works; nothing is downloaded.

KV caches: correctness first, and no dependence on the cache API of a transformers version. Every
forward pass recomputes the prefix (``use_cache=False``): the drafter once per drafted token, the
target once per round over prefix and drafts. Nothing is cached, so no rejected token can leak into
a later round. Counts reported are target forward passes, the quantity speculation saves.
"""

from __future__ import annotations

import torch

from .speculative import speculative_step
from .textlm import DecodeStats

__all__ = ["generate"]


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.to(torch.float64) / temperature, dim=-1)


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
    while ids.shape[1] - start < max_new_tokens:
        # Draft k tokens, each from a full pass over the prefix (no cache: see the module docstring).
        q_rows, drafts = [], []
        seq = ids
        for _ in range(k):
            q = _probs(draft_model(input_ids=seq, use_cache=False).logits[:, -1, :V], temperature)
            x = torch.multinomial(q, 1, generator=gen)
            q_rows.append(q)
            drafts.append(x)
            seq = torch.cat([seq, x], dim=1)
        draft_ids = torch.cat(drafts, dim=1)  # (1, k)
        # One target pass scores the k drafts and the bonus position.
        t_logits = target_model(input_ids=torch.cat([ids, draft_ids], dim=1), use_cache=False).logits
        p = _probs(t_logits[:, ids.shape[1] - 1 :, :V], temperature)  # (1, k + 1, V): logits at i predict i + 1
        bonus = torch.multinomial(p[:, k], 1, generator=gen)
        u = torch.rand((1, k, 2), generator=gen, device=device, dtype=torch.float64)
        row = speculative_step(p, bonus, torch.stack(q_rows, dim=1), draft_ids, divergence=divergence, budget=budget, uniforms=u)[0]
        new = row[row >= 0]
        n_acc = new.numel() - 1
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
