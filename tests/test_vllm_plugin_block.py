"""The vLLM plugin under ``rejection_sample_method="block"``: both runners' samplers verify with
``rejection_sample(..., method="block")`` at each request's budget (vLLM duck-typed, as in
tests/test_vllm_plugin.py, so that the suite runs without vLLM)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from scipy import stats

torch = pytest.importorskip("torch", reason="the plugin needs torch")

from mentored.integrations import vllm_plugin as vp  # noqa: E402
from mentored.verify.serving import rejection_sample  # noqa: E402
from test_vllm_plugin import _meta, _registered, _sampling, _v2_batch, _vllm_v2_rule  # noqa: E402


def _spec(method, **kw):
    return SimpleNamespace(num_speculative_tokens=3, rejection_sample_method=method, enable_adaptive_verification=False, **kw)


@pytest.mark.parametrize("runner_first", [True, False])
def test_block_is_honoured_by_both_runners_samplers(monkeypatch, runner_first):
    _, _, _, mods = _registered(monkeypatch, runner_first)
    v1 = mods["vllm.v1.sample.rejection_sampler"].RejectionSampler
    v2 = mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler
    for vllm_name, ours in (("standard", "token"), ("block", "block")):
        assert v1(object(), _spec(vllm_name), None).mentored_method == ours
        assert v2(object(), _spec(vllm_name), torch.device("cpu")).mentored_method == ours
    for other in ("synthetic", "fly"):
        with pytest.raises(vp.MentoredRefusal, match=f"rejection_sample_method='{other}'.*'standard' or 'block'"):
            v2(object(), _spec(other), torch.device("cpu"))


class _BlockDuckModelRunner:
    """What the v1 sampler reads of vLLM's v1 model runner (its requests, its batch, its drafter),
    the sampler built with ``rejection_sample_method="block"``."""

    def __init__(self, extra_args, draft_sample_method="probabilistic", method="block"):
        self.requests = {f"r{b}": SimpleNamespace(sampling_params=SimpleNamespace(extra_args=e)) for b, e in enumerate(extra_args)}
        self.input_batch = SimpleNamespace(req_ids=list(self.requests))
        self.drafter = SimpleNamespace(_enable_probabilistic_draft_probs=False)  # what vLLM's v1 proposer sets for block
        spec = _spec(method, draft_sample_method=draft_sample_method)
        self.rejection_sampler = vp.MentoredRejectionSampler(None, spec, config=vp.MentoredConfig("kl", 0.0))


def test_the_v1_sampler_verifies_blocks_at_each_requests_budget(rng):
    """Forty requests of four drafts from a drafter near the target, at budgets inf, the default 0 and
    tv 0.2 in turn: the sampler's tokens are ``rejection_sample(method="block")``'s with the same
    generators, which here differ from token verification's (so the method does reach the call)."""
    B, k, V = 40, 4, 30
    budgets = [{"mentored_budget": "inf"}, None, {"mentored_divergence": "tv", "mentored_budget": 0.2}]
    runner = _BlockDuckModelRunner([budgets[b % 3] for b in range(B)])
    sampler = runner.rejection_sampler
    assert sampler.mentored_method == "block" and sampler.mentored_runner() is runner
    n = [k] * B
    logits = torch.tensor(rng.normal(size=(B * k, V)) * 2, dtype=torch.float32)
    q = torch.softmax(logits + torch.tensor(rng.normal(size=(B * k, V)), dtype=torch.float32), -1)
    draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(3))[:, 0]
    bonus = torch.tensor(rng.integers(0, V, (B, 1)))

    def generators():
        return {b: torch.Generator().manual_seed(b) for b in range(B)}

    sm = _sampling(np.ones(B), generators=generators())
    out = sampler(_meta(draft, n), q, logits, bonus, sm)
    for b in range(0, B, 3):  # budget inf: every draft and the bonus
        assert_array_equal(out[b].numpy(), list(draft[b * k : (b + 1) * k].numpy()) + [int(bonus[b, 0])])
    probs, greedy = vp.compute_target_probs(logits, n, sm)
    divs = [["kl", "kl", "tv"][b % 3] for b in range(B)]
    eps = [[math.inf, 0.0, 0.2][b % 3] for b in range(B)]
    kw = dict(divergence=divs, budget=eps, is_greedy=greedy.numpy())
    block = rejection_sample(draft, n, q, probs, bonus, generators=generators(), method="block", **kw)
    token = rejection_sample(draft, n, q, probs, bonus, generators=generators(), method="token", **kw)
    assert_array_equal(out.numpy(), block.numpy())
    assert not torch.equal(block, token), "the case must tell block from token verification"


@pytest.mark.parametrize("method,draft_sample_method,kept", [("block", "probabilistic", True), ("block", "greedy", False),
                                                             ("standard", "probabilistic", False)])
