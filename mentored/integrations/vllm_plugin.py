r"""A vLLM plugin: mentored verification in the slot of vLLM v1's rejection sampler (docs/serving.md).

Installed through the ``vllm.general_plugins`` entry point ``mentored = "mentored.integrations.vllm_plugin:register"``
(pyproject.toml). vLLM calls :func:`register` in every process it starts; it swaps vLLM's
``RejectionSampler`` for :class:`MentoredRejectionSampler` **only** when the user asked for it:

- ``MENTORED_DIVERGENCE`` and ``MENTORED_BUDGET`` (e.g. ``kl`` and ``0.1``), optionally
  ``MENTORED_ZEROS`` (``keep``, the default, or ``continue``); or
- ``MENTORED_CONFIG``: the path of a JSON or TOML file (``.toml`` in any case; UTF-8, a byte-order
  mark allowed) with the keys ``divergence``, ``budget`` and optionally ``zeros``.

The budget is a number ≥ 0 or ``inf`` (no bound), as for every entry point; ``true``, NaN and literals
that overflow a float (``1e400``) are refused, and every error names the variable, or the file and key.

With neither, :func:`register` does nothing and vLLM verifies losslessly as before.

:class:`MentoredRejectionSampler` computes the target probabilities as vLLM does (temperature per
request, greedy requests kept greedy, top-k/top-p as masks to 0 before the softmax) and calls
:func:`mentored.verify.serving.rejection_sample`. It takes both forward signatures vLLM v1 has had:

- ``forward(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata)`` → int32
  ``[B, max_spec_len + 1]`` (vLLM v1 up to 0.10: bonus tokens sampled by the caller);
- ``forward(metadata, draft_probs, logits, sampling_metadata)`` → ``SamplerOutput`` (later vLLM:
  ``logits`` holds the target and bonus rows, and the bonus tokens are drawn by vLLM's own
  ``Sampler``, held as ``self.sampler``; logprobs are not supported here).

Only the attributes it reads are needed of vLLM's metadata objects: ``draft_token_ids``,
``num_draft_tokens``, ``max_spec_len`` (or computed), and for the later signature
``target_logits_indices`` and ``bonus_logits_indices``; ``temperature``, ``all_greedy``,
``all_random``, ``top_k``, ``top_p``, ``generators`` (and ``max_num_logprobs``).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import sys
from decimal import Decimal, InvalidOperation

import torch
import torch.nn as nn

from ..verify.serving import rejection_sample

__all__ = ["MentoredConfig", "MentoredRejectionSampler", "config_from_env", "compute_target_probs", "register"]

logger = logging.getLogger(__name__)

# vLLM marks a greedy request by its temperature: -1 in early v1, 0 later; it treats any
# temperature below 1e-5 as greedy when it builds the metadata. A sampled request has T > 0.
_GREEDY_BELOW = 1e-5


def _budget(value) -> float:
    """A budget ε as written in a variable or a file: a number ≥ 0, or an explicit ``inf`` (no bound, as
    everywhere in mentored). Booleans, NaN and finite literals too large for a float are refused."""
    shown = repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, bool) or not isinstance(value, (str, Decimal, numbers.Real)):  # true in TOML and JSON is not 1
        raise TypeError(f"budget must be a number, got {shown}")
    if isinstance(value, (str, Decimal)):
        try:
            exact = Decimal(value.strip() if isinstance(value, str) else value)
        except InvalidOperation:
            raise ValueError(f"budget must be a number, got {shown}") from None
    else:
        exact = Decimal(int(value)) if isinstance(value, numbers.Integral) else Decimal(float(value))
    if exact.is_nan():
        raise ValueError(f"budget must be a number, got {shown}")
    budget = float(exact)
    if math.isinf(budget) and exact.is_finite():
        raise ValueError(f"budget {shown} overflows a float to inf (write inf for no bound)")
    if not budget >= 0:
        raise ValueError(f"budget must be nonnegative (inf allowed), got {shown}")
    return budget


def _divergence(value):
    """A divergence name (or a ``Divergence``), checked: unknown names fail here, at startup."""
    from ..divergences import divergence

    return divergence(value).name if isinstance(value, str) else divergence(value)


def _zeros(value) -> str:
    from ..check.inputs import check_zeros

    return check_zeros(value)


_CHECKS = dict(divergence=_divergence, budget=_budget, zeros=_zeros)


class MentoredConfig:
    """Divergence, budget and zeros mode of the plugin (one for every request)."""

    def __init__(self, divergence="kl", budget=0.0, zeros="keep"):
        self.divergence, self.budget, self.zeros = _divergence(divergence), _budget(budget), _zeros(zeros)

    def __repr__(self):
        return f"MentoredConfig(divergence={self.divergence!r}, budget={self.budget!r}, zeros={self.zeros!r})"


def _config(values: dict, where) -> MentoredConfig:
    """The configuration from ``values`` (key: value as read); an error names ``where(key)``, the key's source."""
    checked = {}
    for key, value in values.items():
        try:
            checked[key] = _CHECKS[key](value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{where(key)}: {exc}") from None
    return MentoredConfig(**checked)


def _unique_keys(pairs):
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"keys given twice: {twice}")
    return dict(pairs)


