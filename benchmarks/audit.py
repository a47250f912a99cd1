"""Frontier audit: where peer lossy rules sit against the mentored optimum.

    python benchmarks/audit.py [--rows 8] [--n 4096] [--seed 0] [--out benchmarks/audit.png]
                               [--positions 16] [--demo-out benchmarks/audit_demo.png] [--demo-only | --synthetic-only]

Sweeps each rule's knob (mentored.analysis.rules.RULES) on synthetic rows: LLM-like rows (softmax of Gaussian
logits, n tokens, mentored.check.testing.llm_like) and rows of a few instance kinds (n = 200). For each
(rule, knob) it prints, averaged over the LLM-like rows, the rule's acceptance A, its divergence
D_f(π_rule‖p), the acceptance deficit A*(D_rule) − A at equal divergence and the divergence overspent
D_rule − D*(A) at equal acceptance, for kl and tv; then a per-rule summary over all rows and kinds for
four divergences. It writes the frontiers A*(ε) of one LLM-like row with every rule's points to --out.

Then the same on the demo models' distributions (mentored.demo.textlm.demo_models(0)): the (target, drafter)
next-token laws at --positions random positions of the held-out test split. Besides the per-position
tables it compares, across positions, each rule's mean acceptance and mean divergence with the mentored
optimum at the same mean budget per position, both with that budget at every position ("uniform") and
with the best split of the same total budget ("pooled"). It writes the frontiers of two representative
positions (the quartiles of 1 − TV) for kl and tv with every rule's points to --demo-out.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import mentored
from mentored.analysis.rules import audit
from mentored.check.testing import instance, llm_like

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
                a = [audit(rule, p, q, divergence=div, **kw) for p, q in rows]
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
            d = [audit(rule, p, q, divergence=div, **kw).acceptance_deficit for p, q in rows for kw in grid]
            worst = min(worst, min(d))
            cells.append(f"{_f(np.mean(d), 14)} {min(d):8.1e}")
        print(f"{rule:>11} | " + " | ".join(cells))
    return worst


def _panel(ax, p, q, div, title):
    """The frontier A*(ε) of one row under ``div`` with every rule's points swept over its knob."""
    path = mentored.MentoredPath(p, q)
    points = {rule: [audit(rule, p, q, divergence=div, **kw) for kw in grid] for rule, grid in GRID.items()}
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
    ax.set_title(title, fontsize=10)


