r"""A vLLM plugin: mentored verification in the slot of vLLM v1's rejection sampler (docs/serving.md).

Installed through the ``vllm.general_plugins`` entry point ``mentored = "mentored.integrations.vllm_plugin:register"``
(pyproject.toml). vLLM calls :func:`register` in every process it starts; it swaps vLLM's
``RejectionSampler`` for :class:`MentoredRejectionSampler` **only** when the user asked for it:

- ``MENTORED_DIVERGENCE`` and ``MENTORED_BUDGET`` (e.g. ``kl`` and ``0.1``), optionally
  ``MENTORED_ZEROS`` (``keep``, the default, or ``continue``); or
- ``MENTORED_CONFIG``: the path of a JSON or TOML file (``.toml`` in any case; UTF-8, a byte-order
  mark allowed) with the keys ``divergence``, ``budget`` and optionally ``zeros``; or
- ``MENTORED_ENABLE=1``: on, with ``kl`` at budget 0 (lossless) as the default.

Each request may set its own divergence and budget: ``SamplingParams(extra_args={"mentored_divergence":
"kl", "mentored_budget": 0.3})``, or ``vllm_xargs`` in a request to the OpenAI server
(:func:`request_setting`); the variables set the default. ``"mentored_price": λ`` verifies a request by
price instead of a budget (:func:`request_options`). With ``MENTORED_TRACK_SPENT=1`` the v1 runner's
sampler keeps the divergence each request spent (:func:`spent`).

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
  ``Sampler``, held as ``self.sampler``; logprobs, where asked for, are vLLM's tensors with the sampled
  token's entry set to log π, the law it was drawn from; the top-k entries and ranks stay the target's).

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
import weakref
from decimal import Decimal, InvalidOperation

import numpy as np
import torch
import torch.nn as nn

from ..verify.serving import rejection_sample

__all__ = [
    "MentoredConfig", "MentoredRefusal", "MentoredRejectionSampler", "check_engine", "config_from_env", "compute_target_probs", "register",
    "position_uniforms", "request_options", "request_setting", "spent", "verify_logits",
]

# under vLLM's logger, so that what the plugin says appears in the engine's log with vLLM's own lines
logger = logging.getLogger("vllm.mentored")

# vLLM marks a greedy request by its temperature: -1 in early v1, 0 later; it treats any
# temperature below 1e-5 as greedy when it builds the metadata. A sampled request has T > 0.
_GREEDY_BELOW = 1e-5


def _budget(value, what: str = "budget") -> float:
    """A budget ε (or, ``what="price"``, a price λ) as written in a variable or a file: a number ≥ 0, or an
    explicit ``inf`` (no bound, as everywhere in mentored). Booleans, NaN and finite literals too large
    for a float are refused."""
    shown = repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, bool) or not isinstance(value, (str, Decimal, numbers.Real)):  # true in TOML and JSON is not 1
        raise TypeError(f"{what} must be a number, got {shown}")
    if isinstance(value, (str, Decimal)):
        try:
            exact = Decimal(value.strip() if isinstance(value, str) else value)
        except InvalidOperation:
            raise ValueError(f"{what} must be a number, got {shown}") from None
    else:
        exact = Decimal(int(value)) if isinstance(value, numbers.Integral) else Decimal(float(value))
    if exact.is_nan():
        raise ValueError(f"{what} must be a number, got {shown}")
    budget = float(exact)
    if math.isinf(budget) and exact.is_finite():
        raise ValueError(f"{what} {shown} overflows a float to inf (write inf for no bound)")
    if not budget >= 0:
        raise ValueError(f"{what} must be nonnegative (inf allowed), got {shown}")
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
    error, not a silent default). ``MENTORED_ENABLE=1`` alone turns the plugin on with the default
    ``kl`` at budget 0: lossless, unless a request sets its own budget (:func:`request_setting`).
    The budget is a number ≥ 0 or ``inf`` (no bound); a boolean, NaN, or a literal that overflows a
    float (``1e400``) is refused. Every error names the variable, or the file and the key.
    """
    env = os.environ if environ is None else environ
    enable = env.get("MENTORED_ENABLE")
    if enable is not None and enable.strip() != "1":
        raise ValueError(f"MENTORED_ENABLE={enable!r}: set it to 1 (the plugin on, lossless unless a request or MENTORED_* sets a budget) or unset it")
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
        if enable is not None:
            return _config({"zeros": env["MENTORED_ZEROS"]} if "MENTORED_ZEROS" in env else {}, lambda key: f"MENTORED_{key.upper()}")
        if "MENTORED_ZEROS" in env:
            raise ValueError("MENTORED_ZEROS is set without MENTORED_DIVERGENCE and MENTORED_BUDGET (or MENTORED_CONFIG, or MENTORED_ENABLE=1): "
                             "set them to enable mentored verification")
        return None
    if div is None or budget is None:
        raise ValueError("set both MENTORED_DIVERGENCE and MENTORED_BUDGET (or MENTORED_CONFIG) to enable mentored verification")
    values = dict(divergence=div, budget=budget)
    if "MENTORED_ZEROS" in env:
        values["zeros"] = env["MENTORED_ZEROS"]
    return _config(values, lambda key: f"MENTORED_{key.upper()}={values[key]!r}")


REQUEST_KEYS = ("mentored_divergence", "mentored_budget", "mentored_price")


