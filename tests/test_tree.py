"""Draft trees: mentored.serving.tree_sample and tree_verifier (docs/serving.md, "Draft trees").

Checked against what did not compute them: the convex oracle on the whole vocabulary at every node
(the weighted problem and the set verifier, every divergence, custom ones included) and by the
bottom-up recursion of the tree objective on 500 random trees; rejection_sample on chains, decision
for decision; the exact law π_v at each node and A(root) by sampling; the torch path against the
core, token for token, and with nothing read back from the device.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

import mentored
from mentored import _core
from mentored.check.oracle import oracle_weighted
from mentored.check.testing import llm_like_tree
from mentored.verify.serving import onehot_acceptance, rejection_sample, tree_sample, tree_verifier

T = sp.Symbol("t", positive=True)
CUSTOM = {"triangular": (T - 1) ** 2 / (T + 1), "alpha_1/3": (T ** sp.Rational(1, 3) - 1 - (T - 1) / 3) / sp.Rational(-2, 9)}


@pytest.fixture(scope="module")
def customs(custom_divergence):
    return {k: custom_divergence(e, T, name=k) for k, e in CUSTOM.items()}


def _random_tree(rng, V, max_depth=4, max_kids=4, max_nodes=12, zero=0.25):
    """A tree in topological (breadth-first) order, up to ``max_kids`` children a node and depth
    ``max_depth``, distinct tokens among siblings, and target rows with hard zeros (children's tokens
    among them)."""
    parents, depth = [-1], [0]
    i = 0
    while i < len(parents) and len(parents) < max_nodes:
        if depth[i] < max_depth:
            for _ in range(rng.integers(1 if i == 0 else 0, max_kids + 1)):
                if len(parents) == max_nodes:
                    break
                parents.append(i)
                depth.append(depth[i] + 1)
        i += 1
    parents = np.array(parents)
    tokens = np.empty(parents.size, dtype=np.int64)
    tokens[0] = rng.integers(V)
    for v in range(parents.size):
        kids = np.flatnonzero(parents == v)
        tokens[kids] = rng.choice(V, kids.size, replace=False)
    p = rng.dirichlet(np.full(V, 0.5), parents.size)
    p[rng.random(p.shape) < zero] = 0.0
    p[p.sum(1) == 0, 0] = 1.0
    return tokens, parents, p / p.sum(1, keepdims=True)


def _batch(trees):
    """(tokens, parents, num_nodes, target_probs) of a batch."""
    return (np.concatenate([t[0] for t in trees]), np.concatenate([t[1] for t in trees]), [len(t[0]) for t in trees],
            np.concatenate([t[2] for t in trees]))


def _pi(p, kid_tokens, masses, rest_mass=None):
    """π_v on the whole vocabulary: the children's masses, and the rest (1 − their sum unless given)
    in proportion to p off them."""
    pi = np.zeros_like(p)
    pi[kid_tokens] = masses
    rest = np.ones(p.size, dtype=bool)
    rest[kid_tokens] = False
    if p[rest].sum() > 0:
        pi[rest] = p[rest] * ((max(1.0 - masses.sum(), 0.0) if rest_mass is None else rest_mass) / p[rest].sum())
    return pi


def _oracle_tree(tokens, parents, p, div, eps, zeros):
    """(A, tight): A(v) at every node by the bottom-up recursion, each node's problem solved by the
    oracle on the whole vocabulary with the oracle's own values below (the value of the oracle's
    feasible points: a lower bound on the optimum), and whether every node's point is tight (solved
    "optimal" with the budget used up to 1e-8, or within 1e-8 of the best weight the target allows:
    nothing left to gain); (None, False) if the oracle has no usable point."""
    A, tight = np.zeros(tokens.size), True
    d = mentored.divergence(div)
    for v in range(tokens.size - 1, -1, -1):
        kids = np.flatnonzero(parents == v)
        if kids.size:
            W = np.zeros(p.shape[1])
            W[tokens[kids]] = 1.0 + A[kids]
            o = oracle_weighted(p[v], W, div, eps, zeros=zeros)
            if not o.usable(eps, 1e-9):
                return None, False
            A[v] = o.acceptance
            allowed = (p[v] > 0) | (zeros == "continue" and np.isfinite(d.f_inf))
            tight &= o.status == "optimal" and (o.divergence >= eps - 1e-8 * (1 + eps) or o.acceptance >= W[allowed].max() - 1e-8)
    return A, tight


# ---------------------------------------------------------------- a chain is rejection_sample


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_chain_is_rejection_sample_without_draft_probs(backend, rng, monkeypatch):
    """parents[i] = i − 1: the same tokens as rejection_sample(draft_probs=None) given the same
    uniforms, decision for decision, with the bonus drawn from the leaf's row at its u1 (greedy: its
    argmax); every divergence, both zero modes and objectives, greedy requests mixed in."""
    if backend == "torch":
        torch = pytest.importorskip("torch")
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    V = 7
    for trial in range(40):
        n = rng.integers(0, 5, 4)  # drafts per request
        rows = [rng.dirichlet(np.full(V, 0.4), k + 1) for k in n]
        for r in rows:
            r[rng.random(r.shape) < 0.25] = 0.0
            r[r.sum(1) == 0, 1] = 1.0
            r /= r.sum(1, keepdims=True)
        tokens = [rng.integers(0, V, k + 1) for k in n]
        u = [rng.random((k + 1, 2)) for k in n]
        greedy = rng.random(4) < 0.3
        bonus = [int(r[-1].argmax()) if g else int(np.flatnonzero(np.cumsum(r[-1]) > w[-1, 1] * np.cumsum(r[-1])[-1])[0])
                 for r, w, g in zip(rows, u, greedy)]
        kw = dict(divergence=str(rng.choice(mentored.BUILTIN_NAMES)), budget=float(rng.choice([0.0, 0.05, 0.5])),
                  zeros=str(rng.choice(["keep", "continue"])), is_greedy=greedy)
        want = rejection_sample(np.concatenate([t[1:] for t in tokens]), n, None, np.concatenate([r[:-1] for r in rows]),
                                np.array(bonus).reshape(-1, 1), uniforms=np.concatenate([w[:-1] for w in u]), **kw)
        T, P = np.concatenate(tokens), np.concatenate(rows)
        if backend == "torch":
            T, P = torch.as_tensor(T), torch.as_tensor(P)
        out, last = tree_sample(T, np.concatenate([np.arange(-1, k) for k in n]), n + 1, P, objective=str(rng.choice(["length", "acceptance"])),
                                uniforms=np.concatenate(u), **kw)
        out, last = np.asarray(out), np.asarray(last)
        assert_array_equal(out, want, err_msg=str(kw))
        assert_array_equal(last, (want >= 0).sum(1) - 1)


# ---------------------------------------------------------------- each node's verifier, against the oracle


def _node_cases(customs):
    return [*mentored.BUILTIN_NAMES, *customs.values()]


def test_each_nodes_verifier_is_the_oracles_optimum(customs, rng):
    """At every node of random trees (hard zeros, children with p = 0 included), π_v attains the
    optimum of max Σ w π over the whole vocabulary under D_f(π‖p_v) ≤ ε (the oracle, with w = 1 + A(c)
    from the implementation's own values below: "length"; w = 1: the set verifier, "acceptance"),
    to 1e-7, and is feasible: every divergence, custom ones included, both zero modes."""
    worst, nodes = 0.0, 0
    for k, div in enumerate(_node_cases(customs)):
        for objective in ("length", "acceptance"):
            for zeros in ("keep", "continue"):
                eps = [0.02, 0.3, 1.2][(k + nodes) % 3]
                tokens, parents, p = _random_tree(rng, int(rng.integers(6, 11)), max_nodes=9)
                accept, value = tree_verifier(tokens, parents, [tokens.size], p, divergence=div, budget=eps, objective=objective, zeros=zeros)
                d = mentored.divergence(div)
                for v in range(tokens.size):
                    kids = np.flatnonzero(parents == v)
                    if not kids.size:
                        continue
                    W = np.zeros(p.shape[1])
                    W[tokens[kids]] = 1.0 + value[kids] if objective == "length" else 1.0
                    o = oracle_weighted(p[v], W, d, eps, zeros=zeros)
                    assert o.usable(eps, 1e-9), o.status
                    pi = _pi(p[v], tokens[kids], accept[kids])
                    if 1.0 - accept[kids].sum() > 1e-9:  # the rest's mass is 1 − Σ here: feasible where that can hold it
                        assert d(pi, p[v]) <= eps * (1 + 1e-9) + 1e-15
                    if zeros == "keep":
                        assert np.all(pi[p[v] == 0] == 0)
                    got = W @ pi
                    assert abs(got - o.acceptance) <= 1e-7, (d.name, objective, zeros, v, got, o.acceptance)
                    assert abs(value[v] - (W @ pi if objective == "length" else accept[kids] @ (1 + value[kids]))) <= 1e-12
                    worst, nodes = max(worst, abs(got - o.acceptance)), nodes + 1
    assert nodes > 100


@pytest.mark.parametrize("name", mentored.BUILTIN_NAMES)
def test_the_core_node_solver_at_ties_and_extremes(name):
    """The class form (tree.hpp, node_masses) against the oracle on the whole vocabulary where the
    weights tie, the budget is 0, small, past what any point needs or infinite, and a child the
    target gives 0 is the best (keep: it gets nothing; continue: f∞ decides): feasible from the
    definition of D_f, and not below the oracle's point by more than 1e-7 (above it means the oracle's
    point is short of the optimum: at ε = 50 Clarabel leaves budget unused). Below 1e-3 the oracle's
    tolerance on the budget buys it more than 1e-7: chi2's closed form checks tiny budgets, below."""
    d = mentored.divergence(name)
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0, 0.0])
    cases = [([1, 2], [2.0, 2.0]), ([1, 2, 3], [1.5, 3.0, 3.0]), ([1, 5], [1.0, 4.0]), ([5, 6], [2.0, 3.0]), ([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])]
    for toks, w in cases:
        toks, w = np.array(toks), np.array(w)
        P = np.concatenate([[1 - p[toks].sum()], p[toks]])
        for eps in (0.0, 1e-3, 0.05, 0.6, 50.0, np.inf):
            for keep in (True, False):
                m = _core.tree_node_masses(P[None], np.concatenate([[0.0], w])[None], np.array([eps]), int(d.compiled), keep)[0]
                assert abs(m.sum() - 1) < 1e-12 and np.all(m >= 0)
                pi = _pi(p, toks, m[1:], m[0])  # the rest's mass as solved (reverse_kl at ε = 50 leaves it 7e-35)
                W = np.zeros(p.size)
                W[toks] = w
                if eps == 0:
                    assert_array_equal(m, P)
                    continue
                o = oracle_weighted(p, W, d, min(eps, 1e6), zeros="keep" if keep else "continue")
                if not o.usable(min(eps, 1e6), 1e-9):
                    continue  # f∞ = ∞ with a budget of 1e6: the oracle's scaling; the cases below have answers in closed form
                assert d(pi, p) <= eps * (1 + 1e-9) + 1e-15
                assert W @ pi >= o.acceptance - 1e-7, (toks, w, eps, keep, m, o.pi)
            if np.isinf(eps):  # everything on the best child the target allows (keep) or any child (continue, f∞ < ∞)
                top = w == w.max()
                allowed = p[toks] > 0
                if allowed[top].any():
                    assert abs(m[1:][top].sum() - 1) < 1e-12


