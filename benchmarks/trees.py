"""Accepted tokens per target pass: a chain against a draft tree that scores as many tokens (docs/trees.md).

    python benchmarks/trees.py [--trees 400] [--contexts 256] [--prompts 8] [--new-tokens 96] [--quick]

Each target pass scores the same number of drafted tokens K (K = 6: a chain of 6 or the tree 2 × 2;
K = 14: a chain of 14 or the tree 2 × 3), under four verifiers:

- ``chain, sampled``: K drafts sampled from q, verified position by position with the drafter's
  probabilities (``mentored.hf.generate``, the speculative step: acceptance ``Σ min(π, q)``);
- ``chain, greedy``: the drafter's first choice K times, verified with the target alone (a tree of width 1);
- ``tree, set``: the tree, each node's verifier the set verifier (``objective="acceptance"``);
- ``tree, length``: the tree, the expected accepted length maximised (``objective="length"``);

at budget 0 (lossless, where all the tree objectives are ``π = p``) and 0.01, 0.05, 0.1 under kl, tv
and hellinger. Three measurements, one CPU thread:

1. LLM-like rows (``mentored.check.testing.llm_like_tree``: softmax of Gaussian logits over 1,024
   tokens, a logit scale per node uniform in [3, 7], the drafter's logits a noisy copy): the exact
   expected tokens per pass, ``A(root) + 1`` from ``mentored.serving.tree_verifier`` for the greedy
   chain and the trees, ``1 + Σ_k Π_{j≤k} a_j`` with ``a_j`` the speculative step's acceptance
   (``mentored.solve``) for the sampled chain, averaged over ``--trees`` draws;
2. the shipped character pair (``mentored.hf.load_pair``) at held-out contexts of the test split: the
   exact expected tokens per pass of the first round's tree (``mentored.trees.draft_tree``, then
   ``tree_verifier``), at temperature 1 and 0.5;
3. the shipped pair decoding ``--prompts`` held-out prompts (batched), ``--new-tokens`` characters
   each: tokens per target pass and wall time per round, ``generate`` (sampled chain) against
   ``generate_tree`` (greedy chain and trees), the median of ``--repeats`` timed runs.

Writes benchmarks/trees_results.json and prints the tables docs/trees.md quotes.
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
from mentored.check.testing import llm_like_tree
from mentored.serving import tree_verifier
from mentored.trees import draft_tree, full_tree, generate_tree

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = [("lossless", "kl", 0.0)] + [(div, div, b) for div in ("kl", "tv", "hellinger") for b in (0.01, 0.05, 0.1)]
SHAPES = ((2, 2), (2, 3))  # (width, depth) of the tree; the chains draft as many tokens
METHODS = ("chain, sampled", "chain, greedy", "tree, set", "tree, length")


def nodes(width: int, depth: int) -> int:
    return sum(width**d for d in range(1, depth + 1))


def expected_tokens(tokens, parents, P, divergence, budget, objective):
    """Exact expected tokens per pass, A(root) + 1, of each request of a batch of trees sharing one shape."""
    B, N = tokens.shape
    _, value = tree_verifier(tokens.reshape(-1), np.tile(parents, B), [N] * B, P.reshape(B * N, -1), divergence=divergence, budget=budget,
                             objective=objective)
    return value.reshape(B, N)[:, 0] + 1


def sampled_chain(P, Q, divergence, budget):
    """Exact expected tokens per pass of K drafts sampled from q (rows (B, K, V) independent of the
    drafts): the speculative step accepts at position j with a_j = Σ min(π_j, q_j), so E = 1 + Σ_k Π_{j≤k} a_j."""
    B, K, V = P.shape
    a = mentored.solve(P.reshape(-1, V), Q.reshape(-1, V), divergence=divergence, budget=budget).acceptance.reshape(B, K)
    return 1 + np.cumprod(a, axis=1).sum(axis=1)


def synthetic(n_trees: int, vocab: int, rng) -> dict:
    out = {}
    for width, depth in SHAPES:
        K = nodes(width, depth)
        shapes = {"chain": full_tree(1, K), "tree": full_tree(width, depth)}
        draws = {name: [llm_like_tree(rng, parents, vocab) for _ in range(n_trees)] for name, parents in shapes.items()}
        arrays = {name: tuple(np.array([d[i] for d in draws[name]]) for i in range(3)) for name in shapes}
        rows = {m: [] for m in METHODS}
        for _, div, budget in SETTINGS:
            tokens, P, Q = arrays["chain"]
            rows["chain, sampled"].append(float(sampled_chain(P[:, :K], Q[:, :K], div, budget).mean()))
            rows["chain, greedy"].append(float(expected_tokens(tokens, shapes["chain"], P, div, budget, "length").mean()))
            tokens, P, _ = arrays["tree"]
            for m, objective in (("tree, set", "acceptance"), ("tree, length", "length")):
                rows[m].append(float(expected_tokens(tokens, shapes["tree"], P, div, budget, objective).mean()))
        out[f"{K}"] = dict(width=width, depth=depth, nodes=K, tokens_per_pass=rows)
        print(f"  synthetic K={K} done", flush=True)
    return out


def pair_exact(pair, contexts, temperature: float) -> dict:
    ids = torch.tensor(np.array(contexts))
    out = {}
    for width, depth in SHAPES:
        K = nodes(width, depth)
        rows = {m: [] for m in METHODS if m != "chain, sampled"}  # a sampled chain's expectation needs its draws: decoding, below
        trees = {"chain": draft_tree(pair.target, pair.drafter, ids, width=1, depth=K, temperature=temperature),
                 "tree": draft_tree(pair.target, pair.drafter, ids, width=width, depth=depth, temperature=temperature)}
        for _, div, budget in SETTINGS:
            for m, shape, objective in (("chain, greedy", "chain", "length"), ("tree, set", "tree", "acceptance"), ("tree, length", "tree", "length")):
                tokens, parents, P = trees[shape]
                rows[m].append(float(expected_tokens(tokens.numpy(), parents, P.numpy(), div, budget, objective).mean()))
        out[f"{K}"] = dict(width=width, depth=depth, nodes=K, tokens_per_pass=rows)
    return out


def decoding(pair, prompts, new_tokens: int, repeats: int, quick: bool) -> dict:
    from mentored.hf import generate, left_pad

    ids, mask = left_pad(prompts)
    out = {}
    settings = SETTINGS[:2] if quick else SETTINGS
    for width, depth in SHAPES:
        K = nodes(width, depth)
        runs = {
            "chain, sampled": lambda div, b: generate(pair.target, pair.drafter, ids, mask, k=K, divergence=div, budget=b, max_new_tokens=new_tokens, seed=0),
            "chain, greedy": lambda div, b: generate_tree(pair.target, pair.drafter, ids, mask, width=1, depth=K, divergence=div, budget=b,
                                                          max_new_tokens=new_tokens, seed=0),
        }
        for m, objective in (("tree, set", "acceptance"), ("tree, length", "length")):
            runs[m] = lambda div, b, objective=objective: generate_tree(pair.target, pair.drafter, ids, mask, width=width, depth=depth, divergence=div,
                                                                        budget=b, objective=objective, max_new_tokens=new_tokens, seed=0)
        rows = {m: [] for m in runs}
        for name, div, budget in settings:
            for m, run in runs.items():
                stats = sorted((run(div, budget)[1] for _ in range(repeats)), key=lambda s: s.seconds["total"])[repeats // 2]
                rows[m].append(dict(
                    setting=name, budget=budget, tokens_per_pass=stats.emitted / stats.steps, rounds=stats.rounds,
                    ms_per_round=1e3 * stats.seconds["total"] / stats.rounds, tokens_per_s=stats.emitted / stats.seconds["total"],
                    seconds={k: round(v, 4) for k, v in stats.seconds.items()},
                ))
            print(f"  decoding K={K} {name} {budget}: " + "  ".join(f"{m} {rows[m][-1]['tokens_per_pass']:.2f} ({rows[m][-1]['ms_per_round']:.1f} ms)"
                                                             for m in runs), flush=True)
        out[f"{K}"] = dict(width=width, depth=depth, nodes=K, rows=rows)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    pair.target.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=new_tokens, min_new_tokens=new_tokens, top_k=0, pad_token_id=0)
    out["target_alone_tokens_per_s"] = len(prompts) * new_tokens / (time.perf_counter() - t0)
    return out


def table(section: dict, methods, value=lambda rows, m, i: rows["tokens_per_pass"][m][i]) -> str:
    """Markdown: a row per setting, a column per (K, method)."""
    heads = [(K, m) for K, res in section.items() if isinstance(res, dict) for m in methods if m in res.get("tokens_per_pass", res.get("rows", {}))]
    lines = ["| setting | " + " | ".join(f"K={K}: {m}" for K, m in heads) + " |", "|---|" + "---|" * len(heads)]
    for i, (name, _, budget) in enumerate(SETTINGS):
        cells = []
        for K, m in heads:
            try:
                cells.append(value(section[K], m, i))
            except IndexError:
                cells = None
                break
        if cells is not None:
            lines.append(f"| {name if budget == 0 else f'{name} {budget}'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", type=int, default=400, help="LLM-like trees per shape (default: %(default)s)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--contexts", type=int, default=256, help="held-out contexts of the pair's exact measurement (default: %(default)s)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3, help="timed decoding runs per setting; the median is reported (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="few trees and contexts, two settings decoded (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "trees_results.json")
    args = ap.parse_args()
    if args.quick:
        args.trees, args.contexts, args.prompts, args.new_tokens = 20, 16, 2, 24
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mentored.hf import load_pair
    from mentored.integrations.corpus import splits

    t_start = time.perf_counter()
    results = dict(settings=[dict(name=n, divergence=d, budget=b) for n, d, b in SETTINGS], threads=torch.get_num_threads(), torch=torch.__version__)
    print(f"1. LLM-like rows: {args.trees} trees per shape, {args.vocab} tokens", flush=True)
    results["synthetic"] = synthetic(args.trees, args.vocab, np.random.default_rng(0))

    pair = load_pair()
    test = splits(0).test
    L = args.prompt_len
    stride = (test.size - L) // args.contexts
    contexts = [test[i * stride : i * stride + L] for i in range(args.contexts)]
    print(f"2. The shipped pair, exact, {args.contexts} held-out contexts of {L} characters", flush=True)
    with torch.no_grad():
        results["pair_exact"] = {str(T): pair_exact(pair, contexts, T) for T in (1.0, 0.5)}

    stride = (test.size - L) // args.prompts
    prompts = [test[i * stride : i * stride + L].tolist() for i in range(args.prompts)]
    print(f"3. The shipped pair decoding {args.prompts} prompts x {args.new_tokens} characters", flush=True)
    results["pair_decoding"] = decoding(pair, prompts, args.new_tokens, args.repeats, args.quick)
    results["seconds"] = time.perf_counter() - t_start
    args.out.write_text(json.dumps(results, indent=1) + "\n")

    fmt = lambda x: f"{x:.2f}"  # noqa: E731
    print("\nLLM-like rows, exact expected tokens per target pass:\n")
    print(table(results["synthetic"], METHODS, lambda r, m, i: fmt(r["tokens_per_pass"][m][i])))
    for T, section in results["pair_exact"].items():
        print(f"\nThe shipped pair, exact expected tokens per target pass of the first round, temperature {T}:\n")
        print(table(section, METHODS[1:], lambda r, m, i: fmt(r["tokens_per_pass"][m][i])))
    print("\nThe shipped pair decoding: tokens per target pass (ms per round):\n")
    print(table(results["pair_decoding"], METHODS, lambda r, m, i: f"{r['rows'][m][i]['tokens_per_pass']:.2f} ({r['rows'][m][i]['ms_per_round']:.1f})"))
    print("\nThe shipped pair decoding: tokens per second:\n")
    print(table(results["pair_decoding"], METHODS, lambda r, m, i: f"{r['rows'][m][i]['tokens_per_s']:.0f}"))
    print(f"\ntarget alone: {results['pair_decoding']['target_alone_tokens_per_s']:.0f} tokens/s; {results['seconds']:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
