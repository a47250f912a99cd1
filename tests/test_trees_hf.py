"""mentored.integrations.trees.generate_tree end to end on tiny randomly initialised GPT-2 and Llama models (no download)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
transformers = pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")

import mentored.integrations.hf  # noqa: E402
import mentored.integrations.trees as trees  # noqa: E402
from mentored.integrations.hf import left_pad, sampling_probs  # noqa: E402
from mentored.integrations.trees import draft_tree, full_tree, generate_tree  # noqa: E402

VOCAB = 64
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23], [30], [40, 41, 42]]

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def tiny(family: str, seed: int, layers: int = 2, attn: str = "sdpa", vocab: int = VOCAB):
    """A tiny randomly initialised causal LM: GPT-2 (learned positions) or Llama (rotary positions,
    grouped-query attention). A wide initialisation keeps its logits far apart (no near ties)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if family == "gpt2":
        cfg = GPT2Config(vocab_size=vocab, n_positions=128, n_embd=32, n_layer=layers, n_head=2, initializer_range=1.0)
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2,
                          num_key_value_heads=1, max_position_embeddings=128, initializer_range=1.0)
        model = LlamaForCausalLM(cfg)
    model.set_attn_implementation(attn)
    return model.eval()


def noisy_copy(model, scale: float = 0.1, seed: int = 5):
    """A drafter that agrees with ``model`` often but not always: its weights plus Gaussian noise
    (its first choice is the target's on about half the nodes, its second on a fair share of the rest)."""
    torch.manual_seed(seed)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for w in out.parameters():
            w.add_(scale * torch.randn_like(w))
    return out


@pytest.fixture(scope="module")
def pairs():
    """target family -> (target, an unrelated one-layer drafter, a noisy copy of the target)."""
    out = {}
    for family, seed in (("gpt2", 0), ("llama", 2)):
        target = tiny(family, seed)
        out[family] = (target, tiny("gpt2", seed + 1, layers=1), noisy_copy(target))
    return out


def _record_walks(monkeypatch):
    """The local index of the last accepted node of every request of every round, in order."""
    lasts = []
    sample = trees.tree_sample

    def recording(*args, **kwargs):
        out, last = sample(*args, **kwargs)
        lasts.append([int(v) for v in last])
        return out, last

    monkeypatch.setattr(trees, "tree_sample", recording)
    return lasts


def _second_children(lasts, width):
    """Accepted nodes that are not their parent's first child (breadth-first: node i's parent is (i - 1) // width)."""
    count = 0
    for rnd in lasts:
        for v in rnd:
            while v > 0:
                count += (v - 1) % width != 0
                v = (v - 1) // width
    return count


# ---------------------------------------------------------------------------------------------------
# The tree's layout and the tree pass