def request_options(extra_args, default: MentoredConfig):
    """(divergence, budget, price) of one request: ``SamplingParams(extra_args={"mentored_divergence":
    "kl", "mentored_budget": 0.3})`` (the OpenAI server's ``vllm_xargs``) overrides the process default
    ``default`` (``MENTORED_*``), each key alone or both. ``mentored_budget`` is a number ≥ 0, or
    ``inf`` (no bound); 0 makes the request lossless.

    ``mentored_price`` λ (≥ 0, ``inf`` allowed, checked as the budget is) verifies the request by price
    instead of a budget: each position's π maximises ``A − λ D_f(π‖p)`` (docs/theory.md §4;
    :func:`~mentored.verify.serving.rejection_sample` with ``price=``); its budget is then 0 and the
    process default budget does not apply. ``price`` is NaN for a request verified by budget. A
    request giving both ``mentored_budget`` and ``mentored_price`` is refused (they ask for different
    verifiers).

    Other keys of ``extra_args`` belong to others and are ignored; a key that starts with
    ``mentored_`` and is not one of :data:`REQUEST_KEYS` is refused (a misspelt key would otherwise
    verify at the default without a word). Raises ``ValueError`` naming the key and the value; vLLM
    calls this when it admits the request, so a bad value fails that request alone (:func:`register`)."""
    if extra_args is None:
        return default.divergence, default.budget, math.nan
    if not isinstance(extra_args, dict):
        raise ValueError(f"extra_args must be a dict, got {type(extra_args).__name__}")
    unknown = sorted(k for k in extra_args if isinstance(k, str) and k.startswith("mentored_") and k not in REQUEST_KEYS)
    if unknown:
        raise ValueError(f"unknown extra_args keys {unknown}: mentored reads {list(REQUEST_KEYS)}")
    if "mentored_budget" in extra_args and "mentored_price" in extra_args:
        raise ValueError(f"extra_args has both 'mentored_budget' ({extra_args['mentored_budget']!r}) and 'mentored_price' "
                         f"({extra_args['mentored_price']!r}): give one (a budget bounds the divergence, a price trades it)")
    div, budget, price = default.divergence, default.budget, math.nan
    for key in REQUEST_KEYS:
        if key not in extra_args:
            continue
        value = extra_args[key]
        try:
            if key == "mentored_budget":
                budget = _budget(value)
            elif key == "mentored_price":
                price, budget = _budget(value, "price"), 0.0
            elif isinstance(value, str):
                div = _divergence(value)
            else:
                raise TypeError(f"a divergence name must be a string, got {value!r}")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"extra_args[{key!r}]: {exc}") from None
    return div, budget, price


def request_setting(extra_args, default: MentoredConfig):
    """(divergence, budget) of one request: :func:`request_options` without the price (a request verified
    by price has budget 0 here). Refuses what :func:`request_options` refuses."""
    return request_options(extra_args, default)[:2]


def _engine_setting(sampling_params, default: MentoredConfig, who: str):
    """:func:`request_options` of a request the engine already admitted. A bad value can only be here
    if admission did not check it (the plugin not loaded in the front end): it is verified
    losslessly, which is never wrong, and the log says so; the engine does not stop."""
    try:
        return request_options(getattr(sampling_params, "extra_args", None), default)
    except ValueError as exc:
        logger.error("mentored: %s is verified losslessly: %s", who, exc)
        return default.divergence, 0.0, math.nan


def _on_host(price, *tensors):
    """The tensors on the host where a request of the call is verified by price (``price`` not None) and
    they live on a device: mentored solves prices on the host only (rejection_sample's ``price=``), so
    such a step costs a copy of its rows each way; otherwise as given."""
    if price is None:
        return tensors
    return tuple(t.cpu() if isinstance(t, torch.Tensor) and t.device.type != "cpu" else t for t in tensors)


def _prices(prices):
    """One price per request (NaN: by budget), or None where no request of the call has one."""
    prices = np.asarray(prices, dtype=np.float64)
    return None if np.isnan(prices).all() else prices


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


