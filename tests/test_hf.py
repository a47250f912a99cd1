"""mentored.integrations.hf.generate end to end on tiny randomly initialised GPT-2 models (no download)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
transformers = pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")

from mentored.integrations.hf import generate, sampling_probs  # noqa: E402

VOCAB = 64


pytestmark = pytest.mark.usefixtures("torch_one_thread")


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
    import mentored.integrations.hf

    accepted = []
    step = mentored.integrations.hf.speculative_step

    def recording(*args, **kwargs):
        row = step(*args, **kwargs)
        tokens = row[0] if isinstance(row, tuple) else row  # an Emitted (tokens, logprobs), or the tokens
        accepted.append(int((tokens[0] >= 0).sum()) - 1)
        return row

    monkeypatch.setattr(mentored.integrations.hf, "speculative_step", recording)
    return accepted


def test_generate_runs_and_reports(models):
    target, draft = models
    prompt = torch.tensor([5, 6, 7, 8])
    ids, stats = generate(target, draft, prompt, max_new_tokens=20, k=3, divergence="kl", budget=0.1, seed=0)
    assert ids.shape == (1, 24) and ids.dtype == torch.int64
    assert torch.equal(ids[0, :4], prompt)
    assert int(ids.min()) >= 0 and int(ids.max()) < VOCAB
    assert stats.steps >= 20 / 4 and stats.emitted == 20
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
    with pytest.raises(ValueError, match="non-empty batch"):
        generate(target, draft, torch.zeros((2, 0), dtype=torch.int64))
    with pytest.raises(ValueError, match="padding must be on the left"):
        generate(target, draft, torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 0], [1, 1]]))
    with pytest.raises(ValueError, match="at least one prompt token"):
        generate(target, draft, torch.tensor([[1, 2], [3, 4]]), torch.tensor([[0, 0], [1, 1]]))
    with pytest.raises(ValueError, match="positions"):
        generate(target, draft, torch.tensor([1, 2]), max_new_tokens=200)
    with pytest.raises(ValueError, match="streamer"):
        generate(target, draft, torch.tensor([[1, 2], [3, 4]]), streamer=object())
    with pytest.raises(ValueError, match="top_p"):
        generate(target, draft, torch.tensor([1]), top_p=0.0)
    with pytest.raises(TypeError, match="integer token ids"):
        generate(target, draft, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="k must be"):
        generate(target, draft, torch.tensor([1]), k=0)


def test_token_ids_outside_the_vocabulary_are_refused(models):
    # An id the embedding has no row for is refused by name and place, not by an IndexError.
    target, draft = models
    with pytest.raises(ValueError, match=rf"input_ids\[1, 2\] = {VOCAB}: token ids must lie in \[0, {VOCAB}\), the target's vocabulary"):
        generate(target, draft, torch.tensor([[1, 2, 3], [4, 5, VOCAB]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=rf"input_ids\[0\] = -1: token ids must lie in \[0, {VOCAB}\)"):
        generate(target, draft, torch.tensor([-1, 2, 3]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"input_ids\[2\] = 100000"):
        generate(target, draft, [4, 5, 100000], max_new_tokens=2)
    from mentored.integrations.hf import probs_along

    with pytest.raises(ValueError, match=rf"ids\[1\] = {VOCAB}: token ids must lie in \[0, {VOCAB}\)"):
        probs_along(target, [3, VOCAB, 4])
    # Padding is never fed: any id may fill it.
    seq, _ = generate(target, draft, torch.tensor([[-1, 2, 3], [4, 5, 6]]), torch.tensor([[0, 1, 1], [1, 1, 1]]), max_new_tokens=2, seed=0)
    assert seq.shape == (2, 5)


def test_a_left_padded_batch_without_a_mask_is_refused(models, monkeypatch):
    # Without attention_mask every token is prompt: leading pad tokens would be decoded as text.
    # A pad id the call or the target knows, leading some row of a batch, is refused.
    target, draft = models
    ids = torch.tensor([[0, 0, 5, 6], [3, 4, 5, 6]])
    with pytest.raises(ValueError, match=r"attention_mask is None but row 0 of input_ids starts with pad_token_id 0.*pass attention_mask"):
        generate(target, draft, ids, max_new_tokens=2, pad_token_id=0)
    monkeypatch.setattr(target.config, "pad_token_id", 0)
    with pytest.raises(ValueError, match=r"row 0 of input_ids starts with pad_token_id 0"):
        generate(target, draft, ids, max_new_tokens=2)
    monkeypatch.setattr(target.config, "pad_token_id", None)
    monkeypatch.setattr(target.generation_config, "pad_token_id", 0)
    with pytest.raises(ValueError, match=r"row 0 of input_ids starts with pad_token_id 0"):
        generate(target, draft, ids, max_new_tokens=2)
    # The way out: a mask, all ones where the leading tokens are real. One row, no pad id: as given.
    for mask in (torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), torch.ones_like(ids)):
        assert generate(target, draft, ids, mask, max_new_tokens=2, seed=0)[0].shape == (2, 6)
    assert generate(target, draft, ids[:1], max_new_tokens=2, seed=0)[0].shape == (1, 6)
    monkeypatch.setattr(target.generation_config, "pad_token_id", None)
    assert generate(target, draft, ids, max_new_tokens=2, seed=0)[0].shape == (2, 6)
    # A pad id that is also the start token: rows that each start with one of it are prompts.
    monkeypatch.setattr(target.config, "pad_token_id", 0)
    monkeypatch.setattr(target.config, "bos_token_id", 0)
    assert generate(target, draft, torch.tensor([[0, 5, 6], [0, 4, 6]]), max_new_tokens=2, seed=0)[0].shape == (2, 5)
    with pytest.raises(ValueError, match=r"row 1 of input_ids starts with pad_token_id 0"):
        generate(target, draft, torch.tensor([[0, 5, 6], [0, 0, 6]]), max_new_tokens=2)


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
    # The counts reported: target passes per returned token, each round emitting its accepted drafts
    # and one more, the last round cut to the 30 tokens asked for.
    before = sum(n + 1 for n in accepted[:-1])
    assert before < 30 <= before + accepted[-1] + 1
    assert stats.emitted == ids.shape[1] - len(prompt) == 30
    assert stats.passes_per_token == len(t_len) / 30
    kept = sum(accepted[:-1]) + min(accepted[-1], 30 - before)
    assert stats.accepted == kept and stats.mean_accepted == kept / len(t_len)


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


# ---------------------------------------------------------------------------------------------------
# Batches: left padding, rows finishing independently, per-row statistics, sampling warpers

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23], [30], [40, 41, 42]]


def left_padded(prompts, pad=0):
    from mentored.integrations.hf import left_pad

    L = max(map(len, prompts))
    ids = torch.tensor([[pad] * (L - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    got = left_pad(prompts, pad)
    assert torch.equal(got[0], ids) and torch.equal(got[1], mask)
    return ids, mask


def greedy(model, prompt, n):
    """The target's own greedy decoding (HF generate, one unpadded row)."""
    out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


