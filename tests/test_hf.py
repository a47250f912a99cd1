"""mentored.hf.generate end to end on tiny randomly initialised GPT-2 models (no download)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
transformers = pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")

from mentored.hf import generate  # noqa: E402

VOCAB = 64


@pytest.fixture(scope="module")
def models():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    from transformers import GPT2Config, GPT2LMHeadModel

    def build(layers, seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=layers, n_head=2, bos_token_id=0, eos_token_id=1, initializer_range=1.0)
        return GPT2LMHeadModel(cfg).eval()

    return build(2, 0), build(1, 1)


def test_generate_runs_and_reports(models):
    target, draft = models
    prompt = torch.tensor([5, 6, 7, 8])
    ids, stats = generate(target, draft, prompt, max_new_tokens=20, k=3, divergence="kl", budget=0.1, seed=0)
    assert ids.shape == (1, 24) and ids.dtype == torch.int64
    assert torch.equal(ids[0, :4], prompt)
    assert int(ids.min()) >= 0 and int(ids.max()) < VOCAB
    assert stats.steps >= 20 / 4 and stats.emitted >= 20
    assert 0 <= stats.acceptance <= 1 and stats.per_position.shape == (3,)
    assert 1 / 4 <= stats.passes_per_token <= 1


def test_identical_models_accept_everything(models):
    target, _ = models
    ids, stats = generate(target, target, torch.tensor([[3, 4]]), max_new_tokens=15, k=4, budget=0.0, seed=1)
    # p = q at every position: π = p = q accepts each draft (u q_x < q_x for u < 1)
    assert stats.acceptance == 1.0 and stats.accepted == stats.drafted
    assert stats.passes_per_token == pytest.approx(stats.steps / stats.emitted) and stats.steps == 3


def test_budget_raises_acceptance_over_many_rounds(models):
    target, draft = models
    prompt = torch.tensor([9, 10, 11])
    acc = [generate(target, draft, prompt, max_new_tokens=16, k=4, divergence="tv", budget=b, seed=2)[1].acceptance for b in (0.0, 1.0)]
    assert acc[1] == 1.0 > acc[0]  # wide initialisation: p and q differ; budget 1 ≥ TV(p, q): π = q accepts every draft


def test_generate_refuses_bad_input(models):
    target, draft = models
    with pytest.raises(ValueError, match="one non-empty sequence"):
        generate(target, draft, torch.tensor([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="integer token ids"):
        generate(target, draft, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="k must be"):
        generate(target, draft, torch.tensor([1]), k=0)