def test_tiny_budgets_against_chi2s_closed_form(rng):
    """chi2: while no mass reaches 0, the optimum of Σ w m on {Σ (m − P)²/P ≤ ε} moves
    δ_j = P_j (w_j − w̄)·√(ε / Σ P (w − w̄)²), w̄ = Σ P w: the core's masses to 1e-9 of δ at budgets
    down to 1e-12 (where the oracle's tolerances cannot resolve it), zeros of P kept out."""
    code = int(mentored.divergence("chi2").compiled)
    for _ in range(50):
        k = int(rng.integers(2, 6))
        P = rng.dirichlet(np.ones(k + 1))
        P[rng.integers(1, k + 1)] = 0.0 if rng.random() < 0.3 else P[1]
        P /= P.sum()
        w = np.concatenate([[0.0], 1 + 3 * rng.random(k)])
        pos = P > 0
        wbar = P @ w
        var = P[pos] @ (w[pos] - wbar) ** 2
        for eps in (1e-12, 1e-8, 1e-4):
            m = _core.tree_node_masses(P[None], w[None], np.array([eps]), code, True)[0]
            delta = np.where(pos, P * (w - wbar) * np.sqrt(eps / var), 0.0)
            assert np.all(P + delta > 0, where=pos)
            assert_allclose(m - P, delta, rtol=1e-9, atol=1e-9 * np.abs(delta).max())


