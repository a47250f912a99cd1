"""The vLLM plugin per request: a price instead of a budget, log π in the returned logprobs, and the
divergence each request spent. vLLM's runner, metadata and logprobs tensors are duck-typed (as in
tests/test_vllm_plugin.py), so the suite runs without vLLM."""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

torch = pytest.importorskip("torch", reason="the plugin needs torch")

from mentored.integrations import vllm_plugin as vp  # noqa: E402
from mentored.verify.serving import rejection_sample  # noqa: E402


def _meta(draft, n):
    return SimpleNamespace(draft_token_ids=torch.as_tensor(draft, dtype=torch.int32), num_draft_tokens=list(n), max_spec_len=max(n))


def _sampling(temperature, generators=None):
    t = torch.as_tensor(temperature, dtype=torch.float32)
    greedy = t < 1e-5
    return SimpleNamespace(temperature=t, all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()), top_k=None, top_p=None,
                           generators=generators or {}, max_num_logprobs=None)


class _DuckModelRunner:
    """What the v1 sampler reads of vLLM's v1 model runner: the batch's request ids and the requests."""

    def __init__(self, extra_args, default=vp.MentoredConfig("kl", 0.0)):
        self.requests = {f"r{b}": SimpleNamespace(sampling_params=SimpleNamespace(extra_args=e)) for b, e in enumerate(extra_args)}
        self.input_batch = SimpleNamespace(req_ids=list(self.requests))
        self.rejection_sampler = vp.MentoredRejectionSampler(config=default)  # built in the runner's __init__, as vLLM does


def _batch(rng, n, V, seed=3):
    logits = torch.tensor(rng.normal(size=(sum(n), V)) * 1.5, dtype=torch.float32)
    q = torch.tensor(rng.dirichlet(np.ones(V), size=sum(n)), dtype=torch.float32)
    draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
    return logits, q, draft


def _gens(B):
    return {b: torch.Generator().manual_seed(10 + b) for b in range(B)}


# ---------------------------------------------------------------- a price per request


def test_a_price_is_read_and_checked_as_a_budget_is():
    default = vp.MentoredConfig("kl", 0.3)
    assert vp.request_options(None, default)[:2] == ("kl", 0.3) and math.isnan(vp.request_options(None, default)[2])
    for extra, said in (({"mentored_price": -1}, r"extra_args\['mentored_price'\]: price must be nonnegative"),
                        ({"mentored_price": "nan"}, r"extra_args\['mentored_price'\]: price must be a number"),
                        ({"mentored_price": True}, r"extra_args\['mentored_price'\]: price must be a number"),
                        ({"mentored_price": "1e400"}, r"price '1e400' overflows"),
                        ({"mentored_price": 1.0, "mentored_budget": 0.1}, r"both 'mentored_budget' \(0.1\) and 'mentored_price' \(1.0\)"),
                        ({"mentored_prize": 1.0}, r"unknown extra_args keys \['mentored_prize'\]")):
        with pytest.raises(ValueError, match=said):
            vp.request_options(extra, default)
    # a price replaces the budget (the process default's included): budget 0, the price beside it
    assert vp.request_options({"mentored_price": "2.5", "mentored_divergence": "tv"}, default) == ("tv", 0.0, 2.5)
    assert vp.request_options({"mentored_price": "inf"}, default) == ("kl", 0.0, math.inf)
    assert vp.request_setting({"mentored_price": 2.5}, default) == ("kl", 0.0)


def test_the_v1_sampler_hands_each_request_its_price(rng, monkeypatch):
    """The plumbing, whatever rejection_sample supports: budget 0 and the price for a priced request,
    NaN (its budget) for the others; no price= at all where no request of the step has one."""
    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        B = len(args[1])
        return torch.full((B, max(args[1]) + 1), -1, dtype=torch.int32)

    monkeypatch.setattr(vp, "rejection_sample", recording)
    n, V = [2, 1, 3], 12
    logits, q, draft = _batch(rng, n, V)
    runner = _DuckModelRunner([{"mentored_price": 0.5}, None, {"mentored_budget": 0.2}], vp.MentoredConfig("kl", 0.1))
    runner.rejection_sampler(_meta(draft, n), q, logits, torch.zeros((3, 1), dtype=torch.int64), _sampling([1.0] * 3))
    assert_allclose(calls[-1]["budget"], [0.0, 0.1, 0.2])
    assert_array_equal(np.isnan(calls[-1]["price"]), [False, True, True])
    assert calls[-1]["price"][0] == 0.5
    runner2 = _DuckModelRunner([None, {"mentored_budget": 0.2}, None])
    runner2.rejection_sampler(_meta(draft, n), q, logits, torch.zeros((3, 1), dtype=torch.int64), _sampling([1.0] * 3))
    assert "price" not in calls[-1]


