"""Block verification (``method="block"``): the rule against a plain-Python rendering of it, the
emitted law against the π chain computed independently, the expected length against the closed form
Σ_i Σ_{x^i} A_i(x^i), and the binary example of Sun et al. (2025): 11/9 drafts per round, token by
token 10/9 (docs/theory.md §10)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from mentored import backends, solve
from mentored.verify.serving import Verifier, rejection_sample

# ---------------------------------------------------------------- the rule, written out


def block_rule(pi, q, draft, u, bonus):
    """One request's block decision in plain Python: pi, q (n, V) rows (q normalised), draft (n,), u (n, 2)."""
    n = len(draft)
    w = [1.0]
    for i in range(n):
        x = draft[i]
        w.append(0.0 if pi[i][x] <= 0 or w[i] <= 0 else 1.0 if q[i][x] <= 0 else min(w[i] * pi[i][x] / q[i][x], 1.0))

    def residual(i):
        return np.maximum(w[i] * pi[i] - q[i], 0.0)

    tau = 0
    for i in range(n, 0, -1):
        if i == n:
            h = w[n]
        else:
            R = residual(i).sum()
            h = R / (R + 1 - w[i]) if R + 1 - w[i] > 0 else 1.0
        if u[i - 1][0] < h:
            tau = i
            break
    out = list(draft[:tau])
    if tau == n:
        return out + [bonus]
    r = residual(tau)
    if r.sum() <= 0:
        r = pi[tau]
    c = np.cumsum(r)
    return out + [int(np.searchsorted(c, u[tau][1] * c[-1], side="right"))]


def llm_rows(rng, T, V, a=0.3):
    """Peaked rows, as a language model's: a few tokens carry most of the mass."""
    p = rng.dirichlet(np.full(V, a), size=T)
    q = 0.5 * p + 0.5 * rng.dirichlet(np.full(V, a), size=T)
    return p, q / q.sum(1, keepdims=True)


@pytest.mark.parametrize("divergence,budget", [("kl", 0.0), ("kl", 0.1), ("tv", 0.05), ("hellinger", 0.02), ("chi2", 1.0)])
def test_the_rule_as_written(divergence, budget):
    rng = np.random.default_rng(1)
    B, V = 60, 7
    n = rng.integers(0, 5, size=B)
    T = int(n.sum())
    p, q = llm_rows(rng, T, V)
    draft = np.array([rng.choice(V, p=q[t]) for t in range(T)])
    u = rng.random((T, 2))
    bonus = rng.integers(0, V, size=B)
    out = rejection_sample(draft, n, q, p, bonus, divergence=divergence, budget=budget, uniforms=u, method="block")
    pi = solve(p, q, divergence=divergence, budget=budget).pi
    start = 0
    differ = 0
    token = rejection_sample(draft, n, q, p, bonus, divergence=divergence, budget=budget, uniforms=u)
    for b in range(B):
        s = slice(start, start + n[b])
        want = block_rule(pi[s], q[s], draft[s], u[s], int(bonus[b]))
        got = [int(v) for v in out[b] if v >= 0]
        assert got == want, (b, got, want)
        differ += not np.array_equal(out[b], token[b])
        start += n[b]
    assert differ > 0  # the rule is not the token rule


def test_torch_device_rule_and_verifier_agree_with_the_core():
    rng = np.random.default_rng(2)
    B, V = 40, 9
    n = rng.integers(0, 6, size=B)
    T = int(n.sum())
    p, q = llm_rows(rng, T, V)
    draft = np.array([rng.choice(V, p=q[t]) for t in range(T)])
    draft[rng.random(T) < 0.05] = -1  # placeholders end the block
    u = rng.random((T, 2))
    bonus = rng.integers(0, V, size=B)
    greedy = rng.random(B) < 0.2
    kw = dict(divergence="kl", budget=0.2, uniforms=u, method="block", is_greedy=greedy)
    core = rejection_sample(draft, n, q, p, bonus, **kw)
    saved = backends.CPU_SOLVER
    backends.CPU_SOLVER = "torch"  # the device algorithm, on the CPU
    try:
        dev = rejection_sample(*(torch.as_tensor(a) for a in (draft, n)), torch.as_tensor(q), torch.as_tensor(p),
                               torch.as_tensor(bonus), **kw)
    finally:
        backends.CPU_SOLVER = saved
    np.testing.assert_array_equal(dev.numpy(), core)
    ver = Verifier(V, divergence="kl", budget=0.2, method="block", dtype=np.float64)
    np.testing.assert_array_equal(ver(draft, list(n), q, p, bonus, is_greedy=greedy, uniforms=u), core)


def test_token_only_drafts_and_greedy_requests_are_decided_token_by_token():
    rng = np.random.default_rng(3)
    B, V, k = 50, 6, 3
    p, q = llm_rows(rng, B * k, V)
    draft = rng.integers(0, V, size=B * k)
    u = rng.random((B * k, 2))
    bonus = rng.integers(0, V, size=B)
    for q_arg, greedy in ((None, None), (q, np.ones(B, dtype=bool))):
        args = (draft, [k] * B, q_arg, p, bonus)
        kw = dict(divergence="tv", budget=0.1, uniforms=u, is_greedy=greedy)
        np.testing.assert_array_equal(rejection_sample(*args, **kw, method="block"), rejection_sample(*args, **kw))