@pytest.mark.parametrize("width, depth", [(1, 1), (1, 4), (2, 3), (3, 2), (5, 1)])
def test_full_tree_is_breadth_first(width, depth):
    parents = full_tree(width, depth)
    assert parents.size == 1 + sum(width**d for d in range(1, depth + 1))
    # a complete width-ary tree numbered breadth first: node i's parent is (i - 1) // width
    assert parents[0] == -1 and parents[1:].tolist() == [(i - 1) // width for i in range(1, parents.size)]
    with pytest.raises(ValueError, match="width >= 1 and depth >= 1"):
        full_tree(width, 0)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("use_cache, slack", [(True, 0.0), (True, 10.0), (False, 0.0)])
def test_a_tree_pass_is_the_models_own_forward(family, attn, use_cache, slack, monkeypatch):
    # Each node's logits from a tree pass (4D mask, depth positions, level by level as the drafter
    # feeds it) must be the model's logits after the node's path fed plainly as a sequence, on a
    # padded batch, over three rounds in which each row keeps a different random path (the crop:
    # compacted every round, or holes left masked). A node seeing a sibling, a wrong position, or
    # a rejected column kept in the cache changes these logits by far more than the tolerance.
    monkeypatch.setattr(mentored.integrations.hf, "_COMPACT_SLACK", slack)
    model = tiny(family, 7, attn=attn)
    tree = trees._Tree(2, 3)
    lm = trees._TreeLM(model, "target", use_cache, tree)
    seqs = [torch.tensor(p) for p in PROMPTS[:3]]
    lm.start(len(seqs))
    g = torch.Generator().manual_seed(0)
    kept_paths = set()
    with torch.no_grad():
        for _ in range(3):
            lm.begin()
            tokens = torch.randint(0, VOCAB, (len(seqs), tree.size), generator=g)
            tokens[:, 0] = torch.stack([s[-1] for s in seqs])
            root, _ = lm.tree_pass(seqs, tokens, [])
            got = {0: root}
            for level in tree.levels[1:]:
                _, logits = lm.tree_pass(seqs, tokens, level)
                got.update({int(v): logits[:, j] for j, v in enumerate(level)})
            for b, s in enumerate(seqs):
                for v, logits in got.items():
                    path = tree.path(v)
                    want = model(input_ids=torch.cat([s, tokens[b, path]])[None]).logits[0, -1]
                    torch.testing.assert_close(logits[b], want, rtol=1e-4, atol=1e-4 * float(want.abs().max()), msg=f"row {b}, node {v}")
            for b in range(len(seqs)):
                v = int(torch.randint(0, tree.size, (1,), generator=g))
                path = tree.path(v)
                kept_paths.add(len(path))
                lm.keep_path(b, path)
                seqs[b] = torch.cat([seqs[b], tokens[b, path], torch.randint(0, VOCAB, (1,), generator=g)])
            lm.compact(list(range(len(seqs))))
    assert len(kept_paths) > 1  # rows kept paths of different lengths


# ---------------------------------------------------------------------------------------------------
# Decoding


def greedy(model, prompt, n):
    """The target's own greedy decoding (HF generate, one unpadded row)."""
    out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_greedy_invariant_on_a_padded_batch(pairs, family, monkeypatch):
    # top_k=1: p_v is one-hot at every node and zeros="keep" makes π_v = p_v at any budget, so
    # the output is the target's greedy decoding, whatever the drafter, the tree and the objective.
    # A node's p read from the wrong row of the target pass, a wrong tree mask or position, or a
    # cache keeping a rejected node changes the tokens.
    target, unrelated, noisy = pairs[family]
    ids, mask = left_pad(PROMPTS)
    n = 14
    want = [greedy(target, p, n) for p in PROMPTS]
    lasts = _record_walks(monkeypatch)
    cases = [("kl", 0.0, "length"), ("kl", 0.5, "acceptance"), ("tv", 1.0, "length"), ("hellinger", 2.0, "acceptance")]
    for d, drafter in enumerate((unrelated, noisy, target)):
        for s, (width, depth) in enumerate([(1, 3), (2, 3), (3, 2), (4, 1)]):
            divergence, budget, objective = cases[(s + d) % len(cases)]  # each shape with a case, paired anew per drafter
            seq, stats = generate_tree(target, drafter, ids, mask, width=width, depth=depth, divergence=divergence, budget=budget,
                                       objective=objective, max_new_tokens=n, top_k=1, seed=0)
            assert torch.equal(seq[:, : ids.shape[1]], ids)
            for b in range(len(PROMPTS)):
                assert seq[b, ids.shape[1] :].tolist() == want[b], f"row {b}: width {width}, depth {depth}, {divergence} {budget}"
            if drafter is target:
                # the drafter's first child is the target's argmax at every node when its own tree
                # passes are right: every round accepts the whole depth
                assert all(r.per_position.tolist() == [1.0] * depth for r in stats.rows)
                assert all(r.steps == -(-n // (depth + 1)) for r in stats.rows)
            if drafter is noisy and width > 1:
                assert _second_children(lasts, width) > 0  # the target's argmax was a later sibling somewhere
            lasts.clear()


@pytest.mark.parametrize("family, width, depth", [("gpt2", 2, 3), ("gpt2", 1, 4), ("llama", 3, 2)])
def test_cache_and_recompute_agree(pairs, family, width, depth, monkeypatch):
    # The caches (the drafter's level by level, the target's one pass, both cropped to the accepted
    # path of each row) must give the logits of a full recompute, hence the same tree, the same
    # walk and the same tokens for the same seed. Keeping a rejected node's columns, or losing an
    # accepted one, shifts every later position.
    target, _, noisy = pairs[family]
    ids, mask = left_pad(PROMPTS)
    lasts = _record_walks(monkeypatch)
    kw = dict(width=width, depth=depth, divergence="tv", budget=0.3, max_new_tokens=25, seed=3)
    a = generate_tree(target, noisy, ids, mask, **kw)
    walks = [list(r) for r in lasts]
    b = generate_tree(target, noisy, ids, mask, use_cache=False, **kw)
    assert torch.equal(a[0], b[0])
    assert lasts[len(walks) :] == walks
    for ra, rb in zip(a[1].rows, b[1].rows):
        assert (ra.steps, ra.accepted, ra.verified, ra.emitted, ra.drafted) == (rb.steps, rb.accepted, rb.verified, rb.emitted, rb.drafted)
    tree = trees._Tree(width, depth)
    lengths = {len(tree.path(v)) for rnd in walks for v in rnd}
    assert {0, depth} <= lengths  # rounds rejected at the root and accepted the whole depth
    assert len({r.steps for r in a[1].rows}) > 1  # rows finished at different rounds
    if width > 1:
        assert _second_children(walks, width) > 0


def test_the_device_path_gives_the_cores_tokens(pairs, monkeypatch):
    # Off the host the walk runs in torch on the device (tree_sample with tensors): here on CPU
    # tensors, which must give the core's tokens for the same uniforms.
    target, _, noisy = pairs["gpt2"]
    ids, mask = left_pad(PROMPTS)
    kw = dict(width=2, depth=3, divergence="kl", budget=0.2, max_new_tokens=20, temperature=1.3, seed=4)
    core = generate_tree(target, noisy, ids, mask, **kw)
    calls = []
    sample = trees.tree_sample

    def on_device(tokens, *args, **kwargs):
        calls.append(torch.is_tensor(tokens))
        return sample(tokens, *args, **kwargs)

    monkeypatch.setattr(trees, "_CORE_DEVICES", ())
    monkeypatch.setattr(trees, "tree_sample", on_device)
    device = generate_tree(target, noisy, ids, mask, **kw)
    assert calls and all(calls)
    assert torch.equal(core[0], device[0])


def test_first_two_tokens_follow_the_target_at_budget_zero(pairs):
    # Budget 0: π_v = p_v at every node, so the output is the target's sampling law (temperature
    # and top-p here). Chi-square on the first token of 3,000 copies of one prompt, and on the
    # second given the most frequent first one (it comes from a depth-1 node's row when that node
    # was accepted, from the next round's root otherwise).
    from scipy.stats import chisquare

    target, _, noisy = pairs["gpt2"]
    prompt, n, warp = [5, 6, 7], 3000, dict(temperature=1.5, top_p=0.9)
    seq, stats = generate_tree(target, noisy, torch.tensor([prompt] * n), width=2, depth=2, budget=0.0, max_new_tokens=2, seed=10, **warp)
    assert stats.accepted > 0.2 * n  # many second tokens came from the tree

    def check(context, drawn):
        with torch.no_grad():
            p = sampling_probs(target(input_ids=torch.tensor([context])).logits[0, -1], **warp).numpy()
        counts = np.bincount(drawn, minlength=VOCAB)
        assert counts[p == 0].sum() == 0
        expected = p * counts.sum()
        big = expected >= 5
        obs = np.r_[counts[big], counts[~big & (p > 0)].sum()]
        exp = np.r_[expected[big], expected[~big & (p > 0)].sum()]
        keep = exp > 0
        assert chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > 1e-3

    first = seq[:, len(prompt)].numpy()
    check(prompt, first)
    mode = int(np.bincount(first).argmax())
    check(prompt + [mode], seq[first == mode, len(prompt) + 1].numpy())


@pytest.mark.parametrize("divergence, budget", [("tv", 1.0), ("hellinger", 2.0)])
def test_top_k_zeros_are_kept(pairs, divergence, budget):
    # Under tv and hellinger π may put mass where p = 0 (f_inf < inf); the loop verifies with
    # zeros="keep", so no token outside the target's top-k is ever emitted, whatever the budget.
    target, unrelated, _ = pairs["gpt2"]
    ids, mask = left_pad(PROMPTS[:3])
    seq, _ = generate_tree(target, unrelated, ids, mask, width=3, depth=2, divergence=divergence, budget=budget, max_new_tokens=15,
                           top_k=3, seed=9)
    L = ids.shape[1]
    with torch.no_grad():
        for b, prompt in enumerate(PROMPTS[:3]):
            row = list(prompt) + seq[b, L:].tolist()
            allowed = torch.topk(target(input_ids=torch.tensor([row])).logits[0], 3, dim=-1).indices
            assert all(row[i] in allowed[i - 1].tolist() for i in range(len(prompt), len(row)))


def test_draft_tree_is_the_first_round(pairs, monkeypatch):
    # draft_tree gives each prompt's first tree: the drafter's top-width children at every inner
    # node, the target's warped law after every node's path (both from plain forwards of the
    # paths here), and exactly the tree and rows generate_tree hands to tree_sample first.
    from mentored.serving import tree_verifier

    target, _, noisy = pairs["llama"]
    ids, mask = left_pad(PROMPTS[:3])
    warp = dict(temperature=0.8, top_k=20)
    tokens, parents, probs = draft_tree(target, noisy, ids, mask, width=3, depth=2, **warp)
    assert tokens.shape == (3, 13) and parents.tolist() == full_tree(3, 2).tolist() and probs.shape == (3, 13, VOCAB)
    tree = trees._Tree(3, 2)
    with torch.no_grad():
        for b, prompt in enumerate(PROMPTS[:3]):
            assert int(tokens[b, 0]) == prompt[-1]
            for v in range(tree.size):
                path = torch.tensor(prompt + tokens[b, tree.path(v)].tolist())[None]
                want = sampling_probs(target(input_ids=path).logits[0, -1], **warp)
                # float32 forwards of one path in two layouts (the padded batch of the tree, the path
                # alone) sum in orders that depend on the CPU's kernels: 4e-6 apart seen on an
                # AVX2-only machine; a wrong parent or mask moves a row by orders of magnitude more
                torch.testing.assert_close(probs[b, v], want, rtol=1e-4, atol=1e-5)
                if tree.depths[v] < 2:
                    children = tokens[b, np.flatnonzero(parents == v)]
                    assert children.tolist() == torch.topk(noisy(input_ids=path).logits[0, -1], 3).indices.tolist()
    seen = []
    sample = trees.tree_sample
    monkeypatch.setattr(trees, "tree_sample", lambda *a, **k: seen.append(a) or sample(*a, **k))
    generate_tree(target, noisy, ids, mask, width=3, depth=2, max_new_tokens=1, seed=0, **warp)
    assert np.array_equal(seen[0][0], tokens.reshape(-1).numpy()) and np.array_equal(seen[0][3], probs.reshape(-1, VOCAB).numpy())
    # at budget 0, π_v = p_v: the round's expected accepted tokens is A(v) = Σ_c p_v(x_c) (1 + A(c)) at the root
    P, x = probs[0].numpy(), tokens[0].numpy()
    A = np.zeros(tree.size)
    for v in range(tree.size - 1, -1, -1):
        A[v] = sum(P[v, x[c]] * (1 + A[c]) for c in np.flatnonzero(parents == v))
    _, value = tree_verifier(x, parents, [13], P, budget=0.0)
    assert value[0] == pytest.approx(A[0], rel=1e-12) and A[0] > 0.1


# ---------------------------------------------------------------------------------------------------
# What is fed, what is counted


def _record_inputs(model):
    lengths = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    return lengths, handle


def test_passes_and_statistics(pairs, monkeypatch):
    # One target pass a round: the tokens its cache lacks (the prompt, then the last emitted token)
    # and every node; `depth` drafter passes: what its cache lacks (two tokens after a round that
    # accepted the whole depth: the leaf it never fed and the bonus), then each inner level. The
    # statistics count target passes, accepted nodes and the returned tokens.
    target, _, noisy = pairs["gpt2"]
    width, depth, n, prompt = 2, 3, 30, [5, 6, 7, 8, 9, 10]
    nodes = 2 + 4 + 8
    lasts = _record_walks(monkeypatch)
    t_len, t_hook = _record_inputs(target)
    d_len, d_hook = _record_inputs(noisy)
    try:
        seq, stats = generate_tree(target, noisy, torch.tensor(prompt), width=width, depth=depth, divergence="kl", budget=0.5,
                                   max_new_tokens=n, seed=4)
    finally:
        t_hook.remove()
        d_hook.remove()
    tree = trees._Tree(width, depth)
    accepted = [len(tree.path(r[0])) for r in lasts]
    assert len(t_len) == stats.steps == stats.rounds == len(accepted)
    assert t_len == [len(prompt) + nodes] + [1 + nodes] * (stats.steps - 1)
    starts = [len(prompt)] + [2 if a == depth else 1 for a in accepted[:-1]]
    assert d_len == [x for s in starts for x in [s, 2, 4]]
    before = sum(a + 1 for a in accepted[:-1])
    assert before < n <= before + accepted[-1] + 1
    assert stats.emitted == seq.shape[1] - len(prompt) == n
    assert stats.accepted == sum(accepted[:-1]) + min(accepted[-1], n - before)
    assert stats.drafted == nodes * stats.steps and stats.per_position.shape == (depth,)
    assert stats.passes_per_token == stats.steps / n and stats.mean_accepted == stats.accepted / stats.steps
    assert 0 < stats.acceptance < 1 and set(stats.seconds) == {"draft", "target", "verify", "cache", "total"}


def test_rows_finish_independently_at_eos(pairs):
    target, unrelated, _ = pairs["gpt2"]
    ids, mask = left_pad(PROMPTS)
    kw = dict(width=2, depth=2, budget=0.0, max_new_tokens=30, seed=7)
    free, _ = generate_tree(target, unrelated, ids, mask, **kw)
    L = ids.shape[1]
    eos = int(free[0, L + 3])  # the fourth token of row 0 under these draws
    seq, stats = generate_tree(target, unrelated, ids, mask, eos_token_id=eos, pad_token_id=63, **kw)
    assert len(stats.rows[0].tokens[0]) <= 4
    for b in range(len(PROMPTS)):
        toks = stats.rows[b].tokens[0].tolist()
        if eos in toks:
            assert toks.index(eos) == len(toks) - 1 and (seq[b, L + len(toks) :] == 63).all()
        else:
            assert len(toks) == 30


def test_bad_input_is_refused(pairs):
    target, unrelated, _ = pairs["gpt2"]
    prompt = torch.tensor([1, 2, 3])
    for name, value in (("width", 0), ("depth", 0), ("width", 1.5), ("depth", True)):
        with pytest.raises(ValueError, match=f"{name} must be an integer of at least 1"):
            generate_tree(target, unrelated, prompt, **{name: value})
    with pytest.raises(ValueError, match="objective must be one of"):
        generate_tree(target, unrelated, prompt, objective="tokens")
    with pytest.raises(ValueError, match="exceeds the vocabulary"):
        generate_tree(target, unrelated, prompt, width=VOCAB + 1, depth=1)
    with pytest.raises(ValueError, match="has 128 positions; the longest prompt \\+ 120 new tokens \\+ the depth 8 need 131"):
        generate_tree(target, unrelated, prompt, max_new_tokens=120, depth=8, width=1)
    with pytest.raises(ValueError, match="padding must be on the left"):
        generate_tree(target, unrelated, torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 0], [1, 1]]))
    with pytest.raises(ValueError, match="budget must be nonnegative"):
        generate_tree(target, unrelated, prompt, budget=-0.1)
    with pytest.raises(ValueError, match="share a vocabulary"):
        generate_tree(target, tiny("gpt2", 3, layers=1, vocab=VOCAB + 2), prompt)


def test_token_ids_outside_the_vocabulary_are_refused(pairs):
    target, unrelated, _ = pairs["llama"]
    for call in (generate_tree, draft_tree):
        with pytest.raises(ValueError, match=rf"input_ids\[1, 0\] = {VOCAB + 3}: token ids must lie in \[0, {VOCAB}\)"):
            call(target, unrelated, torch.tensor([[1, 2], [VOCAB + 3, 4]]))
        with pytest.raises(ValueError, match=rf"input_ids\[1\] = -5: token ids must lie in \[0, {VOCAB}\)"):
            call(target, unrelated, torch.tensor([1, -5]))


def test_a_left_padded_batch_without_a_mask_is_refused(pairs, monkeypatch):
    target, unrelated, _ = pairs["gpt2"]
    ids, mask = left_pad([[5, 6, 7], [8]], pad_token_id=0)
    monkeypatch.setattr(target.config, "pad_token_id", 0)
    for call in (generate_tree, draft_tree):
        with pytest.raises(ValueError, match=r"attention_mask is None but row 1 of input_ids starts with pad_token_id 0.*pass attention_mask"):
            call(target, unrelated, ids)
        call(target, unrelated, ids, mask)