def test_the_v2_sampler_hands_each_slot_its_price(rng):

    class Base:
        def __init__(self, sampler, spec_config, device, *, watermark_key=None):
            self.sampler = sampler

    sampler = SimpleNamespace(add_request=lambda idx, params: None)
    rs = vp._make_v2_class(Base)(sampler, SimpleNamespace(rejection_sample_method="standard"), "cpu", config=vp.MentoredConfig("kl", 0.0))
    sampler.add_request(4, SimpleNamespace(extra_args={"mentored_price": 3.0}))
    sampler.add_request(1, SimpleNamespace(extra_args={"mentored_budget": 0.4}))
    divs, budgets, prices = rs.request_settings(np.array([1, 4]))
    assert divs == ["kl", "kl"]
    assert_array_equal(budgets, [0.4, 0.0])
    assert np.isnan(prices[0]) and prices[1] == 3.0
    assert rs.request_settings(np.array([1]))[2] is None


def test_a_priced_request_is_verified_as_rejection_sample_verifies_it(rng):
    n, V = [4, 3, 2], 20
    logits, q, draft = _batch(rng, n, V)
    bonus = torch.tensor([[5], [6], [7]])
    runner = _DuckModelRunner([{"mentored_price": 0.3}, {"mentored_price": "inf"}, {"mentored_divergence": "tv", "mentored_budget": 0.2}])
    sm = _sampling([1.0] * 3, generators=_gens(3))
    out = runner.rejection_sampler(_meta(draft, n), q, logits, bonus, sm)
    probs, greedy = vp.compute_target_probs(logits, n, sm)
    ref = rejection_sample(draft, n, q, probs, bonus, divergence=["kl", "kl", "tv"], budget=[0.0, 0.0, 0.2], price=[0.3, math.inf, math.nan],
                           is_greedy=greedy.numpy(), generators=_gens(3))
    assert_array_equal(out.numpy(), ref.numpy())
    # price inf is lossless: request 1 as at budget 0
    lossless = rejection_sample(draft, n, q, probs, bonus, divergence=["kl", "kl", "tv"], budget=[0.0, 0.0, 0.2], is_greedy=greedy.numpy(),
                                generators=_gens(3))
    assert_array_equal(out[1].numpy(), lossless[1].numpy())


# ---------------------------------------------------------------- logprobs: log π of the sampled token


@dataclass
class _SamplingMetadata:  # vLLM's is a dataclass: the plugin copies it with dataclasses.replace
    temperature: torch.Tensor
    all_greedy: bool
    all_random: bool
    top_k: object
    top_p: object
    generators: dict
    max_num_logprobs: int | None


class _LogprobsTensors(NamedTuple):  # vLLM's LogprobsTensors, reduced to the fields the plugin touches
    logprob_token_ids: torch.Tensor
    logprobs: torch.Tensor
    selected_token_ranks: torch.Tensor


def _fake_v1(monkeypatch, bonus_tokens):
    """vLLM's later v1 rejection sampler as the plugin calls it: a Sampler drawing the bonus tokens, and
    ``_get_logprobs_tensors`` laying one row per (request, column) with the sampled token's log p first."""
    monkeypatch.setitem(sys.modules, "vllm.v1.outputs", SimpleNamespace(SamplerOutput=lambda **kw: SimpleNamespace(**kw)))

    class Base(torch.nn.Module):
        is_processed_logprobs_mode = False

        def __init__(self, sampler):
            super().__init__()
            self.sampler = sampler

        def _get_logprobs_tensors(self, k, metadata, logits, rows, bonus_logprobs, sampled):
            B, W = sampled.shape
            logp = torch.log_softmax(rows, -1)
            lp = torch.full((B * W, k + 1), -99.0)
            start = 0
            for b, nb in enumerate(metadata.num_draft_tokens):
                for j in range(W):
                    tok = int(sampled[b, j])
                    if tok >= 0 and j < nb:
                        lp[b * W + j, 0] = logp[start + j, tok]
                start += nb
            return _LogprobsTensors(torch.zeros((B * W, k + 1), dtype=torch.int64), lp, torch.zeros(B * W, dtype=torch.int64))

    def sampler(logits, sampling_metadata, **_):
        return SimpleNamespace(sampled_token_ids=bonus_tokens, logprobs_tensors=SimpleNamespace(logprobs=None))

    return vp._make_class(Base), sampler


