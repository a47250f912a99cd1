"""The law of what a verification emitted (``return_logprobs=True``): log π of each emitted token, log p
beside it and D_f(π‖p) of its verifier, against a reference computed independently from the rows
(π by :func:`mentored.solve` or the closed forms of docs/theory.md §8), to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest

from mentored import Divergence, divergence as _divergence, solve
from mentored.verify.serving import Emitted, Verifier, rejection_sample


def rows(rng, T, V, a=0.4):
    p = rng.dirichlet(np.full(V, a), size=T)
    q = 0.6 * p + 0.4 * rng.dirichlet(np.full(V, a), size=T)
    return p, q / q.sum(1, keepdims=True)


def div_value(name, pi, p):
    """D_f(π‖p) = Σ p f(π/p) from the divergence's own f, 0·f(0/0) = 0 and p = 0 < π costing f∞·π."""
    d = _divergence(name)
    pi, p = np.asarray(pi, dtype=np.float64), np.asarray(p, dtype=np.float64)
    out = 0.0
    for a, b in zip(pi, p):
        if b > 0:
            out += b * float(d.f(np.array([a / b]))[0])
        elif a > 0:
            out += a * d.f_inf
    return out


def reference(p, q, draft, n, out, divergence, budget, greedy=None, onehot=False):
    """log π, log p and D at each emitted column, from the rows alone."""
    B, W = out.shape
    lp_pi, lp_p, D = (np.full((B, W), np.nan) for _ in range(3))
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    for b in range(B):
        for j in range(min(n[b], W)):
            y = out[b, j]
            if y < 0:
                break
            t = start[b] + j
            x = draft[t]
            if greedy is not None and greedy[b]:
                pi = np.eye(p.shape[1])[p[t].argmax()]
            elif x < 0:
                pi = p[t]
            elif onehot:
                a = _onehot_a(p[t][x], divergence, budget)
                pi = p[t] * (1 - a) / (1 - p[t][x])
                pi[x] = a
            else:
                pi = solve(p[t], q[t], divergence=divergence, budget=budget).pi
            lp_pi[b, j], lp_p[b, j] = np.log(pi[y]), np.log(p[t][y])
            D[b, j] = 0.0 if x < 0 and not (greedy is not None and greedy[b]) else div_value(divergence, pi, p[t])
    return lp_pi, lp_p, D


def _onehot_a(px, divergence, budget):
    from mentored.verify.serving import onehot_acceptance

    return float(onehot_acceptance(np.array([px]), budget, divergence)[0])


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("divergence,budget", [("kl", 0.0), ("kl", 0.2), ("tv", 0.1), ("hellinger", 0.05), ("reverse_kl", 0.1)])
def test_dense_drafts(method, divergence, budget):
    rng = np.random.default_rng(11)
    B, V = 40, 6
    n = rng.integers(0, 5, size=B)
    T = int(n.sum())
    p, q = rows(rng, T, V)
    draft = np.array([rng.choice(V, p=q[t]) for t in range(T)])
    draft[rng.random(T) < 0.05] = -1
    greedy = rng.random(B) < 0.15
    bonus = rng.integers(0, V, size=B)
    lb = np.log(rng.random(B))
    res = rejection_sample(draft, n, q, p, bonus, divergence=divergence, budget=budget, is_greedy=greedy, method=method,
                           return_logprobs=True, bonus_logprobs=lb, uniforms=rng.random((T, 2)))
    assert isinstance(res, Emitted)
    tokens, logprobs = res
    ref = reference(p, q, draft, n, tokens, divergence, budget, greedy)
    body = np.arange(tokens.shape[1])[None, :] < n[:, None]
    for got, want in zip((logprobs, res.target_logprobs, res.spent), ref):
        np.testing.assert_allclose(np.where(body, got, np.nan), want, rtol=1e-6, atol=1e-9)
    emitted = tokens >= 0
    assert np.isnan(logprobs[~emitted]).all() and np.isfinite(logprobs[emitted]).all()
    bonus_col = emitted & ~body
    assert bonus_col.any()
    np.testing.assert_array_equal(logprobs[bonus_col], lb[np.nonzero(bonus_col)[0]])
    assert (res.spent[bonus_col] == 0).all()
    np.testing.assert_allclose(res.log_weights[emitted], (res.target_logprobs - logprobs)[emitted])
    if budget == 0:  # π = p: every weight is 1 (greedy rows aside, whose π is a point mass)
        assert np.allclose(res.log_weights[emitted & ~greedy[:, None]], 0, atol=1e-9)