def test_equal_weights_are_the_set_verifier(rng):
    """Children of equal weights (leaves): "length" is "acceptance" bit for bit, the set verifier whose
    mass on the children is onehot_acceptance at p(S), spread in proportion to p."""
    for name in mentored.BUILTIN_NAMES:
        for zeros in ("keep", "continue"):
            trees = []
            for _ in range(6):
                V = 9
                k = int(rng.integers(1, 5))
                tokens = np.concatenate([[0], rng.choice(V, k, replace=False)])
                p = rng.dirichlet(np.full(V, 0.5), k + 1)
                p[0, tokens[1]] = 0.0 if rng.random() < 0.5 else p[0, tokens[1]]
                trees.append((tokens, np.concatenate([[-1], np.zeros(k, dtype=np.int64)]), p / p.sum(1, keepdims=True)))
            args = _batch(trees)
            a_len, v_len = tree_verifier(*args, divergence=name, budget=0.2, zeros=zeros)
            a_acc, v_acc = tree_verifier(*args, divergence=name, budget=0.2, objective="acceptance", zeros=zeros)
            assert_array_equal(a_len, a_acc)
            assert_array_equal(v_len, v_acc)
            s = 0
            for tokens, _, p in trees:
                PS = p[0, tokens[1:]].sum()
                m = float(onehot_acceptance(PS, 0.2, name, zeros))
                want = m * p[0, tokens[1:]] / PS if PS > 0 else np.eye(tokens.size - 1)[0] * m
                assert_allclose(a_len[s + 1 : s + tokens.size], want, rtol=1e-12, atol=1e-300)
                s += tokens.size


# ---------------------------------------------------------------- the tree objective