def test_the_sampled_tokens_logprob_is_log_pi(rng, monkeypatch):
    n, V = [3, 2, 4], 16
    logits, q, draft = _batch(rng, n, V)
    bonus = torch.tensor([[1], [2], [3]])
    cls, sampler = _fake_v1(monkeypatch, bonus)
    rs = cls(sampler, config=vp.MentoredConfig("tv", 0.3))
    meta = _meta(draft, n)
    meta.target_logits_indices = torch.arange(sum(n))
    meta.bonus_logits_indices = torch.arange(sum(n), sum(n) + 3)
    full = torch.cat([logits, torch.zeros((3, V))])
    sm = _SamplingMetadata(**{**vars(_sampling([1.0] * 3, generators=_gens(3))), "max_num_logprobs": 2})
    out = rs(meta, q, full, sm)
    probs, greedy = vp.compute_target_probs(logits, n, sm)
    ref = rejection_sample(draft, n, q, probs, bonus, divergence="tv", budget=0.3, is_greedy=greedy.numpy(), generators=_gens(3), return_logprobs=True)
    assert_array_equal(out.sampled_token_ids.numpy(), ref.tokens.numpy())
    lp = out.logprobs_tensors.logprobs[:, 0].reshape(3, -1).double().numpy()
    emitted = ~np.isnan(ref.logprobs)
    assert emitted.sum() > 3
    assert_allclose(lp[emitted], ref.logprobs[emitted], rtol=1e-5)
    # where log π differs from log p the target's value was replaced (at budget 0.3 some tokens have π ≠ p)
    assert np.abs(ref.logprobs - ref.target_logprobs)[emitted].max() > 1e-3
    # the bonus column (no value from mentored: the target's law, drawn by vLLM's sampler) keeps vLLM's
    assert (lp[~emitted] == -99.0).all()
    # the top-k entries stay vLLM's
    assert (out.logprobs_tensors.logprobs[:, 1:] == -99.0).all()


def test_logprobs_of_an_unknown_layout_are_left_as_vllms(caplog):
    t = _LogprobsTensors(torch.zeros((4, 2), dtype=torch.int64), torch.full((4, 2), -1.0), torch.zeros(4, dtype=torch.int64))
    with caplog.at_level(logging.WARNING, logger="vllm.mentored"):
        same = vp._sampled_logprobs_of_pi(t, np.zeros((1, 3)))
    assert same is t and "do not match" in caplog.text
    changed = vp._sampled_logprobs_of_pi(t, np.array([[-0.5, np.nan], [-2.0, np.nan]]))
    assert_array_equal(changed.logprobs[:, 0].numpy(), [-0.5, -1.0, -2.0, -1.0])
    assert (t.logprobs == -1.0).all()  # vLLM's tensor is not written in place


# ---------------------------------------------------------------- divergence spent per request