@pytest.mark.parametrize("divergence,budget", [("kl", 0.1), ("tv", 0.2), ("chi2", 0.5)])
def test_token_only_drafts(divergence, budget):
    rng = np.random.default_rng(12)
    B, V, k = 50, 7, 3
    p, _ = rows(rng, B * k, V)
    draft = rng.integers(0, V, size=B * k)
    n = np.full(B, k)
    bonus = rng.integers(0, V, size=B)
    res = rejection_sample(draft, n, None, p, bonus, divergence=divergence, budget=budget, return_logprobs=True,
                           uniforms=rng.random((B * k, 2)))
    ref = reference(p, None, draft, n, res.tokens, divergence, budget, onehot=True)
    body = np.arange(k + 1)[None, :] < n[:, None]
    for got, want in zip((res.logprobs, res.target_logprobs, res.spent), ref):
        np.testing.assert_allclose(np.where(body, got, np.nan), want, rtol=1e-6, atol=1e-9)
    assert np.isnan(res.logprobs[:, k]).all()  # no bonus law given


def test_a_user_divergence_whose_pi_is_solved_in_python():
    # a generator from callables alone: the core cannot evaluate it, π and D are computed in Python
    div = Divergence("by hand", f=lambda t: (t - 1) ** 2, fprime=lambda t: 2 * (t - 1), f_inf=np.inf, f0=1.0)
    assert div.program is None and div.compiled is None
    rng = np.random.default_rng(13)
    B, V, k = 20, 5, 3
    p, q = rows(rng, B * k, V)
    draft = np.array([rng.choice(V, p=r) for r in q])
    res = rejection_sample(draft, [k] * B, q, p, rng.integers(0, V, size=B), divergence=div, budget=0.05, return_logprobs=True,
                           uniforms=rng.random((B * k, 2)))
    for b in range(B):
        for j in range(k):
            y = res.tokens[b, j]
            if y < 0:
                break
            pi = solve(p[b * k + j], q[b * k + j], divergence=div, budget=0.05).pi
            assert res.logprobs[b, j] == pytest.approx(np.log(pi[y]), rel=1e-6)
            want = float(np.sum(p[b * k + j] * div.f(pi / p[b * k + j])))
            assert res.spent[b, j] == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_verifier_and_bad_bonus_logprobs():
    rng = np.random.default_rng(14)
    B, V, k = 10, 5, 2
    p, q = rows(rng, B * k, V)
    draft = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((B * k, 2))
    ver = Verifier(V, divergence="kl", budget=0.1, dtype=np.float64)
    a = ver(draft, [k] * B, q, p, np.zeros(B, dtype=np.int64), uniforms=u, return_logprobs=True)
    b = rejection_sample(draft, [k] * B, q, p, np.zeros(B, dtype=np.int64), divergence="kl", budget=0.1, uniforms=u, return_logprobs=True)
    for x, y in zip((*a, a.target_logprobs, a.spent), (*b, b.target_logprobs, b.spent)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="bonus_logprobs must have one entry per request"):
        rejection_sample(draft, [k] * B, q, p, np.zeros(B, dtype=np.int64), return_logprobs=True, bonus_logprobs=np.zeros(3))


def test_speculative_step_fills_the_bonus_from_the_target():
    from mentored import speculative_step

    rng = np.random.default_rng(15)
    B, k, V = 30, 3, 6
    p = rng.dirichlet(np.full(V, 0.5), size=(B, k + 1))
    q = rng.dirichlet(np.full(V, 0.5), size=(B, k))
    draft = np.array([[rng.choice(V, p=q[b, j]) for j in range(k)] for b in range(B)])
    bonus = np.array([[rng.choice(V, p=p[b, k])] for b in range(B)])
    u = rng.random((B, k, 2))
    res = speculative_step(p, bonus, q, draft, divergence="kl", budget=0.2, uniforms=u, return_logprobs=True)
    np.testing.assert_array_equal(res.tokens, speculative_step(p, bonus, q, draft, divergence="kl", budget=0.2, uniforms=u))
    full = res.tokens[:, k] >= 0
    assert full.any()
    np.testing.assert_allclose(res.logprobs[full, k], np.log(p[full, k, bonus[full, 0]]), rtol=1e-12)
    np.testing.assert_array_equal(res.logprobs[full, k], res.target_logprobs[full, k])
    ref = reference(p[:, :k].reshape(-1, V), q.reshape(-1, V), draft.ravel(), np.full(B, k), res.tokens, "kl", 0.2)
    np.testing.assert_allclose(res.logprobs[:, :k], ref[0][:, :k], rtol=1e-6)
    with pytest.raises(ValueError, match="host memory"):
        import torch

        from mentored import backends

        saved = backends.CPU_SOLVER
        backends.CPU_SOLVER = "torch"
        try:
            speculative_step(*(torch.as_tensor(a) for a in (p, bonus, q, draft)), budget=0.2, return_logprobs=True)
        finally:
            backends.CPU_SOLVER = saved