def assert_greedy_invariant(target, draft, prompts, n, cases, k=3):
    ids, mask = left_padded(prompts)
    want = [greedy(target, p, n) for p in prompts]
    for divergence, budget in cases:
        seq, stats = generate(target, draft, ids, mask, k=k, divergence=divergence, budget=budget, max_new_tokens=n, top_k=1, seed=0)
        assert seq.shape == (len(prompts), ids.shape[1] + n)
        assert torch.equal(seq[:, : ids.shape[1]], ids)
        for b in range(len(prompts)):
            assert seq[b, ids.shape[1] :].tolist() == want[b], f"row {b}, {divergence} at budget {budget}"
            assert stats.rows[b].tokens[0].tolist() == want[b]


@pytest.mark.parametrize("pair", ["gpt2", "llama"])
def test_greedy_invariant_on_a_padded_batch(models, llama, pair):
    # top_k=1: p is one-hot; π ≪ p under kl at any budget, π = p at budget 0 under any divergence,
    # and zeros="keep" makes π = p at any budget under every divergence: the target's greedy decoding.
    target, draft = models
    if pair == "llama":
        target = llama
    cases = [("kl", 1.0), ("kl", 0.1), ("kl", 0.0), ("tv", 0.0), ("hellinger", 0.0), ("tv", 1.0), ("hellinger", 2.0), ("reverse_kl", 0.5)]
    assert_greedy_invariant(target, draft, PROMPTS, 12, cases)