def test_the_divergence_each_request_spent_is_summed_over_its_tokens(rng, monkeypatch, caplog):
    monkeypatch.setattr(vp, "TRACK_SPENT", True)
    monkeypatch.setattr(vp, "_SPENT", {})
    monkeypatch.setattr(vp, "_FINISHED", {})
    n, V = [3, 2, 3], 14
    runner = _DuckModelRunner([{"mentored_budget": 0.4}, None, {"mentored_divergence": "tv", "mentored_budget": 0.2}])
    expected = np.zeros(3)
    for step in range(2):
        logits, q, draft = _batch(rng, n, V, seed=step)
        bonus = torch.tensor([[1], [2], [3]])
        sm = _sampling([1.0] * 3, generators=_gens(3))
        out = runner.rejection_sampler(_meta(draft, n), q, logits, bonus, sm)
        probs, greedy = vp.compute_target_probs(logits, n, sm)
        ref = rejection_sample(draft, n, q, probs, bonus, divergence=["kl", "kl", "tv"], budget=[0.4, 0.0, 0.2], is_greedy=greedy.numpy(),
                               generators=_gens(3), return_logprobs=True)
        assert isinstance(out, torch.Tensor)  # tracking does not change what vLLM is handed
        assert_array_equal(out.numpy(), ref.tokens.numpy())
        expected += np.nansum(ref.spent, axis=1)
    assert expected[0] > 0 and expected[2] > 0
    assert_allclose([vp.spent(f"r{b}") for b in range(3)], expected, rtol=1e-12)
    assert abs(vp.spent("r1")) < 1e-9  # budget 0: lossless, nothing spent
    # r0 finishes: the runner drops it; its total stays readable and is logged at the next step
    del runner.requests["r0"]
    runner.input_batch.req_ids = ["r1", "r2"]
    logits, q, draft = _batch(rng, [2, 3], V, seed=7)
    with caplog.at_level(logging.DEBUG, logger="vllm.mentored"):
        runner.rejection_sampler(_meta(draft, [2, 3]), q, logits, torch.tensor([[1], [2]]), _sampling([1.0] * 2))
    assert "request r0 finished" in caplog.text
    assert vp.spent("r0") == pytest.approx(expected[0], rel=1e-12) and "r0" in vp._FINISHED and "r0" not in vp._SPENT
    with pytest.raises(KeyError, match="no divergence recorded for request 'r9'"):
        vp.spent("r9")


def test_without_tracking_nothing_is_recorded(rng, monkeypatch):
    monkeypatch.setattr(vp, "TRACK_SPENT", False)
    monkeypatch.setattr(vp, "_SPENT", {})
    monkeypatch.setattr(vp, "_FINISHED", {})
    runner = _DuckModelRunner([{"mentored_budget": 0.4}])
    logits, q, draft = _batch(rng, [3], 10)
    runner.rejection_sampler(_meta(draft, [3]), q, logits, torch.tensor([[1]]), _sampling([1.0]))
    with pytest.raises(KeyError, match="tracking is off"):
        vp.spent("r0")


def _v2_inputs(rng, n, V):
    """verify_logits inputs (request-state index r + 1), every draft a token of both laws."""
    B = len(n)
    cu = np.concatenate([[0], np.cumsum(np.asarray(n) + 1)])
    L = int(cu[-1])
    return dict(logits=torch.as_tensor(rng.normal(size=(L, V)), dtype=torch.float32),
                draft_logits=torch.as_tensor(rng.normal(size=(B + 1, max(n), V)), dtype=torch.float32),
                draft_sampled=torch.as_tensor(rng.integers(0, V, L)), cu_num_logits=torch.as_tensor(cu), pos=torch.arange(L) + 3,
                idx_mapping=torch.arange(B) + 1, temperature=torch.ones(B + 1), seeds=torch.as_tensor(rng.integers(0, 2**62, B + 1)),
                num_speculative_steps=max(n))


def test_the_v2_layout_verifies_a_priced_request_at_its_price(rng):
    """Price 0 (divergence free) lets π be q itself: every draft accepted; price inf is lossless (budget 0,
    the same decisions given the same uniforms); a request without a price keeps its budget."""
    n, V = [4, 4, 4], 10
    b = _v2_inputs(rng, n, V)
    cfg = vp.MentoredConfig("kl", 0.0)
    u = rng.random((sum(n) + 3, 2)) * 0.999 + 1e-4
    u[:4, 0] = 0.999  # request 0's drafts: accepted at budget 0 only where p_x ≥ 0.999 q_x, at price 0 (π = q) always
    lossless, num0 = vp.verify_logits(**b, config=cfg, uniforms=u)
    assert int(num0[0]) < 5  # at budget 0 request 0 rejects a draft: the test below can fail
    sampled, num = vp.verify_logits(**b, config=cfg, uniforms=u, settings=(["kl"] * 3, np.zeros(3), np.array([0.0, math.inf, math.nan])))
    assert int(num[0]) == 5  # all four drafts and the bonus row's token
    assert_array_equal(sampled[0, :4].numpy(), b["draft_sampled"][1:5].numpy())
    assert_array_equal(sampled[1:].numpy(), lossless[1:].numpy())