def test_hf_generate_reports_the_law_of_each_returned_token():
    """Recomputed along the returned sequence by the models themselves: log p of every token is the
    warped target's, and log π is either the verifier's of (p, q) there or, for a bonus token, log p."""
    import torch

    from mentored.integrations.hf import generate, sampling_probs

    target, drafter = _tiny_pair()
    prompt = torch.tensor([[3, 4, 5]])
    budget = 0.3
    ids, st = generate(target, drafter, prompt, k=3, max_new_tokens=12, budget=budget, seed=3, top_k=6)
    new = ids[0, 3:]
    assert len(st.logprobs[0]) == len(new) == len(st.spent[0])
    with torch.no_grad():
        P = sampling_probs(target(ids).logits[0].double(), top_k=6)
        Q = sampling_probs(drafter(ids).logits[0].double(), top_k=6)
    bonus = 0
    for j, y in enumerate(new.tolist()):
        p, q = P[2 + j].numpy(), Q[2 + j].numpy()
        assert st.target_logprobs[0][j] == pytest.approx(np.log(p[y]), abs=1e-5)
        pi = solve(p, q, divergence="kl", budget=budget).pi  # kl: π = 0 wherever p = 0 (f∞ = ∞), as zeros="keep" asks
        if st.spent[0][j] == 0 and abs(st.logprobs[0][j] - np.log(p[y])) < 1e-5:
            bonus += 1
        else:
            assert st.logprobs[0][j] == pytest.approx(np.log(pi[y]), abs=1e-4)
    assert st.divergence[0] == pytest.approx(float(np.sum(st.spent[0])))
    assert 0 < st.divergence[0] <= budget * len(new) + 1e-9
    np.testing.assert_allclose(st.log_weights[0], st.target_logprobs[0] - st.logprobs[0])


# ---------------------------------------------------------------- budgets by span


