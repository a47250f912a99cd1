"""Accepted drafts per round: token-by-token against block verification of the mentored chain (docs/block.md).

    python3 benchmarks/block.py [--part rows|smollm|all] [--seeds 3] [--chains 16] [--rounds 128]
                                [--prompts 4] [--new-tokens 48] [--quick]
    python3 benchmarks/block.py --plot      # redraw docs/block.png from benchmarks/block_results.json

Both rules verify chains of k = 4 drafts against the same verifiers π_j (the optimum of MD(f, ε) for the
target p_j and the drafter q_j at each position, docs/theory.md §2) and emit streams of the same law; block
verification (``method="block"``, docs/theory.md §10) accepts at least as many drafts. For kl, tv and
hellinger at budgets from 0 (lossless) to 1 (0, 0.003, 0.01, 0.03, 0.1, 0.3, 1 on the rows; 0, 0.03, 0.3 on
SmolLM2, whose decoding takes 5 to 50 s a call on two cores shared with other work), one CPU thread:

1. LLM-like rows. A chain is k positions, each with its own (p_j, q_j) from
   ``mentored.check.testing.llm_like`` (softmax of Gaussian logits over 1,024 tokens, a logit scale uniform
   in [3, 7] per position, the drafter's logits the target's plus N(0, 0.7²) noise: the rows of
   ``llm_like_tree``, which docs/trees.md uses). The rows depend on the position but not on the drafted
   prefix, which the closed forms allow (they read the rows along the drafted path only). Per chain:

   - the closed forms of docs/theory.md §10. Token by token, E[τ] = Σ_i Π_{l≤i} a_l with
     a_l = Σ_y min(π_l(y), q_l(y)), exactly. Block, E[τ] = Σ_i Σ_{x≤i} A_i(x≤i) = Σ_i E_q[w_i] with
     w_i = min(1, w_{i−1} π_i(x_i)/q_i(x_i)); E[w_i | w_{i−1}] = g_i(w_{i−1}), g_i(w) = Σ_y min(q_i(y), w π_i(y)),
     so terms 1–3 are exact sums (over the V² paths x_1 x_2 for term 3), and term 4,
     E[h(w_2)] with h(w) = Σ_{x_3} q_3(x_3) g_4(min(1, w π_3(x_3)/q_3(x_3))), is bracketed: h is
     nondecreasing and concave in w, so on a grid of w values the chord is below it and the next grid
     value above it; the paths x_1 x_2 of drafter probability below 1e-10 are left out of terms 3 and 4 and
     their mass added to the upper bound (the bracket is recorded: its width is below 2e-4 here; the
     tables give its midpoint);
   - Monte Carlo: ``--rounds`` rounds per chain through ``mentored.serving.rejection_sample`` (drafts
     x_j ~ q_j, the same drafts and uniforms for both methods), the accepted drafts per round.

   ``--chains`` chains per seed; the spread is over ``--seeds`` seeds (min–max of the seed means) and the
   Monte Carlo's standard error over all rounds.
2. The shipped SmolLM2 pair (``mentored.integrations.smollm.load_smollm``: SmolLM2-135M-Instruct in
   float32 as p, the shipped sub-vocabulary drafter as q), ``mentored.integrations.hf.generate`` with
   k = 4, temperature 1, no top-k/top-p, on ``--prompts`` held-out prompts (the first 64 tokens of test
   documents, as benchmarks/real_target.py takes them; one batch), ``--new-tokens`` new tokens each, EOS
   not stopping. Per seed and setting the two methods run back to back with the same seed; the reported
   numbers are ``stats.accepted / stats.steps`` (accepted drafts per round, pooled over rows) and
   tokens per target pass, with the min–max over seeds.

Writes benchmarks/block_results.json (a part run alone keeps the other part's results) and docs/block.png.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import mentored
from mentored.check.testing import llm_like
from mentored.demo.plotting import save_figure
from mentored.verify.serving import rejection_sample

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "benchmarks/block.py"  # recorded in the figure (save_figure)
RESULTS = ROOT / "benchmarks" / "block_results.json"
FIGURE = ROOT / "docs" / "block.png"
DIVERGENCES = ("kl", "tv", "hellinger")
ROW_BUDGETS = (0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
LM_BUDGETS = (0.0, 0.03, 0.3)  # 7 settings × 3 seeds × 2 methods: about 9 minutes on two shared cores (the rows: 3.5)
METHODS = ("token", "block")
K = 4
VOCAB = 1024
SCALE, SHIFT = (3.0, 7.0), 0.7  # llm_like_tree's defaults
GRID = 512  # grid points bracketing the fourth term of the block closed form
TINY = 1e-10  # paths x_1 x_2 of smaller drafter probability are bounded, not summed


def settings(budgets):
    """(divergence, budget) pairs; budget 0 is the same lossless rule for every divergence, measured once."""
    return [("kl", 0.0)] + [(d, b) for d in DIVERGENCES for b in budgets if b > 0]


# ---------------------------------------------------------------- 1. LLM-like rows


def chains(seed: int, n: int):
    """``n`` chains of K positions: P, Q of shape (n, K, VOCAB), each position's pair from llm_like."""
    rng = np.random.default_rng(seed)
    rows = [llm_like(rng, VOCAB, float(rng.uniform(*SCALE)), SHIFT) for _ in range(n * K)]
    P = np.array([r[0] for r in rows]).reshape(n, K, VOCAB)
    Q = np.array([r[1] for r in rows]).reshape(n, K, VOCAB)
    return P, Q


