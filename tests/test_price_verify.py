"""Verification by price (docs/theory.md §4, "Budgets by price"): rejection_sample, Verifier,
speculative_step, tree_sample / tree_verifier and hf.generate with ``price=λ``, each position's
verifier π (target p, drafter q) the maximiser of Σ min(π, q) − λ·D_f(π‖p)."""

from __future__ import annotations

import numpy as np
import pytest

import mentored
from mentored import _core
from mentored.backends.host import perspective_terms
from mentored.backends.shared import onehot_price_search
from mentored.verify.serving import Verifier, onehot_acceptance, rejection_sample, tree_verifier

DIVS = ("kl", "tv", "chi2", "hellinger", "reverse_kl", "js")
PRICES = (0.3, 2.0, 15.0)  # none at tv's price 1, where every point of the curve is optimal


def _rows(rng, B, V, zeros=False):
    p = rng.dirichlet(np.full(V, 0.7), B)
    q = rng.dirichlet(np.full(V, 0.7), B)
    if zeros:  # the target's zeros (top-k): the drafter keeps mass there, so that zeros="keep" binds
        p[:, : V // 3] = 0.0
        p /= p.sum(1, keepdims=True)
    return p, q


def _onehot_scan(px, lam, name, n=40_001):
    """The best a ∈ [p_x, 1] of a − λ·D(a) on a grid, D from the divergence's definition on the two
    classes {x} and the rest: no bisection, no derivative."""
    div = mentored.divergence(name)
    a = np.linspace(px, 1.0, n)
    D = np.array([div(np.array([v, 1.0 - v]), np.array([px, 1.0 - px])) for v in a]) if n < 5000 else None
    if D is None:  # the perspective terms, vectorised (y·f̃(x/y), the same definition)
        term = perspective_terms(div)
        D = term(a, np.full_like(a, px)) + term(1.0 - a, np.full_like(a, 1.0 - px))
    g = a - lam * D
    i = int(np.argmax(g))
    return a[i], g[i], a[1] - a[0]


@pytest.mark.parametrize("name", DIVS)
@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_price_tokens_are_the_budget_tokens_at_the_divergence_spent(name, zeros):
    """Given the same uniforms, rejection_sample(price=λ) emits what rejection_sample(budget=ε_b) emits,
    ε_b the divergence solve(p, q, price=λ) spends at each position (one position per request); with
    zeros="keep" a row whose price optimum runs onto {p = 0} is the budget ∞ row (the end of the
    finite curve). The divergence reported (return_logprobs → .spent) is that optimum's."""
    rng = np.random.default_rng(11)
    B, V = 40, 12
    p, q = _rows(rng, B, V, zeros=zeros == "keep")
    draft = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((B, 2))
    bonus = np.zeros(B, dtype=np.int64)
    for lam in PRICES:
        sol = mentored.solve(p, q, divergence=name, price=np.full(B, lam))
        eps = np.asarray(sol.divergence, dtype=np.float64)
        onto_zeros = np.isinf(np.asarray(sol.t_hi)) if zeros == "keep" else np.zeros(B, dtype=bool)
        eps = np.where(onto_zeros, np.inf, eps)
        kw = dict(uniforms=u, divergence=name, zeros=zeros, return_logprobs=True)
        by_price = rejection_sample(draft, [1] * B, q, p, bonus, price=lam, **kw)
        by_budget = rejection_sample(draft, [1] * B, q, p, bonus, budget=eps, **kw)
        np.testing.assert_array_equal(by_price.tokens, by_budget.tokens)
        np.testing.assert_allclose(by_price.logprobs, by_budget.logprobs, rtol=1e-7, atol=1e-9)
        spent = by_price.spent[:, 0]
        np.testing.assert_allclose(spent[~onto_zeros], np.asarray(sol.divergence)[~onto_zeros], rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(spent, by_budget.spent[:, 0], rtol=1e-7, atol=1e-12)
        # Verifier and speculative_step make the same decisions
        ver = Verifier(V, divergence=name, price=lam, zeros=zeros, dtype=np.float64)
        np.testing.assert_array_equal(ver(draft, [1] * B, q, p, bonus[:, None], uniforms=u), by_price.tokens)
        if zeros == "continue":
            step = mentored.speculative_step(np.stack([p, p], 1), bonus[:, None], q[:, None], draft[:, None], divergence=name,
                                             price=lam, uniforms=u[:, None], zeros=zeros)
            np.testing.assert_array_equal(step, by_price.tokens)


def test_block_verification_takes_a_price():
    """method="block" on the chain of price verifiers: the same as on the chain of budget verifiers at
    the divergences they spend (speculative_step's per-position budgets)."""
    rng = np.random.default_rng(3)
    B, k, V = 6, 3, 10
    p = rng.dirichlet(np.ones(V), (B, k + 1))
    q = rng.dirichlet(np.ones(V), (B, k))
    draft = np.array([[rng.choice(V, p=q[b, j]) for j in range(k)] for b in range(B)])
    u = rng.random((B, k, 2))
    bonus = rng.integers(0, V, (B, 1))
    lam = 3.0
    eps = np.asarray(mentored.solve(p[:, :k].reshape(-1, V), q.reshape(-1, V), divergence="kl",
                                    price=np.full(B * k, lam)).divergence).reshape(B, k)
    a = mentored.speculative_step(p, bonus, q, draft, price=lam, uniforms=u, method="block", return_logprobs=True)
    b = mentored.speculative_step(p, bonus, q, draft, budget=eps, uniforms=u, method="block", return_logprobs=True)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.spent, b.spent, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("name", DIVS)
def test_token_only_verifier_is_the_best_of_a_scan(name):
    """π_x of a token-only draft at price λ against a fine scan of a − λ·D(a) over [p_x, 1]; the golden
    section for divergences the core cannot evaluate agrees with the core's bisection."""
    rng = np.random.default_rng(5)
    div = mentored.divergence(name)
    px = np.concatenate([rng.uniform(0.01, 0.95, 3), [0.5]])
    for lam in (0.2, 1.5, 6.0, 80.0):
        a = onehot_acceptance(px, divergence=name, price=lam, zeros="continue")
        golden = onehot_price_search(np, px, np.full(px.size, lam), div, "continue", perspective_terms(div))
        for i, x in enumerate(px):
            best_a, best_g, step = _onehot_scan(float(x), lam, name)
            term = perspective_terms(div)
            g = a[i] - lam * (term(a[i], x) + term(1.0 - a[i], 1.0 - x))
            assert g >= best_g - 1e-12, (name, lam, x)
            if name != "tv":
                assert abs(a[i] - best_a) <= 2 * step + 1e-6, (name, lam, x, a[i], best_a)
            assert golden[i] == pytest.approx(a[i], abs=1e-6)
    # tv: all below price 1, nothing above, the largest (all) at 1
    np.testing.assert_array_equal(onehot_acceptance(px, divergence="tv", price=0.99), 1.0)
    np.testing.assert_array_equal(onehot_acceptance(px, divergence="tv", price=1.0), 1.0)
    np.testing.assert_array_equal(onehot_acceptance(px, divergence="tv", price=1.01), px)
    np.testing.assert_array_equal(onehot_acceptance(px, divergence="kl", price=np.inf), px)
    np.testing.assert_array_equal(onehot_acceptance(px, divergence="kl", price=0.0), 1.0)
    # chi2 in closed form: D(a) = (a − p_x)²/(p_x(1 − p_x)), so a = p_x + p_x(1 − p_x)/(2λ) inside [p_x, 1]
    np.testing.assert_allclose(onehot_acceptance(px, divergence="chi2", price=4.0), np.minimum(px + px * (1 - px) / 8.0, 1.0),
                               rtol=1e-12)
    # p_x = 0: nothing with zeros="keep" (and where f∞ = ∞)
    assert onehot_acceptance(0.0, divergence="hellinger", price=0.5) == 0.0
    assert onehot_acceptance(0.0, divergence="kl", price=0.5, zeros="continue") == 0.0
    assert onehot_acceptance(0.0, divergence="hellinger", price=0.5, zeros="continue") > 0.0


@pytest.mark.parametrize("name", DIVS)
def test_token_only_drafts_at_a_price(name):
    """rejection_sample(draft_probs=None, price=λ): the same tokens as the budget run at the divergence
    each position's π_x spends, and .spent is that divergence."""
    rng = np.random.default_rng(8)
    B, V, lam = 30, 9, 2.5
    p, _ = _rows(rng, B, V)
    draft = rng.integers(0, V, B)
    u = rng.random((B, 2))
    bonus = np.zeros(B, dtype=np.int64)
    px = p[np.arange(B), draft]
    a = onehot_acceptance(px, divergence=name, price=lam)
    term = perspective_terms(mentored.divergence(name))
    D = term(a, px) + term(1.0 - a, 1.0 - px)
    got = rejection_sample(draft, [1] * B, None, p, bonus, divergence=name, price=lam, uniforms=u, return_logprobs=True)
    ref = rejection_sample(draft, [1] * B, None, p, bonus, divergence=name, budget=D, uniforms=u, return_logprobs=True)
    same = np.abs(ref.logprobs[:, 0] - got.logprobs[:, 0]) < 1e-6  # the bisections agree to ~1e-16 in a: all of them
    assert same.all()
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_allclose(got.spent[:, 0], D, rtol=1e-12, atol=1e-15)
    accepted = got.tokens[:, 0] == draft
    np.testing.assert_allclose(np.exp(got.logprobs[accepted, 0]), a[accepted], rtol=1e-12)


@pytest.mark.parametrize("name", ("kl", "tv", "chi2", "hellinger", "js"))
def test_tree_acceptance_objective_at_a_price(name):
    """The set verifier at a price: its mass on a node's children is the token-only price verifier at
    p_v(S), against a scan; greedy requests are unchanged."""
    rng = np.random.default_rng(2)
    V, lam = 8, 3.0
    p = rng.dirichlet(np.ones(V), 4)
    tokens, parents = [0, 1, 4, 6], [-1, 0, 0, 1]
    accept, value = tree_verifier(tokens, parents, [4], p, divergence=name, price=lam, objective="acceptance")
    for v, kids in ((0, [1, 2]), (1, [3])):
        PS = p[v, [tokens[c] for c in kids]].sum() / p[v].sum()
        best_a, best_g, step = _onehot_scan(float(PS), lam, name)
        term = perspective_terms(mentored.divergence(name))
        m = accept[kids].sum()
        assert m - lam * (term(m, PS) + term(1.0 - m, 1.0 - PS)) >= best_g - 1e-12
        assert m == pytest.approx(onehot_acceptance(PS, divergence=name, price=lam), abs=1e-12)
    greedy = tree_verifier(tokens, parents, [4], p, divergence=name, price=lam, is_greedy=[True])[0]
    np.testing.assert_array_equal(greedy, tree_verifier(tokens, parents, [4], p, divergence=name, budget=0.2, is_greedy=[True])[0])


@pytest.mark.parametrize("name", ("kl", "tv", "chi2", "hellinger", "js", "reverse_kl"))
def test_weighted_node_problem_at_a_price(name):
    """objective="length": a node's masses at price λ maximise Σ w m − λ·D over the class masses; they
    are the budget solution at the divergence they spend, and beat random feasible perturbations."""
    rng = np.random.default_rng(9)
    code = int(mentored.divergence(name).compiled)
    term = perspective_terms(mentored.divergence(name))
    for _ in range(6):
        n = 4
        P = rng.dirichlet(np.ones(n))
        w = np.concatenate([[0.0], 1.0 + rng.uniform(0, 2, n - 1)])
        for lam in (0.4, 2.5, 12.0):
            m = _core.tree_node_masses(P[None], w[None], np.array([lam]), code, True, price=True)[0]
            D = float(term(m, P).sum())
            gain = float(w @ m) - lam * D
            m_budget = _core.tree_node_masses(P[None], w[None], np.array([D]), code, True)[0]
            if name == "tv":  # a linear program: the budget solution at D reaches the same value
                assert float(w @ m_budget) == pytest.approx(float(w @ m), abs=1e-12)
            else:
                np.testing.assert_allclose(m_budget, m, atol=1e-7)
            for _ in range(200):
                z = np.clip(m + rng.normal(0, 0.02, n), 0, None)
                z /= z.sum()
                assert float(w @ z) - lam * float(term(z, P).sum()) <= gain + 1e-10
    # the tree itself: depth 2, weights 1 + A(child), one call
    p = rng.dirichlet(np.ones(6), 4)
    a_price, val = tree_verifier([0, 1, 2, 3], [-1, 0, 0, 1], [4], p, divergence=name, price=2.0, objective="length")
    assert np.all(a_price >= 0) and a_price[1] + a_price[2] <= 1 + 1e-12 and val[0] > 0


def test_a_per_request_price_with_budgets():
    """One price per request, NaN where a request uses its budget: each request as if alone."""
    rng = np.random.default_rng(4)
    B, V = 5, 10
    p, q = _rows(rng, B * 2, V)
    draft = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((2 * B, 2))
    bonus = np.zeros(B, dtype=np.int64)
    price = np.array([1.5, np.nan, 0.0, np.inf, np.nan])
    budget = np.array([0.0, 0.2, 0.0, 0.0, 0.05])
    mixed = rejection_sample(draft, [2] * B, q, p, bonus, price=price, budget=budget, uniforms=u)
    for b in range(B):
        rows = slice(2 * b, 2 * b + 2)
        kw = dict(budget=budget[b]) if np.isnan(price[b]) else dict(price=price[b])
        alone = rejection_sample(draft[rows], [2], q[rows], p[rows], bonus[b : b + 1], uniforms=u[rows], **kw)
        np.testing.assert_array_equal(mixed[b], alone[0])
    lossless = rejection_sample(draft, [2] * B, q, p, bonus, price=np.inf, uniforms=u)
    np.testing.assert_array_equal(lossless, rejection_sample(draft, [2] * B, q, p, bonus, budget=0.0, uniforms=u))


def test_cpu_tensors_take_a_price():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    B, V = 4, 7
    p, q = _rows(rng, B, V)
    draft = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((B, 2))
    bonus = np.zeros(B, dtype=np.int64)
    want = rejection_sample(draft, [1] * B, q, p, bonus, price=2.0, uniforms=u)
    got = rejection_sample(*(torch.as_tensor(x) for x in (draft,)), [1] * B, torch.as_tensor(q), torch.as_tensor(p), torch.as_tensor(bonus),
                           price=2.0, uniforms=u)
    np.testing.assert_array_equal(got.numpy(), want)


def test_price_errors():
    rng = np.random.default_rng(0)
    B, V = 3, 6
    p, q = _rows(rng, B, V)
    draft = np.zeros(B, dtype=np.int64)
    bonus = np.zeros(B, dtype=np.int64)
    call = lambda **kw: rejection_sample(draft, [1] * B, q, p, bonus, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="price must be nonnegative"):
        call(price=-1.0)
    with pytest.raises(ValueError, match="price must be nonnegative"):
        call(price=[1.0, -2.0, 0.5])
    with pytest.raises(ValueError, match="price is NaN"):
        call(price=np.nan)
    with pytest.raises(ValueError, match=r"request 0 has both budget=0.1 and price=2.0"):
        call(price=2.0, budget=0.1)
    with pytest.raises(ValueError, match=r"request 2 has both budget"):
        call(price=[np.nan, np.nan, 1.0], budget=[0.3, 0.3, 0.3])
    with pytest.raises(ValueError, match=r"price must be a scalar or have one value per request \(3\)"):
        call(price=[1.0, 2.0])
    with pytest.raises(TypeError, match="price must be a number"):
        call(price="high")
    with pytest.raises(ValueError, match="budget= and price="):
        onehot_acceptance(0.3, 0.1, price=1.0)
    with pytest.raises(ValueError, match="sequence 0 has both"):
        mentored.speculative_step(np.stack([p, p], 1), bonus[:, None], q[:, None], draft[:, None], budget=0.1, price=1.0)
    with pytest.raises(ValueError, match="mixes NaN"):
        mentored.speculative_step(np.stack([p, p, p], 1), bonus[:, None], np.stack([q, q], 1), np.stack([draft, draft], 1),
                                  price=np.array([[1.0, np.nan]] * B))
    with pytest.raises(ValueError, match="both budget"):
        Verifier(V, budget=0.2, price=1.0)
    with pytest.raises(ValueError, match="needs a built-in divergence"):
        tree_verifier([0, 1], [-1, 0], [2], p[:2], divergence=_user_chi2(), price=1.0, objective="acceptance")


def _user_chi2():
    """χ² from callables alone: the core cannot evaluate it, so π is solved in Python."""
    return mentored.Divergence("user_chi2", f=lambda t: (t - 1.0) ** 2, fprime=lambda t: 2.0 * (t - 1.0), f_inf=np.inf, f0=1.0)


def test_a_user_divergence_is_verified_at_a_price_like_the_builtin():
    """A divergence the core cannot evaluate (π solved in Python: solve(price=) for dense drafts, the
    golden-section search for token-only ones) decides as the built-in of the same f."""
    rng = np.random.default_rng(12)
    B, V = 12, 8
    p, q = _rows(rng, B, V)
    draft = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((B, 2))
    bonus = np.zeros(B, dtype=np.int64)
    for dq in (q, None):
        kw = dict(price=3.0, uniforms=u, return_logprobs=True)
        a = rejection_sample(draft, [1] * B, dq, p, bonus, divergence=_user_chi2(), **kw)
        b = rejection_sample(draft, [1] * B, dq, p, bonus, divergence="chi2", **kw)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.spent, b.spent, rtol=1e-6, atol=1e-12)


def test_hf_generate_spends_the_price_optimum():
    """hf.generate(price=λ): every returned token that is not a bonus was drawn from the price optimum
    of its (p, q), recomputed along the returned sequence by the models: its D (stats.spent) and log π."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    from transformers import GPT2Config, GPT2LMHeadModel

    from mentored.integrations.hf import generate, sampling_probs

    def build(seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(vocab_size=10, n_positions=64, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=1,
                         initializer_range=0.5)
        return GPT2LMHeadModel(cfg).eval()

    target, drafter = build(0), build(1)
    lam = 4.0
    ids, st = generate(target, drafter, torch.tensor([[3, 4, 5]]), k=3, max_new_tokens=12, price=lam, seed=3, top_k=6)
    new = ids[0, 3:]
    with torch.no_grad():
        P = sampling_probs(target(ids).logits[0].double(), top_k=6)
        Q = sampling_probs(drafter(ids).logits[0].double(), top_k=6)
    checked = 0
    for j, y in enumerate(new.tolist()):
        p, q = P[2 + j].numpy(), Q[2 + j].numpy()
        if st.spent[0][j] == 0:  # a bonus token: drawn from p, costs nothing
            assert st.logprobs[0][j] == pytest.approx(np.log(p[y]), abs=1e-5)
            continue
        sol = mentored.solve(p, q, divergence="kl", price=lam)
        assert st.spent[0][j] == pytest.approx(float(sol.divergence), rel=1e-4, abs=1e-9)
        assert st.logprobs[0][j] == pytest.approx(np.log(sol.pi[y]), abs=1e-4)
        checked += 1
    assert checked > 0
    with pytest.raises(ValueError, match="row 0 has both budget"):
        generate(target, drafter, torch.tensor([[3, 4, 5]]), k=2, max_new_tokens=2, price=lam, budget=0.1)
