"""What mentoring buys on the shipped transformer pair (docs/neural.md).

    python benchmarks/neural.py [--prompts 8] [--new-tokens 128] [--quick]

On one CPU thread, over held-out prompts of the demo's test split (batched, left-padded):

1. decoding: the target alone (``model.generate(do_sample=True)``, KV cache), lossless speculative
   sampling (budget 0) and mentored decoding at several budgets for kl, tv and hellinger, k in
   {2, 4, 8}: acceptance, accepted drafts per target pass, target passes per token, tokens per
   second and the wall-time split (drafter / target / verification / cache bookkeeping);
2. quality: the held-out log-loss (bits per character, first 20,000 test characters) of p, q and
   of the mentored mixture pi at each budget, for the neural pair and the n-gram pair; the edge
   d(U) - p(U) on the validation split as the predictor of the gain's sign
   (mentored.analysis.quality.edge), the validation-best budget's test gain (log_loss_gain), and the
   per-position oracle optimum (quality_optimal_budget) on a sample of positions.

Writes docs/neural.png and benchmarks/neural_results.json; prints the tables docs/neural.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

import mentored
import mentored.integrations.hf
from mentored.analysis import quality as Q
from mentored.demo.plotting import divergence_color, save_figure

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "benchmarks/neural.py"  # recorded in the figure (save_figure)
BUDGETS = {"kl": (0.02, 0.05, 0.2, 1.0), "tv": (0.05, 0.1, 0.3), "hellinger": (0.01, 0.05, 0.2)}
GRID = {  # log-loss sweep (cheap: no decoding)
    "kl": (0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    "tv": (0.003, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3),
    "hellinger": (0.0003, 0.001, 0.003, 0.01, 0.03, 0.05, 0.1, 0.2),
}
KS = (2, 4, 8)
N_EVAL = 20000


def neural_laws(model, ids):
    """Row i - 1: the model's law of ids[i] given ids[:i] (i >= 1; mentored.integrations.hf.probs_along, windows of 256, stride 128)."""
    from mentored.integrations.hf import probs_along

    return probs_along(model, ids)[1:]


def bits(P, y):
    return float(-np.mean(np.log2(P[np.arange(y.size), y])))