def _figure(panels, out):
    """panels: (p, q, div, title) for a 2 × 2 grid; written to ``out``."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("this benchmark draws figures, which needs matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 9), constrained_layout=True)
    for ax, (p, q, div, title) in zip(axes.ravel(), panels):
        _panel(ax, p, q, div, title)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=5, fontsize=8)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"wrote {out}")


def plot(p, q, out):
    _figure([(p, q, div, f"{div}: peers against the frontier (n = {p.size})") for div in SUMMARY_DIVS], out)


# ---------------------------------------------------------------------------------------------
# The demo models' distributions (mentored.demo.textlm)


def demo_rows(positions: int, seed: int = 0):
    """(target, drafter) next-token laws at ``positions`` random positions of the demo's test split.

    Returns ``rows`` [(p, q)] and ``info`` [(position, preceding text, next character)], sorted by position;
    the context of position ``i`` is ``test[:i]`` (the 6-gram target reads its last 5 tokens).
    """
    from mentored.demo.textlm import demo_models

    m = demo_models(0)
    order = m.target.order
    idx = np.sort(np.random.default_rng(seed).choice(np.arange(order, m.test.size), positions, replace=False))
    rows, info = [], []
    for i in idx.tolist():
        ctx = m.test[i - order + 1 : i]
        rows.append((m.target.probs(ctx), m.drafter.probs(ctx)))
        info.append((i, m.tokenizer.decode(m.test[max(0, i - 16) : i]), m.tokenizer.decode(m.test[i : i + 1])))
    return rows, info


def _frontier_grid(p, q, div, points=2000):
    """Budgets 0 ∪ geomspace(1e-10·D_max, D_max) and A*(budget): points on the frontier of one row."""
    path = mentored.MentoredPath(p, q)
    d_max = path.divergence_at(path.s_max(div), div)
    e = np.r_[0.0, np.geomspace(d_max * 1e-10, d_max, points)] if d_max > 0 else np.zeros(1)
    return e, path.frontier(e, div)


def pooled_optimum(grids, mean_budget):
    r"""max Σᵢ A*ᵢ(εᵢ)/N over allocations with Σᵢ εᵢ/N = mean_budget, each A*ᵢ concave.

    Lagrangian: each row takes the grid point maximising A − λε and λ is bisected until the mean budget
    brackets ``mean_budget``; the two bracketing allocations are mixed (the concave hull). The grids are
    points on the frontiers, so this is at most the exact pooled optimum (by the grid's resolution).
    """
    def at(lam):
        picks = [int(np.argmax(a - lam * e)) for e, a in grids]
        return (np.mean([e[j] for (e, _), j in zip(grids, picks)]), np.mean([a[j] for (_, a), j in zip(grids, picks)]))

    b0, a0 = at(0.0)  # every row at its largest useful budget
    if mean_budget >= b0:
        return a0
    lo, hi = -30.0, 30.0  # log10 λ: at 10^lo the mean budget is b0 (≥ mean_budget), at 10^hi it is 0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if at(10.0**mid)[0] >= mean_budget:
            lo = mid
        else:
            hi = mid
    (b_lo, a_lo), (b_hi, a_hi) = at(10.0**lo), at(10.0**hi)
    if b_lo - b_hi <= 0:
        return a_lo
    return a_hi + (a_lo - a_hi) * (mean_budget - b_hi) / (b_lo - b_hi)


def aggregate_table(rows):
    """Across positions: a rule's mean (A, D) against the optimum at the same mean budget per position."""
    grids = {div: [_frontier_grid(p, q, div) for p, q in rows] for div in ("kl", "tv")}
    head = (f"{'rule':>11} {'knob':>15} {'mean A':>7} | {'mean D_kl':>9} {'Δ uniform':>9} {'Δ pooled':>9} | "
            f"{'mean D_tv':>9} {'Δ uniform':>9} {'Δ pooled':>9}")
    print(head)
    print("-" * len(head))
    worst = math.inf
    for rule, grid in GRID.items():
        for kw in grid:
            cells = []
            for div in ("kl", "tv"):
                a = [audit(rule, p, q, divergence=div, **kw) for p, q in rows]
                acc = np.mean([x.acceptance for x in a])
                d = np.array([x.rule_divergence for x in a])
                if not np.isfinite(d).all():
                    cells.append(f"{'∞':>9} {'—':>9} {'—':>9}")
                    continue
                eps = float(d.mean())
                uniform = float(np.mean(mentored.solve(np.stack([p for p, _ in rows]), np.stack([q for _, q in rows]),
                                                       divergence=div, budget=eps, threads=1).acceptance))
                pooled = pooled_optimum(grids[div], eps)
                worst = min(worst, pooled - acc)
                cells.append(f"{_f(eps, 9)} {_f(uniform - acc, 9)} {_f(pooled - acc, 9)}")
            print(f"{rule:>11} {_knob(kw):>15} {_f(acc, 7)} | " + " | ".join(cells))
    return worst


def demo(args):
    rows, info = demo_rows(args.positions, args.seed)
    lossless = np.array([np.minimum(p, q).sum() for p, q in rows])
    print(f"Demo models (mentored.demo.textlm.demo_models(0): 6-gram target p, bigram drafter q, V = {rows[0][0].size}): "
          f"{len(rows)} positions of the test split (seed {args.seed})")
    print(f"{'position':>9} {'preceding text':>20} {'next':>6} {'1 − TV':>7}")
    for (i, before, nxt), a in zip(info, lossless):
        print(f"{i:>9} {before!r:>20} {nxt!r:>6} {_f(a, 7)}")
    print(f"mean lossless acceptance {lossless.mean():.4f}")
    print()
    print(f"Per knob, mean over the {len(rows)} positions; deficit = A*(D_rule) − A_rule and overspent = D_rule − D*(A_rule) per position")
    per_knob_table(rows)
    print()
    print(f"Acceptance deficit at equal divergence, per rule over all knobs and the {len(rows)} positions")
    worst = summary_table(rows)
    print(f"smallest deficit: {worst:.1e} (≥ −1e-9: no rule above the frontier)")
    print()
    print(f"Across positions: mean A_rule and mean D_rule = (1/N) Σᵢ D_f(π_rule,i‖p_i) over the N = {len(rows)} positions,")
    print("against the mentored optimum at the same mean budget ε̄ = mean D_rule per position:")
    print("  Δ uniform = (1/N) Σᵢ A*ᵢ(ε̄) − mean A_rule   (mentored with the fixed budget ε̄ at every position)")
    print("  Δ pooled  = max over εᵢ with (1/N) Σᵢ εᵢ = ε̄ of (1/N) Σᵢ A*ᵢ(εᵢ) − mean A_rule   (best split of the same total budget)")
    print("  Δ pooled ≥ 0 always; Δ uniform < 0 means the rule's uneven spending beats a flat budget")
    worst_pooled = aggregate_table(rows)
    print(f"smallest Δ pooled: {worst_pooled:.1e}")
    order = np.argsort(lossless)
    reps = [int(order[len(order) // 4]), int(order[(3 * len(order)) // 4])]
    panels = []
    for r in reps:
        i, before, nxt = info[r]
        for div in ("kl", "tv"):
            panels.append((*rows[r], div, f"{div}: position {i}, after {before[-12:]!r} (1 − TV = {lossless[r]:.3f})"))
    _figure(panels, args.demo_out)


def synthetic(args):
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="LLM-like rows, and rows per instance kind")
    parser.add_argument("--n", type=int, default=4096, help="vocabulary of the LLM-like rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/audit.png")
    parser.add_argument("--positions", type=int, default=16, help="positions of the demo models' test split")
    parser.add_argument("--demo-out", default="benchmarks/audit_demo.png")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--demo-only", action="store_true", help="only the demo models' distributions")
    only.add_argument("--synthetic-only", action="store_true", help="only the synthetic rows")
    args = parser.parse_args()
    if not args.demo_only:
        synthetic(args)
    if not args.synthetic_only:
        if not args.demo_only:
            print()
        demo(args)


if __name__ == "__main__":
    main()