def test_the_v1_drafter_keeps_its_probabilities_under_block(method, draft_sample_method, kept):
    """vLLM's v1 proposers keep q only for ``standard`` (set by vLLM itself, untouched here); under
    ``block`` the plugin has them keep it where the drafts are sampled
    (``draft_sample_method="probabilistic"``), else they stay argmax drafts without q (token-only,
    verified token by token)."""
    runner = _BlockDuckModelRunner([None], draft_sample_method, method)
    assert runner.drafter._enable_probabilistic_draft_probs is kept
    assert not vp._keep_drafter_probs(None, _spec("block", draft_sample_method="probabilistic"))  # no runner: nothing to set


def _vllm_v2_block_rule(b, u):
    """vLLM 0.33.0's block verification (vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py:
    ``_compute_cumulative_log_p_kernel``, ``_compute_local_residual_mass_kernel``, the block branch of
    ``_rejection_kernel`` and ``_resample_kernel``), ported to Python with explicit uniforms, for dense
    drafts: w_{i+1} = min(w_i p(x_i)/q(x_i), 1); at draft i the test ``u0(row i) ≤ h`` with h the
    residual ratio of position i + 1 (w_{i+1} where no valid draft follows); τ the last passing i + 1;
    the token at τ from (w_τ p − q)_+ (from p at a placeholder or at the bonus row) by inverse CDF at u1
    (vLLM: Gumbel-max, the same law). Greedy requests: argmax, as in vLLM's standard rule."""
    cu = b["cu_num_logits"].tolist()
    out = []
    for r in range(len(cu) - 1):
        s, e = cu[r], cu[r + 1]
        state = int(b["idx_mapping"][r])
        temp = float(b["temperature"][state])
        n = e - s - 1
        if temp == 0:
            one = {k: v for k, v in b.items()}
            one["cu_num_logits"] = torch.tensor([0, e - s])
            for key in ("logits", "draft_sampled", "pos"):
                one[key] = b[key][s:e]
            one["idx_mapping"] = b["idx_mapping"][r : r + 1]
            out.append(_vllm_v2_rule(one, u[s:e])[0])
            continue
        p = torch.softmax(b["logits"][s:e].double(), -1)
        q = torch.softmax(b["draft_logits"][state, :n].double() / temp, -1)
        x = [int(t) for t in b["draft_sampled"][s + 1 : e]]
        m = next((i for i, t in enumerate(x) if t < 0), n)  # drafts before the first placeholder
        w = [1.0]
        for i in range(m):
            w.append(min(w[-1] * float(p[i, x[i]] / q[i, x[i]]), 1.0))
        tau = 0
        for i in range(m):
            if i + 1 < m:
                R = float((w[i + 1] * p[i + 1] - q[i + 1]).clamp(min=0).sum())
                den = R + 1.0 - w[i + 1]
                h = R / den if den > 0 else 1.0
            else:
                h = w[i + 1]
            if float(u[s + i][0]) <= h:
                tau = i + 1
        row = x[:tau]
        res = p[tau] if tau == m else (w[tau] * p[tau] - q[tau]).clamp(min=0)
        cdf = res.cumsum(0)
        row.append(int(torch.searchsorted(cdf, float(u[s + tau][1]) * cdf[-1], right=True).clamp(max=p.shape[1] - 1)))
        out.append(row)
    return out


@pytest.mark.parametrize("dense", [True, False])
def test_v2_layout_block_at_budget_zero_is_vllms_block_rule(rng, dense):
    """Budget 0, the same uniforms: dense drafts emit exactly the tokens of vLLM's block rule. Token-only
    drafts are verified token by token (vLLM runs its block rule on a one-hot q there: the same law,
    tests/test_block_vllm.py, other draws), so they emit vLLM's standard rule's tokens."""
    cfg = vp.MentoredConfig("kl", 0.0)
    differs = 0
    for trial in range(40):
        n = list(rng.integers(0, 5, 3))
        b = _v2_batch(rng, n, 12, greedy=[1] if trial % 2 else [], dense=dense)
        if trial % 5 == 0 and sum(n):  # a placeholder
            b["draft_sampled"][1 + int(np.argmax(n))] = -1
        if dense:  # the drafter near the target, the drafts sampled from it: blocks of accepted drafts
            for r, state in enumerate(b["idx_mapping"].tolist()):
                s = int(b["cu_num_logits"][r])
                for i in range(n[r]):
                    b["draft_logits"][state, i] = b["logits"][s + i] + 0.7 * torch.randn(12)
                    if int(b["draft_sampled"][s + i + 1]) >= 0:
                        b["draft_sampled"][s + i + 1] = int(torch.multinomial(torch.softmax(b["draft_logits"][state, i], -1), 1))
        u = rng.random((sum(n) + len(n), 2)) * 0.999 + 1e-4
        sampled, num = vp.verify_logits(**b, config=cfg, uniforms=u, method="block")
        got = [sampled[r, : int(num[r])].tolist() for r in range(len(n))]
        assert got == (_vllm_v2_block_rule(b, u) if dense else _vllm_v2_rule(b, u)), (trial, n)
        differs += got != _vllm_v2_rule(b, u)
    assert differs if dense else not differs  # dense: the block rule is not the standard one on these cases


