"""mentored.verify.serving.rejection_sample: vLLM v1's semantics at budget 0, the law π at budget > 0, hard
zeros, token-only drafters, seeded requests; and speculative_step's zeros= option and messages."""

from __future__ import annotations

import re

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

import mentored
from mentored.check.oracle import oracle_solve
from mentored.verify.serving import PLACEHOLDER_TOKEN_ID, Verifier, onehot_acceptance, rejection_sample
from mentored.backends.host import solve_pi

torch = pytest.importorskip("torch")

BACKENDS = ("numpy", "torch")
FINITE_FINF = tuple(n for n in mentored.BUILTIN_NAMES if mentored.divergence(n).f_inf < np.inf)  # π may put mass where p = 0


def _to(backend, *xs):
    if backend == "numpy":
        return xs
    return tuple(None if x is None else torch.as_tensor(x) for x in xs)


def _np(out):
    return out.cpu().numpy() if isinstance(out, torch.Tensor) else out


def _rs(backend, draft, n, q, p, bonus, **kw):
    d, qq, pp, b = _to(backend, np.asarray(draft, dtype=np.int64), q, p, np.asarray(bonus, dtype=np.int64).reshape(-1, 1))
    out = rejection_sample(d, n, qq, pp, b, **kw)
    assert out.dtype == (np.int32 if backend == "numpy" else torch.int32)
    return _np(out)


def _onehot_rows(ids, V):
    x = np.zeros((len(ids), V))
    x[np.arange(len(ids)), ids] = 1.0
    return x