def test_a_method_of_another_name_is_refused():
    p = np.array([[0.5, 0.5]])
    for bad in ("tokens", None, 1):
        with pytest.raises(ValueError, match="method must be one of"):
            rejection_sample(np.array([0]), [1], p, p, np.array([0]), method=bad)
    with pytest.raises(ValueError, match="method must be one of"):
        Verifier(2, method="blocks")


# ---------------------------------------------------------------- laws


def rounds(p, q, draft_of, k, N, rng, method, divergence="kl", budget=0.0):
    """One round of N requests whose rows depend on their prefix: p(prefix), q(prefix) give the rows
    after a prefix (a tuple), draft_of samples the drafts. Returns the emitted rows (N, k + 1)."""
    drafts = draft_of(N)
    P = np.stack([p(tuple(d[:j])) for d in drafts for j in range(k)])
    Q = np.stack([q(tuple(d[:j])) for d in drafts for j in range(k)])
    bonus = np.array([rng.choice(len(P[0]), p=_pi_after(p, q, tuple(d), divergence, budget, bonus=True)) for d in drafts])
    return rejection_sample(drafts.ravel(), [k] * N, Q, P, bonus, divergence=divergence, budget=budget, method=method,
                            uniforms=rng.random((N * k, 2)))


_SOLVED: dict = {}


def _pi_after(p, q, prefix, divergence, budget, bonus=False):
    """The π chain's conditional after prefix (p at the bonus position: no draft there), solved once per prefix."""
    if bonus:
        return p(prefix)
    key = (p, q, prefix, divergence, budget)
    if key not in _SOLVED:
        _SOLVED[key] = solve(p(prefix), q(prefix), divergence=divergence, budget=budget).pi
    return _SOLVED[key]


def chain_law(p, q, V, L, divergence, budget, k):
    """The exact law of the π chain on sequences of length L ≤ k + 1 (π at depth < k, p at depth k)."""
    law = {}
    for y in itertools.product(range(V), repeat=L):
        pr = 1.0
        for j in range(L):
            pr *= _pi_after(p, q, y[:j], divergence, budget, bonus=j == k)[y[j]]
        law[y] = pr
    return law


def completed(rows, p, q, V, L, k, divergence, budget, rng):
    """Each round's emitted tokens continued to length L by sampling the π chain after them (what the
    next rounds would emit: their first token has law π after its prefix), as tuples."""
    seqs = []
    for r in rows:
        y = [int(t) for t in r if t >= 0]
        while len(y) < L:
            y.append(int(rng.choice(V, p=_pi_after(p, q, tuple(y), divergence, budget, bonus=len(y) == k))))
        seqs.append(tuple(y[:L]))
    return seqs


def chi2_pvalue(seqs, law):
    keys = list(law)
    counts = np.array([0] * len(keys))
    index = {y: i for i, y in enumerate(keys)}
    for y in seqs:
        counts[index[y]] += 1
    expected = np.array([law[y] for y in keys]) * len(seqs)
    return stats.chisquare(counts, expected).pvalue


BINARY_P = np.array([1 / 3, 2 / 3])
BINARY_Q = np.array([2 / 3, 1 / 3])


def _binary_p(prefix):
    return BINARY_P


def _binary_q(prefix):
    return BINARY_Q


@pytest.mark.parametrize("budget", [0.0, 0.05])
def test_the_binary_example(budget):
    """p = (1/3, 2/3), q = (2/3, 1/3), two drafts: at budget 0 block accepts 11/9 drafts per round,
    token by token 10/9, and the stream is p ⊗ p; at kl 0.05 it is π ⊗ π and block accepts at least
    as much as token by token (both against the closed forms)."""
    rng = np.random.default_rng(4)
    k, N, V = 2, 8000, 2
    p, q = _binary_p, _binary_q
    pi = solve(BINARY_P, BINARY_Q, divergence="kl", budget=budget).pi
    a = np.minimum(pi, BINARY_Q)
    token_exact = a.sum() + a.sum() ** 2  # each draft accepted with Σ min(π, q), independently
    # the closed form of block verification: A_1 = min(q, π), A_2 = min(q ⊗ q, A_1 ⊗ π)
    A1 = np.minimum(BINARY_Q, pi)
    block_exact = A1.sum() + np.minimum(np.outer(BINARY_Q, BINARY_Q), np.outer(A1, pi)).sum()
    if budget == 0:
        assert token_exact == pytest.approx(10 / 9) and block_exact == pytest.approx(11 / 9)
    assert block_exact > token_exact
    for method, exact in (("token", token_exact), ("block", block_exact)):
        out = rounds(p, q, lambda N: rng.choice(2, size=(N, k), p=BINARY_Q), k, N, rng, method, budget=budget)
        acc = (out >= 0).sum(1) - 1
        assert abs(acc.mean() - exact) < 5 * acc.std() / np.sqrt(N), (method, acc.mean(), exact)
        seqs = completed(out[:8000], p, q, V, 2, k, "kl", budget, rng)
        assert chi2_pvalue(seqs, chain_law(p, q, V, 2, "kl", budget, k)) > 1e-4