def test_v2_block_uniforms_are_keyed_by_the_step_too(monkeypatch):
    """Block verification reads u0 at every draft position, past the emitted tokens too, and the next
    step drafts those positions again at a smaller index: their uniforms are keyed by (seed, position,
    index), so a position drafted again gets fresh ones; token verification keeps (seed, position)."""
    seeds, pos = torch.full((6,), 11), torch.tensor([5, 5, 5, 6, 6, 6])
    step = torch.tensor([0, 1, 2, 0, 1, 2])
    u = vp.position_uniforms(seeds, pos, step)
    assert torch.equal(u[[0, 3]], vp.position_uniforms(seeds[:2], pos[[0, 3]]))  # index 0: the token rule's pair
    assert len({tuple(r) for r in u.tolist()}) == 6
    seen = []
    real = vp.position_uniforms
    monkeypatch.setattr(vp, "position_uniforms", lambda s, p, st=None: seen.append(st) or real(s, p, st))
    b = _v2_batch(np.random.default_rng(0), [2, 3], 8)
    for method, want in (("token", None), ("block", [0, 1, 2, 0, 1, 2, 3])):
        seen.clear()
        vp.verify_logits(**b, config=vp.MentoredConfig("kl", 0.0), method=method)
        assert (seen[0] is None) if want is None else seen[0].tolist() == want


def test_v2_block_generation_over_rounds_is_unbiased():
    """Ports vLLM 0.33.0's ``test_multiround_rejection_sample_is_unbiased`` (tests/v1/spec_decode/
    test_rejection_sampler_utils.py, its block case with probabilistic drafts) to the plugin's v2
    layout with its own uniforms (no ``uniforms=``): 4096 sequences of 6 tokens over two tokens,
    p = (0.3, 0.7), q = (0.7, 0.3), rounds of k = 2 drafts, each request's positions advancing as vLLM's
    do (a position drafted again in the next round); every position has the target's law."""
    rng = np.random.default_rng(42)
    M, L, k = 4096, 6, 2
    p_row, q_row = np.array([0.3, 0.7]), np.array([0.7, 0.3])
    lp = torch.tensor(np.log(p_row), dtype=torch.float32)
    draft_logits = torch.tensor(np.log(q_row), dtype=torch.float32).expand(M, k, 2).contiguous()
    seq = np.full((M, L + k + 1), -1)
    seq[:, 0] = rng.choice(2, size=M, p=p_row)
    length = np.ones(M, dtype=int)
    seeds, temp = torch.as_tensor(rng.integers(0, 2**62, M)), torch.ones(M)
    accepted = 0
    while (length < L).any():
        active = np.flatnonzero(length < L)
        A = len(active)
        drafts = np.zeros((A, k + 1), dtype=np.int64)
        drafts[:, 1:] = rng.choice(2, size=(A, k), p=q_row)
        pos = (length[active][:, None] - 1 + np.arange(k + 1)[None]).reshape(-1)
        sampled, num = vp.verify_logits(lp.expand(A * (k + 1), 2).contiguous(), draft_logits, torch.as_tensor(drafts.reshape(-1)),
                                        np.arange(A + 1) * (k + 1), torch.as_tensor(pos), torch.as_tensor(active), temp, seeds, k,
                                        vp.MentoredConfig("kl", 0.0), validate=False, method="block")
        out, count = sampled.numpy(), num.numpy()
        for c in range(k + 1):
            ok = count > c
            seq[active[ok], length[active[ok]] + c] = out[ok, c]
        length[active] += count
        accepted += int((count - 1).sum())
    assert accepted > M / 2, "the case must accept drafts"
    for j in range(L):
        observed = np.bincount(seq[:, j], minlength=2)
        assert stats.chisquare(observed, p_row * M).pvalue > 1e-6, (j, observed)


def test_the_v2_sampler_verifies_with_its_method(monkeypatch):
    class Base:
        def __init__(self, sampler, spec_config, device, *, watermark_key=None):
            self.sampler, self.num_speculative_steps = sampler, spec_config.num_speculative_tokens

    calls = []
    monkeypatch.setattr(vp, "verify_logits", lambda *a, **kw: calls.append(kw["method"]) or (None, None))
    states = SimpleNamespace(temperature=SimpleNamespace(np=np.ones(4)), seeds=SimpleNamespace(gpu=torch.zeros(4, dtype=torch.int64)))
    sampler = SimpleNamespace(add_request=lambda *a: None, apply_sampling_params=lambda logits, *a: logits, sampling_states=states)
    cls = vp._make_v2_class(Base)
    for method, want in (("standard", "token"), ("block", "block")):
        rs = cls(sampler, _spec(method), "cpu", config=vp.MentoredConfig("kl", 0.0))
        rs._verify(torch.zeros((2, 4)), None, torch.zeros(2, dtype=torch.int64), torch.arange(2), torch.tensor([0, 2]), torch.tensor([0]),
                   np.array([0]), torch.tensor([0, 0]), torch.tensor([0, 1]), None, torch.zeros(2, dtype=torch.int64))
        assert calls[-1] == want