def test_the_tree_objective_is_the_oracles_on_250_trees(customs):
    """A(root) of objective="length" equals the bottom-up recursion with the oracle at every node
    (values from the oracle's own optima) to 1e-7 on 250 random trees (depth ≤ 4, ≤ 4 children a node,
    hard zeros), over every divergence and two custom ones, both zero modes; and it is never below
    "acceptance"'s A(root).

    The oracle's recursion is the value of its feasible points, a lower bound on the optimum, and
    each of the core's nodes is feasible (checked here from the definition of D_f), so its A(root) is
    one too: equal to 1e-7 where every node of the oracle's is tight; elsewhere (Clarabel
    "optimal_inaccurate" with budget left over, at children the target gives 1e-6) not below it."""
    rng = np.random.default_rng(20260501)
    divs = _node_cases(customs)
    checked, both, worst, gain = 0, 0, 0.0, 0.0
    for k in range(250 // 25):  # 10 batches of 25 trees: one call per batch and objective
        div, zeros, eps = divs[k % len(divs)], ("keep", "continue")[k % 2], [0.01, 0.1, 0.4, 1.5][(k // 2) % 4]
        V = int(rng.integers(6, 13))
        trees = [_random_tree(rng, V, max_nodes=10) for _ in range(25)]
        args = _batch(trees)
        accept, value = tree_verifier(*args, divergence=div, budget=eps, zeros=zeros)
        _, value_acc = tree_verifier(*args, divergence=div, budget=eps, zeros=zeros, objective="acceptance")
        roots = np.concatenate([[0], np.cumsum(args[2])[:-1]])
        assert np.all(value[roots] >= value_acc[roots] - 1e-12)
        gain = max(gain, float((value[roots] - value_acc[roots]).max()))
        d = mentored.divergence(div)
        for (tokens, parents, p), r in zip(trees, roots):
            for v in range(tokens.size):
                kids = np.flatnonzero(parents == v)
                if kids.size and 1.0 - accept[r + kids].sum() > 1e-9:  # where 1 − Σ can hold the rest's mass
                    assert d(_pi(p[v], tokens[kids], accept[r + kids]), p[v]) <= eps * (1 + 1e-9) + 1e-15
            A, tight = _oracle_tree(tokens, parents, p, div, eps, zeros)
            if A is None:
                continue
            assert value[r] >= A[0] - 1e-7, (d.name, zeros, eps, value[r], A[0])
            if tight:
                assert value[r] <= A[0] + 1e-7, (d.name, zeros, eps, value[r], A[0])
                worst = max(worst, abs(value[r] - A[0]))
            checked += 1
            both += tight
    assert checked >= 245 and both >= 225, (checked, both)
    assert gain > 1e-3  # the weighted verifier gains somewhere on these trees


def test_length_beats_acceptance_where_subtrees_differ():
    """Two children: a leaf the target prefers, and one whose subtree is a likely chain. The set
    verifier spends the budget in proportion to p; "length" moves it to the deep child, and gains
    (its A(root), 2.95, is the oracle's; the set verifier's is 2.13)."""
    V = 6
    tokens = np.array([0, 1, 2, 3, 4, 5])
    parents = np.array([-1, 0, 0, 2, 3, 4])
    p = np.full((6, V), 0.02)
    p[0] = [0.05, 0.5, 0.3, 0.05, 0.05, 0.05]  # the leaf (token 1) is likelier than the chain's head (token 2)
    for v, nxt in ((2, 3), (3, 4), (4, 5)):
        p[v, nxt] = 0.9
    p /= p.sum(1, keepdims=True)
    accept, value = tree_verifier(tokens, parents, [6], p, divergence="kl", budget=0.3)
    accept_set, value_set = tree_verifier(tokens, parents, [6], p, divergence="kl", budget=0.3, objective="acceptance")
    assert value[0] > value_set[0] + 0.5
    assert accept[2] > accept_set[2] and accept[1] < accept_set[1]
    A, tight = _oracle_tree(tokens, parents, p, "kl", 0.3, "keep")
    assert tight and abs(value[0] - A[0]) <= 1e-7


# ---------------------------------------------------------------- f(0) = ∞: the complement keeps its mass


def _breadth_first(widths):
    """parents of the full tree with widths[d] children at each node of depth d, breadth first."""
    parents, level = [-1], [0]
    for w in widths:
        nxt = []
        for v in level:
            for _ in range(w):
                parents.append(v)
                nxt.append(len(parents) - 1)
        level = nxt
    return np.array(parents)


def _f0_infinite(custom_divergence):
    """(divergence, objective) with f(0) = ∞: two built-ins, the user generator −log t below 1 and
    (t − 1)² above (no (f')⁻¹ in closed form: the set verifier only), and (t − 1)² − log t (f∞ = ∞ too)."""
    log_square = custom_divergence(sp.Piecewise((-sp.log(T), T < 1), ((T - 1) ** 2, True)), T, name="log_square")
    log_plus_square = custom_divergence((T - 1) ** 2 - sp.log(T), T, name="log_plus_square")
    both = ("length", "acceptance")
    return [(d, o) for d in ("reverse_kl", "neyman_chi2", log_plus_square) for o in both] + [(log_square, "acceptance")]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_every_node_is_within_budget_where_f0_is_infinite(backend, custom_divergence, monkeypatch):
    """Where f(0) = ∞ a complement left with no mass costs D = ∞, and where its mass is small a few
    ulps of 1 are a large part of it: π_v as tree_verifier's accept values give it (each child its
    accept, the complement 1 − Σ accept spread in proportion to p_v off the children) is within ε at
    every node, D_f(π_v‖p_v) ≤ ε(1 + 1e-6) + 1e-12, and the complement keeps mass wherever p_v puts
    some there: 15 LLM-like trees (89 nodes, 41 with children, V = 200) at budgets 0 to 10, each
    divergence with f(0) = ∞ (built-in and user generators) and objective, the core and the torch
    path (CPU tensors)."""
    torch = pytest.importorskip("torch") if backend == "torch" else None
    if backend == "torch":
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    rng = np.random.default_rng(20260705)
    parents = _breadth_first([4, 3, 2, 2])
    n, R, V = parents.size, 15, 200
    trees = [llm_like_tree(rng, parents, V) for _ in range(R)]
    tokens, p = np.concatenate([t[0] for t in trees]), np.concatenate([t[1] for t in trees])
    eps = np.array([0.0, 0.01, 0.1, 1.0, 10.0])[np.arange(R) % 5]
    inner = [(v, np.flatnonzero(parents == v)) for v in range(n) if (parents == v).any()]
    checked = 0
    for div, objective in _f0_infinite(custom_divergence):
        d = mentored.divergence(div)
        args = (tokens, np.tile(parents, R), [n] * R, p) if torch is None else \
            (torch.as_tensor(tokens), np.tile(parents, R), [n] * R, torch.as_tensor(p))
        accept, _ = tree_verifier(*args, divergence=div, budget=eps, objective=objective)
        accept = np.asarray(accept)
        for r in range(R):
            for v, kids in inner:
                row, got, toks = p[r * n + v], accept[r * n + kids], tokens[r * n + kids]
                rest = np.ones(V, dtype=bool)
                rest[toks] = False
                left = 1.0 - got.sum()
                assert left > 0, (d.name, objective, r, v, got)  # p_v puts mass on the complement of every node here
                pi = np.zeros(V)
                pi[toks] = got
                pi[rest] = row[rest] * (left / row[rest].sum())
                D = d(pi, row)
                assert D <= eps[r] * (1 + 1e-6) + 1e-12, (d.name, objective, eps[r], r, v, D, left)
                checked += 1
    assert checked == 7 * R * len(inner)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_walk_emits_the_complement_where_f0_is_infinite(backend, monkeypatch):
    """The walk reaches the complement of a node's children with the probability 1 − Σ accept, so a
    complement with mass must leave the children's accept values a sum below 1: under reverse_kl at a
    budget past what any point needs (the optimum's complement is far below an ulp of 1) and where the
    complement's target mass is 1e-18 (1 − Σ p over the children rounds to 0), at budget 0 too, the
    root's three children sum below 1, and u0 = 1 − 2⁻⁵³ walks past them to a complement token the
    target allows."""
    torch = pytest.importorskip("torch") if backend == "torch" else None
    if backend == "torch":
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    tokens, parents = np.array([0, 0, 1, 2]), np.array([-1, 0, 0, 0])
    u = np.zeros((4, 2))
    u[0] = [np.nextafter(1.0, 0.0), 0.5]
    spread = np.array([0.26, 0.23, 0.1, 0.19, 0.22, 0.0])  # the children hold 0.59
    tiny = np.array([0.5, 0.3, 0.2, 1e-18, 0.0, 0.0])
    for root, budgets in ((spread, (50.0, 1e3)), (tiny, (0.0, 0.5, 50.0))):
        p = np.tile(root, (4, 1))
        for eps in budgets:
            for objective in ("length", "acceptance"):
                kw = dict(divergence="reverse_kl", budget=eps, objective=objective)
                args = (tokens, parents, [4], p) if torch is None else (torch.as_tensor(tokens), parents, [4], torch.as_tensor(p))
                accept, _ = tree_verifier(*args, **kw)
                assert np.asarray(accept)[1:].sum() < 1.0, (root, eps, objective)
                out, last = tree_sample(*args, uniforms=u, **kw)
                out = np.asarray(out)
                assert int(np.asarray(last)[0]) == 0 and out[0, 0] in (3, 4), (root, eps, objective, out)


# ---------------------------------------------------------------- the law of what is emitted


def _samples(tokens, parents, p, N, seed, **kw):
    """N copies of one tree, verified with fresh uniforms: (out, last, accept, value)."""
    n = tokens.size
    args = (np.tile(tokens, N), np.tile(parents, N), [n] * N, np.tile(p, (N, 1)))
    u = np.random.default_rng(seed).random((N * n, 2))
    out, last = tree_sample(*args, uniforms=u, **kw)
    accept, value = tree_verifier(tokens, parents, [n], p, **kw)
    return out, last, accept, value


def _law_tree():
    """Depth 4, up to 3 children a node, hard zeros: a child whose token the target gives 0, and zeros
    in the rest of each row."""
    V = 8
    parents = np.array([-1, 0, 0, 0, 1, 1, 2, 4, 4, 7])
    tokens = np.array([5, 0, 1, 2, 3, 4, 0, 1, 6, 2])
    p = np.random.default_rng(11).dirichlet(np.full(V, 0.8), parents.size)
    p[:, 7] = 0.0  # a token no node may emit under keep
    p[0, 2] = 0.0  # node 3's token: the root's target forbids it
    p[4, 1] = 0.0
    return tokens, parents, p / p.sum(1, keepdims=True)


def _path(parents, v):
    out = []
    while v >= 0:
        out.append(v)
        v = parents[v]
    return out


@pytest.mark.parametrize("div, zeros, objective, eps", [
    ("kl", "keep", "length", 0.3), ("hellinger", "continue", "length", 0.5), ("tv", "continue", "length", 0.2),
    ("js", "keep", "acceptance", 0.2), ("reverse_kl", "continue", "acceptance", 0.4), ("chi2", "keep", "length", 0.0),
])
def test_the_emitted_law_at_each_node_is_its_verifier(div, zeros, objective, eps):
    """At each node v the walk reaches, the token emitted after v has law π_v (chi-square over the
    vocabulary; none where π_v = 0), v moves to a child with probability π_v(S_v) (binomial), and the
    mean accepted length is A(root) within noise. At budget 0: π_v = p_v and the acceptance p_v(S_v)
    (to the rounding of the row's sum), the target-only rule."""
    tokens, parents, p = _law_tree()
    N = 12_000
    out, last, accept, value = _samples(tokens, parents, p, N, seed=3, divergence=div, budget=eps, zeros=zeros, objective=objective)
    depth = np.array([len(_path(parents, v)) - 1 for v in range(tokens.size)])
    local = last  # one tree a request: the local index is the node
    on_path = np.zeros((N, tokens.size), dtype=bool)
    for v in range(tokens.size):
        for a in _path(parents, v):
            on_path[local == v, a] = True
    for v in range(tokens.size):
        kids = np.flatnonzero(parents == v)
        pi = _pi(p[v], tokens[kids], accept[kids]) if kids.size else p[v]
        if eps == 0:
            assert_allclose(accept[kids], p[v, tokens[kids]] / math.fsum(p[v]), rtol=4.5e-16, atol=0)  # p_v(x)/Σp_v to 2 ulps
        reached = on_path[:, v]
        if reached.sum() < 200:
            continue
        emitted = out[reached, depth[v]]
        counts = np.bincount(emitted, minlength=p.shape[1])
        assert counts[pi == 0].sum() == 0, (v, counts, pi)
        keep = pi > 0
        assert stats.chisquare(counts[keep], reached.sum() * pi[keep] / pi[keep].sum()).pvalue > 1e-4, (v, counts, pi)
        if kids.size:
            moved = int(np.isin(emitted, tokens[kids]).sum())
            assert stats.binomtest(moved, int(reached.sum()), float(accept[kids].sum())).pvalue > 1e-4
    lengths = depth[local]
    assert abs(lengths.mean() - value[0]) <= 5 * lengths.std() / np.sqrt(N)


def test_the_law_on_the_device_path(monkeypatch):
    """The torch path's law: π_v at the root's children and the acceptance there (set verifier, hard
    zeros), on CPU tensors with the device algorithm."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    tokens, parents, p = _law_tree()
    N, n = 6000, tokens.size
    args = (torch.as_tensor(np.tile(tokens, N)), np.tile(parents, N), [n] * N, torch.as_tensor(np.tile(p, (N, 1))))
    kw = dict(divergence="hellinger", budget=0.3, objective="acceptance", zeros="continue")
    out, _ = tree_sample(*args, uniforms=np.random.default_rng(9).random((N * n, 2)), **kw)
    accept, _ = tree_verifier(torch.as_tensor(tokens), parents, [n], torch.as_tensor(p), **kw)
    kids = np.flatnonzero(parents == 0)
    pi = _pi(p[0], tokens[kids], accept.numpy()[kids])
    counts = np.bincount(out[:, 0].numpy(), minlength=p.shape[1])
    keep = pi > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], N * pi[keep] / pi[keep].sum()).pvalue > 1e-4


# ---------------------------------------------------------------- greedy, seeds, the device path


def test_greedy_requests_follow_the_argmax():
    """Greedy: accept the child that is argmax p_v while there is one, then emit argmax p_v (the
    leaf's argmax after a full path); a random request in the same batch is unaffected."""
    V = 5
    tokens = np.array([0, 1, 2, 3, 4, 0])
    parents = np.array([-1, 0, 0, 2, 2, 3])
    p = np.full((6, V), 0.1)
    p[0, 2] = 0.6  # root: argmax 2 (node 2)
    p[2, 4] = 0.6  # node 2: argmax 4 (node 4, a leaf)
    p[4, 1] = 0.6  # node 4's argmax: the bonus
    p /= p.sum(1, keepdims=True)
    out, last = tree_sample(np.tile(tokens, 2), np.tile(parents, 2), [6, 6], np.tile(p, (2, 1)), is_greedy=[True, False],
                            uniforms=np.zeros((12, 2)))
    assert_array_equal(out[0], [2, 4, 1, -1])
    assert last[0] == 4
    p[2, 4], p[2, 0] = 0.1, 0.6  # node 2's argmax is now token 0, which no child carries: emit it
    out, last = tree_sample(tokens, parents, [6], p, is_greedy=[True])
    assert_array_equal(out[0], [2, 0, -1, -1])
    assert last[0] == 2


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_seeded_request_is_the_same_alone_or_in_a_batch(backend, rng, monkeypatch):
    """A request with its own generator draws only from it (two uniforms a node): its tokens do not
    depend on the rest of the batch."""
    gen = (lambda s: np.random.default_rng(s)) if backend == "numpy" else None
    if backend == "torch":
        torch = pytest.importorskip("torch")
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")

        def gen(s):
            return torch.Generator().manual_seed(s)

    trees = [_random_tree(rng, 8) for _ in range(3)]
    tokens, parents, n, p = _batch(trees)
    if backend == "torch":
        tokens, p = torch.as_tensor(tokens), torch.as_tensor(p)
    for seed in range(5):
        alone, _ = tree_sample(trees[1][0] if backend == "numpy" else torch.as_tensor(trees[1][0]), trees[1][1], [n[1]],
                               trees[1][2] if backend == "numpy" else torch.as_tensor(trees[1][2]), budget=0.3, generators={0: gen(seed)})
        batch, _ = tree_sample(tokens, parents, n, p, budget=0.3, generators={1: gen(seed)})
        assert_array_equal(np.asarray(batch)[1, : np.asarray(alone).shape[1]], np.asarray(alone)[0])


def _mixed_batch(rng, customs):
    trees = [_random_tree(rng, 9) for _ in range(8)]
    divs = ["kl", "tv", customs["triangular"], "hellinger", "js", "reverse_kl", "chi2", "neyman_chi2"]
    return _batch(trees), divs


@pytest.mark.parametrize("objective", ["length", "acceptance"])
@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_the_device_path_is_the_cores(objective, zeros, customs, rng, monkeypatch):
    """torch (the device algorithm, on CPU tensors) and the core give the same tokens and last nodes
    for the same uniforms, and the same verifier to rounding: one divergence per request (a custom one
    among them, solved in numpy on the host and compiled to torch on the device), greedy requests."""
    torch = pytest.importorskip("torch")
    (tokens, parents, n, p), divs = _mixed_batch(rng, customs)
    u = rng.random((tokens.size, 2))
    kw = dict(divergence=divs, budget=[0.0, 0.2, 0.3, 0.5, 0.05, 0.4, 1.0, 0.3], objective=objective, zeros=zeros,
              is_greedy=[False, False, False, True, False, False, False, False])
    want = tree_sample(tokens, parents, n, p, uniforms=u, **kw)
    want_v = tree_verifier(tokens, parents, n, p, **kw)
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    got = tree_sample(torch.as_tensor(tokens), parents, n, torch.as_tensor(p), uniforms=torch.as_tensor(u), **kw)
    got_v = tree_verifier(torch.as_tensor(tokens), parents, n, torch.as_tensor(p), **kw)
    assert got[0].dtype == torch.int32
    assert_array_equal(got[0].numpy(), want[0])
    assert_array_equal(got[1].numpy(), want[1])
    assert_allclose(got_v[0].numpy(), want_v[0], rtol=0, atol=1e-12)
    assert_allclose(got_v[1].numpy(), want_v[1], rtol=0, atol=1e-12)


def test_the_device_path_reads_nothing_back(customs, rng, monkeypatch, host_reads):
    """With validate=False and uniforms on the device, the whole tree verification (every node's
    verifier, the walk, the draws) is queued on the device: no call reads a tensor back. With
    validate=True the checks read (the case that shows the recorder sees reads)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    (tokens, parents, n, p), divs = _mixed_batch(rng, customs)
    args = (torch.as_tensor(tokens), parents, np.asarray(n), torch.as_tensor(p))
    u = torch.as_tensor(rng.random((tokens.size, 2)))
    kw = dict(divergence=divs, budget=0.3, is_greedy=[False] * 7 + [True])
    want = tree_sample(*args, uniforms=u, **kw)
    with host_reads() as mode:
        got = tree_sample(*args, uniforms=u, validate=False, **kw)
    assert mode.reads == []
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    with host_reads() as mode:
        tree_sample(*args, uniforms=u, **kw)
    assert mode.reads


# ---------------------------------------------------------------- the host plan's cost


def _lines_run(fn) -> int:
    """The Python lines of mentored's own modules that fn() runs (sys.settrace): the host work beyond
    array operations and the core, which a loop over a tree's levels would multiply."""
    import os
    import sys

    root = os.path.dirname(mentored.__file__)
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += event == "line"
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(root) else None

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def _chain(n, V=4):
    """tree_sample's arguments for one request, a chain of n nodes."""
    return np.arange(n) % V, np.arange(-1, n - 1), [n], np.full((n, V), 1.0 / V)


def test_the_host_plan_is_linear_in_the_depth():
    """tree_sample on host memory runs as many Python lines on a chain of 32,000 nodes as on one of
    4,000: its plan is vectorised checks (and, where read, one O(N) pass of the core for depths,
    children and heights), with no loop over the levels, each of whose steps would cost O(N)
    (quadratic in the depth). The output is (B, deepest depth + 1), here the whole chain."""
    lines = []
    for n in (4_000, 32_000):
        args = _chain(n)
        lines.append(_lines_run(lambda: tree_sample(*args, budget=0.1, uniforms=np.zeros((n, 2)))))
        out, last = tree_sample(*args, budget=0.0, uniforms=np.zeros((n, 2)))
        assert out.shape == (1, n) and int(last[0]) == n - 1  # u0 = 0 < p(child): every node accepted
    assert lines[0] == lines[1], lines


def test_the_host_plan_holds_no_matrix_of_nodes_by_children(custom_divergence):
    """A root with 4,000 children: the plan's arrays stay O(N) (a node-by-child matrix would be
    4,000 × 3,999 int64s, 128 MB), measured by tracemalloc over tree_sample (the core) and
    tree_verifier with a user generator (the host solves its nodes): under 4 MB."""
    import tracemalloc

    n, V = 4_001, 4_001
    tokens, parents = np.concatenate([[0], np.arange(n - 1)]), np.concatenate([[-1], np.zeros(n - 1, dtype=np.int64)])
    p = np.zeros((n, V))
    p[0] = 1.0 / V
    p[1:, 0] = 1.0
    user = custom_divergence((T - 1) ** 2 - sp.log(T), T, name="log_plus_square")
    for call in (lambda: tree_sample(tokens, parents, [n], p, budget=0.1, uniforms=np.zeros((n, 2))),
                 lambda: tree_verifier(tokens, parents, [n], p, divergence=user, budget=0.1)):
        call()  # compiled and cached what is cached
        tracemalloc.start()
        try:
            call()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, peak


# ---------------------------------------------------------------- refusals


def _good():
    tokens = np.array([4, 1, 2, 3, 0, 1])
    parents = np.array([-1, 0, 0, 1, -1, 0])
    p = np.full((6, 5), 0.2)
    return dict(tokens=tokens, parents=parents, num_nodes=[4, 2], target_probs=p)


def _bad(**change):
    a = _good()
    for k, v in change.items():
        a[k] = v(a[k]) if callable(v) else v
    return a


def _with(x, i, v):
    x = np.array(x, copy=True)
    x[i] = v
    return x


REFUSALS = [
    (dict(tokens=lambda t: _with(t, 2, 1)), r"tokens: request 0, node 2 carries token 1, as does its sibling node 1"),
    (dict(parents=lambda a: _with(a, 3, 3)), r"not an earlier node.*request 0, node 3 has parent 3"),
    (dict(parents=lambda a: _with(a, 2, 5)), r"not an earlier node.*request 0, node 2 has parent 5"),
    (dict(parents=lambda a: _with(a, 2, -1)), r"a second root.*request 0, node 2 has parent -1"),
    (dict(parents=lambda a: _with(a, 4, 0)), r"the root \(node 0\) must have parent -1; request 1, node 0 has parent 0"),
    (dict(parents=lambda a: _with(a, 5, -2)), r"request 1, node 1 has parent -2"),
    (dict(tokens=lambda t: _with(t, 5, 5)), r"tokens: id 5 at request 1, node 1 is outside \[0, V\) = \[0, 5\)"),
    (dict(tokens=lambda t: _with(t, 0, -1)), r"tokens: id -1 at request 0, node 0 is outside"),
    (dict(num_nodes=[4, 3]), r"num_nodes sums to 7, but tokens holds 6 nodes"),
    (dict(num_nodes=[6, 0]), r"num_nodes must be at least 1 \(the root\) for every request; request 1 has 0"),
    (dict(target_probs=lambda p: _with(p, (3, 1), np.nan)), r"target_probs contains NaN or infinite entries \(request 0, node 3\)"),
    (dict(target_probs=lambda p: _with(p, (5, 0), -0.1)), r"target_probs has negative entries \(request 1, node 1\)"),
    (dict(target_probs=lambda p: _with(p, (4, 0), 0.5)), r"target_probs rows must sum to 1.*request 1, node 0 sums to 1\.[23]"),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("change, message", REFUSALS)
def test_bad_input_is_refused_naming_request_and_node(backend, change, message, monkeypatch):
    a = _bad(**change)
    if backend == "torch":
        torch = pytest.importorskip("torch")
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
        a["tokens"], a["target_probs"] = torch.as_tensor(a["tokens"]), torch.as_tensor(a["target_probs"])
    with pytest.raises(ValueError, match=message):
        tree_sample(**a)
    with pytest.raises(ValueError, match=message):
        tree_verifier(**a)


def test_settings_are_refused_with_their_reason(custom_divergence):
    a = _good()
    with pytest.raises(ValueError, match="objective must be 'length' or 'acceptance'"):
        tree_sample(**a, objective="depth")
    with pytest.raises(ValueError, match=r"budget must be nonnegative.*for request 1"):
        tree_sample(**a, budget=[0.1, -1.0])
    with pytest.raises(ValueError, match="divergence must be one name or one per request"):
        tree_sample(**a, divergence=["kl"])
    hinge = custom_divergence(sp.Max(T - 1, 0), T, name="hinge")
    with pytest.raises(ValueError, match="needs a strictly convex generator.*'hinge'.*objective='acceptance'"):
        tree_sample(**a, divergence=hinge, budget=0.1)
    tree_sample(**a, divergence=hinge, budget=0.1, objective="acceptance")  # the set verifier needs f values only
    by_hand = mentored.Divergence("by_hand", f=lambda t: (t - 1) ** 2, fprime=lambda t: 2 * (t - 1), f_inf=np.inf, f0=1.0)
    with pytest.raises(ValueError, match="built from callables"):
        tree_sample(**a, divergence=by_hand, budget=0.1)


def test_generators_and_uniforms_together_are_refused():
    """tree_sample draws from generators or takes uniforms as given: both at once is refused, naming
    both, not decided by one of them silently."""
    a = _good()
    with pytest.raises(ValueError, match="both generators and uniforms: pass one of them"):
        tree_sample(**a, generators={0: np.random.default_rng(0)}, uniforms=np.zeros((6, 2)))


def test_unsigned_ids_are_read_by_their_value():
    """Unsigned ids in [0, V) are ids like any other: tree_sample's tokens and num_nodes, and
    rejection_sample's draft and bonus ids, as uint64, uint32 and uint8 give the int64 answer; an
    id past int64 (uint64 from 2⁶³) is refused by its value, as are unsigned parents (the root's −1
    has no unsigned form)."""
    a = _good()
    u = np.random.default_rng(0).random((6, 2))
    want = tree_sample(**a, budget=0.2, uniforms=u)
    for dt in (np.uint64, np.uint32, np.uint8):
        got = tree_sample(**{**a, "tokens": a["tokens"].astype(dt), "num_nodes": np.array(a["num_nodes"], dtype=dt)}, budget=0.2,
                          uniforms=u)
        assert_array_equal(got[0], want[0])
        assert_array_equal(got[1], want[1])
    big = a["tokens"].astype(np.uint64)
    big[3] = 2**63 + 5
    with pytest.raises(ValueError, match=r"tokens: id 9223372036854775813 at request 0, node 3 is outside \[0, V\) = \[0, 5\)"):
        tree_sample(**{**a, "tokens": big})
    with pytest.raises(ValueError, match=r"parents: parent 18446744073709551615 at request 0, node 0 .*uint64"):
        tree_sample(**{**a, "parents": a["parents"].astype(np.uint64)})
    p = np.full((3, 5), 0.2)
    draft, bonus = np.array([1, 4, 2]), np.array([[3], [0]])
    kw = dict(divergence="kl", budget=0.2, uniforms=u[:3])
    want = rejection_sample(draft, [2, 1], None, p, bonus, **kw)
    for dt in (np.uint64, np.uint32, np.uint8):
        assert_array_equal(rejection_sample(draft.astype(dt), np.array([2, 1], dtype=dt), None, p, bonus.astype(dt), **kw), want)
    big = draft.astype(np.uint64)
    big[1] = 2**63 + 5
    with pytest.raises(ValueError, match=r"draft_token_ids: id 9223372036854775813 \(dtype uint64\)"):
        rejection_sample(big, [2, 1], None, p, bonus, **kw)
    with pytest.raises(ValueError, match=r"bonus_token_ids: id 18446744073709551615 \(dtype uint64\)"):
        rejection_sample(draft, [2, 1], None, p, np.array([[3], [2**64 - 1]], dtype=np.uint64), **kw)


@pytest.mark.parametrize("generator", ["max", "piecewise"])
def test_a_kinked_generators_length_objective_runs_on_the_device_path(monkeypatch, generator):
    """A user generator with kinks (f with Max, whose f′ sympy prints with Heaviside; or a Piecewise)
    verifies draft trees under objective="length" on the device path as on the host: torch's printer
    takes neither Max nor Heaviside as sympy prints them, so both are translated before printing."""
    torch = pytest.importorskip("torch", reason="the device path needs torch")
    t = sp.symbols("t", positive=True)
    f = {"max": sp.Max((t - 1) ** 2, 4 * (t - 1) ** 2 - 3 * (t - 1)),
         "piecewise": sp.Piecewise((2 * (t - 1) ** 2, t < 1), ((t - 1) ** 2, True))}[generator]
    div = mentored.Divergence.from_sympy(f, t, name=f"kinked_{generator}")
    P = np.random.default_rng(3).dirichlet(np.ones(6), size=5)
    tokens, parents = [0, 1, 2, 3, 4], [-1, 0, 0, 1, 1]
    host = tree_verifier(tokens, parents, [5], P, divergence=div, budget=0.05, objective="length")
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    device = tree_verifier(torch.tensor(tokens), parents, [5], torch.tensor(P), divergence=div, budget=0.05, objective="length")
    for h, d in zip(host, device):
        assert_allclose(d.numpy(), h, rtol=1e-7, atol=1e-9)
