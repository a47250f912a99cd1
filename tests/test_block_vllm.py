"""Block verification (Sun et al., ICLR 2025, arXiv 2403.10444) at budget 0: vLLM's own block-verification
tests, ported to ``rejection_sample(..., method="block", budget=0)`` with numpy and CPU torch inputs.

The cases come from vLLM 0.33.0, ``tests/v1/spec_decode/test_rejection_sampler_utils.py`` (the tests of
its v2 runner's kernel ``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py::rejection_sample``
with ``use_block_verification=True``); each test below names the one it ports. The code is this
package's own: vLLM's layout (a bonus row per request in the logits, draft logits per request state,
Triton launches on CUDA) is replaced by ``rejection_sample``'s (one target row per draft, the bonus token
given), vLLM's 4096-token vocabulary by 64 tokens (more samples per bin on a CPU), and each check is
stated against the rule itself, written out here (:func:`block_weights`), so that it could fail.

The rule, for one request with n drafts x_0..x_{n-1}, target p_j and drafter q̂_j = q_j/Σq_j at position
j: w_0 = 1, w_{j+1} = min(w_j p_j(x_j)/q̂_j(x_j), 1); for 1 ≤ i < n, R_i = Σ_y (w_i p_i(y) − q̂_i(y))_+,
h_i = R_i/(R_i + 1 − w_i) (1 when 0/0), h_n = w_n; η_i = [u0 of position i−1 < h_i]; τ = the largest i
with η_i (0 if none). The request emits x_0..x_{τ-1}, then, if τ < n, a token drawn at u1 of position τ
from (w_τ p_τ − q̂_τ)_+ normalised, else the bonus token. Greedy requests and token-only drafts
(``draft_probs=None``) are verified token by token: for one-hot drafts the block rule has the same law
(checked exactly in :func:`test_one_hot_drafts_have_the_token_law_exactly`).

Not ported, and why:
- vLLM's ``test_verify_rejects_unproposed_drafts`` (block verification after a prefill) tests its v2
  runner's ``gather_draft_sampled`` (zero drafts padded onto a step that starts in the prefill); nothing
  here receives such padding (the plugin gets the drafts vLLM already gathered).
- vLLM's ``tests/v1/worker/test_gpu_rejection_sampler_i64.py`` (int64 indexing at a 155k vocabulary,
  5 GiB of GPU memory per case) tests Triton pointer arithmetic; the core indexes in 64 bits throughout.
- the exact random streams (vLLM's ``tl_rand32`` keyed by ``spec_step_seed(seed, step)`` and the
  position, its Gumbel-max residual draw): the rule here takes given uniforms (u0, u1) per position and
  draws by inverse CDF; only the laws are comparable, and those are what is checked.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mentored.verify.serving import rejection_sample

torch = pytest.importorskip("torch")

BACKENDS = ("numpy", "torch")
V = 64  # vLLM's tests use 4096 tokens on a GPU; 64 bins fill well with 20 000 trials on a CPU


# ---------------------------------------------------------------- the rule, written out


def block_weights(p, q, x):
    """(w [M, n+1], h [M, n]) of M requests sharing the rows p [n, V] and q [n, V] (q normalised), with
    drafts x [M, n] (no placeholders): w_j as in the rule, h[:, i-1] = h_i for i = 1..n."""
    M, n = x.shape
    w = np.ones((M, n + 1))
    for j in range(n):
        px, qx = p[j, x[:, j]], q[j, x[:, j]]
        ratio = np.divide(px, qx, out=np.full(M, np.inf), where=qx > 0)
        w[:, j + 1] = np.minimum(w[:, j] * ratio, 1.0)
    h = np.empty((M, n))
    for i in range(1, n):
        R = np.maximum(w[:, i, None] * p[i][None] - q[i][None], 0.0).sum(1)
        den = R + 1.0 - w[:, i]
        h[:, i - 1] = np.divide(R, den, out=np.ones(M), where=den > 0)
    if n:
        h[:, n - 1] = w[:, n]
    return w, h


def tau_law(h):
    """P(τ = i | drafts) [M, n+1] when η_1..η_n are independent with P(η_i) = h_i (distinct positions' u0)."""
    M, n = h.shape
    out = np.empty((M, n + 1))
    for i in range(n + 1):
        pr = np.ones(M) if i == 0 else h[:, i - 1].copy()
        for j in range(i, n):
            pr *= 1.0 - h[:, j]
        out[:, i] = pr
    return out


def draw(r, u1):
    """Inverse CDF of the (unnormalised) row r at u1."""
    c = np.cumsum(r)
    return int(min(np.searchsorted(c, u1 * c[-1], side="right"), len(r) - 1))


def block_decide(p, q, x, u, bonus):
    """The tokens one request emits under the rule, given its uniforms u [n, 2] (dense drafts). A
    placeholder (−1) ends the block before it: the drafts before it are the block, and at its position
    the token is drawn from p (there is no draft to lean away from), as vLLM does."""
    x = np.asarray(x)
    m = int(np.argmax(x < 0)) if (x < 0).any() else len(x)
    w, h = block_weights(p[:m], q[:m], x[None, :m])
    tau = max([i for i in range(1, m + 1) if u[i - 1, 0] < h[0, i - 1]], default=0)
    out = [int(t) for t in x[:tau]]
    if tau == len(x):
        out.append(int(bonus))
    elif tau == m:
        out.append(draw(p[tau], u[tau, 1]))
    else:
        out.append(draw(np.maximum(w[0, tau] * p[tau] - q[tau], 0.0), u[tau, 1]))
    return out


def token_decide(p, x, u, bonus):
    """Token-by-token verification of one-hot drafts: accept x while u0 < p(x); at the first rejection
    draw from p without x (p at a placeholder)."""
    out = []
    for j, t in enumerate(x):
        if t >= 0 and u[j, 0] < p[j, t]:
            out.append(int(t))
            continue
        r = p[j].copy()
        if t >= 0:
            r[t] = 0.0
        out.append(draw(r, u[j, 1]))
        return out
    return out + [int(bonus)]


# ---------------------------------------------------------------- helpers


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def trials(p_row, q_row, n, M, rng, one_hot=False):
    """M requests of n drafts each, every position with target p_row and drafter q_row (vLLM's
    ``_build_rejection_sample_inputs``: one fixed pair of distributions, the drafts sampled from q).
    Returns the arguments of ``rejection_sample`` and the drafts as an [M, n] array."""
    x = rng.choice(len(q_row), size=(M, n), p=q_row)
    p = np.broadcast_to(p_row, (M * n, len(p_row))).copy()
    q = None if one_hot else np.broadcast_to(q_row, (M * n, len(q_row))).copy()
    bonus = rng.choice(len(p_row), size=(M, 1), p=p_row)  # the bonus position has the same target
    return dict(draft=x.reshape(-1), n=[n] * M, q=q, p=p, bonus=bonus), x


def run(backend, args, **kw):
    """rejection_sample on numpy or CPU torch inputs; the output as numpy."""
    draft, q, p, bonus = args["draft"], args["q"], args["p"], args["bonus"]
    u = kw.pop("uniforms", None)
    if backend == "torch":
        draft, p, bonus = torch.as_tensor(draft), torch.as_tensor(p), torch.as_tensor(bonus)
        q = None if q is None else torch.as_tensor(q)
        u = None if u is None else torch.as_tensor(u)
    out = rejection_sample(draft, args["n"], q, p, bonus, budget=0.0, uniforms=u, **kw)
    return out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)