# ---------------------------------------------------------------- vLLM's semantic cases, budget 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("greedy", [True, False])
def test_perfect_match_appends_the_bonus(backend, greedy):
    V, drafts = 10, [1, 2, 3]
    p = _onehot_rows(drafts, V)  # the target puts everything on the drafts
    q = p.copy()
    out = _rs(backend, drafts, [3], None if greedy else q, p, [4], is_greedy=[greedy])
    assert_array_equal(out, [[1, 2, 3, 4]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_early_mismatch_emits_the_target_and_stops(backend):
    V = 10
    p = _onehot_rows([1, 5, 3], V)  # the target disagrees at position 1
    out = _rs(backend, [1, 2, 3], [3], None, p, [4], is_greedy=[True])
    assert_array_equal(out, [[1, 5, -1, -1]])
    # random request, q = one-hot drafts: position 1 has p_x = 0, always rejected, p = δ_5 emitted
    out = _rs(backend, [1, 2, 3], [3], _onehot_rows([1, 2, 3], V), p, [4], is_greedy=[False], uniforms=np.full((3, 2), 0.5))
    assert_array_equal(out, [[1, 5, -1, -1]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_multiple_sequences_ragged_and_empty(backend):
    V = 8
    n = [2, 0, 3, 1, 0]
    drafts = [1, 2, 3, 4, 5, 6]
    targets = [1, 2, 3, 7, 5, 6]  # request 2 mismatches at its position 1
    p = _onehot_rows(targets, V)
    bonus = [10 % V, 1, 2, 3, 4]
    out = _rs(backend, drafts, n, None, p, bonus, is_greedy=[True] * 5)
    expect = np.array(
        [
            [1, 2, 2, -1],
            [1, -1, -1, -1],
            [3, 7, -1, -1],
            [6, 3, -1, -1],
            [4, -1, -1, -1],
        ]
    )
    assert out.shape == (5, 4)
    assert_array_equal(out, expect)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_drafts_at_all_gives_the_bonus_column(backend):
    p = np.zeros((0, 6))
    out = _rs(backend, np.zeros(0, dtype=np.int64), [0, 0, 0], None, p, [3, 1, 4], is_greedy=[True, False, True])
    assert_array_equal(out, [[3], [1], [4]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_and_random_mixed(backend, rng):
    V, n = 7, [2, 3, 1]
    T = sum(n)
    p = rng.dirichlet(np.ones(V), T)
    q = rng.dirichlet(np.ones(V), T)
    draft = p.argmax(1).copy()
    draft[3] = (draft[3] + 1) % V  # request 1 (greedy) mismatches at position 1
    u = rng.random((T, 2))
    out = _rs(backend, draft, n, q, p, [0, 1, 2], is_greedy=[True, True, False], uniforms=u)
    assert_array_equal(out[0], [draft[0], draft[1], 0, -1])
    assert_array_equal(out[1], [draft[2], p[3].argmax(), -1, -1])
    # the random request follows the lossless rule on its own row, with its own uniforms
    x = draft[5]
    if u[5, 0] * q[5, x] < p[5, x]:
        assert_array_equal(out[2], [x, 2, -1, -1])
    else:
        w = np.maximum(p[5] - q[5], 0)
        assert out[2, 0] == np.flatnonzero(np.cumsum(w) > u[5, 1] * np.cumsum(w)[-1])[0]
        assert_array_equal(out[2, 1:], [-1, -1, -1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_budget_zero_equals_the_lossless_rule_and_speculative_step(backend, rng):
    B, k, V = 6, 3, 9
    P = rng.dirichlet(np.full(V, 0.5), (B, k + 1))
    Q = rng.dirichlet(np.full(V, 0.5), (B, k))
    draft = np.array([[rng.choice(V, p=Q[b, j]) for j in range(k)] for b in range(B)])
    bonus = rng.integers(0, V, (B, 1))
    u = rng.random((B, k, 2))
    ref = mentored.speculative_step(P, bonus, Q, draft, budget=0.0, uniforms=u)
    out = _rs(backend, draft.ravel(), [k] * B, Q.reshape(-1, V), P[:, :k].reshape(-1, V), bonus, uniforms=u.reshape(-1, 2))
    assert_array_equal(out, ref)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_equals_speculative_step_at_positive_budget(backend, zeros, rng):
    B, k, V = 5, 2, 12
    P = rng.dirichlet(np.full(V, 0.4), (B, k + 1))
    P[:, :, :3] = 0  # hard zeros
    P /= P.sum(-1, keepdims=True)
    Q = rng.dirichlet(np.full(V, 0.4), (B, k))
    draft = np.array([[rng.choice(V, p=Q[b, j]) for j in range(k)] for b in range(B)])
    bonus = rng.integers(3, V, (B, 1))
    u = rng.random((B, k, 2))
    for div in ("tv", "kl", "hellinger"):
        ref = mentored.speculative_step(P, bonus, Q, draft, divergence=div, budget=0.3, uniforms=u, zeros=zeros)
        out = _rs(backend, draft.ravel(), [k] * B, Q.reshape(-1, V), P[:, :k].reshape(-1, V), bonus, uniforms=u.reshape(-1, 2), divergence=div, budget=0.3, zeros=zeros)
        assert_array_equal(out, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_placeholder_drafts(backend, rng):
    V = 6
    p = rng.dirichlet(np.ones(V), 4)
    q = rng.dirichlet(np.ones(V), 4)
    draft = [p[0].argmax(), -1, 2, -1]
    n = [2, 2]
    u = np.full((4, 2), 0.3)
    # greedy: the placeholder never equals the argmax, which is emitted there
    out = _rs(backend, draft, n, q, p, [0, 0], is_greedy=[True, True], uniforms=u)
    assert_array_equal(out[0], [draft[0], p[1].argmax(), -1])
    # random: rejected, and the token comes from p itself (inverse CDF at u1)
    out = _rs(backend, draft, n, q, p, [0, 0], is_greedy=[False, False], uniforms=np.array([[0.0, 0.3], [0.0, 0.3], [0.99, 0.3], [0.0, 0.3]]))
    assert out[0, 0] == draft[0] and out[0, 1] == np.flatnonzero(np.cumsum(p[1]) > 0.3 * np.cumsum(p[1])[-1])[0]
    assert out[0, 2] == -1


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_and_top_p_masks_are_never_emitted_at_budget_zero(backend, rng):
    V, N = 20, 3000
    logits = rng.normal(size=V)
    p = np.exp(logits) / np.exp(logits).sum()
    topk = np.argsort(p)[::-1][:5]
    pk = np.zeros(V)
    pk[topk] = p[topk]
    pk /= pk.sum()
    q = rng.dirichlet(np.ones(V))
    draft = rng.choice(V, size=N, p=q)
    out = _rs(backend, draft, [1] * N, np.tile(q, (N, 1)), np.tile(pk, (N, 1)), np.full(N, topk[0]))
    assert np.all(pk[out[:, 0]] > 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_emitted_law_at_budget_zero_is_the_target(backend, rng):
    V, N = 8, 10_000
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    draft = rng.choice(V, size=N, p=q)
    gens = {b: np.random.default_rng(b) for b in range(N)} if backend == "numpy" else None
    out = _rs(backend, draft, [1] * N, np.tile(q, (N, 1)), np.tile(p, (N, 1)), np.zeros(N), generators=gens, uniforms=None if gens else np.random.default_rng(5).random((N, 2)))
    counts = np.bincount(out[:, 0], minlength=V)
    assert stats.chisquare(counts, N * p).pvalue > 1e-4


# ---------------------------------------------------------------- the law π at budget > 0


def _law_check(counts, pi, n):
    keep = pi > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], n * pi[keep] / pi[keep].sum()).pvalue > 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_emitted_law_is_pi_at_each_position(backend, zeros, rng):
    V, N, k, div, eps = 7, 10_000, 2, "hellinger", 0.5
    p = rng.dirichlet(np.ones(V), k)
    p[:, 0] = 0  # a zero the drafter likes: "continue" moves mass there, "keep" does not
    p /= p.sum(-1, keepdims=True)
    q = rng.dirichlet(np.ones(V), k)
    q[:, 0] += 0.3
    q /= q.sum(-1, keepdims=True)
    pi = solve_pi(p, q, mentored.divergence(div), np.full(k, eps), None, zeros)
    draws = np.random.default_rng(3)
    draft = np.stack([draws.choice(V, size=N, p=q[j]) for j in range(k)], 1).ravel()
    u = draws.random((N * k, 2))
    out = _rs(backend, draft, [k] * N, np.tile(q, (N, 1)), np.tile(p, (N, 1)), np.zeros(N), divergence=div, budget=eps, zeros=zeros, uniforms=u)
    if zeros == "continue":
        assert pi[:, 0].min() > 0.01
    for j in range(k):
        reached = out[:, j] >= 0  # position j is reached iff every earlier draft was accepted
        _law_check(np.bincount(out[reached, j], minlength=V), pi[j], int(reached.sum()))
    acc = np.minimum(pi[0], q[0]).sum()
    assert abs((out[:, 1] >= 0).mean() - acc) < 5 * np.sqrt(acc * (1 - acc) / N)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("div", ["kl", "tv", "js"])
def test_token_only_drafter_law_is_the_onehot_verifier(backend, div, rng):
    V, N, eps = 6, 20_000, 0.1
    p = rng.dirichlet(np.ones(V))
    x = int(np.argsort(p)[1])  # a token the target does not favour
    pi = mentored.solve(p, _onehot_rows([x], V)[0], divergence=div, budget=eps).pi
    u = np.random.default_rng(4).random((N, 2))
    out = _rs(backend, np.full(N, x), [1] * N, None, np.tile(p, (N, 1)), np.zeros(N), divergence=div, budget=eps, uniforms=u)
    _law_check(np.bincount(out[:, 0], minlength=V), pi, N)
    assert abs((out[:, 1] >= 0).mean() - pi[x]) < 5 * np.sqrt(pi[x] * (1 - pi[x]) / N)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("div", FINITE_FINF)
def test_keep_never_emits_a_masked_token(backend, div, rng):
    V, N = 30, 2000
    logits = rng.normal(size=(N, V)) * 2
    p = np.exp(logits)
    kth = np.sort(p, 1)[:, -5][:, None]
    p = np.where(p >= kth, p, 0.0)  # top-5
    p /= p.sum(1, keepdims=True)
    q = rng.dirichlet(np.full(V, 0.3), N)
    draft = np.array([rng.choice(V, p=r) for r in q])
    out = _rs(backend, draft, [1] * N, q, p, p.argmax(1), divergence=div, budget=0.2, zeros="keep")
    assert np.all(p[np.arange(N), out[:, 0]] > 0)
    cont = _rs(backend, draft, [1] * N, q, p, p.argmax(1), divergence=div, budget=0.2, zeros="continue")
    assert np.sum(p[np.arange(N), cont[:, 0]] == 0) > 20  # the problem as stated does use them
    one = _rs(backend, draft, [1] * N, None, p, p.argmax(1), divergence=div, budget=0.2, zeros="keep")
    assert np.all(p[np.arange(N), one[:, 0]] > 0)


# ---------------------------------------------------------------- the verifiers themselves


@pytest.mark.parametrize("div", mentored.BUILTIN_NAMES)
def test_keep_is_the_optimum_with_hard_zeros(div, rng):
    for _ in range(3):
        V = 8
        p = rng.dirichlet(np.ones(V))
        p[rng.choice(V, 2, replace=False)] = 0
        p /= p.sum()
        q = rng.dirichlet(np.ones(V))
        S = p > 0
        for eps in (0.02, 0.3, np.inf):
            pi = solve_pi(p[None], q[None], mentored.divergence(div), np.array([eps]), None, "keep")[0]
            assert np.all(pi[~S] == 0) and abs(pi.sum() - 1) < 1e-12
            assert mentored.divergence(div)(pi, p) <= min(eps, 1e300) * (1 + 1e-9) + 1e-12
            acc = np.minimum(pi, q).sum()
            assert acc <= 1 - q[~S].sum() + 1e-12  # TargetZeros.v : infinite_finf_bound
            if np.isfinite(eps):
                o = oracle_solve(p[S], q[S], div, eps)  # the problem on supp(p): π = 0 on Z
                assert o.usable(eps)
                assert acc >= o.acceptance - 1e-6


@pytest.mark.parametrize("div", mentored.BUILTIN_NAMES)
def test_onehot_verifier_equals_solve_and_oracle(div, rng):
    V = 7
    for trial in range(4):
        p = rng.dirichlet(np.ones(V))
        x = int(rng.integers(V))
        for eps in (0.0, 0.01, 0.2, 2.0):
            a = float(onehot_acceptance(p[x], eps, div))
            sol = mentored.solve(p, _onehot_rows([x], V)[0], divergence=div, budget=eps)
            assert_allclose(a, sol.pi[x], rtol=1e-9, atol=1e-12)
            if trial == 0 and 0 < eps < 1:
                o = oracle_solve(p, _onehot_rows([x], V)[0], div, eps)
                assert o.usable(eps) and a >= o.acceptance - 1e-6
    # closed forms (docs/theory.md §8)
    px = np.array([0.1, 0.5, 0.9])
    assert_allclose(onehot_acceptance(px, 0.05, "tv"), np.minimum(1, px + 0.05))
    assert_allclose(onehot_acceptance(px, 0.05, "chi2"), np.minimum(1, px + np.sqrt(0.05 * px * (1 - px))))


def test_onehot_where_the_target_is_zero():
    # keep, or f∞ = ∞: always rejected; continue with f∞ < ∞: the largest z with f̃(1 − z) + f̃∞ z ≤ ε
    for div in mentored.BUILTIN_NAMES:
        assert onehot_acceptance(0.0, 0.3, div, zeros="keep") == 0.0
    assert onehot_acceptance(0.0, 0.3, "kl", zeros="continue") == 0.0
    assert_allclose(onehot_acceptance(0.0, 0.3, "tv", zeros="continue"), 0.3)
    p = np.array([0.0, 0.5, 0.5])
    for div in FINITE_FINF:
        sol = mentored.solve(p, [1.0, 0.0, 0.0], divergence=div, budget=0.2)
        assert_allclose(onehot_acceptance(0.0, 0.2, div, zeros="continue"), sol.pi[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("div", ["kl", "hellinger", "tv"])
def test_torch_onehot_equals_numpy(div, rng):
    px = np.concatenate([rng.random(50), [0.0, 1.0, 1e-300]])
    eps = rng.random(px.size) * 0.3
    a_np = onehot_acceptance(px, eps, div)
    from mentored.backends.torch import _onehot as _onehot_torch

    a_t = _onehot_torch(torch.as_tensor(px), torch.as_tensor(eps), mentored.divergence(div), "keep").numpy()
    assert_allclose(a_t, a_np, rtol=1e-12, atol=1e-15)
    # the public function on tensors: the core on CPU tensors (the same bits), torch's bisection on a device
    got = onehot_acceptance(torch.as_tensor(px, dtype=torch.float32), eps, div)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert_allclose(got.numpy(), onehot_acceptance(px.astype(np.float32), eps, div), rtol=0, atol=0)
    import mentored.backends as backends

    try:
        backends.CPU_SOLVER = "torch"
        assert_allclose(onehot_acceptance(torch.as_tensor(px), torch.as_tensor(eps), div).numpy(), a_np, rtol=1e-12, atol=1e-15)
    finally:
        backends.CPU_SOLVER = "core"
    with pytest.raises(ValueError, match="budget must be nonnegative"):
        onehot_acceptance(torch.as_tensor(px), -0.1, div)


# ---------------------------------------------------------------- seeds, per request and divergence


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gen_kind", ["numpy", "torch"])
def test_seeded_request_is_independent_of_the_batch(backend, gen_kind, rng):
    V = 9

    def gen(seed):
        if gen_kind == "numpy":
            return np.random.default_rng(seed)
        g = torch.Generator()
        g.manual_seed(seed)
        return g

    def rows(m):
        p = rng.dirichlet(np.full(V, 0.5), m)
        q = rng.dirichlet(np.full(V, 0.5), m)
        return p, q, np.array([rng.choice(V, p=r) for r in q])

    me = rows(4)
    for trial in range(10):
        alone = _rs(backend, me[2], [4], me[1], me[0], [7], budget=0.1, generators={0: gen(trial)})
        others = [rows(int(m)) for m in rng.integers(0, 4, size=3)]
        where = int(rng.integers(4))
        batch = others[:where] + [me] + others[where:]
        p = np.concatenate([b[0] for b in batch])
        q = np.concatenate([b[1] for b in batch])
        d = np.concatenate([b[2] for b in batch])
        n = [len(b[2]) for b in batch]
        gens = {where: gen(trial), (where + 1) % 4: gen(999)}
        out = _rs(backend, d, n, q, p, [7] * 4, budget=[0.1] * 4, generators=gens, is_greedy=[False] * 4)
        assert_array_equal(out[where, :5], alone[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_request_divergence_and_budget(backend, rng):
    V, n = 8, [2, 2, 2]
    p = rng.dirichlet(np.ones(V), 6)
    q = rng.dirichlet(np.ones(V), 6)
    d = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((6, 2))
    out = _rs(backend, d, n, q, p, [1, 2, 3], divergence=["tv", "kl", "js"], budget=[0.1, 0.0, 0.3], uniforms=u)
    for b, (div, eps) in enumerate([("tv", 0.1), ("kl", 0.0), ("js", 0.3)]):
        alone = _rs(backend, d[2 * b : 2 * b + 2], [2], q[2 * b : 2 * b + 2], p[2 * b : 2 * b + 2], [b + 1], divergence=div, budget=eps, uniforms=u[2 * b : 2 * b + 2])
        assert_array_equal(out[b], alone[0])


def test_numpy_and_torch_agree_on_a_mixed_batch(rng):
    V, n = 11, [3, 0, 2, 4, 1]
    T = sum(n)
    p = rng.dirichlet(np.full(V, 0.3), T)
    p[:, :2] = 0
    p /= p.sum(1, keepdims=True)
    q = rng.dirichlet(np.full(V, 0.3), T)
    d = np.array([rng.choice(V, p=r) for r in q])
    d[4] = -1
    u = rng.random((T, 2))
    kw = dict(divergence=["hellinger", "kl", "tv", "js", "reverse_kl"], budget=[0.2, 0.1, 0.3, 0.05, 0.4], is_greedy=[False, True, False, False, True], uniforms=u)
    for zeros in ("keep", "continue"):
        for qq in (q, None):
            a = _rs("numpy", d, n, qq, p, [0, 1, 2, 3, 4], zeros=zeros, **kw)
            b = _rs("torch", d, n, qq, p, [0, 1, 2, 3, 4], zeros=zeros, **kw)
            assert_array_equal(a, b)


@pytest.mark.parametrize("zeros", ["keep", "continue"])
@pytest.mark.parametrize("div", ["js", "kl", "tv", "reverse_kl", "hellinger"])
def test_verifier_equals_rejection_sample(div, zeros, rng):
    # Random batches, ragged (0 drafts included), with target zeros (so that zeros="keep" re-solves
    # rows where f∞ < ∞), float64 and float32, budgets from 0 to inf: the same tokens for the same uniforms.
    V = 50
    for dtype in (np.float64, np.float32):
        for budget in (0.0, 0.2, 1.5, np.inf):
            ver = Verifier(V, divergence=div, budget=budget, zeros=zeros, dtype=dtype)
            for n in ([3, 3, 3, 3], [4, 0, 1, 2], [1]):
                T = sum(n)
                p = rng.dirichlet(np.full(V, 0.2), T)
                p[:, :10] = 0
                p = (p / p.sum(1, keepdims=True)).astype(dtype)
                q = rng.dirichlet(np.full(V, 0.2), T).astype(dtype)
                d = np.array([rng.choice(V, p=r / r.sum()) for r in q.astype(np.float64)], dtype=np.int64)
                u = rng.random((T, 2))
                bonus = rng.integers(10, V, (len(n), 1))
                want = rejection_sample(d, n, q, p, bonus, divergence=div, budget=budget, uniforms=u, zeros=zeros)
                assert_array_equal(ver(d, n, q, p, bonus, uniforms=u), want)
                assert_array_equal(ver(d, np.array(n), q, p, bonus, uniforms=u), want)


def test_verifier_is_one_core_call(one_core_call, rng):
    V, n = 30, [2, 0, 3]
    ver = Verifier(V, divergence="kl", budget=0.3, dtype=np.float64, seed=0)
    p = rng.dirichlet(np.ones(V), 5)
    q = rng.dirichlet(np.ones(V), 5)
    d = np.array([rng.choice(V, p=r) for r in q])
    calls = one_core_call(refuse=("mentored.verify.serving.rejection_sample",))
    out = ver(d, n, q, p, np.array([[1], [2], [3]]))
    assert out.dtype == np.int32 and out.shape == (3, 4) and calls == ["verify"]


def test_verifier_threads_do_not_change_tokens(rng):
    V, n = 60, [3, 1, 0, 4, 2, 3]
    T = sum(n)
    p = rng.dirichlet(np.full(V, 0.3), T).astype(np.float32)
    q = rng.dirichlet(np.full(V, 0.3), T).astype(np.float32)
    d = np.array([rng.choice(V, p=r / r.sum()) for r in q.astype(np.float64)])
    u = rng.random((T, 2))
    bonus = rng.integers(0, V, (len(n), 1))
    outs = [Verifier(V, divergence="hellinger", budget=0.4, threads=t)(d, n, q, p, bonus, uniforms=u) for t in (1, 2, 3)]
    assert_array_equal(outs[0], outs[1])
    assert_array_equal(outs[0], outs[2])


def test_seeded_verifier_is_reproducible_through_its_fallbacks(rng):
    V = 40
    p = rng.dirichlet(np.full(V, 0.3), 8)
    q = rng.dirichlet(np.full(V, 0.3), 8)
    d = np.array([rng.choice(V, p=r) for r in q])
    d[5] = PLACEHOLDER_TOKEN_ID  # the placeholder goes through rejection_sample
    bonus = rng.integers(0, V, (4, 1))
    runs = []
    for _ in range(2):
        ver = Verifier(V, divergence="tv", budget=0.3, dtype=np.float64, seed=7)
        runs.append([ver(d, [2, 2, 2, 2], q, p, bonus) for _ in range(20)])
    assert_array_equal(np.array(runs[0]), np.array(runs[1]))
    assert len({a.tobytes() for a in runs[0]}) > 1  # the uniforms move on between calls


def test_verifier_refuses_a_bad_id_after_a_rejection():
    V = 4
    p = np.full((2, V), 0.25)
    q = np.array([[0.7, 0.1, 0.1, 0.1], [0.25] * 4])
    u = np.array([[0.999, 0.5], [0.5, 0.5]])  # position 0 is rejected
    ver = Verifier(V, budget=0.0, dtype=np.float64)
    with pytest.raises(ValueError, match=r"outside \[0, 4\).*request 0, position 1"):
        ver(np.array([0, 7]), [2], q, p, np.array([[0]]), uniforms=u)
    nan = q.copy()
    nan[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN.*request 0, position 1"):
        ver(np.array([0, 1]), [2], nan, p, np.array([[0]]), uniforms=u)


def test_verifier_falls_back_where_the_core_does_not_take_the_input(rng):
    V, n = 20, [2, 1]
    p = rng.dirichlet(np.ones(V), 3)
    q = rng.dirichlet(np.ones(V), 3)
    d = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((3, 2))
    bonus = np.array([[1], [2]])
    kw = dict(divergence="kl", budget=0.2, uniforms=u)
    want = rejection_sample(d, n, q, p, bonus, **kw)
    ver = Verifier(V, divergence="kl", budget=0.2)
    q32 = q.astype(np.float32)
    assert_array_equal(ver(d, n, q32, p, bonus, uniforms=u), rejection_sample(d, n, q32, p, bonus, **kw))  # mixed dtypes
    for args in (
        (d.astype(np.int32), n, q, p, bonus.astype(np.int32)),  # other id dtypes
        (d, n, np.asfortranarray(q), p, bonus),  # not C-contiguous
        (torch.as_tensor(d), n, torch.as_tensor(q), torch.as_tensor(p), torch.as_tensor(bonus)),
    ):
        got = ver(*args, uniforms=u)
        assert_array_equal(got.numpy() if isinstance(got, torch.Tensor) else got, want)
    with pytest.raises(ValueError, match="sums to 4"):
        ver(d, [2, 2], q, p, bonus, uniforms=u)


def test_inputs_are_checked():
    p = np.full((2, 4), 0.25)
    ok = dict(draft_token_ids=np.array([1, 2]), num_draft_tokens=[2], draft_probs=p, target_probs=p, bonus_token_ids=np.array([[0]]))
    with pytest.raises(ValueError, match="sums to 3"):
        rejection_sample(**{**ok, "num_draft_tokens": [3]})
    with pytest.raises(ValueError, match=r"request 0, position 1"):
        rejection_sample(**{**ok, "target_probs": np.array([[0.25] * 4, [0.3] * 4])})
    with pytest.raises(ValueError, match="placeholder"):
        rejection_sample(**{**ok, "draft_token_ids": np.array([1, -2])})
    with pytest.raises(ValueError, match="zeros"):
        rejection_sample(**ok, zeros="drop")
    with pytest.raises(ValueError, match="nonnegative"):
        rejection_sample(**ok, budget=-1)
    two = {**ok, "num_draft_tokens": [1, 1], "bonus_token_ids": np.array([[0], [1]])}
    with pytest.raises(ValueError, match=r"budget must be nonnegative \(inf allowed\), got -1.0 for request 1"):
        rejection_sample(**two, budget=[0.1, -1.0])
    with pytest.raises(ValueError, match=r"budget is NaN for request 0"):
        rejection_sample(**two, budget=[np.nan, 0.1])


# ---------------------------------------------------------------- torch extremes and messages


def test_torch_solve_on_denormal_rows():
    from mentored.backends import torch as tb

    p = torch.tensor([[0.6, 0.4, 1e-310]], dtype=torch.float64)
    q = torch.tensor([[1e-310, 0.5, 0.5]], dtype=torch.float64)
    assert_array_equal(tb._solve(p, q, divergence="tv", budget=float("inf")).numpy(), [[1e-310, 0.5, 0.5]])
    # kl at 0.05: on the curve π = (0.5 − z, 0.5, z) past s = 0.1, with D(z) = 0.05 (stable logs)
    pi = tb._solve(p, q, divergence="kl", budget=0.05).numpy()[0]
    assert np.all(np.isfinite(pi)) and abs(pi.sum() - 1) < 1e-15

    def D(z):
        a = 0.5 - z
        return a * np.log(a / 0.6) + 0.5 * np.log(1.25) + z * (np.log(z) - np.log(1e-310))

    lo, hi = 1e-12, 0.4
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if D(mid) <= 0.05 else (lo, mid)
    assert_allclose(pi, [0.5 - lo, 0.5, lo], rtol=1e-9)
    for div in mentored.BUILTIN_NAMES:
        for eps in (0.01, 0.05, 0.3, float("inf")):
            pi = tb._solve(p, q, divergence=div, budget=eps).numpy()[0]
            assert np.all(np.isfinite(pi)) and np.all(pi >= 0) and abs(pi.sum() - 1) < 1e-15, (div, eps, pi)
            assert np.all(pi >= np.minimum(p.numpy()[0], q.numpy()[0]) * (1 - 1e-12))  # between p and q
            assert np.all(pi <= np.maximum(p.numpy()[0], q.numpy()[0]) * (1 + 1e-12))


def test_speculative_step_messages():
    P = np.full((2, 3, 4), 0.25)
    Q = np.full((2, 2, 4), 0.25)
    draft = np.zeros((2, 2), dtype=np.int64)
    bonus = np.zeros((2, 1), dtype=np.int64)
    bad = Q.copy()
    bad[1, 1] = [0.3, 0.3, 0.3, 0.3]
    for lib in (np.asarray, torch.as_tensor):
        with pytest.raises(ValueError, match=r"\(b, j\) = \(1, 1\)") as e:
            mentored.speculative_step(lib(P), lib(bonus), lib(bad), lib(draft))
        assert "Pass normalize=True" in str(e.value)  # speculative_step takes it
        nan_bonus = P.copy()
        nan_bonus[0, 2, 0] = np.nan
        with pytest.raises(ValueError, match=r"NaN.*\(b, j\) = \(0, 2\)"):
            mentored.speculative_step(lib(nan_bonus), lib(bonus), lib(Q), lib(draft))
        neg_bonus = P.copy()
        neg_bonus[1, 2] = [0.5, 0.5, 0.5, -0.5]
        with pytest.raises(ValueError, match=r"negative.*\(b, j\) = \(1, 2\)"):
            mentored.speculative_step(lib(neg_bonus), lib(bonus), lib(Q), lib(draft))
        off = P.copy()
        off[0, 1] = [0.25, 0.25, 0.25, 0.25 + 5e-4]
        with pytest.raises(ValueError, match="tolerance 1e-06"):
            mentored.speculative_step(lib(off), lib(bonus), lib(Q), lib(draft))
        with pytest.raises(ValueError, match=r"nonnegative.*-1\.0") as e:
            mentored.speculative_step(lib(P), lib(bonus), lib(Q), lib(draft), budget=-1)
        assert "NaN" not in str(e.value)


@pytest.mark.parametrize("div", FINITE_FINF)
def test_speculative_step_keep_zeros(div, rng):
    B, k, V = 200, 1, 12
    P = rng.dirichlet(np.ones(V), (B, k + 1))
    P[:, :, :4] = 0
    P /= P.sum(-1, keepdims=True)
    Q = rng.dirichlet(np.ones(V), (B, k))
    draft = np.array([[rng.choice(V, p=Q[b, j]) for j in range(k)] for b in range(B)])
    bonus = np.full((B, 1), 5)
    out = mentored.speculative_step(P, bonus, Q, draft, divergence=div, budget=0.3, seed=1, zeros="keep")
    assert np.all(P[np.arange(B), 0, out[:, 0]] > 0)
    out_t = mentored.speculative_step(*(torch.as_tensor(x) for x in (P, bonus, Q, draft)), divergence=div, budget=0.3, uniforms=np.random.default_rng(1).random((B, k, 2)), zeros="keep")
    out_n = mentored.speculative_step(P, bonus, Q, draft, divergence=div, budget=0.3, uniforms=np.random.default_rng(1).random((B, k, 2)), zeros="keep")
    assert_array_equal(out_t.numpy(), out_n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the device path is written device-agnostic and tested on CPU")
def test_cuda_equals_cpu(rng):
    V, n = 64, [2, 3, 0, 1]
    T = sum(n)
    p = rng.dirichlet(np.full(V, 0.3), T)
    q = rng.dirichlet(np.full(V, 0.3), T)
    d = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((T, 2))
    cpu = _rs("torch", d, n, q, p, [0, 1, 2, 3], budget=0.2, uniforms=u)
    dev = rejection_sample(*(torch.as_tensor(x).cuda() for x in (d,)), n, torch.as_tensor(q).cuda(), torch.as_tensor(p).cuda(), torch.tensor([[0], [1], [2], [3]]).cuda(), budget=0.2, uniforms=u)
    assert_array_equal(dev.cpu().numpy(), cpu)


@pytest.mark.parametrize("solver", ["core", "torch"])
def test_custom_divergences_on_torch_tensors(solver, monkeypatch, rng):
    # A from_sympy divergence (named like a built-in, and not one) through rejection_sample on CPU
    # tensors, by the core and by the torch algorithm, dense and token-only drafts: the numpy decisions.
    import sympy as sp


    t = sp.Symbol("t", positive=True)
    with pytest.warns(mentored.NumericCheckWarning, match="bisection"):  # sympy does not solve f'(t) = y here
        div = mentored.Divergence.from_sympy(t * sp.log(t) + (t - 1) ** 2, t, name="kl")
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", solver)
    V, n = 25, [3, 0, 2]
    T = sum(n)
    p = rng.dirichlet(np.full(V, 0.5), T + len(n) - 1)[:T]
    q = rng.dirichlet(np.full(V, 0.5), T)
    d = np.array([rng.choice(V, p=r) for r in q])
    u = rng.random((T, 2))
    bonus = rng.integers(0, V, len(n))
    for draft_probs in (q, None):
        want = _rs("numpy", d, n, draft_probs, p, bonus, divergence=div, budget=0.2, uniforms=u)
        got = _rs("torch", d, n, draft_probs, p, bonus, divergence=div, budget=0.2, uniforms=u)
        assert_array_equal(got, want)


# ---------------------------------------------------------------- rows that sum to 1 only to a tolerance


def _exact_law(emit, q, V, iters=52):
    """The law of the token emitted at a single draft position, exactly (to 2⁻⁵²), from the decisions
    the code makes: ``emit(x, u)`` gives the tokens emitted by requests of one draft ``x[r]`` each on
    uniforms ``u[r]`` (the same rows p, q in every request). The draft x has law q/Σq; its acceptance
    probability is the length of {u0 : accepted} (an interval from 0), found by bisection; the token
    of a rejection, an inverse CDF in u1, is nondecreasing in u1: the law of the residual is the
    lengths between its steps, found by bisection too."""
    x = np.arange(V)
    lo, hi = np.zeros(V), np.ones(V)
    for _ in range(iters):
        mid = (lo + hi) / 2
        acc = emit(x, np.stack([mid, np.full(V, 0.5)], 1)) == x
        lo, hi = np.where(acc, mid, lo), np.where(acc, hi, mid)
    a = np.where(hi >= 1 - 2.0**-40, 1.0, lo)  # accepted up to u0 → 1: always
    xs, steps = np.repeat(x, V - 1), np.tile(np.arange(1, V), V)
    lo, hi = np.zeros(xs.size), np.ones(xs.size)
    u0 = np.full(xs.size, 1 - 2.0**-53)  # a rejection wherever a < 1
    for _ in range(iters):
        mid = (lo + hi) / 2
        past = emit(xs, np.stack([u0, mid], 1)) >= steps
        lo, hi = np.where(past, lo, mid), np.where(past, mid, hi)
    edges = np.concatenate([np.zeros((V, 1)), hi.reshape(V, V - 1), np.ones((V, 1))], 1)
    residual = np.diff(edges, axis=1)
    qn = q / q.sum()
    return qn * a + (qn * (1 - a)) @ residual


def _emitters(p, q, div, budget, dtype, **kw):
    """emit(x, u) of each verification path, on rows p, q (one position); kw to each entry point."""
    V = p.shape[0]
    P, Q = p.astype(dtype), q.astype(dtype)

    def rows(x):
        R = x.size
        return np.tile(Q, (R, 1)), np.tile(P, (R, 1)), np.zeros((R, 1), dtype=np.int64), [1] * R

    def rs(backend):
        def emit(x, u):
            qq, pp, bonus, n = rows(x)
            return _rs(backend, x, n, qq, pp, bonus, divergence=div, budget=budget, uniforms=u, **kw)[:, 0]
        return emit

    def verifier(x, u):
        qq, pp, bonus, n = rows(x)
        return Verifier(V, divergence=div, budget=budget, **kw)(x, n, qq, pp, bonus, uniforms=u)[:, 0]

    def step(x, u):
        R = x.size
        pp = np.tile(P, (R, 2, 1))
        return mentored.speculative_step(
            pp, np.zeros((R, 1), dtype=np.int64), np.tile(Q, (R, 1, 1)), x[:, None], divergence=div, budget=budget,
            uniforms=u[:, None, :], zeros="keep", **kw,
        )[:, 0]

    def torch_step(x, u):
        R = x.size
        return mentored.speculative_step(
            torch.as_tensor(np.tile(P, (R, 2, 1))), torch.zeros((R, 1), dtype=torch.int64), torch.as_tensor(np.tile(Q, (R, 1, 1))),
            torch.as_tensor(x[:, None]), divergence=div, budget=budget, uniforms=u[:, None, :], zeros="keep", **kw,
        )[:, 0].numpy()

    def device_step(x, u):  # the torch algorithm that a GPU runs, here on the CPU (no numpy_step)
        from mentored.backends import torch as torch_backend

        R = x.size
        return torch_backend._step(
            torch.as_tensor(np.tile(P, (R, 2, 1))), torch.zeros((R, 1), dtype=torch.int64), torch.as_tensor(np.tile(Q, (R, 1, 1))),
            torch.as_tensor(x[:, None]), divergence=div, budget=budget, uniforms=u[:, None, :], zeros="keep",
        )[:, 0].numpy()

    paths = {"numpy": rs("numpy"), "torch": rs("torch"), "verifier": verifier, "speculative_step": step, "torch_step": torch_step}
    if not kw:  # (torch_backend._step takes rows as given: normalize= is the entry point's)
        paths["device_step"] = device_step
    return paths


@pytest.mark.parametrize("path", ["numpy", "torch", "verifier", "speculative_step", "torch_step", "device_step"])
@pytest.mark.parametrize("budget", [0.0, 0.05])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_emitted_law_is_pi_on_rows_inside_the_sum_tolerance(path, budget, dtype):
    # Rows summing to 1 ± 0.9 of the tolerance (1e-3 in float32, 1e-6 in float64) are taken, and π is
    # solved for q/Σq: the accept test and the residual must read that q too (with the raw q the law
    # was off π by TV 4.5e-4 at Σq = 1.0009).
    rtol = {np.float32: 1e-3, np.float64: 1e-6}[dtype]
    p = np.array([0.5, 0.3, 0.2, 0.0, 0.0]) * (1 - 0.9 * rtol)
    q = np.array([0.1, 0.2, 0.1, 0.4, 0.2]) * (1 + 0.9 * rtol)
    P, Q = p.astype(dtype), q.astype(dtype)
    pi = mentored.solve(P, Q, divergence="kl", budget=budget).pi.astype(np.float64)
    assert abs(Q.astype(np.float64).sum() - 1) > 0.5 * rtol
    law = _exact_law(_emitters(p, q, "kl", budget, dtype)[path], Q.astype(np.float64), len(p))
    assert_allclose(law, pi / pi.sum(), atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "verifier"])
def test_rows_off_one_are_refused_on_every_path(backend):
    # A draft row summing to 2 once gave the law [0.750, 0.149, 0.101] for π = p = [0.5, 0.3, 0.2] on the
    # Verifier's fast path (which checks no sums by default); rejection_sample refused it.
    p = np.array([[0.5, 0.3, 0.2]])
    for name, (qq, pp) in {"draft_probs": (2 * p[:, ::-1], p), "target_probs": (p[:, ::-1], 2 * p)}.items():
        qq, pp = np.ascontiguousarray(qq), np.ascontiguousarray(pp)
        args = (np.array([0]), [1], qq, pp, np.array([[1]]))
        call = rejection_sample if backend == "numpy" else Verifier(3)
        with pytest.raises(ValueError, match=rf"{name} rows must sum to 1.*sums to 2\.0.*normalize=True"):
            call(*args, uniforms=np.array([[0.5, 0.5]]))


def test_verifier_checks_sums_in_its_one_core_call(one_core_call):
    p = np.array([[0.5, 0.3, 0.2]])
    calls = one_core_call(refuse=("mentored.verify.serving.rejection_sample",))
    with pytest.raises(ValueError, match="draft_probs rows must sum to 1"):
        Verifier(3, dtype=np.float64)(np.array([0]), [1], 2 * p, p, np.array([[1]]), uniforms=np.array([[0.5, 0.5]]))
    assert calls == ["verify"]


def test_normalize_takes_rows_that_sum_to_a_constant():
    # A float32 softmax widened to float64 sums to 1 ± 1.5e-5 at V = 152,064, past float64's tolerance:
    # normalize=True takes such rows (as solve's does), and the law is π of the normalised rows.
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.1, 0.2, 0.3, 0.4])
    for budget in (0.0, 0.1):
        pi = mentored.solve(p, q, divergence="kl", budget=budget).pi
        rows = p * (1 + 1.5e-5), q * 2
        for path, emit in _emitters(*rows, "kl", budget, np.float64).items():
            with pytest.raises(ValueError, match="normalize=True"):
                emit(np.array([0]), np.array([[0.5, 0.5]]))
        for path, emit in _emitters(*rows, "kl", budget, np.float64, normalize=True).items():
            assert_allclose(_exact_law(emit, q, len(p)), pi, atol=1e-12, err_msg=path)



# ---------------------------------------------------------------- arguments misread or ignored


def _two_requests():
    p = np.full((2, 4), 0.25)
    return np.array([1, 2]), [1, 1], p, p


@pytest.mark.parametrize("path", ["numpy", "torch", "verifier"])
def test_bonus_ids_of_another_shape_are_refused(path):
    # (B, 2) was flattened: request 1 got its neighbour's second column.
    d, n, q, p = _two_requests()
    u = np.array([[0.1, 0.5], [0.1, 0.5]])  # both drafts accepted: the bonus column is emitted
    call = Verifier(4, dtype=np.float64) if path == "verifier" else rejection_sample
    for bonus in (np.array([[0, 1], [2, 3]]), np.array([[[0]], [[1]]]), np.array(5)):
        args = _to("torch" if path == "torch" else "numpy", d, q, p, bonus)
        with pytest.raises(ValueError, match=rf"bonus_token_ids must have shape \(B,\) or \(B, 1\).*{re.escape(str(bonus.shape))}"):
            call(args[0], n, args[1], args[2], args[3], uniforms=u)
    for bonus in (np.array([3, 2]), np.array([[3], [2]])):
        args = _to("torch" if path == "torch" else "numpy", d, q, p, bonus)
        assert_array_equal(_np(call(args[0], n, args[1], args[2], args[3], uniforms=u)), [[1, 3], [2, 2]])


@pytest.mark.parametrize("path", ["numpy", "torch", "verifier"])
def test_generators_are_checked(path):
    d, n, q, p = _two_requests()
    call = Verifier(4, dtype=np.float64) if path == "verifier" else rejection_sample
    d, q, p, bonus = _to("torch" if path == "torch" else "numpy", d, q, p, np.array([[0], [1]]))
    for bad, error, msg in (
        ({2: np.random.default_rng(0)}, ValueError, r"request index 2 is outside \[0, B\) = \[0, 2\)"),
        ({-1: np.random.default_rng(0)}, ValueError, r"request index -1 is outside"),
        ({0: 42}, TypeError, r"generators\[0\] \(request 0\) must be a numpy.random.Generator or torch.Generator, got int"),
        ({"0": np.random.default_rng(0)}, TypeError, r"request index '0' is not an integer"),
        ([np.random.default_rng(0)], TypeError, r"generators must be a dict"),
    ):
        with pytest.raises(error, match=msg):
            call(d, n, q, p, bonus, generators=bad)
    call(d, n, q, p, bonus, generators={1: np.random.default_rng(0), 0: torch.Generator().manual_seed(1)})


def test_bool_and_float_token_ids_are_refused():
    # numpy refused bool draft ids, torch took them as 0/1; the Verifier's fast path took numpy's too.
    d, n, q, p = _two_requests()
    bonus = np.array([[0], [1]])
    for ids in (np.array([True, False]), np.array([1.0, 2.0])):
        with pytest.raises(TypeError, match="integer"):
            rejection_sample(torch.as_tensor(ids), n, torch.as_tensor(q), torch.as_tensor(p), torch.as_tensor(bonus))
        with pytest.raises(TypeError, match="integer"):
            rejection_sample(torch.as_tensor(ids), n, torch.as_tensor(q), torch.as_tensor(p), torch.as_tensor(bonus), validate=False)
        with pytest.raises(TypeError, match="integer"):
            Verifier(4, dtype=np.float64)(ids, n, q, p, bonus)
        with pytest.raises(TypeError, match="integer"):
            rejection_sample(d, n, q, p, torch.as_tensor(ids.reshape(2, 1)))


def test_normalize_takes_rows_whose_sums_have_no_reciprocal():
    # float64 rows summing below 2⁻¹⁰²⁴ (all entries denormal): the core cannot scale them by 1/Σ;
    # normalize=True rescales them first, as solve does, on every path.
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.1, 0.2, 0.3, 0.4])
    pi = mentored.solve(p, q, divergence="kl", budget=0.1).pi
    for path, emit in _emitters(p * 1e-310, q * 1e-310, "kl", 0.1, np.float64, normalize=True).items():
        assert_allclose(_exact_law(emit, q, len(p)), pi, atol=1e-9, err_msg=path)


def test_counts_and_flags_of_another_kind_are_refused():
    # num_draft_tokens = [1.5, 0.5] was read as [1, 0] and is_greedy = [2, 0] as [True, False].
    d, n, q, p = _two_requests()
    bonus = np.array([[0], [1]])
    for bad in (np.array([1.5, 0.5]), [True, True], torch.tensor([1.0, 1.0])):
        with pytest.raises(TypeError, match=r"num_draft_tokens must hold integers, got dtype"):
            rejection_sample(d, bad, q, p, bonus)
    for bad in (np.array([2, 0]), [0.0, 1.0], torch.tensor([1, 0])):
        with pytest.raises(TypeError, match=r"is_greedy must hold booleans, got dtype"):
            rejection_sample(d, n, q, p, bonus, is_greedy=bad)
    rejection_sample(d, torch.tensor(n), q, p, bonus, is_greedy=torch.tensor([True, False]))


@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_every_host_verification_is_one_core_call(one_core_call, rng, zeros):
    # rejection_sample on numpy and on CPU tensors, Verifier and speculative_step: exactly one crossing
    # into the compiled core per call, whatever the rows are (dense, token-only, greedy, ragged,
    # placeholders, one divergence per request).
    V, n = 24, [3, 0, 2, 4]
    T, B = sum(n), len(n)
    p = rng.dirichlet(np.full(V, 0.5), T)
    p[:, :5] = 0.0
    p /= p.sum(-1, keepdims=True)
    q = rng.dirichlet(np.full(V, 0.5), T)
    d = rng.integers(0, V, T)
    bonus = rng.integers(0, V, (B, 1))
    placeholders = d.copy()
    placeholders[[1, 6]] = -1
    batches = {
        "dense": dict(draft_probs=q),
        "token-only": dict(draft_probs=None),
        "greedy": dict(draft_probs=q, is_greedy=np.array([True, False, False, True])),
        "placeholders": dict(draft_probs=q, draft_token_ids=placeholders),
        "per-request": dict(draft_probs=None, divergence=["kl", "tv", "js", "kl"], budget=[0.1, 0.2, 0.0, np.inf]),
    }
    calls = one_core_call()
    for name, batch in batches.items():
        kw = {**dict(draft_token_ids=d, num_draft_tokens=n, target_probs=p, bonus_token_ids=bonus, divergence="hellinger", budget=0.3,
                     zeros=zeros), **batch}
        for entry in ("numpy", "tensors", "verifier"):
            args = dict(kw)
            if entry == "tensors":
                args = {k: torch.from_numpy(np.asarray(v)) if k.endswith(("_ids", "_probs")) and v is not None else v for k, v in args.items()}
            calls.clear()
            if entry == "verifier":
                if not isinstance(args["divergence"], str):
                    continue
                ver = Verifier(V, divergence=args["divergence"], budget=args["budget"], zeros=zeros, seed=0)
                out = ver(args["draft_token_ids"], n, args["draft_probs"], p, bonus, is_greedy=args.get("is_greedy"))
            else:
                out = rejection_sample(**args)
            assert calls == ["verify"], (name, entry, calls)
            assert tuple(out.shape) == (B, max(n) + 1)
    for k in (1, 3):
        calls.clear()
        P = rng.dirichlet(np.ones(V), (2, k + 1))
        Q = rng.dirichlet(np.ones(V), (2, k))
        mentored.speculative_step(P, np.array([[0], [1]]), Q, rng.integers(0, V, (2, k)), divergence="js", budget=0.2, seed=0, zeros=zeros)
        assert calls == ["verify"]


# ---------------------------------------------------------------- rows that are not distributions, validation off


def _bad_rows_case(kind, V=8):
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(V), 4).astype(np.float32)
    q = rng.dirichlet(np.ones(V), 4).astype(np.float32)
    row = {"nan": np.full(V, np.nan), "inf": np.full(V, np.inf), "zero": np.zeros(V), "negative": -p[0],
           "one_inf": np.where(np.arange(V) == 5, np.inf, np.nan), "off_sum": 3 * p[0]}[kind]
    p[1] = row  # request 0, position 1; request 1 (rows 2, 3) is fine
    want = {"nan": 0, "inf": 0, "zero": 0, "negative": int(np.argmax(-p[0])), "one_inf": 5, "off_sum": int(np.argmax(row))}[kind]
    return p, q, want


@pytest.mark.parametrize("kind", ["nan", "inf", "zero", "negative", "one_inf", "off_sum"])
def test_validation_off_decides_a_bad_row_on_every_path(kind):
    """validate=False: the position of a row that is not a distribution rejects its draft and emits the
    row's first largest entry (NaN lowest), the same id on numpy, CPU tensors (the core) and the torch
    algorithm; the other request is decided as if alone. validate=True refuses the row."""
    import mentored.backends as backends

    p, q, want = _bad_rows_case(kind)
    draft, n, bonus = np.array([int(np.argmax(p[0])), 2, 3, 4]), [2, 2], np.array([[6], [7]])
    u = np.full((4, 2), 0.5)
    u[0, 0] = 1e-12  # position 0 accepts its draft (the target's argmax): position 1 is reached
    for dense in (True, False):
        for greedy in (False, True):
            kw = dict(divergence="kl", budget=0.1, uniforms=u, is_greedy=np.array([greedy, greedy]))
            alone = rejection_sample(draft[2:], [2], q[2:] if dense else None, p[2:], bonus[1:], **dict(kw, uniforms=u[2:], is_greedy=kw["is_greedy"][1:]))
            outs = [rejection_sample(draft, n, q if dense else None, p, bonus, validate=False, **kw)]
            t = [torch.as_tensor(x) for x in (draft, q, p, bonus)]
            outs.append(rejection_sample(t[0], n, t[1] if dense else None, t[2], t[3], validate=False, **kw).numpy())
            try:
                backends.CPU_SOLVER = "torch"  # the device algorithm, on the CPU
                outs.append(rejection_sample(t[0], n, t[1] if dense else None, t[2], t[3], validate=False, **kw).numpy())
            finally:
                backends.CPU_SOLVER = "core"
            for out in outs:
                assert out[0, 0] == draft[0] and out[0, 1] == want and out[0, 2] == -1, (dense, greedy, out)
                assert_array_equal(out[1], alone[0])
            with pytest.raises(ValueError, match="target_probs"):
                rejection_sample(draft, n, q if dense else None, p, bonus, **kw)


@pytest.mark.parametrize("dense", [True, False])
def test_logits_in_is_the_softmax_on_every_path(dense, rng):
    """logits=True: the same tokens as the softmax rows given as probabilities, on numpy, CPU tensors
    (the core) and the torch algorithm (token-only: p_x from the logit and the log-sum-exp); a masked
    token (−inf) is never emitted; a row without a law is refused with validation, decided without."""
    import mentored.backends as backends

    V, n = 12, [3, 0, 2]
    T = sum(n)
    L = rng.normal(size=(T, V)) * 2
    L[:, 3] = -np.inf  # masked everywhere
    probs = np.exp(L - L.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    q = rng.dirichlet(np.ones(V), T) if dense else None
    draft = rng.integers(0, V, T)
    bonus = rng.integers(0, V, (3, 1))
    greedy = np.array([False, False, True])
    for trial in range(20):
        u = rng.random((T, 2))
        kw = dict(divergence="kl", budget=0.3, uniforms=u, is_greedy=greedy)
        want = rejection_sample(draft, n, q, probs, bonus, **kw)
        got = [rejection_sample(draft, n, q, L, bonus, logits=True, **kw)]
        t = [None if x is None else torch.as_tensor(x) for x in (draft, q, L, bonus)]
        got.append(rejection_sample(t[0], n, t[1], t[2], t[3], logits=True, **kw).numpy())
        try:
            backends.CPU_SOLVER = "torch"
            got.append(rejection_sample(t[0], n, t[1], t[2], t[3], logits=True, **kw).numpy())
        finally:
            backends.CPU_SOLVER = "core"
        for out in got:
            assert_array_equal(out, want)
            assert not (out == 3).any()
    bad = L.copy()
    bad[1] = np.nan
    draft[0] = int(np.argmax(L[0]))
    u = np.full((T, 2), 0.5)
    u[0, 0] = 1e-12  # position 0 accepts: position 1, the NaN row, is reached
    for x, solver in ((bad, "core"), (torch.as_tensor(bad), "core"), (torch.as_tensor(bad), "torch")):
        qx = q if q is None or isinstance(x, np.ndarray) else torch.as_tensor(q)
        try:
            backends.CPU_SOLVER = solver
            with pytest.raises(ValueError, match="NaN"):
                rejection_sample(draft, n, qx, x, bonus, logits=True, uniforms=u, is_greedy=greedy)
            out = np.asarray(rejection_sample(draft, n, qx, x, bonus, logits=True, uniforms=u, is_greedy=greedy, validate=False))
        finally:
            backends.CPU_SOLVER = "core"
        assert out[0, 0] == draft[0] and out[0, 1] == 0 and out[0, 2] == -1, (solver, out)
