"""mentored.hf.generate end to end on tiny randomly initialised GPT-2 models (no download)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
transformers = pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")

from mentored.hf import generate  # noqa: E402

VOCAB = 64


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Models this small run fastest on one thread; more only contend (and on a busy machine, badly).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    from transformers import GPT2Config, GPT2LMHeadModel

    def build(layers, seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=layers, n_head=2, bos_token_id=0, eos_token_id=1, initializer_range=1.0)
        return GPT2LMHeadModel(cfg).eval()

    return build(2, 0), build(1, 1)


@pytest.fixture(scope="module")
def llama():
    """A tiny Llama (rotary positions, grouped-query attention): the cache API beyond GPT-2."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(2)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=128, bos_token_id=0, eos_token_id=1, initializer_range=1.0,
    )
    return LlamaForCausalLM(cfg).eval()


def _record_inputs(model):
    """Input lengths of every forward call of ``model``, and the hook handle to remove."""
    lengths = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    return lengths, handle


def _record_accepted(monkeypatch):
    """Accepted drafts of every round, in order (wraps the verification step generate calls)."""
    import mentored.hf

    accepted = []
    step = mentored.hf.speculative_step

    def recording(*args, **kwargs):
        row = step(*args, **kwargs)
        accepted.append(int((row[0] >= 0).sum()) - 1)
        return row

    monkeypatch.setattr(mentored.hf, "speculative_step", recording)
    return accepted


def test_generate_runs_and_reports(models):
    target, draft = models
    prompt = torch.tensor([5, 6, 7, 8])
    ids, stats = generate(target, draft, prompt, max_new_tokens=20, k=3, divergence="kl", budget=0.1, seed=0)
    assert ids.shape == (1, 24) and ids.dtype == torch.int64
    assert torch.equal(ids[0, :4], prompt)
    assert int(ids.min()) >= 0 and int(ids.max()) < VOCAB
    assert stats.steps >= 20 / 4 and stats.emitted >= 20
    assert 0 <= stats.acceptance <= 1 and stats.per_position.shape == (3,)
    assert 1 / 4 <= stats.passes_per_token <= 1


def test_identical_models_accept_everything(models):
    target, _ = models
    ids, stats = generate(target, target, torch.tensor([[3, 4]]), max_new_tokens=15, k=4, budget=0.0, seed=1)
    # p = q at every position: π = p = q accepts each draft (u q_x < q_x for u < 1)
    assert stats.acceptance == 1.0 and stats.accepted == stats.drafted
    assert stats.passes_per_token == pytest.approx(stats.steps / stats.emitted) and stats.steps == 3


def test_budget_raises_acceptance_over_many_rounds(models):
    target, draft = models
    prompt = torch.tensor([9, 10, 11])
    acc = [generate(target, draft, prompt, max_new_tokens=16, k=4, divergence="tv", budget=b, seed=2)[1].acceptance for b in (0.0, 1.0)]
    assert acc[1] == 1.0 > acc[0]  # wide initialisation: p and q differ; budget 1 ≥ TV(p, q): π = q accepts every draft


def test_generate_refuses_bad_input(models):
    target, draft = models
    with pytest.raises(ValueError, match="one non-empty sequence"):
        generate(target, draft, torch.tensor([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="integer token ids"):
        generate(target, draft, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="k must be"):
        generate(target, draft, torch.tensor([1]), k=0)


def _assert_same_run(a, b):
    (ids_a, st_a), (ids_b, st_b) = a, b
    assert torch.equal(ids_a, ids_b), f"cached {ids_a.tolist()} != recomputed {ids_b.tolist()}"
    counts = ("steps", "drafted", "accepted", "emitted", "verified")
    assert [getattr(st_a, c) for c in counts] == [getattr(st_b, c) for c in counts]
    np.testing.assert_array_equal(st_a.per_position, st_b.per_position)  # NaN at unreached positions compares equal
    np.testing.assert_array_equal(st_a.tokens[0], st_b.tokens[0])


@pytest.mark.parametrize("pair, k", [("gpt2", 4), ("gpt2", 1), ("llama", 3)])
def test_cache_and_recompute_agree(models, llama, pair, k, monkeypatch):
    # The KV-cache check: the cached loop must see exactly the logits of a full recompute, so with
    # the same seed it makes the same draws and decisions. Keeping one rejected draft in either
    # cache (a crop off by one) shifts every later position and changes the tokens.
    target, draft = models
    if pair == "llama":
        target = llama  # Llama target, GPT-2 drafter: only the vocabulary is shared
    accepted = _record_accepted(monkeypatch)
    prompt = torch.tensor([5, 6, 7, 8, 9])
    kw = dict(max_new_tokens=40, k=k, divergence="tv", budget=0.6, seed=3)
    cached = generate(target, draft, prompt, **kw)
    rounds = list(accepted)
    _assert_same_run(cached, generate(target, draft, prompt, use_cache=False, **kw))
    assert accepted[len(rounds) :] == rounds
    # every kind of round happened: a rejection at the first draft, a later one, all k accepted
    assert 0 in rounds and k in rounds and (k == 1 or any(0 < n < k for n in rounds))


def test_cache_feeds_only_new_tokens(models, monkeypatch):
    target, draft = models
    k, prompt = 4, torch.tensor([5, 6, 7, 8, 9, 10])
    accepted = _record_accepted(monkeypatch)
    t_len, t_hook = _record_inputs(target)
    d_len, d_hook = _record_inputs(draft)
    try:
        ids, stats = generate(target, draft, prompt, max_new_tokens=30, k=k, divergence="tv", budget=0.6, seed=4)
    finally:
        t_hook.remove()
        d_hook.remove()
    # One target pass per round: the whole prompt and the drafts first, then the last token and k drafts.
    assert len(t_len) == stats.steps == len(accepted)
    assert t_len == [len(prompt) + k] + [k + 1] * (stats.steps - 1)
    # The drafter: k passes per round of one token each, except what its cache lacks at a round's
    # start (the prompt; after k accepted drafts, x_k and the bonus token).
    assert len(d_len) == k * stats.steps
    starts = [len(prompt)] + [2 if n == k else 1 for n in accepted[:-1]]
    assert d_len == [x for s in starts for x in [s] + [1] * (k - 1)]
    # The counts reported: target passes per emitted token, each round emitting its accepted drafts and one more.
    assert stats.emitted == sum(n + 1 for n in accepted) >= ids.shape[1] - len(prompt) == 30
    assert stats.passes_per_token == len(t_len) / stats.emitted
    assert stats.accepted == sum(accepted) and stats.mean_accepted == sum(accepted) / len(t_len)


def test_recompute_feeds_the_whole_prefix(models, monkeypatch):
    target, draft = models
    k, prompt = 3, torch.tensor([5, 6, 7])
    accepted = _record_accepted(monkeypatch)
    t_len, t_hook = _record_inputs(target)
    try:
        ids, stats = generate(target, draft, prompt, max_new_tokens=12, k=k, divergence="tv", budget=0.6, seed=5, use_cache=False)
    finally:
        t_hook.remove()
    prefix = np.cumsum([len(prompt)] + [n + 1 for n in accepted[:-1]])
    assert t_len == list(prefix + k) and len(t_len) == stats.steps
    assert stats.passes_per_token == stats.steps / stats.emitted
