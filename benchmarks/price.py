"""Budgets by price against a fixed budget per position spending the same divergence.

A price λ gives every position the verifier maximising Σ min(π, q) − λ·D_f(π‖p) (docs/theory.md §4):
positions where acceptance is cheap get more divergence, the others less. The baseline spends the same
total with one budget ε for every position, ε found by bisection so that the mean divergence spent per
position matches the priced run's. Reported: acceptance per position, and tokens per target pass of
token-by-token verification with k = 4 drafts (1 + Σ_i Π_{l≤i} a_l along chains of four positions).

    python3 benchmarks/price.py                 # LLM-like rows, then the SmolLM2 pair (HF loop)
    python3 benchmarks/price.py --part rows     # one part; the other's results are kept
    python3 benchmarks/price.py --plot          # the table from benchmarks/price_results.json

Rows: three seeds of 4,096 LLM-like positions (V = 1,024; logit scale uniform in [1, 7]: flat and peaked
rows mixed, as along a real text). SmolLM2: ``hf.generate`` with ``price=λ`` against ``budget=ε``, ε the
mean divergence the priced run spent per verified token; the same seeds, interleaved.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import mentored
from mentored.check.testing import llm_like

RESULTS = Path(__file__).with_name("price_results.json")
PRICES = {"kl": [0.3, 1.0, 2.0, 5.0], "hellinger": [1.0, 2.0, 5.0, 20.0]}
K = 4


def rows(seed, n=4096, V=1024):
    rng = np.random.default_rng(seed)
    pairs = [llm_like(rng, V, float(rng.uniform(1.0, 7.0)), 0.7) for _ in range(n)]
    return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])


def tokens_per_pass(acc):
    """1 + Σ_i Π_{l≤i} a_l over chains of K consecutive positions (token by token), averaged."""
    a = acc[: len(acc) // K * K].reshape(-1, K)
    return float((1 + np.cumprod(a, axis=1).sum(1)).mean())


def matched_budget(P, Q, div, spent):
    """The one budget whose mean divergence spent per position is ``spent`` (bisection, 30 halvings)."""
    lo, hi = 0.0, max(4 * spent, 1e-6)
    while mentored.solve(P, Q, divergence=div, budget=hi).divergence.mean() < spent and hi < 1e6:
        hi *= 2
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if mentored.solve(P, Q, divergence=div, budget=mid).divergence.mean() < spent:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def run_rows(seeds=(0, 1, 2)):
    out = []
    for seed in seeds:
        P, Q = rows(seed)
        for div, prices in PRICES.items():
            for lam in prices:
                priced = mentored.solve(P, Q, divergence=div, price=lam)
                spent = float(priced.divergence.mean())
                eps = matched_budget(P, Q, div, spent)
                fixed = mentored.solve(P, Q, divergence=div, budget=eps)
                out.append(dict(seed=seed, divergence=div, price=lam, budget=eps, spent_price=spent,
                                spent_budget=float(fixed.divergence.mean()),
                                acceptance_price=float(priced.acceptance.mean()), acceptance_budget=float(fixed.acceptance.mean()),
                                tpp_price=tokens_per_pass(priced.acceptance), tpp_budget=tokens_per_pass(fixed.acceptance)))
                r = out[-1]
                print(f"seed {seed} {div:9s} λ = {lam:6g}: spent {spent:.4f} (budget {eps:.4f}); acceptance "
                      f"{r['acceptance_price']:.4f} vs {r['acceptance_budget']:.4f}; tokens/pass {r['tpp_price']:.3f} vs {r['tpp_budget']:.3f}",
                      flush=True)
    return out


PROMPTS = 4
NEW = 40


def run_smollm(seeds=(0, 1, 2), settings=(("kl", 5.0), ("kl", 20.0), ("hellinger", 20.0))):
    from mentored.demo.real import PAD, held_out_prompts
    from mentored.integrations.train_smollm import token_splits
    from mentored.integrations.hf import generate, left_pad
    from mentored.integrations.smollm import load_smollm

    pair = load_smollm()
    target, drafter = pair.target, pair.drafter
    ids, mask = left_pad(held_out_prompts(token_splits(pair.tokenizer), pair.tokenizer, PROMPTS), PAD)
    out = []
    for div, lam in settings:
        for seed in seeds:
            t0 = time.perf_counter()
            _, sp = generate(target, drafter, ids, mask, k=K, divergence=div, price=lam, max_new_tokens=NEW, seed=seed)
            verified = np.concatenate([s[np.isfinite(s)] for s in sp.spent])
            eps = float(verified[verified > 0].mean()) if (verified > 0).any() else 0.0
            _, sb = generate(target, drafter, ids, mask, k=K, divergence=div, budget=eps, max_new_tokens=NEW, seed=seed)
            out.append(dict(seed=seed, divergence=div, price=lam, budget=eps,
                            spent_price=float(sp.divergence.sum() / sp.emitted), spent_budget=float(sb.divergence.sum() / sb.emitted),
                            tpp_price=sp.emitted / sp.steps, tpp_budget=sb.emitted / sb.steps))
            r = out[-1]
            print(f"smollm seed {seed} {div} λ = {lam:g}: spent/token {r['spent_price']:.4f} vs {r['spent_budget']:.4f} (budget {eps:.4f}); "
                  f"tokens/pass {r['tpp_price']:.3f} vs {r['tpp_budget']:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def table(results):
    lines = []
    for part, res in results.items():
        keys = sorted({(r["divergence"], r["price"]) for r in res}, key=lambda x: (x[0], x[1]))
        lines.append(f"\n{part}: divergence, price | spent per position (price / budget) | tokens per pass: price, budget, ratio [min–max]")
        for div, lam in keys:
            rs = [r for r in res if r["divergence"] == div and r["price"] == lam]
            ratio = np.array([r["tpp_price"] / r["tpp_budget"] for r in rs])
            lines.append(f"| {div} | {lam:g} | {np.mean([r['spent_price'] for r in rs]):.4f} / {np.mean([r['spent_budget'] for r in rs]):.4f} | "
                         f"{np.mean([r['tpp_price'] for r in rs]):.3f} | {np.mean([r['tpp_budget'] for r in rs]):.3f} | "
                         f"{np.median(ratio):.3f} [{ratio.min():.3f}, {ratio.max():.3f}] |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["rows", "smollm"])
    ap.add_argument("--plot", action="store_true", help="print the table from the JSON")
    args = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if not args.plot:
        if args.part in (None, "rows"):
            results["rows"] = run_rows()
        if args.part in (None, "smollm"):
            results["smollm"] = run_smollm()
        RESULTS.write_text(json.dumps(results, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