def test_the_law_of_a_chain_whose_rows_depend_on_the_prefix():
    """V = 3, k = 2, rows that differ by prefix: the completed stream's law over all 27 sequences of
    length 3 is the π chain, and block accepts as the closed form says."""
    rng = np.random.default_rng(5)
    V, k, budget = 3, 2, 0.1
    table_p = {pre: rng.dirichlet(np.full(V, 0.7)) for j in range(k + 1) for pre in itertools.product(range(V), repeat=j)}
    table_q = {pre: rng.dirichlet(np.full(V, 0.7)) for j in range(k) for pre in itertools.product(range(V), repeat=j)}
    p, q = table_p.__getitem__, table_q.__getitem__

    def draft_of(N):
        d = np.zeros((N, k), dtype=np.int64)
        for i in range(N):
            for j in range(k):
                d[i, j] = rng.choice(V, p=q(tuple(d[i, :j])))
        return d

    N = 8000
    out = rounds(p, q, draft_of, k, N, rng, "block", budget=budget)
    acc = (out >= 0).sum(1) - 1
    pis = {pre: _pi_after(p, q, pre, "kl", budget) for pre in table_q}
    A = {(): 1.0}
    exact = 0.0
    for i in range(1, k + 1):
        for x in itertools.product(range(V), repeat=i):
            qx = np.prod([q(x[:j])[x[j]] for j in range(i)])
            A[x] = min(qx, A[x[:-1]] * pis[x[:-1]][x[-1]])
            exact += A[x]
    assert abs(acc.mean() - exact) < 5 * acc.std() / np.sqrt(N)
    token = rounds(p, q, draft_of, k, N, rng, "token", budget=budget)
    assert acc.mean() > ((token >= 0).sum(1) - 1).mean()
    seqs = completed(out[:6000], p, q, V, 3, k, "kl", budget, rng)
    assert chi2_pvalue(seqs, chain_law(p, q, V, 3, "kl", budget, k)) > 1e-4


# ---------------------------------------------------------------- the step layout and the HF loop


def test_speculative_step_block_is_the_same_rule():
    """speculative_step(method="block"), numpy and the torch device algorithm, against rejection_sample's."""
    from mentored import speculative_step

    rng = np.random.default_rng(6)
    B, k, V = 30, 4, 8
    p, q = llm_rows(rng, B * (k + 1), V)
    q = q.reshape(B, k + 1, V)[:, :k]
    p = p.reshape(B, k + 1, V)
    draft = np.array([[rng.choice(V, p=q[b, j]) for j in range(k)] for b in range(B)])
    bonus = np.array([[rng.choice(V, p=p[b, k])] for b in range(B)])
    u = rng.random((B, k, 2))
    kw = dict(divergence="kl", budget=0.3, uniforms=u, zeros="keep", method="block")
    host = speculative_step(p, bonus, q, draft, **kw)
    want = rejection_sample(draft.ravel(), [k] * B, q.reshape(-1, V), p[:, :k].reshape(-1, V), bonus, divergence="kl", budget=0.3,
                            uniforms=u.reshape(-1, 2), method="block")
    np.testing.assert_array_equal(host, want)
    assert not np.array_equal(host, speculative_step(p, bonus, q, draft, **{**kw, "method": "token"}))
    saved = backends.CPU_SOLVER
    backends.CPU_SOLVER = "torch"
    try:
        dev = speculative_step(*(torch.as_tensor(a) for a in (p, bonus, q, draft)), **{**kw, "uniforms": torch.as_tensor(u)})
    finally:
        backends.CPU_SOLVER = saved
    np.testing.assert_array_equal(dev.numpy(), host)


def test_hf_generate_block_accepts_at_least_as_much():
    """hf.generate(method="block") on two tiny GPT-2s: valid tokens, and over a few hundred rounds at
    least as many accepted drafts per round as token by token (the same seed draws the same drafts
    in the first round; later rounds differ, so the comparison is pooled over rounds, with a margin)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel

    from mentored.integrations.hf import generate

    def build(layers, seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(vocab_size=12, n_positions=128, n_embd=16, n_layer=layers, n_head=2, bos_token_id=0, eos_token_id=1,
                         initializer_range=0.3)
        return GPT2LMHeadModel(cfg).eval()

    target, draft = build(1, 0), build(1, 1)
    prompts = torch.tensor([[3, 4, 5]] * 4)
    mean = {}
    for method in ("token", "block"):
        _, st = generate(target, draft, prompts, k=3, max_new_tokens=24, budget=0.0, seed=7, method=method)
        mean[method] = st.accepted / st.steps
    assert mean["block"] >= mean["token"] - 0.05, mean
    with pytest.raises(ValueError, match="method must be one of"):
        generate(target, draft, prompts, method="tree")