def accepted(out):
    """τ per request: the emitted tokens but the last."""
    return (out >= 0).sum(1) - 1


def assert_law(samples, probs, label):
    """Chi-square goodness of fit of samples to probs, bins with fewer than 5 expected merged (as vLLM's
    ``_assert_distribution_match``); refused below a p-value of 1e-6 (vLLM: about 10 sigma)."""
    N = len(samples)
    observed = np.bincount(samples, minlength=len(probs)).astype(float)
    expected = probs * N
    big = expected >= 5
    o = np.append(observed[big], observed[~big].sum())
    e = np.append(expected[big], expected[~big].sum())
    if e[-1] == 0:
        assert o[-1] == 0, f"{label}: {o[-1]:.0f} samples where the law has no mass"
        o, e = o[:-1], e[:-1]
    assert len(o) >= 2, f"{label}: too few samples ({N}) to test the law"
    stat = float(((o - e) ** 2 / e).sum())
    pval = stats.chi2.sf(stat, len(o) - 1)
    assert pval > 1e-6, f"{label}: chi2 {stat:.1f} on {len(o) - 1} df, p = {pval:.2e}"


def assert_tau_law(tau, law, label, z_max=5.0):
    """The counts of τ = i against their exact expectations given each request's drafts (sums of
    independent indicators: mean Σ P, variance Σ P(1 − P)), as z-scores."""
    for i in range(law.shape[1]):
        mean, var = law[:, i].sum(), (law[:, i] * (1 - law[:, i])).sum()
        got = (tau == i).sum()
        if var < 1.0:
            assert abs(got - mean) < 10, f"{label}: τ = {i}: {got} against {mean:.1f}"
            continue
        z = (got - mean) / math.sqrt(var)
        assert abs(z) < z_max, f"{label}: τ = {i}: {got} against {mean:.1f} (z = {z:.1f})"


