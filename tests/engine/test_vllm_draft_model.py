"""The plugin inside vLLM's engine with a drafter that gives probabilities: vLLM's draft-model
speculation with the drafter shipped for SmolLM2, exported as a full-vocabulary Llama
(``mentored.integrations.vllm_export``), ``draft_sample_method="probabilistic"``: the dense path, where
vLLM hands the sampler each draft's distribution q. ``MENTORED_ENABLE=1``: lossless by default, each
request choosing its budget."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from conftest import PROMPTS, Capture, drafter_folder, need_vllm, start_engine, target_law

need_vllm()
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning", "ignore::ResourceWarning")


@pytest.fixture(scope="module")
def engine():
    os.environ["MENTORED_ENABLE"] = "1"
    llm, runner = start_engine({"method": "draft_model", "model": drafter_folder(), "num_speculative_tokens": 4,
                                "draft_sample_method": "probabilistic"})
    yield llm, runner
    del llm


def params(budget, seed, **kwargs):
    from vllm import SamplingParams

    kwargs.setdefault("max_tokens", 96)
    kwargs.setdefault("temperature", 1.0)
    return SamplingParams(seed=seed, extra_args={"mentored_budget": budget}, **kwargs)


def run(engine, budget, seed0=0, **kwargs):
    llm, runner = engine
    with Capture(runner) as cap:
        llm.generate(PROMPTS, [params(budget, seed0 + i, **kwargs) for i in range(len(PROMPTS))], use_tqdm=False)
    return cap.rows


def test_vllm_hands_the_sampler_the_drafters_distributions(engine):
    from mentored.integrations.smollm import DRAFTER_DIR

    import json

    sub = np.array(json.loads((DRAFTER_DIR / "config.json").read_text())["sub_vocab"])
    rows = run(engine, 0.3, max_tokens=32)
    assert rows and all(r["draft_probs"] is not None for r in rows)
    q = np.concatenate([r["draft_probs"] for r in rows])
    assert q.shape[1] == 49152
    np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-4)
    off = np.ones(q.shape[1], bool)
    off[sub] = False
    assert q[:, off].max() == 0.0  # the export keeps q = 0 off the drafter's sub-vocabulary


def test_budget_inf_accepts_every_draft(engine):
    rows = run(engine, "inf", seed0=40)
    drafted = sum(len(r["drafts"]) for r in rows)
    assert drafted >= 100 and sum(len(r["emitted"]) - 1 for r in rows) == drafted


def test_budget_zero_is_the_lossless_law_with_the_drafters_q(engine):
    """Lossless speculative sampling with dense drafts: the draft x is accepted with probability
    min(1, p_x / q_x); at the first rejection the token is drawn from (p − q)₊ renormalised, after k
    acceptances from the next p. Sums of decisions against their exact means (z-scores)."""
    rows = run(engine, 0, seed0=60, max_tokens=128)
    acc = [0.0, 0.0, 0.0]
    res = [0.0, 0.0, 0.0]
    for row in rows:
        p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
        q = row["draft_probs"]
        a, n = len(row["emitted"]) - 1, len(row["drafts"])
        for i in range(min(a + 1, n)):
            x = row["drafts"][i]
            prob = min(1.0, p[i, x] / q[i, x]) if q[i, x] > 0 else float(p[i, x] > 0)
            acc[0] += i < a
            acc[1] += prob
            acc[2] += prob * (1 - prob)
        r = np.maximum(p[a] - q[a], 0.0) if a < n else p[a].copy()
        if r.sum() <= 0:
            continue
        r /= r.sum()
        res[0] += r[row["emitted"][-1]]
        res[1] += (r * r).sum()
        res[2] += (r**3).sum() - (r * r).sum() ** 2
    assert acc[2] > 20
    z_acc = (acc[0] - acc[1]) / math.sqrt(acc[2])
    z_res = (res[0] - res[1]) / math.sqrt(res[2])
    assert abs(z_acc) < 4.5 and abs(z_res) < 4.5, (z_acc, z_res, acc)


def test_acceptance_rises_with_the_budget(engine):
    rates = []
    for budget in (0, 0.3, 1.0):
        rows = run(engine, budget, seed0=80)
        rates.append(sum(len(r["emitted"]) - 1 for r in rows) / sum(len(r["drafts"]) for r in rows))
    assert rates[0] < rates[1] < rates[2] and rates[2] - rates[0] > 0.1, rates