def _read_file(path: str) -> dict:
    """The table of a JSON or TOML file (``.toml``, any case: TOML, with an optional ``[mentored]``
    table; otherwise JSON). A UTF-8 byte-order mark is skipped. Numbers are kept exact (``Decimal``),
    so that a literal too large for a float is seen as such."""
    with open(path, "rb") as fh:
        raw = fh.read()
    toml = os.path.splitext(path)[1].lower() == ".toml"
    try:
        text = raw.decode("utf-8-sig")
        if toml:
            import tomllib

            data = tomllib.loads(text, parse_float=Decimal)
        else:
            data = json.loads(text, parse_float=Decimal, object_pairs_hook=_unique_keys)
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, TOMLDecodeError, keys given twice
        raise ValueError(f"{path}: not valid {'TOML' if toml else 'JSON'} (UTF-8): {exc}") from None
    if toml and "mentored" in data:
        if set(data) != {"mentored"}:
            raise ValueError(f"{path}: keys outside the [mentored] table: {sorted(set(data) - {'mentored'})}")
        data = data["mentored"]
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected {'a table' if toml else 'an object'} with the keys divergence, budget and zeros, got {type(data).__name__} {data!r}")
    return data


def config_from_env(environ=None) -> MentoredConfig | None:
    """The plugin's configuration from ``MENTORED_*`` variables, or None where the user set none.

    ``MENTORED_CONFIG`` (a JSON or TOML file) takes precedence; otherwise both ``MENTORED_DIVERGENCE``
    and ``MENTORED_BUDGET`` must be set (one without the other, or ``MENTORED_ZEROS`` alone, is an
    error, not a silent default).
    The budget is a number ≥ 0 or ``inf`` (no bound); a boolean, NaN, or a literal that overflows a
    float (``1e400``) is refused. Every error names the variable, or the file and the key.
    """
    env = os.environ if environ is None else environ
    path = env.get("MENTORED_CONFIG")
    if path:
        data = _read_file(path)
        unknown = set(data) - set(_CHECKS)
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)} (expected divergence, budget, zeros)")
        if "divergence" not in data or "budget" not in data:
            raise ValueError(f"{path}: needs both 'divergence' and 'budget'")
        return _config(data, lambda key: f"{path}, key {key!r}")
    div, budget = env.get("MENTORED_DIVERGENCE"), env.get("MENTORED_BUDGET")
    if div is None and budget is None:
        if "MENTORED_ZEROS" in env:
            raise ValueError("MENTORED_ZEROS is set without MENTORED_DIVERGENCE and MENTORED_BUDGET (or MENTORED_CONFIG): set them to enable mentored verification")
        return None
    if div is None or budget is None:
        raise ValueError("set both MENTORED_DIVERGENCE and MENTORED_BUDGET (or MENTORED_CONFIG) to enable mentored verification")
    values = dict(divergence=div, budget=budget)
    if "MENTORED_ZEROS" in env:
        values["zeros"] = env["MENTORED_ZEROS"]
    return _config(values, lambda key: f"MENTORED_{key.upper()}={values[key]!r}")


# ---------------------------------------------------------------- target probabilities


def _per_token(x: torch.Tensor, num_draft_tokens, device) -> torch.Tensor:
    n = torch.as_tensor(list(num_draft_tokens), device=device)
    return torch.repeat_interleave(x.to(device), n)


