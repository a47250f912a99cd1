"""Accuracy of the C++ core against the numpy reference and the cvxpy oracle.

    python benchmarks/accuracy.py [--rows 3]

For every divergence and every kind of row in mentored.check.testing (and LLM-like rows, n = 4096),
at budgets from 0 to past D_f(q‖p): the worst |acceptance − reference|, the worst acceptance
deficit against the oracle's feasible point (positive = core below oracle), how often the oracle
gave a usable point, and the worst budget overshoot of the core measured from the definition.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import mentored
from mentored.check import reference
from mentored.check.oracle import oracle_solve
from mentored.check.testing import KINDS, budgets_for, instance, llm_like


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3, help="rows per kind")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'divergence':>12} {'instances':>9} {'|ref|':>9} {'oracle−core':>12} {'|oracle|':>9} {'usable':>8} {'overshoot':>10}")
    for div in mentored.BUILTIN_NAMES:
        d = mentored.divergence(div)
        count, ref_err, deficit, agree, usable, tried, over = 0, 0.0, -np.inf, [], 0, 0, 0.0
        rows = [instance(k, rng) for k in KINDS for _ in range(args.rows)] + [llm_like(rng, 4096)]
        for p, q in rows:
            for budget in budgets_for(div, p, q):
                sol = mentored.solve(p, q, divergence=div, budget=budget)
                ref_pi, _ = reference.solve(p, q, div, budget)
                ref_err = max(ref_err, abs(sol.acceptance - np.minimum(ref_pi, q).sum()))
                over = max(over, float(d(sol.pi, p)) - budget)
                count += 1
                if budget == 0.0:
                    continue
                tried += 1
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    o = oracle_solve(p, q, div, budget)
                if o.usable(budget):
                    usable += 1
                    # What the oracle's slight infeasibility can buy is not a deficit of the core.
                    slack = o.slack(sol.lam, div)
                    deficit = max(deficit, o.acceptance - sol.acceptance - slack)
                    agree.append(abs(o.acceptance - sol.acceptance))
        print(f"{div:>12} {count:9d} {ref_err:9.1e} {deficit:12.1e} {np.median(agree):9.1e} {usable:4d}/{tried:<3d} {over:10.1e}")
    print("|ref|: worst |A_core − A_reference|; oracle−core: worst A_oracle − A_core − slack over usable")
    print("oracle points, slack = λ·(budget excess + |f'(1)|·mass excess) + mass excess (≤ 0: the oracle never")
    print("beat the core beyond what its own infeasibility buys); |oracle|: median |A_oracle − A_core|;")
    print("overshoot: worst D_f(π_core‖p) − budget from the definition (≤ 0: always within budget).")


if __name__ == "__main__":
    main()
