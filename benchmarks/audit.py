"""Frontier audit: where peer lossy rules sit against the mentored optimum (issue 8).

    python benchmarks/audit.py [--rows 8] [--n 4096] [--seed 0] [--out benchmarks/audit.png]

Sweeps each rule's knob (mentored.rules.RULES) on synthetic rows: LLM-like rows (softmax of Gaussian
logits, n tokens, mentored.testing.llm_like) and rows of a few instance kinds (n = 200). For each
(rule, knob) it prints, averaged over the LLM-like rows, the rule's acceptance A, its divergence
D_f(π_rule‖p), the acceptance deficit A*(D_rule) − A at equal divergence and the divergence overspent
D_rule − D*(A) at equal acceptance, for kl and tv; then a per-rule summary over all rows and kinds for
four divergences. It writes the frontiers A*(ε) of one LLM-like row with every rule's points to --out.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import mentored
from mentored.rules import audit
from mentored.testing import instance, llm_like

GRID = {
    "standard": [{}],
    "lenience": [{"lam": v} for v in (0.9, 0.7, 0.5, 0.3, 0.1)],
    "cactus": [{"delta": v} for v in (0.01, 0.1, 0.5, 2.0, 10.0)],
    "typical": [{"posterior_threshold": t, "posterior_alpha": a} for t, a in ((0.3, 0.9), (0.09, 0.3), (0.03, 0.1), (0.01, 0.03))],
    "cascade_opt": [{"alpha": v} for v in (0.0, 0.5, 1.0, 2.0, 5.0)],
    "cascade_tok": [{"alpha": v} for v in (0.1, 0.3, 0.5, 0.8, 0.95)],
    "fuzzy": [{"threshold": v} for v in (0.01, 0.05, 0.1, 0.2, 0.4)],
    "topk": [{"k": v} for v in (1, 3, 10, 50)],
    "interp": [{"alpha": v} for v in (0.1, 0.3, 0.5, 0.7, 0.9)],
}
KINDS = ("dense", "peaked", "top_k_target", "truncated_draft")
SUMMARY_DIVS = ("kl", "tv", "hellinger", "js")
MARKERS = dict(zip(GRID, "o^svDP*Xh"))


_SHORT = {"posterior_threshold": "thr", "posterior_alpha": "a", "threshold": "thr"}


def _knob(kw) -> str:
    return ",".join(f"{_SHORT.get(k, k)}={v:g}" for k, v in kw.items()) or "—"


def _f(x, width=8, digits=4) -> str:
    return f"{round(float(x), digits) + 0.0:{width}.{digits}f}"  # + 0.0: no "-0.0000" from rounding


def _mean(values) -> str:
    """Mean over finite entries, with the count of infinite ones."""
    v = np.asarray(values, dtype=float)
    fin = v[np.isfinite(v)]
    s = _f(fin.mean(), 0) if fin.size else "—"
    return s + (f" ({np.isinf(v).sum()}∞)" if np.isinf(v).any() else "")


def per_knob_table(rows):
    head = f"{'rule':>11} {'knob':>15} {'A_rule':>7} | {'D_kl':>12} {'deficit':>8} {'overspent':>12} | {'D_tv':>7} {'deficit':>8} {'overspent':>9}"
    print(head)
    print("-" * len(head))
    for rule, grid in GRID.items():
        for kw in grid:
            cols = {}
            for div in ("kl", "tv"):
                a = [audit(p, q, rule, kw, div) for p, q in rows]
                cols[div] = a
            acc = np.mean([a.acceptance for a in cols["kl"]])
            kl, tv = cols["kl"], cols["tv"]
            print(
                f"{rule:>11} {_knob(kw):>15} {_f(acc, 7)} | {_mean([a.rule_divergence for a in kl]):>12} "
                f"{_f(np.mean([a.acceptance_deficit for a in kl]))} {_mean([a.divergence_overspent for a in kl]):>12} | "
                f"{_f(np.mean([a.rule_divergence for a in tv]), 7)} {_f(np.mean([a.acceptance_deficit for a in tv]))} "
                f"{_f(np.mean([a.divergence_overspent for a in tv]), 9)}"
            )


def summary_table(rows):
    head = f"{'rule':>11} | " + " | ".join(f"{d + ' mean':>14} {'min':>8}" for d in SUMMARY_DIVS)
    print(head)
    print("-" * len(head))
    worst = math.inf
    for rule, grid in GRID.items():
        cells = []
        for div in SUMMARY_DIVS:
            d = [audit(p, q, rule, kw, div).acceptance_deficit for p, q in rows for kw in grid]
            worst = min(worst, min(d))
            cells.append(f"{_f(np.mean(d), 14)} {min(d):8.1e}")
        print(f"{rule:>11} | " + " | ".join(cells))
    return worst


def plot(p, q, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = mentored.MentoredPath(p, q)
    fig, axes = plt.subplots(2, 2, figsize=(11, 9), constrained_layout=True)
    for ax, div in zip(axes.ravel(), SUMMARY_DIVS):
        points = {rule: [audit(p, q, rule, kw, div) for kw in grid] for rule, grid in GRID.items()}
        finite = [a.rule_divergence for pts in points.values() for a in pts if 0 < a.rule_divergence < math.inf]
        lo, hi = min(finite + [1e-2]) / 3, max(finite + [1e-2]) * 3
        budgets = np.logspace(np.log10(lo), np.log10(hi), 300)
        ax.semilogx(budgets, path.frontier(budgets, div), "k-", lw=2, label="mentored frontier A*(ε)")
        ax.axhline(1 - path.tv, color="0.6", ls=":", label="lossless 1 − TV(p, q)")
        for rule, pts in points.items():
            if rule == "standard":
                continue
            shown = [a for a in pts if 0 < a.rule_divergence < math.inf]  # D = 0 is the lossless line
            ax.plot([a.rule_divergence for a in shown], [a.acceptance for a in shown], marker=MARKERS[rule], ls="-", lw=0.8, ms=6, label=rule)
        n_inf = sum(math.isinf(a.rule_divergence) for pts in points.values() for a in pts)
        if n_inf:
            ax.text(0.98, 0.02, f"{n_inf} points at D = ∞ not shown", transform=ax.transAxes, ha="right", fontsize=8)
        ax.set_xlim(lo, hi)
        ax.set_xlabel(f"D_{div}(π‖p)")
        ax.set_ylabel("acceptance")
        ax.set_title(f"{div}: peers against the frontier (n = {p.size})")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=5, fontsize=8)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="LLM-like rows, and rows per instance kind")
    parser.add_argument("--n", type=int, default=4096, help="vocabulary of the LLM-like rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/audit.png")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    llm = [llm_like(rng, args.n) for _ in range(args.rows)]
    kinds = [instance(k, rng, n=200) for k in KINDS for _ in range(args.rows)]

    print(f"Per knob, mean over {args.rows} LLM-like rows (n = {args.n}, seed {args.seed}); mean lossless acceptance "
          f"{np.mean([np.minimum(p, q).sum() for p, q in llm]):.4f}")
    print("deficit = A*(D_rule) − A_rule; overspent = D_rule − D*(A_rule); (k∞) = rows where D_rule = ∞ (mean over the rest)")
    per_knob_table(llm)
    print()
    print(f"Acceptance deficit at equal divergence, per rule over all knobs: {args.rows} LLM-like rows + "
          f"{args.rows} rows (n = 200) of each of {', '.join(KINDS)}")
    print("(a row where D_rule = ∞ is charged against A*(∞) = 1: an infinite budget admits π = q)")
    worst = summary_table(llm + kinds)
    print(f"smallest deficit over everything: {worst:.1e} (≥ −1e-9: no rule above the frontier)")
    plot(*llm[0], args.out)


if __name__ == "__main__":
    main()