@pytest.mark.parametrize("slack", [0.0, 0.125, 10.0])
def test_padded_batch_cache_and_recompute_agree(models, slack, monkeypatch):
    # The per-row crop: after rows accept different numbers of drafts and drop out of the batch, the
    # caches (compacted every round, now and then, or only when a row finishes, holes masked in
    # between) must give the logits of a full recompute, hence the same draws and decisions.
    import mentored.integrations.hf

    monkeypatch.setattr(mentored.integrations.hf, "_COMPACT_SLACK", slack)
    target, draft = models
    ids, mask = left_padded(PROMPTS)
    kw = dict(k=3, divergence="tv", budget=0.6, max_new_tokens=25, seed=3)
    a = generate(target, draft, ids, mask, **kw)
    b = generate(target, draft, ids, mask, use_cache=False, **kw)
    assert torch.equal(a[0], b[0])
    for ra, rb in zip(a[1].rows, b[1].rows):
        assert (ra.steps, ra.accepted, ra.verified, ra.emitted) == (rb.steps, rb.accepted, rb.verified, rb.emitted)
    rounds = [r.steps for r in a[1].rows]
    assert len(set(rounds)) > 1  # rows accepted different numbers of drafts and finished at different rounds
    assert a[1].rounds == max(rounds)


def test_rows_finish_independently_at_eos(models):
    target, draft = models
    ids, mask = left_padded(PROMPTS)
    free, _ = generate(target, draft, ids, mask, k=2, budget=0.0, max_new_tokens=30, seed=7)
    L = ids.shape[1]
    eos = int(free[0, L + 3])  # the fourth token of row 0 under these draws
    seq, stats = generate(target, draft, ids, mask, k=2, budget=0.0, max_new_tokens=30, seed=7, eos_token_id=eos, pad_token_id=63)
    for b in range(len(PROMPTS)):
        toks = stats.rows[b].tokens[0].tolist()
        if eos in toks:
            assert toks.index(eos) == len(toks) - 1  # stops right after its eos
            assert (seq[b, L + len(toks) :] == 63).all()
        else:
            assert len(toks) == 30
    assert len(stats.rows[0].tokens[0]) <= 4


def test_per_row_statistics(models):
    target, draft = models
    ids, mask = left_padded(PROMPTS)
    seq, stats = generate(target, draft, ids, mask, k=4, divergence="kl", budget=0.5, max_new_tokens=20, seed=8)
    for r in stats.rows:
        assert r.drafted == 4 * r.steps and r.emitted == len(r.tokens[0]) == 20
        assert r.accepted <= r.emitted <= r.accepted + r.steps
        assert r.per_position.shape == (4,) and 1 / 5 <= r.passes_per_token <= 1
    assert stats.steps == sum(r.steps for r in stats.rows) and stats.accepted == sum(r.accepted for r in stats.rows)
    assert set(stats.seconds) == {"draft", "target", "verify", "cache", "total"}
    assert stats.seconds["total"] >= stats.seconds["draft"] + stats.seconds["target"]