def decode_table(pair, prompts, new_tokens, quick, repeats):
    tgt, dft = pair.target, pair.drafter
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (L - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    n_tok = len(prompts) * new_tokens
    rows = []
    # the target alone, as people run it; wall times: the median of `repeats` runs (same seed, same tokens)
    times = []
    for rep in range(repeats + 1):  # the first call warms up
        t0 = time.perf_counter()
        torch.manual_seed(0)
        tgt.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=new_tokens, min_new_tokens=new_tokens, top_k=0, pad_token_id=0)
        times.append(time.perf_counter() - t0)
    ar = float(np.median(times[1:]))
    rows.append(dict(name="target alone", divergence="-", budget=None, k=0, acceptance=None, mean_accepted=0.0, passes_per_token=1.0,
                     tokens_per_s=n_tok / ar, seconds=dict(total=ar)))
    settings = [("kl", 0.0)] + [(d, b) for d, bs in BUDGETS.items() for b in (bs[1:2] if quick else bs)]
    for k in (4,) if quick else KS:
        for div, budget in settings:
            runs = [mentored.integrations.hf.generate(tgt, dft, ids, mask, k=k, divergence=div, budget=budget, max_new_tokens=new_tokens, seed=0)[1]
                    for _ in range(repeats)]
            st = sorted(runs, key=lambda s: s.seconds["total"])[len(runs) // 2]  # the median run (counts are identical)
            rows.append(dict(
                name="lossless" if budget == 0 else div, divergence=div, budget=budget, k=k, acceptance=st.acceptance,
                mean_accepted=st.mean_accepted, passes_per_token=st.passes_per_token, tokens_per_s=n_tok / st.seconds["total"],
                seconds={key: round(v, 4) for key, v in st.seconds.items()},
            ))
            print(f"  k={k} {rows[-1]['name']:>9} eps={budget:<5g} accept {st.acceptance:.3f}  acc.len {st.mean_accepted:.3f}  "
                  f"passes/tok {st.passes_per_token:.3f}  {rows[-1]['tokens_per_s']:.0f} tok/s", flush=True)
    return rows, ar


def quality_table(name, Pv, Qv, yv, Pt, Qt, yt, n_oracle, rng):
    """Log-loss of pi across budgets (test), the edge (valid, test), the validation-best budget."""
    res = dict(pair=name, bits_p=bits(Pt, yt), bits_q=bits(Qt, yt), edge_valid=float(Q.edge(Pv, Qv, yv).mean()),
               edge_test=float(Q.edge(Pt, Qt, yt).mean()), tv=float(0.5 * np.abs(Pt - Qt).sum(1).mean()), sweep={})
    for div, grid in GRID.items():
        gv, gt = [], []
        for b in grid:
            gv.append(float(np.mean(Q.log_loss_gain(Pv, Qv, yv, divergence=div, budget=b))))
            gt.append(float(np.mean(Q.log_loss_gain(Pt, Qt, yt, divergence=div, budget=b))))
        best = int(np.argmax(gv))
        res["sweep"][div] = dict(budgets=list(grid), gain_valid=gv, gain_test=gt, best_budget_valid=grid[best],
                                 best_gain_valid=gv[best], test_gain_at_valid_best=gt[best])
    # per-position oracle optimum (the truth known at each position: an upper bound, not a method)
    pick = rng.choice(yt.size, size=min(n_oracle, yt.size), replace=False)
    opts = [Q.quality_optimal_budget(Pt[i], Qt[i], int(yt[i]), divergence="kl") for i in pick]
    res["oracle"] = dict(positions=int(pick.size), mean_gain=float(np.mean([o.gain for o in opts])),
                         share_helped=float(np.mean([o.gain > 0 for o in opts])),
                         median_budget_kl=float(np.median([o.budget for o in opts])))
    return res


def figure(rows, qual):
    """The figure of docs/neural.md: tokens/s against target passes per token (left), and the held-out
    gain bits(p) − bits(π) of π over p against the budget (right, > 0: π beats the target); each
    divergence in its colour of mentored.demo.plotting.DIVERGENCE_COLORS in both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    ax = axes[0]
    colors = {"lossless": "k", **{div: divergence_color(div) for div in GRID}}
    for r in rows:
        if r["k"] == 0:
            continue
        ax.scatter(r["passes_per_token"], r["tokens_per_s"], color=colors[r["name"]], marker={2: "o", 4: "s", 8: "^"}[r["k"]], s=30,
                   alpha=0.8)
    ar = rows[0]["tokens_per_s"]
    ax.axhline(ar, color="gray", ls=":", label=f"target alone ({ar:.0f} tok/s)")
    for name, c in colors.items():
        ax.scatter([], [], color=c, label=name)
    for k, m in ((2, "o"), (4, "s"), (8, "^")):
        ax.scatter([], [], color="gray", marker=m, label=f"k={k}")
    ax.set_xlabel("target forward passes per token")
    ax.set_ylabel("tokens per second (one CPU thread, batch of prompts)")
    ax.set_title("Decoding the shipped pair: fewer target passes, and the wall clock")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    for res, ls in zip(qual, ("-", "--")):
        for div in GRID:
            sw = res["sweep"][div]
            ax.semilogx(sw["budgets"], np.array(sw["gain_test"]) / np.log(2) * 1e3, ls, color=divergence_color(div), marker=".",
                        label=f"{res['pair']}: {div}")
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_ylim(-60, 30)  # the gain lives above 0; the losses at large budgets run off the bottom
    ax.set_xlabel("budget ε")
    ax.set_ylabel("bits(p) − bits(π), millibits per character (test)")
    ax.set_title("Held-out log-loss gain of π over p (above 0: π beats the target)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--oracle-positions", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per setting; the median is reported (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="k = 4 and one budget per divergence (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "neural_results.json")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "neural.png")
    ap.add_argument("--models", type=Path, default=None, help="a directory written by python -m mentored.integrations.train (default: the shipped pair)")
    ap.add_argument("--figure-only", action="store_true", help="redraw the figure from --out's results")
    args = ap.parse_args()
    if args.figure_only:
        saved = json.loads(args.out.read_text())
        save_figure(figure(saved["rows"], saved["quality"]), args.figure, source=SOURCE)
        return 0
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mentored.integrations.hf import load_pair
    from mentored.demo.textlm import demo_models

    t_start = time.perf_counter()
    pair = load_pair(args.models)
    m = demo_models(0)
    stride = (m.test.size - args.prompt_len) // args.prompts
    prompts = [m.test[i * stride : i * stride + args.prompt_len].tolist() for i in range(args.prompts)]
    print(f"Decoding {args.prompts} held-out prompts x {args.new_tokens} new characters (batched, one thread)", flush=True)
    rows, _ = decode_table(pair, prompts, args.new_tokens, args.quick, args.repeats)
    t_dec = time.perf_counter() - t_start

    print("Held-out laws (neural: sliding windows; n-gram: full history)...", flush=True)
    yv, yt = m.valid[: N_EVAL + 1], m.test[: N_EVAL + 1]
    laws = {}
    laws["neural"] = [neural_laws(pair.target, yv), neural_laws(pair.drafter, yv), neural_laws(pair.target, yt), neural_laws(pair.drafter, yt)]
    laws["n-gram"] = [m.target.probs_along(yv)[1:], m.drafter.probs_along(yv)[1:], m.target.probs_along(yt)[1:], m.drafter.probs_along(yt)[1:]]
    rng = np.random.default_rng(0)
    qual = [quality_table(name, Pv, Qv, yv[1:], Pt, Qt, yt[1:], args.oracle_positions, rng) for name, (Pv, Qv, Pt, Qt) in laws.items()]

    # bits(pi) for the decoded settings, on the neural pair
    Pt, Qt = laws["neural"][2], laws["neural"][3]
    for r in rows:
        if r["budget"] is not None:
            pi = mentored.solve(Pt, Qt, divergence=r["divergence"], budget=r["budget"]).pi if r["budget"] > 0 else Pt
            r["bits_pi"] = bits(pi, yt[1:])

    print(f"\n| setting | k | acceptance | accepted / pass | target passes / token | tokens/s | bits(π) | s drafter / target / verify / cache |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        split = f"{s.get('draft', 0):.2f} / {s.get('target', s['total']):.2f} / {s.get('verify', 0):.2f} / {s.get('cache', 0):.2f}"
        name = r["name"] if r["budget"] in (None, 0.0) else f"{r['name']} ε={r['budget']:g}"
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        bp = f"{r['bits_pi']:.4f}" if "bits_pi" in r else f"{qual[0]['bits_p']:.4f}"
        print(f"| {name} | {r['k'] or '-'} | {acc} | {r['mean_accepted']:.3f} | {r['passes_per_token']:.3f} | {r['tokens_per_s']:.0f} | {bp} | {split} |")

    print("\n| pair | bits(p) | bits(q) | mean TV(p,q) | edge valid | edge test | oracle gain (nats) | oracle helps | oracle median ε_kl |")
    print("|---|---|---|---|---|---|---|---|---|")
    for res in qual:
        o = res["oracle"]
        print(f"| {res['pair']} | {res['bits_p']:.4f} | {res['bits_q']:.4f} | {res['tv']:.3f} | {res['edge_valid']:+.4f} | {res['edge_test']:+.4f} | "
              f"{o['mean_gain']:.4f} | {o['share_helped']:.2f} | {o['median_budget_kl']:.3g} |")
    print("\n| pair | divergence | valid-best ε | valid gain (millibits) | test gain at it (millibits) | best test gain on the grid (millibits) at ε |")
    print("|---|---|---|---|---|---|")
    mb = lambda g: 1e3 * g / np.log(2)  # noqa: E731
    for res in qual:
        for div, sw in res["sweep"].items():
            bt = int(np.argmax(sw["gain_test"]))
            print(f"| {res['pair']} | {div} | {sw['best_budget_valid']:g} | {mb(sw['best_gain_valid']):+.2f} | {mb(sw['test_gain_at_valid_best']):+.2f} | "
                  f"{mb(sw['gain_test'][bt]):+.2f} at {sw['budgets'][bt]:g} |")
    for res in qual:
        small = res["sweep"]["kl"]["gain_test"][0]
        print(f"{res['pair']}: validation edge {res['edge_valid']:+.4f} predicts a {'gain' if res['edge_valid'] > 0 else 'loss'} at small budgets; "
              f"measured test gain at kl ε={GRID['kl'][0]:g}: {mb(small):+.3f} millibits/char -> "
              f"{'predicted' if (res['edge_valid'] > 0) == (small > 0) else 'NOT predicted'}")

    args.out.write_text(json.dumps(dict(rows=rows, quality=qual, decode_seconds=t_dec, total_seconds=time.perf_counter() - t_start,
                                        threads=1, torch=torch.__version__), indent=1) + "\n")
    save_figure(figure(rows, qual), args.figure, source=SOURCE)  # after the results: a refused figure is redrawn with --figure-only
    print(f"\nwrote {args.figure} and {args.out} ({time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
