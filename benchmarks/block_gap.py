"""How much block verification loses by running on the mentored chain instead of its own optimum (docs/block.md).

    python benchmarks/block_gap.py [--quick] [--out benchmarks/block_gap_results.json]

On small trees (V ∈ {2, 3, 4, 6} tokens, k ∈ {1, 2, 3} drafts; LLM-like trees with seeds 0–2, uniform
trees with seeds 0–1, chains with one uniform (p, q) at every position with seeds 0 and 2, and the
binary example p = (1/3, 2/3), q = (2/3, 1/3) at V = 2), at budgets 0, 0.01, 0.05, 0.1, 0.3, 1 under
every built-in divergence, the exact expected number of accepted drafts (mentored/check/block.py) of:

- ``token``: token-by-token verification of the composed chain (the mentored verifier at each prefix);
- ``composed``: block verification of the composed chain;
- ``greedy``: block verification of the weighted local rule at every level (``weighted_greedy_chain``);
- ``greedy_last``: the same rule at the last level only, the composed chain above it;
- ``optimum``: block verification of the best chain within budget at every prefix (``block_optimum``,
  a convex program solved by cvxpy, its chain checked with the package's own D_f).

Two checks stop the run if they fail: at k = 1 and at budget 0 the gap optimum − composed is 0
(to 1e-6). Then, where the optimum's chain is found off the (p, q) curve of docs/theory.md §3, and a
shared-root experiment: pairs of trees that share root conditionals but differ below, whose separate
optima cannot be reached with one root verifier. Writes the JSON (the cases as a table: ``columns``,
then one list per case) and prints the tables docs/block.md quotes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mentored  # noqa: E402
from mentored.check.block import (  # noqa: E402
    block_length,
    block_optimum,
    composed_chain,
    iid_tree,
    path_probabilities,
    random_tree,
    shared_root_optimum,
    token_length,
    weighted_greedy_chain,
)

BUDGETS = (0.0, 0.01, 0.05, 0.1, 0.3, 1.0)
TOL = 1e-6


def instances(quick):
    Vs, ks = ((2, 3, 4), (1, 2, 3)) if quick else ((2, 3, 4, 6), (1, 2, 3))
    for V in Vs:
        for k in ks:
            for seed in (0, 1, 2)[: 1 if quick else 3]:
                yield f"llm/{seed}", V, k, random_tree(V, k, seed, "llm")
            for seed in (0, 1)[: 1 if quick else 2]:
                yield f"uniform/{seed}", V, k, random_tree(V, k, seed, "uniform")
            for seed in (0, 2)[: 1 if quick else 2]:
                yield f"iid/{seed}", V, k, random_tree(V, k, seed, "iid")
            if V == 2:
                yield "binary", V, k, iid_tree([1 / 3, 2 / 3], [2 / 3, 1 / 3], k)


def off_curve(P, Q, chain, name):
    """Largest TV distance, over prefixes the optimum reaches with accepted mass A_j ≥ 1e-3, between the
    chain's verifier and the (p, q) curve point at the same distance s = TV(π, p) from the target
    (the curve of docs/theory.md §3, read from the solver with tv at budget s). 0 for a chain on the curve."""
    V = P[0].shape[-1]
    qpath = path_probabilities(Q)
    A, worst = np.ones(()), 0.0
    for j in range(len(P)):
        p, q, pi = (x.reshape(-1, V) for x in (P[j], Q[j], chain[j]))
        s = 0.5 * np.abs(pi - p).sum(axis=1)
        curve = np.asarray(mentored.solve(p, q, divergence="tv", budget=s).pi)
        reach = A.reshape(-1) >= 1e-3
        if reach.any():
            worst = max(worst, float((0.5 * np.abs(pi - curve).sum(axis=1))[reach].max()))
        A = np.minimum(qpath[j + 1], A[..., None] * chain[j])
    return worst


def run(quick):
    rows = []
    t0 = time.perf_counter()
    for label, V, k, (P, Q) in instances(quick):
        for name in mentored.BUILTIN_NAMES:
            for eps in BUDGETS:
                chain = composed_chain(P, Q, name, eps, mentored.solve)
                tok, comp = token_length(Q, chain), block_length(Q, chain)
                opt = block_optimum(P, Q, name, eps, baseline=chain)
                local = k > 1 and eps > 0
                greedy = block_length(Q, weighted_greedy_chain(P, Q, name, eps, chain)) if local else comp
                last = block_length(Q, weighted_greedy_chain(P, Q, name, eps, chain, levels="last")) if local else comp
                gap = opt.value - comp
                row = dict(
                    tree=label, V=V, k=k, divergence=name, budget=eps, token=tok, composed=comp, greedy=greedy, greedy_last=last,
                    optimum=opt.value, objective=opt.objective, status=opt.status, gap=gap, rel_gap=gap / comp,
                    optimum_off_curve=off_curve(P, Q, opt.chain, name) if gap > TOL else None,
                )
                if (k == 1 or eps == 0.0) and abs(gap) > TOL:
                    raise SystemExit(f"check failed: gap {gap:.3g} at k = {k}, budget {eps} ({label}, V = {V}, {name})")
                # the program's reported value against the exact length of its chain: equal up to the
                # solver's accuracy (ε = 0 is degenerate for the cones and comes back "optimal_inaccurate")
                if gap < -1e-4 or abs(opt.value - opt.objective) > (1e-6 if opt.status == "optimal" else 1e-3):
                    raise SystemExit(f"check failed: optimum {opt.value!r} (program {opt.objective!r}) against composed {comp!r} ({row})")
                rows.append(row)
    return rows, time.perf_counter() - t0


def summary(rows):
    """Max and median relative gap by divergence and k, over budgets > 0; and the share of the gap the
    greedy rule closes (median and min over cases with a gap above 1e-4)."""
    table = {}
    for name in mentored.BUILTIN_NAMES:
        for k in (1, 2, 3):
            sel = [r for r in rows if r["divergence"] == name and r["k"] == k and r["budget"] > 0]
            if not sel:
                continue
            rel = np.array([r["rel_gap"] for r in sel])
            gapped = [r for r in sel if r["gap"] > 1e-4]
            closed = [(r["greedy"] - r["composed"]) / r["gap"] for r in gapped]
            closed_last = [(r["greedy_last"] - r["composed"]) / r["gap"] for r in gapped]
            table[f"{name}/k={k}"] = dict(
                cases=len(sel), max_rel_gap=float(rel.max()), median_rel_gap=float(np.median(rel)),
                max_abs_gap=float(max(r["gap"] for r in sel)), cases_with_gap=len(gapped),
                greedy_share_median=float(np.median(closed)) if closed else None,
                greedy_share_min=float(min(closed)) if closed else None,
                greedy_beats_composed=sum(r["greedy"] >= r["composed"] - 1e-7 for r in sel),
                last_share_median=float(np.median(closed_last)) if closed else None,
                last_share_min=float(min(closed_last)) if closed else None,
            )
    by_kind = {}
    for kind in ("llm", "uniform", "iid", "binary"):
        for k in (2, 3):
            sel = [r["rel_gap"] for r in rows if r["tree"].split("/")[0] == kind and r["k"] == k and r["budget"] > 0]
            if sel:
                by_kind[f"{kind}/k={k}"] = dict(max_rel_gap=float(max(sel)), median_rel_gap=float(np.median(sel)))
    for V in (2, 3, 4, 6):
        sel = [r["rel_gap"] for r in rows if r["V"] == V and r["k"] > 1 and r["budget"] > 0]
        if sel:
            by_kind[f"V={V}"] = dict(max_rel_gap=float(max(sel)), median_rel_gap=float(np.median(sel)))
    by_budget = {}
    for eps in BUDGETS:
        sel = [r["rel_gap"] for r in rows if r["budget"] == eps and r["k"] > 1]
        by_budget[str(eps)] = dict(max_rel_gap=float(max(sel)), median_rel_gap=float(np.median(sel)))
    off = [r["optimum_off_curve"] for r in rows if r["optimum_off_curve"] is not None]
    return dict(
        below_composed=dict(cases=sum(r["gap"] < -TOL for r in rows), worst=float(min(r["gap"] for r in rows))),
        max_program_minus_chain=float(max(abs(r["objective"] - r["optimum"]) for r in rows)),
        statuses={st: sum(r["status"] == st for r in rows) for st in sorted({r["status"] for r in rows})},
        by_divergence_and_k=table, by_tree_kind=by_kind, by_budget_k_ge_2=by_budget,
        optimum_off_curve=dict(cases=len(off), above_1e_3=int(sum(o > 1e-3 for o in off)),
                               median=float(np.median(off)) if off else None, max=float(max(off)) if off else None),
        binary=[dict(k=r["k"], divergence=r["divergence"], budget=r["budget"], gap=r["gap"]) for r in rows
                if r["tree"] == "binary" and r["gap"] > TOL],
    )


def shared_root(quick):
    """Pairs of uniform trees (k = 2) with the same root conditionals and independent conditionals below:
    the loss of forcing one root verifier on both, against their separate optima, at budget 0.1."""
    out = []
    for V in (3, 4):
        for trial in range(2 if quick else 4):
            rng = np.random.default_rng(trial)
            p0, q0 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
            pairs = []
            for m in range(2):
                P, Q = random_tree(V, 2, 100 * trial + m, "uniform")
                P[0], Q[0] = p0, q0
                pairs.append((P, Q))
            for name in mentored.BUILTIN_NAMES:
                separate = sum(block_optimum(P, Q, name, 0.1).value for P, Q in pairs)
                shared, _, _ = shared_root_optimum(pairs, name, 0.1)
                out.append(dict(V=V, trial=trial, divergence=name, separate=separate, shared=shared, loss=separate - shared,
                                rel_loss=(separate - shared) / separate))
    return out


def _rounded(x, digits=10):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: _rounded(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v, digits) for v in x]
    return x


def dumps(results):
    """The results as JSON: the cases as a table (``columns``, then one list per case and line, floats
    to 8 significant digits), the rest indented."""
    head = {k: v for k, v in results.items() if k not in ("rows", "columns")}
    rows = results["rows"]
    columns = results.get("columns") or list(rows[0])
    if rows and isinstance(rows[0], dict):
        rows = [[r[c] for c in columns] for r in rows]
    text = json.dumps(_rounded(head), indent=1)
    body = ",\n  ".join(json.dumps(_rounded(r, 8), separators=(",", ":")) for r in rows)
    return text[:-2] + ',\n "columns": ' + json.dumps(columns) + ',\n "rows": [\n  ' + body + "\n ]\n}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer instances (V ≤ 4, one seed of each kind)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "block_gap_results.json")
    args = ap.parse_args()
    rows, seconds = run(args.quick)
    t0 = time.perf_counter()
    shared = shared_root(args.quick)
    shared_seconds = time.perf_counter() - t0
    results = dict(
        command="python benchmarks/block_gap.py" + (" --quick" if args.quick else ""),
        budgets=list(BUDGETS), divergences=list(mentored.BUILTIN_NAMES),
        seconds=dict(gap=seconds, shared_root=shared_seconds), cases=len(rows),
        summary=summary(rows), shared_root=shared, rows=rows,
    )
    args.out.write_text(dumps(results))
    s = results["summary"]
    print(f"{len(rows)} cases in {seconds:.0f} s (shared root: {shared_seconds:.0f} s)")
    print("| divergence | k | max rel. gap | median rel. gap | max abs. gap | cases with gap | share closed, all levels (median, min) | share closed, last level (median, min) |")
    print("|---|---|---|---|---|---|---|---|")
    for key, t in s["by_divergence_and_k"].items():
        name, k = key.split("/k=")
        share = "—" if t["greedy_share_median"] is None else f"{t['greedy_share_median']:.2f}, {t['greedy_share_min']:.2f}"
        last = "—" if t["last_share_median"] is None else f"{t['last_share_median']:.2f}, {t['last_share_min']:.2f}"
        print(f"| {name} | {k} | {t['max_rel_gap']:.2%} | {t['median_rel_gap']:.2%} | {t['max_abs_gap']:.4f} | "
              f"{t['cases_with_gap']}/{t['cases']} | {share} | {last} |")
    for key, t in s["by_tree_kind"].items():
        print(f"{key}: max {t['max_rel_gap']:.2%}, median {t['median_rel_gap']:.2%}")
    for key, t in s["by_budget_k_ge_2"].items():
        print(f"budget {key}: max {t['max_rel_gap']:.2%}, median {t['median_rel_gap']:.2%}")
    print("off curve:", s["optimum_off_curve"])
    print("statuses:", s["statuses"], "below composed:", s["below_composed"], "program − chain:", s["max_program_minus_chain"])
    print("binary gaps:", s["binary"])
    losses = np.array([r["rel_loss"] for r in shared])
    print(f"shared root: {int((losses > 1e-4).sum())}/{len(losses)} pairs lose > 1e-4 relative, max {losses.max():.2%}")


if __name__ == "__main__":
    main()