def assert_residual_law(out, tau, x, p_row, q_row, w, label):
    """The token emitted at τ < n is drawn from (w_τ p − q̂)_+ normalised: Σ r(y) over those requests
    against its exact mean Σ Σ r² and variance (a z-score)."""
    n = x.shape[1]
    m = np.flatnonzero(tau < n)
    r = np.maximum(w[m, tau[m]][:, None] * p_row[None] - q_row[None], 0.0)
    r /= r.sum(1, keepdims=True)
    s = r[np.arange(len(m)), out[m, tau[m]]].sum()
    r2 = (r * r).sum(1)
    z = (s - r2.sum()) / math.sqrt(((r**3).sum(1) - r2**2).sum())
    assert abs(z) < 5, f"{label}: residual draws z = {z:.1f}"


# ---------------------------------------------------------------- the ported tests


# vLLM's five (n, T) cases with numpy inputs, two of them with torch's (the same core behind a conversion:
# the whole grid twice would double the suite's time for no new path)
LAW_CASES = [(1, 0.6, "numpy"), (3, 0.6, "numpy"), (1, 1.0, "numpy"), (3, 1.0, "numpy"), (5, 1.0, "numpy"), (3, 0.6, "torch"), (5, 1.0, "torch")]


@pytest.mark.parametrize("dense", [True, False], ids=["draft_probs", "token_only"])
@pytest.mark.parametrize("n,temperature,backend", LAW_CASES)
def test_block_verification_keeps_the_target_law(backend, dense, n, temperature):
    """Ports ``test_block_verification_rejection_sample``: random target and drafter logits, the
    target at temperature T (vLLM scales the target before verification and the draft logits inside it:
    here both are distributions), every emitted position has the target's law. Beyond vLLM: the law of
    τ given each request's drafts is the rule's (τ's law differs under token verification when n > 1
    and the drafts have probabilities: token verification would fail here), and the token at τ < n is
    drawn from (w_τ p − q̂)_+. With n = 1 block verification is token verification (h_1 = w_1)."""
    rng = np.random.default_rng(42 + 10 * n)
    p_row = softmax(rng.standard_normal(V) / temperature)
    q_row = softmax(rng.standard_normal(V) / temperature)
    M = 6000  # vLLM: 10 trials per token of 4096; here about 94 per token of 64
    args, x = trials(p_row, q_row, n, M, rng, one_hot=not dense)
    u = rng.random((M * n, 2))
    out = run(backend, args, method="block", uniforms=u)
    assert out.shape == (M, n + 1)
    tau = accepted(out)
    assert (out[np.arange(n + 1)[None] <= tau[:, None]] >= 0).all() and (out[np.arange(n + 1)[None] > tau[:, None]] == -1).all()
    for pos in range(n + 1):
        # positions reached by fewer than 200 requests (token-only drafts from an unrelated drafter are
        # rarely accepted) are left to the law of τ below; every request reaches position 0
        if pos == 0 or (tau >= pos).sum() >= 200:
            assert_law(out[tau >= pos, pos], p_row, f"position {pos}")
    taken = np.arange(n)[None] < tau[:, None]
    assert (out[:, :n][taken] == x[taken]).all()  # the accepted tokens are the drafts
    if dense:
        w, h = block_weights(np.tile(p_row, (n, 1)), np.tile(q_row, (n, 1)), x)
        assert_tau_law(tau, tau_law(h), "τ")
        assert_residual_law(out, tau, x, p_row, q_row, w, "block residual")
    else:  # token-only drafts: q = δ_x, τ's law is the product of p(x_j) up to the first rejection
        px = p_row[x]
        law = np.concatenate([np.cumprod(np.c_[np.ones(M), px], 1)[:, :n] * (1 - px), np.prod(px, 1, keepdims=True)], 1)
        assert_tau_law(tau, law, "τ, one-hot")


