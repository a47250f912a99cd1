"""Hierarchical Speculative Decoding (Zhou et al., ICLR 2026) on a chain: the capped rule is lossless
(exact law by enumeration, and a χ² test of the sampler), it is block verification decision for
decision, its expected length is block's closed form, and the binary example gives 11/9; the rule as
the authors' released code states it (uncapped whole-draft acceptance) is not lossless."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mentored.check.block import block_length, random_tree, token_length
from mentored.check.hierarchical import (exact_accepted, exact_law, hierarchical_verify,
                                         hierarchical_verify_batch)
from mentored.verify.serving import rejection_sample

# ---------------------------------------------------------------- chains whose rows depend on the prefix


def prefix_chain(V, seed, a=0.8):
    """p(prefix), q(prefix): rows drawn once per prefix (Dirichlet(a)), memoised, so they depend on the prefix."""
    rng = np.random.default_rng(seed)
    rows: dict = {}

    def row(name, prefix):
        if (name, prefix) not in rows:
            rows[(name, prefix)] = rng.dirichlet(np.full(V, a))
        return rows[(name, prefix)]

    return (lambda s: row("p", s)), (lambda s: row("q", s))


def target_law(p, V, L):
    law = {}
    for y in itertools.product(range(V), repeat=L):
        law[y] = float(np.prod([p(y[:j])[y[j]] for j in range(L)]))
    return law


def sample_rounds(p, q, V, k, N, rng, variant):
    """N rounds: drafts from q, rows along each drafted path, HSD's emitted tokens continued by the
    target to length k + 1 (what the next rounds emit)."""
    seqs = []
    for _ in range(N):
        x = []
        for t in range(k):
            x.append(int(rng.choice(V, p=q(tuple(x)))))
        P = np.stack([p(tuple(x[:t])) for t in range(k + 1)])
        Q = np.stack([q(tuple(x[:t])) for t in range(k)])
        y, _ = hierarchical_verify(P, Q, x, rng.random((k, 2)), variant=variant)
        while len(y) < k + 1:
            y.append(int(rng.choice(V, p=p(tuple(y)))))
        seqs.append(tuple(y))
    return seqs


def chi2_pvalue(seqs, law):
    keys = list(law)
    index = {y: i for i, y in enumerate(keys)}
    counts = np.zeros(len(keys))
    for y in seqs:
        counts[index[y]] += 1
    return stats.chisquare(counts, np.array([law[y] for y in keys]) * len(seqs)).pvalue


# ---------------------------------------------------------------- losslessness


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_capped_rule_exact_law_is_the_target_chain(seed):
    V, k = 3, 3
    p, q = prefix_chain(V, seed)
    law = exact_law(p, q, V, k)
    want = target_law(p, V, k + 1)
    assert max(abs(law.get(y, 0.0) - want[y]) for y in want) < 1e-12


def test_capped_sampler_follows_the_target_chain_chi2():
    V, k, N = 3, 2, 12000
    p, q = prefix_chain(V, 7)
    rng = np.random.default_rng(11)
    seqs = sample_rounds(p, q, V, k, N, rng, "capped")
    assert chi2_pvalue(seqs, target_law(p, V, k + 1)) > 1e-3


def test_released_rule_is_not_lossless():
    """The authors' released code accepts the whole draft with min(1, r_{k+1}) instead of min(1, r_{k+1}/R_k):
    a small bias on a generic chain, a large one on the binary example (sampled)."""
    V, k = 3, 2
    p, q = prefix_chain(V, 7)
    law = exact_law(p, q, V, k, variant="released")
    want = target_law(p, V, k + 1)
    assert max(abs(law.get(y, 0.0) - want[y]) for y in want) > 1e-4
    P, Q = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])
    rng = np.random.default_rng(11)
    seqs = sample_rounds(lambda s: P, lambda s: Q, 2, 2, 3000, rng, "released")
    assert chi2_pvalue(seqs, target_law(lambda s: P, 2, 3)) < 1e-6
    rng = np.random.default_rng(11)
    seqs = sample_rounds(lambda s: P, lambda s: Q, 2, 2, 3000, rng, "capped")
    assert chi2_pvalue(seqs, target_law(lambda s: P, 2, 3)) > 1e-3


# ---------------------------------------------------------------- the binary example


def _binary():
    P, Q = [Fraction(1, 3), Fraction(2, 3)], [Fraction(2, 3), Fraction(1, 3)]
    return (lambda s: P), (lambda s: Q)


def test_binary_example_exactly():
    p, q = _binary()
    one = Fraction(1)
    assert exact_accepted(p, q, 2, 2, one=one) == Fraction(11, 9)  # block's value (Sun et al.)
    assert exact_accepted(p, q, 2, 2, variant="released", one=one) == Fraction(4, 3)
    first2 = {}
    for y, pr in exact_law(p, q, 2, 2, variant="released", one=one).items():
        first2[y[:2]] = first2.get(y[:2], 0) + pr
    # target: BA has 2/3 · 1/3 = 2/9, BB 4/9; the released rule over-accepts BA (ratio 1 behind a prefix ratio 2)
    assert first2[(1, 0)] == Fraction(1, 3) and first2[(1, 1)] == Fraction(1, 3)
    lossless = {}
    for y, pr in exact_law(p, q, 2, 2, one=one).items():
        lossless[y[:2]] = lossless.get(y[:2], 0) + pr
    assert lossless == {(0, 0): Fraction(1, 9), (0, 1): Fraction(2, 9), (1, 0): Fraction(2, 9), (1, 1): Fraction(4, 9)}


# ---------------------------------------------------------------- HSD (capped) is block verification


@pytest.mark.parametrize("seed", [0, 1])
def test_capped_expected_length_is_blocks_closed_form(seed):
    V, k = 3, 3
    P, Q = random_tree(V, k, seed)
    p = lambda s: P[len(s)][s] if len(s) < k else np.full(V, 1 / V)  # noqa: E731 (bonus row plays no part)
    q = lambda s: Q[len(s)][s]  # noqa: E731
    got = exact_accepted(p, q, V, k)
    assert got == pytest.approx(block_length(Q, P), abs=1e-12)
    assert got > token_length(Q, P) + 1e-6


def test_capped_rule_decides_as_block_verification_given_the_same_uniforms():
    rng = np.random.default_rng(5)
    B, k, V = 300, 4, 8
    p = rng.dirichlet(np.full(V, 0.4), size=(B, k + 1))
    q = 0.5 * p[:, :k] + 0.5 * rng.dirichlet(np.full(V, 0.4), size=(B, k))
    x = np.array([[rng.choice(V, p=q[b, t]) for t in range(k)] for b in range(B)])
    u = rng.random((B, k, 2))
    bonus = np.array([_inv(p[b, k], u[b, k - 1, 1]) for b in range(B)])
    block = rejection_sample(x.ravel(), [k] * B, q.reshape(-1, V), p[:, :k].reshape(-1, V), bonus,
                             uniforms=u.reshape(-1, 2), method="block")
    hsd, n = hierarchical_verify_batch(p, q, x, u)
    np.testing.assert_array_equal(hsd, block)
    assert 0 < n.mean() < k and len(set(n.tolist())) > 2  # the comparison covered several outcomes
    released, _ = hierarchical_verify_batch(p, q, x, u, variant="released")
    assert (released != block).any()


def _inv(row, u):
    c = np.cumsum(row)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(c) - 1))


def test_bad_inputs_are_refused_with_a_reason():
    p, q = np.full((3, 2), 0.5), np.full((2, 2), 0.5)
    with pytest.raises(ValueError, match="k \\+ 1"):
        hierarchical_verify(q, q, [0, 1], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="variant"):
        hierarchical_verify(p, q, [0, 1], np.zeros((2, 2)), variant="clever")
    with pytest.raises(ValueError, match="drafter probability 0"):
        hierarchical_verify(p, np.array([[1.0, 0.0], [0.5, 0.5]]), [1, 1], np.zeros((2, 2)))
