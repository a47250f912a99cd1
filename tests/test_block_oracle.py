"""Block verification of mentored chains (mentored/check/block.py, docs/block.md).

The closed form of block verification's expected length is checked against a Monte Carlo run of the
algorithm itself (Sun et al., ICLR 2025, arXiv:2403.10444), not against an enumeration of the same
formula; the convex program's optimum against the chains it must beat.
"""


import numpy as np
import pytest

import mentored
from mentored.check.block import (
    block_length,
    block_optimum,
    chain_divergences,
    composed_chain,
    iid_tree,
    path_probabilities,
    random_tree,
    shared_root_optimum,
    token_length,
    weighted_greedy_chain,
)

BUILTINS = list(mentored.BUILTIN_NAMES)


def simulate_block(P, Q, PI, n, seed):
    """n independent rounds of block verification of k drafts from the drafter chain Q against the
    verifier chain PI, run as the algorithm states it: w_0 = 1, w_i = min(w_{i−1} π(X_i)/q(X_i), 1);
    for i < k, R_i = Σ_y (w_i π(y|X^i) − q(y|X^i))₊ and h_i = R_i/(R_i + 1 − w_i) (1 for 0/0),
    h_k = w_k; η_i ~ Bernoulli(h_i) and τ the largest i with η_i = 1 (0 if none). At τ < k the next
    token is drawn from (w_τ π − q)₊ normalised, at τ = k from π(·|X^k) (here: P's bonus is not
    modelled, only the first emitted token is returned). Returns (τ, first emitted token)."""
    rng = np.random.default_rng(seed)
    k, V = len(Q), Q[0].shape[-1]
    X = np.zeros((n, k), dtype=np.int64)
    w = np.ones((n, k + 1))
    h = np.ones((n, k + 1))
    res0 = None
    for i in range(k + 1):
        prefix = tuple(X[:, l] for l in range(i))
        if i > 0:
            x = X[:, i - 1]
            prev = tuple(X[:, l] for l in range(i - 1))
            pi_x = PI[i - 1][prev + (x,)]
            q_x = Q[i - 1][prev + (x,)]
            w[:, i] = np.minimum(w[:, i - 1] * pi_x / q_x, 1.0)
        if i < k:
            qrow = np.broadcast_to(Q[i][prefix], (n, V))
            pirow = np.broadcast_to(PI[i][prefix], (n, V))
            resid = np.maximum(w[:, i, None] * pirow - qrow, 0.0)
            R = resid.sum(axis=1)
            den = R + 1.0 - w[:, i]
            with np.errstate(divide="ignore", invalid="ignore"):
                h[:, i] = np.where(den > 0, R / np.where(den > 0, den, 1.0), 1.0)
            if i == 0:
                res0 = resid
            u = rng.random(n)[:, None]
            X[:, i] = (u > np.cumsum(qrow, axis=1)).sum(axis=1).clip(max=V - 1)
        else:
            h[:, i] = w[:, i]
    eta = rng.random((n, k + 1)) < h
    tau = np.where(eta.any(axis=1), k - np.argmax(eta[:, ::-1], axis=1), 0)
    # the first emitted token: X_1 if τ ≥ 1, else a draw from the residual at the root
    u = rng.random(n)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        cdf = np.cumsum(res0, axis=1) / res0.sum(axis=1, keepdims=True)
    from_residual = (u > cdf).sum(axis=1).clip(max=V - 1)
    first = np.where(tau >= 1, X[:, 0], from_residual)
    return tau, first