@pytest.mark.parametrize("n,backend", [(3, "numpy"), (5, "numpy"), (3, "torch")])
def test_block_verification_accepts_at_least_as_many(backend, n):
    """Ports ``test_block_verification_accepts_at_least_as_many``: a drafter close to the target
    (draft logits = target logits + 0.5·noise), the same requests and uniforms verified by block and by
    token verification: block's mean accepted length is no smaller (vLLM's check, with its 0.01 slack),
    and both means are those of their rules given the drafts (z-scores), which differ here by more than
    the noise, so each side would fail under the other rule."""
    rng = np.random.default_rng(n)
    z = rng.standard_normal(V)
    p_row, q_row = softmax(z), softmax(z + 0.5 * rng.standard_normal(V))
    M = 10_000
    args, x = trials(p_row, q_row, n, M, rng)
    u = rng.random((M * n, 2))
    tau_block = accepted(run(backend, args, method="block", uniforms=u))
    tau_token = accepted(run(backend, args, method="token", uniforms=u))
    assert tau_block.mean() >= tau_token.mean() - 1e-2, (tau_block.mean(), tau_token.mean())
    _, h = block_weights(np.tile(p_row, (n, 1)), np.tile(q_row, (n, 1)), x)
    law_block = tau_law(h)
    ratio = np.minimum(p_row[x] / q_row[x], 1.0)  # token verification: accept x_j with min(1, p/q)
    law_token = np.concatenate([np.cumprod(np.c_[np.ones(M), ratio], 1)[:, :n] * (1 - ratio), np.prod(ratio, 1, keepdims=True)], 1)
    levels = np.arange(n + 1)
    mean_block, mean_token = (law_block @ levels).sum(), (law_token @ levels).sum()
    sd_block = math.sqrt((law_block @ levels**2 - (law_block @ levels) ** 2).sum())
    sd_token = math.sqrt((law_token @ levels**2 - (law_token @ levels) ** 2).sum())
    assert mean_block - mean_token > 6 * (sd_block + sd_token), "the case must tell the rules apart"
    assert abs(tau_block.sum() - mean_block) < 5 * sd_block, (tau_block.sum(), mean_block, sd_block)
    assert abs(tau_token.sum() - mean_token) < 5 * sd_token, (tau_token.sum(), mean_token, sd_token)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dense", [True, False], ids=["draft_probs", "token_only"])
@pytest.mark.parametrize("num_placeholders", [1, 2])
def test_placeholders_truncate_the_block(backend, dense, num_placeholders):
    """Ports ``test_block_verification_placeholder_truncates_block``: n = 3 drafts of which the last
    ``num_placeholders`` are placeholders (−1). Nothing at or after a placeholder is accepted; each
    emitted position has the target's law; and τ has the law of the block of the real drafts alone
    (h of the last real draft is its w, not a residual mass read at the placeholder's position)."""
    rng = np.random.default_rng(7 + num_placeholders)
    n, M = 3, 6000
    p_row, q_row = softmax(rng.standard_normal(V)), softmax(rng.standard_normal(V))
    args, x = trials(p_row, q_row, n, M, rng, one_hot=not dense)
    real = n - num_placeholders
    x[:, real:] = -1
    args["draft"] = x.reshape(-1)
    out = run(backend, args, method="block", uniforms=rng.random((M * n, 2)))
    tau = accepted(out)
    assert (tau <= real).all(), "accepted a draft at or after a placeholder"
    for pos in range(real + 1):
        if pos == 0 or (tau >= pos).sum() >= 200:
            assert_law(out[tau >= pos, pos], p_row, f"position {pos}")
    if dense:
        _, h = block_weights(np.tile(p_row, (real, 1)), np.tile(q_row, (real, 1)), x[:, :real])
        law = tau_law(h)
    else:
        px = p_row[x[:, :real]]
        law = np.concatenate([np.cumprod(np.c_[np.ones(M), px], 1)[:, :real] * (1 - px), np.prod(px, 1, keepdims=True)], 1)
    assert_tau_law(tau, law, "τ of the truncated block")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["block", "token"])