def test_statistics_count_only_the_tokens_returned(models, monkeypatch):
    target, draft = models
    # p = q: every draft is accepted, and a round of k = 4 would emit 5 tokens; one is asked for.
    seq, stats = generate(target, target, torch.tensor([[3, 4]]), max_new_tokens=1, k=4, budget=0.0, seed=1)
    assert seq.shape == (1, 3) and stats.emitted == 1 == len(stats.rows[0].tokens[0])
    assert (stats.steps, stats.drafted, stats.accepted, stats.verified) == (1, 4, 1, 1)
    assert stats.acceptance == 1.0 and stats.passes_per_token == 1.0
    assert stats.per_position[0] == 1.0 and np.isnan(stats.per_position[1:]).all()  # positions past the cut: unobserved
    # Different models, the last round cut at every place: the counts describe the returned tokens.
    accepted = _record_accepted(monkeypatch)
    for n in range(1, 8):
        accepted.clear()
        seq, stats = generate(target, draft, torch.tensor([5, 6, 7]), max_new_tokens=n, k=4, divergence="tv", budget=0.6, seed=n)
        assert stats.emitted == seq.shape[1] - 3 == n
        before = sum(a + 1 for a in accepted[:-1])
        assert before < n <= before + accepted[-1] + 1
        kept = n - before  # tokens the last round kept: its accepted drafts, then the target's token if it fits
        assert stats.accepted == sum(accepted[:-1]) + min(accepted[-1], kept)
        assert stats.verified == sum(min(a + 1, 4) for a in accepted[:-1]) + (kept if kept <= accepted[-1] else min(accepted[-1] + 1, 4))
        assert stats.accepted <= stats.emitted <= stats.accepted + stats.steps
    # A batch: each row's counts are its own returned tokens, pooled as their sum.
    ids, mask = left_padded(PROMPTS)
    seq, stats = generate(target, draft, ids, mask, k=4, divergence="kl", budget=0.5, max_new_tokens=3, seed=9)
    assert [r.emitted for r in stats.rows] == [len(r.tokens[0]) for r in stats.rows] == [3] * len(PROMPTS)
    assert stats.emitted == 3 * len(PROMPTS) and stats.accepted == sum(r.accepted for r in stats.rows)


def test_statistics_of_a_round_cut_at_eos(models):
    target, _ = models
    prompt = torch.tensor([[3, 4]])
    free, _ = generate(target, target, prompt, max_new_tokens=10, k=4, budget=0.0, seed=1)
    eos = int(free[0, 3])  # the second token, an accepted draft of the first round (p = q accepts all)
    assert eos != int(free[0, 2])  # seeded: the first two tokens differ, so the cut is at the second
    seq, stats = generate(target, target, prompt, max_new_tokens=10, k=4, budget=0.0, seed=1, eos_token_id=eos)
    assert seq[0, 2:].tolist() == free[0, 2:4].tolist()
    assert (stats.emitted, stats.accepted, stats.verified, stats.steps) == (2, 2, 2, 1)


def test_sampling_probs_match_hf_warpers(models):
    # The law generate samples from is HF's: temperature, then top-k, then top-p.
    from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(6, VOCAB) * 3
    ours = sampling_probs(logits, temperature=0.7, top_k=10, top_p=0.8)
    ref = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(10), TopPLogitsWarper(0.8)])(None, logits.clone())
    torch.testing.assert_close(ours, torch.softmax(ref.double(), -1))
    assert ((ours > 0).sum(-1) <= 10).all()


@pytest.mark.parametrize("divergence, budget", [("tv", 1.0), ("hellinger", 2.0), ("kl", 5.0)])
def test_top_k_and_top_p_zeros_are_kept(models, divergence, budget):
    # Under tv and hellinger, π may put mass where p = 0 (f_inf < inf), but generate verifies with
    # zeros="keep": no token outside the target's top-k is ever emitted, whatever the budget.
    target, draft = models
    ids, mask = left_padded(PROMPTS[:3])
    seq, _ = generate(target, draft, ids, mask, k=3, divergence=divergence, budget=budget, max_new_tokens=15, top_k=3, seed=9, use_cache=False)
    L = ids.shape[1]
    for b, prompt in enumerate(PROMPTS[:3]):
        row = list(prompt) + seq[b, L:].tolist()
        logits = target(input_ids=torch.tensor([row])).logits[0]
        allowed = torch.topk(logits, 3, dim=-1).indices
        for i in range(len(prompt), len(row)):
            assert row[i] in allowed[i - 1].tolist()


