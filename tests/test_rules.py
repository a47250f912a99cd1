"""Peer rules: exact output laws against simulation of the procedures, and against the frontier."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import mentored
from mentored.analysis.rules import RULES, audit, output_law
from mentored.check.testing import KINDS, instance, llm_like

# Knob values per rule: each exercises both branches of the switching rules on the rows below.
KNOBS = {
    "standard": [{}],
    "lenience": [{"lam": 0.3}, {"lam": 0.8}, {"lam": 1.0}, {"lam": 2.0}],
    "cactus": [{"delta": 0.0}, {"delta": 0.05}, {"delta": 0.5}, {"delta": 5.0}],
    "typical": [{"posterior_threshold": 0.09, "posterior_alpha": 0.3}, {"posterior_threshold": 0.3, "posterior_alpha": 0.9}],
    "cascade_opt": [{"alpha": 0.0}, {"alpha": 0.5}, {"alpha": 3.0}],
    "cascade_tok": [{"alpha": 0.0}, {"alpha": 0.3}, {"alpha": 0.8}, {"alpha": 1.0}],
    "fuzzy": [{"threshold": 0.0}, {"threshold": 0.05}, {"threshold": 0.7}],
    "topk": [{"k": 1}, {"k": 2}, {"k": 4}, {"k": 100}],
    "interp": [{"alpha": 0.0}, {"alpha": 0.3}, {"alpha": 1.0}],
}
CASES = [(rule, kw) for rule, grid in KNOBS.items() for kw in grid]
CASE_IDS = [f"{r}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for r, kw in CASES]

DRAWS = 200_000
Z_MAX = 5.0  # per token; with ≤ 10 tokens a correct law fails with probability < 1e-5


def test_rules_table_is_complete():
    assert set(KNOBS) == set(RULES)


# ---------------------------------------------------------------------------------------------
# An independent simulation of each procedure, written from the rule's statement, not its law.


def _verify_step(v, q):
    """Per-draft accept probabilities and the (shared) residual of speculative sampling against v."""
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, v / q), 1.0)
    res = np.maximum(v - q, 0.0)
    return accept, [res] * len(q)


def _procedure(rule, p, q, kw):
    """(accept[x], fallback[x]) for every draft x: the rule as a sampler would run it."""
    n = len(p)
    if rule == "standard":
        return _verify_step(p, q)
    if rule == "lenience":
        with np.errstate(divide="ignore", invalid="ignore"):
            accept = np.where(q > 0, np.minimum(1.0, p / (kw["lam"] * q)), 1.0)
        res = np.maximum(p - q, 0.0)
        return accept, [res if res.sum() > 0 else p] * n
    if rule == "cactus":
        accept, fallback = np.ones(n), []
        for x in range(n):
            g = min(1.0, max(0.0, p[x] + np.sqrt(2 * kw["delta"] * p[x] * (1 - p[x]))))
            h = p * (1 - g) / (1 - p[x]) if p[x] < 1 else np.zeros(n)
            h[x] = g
            accept[x] = min(1.0, g / q[x]) if q[x] > 0 else 1.0
            fallback.append(np.maximum(h - q, 0.0))
        return accept, fallback
    if rule == "typical":
        ent = -sum(pi * np.log(pi) for pi in p if pi > 0)
        tau = min(kw["posterior_threshold"], kw["posterior_alpha"] * np.exp(-ent))
        return (p > tau).astype(float), [np.eye(n)[np.argmax(p)]] * n
    if rule == "cascade_opt":
        tv = 0.5 * np.abs(p - q).sum()
        return _verify_step(q if q.max() >= p.max() - kw["alpha"] * tv else p, q)
    if rule == "cascade_tok":
        s = p >= (1 - kw["alpha"]) * p.max()
        return _verify_step(np.where(s, q, 0.0) + (1 - q[s].sum()) * p, q)
    if rule == "fuzzy":
        m = 0.5 * (p + q)
        with np.errstate(divide="ignore", invalid="ignore"):
            jsd = sum(0.5 * np.where(a > 0, a * np.log(a / m), 0.0).sum() for a in (p, q))
        return _verify_step(q if jsd <= kw["threshold"] else p, q)
    if rule == "topk":
        top = (p >= np.sort(p)[::-1][min(kw["k"], n) - 1]).astype(float)
        return top, [np.maximum(top - q, 0.0)] * n
    if rule == "interp":
        return _verify_step(kw["alpha"] * q + (1 - kw["alpha"]) * p, q)
    raise ValueError(rule)


def _simulate(accept, fallback, q, rng, draws=DRAWS):
    """Run the procedure: counts of emitted tokens and the fraction of accepted drafts."""
    n = len(q)
    x = rng.choice(n, size=draws, p=q)
    ok = rng.random(draws) < accept[x]
    counts = np.bincount(x[ok], minlength=n)
    for token, m in zip(*np.unique(x[~ok], return_counts=True)):
        r = fallback[token]
        counts += np.bincount(rng.choice(n, size=m, p=r / r.sum()), minlength=n)
    return counts, ok.mean()


def _max_z(counts, law):
    """Largest per-token z-score of the counts under the law; ∞ for a token the law excludes."""
    draws = counts.sum()
    if np.any(counts[law <= 0] > 0):
        return np.inf
    sd = np.sqrt(np.maximum(draws * law * (1 - law), 1e-300))
    return float(np.max(np.where(law > 0, np.abs(counts - draws * law) / sd, 0.0)))


def _rows():
    # Fixed rows: dense, a truncated target (zeros in p), a truncated drafter (zeros in q).
    g = np.random.default_rng(20260808)
    return [instance("dense", g, n=6), instance("top_k_target", g, n=8), instance("truncated_draft", g, n=8)]


@pytest.mark.parametrize(("rule", "kw"), CASES, ids=CASE_IDS)
def test_law_matches_simulation(rule, kw, rng):
    for p, q in _rows():
        pi, acc = output_law(rule, p, q, **kw)
        accept, fallback = _procedure(rule, p, q, kw)
        counts, rate = _simulate(accept, fallback, q, rng)
        assert _max_z(counts, pi) < Z_MAX, (pi, counts / DRAWS)
        assert abs(rate - acc) <= Z_MAX * np.sqrt(max(acc * (1 - acc), 1e-12) / DRAWS) + 1e-12


@pytest.mark.parametrize("wrong", ["lenience_swapped_residual", "cactus_target_residual", "topk_target_residual"])
def test_simulation_rejects_a_wrong_law(wrong, rng):
    """The same comparison fails a plausible mistake: the test has power, not only tolerance."""
    p, q = _rows()[0]
    if wrong == "lenience_swapped_residual":
        kw = {"lam": 0.8}
        with np.errstate(divide="ignore"):
            a = np.minimum(1.0, p / (0.8 * q))
        res = np.maximum(q - p, 0.0)  # (q − p)₊ instead of (p − q)₊
        bad = q * a + (1 - (q * a).sum()) * res / res.sum()
        rule = "lenience"
    elif wrong == "cactus_target_residual":
        p, q = np.array([0.6, 0.25, 0.1, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
        kw = {"delta": 0.5}
        accept, _ = _procedure("cactus", p, q, kw)
        res = np.maximum(p - q, 0.0)  # residual of p, as if H_x were p
        mix = sum(q[x] * (1 - accept[x]) for x in range(len(p)))
        bad = q * accept + mix * res / res.sum()
        rule = "cactus"
    else:
        kw = {"k": 2}
        top = (p >= np.sort(p)[::-1][1]).astype(float)
        res = np.maximum(top * p / (top * p).sum() - q, 0.0)  # a renormalised-top-k residual instead
        bad = q * top + (1 - (q * top).sum()) * res / res.sum()
        rule = "topk"
    assert np.abs(bad - output_law(rule, p, q, **kw)[0]).max() > 1e-3  # really a different law
    accept, fallback = _procedure(rule, p, q, kw)
    counts, _ = _simulate(accept, fallback, q, rng)
    assert _max_z(counts, output_law(rule, p, q, **kw)[0]) < Z_MAX
    assert _max_z(counts, bad) > Z_MAX


# ---------------------------------------------------------------------------------------------
# Exact properties


@pytest.mark.parametrize("kind", KINDS)
def test_laws_are_distributions(kind, rng):
    for _ in range(8):
        p, q = instance(kind, rng)
        for rule, kw in CASES:
            pi, acc = output_law(rule, p, q, **kw)
            assert pi.shape == p.shape and pi.dtype == np.float64
            assert np.all(pi >= 0)
            assert_allclose(pi.sum(), 1.0, rtol=0, atol=1e-12)
            assert -1e-15 <= acc <= 1 + 1e-12
            # accepted drafts are emitted tokens: P(accept, x) ≤ min(π_x, q_x)
            assert acc <= np.minimum(pi, q).sum() + 1e-12


def test_standard_is_p_exactly(rng):
    for kind in KINDS:
        p, q = instance(kind, rng)
        pi, acc = output_law("standard", p, q)
        assert_array_equal(pi, p)
        assert acc == np.minimum(p, q).sum()


@pytest.mark.parametrize("kind", ["dense", "peaked", "top_k_target", "truncated_draft", "ties", "extreme"])
def test_lossless_and_drafter_limits(kind, rng):
    """Knob values at which a rule reduces to π = p or to π = q."""
    p, q = instance(kind, rng)
    for rule, kw in [("lenience", {"lam": 1.0}), ("cactus", {"delta": 0.0}), ("interp", {"alpha": 0.0}),
                     ("fuzzy", {"threshold": -1.0}), ("cascade_opt", {"alpha": -np.inf})]:
        assert_allclose(output_law(rule, p, q, **kw)[0], p, rtol=0, atol=1e-13, err_msg=rule)
    for rule, kw in [("interp", {"alpha": 1.0}), ("cascade_tok", {"alpha": 1.0}), ("topk", {"k": p.size}),
                     ("fuzzy", {"threshold": 1.0}), ("cascade_opt", {"alpha": np.inf})]:
        pi, acc = output_law(rule, p, q, **kw)
        assert_allclose(pi, q, rtol=0, atol=1e-13, err_msg=rule)
        assert_allclose(acc, 1.0, rtol=0, atol=1e-13, err_msg=rule)


def _cactus_naive(p, q, delta):
    """The O(n²) mixture over drafts, straight from the statement."""
    n, pi = p.size, np.zeros(p.size)
    for x in range(n):
        g = min(1.0, p[x] + np.sqrt(2 * delta * p[x] * (1 - p[x])))
        h = p * (1 - g) / (1 - p[x]) if p[x] < 1 else np.zeros(n)
        h[x] = g
        a = min(1.0, g / q[x]) if q[x] > 0 else 1.0
        pi[x] += q[x] * a
        if a < 1:
            r = np.maximum(h - q, 0.0)
            pi += q[x] * (1 - a) * r / r.sum()
    return pi


@pytest.mark.parametrize("kind", KINDS)
def test_cactus_sorted_form_equals_naive_mixture(kind, rng):
    for _ in range(10):
        p, q = instance(kind, rng)
        for delta in (0.0, 1e-4, 0.1, 2.0, 50.0):
            assert_allclose(output_law("cactus", p, q, delta=delta)[0], _cactus_naive(p, q, delta), rtol=0, atol=1e-13)


def test_cactus_edge_rows():
    # p_x = 1 (H_x = δ_x = p) and a drafter that never proposes the target's token.
    p, q = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.5, 0.5])
    pi, acc = output_law("cactus", p, q, delta=0.3)
    assert_array_equal(pi, p)
    assert acc == 0.0
    pi, acc = output_law("cactus", p, p.copy(), delta=0.3)
    assert_array_equal(pi, p)
    assert acc == 1.0


def test_topk_ties_and_empty_residual():
    p = np.array([0.4, 0.2, 0.2, 0.2])
    pi, acc = output_law("topk", p, np.full(4, 0.25), k=2)  # three-way tie at the 2nd value: all in
    assert_allclose(pi, np.full(4, 0.25), rtol=0, atol=1e-15)
    assert_allclose(acc, 1.0, rtol=0, atol=1e-15)
    q = np.array([1.0, 0.0, 0.0, 0.0])  # residual (1_T − q)₊ is empty, and nothing is ever rejected
    pi, acc = output_law("topk", p, q, k=1)
    assert_array_equal(pi, q)
    assert acc == 1.0


def test_lenience_on_equal_rows_falls_back_to_target():
    p = np.array([0.5, 0.3, 0.2])
    pi, acc = output_law("lenience", p, p.copy(), lam=2.0)
    assert_allclose(pi, p, rtol=0, atol=1e-15)
    assert_allclose(acc, 0.5, rtol=0, atol=1e-15)


def test_batch_equals_rows(rng):
    rows = [llm_like(rng, 50) for _ in range(4)]
    p, q = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    for rule, kw in CASES:
        pi, acc = output_law(rule, p, q, **kw)
        assert pi.shape == p.shape and acc.shape == (4,)
        for b in range(4):
            one = output_law(rule, p[b], q[b], **kw)
            assert_array_equal(pi[b], one[0])
            assert acc[b] == one[1]


def test_errors():
    p, q = [0.5, 0.5], [0.25, 0.75]
    with pytest.raises(ValueError, match="unknown rule"):
        output_law("nope", p, q)
    with pytest.raises(TypeError, match="knobs"):
        output_law("lenience", p, q)
    with pytest.raises(TypeError, match="knobs"):
        output_law("interp", p, q, alpha=0.5, lam=1.0)
    with pytest.raises(ValueError, match="alpha"):
        output_law("interp", p, q, alpha=1.5)
    with pytest.raises(ValueError, match="sum to 1"):
        output_law("standard", [0.5, 0.6], q)
    with pytest.raises(ValueError, match="one row"):
        audit("standard", np.array([p]), np.array([q]), divergence="kl")


# ---------------------------------------------------------------------------------------------
# Against the frontier: no rule lies above it (docs/theory.md §7)


@pytest.mark.slow  # 27 rows × every rule × 7 divergences
def test_no_rule_above_the_frontier(rng):
    kinds = ("dense", "peaked", "top_k_target", "truncated_draft", "both_truncated", "ties", "one_hot_draft", "disjoint")
    rows = [instance(k, rng) for k in kinds for _ in range(3)] + [llm_like(rng, 200) for _ in range(3)]
    for p, q in rows:
        for rule, kw in CASES:
            for div in mentored.BUILTIN_NAMES:
                a = audit(rule, p, q, divergence=div, **kw)
                assert a.acceptance <= a.optimal_acceptance + 1e-9, a
                assert a.acceptance_deficit >= -1e-9, a
                # Overspent: D is steep in A near the curve's end, so allow rounding relative to D.
                assert a.divergence_overspent >= -1e-9 * (1 + a.rule_divergence), a


def test_audit_fields_and_infinite_divergence():
    p, q = np.array([0.6, 0.4, 0.0]), np.array([0.3, 0.3, 0.4])
    a = audit("interp", p, q, divergence="kl", alpha=0.5)  # mass where p = 0: D_kl = ∞
    assert a.rule_divergence == np.inf and a.optimal_acceptance == 1.0
    assert_allclose(a.acceptance_deficit, 1.0 - a.acceptance, rtol=0, atol=1e-15)
    # A_rule = 0.8 > 1 − Q0 = 0.6, the most any finite KL budget reaches: both need ∞.
    assert_allclose(a.acceptance, 0.8, rtol=0, atol=1e-15)
    assert a.optimal_divergence == np.inf and a.divergence_overspent == 0.0
    a = audit("interp", p, q, divergence="tv", alpha=0.5)  # interpolation is on the tv frontier
    assert_allclose((a.acceptance_deficit, a.divergence_overspent), (0.0, 0.0), rtol=0, atol=1e-14)
    a = audit("standard", p, q, divergence="kl")
    assert a.rule_divergence == 0.0 and a.optimal_divergence == 0.0
    assert_allclose(a.acceptance_deficit, 0.0, rtol=0, atol=1e-15)
    # finite rule divergence below the reachable maximum: overspent is finite
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    a = audit("lenience", p, q, divergence="kl", lam=0.5)
    assert np.isfinite(a.divergence_overspent) and a.divergence_overspent >= -1e-12
    assert_allclose(mentored.solve(p, q, divergence="kl", acceptance=a.acceptance).divergence, a.optimal_divergence, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Knobs: every value outside a rule's domain refused, naming the rule and the knob

_ANY_KNOB = [np.nan, np.float32("nan"), "0.5", True, np.True_, None, [0.5]]  # never a knob's value
_OUTSIDE = {  # per knob: values outside its domain
    ("lenience", "lam"): [0, 0.0, -1.0, np.inf],
    ("cactus", "delta"): [-1e-9, np.inf, -np.inf],
    ("typical", "posterior_threshold"): [-0.1, -np.inf],
    ("typical", "posterior_alpha"): [-0.1, -np.inf],
    ("cascade_opt", "alpha"): [],
    ("cascade_tok", "alpha"): [-0.1, 1.5, np.inf, -np.inf],
    ("fuzzy", "threshold"): [],
    ("topk", "k"): [0, -3, 2.5, 2.0, np.inf, np.int64(0)],
    ("interp", "alpha"): [-0.1, 1.1, np.inf],
}
BAD_KNOBS = [(rule, knob, bad) for (rule, knob), outside in _OUTSIDE.items() for bad in _ANY_KNOB + outside]


def test_every_knob_has_its_bad_values():
    assert set(_OUTSIDE) == {(rule, knob) for rule, knobs in RULES.items() for knob in knobs}


@pytest.mark.parametrize(("rule", "knob", "bad"), BAD_KNOBS, ids=[f"{r}-{k}={b!r}" for r, k, b in BAD_KNOBS])
def test_a_knob_outside_its_domain_is_refused_naming_rule_and_knob(rule, knob, bad):
    p, q = _rows()[1]  # a truncated target: a NaN knob used to return a law and an acceptance here
    kw = {**KNOBS[rule][0], knob: bad}
    with pytest.raises(ValueError, match=rf"^rule '{rule}': {knob} must be "):
        output_law(rule, p, q, **kw)
    with pytest.raises(ValueError, match=rf"^rule '{rule}': {knob} must be "):
        audit(rule, p, q, divergence="kl", **kw)


@pytest.mark.parametrize(("rule", "kw"), [
    ("typical", {"posterior_threshold": np.inf, "posterior_alpha": 0.3}),  # the entropy threshold alone
    ("typical", {"posterior_threshold": 0.1, "posterior_alpha": np.inf}),
    ("cascade_opt", {"alpha": np.float32(0.5)}),
    ("fuzzy", {"threshold": np.inf}),
    ("topk", {"k": np.int64(2)}),
    ("cactus", {"delta": 0}),
    ("interp", {"alpha": 1}),
], ids=str)
def test_knobs_at_the_ends_of_their_domains_and_numpy_scalars_are_taken(rule, kw):
    p, q = _rows()[0]
    pi, acc = output_law(rule, p, q, **kw)
    assert np.all(pi >= 0) and abs(pi.sum() - 1) <= 1e-12 and 0 <= acc <= 1 + 1e-12
    plain = {k: v.item() if isinstance(v, np.generic) else v for k, v in kw.items()}
    assert_array_equal(pi, output_law(rule, p, q, **plain)[0])