def test_a_placeholder_stops_later_drafts(backend, method):
    """Ports ``test_placeholder_blocks_later_draft_tokens`` (both of vLLM's rules): n = 3 drafts with a
    placeholder second and a valid draft after it, the drafter equal to the target (a draft is then
    accepted with probability 1): the first draft is accepted and nothing after the placeholder."""
    rng = np.random.default_rng(0)
    n, M = 3, 4096
    p_row = softmax(rng.standard_normal(V))
    args, x = trials(p_row, p_row, n, M, rng)
    x[:, 1] = -1
    args["draft"] = x.reshape(-1)
    out = run(backend, args, method=method, uniforms=rng.random((M * n, 2)))
    tau = accepted(out)
    assert (tau <= 1).all(), "accepted a draft after a placeholder"
    assert (tau == 1).mean() > 0.9, "the first draft was rarely accepted: the case does not reach the placeholder"
    assert (out[:, 0] == x[:, 0]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dense", [True, False], ids=["draft_probs", "token_only"])
def test_ragged_batch_matches_each_request_alone_and_the_rule(backend, dense):
    """Ports ``test_adaptive_draft_lengths_match_and_bonus_oracle``: requests with 3, 1, 0, 2, 3, 2
    drafts, temperatures 1, 0, 0, 0.6, 0, 1 (0: greedy), the greedy requests' drafts matching the
    target's argmax for 1, 0 and 2 positions. Greedy requests accept exactly their matches and emit the
    argmax; every request emits the same tokens alone as in the batch (given its uniforms); and beyond
    vLLM, every random request emits exactly the rule's tokens given its uniforms (:func:`block_decide`;
    token by token for token-only drafts, :func:`token_decide`)."""
    rng = np.random.default_rng(7)
    num_drafts = [3, 1, 0, 2, 3, 2]
    temps = [1.0, 0.0, 0.0, 0.6, 0.0, 1.0]
    matches = {1: 1, 2: 0, 4: 2}
    B, T = len(num_drafts), sum(num_drafts)
    starts = np.concatenate([[0], np.cumsum(num_drafts)[:-1]])
    logits = rng.standard_normal((T, V))
    p = softmax(logits / np.repeat([t if t > 0 else 1.0 for t in temps], num_drafts)[:, None])
    q = softmax(rng.standard_normal((T, V)))
    x = np.array([rng.choice(V, p=row) for row in q])
    for b, k in matches.items():
        for j in range(num_drafts[b]):
            best = int(np.argmax(p[starts[b] + j]))
            x[starts[b] + j] = best if j < k else (best + 1) % V
    bonus = rng.integers(0, V, size=(B, 1))
    u = rng.random((T, 2))
    greedy = np.array([t == 0 for t in temps])
    args = dict(draft=x, n=num_drafts, q=q if dense else None, p=p, bonus=bonus)
    out = run(backend, args, method="block", uniforms=u, is_greedy=greedy)
    for b in range(B):
        s, k = starts[b], num_drafts[b]
        got = [int(t) for t in out[b] if t >= 0]
        alone = run(backend, dict(draft=x[s : s + k], n=[k], q=None if not dense else q[s : s + k], p=p[s : s + k], bonus=bonus[b : b + 1]),
                    method="block", uniforms=u[s : s + k], is_greedy=greedy[b : b + 1])
        assert got == [int(t) for t in alone[0] if t >= 0], f"request {b}: batch {got}, alone {alone[0]}"
        if greedy[b]:
            want = [int(np.argmax(p[s + j])) for j in range(min(matches[b] + 1, k))] + ([int(bonus[b, 0])] if matches[b] == k else [])
            assert got == want, f"greedy request {b}"
        elif dense:
            assert got == block_decide(p[s : s + k], q[s : s + k], x[s : s + k], u[s : s + k], bonus[b, 0]), f"request {b}"
        else:
            assert got == token_decide(p[s : s + k], x[s : s + k], u[s : s + k], bonus[b, 0]), f"request {b}"


@pytest.mark.parametrize("dense,backend", [(True, "numpy"), (False, "numpy"), (True, "torch")], ids=["draft_probs-numpy", "token_only-numpy", "draft_probs-torch"])
def test_multiround_generation_is_unbiased(backend, dense):
    """Ports ``test_multiround_rejection_sample_is_unbiased`` (its block cases): 16384 sequences of 6
    tokens over two tokens, generated by rounds of k = 2 drafts, each round verified with fresh
    uniforms; every position of the sequences has the target's law. vLLM's case: p = (0.3, 0.7) and
    q = (0.7, 0.3) with probabilistic drafts; p = (0.5, 0.5) and the draft always token 0 without."""
    rng = np.random.default_rng(42)
    M, L, k = 16384, 6, 2  # vLLM: 32768
    p_row = np.array([0.3, 0.7]) if dense else np.array([0.5, 0.5])
    q_row = np.array([0.7, 0.3]) if dense else np.array([1.0, 0.0])
    seq = np.full((M, L + k + 1), -1)
    seq[:, 0] = rng.choice(2, size=M, p=p_row)
    length = np.ones(M, dtype=int)
    total_accepted = 0
    while (length < L).any():
        active = np.flatnonzero(length < L)
        A = len(active)
        drafts = rng.choice(2, size=(A, k), p=q_row)
        args = dict(draft=drafts.reshape(-1), n=[k] * A, q=np.tile(q_row, (A * k, 1)) if dense else None,
                    p=np.tile(p_row, (A * k, 1)), bonus=rng.choice(2, size=(A, 1), p=p_row))
        out = run(backend, args, method="block", uniforms=rng.random((A * k, 2)))
        count = (out >= 0).sum(1)
        for c in range(k + 1):
            ok = count > c
            seq[active[ok], length[active[ok]] + c] = out[ok, c]
        length[active] += count
        total_accepted += int((count - 1).sum())
    assert total_accepted > M, "the case must accept drafts"
    for pos in range(L):
        assert_law(seq[:, pos], p_row, f"position {pos}")


# ---------------------------------------------------------------- beyond vLLM's tests


def test_one_hot_drafts_have_the_token_law_exactly():
    """Why token-only drafts may be verified token by token: with q̂_j = δ_{x_j} the rule's law of τ
    given the drafts is that of token verification (∏ p(x_j) up to the first rejection), and the token at
    τ < n is drawn from p without x_τ under both. Checked exactly on every draft sequence of a small
    vocabulary; dense drafts differ (the reason for block verification)."""
    rng = np.random.default_rng(3)
    Vs, n = 5, 3
    p = rng.dirichlet(np.ones(Vs), size=n)
    x = np.array(list(itertools.product(range(Vs), repeat=n)))
    for seq in x:
        q = np.zeros((n, Vs))
        q[np.arange(n), seq] = 1.0
        w, h = block_weights(p, q, seq[None])
        px = p[np.arange(n), seq]
        token = np.append(np.cumprod(np.r_[1.0, px])[:n] * (1 - px), np.prod(px))
        np.testing.assert_allclose(tau_law(h)[0], token, rtol=1e-12, atol=1e-15)
        for t in range(n):
            r = np.maximum(w[0, t] * p[t] - q[t], 0.0)
            want = p[t].copy()
            want[seq[t]] = 0.0
            if r.sum() > 0:
                np.testing.assert_allclose(r / r.sum(), want / want.sum(), rtol=1e-12)
    q = rng.dirichlet(np.ones(Vs), size=n)
    _, h = block_weights(p, q, x)
    qx = np.prod(q[np.arange(n), x], 1)
    ratio = np.minimum(p[np.arange(n), x] / q[np.arange(n), x], 1.0)
    token = np.concatenate([np.cumprod(np.c_[np.ones(len(x)), ratio], 1)[:, :n] * (1 - ratio), np.prod(ratio, 1, keepdims=True)], 1)
    assert abs(qx @ tau_law(h) @ np.arange(n + 1) - qx @ token @ np.arange(n + 1)) > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_is_the_default_and_unknown_methods_are_refused(backend):
    """method="token" is the default: the same call without ``method`` gives token verification's
    tokens, and an unknown method is refused naming it."""
    rng = np.random.default_rng(5)
    n, M = 3, 64
    p_row, q_row = softmax(rng.standard_normal(V)), softmax(rng.standard_normal(V))
    args, _ = trials(p_row, q_row, n, M, rng)
    u = rng.random((M * n, 2))
    np.testing.assert_array_equal(run(backend, args, uniforms=u), run(backend, args, method="token", uniforms=u))
    with pytest.raises(ValueError, match="blok"):
        run(backend, args, method="blok", uniforms=u)
