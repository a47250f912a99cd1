"""The plugin inside vLLM's engine, with ngram speculation (token-only drafts), on SmolLM2.

One in-process engine for the whole file, started with ``MENTORED_ENABLE=1``: the plugin on, lossless
by default, each request choosing its own divergence and budget through ``extra_args``. Every check
reads what the engine handed the sampler (conftest's ``Capture``) and states the rule it expects
independently (conftest's ``target_law``, the acceptance and residual laws written out here).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from conftest import PROMPTS, Capture, need_vllm, start_engine, target_law

need_vllm()
pytestmark = [
    # vLLM's own imports and threads warn (deprecations in torch.distributed, numba); not this package's
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning",
                               "ignore::pytest.PytestUnraisableExceptionWarning", "ignore::ResourceWarning"),
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.fixture(scope="module")
def engine():
    os.environ.pop("MENTORED_DIVERGENCE", None)
    os.environ.pop("MENTORED_BUDGET", None)
    os.environ["MENTORED_ENABLE"] = "1"
    llm, runner = start_engine(NGRAM, per_request_spec_decode_metrics="summary")
    yield llm, runner
    del llm


def params(budget=None, divergence=None, **kwargs):
    from vllm import SamplingParams

    extra = {}
    if budget is not None:
        extra["mentored_budget"] = budget
    if divergence is not None:
        extra["mentored_divergence"] = divergence
    kwargs.setdefault("temperature", 1.0)
    kwargs.setdefault("max_tokens", 96)
    return SamplingParams(extra_args=extra or None, **kwargs)


def accepted(row) -> int:
    """Drafts accepted at a step: every emitted token but the last (the one at the first rejection,
    or the bonus token)."""
    return len(row["emitted"]) - 1


def per_position(rows, k=4):
    """(drafts reached, drafts accepted) at each position 0..k-1 of a step."""
    reached, taken = np.zeros(k), np.zeros(k)
    for row in rows:
        a, n = accepted(row), len(row["drafts"])
        reached[: min(a + 1, n)] += 1
        taken[:a] += 1
    return reached, taken


def test_the_plugin_verifies_in_the_engine(engine):
    from mentored.integrations.vllm_plugin import MentoredRejectionSampler  # noqa: F401

    _, runner = engine
    sampler = runner.rejection_sampler
    assert type(sampler).__name__ == "MentoredRejectionSampler"
    assert type(sampler).__mro__[2].__module__ == "vllm.v1.sample.rejection_sampler"  # built on vLLM's own class
    assert (sampler.mentored_config.divergence, sampler.mentored_config.budget) == ("kl", 0.0)
    assert sampler.mentored_runner() is runner  # so that it reads each request's extra_args


def test_budgets_per_request_share_one_batch(engine):
    """inf accepts every draft and 0 is lossless, side by side in the same steps (process default 0)."""
    llm, runner = engine
    budgets = ["inf", 0, "inf", 0.3, None, "inf"]
    with Capture(runner) as cap:
        outputs = llm.generate(PROMPTS, [params(b, seed=i) for i, b in enumerate(budgets)], use_tqdm=False)
    # vLLM's own statistics per request (per_request_spec_decode_metrics) say the same
    for budget, out in zip(budgets, outputs):
        stats = out.outputs[0].spec_decode_metrics
        taken_here = sum(j * count for j, count in enumerate(stats.histogram))
        assert (taken_here == stats.num_draft_tokens) == (budget == "inf"), (budget, stats)
    by = {}
    for row in cap.rows:
        by.setdefault(str(row["extra_args"].get("mentored_budget")), []).append(row)
    drafts = {key: sum(len(r["drafts"]) for r in rows) for key, rows in by.items()}
    taken = {key: sum(accepted(r) for r in rows) for key, rows in by.items()}
    assert drafts["inf"] >= 100 and taken["inf"] == drafts["inf"], (taken, drafts)
    for lossless in ("0", "None"):  # an explicit 0, and the process default
        assert 0 < taken[lossless] < drafts[lossless], (taken, drafts)
    assert len({r["req_id"] for r in cap.rows}) == len(PROMPTS)  # every request had drafts in these steps


def test_bad_request_values_are_refused_per_request(engine):
    llm, _ = engine
    for extra, said in (({"mentored_budget": -1}, "nonnegative"), ({"mentored_budget": "lots"}, "must be a number"),
                        ({"mentored_divergence": "no_such"}, "unknown divergence"), ({"mentored_budgte": 0.1}, "unknown extra_args keys")):
        from vllm import SamplingParams
        from vllm.exceptions import VLLMValidationError

        with pytest.raises(VLLMValidationError, match=said):
            llm.generate(["Hello"], SamplingParams(max_tokens=4, extra_args=extra), use_tqdm=False)
    out = llm.generate(["Hello Hello Hello"], params(0.1, "tv", max_tokens=8), use_tqdm=False)  # the engine goes on
    assert len(out[0].outputs[0].token_ids) == 8


def test_budget_zero_is_the_lossless_law(engine):
    """At budget 0 each draft x at a position with target p is accepted with probability p_x, and at
    the first rejection the token is drawn from p without x, renormalised (after all k accepted: the
    bonus, from the next p). Both are checked as sums of independent decisions against their exact
    means, over every step of the run (z-scores); p is recomputed from the captured logits."""
    llm, runner = engine
    with Capture(runner) as cap:
        llm.generate(PROMPTS * 2, [params(0, seed=10 + i, max_tokens=128) for i in range(2 * len(PROMPTS))], use_tqdm=False)
    acc_sum = acc_mean = acc_var = 0.0
    res_sum = res_mean = res_var = 0.0
    decisions = 0
    for row in cap.rows:
        p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
        a, n = accepted(row), len(row["drafts"])
        for i in range(min(a + 1, n)):
            px = p[i, row["drafts"][i]]
            acc_sum += i < a
            acc_mean += px
            acc_var += px * (1 - px)
            decisions += 1
        last = row["emitted"][-1]
        r = p[a].copy()
        if a < n:
            r[row["drafts"][a]] = 0.0
        if r.sum() <= 0:
            continue
        r /= r.sum()
        res_sum += r[last]
        res_mean += (r * r).sum()
        res_var += (r**3).sum() - (r * r).sum() ** 2
    assert decisions >= 300
    z_acc = (acc_sum - acc_mean) / math.sqrt(acc_var)
    z_res = (res_sum - res_mean) / math.sqrt(res_var)
    assert abs(z_acc) < 4.5 and abs(z_res) < 4.5, (z_acc, z_res, acc_sum, acc_mean, decisions)


def test_budget_zero_agrees_with_vllms_rule_on_the_same_inputs(engine):
    """Replays of captured steps: the plugin's sampler and vLLM's own rule (its ``rejection_sample``,
    the kernel of its v1 sampler, given the same processed target rows) accept drafts at each
    position as often as the exact law says, so as often as each other."""
    import torch
    from vllm.v1.sample import rejection_sampler as vllm_rs

    llm, runner = engine
    with Capture(runner, keep_inputs=24) as cap:
        llm.generate(PROMPTS, [params(0, seed=30 + i) for i in range(len(PROMPTS))], use_tqdm=False)
    sampler = runner.rejection_sampler
    reps = 12
    exact, ours, theirs = np.zeros(4), np.zeros(4), np.zeros(4)
    for metadata, draft_probs, logits, sm, _ in cap.inputs:
        n = list(metadata.num_draft_tokens)
        target = logits[metadata.target_logits_indices].to(torch.float64).numpy()
        temps = sm.temperature.numpy()
        rows = np.repeat(np.arange(len(n)), n)
        p = np.concatenate([target_law(target[rows == b], temps[b], None, None) for b in range(len(n)) if n[b]]) if sum(n) else None
        processed = torch.as_tensor(np.log(p), dtype=torch.float32)
        starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        for b, k in enumerate(n):
            px = p[starts[b] : starts[b] + k, :][np.arange(k), metadata.draft_token_ids[starts[b] : starts[b] + k].numpy()]
            exact[:k] += reps * np.cumprod(px)
        for _ in range(reps):
            mine = sampler.forward(metadata, draft_probs, logits.clone(), sm).sampled_token_ids.numpy()
            bonus = torch.zeros((len(n), 1), dtype=torch.int64)
            vllms = vllm_rs.rejection_sample(metadata.draft_token_ids, n, metadata.max_spec_len, metadata.cu_num_draft_tokens, None,
                                             processed.clone(), bonus, sm).numpy()
            for b, k in enumerate(n):
                for out, into in ((mine, ours), (vllms, theirs)):
                    a = int((out[b] >= 0).sum()) - 1
                    into[:a] += 1
    assert exact[0] >= 100
    for j in range(4):
        if exact[j] < 30:
            continue
        sd = math.sqrt(exact[j])  # Poisson-binomial counts: the variance is at most the mean
        assert abs(ours[j] - exact[j]) < 5 * sd and abs(theirs[j] - exact[j]) < 5 * sd, (j, ours, theirs, exact)


def test_masks_are_never_emitted_at_any_budget(engine):
    """top-k and top-p zero the target outside their sets; no such token is ever emitted, at budget
    0, 0.3 or inf (checked against top-k/top-p recomputed from the captured logits)."""
    llm, runner = engine
    masks = [dict(top_k=3), dict(top_k=3), dict(top_k=3), dict(top_p=0.5), dict(top_p=0.5), dict(top_k=2, top_p=0.9)]
    requests = [params(b, seed=50 + i, **mask) for i, (b, mask) in enumerate(zip([0, 0.3, "inf", 0, "inf", "inf"], masks))]
    with Capture(runner) as cap:
        llm.generate(PROMPTS, requests, use_tqdm=False)
    checked = rejected_drafts = 0
    for row in cap.rows:
        p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
        for i, token in enumerate(row["emitted"]):
            assert p[i, token] > 0, (row["extra_args"], row["top_k"], row["top_p"], i, token)
            checked += 1
        rejected_drafts += sum(p[i, x] == 0 for i, x in enumerate(row["drafts"]))
    assert checked >= 200 and rejected_drafts >= 10, (checked, rejected_drafts)  # drafts outside the masks were offered


def test_a_seeded_request_does_not_depend_on_its_batch(engine):
    llm, _ = engine
    alone = llm.generate(PROMPTS[:1], [params(0.3, seed=7)], use_tqdm=False)[0].outputs[0].token_ids
    crowd = [params(b, seed=100 + i) for i, b in enumerate([0, "inf", 1.0, 0.05, 0])]
    batch = llm.generate(PROMPTS[1:] + PROMPTS[:1], crowd + [params(0.3, seed=7)], use_tqdm=False)[-1].outputs[0].token_ids
    assert list(alone) == list(batch)


def test_greedy_requests_give_vllms_greedy_tokens(engine):
    """A greedy request emits the target's argmax at every position, whatever its budget: the
    plugin's tokens equal those of vLLM's own sampler, swapped back in for the comparison."""
    llm, runner = engine
    greedy = [params("inf", temperature=0.0, max_tokens=48), params(0, temperature=0.0, max_tokens=48)]
    ours = [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], greedy, use_tqdm=False)]
    sampler = runner.rejection_sampler
    vllm_class = next(c for c in type(sampler).__mro__ if c.__module__ == "vllm.v1.sample.rejection_sampler")
    sampler.forward = vllm_class.forward.__get__(sampler)
    try:
        theirs = [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], greedy, use_tqdm=False)]
    finally:
        del sampler.forward
    assert [list(t) for t in ours] == [list(t) for t in theirs]


def test_acceptance_rises_with_the_budget_at_every_position(engine):
    llm, runner = engine
    budgets = [0, 0.05, 0.3, 1.0]
    rates = []
    for budget in budgets:
        with Capture(runner) as cap:
            llm.generate(PROMPTS, [params(budget, seed=200 + i) for i in range(len(PROMPTS))], use_tqdm=False)
        reached, taken = per_position(cap.rows)
        rates.append(taken[:2] / reached[:2])
    rates = np.array(rates)
    assert (np.diff(rates, axis=0) > 0).all(), rates
    assert rates[-1, 0] - rates[0, 0] > 0.2, rates


def test_logprobs_requests_get_the_targets_logprobs(engine):
    llm, _ = engine
    out = llm.generate(PROMPTS[:1], [params(0.3, seed=3, logprobs=2, max_tokens=24)], use_tqdm=False)[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids) == 24
    for token, top in zip(out.token_ids, out.logprobs):
        assert token in top and all(math.isfinite(lp.logprob) and lp.logprob <= 0 for lp in top.values())