def _building_runner():
    """The model runner whose constructor is building the sampler (vLLM's v1 runner builds it in its
    ``__init__``), as a weak reference, or None when the sampler is built elsewhere (tests)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        obj = frame.f_locals.get("self")
        if obj is not None and type(obj).__name__.endswith("ModelRunner"):
            return weakref.ref(obj)
        frame = frame.f_back
    return None


def _keep_drafter_probs(runner_ref, spec_config) -> bool:
    """Make the v1 runner's drafter keep its probabilities q under ``rejection_sample_method="block"``.

    vLLM's v1 proposers keep q only for ``standard`` (its v1 sampler has no block rule, and treats
    ``block`` as ``standard``); with ``block`` they draft the argmax and hand the sampler no q, so the
    block would be verified as token-only drafts, whose law is that of token verification. With
    ``draft_sample_method="probabilistic"`` the drafter samples its drafts and keeps q, as for
    ``standard`` (and as vLLM's v2 runner does under ``block``). The runner builds its drafter before
    its sampler, so it is there to set. True when set."""
    runner = runner_ref() if runner_ref is not None else None
    drafter = getattr(runner, "drafter", None)
    if getattr(spec_config, "draft_sample_method", None) != "probabilistic" or not hasattr(drafter, "_enable_probabilistic_draft_probs"):
        return False
    drafter._enable_probabilistic_draft_probs = True
    logger.info("mentored: block verification: the drafter samples its drafts and keeps its probabilities (draft_sample_method='probabilistic')")
    return True


class _Mentored:
    """The mentored verification step shared by both forward signatures."""

    mentored_config: MentoredConfig
    mentored_method = "token"  # or "block" (check_engine: vLLM's rejection_sample_method)
    mentored_runner = None  # weakref to the v1 model runner: its requests carry the per-request settings

    def request_settings(self, num_reqs: int):
        """``(divergence, budget, price)`` of the batch's ``num_reqs`` requests, in the batch's order
        (``input_batch.req_ids``, the order of ``num_draft_tokens`` and of the sampling metadata's
        rows); the process default for all where no runner is known. One divergence and one budget
        where all agree; ``price`` one per request (NaN: by budget), or None where none has one."""
        cfg = self.mentored_config
        runner = self.mentored_runner() if self.mentored_runner is not None else None
        if runner is None:
            return cfg.divergence, cfg.budget, None
        ids = runner.input_batch.req_ids
        if len(ids) < num_reqs:  # the runner's warm-up: dummy requests, while its batch is empty
            return cfg.divergence, cfg.budget, None
        ids = ids[:num_reqs]
        cache = self.__dict__.setdefault("_settings", {})
        settings = []
        for req_id in ids:
            setting = cache.get(req_id)
            if setting is None:
                setting = cache[req_id] = _engine_setting(getattr(runner.requests.get(req_id), "sampling_params", None), cfg, f"request {req_id}")
            settings.append(setting)
        if len(cache) > 4 * max(len(ids), 64):  # forget finished requests
            keep = set(ids)
            for req_id in [r for r in cache if r not in keep]:
                del cache[req_id]
        price = _prices([p for _, _, p in settings]) if settings else None
        if settings and all(x[:2] == settings[0][:2] for x in settings[1:]):
            return settings[0][0], settings[0][1], price
        return [d for d, _, _ in settings], np.array([b for _, b, _ in settings]), price

    def _batch_ids(self, num_reqs: int):
        """The batch's request ids (None where no runner is known, or during its warm-up)."""
        runner = self.mentored_runner() if self.mentored_runner is not None else None
        if runner is None or len(runner.input_batch.req_ids) < num_reqs:
            return None, runner
        return list(runner.input_batch.req_ids[:num_reqs]), runner

    def _add_spent(self, num_reqs: int, spent_rows: np.ndarray) -> None:
        """Add each request's divergence spent this step (NaN-safe sum over the tokens it emitted) to
        the module's record (:func:`spent`), and close the record of requests the runner has dropped
        (finished or aborted: vLLM's v1 runner removes them from ``runner.requests``)."""
        ids, runner = self._batch_ids(num_reqs)
        if ids is None:
            return
        step = np.nansum(spent_rows, axis=1)
        for req_id, d in zip(ids, step):
            _SPENT[req_id] = _SPENT.get(req_id, 0.0) + float(d)
            _FINISHED.pop(req_id, None)  # an id used again starts afresh only after it was dropped
        live = runner.requests
        for req_id in [r for r in _SPENT if r not in live]:
            total = _SPENT.pop(req_id)
            _FINISHED[req_id] = total
            logger.debug("mentored: request %s finished, divergence spent %.6g (sum of D_f(pi||p) over its emitted tokens)", req_id, total)
        while len(_FINISHED) > _FINISHED_KEPT:
            del _FINISHED[next(iter(_FINISHED))]

    def mentored_step(self, metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata, want_logprobs: bool = False):
        """The verified tokens [B, max + 1]; with ``want_logprobs``, the :class:`~mentored.verify.serving.Emitted`
        ``(tokens, logprobs)`` (log π of each emitted token). With :data:`TRACK_SPENT` the divergence
        each request spent is added to :func:`spent`."""
        cfg = self.mentored_config
        n = list(metadata.num_draft_tokens)
        probs, is_greedy = compute_target_probs(target_logits, n, sampling_metadata)
        gens = getattr(sampling_metadata, "generators", None) or None
        divergence, budget, price = self.request_settings(len(n))
        device = probs.device
        draft_ids, q, probs, bonus = _on_host(price, metadata.draft_token_ids, None if draft_probs is None else draft_probs.to(torch.float32),
                                              probs, bonus_token_ids)
        uniforms = None
        if price is not None and device.type != "cpu" and gens:
            # the host solves a price, and a seeded request's generator lives on the device: its uniforms are
            # drawn there (two per position, as rejection_sample draws them) and handed to the host
            uniforms = torch.cat([torch.rand((k, 2), generator=gens[b], device=gens[b].device, dtype=torch.float64).cpu() if b in gens
                                  else torch.rand((k, 2), dtype=torch.float64) for b, k in enumerate(n)])
            gens = None
        notes = want_logprobs or TRACK_SPENT
        out = rejection_sample(
            draft_ids, n, q, probs, bonus,
            divergence=divergence, budget=budget, is_greedy=is_greedy.numpy(), generators=gens, uniforms=uniforms,
            zeros=cfg.zeros, validate=False, method=self.mentored_method, return_logprobs=notes,
            **({} if price is None else {"price": price}),
        )
        if not notes:
            return out.to(device) if isinstance(out, torch.Tensor) else out
        tokens = out.tokens.to(device) if isinstance(out.tokens, torch.Tensor) else out.tokens
        if TRACK_SPENT:
            self._add_spent(len(n), out.spent)
        return type(out)(tokens, out.logprobs, out.target_logprobs, out.spent) if want_logprobs else tokens


# Divergence spent per request id, summed over the tokens it emitted (:func:`spent`): the live requests, and the
# last _FINISHED_KEPT finished ones. In the process that runs the model runner (vLLM's worker); an in-process
# engine (LLM with VLLM_ENABLE_V1_MULTIPROCESSING=0) shares it with the caller.
TRACK_SPENT = os.environ.get("MENTORED_TRACK_SPENT", "").strip() == "1"
_SPENT: dict = {}
_FINISHED: dict = {}
_FINISHED_KEPT = 4096


def spent(request_id: str) -> float:
    r"""The divergence request ``request_id`` has spent so far: :math:`\sum_j D_f(\pi_j\|p_j)` over the
    tokens it emitted (0 for a bonus token, whose law is the target's; NaN-safe: a row without a law
    adds nothing), each :math:`\pi_j` the verifier its token was drawn from (docs/theory.md §11).

    Kept by vLLM's v1 runner's sampler while :data:`TRACK_SPENT` is on (``MENTORED_TRACK_SPENT=1`` in the
    engine's environment, or set in-process; it makes every step compute the emitted tokens' law), in
    the process running the model runner; the last 4096 finished requests are kept (their totals are
    also logged at debug level when the runner drops them). vLLM's ``RequestOutput`` has no field for
    it, so it is read here, not in the engine's output. Raises ``KeyError`` for a request not seen."""
    if request_id in _SPENT:
        return _SPENT[request_id]
    if request_id in _FINISHED:
        return _FINISHED[request_id]
    raise KeyError(f"no divergence recorded for request {request_id!r}" + ("" if TRACK_SPENT else
                   " (tracking is off: set MENTORED_TRACK_SPENT=1 or vllm_plugin.TRACK_SPENT = True)"))


def _sampled_logprobs_of_pi(tensors, log_pi: np.ndarray):
    """vLLM's logprobs tensors with the sampled token's entry (column 0 of row ``b·W + j``, the token at
    column j of request b, as vLLM's ``_get_logprobs_tensors`` lays them out) set to log π of that token:
    the law it was drawn from. Entries where mentored has no value (NaN: nothing emitted there, or the
    bonus token, whose law is the target's and which vLLM's sampler drew) keep vLLM's."""
    lp = tensors.logprobs
    pi = torch.as_tensor(log_pi.reshape(-1), dtype=lp.dtype, device=lp.device)
    if pi.shape[0] != lp.shape[0]:  # a layout this plugin does not know: vLLM's values, and the log says so
        logger.warning("mentored: logprobs rows (%d) do not match the emitted tokens (%d): the target's logprobs are returned", lp.shape[0], pi.shape[0])
        return tensors
    lp = lp.clone()
    lp[:, 0] = torch.where(torch.isnan(pi), lp[:, 0], pi)
    return tensors._replace(logprobs=lp)  # vLLM's LogprobsTensors is a NamedTuple


def _make_class(base):
    class MentoredRejectionSampler(_Mentored, base):
        """vLLM's rejection sampler with mentored verification (divergence and budget from ``config``,
        per request from ``extra_args``: :func:`request_setting`)."""

        def __init__(self, *args, config: MentoredConfig | None = None, runner=None, **kwargs):
            spec_config = kwargs.get("spec_config", args[1] if len(args) > 1 else None)
            method = check_engine(spec_config)
            if base is nn.Module:
                nn.Module.__init__(self)
                self.sampler = kwargs.get("sampler", args[0] if args else None)
            else:
                base.__init__(self, *args, **kwargs)
            self.mentored_config = config or config_from_env() or MentoredConfig()
            self.mentored_method = method
            self.mentored_runner = weakref.ref(runner) if runner is not None else _building_runner()
            if method == "block":
                _keep_drafter_probs(self.mentored_runner, spec_config)
            if self.mentored_runner is None and base is not nn.Module:
                logger.warning("mentored: this sampler was not built by a model runner it knows: every request is verified with %r, "
                               "whatever its extra_args", self.mentored_config)
            logger.info("mentored: vLLM's v1 rejection sampler verifies with %r (method=%r)%s", self.mentored_config, self.mentored_method,
                        ", and each request's extra_args" if self.mentored_runner is not None else "")

        def forward(self, metadata, draft_probs, target_logits, bonus_token_ids=None, sampling_metadata=None, **_):
            if sampling_metadata is None and hasattr(bonus_token_ids, "temperature"):
                return self._forward_with_bonus_sampling(metadata, draft_probs, target_logits, bonus_token_ids)
            return self.mentored_step(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata)

        def _forward_with_bonus_sampling(self, metadata, draft_probs, logits, sampling_metadata):
            """Later vLLM v1: ``logits`` [T + B, V]; the bonus tokens are drawn by vLLM's Sampler.

            Logprobs, where a request asks for them, are computed by vLLM's own helper from the rows
            verified here (``logprobs_mode``); then the sampled token's entry is set to log π of that
            token, the law it was actually drawn from (``rejection_sample(return_logprobs=True)``).
            The top-k entries and the sampled token's rank stay the target's, as does the bonus
            token's entry (drawn by vLLM's sampler from p, which is its π); in the logits modes
            (``raw_logits``, ``processed_logits``) the entries are logits and stay vLLM's."""
            from dataclasses import replace

            from vllm.v1.outputs import SamplerOutput

            want_logprobs = getattr(sampling_metadata, "max_num_logprobs", None) is not None
            processed_mode = getattr(self, "is_processed_logprobs_mode", False)
            bonus_kwargs = dict(logits=logits[metadata.bonus_logits_indices], sampling_metadata=replace(sampling_metadata, max_num_logprobs=-1),
                                predict_bonus_token=True)
            if hasattr(self, "is_processed_logprobs_mode"):
                bonus_kwargs["logprobs_mode_override"] = "processed_logits" if processed_mode else "raw_logits"
            bonus_out = self.sampler(**bonus_kwargs)
            raw_target_logits = logits[metadata.target_logits_indices].to(torch.float32)
            target_logits = raw_target_logits.clone() if want_logprobs else raw_target_logits
            if hasattr(self, "apply_logits_processors"):
                target_logits = self.apply_logits_processors(target_logits, sampling_metadata, metadata)
            out = self.mentored_step(metadata, draft_probs, target_logits, bonus_out.sampled_token_ids, sampling_metadata, want_logprobs=want_logprobs)
            logprobs = None
            if want_logprobs:
                if not hasattr(self, "_get_logprobs_tensors"):
                    raise NotImplementedError("this vLLM's rejection sampler has no logprobs helper: unset logprobs, or unset MENTORED_*")
                emitted, out = out, out.tokens
                # processed mode: log p of the verified rows (temperature, masks) is a logits row of p
                rows = torch.log(compute_target_probs(target_logits, list(metadata.num_draft_tokens), sampling_metadata)[0]) if processed_mode else raw_target_logits
                logprobs = self._get_logprobs_tensors(sampling_metadata.max_num_logprobs, metadata, logits, rows,
                                                      bonus_out.logprobs_tensors.logprobs, out)
                if not getattr(self, "is_logits_logprobs_mode", False):
                    logprobs = _sampled_logprobs_of_pi(logprobs, emitted.logprobs)
            return SamplerOutput(sampled_token_ids=out, logprobs_tensors=logprobs)

    return MentoredRejectionSampler


MentoredRejectionSampler = _make_class(nn.Module)  # importable without vLLM; register() builds it on vLLM's class


# ---------------------------------------------------------------- the v2 model runner


class MentoredRefusal(RuntimeError):
    """The engine's configuration would bypass or alter mentored verification: it refuses to start."""


# vLLM's rejection_sample_method -> mentored's verification method (rejection_sample's method=)
METHODS = {"standard": "token", "block": "block"}


def check_engine(spec_config, *, watermark_key=None) -> str:
    """The verification method mentored's sampler uses for vLLM's ``rejection_sample_method``:
    ``"token"`` for ``standard`` (token by token, Leviathan et al.), ``"block"`` for ``block`` (block
    verification, Sun et al., arXiv 2403.10444: :func:`~mentored.verify.serving.rejection_sample` with
    ``method="block"``, which at budget 0 has vLLM's block law). Refuse (MentoredRefusal) any setting
    under which the sampler would not verify with mentored's rule: another method (synthetic, fly),
    adaptive verification, or watermarking. Called when vLLM builds the sampler, so the engine does not
    start."""
    method = getattr(spec_config, "rejection_sample_method", "standard") if spec_config is not None else "standard"
    fix = "unset MENTORED_DIVERGENCE/MENTORED_BUDGET (or MENTORED_CONFIG) to use it without mentored"
    if method not in METHODS:
        raise MentoredRefusal(f"mentored verification replaces the rejection rule, and rejection_sample_method={method!r} "
                              f"selects another one: set rejection_sample_method='standard' or 'block', or {fix}")
    if getattr(spec_config, "enable_adaptive_verification", False):
        raise MentoredRefusal(f"mentored verification does not support enable_adaptive_verification=True: turn it off, or {fix}")
    if watermark_key is not None:
        raise MentoredRefusal(f"mentored verification does not support watermarked sampling (watermark_config): remove it, or {fix}")
    return METHODS[method]


_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Philox4x32's multipliers and key increments (Salmon et al. 2011)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_MASK32 = 0xFFFFFFFF


def _check_vocabularies(spec_config, config: MentoredConfig) -> None:
    """Refuse (MentoredRefusal) at startup a draft head wider than the target's with ``zeros="continue"``,
    where vLLM's configuration tells both widths: :func:`verify_logits` would refuse its first step."""
    if config.zeros == "keep" or getattr(spec_config, "draft_sample_method", None) != "probabilistic":
        return
    try:
        target, draft = spec_config.target_model_config.get_vocab_size(), spec_config.draft_model_config.get_vocab_size()
    except AttributeError:
        return  # not told here: verify_logits checks the rows it is given
    if isinstance(target, int) and isinstance(draft, int) and draft > target:
        raise MentoredRefusal(f"the draft model's vocabulary ({draft} tokens) is wider than the target's ({target}), and zeros='continue' "
                              "could emit the drafter's tokens the target does not have: set MENTORED_ZEROS=keep, or unset MENTORED_* "
                              "to verify without mentored")


def _mulhilo32(a: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of ``a · m`` for int64 ``a, m`` in [0, 2³²), exact in int64: m is split
    into 16-bit halves so that no intermediate exceeds 2⁴⁹ (int64 overflow is undefined in torch)."""
    t0 = a * (m & 0xFFFF)
    t1 = a * (m >> 16)
    s = t0 + ((t1 & 0xFFFF) << 16)  # a·m = s + (t1 >> 16)·2³²
    return (t1 >> 16) + (s >> 32), s & _MASK32


def _philox4x32(counter: torch.Tensor, key: torch.Tensor, rounds: int = 10) -> torch.Tensor:
    """Philox4x32-``rounds`` (Salmon, Moraes, Dror, Shaw, SC 2011; Random123's ``philox4x32``):
    int64 ``counter`` [..., 4] and ``key`` [..., 2], each entry a 32-bit word in [0, 2³²), to the
    four output words [..., 4]. For a fixed key it is a bijection of the 128-bit counter."""
    dev = counter.device
    m = torch.tensor(_PHILOX_M, dtype=torch.int64, device=dev)
    w = torch.tensor(_PHILOX_W, dtype=torch.int64, device=dev)
    even, odd = counter[..., 0::2], counter[..., 1::2]  # (c0, c2) and (c1, c3)
    k = key
    for r in range(rounds):
        if r:
            k = (k + w) & _MASK32
        hi, lo = _mulhilo32(even, m)  # (hi0, hi1), (lo0, lo1) of M0·c0 and M1·c2
        even, odd = hi.flip(-1) ^ odd ^ k, lo.flip(-1)  # c0 = hi1 ^ c1 ^ k0, c2 = hi0 ^ c3 ^ k1; c1 = lo1, c3 = lo0
    return torch.stack((even[..., 0], odd[..., 0], even[..., 1], odd[..., 1]), -1)


def position_uniforms(seeds: torch.Tensor, pos: torch.Tensor, step: torch.Tensor | None = None) -> torch.Tensor:
    """Two uniforms in [0, 1) (53 bits each) per row from the request's seed and the row's position:
    Philox4x32-10 with the 64-bit seed as its key and the 64-bit position as its counter (and, given
    ``step``, the row's place in its request's step, 32 bits, as the counter's third word).

    Counter-based, as vLLM's Philox draws are: computed where the tensors live, with no generator
    state and no host synchronisation; a request's draws depend on its seed and positions only,
    never on the rest of the batch. Every bit of both is used (two's complement for negative int64
    values): for one seed, distinct positions are distinct counters, whose outputs Philox keeps
    distinct (a bijection); distinct seeds are distinct keys. Token verification reads a position's
    pair at most once: it resumes after the last emitted position, and no position past the first
    rejection is read. Block verification reads ``u0`` of every draft position, those after the
    emitted ones included, which the next step drafts again: ``step`` (the draft's index in its step)
    keys them apart, since a position drafted again sits at a smaller index (vLLM keys its block draws
    by the same pair, ``spec_step_seed``). ``step=None`` is step 0. Row i's pair is ``(a₀·2²⁶ + b₀, a₁·2²⁶ + b₁)·2⁻⁵³``
    with the output words ``(w₀, w₁, w₂, w₃)``, ``a = (w₀, w₂) >> 5`` and ``b = (w₁, w₃) >> 6``.
    Returns float64 ``[len(pos), 2]``.
    """
    s = seeds.to(torch.int64)
    x = pos.to(device=s.device, dtype=torch.int64)
    key = torch.stack((s & _MASK32, (s >> 32) & _MASK32), -1)
    zero = torch.zeros_like(x)
    third = zero if step is None else step.to(device=s.device, dtype=torch.int64) & _MASK32
    w = _philox4x32(torch.stack((x & _MASK32, (x >> 32) & _MASK32, third, zero), -1), key)
    return ((w[:, 0::2] >> 5) * 2**26 + (w[:, 1::2] >> 6)).to(torch.float64) * 2.0**-53


def _host(x, name: str):
    """A host copy of a small per-request array: free for numpy (vLLM keeps one), one synchronisation for a device tensor."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if x is None:
        raise ValueError(f"{name} is needed")
    return np.asarray(x)


def _checked_layout(cu_num_logits, num_logits: int, num_reqs: int) -> np.ndarray:
    """``cu_num_logits`` on the host as int64, refused unless it is the layout of ``num_reqs`` requests
    over ``num_logits`` rows: 0 first, the row count last, each request one row or more (its bonus row)."""
    cu = _host(cu_num_logits, "cu_num_logits")
    if cu.ndim != 1 or cu.shape[0] != num_reqs + 1:
        raise ValueError(f"cu_num_logits must be flat with one entry per request and a leading 0, shape (num_reqs + 1,) = ({num_reqs + 1},) "
                         f"for the {num_reqs} entries of idx_mapping; got shape {tuple(cu.shape)}")
    if cu.dtype.kind not in "iu":
        raise TypeError(f"cu_num_logits must hold integers, got dtype {cu.dtype}")
    cu = cu.astype(np.int64)
    rows = np.diff(cu)
    if cu[0] != 0 or cu[-1] != num_logits or (rows < 1).any():
        shown = cu.tolist() if cu.size <= 12 else f"{cu[:6].tolist()} ... {cu[-6:].tolist()}"
        why = (f"request {int(np.argmax(rows < 1))} has {int(rows[rows < 1][0])} rows, and each has its bonus row at least"
               if (rows < 1).any() else f"it must start at 0 and end at the number of logits rows, {num_logits}")
        raise ValueError(f"cu_num_logits {shown} is not a layout of the logits: {why}; pass vLLM's cu_num_logits of this chunk")
    return cu


def verify_logits(logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping, temperature, seeds, num_speculative_steps,
                  config: MentoredConfig, uniforms=None, idx_mapping_np=None, validate: bool = True, settings=None, method: str = "token"):
    r"""Mentored verification in the layout of vLLM's v2 model runner (``RejectionSampler._verify``).

    Request ``r`` owns the logits rows ``cu_num_logits[r] .. cu_num_logits[r+1] − 1`` (one row or
    more): row ``start + i`` (``i < n_r``, ``n_r`` = rows − 1) is the target at the position of the
    draft ``draft_sampled[start + i + 1]`` (−1: a placeholder, always rejected), the last row the
    bonus position. ``logits`` [num_logits, V] are the runner's processed logits (penalties,
    temperature, min-p, top-k/top-p applied: a masked token has probability 0, never emitted with
    ``zeros="keep"``); ``draft_logits`` [max_num_reqs, num_speculative_steps, V'] (or None: token-only
    drafts, vLLM's ``draft_sample_method="greedy"``) are taken before temperature, as vLLM takes them.
    A request with temperature 0 is greedy (accept while the draft is the target's argmax).
    ``temperature`` and ``seeds`` are per request state, read through ``idx_mapping``.

    Vocabularies. Column j of a draft row is token j of the target's vocabulary (vLLM's proposers
    map a reduced draft vocabulary, EAGLE-3's ``draft_id_to_target_id``, to the target's ids before
    they cache the row). A narrower draft row (V' < V: a target head padded past the drafter's)
    has q = 0 on the tokens j ≥ V': verification is exact over all V tokens (budget 0 emits p).
    A wider one (V' > V: a padded draft head) holds tokens the target does not have: the target has
    p = 0 there, so with ``zeros="keep"`` π has no mass there, a draft of one is rejected and none
    is emitted; with ``zeros="continue"`` π could emit them, and it is refused (ValueError naming
    both widths).

    Host reads. The layout (``cu_num_logits``) and which requests are greedy (``temperature``) shape
    the plan on the host: given as numpy arrays (vLLM keeps them: ``cu_num_logits_np``,
    ``temperature.np`` with ``idx_mapping_np``) they cost nothing; given as device tensors, one
    synchronisation each. A layout that is not one (not 0 first, not the row count last, a request
    without rows, not one entry per request of ``idx_mapping``) is refused, as are shapes that do not
    fit it and requests with more drafts than ``num_speculative_steps`` or than ``draft_logits`` has
    steps. With ``validate`` the logits rows and draft ids are checked as
    :func:`~mentored.verify.serving.rejection_sample` checks them (a few synchronisations): a draft id
    outside [0, V) (V the wider width) other than −1 is refused. Without it (the plugin's mode:
    nothing else leaves the device, and a model's NaN must not stop the engine) such an id is
    decided as a placeholder (rejected, the token drawn from p; nothing indexed out of range), and
    a row without a law as ``rejection_sample`` decides it. The uniforms are
    :func:`position_uniforms` of ``seeds`` and ``pos`` (and, with ``method="block"``, of the row's
    index in its request), on the device; token-only drafts read ``p_x`` from the logit and the
    log-sum-exp.

    ``method``: ``"token"`` (vLLM's ``standard``) or ``"block"`` (its ``block``: block verification,
    Sun et al.; :func:`~mentored.verify.serving.rejection_sample`). The bonus row is the block's end:
    a placeholder, so with all drafts accepted the token drawn there is the bonus token.

    ``settings`` ``(divergences, budgets)`` or ``(divergences, budgets, prices)``, one of each per request
    (``extra_args``, :func:`request_options`; a price NaN where the request is verified by budget, or
    ``prices`` None), replace ``config``'s divergence and budget. A step with a price is verified on
    the host (mentored solves prices there): its rows are copied there and back.

    ``uniforms`` [num_logits, 2] replace them (tests): ``u0`` decides a draft, ``u1`` draws the
    token at the first rejection, or at the bonus row. At ``budget=0`` the decisions are those of
    standard speculative sampling given these uniforms (of block verification with ``method="block"``).

    Returns ``(sampled [num_reqs, num_speculative_steps + 1] int64, num_sampled [num_reqs] int32)``:
    the accepted drafts, then the token at the first rejection or the bonus token; ``num_sampled``
    counts them (accepted + 1).
    """
    device = logits.device
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (num_logits, V), got {tuple(logits.shape)}")
    L, V = (int(d) for d in logits.shape)
    B = int(idx_mapping.shape[0])
    cu = _checked_layout(cu_num_logits, L, B)
    n = np.diff(cu)  # rows per request: its drafts and its bonus row
    for name, x in (("draft_sampled", draft_sampled), ("pos", pos)):
        if tuple(x.shape) != (L,):
            raise ValueError(f"{name} must have one entry per logits row, shape ({L},), got {tuple(x.shape)}")
    most = int(n.max()) - 1 if B else 0
    if most > num_speculative_steps:
        raise ValueError(f"request {int(np.argmax(n))} has {most} drafts (cu_num_logits) and num_speculative_steps={num_speculative_steps}: "
                         "pass the engine's num_speculative_tokens")
    W = V
    if draft_logits is not None:
        if draft_logits.ndim != 3 or draft_logits.shape[1] < most:
            raise ValueError(f"draft_logits must have shape (max_num_reqs, num_speculative_steps, V') with at least {most} steps "
                             f"(the most drafts of a request), got {tuple(draft_logits.shape)}")
        W = max(V, int(draft_logits.shape[-1]))
        if W > V and config.zeros != "keep":
            raise ValueError(f"draft_logits rows have {W} entries and the target's logits {V}: the drafter's tokens {V} to {W - 1} are not "
                             f"the target's, and zeros={config.zeros!r} could emit them; use zeros='keep' (they are then never emitted, "
                             f"and drafts of them are rejected) or a draft head of the target's width")
    states = idx_mapping.to(device, torch.int64)
    if isinstance(temperature, torch.Tensor):
        temps = _host(temperature.to(device)[states], "temperature")
    else:
        temps = np.asarray(temperature)[_host(idx_mapping if idx_mapping_np is None else idx_mapping_np, "idx_mapping")]
    greedy = temps.astype(np.float32) == 0
    # Every row of a request is a position, its bonus row last with a placeholder draft (−1): always
    # rejected, so it draws the bonus token from its target row at its u1 (the argmax if greedy),
    # by the one decision rule, only when every draft before it was accepted.
    last = torch.zeros(L, dtype=torch.bool, device=device)
    last[torch.as_tensor(cu[1:] - 1, device=device)] = True
    draft_ids = torch.where(last, -1, draft_sampled.to(device).roll(-1).to(torch.int64))
    if validate and L:
        lo, hi = int(draft_ids.min()), int(draft_ids.max())
        if lo < -1 or hi >= W:
            bad = int(((draft_ids < -1) | (draft_ids >= W)).nonzero()[0, 0])
            r = int(np.searchsorted(cu, bad, side="right") - 1)
            raise ValueError(f"draft_sampled holds the draft {int(draft_ids[bad])} of request {r} (logits row {bad}), outside [0, {W}) "
                             "and not the placeholder -1: pass the proposer's token ids of this vocabulary")
    else:  # not a token of either side: decided as a placeholder (never an index out of range)
        draft_ids = torch.where((draft_ids < -1) | (draft_ids >= W), -1, draft_ids)
    # read as logits: token-only drafts form no softmax row but the rejected ones; past V the target has no token
    target = logits if W == V else torch.nn.functional.pad(logits, (0, W - V), value=-torch.inf)
    req = torch.repeat_interleave(torch.arange(B, device=device), torch.as_tensor(n, device=device), output_size=L)
    q = None
    if draft_logits is not None:
        step = torch.arange(L, device=device) - torch.as_tensor(cu[:-1], device=device)[req]
        t = torch.as_tensor(np.where(greedy, 1.0, temps), dtype=torch.float32, device=device)[req]
        drafted = draft_logits.to(device)[states[req], step.clamp(max=draft_logits.shape[1] - 1)].to(torch.float32)
        # The bonus row's q is never read (a placeholder): a uniform row there, so that a step the
        # proposer did not write (vLLM may fill those with −inf) is not taken for a row without a law.
        drafted = drafted.masked_fill(last[:, None], 0.0)
        q = torch.softmax(drafted / t[:, None], dim=-1)
        if q.shape[-1] < W:  # the target's tokens past the drafter's head: q = 0 there
            q = torch.nn.functional.pad(q, (0, W - q.shape[-1]))
    if uniforms is None:
        # block verification reads u0 past the emitted positions, which the next step drafts again: key by the step too
        local = (torch.arange(L, device=device) - torch.as_tensor(cu[:-1], device=device)[req]) if method == "block" else None
        u = position_uniforms(seeds.to(device)[states][req], pos.to(device), local)
    else:
        u = torch.as_tensor(uniforms, dtype=torch.float64, device=device).reshape(L, 2)
    divergence, budget = (config.divergence, config.budget) if settings is None else settings[:2]
    price = settings[2] if settings is not None and len(settings) > 2 else None
    draft_ids, q, target, u = _on_host(price, draft_ids, q, target, u)
    out = rejection_sample(draft_ids, n.tolist(), q, target, torch.zeros((B, 1), dtype=torch.int64, device=target.device), divergence=divergence,
                           budget=budget, is_greedy=greedy, uniforms=u, zeros=config.zeros, validate=validate, logits=True, method=method,
                           **({} if price is None else {"price": price}))
    out = torch.as_tensor(out, device=device).to(torch.int64)[:, : num_speculative_steps + 1]
    sampled = torch.full((B, num_speculative_steps + 1), -1, dtype=torch.int64, device=device)
    sampled[:, : out.shape[1]] = out
    return sampled, (sampled >= 0).sum(-1).to(torch.int32)


def _make_v2_class(base):
    class MentoredRejectionSamplerV2(base):
        """vLLM's v2 model runner's rejection sampler with mentored verification: vLLM's chunking,
        logprobs and accounting, and :func:`verify_logits` in place of its rejection kernels."""

        def __init__(self, sampler, spec_config, device, *, watermark_key=None, config: MentoredConfig | None = None):
            method = check_engine(spec_config, watermark_key=watermark_key)
            base.__init__(self, sampler, spec_config, device, watermark_key=watermark_key)
            self.mentored_config = config or config_from_env() or MentoredConfig()
            self.mentored_method = method
            _check_vocabularies(spec_config, self.mentored_config)
            self._slots = {}  # request-state slot -> (divergence, budget): the v2 runner keeps no SamplingParams
            add_request = getattr(sampler, "add_request", None)
            if add_request is not None:
                def add_request_with_setting(req_idx, sampling_params, *args, **kwargs):
                    # every request passes here before it is scheduled, and a slot is added again before reuse
                    self._slots[req_idx] = _engine_setting(sampling_params, self.mentored_config, f"the request in slot {req_idx}")
                    return add_request(req_idx, sampling_params, *args, **kwargs)

                sampler.add_request = add_request_with_setting
            logger.info("mentored: vLLM's v2 rejection sampler verifies with %r (method=%r)%s", self.mentored_config, method,
                        ", and each request's extra_args" if add_request is not None else "")

        def request_settings(self, idx_mapping_np):
            """(divergences, budgets, prices) of the batch's requests, by their state slots (prices NaN
            where by budget, None where no request has one); None where all are the process default."""
            default = (self.mentored_config.divergence, self.mentored_config.budget, math.nan)
            found = [self._slots.get(int(slot), default) for slot in np.asarray(idx_mapping_np)]
            if all(f[:2] == default[:2] and math.isnan(f[2]) for f in found):
                return None
            return [d for d, _, _ in found], np.array([b for _, b, _ in found]), _prices([p for _, _, p in found])

        def _verify_in_chunks(self, logits, input_batch, *args, **kwargs):
            # vLLM's chunking hands _verify the device copy of each chunk's layout only: keep the
            # batch's host copy, and where in it the next chunk starts, so no chunk reads the device.
            self._layout = [input_batch.cu_num_logits_np, 0]
            try:
                return base._verify_in_chunks(self, logits, input_batch, *args, **kwargs)
            finally:
                self._layout = None

        def _host_layout(self, cu_num_logits, num_logits: int, num_reqs: int):
            layout = getattr(self, "_layout", None)
            if layout is not None:
                cu_np, start = layout
                chunk = np.asarray(cu_np[start : start + num_reqs + 1], dtype=np.int64)
                if len(chunk) == num_reqs + 1 and chunk[-1] - chunk[0] == num_logits:
                    layout[1] = start + num_reqs
                    return chunk - chunk[0]
            return cu_num_logits  # another caller, or a layout the host copy does not describe: read the device's

        def _verify(self, logits, draft_logits, draft_sampled, pos, cu_num_logits, idx_mapping, idx_mapping_np, expanded_idx_mapping,
                    expanded_local_pos, seq_lens_upper_bound_np, verify_draft_sampled):
            processed = self.sampler.apply_sampling_params(logits, expanded_idx_mapping, idx_mapping, idx_mapping_np, pos, draft_sampled,
                                                           expanded_local_pos, seq_lens_upper_bound_np)
            states = self.sampler.sampling_states
            cu = self._host_layout(cu_num_logits, int(logits.shape[0]), len(idx_mapping_np))
            sampled, num_sampled = verify_logits(processed, draft_logits, verify_draft_sampled, cu, pos, idx_mapping, states.temperature.np,
                                                 states.seeds.gpu, self.num_speculative_steps, self.mentored_config,
                                                 idx_mapping_np=idx_mapping_np, validate=False, settings=self.request_settings(idx_mapping_np),
                                                 method=self.mentored_method)
            return processed, sampled, num_sampled

    return MentoredRejectionSamplerV2


# (module, attribute) of each rejection sampler vLLM builds, and the modules that import its name.
_V1 = ("vllm.v1.sample.rejection_sampler", ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.tpu_model_runner"))
_V2 = ("vllm.v1.worker.gpu.spec_decode.rejection_sampler", ("vllm.v1.worker.gpu.model_runner",))


def _swap(module_name: str, importers, make) -> bool:
    """Replace ``RejectionSampler`` of ``module_name`` (imported here) and of the importers already loaded."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False  # this vLLM has no such runner
    if not getattr(module.RejectionSampler, "_mentored", False):
        cls = make(module.RejectionSampler)
        cls._mentored = True
        module.RejectionSampler = cls
    for name in importers:
        m = sys.modules.get(name)
        if m is not None and hasattr(m, "RejectionSampler"):
            m.RejectionSampler = module.RejectionSampler
    return True


def _check_requests(default: MentoredConfig) -> None:
    """Check each request's ``extra_args`` (:func:`request_setting`) where vLLM checks its sampling
    parameters (``SamplingParams.verify``, called when the engine admits the request, in the process
    that receives it): a bad value is vLLM's own per-request ``VLLMValidationError`` (``LLM.generate``
    raises it, the OpenAI server answers 400 naming ``extra_args``), and the engine goes on."""
    try:
        from vllm.sampling_params import SamplingParams
    except ImportError:
        return
    verify = SamplingParams.verify
    if getattr(verify, "_mentored", False):
        return

    try:
        from vllm.exceptions import VLLMValidationError as refused  # the OpenAI server answers it with 400
    except ImportError:
        refused = None

    def verify_with_mentored(self, *args, **kwargs):
        verify(self, *args, **kwargs)
        try:
            request_setting(self.extra_args, default)
        except ValueError as exc:
            if refused is None:
                raise
            raise refused(str(exc), parameter="extra_args", value=self.extra_args) from None

    verify_with_mentored._mentored = True
    SamplingParams.verify = verify_with_mentored


def register() -> None:
    """The ``vllm.general_plugins`` hook: swap vLLM's rejection samplers when ``MENTORED_*`` asks for it.

    Both model runners: the v1 runner's sampler (:class:`MentoredRejectionSampler`) and the v2
    runner's (``MentoredRejectionSamplerV2``, vLLM's default since 0.3x), each in its own module and in
    the runner modules already imported, whatever the import order. A setting under which either would
    not verify with mentored's rule makes the engine refuse to start (:func:`check_engine`).
    Idempotent (vLLM calls it once per process, possibly more). Does nothing without configuration.
    """
    cfg = config_from_env()
    if cfg is None:
        return
    _check_requests(cfg)
    done = [name for name, importers, make in ((_V1[0], _V1[1], _make_class), (_V2[0], _V2[1], _make_v2_class)) if _swap(name, importers, make)]
    if not done:
        raise MentoredRefusal(f"mentored verification was asked for ({cfg}) but this vLLM has neither rejection sampler it knows "
                              f"({_V1[0]}, {_V2[0]}): unset MENTORED_* or use a tested vLLM (docs/serving.md)")
    logger.info("mentored: rejection samplers of %s verify with %r", ", ".join(done), cfg)