def _tiny_pair():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    def build(layers, seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(vocab_size=10, n_positions=96, n_embd=16, n_layer=layers, n_head=2, bos_token_id=0, eos_token_id=1,
                         initializer_range=0.5)
        return GPT2LMHeadModel(cfg).eval()

    return build(1, 0), build(1, 1)


def test_a_span_spends_the_budget_only_inside():
    """Every returned token's divergence is 0 where its prefix leaves no span open, and the budget is
    spent inside; a span opened in the prompt and never closed is the budget everywhere (the same
    tokens as without spans), one that never opens is lossless."""
    import torch

    from mentored.integrations.hf import generate

    target, drafter = _tiny_pair()
    OPEN, CLOSE = 4, 5
    prompts = torch.tensor([[3, 6, 7], [3, OPEN, 7]])
    kw = dict(k=3, max_new_tokens=40, budget=0.5, divergence="tv", seed=5)
    ids, st = generate(target, drafter, prompts, span=(OPEN, CLOSE), **kw)
    inside_seen = outside_seen = 0
    for b in range(2):
        state = b == 1
        for j, y in enumerate(ids[b, 3:].tolist()):
            if not state:
                assert st.spent[b][j] == 0 and st.log_weights[b][j] == pytest.approx(0, abs=1e-9)
                outside_seen += 1
            else:
                inside_seen += st.spent[b][j] > 0
            state = True if y == OPEN else False if y == CLOSE else state
    assert inside_seen > 0 and outside_seen > 0
    # open in both prompts: the budget everywhere until the first closing id, so the same tokens as
    # without spans up to it (the same seed draws the same drafts and uniforms; budgets differ only
    # at positions whose prefix holds a closing id)
    both = torch.tensor([[OPEN, 6, 7], [3, OPEN, 7]])
    a, _ = generate(target, drafter, both, span=(OPEN, CLOSE), **kw)
    b, _ = generate(target, drafter, both, **kw)
    for r in range(2):
        new = a[r, 3:].tolist()
        upto = new.index(CLOSE) + 1 if CLOSE in new else len(new)
        assert a[r, 3 : 3 + upto].tolist() == b[r, 3 : 3 + upto].tolist()


def test_bad_spans_are_refused():
    import torch

    from mentored.integrations.hf import generate

    target, drafter = _tiny_pair()
    for bad in ((4, 4), (4,), (4, 99), "ab", (4.5, 2)):
        with pytest.raises(ValueError, match="span must"):
            generate(target, drafter, torch.tensor([[3, 4]]), span=bad, max_new_tokens=2)


# ---------------------------------------------------------------- trees


def _random_trees(rng, B, V):
    tokens, parents, sizes = [], [], []
    for _ in range(B):
        n = int(rng.integers(1, 8))
        par = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
        tok = [0] * n
        for i in range(1, n):  # distinct tokens among siblings
            used = {tok[j] for j in range(1, i) if par[j] == par[i]}
            tok[i] = int(rng.choice([t for t in range(V) if t not in used]))
        tokens += tok
        parents += par
        sizes.append(n)
    return np.array(tokens), np.array(parents), np.array(sizes)


@pytest.mark.parametrize("divergence,budget", [("kl", 0.0), ("kl", 0.3), ("tv", 0.2), ("hellinger", 0.05)])
def test_trees_against_the_set_verifier_in_closed_form(divergence, budget):
    """objective="acceptance": π_v puts onehot_acceptance(p_v(S), ε) on the children S in proportion to
    p_v, the rest in proportion to p_v (docs/theory.md §9); log π, log p and D from that closed form."""
    from mentored.verify.serving import onehot_acceptance, tree_sample

    rng = np.random.default_rng(16)
    B, V = 30, 7
    tokens, parents, sizes = _random_trees(rng, B, V)
    p = rng.dirichlet(np.full(V, 0.5), size=len(tokens))
    res, last = tree_sample(tokens, parents, sizes, p, divergence=divergence, budget=budget, objective="acceptance",
                            uniforms=rng.random((len(tokens), 2)), return_logprobs=True)
    out = res.tokens
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    f = _divergence(divergence)
    checked = 0
    for b in range(B):
        path = [int(last[b])]
        while parents[starts[b] + path[-1]] >= 0:
            path.append(int(parents[starts[b] + path[-1]]))
        path.reverse()
        for d, v in enumerate(path):
            g = starts[b] + v
            kids = [starts[b] + i for i in range(sizes[b]) if parents[starts[b] + i] == v and i > 0]
            pS = p[g, tokens[kids]].sum() if kids else 0.0
            a = float(onehot_acceptance(np.array([pS]), budget, divergence)[0]) if kids else 0.0
            y = out[b, d]
            on_kids = y in tokens[kids] and d + 1 < len(path)
            pi_y = a * p[g, y] / pS if on_kids else (1 - a) * p[g, y] / (1 - pS)
            D = (pS * float(f.f(np.array([a / pS]))[0]) if pS > 0 else 0.0) + (1 - pS) * float(f.f(np.array([(1 - a) / (1 - pS)]))[0])
            assert res[1][b, d] == pytest.approx(np.log(pi_y), rel=1e-6, abs=1e-9)
            assert res.target_logprobs[b, d] == pytest.approx(np.log(p[g, y]), rel=1e-9)
            assert res.spent[b, d] == pytest.approx(D if kids else 0.0, rel=1e-6, abs=1e-9)
            checked += 1
        assert np.isnan(res[1][b, len(path):]).all()
    assert checked > B


def test_trees_weighted_verifier_stays_within_budget_and_sums_to_one():
    """objective="length": each emitted token's log π is its node's mass (tree_verifier) or the rest in
    proportion to p; D ≤ ε at every emitted position; greedy rows have log π = 0."""
    from mentored.verify.serving import tree_sample, tree_verifier

    rng = np.random.default_rng(17)
    B, V = 30, 6
    tokens, parents, sizes = _random_trees(rng, B, V)
    p = rng.dirichlet(np.full(V, 0.5), size=len(tokens))
    greedy = rng.random(B) < 0.2
    kw = dict(divergence="kl", budget=0.2, is_greedy=greedy)
    res, last = tree_sample(tokens, parents, sizes, p, uniforms=rng.random((len(tokens), 2)), return_logprobs=True, **kw)
    accept, _ = tree_verifier(tokens, parents, sizes, p, **kw)
    emitted = res.tokens >= 0
    assert (res.spent[emitted & ~greedy[:, None]] <= 0.2 + 1e-9).all()
    assert (res.logprobs[emitted & greedy[:, None]] == 0).all()
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for b in np.flatnonzero(~greedy):
        node = starts[b] + last[b]
        d = 0
        while parents[node] >= 0:  # the accepted nodes, deepest first: each token's π is its mass
            d_node = np.count_nonzero(res.tokens[b] >= 0) - 2 - d
            assert res.logprobs[b, d_node] == pytest.approx(np.log(accept[node]), rel=1e-9)
            node = starts[b] + parents[node]
            d += 1


def test_generate_tree_reports_the_law_of_each_returned_token():
    import torch

    from mentored.integrations.hf import sampling_probs
    from mentored.integrations.trees import generate_tree

    target, drafter = _tiny_pair()
    ids, st = generate_tree(target, drafter, torch.tensor([[3, 4, 5]]), width=2, depth=2, max_new_tokens=10, budget=0.2, seed=4)
    new = ids[0, 3:].tolist()
    assert len(st.logprobs[0]) == len(new)
    with torch.no_grad():
        P = sampling_probs(target(ids).logits[0].double())
    for j, y in enumerate(new):
        assert st.target_logprobs[0][j] == pytest.approx(np.log(P[2 + j, y].item()), abs=1e-5)
    assert (st.spent[0] <= 0.2 + 1e-9).all() and np.isfinite(st.logprobs[0]).all()