def test_binary_example_closed_forms():
    """p = (1/3, 2/3), q = (2/3, 1/3) at every position, k = 2, π = p (budget 0): token-by-token
    verification accepts 2/3 + 4/9 = 10/9 drafts, block verification 2/3 + 5/9 = 11/9."""
    P, Q = iid_tree([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2)
    assert token_length(Q, P) == pytest.approx(10 / 9, abs=1e-14)
    assert block_length(Q, P) == pytest.approx(11 / 9, abs=1e-14)
    for name in ("kl", "tv"):
        chain = composed_chain(P, Q, name, 0.0, mentored.solve)
        assert block_length(Q, chain) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize(
    "case",
    [
        ("binary", None, None, None),
        ("llm", 3, 3, ("kl", 0.05)),
        ("uniform", 4, 2, ("tv", 0.1)),
        ("uniform", 3, 3, "random"),
    ],
)
def test_closed_form_matches_the_algorithm(case):
    """block_length equals the mean accepted length of the algorithm run 200,000 times (within 5
    standard errors), and the first emitted token has law π(·|root): the simulation is the algorithm."""
    kind, V, k, chain = case
    if kind == "binary":
        P, Q = iid_tree([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2)
        PI = P
    else:
        P, Q = random_tree(V, k, 7, kind)
        if chain == "random":  # any chain, not a mentored one
            PI, _ = random_tree(V, k, 8, "uniform")
        else:
            PI = composed_chain(P, Q, *chain, solve=mentored.solve)
    n = 200_000
    tau, first = simulate_block(P, Q, PI, n, seed=1)
    se = tau.std() / np.sqrt(n)
    assert abs(tau.mean() - block_length(Q, PI)) < 5 * se + 1e-12
    freq = np.bincount(first, minlength=len(PI[0])) / n
    assert np.abs(freq - PI[0]).max() < 5 * np.sqrt(0.25 / n)
    # and block verification accepts at least as much as token by token
    assert block_length(Q, PI) >= token_length(Q, PI) - 1e-12


def test_closed_form_matches_the_serving_block_verifier():
    """rejection_sample(method="block") on drafts sampled from the drafter tree, with each position's
    target and drafter rows: its mean accepted length is block_length of the composed chain."""
    from mentored.verify.serving import rejection_sample

    V, k, n = 3, 3, 6_000  # rejection_sample plans each request in Python: ~0.6 ms a request
    P, Q = random_tree(V, k, 11, "uniform")  # block 2.084 against 1.855 token by token: told apart at this n
    rng = np.random.default_rng(2)
    X = np.zeros((n, k), dtype=np.int64)
    for i in range(k):
        qrow = np.broadcast_to(Q[i][tuple(X[:, l] for l in range(i))], (n, V))
        X[:, i] = (rng.random(n)[:, None] > np.cumsum(qrow, axis=1)).sum(axis=1).clip(max=V - 1)

    def rows(T):  # request b's k rows, consecutive
        return np.stack([np.broadcast_to(T[i][tuple(X[:, l] for l in range(i))], (n, V)) for i in range(k)], axis=1).reshape(n * k, V)

    target, draft = rows(P), rows(Q)
    out = rejection_sample(
        X.reshape(-1), [k] * n, draft, target, np.zeros((n, 1), dtype=np.int64),
        divergence="kl", budget=0.05, uniforms=rng.random((n * k, 2)), method="block",
    )
    accepted = (np.asarray(out) >= 0).sum(axis=1) - 1
    chain = composed_chain(P, Q, "kl", 0.05, mentored.solve)
    tol = 5 * accepted.std() / np.sqrt(n)
    assert abs(accepted.mean() - block_length(Q, chain)) < tol
    assert abs(accepted.mean() - token_length(Q, chain)) > tol


@pytest.mark.parametrize("name", BUILTINS)
def test_optimum_beats_composed_beats_token(name):
    """For every built-in: optimum ≥ block on the composed chain ≥ token by token on it; the optimum's
    chain is within budget at every prefix (the package's D_f) and its exact block length equals the
    program's value."""
    P, Q = random_tree(3, 2, 3, "uniform")
    eps = 0.05
    chain = composed_chain(P, Q, name, eps, mentored.solve)
    opt = block_optimum(P, Q, name, eps, baseline=chain)
    assert opt.status in ("optimal", "optimal_inaccurate")
    assert opt.value >= block_length(Q, chain) - 1e-7
    assert block_length(Q, chain) >= token_length(Q, chain) - 1e-12
    assert opt.value == pytest.approx(opt.objective, abs=1e-6)
    for d in chain_divergences(P, opt.chain, name):
        assert d.max() <= eps * (1 + 1e-9) + 1e-12
    for level in opt.chain:
        assert np.allclose(level.sum(axis=-1), 1.0, atol=1e-12) and level.min() >= 0


def test_the_gap_exists():
    """The optimum is strictly above the composed chain on an instance of uniform conditionals (k = 3),
    and the local weighted rule lies between (docs/block.md)."""
    P, Q = random_tree(4, 3, 1, "uniform")
    chain = composed_chain(P, Q, "tv", 0.1, mentored.solve)
    composed = block_length(Q, chain)
    greedy = block_length(Q, weighted_greedy_chain(P, Q, "tv", 0.1, chain))
    last = block_length(Q, weighted_greedy_chain(P, Q, "tv", 0.1, chain, levels="last"))
    opt = block_optimum(P, Q, "tv", 0.1, baseline=chain).value
    assert opt > composed + 1e-2
    assert composed - 1e-9 <= greedy <= opt + 1e-7
    assert composed - 1e-9 <= last <= opt + 1e-7


@pytest.mark.parametrize("name", ["kl", "neyman_chi2"])
def test_last_level_rule_never_loses(name):
    """The weighted rule at the last level only is optimal there given the chain above: never below the
    composed chain (random trees, several budgets)."""
    for seed in range(3):
        P, Q = random_tree(3, 3, seed, "uniform")
        for eps in (0.02, 0.2):
            chain = composed_chain(P, Q, name, eps, mentored.solve)
            last = weighted_greedy_chain(P, Q, name, eps, chain, levels="last")
            assert block_length(Q, last) >= block_length(Q, chain) - 1e-7


@pytest.mark.parametrize("name", ["kl", "hellinger", "tv"])
def test_one_draft_has_no_gap(name):
    """k = 1: block verification is token verification and the mentored verifier is the optimum."""
    P, Q = random_tree(5, 1, 4, "llm")
    chain = composed_chain(P, Q, name, 0.05, mentored.solve)
    assert block_length(Q, chain) == pytest.approx(token_length(Q, chain), abs=1e-14)
    assert block_optimum(P, Q, name, 0.05, baseline=chain).value == pytest.approx(block_length(Q, chain), abs=1e-6)


@pytest.mark.parametrize("name", ["kl", "chi2", "js"])
def test_small_budgets_approach_lossless_block_verification(name):
    """At budget 0 the target chain is the only feasible one; at a small budget the program's optimum is
    within a few √ε of lossless block verification (the acceptance grows like √ε, docs/theory.md §6)."""
    P, Q = random_tree(3, 2, 5, "llm")
    lossless = block_length(Q, P)
    zero = block_optimum(P, Q, name, 0.0)
    assert zero.value == lossless and all(np.array_equal(a, b) for a, b in zip(zero.chain, P))
    eps = 1e-4  # below ~1e-5 the cone solvers' accuracy (~1e-6 in E[τ]) is the size of the gain itself
    small = block_optimum(P, Q, name, eps)
    assert small.status in ("optimal", "optimal_inaccurate")
    assert lossless <= small.value <= lossless + 10 * len(P) * np.sqrt(eps)
    assert small.value >= block_length(Q, composed_chain(P, Q, name, eps, mentored.solve)) - 1e-6


def test_relaxation_bound_against_feasible_chains():
    """Every feasible chain's block length is a lower bound for the optimum: chains mixing the target
    with the composed and the greedy chains at random weights, prefix by prefix (feasible by convexity)."""
    P, Q = random_tree(3, 2, 6, "uniform")
    name, eps = "chi2", 0.1
    opt = block_optimum(P, Q, name, eps).value
    rng = np.random.default_rng(0)
    composed = composed_chain(P, Q, name, eps, mentored.solve)
    for base in (composed, weighted_greedy_chain(P, Q, name, eps, composed)):
        for _ in range(5):
            mixed = []
            for level, target in zip(base, P):
                t = rng.random(level.shape[:-1] + (1,))
                mixed.append(t * level + (1 - t) * target)
            assert opt >= block_length(Q, mixed) - 1e-7


def test_hard_zeros_of_the_target():
    """A target with zeros: kl (f∞ = ∞) puts no mass there; tv (f∞ = ½) may, paying for it."""
    P, Q = random_tree(3, 2, 9, "uniform")
    P = [p.copy() for p in P]
    P[0][2] = 0.0
    P[0] /= P[0].sum()
    P[1][:, 1] = 0.0
    P[1] /= P[1].sum(axis=-1, keepdims=True)
    opt = block_optimum(P, Q, "kl", 0.1)
    assert opt.chain[0][2] == 0.0 and np.all(opt.chain[1][:, 1] == 0.0)
    assert opt.value >= block_length(Q, composed_chain(P, Q, "kl", 0.1, mentored.solve)) - 1e-7
    opt_tv = block_optimum(P, Q, "tv", 0.1)
    assert opt_tv.value >= block_length(Q, composed_chain(P, Q, "tv", 0.1, mentored.solve)) - 1e-7
    assert max(d.max() for d in chain_divergences(P, opt_tv.chain, "tv")) <= 0.1 + 1e-9


def test_the_root_verifier_depends_on_deeper_conditionals():
    """Two trees with the same root conditionals and different conditionals below: forced to share a
    root verifier, they lose against their separate optima, so no rule choosing the root verifier
    from the root's own p and q is optimal for both (docs/block.md)."""
    rng = np.random.default_rng(2)
    p0, q0 = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
    pairs = []
    for m in range(2):
        P, Q = random_tree(3, 2, 200 + m, "uniform")
        P[0], Q[0] = p0, q0
        pairs.append((P, Q))
    separate = sum(block_optimum(P, Q, "tv", 0.1).value for P, Q in pairs)
    shared, values, root = shared_root_optimum(pairs, "tv", 0.1)
    assert shared < separate - 1e-2
    assert shared == pytest.approx(sum(values), abs=1e-12)


def test_path_probabilities():
    P, Q = random_tree(3, 3, 0, "llm")
    paths = path_probabilities(Q)
    assert [x.shape for x in paths] == [(), (3,), (3, 3), (3, 3, 3)]
    assert all(x.sum() == pytest.approx(1.0, abs=1e-12) for x in paths)


def test_bad_input_is_refused_clearly():
    P, Q = random_tree(3, 2, 0, "llm")
    with pytest.raises(ValueError, match=r"P\[1\] has shape"):
        block_optimum([P[0], P[1][0]], Q, "kl", 0.1)
    with pytest.raises(ValueError, match="expected k = 2"):
        composed_chain(P, Q[:1], "kl", 0.1, mentored.solve)
    bad = [Q[0] * 1.1, Q[1]]
    with pytest.raises(ValueError, match="sums to"):
        block_length(bad, P)
    with pytest.raises(ValueError, match="negative"):
        token_length(Q, [P[0] - 0.5, P[1]])
    with pytest.raises(ValueError, match="budget must be"):
        block_optimum(P, Q, "kl", -1.0)
    with pytest.raises(ValueError, match="finite budget"):
        block_optimum(P, Q, "kl", float("inf"))
    import sympy as sp

    t = sp.Symbol("t", positive=True)
    custom = mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), t, name="triangular", timeout=120.0)  # a loaded machine
    with pytest.raises(ValueError, match="built-in divergences"):
        block_optimum(P, Q, custom, 0.1)
    with pytest.raises(TypeError, match="list of k arrays"):
        block_length(np.ones(3) / 3, P)
    with pytest.raises(TypeError, match="mentored.solve"):
        composed_chain(P, Q, "kl", 0.1, "mentored.solve")
    with pytest.raises(ValueError, match="baseline is not within budget"):
        block_optimum(P, Q, "kl", 0.01, baseline=Q)
    with pytest.raises(ValueError, match="levels must be"):
        weighted_greedy_chain(P, Q, "kl", 0.1, P, levels="first")
    with pytest.raises(ValueError, match="same root"):
        P2, Q2 = random_tree(3, 2, 1, "llm")
        shared_root_optimum([(P, Q), (P2, Q2)], "kl", 0.1)