class Overlap:
    """g(w) = Σ_y min(q(y), w π(y)) for one position, for any array of w in [0, 1].

    With t_y = q(y)/π(y) sorted, g(w) = Σ_{t_y ≤ w} q(y) + w Σ_{t_y > w} π(y): a searchsorted per w."""

    def __init__(self, pi, q):
        with np.errstate(divide="ignore"):
            t = np.where(pi > 0, q / np.where(pi > 0, pi, 1.0), np.inf)
        order = np.argsort(t, kind="stable")
        self.t = t[order]
        self.cq = np.concatenate([[0.0], np.cumsum(q[order])])  # q mass of the first j thresholds
        pis = pi[order]
        self.tail = np.concatenate([np.cumsum(pis[::-1])[::-1], [0.0]])  # π mass from threshold j on

    def __call__(self, w):
        j = np.searchsorted(self.t, w, side="right")
        return self.cq[j] + w * self.tail[j]


def closed_forms(pi, q):
    """(token E[τ], block E[τ] lower, block E[τ] upper) for one chain: pi, q of shape (K, V), rows
    independent of the prefix, K = 4 (docs/theory.md §10; the bracket on the fourth term, see the module)."""
    assert pi.shape[0] == 4, "the exact sums below are written for k = 4"
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, pi / np.where(q > 0, q, 1.0), 0.0)  # a token q never drafts carries no weight
    a = np.minimum(pi, q).sum(axis=1)
    token = float(np.cumprod(a).sum())
    g = [Overlap(pi[j], q[j]) for j in range(4)]
    w1 = np.minimum(1.0, r[0])  # (V,), weights q_1
    t1 = float(g[0](np.array([1.0]))[0])
    t2 = float(q[0] @ g[1](w1))
    W2 = q[0][:, None] * q[1][None, :]  # weights of the paths x_1 x_2
    keep = W2 > TINY  # the rest carries mass `dropped`, each term in [0, 1] on it: added to the upper bound only
    W2 = W2[keep]
    w2 = np.minimum(1.0, (w1[:, None] * r[1][None, :])[keep])
    dropped = max(0.0, 1.0 - float(W2.sum()))
    t3 = float(W2 @ g[2](w2))

    # term 4 = Σ W2 h(w2); h on a grid holding w2's extremes and its weighted quantiles
    order = np.argsort(w2, kind="stable")
    ws, cw = w2[order], np.cumsum(W2[order])
    grid = np.unique(np.concatenate([ws[np.minimum(np.searchsorted(cw, np.linspace(0.0, cw[-1], GRID)), ws.size - 1)],
                                     np.linspace(ws[0], ws[-1], GRID // 4), [ws[0], ws[-1]]]))
    h = np.array([q[2] @ g[3](np.minimum(1.0, x * r[2])) for x in grid])
    lower = float(W2 @ np.interp(w2, grid, h))  # chord of a concave function: below it
    upper = float(W2 @ h[np.minimum(np.searchsorted(grid, w2, side="left"), grid.size - 1)]) + 2 * dropped  # nondecreasing: the next grid value is above
    return token, t1 + t2 + t3 + lower, t1 + t2 + t3 + upper


def monte_carlo(P, Q, divergence, budget, rounds, rng):
    """Accepted drafts per round, (methods, chains × rounds) ints, through rejection_sample: per round
    x_j ~ q_j, the same drafts and uniforms for both methods."""
    n = P.shape[0]
    out = {m: [] for m in METHODS}
    for c in range(n):
        cdf = np.cumsum(Q[c], axis=1)
        u = rng.random((rounds, K))
        x = np.minimum((cdf[None, :, :] < u[:, :, None] * cdf[None, :, -1:]).sum(axis=2), VOCAB - 1)  # inverse CDF
        uniforms = rng.random((rounds * K, 2))
        for m in METHODS:
            emitted = rejection_sample(x.reshape(-1).astype(np.int64), [K] * rounds, np.tile(Q[c], (rounds, 1)), np.tile(P[c], (rounds, 1)),
                                       np.zeros(rounds, dtype=np.int64), divergence=divergence, budget=budget, uniforms=uniforms,
                                       method=m, threads=1, validate=False)
            out[m].append((emitted != -1).sum(axis=1) - 1)
    return {m: np.concatenate(v) for m, v in out.items()}


def run_rows(seeds, n_chains, rounds, budgets) -> dict:
    t0 = time.perf_counter()
    data = {s: chains(1000 + s, n_chains) for s in seeds}
    rows = []
    for div, b in settings(budgets):
        t = time.perf_counter()
        per_seed = {"token_exact": [], "block_lower": [], "block_upper": [], "token_mc": [], "block_mc": []}
        mc_all = {m: [] for m in METHODS}
        for s in seeds:
            P, Q = data[s]
            pi = mentored.solve(P.reshape(-1, VOCAB), Q.reshape(-1, VOCAB), divergence=div, budget=b).pi.reshape(P.shape)
            cf = np.array([closed_forms(pi[c], Q[c]) for c in range(n_chains)])
            per_seed["token_exact"].append(float(cf[:, 0].mean()))
            per_seed["block_lower"].append(float(cf[:, 1].mean()))
            per_seed["block_upper"].append(float(cf[:, 2].mean()))
            mc = monte_carlo(P, Q, div, b, rounds, np.random.default_rng(2000 + s))
            for m in METHODS:
                per_seed[f"{m}_mc"].append(float(mc[m].mean()))
                mc_all[m].append(mc[m])
        row = dict(divergence=div, budget=b, per_seed=per_seed)
        tok = np.array(per_seed["token_exact"])
        blk = (np.array(per_seed["block_lower"]) + np.array(per_seed["block_upper"])) / 2
        row["token"] = float(tok.mean())
        row["block"] = float(blk.mean())
        row["ratio"] = float(blk.mean() / tok.mean())
        row["ratio_per_seed"] = (blk / tok).tolist()
        row["bracket_width"] = float(max(np.array(per_seed["block_upper"]) - np.array(per_seed["block_lower"])))
        for m in METHODS:
            v = np.concatenate(mc_all[m])
            row[f"{m}_mc"] = float(v.mean())
            row[f"{m}_mc_se"] = float(v.std(ddof=1) / np.sqrt(v.size))
        d = np.concatenate(mc_all["block"]) - np.concatenate(mc_all["token"])  # same drafts and uniforms: a paired difference
        row["mc_gain"] = float(d.mean())
        row["mc_gain_se"] = float(d.std(ddof=1) / np.sqrt(d.size))
        row["seconds"] = time.perf_counter() - t
        rows.append(row)
        print(f"  rows {div:9s} {b:<6g} token {row['token']:.3f} (mc {row['token_mc']:.3f}±{row['token_mc_se']:.3f})  block {row['block']:.3f} "
              f"(mc {row['block_mc']:.3f}±{row['block_mc_se']:.3f})  ratio {row['ratio']:.4f}  [{row['seconds']:.1f}s]", flush=True)
    return dict(k=K, vocab=VOCAB, scale=list(SCALE), shift=SHIFT, seeds=list(seeds), chains=n_chains, rounds=rounds,
                seconds=time.perf_counter() - t0, rows=rows)


# ---------------------------------------------------------------- 2. SmolLM2


def run_smollm(seeds, n_prompts, new_tokens, budgets) -> dict:
    import torch

    from mentored.demo.real import PAD, held_out_prompts
    from mentored.integrations.hf import generate, left_pad
    from mentored.integrations.smollm import load_smollm
    from mentored.integrations.train_smollm import token_splits

    t0 = time.perf_counter()
    pair = load_smollm()
    prompts = held_out_prompts(token_splits(pair.tokenizer), pair.tokenizer, n_prompts)
    ids, mask = left_pad(prompts, PAD)
    load_s = time.perf_counter() - t0
    rows = []
    for div, b in settings(budgets):
        per_seed = {m: dict(accepted=[], steps=[], emitted=[], seconds=[]) for m in METHODS}
        for s in seeds:
            for m in METHODS:  # interleaved: the two methods of a seed run back to back
                with torch.inference_mode():
                    _, st = generate(pair.target, pair.drafter, ids, mask, k=K, divergence=div, budget=b, max_new_tokens=new_tokens,
                                     temperature=1.0, seed=s, method=m, pad_token_id=PAD)
                per_seed[m]["accepted"].append(int(st.accepted))
                per_seed[m]["steps"].append(int(st.steps))
                per_seed[m]["emitted"].append(int(sum(r.emitted for r in st.rows)))
                per_seed[m]["seconds"].append(float(st.seconds["total"]))
        row = dict(divergence=div, budget=b, per_seed=per_seed)
        for m in METHODS:
            a = np.array(per_seed[m]["accepted"]) / np.array(per_seed[m]["steps"])
            tpp = np.array(per_seed[m]["emitted"]) / np.array(per_seed[m]["steps"])
            row[m] = dict(accepted_per_round=float(a.mean()), min=float(a.min()), max=float(a.max()), tokens_per_pass=float(tpp.mean()),
                          tokens_per_pass_min=float(tpp.min()), tokens_per_pass_max=float(tpp.max()))
        ratios = (np.array(per_seed["block"]["accepted"]) / np.array(per_seed["block"]["steps"])) / (
            np.array(per_seed["token"]["accepted"]) / np.array(per_seed["token"]["steps"]))
        row["ratio"] = float(row["block"]["accepted_per_round"] / row["token"]["accepted_per_round"])
        row["ratio_per_seed"] = ratios.tolist()
        rows.append(row)
        print(f"  smollm {div:9s} {b:<5g} token {row['token']['accepted_per_round']:.3f} [{row['token']['min']:.3f}, {row['token']['max']:.3f}]  "
              f"block {row['block']['accepted_per_round']:.3f} [{row['block']['min']:.3f}, {row['block']['max']:.3f}]  ratio {row['ratio']:.3f}  "
              f"[{sum(per_seed['token']['seconds']) + sum(per_seed['block']['seconds']):.0f}s]", flush=True)
    return dict(k=K, prompts=n_prompts, new_tokens=new_tokens, seeds=list(seeds), temperature=1.0, load_seconds=load_s,
                seconds=time.perf_counter() - t0, rows=rows)


# ---------------------------------------------------------------- tables and figure


def rows_table(res) -> str:
    lines = ["| divergence | ε | token, exact | block, closed form | block / token | token, MC | block, MC | block − token, MC |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        tok, blk = r["per_seed"]["token_exact"], [(lo + hi) / 2 for lo, hi in zip(r["per_seed"]["block_lower"], r["per_seed"]["block_upper"])]
        div = "any" if r["budget"] == 0 else r["divergence"]
        lines.append(f"| {div} | {r['budget']:g} | {r['token']:.3f} [{min(tok):.3f}, {max(tok):.3f}] | {r['block']:.3f} [{min(blk):.3f}, {max(blk):.3f}] | "
                     f"{r['ratio']:.4f} [{min(r['ratio_per_seed']):.4f}, {max(r['ratio_per_seed']):.4f}] | {r['token_mc']:.3f} ± {r['token_mc_se']:.3f} | "
                     f"{r['block_mc']:.3f} ± {r['block_mc_se']:.3f} | {r['mc_gain']:+.3f} ± {r['mc_gain_se']:.3f} |")
    return "\n".join(lines)


def smollm_table(res) -> str:
    lines = ["| divergence | ε | token: drafts / round | block: drafts / round | block / token | token: tokens / pass | block: tokens / pass |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        t, b = r["token"], r["block"]
        div = "any" if r["budget"] == 0 else r["divergence"]
        lines.append(f"| {div} | {r['budget']:g} | {t['accepted_per_round']:.3f} [{t['min']:.3f}, {t['max']:.3f}] | "
                     f"{b['accepted_per_round']:.3f} [{b['min']:.3f}, {b['max']:.3f}] | {r['ratio']:.3f} [{min(r['ratio_per_seed']):.3f}, {max(r['ratio_per_seed']):.3f}] | "
                     f"{t['tokens_per_pass']:.3f} | {b['tokens_per_pass']:.3f} |")
    return "\n".join(lines)


def plot(results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [(name, results[name]) for name in ("rows", "smollm") if name in results]
    fig, axes = plt.subplots(len(parts), 3, figsize=(13, 3.9 * len(parts)), squeeze=False)
    style = {"token": dict(color="tab:blue", marker="o", linestyle="-"), "block": dict(color="tab:red", marker="s", linestyle="--")}
    for i, (name, res) in enumerate(parts):
        lossless = next(r for r in res["rows"] if r["budget"] == 0)
        budgets = sorted({r["budget"] for r in res["rows"] if r["budget"] > 0})
        x0 = budgets[0] / 3  # budget 0 drawn left of the smallest positive budget on the log axis
        for j, div in enumerate(DIVERGENCES):
            ax = axes[i][j]
            rs = [lossless] + [r for r in res["rows"] if r["divergence"] == div and r["budget"] > 0]
            xs = [x0] + [r["budget"] for r in rs[1:]]
            for m in METHODS:
                if name == "rows":
                    seeds = [r["per_seed"]["token_exact"] if m == "token" else
                             [(lo + hi) / 2 for lo, hi in zip(r["per_seed"]["block_lower"], r["per_seed"]["block_upper"])] for r in rs]
                    y = [r[m] for r in rs]
                else:
                    seeds = [r["per_seed"][m] for r in rs]
                    seeds = [list(np.array(s["accepted"]) / np.array(s["steps"])) for s in seeds]
                    y = [r[m]["accepted_per_round"] for r in rs]
                lo = [y_ - min(s) for y_, s in zip(y, seeds)]
                hi = [max(s) - y_ for y_, s in zip(y, seeds)]
                ax.errorbar(xs, y, yerr=[lo, hi], capsize=3, label=m, **style[m])
            ax.axhline(K, color="grey", linewidth=0.8, linestyle=":")
            ax.set_xscale("log")
            ax.set_xticks([x0] + budgets)
            ax.set_xticklabels(["0"] + [f"{b:g}" for b in budgets], fontsize=8)
            ax.minorticks_off()
            where = "LLM-like rows, V = 1024" if name == "rows" else "SmolLM2-135M, shipped drafter"
            ax.set_title(f"{where}: {div}", fontsize=10)
            ax.set_xlabel("budget ε")
            if j == 0:
                ax.set_ylabel("accepted drafts per round (k = 4)")
            ax.legend(loc="lower right", fontsize=9)
    fig.suptitle("Token-by-token vs block verification of the mentored chain (bars: min–max over seeds)", fontsize=11)
    fig.tight_layout()
    save_figure(fig, FIGURE, source=SOURCE)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("rows", "smollm", "all"), default="all")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--chains", type=int, default=16, help="LLM-like chains per seed")
    ap.add_argument("--rounds", type=int, default=128, help="Monte Carlo rounds per chain")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 seed, few chains, rounds, prompts and budgets; writes nothing")
    ap.add_argument("--plot", action="store_true", help="only redraw docs/block.png from the results file")
    args = ap.parse_args(argv)
    if args.plot:
        results = json.loads(RESULTS.read_text())
        plot(results)
        for name, table in (("rows", rows_table), ("smollm", smollm_table)):
            if name in results:
                print(table(results[name]), end="\n\n")
        return 0

    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seeds = range(1 if args.quick else args.seeds)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() and not args.quick else {}
    if args.part in ("rows", "all"):
        print("LLM-like rows", flush=True)
        results["rows"] = run_rows(seeds, 4 if args.quick else args.chains, 32 if args.quick else args.rounds,
                                   (0.01, 0.1) if args.quick else ROW_BUDGETS)
        print(rows_table(results["rows"]), end="\n\n")
    if args.part in ("smollm", "all"):
        print("SmolLM2", flush=True)
        results["smollm"] = run_smollm(seeds, 2 if args.quick else args.prompts, 12 if args.quick else args.new_tokens,
                                       (0.1,) if args.quick else LM_BUDGETS)
        print(smollm_table(results["smollm"]), end="\n\n")
    if args.quick:
        return 0
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    plot(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