def _top_k_top_p_mask(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """True where top-k or top-p removes the token (vLLM's rules: ties with the k-th logit stay; top-p
    keeps the most likely tokens until their mass reaches p, and at least one)."""
    V = logits.shape[-1]
    srt, idx = logits.sort(dim=-1, descending=False)
    drop = torch.zeros_like(srt, dtype=torch.bool)
    if k is not None:
        kk = k.to(torch.int64).clamp(1, V)
        kth = srt.gather(-1, (V - kk)[:, None])
        drop |= srt < kth
    if p is not None:
        probs = torch.softmax(srt.masked_fill(drop, -torch.inf), dim=-1)
        cum = probs.cumsum(-1)
        drop_p = cum <= (1 - p.to(cum.dtype))[:, None]
        drop_p[:, -1] = False
        drop |= drop_p
    return torch.zeros_like(drop).scatter_(-1, idx, drop)


def compute_target_probs(target_logits: torch.Tensor, num_draft_tokens, sampling_metadata) -> tuple[torch.Tensor, torch.Tensor]:
    """(target_probs [T, V] float32, is_greedy [B] bool) from logits, as vLLM's rejection sampler does.

    Temperature per request (greedy requests: temperature 1, they are verified by argmax), then
    top-k/top-p per request as masks (the masked tokens get probability exactly 0: with
    ``zeros="keep"`` they are never emitted), then the softmax in float32.
    """
    device = target_logits.device
    logits = target_logits.to(torch.float32)
    B = len(num_draft_tokens)
    temp = sampling_metadata.temperature
    if sampling_metadata.all_greedy or temp is None:
        is_greedy = torch.ones(B, dtype=torch.bool)
    else:
        # read to the host (B numbers): rejection_sample plans greedy and random requests there
        is_greedy = (temp.to(torch.float32) < _GREEDY_BELOW).cpu()
    if not bool(is_greedy.all()) and logits.shape[0]:
        # as vLLM: greedy requests at temperature 1, and top-k/top-p on every row (a greedy row keeps its argmax)
        t = torch.where(is_greedy.to(device), torch.ones_like(temp, dtype=torch.float32, device=device), temp.to(device, torch.float32))
        logits = logits / _per_token(t, num_draft_tokens, device)[:, None]
        k = sampling_metadata.top_k
        p = sampling_metadata.top_p
        if k is not None or p is not None:
            kt = None if k is None else _per_token(k, num_draft_tokens, device)
            pt = None if p is None else _per_token(p, num_draft_tokens, device)
            logits = logits.masked_fill(_top_k_top_p_mask(logits, kt, pt), -torch.inf)
    return torch.softmax(logits, dim=-1), is_greedy


# ---------------------------------------------------------------- the module


class _Mentored:
    """The mentored verification step shared by both forward signatures."""

    mentored_config: MentoredConfig

    def mentored_step(self, metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata) -> torch.Tensor:
        cfg = self.mentored_config
        n = list(metadata.num_draft_tokens)
        probs, is_greedy = compute_target_probs(target_logits, n, sampling_metadata)
        gens = getattr(sampling_metadata, "generators", None) or None
        return rejection_sample(
            metadata.draft_token_ids,
            n,
            None if draft_probs is None else draft_probs.to(torch.float32),
            probs,
            bonus_token_ids,
            divergence=cfg.divergence,
            budget=cfg.budget,
            is_greedy=is_greedy.numpy(),
            generators=gens,
            zeros=cfg.zeros,
            validate=False,
        )


def _make_class(base):
    class MentoredRejectionSampler(_Mentored, base):
        """vLLM's rejection sampler with mentored verification (divergence and budget from ``config``)."""

        def __init__(self, *args, config: MentoredConfig | None = None, **kwargs):
            if base is nn.Module:
                nn.Module.__init__(self)
                self.sampler = kwargs.get("sampler", args[0] if args else None)
            else:
                base.__init__(self, *args, **kwargs)
            self.mentored_config = config or config_from_env() or MentoredConfig()

        def forward(self, metadata, draft_probs, target_logits, bonus_token_ids=None, sampling_metadata=None, **_):
            if sampling_metadata is None and hasattr(bonus_token_ids, "temperature"):
                return self._forward_with_bonus_sampling(metadata, draft_probs, target_logits, bonus_token_ids)
            return self.mentored_step(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata)

        def _forward_with_bonus_sampling(self, metadata, draft_probs, logits, sampling_metadata):
            """Later vLLM v1: ``logits`` [T + B, V]; the bonus tokens are drawn by vLLM's Sampler."""
            from dataclasses import replace

            from vllm.v1.outputs import SamplerOutput

            if getattr(sampling_metadata, "max_num_logprobs", None) is not None:
                raise NotImplementedError("mentored verification does not return logprobs: unset logprobs, or unset MENTORED_*")
            bonus = self.sampler(
                logits=logits[metadata.bonus_logits_indices],
                sampling_metadata=replace(sampling_metadata, max_num_logprobs=-1),
                predict_bonus_token=True,
            ).sampled_token_ids
            target_logits = logits[metadata.target_logits_indices].to(torch.float32)
            if hasattr(self, "apply_logits_processors"):
                target_logits = self.apply_logits_processors(target_logits, sampling_metadata, metadata)
            out = self.mentored_step(metadata, draft_probs, target_logits, bonus, sampling_metadata)
            return SamplerOutput(sampled_token_ids=out, logprobs_tensors=None)

    return MentoredRejectionSampler


MentoredRejectionSampler = _make_class(nn.Module)  # importable without vLLM; register() builds it on vLLM's class


def register() -> None:
    """The ``vllm.general_plugins`` hook: swap vLLM's rejection sampler when ``MENTORED_*`` asks for it.

    Idempotent (vLLM calls it once per process, possibly more). Does nothing without configuration.
    """
    cfg = config_from_env()
    if cfg is None:
        return
    import vllm.v1.sample.rejection_sampler as rs

    if getattr(rs.RejectionSampler, "_mentored", False):
        return
    cls = _make_class(rs.RejectionSampler)
    cls._mentored = True
    rs.RejectionSampler = cls
    # model runners that imported the name already
    for mod in ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.tpu_model_runner"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, "RejectionSampler"):
            m.RejectionSampler = cls
    logger.info("mentored: vLLM's rejection sampler verifies with %r", cfg)