def test_first_token_law_at_budget_zero(models):
    # Budget 0: the output law is the target's sampling law (here with temperature and top-p).
    # Chi-square on the first generated token over many draws of a batch of one prompt repeated.
    from scipy.stats import chisquare

    target, draft = models
    prompt = [5, 6, 7]
    n = 2000
    ids = torch.tensor([prompt] * n)
    seq, _ = generate(target, draft, ids, k=2, divergence="tv", budget=0.0, max_new_tokens=1, temperature=1.5, top_p=0.9, seed=10)
    with torch.no_grad():
        p = sampling_probs(target(input_ids=torch.tensor([prompt])).logits[0, -1], temperature=1.5, top_p=0.9).numpy()
    counts = np.bincount(seq[:, len(prompt)].numpy(), minlength=VOCAB)
    assert counts[p == 0].sum() == 0
    support = p > 0
    expected = p[support] * n
    big = expected >= 5
    obs = np.r_[counts[support][big], counts[support][~big].sum()]
    exp = np.r_[expected[big], expected[~big].sum()]
    keep = exp > 0
    assert chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > 1e-3


def test_streamer_receives_prompt_then_tokens(models):
    target, draft = models

    class Recorder:
        def __init__(self):
            self.parts, self.ended = [], False

        def put(self, value):
            self.parts.append(value.tolist())

        def end(self):
            self.ended = True

    rec = Recorder()
    seq, _ = generate(target, draft, torch.tensor([5, 6, 7]), k=3, max_new_tokens=10, seed=11, streamer=rec)
    assert rec.ended and rec.parts[0] == [5, 6, 7]
    assert sum(rec.parts[1:], []) == seq[0, 3:].tolist()


def test_assisted_generation_context_manager(models):
    # model.generate(..., assistant_model=draft, do_sample=True) inside the context manager verifies
    # with mentored decoding: top_k=1 gives the target's greedy decoding; a tv budget of 1 accepts
    # every draft the assistant proposes (π = q; top_k=0 lifts the default top-50, whose zeros π keeps);
    # on exit transformers' own verifier is back.
    import transformers.generation.utils as gu

    from mentored.integrations.hf import mentored_assisted_generation

    target, draft = models
    ids = torch.tensor([[5, 6, 7, 8]])
    original = gu._speculative_sampling
    ref = target.generate(ids, do_sample=False, max_new_tokens=20, pad_token_id=0)
    with mentored_assisted_generation("kl", 1.0) as stats:
        assert gu._speculative_sampling is not original
        out = target.generate(ids, assistant_model=draft, do_sample=True, top_k=1, max_new_tokens=20, pad_token_id=0)
    assert torch.equal(out, ref) and stats.rounds > 0
    assert gu._speculative_sampling is original
    acc = []
    for budget in (0.0, 1.0):
        torch.manual_seed(0)
        with mentored_assisted_generation("tv", budget) as stats:
            target.generate(ids, assistant_model=draft, do_sample=True, top_k=0, max_new_tokens=30, pad_token_id=0)
        acc.append(stats.acceptance)
    assert acc[1] == 1.0 > acc[0]


def test_draw_follows_the_law_and_never_a_zero():
    # generate's sampler (inverse CDF) against the law it draws from: a chi-square test over 40,000
    # draws, and tokens of probability 0 (first, inner, last) never drawn.
    from scipy.stats import chisquare

    from mentored.integrations.hf import _draw

    law = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2 - 1e-9, 1e-9, 0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x = _draw(law.expand(40000, -1), gen)[:, 0]
    counts = torch.bincount(x, minlength=law.numel()).double()
    assert counts[law == 0].sum() == 0
    seen = law > 1e-6
    assert chisquare(counts[seen].numpy(), (law[seen] / law[seen].sum() * counts[seen].sum()).numpy()).pvalue > 1e-3
    # a row whose mass sits only in its last token, and a row summing to 1 only up to rounding
    edge = torch.tensor([[0.0, 0.0, 1.0], [0.1, 0.2, 0.7 - 1e-12]], dtype=torch.float64)
    assert _draw(edge.repeat(500, 1), gen)[0::2].unique().tolist() == [2]
