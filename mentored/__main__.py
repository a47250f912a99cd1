"""Command line: ``python -m mentored demo``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import BUILTIN_NAMES, MentoredPath
from .testing import llm_like


def demo(args) -> int:
    """Acceptance against budget, for every built-in divergence, on LLM-like rows."""
    rng = np.random.default_rng(args.seed)
    p, q = llm_like(rng, args.vocab)
    start = time.perf_counter()
    path = MentoredPath(p, q)
    budgets = np.array([0.0, 0.01, 0.05, 0.1, 0.5])
    rows = {name: path.frontier(budgets, name) for name in BUILTIN_NAMES}
    elapsed = time.perf_counter() - start
    print(f"Mentored decoding on one LLM-like row (vocabulary {args.vocab}, softmax of Gaussian logits;")
    print(f"the drafter's logits are the target's plus noise). TV(p, q) = {path.tv:.4f}.")
    print(f"Lossless speculative sampling accepts 1 - TV = {1 - path.tv:.4f} of drafted tokens.\n")
    print("optimal acceptance A*(eps) = max sum min(pi, q) subject to D_f(pi || p) <= eps")
    print(f"{'divergence':>12} " + " ".join(f"{'eps=' + format(b, 'g'):>10}" for b in budgets))
    for name, acc in rows.items():
        print(f"{name:>12} " + " ".join(f"{a:10.4f}" for a in acc))
    print(f"\n({len(BUILTIN_NAMES) * len(budgets)} optimal distributions in {1e3 * elapsed:.1f} ms, sorting included.)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mentored", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="acceptance against budget on a built-in example")
    d.add_argument("--vocab", type=int, default=32000)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(run=demo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
